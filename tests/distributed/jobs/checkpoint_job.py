"""Checkpoints under mpiexec: rank 0 writes, every rank resumes from what rank 0 read.

    mpiexec -n N python tests/distributed/jobs/checkpoint_job.py OUT FIRST MORE

Each rank trains a 2-layer LSTM with dropout (its own dropout seed: 5 + rank) and an output bias
with Adam on its shard of every global batch, in three ways:

* ``whole``: FIRST + MORE steps without stopping;
* ``resumed``: FIRST steps, a save through a CheckpointManager (rank 0 writes), then fresh
  objects (the same seeds, other weights, a fresh Adam), ``latest()`` (rank 0 reads and
  broadcasts), restore with each rank keeping its own dropout seed, and MORE steps;
* a damaged newest checkpoint: ``latest()`` must skip it on every rank, and ``checkpoint.load``
  of it must raise CheckpointError on every rank (no rank left waiting).

Writes OUT/rank<r>.npz (the params, bias and losses of both runs) and OUT/rank<r>.json (what
each rank saw).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

from cudnn_rnn import checkpoint, distributed
from cudnn_rnn.checkpoint import CheckpointError, CheckpointManager, CheckpointWarning
from cudnn_rnn.layers import LSTM
from cudnn_rnn.optim import Adam

INPUT, UNITS, LAYERS, GLOBAL_BATCH, TIME = 3, 4, 2, 4, 5


class Model:
    def __init__(self, comm: distributed.Communicator, weights_seed: int) -> None:
        self.comm = comm
        self.layer = LSTM(INPUT, UNITS, LAYERS, dropout=0.3, dtype="float64", seed=5 + comm.rank)
        weights = np.random.default_rng(weights_seed)
        self.layer.params[...] = weights.uniform(-0.3, 0.3, self.layer.params.size)
        self.bias = weights.uniform(-0.1, 0.1, UNITS)
        self.bias_grad = np.zeros_like(self.bias)
        comm.broadcast([self.layer.params, self.bias])
        self.optimiser = Adam([self.layer.params, self.bias], lr=0.03)

    def parts(self) -> dict:
        return dict(layers={"lstm": self.layer}, optimizers={"adam": self.optimiser}, arrays={"bias": self.bias})

    def train(self, rng: np.random.Generator, steps: int) -> list[float]:
        losses = []
        for _ in range(steps):
            x = self.comm.shard(rng.standard_normal((GLOBAL_BATCH, TIME, INPUT)))
            targets = self.comm.shard(rng.standard_normal((GLOBAL_BATCH, TIME, UNITS)))
            self.layer.zero_grad()
            y, _, _ = self.layer.forward(x)
            diff = y + self.bias - targets
            self.layer.backward(diff)
            self.bias_grad[...] = diff.sum(axis=(0, 1))
            box = np.array([0.5 * float((diff * diff).sum())])
            self.comm.allreduce_mean([self.layer.grad, self.bias_grad, box])
            self.optimiser.step([self.layer.grad, self.bias_grad])
            losses.append(float(box[0]))
        return losses


def main(out: Path, first: int, more: int) -> None:
    with distributed.init() as comm:
        whole = Model(comm, weights_seed=5)
        whole_losses = whole.train(np.random.default_rng(0), first + more)

        manager = CheckpointManager(out / "checkpoints", keep=2, comm=comm)
        before = Model(comm, weights_seed=5)
        rng = np.random.default_rng(0)
        losses = before.train(rng, first)
        written = manager.save(first, **before.parts(), state={"rng": rng.bit_generator.state, "losses": losses})

        after = Model(comm, weights_seed=77)
        found = manager.latest()
        found.restore(**after.parts(), keep_seeds=True)
        rng = np.random.default_rng(1)
        rng.bit_generator.state = found.state["rng"]
        resumed_losses = found.state["losses"] + after.train(rng, more)

        # a damaged newest file: skipped by latest() and refused by load() on every rank
        manager.save(first + 1, **after.parts(), state={})
        comm.barrier()
        if comm.rank == 0:
            path = manager.path_for(first + 1)
            blob = bytearray(path.read_bytes())
            blob[len(blob) // 2] ^= 0x10
            path.write_bytes(bytes(blob))
        comm.barrier()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            skipped_to = manager.latest().step
        try:
            checkpoint.load(manager.path_for(first + 1), comm=comm)
            refused = ""
        except CheckpointError as error:
            refused = str(error)

        np.savez(out / f"rank{comm.rank}.npz", whole_params=whole.layer.params, whole_bias=whole.bias,
                 whole_losses=np.array(whole_losses), params=after.layer.params, bias=after.bias,
                 losses=np.array(resumed_losses))
        (out / f"rank{comm.rank}.json").write_text(json.dumps(dict(
            wrote=None if written is None else str(written), seed=after.layer.config.seed, step=after.layer.step,
            skipped_to=skipped_to, warned=sum(issubclass(w.category, CheckpointWarning) for w in caught),
            refused=refused)))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
