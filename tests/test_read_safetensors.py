"""safetensors files without torch: the shared layout module (cudnn_rnn._safetensors) round trip, state_dicts of every
RNN class read back exactly, recognition by content, and hostile files refused in one line naming the file.

The files are written by ``_safetensors.encode`` (through the safetensors package, which lays the arrays out by dtype,
then name) or byte by byte (the hostile ones, and those whose order matters); torch is not needed
(tests/oracle/test_read_safetensors_live.py uses it). A refusal the package makes is in its words (``invalid offset
for tensor `y```, ``invalid JSON in header: ...``); a file cut short or too long, a dtype cudnn_rnn does not read and
an entry of other keys are refused in cudnn_rnn's own.
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cudnn_rnn import RNNConfig, checkpoint
from cudnn_rnn.files import _safetensors
from cudnn_rnn.convert import read_file, to_format
from cudnn_rnn.convert.readers import FILE_KINDS, _safetensors_file, file_kind
from cudnn_rnn.layers import LSTM
from reading_testing import CONFIGS, random_params
from rnn_testing import deadline, read_refusal

#: a hostile file must be refused within this many seconds
DEADLINE_S = 5.0

#: torch class of each mode's state_dict, as the source names it
CLASSES = {"lstm": "nn.LSTM", "gru": "nn.GRU", "rnn_tanh": "nn.RNN", "rnn_relu": "nn.RNN"}


# ---- writing files ------------------------------------------------------------------------------------
def write(path: Path, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> Path:
    path.write_bytes(b"".join(bytes(chunk) for chunk in _safetensors.encode(arrays, metadata)))
    return path


def build(header: dict[str, Any] | bytes, data: bytes = b"", *, length: int | None = None, pad_to: int = 8) -> bytes:
    """A file in the safetensors layout from a header (a dict, or raw bytes) and data, the length overridable;
    a dict header is padded with spaces to a multiple of ``pad_to`` bytes."""
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if not isinstance(header, bytes):
        text += b" " * (-len(text) % pad_to)
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def in_order(arrays: dict[str, np.ndarray]) -> bytes:
    """A file in the safetensors layout with the float32 ``arrays`` in the header and data in the order given."""
    header: dict[str, Any] = {}
    data = bytearray()
    for name, value in arrays.items():
        header[name] = entry("F32", value.shape, (len(data), len(data) + value.nbytes))
        data += np.ascontiguousarray(value, "<f4").tobytes()
    return build(header, bytes(data))


def torch_tensors(config: RNNConfig, seed: int = 0, prefix: str = "") -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Random params of ``config`` and the torch-named tensors holding them, under ``prefix``."""
    params = random_params(config, seed)
    return params, {prefix + name: value for name, value in to_format("torch", params, config).value.items()}


def entry(dtype: str = "F32", shape: Any = (2,), offsets: Any = (0, 8)) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape,
            "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets}


