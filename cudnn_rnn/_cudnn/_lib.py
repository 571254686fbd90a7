"""The C boundary: find and load cuDNN 9, declare every prototype, name every status.

This is the only module that imports :mod:`ctypes`. Everything above it passes and receives
plain Python ints (handles, descriptors and device pointers are addresses), NumPy int
arrays (host length arrays) and the small records defined here.

Loading (lazy, once per process, under a lock; see :func:`library_candidates`):

1. ``$CUDNN_RNN_LIBRARY`` (a file, or a folder holding ``libcudnn.so.9``): when set, it is
   the only place tried.
2. The ``nvidia-cudnn-cu12`` / ``nvidia-cudnn-cu13`` wheel: ``<nvidia.cudnn>/lib/libcudnn.so.9``
   (``nvidia.cudnn`` is a namespace package, located through :mod:`importlib`).
3. ``<entry>/nvidia/cudnn/lib/libcudnn.so.9`` for each ``sys.path`` entry.
4. The soname ``libcudnn.so.9`` on the system library path.

A candidate is accepted when it opens, reports major version 9 (:func:`version_string`), exports
every symbol of :data:`PROTOTYPES`, and its sub-libraries agree on the version (:func:`load_library`).
Every failing status goes through :func:`check`.
"""

from __future__ import annotations

import ctypes
import enum
import importlib.util
import inspect
import os
import re
import sys
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_int32, c_size_t, c_uint32, c_ulonglong, c_void_p
from dataclasses import astuple, dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import numpy as np

from .._dtypes import BUILTIN_PARAMS, names as dtype_names, widen_bfloat16
from ..errors import CudnnError, CudnnNotAvailableError

__all__ = [
    "LIBRARY_ENV", "SONAME", "REQUIRED_MAJOR", "INSTALL_HINT",
    "Status", "DataType", "MathType", "RNNAlgo", "ForwardMode", "RNNMode", "RNNBiasMode", "DirectionMode",
    "RNNInputMode", "RNNDataLayout", "WgradMode", "RNNClipMode", "AuxFlag", "ENUM_TYPEDEFS", "NEWER_ENUM_MEMBERS",
    "status_name", "check", "Prototype", "DECLARATIONS", "PROTOTYPES", "Candidate", "Library",
    "library_candidates", "load_library", "library", "version_string",
    "RNNDescriptorFields", "RNNDataFields",
]

LIBRARY_ENV = "CUDNN_RNN_LIBRARY"
SONAME = "libcudnn.so.9"
REQUIRED_MAJOR = 9
INSTALL_HINT = ("install cuDNN 9 for your CUDA major version: pip install nvidia-cudnn-cu12 (CUDA 12) or "
                "nvidia-cudnn-cu13 (CUDA 13), or pip install 'cudnn_rnn[cuda12]' / 'cudnn_rnn[cuda13]' "
                f"for CuPy and cuDNN together; or point ${LIBRARY_ENV} at a libcudnn.so.9")


# ==== enum values (cuDNN 9 headers: cudnn_graph.h, cudnn_ops.h, cudnn_adv.h) ===================
#: enum class -> (C typedef, prefix of its C constant names), as :func:`_c_enum` registers them; the headers are
#: the authority.
ENUM_TYPEDEFS: dict[type[enum.IntEnum], tuple[str, str]] = {}
_E = TypeVar("_E", bound=enum.IntEnum)


def _c_enum(typedef: str, prefix: str) -> Callable[[type[_E]], type[_E]]:
    """Register a class as the C enum ``typedef``, whose constant for member ``X`` is ``<prefix>X``."""
    def register(cls: type[_E]) -> type[_E]:
        ENUM_TYPEDEFS[cls] = (typedef, prefix)
        return cls
    return register


