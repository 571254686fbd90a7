"""Writes slowed down, so that a test can kill a process inside one.

:func:`slow_writes` is a ``cudnn_rnn.files.atomic_write`` (the one function every file cudnn_rnn writes
goes through) whose file objects write in 64 KiB chunks, each flushed and followed by a pause. A test
patches it in with ``monkeypatch.setattr(cudnn_rnn.files, "atomic_write", slow_writes(pause))``; run as
a script, this module patches it into a child process before running the rest of its command line as
``python`` would (:func:`command` builds one)::

    python tests/support/slow_writes.py 0.05 examples/train_char_lm.py --steps 8 ...
    python tests/support/slow_writes.py 0.05 -c "from cudnn_rnn.files import write_bytes; ..." ARG ...
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, ContextManager, Iterator

import cudnn_rnn.files

#: the size of each chunk written before a pause
CHUNK = 64 * 1024
#: this script, for :func:`command`
SCRIPT = str(Path(__file__).resolve())


class PausedFile:
    """A file object whose writes go out in :data:`CHUNK`-byte pieces, each flushed and followed by ``pause`` s."""

    def __init__(self, handle: IO[bytes], pause: float) -> None:
        self._handle, self._pause = handle, pause

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), CHUNK):
            self._handle.write(view[start:start + CHUNK])
            self._handle.flush()
            time.sleep(self._pause)
        return len(view)

    def __getattr__(self, name: str) -> Any:  # everything but write is the file object's own
        return getattr(self._handle, name)


def slow_writes(pause: float) -> Callable[..., ContextManager[Any]]:
    """The ``atomic_write`` of this moment, its file objects made :class:`PausedFile` s of ``pause`` seconds."""
    original = cudnn_rnn.files.atomic_write

    @contextlib.contextmanager
    def paused(path: Any, **options: Any) -> Iterator[Any]:
        with original(path, **options) as handle:
            yield PausedFile(handle, pause)

    return paused


def command(pause: float | str, *argv: str) -> list[str]:
    """The command line that runs ``python *argv`` with every write paused ``pause`` seconds per chunk."""
    return [sys.executable, SCRIPT, str(pause), *argv]


def main(pause: str, *argv: str) -> None:
    cudnn_rnn.files.atomic_write = slow_writes(float(pause))  # type: ignore[assignment]
    if argv[0] == "-c":
        sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv, sys.path[0] = list(argv), os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(*sys.argv[1:])
