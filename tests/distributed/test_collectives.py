"""allreduce_mean and broadcast in real MPI jobs of 2 and 3 processes, against one process's numbers.

Three ranks catch any assumption that the job size is a power of two.
"""

from __future__ import annotations

import numpy as np
import pytest

from mpi_jobs import read_ranks, run_job

pytestmark = pytest.mark.distributed

REDUCED = ["f64_a", "f32_a", "f64_b", "f16_a", "f64_empty", "f64_fused_a", "f64_fused_b"]
BROADCAST = ["special", "ints", "flags", "complex"]

#: the error a mean may have, in units of its dtype's epsilon times the largest |input| of its element
#: (the sum's order and rounding are MPI's; a 2-rank float64 mean must be exact)
ULPS = 4


@pytest.fixture(scope="module", params=[2, 3], ids=["2 ranks", "3 ranks"])
def job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[dict]]:
    size = request.param
    out = tmp_path_factory.mktemp(f"collectives{size}")
    run_job("collectives_job.py", size, out).check()
    return size, read_ranks(out, size)


def test_communicator_facts(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    assert [r["rank"] for r in ranks] == list(range(size))
    assert {r["size"] for r in ranks} == {size}
    # one machine: the local ranks (from MPI's shared-memory split) are the ranks
    assert [r["local_rank"] for r in ranks] == list(range(size)) and {r["local_size"] for r in ranks} == {size}
    assert {r["backend"] for r in ranks} == {"mpi"}  # NumPy only, no GPU here
    assert ranks[1]["repr"] == f"Communicator(rank=1, size={size}, local_rank=1, backend='mpi')"


def test_allreduce_mean_equals_the_mean_computed_in_one_process(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    for name in REDUCED:
        inputs = np.stack([r[f"in_{name}"] for r in ranks])
        expected = (inputs.astype(np.float64).sum(axis=0) / size).astype(inputs.dtype)
        for rank, record in enumerate(ranks):
            got = record[f"mean_{name}"]
            assert got.dtype == inputs.dtype and got.shape == inputs.shape[1:]
            if inputs.dtype == np.float64 and size == 2:
                assert np.array_equal(got, expected), f"{name} on rank {rank}: a 2-rank float64 mean must be exact"
            else:
                bound = ULPS * np.finfo(inputs.dtype).eps * np.abs(inputs.astype(np.float64)).max(axis=0)
                error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
                assert np.all(error <= bound), f"{name} on rank {rank}: off by {error.max()} (bound {bound.max()})"
            # every rank holds the same bits
            assert got.tobytes() == ranks[0][f"mean_{name}"].tobytes(), f"{name}: rank {rank} differs from rank 0"


def test_allreduce_mean_writes_through_a_strided_view_and_nowhere_else(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    parents = np.stack([r["in_f64_strided_parent"] for r in ranks])
    for record in ranks:
        got = record["mean_f64_strided_parent"]
        np.testing.assert_allclose(got[:, ::2], parents[:, :, ::2].sum(axis=0) / size, rtol=1e-15, atol=1e-15)
        assert np.array_equal(got[:, 1::2], record["in_f64_strided_parent"][:, 1::2]), "odd columns untouched"


def test_the_same_set_again_reuses_its_plan_with_new_values(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    mean_rank = (size - 1) / 2
    for record in ranks:
        assert np.allclose(record["again_f64"], mean_rank, rtol=1e-15)
        assert np.allclose(record["again_f32"], 2 * mean_rank, rtol=1e-7)


def test_broadcast_leaves_every_rank_bit_identical_to_the_root(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    root = ranks[0]
    for rank, record in enumerate(ranks):
        for name in BROADCAST:
            got, sent = record[f"bcast_{name}"], root[f"bin_{name}"]
            assert got.dtype == sent.dtype and got.tobytes() == sent.tobytes(), f"{name} on rank {rank}"
        # a strided view: its elements come from the root, the others stay this rank's own
        got, own, sent = record["bcast_f32_parent"], record["bin_f32_parent"], root["bin_f32_parent"]
        assert got[:, 1::2].tobytes() == sent[:, 1::2].tobytes() and got[:, ::2].tobytes() == own[:, ::2].tobytes()
        # fused arrays from the last rank, broadcast where they lie
        for name in ("fused_a", "fused_b"):
            assert record[f"bcast_{name}"].tobytes() == ranks[-1][f"bin_{name}"].tobytes()
    assert np.signbit(root["bcast_special"][0]) and np.isnan(root["bcast_special"][1])
    for rank, record in enumerate(ranks):  # in place on one rank, through the packing buffer on another
        assert record["bcast_mixed_paths"].tobytes() == b"r0" * 5, f"rank {rank}"


def test_mismatched_shapes_dtypes_counts_and_roots_raise_value_error_on_every_rank(
        job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    expectations = {
        "shape": "rank 1 passed [(4,) float64 numpy] (first difference at arrays[0])",
        "dtype": f"rank {size - 1} passed [(3,) float32 numpy] (first difference at arrays[0])",
        "count": "rank 1 passed [(2,) float64 numpy] (number of arrays: 1 instead of 2)",
        "root": "rank 1 passed [(2,) float64 numpy] with root=1 (root 1 instead of 0)",
    }
    for case, expected in expectations.items():
        errors = [r["errors"][case] for r in ranks]
        assert all(e is not None and e[0] == "ValueError" for e in errors), f"{case}: {errors}"
        assert len({e[1] for e in errors}) == 1, f"{case}: every rank raises the same message"
        assert expected in errors[0][1] and "every rank must pass the same" in errors[0][1]


def test_a_call_refused_on_one_rank_is_refused_on_every_rank(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    errors = [r["errors"]["integer_on_one_rank"] for r in ranks]
    assert errors[1] == ["TypeError", "allreduce_mean: arrays[0] must be float16, float32 or float64; got int64"]
    for rank in set(range(size)) - {1}:
        assert errors[rank] == ["TypeError", errors[1][1] + " (refused on rank 1)"]


def test_bad_arguments_raise_clear_errors(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    errors = ranks[0]["errors"]
    assert errors["not_an_array"] == ["TypeError", "allreduce_mean: arrays[1] must be a numpy.ndarray or "
                                                   "cupy.ndarray; got list"]
    assert errors["not_a_list"][0] == "TypeError" and "got ndarray" in errors["not_a_list"][1]
    assert errors["root_out_of_range"] == ["ValueError", f"broadcast: root must be a rank in [0, {size}); got {size}"]
    assert errors["read_only"] == ["ValueError", "allreduce_mean: arrays[0] is read-only; it is written in place"]
    assert ranks[0]["shard_uneven"][0] == "ValueError" and f"over {size} processes" in ranks[0]["shard_uneven"][1]


def test_the_communicator_still_works_after_every_refused_call(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    for record in ranks:
        assert record["alive"] == [(size - 1) / 2] * 9


def test_shard_gives_each_rank_its_rows(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    whole = np.arange(6 * size).reshape(3 * size, 2)
    np.testing.assert_array_equal(np.concatenate([r["shard"] for r in ranks]), whole)
    assert all(r["shard"].shape == (3, 2) for r in ranks)


def test_close_is_idempotent_and_final(job: tuple[int, list[dict]]) -> None:
    _, ranks = job
    assert ranks[0]["after_close"][0] == "RuntimeError" and "closed" in ranks[0]["after_close"][1]
    assert ranks[0]["repr_closed"].endswith(", closed)")


def test_an_explicit_nccl_backend_that_cannot_run_is_refused_on_every_rank(job: tuple[int, list[dict]]) -> None:
    size, ranks = job
    errors = [r["nccl"] for r in ranks]
    if errors[0] is None:  # a machine with CuPy, NCCL and a GPU per rank
        assert all(e is None for e in errors)
        return
    assert all(e == errors[0] for e in errors), "every rank raises the same error"
    kind, message = errors[0]
    assert kind == "RuntimeError" and message.startswith("backend='nccl' cannot run on every process: rank 0: ")
    assert all(f"rank {rank}: " in message for rank in range(size))
