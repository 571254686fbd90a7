"""XLA's FFI C API (``xla/ffi/api/c_api.h``, version 0.3) in ctypes: a Python function as an FFI handler.

A handler is a C function ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)``. :func:`handler_capsule`
wraps a Python function into one, as the capsule ``jax.ffi.register_ffi_target`` takes::

    capsule = handler_capsule(body)      body(frame: CallFrame) -> None, run at XLA's execute stage
    frame.args, frame.rets               [Buffer]: dtype, shape, data address (the call's operands, results)
    frame.attrs                          {name: int | float | bool | str}: the call's attributes
    frame.stream(), frame.device_ordinal()       XLA's CUDA stream and device of the call (GPU platforms)
    host_view(buffer)                    a NumPy view of a host buffer (no copy), valid during the call

What the wrapper answers for ``body``:

- the metadata query: XLA calls each handler once with ``call_frame->extension_start`` an
  ``XLA_FFI_Extension_Metadata`` and nothing else set; the wrapper fills the API version (0.3)
  and the traits (0: not safe to capture into a command buffer, since a call may wait for its
  stream) and returns NULL without calling ``body``;
- errors: an exception raised by ``body`` becomes an ``XLA_FFI_Error`` made by
  ``api->XLA_FFI_Error_Create`` (:data:`ERROR_CODES`), whose message is the exception's own
  (``str(error)``; the exception's type is prefixed for anything but TypeError and ValueError),
  so XLA raises it where the computation's results are awaited; nothing escapes into C;
- stages other than execute: nothing to do (the handler is registered for execute alone).

The ctypes callback objects live as long as the process (:data:`_CALLBACKS`): XLA keeps the raw
pointers. This module and ``cudnn_rnn._lib`` are the package's only users of ``ctypes``.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any, Callable

import jax
import numpy as np

from ..config import numpy_dtype

__all__ = ["API_VERSION", "DTYPES", "ERROR_CODES", "Buffer", "CallFrame", "XlaError", "handler_capsule", "host_view"]

#: The FFI API version this module speaks, (major, minor), as the metadata query reports it.
API_VERSION = (0, 3)

#: XLA_FFI_DataType -> the NumPy dtype name of buffers and scalar attributes of that type (bfloat16: ml_dtypes).
DTYPES: dict[int, str] = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16",
                          8: "uint32", 9: "uint64", 10: "float16", 11: "float32", 12: "float64", 15: "complex64",
                          16: "bfloat16", 18: "complex128"}

#: Python exception type -> the XLA_FFI_Error_Code it is reported with (any other: INTERNAL, 13).
ERROR_CODES: dict[type[BaseException], int] = {TypeError: 3, ValueError: 3}  # INVALID_ARGUMENT
_INTERNAL = 13

_METADATA_EXTENSION = 1  # XLA_FFI_Extension_Type: XLA_FFI_Extension_Metadata
_EXECUTE = 3             # XLA_FFI_ExecutionStage: XLA_FFI_ExecutionStage_EXECUTE
_BUFFER = 1              # XLA_FFI_ArgType / XLA_FFI_RetType: BUFFER
_SCALAR, _STRING = 3, 4  # XLA_FFI_AttrType (1 ARRAY and 2 DICTIONARY are not used by this package)

#: XLA_FFI_DataType of a scalar attribute -> the C type its value is stored as
_SCALAR_TYPES: dict[int, Any] = {1: ctypes.c_bool, 2: ctypes.c_int8, 3: ctypes.c_int16, 4: ctypes.c_int32,
                                 5: ctypes.c_int64, 6: ctypes.c_uint8, 7: ctypes.c_uint16, 8: ctypes.c_uint32,
                                 9: ctypes.c_uint64, 11: ctypes.c_float, 12: ctypes.c_double}


# ---- the C API's structures, field for field --------------------------------------------------
class _ExtensionBase(ctypes.Structure):
    pass


_ExtensionBase._fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int),
                           ("next", ctypes.POINTER(_ExtensionBase))]
_Extension = ctypes.POINTER(_ExtensionBase)


class _ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension),
                ("major_version", ctypes.c_int), ("minor_version", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", _ApiVersion), ("traits", ctypes.c_uint32)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", _ExtensionBase), ("metadata", ctypes.POINTER(_Metadata))]


class _Buffer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension), ("dtype", ctypes.c_int),
                ("data", ctypes.c_void_p), ("rank", ctypes.c_int64), ("dims", ctypes.POINTER(ctypes.c_int64))]


class _Args(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets have one layout
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("args", ctypes.POINTER(ctypes.c_void_p))]


class _ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", ctypes.c_void_p)]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("names", ctypes.POINTER(ctypes.POINTER(_ByteSpan))),
                ("attrs", ctypes.POINTER(ctypes.c_void_p))]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension), ("message", ctypes.c_char_p),
                ("errc", ctypes.c_int)]


class _StreamGetArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension), ("ctx", ctypes.c_void_p),
                ("stream", ctypes.c_void_p)]


class _DeviceOrdinalGetArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension), ("ctx", ctypes.c_void_p),
                ("device_ordinal", ctypes.c_int32)]


_ErrorCreate = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_ErrorCreateArgs))
_StreamGet = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_StreamGetArgs))
_DeviceOrdinalGet = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_DeviceOrdinalGetArgs))

#: XLA_FFI_Api's function pointers in order; those this module calls have their own type, the rest are opaque
_API_FUNCTIONS: tuple[tuple[str, Any], ...] = (
    ("XLA_FFI_Error_Create", _ErrorCreate), ("XLA_FFI_Error_GetMessage", ctypes.c_void_p),
    ("XLA_FFI_Error_Destroy", ctypes.c_void_p), ("XLA_FFI_Handler_Register", ctypes.c_void_p),
    ("XLA_FFI_Stream_Get", _StreamGet), ("XLA_FFI_Type_Register", ctypes.c_void_p),
    ("XLA_FFI_ExecutionContext_Get", ctypes.c_void_p), ("XLA_FFI_State_Set", ctypes.c_void_p),
    ("XLA_FFI_State_Get", ctypes.c_void_p), ("XLA_FFI_DeviceMemory_Allocate", ctypes.c_void_p),
    ("XLA_FFI_DeviceMemory_Free", ctypes.c_void_p), ("XLA_FFI_ThreadPool_Schedule", ctypes.c_void_p),
    ("XLA_FFI_ThreadPool_NumThreads", ctypes.c_void_p), ("XLA_FFI_Future_Create", ctypes.c_void_p),
    ("XLA_FFI_Future_SetAvailable", ctypes.c_void_p), ("XLA_FFI_Future_SetError", ctypes.c_void_p),
    ("XLA_FFI_RunId_Get", ctypes.c_void_p), ("XLA_FFI_DeviceOrdinal_Get", _DeviceOrdinalGet),
)


class _Api(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension), ("api_version", _ApiVersion),
                ("internal_api", ctypes.c_void_p), *_API_FUNCTIONS]


class _CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _Extension), ("api", ctypes.POINTER(_Api)),
                ("ctx", ctypes.c_void_p), ("stage", ctypes.c_int), ("args", _Args), ("rets", _Args),
                ("attrs", _Attrs), ("future", ctypes.c_void_p)]


_Handler = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_CallFrame))

#: jax.ffi.pycapsule (untyped in JAX): a function address -> the PyCapsule register_ffi_target takes
_pycapsule: Callable[[int | None], Any] = jax.ffi.pycapsule

#: every handler made, kept for the life of the process: XLA holds their raw pointers
_CALLBACKS: list[Any] = []


# ---- what a handler sees ----------------------------------------------------------------------
class XlaError(Exception):
    """An error XLA itself returned from an API call; the handler hands the same ``XLA_FFI_Error*`` back."""

    def __init__(self, function: str, pointer: int) -> None:
        super().__init__(f"{function} failed")
        self.pointer = pointer


@dataclass(frozen=True)
class Buffer:
    """One operand or result of the call: ``shape`` elements of ``dtype`` at device or host address ``data``."""

    dtype: np.dtype
    shape: tuple[int, ...]
    data: int  # 0 for an empty buffer

    @property
    def nbytes(self) -> int:
        """The buffer's size in bytes: the product of ``shape`` times the item size."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@functools.cache
