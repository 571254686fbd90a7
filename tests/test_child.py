"""libhdf5's child process (cudnn_rnn.convert.readers._child): what comes back of each outcome, and
that reading never forks, so that it is safe in a process with threads (a training process).

The reader's own refusals through the child (a file that crashes libhdf5, one it loops on) are in
tests/test_read_keras.py.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterator

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
    (functools.partial(len, 5), TypeError, "object of type 'int' has no len()"),  # type: ignore[arg-type]
    (functools.partial(importlib.import_module, "no_module_of_this_name"), ValueError,
     "No module named 'no_module_of_this_name'"),
    (functools.partial(operator.truediv, 1, 0), FileReadError,
     "not a readable Keras file (ZeroDivisionError: division by zero)"),
    (functools.partial(threading.Lock), FileReadError,
     "its contents could not be passed on (TypeError: cannot pickle '_thread.lock' object)"),
])
def test_what_the_child_raises_comes_back(work: functools.partial[Any], error: type[Exception], message: str) -> None:
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


def test_a_child_that_does_not_start_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_child, "START_SECONDS", 0.01)
    with pytest.raises(FileReadError, match="the process reading it did not start in 0 s"):
        _child.run_isolated(__file__, functools.partial(sorted, []))


# ---- a warm child: kept between reads --------------------------------------------------------------------
#: a Reader that keeps its child between reads (as TensorFlow's does), without TensorFlow's import
WARM = _child.Reader("libhdf5", "Keras file", warm=True)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The interpreters started while the test runs, no warm child left from before it nor after it."""
    children: list[subprocess.Popen[bytes]] = []

    class RecordedPopen(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, args: Any, **kwargs: Any) -> None:
            super().__init__(args, **kwargs)
            if args[0] == sys.executable:
                children.append(self)

    _child._end_warm()
    monkeypatch.setattr(subprocess, "Popen", RecordedPopen)
    yield children
    _child._end_warm()


def pid_of_child(reader: _child.Reader = WARM) -> int:
    return _child.run_isolated(__file__, os.getpid, reader=reader)


def test_reads_through_a_warm_reader_share_one_child(started: list[subprocess.Popen[bytes]]) -> None:
    assert pid_of_child() == pid_of_child() == started[0].pid != os.getpid()
    assert len(started) == 1 and started[0].poll() is None  # alive, waiting for the next read
    assert pid_of_child(_child.HDF5) != started[0].pid  # a reader that is not warm: a child of its own