@_c_enum("cudnnStatus_t", "CUDNN_STATUS_")
class Status(enum.IntEnum):
    SUCCESS = 0
    NOT_INITIALIZED = 1001
    SUBLIBRARY_VERSION_MISMATCH = 1002
    SERIALIZATION_VERSION_MISMATCH = 1003
    DEPRECATED = 1004
    LICENSE_ERROR = 1005
    RUNTIME_IN_PROGRESS = 1006
    RUNTIME_FP_OVERFLOW = 1007
    SUBLIBRARY_LOADING_FAILED = 1008
    BAD_PARAM = 2000
    INVALID_VALUE = 2001  # deprecated name, still a distinct number
    BAD_PARAM_NULL_POINTER = 2002
    BAD_PARAM_MISALIGNED_POINTER = 2003
    BAD_PARAM_NOT_FINALIZED = 2004
    BAD_PARAM_OUT_OF_BOUND = 2005
    BAD_PARAM_SIZE_INSUFFICIENT = 2006
    BAD_PARAM_STREAM_MISMATCH = 2007
    BAD_PARAM_SHAPE_MISMATCH = 2008
    BAD_PARAM_DUPLICATED_ENTRIES = 2009
    BAD_PARAM_ATTRIBUTE_TYPE = 2010
    BAD_PARAM_CUDA_GRAPH_MISMATCH = 2011
    BAD_PARAM_DESCRIPTOR_TYPE = 2012
    NOT_SUPPORTED = 3000
    NOT_SUPPORTED_GRAPH_PATTERN = 3001
    NOT_SUPPORTED_SHAPE = 3002
    NOT_SUPPORTED_DATA_TYPE = 3003
    NOT_SUPPORTED_LAYOUT = 3004
    NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER = 3005
    NOT_SUPPORTED_INCOMPATIBLE_CUDART = 3006
    NOT_SUPPORTED_ARCH_MISMATCH = 3007
    NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING = 3008
    NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE = 3009
    NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT = 3010
    NOT_SUPPORTED_PADDING = 3011
    NOT_SUPPORTED_BAD_LAUNCH_PARAM = 3012
    NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API = 3013
    NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE = 3014
    INTERNAL_ERROR = 4000
    INTERNAL_ERROR_COMPILATION_FAILED = 4001
    INTERNAL_ERROR_UNEXPECTED_VALUE = 4002
    INTERNAL_ERROR_HOST_ALLOCATION_FAILED = 4003
    INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED = 4004
    INTERNAL_ERROR_BAD_LAUNCH_PARAM = 4005
    INTERNAL_ERROR_TEXTURE_CREATION_FAILED = 4006
    EXECUTION_FAILED = 5000
    EXECUTION_FAILED_CUDA_DRIVER = 5001
    EXECUTION_FAILED_CUBLAS = 5002
    EXECUTION_FAILED_CUDART = 5003
    EXECUTION_FAILED_CURAND = 5004


@_c_enum("cudnnDataType_t", "CUDNN_DATA_")
class DataType(enum.IntEnum):
    FLOAT = 0
    DOUBLE = 1
    HALF = 2
    INT8 = 3
    INT32 = 4
    INT8x4 = 5
    UINT8 = 6
    UINT8x4 = 7
    INT8x32 = 8
    BFLOAT16 = 9
    INT64 = 10
    BOOLEAN = 11
    FP8_E4M3 = 12
    FP8_E5M2 = 13
    FAST_FLOAT_FOR_FP8 = 14
    FP8_E8M0 = 15
    FP4_E2M1 = 16
    INT4 = 17
    UINT4 = 18
    UINT32 = 19
    COMPLEX_FP32 = 20
    COMPLEX_FP64 = 21
    BYTE_BOOLEAN = 22
    FP8_E5M3 = 23


#: enum members that older cuDNN 9 headers lack -> the first version whose headers were seen to declare them
#: (9.19's have neither; the binding never passes them to cuDNN)
NEWER_ENUM_MEMBERS: dict[enum.IntEnum, int] = {DataType.BYTE_BOOLEAN: 92800, DataType.FP8_E5M3: 92800}


@_c_enum("cudnnMathType_t", "CUDNN_")
class MathType(enum.IntEnum):
    DEFAULT_MATH = 0
    TENSOR_OP_MATH = 1
    TENSOR_OP_MATH_ALLOW_CONVERSION = 2
    FMA_MATH = 3


@_c_enum("cudnnRNNAlgo_t", "CUDNN_RNN_ALGO_")
class RNNAlgo(enum.IntEnum):
    STANDARD = 0
    PERSIST_STATIC = 1
    PERSIST_DYNAMIC = 2
    PERSIST_STATIC_SMALL_H = 3


@_c_enum("cudnnForwardMode_t", "CUDNN_FWD_MODE_")
class ForwardMode(enum.IntEnum):
    INFERENCE = 0
    TRAINING = 1


@_c_enum("cudnnRNNMode_t", "CUDNN_")
class RNNMode(enum.IntEnum):
    RNN_RELU = 0
    RNN_TANH = 1
    LSTM = 2
    GRU = 3


@_c_enum("cudnnRNNBiasMode_t", "CUDNN_RNN_")
class RNNBiasMode(enum.IntEnum):
    NO_BIAS = 0
    SINGLE_INP_BIAS = 1
    DOUBLE_BIAS = 2
    SINGLE_REC_BIAS = 3


