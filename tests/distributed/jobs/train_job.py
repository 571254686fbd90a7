"""Data-parallel training under mpiexec: each rank trains on its shard and writes its final weights.

    mpiexec -n N python tests/distributed/jobs/train_job.py OUT STEPS

Writes OUT/rank<r>.npz: ``params`` (the LSTM), ``bias``, ``losses`` (the global batch's, per step).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))  # training_case

from training_case import train  # noqa: E402

from cudnn_rnn import distributed  # noqa: E402


def main(out: Path, steps: int) -> None:
    with distributed.init() as comm:
        params, bias, losses = train(steps, comm)
        np.savez(out / f"rank{comm.rank}.npz", params=params, bias=bias, losses=np.array(losses),
                 size=np.array(comm.size))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
