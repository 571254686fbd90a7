"""The Keras reader on real files saved by Keras 3 and tf_keras, and on broken and hostile ones.

The golden files (scripts/make_keras_files.py) are read with ``read_file``; every RNN found runs
through ``cudnn_rnn_v3`` on the recorded ragged batch and must give Keras's outputs and final
states (float32 to 1e-5, float64 to 1e-10, relative to the largest value); a reset-before GRU runs
through ``gru_block_cell``; Keras 2's CuDNN layers must give the very params buffer they hand to
``CudnnRNNV3``. Every refusal and every hostile file has its message asserted.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import struct
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn.config import RNNConfig
from cudnn_rnn.convert import InexactConversionError, from_format, to_format
from cudnn_rnn.convert.readers import FoundRNN, _child, _keras_file, read_file, stack
from keras_testing import rnn_arrays, run_like_keras, run_reset_before
from rnn_testing import read_refusal, relative_error

GOLDEN = Path(__file__).parent / "golden" / "files" / "keras"
LSTM_LINE = "num_layers=1, num_units={n}, input_size={i}, direction={d}, num_proj=0, input_mode=linear_input, dtype={t}"


def line(mode: str, n: int, i: int, d: str = "unidirectional", t: str = "float32") -> str:
    return f"rnn_mode={mode}, " + LSTM_LINE.format(n=n, i=i, d=d, t=t)


BI = "bidirectional"
#: file -> what read_file finds: (name, source, fmt, describe(), start of conversion(), feeds_from)
FOUND: dict[str, list[tuple[str, str, str, str, str, str | None]]] = {
    "keras3_functional.keras": [
        ("encoder", "Keras 3 LSTM", "keras", line("lstm", 4, 2), "exact", None),
        ("bi_gru", "Keras 3 Bidirectional(GRU)", "keras", line("gru", 3, 4, BI), "exact", "encoder"),
        ("relu_rnn", "Keras 3 SimpleRNN", "keras", line("rnn_relu", 3, 6), "exact", "bi_gru"),
    ],
    "keras3_functional.weights.h5": [
        ("bi_gru", "Keras 3 Bidirectional(GRU) (weights only)", "keras", line("gru", 3, 4, BI), "exact", None),
        ("encoder", "Keras 3 LSTM (weights only)", "keras", line("lstm", 4, 2), "exact", None),
        ("relu_rnn", "Keras 3 SimpleRNN (weights only)", "keras", line("?", 3, 6),
         "needs: a SimpleRNN's weights do not say its activation: pass rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'",
         None),
    ],
    "keras3_bidirectional_stack.keras": [
        ("bi_1", "Keras 3 Bidirectional(LSTM)", "keras", line("lstm", 3, 2, BI), "exact", None),
        ("bi_2", "Keras 3 Bidirectional(LSTM)", "keras", line("lstm", 3, 6, BI), "exact", "bi_1"),
    ],
    "keras3_float64.keras": [
        ("reset_before", "Keras 3 GRU", "gru_block_cell", line("gru", 3, 2, t="float64"),
         "approximate: format 'gru_block_cell' is a reset-before GRU", None),
        ("tanh_no_bias", "Keras 3 SimpleRNN", "keras", line("rnn_tanh", 2, 3, t="float64"), "exact", "reset_before"),
        ("bi_sum", "Keras 3 Bidirectional(GRU)", "keras", line("gru", 2, 2, BI, "float64"), "exact", "tanh_no_bias"),
    ],
    "keras3_refusals.keras": [
        ("lstm_relu", "Keras 3 LSTM", "keras", line("lstm", 2, 2), "refused: activation='relu'", None),
        ("gru_hard_sigmoid", "Keras 3 GRU", "keras", line("gru", 2, 2),
         "refused: recurrent_activation='hard_sigmoid'", "lstm_relu"),
        ("rnn_elu", "Keras 3 SimpleRNN", "keras", LSTM_LINE.format(n=2, i=2, d="unidirectional", t="float32"),
         "refused: activation='elu'", "gru_hard_sigmoid"),
        ("lstm_backwards", "Keras 3 LSTM", "keras", line("lstm", 2, 2), "refused: go_backwards=True", "rnn_elu"),
        ("bi_reset_before", "Keras 3 Bidirectional(GRU)", "keras", line("gru", 2, 2, BI),
         "refused: a bidirectional GRU(reset_after=False)", None),
    ],
    "keras2_model.h5": [
        ("inner/lstm_a", "Keras 2 LSTM", "keras", line("lstm", 3, 2), "exact", None),
        ("inner/lstm_b", "Keras 2 LSTM", "keras", line("lstm", 3, 3), "exact", "inner/lstm_a"),
        ("bi_gru", "Keras 2 Bidirectional(GRU)", "keras", line("gru", 2, 3, BI), "exact", None),
        ("relu_rnn", "Keras 2 SimpleRNN", "keras", line("rnn_relu", 2, 2), "exact", None),
    ],
    "keras2_model_weights.h5": [
        ("inner/lstm_a", "Keras 2 LSTM (weights only)", "keras", line("lstm", 3, 2), "exact", None),
        ("inner/lstm_b", "Keras 2 LSTM (weights only)", "keras", line("lstm", 3, 3), "exact", None),
        ("bi_gru", "Keras 2 Bidirectional(GRU) (weights only)", "keras", line("gru", 2, 3, BI), "exact", None),
        ("relu_rnn", "Keras 2 SimpleRNN (weights only)", "keras", line("?", 2, 2), "needs: ", None),
    ],
    "keras2_cudnn.h5": [
        ("cudnn_lstm", "Keras 2 CuDNNLSTM", "torch", line("lstm", 3, 2), "exact", None),
        ("bi_cudnn_gru", "Keras 2 Bidirectional(CuDNNGRU)", "torch", line("gru", 3, 3, BI), "exact", "cudnn_lstm"),
    ],
    "keras2_cudnn_weights.h5": [
        ("cudnn_lstm", "Keras 2 CuDNNLSTM (weights only)", "torch", line("lstm", 3, 2), "exact", None),
        ("bi_cudnn_gru", "Keras 2 Bidirectional(CuDNNGRU) (weights only)", "torch", line("gru", 3, 3, BI), "exact",
         None),
    ],
    "keras2_cudnn.keras": [
        ("cudnn_lstm", "Keras 2 CuDNNLSTM", "torch", line("lstm", 3, 2), "exact", None),
        ("bi_cudnn_gru", "Keras 2 Bidirectional(CuDNNGRU)", "torch", line("gru", 3, 3, BI), "exact", "cudnn_lstm"),
    ],
}

#: what a weights-only file cannot tell, answered as the model that wrote it says
HINTS: dict[tuple[str, str], dict[str, str]] = {
    ("keras3_functional.weights.h5", "relu_rnn"): {"rnn_mode": "rnn_relu"},
    ("keras2_model_weights.h5", "relu_rnn"): {"rnn_mode": "rnn_relu"},
}

def load_expected(stem: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{stem}.expected.npz") as data:
        arrays = {name: data[name] for name in data.files if name != "meta"}
        return json.loads(str(data["meta"])), arrays


def expected_for(file: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    stem = next(stem for stem in ("keras3_functional", "keras3_bidirectional_stack", "keras3_float64", "keras2_model",
                                  "keras2_cudnn") if file.startswith(stem))
    return load_expected(stem)


# ---- what is found ---------------------------------------------------------------------------------
def test_the_golden_files_are_there_and_small() -> None:
    files = sorted(path.name for path in GOLDEN.iterdir() if not path.name.endswith(".expected.npz"))
    assert files == sorted(FOUND)
    assert sum(path.stat().st_size for path in GOLDEN.iterdir()) < 600_000


@pytest.mark.parametrize("file", sorted(FOUND))
def test_every_rnn_is_found_with_its_configuration(file: str) -> None:
    found = read_file(GOLDEN / file)
    assert [(item.name, item.source, item.fmt, item.describe(), item.feeds_from) for item in found] == [
        (name, source, fmt, line, feeds) for name, source, fmt, line, _, feeds in FOUND[file]]
    for item, (*_, conversion, _) in zip(found, FOUND[file]):
        assert item.conversion().startswith(conversion), (item.name, item.conversion())


# ---- what they compute -------------------------------------------------------------------------------------
CASES = [(file, name) for file, entries in FOUND.items() if not file.startswith("keras3_refusals")
         for name, *_ in entries]


@pytest.mark.parametrize("file,name", CASES, ids=[f"{file}:{name}" for file, name in CASES])
def test_each_rnn_computes_what_keras_computed(file: str, name: str) -> None:
    meta, arrays = expected_for(file)
    found = {item.name: item for item in read_file(GOLDEN / file)}[name].with_hints(**HINTS.get((file, name), {}))
    mine = rnn_arrays(arrays, name)
    if meta["rnns"][name]["reset_before"]:
        run_reset_before(found, mine, arrays["lengths"])
    else:
        run_like_keras(found, mine, arrays["lengths"], meta["rnns"][name]["merge_mode"])


@pytest.mark.parametrize("file", ["keras3_bidirectional_stack.keras", "keras2_model.h5", "keras2_model_weights.h5"])
def test_consecutive_layers_stack_into_one_network(file: str) -> None:
    meta, arrays = expected_for(file)
    (first, second), = meta["stacks"]
    found = {item.name: item for item in read_file(GOLDEN / file)}
    stacked = stack([found[first], found[second]])
    config = stacked.config
    assert (config.num_layers, stacked.fmt) == (2, "torch")
    x = arrays[f"{first}/x"]
    d, n = config.num_directions, config.num_units
    zeros = np.zeros((x.shape[0], 2 * d, n), x.dtype)
    out = cudnn_rnn.cudnn_rnn_v3(x, zeros, zeros if config.has_cell else None, stacked.to_params().value,
                                 arrays["lengths"], rnn_mode=config.rnn_mode, direction=config.direction,
                                 is_training=False, time_major=False)
    assert relative_error(out.output, arrays[f"{second}/output"]) <= 1e-5
    assert relative_error(out.output_h[:, d:], arrays[f"{second}/h"]) <= 1e-5


@pytest.mark.parametrize("file", ["keras2_cudnn.h5", "keras2_cudnn_weights.h5", "keras2_cudnn.keras"])
def test_cudnn_layers_give_the_params_they_hand_to_cudnn(file: str) -> None:
    """CuDNNLSTM / CuDNNGRU: our params are bit for bit what the layer passes to CudnnRNNV3 (per direction)."""
    _, arrays = load_expected("keras2_cudnn")
    for found in read_file(GOLDEN / file):
        config = found.config
        params = found.to_params().value
        torch_tensors = to_format("torch", params, config).value
        one_direction = RNNConfig(config.rnn_mode, 1, config.num_units, config.input_size)
        for direction, suffix in enumerate(("", "_reverse")[:config.num_directions]):
            mine = {name[:-len(suffix)] if suffix else name: value for name, value in torch_tensors.items()
                    if name.endswith("_reverse") == bool(suffix)}
            ours = from_format("torch", mine, one_direction).value
            assert np.array_equal(ours, arrays[f"{found.name}/cudnn_params/{direction}"]), (found.name, direction)


# ---- notes, questions and refusals -------------------------------------------------------------------------------
def by_name(file: str) -> dict[str, FoundRNN]:
    return {item.name: item for item in read_file(GOLDEN / file)}


def test_a_reset_before_gru_is_exact_in_gru_block_cell_and_only_approximate_in_cudnn() -> None:
    found = by_name("keras3_float64.keras")["reset_before"]
    assert any("reset-before GRU" in note and "'gru_block_cell'" in note and "mygrad" in note for note in found.notes)
    with pytest.raises(InexactConversionError, match="reset-before GRU"):
        found.to_params()
    converted = found.to_params(allow_approximation=True)
    assert converted.approximations and converted.value.dtype == np.float64


def test_notes_say_what_differs_from_keras() -> None:
    notes = {name: item.notes for name, item in by_name("keras3_float64.keras").items()}
    assert notes["tanh_no_bias"] == ("use_bias=False: zero biases are used, the same function",)
    assert notes["bi_sum"] == ("merge_mode='sum': Keras adds the two directions' outputs; cuDNN returns them side "
                               "by side [forward | backward], so add the two halves of cuDNN's output",)
    assert by_name("keras2_model.h5")["bi_gru"].notes[0].startswith("merge_mode='ave': Keras averages")
    assert by_name("keras2_cudnn.h5")["cudnn_lstm"].notes == (
        "a CuDNNLSTM keeps cuDNN's own matrices and both biases: read exactly, in the 'torch' format",)
    weights_only = by_name("keras3_functional.weights.h5")
    assert weights_only["encoder"].notes == ("the file holds weights only: activation='tanh', "
                                             "recurrent_activation='sigmoid', go_backwards=False assumed "
                                             "(Keras's defaults)",)


def test_a_weights_only_simple_rnn_asks_for_its_activation() -> None:
    found = by_name("keras3_functional.weights.h5")["relu_rnn"]
    with pytest.raises(ValueError, match="pass rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'"):
        found.to_params()
    with pytest.raises(ValueError, match="not possible"):
        found.with_hints(rnn_mode="lstm")
    assert found.with_hints(rnn_mode="rnn_tanh").conversion() == "exact"


REFUSALS = {
    "lstm_relu": "activation='relu': cuDNN's LSTM computes tanh there; keep this layer in Keras, or retrain it with "
                 "activation='tanh'",
    "gru_hard_sigmoid": "recurrent_activation='hard_sigmoid': cuDNN's GRU computes sigmoid there; keep this layer in "
                        "Keras, or retrain it with recurrent_activation='sigmoid'",
    "rnn_elu": "activation='elu': cuDNN's simple RNN computes tanh or relu only; keep this layer in Keras, or retrain "
               "it with activation='tanh' or 'relu'",
    "lstm_backwards": "go_backwards=True: cuDNN reads a sequence backwards only as the second direction of a "
                      "bidirectional RNN; keep this layer in Keras, or wrap it in Bidirectional",
    "bi_reset_before": "a bidirectional GRU(reset_after=False) is two reset-before GRUs, which cuDNN cannot run and "
                       "the 'gru_block_cell' format holds one direction at a time",
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_what_cudnn_cannot_compute_is_refused_by_name(name: str) -> None:
    found = by_name("keras3_refusals.keras")[name]
    assert found.refusal == REFUSALS[name]
    assert found.conversion() == f"refused: {REFUSALS[name]}"
    with pytest.raises(ValueError, match=f"^{name} \\(Keras 3 [A-Za-z()]+\\): "):
        found.to_params()


def test_stacking_refuses_layers_that_do_not_chain() -> None:
    found = by_name("keras3_functional.keras")
    with pytest.raises(ValueError, match="cannot stack bi_gru on encoder: rnn_mode is 'gru'"):
        stack([found["encoder"], found["bi_gru"]])


# ---- broken and hostile files -----------------------------------------------------------------------------------
def rewrite(src: Path, dst: Path, replace: dict[str, bytes | None], compression: int = zipfile.ZIP_STORED) -> Path:
    """A copy of the archive ``src`` with members replaced (None: removed)."""
    with zipfile.ZipFile(src) as archive, zipfile.ZipFile(dst, "w", compression) as out:
        for name in archive.namelist():
            data = replace.get(name, archive.read(name)) if name in replace else archive.read(name)
            if data is not None:
                out.writestr(name, data)
        for name, data in replace.items():
            if name not in archive.namelist() and data is not None:
                out.writestr(name, data)
    return dst


def declare_size(path: Path, member: str, size: int) -> None:
    """Patch the uncompressed size a zip declares for ``member`` (local and central headers)."""
    data = bytearray(path.read_bytes())
    encoded = member.encode()
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        name_offset = 30 if signature == b"PK\x03\x04" else 46
        start = 0
        while (start := data.find(signature, start)) >= 0:
            length = struct.unpack_from("<H", data, start + (26 if signature == b"PK\x03\x04" else 28))[0]
            if bytes(data[start + name_offset:start + name_offset + length]) == encoded:
                struct.pack_into("<I", data, start + offset, size)
            start += 4
    path.write_bytes(bytes(data))


def test_a_keras_archive_renamed_npz_is_read_as_keras(tmp_path: Path) -> None:
    renamed = shutil.copy(GOLDEN / "keras3_functional.keras", tmp_path / "model.npz")
    assert [(f.name, f.source) for f in read_file(renamed)] == [(n, s) for n, s, *_ in FOUND["keras3_functional.keras"]]


def test_a_deflated_archive_reads_the_same(tmp_path: Path) -> None:
    path = rewrite(GOLDEN / "keras3_functional.keras", tmp_path / "deflated.keras", {}, zipfile.ZIP_DEFLATED)
    for ours, theirs in zip(read_file(path), read_file(GOLDEN / "keras3_functional.keras")):
        assert ours.describe() == theirs.describe()
        assert np.array_equal(ours.to_params().value, theirs.to_params().value)


def test_a_truncated_keras_archive(tmp_path: Path) -> None:
    data = (GOLDEN / "keras3_functional.keras").read_bytes()
    (tmp_path / "cut.keras").write_bytes(data[:len(data) // 2])
    assert "a zip archive without its central directory" in read_refusal(tmp_path / "cut.keras")


def test_a_truncated_h5(tmp_path: Path) -> None:
    data = (GOLDEN / "keras2_model.h5").read_bytes()
    (tmp_path / "cut.h5").write_bytes(data[:len(data) // 2])
    assert "not a readable HDF5 file, it may be truncated" in read_refusal(tmp_path / "cut.h5")


def test_a_truncated_weights_member(tmp_path: Path) -> None:
    with zipfile.ZipFile(GOLDEN / "keras3_functional.keras") as archive:
        weights = archive.read("model.weights.h5")
    path = rewrite(GOLDEN / "keras3_functional.keras", tmp_path / "m.keras", {"model.weights.h5": weights[:5000]})
    assert "model.weights.h5: not a readable HDF5 file, it may be truncated" in read_refusal(path)


def test_a_bomb_sized_weights_member_is_refused_unread(tmp_path: Path) -> None:
    path = rewrite(GOLDEN / "keras3_functional.keras", tmp_path / "bomb.keras", {}, zipfile.ZIP_DEFLATED)
    declare_size(path, "model.weights.h5", 0xFFFF0000)
    assert ("zip member 'model.weights.h5' declares 4294901760 bytes from" in read_refusal(path)
            and "compressed bytes, more than deflate can expand (a decompression bomb)" in read_refusal(path))


def test_a_stored_member_must_declare_its_stored_size(tmp_path: Path) -> None:
    path = shutil.copy(GOLDEN / "keras3_functional.keras", tmp_path / "lie.keras")
    declare_size(Path(path), "config.json", 10 ** 9)
    assert "member 'config.json' declares 1000000000 bytes" in read_refusal(Path(path))


def test_a_member_larger_than_memory_allows_says_to_extract_it(monkeypatch) -> None:
    monkeypatch.setattr(_keras_file, "MAX_MEMBER_BYTES", 1000)
    assert "more than 1000 read in memory; extract it and read the extracted file" in read_refusal(
        GOLDEN / "keras3_functional.keras")


def test_a_config_that_is_not_json(tmp_path: Path) -> None:
    path = rewrite(GOLDEN / "keras3_functional.keras", tmp_path / "m.keras", {"config.json": b"{not json"})
    assert "config.json is not JSON (JSONDecodeError: Expecting property name" in read_refusal(path)


def keras3_config(file: str) -> dict[str, Any]:
    with zipfile.ZipFile(GOLDEN / file) as archive:
        return json.loads(archive.read("config.json"))


def test_a_config_listing_a_layer_without_weights(tmp_path: Path) -> None:
    config = keras3_config("keras3_bidirectional_stack.keras")
    ghost = json.loads(json.dumps(config["config"]["layers"][-1]["config"]["layer"]))
    ghost["config"]["name"] = "ghost"
    config["config"]["layers"].append(ghost)
    path = rewrite(GOLDEN / "keras3_bidirectional_stack.keras", tmp_path / "m.keras",
                   {"config.json": json.dumps(config).encode()})
    assert read_refusal(path).endswith("model.weights.h5: the config lists layer 'ghost' (LSTM) but no weights of it "
                                       "are stored; re-save the model after building it")


def with_config(tmp_path: Path, config: dict[str, Any]) -> Path:
    replaced = {"config.json": json.dumps(config).encode()}
    return rewrite(GOLDEN / "keras3_functional.keras", tmp_path / "m.keras", replaced)


def test_a_config_disagreeing_with_the_weights(tmp_path: Path) -> None:
    config = keras3_config("keras3_functional.keras")
    encoder = next(layer for layer in config["config"]["layers"] if layer["class_name"] == "LSTM")
    encoder["config"]["units"] = 5
    path = with_config(tmp_path, config)
    assert ("layer 'encoder' (LSTM): its config says units=5 but its recurrent_kernel has shape (4, 16)"
            in read_refusal(path))


def test_a_config_of_the_wrong_structure(tmp_path: Path) -> None:
    config = keras3_config("keras3_functional.keras")
    config["config"]["layers"][3]["config"]["name"] = 7
    assert ("config.json is not a Keras model config this reader understands (ValueError: a layer of class"
            in read_refusal(with_config(tmp_path, config)))


def test_a_legacy_model_config_listing_a_layer_without_weights(tmp_path: Path) -> None:
    path = Path(shutil.copy(GOLDEN / "keras2_cudnn.h5", tmp_path / "m.h5"))
    with h5py.File(path, "r+") as file:
        config = json.loads(file.attrs["model_config"])
        config["config"]["layers"][1]["config"]["name"] = "renamed"
        file.attrs["model_config"] = json.dumps(config)
    assert read_refusal(path).endswith("the model config lists layer 'renamed' (CuDNNLSTM) but no weights of it are "
                                  "stored; re-save the model after building it")


def test_a_legacy_model_config_that_is_not_json(tmp_path: Path) -> None:
    path = Path(shutil.copy(GOLDEN / "keras2_cudnn.h5", tmp_path / "m.h5"))
    with h5py.File(path, "r+") as file:
        file.attrs["model_config"] = "{'class_name': 'Sequential'"
    assert "the model_config attribute is not JSON (JSONDecodeError: " in read_refusal(path)


def test_a_legacy_weight_that_is_listed_but_not_stored(tmp_path: Path) -> None:
    path = Path(shutil.copy(GOLDEN / "keras2_cudnn.h5", tmp_path / "m.h5"))
    with h5py.File(path, "r+") as file:
        del file["model_weights/cudnn_lstm/cudnn_lstm/bias:0"]
    assert read_refusal(path).endswith("layer 'cudnn_lstm' lists weight 'cudnn_lstm/bias:0', which is not stored")


@pytest.fixture
def short_read_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's time bound on a small file's read shrunk to 1 s, so that a read libhdf5 loops on ends soon."""
    monkeypatch.setattr(_child, "READ_SECONDS", 1.0)


