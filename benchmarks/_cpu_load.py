"""What bench_cpu.py needs besides the op timings: which cells and threads our side runs on, and the README
example timed as a whole program, with its default thread settings against ``OMP_NUM_THREADS=1``, on a quiet
machine and under one competing CPU-bound process.

bench_cpu.py imports it by name (``from _cpu_load import ...``) with this folder on ``sys.path``.

The README example group runs ``python examples/train_char_lm.py --steps 60 --checkpoint-every 0 --out <a fresh
temporary folder>`` with this interpreter (``sys.executable``) from the repository's root, and takes its
wall-clock time, in two settings that take turns (default, one thread, default, ...):

default
    the environment as it is, less ``THREAD_VARIABLES`` (so that the library's policy decides)
one thread
    the same, plus ``OMP_NUM_THREADS=1`` and ``OPENBLAS_NUM_THREADS=1``

Each setting reports the median of the repeats; ratio = default / one thread. Under load the same runs take
place while :func:`competing_process` keeps one other process spinning on a core.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Callable

from threadpoolctl import threadpool_info, threadpool_limits

from cudnn_rnn import _host, cpu

REPO = Path(__file__).resolve().parent.parent
#: the README's example command, less ``--out`` (a fresh temporary folder per run), run from REPO
EXAMPLE = ("examples/train_char_lm.py", "--steps", "60", "--checkpoint-every", "0")
#: thread counts removed from the example's environment in both settings
THREAD_VARIABLES = (*_host.THREAD_VARIABLES, "CUDNN_RNN_NUM_THREADS")
#: setting -> what it adds to the example's environment
SETTINGS: dict[str, dict[str, str]] = {"default": {},
                                       "one_thread": {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}}
#: under one competing process: default / one thread at most this
LOADED_TARGET = 1.1
#: on a quiet machine: default at most this times the better of the two settings
QUIET_TARGET = 1.05
#: seconds the competing process runs before the first timed run
SETTLE_SECONDS = 0.5
#: a run of the example that takes longer (seconds) fails the benchmark
EXAMPLE_TIMEOUT = 600


# ---- our side's path and threads ----------------------------------------------------------------
def _numpy_blas() -> list[dict[str, Any]]:
    """threadpoolctl's entries of NumPy's BLAS (those under numpy's folders when any are: SciPy, imported along
    the way, brings its own)."""
    pools = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return [i for i in pools if "numpy" in Path(i.get("filepath", "")).parent.name] or pools


def blas_threads() -> str:
    """How many threads NumPy's BLAS uses."""
    return ", ".join(f"{i['internal_api']}:{i['num_threads']}" for i in _numpy_blas()) or "unknown"


def blas_pool_size() -> int | None:
    """The largest of NumPy's BLAS pools, or None where threadpoolctl sees none."""
    return max((int(i["num_threads"]) for i in _numpy_blas()), default=None)


def ours_path() -> dict[str, Any]:
    """What our side runs on now, for a record row: ``cells`` ("fused" / "numpy"), ``ours_threads`` (None: the
    policy), ``thread_source`` (``describe()``'s account of it) and ``numpy_blas_threads``."""
    return dict(cells=cpu.cells_in_use(), ours_threads=cpu.get_num_threads(),
                thread_source=cpu.describe()["threads"], numpy_blas_threads=blas_threads())


def thread_count(requested: int | None) -> tuple[int, str]:
    """The threads torch and ONNX Runtime get, and why: ``--threads``, else the count set for our side, else
    NumPy's BLAS pool (the most our policy uses), else the cores."""
    for count, why in ((requested, "--threads"), (cpu.get_num_threads(), "the count set for ours"),
                       (blas_pool_size(), "NumPy's BLAS pool, the most ours uses"), (os.cpu_count(), "the cores")):
        if count:
            return count, why
    return 1, "one core"


def host_environment(**options: Any) -> dict[str, Any]:
    """The record's ``environment``: the machine, the versions, NumPy's BLAS threads, OMP_WAIT_POLICY, the
    command-line ``options`` (as ``{name}_option``) and the 1-minute load average (> 0.5: something else runs,
    the timings are noisy)."""
    import numpy

    return dict(machine=platform.machine(), processor=platform.processor() or platform.platform(),
                cores=os.cpu_count() or 1, numpy=numpy.__version__, python=platform.python_version(),
                numpy_blas_threads=blas_threads(), omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
                **{f"{name}_option": value for name, value in options.items()},
                load_average=os.getloadavg()[0])


def describe_line(described: dict[str, Any]) -> str:
    """``cudnn_rnn.cpu.describe()`` on one line."""
    pools = ", ".join(f"{pool['library']}:{pool['threads']}" for pool in described["blas"]) or "none"
    return (f"cudnn_rnn.cpu: cells {described['cells']} (setting {described['cells_setting']}, numba "
            f"{described['numba']}); threads {described['threads']}; BLAS pools {pools}")


