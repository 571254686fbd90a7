"""Damaged, wrong-kind and hostile checkpoint files are refused with a CheckpointError naming the file.

Never another exception, a crash, a hang, a large allocation, work in proportion to what a file claims
(its calls are counted: at most MOST_CALLS for a refusal) or code being run. The hostile files are
built here in the container layout with a correct SHA-256 checksum, so only the structural checks can
refuse them; CheckpointManager.latest() skips what is refused and falls back to an older checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import pickle
import re
import struct
import subprocess
import sys
import tracemalloc
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from rnn_testing import deadline

from cudnn_rnn import checkpoint, files
from cudnn_rnn.checkpoint import CheckpointError, CheckpointManager, CheckpointWarning
from cudnn_rnn.errors import CheckpointError as ErrorsCheckpointError
from cudnn_rnn.layers import LSTM
from cudnn_rnn.optim import Adam

#: safetensors dtype codes by NumPy dtype name, as the container writes them
CODES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16", "uint32": "U32",
         "int32": "I32", "uint64": "U64", "int64": "I64", "float16": "F16", "float32": "F32", "float64": "F64"}
ZERO_CHECKSUM = "sha256:" + "0" * 64
#: every refusal allocates at most this many bytes, and makes at most this many calls (of Python functions, and of C
#: functions from Python): about 600 for a checkpoint, 17,000 for LSTM.load's of a params file (NumPy reading the
#: .npz); a file's claim of 10**9 layers, walked, would call for 10**9
MEMORY_LIMIT = 32 * 2**20
MOST_CALLS = 50_000
#: seconds after which a refusal counts as hung (a blocking open of a FIFO never returns): a hang guard
HANG_S = 60.0


# ---- helpers -------------------------------------------------------------------------------------------------
class TooMuchWork(BaseException):
    """Raised inside the work :func:`counted_calls` counts once it has made more calls than it may (not an Exception,
    so that no handler of the code under test takes it for a refusal)."""


@contextlib.contextmanager
def counted_calls(most: int = MOST_CALLS) -> Iterator[list[int]]:
    """Count the calls the block makes (of Python functions, and of C functions from Python) in the list it yields;
    past ``most`` the block is cut with :class:`TooMuchWork`."""
    calls = [0]

    def profile(frame: object, event: str, arg: object) -> None:
        if event == "call" or event == "c_call":
            calls[0] += 1
            if calls[0] > most:
                sys.setprofile(None)
                raise TooMuchWork(f"more than {most} calls: work in proportion to what the file claims?")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)


def refusal(path: Path) -> CheckpointError:
    """The CheckpointError that loading ``path`` raises (any other exception propagates and fails the test)."""
    try:
        checkpoint.load(path)
    except CheckpointError as error:
        assert error.path == str(path) and repr(str(path)) in str(error), str(error)
        return error
    raise AssertionError(f"{path} was loaded; it should have been refused")


def refused(path: Path, blob: bytes | None = None, match: str | None = None) -> CheckpointError:
    """Write ``blob`` to ``path`` (if given) and check that loading it is refused with little memory and few calls."""
    if blob is not None:
        path.write_bytes(blob)
    tracemalloc.start()
    try:
        with deadline(HANG_S), counted_calls() as calls:
            error = refusal(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_LIMIT + (len(blob) if blob is not None else 0), f"{peak} bytes allocated"
    assert 0 < calls[0] <= MOST_CALLS, f"{calls[0]} calls"
    if match is not None:
        assert re.search(match, str(error)), f"{match!r} not in {str(error)!r}"
    return error


def build(header: dict[str, Any] | bytes, data: bytes = b"", *, length: int | None = None) -> bytes:
    """A file in the container layout with the checksum computed exactly as the container does.

    ``header`` is a dict (serialised as the container does, padded with spaces so the data starts at a
    multiple of 8) or raw header bytes; ``length`` overrides the 8-byte length prefix. If the header holds
    the placeholder checksum (64 zeros), it is replaced by the SHA-256 of the whole file as written with
    the placeholder.
    """
    if isinstance(header, dict):
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        text += b" " * (-(len(text) + 8) % 8)
    else:
        text = header
    blob = struct.pack("<Q", len(text) if length is None else length) + text + data
    placeholder = f'"{ZERO_CHECKSUM}"'.encode()
    digest = hashlib.sha256(blob).hexdigest()
    return blob.replace(placeholder, f'"sha256:{digest}"'.encode(), 1)


def metadata(text: str, /, order: list[str] | None = None, **changes: Any) -> dict[str, Any]:
    """A checkpoint's __metadata__ (with the placeholder checksum) holding ``contents``; ``changes`` override keys,
    ``order`` lists the keys in the order to write them (the safetensors package writes them in an order of its
    own, which differs from file to file)."""
    fields: dict[str, Any] = {"format": "cudnn_rnn.checkpoint", "version": "1", "checksum": ZERO_CHECKSUM,
                              "contents": text}
    fields.update(changes)
    fields = {key: fields[key] for key in order or fields}
    return {key: value for key, value in fields.items() if value is not ...}


def metadata_order(blob: bytes) -> list[str]:
    """The keys of a checkpoint file's __metadata__, in the order the file has them."""
    return list(json.loads(blob[8:8 + header_length(blob)])["__metadata__"])