def looping_heap(hdf5: bytes) -> bytes:
    """An HDF5 file whose (first) global heap has its free-space entry's size made 0.

    libhdf5 steps through a global heap by the objects' sizes, so this entry would keep it in place forever.
    """
    data = bytearray(hdf5)
    position = data.find(b"GCOL") + 16
    while struct.unpack_from("<H", data, position)[0] != 0:  # to the free-space entry, index 0
        position += 16 + -(-struct.unpack_from("<Q", data, position + 8)[0] // 8) * 8
    struct.pack_into("<Q", data, position + 8, 0)
    return bytes(data)


def test_a_file_that_libhdf5_loops_on_is_a_file_error(tmp_path: Path, short_read_bound: None) -> None:
    """A global heap that never ends, in a legacy .h5 and in a .keras archive's weights: the child's time bound
    ends the read, and the file is refused by name."""
    (tmp_path / "loop.h5").write_bytes(looping_heap((GOLDEN / "keras2_cudnn.h5").read_bytes()))
    with zipfile.ZipFile(GOLDEN / "keras3_functional.keras") as archive:
        weights = looping_heap(archive.read("model.weights.h5"))
    archived = rewrite(GOLDEN / "keras3_functional.keras", tmp_path / "loop.keras", {"model.weights.h5": weights})
    for path in (tmp_path / "loop.h5", archived):
        assert ("reading it did not finish in 1 s: libhdf5 loops on this file, which is corrupt"
                in read_refusal(path)), path


def crashing_attribute(tmp_path: Path) -> Path:
    """keras2_model.h5 with its keras_version attribute's variable-length type made one libhdf5 crashes on."""
    data = bytearray((GOLDEN / "keras2_model.h5").read_bytes())
    vlen_string = data.find(b"keras_version\x00\x00\x00\x19\x01") + 17  # the type's bit field: a string
    data[vlen_string] = 0x1B  # an unknown kind of variable-length type
    (tmp_path / "crash.h5").write_bytes(bytes(data))
    return tmp_path / "crash.h5"


def test_a_file_that_crashes_libhdf5_is_a_file_error(tmp_path: Path) -> None:
    assert "libhdf5 crashed reading it (exit code -" in read_refusal(crashing_attribute(tmp_path))


def test_a_damaged_datatype_is_a_file_error_not_a_type_error(tmp_path: Path) -> None:
    """h5py raises TypeError for a string type of unknown encoding; that is the file's fault."""
    data = bytearray((GOLDEN / "keras2_model_weights.h5").read_bytes())
    float32 = data.find(bytes.fromhex("11201f0004000000"))  # a datatype message: IEEE float32, little-endian
    data[float32] = 0x43  # now a string type whose bit field names encoding 2, which does not exist
    (tmp_path / "m.h5").write_bytes(bytes(data))
    assert "a damaged HDF5 file (TypeError: Unknown string encoding (value 2))" in read_refusal(tmp_path / "m.h5")


def absurd_weights(path: Path) -> Path:
    """A Keras 3 weights file whose LSTM declares [10**6, 4*10**6] kernels and stores nothing."""
    with h5py.File(path, "w") as file:
        variables = file.create_group("layers/lstm/cell/vars")
        for index in ("0", "1"):
            variables.create_dataset(index, shape=(10 ** 6, 4 * 10 ** 6), dtype="f4", chunks=(1, 64))
        variables.create_dataset("2", shape=(4 * 10 ** 6,), dtype="f4", chunks=(64,))
    return path


def test_an_absurd_declared_shape_is_refused_before_reading(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(_keras_file, "run_isolated", lambda path, work: work())  # read right here
    path = absurd_weights(tmp_path / "absurd.weights.h5")
    tracemalloc.start()
    try:
        text = read_refusal(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ("tensor '/layers/lstm/cell/vars/0' declares shape (1000000, 4000000) (16000000000000 bytes) but the file "
            "stores only 0 bytes for it: the file is truncated or corrupt") in text
    assert peak < 50 * 2 ** 20


def test_an_absurd_declared_shape_inside_an_archive(tmp_path: Path) -> None:
    weights = absurd_weights(tmp_path / "w.h5").read_bytes()
    config = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "LSTM", "config": {"name": "lstm", "units": 10 ** 6}}]}}
    path = rewrite(GOLDEN / "keras3_functional.keras", tmp_path / "m.keras",
                   {"model.weights.h5": weights, "config.json": json.dumps(config).encode()})
    assert "tensor 'model.weights.h5: /layers/lstm/cell/vars/0' declares shape (1000000, 4000000)" in read_refusal(path)