# ---- the shared layout module ---------------------------------------------------------------------------
def _every_dtype() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray] = {}
    for code, dtype in _safetensors.DTYPES.items():
        if dtype.kind == "b":
            values = rng.random((3, 2)) < 0.5
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            values = np.array([[info.min, info.max], [0, 1], [info.max // 3, info.min // 3 or 7]], dtype)
        else:
            values = rng.standard_normal((3, 2)).astype(dtype)
        arrays[code] = np.asarray(values, dtype.newbyteorder(">"))  # written little-endian whatever the order given
    arrays["scalar"] = np.array(2.5, np.float64)
    arrays["empty"] = np.zeros((0, 4), np.float32)
    arrays["fortran"] = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    return arrays


def test_encode_round_trips_every_dtype_through_read_layout_and_read_array(tmp_path: Path) -> None:
    """Every dtype, any byte and memory order; the safetensors package lays the arrays out by dtype, then name."""
    arrays = _every_dtype()
    path = write(tmp_path / "every.safetensors", arrays, {"format": "pt", "note": "é"})
    blob = path.read_bytes()
    handle = io.BytesIO(blob)
    layout = _safetensors.read_layout(path)
    assert layout.metadata == {"format": "pt", "note": "é"}
    assert sorted(layout.entries) == sorted(arrays) and layout.data_start % 8 == 0
    position = layout.data_start
    for name in layout.entries:
        array, found = arrays[name], layout.entries[name]
        assert (found.name, found.shape, found.begin) == (name, array.shape, position)   # absolute offsets
        assert found.end - found.begin == found.nbytes == array.nbytes and found.count == array.size
        assert found.code == (name if name in _safetensors.DTYPES else found.code)
        assert found.dtype == np.dtype(array.dtype.name).newbyteorder("<") and found.dtype_name == array.dtype.name
        value = _safetensors.read_array(handle, found)
        assert value.dtype == found.dtype and value.flags.c_contiguous and value.flags.writeable
        assert value.shape == array.shape and np.array_equal(value, array)
        position = found.end
    assert position == len(blob)
    with pytest.raises(ValueError, match="item size of F32"):
        _safetensors.read_array(handle, layout.entries["F32"], np.dtype("<u2"))


def test_encode_writes_metadata_only_when_given() -> None:
    arrays = {"b": np.zeros(1, np.float32), "a": np.ones(2, np.int64)}
    blob = b"".join(bytes(chunk) for chunk in _safetensors.encode(arrays))
    (length,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8:8 + length])
    assert sorted(header) == ["a", "b"] and (8 + length) % 8 == 0 and len(blob) == 8 + length + 20
    begin, end = header["a"].pop("data_offsets")
    assert header["a"] == {"dtype": "I64", "shape": [2]} and end - begin == 16
    assert blob[8 + length + begin:8 + length + end] == np.ones(2, "<i8").tobytes()
    blob = b"".join(bytes(chunk) for chunk in _safetensors.encode({}, {"z": "1", "a": "2"}))
    assert json.loads(blob[8:]) == {"__metadata__": {"z": "1", "a": "2"}}


@pytest.mark.parametrize("arrays, metadata, error, words", [
    ({"x": np.zeros(2, np.complex64)}, None, TypeError, "array 'x' has dtype complex64; a safetensors file holds"),
    ({"x": [1.0, 2.0]}, None, TypeError, "array 'x' must be a NumPy array; got list"),
    ({"__metadata__": np.zeros(1)}, None, ValueError, "cannot be named '__metadata__'"),
    ({}, {"format": 1}, TypeError, "metadata must map str to str; got 'format': int"),
    ({}, ["format"], TypeError, "metadata must be a mapping of str to str or None; got list"),
], ids=["complex", "list", "metadata-name", "metadata-int", "metadata-list"])
def test_encode_refuses_what_the_layout_cannot_hold(arrays: Any, metadata: Any, error: type, words: str) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(")):
        _safetensors.encode(arrays, metadata)


def test_bfloat16_round_trips_with_ml_dtypes(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.array([1.0, -2.5, 3.140625], ml_dtypes.bfloat16)
    path = write(tmp_path / "bf16.safetensors", {"w": array})
    found = _safetensors.read_layout(path).entries["w"]
    assert found.code == "BF16" and found.dtype_name == "bfloat16"
    with open(path, "rb") as handle:
        assert _safetensors.read_array(handle, found).tobytes() == array.tobytes()


def test_read_layout_reads_the_header_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1 MB array behind a small header: read_layout reads 8 bytes and the header, nothing of the data (the
    safetensors package maps the file and looks at its size)."""
    path = write(tmp_path / "big.safetensors", {"big": np.zeros(2**18, np.float32)})
    opened: list[Counting] = []

    class Counting(io.FileIO):
        read_bytes = 0

        def read(self, size: int | None = -1, /) -> bytes:
            data = super().read(size)
            self.read_bytes += len(data or b"")
            return data or b""

    def counting_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Counting:
        opened.append(Counting(file, mode.replace("b", "")))
        return opened[-1]

    monkeypatch.setattr(_safetensors, "open", counting_open, raising=False)
    layout = _safetensors.read_layout(path)
    assert [handle.read_bytes for handle in opened] == [layout.data_start] and layout.data_start < 200


# ---- state_dicts read back ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_state_dict_of_each_rnn_class_reads_back_exactly(tmp_path: Path, case: str) -> None:
    config = CONFIGS[case]
    params, tensors = torch_tensors(config)
    path = write(tmp_path / "model.safetensors", tensors, {"format": "pt"})
    assert file_kind(str(path)) is FILE_KINDS["safetensors"]
    (found,) = read_file(path)
    assert found.name == "model.safetensors" and found.fmt == "torch"
    assert found.source == f"PyTorch {CLASSES[config.rnn_mode]} state_dict in a safetensors file"
    if config.rnn_mode.startswith("rnn_"):
        assert found.questions["rnn_mode"].choices == ("rnn_tanh", "rnn_relu")
        found = found.with_hints(rnn_mode=config.rnn_mode)
    assert found.config == config and found.conversion() == "exact"
    value = found.to_params().value
    assert value.dtype == params.dtype and np.array_equal(value, params)


def test_an_lstm_and_a_gru_of_every_shape_read_back_exactly(tmp_path: Path) -> None:
    for index, config in enumerate([RNNConfig("lstm", 2, 5, 3, direction="bidirectional", num_proj=2),
                                    RNNConfig("lstm", 1, 4, 4, dtype="float64"), RNNConfig("gru", 2, 3, 7),
                                    RNNConfig("rnn_tanh", 3, 2, 1, direction="bidirectional")]):
        params, tensors = torch_tensors(config, index)
        (found,) = read_file(write(tmp_path / f"m{index}.safetensors", tensors))
        if "rnn_mode" in found.questions:
            found = found.with_hints(rnn_mode=config.rnn_mode)
        assert found.config == config and np.array_equal(found.to_params().value, params)


def parent_state_dict(config: RNNConfig) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A parent module's state_dict: an embedding, the RNN under encoder.rnn., a head and an int64 counter."""
    params, tensors = torch_tensors(config, 3, "encoder.rnn.")
    return params, {"embed.weight": np.ones((10, config.input_size), np.float32), **tensors,
                    "head.weight": np.zeros((2, config.num_units), np.float32), "head.bias": np.zeros(2, np.float32),
                    "norm.num_batches_tracked": np.array(7, np.int64)}


def test_a_parent_modules_state_dict_is_read_under_its_prefix(tmp_path: Path) -> None:
    config = RNNConfig("lstm", 2, 4, 3, direction="bidirectional")
    params, arrays = parent_state_dict(config)
    path = write(tmp_path / "parent.safetensors", arrays)
    (found,) = read_file(path)
    assert found.name == "encoder.rnn" and found.source == "PyTorch nn.LSTM state_dict in a safetensors file"
    assert np.array_equal(found.to_params().value, params)
    for prefix in ("encoder.rnn", "encoder.rnn."):
        (alone,) = read_file(path, prefix=prefix)
        assert alone.name == "encoder.rnn" and np.array_equal(alone.to_params().value, params)
    assert read_refusal(path, prefix="decoder").endswith(
        "no RNN under prefix 'decoder' (no key 'decoder.weight_ih_l0'); RNNs are under 'encoder.rnn.'")


def test_only_the_rnns_tensors_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params, arrays = parent_state_dict(RNNConfig("gru", 1, 3, 2))
    path = write(tmp_path / "parent.safetensors", arrays)
    read: list[str] = []
    original = _safetensors_file.read_array

    def counted(handle: Any, found: _safetensors.Entry, dtype: Any = None) -> np.ndarray:
        read.append(found.name)
        return original(handle, found, dtype)

    monkeypatch.setattr(_safetensors_file, "read_array", counted)
    (found,) = read_file(path)
    assert sorted(read) == sorted(key for key in arrays if key.startswith("encoder.rnn."))
    assert np.array_equal(found.to_params().value, params)


def test_two_rnns_in_one_file_are_found_in_header_order(tmp_path: Path) -> None:
    first, second = RNNConfig("gru", 1, 4, 3, direction="bidirectional"), RNNConfig("lstm", 1, 3, 8)
    encoder_params, encoder = torch_tensors(first, 1, "encoder.")
    decoder_params, decoder = torch_tensors(second, 2, "decoder.")
    path = tmp_path / "seq2seq.safetensors"  # (laid out by hand in this order: the package sorts names)
    path.write_bytes(in_order({**encoder, "bridge.weight": np.eye(2, dtype=np.float32), **decoder}))
    found = read_file(path)
    assert [item.name for item in found] == ["encoder", "decoder"]
    assert [item.config for item in found] == [first, second]
    assert np.array_equal(found[0].to_params().value, encoder_params)
    assert np.array_equal(found[1].to_params().value, decoder_params)
    (decoder_only,) = read_file(path, prefix="decoder")
    assert decoder_only.name == "decoder" and np.array_equal(decoder_only.to_params().value, decoder_params)


def test_bfloat16_tensors_are_read_as_float32_exactly_without_ml_dtypes(tmp_path: Path) -> None:
    """As the PyTorch reader does: bfloat16 RNN weights are widened to float32 (exact), with a note."""
    config = RNNConfig("lstm", 1, 3, 2)
    _, tensors = torch_tensors(config)
    header: dict[str, Any] = {}
    data = bytearray()
    expected = {}
    for name, value in tensors.items():
        bits = (np.ascontiguousarray(value, "<f4").view("<u4") >> 16).astype("<u2")
        expected[name] = (bits.astype("<u4") << 16).view("<f4")
        header[name] = entry("BF16", value.shape, (len(data), len(data) + bits.nbytes))
        data += bits.tobytes()
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(build(header, bytes(data)))
    (found,) = read_file(path)
    assert found.notes[-1] == "the tensors are bfloat16: read as float32, exactly"
    assert found.config == config
    for name, value in expected.items():
        assert found.tensors[name].dtype == np.float32 and np.array_equal(found.tensors[name], value)


def test_rnn_tensors_of_mixed_or_integer_dtypes_are_refused_by_name(tmp_path: Path) -> None:
    _, tensors = torch_tensors(RNNConfig("gru", 1, 3, 2))
    mixed = {**tensors, "bias_hh_l0": tensors["bias_hh_l0"].astype(np.float64)}
    message = read_refusal(write(tmp_path / "mixed.safetensors", mixed), TypeError)
    assert "tensor 'bias_hh_l0' is float64 while the others are float32" in message
    ints = {name: value.astype(np.int32) for name, value in tensors.items()}
    message = read_refusal(write(tmp_path / "ints.safetensors", ints), TypeError)
    assert "an RNN's weights must be float16, float32, float64, bfloat16" in message


def test_options_the_kind_does_not_take_are_refused(tmp_path: Path) -> None:
    _, tensors = torch_tensors(RNNConfig("lstm", 1, 3, 2))
    path = write(tmp_path / "m.safetensors", tensors)
    assert read_refusal(path, key="model").endswith(
        "not to a safetensors file; a safetensors file names its RNNs by key prefix: pick one by its name with "
        "names=[NAME] (the names are listed by cudnn-rnn inspect)")
    assert read_refusal(path, trust_pickle=True).endswith("nothing in it is unpickled: leave trust_pickle= out")
    assert "which holds the torch format, not 'keras'" in read_refusal(path, fmt="keras")
    assert read_file(path, fmt="torch")[0].fmt == "torch"


def test_a_file_without_rnns_and_a_checkpoint_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "dense.safetensors", {"dense.weight": np.zeros((2, 2), np.float32)})
    assert "a state_dict of 1 tensors ('dense.weight') with no LSTM, GRU or RNN weights" in read_refusal(path)
    saved = tmp_path / "ckpt.safetensors"
    checkpoint.save(saved, layers={"lstm": LSTM(2, 3)})
    assert file_kind(str(saved)) is FILE_KINDS["safetensors"]
    assert read_refusal(saved).endswith("a cudnn_rnn checkpoint, not a model file: read it with "
                                        "cudnn_rnn.checkpoint.load(path)")


# ---- recognition by content -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["weights.bin", "model.pt", "model.onnx", "no_extension"])
def test_a_safetensors_file_is_recognised_by_content_whatever_its_name(tmp_path: Path, name: str) -> None:
    params, tensors = torch_tensors(RNNConfig("gru", 1, 3, 2))
    path = write(tmp_path / name, tensors)
    assert file_kind(str(path)) is FILE_KINDS["safetensors"]
    assert np.array_equal(read_file(path)[0].to_params().value, params)


@pytest.mark.parametrize("low_byte", [0x80, 0x08])
def test_a_header_length_whose_low_byte_is_a_pickle_or_onnx_opcode_is_still_safetensors(
        tmp_path: Path, low_byte: int) -> None:
    """A header of 0x180 or 0x108 bytes: the file's first byte is that of a pickle (0x80) or an ONNX model (0x08)."""
    params, tensors = torch_tensors(RNNConfig("lstm", 1, 3, 2))
    base = b"".join(bytes(chunk) for chunk in _safetensors.encode(tensors))
    (length,) = struct.unpack_from("<Q", base)
    target = 0x100 * (length // 0x100 + 1) + low_byte
    header = base[8:8 + length].rstrip(b" ") + b" " * (target - len(base[8:8 + length].rstrip(b" ")))
    path = tmp_path / "odd.bin"
    path.write_bytes(struct.pack("<Q", target) + header + base[8 + length:])
    assert path.read_bytes()[0] == low_byte
    assert file_kind(str(path)) is FILE_KINDS["safetensors"]
    assert np.array_equal(read_file(path)[0].to_params().value, params)


def test_a_truncated_header_is_named_as_such(tmp_path: Path) -> None:
    _, tensors = torch_tensors(RNNConfig("lstm", 1, 3, 2))
    base = b"".join(bytes(chunk) for chunk in _safetensors.encode(tensors))
    (length,) = struct.unpack_from("<Q", base)
    assert length & 0xFF not in (0x80, 0x08)
    path = tmp_path / "cut.safetensors"
    path.write_bytes(base[:8 + length // 2])
    assert read_refusal(path).endswith(f"a truncated safetensors file: its header is {length} bytes, and only "
                                       f"{length // 2} follow its length")


# ---- hostile files ---------------------------------------------------------------------------------------------
def valid() -> bytes:
    return b"".join(bytes(chunk) for chunk in _safetensors.encode(torch_tensors(RNNConfig("gru", 1, 2, 2))[1]))


def with_x(x: Any, data: bytes = bytes(8), **more: Any) -> bytes:
    """A one-array file whose entry is ``x`` (other entries in ``more``)."""
    return build({"x": x, **more}, data)


def nested(depth: int) -> bytes:
    return b'{"x":' + b"[" * depth + b"]" * depth + b"}"


#: case -> (file bytes, words the refusal must hold); each reaches the safetensors reader (file_kind sees one)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "truncated data": (valid()[:-3], "the file is truncated: its arrays take"),
    "data longer than the header says": (valid() + bytes(4), "longer than its header says"),
    "overlapping offsets": (build({"x": entry(), "y": entry(offsets=(4, 12))}, bytes(12)),
                            "invalid offset for tensor `y`"),
    "offsets out of the file": (with_x(entry(shape=(4,), offsets=(0, 16))), "the file is truncated"),
    "offsets far out of the file": (with_x(entry(shape=(2**40,), offsets=(2**50, 2**50 + 2**42))),
                                    "invalid offset for tensor `x`"),
    "a hole between arrays": (build({"x": entry(), "y": entry(offsets=(16, 24))}, bytes(24)),
                              "invalid offset for tensor `y`"),
    "a hole at the start": (with_x(entry(offsets=(8, 16)), bytes(16)), "invalid offset for tensor `x`"),
    "unknown dtype code": (with_x(entry(dtype="F8_E4M3", shape=(8,))),
                           "dtype 'F8_E4M3' is not one of ['BF16', 'BOOL', 'F16', 'F32', 'F64', 'I16', 'I32', 'I64', "
                           "'I8', 'U16', 'U32', 'U64', 'U8']"),
    "dtype a list": (with_x(entry(dtype=["F32"])), "invalid JSON in header: invalid type: sequence"),
    "shape and offsets disagree": (with_x(entry(shape=(3,))), "invalid shape, data type, or offset for tensor"),
    "negative shape": (with_x(entry(shape=(-2,))), "invalid JSON in header: invalid value: integer `-2`"),
    "bool shape": (with_x(entry(shape=(True, True))), "invalid JSON in header: invalid type: boolean `true`"),
    "float shape": (with_x(entry(shape=(2.0,))), "invalid JSON in header: invalid type: floating point `2.0`"),
    "shape a dict": (with_x(entry(shape={"0": 2})), "invalid JSON in header: invalid type: map, expected a sequence"),
    "shape nested 200 deep": (with_x(entry(shape=json.loads("[" * 200 + "]" * 200))),
                              "invalid JSON in header: recursion limit exceeded"),
    "shape nested in lists": (with_x(entry(shape=[[2]])), "invalid JSON in header: invalid type: sequence, expected "
                                                          "usize"),
    "brackets inside strings": (build({'x"[[[[[[[[[[[[[[[[[[[[': entry(dtype="[" * 40)}, bytes(8)),
                                "invalid JSON in header: unknown variant `[[[["),
    "33 dimensions": (with_x(entry(shape=(1,) * 32 + (2,))), "at most 32"),
    "shape larger than any array": (with_x(entry(shape=(2**62, 2**62), offsets=(0, 2**126))),
                                    "invalid JSON in header: invalid type: floating point"),
    "shape larger than any array, offsets in range": (with_x(entry(shape=(2**62, 2**62))),
                                                      "overflow computing buffer size"),
    "empty, of dimensions no array can have": (with_x(entry(shape=(2**62, 0), offsets=(0, 0)), b""),
                                               "is larger than any array can be"),
    "reversed offsets": (with_x(entry(shape=(0,), offsets=(8, 0))), "invalid offset for tensor `x`"),
    "negative offsets": (with_x(entry(offsets=(-8, 0))), "invalid JSON in header: invalid value: integer `-8`"),
    "extra key": (with_x({**entry(), "parameters": 1}), "exactly dtype, shape and data_offsets"),
    "entry a list": (with_x(["F32", [2], [0, 8]]), "exactly dtype, shape and data_offsets"),
    "nested 100000 deep": (build(nested(100_000)), "invalid JSON in header"),
    "metadata nested 100000 deep": (build(b'{"__metadata__":' + nested(100_000) + b"}"), "invalid JSON in header"),
    "header not utf-8": (build(b'{"__metadata__":{"a":"\xff\xfe"}}'), "invalid UTF-8 in header"),
    "header not json": (build(b"{" + b"x" * 30), "invalid JSON in header"),
    "a 5000-digit number": (build(b'{"x":' + b"9" * 5000 + b"}"), "invalid JSON in header: number out of range"),
    "metadata not str to str": (build({"__metadata__": {"format": 1}}), "invalid type: integer `1`, expected a string"),
    "metadata a list": (build({"__metadata__": ["pt"]}), "invalid type: sequence, expected a map"),
    "metadata nested": (build({"__metadata__": {"a": {"b": "c"}}}), "invalid type: map, expected a string"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_file_is_refused_in_one_line_naming_it(tmp_path: Path, case: str) -> None:
    blob, words = HOSTILE[case]
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(blob)
    assert file_kind(str(path)) is FILE_KINDS["safetensors"]
    with deadline(DEADLINE_S):
        message = read_refusal(path)
    assert message.startswith(f"cannot read {str(path)!r}: a damaged safetensors file: ") and words in message, message
    assert len(message) < 700, message


#: files whose first 8 bytes do not make a safetensors file: refused by file_kind, still in one line
NOT_RECOGNISED: dict[str, tuple[bytes, str]] = {
    "header length 2**63": (build(b'{"x":1}', length=2**63), "not a model file of a known kind"),
    "header length 2**64-1": (build(b'{"x":1}', length=2**64 - 1), "not a model file of a known kind"),
    "header length beyond the file": (build(b'{"__metadata__":{}}', bytes(8), length=1000),
                                      "a truncated safetensors file: its header is 1000 bytes, and only 27 follow"),
    "header length past MAX_HEADER_BYTES": (build(b"{}", length=_safetensors.MAX_HEADER_BYTES + 1),
                                            "not a model file of a known kind"),
    "seven bytes": (b"\x02\x00\x00\x00\x00\x00\x00", "not a model file of a known kind"),
}


@pytest.mark.parametrize("case", list(NOT_RECOGNISED))
def test_a_file_that_is_not_safetensors_from_its_first_bytes_is_refused(tmp_path: Path, case: str) -> None:
    blob, words = NOT_RECOGNISED[case]
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(blob)
    with deadline(DEADLINE_S):
        assert words in read_refusal(path)


@pytest.mark.parametrize("case, blob, words", [
    ("short", b"\x10\x00\x00", "the file is too short (3 bytes) to hold a safetensors header"),
    ("length 2**63", build(b"{}", length=2**63), f"more than the {_safetensors.MAX_HEADER_BYTES} a safetensors header"),
    ("length past the file", build(b"{}", length=100), "the file is truncated: its header says 100 bytes, and only 2"),
], ids=lambda value: value if isinstance(value, str) and len(value) < 30 else "")
def test_read_layout_refuses_what_file_kind_does_not_route_to_it(tmp_path: Path, case: str, blob: bytes,
                                                                 words: str) -> None:
    path = tmp_path / "short.safetensors"
    path.write_bytes(blob)
    with pytest.raises(_safetensors.SafetensorsError) as caught:
        _safetensors.read_layout(path)
    assert words in caught.value.reason and "\n" not in caught.value.reason


def test_a_file_that_shrinks_after_its_layout_was_read_is_refused(tmp_path: Path) -> None:
    blob = valid()
    path = tmp_path / "valid.safetensors"
    path.write_bytes(blob)
    layout = _safetensors.read_layout(path)
    last = max(layout.entries.values(), key=lambda item: item.end)
    with pytest.raises(_safetensors.SafetensorsError, match=f"the file is truncated: array {last.name!r} takes bytes"):
        _safetensors.read_array(io.BytesIO(blob[:-2]), last)


def test_every_truncation_of_a_valid_file_is_refused(tmp_path: Path) -> None:
    blob = valid()
    path = tmp_path / "cut.safetensors"
    with deadline(30):
        for length in range(len(blob) - 1, -1, -1):
            path.write_bytes(blob[:length])
            read_refusal(path)


def test_the_known_dtype_codes_are_the_tables() -> None:
    assert set(_safetensors.DTYPES) == {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "F32",
                                        "F64"}
    assert _safetensors.EXTENSION_DTYPES == {"BF16": ("bfloat16", 2)}
    assert all(dtype.byteorder in "<|" for dtype in _safetensors.DTYPES.values())