@_c_enum("cudnnDirectionMode_t", "CUDNN_")
class DirectionMode(enum.IntEnum):
    UNIDIRECTIONAL = 0
    BIDIRECTIONAL = 1


@_c_enum("cudnnRNNInputMode_t", "CUDNN_")
class RNNInputMode(enum.IntEnum):
    LINEAR_INPUT = 0
    SKIP_INPUT = 1


@_c_enum("cudnnRNNDataLayout_t", "CUDNN_RNN_DATA_LAYOUT_")
class RNNDataLayout(enum.IntEnum):
    SEQ_MAJOR_UNPACKED = 0
    SEQ_MAJOR_PACKED = 1
    BATCH_MAJOR_UNPACKED = 2


@_c_enum("cudnnWgradMode_t", "CUDNN_WGRAD_MODE_")
class WgradMode(enum.IntEnum):
    ADD = 0
    SET = 1


@_c_enum("cudnnRNNClipMode_t", "CUDNN_RNN_CLIP_")
class RNNClipMode(enum.IntEnum):
    NONE = 0
    MINMAX = 1


class AuxFlag(enum.IntFlag):
    """The ``auxFlags`` bits of cudnnSetRNNDescriptor_v8 (``#define CUDNN_RNN_<name>``)."""

    PADDED_IO_DISABLED = 0
    PADDED_IO_ENABLED = 1


#: element type of each cuDNN data type this package moves through paddingFill and getters (BFLOAT16's:
#: :func:`_value_bytes`)
NUMPY_DTYPES: dict[DataType, str] = {DataType(code): name for code, name in dtype_names("cudnn").items()
                                     if name in BUILTIN_PARAMS}

_STATUS_CATEGORIES = {1: "NOT_INITIALIZED", 2: "BAD_PARAM", 3: "NOT_SUPPORTED", 4: "INTERNAL_ERROR",
                      5: "EXECUTION_FAILED"}


