"""CuPy, devices and stream ordering for the cuDNN backend's cached device arrays.

A plan's block and a dropout state may be used from several streams of the thread: :class:`DeviceBuffers`
orders them, and :func:`keeping_buffers_alive` keeps them for a CUDA graph being recorded.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import Any, Iterator

from ..errors import CudnnNotAvailableError
from . import _lib
from ._descriptors import DeviceScope

__all__ = ["import_cupy", "device_scope", "device_name", "external_stream", "copy", "DeviceBuffers",
           "keeping_buffers_alive"]

#: ``kept``: the list :func:`keeping_buffers_alive` collects into on this thread, if any
_local = threading.local()


def import_cupy() -> Any:
    """CuPy, or CudnnNotAvailableError saying what to install."""
    try:
        import cupy
    except ImportError as error:
        raise CudnnNotAvailableError(f"the cuDNN backend needs CuPy: {error}. {_lib.INSTALL_HINT}") from error
    return cupy


def device_scope(device_id: int) -> DeviceScope:
    """Makes ``device_id`` current while used as ``with scope(): ...`` (see ``_descriptors``)."""
    return functools.partial(import_cupy().cuda.Device, device_id)


def device_name(device_id: int) -> str:
    """The name of GPU ``device_id`` (CUDA's device properties, through CuPy), e.g. ``"NVIDIA H100 80GB HBM3"``."""
    name = import_cupy().cuda.runtime.getDeviceProperties(device_id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


class _ForeignStream:
    """A ``cudaStream_t`` address as the CUDA stream protocol's object (``__cuda_stream__``: version 0, address)."""

    def __init__(self, pointer: int) -> None:
        self.pointer = pointer

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.pointer


def external_stream(pointer: int, device_id: int) -> Any:
    """CuPy's stream object for the CUDA stream at ``pointer``, which another framework owns, on GPU ``device_id``.

    ``with external_stream(pointer, device_id): ...`` (inside ``cupy.cuda.Device(device_id)``) makes it CuPy's
    current stream. CuPy 14 takes such a stream through the CUDA stream protocol (``Stream.from_external``) and
    deprecates ``ExternalStream``, which older CuPy has alone.
    """
    cupy = import_cupy()
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is None:  # CuPy < 14
        return cupy.cuda.ExternalStream(pointer, device_id)
    return from_external(_ForeignStream(pointer))


def _wait(stream: Any, other: Any) -> None:
    """Make ``stream`` wait for everything enqueued on ``other`` so far (an event recorded now)."""
    event = import_cupy().cuda.Event(disable_timing=True)
    event.record(other)
    stream.wait_event(event)


def copy(destination: Any, source: Any, stream: Any) -> None:
    """Device-to-device copy of all of ``source`` into ``destination``, in order on ``stream``."""
    destination.data.copy_from_device_async(source.data, source.nbytes, stream)


class DeviceBuffers:
    """Cached device arrays (a plan's block, a dropout state) and the streams that use them.

    ``home`` is the stream that allocated and filled them; CuPy's pool hands a freed block back
    to that stream's arena. So that no stream sees the arrays half-written or reused:

    * :meth:`use` (reads): the first use on another stream waits for home, where the contents
      may still be in flight;
    * ``use(stream, exclusive=True)`` (cuDNN advances a dropout state in place): a use on a stream
      other than the previous one waits for that one;
    * release (:meth:`close`, or the garbage collector, from any thread): home waits for every
      other stream that used the arrays, then they go back to the pool.

    Each wait records an event on the awaited stream at that moment, ordering it after every use
    already enqueued there; every use was enqueued before, since a cache belongs to one thread.
    A single stream never records an event, so a CUDA graph recorded on the stream that built
    the caches contains none.
    """

    def __init__(self, device_id: int, stream: Any, *arrays: Any) -> None:
        self.arrays = arrays
        self._home = self._last = stream
        self._users: dict[int, Any] = {}  # streams other than home that used the arrays, by address
        self._finalizer = weakref.finalize(self, _release_buffers, device_id, stream, self._users, list(arrays))
        self._finalizer.atexit = False  # the CUDA context may be gone at exit

    def use(self, stream: Any, exclusive: bool = False) -> None:
        """Order a read on ``stream`` (the current stream of the arrays' device), or a read-write use after the
        previous one (which waited for home); keep the arrays for a CUDA graph being recorded."""
        if exclusive and stream.ptr != self._last.ptr:
            _wait(stream, self._last)
            self._last = stream
        elif not exclusive and stream.ptr != self._home.ptr and stream.ptr not in self._users:
            _wait(stream, self._home)
        if stream.ptr != self._home.ptr:
            self._users[stream.ptr] = stream
        kept = getattr(_local, "kept", None)
        if kept is not None:
            kept.extend(self.arrays)

    def close(self) -> None:
        """Release the arrays (idempotent): home waits for the other streams, then they are dropped."""
        self._finalizer()
        self.arrays = ()


def _release_buffers(device_id: int, home: Any, users: dict[int, Any], arrays: list[Any]) -> None:
    if users:
        with import_cupy().cuda.Device(device_id):
            for stream in users.values():
                _wait(home, stream)
    users.clear()
    arrays.clear()  # the last references: the memory returns to the pool after the waits


@contextlib.contextmanager
def keeping_buffers_alive() -> Iterator[list[Any]]:
    """While inside (on this thread), the cached device arrays every :meth:`DeviceBuffers.use` sees are added to
    the yielded list, so that whoever holds the list keeps them: a CUDA graph recorded meanwhile
    reads them on every replay, even after their plan leaves the cache."""
    previous = getattr(_local, "kept", None)
    kept: list[Any] = []
    _local.kept = kept
    try:
        yield kept
    finally:
        _local.kept = previous