def encode(contents: Any, arrays: dict[str, np.ndarray], order: list[str] | None = None) -> bytes:
    """A checksummed checkpoint file holding ``contents`` (a tree, or a JSON text) and ``arrays``, in order; the
    metadata's keys in ``order`` (see :func:`metadata`)."""
    entries: dict[str, Any] = {}
    data = bytearray()
    for name, array in arrays.items():
        array = np.ascontiguousarray(array, array.dtype.newbyteorder("<"))
        entries[name] = {"dtype": CODES[array.dtype.name], "shape": list(array.shape),
                         "data_offsets": [len(data), len(data) + array.nbytes]}
        data += array.tobytes()
    text = contents if isinstance(contents, str) else json.dumps(contents, separators=(",", ":"))
    return build({"__metadata__": metadata(text, order), **entries}, bytes(data))


def decode(blob: bytes) -> tuple[Any, dict[str, np.ndarray]]:
    """(contents tree, arrays by name) of a checkpoint file, parsed here without the library."""
    (length,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8:8 + length])
    contents = json.loads(header.pop("__metadata__")["contents"])
    arrays = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = {code: name for name, code in CODES.items()}[entry["dtype"]]
        arrays[name] = np.frombuffer(blob[8 + length + begin:8 + length + end], np.dtype(dtype).newbyteorder("<"))
        arrays[name] = arrays[name].reshape(entry["shape"])
    return contents, arrays


def header_length(blob: bytes) -> int:
    return struct.unpack_from("<Q", blob)[0]


# ---- a real checkpoint ---------------------------------------------------------------------------------------
STATE = {"step": 1, "epoch": 0, "cursor": [3, 7], "rng": np.random.default_rng(0).bit_generator.state}


def trained() -> tuple[LSTM, Adam, np.ndarray]:
    """A two-layer LSTM with dropout after one real training step with Adam, and an extra array."""
    lstm = LSTM(3, 4, 2, dropout=0.1)
    readout = np.linspace(-1.0, 1.0, 8).reshape(4, 2)
    adam = Adam([lstm.params, readout], lr=0.01)
    x = np.random.default_rng(1).standard_normal((2, 5, 3)).astype(np.float32)
    y, _, _ = lstm.forward(x)
    lstm.backward(np.ones_like(y), None, None)
    adam.step([lstm.grad, np.full_like(readout, 0.5)])
    return lstm, adam, readout


def save_real(path: Path, step: int | None = 1) -> None:
    lstm, adam, readout = trained()
    checkpoint.save(path, layers={"lstm": lstm}, optimizers={"adam": adam}, arrays={"readout": readout},
                    state=STATE, step=step)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a real checkpoint (layer, optimiser after one step, an extra array, RNG state)."""
    path = tmp_path_factory.mktemp("real") / "real.safetensors"
    save_real(path)
    return path.read_bytes()


def test_the_real_checkpoint_loads_and_the_builder_reproduces_it(real: bytes, tmp_path: Path) -> None:
    """Controls: the real file loads, and this file's encoder rebuilds it byte for byte (same checksum)."""
    path = tmp_path / "real.safetensors"
    path.write_bytes(real)
    found = checkpoint.load(path)
    lstm, adam, readout = trained()
    assert found.step == 1 and found.state == STATE
    assert found.layers["lstm"]["params"].tobytes() == lstm.params.tobytes() and found.layers["lstm"]["step"] == 1
    assert found.optimizers["adam"]["steps"] == 1 and found.arrays["readout"].tolist() == readout.tolist()
    contents, arrays = decode(real)
    assert encode(contents, arrays, metadata_order(real)) == real
    assert issubclass(CheckpointError, ValueError) and CheckpointError is ErrorsCheckpointError


# ---- truncation and bit flips --------------------------------------------------------------------------------
def test_every_truncation_is_refused(real: bytes, tmp_path: Path) -> None:
    """Cut at every length from len-1 down to 0 (the header boundary and the 8-byte prefix included): each refused
    in at most MOST_CALLS calls."""
    path = tmp_path / "cut.safetensors"
    path.write_bytes(real)
    data_start = 8 + header_length(real)
    most = 0
    for length in range(len(real) - 1, -1, -1):
        os.truncate(path, length)
        with counted_calls() as calls:
            error = refusal(path)
        most = max(most, calls[0])
        if length > data_start:
            assert "truncated" in str(error) or "checksum" in str(error), str(error)
    assert 0 < most <= MOST_CALLS


def test_every_bit_flip_is_refused(real: bytes, tmp_path: Path) -> None:
    """All 8 flips of each sampled byte: the length prefix, header, checksum digits, padding and data."""
    path = tmp_path / "flipped.safetensors"
    path.write_bytes(real)
    data_start = 8 + header_length(real)
    checksum_at = real.index(b'"sha256:') + 8
    positions = sorted({*range(8), *range(8, 40), *range(checksum_at - 8, checksum_at + 66), *range(8, data_start, 3),
                        *range(data_start - 8, data_start + 8), *range(data_start, len(real), 7),
                        *range(len(real) - 8, len(real))})
    assert len(positions) >= 1000 and positions[-1] == len(real) - 1
    with open(path, "r+b", buffering=0) as handle:
        for position in positions:
            for bit in range(8):
                handle.seek(position)
                handle.write(bytes([real[position] ^ (1 << bit)]))
                error = refusal(path)
                if position >= data_start:
                    assert "SHA-256 checksum does not match" in str(error), (position, str(error))
            handle.seek(position)
            handle.write(real[position:position + 1])
    assert path.read_bytes() == real and checkpoint.load(path).step == 1


