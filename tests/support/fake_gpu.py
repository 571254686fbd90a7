"""A recording fake of CuPy and of cuDNN's device calls, so host tests drive the cuDNN backend.

NumPy stands in for CuPy and :class:`FakeCudnn` for the cuDNN calls that need a GPU, so the
Python side of the cuDNN backend (``_cudnn`` and its ``_cudnn_*`` modules) and ``ops`` runs
unchanged on the host (the arithmetic is cuDNN's and is checked in tests/gpu). :func:`install`
puts both in place; what they model is recorded on the returned :class:`FakeGpu`:

* devices: a current device per thread (``cupy.cuda.Device(i)`` as a context); every array
  knows its device; new memory lands on the current device, views keep their base's. A kernel
  (ufunc, ``where``, indexed read or write, ``astype``, ``ascontiguousarray``) that touches an
  array of another device is a *violation*, and so is a cuDNN call whose handle or pointers
  belong to another device, or a cuDNN object destroyed with another device current.
* streams and events: ``cupy.cuda.Stream`` objects with distinct addresses, a current stream per
  thread and device, ``Event.record`` and ``Stream.wait_event`` appended to ``log`` in host order,
  with the stream of each upload from the host and of each device-to-device copy, and the stream
  of each cuDNN call that enqueues work (the compute calls, the dropout states' set-up).
* host transfers, counted in ``counts``: ``d2h`` (``get``, ``asnumpy``, ``item``, ``bool(...)``),
  ``h2d`` (``asarray`` of host data, ``set``) and ``sync`` (any ``synchronize``). While the
  current stream captures a graph they raise, as CUDA and CuPy refuse them.
* what gates a dtype: the cuDNN version (``FakeCudnn.version``, 9.28.0 by default) and every GPU's
  compute capability (``FakeGpu.compute_capability``, (9, 0) by default, in its device properties).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import sys
import threading
import types
import weakref
from typing import Any, Iterator

import numpy as np
import pytest

from cudnn_rnn._cudnn import _cache as _cudnn_cache, _settings as _cudnn_settings, _streams as _cudnn_streams, _lib
from cudnn_rnn.config import MODES, RNNConfig, numpy_dtype
from cudnn_rnn.errors import CudnnError

_GPU: "FakeGpu | None" = None  # the installed fake (one test at a time)


def gpu() -> "FakeGpu":
    assert _GPU is not None, "install() the fake first"
    return _GPU


# ==== arrays ===================================================================================
class ndarray(np.ndarray):  # noqa: N801 - named like CuPy's, which is how cudnn_rnn recognises CuPy arrays
    """A NumPy array posing as a CuPy one: ``.data.ptr`` is its address, ``device_id`` its fake GPU."""

    __module__ = "cupy._fake"
    #: address -> array, for every array that owns its memory (an "allocation")
    allocations: "weakref.WeakValueDictionary[int, ndarray]" = weakref.WeakValueDictionary()

    def __array_finalize__(self, obj: Any) -> None:
        if isinstance(obj, ndarray) and self.base is not None:  # a view
            self.device_id = obj.device_id
            return
        self.device_id = gpu().current_device if _GPU is not None else 0
        if self.base is None:
            ndarray.allocations[self.__array_interface__["data"][0]] = self

    # -- what CuPy arrays have -------------------------------------------------------------------
    @property
    def data(self) -> "FakePointer":
        return FakePointer(self)

    @property
    def device(self) -> Any:
        return types.SimpleNamespace(id=self.device_id)

    def get(self, stream: Any = None) -> np.ndarray:
        gpu().transfer("d2h")
        return np.array(self.view(np.ndarray))

    def set(self, array: np.ndarray, stream: Any = None) -> None:
        gpu().transfer("h2d")
        self.view(np.ndarray)[...] = array

    def item(self, *args: Any) -> Any:
        gpu().transfer("d2h")
        return self.view(np.ndarray).item(*args)

    def tolist(self) -> Any:
        gpu().transfer("d2h")
        return self.view(np.ndarray).tolist()

    def __bool__(self) -> bool:
        gpu().transfer("d2h")
        return bool(self.view(np.ndarray))

    def __float__(self) -> float:
        gpu().transfer("d2h")
        return float(self.view(np.ndarray))

    def __int__(self) -> int:
        gpu().transfer("d2h")
        return int(self.view(np.ndarray))

    # -- kernels ------------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        kernel(ufunc.__name__, *inputs, *(out or ()))
        if out:
            kwargs["out"] = tuple(plain(o) for o in out)
        result = getattr(ufunc, method)(*(plain(a) for a in inputs), **kwargs)
        if out:
            return out[0] if len(out) == 1 else out
        return tuple(adopt(r) for r in result) if isinstance(result, tuple) else adopt(result)

    def __getitem__(self, key: Any) -> Any:
        keys = key if isinstance(key, tuple) else (key,)
        if any(isinstance(k, np.ndarray) for k in keys):  # advanced indexing: a gather kernel
            kernel("take", self, *keys)
            return adopt(self.view(np.ndarray)[tuple(plain(k) for k in keys)])
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        keys = key if isinstance(key, tuple) else (key,)
        kernel("setitem", self, value, *keys)
        self.view(np.ndarray)[tuple(plain(k) for k in keys)] = plain(value)

    def astype(self, dtype: Any, order: str = "K", casting: str = "unsafe", subok: bool = True,
               copy: bool = True) -> Any:
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        kernel("astype", self)
        return adopt(self.view(np.ndarray).astype(dtype, order=order, casting=casting))

    def copy(self, order: str = "C") -> Any:  # CuPy copies across devices: no kernel check
        return adopt(self.view(np.ndarray).copy(order=order))


class FakePointer:
    """``array.data``: the address, the device, and CuPy's device-to-device copy."""

    def __init__(self, array: ndarray) -> None:
        self.array, self.ptr, self.device_id = array, array.__array_interface__["data"][0], array.device_id

    def copy_from_device_async(self, source: "FakePointer", size: int, stream: Any = None) -> None:
        gpu().log.append(("copy", None if stream is None else stream.ptr))
        destination = self.array.view(np.ndarray).reshape(-1).view(np.uint8)
        destination[:size] = source.array.view(np.ndarray).reshape(-1).view(np.uint8)[:size]


