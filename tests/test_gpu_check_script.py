"""scripts/gpu_check.sh and the record it leaves (scripts/gpu_record.py), and the GPU scripts, on a
machine without a GPU: each stage fails (rather than skipping) with its log and record.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_testing import REPO
from rnn_testing import load_script


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
    for folder in (empty, tmp_path / "missing"):  # no wheel never stops the stages: they run without MPI
        out = tmp_path / f"out-{folder.name}"
        result = _gpu_check(out, "smoke", PYTHON=str(python), MPICH_WHEEL_DIR=str(folder), TMPDIR=str(tmp_path))
        assert result.returncode == 1, result  # the smoke ran and failed: no GPU here
        assert f"warning: MPICH_WHEEL_DIR={folder} holds no mpich-*.whl: the stages run without MPI" in result.stderr
        assert (out / "smoke" / "record.md").read_text().startswith("# GPU check, stage `smoke`: failed (exit 2)")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "mpich-5.0.2-py3-none-manylinux_2_28_x86_64.whl").write_bytes(b"not a zip")
    result = _gpu_check(tmp_path / "out-broken", "smoke", PYTHON=str(python), MPICH_WHEEL_DIR=str(broken),
                        TMPDIR=str(tmp_path))  # a wheel that does not install does not stop them either
    assert result.returncode == 1 and "did not install: the stages run without MPI" in result.stderr, result
    assert (tmp_path / "out-broken" / "smoke" / "record.md").exists()
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


#: a test file whose IDs are the GPU suite's layout IDs (RNNConfig reprs: spaces, quotes, brackets, commas) and
#: IDs that hold the outcome words themselves; every outcome pytest prints in a -v line
_OUTCOMES_TEST = """
import pytest

from cudnn_rnn._cudnn._layout_check import layout_check_configs

GRID = layout_check_configs()[:7]


@pytest.fixture
def broken_setup():
    raise RuntimeError("setup fails")


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown fails")


@pytest.mark.parametrize("config", GRID, ids=repr)
def test_layout_table_matches_cudnn(config):
    index = GRID.index(config)
    assert index not in (1, 3, 5), "a difference"
    if index in (4, 6):
        pytest.skip("this cuDNN or GPU cannot run it")


@pytest.mark.parametrize("config", GRID[:1], ids=repr)
def test_setup_fails(config, broken_setup):
    pass


@pytest.mark.parametrize("word", ["a PASSED b", "c FAILED ] d"])
def test_teardown_fails(word, broken_teardown):
    pass


@pytest.mark.xfail
def test_expected_to_fail():
    raise AssertionError


@pytest.mark.xfail
def test_passes_unexpectedly():
    pass
"""


def _pytest(folder: Path, *options: str) -> str:
    """pytest's output over _OUTCOMES_TEST (in ``folder``) with ``options``."""
    (folder / "test_outcomes.py").write_text(_OUTCOMES_TEST)
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *options, "test_outcomes.py"],
                            cwd=folder, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    return result.stdout


def test_phase_counts_hold_every_test_id_whatever_it_holds(tmp_path: Path) -> None:
    log = _pytest(tmp_path, "-v", "-rfE", "--durations=10")  # as gpu_first_call.sh runs pytest
    last = log.rstrip().splitlines()[-1]
    assert re.fullmatch(r"=+ 3 failed, 4 passed, 2 skipped, 1 xfailed, 1 xpassed, 3 errors in .* =+", last), last
    ids = [line for line in _pytest(tmp_path, "--collect-only", "-q").splitlines() if "::" in line]
    assert len(ids) == 12 and sum(" " in test for test in ids) == 10, ids  # the layout IDs hold spaces
    record = load_script("gpu_record")
    counts, failures = record.phase_counts(log)
    assert counts == {"passed": 4, "failed": 3, "error": 3, "skipped": 2, "xfailed": 1, "xpassed": 1}
    short_summary = re.findall(r"^(FAILED|ERROR) (test_outcomes\.py::.*?)(?: - [A-Z]\w+: .*)?$", log, re.M)
    assert len(short_summary) == 6 and sorted(failures) == sorted(f"{word} {test}" for word, test in short_summary)
    (tmp_path / "core.log").write_text(log)
    summary = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_record.py"), "counts",
                              str(tmp_path / "core.log")], capture_output=True, text=True, check=True, timeout=60)
    assert summary.stdout == "4 passed  3 failed  3 error  2 skipped  1 xfailed  1 xpassed\n"

    # cut off inside the third test (a crash, or the phase's limit): the -v lines so far, and the test it ended in
    lines = log.splitlines()
    second = next(i for i, line in enumerate(lines) if line.startswith(ids[1] + " "))
    cut = "\n".join(lines[:second + 1] + [ids[2] + " Fatal Python error: Segmentation fault", "",
                                            "Current thread 0x00007f3a (most recent call first):"])
    counts, failures = record.phase_counts(cut)
    assert counts == {"passed": 1, "failed": 1, "error": 0, "skipped": 0}, counts
    assert failures == [f"FAILED {ids[1]}", f"ENDED INSIDE {ids[2]} (no outcome: the phase crashed or was cut there)"]


