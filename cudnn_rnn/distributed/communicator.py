"""The communicator: :func:`init` and :class:`Communicator`.

Data flow of one collective over a list of arrays (all ranks pass the same shapes and dtypes)::

    arrays --(first use of this set: validate, gather every rank's signature, compare)--> plan
    plan:  arrays back to back in one buffer?  yes -> reduce/broadcast that buffer in place
                                               no  -> copy into the plan's buffer, one message
                                                      per dtype, copy back
    NumPy arrays -> MPI;  CuPy arrays -> NCCL (backend "nccl") or MPI through host memory ("mpi")
"""

from __future__ import annotations

import types
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, TypeAlias

import numpy as np

from .._arrays import Array, array_kind, array_module, device_of, on_device
from .._checks import choice
from .._dtypes import TABLE
from ._devices import check_one_gpu_per_process
from ._mpi import MpiTransport, install_abort_hook, load_mpi
from ._nccl import NcclTransport, probe_gpu
from ._packing import PackLayout, Signature, contiguous_span, mismatch_message, signature_of
from ._threads import share_host_threads

__all__ = ["init", "Communicator", "Transport", "BACKENDS"]

#: the values of ``init(backend=...)``
BACKENDS = ("auto", "mpi", "nccl")

#: dtypes allreduce_mean takes (a mean of integers is not an integer)
REDUCIBLE_DTYPES = tuple(dtype.name for dtype in TABLE if dtype.params and dtype.nccl)

#: dtype kinds broadcast takes: bool, signed, unsigned, float, complex
BROADCAST_KINDS = "biufc"

#: plans (one per set of shapes and dtypes, with its buffer) kept per communicator
PLAN_CACHE_SIZE = 16

#: recent calls (one per list of array objects) kept per communicator, found by the arrays' ids
CALL_CACHE_SIZE = 16

#: exception types a rank's refused call is raised as on every rank
_ERRORS: dict[str, type[Exception]] = {"TypeError": TypeError, "ValueError": ValueError}

#: a recent call, found by (operation, root, the id of each array)
_CallKey: TypeAlias = tuple[str | int | None, ...]

#: a plan, found by (operation, root, the arrays' signature)
_PlanKey: TypeAlias = tuple[str, int | None, Signature]


class Transport(Protocol):
    """What moves a collective's bytes between the ranks of a :class:`Communicator`; :func:`init` makes them.

    Two kinds exist: ``MpiTransport`` (NumPy buffers as they are, CuPy buffers staged through host
    memory) and ``NcclTransport`` (CuPy buffers on this process's GPU, queued on CuPy's current
    stream). Every method is collective: all ranks call it, with buffers of one size and dtype.

    Attributes:
        name: ``"mpi"`` or ``"nccl"``.
    """

    name: str

    def allreduce_sum(self, flat: Array) -> None:
        """Replace ``flat`` by the element-wise sum of every rank's ``flat``, in place.

        Args:
            flat: a 1-D C-contiguous buffer ``[n]`` of float16, float32 or float64 (NumPy or CuPy).
        """

    def broadcast(self, flat_bytes: Array, root: int) -> None:
        """Overwrite ``flat_bytes`` with rank ``root``'s, in place.

        Args:
            flat_bytes: a 1-D C-contiguous uint8 buffer ``[nbytes]`` (NumPy or CuPy).
            root: the rank whose bytes every rank gets, in ``[0, size)``.
        """

    def close(self) -> None:
        """Release what the transport holds (a NCCL communicator, a staging buffer); idempotent."""


@dataclass
class _PackPlan:
    """One set of shapes and dtypes: its layout, and its buffer once a call needs one."""

    layout: PackLayout
    xp: types.ModuleType
    transport: Transport
    _packed: tuple[Array, list[Array], list[Array]] | None = None

    def packed(self, device: int | None) -> tuple[Array, list[Array], list[Array]]:
        """(buffer, per-array views, per-group views), allocated at first use on ``device``."""
        if self._packed is None:
            with on_device(device):
                buffer = self.layout.allocate(self.xp)
            self._packed = buffer, self.layout.slot_views(buffer), self.layout.group_views(buffer)
        return self._packed


