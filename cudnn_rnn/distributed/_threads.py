"""Host threads per process: a node's cores shared among the processes that run on it.

NumPy's BLAS starts one thread per core in every process. With ``local_size`` processes on a
node that is ``local_size`` times too many, and OpenBLAS's waiting threads spin, so an
oversubscribed step can take many times as long as one that is not. :func:`share_host_threads`
gives each process its share of the cores it may run on, as :func:`cudnn_rnn.distributed.init` says,
for every BLAS and OpenMP pool loaded.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

from .._host import THREAD_VARIABLES, host_cores, user_thread_variable

__all__ = ["THREAD_VARIABLES", "share_host_threads"]


def share_host_threads(local_size: int, environ: Mapping[str, str] | None = None) -> int | None:
    """Limit this process's BLAS/OpenMP threads to its share of the node's cores.

    Returns the thread count set, or None when nothing was changed: one process on the node, a
    thread variable set by the user, or threadpoolctl missing (then a warning says what to do).
    """
    environ = os.environ if environ is None else environ
    if local_size <= 1 or user_thread_variable(environ) is not None:
        return None
    threads = max(1, host_cores() // local_size)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        warnings.warn(f"{local_size} processes share this node's {host_cores()} cores but each runs BLAS on all of "
                      f"them; pip install threadpoolctl, or set OMP_NUM_THREADS="
                      f"{threads}, to give each process {threads}", UserWarning, stacklevel=3)
        return None
    threadpool_limits(limits=threads)
    return threads