def status_name(status: int) -> str:
    """``"CUDNN_STATUS_BAD_PARAM"`` for 2000; an unknown code names its category (``code // 1000``)."""
    try:
        return "CUDNN_STATUS_" + Status(status).name
    except ValueError:
        category = _STATUS_CATEGORIES.get(status // 1000, "UNKNOWN")
        return f"CUDNN_STATUS_UNKNOWN({status}, category CUDNN_STATUS_{category})"


def check(status: int, function: str) -> None:
    """Raise :class:`CudnnError` unless ``status`` is CUDNN_STATUS_SUCCESS.

    The error carries cuDNN's own ``cudnnGetLastErrorString`` text as ``detail`` (empty when
    the library cannot give one).
    """
    if status != Status.SUCCESS:
        raise CudnnError(status_name(status), int(status), function, last_error_string())


# ==== prototypes ==============================================================================
@dataclass(frozen=True)
class Prototype:
    """One C function: name, ctypes restype, argtypes and parameter names (read off its declaration in
    :data:`DECLARATIONS`)."""

    name: str
    restype: Any
    argtypes: tuple[Any, ...]
    parameters: tuple[str, ...] = ()


#: Every C function bound, declared as cudnn_graph.h, cudnn_ops.h and cudnn_adv.h declare it (in that order);
#: :data:`PROTOTYPES` is read off this text.
DECLARATIONS = """
size_t cudnnGetVersion(void);
size_t cudnnGetCudartVersion(void);
const char *cudnnGetErrorString(cudnnStatus_t status);
void cudnnGetLastErrorString(char *message, size_t max_size);
cudnnStatus_t cudnnGraphVersionCheck(void);
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId);
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId);

cudnnStatus_t cudnnOpsVersionCheck(void);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc);
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t tensorDesc, cudnnDataType_t dataType,
                                         int nbDims, const int dimA[], const int strideA[]);
cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t tensorDesc, int nbDimsRequested,
                                         cudnnDataType_t *dataType, int *nbDims, int dimA[], int strideA[]);
cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t *dropoutDesc);
cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc);
cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t *sizeInBytes);
cudnnStatus_t cudnnDropoutGetReserveSpaceSize(cudnnTensorDescriptor_t xdesc, size_t *sizeInBytes);
cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc, cudnnHandle_t handle,
                                        float dropout, void *states, size_t stateSizeInBytes,
                                        unsigned long long seed);
cudnnStatus_t cudnnGetDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc, cudnnHandle_t handle,
                                        float *dropout, void **states, unsigned long long *seed);

cudnnStatus_t cudnnAdvVersionCheck(void);
cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t *rnnDesc);
cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t rnnDesc);
cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t rnnDesc, cudnnRNNAlgo_t algo,
        cudnnRNNMode_t cellMode, cudnnRNNBiasMode_t biasMode, cudnnDirectionMode_t dirMode,
        cudnnRNNInputMode_t inputMode, cudnnDataType_t dataType, cudnnDataType_t mathPrec,
        cudnnMathType_t mathType, int32_t inputSize, int32_t hiddenSize, int32_t projSize,
        int32_t numLayers, cudnnDropoutDescriptor_t dropoutDesc, uint32_t auxFlags);
cudnnStatus_t cudnnGetRNNDescriptor_v8(cudnnRNNDescriptor_t rnnDesc, cudnnRNNAlgo_t *algo,
        cudnnRNNMode_t *cellMode, cudnnRNNBiasMode_t *biasMode, cudnnDirectionMode_t *dirMode,
        cudnnRNNInputMode_t *inputMode, cudnnDataType_t *dataType, cudnnDataType_t *mathPrec,
        cudnnMathType_t *mathType, int32_t *inputSize, int32_t *hiddenSize, int32_t *projSize,
        int32_t *numLayers, cudnnDropoutDescriptor_t *dropoutDesc, uint32_t *auxFlags);
cudnnStatus_t cudnnBuildRNNDynamic(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc, int miniBatch);
cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
                                         size_t *weightSpaceSize);
cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        int32_t pseudoLayer, size_t weightSpaceSize, const void *weightSpace, int32_t linLayerID,
        cudnnTensorDescriptor_t mDesc, void **mAddr, cudnnTensorDescriptor_t bDesc, void **bAddr);
cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        cudnnForwardMode_t fwdMode, cudnnRNNDataDescriptor_t xDesc, size_t *workSpaceSize,
        size_t *reserveSpaceSize);
cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t *rnnDataDesc);
cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc);
cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc, cudnnDataType_t dataType,
        cudnnRNNDataLayout_t layout, int maxSeqLength, int batchSize, int vectorSize,
        const int seqLengthArray[], void *paddingFill);
cudnnStatus_t cudnnGetRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc, cudnnDataType_t *dataType,
        cudnnRNNDataLayout_t *layout, int *maxSeqLength, int *batchSize, int *vectorSize,
        int arrayLengthRequested, int seqLengthArray[], void *paddingFill);
cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        cudnnForwardMode_t fwdMode, const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xDesc,
        const void *x, cudnnRNNDataDescriptor_t yDesc, void *y, cudnnTensorDescriptor_t hDesc,
        const void *hx, void *hy, cudnnTensorDescriptor_t cDesc, const void *cx, void *cy,
        size_t weightSpaceSize, const void *weightSpace, size_t workSpaceSize, void *workSpace,
        size_t reserveSpaceSize, void *reserveSpace);
cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t yDesc, const void *y, const void *dy,
        cudnnRNNDataDescriptor_t xDesc, void *dx, cudnnTensorDescriptor_t hDesc, const void *hx,
        const void *dhy, void *dhx, cudnnTensorDescriptor_t cDesc, const void *cx, const void *dcy,
        void *dcx, size_t weightSpaceSize, const void *weightSpace, size_t workSpaceSize,
        void *workSpace, size_t reserveSpaceSize, void *reserveSpace);
cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        cudnnWgradMode_t addGrad, const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xDesc,
        const void *x, cudnnTensorDescriptor_t hDesc, const void *hx, cudnnRNNDataDescriptor_t yDesc,
        const void *y, size_t weightSpaceSize, void *dweightSpace, size_t workSpaceSize,
        void *workSpace, size_t reserveSpaceSize, void *reserveSpace);
"""

#: C scalar types -> their ctypes (LP64 Linux)
_C_SCALARS: dict[str, Any] = {"int": c_int, "int32_t": c_int32, "uint32_t": c_uint32, "size_t": c_size_t,
                              "float": c_float, "unsigned long long": c_ulonglong}


def _ctype(declaration: str) -> Any:
    """The ctypes type of one C declaration (``const int32_t devSeqLengths[]``; a return type with a name added).

    Enums are ints; handles, descriptors, streams and device arrays (``dev...``) are addresses;
    ``T *x`` and ``T x[]`` are pointers to T; ``char *`` is a C string and ``void`` alone None.
    """
    words = declaration.replace("const ", " ").replace("*", " * ").replace("[]", " * ").split()
    depth = words.count("*")
    *base_words, name = [word for word in words if word != "*"]
    base = " ".join(base_words)
    kind: Any
    if name.startswith("dev"):  # device memory: an address
        return c_void_p
    if base in ("void", "char"):
        if depth == 0:
            return None
        kind, depth = (c_void_p if base == "void" else c_char_p), depth - 1
    elif base in _C_SCALARS:
        kind = _C_SCALARS[base]
    elif base in {typedef for typedef, _ in ENUM_TYPEDEFS.values()}:
        kind = c_int
    elif base.endswith(("Descriptor_t", "Handle_t")) or base == "cudaStream_t":
        kind = c_void_p
    else:  # pragma: no cover - a declaration this table does not know how to bind
        raise ValueError(f"no ctypes type for the C type {base!r}")
    for _ in range(depth):
        kind = POINTER(kind)
    return kind


def _prototype(returns: str, name: str, parameters: str) -> Prototype:
    declared = [parameter for parameter in parameters.split(",") if parameter.strip() not in ("", "void")]
    return Prototype(name, _ctype(returns + " result"), tuple(map(_ctype, declared)),
                     tuple(parameter.replace("[]", "").split()[-1].strip("*") for parameter in declared))


PROTOTYPES: tuple[Prototype, ...] = tuple(
    _prototype(*found) for found in re.findall(r"([\w\s*]+?)\s*\b(cudnn\w+)\(([^)]*)\);", DECLARATIONS))

_PROTOTYPE: dict[str, Prototype] = {p.name: p for p in PROTOTYPES}

#: the sub-library checks run once after loading (each returns CUDNN_STATUS_SUCCESS or 1002).
_VERSION_CHECKS = ("cudnnGraphVersionCheck", "cudnnOpsVersionCheck", "cudnnAdvVersionCheck")


# ==== loading =================================================================================
@dataclass(frozen=True)
class Candidate:
    """A place to load cuDNN from: a file path (or a bare soname) and where it came from."""

    path: str
    source: str


@dataclass(frozen=True)
class Library:
    """A loaded cuDNN 9 with every prototype bound."""

    path: str                     # what was opened (a file path, or the soname for the system library path)
    version: int                  # cudnnGetVersion(), e.g. 92800 for 9.28.0
    functions: Mapping[str, Any]  # C name -> bound ctypes function (restype and argtypes set)


def version_string(version: int) -> str:
    """92800 -> ``"9.28.0"`` (cuDNN 9: MAJOR*10000 + MINOR*100 + PATCH; before 9: MAJOR*1000 + ...)."""
    if version < 10000:
        return f"{version // 1000}.{version // 100 % 10}.{version % 100}"
    return f"{version // 10000}.{version // 100 % 100}.{version % 100}"


def _wheel_lib_dirs() -> list[str]:
    """The ``lib`` folders of the installed ``nvidia.cudnn`` namespace package (it may have no __file__)."""
    try:
        spec = importlib.util.find_spec("nvidia.cudnn")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [os.path.join(location, "lib") for location in spec.submodule_search_locations]


def library_candidates(environ: Mapping[str, str] | None = None,
                       search_path: Sequence[str] | None = None,
                       wheel_dirs: Iterable[str] | None = None) -> list[Candidate]:
    """The places to load cuDNN from, in order (see the module docstring), given ``environ`` (default
    ``os.environ``), the ``search_path`` entries (default ``sys.path``) and the wheel's ``lib`` folders
    ``wheel_dirs`` (default: found through ``nvidia.cudnn``).

    Only files that exist are listed, except the soname, which always comes last. When
    ``$CUDNN_RNN_LIBRARY`` is set it is the only candidate, existing or not, so a mistyped
    override fails loudly instead of silently loading something else.
    """
    environ = os.environ if environ is None else environ
    override = environ.get(LIBRARY_ENV, "")
    if override:
        path = os.path.join(override, SONAME) if os.path.isdir(override) else override
        return [Candidate(path, f"${LIBRARY_ENV}")]
    found: list[Candidate] = []
    seen: set[str] = set()

    def add(path: str, source: str) -> None:
        real = os.path.realpath(path)
        if os.path.isfile(path) and real not in seen:
            seen.add(real)
            found.append(Candidate(path, source))

    for folder in (_wheel_lib_dirs() if wheel_dirs is None else wheel_dirs):
        add(os.path.join(folder, SONAME), "the nvidia-cudnn wheel (nvidia.cudnn)")
    for entry in (sys.path if search_path is None else search_path):
        add(os.path.join(entry or os.curdir, "nvidia", "cudnn", "lib", SONAME), f"sys.path entry {entry!r}")
    found.append(Candidate(SONAME, "the system library path"))
    return found


def _bind(handle: Any, prototype: Prototype) -> Any:
    function = getattr(handle, prototype.name)
    function.restype = prototype.restype
    function.argtypes = prototype.argtypes
    return function


def _open(candidate: Candidate, opener: Callable[[str], Any]) -> Library:
    """Open one candidate and bind everything; raise OSError with the reason on any failure."""
    handle = opener(candidate.path)
    try:
        version = int(_bind(handle, _PROTOTYPE["cudnnGetVersion"])())
    except AttributeError:
        raise OSError("it does not export cudnnGetVersion: not a cuDNN library") from None
    if version // 10000 != REQUIRED_MAJOR:
        raise OSError(f"it is cuDNN {version_string(version)} (version {version}); cuDNN {REQUIRED_MAJOR} is required")
    functions: dict[str, Any] = {}
    for prototype in PROTOTYPES:
        try:
            functions[prototype.name] = _bind(handle, prototype)
        except AttributeError:
            raise OSError(f"cuDNN {version_string(version)} does not export {prototype.name}") from None
    for name in _VERSION_CHECKS:
        status = functions[name]()
        if status != Status.SUCCESS:
            raise OSError(f"{name} returned {status_name(status)}: its sub-libraries are from another version")
    return Library(candidate.path, version, functions)


def load_library(candidates: Sequence[Candidate], opener: Callable[[str], Any] = ctypes.CDLL) -> Library:
    """The first candidate that loads as cuDNN 9 with every prototype.

    Raises:
        CudnnNotAvailableError: none did; the message lists each candidate with its reason and
            says what to install.
    """
    reasons: list[str] = []
    for candidate in candidates:
        try:
            return _open(candidate, opener)
        except OSError as error:
            reasons.append(f"  {candidate.path} (from {candidate.source}): {error}")
    tried = "\n".join(reasons) or "  (nothing to try)"
    raise CudnnNotAvailableError(
        f"cuDNN 9 (libcudnn.so.9) could not be loaded. Tried:\n{tried}\nTo fix: {INSTALL_HINT}.")


_load_lock = threading.Lock()
_loaded: Library | None = None


def library() -> Library:
    """The process-wide cuDNN library, loaded on first use (thread-safe). Failures are not cached."""
    global _loaded
    if _loaded is None:
        with _load_lock:
            if _loaded is None:
                _loaded = load_library(library_candidates())
    return _loaded


def _fn(name: str) -> Any:
    return library().functions[name]


def _call(name: str, *args: Any) -> None:
    check(_fn(name)(*args), name)


def last_error_string() -> str:
    """cuDNN's last error text for this thread (cudnnGetLastErrorString); empty when unavailable."""
    if _loaded is None:
        return ""
    buffer = ctypes.create_string_buffer(1024)
    _loaded.functions["cudnnGetLastErrorString"](buffer, c_size_t(len(buffer)))
    return buffer.value.decode(errors="replace")


# ==== one wrapper per C function (ints in, ints out) =========================================
def get_version() -> int:
    """See ``cudnnGetVersion``."""
    return int(_fn("cudnnGetVersion")())


def get_cudart_version() -> int:
    """See ``cudnnGetCudartVersion`` (the CUDA runtime cuDNN was built against, e.g. 12090)."""
    return int(_fn("cudnnGetCudartVersion")())


def get_error_string(status: int) -> str:
    """See ``cudnnGetErrorString``."""
    text: bytes = _fn("cudnnGetErrorString")(status)
    return text.decode()


def _outs(name: str, *args: Any) -> list[Any]:
    """Call ``name`` with ``args`` and, after them, an out-parameter of each remaining argument's type (its
    prototype's); their values (NULL as 0)."""
    values = [argtype._type_() for argtype in _PROTOTYPE[name].argtypes[len(args):]]
    _call(name, *args, *map(ctypes.byref, values))
    return [value.value or 0 for value in values]


def create(kind: str) -> int:
    """``cudnnCreate<kind>`` (``""`` for the handle, ``"TensorDescriptor"``, ``"RNNDescriptor"``, ...)."""
    return int(_outs("cudnnCreate" + kind)[0])


def destroy(kind: str, pointer: int) -> None:
    """``cudnnDestroy<kind>``, the counterpart of :func:`create`."""
    _call("cudnnDestroy" + kind, pointer)


def _wrapper(name: str, ins: int | None = None) -> Callable[..., Any]:
    """``name`` as a function of its first ``ins`` parameters (all by default), named as in the header in
    snake_case, passed on as given (ctypes passes addresses of 0 as NULL); it returns the values of the
    out-parameters after them (:func:`_outs`): one alone, several as a tuple, none as None."""
    parameters = _PROTOTYPE[name].parameters[:ins]

    def call(*args: Any) -> Any:
        values = _outs(name, *args)
        return tuple(values) if len(values) > 1 else values[0] if values else None

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"See ``{name}``."
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(re.sub(r"(?<!^)(?=[A-Z])", "_", parameter).lower(), inspect.Parameter.POSITIONAL_ONLY)
         for parameter in parameters])
    return call


