"""Every collective once, under mpiexec: each rank writes what it passed and what it got.

    mpiexec -n N python tests/distributed/jobs/collectives_job.py OUT

Writes OUT/rank<r>.npz (``in_*`` what the rank passed, ``mean_*`` / ``bcast_*`` what it got)
and OUT/rank<r>.json (communicator facts and the errors of the refused calls). The refused
calls are caught, so the job goes on: after each one a correct reduction must still work.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from cudnn_rnn import distributed


def reduction_inputs(rank: int) -> dict[str, np.ndarray]:
    """What rank ``rank`` reduces: three dtypes interleaved, an empty array, a strided view's parent."""
    rng = np.random.default_rng(100 + rank)
    return {
        "f64_a": rng.standard_normal((3, 4)),
        "f32_a": rng.standard_normal((2, 5)).astype(np.float32),
        "f64_b": rng.standard_normal(7) * 1e6,
        "f16_a": rng.standard_normal(6).astype(np.float16),
        "f64_empty": np.zeros((0, 2)),
        "f64_strided_parent": rng.standard_normal((4, 6)),
        "f64_fused_a": rng.standard_normal(5),
        "f64_fused_b": rng.standard_normal((2, 2)),
    }


def broadcast_inputs(rank: int) -> dict[str, np.ndarray]:
    """What rank ``rank`` broadcasts (only the root's values survive): NaN payloads and -0.0 included."""
    rng = np.random.default_rng(200 + rank)
    special = rng.standard_normal(6)
    special[0], special[1] = -0.0, np.frombuffer(np.uint64(0x7FF8_0000_DEAD_BEEF + rank).tobytes(), np.float64)[0]
    return {
        "special": special,
        "ints": rng.integers(-2**31, 2**31, (3, 3), dtype=np.int64).astype(np.int32),
        "flags": rng.random(5) < 0.5,
        "complex": (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64),
        "f32_parent": rng.standard_normal((3, 4)).astype(np.float32),
        "fused_a": rng.standard_normal(3),
        "fused_b": rng.standard_normal((2, 3)),
    }


def refused(call) -> list[str] | None:
    """Run ``call``; [exception type, message] if it raised TypeError/ValueError/RuntimeError, else None."""
    try:
        call()
    except (TypeError, ValueError, RuntimeError) as error:
        return [type(error).__name__, str(error)]
    return None


def main(out: Path) -> None:
    comm = distributed.init()
    rank, size = comm.rank, comm.size
    saved: dict[str, np.ndarray] = {}
    facts: dict[str, object] = dict(rank=rank, size=size, local_rank=comm.local_rank, local_size=comm.local_size,
                                    backend=comm.backend, repr=repr(comm))

    # -- allreduce_mean: mixed dtypes (one message per dtype), a strided view, fused arrays --------
    given = reduction_inputs(rank)
    saved.update({f"in_{name}": value.copy() for name, value in given.items()})
    strided = given["f64_strided_parent"][:, ::2]
    comm.allreduce_mean([given["f64_a"], given["f32_a"], given["f64_b"], given["f16_a"], given["f64_empty"], strided])
    fused = distributed.fuse_arrays([given["f64_fused_a"], given["f64_fused_b"]])
    comm.allreduce_mean(fused)
    saved.update({f"mean_{name}": value for name, value in given.items()})
    saved["mean_f64_fused_a"], saved["mean_f64_fused_b"] = fused
    # the same set again (cached plan, reused buffer) with other values
    again = [given["f64_a"] * 0 + rank, given["f32_a"] * 0 + 2 * rank]
    comm.allreduce_mean(again)
    saved["again_f64"], saved["again_f32"] = again

    # -- broadcast: several dtypes as one message, from rank 0; fused arrays from the last rank ---
    sent = broadcast_inputs(rank)
    saved.update({f"bin_{name}": value.copy() for name, value in sent.items()})
    comm.broadcast([sent["special"], sent["ints"], sent["flags"], sent["complex"], sent["f32_parent"][:, 1::2]])
    pair = distributed.fuse_arrays([sent["fused_a"], sent["fused_b"]])
    comm.broadcast(pair, root=size - 1)
    sent["fused_a"], sent["fused_b"] = pair
    saved.update({f"bcast_{name}": value for name, value in sent.items()})
    # one rank's array lies in a buffer it owns (sent in place), another's is a view of foreign memory
    # (copied through the plan's buffer): both ways must make a message of one size
    owned = np.frombuffer(bytearray(b"r%d" % rank * 5), np.uint8) if rank == 0 else np.full(10, 7, np.uint8)
    comm.broadcast([owned])
    saved["bcast_mixed_paths"] = owned.copy()

    # -- refused calls: every rank raises, and the communicator still works afterwards ------------
    errors: dict[str, list[str] | None] = {}
    alive: list[float] = []

    def still_works() -> None:
        value = np.array([float(rank)])
        comm.allreduce_mean([value])
        alive.append(float(value[0]))

    cases = {
        "shape": lambda: comm.allreduce_mean([np.zeros(3 + (rank == 1))]),
        "dtype": lambda: comm.allreduce_mean([np.zeros(3, np.float32 if rank == size - 1 else np.float64)]),
        "count": lambda: comm.allreduce_mean([np.zeros(2)] * (2 if rank == 0 else 1)),
        "root": lambda: comm.broadcast([np.zeros(2)], root=1 if rank == 1 else 0),
        "integer_on_one_rank": lambda: comm.allreduce_mean([np.zeros(2, np.int64 if rank == 1 else np.float64)]),
        "not_an_array": lambda: comm.allreduce_mean([np.zeros(2), [1.0, 2.0]]),
        "not_a_list": lambda: comm.allreduce_mean(np.zeros(2)),
        "root_out_of_range": lambda: comm.broadcast([np.zeros(2)], root=size),
        "read_only": lambda: comm.allreduce_mean([np.broadcast_to(np.zeros(2), (2,))]),
    }
    for name, call in cases.items():
        errors[name] = refused(call)
        still_works()
    facts["errors"] = errors
    facts["alive"] = alive

    facts["nccl"] = refused(lambda: distributed.init("nccl").close())

    saved["shard"] = comm.shard(np.arange(6 * size).reshape(3 * size, 2))
    facts["shard_uneven"] = refused(lambda: comm.shard(np.arange(2 * size + 1)))
    comm.barrier()
    comm.close()
    comm.close()  # idempotent
    facts["after_close"] = refused(lambda: comm.allreduce_mean([np.zeros(1)]))
    facts["repr_closed"] = repr(comm)

    np.savez(out / f"rank{rank}.npz", **saved)
    (out / f"rank{rank}.json").write_text(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
