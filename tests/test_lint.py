"""The code style the project keeps: `ruff check .` with the rules in pyproject.toml finds nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: checks of the repository's sources, alike from the checkout and the wheel: CI runs them once (see .ci/run)
pytestmark = pytest.mark.sources

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
