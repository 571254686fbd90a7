"""Write the record of one stage of scripts/gpu_check.sh: ``<stage folder>/record.md``.

The record holds what a later reader needs to trust or redo the run: date, commit, the GPU,
driver, CUDA runtime, cuDNN and CuPy (and PyTorch) versions, the command, its exit status and
time, then the stage's results: pytest's pass/fail/skip counts with each failure's first lines
(from the JUnit XML, or from the log when the stage was cut off), the benchmark table (from
bench.json), or the log's summary lines. Commit it under benchmarks/results/.

Usage (gpu_check.sh calls it): python3 scripts/gpu_record.py FOLDER STAGE STATUS SECONDS LIMIT -- COMMAND...

scripts/gpu_first_call.sh calls it in three more ways: ``environment`` (its phase 0: the versions, one
per line; exit 3 when CuPy or cuDNN cannot run the backend), ``counts LOG`` (a phase's pass/fail counts for
its line of summary.txt, from the same parser of pytest's ``-v`` lines) and ``first-call OUT``
(``OUT/record.md`` from the folder's environment.txt, summary.txt and phase logs, rewritten after every
phase).

A record names its commit. A copy of the tree without ``.git`` (as a GPU machine may get) names its files'
fingerprint instead (``_files_fingerprint``), unless ``$CUDNN_RNN_COMMIT`` says; before the record is
committed, ``python3 scripts/gpu_record.py find-commit RECORD`` in the repository puts the commit with those
files into its ``- commit:`` line.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]
from _files_fingerprint import files_fingerprint, find_commit  # noqa: E402  (beside this script)

#: how many hex digits of the files' fingerprint a record shows
FINGERPRINT_DIGITS = 16


def _cuda_facts(facts: dict[str, Any]) -> list[str]:
    """The GPU, CUDA, cuDNN and backend lines of ``cudnn_rnn.info.collect()``'s ``facts``: both records have them."""
    cupy_facts, cudnn_facts = facts["cupy"], facts["cudnn"]
    where = cudnn_facts.get("path", cudnn_facts.get("reason"))
    return [f"GPU: {', '.join(cupy_facts.get('gpus', [])) or 'none'}",
            f"CUDA driver: {facts['cuda_driver']}; CUDA runtime (CuPy): {cupy_facts.get('cuda_runtime')}",
            f"cuDNN: {cudnn_facts.get('version', 'not available')} ({where}; "
            f"built for CUDA {cudnn_facts.get('built_for_cuda')})",
            f"cuDNN backend: {facts['backends']['cupy (cuDNN)']}; TF32 allowed: {facts['tf32_allowed']}"]


def _environment() -> list[str]:
    lines = []
    try:
        from cudnn_rnn import info

        facts = info.collect()
        lines += _cuda_facts(facts)
        lines.append(f"CuPy: {facts['cupy'].get('version', 'not installed')}; NumPy {facts['numpy']}; "
                     f"Python {facts['python']}")
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


def _commit() -> str:
    """The checkout's commit (and whether its tree differs); in a copy without .git, $CUDNN_RNN_COMMIT or else the
    files' fingerprint, which ``find-commit`` turns into the commit on a machine with the repository."""
    commit = _run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    if commit:
        return commit + (" (with uncommitted changes)" if _run(["git", "-C", str(REPO), "status", "--porcelain"])
                         else "")
    given = os.environ.get("CUDNN_RNN_COMMIT", "").strip()
    if given:
        return f"{given} (from CUDNN_RNN_COMMIT)"
    try:
        fingerprint = files_fingerprint(REPO)[:FINGERPRINT_DIGITS]
    except (OSError, ValueError) as error:
        return f"not known: a copy without .git whose files could not be fingerprinted ({error})"
    return (f"files {fingerprint} (a copy without .git: `python3 scripts/gpu_record.py find-commit record.md` in "
            "the repository names the commit)")


