"""cuDNN objects with one owner each, and the bounded cache that owns them.

Every class here is built complete in its constructor (create + set) and never changes afterwards.
``close()`` (or ``with``) frees it, idempotently; a ``weakref.finalize`` backstop frees it if its owner
forgets. Only a handle needs a device, and a dropout descriptor a handle; the rest is host-side in cuDNN.

An object made for a GPU is given a ``device`` scope (such as ``functools.partial(cupy.cuda.Device, 1)``)
and is destroyed inside it, by ``close()`` or by the garbage collector, whatever thread or device is current.
:func:`live_counts` lets tests prove that a steady loop creates nothing new.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref
from typing import Any, Callable, ContextManager, Generic, Hashable, Sequence, TypeVar

from . import _lib

__all__ = [
    "DeviceScope", "Resource", "Handle", "TensorDescriptor", "DropoutDescriptor", "RNNDescriptor",
    "RNNDataDescriptor", "LRUCache", "live_counts",
]

#: Makes an object's GPU current while used as ``with device(): ...``.
DeviceScope = Callable[[], ContextManager[Any]]

_R = TypeVar("_R", bound="Resource")

_live_lock = threading.Lock()
_live: collections.Counter[str] = collections.Counter()


def live_counts() -> dict[str, int]:
    """Number of open objects per kind (``"Handle"``, ``"RNNDescriptor"``, ...), all threads."""
    with _live_lock:
        return {kind: count for kind, count in _live.items() if count}


def _release(kind: str, pointer: int, destroy: Callable[[int], None], device: DeviceScope | None) -> None:
    with _live_lock:
        _live[kind] -= 1
    with device() if device is not None else contextlib.nullcontext():
        destroy(pointer)


class Resource:
    """Something that must be freed exactly once: a pointer plus the function that frees it (inside ``device()``
    when a device scope is given).

    Subclasses create the object, set it up, then call ``super().__init__``; :meth:`_own` does all three, and
    frees the pointer if the setup fails (:meth:`_adopt`).
    """

    __slots__ = ("_pointer", "_finalizer", "__weakref__")

    def __init__(self, pointer: int, destroy: Callable[[int], None], device: DeviceScope | None = None) -> None:
        kind = type(self).__name__
        self._pointer = pointer
        with _live_lock:
            _live[kind] += 1
        # The finalizer must not reference self; it runs at most once (close() or collection).
        self._finalizer = weakref.finalize(self, _release, kind, pointer, destroy, device)
        self._finalizer.atexit = False  # the CUDA context may be gone at exit; the OS reclaims it

    @classmethod
    def _adopt(cls, kind: str, setup: Callable[[int], None]) -> int:
        """``cudnnCreate<kind>``, then ``setup(pointer)``; destroys the pointer if setup raises."""
        pointer = _lib.create(kind)
        try:
            setup(pointer)
        except BaseException:
            _lib.destroy(kind, pointer)
            raise
        return pointer

    def _own(self, setup: Callable[[int], None], device: DeviceScope | None, kind: str | None = None) -> None:
        """``cudnnCreate<kind>`` (default: the class name) set up by ``setup(pointer)`` (:meth:`_adopt`), owned
        from then on."""
        name = type(self).__name__ if kind is None else kind
        Resource.__init__(self, self._adopt(name, setup), lambda pointer: _lib.destroy(name, pointer), device)

    @property
    def pointer(self) -> int:
        """The C address (``cudnn*_t``); RuntimeError once closed."""
        if not self._finalizer.alive:
            raise RuntimeError(f"{type(self).__name__} is closed")
        return self._pointer

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Free the object now (idempotent)."""
        self._finalizer()

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Handle(Resource):
    """A ``cudnnHandle_t`` on the current CUDA device ``device_id`` (cudnnCreate needs a GPU and a driver).

    cudnnDestroy synchronises the device, so it runs inside ``device()`` when given.
    """

    __slots__ = ("device_id",)

    def __init__(self, device_id: int, device: DeviceScope | None = None) -> None:
        self.device_id = device_id
        self._own(lambda pointer: None, device, kind="")

    def bind(self, stream: int) -> int:
        """Point the handle at ``stream`` (a ``cudaStream_t`` address) and return the handle address."""
        pointer = self.pointer
        _lib.set_stream(pointer, stream)
        return pointer


