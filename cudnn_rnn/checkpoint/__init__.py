"""Whole-state checkpoints: save everything a training step depends on; resume exactly where a run stopped.

A checkpoint holds every layer's configuration, params and dropout position (its step), every
optimiser's state (moments, velocities, step count, hyperparameters), any other model arrays,
and the caller's own small state (step, epoch, data cursor, a NumPy ``Generator``'s state).
Resuming from it and training on gives, bit for bit, what the run would have given had it never
stopped::

    from cudnn_rnn import checkpoint

    manager = checkpoint.CheckpointManager("runs/lm/checkpoints", keep=3)   # comm=... under mpiexec
    found = manager.latest()                          # the newest file that verifies, or None
    if found:
        found.restore(layers={"lstm": lstm}, optimizers={"adam": adam}, arrays={"w_out": w_out})
        start, rng.bit_generator.state = found.state["step"] + 1, found.state["rng"]
    for step in range(start, steps + 1):
        ...                                           # one training step
        if step % 100 == 0:
            manager.save(step, layers={"lstm": lstm}, optimizers={"adam": adam}, arrays={"w_out": w_out},
                         state={"step": step, "rng": rng.bit_generator.state})

:func:`save` / :func:`load` do the same for one file. Files are written atomically (a kill, even
mid-write, leaves the previous checkpoints whole) and are safetensors files: named arrays
after a JSON header, nothing pickled, so loading one never runs code. A SHA-256 checksum over
the whole file catches any damage; a file that is damaged, truncated, of another kind or
inconsistent is refused with :class:`CheckpointError` naming it, and ``latest()`` skips it.
Arrays may be NumPy or CuPy on either side: a checkpoint written on a GPU loads on a CPU, and
the other way round.
"""

from __future__ import annotations

from ..errors import CheckpointError
from ..files import SAFETENSORS
from ._checkpoint import Checkpoint, load, save
from ._manager import CheckpointManager, CheckpointWarning

__all__ = ["save", "load", "Checkpoint", "CheckpointManager", "CheckpointError", "CheckpointWarning", "EXTENSION"]

#: The extension of a checkpoint file, ``".safetensors"`` (a checkpoint is a safetensors file).
EXTENSION: str = SAFETENSORS