# ---- files of other kinds ------------------------------------------------------------------------------------
class Exploit:
    """Unpickling this would create a marker file through os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    """Zero bytes: the message says it is empty."""
    refused(tmp_path / "empty.safetensors", b"", "empty")


@pytest.mark.parametrize("seed", range(12))
def test_random_bytes_are_refused(tmp_path: Path, seed: int) -> None:
    """Random bytes of random length, some behind a length prefix that fits and an opening brace."""
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, 256, int(rng.integers(1, 20_000)), dtype=np.uint8).tobytes()
    refused(tmp_path / "random.safetensors", blob)
    if len(blob) > 2:
        plausible = struct.pack("<Q", len(blob) - 1) + b"{" + blob[1:]
        refused(tmp_path / "random.safetensors", plausible)


def test_an_npz_and_a_layer_file_are_refused(tmp_path: Path) -> None:
    """A NumPy .npz archive and a params file from LSTM.save are zip archives, not checkpoints."""
    with open(tmp_path / "arrays.npz", "wb") as handle:
        np.savez(handle, params=np.arange(10.0), step=np.array(3))
    refused(tmp_path / "arrays.npz", None, "zip archive")
    LSTM(3, 4, 2, dropout=0.1).save(tmp_path / "layer.npz")
    refused(tmp_path / "layer.npz", None, "zip archive")
    np.save(tmp_path / "array.npy", np.arange(3))
    refused(tmp_path / "array.npy", None, r"\.npy array")


@pytest.mark.parametrize(("blob", "words"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "PNG image"),
    (b"\x89HDF\r\n\x1a\n" + bytes(64), "HDF5"),
    (json.dumps({"step": 5, "layers": {}, "weights": list(range(50))}).encode(), "first 8 bytes"),
    (b'{"a":1}\n', "too short"),
    (b"{}", "too short"),
    (b"PK\x05\x06" + bytes(18), "empty zip"),
    ("safetensors? \u00e9\u00e8 no".encode() * 20, "first 8 bytes"),
], ids=["png", "hdf5", "json", "short-json", "braces", "empty-zip", "text"])
def test_files_of_other_kinds_are_refused(tmp_path: Path, blob: bytes, words: str) -> None:
    """Images, HDF5, JSON and plain text: refused, saying what is wrong."""
    refused(tmp_path / "other.safetensors", blob, words)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_malicious_pickle_is_refused_without_running_it(tmp_path: Path, protocol: int) -> None:
    """A pickle whose loading would run os.system: refused, and the command never ran."""
    marker = tmp_path / "pwned"
    blob = pickle.dumps(Exploit(marker), protocol=protocol)
    refused(tmp_path / "evil.safetensors", blob, "pickle" if protocol >= 2 else None)
    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as archive:  # a torch.save-like zip around it
        archive.writestr("archive/data.pkl", blob)
    refused(tmp_path / "evil.pt", None, "zip archive")
    assert not marker.exists()


class Inflated:
    """zlib's decompression, counting the bytes it gives (zipfile and numpy inflate through zlib.decompressobj)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        decompressobj, decompress = zlib.decompressobj, zlib.decompress
        counter = self

        class Counted:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.inner = decompressobj(*args, **kwargs)

            def decompress(self, data: bytes, max_length: int = 0) -> bytes:
                out = self.inner.decompress(data, max_length)
                counter.bytes += len(out)
                return out

            def flush(self, *args: Any) -> bytes:
                out = self.inner.flush(*args)
                counter.bytes += len(out)
                return out

            def __getattr__(self, name: str) -> Any:  # eof, unused_data, unconsumed_tail
                return getattr(self.inner, name)

        def whole(data: bytes, *args: Any, **kwargs: Any) -> bytes:
            out = decompress(data, *args, **kwargs)
            counter.bytes += len(out)
            return out

        monkeypatch.setattr(zlib, "decompressobj", Counted)
        monkeypatch.setattr(zlib, "decompress", whole)


