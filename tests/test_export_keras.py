"""export_keras without Keras: the files it writes, read back with ``read_file`` and h5py.

* Round trips: every mode, unidirectional and bidirectional, 1 and 2 layers, float16/32/64 and
  skip_input, through ``read_file`` on the ``.keras`` model and on the ``.weights.h5`` file, then
  ``stack``: the keras tensors come back bit for bit (LSTM and SimpleRNN keep only bW + bR), a
  GRU's params buffer too.
* The archive: its members, their order, ZIP_STORED, metadata.json, config.json; the weights
  store's every group, ``name`` attribute and dataset; bfloat16 as Keras stores it.
* Refusals: one line each, naming the argument, and nothing written.

tests/oracle/test_export_keras_live.py loads the files with Keras itself.
"""

from __future__ import annotations

import datetime
import json
import zipfile
from pathlib import Path
from typing import Any

import h5py
import ml_dtypes
import numpy as np
import pytest

from convert_testing import random_params, rng_for
from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import read_file, stack, to_format
from cudnn_rnn.convert.keras_export import ARCHIVE_MEMBERS, KERAS_VERSION, export_keras
from cudnn_rnn.convert.readers import FoundRNN

UNI, BI = "unidirectional", "bidirectional"

#: (rnn_mode, num_layers, direction, dtype, input_mode)
CASES = [
    ("lstm", 1, UNI, "float32", "linear_input"),
    ("gru", 1, UNI, "float32", "linear_input"),
    ("rnn_tanh", 1, UNI, "float32", "linear_input"),
    ("rnn_relu", 1, UNI, "float32", "linear_input"),
    ("lstm", 2, BI, "float32", "linear_input"),
    ("gru", 2, BI, "float64", "linear_input"),
    ("rnn_tanh", 2, BI, "float16", "linear_input"),
    ("rnn_relu", 2, UNI, "float64", "linear_input"),
    ("gru", 2, UNI, "float32", "skip_input"),
    ("lstm", 1, BI, "float64", "skip_input"),
]
#: rnn_mode -> the class read_file names
CLASSES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "SimpleRNN", "rnn_relu": "SimpleRNN"}


def make(mode: str, layers: int, direction: str, dtype: str = "float32", input_mode: str = "linear_input",
         units: int = 4) -> tuple[RNNConfig, np.ndarray]:
    input_size = units if input_mode == "skip_input" else 3
    config = RNNConfig(mode, layers, units, input_size, direction=direction, dtype=dtype, input_mode=input_mode)
    params = random_params(config, rng_for("export_keras", mode, layers, direction, dtype, input_mode))
    return config, params.astype(dtype)


def layer_names(config: RNNConfig) -> list[str]:
    stem = "bidirectional" if config.num_directions == 2 else {"lstm": "lstm", "gru": "gru"}.get(
        config.rnn_mode, "simple_rnn")
    return [stem if layer == 0 else f"{stem}_{layer}" for layer in range(config.num_layers)]


def assert_same_weights(found: list[FoundRNN], config: RNNConfig, params: np.ndarray) -> None:
    """``stack(found)`` holds what ``params`` held: the same keras tensors, bit for bit (a GRU: the same params)."""
    stacked = stack(found)
    back = stacked.to_params().value
    assert back.dtype == params.dtype and stacked.config.dtype == config.dtype
    expected = to_format("keras", params, config).value
    actual = to_format("keras", back, stacked.config).value
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype and actual[name].tobytes() == value.tobytes(), name
    if config.rnn_mode == "gru" and not config.skip_input:
        assert back.tobytes() == params.tobytes()


@pytest.mark.parametrize("mode, layers, direction, dtype, input_mode", CASES)
def test_the_model_reads_back_with_its_configuration(tmp_path: Path, mode: str, layers: int, direction: str,
                                                     dtype: str, input_mode: str) -> None:
    config, params = make(mode, layers, direction, dtype, input_mode)
    path = tmp_path / "model.keras"
    export_keras(params, config, path)
    found = read_file(path)
    names = layer_names(config)
    display = f"Bidirectional({CLASSES[mode]})" if direction == BI else CLASSES[mode]
    assert [(item.name, item.source, item.fmt, item.refusal, item.notes, item.feeds_from) for item in found] == [
        (name, f"Keras 3 {display}", "keras", None, (), names[index - 1] if index else None)
        for index, name in enumerate(names)]
    for layer, item in enumerate(found):
        assert item.complete, item.questions
        assert dict(item.fields) == {
            "num_layers": 1, "num_units": config.num_units, "input_size": config.layer_input_size(layer),
            "direction": direction, "num_proj": 0, "input_mode": "linear_input", "rnn_mode": mode, "dtype": dtype}
    assert_same_weights(found, config, params)


