"""The NumPy backend, and how it uses the CPU: how many BLAS threads each matrix product gets, and which cells run.

    cudnn_rnn.set_num_threads(4)        # every product of the NumPy backend on 4 threads
    cudnn_rnn.set_num_threads(None)     # back to the policy below
    cudnn_rnn.get_num_threads()         # 4, or None while the policy decides
    cudnn_rnn.cpu.set_cells("numpy")    # "auto" (fused when numba is installed), "fused" or "numpy"
    cudnn_rnn.cpu.describe()            # what the next call will use, as a JSON-ready dict

The environment says the same at first use: ``CUDNN_RNN_NUM_THREADS=n`` (as ``set_num_threads(n)``) and
``CUDNN_RNN_CELLS=kind`` (as ``set_cells(kind)``); the functions win over the variables.

**Threads.** Unless a count was set (above, or through any of ``cudnn_rnn._host.THREAD_VARIABLES`` in the environment
the process started with, which is then kept as it is), a product of ``m*k*n`` multiply-adds runs on::

    1                              if m*k*n < GRAIN      (waking threads costs more than they give)
    min(pool, cores - others)      otherwise

``pool`` is the BLAS pool's own size (the library's default, a process's share of a node, see
:mod:`cudnn_rnn.distributed`, or whatever else set it), ``cores`` the cores this process may run on,
and ``others`` how many of them other processes kept busy lately (``/proc/stat`` less this process's
own CPU time, refreshed at most every ``LOAD_INTERVAL`` seconds; 0 where there is no ``/proc``).
A waiting OpenBLAS thread spins, so a product split across a core that another process is using
waits for that process: on a loaded machine one thread wins. When a call returns, the pool is left
at ``min(pool, cores - others)`` (at ``n`` after ``set_num_threads(n)``), so that the program's own
NumPy products between calls (a readout, an optimiser) keep off busy cores too; on a quiet machine
that is the pool's own size. The pools are set through ``threadpoolctl``; without it the policy
leaves them alone. The pools are NumPy's and, once the compiled cells load, the BLAS that they call
(SciPy's).

**Cells.** The per-step gate math runs either as NumPy calls (``_cells``, the reference) or compiled
(``_fused_cells``, with numba and SciPy: ``pip install 'cudnn_rnn[fast]'``); both compute the same equations and
agree to float rounding. CuPy arrays never use either: they run cuDNN. ``_backend`` runs the cells over layers,
directions and time (the backend interface ``cudnn_rnn.ops`` calls for NumPy arrays).

**Schedule.** The compiled cells keep the cores busy themselves (``_parts``: directions, layers and parts of
the batch at once), on as many threads as the call may use cores (the count set, else ``min(pool, cores -
others)`` above), each with a single-threaded BLAS; a call of fewer than ``_parts.PART_GRAIN`` multiply-adds runs
on one thread. The BLAS pools are left at one thread while such a call runs, so no pool's waiting threads compete
with the parts, and after it: a waiting OpenBLAS thread spins for about 0.1 s after each product it shared, so a
product of the program's own on several threads between two calls would take a core from the next call's parts
(1.7x slower where measured). The NumPy cells run the batch whole, with the threads per product above, and leave
the pools as above.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .._checks import shown
from .._host import host_cores, user_thread_variable

__all__ = ["set_num_threads", "get_num_threads", "set_cells", "cells_in_use", "describe", "CELL_KINDS"]

#: the multiply-adds below which a product runs on one thread (measured with NumPy's OpenBLAS on 2 cores,
#: a float32 product of 2**17 gained nothing from a second thread and one of 2**21 gained 11%)
GRAIN = 1 << 20
#: seconds between two readings of the other processes' load
LOAD_INTERVAL = 0.5
#: what ``set_cells`` accepts
CELL_KINDS = ("auto", "fused", "numpy")
#: the most threads ``set_num_threads`` accepts
MAX_THREADS = 4096

_NUM_THREADS_VARIABLE = "CUDNN_RNN_NUM_THREADS"
_CELLS_VARIABLE = "CUDNN_RNN_CELLS"
_FAST_HINT = "pip install 'cudnn_rnn[fast]' (numba)"


@dataclass
class _Settings:
    """What the user chose (None: not chosen), and where it came from."""

    threads: int | None = None
    threads_source: str | None = None
    cells: str | None = None
    cells_source: str | None = None
    environment_read: bool = False


_settings = _Settings()
#: what the policy found or decided once per process: the BLAS pools, the pools' own size,
#: the count a call left them at, the user's thread variable
_state: dict[str, Any] = {}


def _read_environment() -> None:
    """Take ``CUDNN_RNN_NUM_THREADS`` and ``CUDNN_RNN_CELLS`` once, unless a function set them first."""
    if _settings.environment_read:
        return
    _settings.environment_read = True
    threads = os.environ.get(_NUM_THREADS_VARIABLE, "").strip()
    if threads and _settings.threads is None:
        try:
            count = int(threads)
        except ValueError:
            count = 0
        if not 1 <= count <= MAX_THREADS:
            raise ValueError(f"the environment variable {_NUM_THREADS_VARIABLE} must be an integer in "
                             f"[1, {MAX_THREADS}]; got {threads!r}")
        _settings.threads, _settings.threads_source = count, _NUM_THREADS_VARIABLE
    cells = os.environ.get(_CELLS_VARIABLE, "").strip()
    if cells and _settings.cells is None:
        if cells not in CELL_KINDS:
            raise ValueError(f"the environment variable {_CELLS_VARIABLE} must be one of {', '.join(CELL_KINDS)}; "
                             f"got {cells!r}")
        _settings.cells, _settings.cells_source = cells, _CELLS_VARIABLE


def set_num_threads(num_threads: int | None) -> None:
    """Run every matrix product of the NumPy backend on ``num_threads`` BLAS threads (None: the policy).

    Args:
        num_threads: an int in [1, MAX_THREADS], or None to let the module's policy choose per product.

    Raises:
        TypeError: ``num_threads`` is neither an int nor None.
        ValueError: it is out of range.
    """
    if num_threads is not None:
        if isinstance(num_threads, bool) or not isinstance(num_threads, int):
            raise TypeError(f"num_threads must be an int or None; got {type(num_threads).__name__} {num_threads!r}")
        if not 1 <= num_threads <= MAX_THREADS:
            raise ValueError(f"num_threads must be in [1, {MAX_THREADS}]; got {shown(num_threads)}")
    _settings.environment_read = True
    _settings.threads = num_threads
    _settings.threads_source = None if num_threads is None else "set_num_threads"


def get_num_threads() -> int | None:
    """The thread count set by :func:`set_num_threads` or ``CUDNN_RNN_NUM_THREADS``, or None (the policy)."""
    _read_environment()
    return _settings.threads


def set_cells(kind: str) -> None:
    """Choose the NumPy backend's cells: ``"auto"`` (fused when numba imports), ``"fused"`` or ``"numpy"``.

    Raises:
        ValueError: ``kind`` is none of ``CELL_KINDS``.
        ImportError: ``"fused"`` without numba (the ``fast`` extra).
    """
    if not isinstance(kind, str) or kind not in CELL_KINDS:
        raise ValueError(f"cells must be one of {', '.join(CELL_KINDS)}; got {kind!r}")
    if kind == "fused" and _fused_import()[0] is None:
        raise ImportError(f"the fused cells need numba, which does not import here ({_fused_import()[1]}); "
                          f"{_FAST_HINT}")
    _settings.environment_read = True
    _settings.cells, _settings.cells_source = kind, "set_cells"


@functools.cache
def _fused_import() -> tuple[ModuleType | None, str]:
    """(``_fused_cells``, imported once, or None when numba is missing or fails to import; why not)."""
    try:
        module = importlib.import_module(f"{__package__}._fused_cells")
    except ImportError as error:
        return None, f"{type(error).__name__}: {error}"
    _state.pop("pools", None)  # the BLAS the compiled cells call has loaded: its pool is set too
    return module, ""


def cells_module() -> ModuleType:
    """The cells the NumPy backend runs now: ``_fused_cells`` or ``_cells``."""
    _read_environment()
    kind = _settings.cells or "auto"
    if kind != "numpy":
        fused, problem = _fused_import()
        if fused is not None:
            return fused
        if kind == "fused":
            raise ImportError(f"{_settings.cells_source or 'set_cells'} asks for the fused cells, which need numba "
                              f"({problem}); {_FAST_HINT}")
    return importlib.import_module(f"{__package__}._cells")


def cells_in_use() -> str:
    """``"fused"`` or ``"numpy"``: the cells the NumPy backend's next call runs."""
    return "fused" if cells_module().__name__.endswith("_fused_cells") else "numpy"