def test_a_zip_bomb_is_refused_without_inflating_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An .npz-like zip holding 200 MiB of zeros in under 1 MB: refused without inflating a byte of it."""
    path = tmp_path / "bomb.safetensors"
    chunk = bytes(2**20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("params.npy", "w") as member:
            for _ in range(200):
                member.write(chunk)
    with zipfile.ZipFile(path) as archive:
        assert archive.infolist()[0].file_size == 200 * 2**20
    assert path.stat().st_size < 2**20
    inflated = Inflated(monkeypatch)
    with zipfile.ZipFile(path) as archive, archive.open("params.npy") as member:  # the control: this counts it
        member.read(2**20)
    assert inflated.bytes >= 2**20
    inflated.bytes = 0
    refused(path, None, "zip archive")
    assert inflated.bytes == 0


def test_a_folder_and_a_fifo_are_refused(tmp_path: Path) -> None:
    """Not regular files: CheckpointError naming them, at once (a FIFO with no writer must not block)."""
    refused(tmp_path, None, "folder")
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    refused(fifo, None, "not a regular file")


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    """A file that does not exist: FileNotFoundError (as documented), naming it."""
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        checkpoint.load(missing)


# ---- hostile files with a correct checksum: the container's structure ---------------------------------------
MINIMAL = json.dumps({"step": None, "layers": {}, "optimizers": {}, "arrays": {"x": {"$array": "x"}}, "state": {}})


def tensor(dtype: str = "F32", shape: list[Any] | Any = (2,), offsets: list[Any] | Any = (0, 8)) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape,
            "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets}


def minimal(x: Any = None, data: bytes = bytes(8), **changes: Any) -> bytes:
    """A one-array checkpoint whose tensor entry or metadata is changed."""
    return build({"__metadata__": metadata(MINIMAL, **changes), "x": x or tensor()}, data)


def test_the_minimal_hostile_base_loads(tmp_path: Path) -> None:
    """Control: the base that the structural cases change is itself a valid checkpoint."""
    path = tmp_path / "minimal.safetensors"
    path.write_bytes(minimal(data=np.array([1.5, -2.0], "<f4").tobytes()))
    found = checkpoint.load(path)
    assert found.step is None and found.arrays["x"].tolist() == [1.5, -2.0] and found.arrays["x"].dtype == np.float32


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


STRUCTURAL: dict[str, tuple[bytes, str]] = {
    "length 2**63": (build(b'{"__metadata__":{}}', length=2**63), "first 8 bytes"),
    "length 2**40": (build(b'{"__metadata__":{}}', length=2**40), "first 8 bytes"),
    "length 2**64-1": (build(b'{"__metadata__":{}}', length=2**64 - 1), "first 8 bytes"),
    "length past the end": (build(minimal()[8:], length=len(minimal())), "truncated"),
    "length 0": (build(minimal()[8:], length=0), "invalid JSON in header"),
    "nested 100000 deep": (build(nested(100_000)), "invalid JSON in header: recursion limit exceeded"),
    "header a list": (build(b'[{"__metadata__":{}}]    '), "not a cudnn_rnn checkpoint"),
    "header not utf-8": (build(b'{"__metadata__":"\xff\xfe"}'), "invalid UTF-8 in header"),
    "header a 5000-digit number": (build(b'{"x":' + b"9" * 5000 + b"}"), "invalid JSON in header: number out of range"),
    "no __metadata__": (build({"x": tensor()}, bytes(8)), "no __metadata__"),
    "__metadata__ a string": (build({"__metadata__": "cudnn_rnn.checkpoint", "x": tensor()}, bytes(8)),
                              "invalid type: string \"cudnn_rnn.checkpoint\", expected a map"),
    "format of another library": (minimal(format="pt"), "not a cudnn_rnn checkpoint"),
    "no format": (minimal(format=...), "not a cudnn_rnn checkpoint"),
    "version 2": (minimal(version="2"), "version '2'"),
    "version 1 as a number": (minimal(version=1), "invalid type: integer `1`, expected a string"),
    "no checksum": (minimal(checksum=...), "no 'checksum' text"),
    "contents a number": (minimal(contents=5), "invalid type: integer `5`, expected a string"),
    "md5 checksum": (minimal(checksum="md5:" + "0" * 32), "checksum must be"),
    "uppercase checksum": (minimal(checksum="sha256:" + "A" * 64), "checksum must be"),
    "short checksum": (minimal(checksum="sha256:" + "0" * 63), "checksum must be"),
    "wrong checksum": (minimal(checksum="sha256:" + "1" * 64), "SHA-256 checksum does not match"),
    "checksum twice": (build({"__metadata__": metadata(MINIMAL, checksum="sha256:" + "a" * 64), "x": tensor(),
                              "sha256:" + "a" * 64: tensor(offsets=(8, 16))}, bytes(16)), "exactly once"),
    "dtype O": (minimal(tensor(dtype="O")), "unknown variant `O`"),
    "dtype F128": (minimal(tensor(dtype="F128", shape=(1,), offsets=(0, 16)), bytes(16)), "unknown variant `F128`"),
    "dtype F8_E4M3": (minimal(tensor(dtype="F8_E4M3", shape=(8,))), "dtype 'F8_E4M3'"),
    "dtype BF16, wrong size": (minimal(tensor(dtype="BF16", shape=(5,))),
                               "invalid shape, data type, or offset for tensor"),
    "dtype a number": (minimal(tensor(dtype=4)), "invalid type: integer `4`"),
    "negative shape": (minimal(tensor(shape=(-2,))), "invalid value: integer `-2`"),
    "negative shape entries": (minimal(tensor(shape=(-2, -1), offsets=(0, 8))), "invalid value: integer `-2`"),
    "float shape": (minimal(tensor(shape=(2.0,))), "invalid type: floating point `2.0`"),
    "bool shape": (minimal(tensor(shape=(True, True))), "invalid type: boolean `true`"),
    "shape a number": (minimal(tensor(shape=2)), "invalid type: integer `2`, expected a sequence"),
    "33 dimensions": (minimal(tensor(shape=(1,) * 32 + (2,))), "at most 32"),
    "32 dimensions of 2": (minimal(tensor(shape=(2,) * 32)), "invalid shape, data type, or offset for tensor"),
    "shape 2**62 x 2**62": (minimal(tensor(shape=(2**62, 2**62))), "overflow computing buffer size"),
    "shape 2**62 x 2**62, offsets to match": (minimal(tensor(shape=(2**62, 2**62), offsets=(0, 2**126))),
                                              "invalid type: floating point"),
    "overlapping offsets": (build({"__metadata__": metadata(MINIMAL), "x": tensor(offsets=(0, 8)),
                                   "y": tensor(offsets=(4, 12))}, bytes(12)), "invalid offset for tensor `y`"),
    "gapped offsets": (build({"__metadata__": metadata(MINIMAL), "x": tensor(offsets=(0, 8)),
                              "y": tensor(offsets=(16, 24))}, bytes(24)), "invalid offset for tensor `y`"),
    "gap at the start": (minimal(tensor(offsets=(8, 16)), bytes(16)), "invalid offset for tensor `x`"),
    "offsets beyond the data": (minimal(tensor(shape=(4,), offsets=(0, 16))), "truncated"),
    "data beyond the offsets": (minimal(data=bytes(12)), "longer than its header says"),
    "reversed offsets": (minimal(tensor(shape=(0,), offsets=(8, 0))), "invalid offset for tensor `x`"),
    "negative offsets": (minimal(tensor(offsets=(-8, 0))), "invalid value: integer `-8`"),
    "three offsets": (minimal(tensor(offsets=(0, 8, 8))), "invalid length 3, expected 2 elements"),
    "offsets too small for the shape": (minimal(tensor(shape=(3,))), "invalid shape, data type, or offset for tensor"),
    "extra key in a tensor": (minimal({**tensor(), "parameters": 1}), "exactly dtype, shape and data_offsets"),
    "missing key in a tensor": (minimal({"dtype": "F32", "shape": [2]}), "missing field `data_offsets`"),
    "tensor entry a list": (minimal(["F32", [2], [0, 8]]), "exactly dtype, shape and data_offsets"),
}


@pytest.mark.parametrize("case", list(STRUCTURAL))
def test_a_hostile_structure_is_refused(tmp_path: Path, case: str) -> None:
    """Each structural defect is refused fast, allocating little, with a message that says what is wrong."""
    blob, words = STRUCTURAL[case]
    refused(tmp_path / "hostile.safetensors", blob, words)


@pytest.mark.parametrize("shape", [[2**62, 0], [0, 2**64], [2**40, 2**40, 0], [2**31] * 31 + [0]])
def test_an_empty_array_with_enormous_dimensions_is_refused(tmp_path: Path, shape: list[int]) -> None:
    """Zero elements but dimensions NumPy cannot hold: refused as a CheckpointError, not a bare ValueError."""
    refused(tmp_path / "hostile.safetensors", minimal(tensor(shape=shape, offsets=(0, 0)), b""))


# ---- hostile files with a correct checksum: the contents ----------------------------------------------------
PARAMS = "layers/lstm/params"


def set_config(field: str, value: Any) -> Callable[[dict[str, Any], dict[str, np.ndarray]], None]:
    def apply(contents: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        contents["layers"]["lstm"]["config"][field] = value
    return apply


def replace_params(params: np.ndarray | None) -> Callable[[dict[str, Any], dict[str, np.ndarray]], None]:
    def apply(contents: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        arrays[PARAMS] = params if params is not None else arrays[PARAMS][:-1]
    return apply


def unreferenced(group: str, name: str, value: Any, *drop: str) -> Callable[..., None]:
    """Set contents[group][name] to ``value`` and drop the arrays it referred to."""
    def apply(contents: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        contents[group][name] = value
        for array in drop:
            del arrays[array]
    return apply


def layer_key(key: str, value: Any) -> Callable[..., None]:
    def apply(contents: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if value is ...:
            del contents["layers"]["lstm"][key]
        else:
            contents["layers"]["lstm"][key] = value
    return apply


def adam_key(key: str, value: Any) -> Callable[..., None]:
    def apply(contents: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        contents["optimizers"]["adam"][key] = value
    return apply


MOMENTS = ("optimizers/adam/first_moment/0", "optimizers/adam/first_moment/1",
           "optimizers/adam/second_moment/0", "optimizers/adam/second_moment/1")

CONTENTS: dict[str, tuple[Callable[[dict[str, Any], dict[str, np.ndarray]], Any], str]] = {
    "missing key": (lambda c, a: c.pop("state"), r"must have the keys \['step', 'layers'"),
    "extra key": (lambda c, a: c.update(extra=1), "must have the keys"),
    "reference to a missing array": (lambda c, a: c["arrays"].update(readout={"$array": "arrays/nothing"}),
                                     "bad array reference"),
    "an array referenced twice": (lambda c, a: c["state"].update(copy={"$array": "arrays/readout"}),
                                  "bad array reference"),
    "a reference with another key": (lambda c, a: c["arrays"].update(readout={"$array": "arrays/readout", "x": 1}),
                                     "bad array reference"),
    "a reference that is not a name": (lambda c, a: c["arrays"].update(readout={"$array": 3}),
                                       "bad array reference"),
    "an array nothing refers to": (lambda c, a: a.update(orphan=np.zeros(3)), r"nothing refers to: \['orphan'\]"),
    "layers a list": (lambda c, a: c.update(layers=[c["layers"]["lstm"]]), "'layers' must be an object"),
    "state a list": (lambda c, a: c.update(state=[1, 2]), "'state' must be an object"),
    "step negative": (lambda c, a: c.update(step=-1), "step must be a non-negative integer"),
    "step a string": (lambda c, a: c.update(step="1"), "step must be a non-negative integer"),
    "step a bool": (lambda c, a: c.update(step=True), "step must be a non-negative integer"),
    "step a float": (lambda c, a: c.update(step=1.5), "step must be a non-negative integer"),
    "num_units -1": (set_config("num_units", -1), "num_units must be >= 1"),
    "num_units a string": (set_config("num_units", "4"), "num_units must be an integer"),
    "num_units 10**15": (set_config("num_units", 10**15), r"num_units must be <= 2147483647"),
    "rnn_mode bogus": (set_config("rnn_mode", "bogus"), "rnn_mode must be one of"),
    "dropout 1.5": (set_config("dropout", 1.5), "dropout must be a finite float in"),
    "dropout NaN": (set_config("dropout", float("nan")), "dropout must be a finite float in"),
    "seed 2**40": (set_config("seed", 2**40), "seed must be <="),
    "dtype complex": (set_config("dtype", "complex64"), "dtype must be one of"),
    "unknown config field": (set_config("hidden", 4), "'config' must be an object with fields"),
    "config a list": (layer_key("config", [1, 2]), "'config' must be an object with fields"),
    "layer without step": (layer_key("step", ...), "a layer's state must be a dict with keys"),
    "layer with an extra key": (layer_key("grad", 0), "a layer's state must be a dict with keys"),
    "layer step -1": (layer_key("step", -1), "'step' must be a non-negative integer"),
    "layer a list": (unreferenced("layers", "lstm", [1], PARAMS), "a layer's state must be a dict"),
    "params not an array": (unreferenced("layers", "lstm", {"config": {"rnn_mode": "lstm", "num_layers": 2,
                                                                        "num_units": 4, "input_size": 3},
                                                             "step": 0, "params": [0.5] * 304}, PARAMS),
                            "'params' must be a numpy.ndarray"),
    "params one short": (replace_params(None), r"must be \[304\] float32 for its configuration; got \(303,\)"),
    "params float64": (replace_params(np.zeros(304)), r"must be \[304\] float32 .* float64"),
    "params 2-D": (replace_params(np.zeros((16, 19), np.float32)), r"must be \[304\] float32"),
    "params int32": (replace_params(np.zeros(304, np.int32)), r"must be \[304\] float32"),
    "optimizer of unknown kind": (lambda c, a: c["optimizers"]["adam"].update(kind="Bogus"), "kind 'Bogus'"),
    "optimizer without kind": (lambda c, a: c["optimizers"]["adam"].pop("kind"), "kind 'None'"),
    "optimizer a string": (unreferenced("optimizers", "adam", "Adam", *MOMENTS), "kind 'None'"),
    "optimizer with only its kind": (unreferenced("optimizers", "adam", {"kind": "Adam"}, *MOMENTS),
                                     r"an Adam state dict has the keys"),
    "optimizer lr negative": (lambda c, a: c["optimizers"]["adam"].update(lr=-1.0), "must be a finite float > 0"),
    "optimizer betas a number": (lambda c, a: c["optimizers"]["adam"].update(betas=0.9), "must be a pair"),
    "optimizer steps -1": (lambda c, a: c["optimizers"]["adam"].update(steps=-1), "must be a non-negative integer"),
    "optimizer moments a number": (lambda c, a: (c["optimizers"]["adam"].update(first_moment=3),
                                                 [a.pop(name) for name in MOMENTS[:2]]), "must be a list of arrays"),
    "arrays entry a number": (unreferenced("arrays", "readout", 1.0, "arrays/readout"),
                              r"arrays\['readout'\] must be an array"),
    # numbers out of range: never an OverflowError, always the field, its range and the value (huge ones by digits)
    "optimizer lr 10**400": (adam_key("lr", 10**400),
                             r"optimizers\['adam'\]\['lr'\] must be a finite float > 0; got .*401 digits"),
    "optimizer lr -10**400": (adam_key("lr", -10**400), r"\['lr'\] must be a finite float > 0; got .*401 digits"),
    "optimizer eps 10**400": (adam_key("eps", 10**400), r"\['eps'\] must be a finite float > 0; got .*401 digits"),
    "optimizer betas[1] 10**400": (adam_key("betas", [0.9, 10**400]),
                                   r"\['betas'\]\[1\] must be a finite float in \[0, 1\); got .*401 digits"),
    "optimizer betas[0] NaN": (adam_key("betas", [float("nan"), 0.9]),
                               r"\['betas'\]\[0\] must be a finite float in \[0, 1\); got nan"),
    "optimizer betas[1] Infinity": (adam_key("betas", [0.9, float("inf")]),
                                    r"\['betas'\]\[1\] must be a finite float in \[0, 1\); got inf"),
    "optimizer lr a bool": (adam_key("lr", True), r"\['lr'\] must be a finite float > 0; got bool True"),
    "optimizer steps 10**400": (adam_key("steps", 10**400), r"optimizers\['adam'\]\['steps'\] must be a non-negative "
                                                            r"integer < 2\*\*63; got .*401 digits"),
    "optimizer steps 2**63": (adam_key("steps", 2**63), r"\['steps'\] must be a non-negative integer < 2\*\*63; got "
                                                        "9223372036854775808"),
    "optimizer steps a bool": (adam_key("steps", True), r"\['steps'\] must be a non-negative integer < 2\*\*63; got "
                                                        "bool True"),
    "layer step 10**400": (layer_key("step", 10**400), r"layers\['lstm'\]: 'step' must be a non-negative integer "
                                                       r"< 2\*\*63; got .*401 digits"),
    "layer step 2**63": (layer_key("step", 2**63), r"'step' must be a non-negative integer < 2\*\*63"),
    "step 10**400": (lambda c, a: c.update(step=10**400),
                     r"step must be a non-negative integer < 2\*\*63; got .*401 digits"),
    "dropout 10**400": (set_config("dropout", 10**400), "dropout must be a finite float in"),
}


@pytest.fixture(scope="module")
def parts(real: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    return decode(real)


@pytest.mark.parametrize("case", list(CONTENTS))
def test_inconsistent_contents_are_refused(tmp_path: Path, parts: tuple[dict[str, Any], dict[str, np.ndarray]],
                                           case: str) -> None:
    """A checksummed file whose contents are inconsistent: refused with the inconsistency named."""
    contents, arrays = copy.deepcopy(parts[0]), dict(parts[1])
    mutate, words = CONTENTS[case]
    mutate(contents, arrays)
    error = refused(tmp_path / "hostile.safetensors", encode(contents, arrays), words)
    assert "its contents are inconsistent" in str(error)


@pytest.mark.parametrize(("text", "words"), [
    ("", "Expecting value"),
    ("{", "inconsistent"),
    ("[1, 2]", r"must have the keys .*; got list"),
    ("null", "got NoneType"),
    ('{"step":null,"layers":{},"optimizers":{},"arrays":{},"state":' + "[" * 100_000 + "]" * 100_000 + "}",
     "recursion"),
    ('{"step":null,"layers":{},"optimizers":{},"arrays":{},"state":{"n":' + "9" * 5000 + "}}", "digits"),
], ids=["empty", "broken", "list", "null", "nested-100000", "5000-digits"])
def test_contents_that_are_not_a_checkpoint_object_are_refused(tmp_path: Path, text: str, words: str) -> None:
    """Contents text that is not JSON, not an object, nested too deep or holding an over-long number."""
    refused(tmp_path / "hostile.safetensors", encode(text, {}), words)


def test_an_absurd_number_of_layers_is_refused_without_hanging(
        tmp_path: Path, parts: tuple[dict[str, Any], dict[str, np.ndarray]]) -> None:
    """A layer config of 10**9 layers with a small params array: refused at once, not after laying out every layer."""
    contents, arrays = copy.deepcopy(parts[0]), dict(parts[1])
    contents["layers"]["lstm"]["config"]["num_layers"] = 10**9
    refused(tmp_path / "hostile.safetensors", encode(contents, arrays), "must be")


# ---- CheckpointManager ---------------------------------------------------------------------------------------
def saved_manager(folder: Path, steps: range) -> CheckpointManager:
    manager = CheckpointManager(folder, keep=3)
    lstm, adam, readout = trained()
    for step in steps:
        manager.save(step, layers={"lstm": lstm}, optimizers={"adam": adam}, arrays={"readout": readout},
                     state={"step": step})
    return manager


def flip(path: Path, position: int = -1) -> None:
    blob = bytearray(path.read_bytes())
    blob[position] ^= 0x10
    path.write_bytes(bytes(blob))


def checkpoint_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]


def test_the_manager_keeps_the_newest_three(tmp_path: Path) -> None:
    """After steps 1..5 with keep=3, only 3, 4 and 5 remain, and latest() is step 5 with its own state."""
    manager = saved_manager(tmp_path, range(1, 6))
    assert manager.steps() == [3, 4, 5]
    assert sorted(p.name for p in tmp_path.iterdir()) == [manager.path_for(s).name for s in (3, 4, 5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = manager.latest()
    assert not checkpoint_warnings(caught)
    assert found is not None and found.step == 5 and found.state == {"step": 5}
    assert found.path == os.fspath(manager.path_for(5))


@pytest.mark.parametrize("damage", ["flip-data", "flip-prefix", "truncate", "empty", "folder"])
def test_a_damaged_newest_falls_back_to_the_one_before(tmp_path: Path, damage: str) -> None:
    """Newest damaged: latest() returns step 4 and warns with a CheckpointWarning naming the damaged file."""
    manager = saved_manager(tmp_path, range(1, 6))
    newest = manager.path_for(5)
    if damage == "flip-data":
        flip(newest)
    elif damage == "flip-prefix":
        flip(newest, 0)
    elif damage == "truncate":
        os.truncate(newest, newest.stat().st_size // 2)
    elif damage == "empty":
        newest.write_bytes(b"")
    else:
        newest.unlink()
        newest.mkdir()
    with pytest.warns(CheckpointWarning, match=re.escape(str(newest))):
        found = manager.latest()
    assert found is not None and found.step == 4 and found.state == {"step": 4}


def test_all_damaged_gives_none_with_a_warning_for_each(tmp_path: Path) -> None:
    """Every file damaged: latest() is None, and each file is named in its own warning, newest first."""
    manager = saved_manager(tmp_path, range(1, 6))
    for step in manager.steps():
        flip(manager.path_for(step), 100 * step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert manager.latest() is None
    messages = checkpoint_warnings(caught)
    assert len(messages) == 3
    for message, step in zip(messages, (5, 4, 3)):
        assert str(manager.path_for(step)) in message and "damaged" in message


def test_a_leftover_partial_file_is_ignored_then_removed(tmp_path: Path) -> None:
    """A killed save's partial file: latest() ignores it (no warning) and the next save removes it; the partial file
    of a writer still alive stays."""
    manager = saved_manager(tmp_path, range(1, 6))
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              check=True, text=True).stdout)
    partial = tmp_path / f".{manager.path_for(6).name}.{files._machine()}.{gone}.x1y2z3.partial"
    live = tmp_path / f".{manager.path_for(7).name}.{files._machine()}.{os.getpid()}.x1y2z3.partial"
    partial.write_bytes(manager.path_for(5).read_bytes()[:1000])
    live.write_bytes(b"being written")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = manager.latest()
    assert not checkpoint_warnings(caught)
    assert found is not None and found.step == 5 and manager.steps() == [3, 4, 5] and partial.exists()
    saved_manager(tmp_path, range(6, 7))
    assert not partial.exists() and live.exists()
    live.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [manager.path_for(s).name for s in (4, 5, 6)]


@pytest.mark.parametrize(("group", "key", "words"), [
    ("optimizers", "lr", r"optimizers\['adam'\]\['lr'\] must be a finite float > 0; got .*401 digits"),
    ("optimizers", "steps", r"optimizers\['adam'\]\['steps'\] must be a non-negative integer < 2\*\*63"),
    ("layers", "step", r"layers\['lstm'\]: 'step' must be a non-negative integer < 2\*\*63"),
], ids=["optimizer lr", "optimizer steps", "layer step"])
def test_a_newest_file_holding_10_400_falls_back_to_the_one_before(tmp_path: Path, group: str, key: str,
                                                                   words: str) -> None:
    """Newest file whole (checksum valid) but holding 10**400 where a number goes: latest() warns naming the file
    and the field, and returns step 4."""
    manager = saved_manager(tmp_path, range(1, 6))
    newest = manager.path_for(5)
    contents, arrays = decode(newest.read_bytes())
    next(iter(contents[group].values()))[key] = 10**400
    newest.write_bytes(encode(contents, arrays))
    with pytest.warns(CheckpointWarning, match=re.escape(str(newest))) as caught:
        found = manager.latest()
    assert any(re.search(words, str(w.message)) for w in caught), [str(w.message) for w in caught]
    assert found is not None and found.step == 4 and found.state == {"step": 4}
    with pytest.raises(CheckpointError, match=words) as refused_load:
        checkpoint.load(newest)
    assert refused_load.value.path == str(newest)


def test_a_file_renamed_to_another_step_is_skipped(tmp_path: Path) -> None:
    """A file whose name says step 9 but whose contents say step 4: skipped with a warning, step 5 is returned."""
    manager = saved_manager(tmp_path, range(1, 6))
    renamed = manager.path_for(9)
    manager.path_for(4).rename(renamed)
    with pytest.warns(CheckpointWarning, match=re.escape(str(renamed))) as caught:
        found = manager.latest()
    assert any("holds step 4, not the step 9" in str(w.message) for w in caught)
    assert found is not None and found.step == 5
    assert checkpoint.load(renamed).step == 4  # the file itself is whole; only its name lies


def test_a_layer_file_claiming_a_billion_layers_is_refused_at_once(tmp_path: Path) -> None:
    """The params file of ``layer.save`` shares the configuration check: its size comes in closed form."""
    path = tmp_path / "layer.npz"
    LSTM(3, 4).save(path)
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    fields = json.loads(str(arrays["config"]))
    arrays["config"] = np.array(json.dumps(dict(fields, num_layers=10**9)))
    np.savez(path, **arrays)
    with deadline(HANG_S), counted_calls() as calls:
        with pytest.raises(ValueError, match=r"must be \[\d+\] float32 for its configuration"):
            LSTM.load(path)
    assert 0 < calls[0] <= MOST_CALLS