def _plan_commands(text: str, prefix: str) -> list[str]:
    """The commands of the two-command GPU plan in ``text``: ``bash scripts/gpu_first_call.sh``, and the lines from
    ``MPICH_WHEEL_DIR=`` to the ``bash scripts/gpu_check.sh`` that ends the next, with ``prefix`` and line
    continuations taken away."""
    commands, current = [], ""
    for line in text.splitlines():
        line = line.removeprefix(prefix).strip()
        if not current and not line.startswith(("bash scripts/gpu_first_call.sh", "MPICH_WHEEL_DIR=")):
            continue
        current += " " + line.removesuffix("\\").strip()
        if line.startswith("bash scripts/gpu_first_call.sh") or "bash scripts/gpu_check.sh" in line:
            commands.append(" ".join(current.split()))
            current = ""
    return commands


def test_the_gpu_plan_is_one_plan_in_the_script_and_the_contributing_page() -> None:
    header = (REPO / "scripts" / "gpu_check.sh").read_text().split("\nset -u")[0]
    script_plan = _plan_commands(header, "#")
    page_plan = _plan_commands((REPO / "docs" / "contributing.md").read_text(), "")
    assert len(script_plan) == 2 and script_plan == page_plan
    first, second = script_plan
    assert first == "bash scripts/gpu_first_call.sh"  # its own limits: it fits a command of 540 s
    assert "BUDGET=220" in second and second.endswith("bash scripts/gpu_check.sh layout tests long")
    # the second: cuDNN's own log to stderr; MPI from the wheel folder that travels with the tree
    for setting in ("CUDNN_LOGLEVEL_DBG=2", "CUDNN_LOGDEST_DBG=stderr", "MPICH_WHEEL_DIR=.gpu-wheels",
                    "--timeout=120", "-k 'distributed or persist_dynamic'"):
        assert setting in second, (setting, second)
    ignored = subprocess.run(["git", "check-ignore", "-q", ".gpu-wheels/mpich-5.0.2-py3-none-any.whl"], cwd=REPO)
    assert ignored.returncode == 0, ".gpu-wheels/ is git-ignored"
    # the first command's phases and files, as the script runs and writes them, in its header and on the page
    first_call = (REPO / "scripts" / "gpu_first_call.sh").read_text()
    first_header, page = first_call.split("\nset -u")[0], (REPO / "docs" / "contributing.md").read_text()
    phases = re.findall(r"^run_phase (\w+) ", first_call, re.M)
    assert phases == ["smoke", "core", "jax", "torch", "rest"]
    files = ["summary.txt", "environment.txt", *(f"{phase}.log" for phase in phases), "record.md"]
    assert len(files) <= 8, "at most 8 files come back from a GPU command"
    for phase in phases:
        assert f"#   {phase} " in first_header and f"`{phase}`" in page, phase
    for name in files:
        assert name in first_header and f"`{name}`" in page, name


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


# ---- scripts/gpu_first_call.sh ----------------------------------------------------------------------------
def _first_call(out: Path, **env: str) -> subprocess.CompletedProcess:
    """Run the script; a run that hangs fails the test at 120 s (its phases here are cut at seconds)."""
    environment = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_first_call.sh")], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=120)


def test_first_call_stops_at_phase_0_without_a_gpu(tmp_path: Path) -> None:
    subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu_first_call.sh")], check=True)
    result = _first_call(tmp_path)
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert f"== GPU first call: findings in {tmp_path}" in result.stdout
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert len(summary) == 1 and summary[0].startswith("environment  exit 3"), summary
    assert "STOP: the cuDNN backend cannot run here: " in summary[0]
    assert summary[0] in result.stdout
    facts = (tmp_path / "environment.txt").read_text()
    for fact in ("nvidia-smi -L:", "Python: ", "numpy: ", "cupy-cuda13x: ", "jax: ", "jaxlib: ", "torch: ", "GPU: ",
                 "CUDA driver: ", "cuDNN: ", "cuDNN backend: "):
        assert fact in facts, fact
    record = (tmp_path / "record.md").read_text()
    assert record.startswith("# GPU check, first call: stopped at phase 0"), record
    for fact in ("- date: ", "- commit: ", "- command: `bash scripts/gpu_first_call.sh`", "- GPU: none",
                 "- CUDA driver: ", "- cuDNN: ", "- CuPy: ", "- JAX: ", "- PyTorch: ", "| environment | 3 | "):
        assert fact in record, fact
    assert sorted(path.name for path in tmp_path.iterdir()) == ["environment.txt", "record.md", "summary.txt"]


