"""Hostile values, and running a property in a child process that can neither hang the run nor eat the machine.

:func:`run_in_child` runs the test again in a child process, a fresh interpreter (never a fork of this
process, where JAX or another library may have threads running): its own pytest runs the one test up to
:func:`run_in_child`, which there runs the whole property (every hypothesis example) under an address-space
limit, writing a description of each example to a file before running it; the parent waits with a
wall-clock deadline. A hang, a kill by a signal (SIGSEGV ...), a MemoryError or any other failure fails
the test with the last example and the child's report. :func:`guarded` wraps a property so that each
example is described first and interrupted (:class:`Hang`, which hypothesis does not catch, so it does not
spend minutes shrinking a hang) when it runs too long.

Values are labelled (:class:`V`): hypothesis reports ``10**400`` rather than its 401 digits.
"""

from __future__ import annotations

import faulthandler
import functools
import math
import os
import resource
import signal
import subprocess
import sys
import traceback
import warnings
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np
import pytest

__all__ = ["V", "Hang", "EXAMPLE_SECONDS", "START_SECONDS", "guarded", "run_in_child", "describe", "HUGE_INTS",
           "NEGATIVE_INTS", "BAD_FLOATS", "NOT_NUMBERS", "REAL_OVERFLOWS", "HUGE_SIZE", "huge"]

#: the address space the child may add to what it has when the property starts (its imports done)
MEMORY_HEADROOM = 3 * 2**29  # 1.5 GiB
#: one example running longer than this is a hang
EXAMPLE_SECONDS = 5.0
#: what the child's start may add to the property's wall clock: the interpreter, pytest, the test module's
#: imports and the test up to run_in_child (a second or two on two cores)
START_SECONDS = 60.0
#: set in the child's environment: the folder of the parent's files, which tells run_in_child it is the child
CHILD_FOLDER = "CUDNN_RNN_TESTING_HOSTILE_CHILD"

#: the leading dimension of the broadcast (never allocated) arrays
HUGE_SIZE = 2**40

F = TypeVar("F", bound=Callable[..., Any])

#: where the child describes the example it is about to run (set in the child by run_in_child)
_progress: Path | None = None
#: where faulthandler writes the stacks of an example stuck where the alarm cannot interrupt it (C code)
_stuck: Any = None


class V:
    """A hostile value with a short label: hypothesis prints the label in a falsifying example."""

    __slots__ = ("label", "value")

    def __init__(self, label: str, value: Any) -> None:
        self.label = label
        self.value = value

    def __repr__(self) -> str:
        return self.label


class Hang(BaseException):
    """An example ran past :data:`EXAMPLE_SECONDS` (a BaseException: hypothesis lets it through unshrunk)."""


def _labelled(values: list[tuple[str, Any]]) -> list[V]:
    return [V(label, value) for label, value in values]


#: integers no size, count or C int can be
HUGE_INTS: list[V] = _labelled([("2**31", 2**31), ("2**32", 2**32), ("2**40", 2**40), ("2**62", 2**62),
                                ("2**63", 2**63), ("2**64", 2**64), ("10**18", 10**18), ("10**400", 10**400),
                                ("np.int64(2**62)", np.int64(2**62)), ("np.uint64(2**64-1)", np.uint64(2**64 - 1))])
NEGATIVE_INTS: list[V] = _labelled([("-1", -1), ("-2**31-1", -(2**31) - 1), ("-2**63", -(2**63)),
                                    ("-10**400", -(10**400)), ("np.int8(-1)", np.int8(-1))])