# ---- threads ---------------------------------------------------------------------------------
def _users_variable() -> str | None:
    """``user_thread_variable()`` of the environment this process started with, read once: the BLAS
    libraries read these variables when they load, so a later change means nothing to them."""
    if "user_variable" not in _state:
        _state["user_variable"] = user_thread_variable()
    variable: str | None = _state["user_variable"]
    return variable


class _Load:
    """How many of this process's cores other processes kept busy, from ``/proc/stat``'s per-core lines."""

    def __init__(self) -> None:
        self.cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.last: tuple[float, float, float] | None = None
        self.others = 0.0

    def _busy_seconds(self) -> float | None:
        """Seconds the affinity's cores spent busy since boot (None where /proc/stat cannot say)."""
        try:
            with open("/proc/stat", encoding="ascii") as stat:
                lines = stat.read().splitlines()
        except OSError:
            return None
        wanted, busy = {f"cpu{cpu}" for cpu in self.cpus}, 0
        for line in lines:
            fields = line.split()
            if fields and fields[0] in wanted and len(fields) >= 8:
                user, nice, system, _idle, _iowait, irq, softirq, *rest = (int(field) for field in fields[1:])
                busy += user + nice + system + irq + softirq + (rest[0] if rest else 0)
        return busy / self.tick

    def others_busy(self) -> float:
        """Other processes' busy cores over the last ``LOAD_INTERVAL`` or more (0 until two readings exist)."""
        now = time.monotonic()
        if self.last is not None and now - self.last[0] < LOAD_INTERVAL:
            return self.others
        busy = self._busy_seconds()
        if busy is None:
            return 0.0
        own = time.process_time()
        if self.last is not None:
            wall = now - self.last[0]
            self.others = max(0.0, (busy - self.last[1]) - (own - self.last[2])) / wall
        self.last = (now, busy, own)
        return self.others