def test_first_call_stops_when_phase_0_itself_crashes(tmp_path: Path) -> None:
    python = _python_that(tmp_path, '[ "$2" = environment ] && kill -SEGV $$')  # gpu_record.py environment crashes
    out = tmp_path / "out"
    result = _first_call(out, PYTHON=str(python))
    assert result.returncode == 3, (result.stdout, result.stderr)
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary == [summary[0]] and re.match(r"environment  exit 139 +\d+ s  STOP: the versions could not be "
                                                r"read \(scripts/gpu_record.py environment: exit 139\)$", summary[0])


#: a stand-in interpreter: phase 0 sees a GPU, the smoke segfaults, the core tests hang (in Python, for
#: FAKE_HANG seconds), the JAX tests print 20 MB and pass, the other pytest phases pass one test and fail one;
#: anything else runs this interpreter
_FAKE_PHASES = """#!/bin/bash
if [ "$1 $2" = "scripts/gpu_record.py environment" ]; then
    echo "GPU: Fake GPU"; echo "torch: 2.11.0+cu130"; echo "cuDNN backend: usable"; exit 0
fi
if [ "$1" = scripts/gpu_smoke.py ]; then
    echo "PASS environment     0.01 s  cuDNN log ${CUDNN_LOGLEVEL_DBG:-off}"
    echo "FAIL mode lstm       0.20 s  Traceback"
    echo "        AssertionError: dx: relative error 1"; kill -SEGV $$
fi
if [ "$1 $2" = "-m pytest" ]; then
    case "$*" in
        *" tests/gpu/test_backend.py"*) echo "tests/gpu/test_backend.py::test_first PASSED"
                                        exec PYTHON_ITSELF -c 'import os, time
def hang_here():
    time.sleep(float(os.environ.get("FAKE_HANG", "60")))
hang_here()' ;;
        *" tests/gpu/test_jax_gpu.py"*) head -c 20000000 /dev/zero | tr '\\0' x; echo
                                        echo "tests/gpu/test_jax_gpu.py::test_a PASSED"; exit 0 ;;
    esac
    echo "cuDNN log ${CUDNN_LOGLEVEL_DBG:-off}"
    echo "tests/gpu/test_x.py::test_b PASSED"; echo "tests/gpu/test_x.py::test_c FAILED"
    echo "tests/gpu/test_x.py::test_d SKIPPED (needs two GPUs)"; exit 1
fi
exec PYTHON_ITSELF "$@"
"""


def _fake_python(folder: Path) -> Path:
    python = folder / "python"
    python.write_text(_FAKE_PHASES.replace("PYTHON_ITSELF", sys.executable))
    python.chmod(0o755)
    return python