def test_links_to_other_files_are_not_followed(tmp_path: Path) -> None:
    path = Path(shutil.copy(GOLDEN / "keras3_functional.weights.h5", tmp_path / "m.weights.h5"))
    with h5py.File(path, "r+") as file:
        del file["layers/lstm/cell/vars/0"]
        file["layers/lstm/cell/vars/0"] = h5py.ExternalLink(str(tmp_path / "elsewhere.h5"), "/data")
    assert "/layers/lstm/cell/vars/0 is a link to" in read_refusal(path)
    assert "which is not followed" in read_refusal(path)


def test_weights_of_a_dtype_cudnn_has_no_params_for(tmp_path: Path) -> None:
    path = Path(shutil.copy(GOLDEN / "keras3_functional.weights.h5", tmp_path / "m.weights.h5"))
    with h5py.File(path, "r+") as file:
        for index in ("0", "1", "2"):
            data = file[f"layers/lstm/cell/vars/{index}"][()]
            del file[f"layers/lstm/cell/vars/{index}"]
            file[f"layers/lstm/cell/vars/{index}"] = data.astype(np.int32)
    found = {item.name: item for item in read_file(path)}["encoder"]
    assert found.refusal == ("its weights are 'int32'; cuDNN params are one of ('float16', 'float32', 'float64') or "
                             "bfloat16 (read as float32): cast the model's weights first")


