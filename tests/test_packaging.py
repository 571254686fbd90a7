"""What ships: the sdist and wheel `python -m build` makes, and the installed distribution CI tests.

The suite runs twice in CI: on the development install (the checkout's ``cudnn_rnn/``), where these
tests build the sdist and the wheel and look inside, and on the built wheel installed in a fresh
virtual environment (``CUDNN_RNN_TESTING_WHEEL=1``, the suite run from a copy of the repository
without the package's sources), where they check the installed distribution itself.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import cudnn_rnn

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(cudnn_rnn.__file__).resolve().parent
TESTING_WHEEL = os.environ.get("CUDNN_RNN_TESTING_WHEEL") == "1"
ENTRY_POINT = "cudnn-rnn = cudnn_rnn.cli:main"


def package_files(root: Path) -> set[str]:
    """Every file of the package below ``root`` (``cudnn_rnn/...``), caches left out."""
    return {path.relative_to(root.parent).as_posix() for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}


def test_the_package_under_test_is_the_one_ci_meant() -> None:
    """Guard for CI's two runs: the wheel run must not import the checkout, nor the development run a wheel."""
    in_checkout = PACKAGE == REPO / "cudnn_rnn"
    if TESTING_WHEEL:
        assert not in_checkout and not (REPO / "cudnn_rnn").exists(), f"the wheel run imports {PACKAGE}"
        assert "site-packages" in PACKAGE.parts, f"the wheel run imports {PACKAGE}, not an installed package"
    else:
        assert in_checkout, f"the development run imports {PACKAGE}, not the checkout {REPO / 'cudnn_rnn'}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel: built here from the checkout, or in the wheel run the very ones CI built
    (``dist/``) and installed."""
    if TESTING_WHEEL:
        wheels, sdists = sorted((REPO / "dist").glob("*.whl")), sorted((REPO / "dist").glob("*.tar.gz"))
        assert len(wheels) == 1 and len(sdists) == 1, f"the wheel run expects one sdist and wheel in {REPO / 'dist'}"
        return {"wheel": wheels[0], "sdist": sdists[0]}
    source = tmp_path_factory.mktemp("source")  # a copy, so the build leaves nothing behind in the checkout
    for name in ("pyproject.toml", "README.md", "LICENSE", "cudnn_rnn"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "deprecated" not in result.stdout + result.stderr, "the build warns of a deprecation"
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz"))}


def test_the_distribution() -> None:
    """Version, typing marker, entry point and every module: in the wheel built here, or in the one installed."""
    if TESTING_WHEEL:
        distribution = importlib.metadata.distribution("cudnn_rnn")
        assert distribution.version == cudnn_rnn.__version__
        recorded = {str(file) for file in distribution.files or [] if str(file).startswith("cudnn_rnn/")}
        assert package_files(PACKAGE) <= recorded, sorted(package_files(PACKAGE) - recorded)
        assert "cudnn_rnn/py.typed" in recorded
        scripts = {point.name: point.value for point in distribution.entry_points}
        assert scripts.get("cudnn-rnn") == "cudnn_rnn.cli:main", scripts
        result = subprocess.run([shutil.which("cudnn-rnn") or "cudnn-rnn", "--help"], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0 and "inspect" in result.stdout, result.stdout + result.stderr
    else:
        assert importlib.metadata.version("cudnn_rnn") == cudnn_rnn.__version__, "reinstall: pip install -e ."


def test_the_wheel_carries_every_module_the_typing_marker_and_the_entry_point(built: dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        info = next(name for name in names if name.endswith(".dist-info/METADATA"))
        metadata = wheel.read(info).decode()
        entry_points = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert package_files(PACKAGE) <= names, sorted(package_files(PACKAGE) - names)
    assert "cudnn_rnn/py.typed" in names
    assert f"Version: {cudnn_rnn.__version__}\n" in metadata and "Requires-Python: >=3.10" in metadata
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert ENTRY_POINT in entry_points
    assert built["wheel"].name == f"cudnn_rnn-{cudnn_rnn.__version__}-py3-none-any.whl"


def test_the_sdist_carries_the_sources(built: dict[str, Path]) -> None:
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "LICENSE", "cudnn_rnn/py.typed"} <= names
    assert package_files(PACKAGE) <= names


def test_twine_passes_both(built: dict[str, Path]) -> None:
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(built["wheel"]),
                             str(built["sdist"])], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_version_is_written_once() -> None:
    """``cudnn_rnn/__init__.py`` holds it; pyproject.toml reads it from there (without importing the package: a
    literal that setuptools reads from the source) instead of repeating it."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cudnn_rnn.__version__"}
    source = (PACKAGE / "__init__.py").read_text(encoding="utf-8")
    assert source.count(cudnn_rnn.__version__) == 1 and f'\n__version__ = "{cudnn_rnn.__version__}"\n' in source
