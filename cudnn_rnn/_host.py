"""The host's facts every CPU thread policy starts from: the cores this process may run on, and the environment
variables through which a user sets thread counts::

    host_cores()              -> 2        (affinity mask, within a cgroup v2 CPU quota)
    user_thread_variable()    -> "OMP_NUM_THREADS" or None

The NumPy backend's policy (:mod:`cudnn_rnn.cpu`) and the data-parallel share of a node's cores
(:mod:`cudnn_rnn.distributed`) both read them.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping

__all__ = ["THREAD_VARIABLES", "host_cores", "user_thread_variable"]

#: environment variables through which a user sets thread counts (OpenMP, OpenBLAS, MKL, BLIS, Accelerate)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS")


def host_cores() -> int:
    """The cores this process may run on: its affinity mask where the OS has one, within a cgroup's CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_cores()
    return cores if quota is None else min(cores, quota)


@functools.cache
def _cgroup_cores() -> int | None:
    """The cores a cgroup v2 CPU quota allows (rounded up), read once; None without a usable one."""
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as limit:
            quota, period = limit.read().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):  # no cgroup v2 limit here, or one that says nothing usable
        return None


def user_thread_variable(environ: Mapping[str, str] | None = None) -> str | None:
    """The first of ``THREAD_VARIABLES`` set (not blank) in ``environ`` (default ``os.environ``), if any."""
    environ = os.environ if environ is None else environ
    return next((name for name in THREAD_VARIABLES if environ.get(name, "").strip()), None)