def test_first_call_phases_survive_a_crash_and_a_hang_and_keep_logs_small(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _first_call(out, PYTHON=str(_fake_python(tmp_path)), PHASE_LIMIT="3",
                         CUDNN_LOGLEVEL_DBG="3")  # the caller's cuDNN log level reaches no phase
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = (out / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["environment", "smoke", "core", "jax", "torch", "rest"], lines
    status = {line.split()[0]: line.split()[2] for line in lines}
    assert status == {"environment": "0", "smoke": "139", "core": "124", "jax": "0", "torch": "1", "rest": "1"}
    assert lines[1].endswith("1 passed  1 failed  killed by signal 11"), lines[1]
    assert lines[2].endswith("1 passed  0 failed  0 error  0 skipped  timed out at 3 s"), lines[2]
    assert "log cut: 20000" in lines[3] and "1 passed" in lines[3]
    assert lines[4].endswith("1 passed  1 failed  0 error  1 skipped"), lines[4]
    assert all(line in result.stdout for line in lines), "each line printed too"
    files = sorted(path.name for path in out.iterdir())
    assert len(files) <= 8 and files == ["core.log", "environment.txt", "jax.log", "record.md", "rest.log",
                                         "smoke.log", "summary.txt", "torch.log"]
    assert (out / "jax.log").stat().st_size <= 14 * 2**20 < 15 * 2**20
    assert (out / "jax.log").read_text().rstrip().endswith("test_a PASSED"), "the log's end is kept"
    assert "cuDNN log 2" in (out / "smoke.log").read_text(), "cuDNN's own log in the smoke"
    assert "cuDNN log off" in (out / "torch.log").read_text(), "and in no other phase"
    core = (out / "core.log").read_text()
    # SIGABRT, not SIGKILL, so Python prints its stack; which frame it lands in depends on how long the fake
    # took to start (on a busy machine, longer than the 3 s limit: still in Python's own startup)
    assert "Fatal Python error: Aborted" in core and "(most recent call first):\n  File " in core, core
    record = (out / "record.md").read_text()
    assert record.startswith("# GPU check, first call: 4 of 6 phases did not pass (smoke, core, torch, rest)")
    for row in ("| smoke | 139 | ", "| core | 124 | ", "| torch | 1 | ", "- PyTorch: 2.11.0+cu130",
                "- FAIL mode lstm", "- FAILED tests/gpu/test_x.py::test_c"):
        assert row in record, row
    tails, summary = result.stdout.split("== summary (")
    assert "== torch: the last 30 lines of torch.log" in tails and "== jax: the last" not in tails
    assert summary.splitlines()[1:] == lines, "the output ends with the summary: what comes back first"


def test_first_call_does_not_start_a_phase_its_budget_cannot_hold(tmp_path: Path) -> None:
    python = _fake_python(tmp_path)
    # 62 s less 30 for the records: the smoke's own 150 s shrink to 32 (31 when a second boundary passes)
    result = _first_call(tmp_path / "some", PYTHON=str(python), BUDGET="62", FAKE_HANG="0")
    assert re.search(r"== smoke \(limit 3[12] s\)", result.stdout), result.stdout
    result = _first_call(tmp_path / "none", PYTHON=str(python), BUDGET="55")  # 25 s left: nothing starts
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = (tmp_path / "none" / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["environment", "smoke", "core", "jax", "torch", "rest"], lines
    for line in lines[1:]:
        assert re.search(r"exit - +0 s  not run: 2\d s of BUDGET=55 left \(less 30 for the records\), it needs 30$",
                         line), line
    assert sorted(path.name for path in (tmp_path / "none").iterdir()) == ["environment.txt", "record.md",
                                                                          "summary.txt"]
    assert "| rest | - | 0 |" in (tmp_path / "none" / "record.md").read_text()


def _commit_tree_as_it_travels(repo: Path) -> str:
    """``repo``: a new git repository holding the files of this checkout that travel to a GPU machine (tracked and
    untracked-not-ignored, as they are now), committed; returns the commit."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run(git + ["init", "-q"], cwd=repo, check=True)
    subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-q", "-m", "the tree"], cwd=repo, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_first_call_record_names_the_commit_of_a_copy_without_git(tmp_path: Path) -> None:
    repo, copy, out = tmp_path / "repo", tmp_path / "copy", tmp_path / "out"
    repo.mkdir()
    commit = _commit_tree_as_it_travels(repo)
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))  # the copy a GPU machine gets: no .git
    for junk in ("cudnn_rnn/__pycache__/config.cpython-312.pyc", ".venv-test/bin/python", "docs/_build/index.html"):
        (copy / junk).parent.mkdir(parents=True, exist_ok=True)
        (copy / junk).write_text("what the run and the machine leave: ignored")
    (copy / "scripts" / "gpu_first_call.sh").chmod(0o644)  # a copy that lost its modes has the same files
    out.mkdir()
    (out / "summary.txt").write_text("environment  exit 0        1 s  GPU: NVIDIA H100 80GB HBM3\n"
                                     "smoke        exit 0       20 s  2 passed  0 failed\n")
    (out / "smoke.log").write_text("PASS environment     0.10 s  GPU NVIDIA H100\nPASS mode lstm       0.20 s  ok\n")
    environment = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    environment.pop("CUDNN_RNN_COMMIT", None)

    def record(script_root: Path, *arguments: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script_root / "scripts" / "gpu_record.py"), *arguments],
                              capture_output=True, text=True, timeout=60, env={**environment, **env})

    assert record(copy, "first-call", str(out), CUDNN_RNN_COMMIT="abc1234").returncode == 0
    text = (out / "record.md").read_text()
    assert text.startswith("# GPU check, first call: all 2 phases passed"), text
    assert "- commit: abc1234 (from CUDNN_RNN_COMMIT)" in text and "| smoke | 0 | 20 | 2 | 0 |" in text, text

    assert record(copy, "first-call", str(out)).returncode == 0
    line = re.search(r"^- commit: files ([0-9a-f]{16}) \(a copy without \.git: `python3 scripts/gpu_record\.py "
                     r"find-commit record\.md` in the repository names the commit\)$", (out / "record.md").read_text(),
                     re.M)
    assert line is not None, (out / "record.md").read_text()
    found = record(repo, "find-commit", str(out / "record.md"))
    assert found.returncode == 0, found.stderr
    named = f"- commit: {commit[:12]} (found by its files' fingerprint {line[1]})"
    assert found.stdout.strip() == named and f"\n{named}\n" in (out / "record.md").read_text()

    (copy / "README.md").write_text((copy / "README.md").read_text() + "\n")  # a change that was not committed
    assert record(copy, "first-call", str(out)).returncode == 0
    refused = record(repo, "find-commit", str(out / "record.md"))
    assert refused.returncode == 1 and "no commit of HEAD's history has the files" in refused.stderr, refused
