"""The processes on a node share its cores: each runs BLAS on its share, unless the user chose."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudnn_rnn.distributed import _threads
from mpi_jobs import job_environment, read_ranks, run_job

pytestmark = pytest.mark.distributed


def environment_without_thread_variables(**chosen: str) -> dict[str, str]:
    env = job_environment()
    for name in _threads.THREAD_VARIABLES:
        env.pop(name, None)
    env.update(chosen)
    return env


def per_rank(folder: Path, ranks: int, **chosen: str) -> list[dict]:
    env = environment_without_thread_variables(**chosen)
    run_job("host_threads_job.py", ranks, folder, timeout=120, env=env).check()
    return read_ranks(folder, ranks)


def test_two_processes_on_a_node_each_take_half_the_cores(tmp_path: Path) -> None:
    for facts in per_rank(tmp_path, 2):
        assert facts["local_size"] == 2
        assert facts["before"] == [facts["cores"]]  # BLAS started on every core ...
        assert facts["after"] == [max(1, facts["cores"] // 2)]  # ... and init() gave each process its share
        # a NumPy backend call stays within that share (less what the other rank keeps busy), and small
        # products run on one thread; the share is back when the call ends
        assert facts["small"] == [1]
        assert 1 <= facts["large"][0] <= max(1, facts["cores"] // 2)
        assert facts["restored"] == facts["after"]


def test_a_thread_count_the_user_chose_is_kept(tmp_path: Path) -> None:
    for facts in per_rank(tmp_path, 2, OPENBLAS_NUM_THREADS="2"):
        assert facts["before"] == facts["after"] == [2]
        assert facts["small"] == facts["large"] == facts["restored"] == [2]  # the NumPy backend keeps it too


def test_one_process_keeps_every_core(tmp_path: Path) -> None:
    (facts,) = per_rank(tmp_path, 1)
    assert facts["after"] == facts["before"] == [facts["cores"]]


def test_share_host_threads_changes_nothing_alone_or_when_chosen() -> None:
    assert _threads.share_host_threads(1, environ={}) is None
    assert _threads.share_host_threads(4, environ={"OMP_NUM_THREADS": "3"}) is None