@dataclass(frozen=True)
class _RecentCall:
    """A recent call: its arrays (held, so their ids stay theirs), its plan, and their one-buffer span."""

    arrays: tuple[Array, ...]
    plan: _PackPlan
    span: Array | None


class Communicator:
    """A group of processes that average gradients and share parameters; made by :func:`init`.

    ``Communicator()`` with no arguments is one process alone, whose collectives only validate
    their arguments (what :func:`init` returns without ``mpiexec``); :func:`init` passes the rest.
    The communicator owns the MPI communicators it is given: :meth:`close` frees them.

    ``rank``, ``size``, ``local_rank``, ``local_size``, ``backend`` and ``device`` are kept as the
    attributes of those names.

    Args:
        rank: this process's rank in ``[0, size)``.
        size: the number of processes.
        local_rank: its rank among the processes on its node (from MPI's shared-memory split).
        local_size: the number of processes on its node.
        backend: what carries CuPy arrays: ``"nccl"``, ``"mpi"`` (through host memory), or
            ``"single"`` for one process that communicates nothing. NumPy arrays always go over MPI.
        device: the GPU this process took under NCCL, else None.
        mpi_comm: the job's ``mpi4py`` communicator (a duplicate of ``COMM_WORLD``); None for one process.
        node_comm: the ``mpi4py`` communicator of this node's processes; None for one process.
        host_transport: what carries NumPy arrays (MPI); None for one process.
        device_transport: what carries CuPy arrays (NCCL, or MPI through host memory); None for one process.
    """

    def __init__(self, *, rank: int = 0, size: int = 1, local_rank: int = 0, local_size: int = 1,
                 backend: str = "single", device: int | None = None, mpi_comm: Any = None, node_comm: Any = None,
                 host_transport: Transport | None = None, device_transport: Transport | None = None) -> None:
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size
        self.backend = backend
        self.device = device
        self._mpi_comm, self._node_comm = mpi_comm, node_comm
        self._transports: dict[str, Transport] = {
            kind: transport for kind, transport in (("numpy", host_transport), ("cupy", device_transport))
            if transport is not None}
        self._plans: OrderedDict[_PlanKey, _PackPlan] = OrderedDict()
        self._calls: OrderedDict[_CallKey, _RecentCall] = OrderedDict()
        self._closed = False

    # -- collectives ------------------------------------------------------------------------------
    def allreduce_mean(self, arrays: Sequence[Array]) -> None:
        """Replace every array by its mean over the ranks, in place: ``a <- (a_0 + ... + a_{size-1}) / size``.

        Args:
            arrays: a list of float16/32/64 NumPy or CuPy arrays, all of one kind; every rank
                passes the same shapes and dtypes in the same order. Arrays of one dtype travel
                as one message (one per dtype); arrays already back to back in one buffer
                (:func:`fuse_arrays`) are reduced where they lie.

        Raises:
            TypeError: not a list of arrays, mixed NumPy and CuPy, or a non-float dtype.
            ValueError: ranks passed different shapes or dtypes (raised on every rank), a read-only
                NumPy array, or arrays on another GPU than this process's NCCL device.
            RuntimeError: the communicator is closed.
        """
        call = self._prepare("allreduce_mean", arrays, None)
        if call is None:
            return
        plan, span = call.plan, call.span
        if span is not None:
            plan.transport.allreduce_sum(span)
            _divide_into(plan.xp, span, self.size, span)
            return
        _, views, groups = plan.packed(self._device_of(arrays))
        for view, array in zip(views, arrays):
            view[...] = array
        for group in groups:
            if group.size:
                plan.transport.allreduce_sum(group)
        for view, array in zip(views, arrays):
            _divide_into(plan.xp, view, self.size, array)

    def broadcast(self, arrays: Sequence[Array], root: int = 0) -> None:
        """Copy rank ``root``'s arrays into every rank's, in place (bit for bit), as one message.

        Args:
            arrays: a list of NumPy or CuPy arrays of any shapes (bool, integer, float or complex),
                all of one kind; every rank passes the same shapes and dtypes in the same order.
            root: the rank whose values every rank gets, in ``[0, size)``; the same on every rank.

        Raises:
            TypeError: not a list of arrays, mixed NumPy and CuPy, another dtype kind, or a root
                that is not an int.
            ValueError: ranks passed different shapes, dtypes or roots (raised on every rank), a
                root outside ``[0, size)``, a read-only NumPy array, or arrays on another GPU than
                this process's NCCL device.
            RuntimeError: the communicator is closed.
        """
        call = self._prepare("broadcast", arrays, root)
        if call is None or not call.plan.layout.nbytes:
            return
        plan, span = call.plan, call.span
        if span is not None:
            plan.transport.broadcast(span.view(np.uint8), root)
            return
        buffer, views, _ = plan.packed(self._device_of(arrays))
        if self.rank == root:
            for view, array in zip(views, arrays):
                view[...] = array
        plan.transport.broadcast(buffer[:plan.layout.data_nbytes], root)  # the size a span sends, no padding
        if self.rank != root:
            for view, array in zip(views, arrays):
                array[...] = view

    def barrier(self) -> None:
        """Wait until every rank has called barrier (host-side; queued GPU work is not waited for).

        Raises:
            RuntimeError: the communicator is closed.
        """
        self._check_open()
        if self._mpi_comm is not None:
            self._mpi_comm.Barrier()

    def shard(self, batch: Any, axis: int = 0) -> Any:
        """This rank's equal share of a global batch: rows [rank * n/size, (rank + 1) * n/size) along ``axis``.

        With every rank drawing the same global batch and each training on its shard, the mean
        of the shard gradients (:meth:`allreduce_mean`) is the gradient of the global batch.

        Args:
            batch: an array ``[..., n, ...]`` (NumPy, CuPy, or anything with ``shape`` that takes
                a tuple of slices as index) with ``n`` along ``axis``, or a sequence of ``n`` items
                (a list: ``axis`` is then not used).
            axis: the batch axis of an array.

        Returns:
            The shard, ``[..., n / size, ...]`` (a view for an array, a new list for a list).

        Raises:
            ValueError: the batch's length along ``axis`` is not a multiple of ``size``.
        """
        shape = getattr(batch, "shape", None)
        length = shape[axis] if shape is not None else len(batch)
        if length % self.size:
            raise ValueError(f"batch: the global batch of {length} along axis {axis} must split evenly over "
                             f"{self.size} processes; use a multiple of {self.size}")
        share = length // self.size
        rows = slice(self.rank * share, (self.rank + 1) * share)
        if shape is None:
            return batch[rows]
        index = [slice(None)] * len(shape)
        index[axis] = rows
        return batch[tuple(index)]

    def close(self) -> None:
        """Release the NCCL communicator, MPI communicators and buffers (idempotent; MPI stays initialised)."""
        if self._closed:
            return
        self._closed = True
        self._plans.clear()
        self._calls.clear()
        for transport in self._transports.values():
            transport.close()
        for comm in (self._node_comm, self._mpi_comm):
            if comm is not None:
                comm.Free()
        self._node_comm = self._mpi_comm = None

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        device = "" if self.device is None else f", device={self.device}"
        state = ", closed" if self._closed else ""
        return (f"Communicator(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
                f"backend={self.backend!r}{device}{state})")

    # -- plans ------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this communicator is closed; make a new one with cudnn_rnn.distributed.init()")

    def _prepare(self, operation: str, arrays: Sequence[Array], root: int | None) -> _RecentCall | None:
        """The plan (and zero-copy span) for this call, or None when there is nothing to send.

        The same array objects as a recent call (the gradients, step after step) reuse its plan
        and span at once, found by their ids. A set of shapes seen for the first time is validated
        and compared across ranks; every rank takes part in that exchange whatever it passed, so a
        refusal is raised on every rank instead of leaving some waiting.
        """
        self._check_open()
        if self._mpi_comm is None:  # one process alone: nothing to send, only the arguments to check
            _validate(operation, arrays, root, self.size, None)
            return None
        key: _CallKey | None = None
        if isinstance(arrays, (list, tuple)) and (root is None or type(root) is int):
            key = (operation, root, *map(id, arrays))
            call = self._calls.get(key)
            if call is not None:
                self._calls.move_to_end(key)
                return call
        plan = self._plan(operation, arrays, root)
        call = _RecentCall(tuple(arrays), plan, contiguous_span(arrays) if arrays else None)
        if key is not None:
            self._calls[key] = call
            if len(self._calls) > CALL_CACHE_SIZE:
                self._calls.popitem(last=False)
        return call

    def _plan(self, operation: str, arrays: Sequence[Array], root: int | None) -> _PackPlan:
        """The cached plan for these shapes and dtypes, made (after the exchange between ranks) on first use."""
        key: _PlanKey | None = None
        if isinstance(arrays, (list, tuple)):
            key = (operation, root, signature_of(arrays))
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        error: tuple[str, str] | None = None  # (exception type name, message) when this rank's call is refused
        try:
            _validate(operation, arrays, root, self.size, self._nccl_device())
        except (TypeError, ValueError) as refused:
            error = type(refused).__name__, str(refused)
        gathered = self._mpi_comm.allgather((key[2] if key is not None and error is None else None, root, error))
        _raise_refusals(gathered, self.rank)
        message = mismatch_message(operation, [(signature, r) for signature, r, _ in gathered])
        if message is not None:
            raise ValueError(message)
        assert key is not None  # a call that passed no list or tuple of arrays was refused above, on every rank
        xp = array_module(**{f"arrays[{i}]": a for i, a in enumerate(arrays)})
        plan = _PackPlan(PackLayout.of(key[2]), xp, self._transports[xp.__name__])
        self._plans[key] = plan
        if len(self._plans) > PLAN_CACHE_SIZE:
            self._plans.popitem(last=False)
        return plan

    def _nccl_device(self) -> int | None:
        transport = self._transports.get("cupy")
        return transport.device if isinstance(transport, NcclTransport) else None

    @staticmethod
    def _device_of(arrays: Sequence[Array]) -> int | None:
        return arrays[0].device.id if arrays and array_kind(arrays[0]) == "cupy" else None


