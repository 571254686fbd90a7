"""The collectives and a few training steps on CuPy arrays, under mpiexec on a GPU machine.

    mpiexec -n N python tests/distributed/jobs/gpu_job.py BACKEND OUT STEPS

BACKEND is passed to ``distributed.init`` ("nccl", "mpi" or "auto"). Writes OUT/rank<r>.npz (host
copies of what the rank passed and got, and the trained weights) and OUT/rank<r>.json (facts and
refused calls). Run by tests/gpu/test_distributed_gpu.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cupy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))  # training_case

from collectives_job import broadcast_inputs, reduction_inputs  # noqa: E402  (this folder)
from training_case import train  # noqa: E402

from cudnn_rnn import distributed  # noqa: E402


def main(backend: str, out: Path, steps: int) -> None:
    try:
        comm = distributed.init(backend)
    except RuntimeError as error:  # raised on every rank alike: record it for the test
        from mpi4py import MPI

        (out / f"rank{MPI.COMM_WORLD.Get_rank()}.json").write_text(json.dumps({"init_error": str(error)}))
        return
    rank = comm.rank
    saved: dict[str, np.ndarray] = {}
    facts: dict[str, object] = dict(rank=rank, size=comm.size, local_rank=comm.local_rank, backend=comm.backend,
                                    device=comm.device, current_device=cupy.cuda.Device().id)

    given = {name: cupy.asarray(value) for name, value in reduction_inputs(rank).items()}
    saved.update({f"in_{name}": cupy.asnumpy(value) for name, value in given.items()})
    strided = given["f64_strided_parent"][:, ::2]
    comm.allreduce_mean([given["f64_a"], given["f32_a"], given["f64_b"], given["f16_a"], given["f64_empty"], strided])
    fused = distributed.fuse_arrays([given["f64_fused_a"], given["f64_fused_b"]])
    comm.allreduce_mean(fused)
    given["f64_fused_a"], given["f64_fused_b"] = fused
    saved.update({f"mean_{name}": cupy.asnumpy(value) for name, value in given.items()})

    sent = {name: cupy.asarray(value) for name, value in broadcast_inputs(rank).items()}
    saved.update({f"bin_{name}": cupy.asnumpy(value) for name, value in sent.items()})
    comm.broadcast([sent["special"], sent["ints"], sent["flags"], sent["complex"], sent["f32_parent"][:, 1::2]])
    pair = distributed.fuse_arrays([sent["fused_a"], sent["fused_b"]])
    comm.broadcast(pair, root=comm.size - 1)
    sent["fused_a"], sent["fused_b"] = pair
    saved.update({f"bcast_{name}": cupy.asnumpy(value) for name, value in sent.items()})

    errors = {}
    for name, call in {"mixed_kinds": lambda: comm.allreduce_mean([np.zeros(2), cupy.zeros(2)]),
                       "shape": lambda: comm.allreduce_mean([cupy.zeros(3 + (rank == comm.size - 1))])}.items():
        try:
            call()
            errors[name] = None
        except (TypeError, ValueError) as error:
            errors[name] = [type(error).__name__, str(error)]
    facts["errors"] = errors

    params, bias, losses = train(steps, comm, xp=cupy)
    saved.update(params=cupy.asnumpy(params), bias=cupy.asnumpy(bias), losses=np.array(losses))
    cupy.cuda.get_current_stream().synchronize()
    comm.close()
    np.savez(out / f"rank{rank}.npz", **saved)
    (out / f"rank{rank}.json").write_text(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
