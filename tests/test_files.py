"""cudnn_rnn.files: atomic writes (whole or not at all, even under a kill) and whole reads that refuse non-files."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from rnn_testing import deadline
from slow_writes import command as slow_command, slow_writes

import cudnn_rnn
from cudnn_rnn import checkpoint
from cudnn_rnn.files import (PARTIAL_SUFFIX, UNCHECKED_AFTER, atomic_write, read_bytes, remove_leftovers, write_bytes,
                             write_through_path)

#: the folder that holds the cudnn_rnn package (a subprocess imports it from there)
REPO = Path(cudnn_rnn.__file__).resolve().parents[1]

OLD = b"the previous content\x00\xff" * 100
#: the most seconds to wait for a child's partial file to appear (its start included); the wait ends when it does
APPEARS_S = 120


def listing(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """An existing file holding OLD, alone in its folder."""
    path = tmp_path / "model.bin"
    path.write_bytes(OLD)
    return path


# ---- atomic_write / write_bytes ------------------------------------------------------------------------------
def test_atomic_write_replaces_the_content(target: Path) -> None:
    """The target holds the new bytes afterwards, and nothing else is left in the folder."""
    with atomic_write(target) as handle:
        handle.write(b"new ")
        handle.write(b"content")
    assert target.read_bytes() == b"new content"
    assert listing(target.parent) == ["model.bin"]


def test_atomic_write_creates_a_new_file_given_as_str(tmp_path: Path) -> None:
    """A str path to a file that does not exist yet works too."""
    path = tmp_path / "fresh.npz"
    with atomic_write(str(path)) as handle:
        np.savez(handle, a=np.arange(5))
    with np.load(path) as archive:
        assert archive["a"].tolist() == [0, 1, 2, 3, 4]
    assert listing(tmp_path) == ["fresh.npz"]


def test_the_target_keeps_the_old_content_while_the_write_is_under_way(target: Path) -> None:
    """Until the block ends the bytes go to a hidden partial file beside the target, never to the target."""
    with atomic_write(target) as handle:
        handle.write(b"half of the new")
        handle.flush()
        assert target.read_bytes() == OLD
        partials = [name for name in listing(target.parent) if name != "model.bin"]
        assert len(partials) == 1
        assert partials[0].startswith(".model.bin.") and partials[0].endswith(PARTIAL_SUFFIX)
        assert (target.parent / partials[0]).read_bytes() == b"half of the new"
    assert target.read_bytes() == b"half of the new"


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()], ids=["RuntimeError", "Interrupt"])
def test_an_error_in_the_block_leaves_the_target_untouched(target: Path, error: BaseException) -> None:
    """An exception (or Ctrl-C) inside the block: the old bytes stay, byte for byte, and no partial file remains."""
    with pytest.raises(type(error)):
        with atomic_write(target) as handle:
            handle.write(b"x" * 100_000)
            raise error
    assert target.read_bytes() == OLD
    assert listing(target.parent) == ["model.bin"]
    assert not any(name.endswith(PARTIAL_SUFFIX) for name in listing(target.parent))


def test_an_error_in_write_bytes_chunks_leaves_the_target_untouched(target: Path) -> None:
    """A chunk that cannot be written (not a buffer) fails the whole write; the old file stays."""
    with pytest.raises(TypeError):
        write_bytes(target, [b"first chunk", 12345])
    assert target.read_bytes() == OLD
    assert listing(target.parent) == ["model.bin"]


def test_a_new_file_gets_the_permissions_of_a_plain_open(tmp_path: Path) -> None:
    """0o666 less the umask, as open(path, "w") would give (mkstemp alone would give 0o600)."""
    previous = os.umask(0o027)
    try:
        write_bytes(tmp_path / "a.bin", b"a")
        with atomic_write(tmp_path / "b.bin") as handle:
            handle.write(b"b")
        write_through_path(tmp_path / "c.bin", lambda path: Path(path).write_bytes(b"c"))
        with open(tmp_path / "plain.bin", "wb") as handle:
            handle.write(b"p")
    finally:
        os.umask(previous)
    for name in ("a.bin", "b.bin", "c.bin", "plain.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640, name


def test_a_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    """As open(path, "w") would: a private file stays private when it is written again."""
    target = tmp_path / "private.bin"
    target.write_bytes(b"old")
    target.chmod(0o600)
    write_bytes(target, b"new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_bytes() == b"new"


def test_writing_to_a_folder_is_refused(tmp_path: Path) -> None:
    """A target that is a folder: IsADirectoryError naming it, and the folder and its parent are unchanged."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "inside.txt").write_bytes(b"keep")
    with pytest.raises(IsADirectoryError, match=re.escape(str(folder))):
        write_bytes(folder, b"data")
    with pytest.raises(IsADirectoryError):
        with atomic_write(folder) as handle:
            handle.write(b"data")
    with pytest.raises(IsADirectoryError):
        write_through_path(folder, lambda path: Path(path).write_bytes(b"data"))
    assert listing(tmp_path) == ["models"]
    assert listing(folder) == ["inside.txt"] and (folder / "inside.txt").read_bytes() == b"keep"


