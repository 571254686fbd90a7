"""export_keras against live Keras 3: the files load as they are and compute what cudnn_rnn_v3 computes.

* ``.keras``: ``keras.saving.load_model(path)`` (no custom objects, safe_mode on) runs like
  ``cudnn_rnn_v3`` (NumPy backend, is_training=False, zero initial state) on the same input, every
  step of a full batch, and the valid steps (t < length) of a ragged batch, which Keras masks when
  the loaded model is called with ``mask=`` (padding is never compared: a unidirectional Keras
  layer repeats its last valid output there, cuDNN writes zeros).
* ``.weights.h5``: ``load_weights`` into the same architecture built with Keras's own layers.
* Keras writes the same files back: the model loaded and saved again gives the same config.json
  (Keras adds only ``shared_object_id``), the same zip members and the same weights, byte for byte.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
keras = pytest.importorskip("keras")

import cudnn_rnn  # noqa: E402
from convert_testing import random_params, relative_error, rng_for  # noqa: E402
from cudnn_rnn import RNNConfig  # noqa: E402
from cudnn_rnn.convert import to_format  # noqa: E402
from cudnn_rnn.convert.keras_export import KERAS_VERSION, export_keras  # noqa: E402
from keras_testing import TOLERANCE  # noqa: E402

# calling the loaded model with mask= warns that the model's own output carries no mask; its layers see it
pytestmark = [pytest.mark.oracle,
              pytest.mark.filterwarnings("ignore:.*does not support masking and will therefore destroy the mask")]

UNI, BI = "unidirectional", "bidirectional"
#: float16 / bfloat16 compute in float32 here and in their own precision in Keras
LOW_PRECISION = {"float16": 5e-3, "bfloat16": 3e-2}

#: rnn_mode -> (Keras layer class, its arguments)
KERAS_LAYERS: dict[str, tuple[str, dict[str, Any]]] = {
    "lstm": ("LSTM", {}), "gru": ("GRU", {"reset_after": True}),
    "rnn_tanh": ("SimpleRNN", {"activation": "tanh"}), "rnn_relu": ("SimpleRNN", {"activation": "relu"})}

#: (rnn_mode, num_layers, direction, dtype, input_mode)
CASES = [
    *[(mode, 1, UNI, "float32", "linear_input") for mode in KERAS_LAYERS],
    ("lstm", 2, BI, "float32", "linear_input"),
    ("gru", 2, BI, "float32", "linear_input"),
    ("rnn_tanh", 1, BI, "float32", "linear_input"),
    ("rnn_relu", 2, UNI, "float32", "linear_input"),
    ("gru", 2, UNI, "float64", "linear_input"),
    ("lstm", 1, UNI, "float16", "linear_input"),
    ("lstm", 1, BI, "float32", "skip_input"),
]


def make(mode: str, layers: int, direction: str, dtype: str, input_mode: str) -> tuple[RNNConfig, np.ndarray]:
    units = 4
    config = RNNConfig(mode, layers, units, units if input_mode == "skip_input" else 3, direction=direction,
                       dtype=dtype, input_mode=input_mode)
    return config, random_params(config, rng_for("export_keras_live", mode, layers, direction, dtype,
                                                 input_mode)).astype(dtype)


def ragged_batch(config: RNNConfig, seed: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [B, T, I] (batch-major, as Keras takes it), lengths [B] with a full and a short sequence, and
    the mask [B, T] of the valid steps."""
    rng = rng_for("batch", seed)
    steps = 6
    lengths = np.array([steps, 2, 5, 1, 3], np.int32)
    x = rng.uniform(-1, 1, (len(lengths), steps, config.input_size)).astype(config.dtype)
    return x, lengths, np.arange(steps)[None, :] < lengths[:, None]


