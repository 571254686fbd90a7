"""safetensors files through the ``safetensors`` package: hostile headers cost little, and what is written reads back.

The hostile files, made once for the module:

====================  ==================================================================================
file                  its header
====================  ==================================================================================
``list``              just under 64 MiB: ``{"a":["","",...]}``, one value that is a list of 22 million
                      empty strings (legal JSON)
``entries``           1.16 million empty arrays, ``{"0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},
                      "1":...}`` (names in hex: just under 64 MiB)
``bound``             just under MAX_HEADER_BYTES: as many empty arrays as fit (70,000)
``forged``            the same after a checkpoint's metadata with a valid checksum, so only the layout's
                      own checks stand in the way
====================  ==================================================================================

Each reader (``checkpoint.load``, ``convert.read_file``, ``write_into``: the ``--into`` path, and
``CheckpointManager.latest`` with such a file as its newest checkpoint) runs in a child process under
an address-space limit (RLIMIT_AS: a runaway allocation is a MemoryError there, not a swapping
machine) and reports what the reading cost: the bytes it read (Linux's ``rchar``), the peak of what
Python allocated for it (tracemalloc), the calls it made (of Python functions, and of C functions from
Python; cut past a bound) and the child's peak resident memory (``VmHWM``, or ``ru_maxrss`` where there
is no /proc).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cudnn_rnn import checkpoint
from cudnn_rnn.files import _safetensors
from cudnn_rnn.checkpoint import CheckpointManager
from cudnn_rnn.convert import read_file
from cudnn_rnn.layers import LSTM

safetensors_numpy = pytest.importorskip("safetensors.numpy")

#: the bytes of resident memory a reader may spend on a hostile file (the child's whole peak)
MEMORY = 2**30
#: what a reader refusing a 64 MiB header from its first 8 bytes may read and allocate besides the file's bytes
#: (checkpoint.load reads a file whole, then looks at its first 8 bytes; the others read those 8 bytes alone; the
#: modules imported on the way are read too: about 150 KB), and the calls it may make (about 1,400 the most)
FEW_BYTES, FEW_CALLS = 2**20, 20_000
#: the calls a reader may make per entry of a header just under the bound (about 13: the entry checks are linear)
CALLS_PER_ENTRY = 40
#: the child's address-space limit
ADDRESS_SPACE = 3 * 2**30

#: the reader calls the child makes on ``path`` (``work``: a folder of its own; ``rnn``: a small LSTM)
CHILD = """
import json, resource, sys, tracemalloc, warnings
from pathlib import Path
caller, path, work, address_space, most, trace = sys.argv[1:7]
# the limit before anything else: the imports and the reader run under it (set here, not between fork and exec
# in the parent, a process with threads: JAX's, among others)
resource.setrlimit(resource.RLIMIT_AS, (int(address_space), int(address_space)))
import cudnn_rnn
from cudnn_rnn import checkpoint
from cudnn_rnn.convert import read_file
from cudnn_rnn.convert.into import write_into

class TooMuchWork(BaseException):
    pass

calls = [0]

def profile(frame, event, arg):
    if event == "call" or event == "c_call":
        calls[0] += 1
        if calls[0] > int(most):
            sys.setprofile(None)
            raise TooMuchWork("more than %s calls" % most)

def read_so_far():  # the bytes this process has read (every read(2) of it), or -1 without /proc
    try:
        return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines()
                        if line.startswith("rchar:")))
    except OSError:
        return -1

rnn = cudnn_rnn.LSTM(2, 3)
readers = {"checkpoint.load": lambda: checkpoint.load(path), "read_file": lambda: read_file(path),
           "write_into": lambda: write_into(path, work + "/out.safetensors", rnn),
           "CheckpointManager.latest": lambda: checkpoint.CheckpointManager(path).latest()}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    read = read_so_far()
    if trace == "trace":
        tracemalloc.start()
    sys.setprofile(profile)
    try:
        found = readers[caller]()
        outcome = "step %s" % getattr(found, "step", None) if caller == "CheckpointManager.latest" else "read"
    except Exception as error:
        outcome = "%s: %s" % (type(error).__name__, error)
    finally:
        sys.setprofile(None)
    traced = tracemalloc.get_traced_memory()[1] if trace == "trace" else -1
    tracemalloc.stop()
    read = read_so_far() - read if read >= 0 else -1