def test_a_warm_child_reads_in_the_callers_working_directory(started: list[subprocess.Popen[bytes]], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path names what it names for the caller, wherever the caller was when the child started."""
    for folder in (tmp_path / "a", tmp_path / "b"):
        folder.mkdir()
        (folder / "model.h5").write_text(folder.name)
        monkeypatch.chdir(folder)
        assert _child.run_isolated("model.h5", functools.partial(Path.read_text, Path("model.h5")), reader=WARM) \
            == folder.name
    assert len(started) == 1


def test_a_warm_child_survives_refusals_from_its_work(started: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    (tmp_path / "noise.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    first = pid_of_child()
    with pytest.raises(ValueError, match="invalid literal for int"):
        _child.run_isolated(__file__, functools.partial(int, "x"), reader=WARM)
    with pytest.raises(FileReadError, match="not a readable HDF5 file"):
        _child.run_isolated(str(tmp_path / "noise.h5"), functools.partial(_keras_file._read_hdf5,
                                                                          str(tmp_path / "noise.h5")), reader=WARM)
    assert pid_of_child() == first and len(started) == 1


def test_a_work_the_new_child_cannot_import_is_a_value_error_and_the_child_serves_on(
        started: list[subprocess.Popen[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "vanishing_module.py").write_text("import os\n\ndef pid() -> int:\n    return os.getpid()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    work = importlib.import_module("vanishing_module").pid
    (tmp_path / "vanishing_module.py").unlink()  # gone before the child unpickles the work
    with pytest.raises(ValueError, match="No module named 'vanishing_module'"):
        _child.run_isolated(__file__, work, reader=WARM)
    assert pid_of_child() == started[0].pid and len(started) == 1


def test_a_warm_child_that_crashes_is_a_refusal_and_the_next_read_starts_another(
        started: list[subprocess.Popen[bytes]]) -> None:
    first = pid_of_child()
    with pytest.raises(FileReadError, match=r"libhdf5 crashed reading it \(exit code -9\): the file is corrupt"):
        _child.run_isolated(__file__, functools.partial(signal.raise_signal, signal.SIGKILL), reader=WARM)
    assert started[0].returncode == -signal.SIGKILL
    assert pid_of_child() == started[1].pid != first and len(started) == 2


def test_a_warm_child_that_does_not_finish_is_killed_and_the_next_read_starts_another(
        started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    first = pid_of_child()
    monkeypatch.setattr(_child, "READ_SECONDS", 1.0)  # this read's bound, from when it starts
    with pytest.raises(FileReadError, match="reading it did not finish in 1 s: libhdf5 loops on this file"):
        _child.run_isolated(__file__, functools.partial(time.sleep, 60), reader=WARM)
    assert started[0].returncode == -signal.SIGKILL
    assert pid_of_child() == started[1].pid != first and len(started) == 2


def test_a_warm_child_bounds_the_memory_of_each_read(started: list[subprocess.Popen[bytes]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read sets its own bound, lowered or raised again, on what the read itself allocates; a read past it
    ends the child (a library that ran out of memory may be left inconsistent) and the next read starts another."""
    def read(size: int) -> int:
        return _child.run_isolated(__file__, functools.partial(allocated, size), reader=WARM)

    assert read(3 * 2**29) == 3 * 2**29  # 1.5 GiB under 4 GiB
    monkeypatch.setattr(_child, "MEMORY_BYTES", 2**30)
    assert read(2**29) == 2**29  # 0.5 GiB under 1 GiB, after the 1.5 GiB read
    monkeypatch.setattr(_child, "MEMORY_BYTES", 4 * 2**30)
    assert read(3 * 2**29) == 3 * 2**29  # the bound raised again
    assert len(started) == 1
    monkeypatch.setattr(_child, "MEMORY_BYTES", 2**30)
    with pytest.raises(FileReadError) as caught:
        read(3 * 2**29)
    assert str(caught.value).startswith(f"cannot read {__file__!r}: reading it needed more than 1.0 GiB of memory")
    assert read(2**29) == 2**29 and len(started) == 2 and started[0].returncode == -signal.SIGKILL


def test_threads_reading_through_one_warm_reader_each_get_a_child() -> None:
    _child._end_warm()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        pids = list(pool.map(lambda _: pid_of_child(), range(8)))
    assert len(pids) == 8 and os.getpid() not in pids and len(_child._warm) == 1
    assert pid_of_child() in pids  # the one kept is one of theirs
    _child._end_warm()


#: a process that reads through a warm Reader, prints its child's pid and exits the way its argument says
WARM_CHILD_AT_EXIT = textwrap.dedent('''
    import os, sys
    from cudnn_rnn.convert.readers import _child

    pid = _child.run_isolated(sys.argv[0], os.getpid, reader=_child.Reader("libhdf5", "Keras file", warm=True))
    print(pid, flush=True)
    if sys.argv[1] == "os._exit":
        os._exit(3)  # no atexit: the child sees its request pipe close
    sys.exit(3)
''')


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("exit", ["sys.exit", "os._exit"])
def test_a_process_with_a_warm_child_exits_and_its_child_ends(exit: str) -> None:
    result = subprocess.run([sys.executable, "-c", WARM_CHILD_AT_EXIT, exit], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 3, result.stderr
    pid = int(result.stdout)
    for _ in range(600):  # the orphan of os._exit ends on its own: at most a minute, checked every 0.1 s
        if not running(pid):
            break
        time.sleep(0.1)
    assert not running(pid), f"the child {pid} outlived its parent"