def configure(cells: str | None, threads: int | None) -> None:
    """Apply ``--cells`` (``cudnn_rnn.cpu.set_cells``) and ``--threads`` (``cudnn_rnn.set_num_threads``, and
    every BLAS pool of this process limited to ``threads``, so that the GEMM floor runs on them too); raises
    ImportError / ValueError when a choice cannot be applied."""
    if cells is not None:
        cpu.set_cells(cells)
    if threads is not None:
        cpu.set_num_threads(threads)
        _LIMITS.append(threadpool_limits(limits=threads, user_api="blas"))  # kept for the whole run


#: the BLAS limit of ``--threads``, held for the whole run
_LIMITS: list[Any] = []


# ---- the README example -------------------------------------------------------------------------
def example_command() -> str:
    return " ".join(("python", *EXAMPLE, "--out", "<tmpdir>"))


def example_environment(omp_wait_policy: str | None, cells: str | None) -> dict[str, str]:
    """The README example's environment: this process's, with OMP_WAIT_POLICY = ``omp_wait_policy`` (as the
    user left it; None: unset), and CUDNN_RNN_CELLS = ``cells`` when --cells is given."""
    environment = dict(os.environ)
    environment.pop("OMP_WAIT_POLICY", None)
    if omp_wait_policy is not None:
        environment["OMP_WAIT_POLICY"] = omp_wait_policy
    if cells is not None:
        environment["CUDNN_RNN_CELLS"] = cells
    return environment


def child_environment(base: Mapping[str, str], setting: str) -> dict[str, str]:
    """``base`` less ``THREAD_VARIABLES``, plus what ``setting`` adds."""
    environment = {name: value for name, value in base.items() if name not in THREAD_VARIABLES}
    environment.update(SETTINGS[setting])
    return environment


def run_example(environment: Mapping[str, str]) -> dict[str, Any]:
    """One run of the example in ``environment``: ``seconds`` (wall-clock, start to exit), ``training_seconds``
    (what the example itself reports for its training loop) and ``backend`` (the line it prints)."""
    with tempfile.TemporaryDirectory(prefix="bench_cpu_example_") as out:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, *EXAMPLE, "--out", out], cwd=REPO, env=dict(environment),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT)
        seconds = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"{example_command()} exited with {result.returncode}:\n"
                           + (result.stderr or result.stdout)[-2000:])
    trained = re.search(r"^trained \d+ steps in ([0-9.]+)s", result.stdout, re.MULTILINE)
    backend = re.search(r"^backend: (.*)$", result.stdout, re.MULTILINE)
    return dict(seconds=seconds, training_seconds=float(trained.group(1)) if trained else None,
                backend=backend.group(1) if backend else "unknown")


def time_example(base: Mapping[str, str], repeats: int, warmup: int) -> dict[str, Any]:
    """The settings' runs, taking turns, after ``warmup`` untimed default runs (cold file caches): per setting
    ``{setting}_s`` (median), ``{setting}_times_s``, ``{setting}_training_s`` (median of the example's own
    figure); ``ratio`` = default / one thread, ``spread`` (the largest max/min of a setting's times), ``backend``
    and ``others_busy``: the cores other processes kept busy in the second before (:func:`others_busy`)."""
    environments = {setting: child_environment(base, setting) for setting in SETTINGS}
    busy = others_busy()
    for _ in range(warmup):
        run_example(environments["default"])
    runs: dict[str, list[dict[str, Any]]] = {setting: [] for setting in SETTINGS}
    for _ in range(repeats):
        for setting, environment in environments.items():
            runs[setting].append(run_example(environment))
    phase: dict[str, Any] = {}
    for setting, results in runs.items():
        seconds = [r["seconds"] for r in results]
        training = [r["training_seconds"] for r in results if r["training_seconds"] is not None]
        phase.update({f"{setting}_s": statistics.median(seconds), f"{setting}_times_s": seconds,
                      f"{setting}_training_s": statistics.median(training) if training else None})
    phase["ratio"] = phase["default_s"] / phase["one_thread_s"]
    phase["spread"] = max(max(r["seconds"] for r in rs) / min(r["seconds"] for r in rs) for rs in runs.values())
    phase["backend"] = "; ".join(sorted({r["backend"] for rs in runs.values() for r in rs}))
    phase["others_busy"] = busy
    return phase


def others_busy(seconds: float = 1.0) -> float:
    """How many cores other processes kept busy over the next ``seconds``: the thread policy's own reading
    (``cudnn_rnn.cpu.describe()["others_busy"]``: ``/proc/stat`` less this process's CPU time; 0 without it)."""
    cpu.describe()  # a reading now ...
    time.sleep(max(seconds, cpu.LOAD_INTERVAL))
    busy: float = cpu.describe()["others_busy"]  # ... and the busy cores since
    return busy


