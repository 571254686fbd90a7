"""The cuDNN backend's cached objects, per (device, thread), so no cuDNN object is ever shared between threads::

    _Context   (device, thread)        the cuDNN handle, bound to the call's stream at every call
    Network    a NetworkKey            RNN descriptor, dropout descriptor and its RNG state
    BatchPlan  (T, B, layout, lengths) descriptors, sizes and one device block (its docstring says which)

Each cache is a bounded LRU (:data:`NETWORK_CACHE_SIZE` networks per context, :data:`PLAN_CACHE_SIZE` plans
per network) that closes what it evicts; :func:`clear_caches` closes everything of the calling thread. Every
cuDNN object is destroyed with its own GPU current, also by the garbage collector. A new network checks the
params layout against cuDNN once (``_weight_space``); a new plan uploads its block without waiting. Dropout
state: :class:`_DropoutState`; the algorithm a call runs and what a refusal does: :meth:`_Context.network_and_plan`.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

import numpy as np

from .. import _reserve
from ..config import LayoutKey, RNNConfig, numpy_dtype
from ..errors import CudnnError
from ..layout import params_size
from . import _lib
from ._descriptors import (DropoutDescriptor, Handle, LRUCache, Resource, RNNDataDescriptor, RNNDescriptor,
                           TensorDescriptor, live_counts)
from ._dropout_rng import DropoutRNG, device_identity
from ._lib import ForwardMode, MathType
from ._settings import DATA_LAYOUTS, PRECISIONS, choose_algo, current_math_type, rnn_fields
from ._streams import DeviceBuffers, copy, device_scope, import_cupy
from ._weight_space import layout_differences

__all__ = ["NETWORK_CACHE_SIZE", "PLAN_CACHE_SIZE", "NetworkKey", "Network", "BatchPlan", "thread_context",
           "clear_caches", "cache_info"]

NETWORK_CACHE_SIZE = 32  # per (device, thread)
PLAN_CACHE_SIZE = 32     # per network

_D = TypeVar("_D", bound=Resource)

_ALIGN = 16  # bytes: where each part of a plan's device block begins


def _upload(arrays: Sequence[np.ndarray | None]) -> tuple[Any, list[Any]]:
    """Host ``arrays`` packed into one uint8 block, each at an :data:`_ALIGN` boundary, uploaded with one
    asynchronous copy: (the device block, a view of it per array, None for None)."""
    parts = [None if array is None else np.ascontiguousarray(array) for array in arrays]
    offsets, size = [], 0
    for part in parts:
        offsets.append(size)
        if part is not None:
            size = -(-(size + part.nbytes) // _ALIGN) * _ALIGN
    packed = np.zeros(max(size, _ALIGN), dtype=np.uint8)
    for offset, part in zip(offsets, parts):
        if part is not None:
            packed[offset:offset + part.nbytes] = part.reshape(-1).view(np.uint8)
    block = import_cupy().asarray(packed)
    return block, [None if part is None else block[offset:offset + part.nbytes].view(part.dtype).reshape(part.shape)
                   for offset, part in zip(offsets, parts)]


class _DropoutState:
    """One network's dropout descriptor and the RNG state behind it.

    cuDNN draws masks from ``working`` (device memory) and advances it. With p > 0, before each
    training forward, either

    * :meth:`rewind` (an op call, whose masks depend only on its seeds) puts a seed's initial state
      back: a copy of ``pristine`` for the seed set up last, else the descriptor is re-seeded (cuRAND's
      set-up) and a new pristine copy kept, so a loop whose seed changes reuses descriptors and plans;
    * or :meth:`restore` (a layer's call) copies the layer's own advanced state in, and :meth:`keep`
      copies it back out after the forward (``_dropout_rng``).

    Both halves live in one block; ``buffers`` orders the streams that use it.
    """

    def __init__(self, device_id: int, handle: int, probability: float, seed: int, stream: Any) -> None:
        cupy = import_cupy()
        device = device_scope(device_id)
        self.device_id = device_id
        self.working = self.pristine = self.buffers = None
        self.identity = ""  # the GPU model, cuDNN version and state size a layer's saved state must match
        if probability == 0.0:
            self.descriptor = DropoutDescriptor(handle, 0.0, 0, 0, 0, device=device)
            return
        size = _lib.dropout_states_size(handle)
        block = cupy.empty(2 * size, dtype=cupy.uint8)
        self.working, self.pristine = block[:size], block[size:]
        self.descriptor = DropoutDescriptor(handle, probability, self.working.data.ptr, size, seed, device=device)
        copy(self.pristine, self.working, stream)  # same stream: ordered after cuDNN's initialisation
        self.buffers = DeviceBuffers(device_id, stream, block)
        self.identity = device_identity(device_id, size, _lib.library().version)

    def rewind(self, handle: int, stream: Any, seed: int) -> None:
        """Put the initial RNG state of ``seed`` in place, in order on ``stream`` (the handle's stream)."""
        if self.buffers is None:
            return
        self.buffers.use(stream, exclusive=True)
        if seed == self.descriptor.seed:
            copy(self.working, self.pristine, stream)
        else:
            self.descriptor.reseed(handle, seed)
            copy(self.pristine, self.working, stream)

    def restore(self, handle: int, stream: Any, rng: DropoutRNG, seed: int) -> None:
        """Put the layer RNG ``rng``'s state in place, in order on ``stream``; at its first use here, ``seed``'s."""
        if self.buffers is None:
            return
        states = rng.restorable(self.device_id, self.identity, stream)
        if states is None:
            self.rewind(handle, stream, seed)  # cuRAND's set-up: once per layer and GPU
            return
        self.buffers.use(stream, exclusive=True)
        copy(self.working, states, stream)

    def keep(self, stream: Any, rng: DropoutRNG) -> None:
        """After a training forward that :meth:`restore` prepared: the advanced state goes back to ``rng``."""
        if self.buffers is not None:
            rng.keep(self.device_id, self.identity, self.working, stream)

    def close(self) -> None:
        self.descriptor.close()
        if self.buffers is not None:
            self.buffers.close()
        self.working = self.pristine = self.buffers = None


class BatchPlan:
    """Everything one batch shape (T, B, layout, lengths) of a network needs: descriptors, sizes, one device block.

    cuDNN rejects length 0, so such rows run with length 1 (``zero_rows`` lists them for the caller
    to patch). ``padded`` tells whether any row is shorter than T; then ``valid`` is the mask
    t < len[b], [T, B, 1] (time-major) or [B, T, 1], and ``zero`` a 0-d zero of the dtype. ``header``
    is this shape's reserve header (without seeds, so one plan serves every seed). ``dev_lengths``
    (devSeqLengths), ``zero_rows``, ``header``, ``valid`` and ``zero`` are views of one block, uploaded
    with one asynchronous copy on the stream that builds the plan.
    """

    def __init__(self, device_id: int, handle: int, network: "Network", max_time: int, batch: int,
                 time_major: bool, lengths: np.ndarray, stream: Any) -> None:
        config = network.config
        device = device_scope(device_id)
        data_type = PRECISIONS[config.dtype].data_type
        run_lengths = np.maximum(lengths, 1).astype(np.int32)
        seq_lengths = tuple(int(n) for n in run_lengths)
        layout = DATA_LAYOUTS[time_major]
        self._descriptors: list[Resource] = []  # every descriptor made so far: close() closes them
        try:
            self.x_desc, self.y_desc = (self._own(RNNDataDescriptor(_lib.RNNDataFields(
                data_type, layout, max_time, batch, size, seq_lengths, 0.0), device=device))
                for size in (config.input_size, config.output_size))
            self.h_desc = self._own(TensorDescriptor(data_type, (config.num_pseudo_layers, batch, config.state_size),
                                                     device=device))
            self.c_desc = self._own(TensorDescriptor(data_type, (config.num_pseudo_layers, batch, config.num_units),
                                                     device=device)) if config.has_cell else None
            rnn = network.rnn.pointer
            self.inference_workspace, _ = _lib.rnn_temp_space_sizes(
                handle, rnn, ForwardMode.INFERENCE, self.x_desc.pointer)
            self.training_workspace, self.reserve_size = _lib.rnn_temp_space_sizes(
                handle, rnn, ForwardMode.TRAINING, self.x_desc.pointer)
            self.c_pointer = (self.c_desc or self.h_desc).pointer
            self.padded = bool((lengths < max_time).any())
            zero_rows = np.flatnonzero(lengths == 0).astype(np.int32)
            valid = np.arange(max_time)[:, None] < lengths[None, :]  # [T, B]
            header = _reserve.header(_reserve.ForwardKey("cudnn", config, max_time, batch, time_major, lengths))
            block, views = _upload((run_lengths, zero_rows if zero_rows.size else None, header,
                                    (valid if time_major else valid.T)[:, :, None] if self.padded else None,
                                    np.zeros((), dtype=numpy_dtype(config.dtype))))
            self.dev_lengths, self.zero_rows, self.header, self.valid, self.zero = views
            self.buffers = DeviceBuffers(device_id, stream, block)
        except BaseException:
            self.close()
            raise

    def _own(self, descriptor: _D) -> _D:
        """Keep ``descriptor`` for :meth:`close` and return it."""
        self._descriptors.append(descriptor)
        return descriptor

    def close(self) -> None:
        """Close the descriptors and release the device block (idempotent)."""
        for descriptor in self._descriptors:
            descriptor.close()
        buffers: DeviceBuffers | None = getattr(self, "buffers", None)  # absent when the constructor failed
        if buffers is not None:
            buffers.close()
        self.dev_lengths = self.zero_rows = self.header = self.valid = self.zero = None


class Network:
    """One RNN descriptor with its dropout state, and the LRU of its plans."""

    def __init__(self, device_id: int, handle: int, config: RNNConfig, key: "NetworkKey", seed: int,
                 stream: Any) -> None:
        self.device_id = device_id
        self.config = config
        self.plans: LRUCache[tuple[int, int, bool, bytes], BatchPlan] = LRUCache(PLAN_CACHE_SIZE)
        self.dropout = _DropoutState(device_id, handle, key.dropout, seed, stream)
        try:
            self.rnn = RNNDescriptor(rnn_fields(config, key.algo, key.math_type, self.dropout.descriptor.pointer),
                                     device=device_scope(device_id))
            if key.dynamic_batch:
                _lib.build_rnn_dynamic(handle, self.rnn.pointer, key.dynamic_batch)
            differences = layout_differences(handle, self.rnn, config)
        except BaseException:
            self.close()
            raise
        if differences:
            self.close()
            raise RuntimeError("the params layout table disagrees with cuDNN for "
                               f"{config}:\n  " + "\n  ".join(differences) +
                               "\nRun scripts/check_layout.py and settle layout.UNCONFIRMED.")
        self.weight_space_size = params_size(config) * numpy_dtype(config.dtype).itemsize

    def plan(self, handle: int, max_time: int, batch: int, time_major: bool, lengths: np.ndarray,
             stream: Any) -> BatchPlan:
        key = (max_time, batch, time_major, lengths.tobytes())
        return self.plans.get(key, lambda: BatchPlan(self.device_id, handle, self, max_time, batch, time_major,
                                                     lengths, stream))

    def close(self) -> None:
        self.plans.clear()
        rnn: RNNDescriptor | None = getattr(self, "rnn", None)  # absent when the constructor failed to make it
        if rnn is not None:
            rnn.close()
        self.dropout.close()


@dataclass(frozen=True)
class NetworkKey:
    """What one cached network is built for: calls that agree on all of it share the network."""

    layout: LayoutKey     # config.layout_key: the fields that shape the params
    dtype: str
    math_type: MathType   # the dtype's, with TF32 allowed or not when the network was asked for
    dropout: float        # the probability that acts: the inter-layer dropout in training, else 0.0
    requested_algo: str   # config.algo (part of the reserve's header, so "auto" and a name never share)
    algo: str             # the algorithm the network runs (choose_algo, or "standard" after a refusal)
    dynamic_batch: int    # the batch size persist_dynamic is built for; 0 for the other algorithms

    @classmethod
    def of(cls, config: RNNConfig, training: bool, algo: str, batch: int) -> "NetworkKey":
        # The seed is not part of the key: _DropoutState.rewind applies it to the network's state.
        dropout = config.inter_layer_dropout if training else 0.0
        return cls(config.layout_key, config.dtype, current_math_type(config.dtype), dropout, config.algo, algo,
                   batch if algo == "persist_dynamic" else 0)


class _Context:
    """The cuDNN handle of one (device, thread) and the LRU of its networks."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.handle = Handle(device_id, device_scope(device_id))
        self.networks: LRUCache[NetworkKey, Network] = LRUCache(NETWORK_CACHE_SIZE)
        self.refused: set[NetworkKey] = set()  # persistent networks cuDNN refused for algo="auto"

    def network_and_plan(self, config: RNNConfig, training: bool, stream: Any, max_time: int, batch: int,
                         time_major: bool, lengths: np.ndarray) -> tuple["Network", BatchPlan]:
        """The network and plan of a call on ``stream``, on the algorithm :func:`choose_algo` gives it.

        Binds the handle to ``stream`` first, so that what cuDNN does while building them (the
        dropout states' cuRAND set-up) is ordered on the stream that copies and uses them.

        A persistent algorithm that ``"auto"`` chose and cuDNN refuses (building the network or
        the plan) is remembered, and the call runs the standard algorithm; a persistent algorithm
        named in ``config.algo`` is never replaced: cuDNN's refusal is raised with its name.
        """
        def built(key: NetworkKey) -> tuple[Network, BatchPlan]:
            network = self.networks.get(key, lambda: Network(self.device_id, self.handle.pointer, config, key,
                                                             config.seed64, stream))
            return network, network.plan(self.handle.pointer, max_time, batch, time_major, lengths, stream)

        self.handle.bind(stream.ptr)
        algo = choose_algo(config, batch, bool(lengths.min() == lengths.max() >= 1), time_major)
        key = NetworkKey.of(config, training, algo, batch)
        if algo != "standard" and key not in self.refused:
            try:
                return built(key)
            except CudnnError as error:
                if config.algo != "auto":
                    raise CudnnError(error.status_name, error.status, error.function,
                                     f"{error.detail} [cuDNN refused algo={algo!r} for this call; "
                                     "algo='standard' runs every configuration]".lstrip()) from error
                self.refused.add(key)
        return built(NetworkKey.of(config, training, "standard", batch))

    def close(self) -> None:
        self.networks.clear()
        self.handle.close()


#: At most this many threads that Python did not start keep contexts (see :func:`_contexts`).
MAX_FOREIGN_THREADS = 64

#: thread identity (``threading.get_ident()``) -> that thread's contexts, by device
_by_thread: dict[int, dict[int, _Context]] = {}
#: the identities in ``_by_thread`` of threads that Python did not start
_foreign_threads: set[int] = set()
_by_thread_lock = threading.Lock()
#: ``ends``, in a thread Python started: collected when the thread ends, which drops the thread's contexts
_local = threading.local()


class _ThreadEnd:
    """Held in a Python thread's ``threading.local``: collected when the thread ends, it drops thread ``ident``'s
    contexts (at exit, the interpreter's teardown frees them instead)."""

    def __init__(self, ident: int) -> None:
        self.finalizer = weakref.finalize(self, _forget, ident)
        self.finalizer.atexit = False


def _forget(ident: int) -> None:
    """Drop thread ``ident``'s contexts without closing them: their finalizers close each on its own device."""
    with _by_thread_lock:
        _by_thread.pop(ident, None)
        _foreign_threads.discard(ident)


def _started_by_python() -> bool:
    """Whether the calling thread is one that Python started (``threading`` makes a dummy for any other)."""
    return not isinstance(threading.current_thread(), threading._DummyThread)


def _contexts() -> dict[int, _Context]:
    """The calling thread's contexts, by device.

    Keyed by the thread's identity rather than held in a ``threading.local``: a thread that Python did not
    start (XLA's workers, which call ``cudnn_rnn.jax``'s handler) gets an empty ``threading.local`` at every
    call, which would build a handle and destroy it (cudnnDestroy waits for the whole device) every call. A
    Python thread's contexts are dropped when it ends; those of the others (a pool's, as long-lived as the
    process) stay, for at most :data:`MAX_FOREIGN_THREADS` threads, beyond which each call gets contexts of
    its own. A reused identity belongs to a thread that has ended, so no two live threads share a context.
    """
    ident = threading.get_ident()
    contexts = _by_thread.get(ident)
    if contexts is not None:
        return contexts
    foreign = not _started_by_python()
    with _by_thread_lock:
        if foreign and len(_foreign_threads) >= MAX_FOREIGN_THREADS:
            return {}
        contexts = _by_thread.setdefault(ident, {})
        if foreign:
            _foreign_threads.add(ident)
    if not foreign:
        previous: _ThreadEnd | None = getattr(_local, "ends", None)
        if previous is not None:  # its contexts were dropped while the thread lived on
            previous.finalizer.detach()
        _local.ends = _ThreadEnd(ident)
    return contexts


def thread_context(device_id: int) -> _Context:
    """The calling thread's context for ``device_id`` (which must be the current device)."""
    contexts = _contexts()
    context = contexts.get(device_id)
    if context is None:
        context = contexts[device_id] = _Context(device_id)
    return context


def clear_caches() -> None:
    """Close every cached cuDNN object of the calling thread (handles, networks, plans), on all devices.

    Other threads keep theirs (they may be using them); each thread's objects are also freed
    when the thread ends.
    """
    contexts = _by_thread.get(threading.get_ident())
    if not contexts:
        return
    for device_id, context in list(contexts.items()):
        with device_scope(device_id)():
            context.close()
        del contexts[device_id]


def cache_info() -> dict[str, Any]:
    """Cached ``networks`` and ``plans`` of the calling thread, and open cuDNN objects of all threads (``live``)."""
    contexts = _by_thread.get(threading.get_ident(), {})
    networks = [network for context in contexts.values() for network in context.networks.values()]
    return {"devices": sorted(contexts), "networks": len(networks),
            "plans": sum(len(network.plans) for network in networks), "live": live_counts()}