#: ``stream`` is a ``cudaStream_t`` address; 0 is the legacy default stream
set_stream: Callable[[int, int], None] = _wrapper("cudnnSetStream")
get_stream: Callable[[int], int] = _wrapper("cudnnGetStream", 1)
#: bytes of RNG state for this handle's GPU
dropout_states_size: Callable[[int], int] = _wrapper("cudnnDropoutGetStatesSize", 1)
dropout_reserve_size: Callable[[int], int] = _wrapper("cudnnDropoutGetReserveSpaceSize", 1)
#: initialises ``states`` on the handle's stream when non-NULL
set_dropout: Callable[[int, int, float, int, int, int], None] = _wrapper("cudnnSetDropoutDescriptor")
#: (probability, states address, seed)
get_dropout: Callable[[int, int], tuple[float, int, int]] = _wrapper("cudnnGetDropoutDescriptor", 2)
#: bytes
rnn_weight_space_size: Callable[[int, int], int] = _wrapper("cudnnGetRNNWeightSpaceSize", 2)
#: compiles a CUDNN_RNN_ALGO_PERSIST_DYNAMIC network for exactly ``mini_batch`` at run time with NVRTC, so
#: ``libnvrtc`` must be loadable
build_rnn_dynamic: Callable[[int, int, int], None] = _wrapper("cudnnBuildRNNDynamic")
#: (workspace bytes, reserve bytes; 0 for inference)
rnn_temp_space_sizes: Callable[[int, int, ForwardMode, int], tuple[int, int]] = _wrapper(
    "cudnnGetRNNTempSpaceSizes", 4)
