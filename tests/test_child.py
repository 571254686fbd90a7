"""libhdf5's child process (cudnn_rnn.convert.readers._child): what comes back of each outcome, and
that reading never forks, so that it is safe in a process with threads (a training process).

The reader's own refusals through the child (a file that crashes libhdf5, one it loops on) are in
tests/test_read_keras.py.
"""

from __future__ import annotations

import functools
import importlib
import operator
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cudnn_rnn.convert.readers import FileReadError, _child, _keras_file

GOLDEN = Path(__file__).parent / "golden" / "files" / "keras"

#: a process with a thread running reads real Keras files, with fork forbidden and DeprecationWarning an error
#: (Python 3.12 warns when a process with threads forks); it prints what it found, what a crashing child
#: comes back as, and whether each read started one new interpreter (``python -c``), the thread still running
THREADED_READER = textwrap.dedent('''
    import functools, os, signal, subprocess, sys, threading
    from cudnn_rnn.convert.readers import FileReadError, _child, read_file

    children = []

    class RecordedPopen(subprocess.Popen):
        def __init__(self, args, **kwargs):
            children.append(args[:2])
            super().__init__(args, **kwargs)

    def no_fork():
        raise AssertionError("os.fork() in a process with a thread running")

    subprocess.Popen, os.fork = RecordedPopen, no_fork
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    for name in sys.argv[1:]:
        print(name, [(item.name, item.source) for item in read_file(name)], worker.is_alive())
    try:
        _child.run_isolated(sys.argv[1], functools.partial(signal.raise_signal, signal.SIGKILL))
    except FileReadError as error:
        print("crash:", error.reason)
    pythons = [args for args in children if args[0] == sys.executable]  # (platform runs uname, too)
    print("children:", pythons == [[sys.executable, "-c"]] * len(sys.argv), threading.active_count())
    stop.set()
''')


def test_a_process_with_a_thread_reads_without_forking() -> None:
    files = [str(GOLDEN / "keras3_functional.keras"), str(GOLDEN / "keras3_functional.weights.h5")]
    result = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", THREADED_READER, *files],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{files[0]} [('encoder', 'Keras 3 LSTM'), ('bi_gru', 'Keras 3 Bidirectional(GRU)'), "
        "('relu_rnn', 'Keras 3 SimpleRNN')] True",
        f"{files[1]} [('bi_gru', 'Keras 3 Bidirectional(GRU) (weights only)'), ('encoder', 'Keras 3 LSTM (weights "
        "only)'), ('relu_rnn', 'Keras 3 SimpleRNN (weights only)')] True",
        "crash: libhdf5 crashed reading it (exit code -9): the file is corrupt",
        "children: True 2",
    ]


def test_the_value_comes_back() -> None:
    assert _child.run_isolated(__file__, functools.partial(sorted, [3, 1, 2])) == [1, 2, 3]


@pytest.mark.parametrize("work, error, message", [
    (functools.partial(int, "x"), ValueError, "invalid literal for int() with base 10: 'x'"),
    (functools.partial(len, 5), TypeError, "object of type 'int' has no len()"),
    (functools.partial(importlib.import_module, "no_module_of_this_name"), ValueError,
     "No module named 'no_module_of_this_name'"),
    (functools.partial(operator.truediv, 1, 0), FileReadError,
     "not a readable Keras file (ZeroDivisionError: division by zero)"),
    (functools.partial(threading.Lock), FileReadError,
     "its contents could not be passed on (TypeError: cannot pickle '_thread.lock' object)"),
])
def test_what_the_child_raises_comes_back(work: functools.partial, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        _child.run_isolated(__file__, work)
    assert type(caught.value) is error and message in str(caught.value)


def test_a_file_read_error_in_the_child_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "noise.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    with pytest.raises(FileReadError) as caught:
        _child.run_isolated(str(tmp_path / "noise.h5"), functools.partial(_keras_file._read_hdf5,
                                                                                str(tmp_path / "noise.h5")))
    assert str(caught.value).startswith(f"cannot read {str(tmp_path / 'noise.h5')!r}: not a readable HDF5 file")


def test_a_child_that_crashes_is_a_file_error() -> None:
    with pytest.raises(FileReadError, match=r"libhdf5 crashed reading it \(exit code -9\): the file is corrupt"):
        _child.run_isolated(__file__, functools.partial(signal.raise_signal, signal.SIGKILL))


def test_a_child_that_does_not_finish_is_killed_at_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The time limit counts from when the work starts (the child's imports have their own); then the child is
    killed, not waited for: it ends by SIGKILL, where its sleep of 60 s would have let it exit with status 0."""
    children: list[subprocess.Popen[bytes]] = []

    class RecordedPopen(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            children.append(self)

    monkeypatch.setattr(_child, "READ_SECONDS", 1.0)
    monkeypatch.setattr(subprocess, "Popen", RecordedPopen)
    with pytest.raises(FileReadError, match="reading it did not finish in 1 s: libhdf5 loops on this file"):
        _child.run_isolated(__file__, functools.partial(time.sleep, 60))
    (child,) = children
    assert child.returncode == -signal.SIGKILL, f"the child ended with exit status {child.returncode}"


def allocated(size: int) -> int:
    """A child's work that allocates ``size`` bytes (zeroed: every page touched) and says how many."""
    return len(bytearray(size))


def test_a_child_that_allocates_past_its_memory_bound_is_a_file_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's data segment is bounded: an allocation past it is a FileReadError naming the file, one within
    it succeeds, and the bound is what refuses (1.5 GiB succeeds under the default bound, not under 1 GiB)."""
    with pytest.raises(FileReadError) as caught:
        _child.run_isolated(__file__, functools.partial(bytearray, 64 * 2**30))
    assert str(caught.value).startswith(f"cannot read {__file__!r}: reading it needed more than 4.0 GiB of memory")
    assert _child.run_isolated(__file__, functools.partial(allocated, 3 * 2**29)) == 3 * 2**29
    monkeypatch.setattr(_child, "MEMORY_BYTES", 2**30)
    with pytest.raises(FileReadError) as caught:
        _child.run_isolated(__file__, functools.partial(allocated, 3 * 2**29))
    assert str(caught.value).startswith(f"cannot read {__file__!r}: reading it needed more than 1.0 GiB of memory")


def test_a_child_that_does_not_start_is_killed(monkeypatch) -> None:
    monkeypatch.setattr(_child, "START_SECONDS", 0.01)
    with pytest.raises(FileReadError, match="the process reading it did not start in 0 s"):
        _child.run_isolated(__file__, functools.partial(sorted, []))