def plain(value: Any) -> Any:
    return value.view(np.ndarray) if isinstance(value, ndarray) else value


def adopt(value: Any) -> Any:
    """A host result as new device memory on the current device (scalars stay scalars)."""
    if not isinstance(value, np.ndarray):
        return value
    array = ndarray(value.shape, value.dtype)
    array.view(np.ndarray)[...] = value
    return array


def kernel(name: str, *arrays: Any) -> None:
    """A kernel on the current device reads or writes ``arrays``: each must live there."""
    current = gpu().current_device
    for array in arrays:
        if isinstance(array, ndarray) and array.device_id != current:
            gpu().violations.append(f"{name} on device {current} touches an array of device {array.device_id}")


def allocation(address: int) -> tuple[ndarray, int]:
    """The array owning ``address`` and the offset of ``address`` in it."""
    for start, array in list(ndarray.allocations.items()):
        if start <= address < start + max(array.nbytes, 1):
            return array, address - start
    raise KeyError(f"no device memory at {address:#x}")


def memory(address: int, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A host view of device memory at ``address`` holding ``shape`` values of ``dtype``."""
    array, offset = allocation(address)
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return array.view(np.ndarray).reshape(-1).view(np.uint8)[offset:offset + size].view(dtype).reshape(shape)


def device_at(address: int) -> int:
    return allocation(address)[0].device_id


# ==== devices, streams, events ===================================================================
class FakeDevice:
    """``cupy.cuda.Device``: as a context, makes its device current on this thread."""

    def __init__(self, device: int | None = None) -> None:
        self.id = gpu().current_device if device is None else int(device)
        self._previous: list[int] = []

    def __enter__(self) -> "FakeDevice":
        self._previous.append(gpu().current_device)
        gpu().set_device(self.id)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gpu().set_device(self._previous.pop())

    def synchronize(self) -> None:
        gpu().transfer("sync")


class FakeStream:
    """``cupy.cuda.Stream`` of the current device; ``ptr`` 0 is the device's default stream."""

    def __init__(self, null: bool = False, non_blocking: bool = False, ptr: int | None = None,
                 device_id: int | None = None) -> None:
        self.device_id = gpu().current_device if device_id is None else device_id
        self.ptr = 0 if null else next(gpu().addresses) if ptr is None else ptr
        self.capturing = False

    def __enter__(self) -> "FakeStream":
        gpu().stream_stack(self.device_id).append(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gpu().stream_stack(self.device_id).pop()

    def wait_event(self, event: "FakeEvent") -> None:
        gpu().log.append(("wait", self.ptr, event.id))

    def record(self, event: "FakeEvent | None" = None) -> "FakeEvent":
        event = event or FakeEvent()
        event.record(self)
        return event

    def synchronize(self) -> None:
        gpu().transfer("sync")

    def begin_capture(self, mode: Any = None) -> None:
        if self.ptr == 0:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        self.capturing = True
        gpu().log.append(("begin_capture", self.ptr))

    def end_capture(self) -> "FakeGraph":
        self.capturing = False
        gpu().log.append(("end_capture", self.ptr))
        return FakeGraph(self)

    def is_capturing(self) -> bool:
        return self.capturing


class FakeEvent:
    """``cupy.cuda.Event`` on the current device."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self.id = next(gpu().addresses)
        self.device_id = gpu().current_device

    def record(self, stream: FakeStream | None = None) -> None:
        stream = stream or gpu().current_stream()
        if stream.device_id != self.device_id:
            gpu().violations.append(f"event of device {self.device_id} recorded on a stream of device "
                                    f"{stream.device_id}")
        gpu().log.append(("record", self.id, stream.ptr))

    def synchronize(self) -> None:
        gpu().transfer("sync")


class FakeGraph:
    """``cupy.cuda.Graph``: ``launches`` counts its launches (each also logged with its stream)."""

    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream
        self.launches = 0

    def launch(self, stream: FakeStream | None = None) -> None:
        self.launches += 1
        gpu().log.append(("launch", (stream or gpu().current_stream()).ptr))


class FakeMemoryPool:
    def malloc(self, size: int) -> Any:  # pragma: no cover - allocation does not go through it here
        raise NotImplementedError


class FakeGpu:
    """What the fake saw: counts of transfers, the stream/event log, violations."""

    def __init__(self, device_count: int = 2) -> None:
        self.device_count = device_count
        self.compute_capability = (9, 0)  # every fake GPU's (major, minor), in its device properties
        self.counts: collections.Counter[str] = collections.Counter()
        self.log: list[tuple] = []
        self.violations: list[str] = []
        self.addresses = itertools.count(0x5000, 0x10)
        self._local = threading.local()
        self._null: dict[int, FakeStream] = {}

    @property
    def current_device(self) -> int:
        return getattr(self._local, "device", 0)

    def set_device(self, device: int) -> None:
        assert 0 <= device < self.device_count, device
        self._local.device = device

    def stream_stack(self, device: int) -> list[FakeStream]:
        stacks = self._local.__dict__.setdefault("streams", {})
        return stacks.setdefault(device, [])

    def current_stream(self) -> FakeStream:
        device = self.current_device
        stack = self.stream_stack(device)
        if stack:
            return stack[-1]
        if device not in self._null:
            self._null[device] = FakeStream(null=True, device_id=device)
        return self._null[device]

    def transfer(self, kind: str) -> None:
        """A host transfer or synchronisation: counted, and refused while the current stream captures."""
        if self.current_stream().capturing:
            raise RuntimeError(f"the current stream is capturing, so {kind} is not allowed")
        self.counts[kind] += 1
        if kind == "h2d":  # an upload is enqueued on the current stream
            self.log.append(("h2d", self.current_stream().ptr))

    @contextlib.contextmanager
    def counting(self) -> Iterator[collections.Counter[str]]:
        """Yields a Counter that, on exit, holds the transfers made inside."""
        before = collections.Counter(self.counts)
        made: collections.Counter[str] = collections.Counter()
        try:
            yield made
        finally:
            made.update(self.counts - before)


# ==== the CuPy module ==========================================================================
def _allocate(shape: Any, dtype: Any = np.float64, fill: float | None = None) -> ndarray:
    array = ndarray(shape if isinstance(shape, tuple) else (shape,), np.dtype(dtype))
    if fill is not None:
        array.view(np.ndarray)[...] = fill
    return array


def _asarray(value: Any, dtype: Any = None) -> Any:
    if isinstance(value, ndarray) and (dtype is None or np.dtype(dtype) == value.dtype):
        return value
    gpu().transfer("h2d")
    return adopt(np.asarray(plain(value), dtype=dtype))


def _ascontiguousarray(value: ndarray) -> ndarray:
    if value.flags.c_contiguous:
        return value
    kernel("copy", value)
    return adopt(np.ascontiguousarray(plain(value)))


def _where(condition: Any, x: Any, y: Any) -> ndarray:
    kernel("where", condition, x, y)
    return adopt(np.where(plain(condition), plain(x), plain(y)))


def _asnumpy(value: Any) -> np.ndarray:
    if isinstance(value, ndarray):
        return value.get()
    return np.asarray(value)


def _empty_like(a: ndarray, dtype: Any = None) -> ndarray:
    return _allocate(a.shape, dtype or a.dtype)


def _zeros_like(a: ndarray, dtype: Any = None) -> ndarray:
    return _allocate(a.shape, dtype or a.dtype, 0)


def make_cupy() -> types.SimpleNamespace:
    """The slice of the ``cupy`` module the backend, ops and the graph capture use."""
    runtime = types.SimpleNamespace(getDeviceProperties=lambda i: {"name": b"Fake GPU",
                                                                   "major": gpu().compute_capability[0],
                                                                   "minor": gpu().compute_capability[1]},
                                    getDeviceCount=lambda: gpu().device_count)
    cuda = types.SimpleNamespace(Device=FakeDevice, Stream=FakeStream, Event=FakeEvent,
                                 get_current_stream=lambda: gpu().current_stream(), runtime=runtime,
                                 MemoryPool=FakeMemoryPool,
                                 using_allocator=lambda allocator=None: contextlib.nullcontext())
    return types.SimpleNamespace(
        ndarray=ndarray, cuda=cuda, uint8=np.uint8, int32=np.int32, bool_=np.bool_, float16=np.float16,
        float32=np.float32, float64=np.float64,
        empty=lambda shape, dtype=np.float64: _allocate(shape, dtype),
        zeros=lambda shape, dtype=np.float64: _allocate(shape, dtype, 0),
        empty_like=_empty_like, zeros_like=_zeros_like, asarray=_asarray, ascontiguousarray=_ascontiguousarray,
        where=_where, asnumpy=_asnumpy)


def to_device(value: np.ndarray, device: int = 0) -> ndarray:
    """A fake device copy of host data (set up by a test: not counted as a transfer)."""
    previous = gpu().current_device
    gpu().set_device(device)
    try:
        return adopt(np.asarray(value))
    finally:
        gpu().set_device(previous)


# ==== cuDNN ======================================================================================
_DTYPE_NAMES = {_lib.DataType.HALF: "float16", _lib.DataType.FLOAT: "float32", _lib.DataType.DOUBLE: "float64",
                _lib.DataType.BFLOAT16: "bfloat16"}


def _dtype(data_type: int) -> np.dtype:
    """The NumPy dtype of a cuDNN data type (bfloat16: ml_dtypes')."""
    return numpy_dtype(_DTYPE_NAMES[_lib.DataType(data_type)])


class FakeCudnn:
    """The cuDNN calls of _descriptors and the cuDNN backend, recorded; weights laid out by ``facts``.

    The compute calls write constants (y = 1, hy = 2, cy = 3; dx = 7, dhx = 8, dcx = 9; the
    weight gradient += 1) and record what they were given in ``seen``. A training forward whose
    RNN has a dropout state draws from it as cuDNN does: ``seen["states"]`` (and ``drawn``) get a
    copy of the state it started from, and the state advances in place (every byte + 1).
    """

    WORKSPACE, RESERVE, DROPOUT_STATES = 256, 4096, 64

    def __init__(self, facts: Any = None) -> None:
        self.facts = facts
        self.refuse_absent = False  # True: refuse queries of absent weights instead of returning NULL
        self.version = 92800  # what cudnnGetVersion() reports (the library record's version)
        self.refused_algos: set[_lib.RNNAlgo] = set()  # cudnnGetRNNTempSpaceSizes refuses networks of these
        self.calls: list[tuple] = []
        self.open: dict[int, str] = {}
        self.created_on: dict[int, int] = {}
        self.destroyed: list[tuple[str, int, int]] = []  # (kind, created on device, destroyed with device current)
        self.tensors: dict[int, tuple] = {}
        self.rnns: dict[int, _lib.RNNDescriptorFields] = {}
        self.data: dict[int, _lib.RNNDataFields] = {}
        self.streams: dict[int, int] = {}  # handle -> the stream it is bound to
        self.dropouts: dict[int, tuple[int, int]] = {}  # dropout descriptor -> (its states' address, their bytes)
        self.drawn: list[bytes] = []  # the dropout state each training forward started from, in order
        self.seen: dict[str, Any] = {}
        self.gpu: FakeGpu | None = None
        self._next = 0x1000

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("create", "destroy", "set_stream", "set_tensor_nd", "get_tensor_nd", "dropout_states_size",
                     "set_dropout", "set_rnn_descriptor", "set_rnn_data_descriptor", "rnn_weight_space_size",
                     "rnn_weight_params", "rnn_temp_space_sizes", "rnn_forward", "rnn_backward_data",
                     "rnn_backward_weights", "build_rnn_dynamic"):
            monkeypatch.setattr(_lib, name, getattr(self, name))
        monkeypatch.setattr(_lib, "library", lambda: _lib.Library("fake", self.version, {}))

    # -- objects ------------------------------------------------------------------------------
    def create(self, kind: str) -> int:
        self._next += 16
        self.open[self._next] = kind
        self.created_on[self._next] = gpu().current_device
        return self._next

    def destroy(self, kind: str, pointer: int) -> None:
        assert self.open.pop(pointer) == kind
        created, current = self.created_on.pop(pointer), gpu().current_device
        self.destroyed.append((kind, created, current))
        if created != current:
            gpu().violations.append(f"cudnnDestroy{kind} with device {current} current; it was made on {created}")

    def set_stream(self, handle: int, stream: int) -> None:
        self.calls.append(("set_stream", handle, stream))
        self.streams[handle] = stream

    def set_tensor_nd(self, desc: int, data_type: int, dims: Any, strides: Any) -> None:
        self.tensors[desc] = (data_type, tuple(dims), tuple(strides))

    def get_tensor_nd(self, desc: int) -> tuple:
        return self.tensors[desc]

    def dropout_states_size(self, handle: int) -> int:
        return self.DROPOUT_STATES

    def set_dropout(self, desc: int, handle: int, probability: float, states: int, size: int, seed: int) -> None:
        self.calls.append(("set_dropout", probability, size, seed))
        self.dropouts[desc] = (states, size)
        if states:
            self._on_device("cudnnSetDropoutDescriptor", handle, states)
            memory(states, np.uint8, (size,))[:] = seed % 251  # the seeded initial RNG state

    def set_rnn_descriptor(self, desc: int, fields: _lib.RNNDescriptorFields) -> None:
        self.rnns[desc] = fields

    def set_rnn_data_descriptor(self, desc: int, fields: _lib.RNNDataFields) -> None:
        self.data[desc] = fields
        self.calls.append(("data", fields))

    # -- the layout -----------------------------------------------------------------------------
    def _layout(self, rnn: int) -> Any:
        from cudnn_rnn.layout import params_layout

        f = self.rnns[rnn]
        modes = {m.cudnn_mode: name for name, m in MODES.items()}
        config = RNNConfig(modes[f.cell_mode], f.num_layers, f.hidden_size, f.input_size,
                           input_mode=("linear_input", "skip_input")[f.input_mode],
                           direction=("unidirectional", "bidirectional")[f.dir_mode],
                           num_proj=0 if f.proj_size == f.hidden_size else f.proj_size,
                           dtype=_DTYPE_NAMES[f.data_type])
        return params_layout(config, self.facts), np.dtype(config.dtype).itemsize

    def rnn_weight_space_size(self, handle: int, rnn: int) -> int:
        layout, itemsize = self._layout(rnn)
        return layout.size * itemsize

    def rnn_weight_params(self, handle: int, rnn: int, k: int, size: int, base: int, lin_id: int, m_desc: int,
                          b_desc: int) -> tuple:
        layout, itemsize = self._layout(rnn)
        addresses = []
        for kind, desc in (("matrix", m_desc), ("bias", b_desc)):
            entry = layout.entry(k, lin_id, kind) if desc else None
            if desc and entry is None and self.refuse_absent:
                raise CudnnError("CUDNN_STATUS_BAD_PARAM", 2000, "cudnnGetRNNWeightParams")
            if entry is not None:
                dims = (1, *entry.shape) if kind == "matrix" else (1, entry.shape[0], 1)
                self.tensors[desc] = (self.rnns[rnn].data_type, dims, _descriptor_strides(dims))
            addresses.append(None if entry is None else base + entry.offset * itemsize)
        return tuple(addresses)

    def rnn_temp_space_sizes(self, handle: int, rnn: int, mode: int, x_desc: int) -> tuple[int, int]:
        if self.rnns[rnn].algo in self.refused_algos:
            raise CudnnError("CUDNN_STATUS_NOT_SUPPORTED", 3000, "cudnnGetRNNTempSpaceSizes")
        return self.WORKSPACE, 0 if mode == _lib.ForwardMode.INFERENCE else self.RESERVE

    def build_rnn_dynamic(self, handle: int, rnn: int, mini_batch: int) -> None:
        assert self.rnns[rnn].algo == _lib.RNNAlgo.PERSIST_DYNAMIC, "only persist_dynamic networks are built"
        self.calls.append(("build_dynamic", rnn, mini_batch))

    # -- compute --------------------------------------------------------------------------------
    def _on_device(self, function: str, handle: int, *pointers: int) -> None:
        """Check where a call runs, and log it with its stream (compute calls) in ``gpu().log``."""
        if function.startswith(("cudnnRNN", "cudnnSetDropout")):
            gpu().log.append((function, self.streams.get(handle)))
        current = gpu().current_device
        if self.created_on[handle] != current:
            gpu().violations.append(f"{function} on a handle of device {self.created_on[handle]} "
                                    f"with device {current} current")
        for pointer in pointers:
            if pointer and device_at(pointer) != current:
                gpu().violations.append(f"{function} gets a pointer into device {device_at(pointer)} "
                                        f"with device {current} current")

    def _sequence(self, desc: int, address: int) -> np.ndarray:
        f = self.data[desc]
        shape = ((f.max_seq_length, f.batch_size) if f.layout == _lib.RNNDataLayout.SEQ_MAJOR_UNPACKED
                 else (f.batch_size, f.max_seq_length))
        return memory(address, _dtype(f.data_type), shape + (f.vector_size,))

    def _tensor(self, desc: int, address: int) -> np.ndarray:
        data_type, dims, _ = self.tensors[desc]
        return memory(address, _dtype(data_type), dims)

    def rnn_forward(self, handle, rnn, mode, lengths, x_desc, x, y_desc, y, h_desc, hx, hy, c_desc, cx, cy,
                    weight_size, weights, work_size, work, reserve_size, reserve) -> None:
        self._on_device("cudnnRNNForward", handle, lengths, x, y, hx, hy, cx, cy, weights, work, reserve)
        fields = self.rnns[rnn]
        address, size = self.dropouts.get(fields.dropout_desc, (0, 0))
        states = memory(address, np.uint8, (size,)) if address and mode == _lib.ForwardMode.TRAINING else None
        batch = self.data[x_desc].batch_size
        self.seen.update(mode=mode, x=self._sequence(x_desc, x).copy(),
                         lengths=memory(lengths, np.int32, (batch,)).copy(), weight_size=weight_size,
                         work_size=work_size, reserve_size=reserve_size, reserve=reserve,
                         states=None if states is None else states.copy())
        if states is not None:
            self.drawn.append(states.tobytes())
            states += 1  # cuDNN advances the RNG state as it draws masks
        self._sequence(y_desc, y)[...] = 1.0
        self._tensor(h_desc, hy)[...] = 2.0
        if fields.cell_mode == _lib.RNNMode.LSTM:
            self._tensor(c_desc, cy)[...] = 3.0

    def rnn_backward_data(self, handle, rnn, lengths, y_desc, y, dy, x_desc, dx, h_desc, hx, dhy, dhx, c_desc, cx,
                          dcy, dcx, weight_size, weights, work_size, work, reserve_size, reserve) -> None:
        self._on_device("cudnnRNNBackwardData_v8", handle, lengths, y, dy, dx, hx, dhy, dhx, cx, dcy, dcx, weights,
                        work, reserve)
        self.seen.update(dy=self._sequence(y_desc, dy).copy(), dhy=self._tensor(h_desc, dhy).copy(),
                         dcy=None if not dcy else self._tensor(c_desc, dcy).copy(), backward_reserve=reserve)
        self._sequence(x_desc, dx)[...] = 7.0
        self._tensor(h_desc, dhx)[...] = 8.0
        if dcx:
            self._tensor(c_desc, dcx)[...] = 9.0

    def rnn_backward_weights(self, handle, rnn, mode, lengths, x_desc, x, h_desc, hx, y_desc, y, weight_size,
                             dweights, work_size, work, reserve_size, reserve) -> None:
        self._on_device("cudnnRNNBackwardWeights_v8", handle, lengths, x, hx, y, dweights, work, reserve)
        assert mode == _lib.WgradMode.ADD and reserve == self.seen["backward_reserve"]
        self.seen.update(weights_x=self._sequence(x_desc, x).copy(), dweights=dweights)
        dtype = _dtype(self.rnns[rnn].data_type)
        memory(dweights, dtype, (weight_size // np.dtype(dtype).itemsize,))[...] += 1.0


def _descriptor_strides(dims: tuple[int, ...]) -> tuple[int, ...]:
    from cudnn_rnn._cudnn._descriptors import packed_strides

    return packed_strides(dims)


def install(monkeypatch: pytest.MonkeyPatch, facts: Any = None, device_count: int = 2) -> FakeCudnn:
    """Fake CuPy and cuDNN, and fresh backend caches, for one test; the FakeGpu is ``.gpu``."""
    fake_gpu = FakeGpu(device_count)
    monkeypatch.setattr(sys.modules[__name__], "_GPU", fake_gpu)
    cudnn = FakeCudnn(facts)
    cudnn.gpu = fake_gpu
    cudnn.install(monkeypatch)
    monkeypatch.setitem(sys.modules, "cupy", make_cupy())
    monkeypatch.setattr(_cudnn_cache, "_by_thread", {})  # no contexts yet
    monkeypatch.setattr(_cudnn_cache, "_foreign_threads", set())
    monkeypatch.setattr(_cudnn_cache, "_local", threading.local())
    monkeypatch.setattr(_cudnn_streams, "_local", threading.local())  # no CUDA graph being recorded
    monkeypatch.setattr(_cudnn_settings, "_tf32", False)
    monkeypatch.setattr(_cudnn_settings, "_dtype_refusals", {})  # the GPUs' dtype checks are asked again
    return cudnn
