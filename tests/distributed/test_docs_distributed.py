"""The distributed guide's script runs as the page shows: written to train.py, run alone and under a real
``mpiexec -n 2``, each printing what the page says it prints (tests/support/docs_testing.py runs a page)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest

from docs_testing import pages_for, run_page
from mpi_jobs import JOB_TIMEOUT, job_environment, mpiexec

pytestmark = [pytest.mark.distributed, pytest.mark.sources]  # (sources: see tests/test_docs_guides.py)


def launch(argv: Sequence[str], folder: Path) -> tuple[int, str, str]:
    """``python SCRIPT`` or ``mpiexec -n N python SCRIPT`` as the page writes them, with this Python and
    the MPI of its mpi4py, in the page's folder."""
    words = list(argv)
    assert words[0] in ("python", "mpiexec") and "python" in words, (
        f"the distributed guide's console blocks run `python ...` or `mpiexec ... python ...`; got {argv}")
    words = [sys.executable if word == "python" else word for word in words]
    if words[0] == "mpiexec":
        words[0] = mpiexec()
    try:
        result = subprocess.run(words, capture_output=True, text=True, cwd=folder, env=job_environment(),
                                timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired as error:
        printed = [text.decode(errors="replace") if isinstance(text, bytes) else text or ""
                   for text in (error.stdout, error.stderr)]
        pytest.fail(f"{' '.join(words)} did not finish within {JOB_TIMEOUT} s (hung)\n" + "\n".join(printed))
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize("page", pages_for("distributed"))
def test_the_page_runs(page: str, tmp_path: Path) -> None:
    run = run_page(page, tmp_path, commands=launch)
    assert run.counts.get("script") and run.counts.get("console"), f"{page} launches no script"
