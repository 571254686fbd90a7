"""scripts/gpu_check.sh and the record it leaves (scripts/gpu_record.py), and the GPU scripts, on a
machine without a GPU: each stage fails (rather than skipping) with its log and record.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_testing import REPO


@pytest.mark.parametrize("script", ["benchmarks/bench_gpu.py", "scripts/check_layout.py", "scripts/gpu_smoke.py"])
def test_gpu_scripts_explain_a_missing_gpu(script: str) -> None:
    code = (f"import sys, runpy; sys.modules['cupy'] = None; sys.argv = [{script!r}]; "
            f"runpy.run_path({script!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "needs a CUDA GPU with CuPy" in result.stderr


def _gpu_check(tmp_path: Path, *stages: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), *stages], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=120)


def _python_that(folder: Path, first: str) -> Path:
    """This interpreter behind a shell script that runs the shell line ``first`` before it."""
    python = folder / "python"
    python.write_text(f'#!/bin/sh\n{first}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def test_gpu_check_refuses_an_unknown_stage(tmp_path: Path) -> None:
    subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu_check.sh")], check=True)
    for stages in ((), ("everything",), ("smoke", "nope")):
        result = _gpu_check(tmp_path, *stages)
        assert result.returncode == 2 and "usage: bash scripts/gpu_check.sh STAGE" in result.stderr, stages
    assert list(tmp_path.iterdir()) == [], "nothing ran"


def test_gpu_check_stage_leaves_its_log_and_record(tmp_path: Path) -> None:
    result = _gpu_check(tmp_path, "smoke", "layout")
    assert result.returncode == 1  # both stages fail here: no GPU
    for stage, script in (("smoke", "scripts/gpu_smoke.py"), ("layout", "scripts/check_layout.py")):
        assert "needs a CUDA GPU with CuPy" in (tmp_path / stage / f"{stage}.log").read_text()
        record = (tmp_path / stage / "record.md").read_text()
        assert record.startswith(f"# GPU check, stage `{stage}`: failed (exit 2)"), record
        assert f"- command: `{sys.executable} {script}` (limit 180 s, took " in record
        for fact in ("- date: ", "- commit: ", "- GPU: ", "- CUDA driver: ", "- cuDNN: ", "- CuPy: ", "- PyTorch: "):
            assert fact in record, fact


def test_gpu_check_pytest_stage_fails_without_a_gpu_instead_of_skipping(tmp_path: Path) -> None:
    result = _gpu_check(tmp_path, "tests")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "CUDNN_RNN_REQUIRE_GPU=1, but the GPU tests cannot run" in (tmp_path / "tests" / "tests.log").read_text()
    record = (tmp_path / "tests" / "record.md").read_text()
    assert record.startswith("# GPU check, stage `tests`: failed (exit 4)"), record


def test_gpu_check_takes_mpich_from_a_wheel_folder_only_when_mpi4py_has_no_mpi(tmp_path: Path) -> None:
    python = _python_that(tmp_path, '[ "$2" = "from mpi4py import MPI" ] && exit 1')  # mpi4py finds no MPI
    empty = tmp_path / "wheels"
    empty.mkdir()
    result = _gpu_check(tmp_path / "out", "smoke", PYTHON=str(python), MPICH_WHEEL_DIR=str(empty),
                        TMPDIR=str(tmp_path))
    assert result.returncode == 2 and f"MPICH_WHEEL_DIR={empty} holds no mpich-*.whl" in result.stderr, result
    assert not (tmp_path / "out" / "smoke").exists(), "no stage ran"
    result = _gpu_check(tmp_path / "out", "smoke", MPICH_WHEEL_DIR=str(empty))  # this mpi4py loads its MPI
    assert result.returncode == 1 and "MPI for mpi4py" not in result.stdout, result
    assert "- MPI: mpi4py " in (tmp_path / "out" / "smoke" / "record.md").read_text()


def test_gpu_check_fits_its_stages_into_a_budget(tmp_path: Path) -> None:
    # 100 s less 30 for the records, less the whole seconds bash counts before the stage starts: a
    # limit of 70 s, or 69 s when the start straddles a second boundary (or later on a slow machine)
    result = _gpu_check(tmp_path / "some", "smoke", BUDGET="100")
    limit = re.search(r"\(limit (\d+) s, took ", (tmp_path / "some" / "smoke" / "record.md").read_text())
    assert limit is not None and 60 <= int(limit.group(1)) <= 70, result
    result = _gpu_check(tmp_path / "none", "smoke", "layout", BUDGET="80")  # 50 s left: nothing starts
    assert result.returncode == 1 and "== smoke: not run, BUDGET=80 s is spent" in result.stdout, result
    for stage in ("smoke", "layout"):
        record = (tmp_path / "none" / stage / "record.md").read_text()
        assert record.startswith(f"# GPU check, stage `{stage}`: not run (exit 3)"), record


def test_gpu_check_stage_is_cut_off_at_its_limit(tmp_path: Path) -> None:
    python = _python_that(tmp_path, '[ "$1" = scripts/gpu_smoke.py ] && sleep 60')  # the smoke script hangs
    out = tmp_path / "out"
    result = _gpu_check(out, "smoke", PYTHON=str(python), STAGE_TIMEOUT="2")
    assert result.returncode == 1
    record = (out / "smoke" / "record.md").read_text()
    assert record.startswith("# GPU check, stage `smoke`: timed out (exit 124)"), record
    assert "(limit 2 s, took " in record


def test_gpu_record_counts_pytest_results_from_xml_or_a_cut_off_log(tmp_path: Path) -> None:
    record_script = str(REPO / "scripts" / "gpu_record.py")
    (tmp_path / "tests.log").write_text("tests/gpu/test_a.py::test_one PASSED\ntests/gpu/test_a.py::test_two FAILED\n"
                                        "tests/gpu/test_b.py::test_three[x] SKIPPED (needs two GPUs)\n")
    subprocess.run([sys.executable, record_script, str(tmp_path), "tests", "124", "540", "540", "--", "pytest"],
                   check=True, timeout=120)
    record = (tmp_path / "record.md").read_text()
    assert "1 passed, 1 failed, 0 error, 1 skipped (from the log (the run was cut off before its XML))" in record
    assert "- FAILED tests/gpu/test_a.py::test_two" in record
    (tmp_path / "tests.junit.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.gpu.test_a" name="test_one"/>'
        '<testcase classname="tests.gpu.test_a" name="test_two"><failure message="assert 1 == 2">trace</failure>'
        '</testcase></testsuite></testsuites>')
    subprocess.run([sys.executable, record_script, str(tmp_path), "tests", "1", "3", "540", "--", "pytest"],
                   check=True, timeout=120)
    record = (tmp_path / "record.md").read_text()
    assert record.startswith("# GPU check, stage `tests`: failed (exit 1)")
    assert "1 passed, 1 failed, 0 error, 0 skipped (from JUnit XML)" in record
    assert "- FAILED tests.gpu.test_a::test_two: assert 1 == 2" in record


def _plan_commands(text: str, prefix: str) -> list[str]:
    """The commands of the two-command GPU plan in ``text``: lines from ``nvidia-smi -L`` or ``MPICH_WHEEL_DIR=``
    to the ``bash scripts/gpu_check.sh`` that ends each, with ``prefix`` and line continuations taken away."""
    commands, current = [], ""
    for line in text.splitlines():
        line = line.removeprefix(prefix).strip()
        if not current and not line.startswith(("nvidia-smi -L;", "MPICH_WHEEL_DIR=")):
            continue
        current += " " + line.removesuffix("\\").strip()
        if "bash scripts/gpu_check.sh" in line:
            commands.append(" ".join(current.split()))
            current = ""
    return commands


def test_the_gpu_plan_is_one_plan_in_the_script_and_the_contributing_page() -> None:
    header = (REPO / "scripts" / "gpu_check.sh").read_text().split("\nset -u")[0]
    script_plan = _plan_commands(header, "#")
    page_plan = _plan_commands((REPO / "docs" / "contributing.md").read_text(), "")
    assert len(script_plan) == 2 and script_plan == page_plan
    first, second = script_plan
    assert first.startswith("nvidia-smi -L;") and first.endswith("bash scripts/gpu_check.sh smoke tests")
    assert "BUDGET=380" in first and "-k 'not distributed and not persist_dynamic'" in first
    assert "BUDGET=250" in second and second.endswith("bash scripts/gpu_check.sh layout tests long")
    for command in script_plan:  # cuDNN's own log to stderr; MPI from the wheel folder that travels with the tree
        for setting in ("CUDNN_LOGLEVEL_DBG=2", "CUDNN_LOGDEST_DBG=stderr", "MPICH_WHEEL_DIR=.gpu-wheels",
                        "--timeout=120"):
            assert setting in command, (setting, command)
    ignored = subprocess.run(["git", "check-ignore", "-q", ".gpu-wheels/mpich-5.0.2-py3-none-any.whl"], cwd=REPO)
    assert ignored.returncode == 0, ".gpu-wheels/ is git-ignored"


def test_the_tests_stage_builds_no_persist_dynamic_kernels(tmp_path: Path) -> None:
    # persist_dynamic's tests compile kernels with NVRTC (seconds each): marked long, so the tests stage's
    # "-m 'not long and not sanitizer'" leaves them to the long stage. Collected here with a stand-in CuPy.
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("import types\nclass ndarray: ...\n"
                                                   "cuda = types.SimpleNamespace(runtime=types.SimpleNamespace("
                                                   "getDeviceCount=lambda: 0))\n")

    def collected(marks: str) -> list[str]:
        result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                 "tests/gpu/test_algos_gpu.py", "-m", marks], cwd=REPO, capture_output=True,
                                text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(tmp_path)})
        return [line for line in result.stdout.splitlines() if "::" in line]

    short, long = collected("not long and not sanitizer"), collected("long")
    assert short and not [test for test in short if "persist_dynamic" in test]
    assert long and all("persist_dynamic" in test for test in long)