# ---- validation --------------------------------------------------------------------------------
def _validate(operation: str, arrays: Any, root: int | None, size: int, nccl_device: int | None) -> None:
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"{operation}: arrays must be a list of NumPy or CuPy arrays; got {type(arrays).__name__}")
    named = {f"arrays[{i}]": a for i, a in enumerate(arrays)}
    try:
        array_module(**named)  # TypeError for a non-array or a mix of NumPy and CuPy
    except TypeError as error:
        raise TypeError(f"{operation}: {error}") from None
    for name, array in named.items():
        dtype = np.dtype(array.dtype)
        if operation == "allreduce_mean" and dtype.name not in REDUCIBLE_DTYPES:
            raise TypeError(f"{operation}: {name} must be float16, float32 or float64; got {dtype.name}")
        if operation == "broadcast" and dtype.kind not in BROADCAST_KINDS:
            raise TypeError(f"{operation}: {name} must hold bool, integer, float or complex numbers; got {dtype}")
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            raise ValueError(f"{operation}: {name} is read-only; it is written in place")
    if root is not None:
        if isinstance(root, (bool, np.bool_)) or not isinstance(root, (int, np.integer)):
            raise TypeError(f"{operation}: root must be an int; got {type(root).__name__} {root!r}")
        if not 0 <= root < size:
            raise ValueError(f"{operation}: root must be a rank in [0, {size}); got {root}")
    try:
        device = device_of(**named)  # ValueError naming each array's GPU when they differ
    except ValueError as error:
        raise ValueError(f"{operation}: {error}") from None
    if nccl_device is not None and device is not None and device != nccl_device:
        raise ValueError(f"{operation}: the arrays are on GPU {device}, but this process's NCCL communicator runs "
                         f"on GPU {nccl_device} (its local rank's GPU)")