def packed_strides(dims: Sequence[int]) -> tuple[int, ...]:
    """C-order strides (in elements) of a packed tensor of shape ``dims``."""
    strides, step = [], 1
    for size in reversed(dims):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class TensorDescriptor(Resource):
    """A ``cudnnTensorDescriptor_t``; packed C-order strides unless given.

    ``TensorDescriptor(None)`` is left unset, for cuDNN to fill (cudnnGetRNNWeightParams).
    """

    __slots__ = ("data_type", "dims", "strides")

    def __init__(self, data_type: _lib.DataType | None, dims: Sequence[int] = (),
                 strides: Sequence[int] | None = None, *, device: DeviceScope | None = None) -> None:
        self.data_type = data_type
        self.dims = tuple(int(d) for d in dims)
        self.strides = tuple(strides) if strides is not None else packed_strides(self.dims)

        def setup(pointer: int) -> None:
            if data_type is not None:
                _lib.set_tensor_nd(pointer, data_type, self.dims, self.strides)

        self._own(setup, device)

    def read(self) -> tuple[_lib.DataType, tuple[int, ...], tuple[int, ...]]:
        """What cuDNN holds now: (data type, dims, strides)."""
        return _lib.get_tensor_nd(self.pointer)


class DropoutDescriptor(Resource):
    """A ``cudnnDropoutDescriptor_t`` set with cudnnSetDropoutDescriptor.

    With ``probability > 0`` cuDNN initialises the RNG ``states`` buffer (device memory of
    :func:`_lib.dropout_states_size` bytes, owned by the caller) from ``seed`` on the handle's current
    stream; with ``probability == 0`` no states are needed (address 0). Only :meth:`reseed` changes it.
    """

    __slots__ = ("probability", "seed", "states", "states_size")

    def __init__(self, handle: int, probability: float, states: int, states_size: int, seed: int, *,
                 device: DeviceScope | None = None) -> None:
        self.probability, self.seed, self.states, self.states_size = probability, seed, states, states_size
        self._own(lambda p: _lib.set_dropout(p, handle, probability, states, states_size, seed), device)

    def reseed(self, handle: int, seed: int) -> None:
        """Initialise the states from ``seed`` (cudnnSetDropoutDescriptor again, on the handle's stream)."""
        _lib.set_dropout(self.pointer, handle, self.probability, self.states, self.states_size, seed)
        self.seed = seed


class RNNDescriptor(Resource):
    """A ``cudnnRNNDescriptor_t`` set with cudnnSetRNNDescriptor_v8 (all host-side)."""

    __slots__ = ("fields",)

    def __init__(self, fields: _lib.RNNDescriptorFields, *, device: DeviceScope | None = None) -> None:
        self.fields = fields
        self._own(lambda p: _lib.set_rnn_descriptor(p, fields), device)

    def read(self) -> _lib.RNNDescriptorFields:
        """What cuDNN holds now (cudnnGetRNNDescriptor_v8)."""
        return _lib.get_rnn_descriptor(self.pointer)


class RNNDataDescriptor(Resource):
    """A ``cudnnRNNDataDescriptor_t`` set with cudnnSetRNNDataDescriptor (all host-side)."""

    __slots__ = ("fields",)

    def __init__(self, fields: _lib.RNNDataFields, *, device: DeviceScope | None = None) -> None:
        self.fields = fields
        self._own(lambda p: _lib.set_rnn_data_descriptor(p, fields), device)

    def read(self) -> _lib.RNNDataFields:
        """What cuDNN holds now (cudnnGetRNNDataDescriptor)."""
        return _lib.get_rnn_data_descriptor(self.pointer, self.fields.batch_size)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """A bounded map keyed by value that owns its values: evicted or cleared values are closed.

    Not thread-safe: each (device, thread) has its own caches, so none is shared.

    Args:
        maxsize: the most values kept (>= 1); the least recently used goes first.
        close: how to free a value (default: its ``close()``).
    """

    def __init__(self, maxsize: int, close: Callable[[V], None] | None = None) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1; got {maxsize}")
        self.maxsize = maxsize
        self._close = close or (lambda value: value.close())  # type: ignore[attr-defined]
        self._entries: collections.OrderedDict[K, V] = collections.OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def get(self, key: K, create: Callable[[], V]) -> V:
        """The value for ``key``, made by ``create()`` on a miss (nothing is stored if it raises)."""
        entries = self._entries
        if key in entries:
            entries.move_to_end(key)
            self.hits += 1
            return entries[key]
        self.misses += 1
        value = create()
        entries[key] = value
        while len(entries) > self.maxsize:
            _, oldest = entries.popitem(last=False)
            self.evictions += 1
            self._close(oldest)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> list[K]:
        """Keys from least to most recently used."""
        return list(self._entries)

    def values(self) -> list[V]:
        """Values from least to most recently used."""
        return list(self._entries.values())

    def clear(self) -> None:
        """Close every value and forget it."""
        while self._entries:
            _, value = self._entries.popitem(last=False)
            self._close(value)