def _dtype(code: int) -> np.dtype:
    if code not in DTYPES:
        raise TypeError(f"an XLA buffer or attribute of XLA_FFI_DataType {code}, which this handler does not take")
    return numpy_dtype(DTYPES[code]) if DTYPES[code] == "bfloat16" else np.dtype(DTYPES[code])


def _buffers(table: _Args, what: str) -> list[Buffer]:
    buffers = []
    for i in range(table.size):
        if table.types[i] != _BUFFER:
            raise TypeError(f"{what} {i} is not a buffer (XLA_FFI type {table.types[i]})")
        raw = _Buffer.from_address(table.args[i])
        shape = tuple(raw.dims[:raw.rank]) if raw.rank else ()
        buffers.append(Buffer(_dtype(raw.dtype), shape, int(raw.data or 0)))
    return buffers


def _text(span: _ByteSpan) -> str:
    return ctypes.string_at(span.ptr, span.len).decode("utf-8") if span.len else ""


def _attributes(table: _Attrs) -> dict[str, int | float | bool | str]:
    found: dict[str, int | float | bool | str] = {}
    for i in range(table.size):
        name, kind = _text(table.names[i].contents), table.types[i]
        if kind == _STRING:
            found[name] = _text(_ByteSpan.from_address(table.attrs[i]))
        elif kind == _SCALAR:
            scalar = _Scalar.from_address(table.attrs[i])
            if scalar.dtype not in _SCALAR_TYPES:
                raise TypeError(f"attribute {name!r} is a scalar of XLA_FFI_DataType {scalar.dtype}, which this "
                                "handler does not take")
            found[name] = _SCALAR_TYPES[scalar.dtype].from_address(scalar.value).value
        else:
            raise TypeError(f"attribute {name!r} is of XLA_FFI_AttrType {kind}; this handler takes scalars and strings")
    return found