def _raise_refusals(gathered: Sequence[tuple[Any, Any, tuple[str, str] | None]], rank: int) -> None:
    """Raise on every rank when any rank refused its call: its own error, else the first refusing rank's."""
    own = gathered[rank][2]
    if own is not None:
        raise _ERRORS[own[0]](own[1])
    for other, (_, _, error) in enumerate(gathered):
        if error is not None:
            raise _ERRORS[error[0]](f"{error[1]} (refused on rank {other})")


def _divide_into(xp: types.ModuleType, total: Array, size: int, out: Array) -> None:
    """``out <- total / size`` (``* (1/size)`` for a power of two, which is the same number and faster)."""
    if size & (size - 1) == 0:
        xp.multiply(total, 1.0 / size, out=out)
    else:
        xp.divide(total, size, out=out)


def init(backend: str = "auto") -> Communicator:
    """Join the job this process was started in, and return its :class:`Communicator`.

    Without ``mpiexec`` (or without mpi4py, under ``"auto"``) the communicator has size 1 and
    its collectives only validate their arguments. The processes on one node share its cores:
    each runs BLAS on its share of them (``max(1, cores // local_size)`` threads, through
    threadpoolctl), unless a thread variable such as ``OMP_NUM_THREADS`` is set. With several
    processes, an uncaught exception on any rank prints its traceback and aborts the whole job
    (exit status 1) instead of leaving the other ranks waiting.

    Args:
        backend: what carries CuPy arrays, one of ``BACKENDS``. ``"nccl"``: NCCL, each process
            on the GPU of its local rank (raises RuntimeError on every rank when some process
            cannot). ``"mpi"``: MPI, through host memory; the current GPU is left as it is.
            ``"auto"``: NCCL when every process can use it, else MPI; with one process, nothing
            at all. NumPy arrays always go over MPI.

    Returns:
        This process's communicator: size 1 and backend ``"single"`` when it runs alone.

    Raises:
        TypeError: a backend that is not a str.
        ValueError: an unknown backend.
        ImportError: mpi4py is unusable but an explicit backend, or a launcher, needs it.
        RuntimeError: backend="nccl" and some process cannot run NCCL (the reasons, per rank).
    """
    choice("backend", backend, BACKENDS)
    mpi = load_mpi(None if backend == "auto" else f"backend={backend!r} needs MPI")
    if mpi is None:
        return Communicator()
    world = mpi.COMM_WORLD
    if world.Get_size() > 1:
        install_abort_hook(mpi, world.Get_rank(), world.Get_size())
    elif backend == "auto":
        return Communicator()
    comm = world.Dup()
    node = comm.Split_type(mpi.COMM_TYPE_SHARED, key=comm.Get_rank())
    share_host_threads(node.Get_size())
    try:
        device_transport, device = _gpu_transport(backend, comm, node)
    except BaseException:
        node.Free()
        comm.Free()
        raise
    host_transport = MpiTransport(mpi, comm)
    return Communicator(rank=comm.Get_rank(), size=comm.Get_size(), local_rank=node.Get_rank(),
                        local_size=node.Get_size(), backend="nccl" if device_transport else "mpi", device=device,
                        mpi_comm=comm, node_comm=node, host_transport=host_transport,
                        device_transport=device_transport or host_transport)


def _gpu_transport(backend: str, comm: Any, node: Any) -> tuple[NcclTransport | None, int | None]:
    """NCCL on this process's GPU when the backend asks for it and every process can; else (None, None).

    Every rank takes part in the same two exchanges (PCI bus ids within the node, then every
    rank's problem, if any) so that all ranks decide alike.
    """
    if backend == "mpi":
        return None, None
    device, bus_id, problem = probe_gpu(node.Get_rank(), node.Get_size())
    bus_ids = node.allgather(bus_id)
    if problem is None:
        try:
            check_one_gpu_per_process([b for b in bus_ids if b is not None])
        except ValueError as error:
            problem = str(error)
    problems = comm.allgather(problem)
    failing = [f"rank {rank}: {reason}" for rank, reason in enumerate(problems) if reason is not None]
    if not failing:
        assert device is not None  # no rank failed, this one included: probe_gpu found its GPU
        import cupy

        cupy.cuda.Device(device).use()
        return NcclTransport(comm, device), device
    if backend == "nccl":
        raise RuntimeError("backend='nccl' cannot run on every process: " + "; ".join(failing))
    return None, None