def test_write_bytes_concatenates_buffers(target: Path) -> None:
    """A list of bytes, bytearrays and memoryviews (of NumPy arrays too) is written back to back."""
    matrix = np.arange(6, dtype=np.uint8).reshape(2, 3)
    chunks = [b"ab", memoryview(b"cd"), bytearray(b"ef"), memoryview(matrix), memoryview(b""),
              memoryview(np.array([1.5], "<f8")).cast("B")]
    write_bytes(target, chunks)
    assert target.read_bytes() == b"abcdef" + bytes(range(6)) + np.array([1.5], "<f8").tobytes()
    write_bytes(target, memoryview(b"single view"))
    assert target.read_bytes() == b"single view"
    write_bytes(target, b"")
    assert target.read_bytes() == b""


def test_a_paused_write_still_writes_everything(target: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With writes paused (tests/support/slow_writes.py), they go out in chunks, and the file is still whole and
    exact."""
    monkeypatch.setattr(cudnn_rnn.files, "atomic_write", slow_writes(0.0001))
    data = np.random.default_rng(1).integers(0, 256, 200_000, dtype=np.uint8)
    write_bytes(target, [memoryview(data[:70_000]), data[70_000:].tobytes()])
    assert target.read_bytes() == data.tobytes()
    assert listing(target.parent) == ["model.bin"]


# ---- write_through_path --------------------------------------------------------------------------------------
def test_write_through_path_lends_a_temporary_path_beside_the_target(tmp_path: Path) -> None:
    """The writer gets a new path beside the target ending in the target's extension; its file becomes the target."""
    target = tmp_path / "weights.npy"
    target.write_bytes(OLD)
    seen: list[str] = []

    def writer(path: str) -> None:
        seen.append(path)
        assert Path(path).exists() and target.read_bytes() == OLD
        np.save(path, np.arange(4.0))  # np.save appends ".npy" to a path that does not end in it

    write_through_path(target, writer)
    assert len(seen) == 1
    lent = Path(seen[0])
    assert lent.parent == tmp_path and lent.name != target.name and lent.name.endswith(".npy")
    assert lent.name.startswith(".weights.npy.") and lent.name.endswith(PARTIAL_SUFFIX + ".npy")
    assert np.load(target).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert listing(tmp_path) == ["weights.npy"]


def test_write_through_path_without_an_extension(tmp_path: Path) -> None:
    """A target with no extension gets a temporary path that ends in the partial suffix."""
    seen: list[str] = []

    def writer(path: str) -> None:
        seen.append(path)
        Path(path).write_bytes(b"made by a path writer")

    write_through_path(tmp_path / "model", writer)
    assert seen[0].endswith(PARTIAL_SUFFIX)
    assert (tmp_path / "model").read_bytes() == b"made by a path writer"
    assert listing(tmp_path) == ["model"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()], ids=["OSError", "Interrupt"])
def test_a_failing_path_writer_leaves_the_target_untouched(target: Path, error: BaseException) -> None:
    """The writer wrote part of its file and raised: the old target stays and nothing is left behind."""
    def writer(path: str) -> None:
        Path(path).write_bytes(b"half written")
        raise error

    with pytest.raises(type(error)):
        write_through_path(target, writer)
    assert target.read_bytes() == OLD
    assert listing(target.parent) == ["model.bin"]