rnn_forward: Callable[..., None] = _wrapper("cudnnRNNForward")
rnn_backward_data: Callable[..., None] = _wrapper("cudnnRNNBackwardData_v8")
rnn_backward_weights: Callable[..., None] = _wrapper("cudnnRNNBackwardWeights_v8")


def _int_array(values: Sequence[int]) -> Any:
    return (c_int * len(values))(*values)


def set_tensor_nd(desc: int, data_type: int, dims: Sequence[int], strides: Sequence[int]) -> None:
    """See ``cudnnSetTensorNdDescriptor``."""
    _call("cudnnSetTensorNdDescriptor", desc, data_type, len(dims), _int_array(dims), _int_array(strides))


def get_tensor_nd(desc: int, max_dims: int = 8) -> tuple[DataType, tuple[int, ...], tuple[int, ...]]:
    """See ``cudnnGetTensorNdDescriptor``: (data type, dims, strides); no dims for an absent weight."""
    data_type, nb_dims = c_int(), c_int()
    dims, strides = (c_int * max_dims)(), (c_int * max_dims)()
    _call("cudnnGetTensorNdDescriptor", desc, max_dims, ctypes.byref(data_type), ctypes.byref(nb_dims), dims, strides)
    n = nb_dims.value
    return DataType(data_type.value), tuple(dims[:n]), tuple(strides[:n])