def find_commit_of_record(record: Path) -> int:
    """Put the commit whose files a record's ``- commit: files F`` line names into that line (exit 1 if none has)."""
    text = record.read_text()
    match = re.search(r"^- commit: files ([0-9a-f]+) .*$", text, re.M)
    if match is None:
        print(f"{record}: no '- commit: files ...' line (its commit is named already?)", file=sys.stderr)
        return 1
    commit = find_commit(REPO, match[1])
    if commit is None:
        print(f"{record}: no commit of HEAD's history has the files {match[1]} (changes that were not committed "
              "when it ran?)", file=sys.stderr)
        return 1
    line = f"- commit: {commit[:12]} (found by its files' fingerprint {match[1]})"
    record.write_text(text[:match.start()] + line + text[match.end():])
    print(line)
    return 0


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


#: pytest's word for a test's outcome in a ``-v`` line -> the key it is counted under (its last line's words)
_OUTCOMES = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped", "XFAIL": "xfailed",
             "XPASS": "xpassed"}
_PYTEST_KEYS = ("passed", "failed", "error", "skipped")  # always shown; xfailed and xpassed when there are any
#: a ``-v`` line: the test's ID (a file's path, ``::``, then anything: parametrized IDs hold spaces, brackets,
#: quotes and even these words), one outcome, a skip's reason, the progress column, and nothing after
_VERBOSE_LINE = re.compile(r"^(\S+?\.py::.*) (" + "|".join(_OUTCOMES) + r")(?: \(.*\))?(?:\s+\[\s*\d+%\])?\s*$",
                           re.M)
#: a test that started but has no outcome line: its ID, then the end of the line or what cut it off (a crash's
#: "Fatal Python error", the stack faulthandler prints at the phase's limit)
_STARTED_LINE = re.compile(r"^(\S+?\.py::[^\s\[]+(?:\[.*?\])?)(?: |$)", re.M)
#: pytest's last line: ``==== 1 failed, 287 passed, 2 skipped in 101.52s (0:01:41) ====``
_FINAL_LINE = re.compile(r"^=+ (\d+ \w+.*?|no tests ran) in [\d.]+s(?: \([\d:]+\))? =+$", re.M)


def _log_counts(log: str) -> tuple[dict[str, int], list[str]]:
    """Counts and failures from pytest's ``-v`` lines (``<test ID> PASSED  [ 12%]``), whatever the IDs hold.

    A test with an error at teardown has two lines, as pytest counts it twice. Where the log has pytest's last
    line, its counts are the ones given (and a difference from the lines' is listed); where the log ends inside
    a test (a crash, or the phase's limit), that test is listed as ``ENDED INSIDE``.
    """
    counts = dict.fromkeys(_PYTEST_KEYS, 0)
    failures = []
    outcomes = list(_VERBOSE_LINE.finditer(log))
    for match in outcomes:
        key = _OUTCOMES[match[2]]
        counts[key] = counts.get(key, 0) + 1
        if key in ("failed", "error"):
            failures.append(f"{match[2]} {match[1]}")
    final = _FINAL_LINE.findall(log)
    if final:
        stated = {key.rstrip("s") if key.startswith("error") else key: int(number)
                  for number, key in re.findall(r"(\d+) (\w+)", final[-1])}
        pytests = {key: stated.get(key, 0) for key in (*_PYTEST_KEYS, "xfailed", "xpassed")
                   if key in _PYTEST_KEYS or stated.get(key)}
        if pytests != counts:
            failures.append(f"COUNTS the -v lines give {_counts_text(counts)}; pytest's last line {final[-1]}")
        counts = pytests
    else:
        started = _STARTED_LINE.findall(log, outcomes[-1].end() if outcomes else 0)  # begun after the last outcome
        if started:
            failures.append(f"ENDED INSIDE {started[-1]} (no outcome: the phase crashed or was cut there)")
    return counts, failures