def ours(config: RNNConfig, params: np.ndarray, x_btf: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
    """cudnn_rnn_v3 on the time-major transpose of x, zero initial state: y [B, T, D*N]."""
    batch = x_btf.shape[0]
    zeros = np.zeros((config.num_pseudo_layers, batch, config.num_units), x_btf.dtype)
    out = cudnn_rnn.cudnn_rnn_v3(np.ascontiguousarray(np.swapaxes(x_btf, 0, 1)), zeros,
                                 zeros if config.has_cell else None, params, lengths, rnn_mode=config.rnn_mode,
                                 input_mode=config.input_mode, direction=config.direction, is_training=False)
    return np.swapaxes(np.asarray(out.output), 0, 1)


def compare(model: Any, config: RNNConfig, params: np.ndarray, tolerance: float) -> None:
    """The model, on a full batch and on a masked ragged one, against cudnn_rnn_v3 (valid steps only)."""
    x, lengths, mask = ragged_batch(config, repr(config))
    full = np.asarray(model(x), np.float64)
    assert full.shape == (x.shape[0], x.shape[1], config.num_directions * config.num_units)
    assert relative_error(full, ours(config, params, x, None)) <= tolerance, "full batch"
    masked = np.asarray(model(x, mask=mask), np.float64)
    expected = ours(config, params, x, lengths)
    assert relative_error(masked[mask], expected[mask]) <= tolerance, "valid steps of the ragged batch"
    if config.num_directions == 2:  # the backward direction starts at each sequence's end: the mask reached it
        assert relative_error(full[mask], expected[mask]) > 2 * tolerance


def tolerance_of(dtype: str) -> float:
    return LOW_PRECISION.get(dtype) or TOLERANCE[dtype]


@pytest.mark.parametrize("mode, layers, direction, dtype, input_mode", CASES)
def test_load_model_runs_like_cudnn_rnn_v3(tmp_path: Path, mode: str, layers: int, direction: str, dtype: str,
                                            input_mode: str) -> None:
    config, params = make(mode, layers, direction, dtype, input_mode)
    export_keras(params, config, tmp_path / "model.keras")
    model = keras.saving.load_model(tmp_path / "model.keras")  # safe_mode=True, no custom objects
    assert [weight.dtype for weight in model.weights] == [dtype] * 3 * layers * config.num_directions
    compare(model, config, params, tolerance_of(dtype))


def keras_model(config: RNNConfig) -> Any:
    """The architecture built with Keras's layers, names left to Keras."""
    class_name, arguments = KERAS_LAYERS[config.rnn_mode]
    inputs = keras.Input(shape=(None, config.input_size), dtype=config.dtype)
    y = inputs
    for _ in range(config.num_layers):
        layer = getattr(keras.layers, class_name)(config.num_units, return_sequences=True, dtype=config.dtype,
                                                  **arguments)
        if config.num_directions == 2:
            layer = keras.layers.Bidirectional(layer, merge_mode="concat", dtype=config.dtype)
        y = layer(y)
    return keras.Model(inputs, y)


@pytest.mark.parametrize("mode, layers, direction, dtype", [
    ("lstm", 1, UNI, "float32"), ("gru", 2, BI, "float32"), ("rnn_relu", 2, BI, "float64"),
    ("rnn_tanh", 2, UNI, "float32")])
def test_the_weights_load_into_keras_own_model(tmp_path: Path, mode: str, layers: int, direction: str,
                                               dtype: str) -> None:
    config, params = make(mode, layers, direction, dtype, "linear_input")
    export_keras(params, config, tmp_path / "model.weights.h5")
    model = keras_model(config)
    model.load_weights(tmp_path / "model.weights.h5")
    expected = to_format("keras", params, config).value
    assert [np.asarray(weight).tobytes() for weight in model.get_weights()] == [
        expected[f"layer_{layer}/{side}/{field}"].tobytes() for layer in range(layers)
        for side in ("forward", "backward")[:config.num_directions] for field in ("kernel", "recurrent_kernel", "bias")]
    compare(model, config, params, TOLERANCE[dtype])


def without_shared_ids(value: Any) -> Any:
    """A config as Keras writes it, less the ids of objects that appear more than once (object identities)."""
    if isinstance(value, dict):
        return {key: without_shared_ids(item) for key, item in value.items() if key != "shared_object_id"}
    if isinstance(value, list):
        return [without_shared_ids(item) for item in value]
    return value


@pytest.mark.parametrize("mode, layers, direction, dtype", [("lstm", 2, BI, "float32"), ("gru", 2, UNI, "float64"),
                                                            ("rnn_relu", 1, BI, "float16")])
def test_keras_writes_back_the_same_files(tmp_path: Path, mode: str, layers: int, direction: str, dtype: str) -> None:
    assert keras.__version__ == KERAS_VERSION, "the files were verified against this Keras: verify them again"
    config, params = make(mode, layers, direction, dtype, "linear_input")
    export_keras(params, config, tmp_path / "ours.keras")
    export_keras(params, config, tmp_path / "ours.weights.h5")
    model = keras.saving.load_model(tmp_path / "ours.keras")
    model.save(tmp_path / "keras.keras")
    model.save_weights(tmp_path / "keras.weights.h5")
    archives = {}
    for name in ("ours", "keras"):
        with zipfile.ZipFile(tmp_path / f"{name}.keras") as archive:
            infos = archive.infolist()
            archives[name] = ([(info.filename, info.compress_type, info.external_attr, info.flag_bits)
                               for info in infos], [info.date_time for info in infos[:2]],
                              {info.filename: archive.read(info) for info in infos})
    (our_infos, our_dates, ours_), (their_infos, their_dates, theirs) = archives["ours"], archives["keras"]
    assert our_infos == their_infos and our_dates == their_dates == [(1980, 1, 1, 0, 0, 0)] * 2
    assert json.dumps(without_shared_ids(json.loads(theirs["config.json"]))) == ours_["config.json"].decode()
    assert list(json.loads(ours_["metadata.json"])) == list(json.loads(theirs["metadata.json"]))
    assert ours_["model.weights.h5"] == theirs["model.weights.h5"]
    assert (tmp_path / "ours.weights.h5").read_bytes() == (tmp_path / "keras.weights.h5").read_bytes()


def test_bfloat16_loads_and_runs(tmp_path: Path) -> None:
    config, params = make("gru", 1, BI, "bfloat16", "linear_input")
    export_keras(params, config, tmp_path / "model.keras")
    model = keras.saving.load_model(tmp_path / "model.keras")
    expected = to_format("keras", params, config).value
    assert [np.asarray(weight).tobytes() for weight in model.get_weights()] == [
        expected[f"layer_0/{side}/{field}"].tobytes() for side in ("forward", "backward")
        for field in ("kernel", "recurrent_kernel", "bias")]
    compare(model, config, params, LOW_PRECISION["bfloat16"])
