"""Write the record of one stage of scripts/gpu_check.sh: ``<stage folder>/record.md``.

The record holds what a later reader needs to trust or redo the run: date, commit, the GPU,
driver, CUDA runtime, cuDNN and CuPy (and PyTorch) versions, the command, its exit status and
time, then the stage's results: pytest's pass/fail/skip counts with each failure's first lines
(from the JUnit XML, or from the log when the stage was cut off), the benchmark table (from
bench.json), or the log's summary lines. Commit it under benchmarks/results/.

Usage (gpu_check.sh calls it): python3 scripts/gpu_record.py FOLDER STAGE STATUS SECONDS LIMIT -- COMMAND...

scripts/gpu_first_call.sh calls it twice more: ``environment`` (its phase 0: the versions, one per
line; exit 3 when CuPy or cuDNN cannot run the backend) and ``first-call OUT`` (``OUT/record.md``
from the folder's environment.txt, summary.txt and phase logs, rewritten after every phase).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _environment() -> list[str]:
    lines = []
    try:
        from cudnn_rnn import info

        facts = info.collect()
        cupy_facts, cudnn_facts = facts["cupy"], facts["cudnn"]
        lines += [f"GPU: {', '.join(cupy_facts.get('gpus', [])) or 'none'}",
                  f"CUDA driver: {facts['cuda_driver']}; CUDA runtime (CuPy): {cupy_facts.get('cuda_runtime')}",
                  f"cuDNN: {cudnn_facts.get('version', 'not available')} ({cudnn_facts.get('path', '')}; "
                  f"built for CUDA {cudnn_facts.get('built_for_cuda')})",
                  f"CuPy: {cupy_facts.get('version', 'not installed')}; NumPy {facts['numpy']}; "
                  f"Python {facts['python']}",
                  f"cuDNN backend: {facts['backends']['cupy (cuDNN)']}; TF32 allowed: {facts['tf32_allowed']}"]
    except Exception as error:  # the record is written even when the package cannot be imported
        lines.append(f"environment unknown: {type(error).__name__}: {error}")
    try:  # without importing it (seconds); the bench stage reports its CUDA and cuDNN
        lines.append(f"PyTorch: {importlib.metadata.version('torch')}")
    except importlib.metadata.PackageNotFoundError:
        lines.append("PyTorch: not installed")
    lines.append(f"MPI: {_mpi_facts()}")
    driver = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if driver:
        lines.append(f"nvidia-smi: {driver}")
    return lines


def _mpi_facts() -> str:
    """mpi4py, the MPI library it loads (in a child process: loading MPI initialises it), mpiexec and NCCL."""
    try:
        mpi4py = importlib.metadata.version("mpi4py")
    except importlib.metadata.PackageNotFoundError:
        return "mpi4py not installed"
    library = _run([sys.executable, "-c", "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])"])
    nccl = _run([sys.executable, "-c", "from cupy.cuda import nccl; print(nccl.get_version() if nccl.available "
                 "else 'not loadable')"])
    return (f"mpi4py {mpi4py}; library: {' '.join(library.split()) or 'cannot be loaded'}; "
            f"mpiexec: {shutil.which('mpiexec') or 'not on PATH'}; NCCL (CuPy): {nccl or 'unknown'}")


def _run(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _junit(path: Path) -> tuple[dict[str, int], list[str]] | None:
    """(counts, failures) from pytest's JUnit XML, or None when it is missing or cut short."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    failures = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
            continue
        key = {"failure": "failed", "error": "error", "skipped": "skipped"}[outcome.tag]
        counts[key] += 1
        if key != "skipped":
            message = (outcome.get("message") or outcome.text or "").strip().splitlines()
            failures.append(f"{key.upper()} {name}: {' | '.join(message[:3])[:400]}")
    return counts, failures


def _log_counts(log: str) -> tuple[dict[str, int], list[str]]:
    """Counts from pytest -v lines (``path::test PASSED``), for a run cut off before its XML."""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    failures = []
    for match in re.finditer(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)", log, re.M):
        key = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped"}[match[2]]
        counts[key] += 1
        if key in ("failed", "error"):
            failures.append(f"{match[2]} {match[1]}")
    return counts, failures


def _bench_table(path: Path) -> list[str]:
    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return ["(no bench.json)"]
    lines = ["| configuration | precision | ours ms | graph ms | torch ms | ours/torch | target | "
             "TFLOP/s ours | TFLOP/s torch |", "|---|---|---|---|---|---|---|---|---|"]
    for row in record.get("benches", []):
        lines.append(f"| {row['name']} | {row['precision']} | {row['ours_ms']:.3f} | {row['graph_ms']:.3f} | "
                     f"{row['torch_ms']:.3f} | {row['ratio']:.3f} | <= {row['target']} {row['verdict']} | "
                     f"{row['ours_tflops']:.2f} | {row['torch_tflops']:.2f} |")
    for key, value in record.items():
        if key != "benches":
            lines.append(f"\n{key}: {json.dumps(value)}")
    return lines