class BlasThreads:
    """One call's thread plan: ``for_products(multiply_adds)`` before a group of equal products sets
    the pools' threads for them (a no-op when unchanged); ``finish()`` leaves the pools at ``leave``
    (None: as they were found)."""

    def __init__(self, pools: list[Any], fixed: int | None, budget: int, leave: int | None = None,
                 current: int | None = None) -> None:
        self.pools, self.fixed, self.budget = pools, fixed, budget
        # as found (``current``: where the caller has just read it)
        self.current = max((pool.num_threads for pool in pools), default=1) if current is None else current
        self.leave = self.current if leave is None else leave

    def workers(self) -> int:
        """How many cores a call may keep busy at once: the count set, else the policy's budget."""
        return self.fixed if self.fixed is not None else self.budget

    def pin(self, threads: int) -> None:
        """Every product from now to ``finish()`` runs on ``threads`` threads, whatever its size (a call that
        runs its own threads, each with a single-threaded BLAS); ``for_products`` changes nothing after it."""
        self.fixed = threads
        self._set(threads)

    def for_products(self, multiply_adds: int) -> None:
        self._set(self.fixed if self.fixed is not None else 1 if multiply_adds < GRAIN else self.budget)

    def _set(self, threads: int) -> None:
        if threads == self.current or not self.pools:
            return
        for pool in self.pools:
            _set_pool(pool, threads)
        self.current = threads

    def finish(self) -> None:
        if self.pools:
            self._set(self.leave)
            _state["left"] = self.leave
            for pool in self.pools:
                _release(pool)


