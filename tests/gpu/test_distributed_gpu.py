"""cudnn_rnn.distributed on CuPy arrays: a 1-rank NCCL job and a 2-rank MPI job, started with mpiexec.

On a one-GPU machine NCCL runs with one rank (its packing, data types, stream and communicator
set-up, not its arithmetic across GPUs); two ranks share the GPU over MPI (through host memory),
and their collectives and training steps are compared with this process's numbers. With two or
more GPUs, a 2-rank NCCL job runs too. Needs mpi4py and an MPI besides CuPy (a missing one fails).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from mpi_jobs import read_ranks, run_job  # noqa: E402
from rnn_testing import relative_error  # noqa: E402
from training_case import train  # noqa: E402

STEPS = 3
REDUCED = ["f64_a", "f32_a", "f64_b", "f16_a", "f64_empty", "f64_fused_a", "f64_fused_b"]
BROADCAST = ["special", "ints", "flags", "complex", "fused_a", "fused_b"]


def gpu_job(tmp_path: Path, size: int, backend: str) -> list[dict]:
    run_job("gpu_job.py", size, backend, tmp_path, STEPS, timeout=300).check()
    return read_ranks(tmp_path, size)


def check_collectives(ranks: list[dict]) -> None:
    """Means against the host's (float64 exact for 1 and 2 ranks), broadcasts bit for bit, refusals."""
    size = len(ranks)
    for name in REDUCED:
        inputs = np.stack([r[f"in_{name}"] for r in ranks])
        expected = (inputs.astype(np.float64).sum(axis=0) / size).astype(inputs.dtype)
        for rank, record in enumerate(ranks):
            got = record[f"mean_{name}"]
            if inputs.dtype == np.float64:
                assert np.array_equal(got, expected), f"{name} on rank {rank}"
            else:
                np.testing.assert_allclose(got, expected, rtol=1e-3 if inputs.dtype == np.float16 else 1e-6)
            assert got.tobytes() == ranks[0][f"mean_{name}"].tobytes()
    parents = np.stack([r["in_f64_strided_parent"] for r in ranks])
    for record in ranks:
        np.testing.assert_allclose(record["mean_f64_strided_parent"][:, ::2], parents[:, :, ::2].mean(axis=0),
                                   rtol=1e-15, atol=1e-15)
        assert np.array_equal(record["mean_f64_strided_parent"][:, 1::2], record["in_f64_strided_parent"][:, 1::2])
        for name in BROADCAST:
            root = ranks[-1] if name.startswith("fused") else ranks[0]
            assert record[f"bcast_{name}"].tobytes() == root[f"bin_{name}"].tobytes(), name
        errors = record["errors"]
        assert errors["mixed_kinds"][0] == "TypeError" and "one kind" in errors["mixed_kinds"][1]
        if size > 1:
            assert errors["shape"][0] == "ValueError" and f"rank {size - 1} passed" in errors["shape"][1]


def check_training(ranks: list[dict]) -> None:
    """STEPS data-parallel steps on cuDNN (float64) equal STEPS steps of this process on the whole batch."""
    params, bias, losses = train(STEPS, xp=cupy)
    for rank, record in enumerate(ranks):
        assert relative_error(record["params"], cupy.asnumpy(params)) <= 1e-10, f"rank {rank}"
        assert relative_error(record["bias"], cupy.asnumpy(bias)) <= 1e-10, f"rank {rank}"
        np.testing.assert_allclose(record["losses"], losses, rtol=1e-10)
        assert record["params"].tobytes() == ranks[0]["params"].tobytes()


def test_one_rank_nccl_job(tmp_path: Path) -> None:
    ranks = gpu_job(tmp_path, 1, "nccl")
    assert ranks[0].get("init_error") is None, ranks[0].get("init_error")
    assert ranks[0]["backend"] == "nccl" and ranks[0]["device"] == 0 and ranks[0]["current_device"] == 0
    check_collectives(ranks)
    check_training(ranks)


def test_two_rank_mpi_job_on_cupy_arrays(tmp_path: Path) -> None:
    ranks = gpu_job(tmp_path, 2, "mpi")
    assert [r["backend"] for r in ranks] == ["mpi", "mpi"] and [r["device"] for r in ranks] == [None, None]
    check_collectives(ranks)
    check_training(ranks)


def test_two_rank_nccl_job_runs_on_two_gpus_or_is_refused_on_one(tmp_path: Path) -> None:
    ranks = gpu_job(tmp_path, 2, "nccl")
    if cupy.cuda.runtime.getDeviceCount() >= 2:
        assert [(r["backend"], r["device"]) for r in ranks] == [("nccl", 0), ("nccl", 1)]
        check_collectives(ranks)
        check_training(ranks)
    else:  # NCCL wants one GPU per process: every rank refuses, naming the shared GPU
        for record in ranks:
            assert "backend='nccl' cannot run on every process" in record["init_error"]
            assert "local ranks 0 and 1 of this node would both use the GPU" in record["init_error"]


def test_auto_takes_nccl_only_when_every_rank_has_its_own_gpu(tmp_path: Path) -> None:
    ranks = gpu_job(tmp_path, 2, "auto")
    expected = "nccl" if cupy.cuda.runtime.getDeviceCount() >= 2 else "mpi"  # one GPU: both ranks would share it
    assert [r["backend"] for r in ranks] == [expected, expected]
    check_collectives(ranks)
