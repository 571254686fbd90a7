"""The data-parallel training case: one process on the global batch, or each rank on its shard.

A bidirectional 2-layer LSTM (float64, NumPy reference backend) with an output bias ``b`` [2N],
trained with Adam after clipping the global gradient norm. Per step, on the rows it holds
(all B rows alone, or its B/size shard)::

    out  = y + b                              y [n, T, 2N] (0 past each length), targets 0 there too
    loss = (0.5 / n) * (sum (out - target)^2 + sum h^2)      h [n, L*D, N]: the final states

so the mean of the shard gradients over the ranks is the gradient of the global batch. The
tests run :func:`train` in one process (no communicator at all) and under ``mpiexec`` (every
rank starting from other weights until rank 0's are broadcast) and compare; ``xp=cupy`` runs
the same on cuDNN (tests/gpu).
"""

from __future__ import annotations

import types
from typing import Any, Iterator

import numpy as np

from cudnn_rnn.layers import LSTM
from cudnn_rnn.optim import Adam, clip_grad_norm

INPUT_SIZE, NUM_UNITS, NUM_LAYERS = 3, 4, 2
GLOBAL_BATCH, MAX_TIME = 6, 5
MAX_NORM = 0.5  # small enough to clip in every step


def global_batches(steps: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``steps`` global batches (x [B, T, I], lengths [B], targets [B, T, 2N]), the same in every process."""
    rng = np.random.default_rng(7)
    for _ in range(steps):
        x = rng.standard_normal((GLOBAL_BATCH, MAX_TIME, INPUT_SIZE))
        lengths = rng.integers(1, MAX_TIME + 1, GLOBAL_BATCH).astype(np.int32)
        targets = rng.standard_normal((GLOBAL_BATCH, MAX_TIME, 2 * NUM_UNITS))
        targets[np.arange(MAX_TIME)[None, :] >= lengths[:, None]] = 0.0
        yield x, lengths, targets


def train(steps: int, comm: Any = None, xp: types.ModuleType = np) -> tuple[Any, Any, list[float]]:
    """(LSTM params, output bias, the global batch's loss per step) after ``steps`` steps, on ``xp``.

    With ``comm`` (a :class:`cudnn_rnn.distributed.Communicator`): the three extra lines of
    data-parallel training: broadcast the initial weights, shard the batch, average the gradients.
    """
    seed = 0 if comm is None else comm.rank
    layer = LSTM(INPUT_SIZE, NUM_UNITS, NUM_LAYERS, bidirectional=True, dtype="float64", seed=seed, xp=xp)
    bias = xp.asarray(np.random.default_rng(seed).uniform(-0.1, 0.1, 2 * NUM_UNITS))
    bias_grad = xp.zeros_like(bias)
    if comm is not None:
        comm.broadcast([layer.params, bias])
    optimiser = Adam([layer.params, bias], lr=0.05)
    losses = []
    for x, lengths, targets in global_batches(steps):
        if comm is not None:
            x, lengths, targets = comm.shard(x), comm.shard(lengths), comm.shard(targets)
        n = x.shape[0]
        x, targets = xp.asarray(x), xp.asarray(targets)
        layer.zero_grad()
        y, h, c = layer.forward(x, lengths)
        out = y + bias
        out[xp.asarray(np.arange(MAX_TIME)[None, :] >= lengths[:, None])] = 0.0  # nothing predicted past a length
        diff = out - targets
        loss = 0.5 * float((diff**2).sum() + (h**2).sum()) / n
        layer.backward(diff / n, h / n)
        bias_grad[...] = diff.sum(axis=(0, 1)) / n
        if comm is not None:
            comm.allreduce_mean([layer.grad, bias_grad])
            box = np.array([loss])
            comm.allreduce_mean([box])
            loss = float(box[0])
        clip_grad_norm([layer.grad, bias_grad], MAX_NORM)
        optimiser.step([layer.grad, bias_grad])
        losses.append(float(loss))
    return layer.params, bias, losses