def _set_pool(pool: Any, threads: int) -> None:
    """``pool.set_num_threads(threads)``, made to hold whatever thread calls it. threadpoolctl (3.8) lets only
    the thread that last set a pthreads OpenBLAS's size while alive set it again, and silently ignores the
    others: without this, one call made from a thread that lives on (a JAX callback on XLA's thread, a
    worker pool's thread) froze the pools for the process, and the backend's one-thread parts ran on
    every pool's threads at once, four to five times slower."""
    pool.set_num_threads(threads)
    if pool.num_threads != threads:
        clear = getattr(type(pool), "clear_controlling_thread", None)
        if clear is not None:
            clear(force=True)
            pool.set_num_threads(threads)


def _release(pool: Any) -> None:
    """Give up threadpoolctl's control of a pthreads OpenBLAS's size where this thread holds it (a no-op
    for the other libraries and for threadpoolctl before 3.8)."""
    clear = getattr(type(pool), "clear_controlling_thread", None)
    if clear is not None:
        clear()


def _pools() -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded at first use, NumPy's among them, and again
    once the compiled cells have loaded theirs (empty without threadpoolctl). A BLAS that another library
    loads later is neither: it is left alone."""
    if "pools" not in _state:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _state["pools"] = []
        else:
            _state["pools"] = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    pools: list[Any] = _state["pools"]
    return pools


@functools.cache
def _load() -> _Load:
    return _Load()


def _plan() -> BlasThreads:
    """The plan for a call starting now (see the module docstring)."""
    _read_environment()
    if _settings.threads is None and _users_variable() is not None:
        return BlasThreads([], None, 1)  # the user's count is kept: touch nothing
    pools = _pools()
    found = max((pool.num_threads for pool in pools), default=1)
    if _state.get("left") != found:  # the first call, or someone else set the pools since the last one
        _state["size"] = found
    budget = max(1, min(_state["size"], host_cores() - round(_load().others_busy())))
    fixed = _settings.threads
    return BlasThreads(pools, fixed, budget, leave=budget if fixed is None else fixed, current=found)


@contextlib.contextmanager
def blas_threads() -> Iterator[BlasThreads]:
    """One NumPy backend call's thread plan; when the call ends the pools are left as the module docstring says."""
    plan = _plan()
    try:
        yield plan
    finally:
        plan.finish()


def describe() -> dict[str, Any]:
    """What the NumPy backend's next call uses: cells, numba, thread source, and the BLAS pools, JSON-ready."""
    _read_environment()
    user_variable = _users_variable()
    if _settings.threads is not None:
        source = f"{_settings.threads_source} ({_settings.threads})"
    elif user_variable is not None:
        source = f"{user_variable}={os.environ[user_variable]} (kept as set)"
    elif not _pools():
        source = "the BLAS library's own (threadpoolctl is not installed)"
    else:
        source = f"policy (1 thread below {GRAIN} multiply-adds, else up to the free cores)"
    try:
        cells = cells_in_use()
    except ImportError as error:
        cells = f"unavailable: {error}"
    fused, problem = _fused_import()
    return {
        "cells": cells,
        "cells_setting": _settings.cells or "auto",
        "numba": f"not available ({problem})" if fused is None else importlib.import_module("numba").__version__,
        "threads": source,
        "cores": host_cores(),
        "others_busy": round(_load().others_busy(), 2),
        "blas": [{"library": pool.internal_api, "path": pool.filepath, "threads": pool.num_threads}
                 for pool in _pools()],
    }
