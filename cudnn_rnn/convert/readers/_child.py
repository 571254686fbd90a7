"""A framework's reader in a child process: a crash, an endless loop or a runaway allocation on a
damaged file is a FileReadError naming the file, never the caller's death.

    run_isolated(path, functools.partial(_read_hdf5, path), reader=HDF5)   -> what _read_hdf5(path) returns

``work`` must pickle (a module-level function, or ``functools.partial`` of one and its arguments):
the child, a new Python interpreter given this process's ``sys.path``, imports it, runs it and
answers:

==================================  =============================================================
in the child                        in the caller
==================================  =============================================================
``work()`` returns                  its value (pickled back); a warm child is kept
FileReadError                       FileReadError naming ``path``; a warm child is kept
ValueError, TypeError               the same error (ImportError: a ValueError); a warm child is kept
MemoryError                         FileReadError "reading it needed more than M GiB of memory",
                                    the child ended
anything else                       FileReadError "not a readable Keras file (...)" (the reader's
                                    kind), the child ended
a crash (a signal)                  FileReadError "libhdf5 crashed reading it (exit code -11)";
                                    the next read starts a new child
no answer within the time limit     FileReadError "reading it did not finish in N s", the child
                                    killed (N: READ_SECONDS_PER_GB per GB of file, at least
                                    READ_SECONDS, from when this read's ``work`` starts;
                                    START_SECONDS to get there, unpickling ``work``, importing its
                                    module and, in a new child, the Reader's ``imports`` included)
==================================  =============================================================

Each read bounds the growth of the child's data segment (``RLIMIT_DATA``) to MEMORY_BYTES plus
MEMORY_PER_FILE_BYTE times the file's size, counted from what the child holds once the imports are
done, so a file that declares an absurd size fails with a MemoryError instead of exhausting the
machine; a child that holds more than a read's share after answering is not kept. A reader then
checks only what its user must be told, not what would make its library allocate, crash or loop.

A ``Reader(warm=True)`` keeps one idle child between reads, so that a process pays its ``imports``
(TensorFlow's: about 5 s) once; a read that finds none (the first, or one while another thread
reads) starts its own. No child outlives its caller: an idle one ends when its pipe closes, those
left are killed at exit, and a read that outlives twice its time limit by a minute ends by SIGALRM.

The child is started with :mod:`subprocess`, never forked (unsafe with threads or a CUDA context),
and runs only this module, never the caller's ``__main__`` (as multiprocessing's spawn would).
Without POSIX ``subprocess`` (Windows), ``work`` runs in this process, without bounds.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import math
import os
import pickle
import re
import resource
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, TypeVar, cast

from ._found import FileReadError, one_line

__all__ = ["Reader", "HDF5", "run_isolated"]

Result = TypeVar("Result")


@dataclass(frozen=True)
class Reader:
    """The library a child runs, as its refusals name it: ``library`` crashes or loops ("libhdf5") on a file that is
    not a readable ``kind`` ("Keras file"); the child imports ``imports`` ("tensorflow") before the read's time and
    memory bounds start, and stays for later reads when ``warm`` (worth it where ``imports`` are slow)."""

    library: str
    kind: str
    imports: tuple[str, ...] = ()
    warm: bool = False


#: libhdf5 reading a Keras (or any HDF5) file
HDF5 = Reader("libhdf5", "Keras file")

#: seconds the child may take to start (a new interpreter importing numpy, h5py and this package)
START_SECONDS = 120.0

#: seconds a read may take before it counts as hung: READ_SECONDS_PER_GB per GB of file (about 17 MB/s,
#: slow storage), at least READ_SECONDS; a small file libhdf5 loops on is refused after READ_SECONDS, which
#: exceeds the 10 s TensorFlow's allocator retries an allocation of an absurd declared shape before refusing it
READ_SECONDS, READ_SECONDS_PER_GB = 30.0, 60.0

#: the growth of the child's data segment a read may take: MEMORY_BYTES plus MEMORY_PER_FILE_BYTE per byte of the file
MEMORY_BYTES, MEMORY_PER_FILE_BYTE = 4 * 2**30, 4

#: what the child says once it has imported ``work`` and starts it
_STARTED = ("started", None, True)

#: the child's program: ``sys.path``, the Reader, then requests come on its stdin; answers go to the pipe whose
#: descriptor is its argument
_CHILD = ("import sys; from multiprocessing.connection import Connection; requests = Connection(0, writable=False); "
          f"sys.path[:] = requests.recv(); from {__name__} import _serve; _serve(requests, int(sys.argv[1]))")

def _data_bytes() -> int:
    """This process's data segment as RLIMIT_DATA counts it (Linux's VmData), or 0 where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            found = re.search(r"^VmData:\s*(\d+) kB", status.read(), re.MULTILINE)
    except OSError:
        return 0
    return int(found.group(1)) * 1024 if found else 0