@dataclass(frozen=True)
class RNNDescriptorFields:
    """Every argument of cudnnSetRNNDescriptor_v8 after the descriptor itself."""

    algo: RNNAlgo
    cell_mode: RNNMode
    bias_mode: RNNBiasMode
    dir_mode: DirectionMode
    input_mode: RNNInputMode
    data_type: DataType
    math_prec: DataType
    math_type: MathType
    input_size: int
    hidden_size: int
    proj_size: int
    num_layers: int
    dropout_desc: int
    aux_flags: int


def set_rnn_descriptor(desc: int, fields: RNNDescriptorFields) -> None:
    """See ``cudnnSetRNNDescriptor_v8`` (``fields`` in its order; a ``dropout_desc`` of 0 is NULL)."""
    _call("cudnnSetRNNDescriptor_v8", desc, *astuple(fields))


def get_rnn_descriptor(desc: int) -> RNNDescriptorFields:
    """See ``cudnnGetRNNDescriptor_v8``."""
    values = _outs("cudnnGetRNNDescriptor_v8", desc)
    enums: tuple[Any, ...] = (RNNAlgo, RNNMode, RNNBiasMode, DirectionMode, RNNInputMode, DataType, DataType, MathType)
    return RNNDescriptorFields(*(enum_class(value) for enum_class, value in zip(enums, values)),
                               *(int(value) for value in values[len(enums):]))