try:  # (this process's own high-water mark: ru_maxrss keeps the parent's from before the exec)
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
print(json.dumps({"read": read, "traced": traced, "calls": calls[0], "peak": peak, "outcome": outcome,
                  "warnings": [str(warning.message) for warning in caught]}))
"""

READERS = ["checkpoint.load", "read_file", "write_into"]


def in_child(caller: str, path: Path, work: Path, most: int = FEW_CALLS, trace: bool = True) -> dict[str, Any]:
    """What ``caller`` did with ``path`` in a child process, cut past ``most`` calls: the bytes it read and, with
    ``trace``, the peak of what Python allocated for it (else -1), its calls, the child's peak resident memory
    (bytes), outcome, warnings."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, caller, str(path), str(work), str(ADDRESS_SPACE), str(most),
                           "trace" if trace else "-"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def read_once_at_most(report: dict[str, Any], size: int) -> None:
    """The reader read ``size`` bytes once at most, besides what the imports on its way read."""
    assert 0 < report["read"] <= size + FEW_BYTES, report


def read_and_held_at_most(report: dict[str, Any], size: int) -> None:
    """The reader read ``size`` bytes once at most, and Python allocated no more than that for it (the header,
    parsed, would take hundreds of MB), besides what the imports on its way took."""
    read_once_at_most(report, size)
    assert report["traced"] <= size + FEW_BYTES, report