# ---- names as long as the file system takes ----------------------------------------------------------------
def longest_name(folder: Path, ending: str, char: str = "m") -> str:
    """A file name of ``char`` repeated and ``ending``, as many bytes long as ``folder``'s file system takes."""
    room = os.pathconf(folder, "PC_NAME_MAX") - len(ending.encode())
    return char * (room // len(char.encode())) + ending


@pytest.mark.parametrize("length", [218, 219, 250, 255])
def test_a_name_of_any_legal_length_is_written_atomically(tmp_path: Path, length: int) -> None:
    """OUT names of 219-255 bytes (longer than a partial name's extra 40 allow) write like short ones."""
    assert os.pathconf(tmp_path, "PC_NAME_MAX") == 255
    name = "m" * (length - len(".npz")) + ".npz"
    target = tmp_path / name
    with atomic_write(target) as handle:
        np.savez(handle, a=np.arange(3))
        partial, = [entry for entry in listing(tmp_path) if entry != name]
        assert len(partial.encode()) <= 255
    with np.load(target) as archive:
        assert archive["a"].tolist() == [0, 1, 2]
    write_bytes(target, b"again")
    assert target.read_bytes() == b"again" and listing(tmp_path) == [name]


@pytest.mark.parametrize("ending, char", [(".onnx", "m"), (".weights.h5", "é"), ("", "模")])
def test_write_through_path_lends_a_legal_path_for_the_longest_names(tmp_path: Path, ending: str, char: str) -> None:
    """The lent path of a 255-byte name (multibyte characters too) still ends in the target's extension."""
    name = longest_name(tmp_path, ending, char)
    seen: list[str] = []

    def writer(path: str) -> None:
        seen.append(path)
        Path(path).write_bytes(b"made by a path writer")

    write_through_path(tmp_path / name, writer)
    lent = Path(seen[0]).name
    assert lent.endswith(PARTIAL_SUFFIX + ending) and len(lent.encode()) <= 255
    assert (tmp_path / name).read_bytes() == b"made by a path writer" and listing(tmp_path) == [name]


def test_a_layer_saves_to_and_loads_from_a_250_byte_name(tmp_path: Path) -> None:
    """What a user writes goes through the same path: a layer saved under a 250-byte name loads back."""
    layer = cudnn_rnn.LSTM(3, 4, seed=5)
    target = tmp_path / ("m" * (250 - len(".npz")) + ".npz")
    layer.save(target)
    assert listing(tmp_path) == [target.name]
    np.testing.assert_array_equal(cudnn_rnn.LSTM.load(target).params, layer.params)


def test_two_long_names_with_one_start_get_their_own_partial_names(tmp_path: Path) -> None:
    """Shortened partial names keep a hash of the whole name: two targets differing only at their end
    never take each other's partial file for a leftover of theirs."""
    first, second = (longest_name(tmp_path, ending) for ending in (".a.npz", ".b.npz"))
    with atomic_write(tmp_path / first) as handle:
        handle.write(b"first")
        partial, = [entry for entry in listing(tmp_path)]
        assert remove_leftovers(tmp_path / second) == []
        write_bytes(tmp_path / second, b"second")
        assert partial in listing(tmp_path)
    assert (tmp_path / first).read_bytes() == b"first" and (tmp_path / second).read_bytes() == b"second"


def test_a_killed_write_of_a_long_name_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    """The shortened partial name still names its writer, so the next write of that target removes it."""
    target = tmp_path / longest_name(tmp_path, ".bin")
    target.write_bytes(OLD)
    code = "import sys\nfrom cudnn_rnn.files import write_bytes\nwrite_bytes(sys.argv[1], bytes(1 << 20))\n"
    before = set(listing(tmp_path))
    process = start_writer(code, str(target), pause="0.02")
    try:
        limit = time.monotonic() + APPEARS_S
        while set(listing(tmp_path)) == before and time.monotonic() < limit and process.poll() is None:
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
    finally:
        process.communicate(timeout=20)
    left, = set(listing(tmp_path)) - before
    assert WRITER.fullmatch(left) is not None and len(left.encode()) <= 255
    assert target.read_bytes() == OLD
    write_bytes(target, b"new")
    assert listing(tmp_path) == [target.name] and target.read_bytes() == b"new"


# ---- a real kill in the middle of a write --------------------------------------------------------------------
def test_a_process_killed_mid_write_leaves_the_old_file_whole(target: Path) -> None:
    """SIGKILL mid-write: the target has exactly the old bytes, and the partial file is the only leftover."""
    new = bytes(range(256)) * 4096  # 1 MiB: 16 chunks of 64 KiB, each followed by a pause
    code = ("import sys\nfrom cudnn_rnn.files import write_bytes\n"
            "write_bytes(sys.argv[1], bytes(range(256)) * 4096)\nprint('finished')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(slow_command("0.05", "-c", code, str(target)), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partials: list[str] = []
    try:
        limit = time.monotonic() + APPEARS_S
        while not partials and time.monotonic() < limit and process.poll() is None:
            partials = [name for name in listing(target.parent) if name.endswith(PARTIAL_SUFFIX)]
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
    finally:
        out, err = process.communicate(timeout=20)
    assert partials, f"no partial file appeared (exit {process.returncode}, stderr {err[-500:]!r})"
    assert process.returncode == -signal.SIGKILL and b"finished" not in out
    assert target.read_bytes() == OLD
    leftovers = sorted(set(listing(target.parent)) - {"model.bin"})
    assert leftovers == partials
    assert leftovers[0].startswith(".model.bin.")
    written = (target.parent / leftovers[0]).read_bytes()
    assert len(written) < len(new) and new.startswith(written)


# ---- leftovers of killed writes -----------------------------------------------------------------------------
#: code run in a subprocess: the save named by the key, of sys.argv[1], slow enough under the pause to be killed
SAVES = {
    "checkpoint.save": "from cudnn_rnn import checkpoint\ncheckpoint.save(path, layers={'lstm': layer})",
    "layer.save": "layer.save(path)",
}
#: a new partial file's name: .<name>.<machine>.<pid>.<random>.partial
WRITER = re.compile(r"\.(?P<name>.+)\.(?P<machine>[0-9a-f]{12})\.(?P<pid>[0-9]+)\.[a-z0-9_]+\.partial")


def start_writer(code: str, *args: str, pause: str) -> subprocess.Popen[bytes]:
    """A Python process running ``code`` (with ``sys.argv[1:] == args``), its writes paused after every 64 KiB."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(slow_command(pause, "-c", code, *args), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def wait_for_partial(process: subprocess.Popen[bytes], target: Path, there: set[str]) -> list[str]:
    """The partial files of ``target`` not in ``there`` once one appears (empty if none does in APPEARS_S seconds, or
    the process ends)."""
    limit = time.monotonic() + APPEARS_S
    while time.monotonic() < limit and process.poll() is None:
        partials = [name for name in listing(target.parent) if name not in there
                    and name.startswith(f".{target.name}.") and name.endswith(PARTIAL_SUFFIX)]
        if partials:
            return partials
        time.sleep(0.005)
    return []


def kill_mid_write(code: str, target: Path, pause: str = "0.02") -> str:
    """Run ``code`` writing ``target``, SIGKILL it while its partial file exists; the name of the file it left."""
    before = set(listing(target.parent))
    process = start_writer(code, str(target), pause=pause)
    try:
        partials = wait_for_partial(process, target, before)
        process.send_signal(signal.SIGKILL)
    finally:
        out, err = process.communicate(timeout=20)
    assert partials, f"no partial file appeared (exit {process.returncode}, stderr {err[-500:]!r})"
    assert process.returncode == -signal.SIGKILL and b"finished" not in out
    left = sorted(set(listing(target.parent)) - before)
    assert len(left) == 1 and left[0].endswith(PARTIAL_SUFFIX), left
    return left[0]


def layer_code(save: str) -> str:
    """A script that saves a 2 MB LSTM with ``save`` (a value of SAVES) to sys.argv[1]."""
    return f"import sys\nimport cudnn_rnn\nlayer = cudnn_rnn.LSTM(256, 256)\npath = sys.argv[1]\n{save}\n" \
           "print('finished')\n"


def aged(path: Path, seconds: float) -> Path:
    """``path``, last modified ``seconds`` ago."""
    when = time.time() - seconds
    os.utime(path, (when, when))
    return path


def test_the_partial_file_names_its_writer(target: Path) -> None:
    """While a write is under way its partial file is .<name>.<machine>.<pid>.<random>.partial, pid this process's."""
    with atomic_write(target) as handle:
        handle.write(b"new")
        partials = [name for name in listing(target.parent) if name != "model.bin"]
    assert len(partials) == 1
    found = WRITER.fullmatch(partials[0])
    assert found is not None, partials[0]
    assert found["name"] == "model.bin" and int(found["pid"]) == os.getpid()

    seen: list[str] = []

    def writer(path: str) -> None:
        seen.append(Path(path).name)
        Path(path).write_bytes(b"x")

    write_through_path(target, writer)
    assert seen[0].endswith(PARTIAL_SUFFIX + ".bin")
    found = WRITER.fullmatch(seen[0][:-len(".bin")])
    assert found is not None and found["name"] == "model.bin" and int(found["pid"]) == os.getpid()


@pytest.mark.parametrize("save", SAVES)
def test_the_next_save_removes_what_a_killed_save_left(tmp_path: Path, save: str) -> None:
    """checkpoint.save or layer.save SIGKILLed mid-write leaves its partial file; the next save removes it."""
    target = tmp_path / "model.safetensors"
    first = kill_mid_write(layer_code(SAVES[save]), target)
    assert not target.exists() and WRITER.fullmatch(first)
    second = kill_mid_write(layer_code(SAVES[save]), target)
    assert listing(tmp_path) == [second]  # the second save, before it was killed, removed the first's leftover

    layer = cudnn_rnn.LSTM(4, 3)
    if save == "layer.save":
        layer.save(target)
        assert cudnn_rnn.LSTM.load(target).params.tobytes() == layer.params.tobytes()
    else:
        checkpoint.save(target, layers={"lstm": layer}, step=7)
        assert checkpoint.load(target).step == 7
    assert listing(tmp_path) == ["model.safetensors"]


def test_a_live_writer_keeps_its_partial_file(target: Path) -> None:
    """Another process still writing the same target keeps its partial file (and finishes); a killed one's goes."""
    code = ("import sys\nfrom cudnn_rnn.files import write_bytes\n"
            "write_bytes(sys.argv[1], bytes(range(256)) * 4096)\nprint('finished')\n")
    dead = kill_mid_write(code, target)
    writer = start_writer(code, str(target), pause="0.1")  # 16 chunks of 64 KiB: 1.6 s
    try:
        live = wait_for_partial(writer, target, {dead})
        assert len(live) == 1 and writer.poll() is None
        cudnn_rnn.LSTM(4, 3).save(target)
        assert writer.poll() is None, "the writer finished before the save: the check proved nothing"
        assert listing(target.parent) == sorted(["model.bin", live[0]])
    finally:
        out, err = writer.communicate(timeout=30)
    assert writer.returncode == 0 and b"finished" in out, err[-500:]
    assert target.read_bytes() == bytes(range(256)) * 4096  # the live writer's rename came last
    assert listing(target.parent) == ["model.bin"]


def test_the_leftovers_of_other_targets_are_kept(target: Path) -> None:
    """Only the exact target's leftovers go: not those of model.bin.old, model, xmodel.bin or model.bin.partial."""
    code = "import sys\nfrom cudnn_rnn.files import write_bytes\nwrite_bytes(sys.argv[1], bytes(1 << 20))\n"
    own = kill_mid_write(code, target)
    writer = own[len(".model.bin"):]  # .<machine>.<pid>.<random>.partial, of a process that is gone
    others = [f".{name}{writer}" for name in ("model.bin.old", "model", "xmodel.bin", "model.bin.partial")]
    others += [".model.bin.partial", f".model.bin{writer}.tmp"]
    for name in others:
        (target.parent / name).write_bytes(b"someone else's")
    write_bytes(target, b"new")
    assert listing(target.parent) == sorted(["model.bin", *others])
    assert target.read_bytes() == b"new"


def test_leftovers_whose_writer_cannot_be_looked_up_are_removed_after_a_day(tmp_path: Path) -> None:
    """The earlier name form, and another machine's files: kept while fresh, removed once a day old.

    A file of this machine whose process lives is kept however old; a folder is never removed.
    """
    target = tmp_path / "w.onnx"
    with atomic_write(target) as handle:
        handle.write(b"x")
        found = WRITER.fullmatch(listing(tmp_path)[0])
    assert found is not None
    machine = found["machine"]
    other = "0123456789ab" if machine != "0123456789ab" else "ba9876543210"
    unchecked = [".w.onnx.k2j4x9_q.partial", ".w.onnx.k2j4x9_q.partial.onnx",
                 f".w.onnx.{other}.12345.abcdefgh.partial", f".w.onnx.{other}.1.abcdefgh.partial.onnx"]
    for name in unchecked:
        (tmp_path / name).write_bytes(b"left")
    live = tmp_path / f".w.onnx.{machine}.{os.getpid()}.abcdefgh.partial"
    live.write_bytes(b"mine")
    aged(live, 10 * UNCHECKED_AFTER)
    folder = tmp_path / ".w.onnx.abcdefgh.partial"
    folder.mkdir()
    aged(folder, 2 * UNCHECKED_AFTER)
    everything = sorted(["w.onnx", *unchecked, live.name, folder.name])

    write_bytes(target, b"fresh")
    assert listing(tmp_path) == everything
    for name in unchecked:
        aged(tmp_path / name, UNCHECKED_AFTER - 600)
    write_bytes(target, b"less than a day")
    assert listing(tmp_path) == everything
    for name in unchecked:
        aged(tmp_path / name, UNCHECKED_AFTER + 600)
    write_through_path(target, lambda path: Path(path).write_bytes(b"more than a day"))
    assert listing(tmp_path) == sorted(["w.onnx", live.name, folder.name])
    assert target.read_bytes() == b"more than a day"


def test_remove_leftovers_says_what_it_removed_and_never_raises(tmp_path: Path) -> None:
    """The removed files' absolute paths; a missing folder, a target without leftovers: an empty list."""
    assert remove_leftovers(tmp_path / "nowhere" / "model.bin") == []
    assert remove_leftovers(tmp_path / "model.bin") == []
    old = tmp_path / ".model.bin.abcdefgh.partial"
    old.write_bytes(b"left")
    aged(old, 2 * UNCHECKED_AFTER)
    assert remove_leftovers(tmp_path / "model.bin") == [str(old)]
    assert listing(tmp_path) == []


# ---- read_bytes ----------------------------------------------------------------------------------------------
def test_read_bytes_returns_the_whole_file(tmp_path: Path) -> None:
    """A regular file comes back whole (an empty one as b'')."""
    data = np.random.default_rng(2).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    (tmp_path / "data.bin").write_bytes(data)
    (tmp_path / "empty.bin").write_bytes(b"")
    assert read_bytes(tmp_path / "data.bin") == data
    assert read_bytes(str(tmp_path / "empty.bin")) == b""


def test_read_bytes_of_a_missing_file_names_it(tmp_path: Path) -> None:
    """FileNotFoundError whose message names the path and what was expected."""
    missing = tmp_path / "nowhere" / "model.safetensors"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))) as caught:
        read_bytes(missing, "checkpoint")
    assert "checkpoint" in str(caught.value)


def test_read_bytes_of_a_folder_is_refused(tmp_path: Path) -> None:
    """A folder: IsADirectoryError naming it."""
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path))):
        read_bytes(tmp_path, "params file")


def open_descriptors() -> list[str]:
    """What this process's open descriptors lead to (Linux's /proc/self/fd)."""
    folder = Path("/proc/self/fd")
    return sorted(os.readlink(entry) for entry in folder.iterdir() if entry.exists())


def test_read_bytes_of_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A named pipe with no writer: ValueError, and its descriptor closed. A blocking open or read never returns on
    it, so the deadline (a hang guard, however long) fails that."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    before = open_descriptors()
    with deadline(60):
        with pytest.raises(ValueError, match=re.escape(str(fifo))) as caught:
            read_bytes(fifo, "checkpoint")
    assert "not a regular file" in str(caught.value)
    assert open_descriptors() == before, "the FIFO's descriptor must be closed"


def test_read_bytes_of_a_device_is_refused() -> None:
    """/dev/zero would never end: ValueError, not an endless read."""
    with deadline(5):
        with pytest.raises(ValueError, match="/dev/zero"):
            read_bytes("/dev/zero")
