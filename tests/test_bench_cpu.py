"""benchmarks/bench_cpu.py --quick runs to the end (every table, every quick configuration, every target), and
bench_reference_revisions.py runs a revision of the reference backend beside the working tree.

It needs torch and onnxruntime (the test and oracle extras), which CI installs: no skip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

from rnn_testing import load_module

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_cpu.py"


def load_bench_cpu() -> ModuleType:
    """The script as a module, for its tables, configurations and targets."""
    return load_module(SCRIPT)


def test_quick_run_prints_every_table_configuration_and_target() -> None:
    bench_cpu = load_bench_cpu()
    assert any(bench.inputs != bench.hidden and bench.dropout for bench in bench_cpu.QUICK)
    assert any(bench.mode == "gru" and bench.bidirectional for bench in bench_cpu.QUICK)
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeats", "1", "--warmup", "0"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for title, columns in bench_cpu.TABLES.items():
        assert title in lines, (title, result.stdout)
        header = lines[lines.index(title) + 1]
        assert header.startswith("configuration") and all(name in header for name, _ in columns), header
    for bench in bench_cpu.QUICK:  # a row in each table
        rows = [line for line in lines if line.startswith(bench.name() + " ")]
        assert len(rows) == len(bench_cpu.TABLES), (bench.name(), result.stdout)
    for text, _ in bench_cpu.TARGETS.values():
        assert f"  {text}: met" in lines or any(line.startswith(f"  {text}: NOT met") for line in lines), text


def test_a_revision_of_the_reference_backend_runs_beside_the_working_tree() -> None:
    """bench_reference_revisions.py loads _reference (and _cells) as they are at HEAD, checks that both
    compute the same step and times them."""
    bench_cpu = load_bench_cpu()
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_reference_revisions.py"), "HEAD",
                             "--quick", "--repeats", "1"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    for bench in bench_cpu.QUICK:
        assert any(line.startswith(bench.name() + " ") for line in result.stdout.splitlines()), result.stdout


def load_cpu_load() -> ModuleType:
    """benchmarks/_cpu_load.py as a module."""
    return load_module(REPO / "benchmarks" / "_cpu_load.py")


def test_the_competing_process_runs_inside_the_block_and_is_gone_after_an_error() -> None:
    cpu_load = load_cpu_load()
    try:
        with cpu_load.competing_process(settle=0.2) as process:
            assert process.poll() is None  # running
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert process.poll() is not None  # stopped and waited for


def test_the_example_settings_differ_only_in_the_thread_variables() -> None:
    cpu_load = load_cpu_load()
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "2", "CUDNN_RNN_NUM_THREADS": "3"}
    default, one = (cpu_load.child_environment(base, setting) for setting in cpu_load.SETTINGS)
    for name in cpu_load.THREAD_VARIABLES:
        assert name not in default
    assert one["OMP_NUM_THREADS"] == one["OPENBLAS_NUM_THREADS"] == "1"
    assert default["PATH"] == one["PATH"] == "/bin"