def has_pytest_lines(log: str) -> bool:
    """Whether ``log`` holds pytest's ``-v`` outcome lines or its last line."""
    return bool(_VERBOSE_LINE.search(log) or _FINAL_LINE.search(log))


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
    outcome = ("timed out" if status in (124, 137) else "passed" if status == 0 else "failed") + f" (exit {status})"
    lines = [f"# GPU check, stage `{stage}`: {outcome}", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- commit: {_commit()}",
             f"- command: `{command}` (limit {limit} s, took {seconds:.0f} s)"]
    lines += [f"- {line}" for line in _environment()]
    junit = _junit(folder / f"{stage}.junit.xml")
    if junit is not None or has_pytest_lines(log):
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
    if junit is None and not has_pytest_lines(log):
        lines += ["", "## Log (last 60 lines)", "```", *log.splitlines()[-60:], "```"]
    (folder / "record.md").write_text("\n".join(lines) + "\n")
    return 0


#: the distributions whose versions phase 0 reports (absent ones say so)
_PACKAGES = ("numpy", "cupy-cuda13x", "cupy-cuda12x", "nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "jax", "jaxlib",
             "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin", "torch", "ml_dtypes", "mpi4py", "pytest",
             "pytest-timeout")


def first_call_environment() -> int:
    """Phase 0 of gpu_first_call.sh: Python, the packages, CUDA and cuDNN as the library finds them, one per line.

    The packages' versions come from their metadata (importing JAX or PyTorch costs seconds). Returns 3,
    after a ``STOP:`` line saying why, when CuPy or cuDNN cannot run the cuDNN backend.
    """
    print(f"Python: {sys.version.split()[0]} ({sys.executable})")
    for package in _PACKAGES:
        try:
            print(f"{package}: {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            print(f"{package}: not installed")
    try:
        from cudnn_rnn import info

        print("\n".join(_cuda_facts(info.collect())))
        problem = info.cudnn_backend_problem()
    except Exception as error:  # the package itself cannot be imported or asked: that is the answer
        problem = f"cudnn_rnn.info failed: {type(error).__name__}: {error}"
    if problem is not None:
        print(f"STOP: the cuDNN backend cannot run here: {' '.join(str(problem).split())}")
        return 3
    return 0


def phase_counts(log: str) -> tuple[dict[str, int], list[str]] | None:
    """A first-call phase's counts and failures: pytest's ``-v`` lines (:func:`_log_counts`), or the smoke's
    ``PASS``/``FAIL`` step lines (counts ``passed`` and ``failed``); None when the log has neither."""
    if has_pytest_lines(log):
        return _log_counts(log)
    steps = re.findall(r"^(PASS|FAIL) (\S.*?)(?:\s{2,}|$)", log, re.M)
    if not steps:
        return None
    failures = [f"FAIL {name.strip()}" for verdict, name in steps if verdict == "FAIL"]
    return {"passed": len(steps) - len(failures), "failed": len(failures)}, failures


def _counts_text(counts: dict[str, int]) -> str:
    return "  ".join(f"{value} {key}" for key, value in counts.items())


def first_call_counts(log_path: Path) -> int:
    """Print a phase log's counts for its line of summary.txt (nothing when it has none)."""
    found = phase_counts(log_path.read_text(errors="replace")) if log_path.exists() else None
    if found is not None:
        print(_counts_text(found[0]))
    return 0


#: summary.txt's lines, as gpu_first_call.sh writes them: phase, exit status, seconds, then counts and notes
_SUMMARY_LINE = re.compile(r"^(\S+)\s+exit (\S+)\s+(\S+) s(?:\s+(.*))?$")


def _fact(environment: str, *labels: str) -> str | None:
    """The value of the first of phase 0's ``label: value`` lines that is there and installed ("not installed" when
    none is, None when none is there)."""
    found = None
    for label in labels:
        match = re.search(rf"^{re.escape(label)}: (.+)$", environment, re.M)
        if match and match[1].strip() != "not installed":
            return f"{match[1].strip()}" + (f" ({label})" if label.startswith("cupy-") else "")
        if match and found is None:
            found = match[1].strip()
    return found


def first_call_record(out: Path) -> int:
    """``out/record.md`` of a gpu_first_call.sh run: date, commit, versions, each phase's line, counts and failures.

    Its title starts with ``# GPU check`` so that the benchmarks page lists it with the GPU records once it is
    committed under benchmarks/results/.
    """
    def text(name: str) -> str:
        path = out / name
        return path.read_text(errors="replace") if path.exists() else ""

    environment, summary = text("environment.txt"), text("summary.txt")
    phases = [match.groups() for match in map(_SUMMARY_LINE.match, summary.splitlines()) if match]
    bad = [name for name, status, _, _ in phases if status != "0"]
    verdict = ("stopped at phase 0" if phases and phases[0][0] == "environment" and bad[:1] == ["environment"]
               else f"{len(bad)} of {len(phases)} phases did not pass ({', '.join(bad)})" if bad
               else f"all {len(phases)} phases passed" if phases else "no phase has ended yet")
    facts = [("GPU", ("GPU",)), ("driver (nvidia-smi)", ("nvidia-smi",)), ("CUDA driver", ("CUDA driver",)),
             ("cuDNN", ("cuDNN",)), ("cuDNN backend", ("cuDNN backend",)),
             ("CuPy", ("cupy-cuda13x", "cupy-cuda12x")), ("JAX", ("jax",)), ("jaxlib", ("jaxlib",)),
             ("PyTorch", ("torch",)), ("NumPy", ("numpy",)), ("Python", ("Python",))]
    lines = [f"# GPU check, first call: {verdict}", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- commit: {_commit()}", "- command: `bash scripts/gpu_first_call.sh`"]
    lines += [f"- {label}: {_fact(environment, *keys) or 'unknown'}" for label, keys in facts]
    lines += ["", "## Phases", "", "| phase | exit | seconds | passed | failed | error | skipped | note |",
              "|---|---|---|---|---|---|---|---|"]
    details: list[str] = []
    for name, status, seconds, rest in phases:
        log = text(f"{name}.log")
        found = phase_counts(log) if log else None
        counts, failures = found if found is not None else ({}, [])
        note = re.sub(r"\d+ (passed|failed|error|skipped)\s*", "", rest or "").strip().replace("|", "/")
        lines.append(f"| {name} | {status} | {seconds} | "
                     + " | ".join(str(counts[key]) if key in counts else "" for key in _PYTEST_KEYS) + f" | {note} |")
        if failures:
            details += ["", f"### {name}: what failed", ""] + [f"- {failure}" for failure in failures[:40]]
            details += [f"- ... and {len(failures) - 40} more"] if len(failures) > 40 else []
        if name == "smoke" and found is not None:
            details += ["", "### smoke: its steps", "", "```",
                        *[line[:300] for line in log.splitlines() if line.startswith(("PASS ", "FAIL "))], "```"]
        elif status != "0" and log and found is None:
            details += ["", f"### {name}: the end of its log", "", "```", *log.splitlines()[-30:], "```"]
    lines += details
    lines += ["", "## summary.txt", "", "```", *summary.splitlines(), "```",
              "", "## Environment (phase 0)", "", "```", *environment.splitlines(), "```"]
    (out / "record.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["environment"]:
        sys.exit(first_call_environment())
    if sys.argv[1:2] == ["first-call"] and len(sys.argv) == 3:
        sys.exit(first_call_record(Path(sys.argv[2])))
    if sys.argv[1:2] == ["counts"] and len(sys.argv) == 3:
        sys.exit(first_call_counts(Path(sys.argv[2])))
    if sys.argv[1:2] == ["find-commit"] and len(sys.argv) == 3:
        sys.exit(find_commit_of_record(Path(sys.argv[2])))
    sys.exit(main(sys.argv[1:]))