@pytest.mark.parametrize("mode, layers, direction, dtype, input_mode", CASES)
def test_the_weights_file_reads_back(tmp_path: Path, mode: str, layers: int, direction: str, dtype: str,
                                     input_mode: str) -> None:
    config, params = make(mode, layers, direction, dtype, input_mode)
    path = tmp_path / "model.weights.h5"
    export_keras(params, config, str(path))
    found = read_file(path)
    assert [item.name for item in found] == layer_names(config)
    assert all(item.source.endswith("(weights only)") and item.refusal is None for item in found)
    if mode.startswith("rnn_"):  # a SimpleRNN's weights do not say its activation
        assert all("rnn_mode" in item.questions for item in found)
        found = [item.with_hints(rnn_mode=mode) for item in found]
    assert_same_weights(found, config, params)


# ---- the archive --------------------------------------------------------------------------------------
def test_the_archive_holds_keras_members_stored_in_keras_order(tmp_path: Path) -> None:
    config, params = make("gru", 2, BI)
    before = datetime.datetime.now().replace(microsecond=0)
    export_keras(params, config, tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as archive:
        infos = archive.infolist()
        assert [info.filename for info in infos] == list(ARCHIVE_MEMBERS) == [
            "metadata.json", "config.json", "model.weights.h5"]
        assert [info.compress_type for info in infos] == [zipfile.ZIP_STORED] * 3
        assert [info.external_attr for info in infos] == [0o600 << 16] * 3  # as zipfile writes them for Keras
        metadata = json.loads(archive.read("metadata.json"))
        model = json.loads(archive.read("config.json"))
        member = archive.read("model.weights.h5")
    assert list(metadata) == ["keras_version", "date_saved"] and metadata["keras_version"] == KERAS_VERSION
    saved = datetime.datetime.strptime(metadata["date_saved"], "%Y-%m-%d@%H:%M:%S")
    assert before <= saved <= datetime.datetime.now()
    assert member.startswith(b"\x89HDF\r\n\x1a\n")
    export_keras(params, config, tmp_path / "m.weights.h5")
    (tmp_path / "member.h5").write_bytes(member)
    assert store_listing(tmp_path / "member.h5") == store_listing(tmp_path / "m.weights.h5")
    assert model["class_name"] == "Functional" and model["module"] == "keras.src.models.functional"


def test_the_config_chains_the_layers_as_keras_writes_them(tmp_path: Path) -> None:
    config, params = make("rnn_relu", 2, BI, "float64")
    export_keras(params, config, tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as archive:
        model = json.loads(archive.read("config.json"))
    body = model["config"]
    assert (body["name"], body["input_layers"], body["output_layers"]) == (
        "functional", ["input_layer", 0, 0], ["bidirectional_1", 0, 0])
    source, first, second = body["layers"]
    assert source["class_name"] == "InputLayer" and source["config"]["batch_shape"] == [None, None, 3]
    assert source["config"]["dtype"] == "float64"
    for entry, width, producer, rnn in ((first, 3, "input_layer", "simple_rnn"), (second, 8, "bidirectional",
                                                                                    "simple_rnn_1")):
        assert entry["class_name"] == "Bidirectional" and entry["config"]["merge_mode"] == "concat"
        assert entry["config"]["dtype"]["config"]["name"] == "float64"
        assert entry["build_config"] == {"input_shape": [None, None, width]}
        (node,) = entry["inbound_nodes"]
        assert node["args"][0]["config"] == {"shape": [None, None, width], "dtype": "float64",
                                             "keras_history": [producer, 0, 0]}
        assert node["kwargs"] == {"mask": None}
        for side, backwards in (("layer", False), ("backward_layer", True)):
            inner = entry["config"][side]
            assert inner["class_name"] == "SimpleRNN"
            assert inner["config"]["name"] == ("backward_" if backwards else "forward_") + rnn
            assert {key: inner["config"][key] for key in ("units", "activation", "go_backwards", "return_sequences",
                                                           "zero_output_for_mask")} == {
                "units": 4, "activation": "relu", "go_backwards": backwards, "return_sequences": True,
                "zero_output_for_mask": True}
            assert inner["config"]["recurrent_initializer"]["class_name"] == "Orthogonal"


def test_a_unidirectional_layer_is_called_like_keras_calls_it(tmp_path: Path) -> None:
    config, params = make("gru", 1, UNI)
    export_keras(params, config, tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as archive:
        _, gru = json.loads(archive.read("config.json"))["config"]["layers"]
    assert gru["name"] == gru["config"]["name"] == "gru"
    assert gru["inbound_nodes"][0]["kwargs"] == {"training": False, "mask": None}
    assert {key: gru["config"][key] for key in ("reset_after", "zero_output_for_mask", "recurrent_activation")} == {
        "reset_after": True, "zero_output_for_mask": False, "recurrent_activation": "sigmoid"}


# ---- the weights store ---------------------------------------------------------------------------------
def store_listing(path: Path) -> dict[str, Any]:
    """path -> the name attribute of a group, or (shape, dtype, attributes, bytes) of a dataset."""
    listing: dict[str, Any] = {}

    def visit(name: str, item: Any) -> None:
        attributes = {key: item.attrs[key] for key in item.attrs}
        if isinstance(item, h5py.Dataset):
            listing[name] = (item.shape, item.dtype.str, attributes, item[()].tobytes())
        else:
            listing[name] = attributes.get("name")

    with h5py.File(path, "r") as file:
        assert dict(file.attrs) == {}
        file.visititems(visit)
    return listing


def test_the_weights_sit_where_keras_keeps_them(tmp_path: Path) -> None:
    config, params = make("lstm", 2, BI)
    export_keras(params, config, tmp_path / "m.weights.h5")
    listing = store_listing(tmp_path / "m.weights.h5")
    weights = to_format("keras", params, config).value
    expected: dict[str, Any] = {"vars": "functional", "layers": None, "layers/input_layer": None,
                                "layers/input_layer/vars": "input_layer"}
    for layer, name in enumerate(("bidirectional", "bidirectional_1")):
        expected.update({f"layers/{name}": None, f"layers/{name}/vars": name})
        for side in ("forward", "backward"):
            group = f"layers/{name}/{side}_layer"
            expected.update({group: None, f"{group}/vars": f"{side}_lstm" + ("_1" if layer else ""),
                             f"{group}/cell": None, f"{group}/cell/vars": "lstm_cell"})
            for index, field in enumerate(("kernel", "recurrent_kernel", "bias")):
                value = weights[f"layer_{layer}/{side}/{field}"]
                expected[f"{group}/cell/vars/{index}"] = (value.shape, "<f4", {}, value.tobytes())
    assert listing == expected


def test_unidirectional_layers_keep_their_cell_under_their_own_name(tmp_path: Path) -> None:
    config, params = make("rnn_tanh", 2, UNI)
    export_keras(params, config, tmp_path / "m.weights.h5")
    listing = store_listing(tmp_path / "m.weights.h5")
    assert {path: name for path, name in listing.items() if path.endswith("vars")} == {
        "vars": "functional", "layers/input_layer/vars": "input_layer",
        "layers/simple_rnn/vars": "simple_rnn", "layers/simple_rnn/cell/vars": "simple_rnn_cell",
        "layers/simple_rnn_1/vars": "simple_rnn_1", "layers/simple_rnn_1/cell/vars": "simple_rnn_cell"}
    assert [listing[f"layers/simple_rnn_1/cell/vars/{index}"][0] for index in range(3)] == [(4, 4), (4, 4), (4,)]


def test_bfloat16_is_stored_as_keras_stores_it(tmp_path: Path) -> None:
    config, params = make("gru", 1, UNI, "bfloat16")
    assert params.dtype == np.dtype(ml_dtypes.bfloat16)
    export_keras(params, config, tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as archive:
        (tmp_path / "member.h5").write_bytes(archive.read("model.weights.h5"))
        _, gru = json.loads(archive.read("config.json"))["config"]["layers"]
    listing = store_listing(tmp_path / "member.h5")
    weights = to_format("keras", params, config).value
    for index, field in enumerate(("kernel", "recurrent_kernel", "bias")):
        value = weights[f"layer_0/forward/{field}"]
        assert listing[f"layers/gru/cell/vars/{index}"] == (value.shape, "|V2", {"dtype": "bfloat16"},
                                                              value.tobytes()), field
    assert gru["config"]["dtype"]["config"]["name"] == "bfloat16"
    assert gru["config"]["recurrent_initializer"]["class_name"] == "GlorotUniform"  # TF's QR has no bfloat16


def test_a_write_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "m.keras"
    path.write_bytes(b"old")
    config, params = make("lstm", 1, UNI)
    export_keras(params, config, path)
    assert zipfile.is_zipfile(path) and sorted(p.name for p in tmp_path.iterdir()) == ["m.keras"]


# ---- refusals -------------------------------------------------------------------------------------------
def refusal(error: type[Exception], params: Any, config: Any, path: Any) -> str:
    with pytest.raises(error) as caught:
        export_keras(params, config, path)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_a_projection_is_refused_as_the_keras_format_refuses_it(tmp_path: Path) -> None:
    config = RNNConfig("lstm", 1, 4, 3, num_proj=2)
    params = random_params(config, rng_for("projection"))
    message = refusal(ValueError, params, config, tmp_path / "m.keras")
    assert message.startswith("export_keras: format 'keras' cannot hold an LSTM projection (num_proj=2)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["m.h5", "m.onnx", "m.weights", "model.keras.zip", "m.KERAS"])
def test_another_ending_is_refused(tmp_path: Path, name: str) -> None:
    config, params = make("gru", 1, UNI)
    message = refusal(ValueError, params, config, tmp_path / name)
    assert message.startswith("path must end in '.keras' (the model (a Keras 3 archive)), '.weights.h5' (its "
                              "weights alone); got ")
    assert message.endswith(f"{str(tmp_path / name)!r}")
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_refused_naming_them(tmp_path: Path) -> None:
    config, params = make("lstm", 1, UNI)
    path = tmp_path / "m.keras"
    assert refusal(TypeError, params.astype(np.float64), config, path) == (
        "params.dtype must be config.dtype (float32); got float64")
    assert refusal(TypeError, params, "lstm", path) == "config must be a cudnn_rnn.RNNConfig; got str"
    assert refusal(TypeError, params, config, b"m.keras") == "path must be a str or os.PathLike[str]; got bytes"
    assert refusal(ValueError, params[:-1], config, path).startswith("params must be 1-D with ")
    assert list(tmp_path.iterdir()) == []


def test_a_weights_file_of_many_layers_reads_back_in_keras_order(tmp_path: Path) -> None:
    """HDF5 lists groups by name (lstm_10 before lstm_2); a weights file without a config is read in the order
    Keras numbered its layers, so twelve layers stack back into the same network."""
    config = RNNConfig("gru", 12, 3, 3)
    params = random_params(config, rng_for("twelve"))
    export_keras(params, config, tmp_path / "deep.weights.h5")
    found = read_file(tmp_path / "deep.weights.h5")
    assert [item.name for item in found] == ["gru"] + [f"gru_{index}" for index in range(1, 12)]
    assert np.array_equal(stack(found).to_params().value, params)


@pytest.mark.parametrize("ending", [".keras", ".weights.h5"])
def test_bfloat16_weights_read_back_as_float32_exactly(tmp_path: Path, ending: str) -> None:
    config = RNNConfig("gru", 2, 4, 3, direction="bidirectional", dtype="bfloat16")
    params = random_params(config, rng_for("bfloat16-back")).astype(ml_dtypes.bfloat16)
    export_keras(params, config, tmp_path / f"model{ending}")
    found = read_file(tmp_path / f"model{ending}")
    assert all("the tensors are bfloat16: read as float32, exactly" in item.notes for item in found)
    assert np.array_equal(stack(found).to_params().value, params.astype(np.float32))
