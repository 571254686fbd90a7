"""MPI through mpi4py: loading it, ending the whole job on an uncaught exception, host reductions.

mpi4py initialises MPI when ``mpi4py.MPI`` is first imported, so nothing here imports it at
module level: :func:`load_mpi` does, from :func:`cudnn_rnn.distributed.init` only.
"""

from __future__ import annotations

import os
import sys
import time
import types
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from .._arrays import Array

__all__ = ["load_mpi", "launcher_size", "install_abort_hook", "MpiTransport", "INSTALL_HINT"]

#: environment variables in which common MPI launchers announce the job size. They are read only
#: to refuse running alone when a launcher started several processes but mpi4py is missing.
LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")

#: seconds between printing an uncaught exception and aborting the job
ABORT_GRACE_SECONDS = 0.5

INSTALL_HINT = ("pip install 'cudnn_rnn[distributed]' installs mpi4py; it needs an MPI library: "
                "'pip install mpich' on a laptop or in CI, or mpi4py built against your cluster's MPI "
                "(mpicc on PATH, then: pip install --no-binary=mpi4py mpi4py)")


def launcher_size(environ: Mapping[str, str] | None = None) -> int:
    """The number of processes a launcher says it started (1 when none says so); ``environ``: os.environ if None."""
    variables: Mapping[str, str] = os.environ if environ is None else environ
    for variable in LAUNCHER_SIZE_VARIABLES:
        value = variables.get(variable, "")
        if value.isdigit() and int(value) > 1:
            return int(value)
    return 1


def load_mpi(required_by: str | None) -> types.ModuleType | None:
    """``mpi4py.MPI`` (initialising MPI), or None when mpi4py is unusable and nothing needs it.

    Raises ImportError with install instructions when ``required_by`` (an explicit backend)
    needs MPI, or when a launcher started several processes, which would otherwise each train
    alone without noticing.
    """
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as error:  # no mpi4py, or mpi4py without an MPI library
        started = launcher_size()
        if required_by is None and started == 1:
            return None
        reason = required_by or f"this process is one of {started} started by an MPI launcher"
        raise ImportError(f"cudnn_rnn.distributed: {reason}, but mpi4py cannot be used "
                          f"({type(error).__name__}: {error}). {INSTALL_HINT}") from error
    return MPI


_abort_hook_installed = False


def install_abort_hook(mpi: types.ModuleType, rank: int, size: int) -> None:
    """The abort on an uncaught exception that :func:`cudnn_rnn.distributed.init` describes, installed
    once per process, for the rest of its life."""
    global _abort_hook_installed
    if _abort_hook_installed:
        return
    previous: Callable[..., Any] = sys.excepthook

    def abort_job(kind: type[BaseException], value: BaseException, traceback: Any) -> None:
        try:
            previous(kind, value, traceback)
            sys.stderr.write(f"cudnn_rnn.distributed: rank {rank} of {size} stopped on an uncaught "
                             f"{kind.__name__}; aborting the MPI job\n")
            sys.stdout.flush()
            sys.stderr.flush()
            time.sleep(ABORT_GRACE_SECONDS)  # the launcher forwards the output before the abort tears it down
        finally:
            mpi.COMM_WORLD.Abort(1)

    sys.excepthook = abort_job
    _abort_hook_installed = True


class MpiTransport:
    """The :class:`~cudnn_rnn.distributed.Transport` that sum-reduces and broadcasts flat buffers with MPI.

    NumPy buffers go to MPI as they are. CuPy buffers (anything else) are staged through one host buffer
    (pinned when CuPy can pin), which works with any MPI, CUDA-aware or not.
    """

    name = "mpi"

    def __init__(self, mpi: types.ModuleType, comm: Any) -> None:
        self._mpi = mpi
        self._comm = comm
        self._host: np.ndarray | None = None

    def allreduce_sum(self, flat: Array) -> None:
        self._on_host(flat, lambda buffer: self._comm.Allreduce(self._mpi.IN_PLACE, buffer, op=self._mpi.SUM))

    def broadcast(self, flat_bytes: Array, root: int) -> None:
        self._on_host(flat_bytes, lambda buffer: self._comm.Bcast(buffer, root=root))

    def _on_host(self, flat: Array, collective: Callable[[np.ndarray], None]) -> None:
        """``collective`` on ``flat`` itself (NumPy), or on a copy in the first bytes of the host staging buffer
        (grown to the largest message so far), copied back (CuPy)."""
        if isinstance(flat, np.ndarray):
            collective(flat)
            return
        nbytes = flat.nbytes
        if self._host is None or self._host.nbytes < nbytes:
            try:
                import cupyx

                self._host = cupyx.empty_pinned((nbytes,), dtype=np.uint8)
            except Exception:  # CuPy without pinned memory: pageable memory works too
                self._host = np.empty(nbytes, dtype=np.uint8)
        host = self._host[:nbytes].view(flat.dtype)
        flat.get(out=host)
        collective(host)
        flat.set(host)

    def close(self) -> None:
        """Drop the host staging buffer."""
        self._host = None
