"""A framework's reader in a disposable child process: a crash, an endless loop or a runaway allocation on a
damaged file is a FileReadError naming the file, never the caller's death.

    run_isolated(path, functools.partial(_read_hdf5, path), reader=HDF5)   -> what _read_hdf5(path) returns

``work`` must pickle (a module-level function, or ``functools.partial`` of one and its arguments):
the child, a new Python interpreter given this process's ``sys.path``, imports it, runs it and
answers:

==================================  =============================================================
in the child                        in the caller
==================================  =============================================================
``work()`` returns                  its value (pickled back)
FileReadError                       FileReadError naming ``path``
ValueError, TypeError               the same error (ImportError: a ValueError)
MemoryError                         FileReadError "reading it needed more than M GiB of memory"
anything else                       FileReadError "not a readable Keras file (...)" (the reader's kind)
a crash (a signal)                  FileReadError "libhdf5 crashed reading it (exit code -11)"
no answer within the time limit     FileReadError "reading it did not finish in N s", the child
                                    killed (N: READ_SECONDS_PER_GB per GB of file, at least
                                    READ_SECONDS, from when ``work`` starts; START_SECONDS to get
                                    there, unpickling ``work``, importing its module and the
                                    Reader's ``imports`` included)
==================================  =============================================================

The child's data segment (its heap and private mappings: ``RLIMIT_DATA``) is bounded, once its imports
are done, by MEMORY_BYTES plus MEMORY_PER_FILE_BYTE times the file's size, so a file that declares an
absurd size fails in the child with a MemoryError instead of exhausting the machine. A reader then
checks only what its user must be told (data its file does not store), not what would make its
library allocate, crash or loop.

The child is spawned, never forked: this process starts it with :mod:`subprocess` (which execs
the interpreter at once), as multiprocessing's "spawn" does, but it runs only this module, never
the caller's ``__main__`` (multiprocessing's spawn and forkserver children import it again, which
re-runs a script's top level and its imports). Fork is unsafe in a process with threads or a CUDA
context, a training process (Python 3.12 warns). The cost is the child's start, a new interpreter
importing numpy, this package and h5py: a small ``.keras`` or ``.weights.h5`` file reads in about
0.35 s on two cores, where a forked child took 0.03 s. Where there is no POSIX ``subprocess`` to
hand the child a pipe (Windows), ``work`` runs in this process, without these bounds.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import resource
import subprocess
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, TypeVar, cast

from ._found import FileReadError, one_line

__all__ = ["Reader", "HDF5", "run_isolated", "START_SECONDS", "READ_SECONDS", "READ_SECONDS_PER_GB"]

Result = TypeVar("Result")


@dataclass(frozen=True)
class Reader:
    """The library a child runs, as its refusals name it.

    Attributes:
        library: what crashes or loops ("libhdf5").
        kind: what a file it cannot read is not ("Keras file").
        imports: modules the child imports before the read's time and memory bounds start ("tensorflow").
    """

    library: str
    kind: str
    imports: tuple[str, ...] = ()


#: libhdf5 reading a Keras (or any HDF5) file
HDF5 = Reader("libhdf5", "Keras file")

#: seconds the child may take to start (a new interpreter importing numpy, h5py and this package)
START_SECONDS = 120.0

#: seconds a read may take before it counts as hung: READ_SECONDS_PER_GB per GB of file (about 17 MB/s,
#: slow storage), at least READ_SECONDS; a small file libhdf5 loops on is refused after READ_SECONDS
READ_SECONDS, READ_SECONDS_PER_GB = 10.0, 60.0

#: the child's data segment: MEMORY_BYTES plus MEMORY_PER_FILE_BYTE per byte of the file
MEMORY_BYTES, MEMORY_PER_FILE_BYTE = 4 * 2**30, 4

#: what the child says once it has imported ``work`` and starts it
_STARTED = ("started", None)

#: the child's program: ``sys.path`` and ``work`` come pickled on its stdin, answers go to the pipe
#: whose descriptor is its argument
_CHILD = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
          f"from {__name__} import _serve; _serve(int(sys.argv[1]), pickle.load(sys.stdin.buffer), "
          "int(sys.argv[2]))")


def _in_child(work: Callable[[], Any], sender: Any, reader: Reader, memory_bytes: int) -> None:
    """Run ``work`` and send back ("value", result) or what it raised, as plain data."""
    try:
        outcome: tuple[str, Any] = ("value", work())
    except FileReadError as error:
        outcome = ("FileReadError", error.reason)
    except MemoryError:
        outcome = ("FileReadError", f"reading it needed more than {memory_bytes / 2**30:.1f} GiB of memory: the "
                                    "file declares more data than it can hold, or is corrupt")
    except (ValueError, TypeError, ImportError) as error:
        outcome = (type(error).__name__ if type(error) in (ValueError, TypeError) else "ValueError", str(error))
    except BaseException as error:  # noqa: BLE001 - everything goes back to the parent as a message
        outcome = ("FileReadError", f"not a readable {reader.kind} ({type(error).__name__}: {one_line(error, 200)})")
    try:
        sender.send(outcome)
    except Exception as error:  # noqa: BLE001 - e.g. a result that does not pickle
        sender.send(("FileReadError", f"its contents could not be passed on ({type(error).__name__}: "
                                      f"{one_line(error, 200)})"))
    sender.close()


def _serve(answers: int, reader: Reader, memory_bytes: int) -> None:
    """The child: the work from stdin (importing what it needs), then :data:`_STARTED` and its outcome."""
    sender = Connection(answers, readable=False)

    def started_work() -> Any:
        work = pickle.load(sys.stdin.buffer)
        for module in reader.imports:
            importlib.import_module(module)
        resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))  # imports done: the file's share
        sender.send(_STARTED)
        return work()

    _in_child(started_work, sender, reader, memory_bytes)


def run_isolated(path: str, work: Callable[[], Result], reader: Reader = HDF5) -> Result:
    """``work()`` (which reads the file with ``reader``'s library) in a child process (see the module docstring).

    Readers written in C may crash, loop or allocate without bound on a damaged file; in a child,
    that ends in a FileReadError instead of taking the caller's process down or hanging it.
    """
    if os.name != "posix" or not sys.executable:
        return work()
    memory_bytes = MEMORY_BYTES + MEMORY_PER_FILE_BYTE * _size(path)
    request = pickle.dumps(sys.path) + pickle.dumps(reader) + pickle.dumps(work)
    receive, send = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(send), str(memory_bytes)],
                                 stdin=subprocess.PIPE, bufsize=0, pass_fds=(send,))
    except BaseException:
        os.close(receive)
        raise
    finally:
        os.close(send)
    receiver = Connection(receive, writable=False)
    seconds = max(READ_SECONDS, READ_SECONDS_PER_GB * _size(path) / 2 ** 30)
    try:
        stdin = child.stdin
        assert stdin is not None  # Popen(stdin=PIPE) made it
        with contextlib.suppress(BrokenPipeError):  # a child that ended at once: its exit code tells
            stdin.write(request)
            stdin.close()
        if not receiver.poll(START_SECONDS):
            raise FileReadError(path, f"the process reading it did not start in {START_SECONDS:.0f} s")
        kind, value = receiver.recv()
        if (kind, value) == _STARTED:
            if not receiver.poll(seconds):
                raise FileReadError(path, f"reading it did not finish in {seconds:.0f} s: {reader.library} loops on "
                                          "this file, which is corrupt")
            kind, value = receiver.recv()
    except EOFError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(5)
        raise FileReadError(path, f"{reader.library} crashed reading it (exit code {child.returncode}): the file is "
                                  "corrupt") from None
    finally:
        receiver.close()
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdin is not None:
            child.stdin.close()
    if kind == "value":
        return cast(Result, value)  # what the child's work() returned
    if kind == "FileReadError":
        raise FileReadError(path, value)
    raise {"TypeError": TypeError, "ValueError": ValueError}[kind](value)


def _size(path: str) -> int:
    """The bytes of the file, or of the files of a TensorFlow checkpoint prefix (``path`` + ``.index`` and shards)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    folder, stem = os.path.split(path)
    try:
        return sum(entry.stat().st_size for entry in os.scandir(folder or ".") if entry.name.startswith(stem + "."))
    except OSError:
        return 0
