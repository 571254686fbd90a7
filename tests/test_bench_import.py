"""benchmarks/bench_import.py times ``import cudnn_rnn`` of the working tree against a git revision's.

It imports the checkout's own sources, so it is one of the checks of the repository's sources (the wheel's
run in CI has none to import).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sources

REPO = Path(__file__).resolve().parents[1]


def test_a_revision_and_the_working_tree_are_each_imported_from_their_own_sources() -> None:
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_import.py"), "HEAD", "--repeats", "1"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[2:4]}
    assert set(rows) == {"HEAD", "working"}, result.stdout
    assert all(float(row[-3]) > 0 and int(row[-1]) >= 1 for row in rows.values()), result.stdout
    assert re.search(r"^working tree / HEAD: \d+\.\d\d \((meets|misses) the target <= 0\.33\)$", result.stdout, re.M)