def _in_child(request: tuple[bytes, int, float, str], sender: Connection, reader: Reader, baseline: list[int]
              ) -> None:
    """Run one pickled ``work`` under its bounds, in the caller's working directory (a relative path reads what the
    caller's would), and send :data:`_STARTED`, then (kind, value, keep) as plain data.

    ``baseline`` holds, from the first read on, the child's data segment once its imports were done.
    """
    pickled, memory_bytes, seconds, folder = request
    limits = resource.getrlimit(resource.RLIMIT_DATA)
    hard, healthy = limits[1], True
    try:
        os.chdir(folder)
        work = pickle.loads(pickled)
        for module in reader.imports:
            importlib.import_module(module)
        if not baseline:
            baseline.append(_data_bytes())
        soft = _data_bytes() + memory_bytes
        resource.setrlimit(resource.RLIMIT_DATA, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        signal.alarm(math.ceil(2 * seconds) + 60)  # an orphan's endless read ends (SIGALRM's default: exit)
        sender.send(_STARTED)
        outcome: tuple[str, Any] = ("value", work())
    except FileReadError as error:
        outcome = ("FileReadError", error.reason)
    except MemoryError:
        outcome, healthy = ("FileReadError", f"reading it needed more than {memory_bytes / 2**30:.1f} GiB of memory: "
                                             "the file declares more data than it can hold, or is corrupt"), False
    except (ValueError, TypeError, ImportError) as error:
        outcome = (type(error).__name__ if type(error) in (ValueError, TypeError) else "ValueError", str(error))
    except BaseException as error:  # noqa: BLE001 - everything goes back to the parent as a message
        outcome, healthy = ("FileReadError", f"not a readable {reader.kind} ({type(error).__name__}: "
                                             f"{one_line(error, 200)})"), False
    keep = healthy and _data_bytes() - (baseline or [0])[0] <= memory_bytes  # the result (to be freed) counted too
    try:
        sender.send((*outcome, keep))
    except Exception as error:  # noqa: BLE001 - e.g. a result that does not pickle
        sender.send(("FileReadError", f"its contents could not be passed on ({type(error).__name__}: "
                                      f"{one_line(error, 200)})", keep))
    signal.alarm(0)
    resource.setrlimit(resource.RLIMIT_DATA, limits)


def _serve(requests: Connection, answers: int) -> None:
    """The child, ``sys.path`` set: the Reader, then one read per request, until the request pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sender, reader = Connection(answers, readable=False), requests.recv()
    baseline: list[int] = []
    while True:
        try:
            request = requests.recv()
        except EOFError:  # the caller is gone or done
            return
        _in_child(request, sender, reader, baseline)


class _Child:
    """One child process: the pipe its requests go down, the pipe its answers come up."""

    def __init__(self, reader: Reader) -> None:
        receive, answers = os.pipe()
        request_end, send = os.pipe()
        try:
            self.process = subprocess.Popen([sys.executable, "-c", _CHILD, str(answers)], stdin=request_end,
                                            pass_fds=(answers,))
        except BaseException:
            os.close(receive)
            os.close(send)
            raise
        finally:
            os.close(answers)
            os.close(request_end)
        self.receiver, self.sender = Connection(receive, writable=False), Connection(send, readable=False)
        with contextlib.suppress(BrokenPipeError):  # a child that ended at once: its exit code tells
            self.sender.send(sys.path)
            self.sender.send(reader)

    def read(self, path: str, work: bytes, reader: Reader) -> tuple[str, Any, bool]:
        """The child's (kind, value, keep) for the pickled ``work``; FileReadError where it crashes or does not
        answer in time."""
        size = _size(path)
        seconds = max(READ_SECONDS, READ_SECONDS_PER_GB * size / 2 ** 30)
        try:
            with contextlib.suppress(BrokenPipeError):
                self.sender.send((work, MEMORY_BYTES + MEMORY_PER_FILE_BYTE * size, seconds, os.getcwd()))
            if not self.receiver.poll(START_SECONDS):
                raise FileReadError(path, f"the process reading it did not start in {START_SECONDS:.0f} s")
            answer: tuple[str, Any, bool] = self.receiver.recv()
            if answer == _STARTED:
                if not self.receiver.poll(seconds):
                    raise FileReadError(path, f"reading it did not finish in {seconds:.0f} s: {reader.library} "
                                              "loops on this file, which is corrupt")
                answer = self.receiver.recv()
        except EOFError:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
            raise FileReadError(path, f"{reader.library} crashed reading it (exit code {self.process.returncode}): "
                                      "the file is corrupt") from None
        return answer

    def end(self, wait: float | None = None) -> None:
        """Kill the child (if it still runs), reap it and close its pipes."""
        self.receiver.close()
        self.sender.close()
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(wait)


#: the idle child of each warm Reader, and the lock that guards the table
_warm: dict[Reader, _Child] = {}
_warm_lock = threading.Lock()


def run_isolated(path: str, work: Callable[[], Result], reader: Reader = HDF5) -> Result:
    """``work()`` (which reads the file with ``reader``'s library) in a child process (see the module docstring)."""
    if os.name != "posix" or not sys.executable:
        return work()
    pickled = pickle.dumps(work)
    with _warm_lock:
        child = _warm.pop(reader, None)
    if child is not None and child.process.poll() is not None:  # ended while idle (killed from outside)
        child.end()
        child = None
    child = child or _Child(reader)
    kept = False
    try:
        kind, value, keep = child.read(path, pickled, reader)
        if reader.warm and keep:
            with _warm_lock:
                kept = _warm.setdefault(reader, child) is child
    finally:
        if not kept:
            child.end()
    if kind == "value":
        return cast(Result, value)  # what the child's work() returned
    if kind == "FileReadError":
        raise FileReadError(path, value)
    raise {"TypeError": TypeError, "ValueError": ValueError}[kind](value)


@atexit.register
def _end_warm() -> None:
    """End every idle child (at this process's exit: each is killed and reaped, waiting a second at most)."""
    with _warm_lock:
        children = list(_warm.values())
        _warm.clear()
    for child in children:
        child.end(wait=1.0)


def _forget_warm() -> None:
    """In a forked copy of this process: the idle children are the parent's (their pipes closed here, not killed)."""
    global _warm_lock
    _warm_lock = threading.Lock()
    for child in _warm.values():
        child.receiver.close()
        child.sender.close()
    _warm.clear()


os.register_at_fork(after_in_child=_forget_warm)


def _size(path: str) -> int:
    """The bytes of the file, or of the files of a TensorFlow checkpoint prefix (``path`` + ``.index`` and shards)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    folder, stem = os.path.split(path)
    try:
        return sum(entry.stat().st_size for entry in os.scandir(folder or ".") if entry.name.startswith(stem + "."))
    except OSError:
        return 0