#: floats that are no probability, rate or size (and floats where an int goes)
BAD_FLOATS: list[V] = _labelled([("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("1e308", 1e308),
                                 ("-1e308", -1e308), ("1.5", 1.5), ("1.0", 1.0), ("-0.0", -0.0), ("-0.5", -0.5),
                                 ("np.float32(nan)", np.float32(math.nan)), ("np.float64(inf)", np.float64(math.inf)),
                                 ("np.longdouble(1e400)", np.longdouble("1e400"))])
#: real numbers whose float() overflows
REAL_OVERFLOWS: list[V] = _labelled([("10**400", 10**400), ("-10**400", -(10**400)),
                                     ("Fraction(10**400)", Fraction(10**400)),
                                     ("Fraction(-10**400, 3)", Fraction(-(10**400), 3))])
#: things that are not numbers at all, or numbers of the wrong kind
NOT_NUMBERS: list[V] = _labelled([("True", True), ("False", False), ("np.bool_(True)", np.bool_(True)), ("None", None),
                                  ("'1'", "1"), ("''", ""), ("b'1'", b"1"), ("1j", 1j), ("[]", []), ("{}", {}),
                                  ("(1,)", (1,)), ("object()", object()), ("Decimal('1e400')", Decimal("1e400")),
                                  ("np.array(1)", np.array(1)), ("np.array([1, 2])", np.array([1, 2]))])


def huge(base: np.ndarray, axis: int) -> np.ndarray:
    """``base`` broadcast (read-only, nothing allocated) to :data:`HUGE_SIZE` along ``axis``."""
    shape = list(base.shape)
    one = np.take(base, [0], axis=axis) if shape[axis] else np.zeros([*shape[:axis], 1, *shape[axis + 1:]],
                                                                    base.dtype)
    shape[axis] = HUGE_SIZE
    return np.broadcast_to(one, tuple(shape))


def describe(value: Any, depth: int = 0) -> str:
    """A short description of any value: arrays by shape and dtype, long numbers by their digit count."""
    if isinstance(value, V):
        return value.label
    if isinstance(value, np.ndarray):
        extra = "" if value.flags.writeable else ", read-only"
        return f"ndarray(shape={value.shape}, dtype={value.dtype}{extra})"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"{'-' if value < 0 else ''}<int of {len(str(abs(value)))} digits>"
    if depth < 3 and isinstance(value, (list, tuple)):
        inner = ", ".join(describe(item, depth + 1) for item in value[:8])
        return f"[{inner}{', ...' if len(value) > 8 else ''}]"
    if depth < 3 and isinstance(value, dict):
        inner = ", ".join(f"{key!r}: {describe(item, depth + 1)}" for key, item in list(value.items())[:12])
        return "{" + inner + "}"
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def guarded(test: F) -> F:
    """Wrap a property (under ``@given``): describe each example to the progress file, then run it under an alarm."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _progress is not None:
            text = ", ".join([describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()])
            _progress.write_text(f"{test.__name__}({text})")
        signal.setitimer(signal.ITIMER_REAL, EXAMPLE_SECONDS)
        if _stuck is not None:  # stuck in C code past the alarm: dump every stack and end the child
            faulthandler.dump_traceback_later(2 * EXAMPLE_SECONDS, exit=True, file=_stuck)
        try:
            return test(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if _stuck is not None:
                faulthandler.cancel_dump_traceback_later()

    return run  # type: ignore[return-value]


def _address_space() -> int:
    """The child's current virtual memory size in bytes (VmSize)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def _expire(signum: int, frame: object) -> None:
    raise Hang(f"an example ran for more than {EXAMPLE_SECONDS} s")


def _child(body: Callable[[], None], progress: Path, report: Path, stuck: Path) -> int:
    """Run ``body`` in the child; returns its exit status (0: passed)."""
    global _progress, _stuck
    _progress = progress
    _stuck = open(stuck, "w")  # noqa: SIM115  (kept open for faulthandler until the child exits)
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = _address_space() + MEMORY_HEADROOM
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        signal.signal(signal.SIGALRM, _expire)
        with warnings.catch_warnings():
            # NumPy's overflow and invalid-value warnings on NaN/inf data are not what is checked here
            warnings.simplefilter("ignore", RuntimeWarning)
            body()
    except Hang:
        report.write_text(f"HANG: an example ran for more than {EXAMPLE_SECONDS} s (interrupted there; not shrunk)")
        return 3
    except BaseException as error:  # everything the property raised, hypothesis' report included
        text = "".join(traceback.format_exception(error))
        report.write_text(text[-12000:])
        return 4 if isinstance(error, MemoryError) else 1
    report.write_text("passed")
    return 0


def _files(folder: Path) -> tuple[Path, Path, Path]:
    """Where the child describes the example it starts, reports how the property ended, and dumps a stuck one."""
    return folder / "last_example.txt", folder / "report.txt", folder / "stuck.txt"


def run_in_child(body: Callable[[], None], request: pytest.FixtureRequest, seconds: float) -> None:
    """Run ``body`` (a whole hypothesis property) in a child process; fail the test on anything but success.

    The child is a fresh interpreter whose pytest runs this test (``request``'s) again, and this call there
    runs ``body`` and ends the child. ``body`` gets :data:`MEMORY_HEADROOM` more address space than the child
    has when it starts it, and ``seconds`` of wall clock (:data:`START_SECONDS` more for the child's start): a
    hang is killed, a crash is reported by its signal, each with the last example it started. The files
    (and the child's pytest's own ``tmp_path``) are in this test's ``tmp_path``.
    """
    parent_folder = os.environ.pop(CHILD_FOLDER, None)
    if parent_folder is not None:  # the child: run the property, and never return into its pytest
        code = 1
        try:
            code = _child(body, *_files(Path(parent_folder)))
        finally:
            os._exit(code)
    folder: Path = request.getfixturevalue("tmp_path")
    progress, report, stuck = _files(folder)
    progress.write_text("(no example started)")
    report.write_text("")
    stuck.write_text("")
    # (--assert=plain: the properties' asserts carry their own messages, and the child's start takes half the time
    # without rewriting hypothesis and the test module)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--assert=plain",
               f"--basetemp={folder / 'child'}", request.node.nodeid]
    with open(folder / "child_output.txt", "w+") as output:
        child = subprocess.Popen(command, cwd=request.config.rootpath, env={**os.environ, CHILD_FOLDER: str(folder)},
                                 stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
        status: int | None = None
        try:
            status = child.wait(timeout=START_SECONDS + seconds)
        except subprocess.TimeoutExpired:
            pass  # (status None: a hang)
        finally:
            if child.poll() is None:  # past its deadline, or this run interrupted: the child ends here
                child.kill()
                child.wait()
        output.seek(0)
        printed = output.read()
    last = progress.read_text()
    if status is None:
        pytest.fail(f"HANG: the child was still running after {START_SECONDS + seconds} s and was killed; last "
                    f"example started:\n  {last}", pytrace=False)
    if stuck.read_text():
        pytest.fail(f"HANG: an example ran for more than {2 * EXAMPLE_SECONDS} s, stuck where the alarm could not "
                    f"interrupt it:\n  {last}\n{stuck.read_text()[-6000:]}", pytrace=False)
    if status < 0:
        name = signal.Signals(-status).name
        pytest.fail(f"CRASH: the child died of {name}; last example started:\n  {last}", pytrace=False)
    if not report.read_text():
        pytest.fail(f"the child ended (exit status {status}) without running the property; it printed:\n"
                    f"{printed[-6000:]}", pytrace=False)
    if status == 0:
        return
    if status == 3:
        pytest.fail(f"HANG: an example ran for more than {EXAMPLE_SECONDS} s (interrupted there, not shrunk):\n"
                    f"  {last}", pytrace=False)
    what = "MEMORY" if status == 4 else "FAILED"
    pytest.fail(f"{what} (a hypothesis failure ends with its minimal example):\n{report.read_text()}", pytrace=False)
