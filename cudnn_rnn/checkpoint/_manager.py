"""Numbered checkpoints in one folder: save every K steps, keep the newest N, resume from the newest good one.

    <folder>/ckpt-000000100.safetensors     step 100 (nine digits or more: names sort as numbers do)
    <folder>/ckpt-000000150.safetensors
    <folder>/.ckpt-000000200.safetensors.<machine>.<pid>.<random>.partial
                                            a save that a kill cut short: ignored, and removed by the
                                            next save once its writer is gone (cudnn_rnn.files.remove_leftovers)

A save writes its file atomically and only then removes the oldest files, so a kill at any
moment leaves every checkpoint that was already whole.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from pathlib import Path
from typing import Any

from .._checks import checked_count
from ..config import is_count
from ..distributed import Communicator
from ..errors import CheckpointError
from ..files import SAFETENSORS as EXTENSION, remove_leftovers
from ._checkpoint import Checkpoint, from_bytes, read_checkpoint_bytes, save, share_from_root

__all__ = ["CheckpointManager", "CheckpointWarning"]

_PREFIX = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class CheckpointWarning(UserWarning):
    """A damaged checkpoint was skipped in favour of an older one."""


class CheckpointManager:
    """The checkpoints of one training run, in one folder.

    Args:
        directory: the folder (made on the first save).
        keep: how many of the newest checkpoints to keep (>= 1).
        prefix: the start of every file name (letters, digits, ``_ . -``).
        comm: a :class:`cudnn_rnn.distributed.Communicator`: rank 0 writes and reads, every
            rank gets what it read. None: this process alone.

    Raises:
        ValueError: ``keep`` is not an integer >= 1, or ``prefix`` holds other characters.

    How a run uses it: the example of :mod:`cudnn_rnn.checkpoint`.
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 3, prefix: str = "ckpt",
                 comm: Communicator | None = None) -> None:
        if not is_count(keep) or keep < 1:
            raise ValueError(f"keep must be an integer >= 1; got {keep!r}")
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise ValueError(f"prefix must be letters, digits, '_', '.' or '-' (not starting with '.' or '-'); "
                             f"got {prefix!r}")
        self.directory = Path(directory)
        self.keep = keep
        self.prefix = prefix
        self.comm = comm
        self._name = re.compile(re.escape(prefix) + r"-(\d{9,})" + re.escape(EXTENSION))

    @property
    def writes(self) -> bool:
        """Whether this process writes (rank 0, or no communicator)."""
        return self.comm is None or self.comm.rank == 0

    def path_for(self, step: int) -> Path:
        """The file of the checkpoint of ``step`` (a non-negative integer), whether or not it exists:
        ``<directory>/<prefix>-<step, 9 digits or more>.safetensors``."""
        return self.directory / f"{self.prefix}-{step:09d}{EXTENSION}"

    def steps(self) -> list[int]:
        """The steps of the checkpoint files in the folder, ascending (damaged ones included; none before it exists)."""
        if not self.directory.is_dir():
            return []
        found = (self._name.fullmatch(entry.name) for entry in self.directory.iterdir())
        return sorted(int(match.group(1)) for match in found if match)

    def save(self, step: int, **parts: Any) -> Path | None:
        """Write the checkpoint of ``step``, then remove the oldest so that ``keep`` remain.

        A file of the same step is replaced. Files of later steps (a run resumed from an earlier
        checkpoint) are left alone until this run replaces them. ``step`` (stored in the file and its
        name) and ``parts`` are what :func:`cudnn_rnn.checkpoint.save` takes, and its errors are save's.

        Returns:
            The file written, or None on a rank that does not write.
        """
        step = checked_count("step", step)
        if not self.writes:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_partials()
        path = self.path_for(step)
        save(path, step=step, **parts)
        older = [s for s in self.steps() if s < step]
        for old in older[:max(len(older) - (self.keep - 1), 0)]:
            with contextlib.suppress(FileNotFoundError):
                self.path_for(old).unlink()
        return path

    def latest(self) -> Checkpoint | None:
        """The newest checkpoint that is whole and consistent, or None if there is none.

        Damaged files, and whole files that :func:`cudnn_rnn.checkpoint.load` refuses (a number out
        of range, a field of the wrong type), are skipped with a :class:`CheckpointWarning` naming
        each. A file that is gone by the time it is read was removed by a writer's rotation, not
        damaged: the folder is listed again, so that a run resuming while another process saves and
        rotates gets the newest whole checkpoint, never None while one exists.
        """
        found: dict[str, Checkpoint] = {}
        warned: set[str] = set()  # a damaged file is named once, however often the folder is listed

        def read() -> tuple[str, bytes] | None:
            while True:
                for step in reversed(self.steps()):
                    path = os.fspath(self.path_for(step))
                    try:
                        blob = read_checkpoint_bytes(path)
                        checkpoint = from_bytes(path, blob)
                        if checkpoint.step != step:
                            raise CheckpointError(path, f"it holds step {checkpoint.step}, not the step {step} its "
                                                        "name says")
                    except FileNotFoundError:  # rotated away since the listing: list the folder again
                        break
                    except CheckpointError as error:
                        if path not in warned:
                            warned.add(path)
                            warnings.warn(f"skipping a damaged checkpoint: {error}", CheckpointWarning, stacklevel=3)
                        continue
                    found["checkpoint"] = checkpoint
                    return path, blob
                else:  # every listed file was read: none is whole
                    return None

        shared = share_from_root(self.comm, read)
        if shared is None:
            return None
        return found.get("checkpoint") or from_bytes(*shared)

    def _remove_partials(self) -> None:
        """Remove what killed saves of this manager's checkpoints left behind (a live writer's files stay)."""
        partial = re.compile(r"\." + self._name.pattern + r"\.")
        entries: list[str] = []
        with contextlib.suppress(OSError):
            entries = os.listdir(self.directory)
        for step in sorted({int(found[1]) for found in map(partial.match, entries) if found}):
            remove_leftovers(self.path_for(step))

    def __repr__(self) -> str:
        return f"CheckpointManager({os.fspath(self.directory)!r}, keep={self.keep}, prefix={self.prefix!r})"