@contextlib.contextmanager
def competing_process(settle: float = SETTLE_SECONDS) -> Iterator[subprocess.Popen[bytes]]:
    """One other CPU-bound process (a Python busy loop) for the duration of the block: started, given
    ``settle`` seconds to be running, and always stopped (terminated and waited for, on errors and Ctrl-C too)."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
    try:
        time.sleep(settle)
        if process.poll() is not None:
            raise RuntimeError(f"the competing process exited early (status {process.returncode})")
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


#: target name -> (how it reads, the phase it needs, whether that phase meets it)
EXAMPLE_TARGETS: dict[str, tuple[str, str, Callable[[dict[str, Any]], bool]]] = {
    "example_loaded": (f"README example under one competing CPU-bound process: default <= {LOADED_TARGET} x "
                       "OMP_NUM_THREADS=1", "loaded", lambda phase: phase["ratio"] <= LOADED_TARGET),
    "example_quiet": (f"README example on a quiet machine: default <= {QUIET_TARGET} x the better of default and "
                      "OMP_NUM_THREADS=1", "quiet",
                      lambda p: p["default_s"] <= QUIET_TARGET * min(p["default_s"], p["one_thread_s"])),
}
#: a phase whose setting's times vary by more (max/min) is reported as noisy
NOISY = 1.3
#: a quiet phase is reported as not quiet when other processes kept more cores busy just before it
QUIET_BUSY = 0.25


def _progress(name: str, phase: dict[str, Any], start: float) -> None:
    """A line on stderr: the phase's time and every run's seconds."""
    runs = "; ".join(f"{setting} " + " ".join(f"{t:.1f}" for t in phase[f"{setting}_times_s"]) for setting in SETTINGS)
    print(f"measured the README example ({name}) in {time.perf_counter() - start:.0f} s: {runs}", file=sys.stderr,
          flush=True)


def example_group(base: Mapping[str, str], repeats: int, warmup: int, loaded: bool) -> dict[str, Any]:
    """Time the README example quiet and, with ``loaded``, under :func:`competing_process`; print the table and
    the targets. Returns the record's ``example`` entry (``phases``: quiet and loaded, as :func:`time_example`;
    ``targets_met``, None where its phase was not measured)."""
    print(f"\nREADME example: {example_command()} (from the repository's root, this interpreter)\n"
          f"wall-clock seconds, median of {repeats} runs per setting, the settings taking turns; default = the "
          f"environment less {', '.join(THREAD_VARIABLES)}; one thread = OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1",
          flush=True)
    phases: dict[str, Any] = {}
    start = time.perf_counter()
    phases["quiet"] = time_example(base, repeats, warmup)
    _progress("quiet", phases["quiet"], start)
    if loaded:
        start = time.perf_counter()
        with competing_process():
            phases["loaded"] = time_example(base, repeats, 0)
        _progress("loaded", phases["loaded"], start)
    header = (f"{'README example':30s} {'default s':>10s} {'one thread s':>13s} {'default/one':>12s} {'spread':>7s} "
              f"{'others busy':>12s}")
    print(f"{header}\n{'-' * len(header)}")
    for name, phase in phases.items():
        label = "loaded (1 competing process)" if name == "loaded" else name
        busy = f"{phase['others_busy']:.2f}"
        print(f"{label:30s} {phase['default_s']:10.2f} {phase['one_thread_s']:13.2f} {phase['ratio']:12.2f} "
              f"{phase['spread']:7.2f} {busy:>12s}")
    backends = {phase["backend"] for phase in phases.values()}
    print(f"backend of the example: {'; '.join(sorted(backends))}")
    targets_met: dict[str, bool | None] = {}
    print("\ntargets (README example)")
    for name, (text, needs, met) in EXAMPLE_TARGETS.items():
        phase = phases.get(needs)
        targets_met[name] = None if phase is None else bool(met(phase))
        verdict = ("not measured (run with --loaded)" if phase is None else
                   f"{'met' if targets_met[name] else 'NOT met'} (default/one thread {phase['ratio']:.2f})")
        print(f"  {text}: {verdict}")
    noisy = [f"{name} {phase['spread']:.2f}x" for name, phase in phases.items() if phase["spread"] > NOISY]
    if noisy:
        print(f"noisy README example timings (a setting's runs varied by more than {NOISY}x): " + "; ".join(noisy))
    quiet_busy = phases["quiet"]["others_busy"]
    if quiet_busy > QUIET_BUSY:
        print(f"the quiet machine was not quiet: other processes kept {quiet_busy:.2f} cores busy before its runs")
    return dict(command=example_command(), repeats=repeats, warmup=warmup, loaded=loaded,
                removed=list(THREAD_VARIABLES), settings=SETTINGS,
                targets=dict(loaded_ratio=LOADED_TARGET, quiet_slack=QUIET_TARGET), targets_met=targets_met,
                phases=phases)