class CallFrame:
    """One call as a handler sees it: operands, results, attributes, and (GPU) the stream and device."""

    def __init__(self, raw: _CallFrame) -> None:
        self._raw = raw
        #: the operands, in the order the call passed them
        self.args = _buffers(raw.args, "operand")
        #: the results XLA allocated, in the order the call declared them
        self.rets = _buffers(raw.rets, "result")
        #: the attributes, by name
        self.attrs = _attributes(raw.attrs)

    def _api_function(self, name: str) -> Any:
        api = self._raw.api.contents
        field = getattr(_Api, name)
        if field.offset + field.size > api.struct_size:  # an older XLA whose table ends before it
            raise RuntimeError(f"this XLA's FFI API has no {name} (API version {api.api_version.major_version}."
                               f"{api.api_version.minor_version})")
        return getattr(api, name)

    def stream(self) -> int:
        """The platform stream XLA runs the call on (a ``cudaStream_t`` on CUDA), as an address."""
        args = _StreamGetArgs(ctypes.sizeof(_StreamGetArgs), None, self._raw.ctx, None)
        error = self._api_function("XLA_FFI_Stream_Get")(ctypes.byref(args))
        if error:
            raise XlaError("XLA_FFI_Stream_Get", error)
        return int(args.stream or 0)

    def device_ordinal(self) -> int:
        """The device (the CUDA ordinal on CUDA) XLA runs the call on."""
        args = _DeviceOrdinalGetArgs(ctypes.sizeof(_DeviceOrdinalGetArgs), None, self._raw.ctx, 0)
        error = self._api_function("XLA_FFI_DeviceOrdinal_Get")(ctypes.byref(args))
        if error:
            raise XlaError("XLA_FFI_DeviceOrdinal_Get", error)
        return int(args.device_ordinal)


def host_view(buffer: Buffer, *, writable: bool) -> np.ndarray:
    """A NumPy view of a host buffer, no copy: valid only while the call runs (XLA owns the memory).

    Operands are viewed read-only (``writable=False``): XLA may share them with other values.
    """
    if buffer.nbytes == 0:
        return np.empty(buffer.shape, dtype=buffer.dtype)
    memory = (ctypes.c_char * buffer.nbytes).from_address(buffer.data)
    view: np.ndarray = np.frombuffer(memoryview(memory), dtype=buffer.dtype).reshape(buffer.shape)
    view.flags.writeable = writable
    return view


# ---- the handler --------------------------------------------------------------------------------
def _fill_metadata(extension: Any) -> None:
    metadata = ctypes.cast(extension, ctypes.POINTER(_MetadataExtension)).contents.metadata.contents
    metadata.api_version = _ApiVersion(ctypes.sizeof(_ApiVersion), None, *API_VERSION)
    metadata.traits = 0


def _error(raw: _CallFrame, error: BaseException) -> int | None:
    """An XLA_FFI_Error for ``error``, made by XLA's own Error_Create."""
    if isinstance(error, XlaError):
        return error.pointer
    code = next((c for kind, c in ERROR_CODES.items() if isinstance(error, kind)), _INTERNAL)
    message = str(error) if code != _INTERNAL else f"{type(error).__name__}: {error}"
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), None, message.encode("utf-8", "replace"), code)
    pointer: int | None = raw.api.contents.XLA_FFI_Error_Create(ctypes.byref(args))
    return pointer


def handler_capsule(body: Callable[[CallFrame], None]) -> Any:
    """``body`` as an XLA FFI handler, in the PyCapsule ``jax.ffi.register_ffi_target`` takes.

    See the module docstring for what the wrapper answers itself (metadata, errors, other stages).
    """
    def handler(frame_pointer: Any) -> int | None:
        raw = frame_pointer.contents
        try:
            extension = raw.extension_start
            if extension and extension.contents.type == _METADATA_EXTENSION:
                _fill_metadata(extension)
                return None
            if raw.stage != _EXECUTE:
                return None
            body(CallFrame(raw))
            return None
        except BaseException as error:  # noqa: B036 - nothing may unwind into XLA's C++ frames
            return _error(raw, error)

    callback = _Handler(handler)
    _CALLBACKS.append(callback)
    return _pycapsule(ctypes.cast(callback, ctypes.c_void_p).value)