def main(argv: list[str]) -> int:
    folder, stage, status, seconds, limit = Path(argv[0]), argv[1], int(argv[2]), float(argv[3]), argv[4]
    command = shlex.join(argv[6:]) if len(argv) > 5 and argv[5] == "--" else ""
    log_path = folder / f"{stage}.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    commit = _run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]) or "unknown"
    dirty = " (with uncommitted changes)" if _run(["git", "-C", str(REPO), "status", "--porcelain"]) else ""
    outcome = ("timed out" if status in (124, 137) else "passed" if status == 0 else "failed") + f" (exit {status})"
    lines = [f"# GPU check, stage `{stage}`: {outcome}", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- commit: {commit}{dirty}",
             f"- command: `{command}` (limit {limit} s, took {seconds:.0f} s)"]
    lines += [f"- {line}" for line in _environment()]
    junit = _junit(folder / f"{stage}.junit.xml")
    if junit is not None or re.search(r"::\S+ (PASSED|FAILED)", log):
        counts, failures = junit if junit is not None else _log_counts(log)
        source = "JUnit XML" if junit is not None else "the log (the run was cut off before its XML)"
        summary = ", ".join(f"{value} {key}" for key, value in counts.items())
        lines += ["", "## pytest", "", f"{summary} (from {source})"]
        lines += [""] + [f"- {failure}" for failure in failures] if failures else []
        durations = re.search(r"=+ slowest \d+ durations =+\n(.*?)(?:\n\n|\n=)", log, re.S)
        if durations:
            lines += ["", "Slowest:", "```", durations[1].strip(), "```"]
    if (folder / "bench.json").exists():
        lines += ["", "## Benchmark", ""] + _bench_table(folder / "bench.json")
    if junit is None and not re.search(r"::\S+ (PASSED|FAILED)", log):
        lines += ["", "## Log (last 60 lines)", "```", *log.splitlines()[-60:], "```"]
    (folder / "record.md").write_text("\n".join(lines) + "\n")
    return 0


#: the distributions whose versions phase 0 reports (absent ones say so)
_PACKAGES = ("numpy", "cupy-cuda13x", "cupy-cuda12x", "nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "jax", "jaxlib",
             "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin", "torch", "ml_dtypes", "mpi4py", "pytest",
             "pytest-timeout")


def first_call_environment() -> int:
    """Phase 0 of gpu_first_call.sh: Python, the packages, CUDA and cuDNN as the library finds them, one per line.

    Returns 3 (after a ``STOP:`` line saying why) when CuPy or cuDNN cannot run the cuDNN backend.
    """
    print(f"Python: {sys.version.split()[0]} ({sys.executable})")
    for package in _PACKAGES:
        try:
            print(f"{package}: {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            print(f"{package}: not installed")
    from cudnn_rnn import info

    facts = info.collect()
    cupy_facts, cudnn_facts = facts["cupy"], facts["cudnn"]
    print(f"GPU: {', '.join(cupy_facts.get('gpus', [])) or 'none'}")
    print(f"CUDA driver: {facts['cuda_driver']}; CUDA runtime (CuPy): {cupy_facts.get('cuda_runtime')}")
    print(f"cuDNN: {cudnn_facts.get('version', 'not available')} ({cudnn_facts.get('path', cudnn_facts.get('reason'))};"
          f" built for CUDA {cudnn_facts.get('built_for_cuda')})")
    print(f"cuDNN backend: {facts['backends']['cupy (cuDNN)']}; TF32 allowed: {facts['tf32_allowed']}")
    problem = info.cudnn_backend_problem()
    if problem is not None:
        print(f"STOP: the cuDNN backend cannot run here: {problem}")
        return 3
    return 0


def first_call_record(out: Path) -> int:
    """``out/record.md`` of a gpu_first_call.sh run: the environment, then each phase's line, counts and failures."""
    def text(name: str) -> str:
        path = out / name
        return path.read_text(errors="replace") if path.exists() else ""

    commit = _run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]) or "unknown"
    dirty = " (with uncommitted changes)" if _run(["git", "-C", str(REPO), "status", "--porcelain"]) else ""
    lines = ["# GPU first call", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- commit: {commit}{dirty}", "- command: `bash scripts/gpu_first_call.sh`", "",
             "## Environment (phase 0)", "", "```", *text("environment.txt").splitlines(), "```", "",
             "## Phases", "", "```", *text("summary.txt").splitlines(), "```"]
    for row in text("summary.txt").splitlines():
        phase = row.split()[0] if row.split() else ""
        log = text(f"{phase}.log")
        if not phase or phase == "environment" or not log:
            continue
        lines += ["", f"### {phase}", ""]
        if re.search(r"::\S+ (PASSED|FAILED|ERROR|SKIPPED)", log):
            counts, failures = _log_counts(log)
            lines.append(", ".join(f"{value} {key}" for key, value in counts.items()))
            lines += [f"- {failure}" for failure in failures[:40]]
        else:
            steps = [line for line in log.splitlines() if line.startswith(("PASS ", "FAIL "))]
            lines += ["```", *(steps or log.splitlines()[-30:]), "```"]
    (out / "record.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["environment"]:
        sys.exit(first_call_environment())
    if sys.argv[1:2] == ["first-call"] and len(sys.argv) == 3:
        sys.exit(first_call_record(Path(sys.argv[2])))
    sys.exit(main(sys.argv[1:]))
