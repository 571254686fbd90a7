"""Data-parallel training across processes, GPUs and machines: MPI (mpi4py) and NCCL (CuPy).

Start the same script once per process (``mpiexec -n 4 python train.py``); each process holds a
full copy of the model, trains on its shard of every global batch, and averages the gradients
before the optimiser step, so every copy takes the same step::

    from cudnn_rnn import distributed

    comm = distributed.init()                      # rank, size, local_rank; size 1 without mpiexec
    comm.broadcast(model.params)                   # every rank starts from rank 0's weights
    for batch in batches:                          # the same global batch on every rank
        loss = model.loss(comm.shard(batch))       # this rank's rows: batch[rank*n/size : (rank+1)*n/size]
        comm.allreduce_mean(model.grads)           # mean over ranks = the global batch's gradient
        optimiser.step(model.grads)

Host (NumPy) arrays travel over MPI; GPU (CuPy) arrays over NCCL (``init(backend="nccl")``, one
GPU per process, the NCCL id sent over MPI) or MPI (``"mpi"``). Several arrays travel as one
message per dtype through a persistent buffer; arrays that already lie back to back in one
buffer (:func:`fuse_arrays`) travel where they lie, with no copy. An uncaught exception on
any rank aborts the whole job; ranks passing different shapes or dtypes get a ValueError on
every rank.

Needs ``mpi4py`` (``pip install 'cudnn_rnn[distributed]'``) and an MPI library; importing this
package starts nothing: MPI starts in :func:`init`.
"""

from __future__ import annotations

from ._devices import check_one_gpu_per_process, device_for_local_rank
from ._packing import fuse_arrays
from . import communicator as _communicator
from .communicator import Communicator, Transport, init

__all__ = ["init", "Communicator", "Transport", "BACKENDS", "fuse_arrays", "device_for_local_rank",
           "check_one_gpu_per_process"]

#: The values of ``init(backend=...)``: ``"auto"`` (NCCL when every process can use it, else MPI), ``"mpi"``,
#: ``"nccl"``.
BACKENDS: tuple[str, ...] = _communicator.BACKENDS
