"""Every element type the package meets, one record each: its size, what it computes in, and what each
framework and file format calls it. Every other dtype table of the package is derived from :data:`TABLE`.

Its uses::

    lookup("safetensors", "BF16").name == "bfloat16"
    names("torch_storage") == {"HalfStorage": "float16", ...}
    numpy_dtype("bfloat16")            # ml_dtypes.bfloat16, imported only when first asked for
    as_bits(a) / from_bits(b, "bfloat16")   # a 2-byte type NumPy lacks, as int16 bit patterns and back

bfloat16 is the one type NumPy has no built-in for: :func:`as_bits` and :func:`widen_bfloat16` move
its values without ml_dtypes (to a framework that takes int16, or exactly to float32).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

__all__ = ["DType", "TABLE", "BY_NAME", "PARAMS", "BUILTIN_PARAMS", "COMPUTE", "PACKAGES", "ITEMSIZES", "lookup",
           "names", "numpy_dtype", "as_bits", "from_bits", "widen_bfloat16"]


@dataclass(frozen=True)
class DType:
    """One element type and its names elsewhere (None: that framework or format has no such type).

    Attributes:
        name: NumPy's name (``"bfloat16"``: ml_dtypes' type of that name).
        itemsize: bytes per element.
        params: whether an RNN's params (and its data) may have this type.
        compute: the type its arithmetic runs in (float16 and bfloat16: float32).
        package: the package that registers it with NumPy, imported only when it is first used.
        safetensors: the safetensors dtype code (``"F32"``).
        torch: the ``torch.<name>`` attribute.
        torch_storage: the legacy typed-storage class ``torch.save`` names in its pickles.
        onnx: the ONNX ``TensorProto.DataType`` number.
        tf: TensorFlow's ``DataType`` enum number (``DT_FLOAT`` = 1).
        cudnn: cuDNN's ``cudnnDataType_t`` number (``CUDNN_DATA_FLOAT`` = 0).
        nccl: the name of NCCL's constant in ``cupy.cuda.nccl`` (types NCCL reduces here).
    """

    name: str
    itemsize: int
    params: bool
    compute: str
    package: str | None
    safetensors: str | None
    torch: str | None
    torch_storage: str | None
    onnx: int | None
    tf: int | None
    cudnn: int | None
    nccl: str | None


def _row(name: str, itemsize: int, params: bool, compute: str | None, package: str | None, safetensors: str,
         torch_storage: str | None, onnx: int, tf: int, cudnn: int | None, nccl: str | None = None) -> DType:
    return DType(name, itemsize, params, compute or name, package, safetensors, name, torch_storage, onnx, tf, cudnn,
                 nccl)


#: every element type, the RNN params types first
TABLE: tuple[DType, ...] = (
    _row("float16", 2, True, "float32", None, "F16", "HalfStorage", 10, 19, 2, "NCCL_FLOAT16"),
    _row("float32", 4, True, None, None, "F32", "FloatStorage", 1, 1, 0, "NCCL_FLOAT32"),
    _row("float64", 8, True, None, None, "F64", "DoubleStorage", 11, 2, 1, "NCCL_FLOAT64"),
    _row("bfloat16", 2, True, "float32", "ml_dtypes", "BF16", "BFloat16Storage", 16, 14, 9),
    _row("bool", 1, False, None, None, "BOOL", "BoolStorage", 9, 10, 11),
    _row("uint8", 1, False, None, None, "U8", "ByteStorage", 2, 4, 6, "NCCL_UINT8"),
    _row("int8", 1, False, None, None, "I8", "CharStorage", 3, 6, 3),
    _row("uint16", 2, False, None, None, "U16", None, 4, 17, None),
    _row("int16", 2, False, None, None, "I16", "ShortStorage", 5, 5, None),
    _row("uint32", 4, False, None, None, "U32", None, 12, 22, None),
    _row("int32", 4, False, None, None, "I32", "IntStorage", 6, 3, 4),
    _row("uint64", 8, False, None, None, "U64", None, 13, 23, None),
    _row("int64", 8, False, None, None, "I64", "LongStorage", 7, 9, 10),
)

#: name -> record
BY_NAME: dict[str, DType] = {dtype.name: dtype for dtype in TABLE}

#: the RNN params types (``config.DTYPES``)
PARAMS: tuple[str, ...] = tuple(dtype.name for dtype in TABLE if dtype.params)

#: the params types NumPy has built in (what model files hold as such)
BUILTIN_PARAMS: tuple[str, ...] = tuple(dtype.name for dtype in TABLE if dtype.params and dtype.package is None)

#: params type -> the wider type its arithmetic runs in (the others compute in themselves)
COMPUTE: dict[str, str] = {dtype.name: dtype.compute for dtype in TABLE if dtype.compute != dtype.name}

#: type -> the package that registers it with NumPy
PACKAGES: dict[str, str] = {dtype.name: dtype.package for dtype in TABLE if dtype.package is not None}

#: params type -> bytes per element (known without importing any package)
ITEMSIZES: dict[str, int] = {dtype.name: dtype.itemsize for dtype in TABLE if dtype.params}

_FIELDS = frozenset(field.name for field in fields(DType))


@functools.cache
def names(field: str) -> dict[Any, str]:
    """What one framework or format calls each type it has -> the type's name.

    Args:
        field: a :class:`DType` attribute (``"safetensors"``, ``"torch_storage"``, ``"onnx"``, ...).

    Returns:
        ``{value: name}`` over the rows whose ``field`` is not None, in :data:`TABLE` order.
    """
    if field not in _FIELDS:
        raise ValueError(f"field must be one of {sorted(_FIELDS)}; got {field!r}")
    return {getattr(dtype, field): dtype.name for dtype in TABLE if getattr(dtype, field) is not None}


def lookup(field: str, value: Any) -> DType | None:
    """The record a framework or format's name for a type stands for (None: no type of the table).

    ``lookup("safetensors", "BF16")`` is bfloat16's record; ``lookup("onnx", 8)`` (strings) is None.
    """
    name = names(field).get(value)
    return None if name is None else BY_NAME[name]


@functools.cache
def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a name of :data:`TABLE`, importing its package first (bfloat16: ml_dtypes).

    Raises:
        ImportError: the package is missing; the message says what to install.
    """
    package = PACKAGES.get(name)
    if package is None:
        return np.dtype(name)
    try:
        module = importlib.import_module(package)
    except ImportError as error:
        raise ImportError(f"dtype {name!r} needs the {package!r} package: pip install {package} "
                          f"(or pip install 'cudnn_rnn[{name}]')") from error
    dtype: np.dtype = np.dtype(getattr(module, name))  # the scalar type the package names after the dtype
    return dtype


def as_bits(array: Any) -> Any:
    """A NumPy or CuPy array of a type NumPy has no built-in for (bfloat16), viewed as int16 bit patterns
    of the same shape; any other array as it is. What a framework that knows no ml_dtypes takes."""
    return array.view(np.int16) if array.dtype.name in PACKAGES else array


def from_bits(array: Any, name: str) -> Any:
    """The inverse of :func:`as_bits`: int16 bit patterns viewed as ``name`` (bfloat16 needs ml_dtypes);
    an array of any other ``name`` as it is."""
    return array.view(numpy_dtype(name)) if name in PACKAGES else array


def widen_bfloat16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values, given as their 16-bit patterns (any 2-byte dtype), as float32: exactly, without ml_dtypes.

    ``[...]`` of 2-byte items -> ``[...]`` float32 (C order): each pattern is a float32's upper half.
    """
    return (np.ascontiguousarray(bits).view("<u2").astype("<u4") << 16).view("<f4")