def test_layer_names_are_shown_without_terminal_escapes(tmp_path: Path) -> None:
    hostile = "enc\x1b[31m\nx"
    with zipfile.ZipFile(GOLDEN / "keras3_functional.keras") as archive:
        (tmp_path / "w.h5").write_bytes(archive.read("model.weights.h5"))
        config = archive.read("config.json").decode()
    with h5py.File(tmp_path / "w.h5", "r+") as file:
        file["layers/lstm/vars"].attrs["name"] = hostile
    config = config.replace('"encoder"', json.dumps(hostile))
    path = rewrite(GOLDEN / "keras3_functional.keras", tmp_path / "m.keras",
                   {"config.json": config.encode(), "model.weights.h5": (tmp_path / "w.h5").read_bytes()})
    found = read_file(path)
    assert [(item.name, item.feeds_from) for item in found] == [("enc x", None), ("bi_gru", "enc x"),
                                                                ("relu_rnn", "bi_gru")]


def test_an_hdf5_file_that_is_not_keras(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "data.h5", "w") as file:
        file["images"] = np.zeros((2, 2))
    assert read_refusal(tmp_path / "data.h5").endswith("an HDF5 file that is neither a Keras model nor a Keras weights "
                                                  "file (it holds ['images'])")


def test_a_keras_file_without_rnns(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "dense.weights.h5", "w") as file:
        file["layers/dense/vars/0"] = np.zeros((2, 3), np.float32)
        file["layers/dense/vars/1"] = np.zeros(3, np.float32)
    assert read_refusal(tmp_path / "dense.weights.h5").endswith("holds no LSTM, GRU or simple RNN")