# ---- the hostile files -----------------------------------------------------------------------------------------
def with_length(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


def list_header(size: int) -> bytes:
    """``{"a":["","",...]}`` padded with spaces to exactly ``size`` bytes."""
    count = (size - len(b'{"a":[]}') + 1) // 3
    text = b'{"a":[' + b'"",' * (count - 1) + b'""]}'
    return text + b" " * (size - len(text))


def entries_header(count: int, first: bytes = b"{") -> bytes:
    """``count`` empty float32 arrays (named by their index in hex) after ``first``, padded so that the data starts
    at a multiple of 8."""
    entries = b",".join(b'"%x":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}' % index for index in range(count))
    text = first + entries + b"}"
    return text + b" " * (-(len(text) + 8) % 8)


def at_the_bound(first: bytes = b"{") -> bytes:
    """A file of as many empty arrays as fit after ``first`` in a header of MAX_HEADER_BYTES (spaces pad the rest)."""
    room = _safetensors.MAX_HEADER_BYTES - len(first) - 1
    entries = [b'"%x":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}' % index for index in range(room // 50)]
    sizes = np.cumsum([len(entry) + 1 for entry in entries])
    text = first + b",".join(entries[:int(np.searchsorted(sizes, room, side="right"))]) + b"}"
    return with_length(text + b" " * (_safetensors.MAX_HEADER_BYTES - len(text)))


def forged_checkpoint() -> bytes:
    """A checkpoint of as many empty arrays as fit in a header of at most MAX_HEADER_BYTES, its checksum valid."""
    metadata = {"format": "cudnn_rnn.checkpoint", "version": "1", "checksum": "sha256:" + "0" * 64, "contents": "{}"}
    blob = at_the_bound(json.dumps({"__metadata__": metadata}, separators=(",", ":")).encode()[:-1] + b",")
    return blob.replace(b"0" * 64, hashlib.sha256(blob).hexdigest().encode(), 1)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> a hostile file (see the module docstring), each written once."""
    folder = tmp_path_factory.mktemp("hostile")
    blobs = {"list": with_length(list_header(64 * 2**20 - 16)), "entries": with_length(entries_header(1_160_000)),
             "bound": at_the_bound(), "forged": forged_checkpoint()}
    assert 63 * 2**20 < len(blobs["entries"]) < 64 * 2**20
    assert all(len(blobs[name]) == _safetensors.MAX_HEADER_BYTES + 8 for name in ("bound", "forged"))
    paths = {}
    for name, blob in blobs.items():
        paths[name] = folder / f"{name}.safetensors"
        paths[name].write_bytes(blob)
    return paths


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", ["list", "entries"])
def test_a_64_mib_header_is_refused_from_its_first_8_bytes(hostile: dict[str, Path], tmp_path: Path, name: str,
                                                           reader: str) -> None:
    """Each reader refuses the file in one line naming the bound, in few calls and little memory, and without reading
    the header: checkpoint.load reads a file whole (a refusal costs those bytes once), the others its first 8 bytes."""
    report = in_child(reader, hostile[name], tmp_path)
    error = "CheckpointError" if reader == "checkpoint.load" else "FileReadError"
    assert report["outcome"].startswith(f"{error}: ") and "\n" not in report["outcome"], report
    assert f"more than the {_safetensors.MAX_HEADER_BYTES} a safetensors header may have" in report["outcome"], report
    read_and_held_at_most(report, hostile[name].stat().st_size if reader == "checkpoint.load" else 0)
    assert 0 < report["calls"] <= FEW_CALLS and report["peak"] < MEMORY, report


def test_the_manager_falls_back_from_such_a_newest_checkpoint(hostile: dict[str, Path], tmp_path: Path) -> None:
    """The newest checkpoint is the 64 MiB list header: latest() warns naming it, and returns the one before."""
    manager = CheckpointManager(tmp_path / "checkpoints")
    for step in (1, 2):
        manager.save(step, layers={"lstm": LSTM(2, 3, seed=step)}, state={"step": step})
    shutil.copyfile(hostile["list"], manager.path_for(3))
    report = in_child("CheckpointManager.latest", manager.directory, tmp_path)
    assert report["outcome"] == "step 2", report
    (warning,) = report["warnings"]
    assert str(manager.path_for(3)) in warning and "skipping a damaged checkpoint" in warning, warning
    assert str(_safetensors.MAX_HEADER_BYTES) in warning, warning
    read_and_held_at_most(report, sum(path.stat().st_size for path in manager.directory.iterdir()))
    assert 0 < report["calls"] <= FEW_CALLS and report["peak"] < MEMORY, report


@pytest.mark.parametrize("reader, name, words", [
    ("checkpoint.load", "forged", "its contents are inconsistent"),
    ("read_file", "bound", "with no LSTM, GRU or RNN weights"),
    ("write_into", "bound", "with no LSTM, GRU or RNN weights"),
])
def test_a_header_at_the_bound_is_read_in_bounded_work_and_memory(hostile: dict[str, Path], tmp_path: Path,
                                                                  reader: str, name: str, words: str) -> None:
    """Headers just under the bound: the package and the entry checks take them (74,810 empty arrays), each read
    once and checked in calls linear in its entries, and each is refused for what it holds."""
    entries = len(json.loads(hostile[name].read_bytes()[8:])) - (name == "forged")  # (less the metadata)
    assert entries > 70_000
    report = in_child(reader, hostile[name], tmp_path, most=CALLS_PER_ENTRY * entries, trace=False)
    assert words in report["outcome"], report
    read_once_at_most(report, hostile[name].stat().st_size)
    assert 0 < report["calls"] <= CALLS_PER_ENTRY * entries and report["peak"] < MEMORY, report


# ---- writing: through the package, refused over the bound ---------------------------------------------------------
def every_dtype() -> dict[str, np.ndarray]:
    """An array of each built-in dtype a safetensors file holds, in any byte and memory order."""
    rng = np.random.default_rng(0)
    arrays = {code: np.asarray(np.abs(rng.standard_normal((3, 2))) * 50, dtype.newbyteorder(">"))
              for code, dtype in _safetensors.DTYPES.items()}
    arrays["fortran"] = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    arrays["scalar"], arrays["empty"] = np.array(2.5, np.float64), np.zeros((0, 4), np.float32)
    return arrays


def test_the_safetensors_package_reads_what_encode_writes(tmp_path: Path) -> None:
    arrays = every_dtype()
    path = tmp_path / "every.safetensors"
    path.write_bytes(b"".join(bytes(chunk) for chunk in _safetensors.encode(arrays, {"format": "pt"})))
    loaded = safetensors_numpy.load_file(str(path))
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype.newbyteorder("=") and loaded[name].shape == array.shape, name
        assert np.array_equal(loaded[name], array), name
    with open(path, "rb") as handle:  # and this module's own reader, the same
        for name, entry in _safetensors.read_layout(path).entries.items():
            assert np.array_equal(_safetensors.read_array(handle, entry), arrays[name]), name


def test_bfloat16_round_trips_through_files_and_checkpoints(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([[1.0, -2.5, 3.140625], [0.0, -0.0, 65280.0]], ml_dtypes.bfloat16)
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(b"".join(bytes(chunk) for chunk in _safetensors.encode({"w": values})))
    (length,) = struct.unpack_from("<Q", path.read_bytes())
    assert json.loads(path.read_bytes()[8:8 + length])["w"]["dtype"] == "BF16"
    assert path.read_bytes()[8 + length:] == values.tobytes()  # the bits, little-endian
    assert safetensors_numpy.load_file(str(path))["w"].tobytes() == values.tobytes()
    layout, arrays = _safetensors.decode(path.read_bytes())
    assert arrays["w"].dtype == values.dtype and arrays["w"].tobytes() == values.tobytes()
    checkpoint.save(tmp_path / "c.safetensors", arrays={"w": values})
    back = checkpoint.load(tmp_path / "c.safetensors").arrays["w"]
    assert back.dtype == values.dtype and back.tobytes() == values.tobytes() and back.flags.writeable


def test_a_checkpoint_whose_contents_would_overflow_the_header_is_not_written(tmp_path: Path) -> None:
    """A state= of 5 MB of text: save refuses, naming the bound and the contents text, and writes nothing."""
    path = tmp_path / "big.safetensors"
    with pytest.raises(ValueError, match=rf"the checkpoint's contents text .* takes \d+ bytes of the header, more than "
                                         rf"the {_safetensors.MAX_HEADER_BYTES} \(4 MiB\)") as caught:
        checkpoint.save(path, state={"log": "x" * 5_000_000})
    assert "store large values as NumPy arrays" in str(caught.value) and "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []
    checkpoint.save(path, state={"log": np.frombuffer(b"x" * 5_000_000, np.uint8)})  # as an array it is stored
    assert checkpoint.load(path).state["log"].nbytes == 5_000_000


def test_a_header_of_too_many_arrays_is_not_written() -> None:
    """Many arrays with long names fill the header: encode refuses, saying what fills it, before the package runs."""
    arrays = {f"{'n' * 200}{index}": np.zeros(0, np.float32) for index in range(20_000)}
    with pytest.raises(ValueError, match=rf"more than the {_safetensors.MAX_HEADER_BYTES} \(4 MiB\) a header may have "
                                         r"to be read back .* it holds 20000 array entries"):
        _safetensors.encode(arrays)


def test_a_header_just_under_the_bound_is_written_and_read(tmp_path: Path) -> None:
    """The bound is one: a file whose header is just under it is written and read back (read_file refuses it only
    because it holds no RNN)."""
    size = _safetensors.MAX_HEADER_BYTES - 2**16
    text = "x" * size
    blob = _safetensors.serialize({"w": np.ones(3, np.float32)}, {"note": text})
    assert size < struct.unpack_from("<Q", blob)[0] <= _safetensors.MAX_HEADER_BYTES
    path = tmp_path / "near.safetensors"
    path.write_bytes(blob)
    layout = _safetensors.read_layout(path)
    assert layout.metadata == {"note": text} and list(layout.entries) == ["w"]
    with pytest.raises(ValueError, match="no LSTM, GRU or RNN weights"):
        read_file(path)
