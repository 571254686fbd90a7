"""One rank of the two-process PyTorch DDP test (tests/test_torch_ddp.py), and the model, batches and loss it
shares with the test's one-process reference::

    python tests/support/torch_ddp_job.py RANK WORLD PORT FOLDER [--die]

Each rank joins the gloo process group through the test process's TCPStore on 127.0.0.1:PORT (the test
opened it on a port the system picked, so no port is guessed), wraps each case's model in
``DistributedDataParallel``, and takes STEPS SGD steps, each on its share (a contiguous slice) of a fixed
global batch with variable lengths. It saves what it saw after each step (every gradient, every parameter,
the ``step`` buffer) to FOLDER/rank<RANK>.pt. ``--die``: rank 1 raises once the group is up, before any
collective, and the others are left waiting on it (the test's launcher must stop them).

The cases:

* ``lstm``: a 2-layer ``cudnn_rnn.torch.LSTM`` and a linear head, training mode without dropout: each
  rank's step is the one-process step on the whole batch.
* ``gru-dropout``: a bidirectional 2-layer ``cudnn_rnn.torch.GRU`` with dropout 0.5, each rank with its own
  dropout seed (``7 + rank``: other initial weights, which DDP replaces by rank 0's), and rank 1's ``step``
  set to 5 before wrapping (DDP broadcasts rank 0's buffers too). The masks depend on the seed, the step
  and the shard's shape, so the step is the mean of the shards' gradients, each with its rank's masks.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

import cudnn_rnn.torch

CASES = ("lstm", "gru-dropout")
GLOBAL_BATCH, TIME, INPUTS, OUTPUTS, STEPS = 6, 5, 3, 2, 2
#: the global batch's lengths: full, short, one step
LENGTHS = (5, 3, 1, 4, 2, 5)
LEARNING_RATE = 0.5
#: seconds a rank waits on the store or a collective before giving up
COLLECTIVE_TIMEOUT = timedelta(seconds=60)


class Model(torch.nn.Module):
    """A recurrent module of ``cudnn_rnn.torch`` and a linear head on its outputs (float64)."""

    def __init__(self, case: str, rank: int = 0) -> None:
        super().__init__()
        torch.manual_seed(0)  # the head's initial weights
        if case == "lstm":
            self.rnn: torch.nn.Module = cudnn_rnn.torch.LSTM(INPUTS, 4, 2, dtype=torch.float64, seed=0)
            self.head = torch.nn.Linear(4, OUTPUTS, dtype=torch.float64)
        elif case == "gru-dropout":
            self.rnn = cudnn_rnn.torch.GRU(INPUTS, 3, 2, bidirectional=True, dropout=0.5, dtype=torch.float64,
                                           seed=7 + rank)
            self.head = torch.nn.Linear(6, OUTPUTS, dtype=torch.float64)
        else:
            raise ValueError(f"no case {case!r}")

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        y, _, _ = self.rnn(x, lengths)
        return self.head(y)


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step ``step``'s global batch: x [B, T, I], lengths [B] (int32), target [B, T, OUTPUTS]."""
    data = torch.Generator().manual_seed(100 + step)
    x = torch.randn(GLOBAL_BATCH, TIME, INPUTS, generator=data, dtype=torch.float64)
    target = torch.randn(GLOBAL_BATCH, TIME, OUTPUTS, generator=data, dtype=torch.float64)
    return x, torch.tensor(LENGTHS, dtype=torch.int32), target


def shard(tensors: tuple[torch.Tensor, ...], rank: int, world: int) -> tuple[torch.Tensor, ...]:
    """Rank ``rank``'s contiguous share of each tensor's batch axis."""
    return tuple(tensor.chunk(world)[rank] for tensor in tensors)


def loss_of(model: torch.nn.Module, x: torch.Tensor, lengths: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The squared error over each sequence's valid steps, a mean per sequence, then over the sequences: equal
    shares make the mean of the ranks' losses the global batch's loss."""
    valid = (torch.arange(x.shape[1])[None, :] < lengths[:, None])[..., None]
    per_sequence = ((model(x, lengths) - target) * valid).square().sum(dim=(1, 2)) / lengths
    return per_sequence.mean()


def record(model: torch.nn.Module) -> dict[str, Any]:
    """What a step leaves: every parameter's gradient and value, and the recurrent module's ``step``."""
    return {"grads": {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None},
            "params": {name: p.detach().clone() for name, p in model.named_parameters()},
            "step": int(model.rnn.step)}


def train(case: str, rank: int, world: int) -> list[dict[str, Any]]:
    """STEPS steps of the case's model under DDP, on this rank's shares; the records after wrapping and after
    each step."""
    from torch.nn.parallel import DistributedDataParallel

    model = Model(case, rank)
    if case == "gru-dropout" and rank == 1:
        model.rnn.load_state_dict({"params": model.rnn.params.detach(), "step": torch.tensor(5)})
    ddp = DistributedDataParallel(model)
    optimiser = torch.optim.SGD(ddp.parameters(), lr=LEARNING_RATE)
    records = [record(model)]  # after wrapping: rank 0's weights and step everywhere
    for step in range(STEPS):
        optimiser.zero_grad()
        loss_of(ddp, *shard(global_batch(step), rank, world)).backward()
        optimiser.step()
        records.append(record(model))
    return records


def main(argv: list[str]) -> None:
    import torch.distributed as dist

    rank, world, port, folder = int(argv[0]), int(argv[1]), int(argv[2]), Path(argv[3])
    torch.set_num_threads(1)  # the ranks share the machine's cores
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=COLLECTIVE_TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT)
    if "--die" in argv and rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    results = {case: train(case, rank, world) for case in CASES}
    torch.save(results, folder / f"rank{rank}.pt")
    dist.barrier()  # every rank done before any leaves the group (gloo may abort a rank whose peer left first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