@dataclass(frozen=True)
class RNNDataFields:
    """The arguments of cudnnSetRNNDataDescriptor; ``padding_fill`` is a value of ``data_type``."""

    data_type: DataType
    layout: RNNDataLayout
    max_seq_length: int
    batch_size: int
    vector_size: int
    seq_lengths: tuple[int, ...]
    padding_fill: float = 0.0


def _value_bytes(data_type: DataType, value: float) -> bytes:
    """One value of ``data_type`` as its bytes; BFLOAT16 (no NumPy type without ml_dtypes) is float32's upper
    half, rounded to nearest even."""
    if data_type == DataType.BFLOAT16:
        bits = int(np.array(value, dtype=np.float32).view(np.uint32))
        return np.array((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16, dtype=np.uint16).tobytes()
    return np.array([value], NUMPY_DTYPES[data_type]).tobytes()


def _bytes_value(data_type: DataType, raw: bytes) -> float:
    """The value of ``data_type`` that begins ``raw`` (the inverse of :func:`_value_bytes`)."""
    if data_type == DataType.BFLOAT16:
        return float(widen_bfloat16(np.frombuffer(raw[:2], dtype=np.uint16))[0])
    dtype = np.dtype(NUMPY_DTYPES[data_type])
    return float(np.frombuffer(raw[:dtype.itemsize], dtype=dtype)[0])


def set_rnn_data_descriptor(desc: int, fields: RNNDataFields) -> None:
    """See ``cudnnSetRNNDataDescriptor`` (the lengths and padding value are host memory)."""
    f = fields
    # paddingFill: one value of dataType, in an 8-byte buffer (large enough for any type cuDNN may read)
    fill = ctypes.create_string_buffer(_value_bytes(f.data_type, f.padding_fill).ljust(8, b"\0"), 8)
    _call("cudnnSetRNNDataDescriptor", desc, f.data_type, f.layout, f.max_seq_length, f.batch_size,
          f.vector_size, _int_array(f.seq_lengths), ctypes.cast(fill, c_void_p))


def get_rnn_data_descriptor(desc: int, capacity: int) -> RNNDataFields:
    """See ``cudnnGetRNNDataDescriptor`` (reads up to ``capacity`` sequence lengths)."""
    data_type, layout, max_seq, batch, vector = (c_int() for _ in range(5))
    lengths = (c_int * max(capacity, 1))()
    fill = ctypes.create_string_buffer(8)
    _call("cudnnGetRNNDataDescriptor", desc, ctypes.byref(data_type), ctypes.byref(layout), ctypes.byref(max_seq),
          ctypes.byref(batch), ctypes.byref(vector), capacity, lengths, ctypes.cast(fill, c_void_p))
    kind = DataType(data_type.value)
    return RNNDataFields(kind, RNNDataLayout(layout.value), max_seq.value, batch.value, vector.value,
                         tuple(lengths[:min(capacity, batch.value)]), _bytes_value(kind, fill.raw))


def rnn_weight_params(handle: int, rnn: int, pseudo_layer: int, weight_space_size: int, weight_space: int,
                      lin_layer_id: int, matrix_desc: int, bias_desc: int) -> tuple[int | None, int | None]:
    """See ``cudnnGetRNNWeightParams``: the (matrix, bias) addresses, None where absent or not asked.

    Pass 0 for ``matrix_desc`` or ``bias_desc`` to skip that half; cuDNN fills the descriptors given.
    """
    m_addr, b_addr = c_void_p(), c_void_p()
    _call("cudnnGetRNNWeightParams", handle, rnn, pseudo_layer, weight_space_size, weight_space, lin_layer_id,
          matrix_desc or None, ctypes.byref(m_addr) if matrix_desc else None,
          bias_desc or None, ctypes.byref(b_addr) if bias_desc else None)
    return m_addr.value, b_addr.value


# ==== the CUDA driver, for reporting only ======================================================
def cuda_driver_version() -> int | None:
    """``cuDriverGetVersion`` from ``libcuda.so.1`` (e.g. 12040), or None without a driver."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        function = driver.cuDriverGetVersion  # CUresult cuDriverGetVersion(int *driverVersion);
    except (OSError, AttributeError):
        return None
    function.restype, function.argtypes = c_int, (POINTER(c_int),)
    version = c_int()
    return int(version.value) if function(ctypes.byref(version)) == 0 else None