def test_pytorch_options_are_refused_for_keras_files() -> None:
    assert read_refusal(GOLDEN / "keras2_model.h5", prefix="rnn.").endswith(
        "prefix= applies to PyTorch state_dicts in torch.save and safetensors files (the key prefix of the RNN in a "
        "parent module), not to an HDF5 file "
        "(Keras .weights.h5 or legacy Keras 2 .h5 model); a Keras file names its RNNs by layer: pick one by its name "
        "with names=[NAME] (the names are listed by cudnn-rnn inspect)")


def names_in_golden_file(file: str) -> list[str]:
    return [item.name for item in read_file(GOLDEN / file)]


def test_a_daemonic_process_reads_too() -> None:
    """A pool worker, which multiprocessing lets start no processes of its own, reads in its child interpreter.

    The worker is spawned (a fresh interpreter that imports this module): a fork of this process, where JAX
    may have threads running, could deadlock.
    """
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.map(names_in_golden_file, ["keras2_model.h5"]) == [[n for n, *_ in FOUND["keras2_model.h5"]]]


def test_the_weights_member_of_an_archive_read_alone(tmp_path: Path) -> None:
    """model.weights.h5 without config.json: what the shapes tell, and a bidirectional reset-before GRU refused."""
    with zipfile.ZipFile(GOLDEN / "keras3_refusals.keras") as archive:
        (tmp_path / "model.weights.h5").write_bytes(archive.read("model.weights.h5"))
    found = {item.name: item for item in read_file(tmp_path / "model.weights.h5")}
    assert sorted(found) == sorted(REFUSALS)
    assert found["bi_reset_before"].source == "Keras 3 Bidirectional(GRU) (weights only)"
    assert found["bi_reset_before"].conversion() == f"refused: {REFUSALS['bi_reset_before']}"
    assert found["lstm_relu"].conversion() == "exact"  # its activation is not in the weights: assumed tanh, and said
    assert "activation='tanh'" in found["lstm_relu"].notes[0]
