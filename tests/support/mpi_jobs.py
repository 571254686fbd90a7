"""Starting real MPI jobs from the tests: ``mpiexec -n N python tests/distributed/jobs/<job>.py ...``.

Imported by name (``from mpi_jobs import ...``): tests/conftest.py puts this folder on ``sys.path``. The
jobs write what each rank saw into a folder (``rank<r>.npz`` / ``rank<r>.json``); the tests read
those files and compare them with what one process computes.

A missing ``mpiexec`` or mpi4py fails the test with the install command instead of skipping it:
``pip install -e ".[test]"`` installs both (mpi4py and the mpich wheel) on Linux.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "tests" / "distributed" / "jobs"

#: seconds a job may take before it counts as hung: generous, for a loaded 2-core CI machine
JOB_TIMEOUT = 240


@dataclass
class Job:
    """A finished job: exit status, output, and how long it ran."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def check(self) -> "Job":
        assert self.returncode == 0, (f"job failed with exit status {self.returncode}\n--- stdout\n{self.stdout}\n"
                                      f"--- stderr\n{self.stderr}")
        return self


def mpiexec() -> str:
    """The mpiexec of the MPI that this Python's mpi4py uses (the venv's own first), or fail with a hint."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.fail("mpi4py is missing: pip install -e \".[test]\" (or pip install mpi4py mpich)")
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.is_file() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("no mpiexec found: pip install mpich (or put your MPI's mpiexec on PATH)")
    return found


def job_environment(**extra: str) -> dict[str, str]:
    """This checkout importable, one BLAS thread per process (ranks share 2 cores), no plot window."""
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run_job(script: str | Path, ranks: int | None, *args: Any, timeout: float = JOB_TIMEOUT,
            env: dict[str, str] | None = None) -> Job:
    """Run ``script`` under ``mpiexec -n ranks`` (or alone when ranks is None); fail the test on a timeout."""
    path = Path(script) if Path(script).is_absolute() else JOBS / script
    command = [sys.executable, str(path), *map(str, args)]
    if ranks is not None:
        command = [mpiexec(), "-n", str(ranks), *command]
    started = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                                env=env or job_environment())
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{' '.join(command)} did not finish within {timeout} s (hung)\n{error.stdout}\n{error.stderr}")
    return Job(result.returncode, result.stdout, result.stderr, time.perf_counter() - started)


def read_ranks(folder: Path, size: int) -> list[dict[str, Any]]:
    """What each rank wrote: ``rank<r>.npz`` arrays and ``rank<r>.json`` values, merged per rank."""
    ranks = []
    for rank in range(size):
        record: dict[str, Any] = {}
        if (folder / f"rank{rank}.json").is_file():
            record.update(json.loads((folder / f"rank{rank}.json").read_text()))
        if (folder / f"rank{rank}.npz").is_file():
            with np.load(folder / f"rank{rank}.npz") as archive:
                record.update({name: archive[name] for name in archive.files})
        assert record, f"rank {rank} wrote nothing into {folder}"
        ranks.append(record)
    return ranks
