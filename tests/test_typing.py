"""The package type-checks: `mypy` in strict mode (settings in pyproject.toml) finds nothing.

It checks the package the tests import: the checkout's ``cudnn_rnn/`` in a development install, the
installed files when CI runs the suite against the built wheel.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cudnn_rnn

#: checks of the repository's sources, alike from the checkout and the wheel: CI runs them once (see .ci/run)
pytestmark = pytest.mark.sources

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(cudnn_rnn.__file__).resolve().parent


#: a user's module: what a type checker must see of the layers' arguments and of the names that load at first use
USER = ("from cudnn_rnn import GRU, LSTM, checkpoint\n"
        "LSTM(3, 4, 2, bidirectional=True, num_proj=2, dtype='float64')\n"
        "GRU(3, 4, bogus=1)\n"
        "GRU(3, 4, num_proj=2)\n"
        "LSTM('3', 4)\n"
        "from cudnn_rnn.torch import RNN as TorchRNN\n"
        "TorchRNN(3, 4, activation='relu', xp=None)\n"
        "import cudnn_rnn\n"
        "cudnn_rnn.convert.read_file(1)\n"
        "cudnn_rnn.set_num_threads('4')\n"
        "cudnn_rnn.LTSM\n"
        "manager = checkpoint.CheckpointManager\n"
        "adam = cudnn_rnn.optim.Adam\n")


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One strict mypy run over a copy of the package's files (checked as sources: an installed package's folder
    holds other packages too) and :data:`USER`, which the tests below read their files' errors from."""
    folder = tmp_path_factory.mktemp("typing")
    shutil.copytree(PACKAGE, folder / "cudnn_rnn", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "user.py").write_text(USER, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                           "--no-incremental", "cudnn_rnn", "user.py"],
                          cwd=folder, capture_output=True, text=True, timeout=600)


def _errors(run: subprocess.CompletedProcess[str], in_user: bool) -> list[str]:
    return [line for line in run.stdout.splitlines()
            if ": error:" in line and line.startswith("user.py:") == in_user]


def test_mypy_strict_finds_nothing(mypy_run: subprocess.CompletedProcess[str]) -> None:
    assert not _errors(mypy_run, in_user=False), mypy_run.stdout + mypy_run.stderr
    # it ran to the end and checked the package: only user.py's errors, with the whole package read
    checked = re.search(r"^Found (\d+) errors in 1 file \(checked (\d+) source files\)$", mypy_run.stdout, re.M)
    assert checked and int(checked[1]) == len(_errors(mypy_run, in_user=True)), mypy_run.stdout + mypy_run.stderr
    assert int(checked[2]) == len(list(PACKAGE.rglob("*.py"))) + 1, mypy_run.stdout


def test_a_type_checker_sees_the_layers_arguments_and_the_names_that_load_at_first_use(
        mypy_run: subprocess.CompletedProcess[str]) -> None:
    # each class's constructor, as its source states it, is what a type checker sees: its names (another class's
    # argument is refused) and types; and it sees the names ``import cudnn_rnn`` loads at first use as their own
    errors = _errors(mypy_run, in_user=True)
    assert [line.split(":")[:2] for line in errors] == [["user.py", str(n)] for n in (3, 4, 5, 7, 9, 10, 11)], \
        mypy_run.stdout
    assert 'Unexpected keyword argument "bogus" for "GRU"' in errors[0], mypy_run.stdout
    assert 'Unexpected keyword argument "num_proj" for "GRU"' in errors[1] and '"str"' in errors[2], mypy_run.stdout
    assert 'Unexpected keyword argument "xp" for "RNN"' in errors[3], mypy_run.stdout
    assert '"read_file" has incompatible type "int"' in errors[4] and '"set_num_threads"' in errors[5], \
        mypy_run.stdout
    assert 'has no attribute "LTSM"' in errors[6], mypy_run.stdout


def test_the_settings_are_strict_with_no_blanket_ignores() -> None:
    """What the check above means: strict mode on, and no module of the package told to be quiet."""
    import tomllib

    settings = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert settings["strict"] is True
    for override in settings.get("overrides", []):
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        assert not [m for m in modules if m.split(".")[0] == "cudnn_rnn"], f"relaxes the package: {override}"
        assert set(override) <= {"module", "ignore_missing_imports"}, f"an override relaxes more: {override}"
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "# mypy: ignore-errors" not in text and "# type: ignore\n" not in text, \
            f"{path.relative_to(PACKAGE.parent)} silences the checker wholesale (give the error code on the line)"
