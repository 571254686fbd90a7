"""libhdf5 in a child process: a crash or an endless loop on a damaged file is a FileReadError.

    run_isolated(path, work) -> work()   run in a child; a crash, a time limit passed (READ_SECONDS, plus
                                         READ_SECONDS_PER_GB per GB of the file) or anything work raises
                                         comes back as FileReadError (ValueError / TypeError as such)
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any, Callable, TypeVar

from ._found import FileReadError, one_line

__all__ = ["run_isolated", "READ_SECONDS", "READ_SECONDS_PER_GB"]

Result = TypeVar("Result")


# ---- libhdf5 in a child process --------------------------------------------------------------------------
#: seconds a read may take (plus READ_SECONDS_PER_GB per GB of file) before it counts as hung
READ_SECONDS, READ_SECONDS_PER_GB = 120.0, 60.0


def _in_child(work: Callable[[], Any], sender: Any) -> None:
    """Run ``work`` and send back ("value", result) or what it raised, as plain data."""
    try:
        outcome: tuple[str, Any] = ("value", work())
    except FileReadError as error:
        outcome = ("FileReadError", error.reason)
    except (ValueError, TypeError, ImportError) as error:
        outcome = (type(error).__name__ if type(error) in (ValueError, TypeError) else "ValueError", str(error))
    except BaseException as error:  # noqa: BLE001 - everything goes back to the parent as a message
        outcome = ("FileReadError", f"not a readable Keras file ({type(error).__name__}: {one_line(error, 200)})")
    try:
        sender.send(outcome)
    except Exception as error:  # noqa: BLE001 - e.g. a result that does not pickle
        sender.send(("FileReadError", f"its contents could not be passed on ({type(error).__name__}: "
                                      f"{one_line(error, 200)})"))
    sender.close()


def run_isolated(path: str, work: Callable[[], Result]) -> Result:
    """``work()`` (which reads the file with libhdf5) in a forked child process.

    libhdf5 is written in C and some damaged files crash it or make it loop; in a child, that ends
    in a FileReadError instead of taking the caller's process down or hanging it. Where fork is not
    available, or in a daemonic process (which may not start children), ``work`` runs in this process.
    """
    if "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.current_process().daemon:
        return work()
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_in_child, args=(work, sender), daemon=True)
    child.start()
    sender.close()
    seconds = READ_SECONDS + READ_SECONDS_PER_GB * os.path.getsize(path) / 2 ** 30
    try:
        if not receiver.poll(seconds):
            raise FileReadError(path, f"reading it did not finish in {seconds:.0f} s: libhdf5 loops on this file, "
                                      "which is corrupt")
        kind, value = receiver.recv()
    except EOFError:
        child.join(5)
        raise FileReadError(path, f"libhdf5 crashed reading it (exit code {child.exitcode}): the file is corrupt") \
            from None
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join()
    if kind == "value":
        return value
    if kind == "FileReadError":
        raise FileReadError(path, value)
    raise {"TypeError": TypeError, "ValueError": ValueError}[kind](value)
