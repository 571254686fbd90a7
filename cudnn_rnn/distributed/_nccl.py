"""NCCL through CuPy (``cupy.cuda.nccl``): sum-reductions and broadcasts of GPU buffers.

One GPU per process (see :mod:`._devices`). The NCCL communicator is made at the first
collective on CuPy arrays: rank 0 draws the unique id, MPI carries it to every rank, and each
rank joins on its own GPU. Calls are queued on CuPy's current stream; nothing waits for the GPU.
CuPy is imported only by the functions that need it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .._arrays import Array
from .._dtypes import TABLE
from ._devices import device_for_local_rank

__all__ = ["NCCL_DATA_TYPES", "nccl_data_type", "probe_gpu", "NcclTransport"]

#: NumPy dtype name -> the name of its NCCL data type constant in ``cupy.cuda.nccl``
NCCL_DATA_TYPES: dict[str, str] = {dtype.name: dtype.nccl for dtype in TABLE if dtype.nccl is not None}


def nccl_data_type(nccl: Any, dtype: DTypeLike) -> int:
    """The ``cupy.cuda.nccl`` constant for ``dtype`` (TypeError for a dtype NCCL is not given here)."""
    name = NCCL_DATA_TYPES.get(np.dtype(dtype).name)
    if name is None:
        raise TypeError(f"NCCL reductions here take {sorted(NCCL_DATA_TYPES)}; got {np.dtype(dtype).name}")
    return int(getattr(nccl, name))


def probe_gpu(local_rank: int, local_size: int) -> tuple[int | None, str | None, str | None]:
    """``(device, pci_bus_id, None)`` when this process can run NCCL, else ``(None, None, reason)``."""
    try:
        import cupy
        from cupy.cuda import nccl
    except Exception as error:  # ImportError, or CUDA libraries that fail to load
        return None, None, f"CuPy is not importable ({type(error).__name__}: {error})"
    if not getattr(nccl, "available", False):
        return None, None, "CuPy cannot load NCCL (pip install nvidia-nccl-cu12, or -cu13 for CUDA 13)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver
        return None, None, f"no CUDA device ({type(error).__name__}: {error})"
    try:
        device = device_for_local_rank(local_rank, local_size, count)
    except ValueError as error:
        return None, None, str(error)
    return device, str(cupy.cuda.Device(device).pci_bus_id), None


class NcclTransport:
    """The :class:`~cudnn_rnn.distributed.Transport` of CuPy buffers on this process's GPU, with NCCL."""

    name = "nccl"

    def __init__(self, mpi_comm: Any, device: int) -> None:
        self._mpi_comm = mpi_comm
        self.device = device
        self._comm: Any = None

    def _communicator(self) -> tuple[Any, Any, int]:
        """(the NCCL communicator, made at first use; ``cupy.cuda.nccl``; the pointer of CuPy's current stream)."""
        import cupy
        from cupy.cuda import nccl

        if self._comm is None:
            unique_id = nccl.get_unique_id() if self._mpi_comm.rank == 0 else None
            unique_id = self._mpi_comm.bcast(unique_id, root=0)
            with cupy.cuda.Device(self.device):
                self._comm = nccl.NcclCommunicator(self._mpi_comm.size, unique_id, self._mpi_comm.rank)
        return self._comm, nccl, cupy.cuda.get_current_stream().ptr

    def allreduce_sum(self, flat: Array) -> None:
        comm, nccl, stream = self._communicator()
        comm.allReduce(flat.data.ptr, flat.data.ptr, flat.size, nccl_data_type(nccl, flat.dtype), nccl.NCCL_SUM, stream)

    def broadcast(self, flat_bytes: Array, root: int) -> None:
        comm, nccl, stream = self._communicator()
        comm.bcast(flat_bytes.data.ptr, flat_bytes.size, nccl.NCCL_UINT8, root, stream)

    def close(self) -> None:
        """Destroy the NCCL communicator, if one was made (idempotent)."""
        if self._comm is not None:
            self._comm.destroy()
            self._comm = None
