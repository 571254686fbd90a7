"""The Keras reader against live Keras 3 and tf_keras, on freshly drawn random models.

Each case builds a model with random layer kinds, sizes, directions, merge modes and biases,
sets random weights, saves it every way the framework offers (Keras 3: ``.keras``,
``.weights.h5`` and the legacy ``.h5``; tf_keras: legacy ``.h5``, ``save_weights`` ``.h5`` and
``.keras``), reads every file back with ``read_file`` and runs what was found through
``cudnn_rnn_v3`` (a reset-before GRU through ``gru_block_cell``) on a random ragged batch: outputs
and final states must equal the framework's own layers run with the same mask (float32, 1e-5).
Keras 2's CuDNN layers, which need a GPU to run, are compared through tf_keras's own conversion to
plain layers, and their params must be bit for bit the buffer the layer hands to ``CudnnRNNV3``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras  # noqa: E402  (the oracles: these tests must not run without them)
import tf_keras  # noqa: E402
from tf_keras.api._v1.keras import layers as v1_layers  # noqa: E402
from tf_keras.src.saving.legacy.hdf5_format import preprocess_weights_for_loading  # noqa: E402

from cudnn_rnn.config import RNNConfig  # noqa: E402
from cudnn_rnn.convert import from_format, to_format  # noqa: E402
from cudnn_rnn.convert.readers import read_file, stack  # noqa: E402
from rnn_testing import load_script, stable_seed  # noqa: E402
from keras_testing import rnn_arrays, run_like_keras, run_reset_before  # noqa: E402

pytestmark = pytest.mark.oracle
warnings.filterwarnings("ignore", message=".*HDF5 file.*")


make_keras_files = load_script("make_keras_files")

#: mode -> (layer class name, constructor arguments, what a weights-only file needs told)
KINDS: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "lstm": ("LSTM", {}, {}),
    "gru": ("GRU", {"reset_after": True}, {}),
    "gru_reset_before": ("GRU", {"reset_after": False}, {}),
    "rnn_tanh": ("SimpleRNN", {"activation": "tanh"}, {"rnn_mode": "rnn_tanh"}),
    "rnn_relu": ("SimpleRNN", {"activation": "relu"}, {"rnn_mode": "rnn_relu"}),
}


def random_batch(rng: np.random.Generator, features: int) -> tuple[np.ndarray, np.ndarray]:
    batch, steps = int(rng.integers(1, 5)), int(rng.integers(2, 7))
    lengths = [steps] + [int(rng.integers(1, steps + 1)) for _ in range(batch - 1)]
    rng.shuffle(lengths)
    return make_keras_files.ragged_input(rng, features, lengths=tuple(lengths))


def check_file(path: Path, record: Any, hints: dict[str, dict[str, str]], untold: tuple[str, ...] = ()) -> list:
    """Every RNN the framework ran is found in ``path`` and computes what the framework computed.

    ``untold``: reset-before GRUs without biases in a weights-only file, which cannot tell reset_after
    (the reader assumes Keras's default, reset_after=True, and says so).
    """
    found = {item.name: item for item in read_file(path)}
    assert sorted(found) == sorted(record.rnns), path.name
    for name, facts in record.rnns.items():
        item = found[name].with_hints(**hints.get(name, {}))
        if name in untold:
            assert any("does not tell reset_after" in note for note in item.notes), item.notes
            continue
        mine = rnn_arrays(record.arrays, name)
        if facts["reset_before"]:
            run_reset_before(item, mine, record.lengths)
        else:
            run_like_keras(item, mine, record.lengths, facts["merge_mode"])
    return [found[name] for name in record.rnns]


@pytest.mark.parametrize("first", list(KINDS))
def test_random_keras3_models_read_back_from_every_file(tmp_path: Path, first: str) -> None:
    """Two layers, the first of kind ``first``: a stackable pair, or any second kind."""
    rng = np.random.default_rng(stable_seed("keras3-read", first))
    width = int(rng.integers(1, 5))
    stacked = bool(rng.integers(2))
    modes = [first, first if stacked else str(rng.choice(list(KINDS)))]
    units = int(rng.integers(1, 6))
    bidirectional = bool(rng.integers(2))
    layers, specs, untold = [], [], ()
    for k, mode in enumerate(modes):
        class_name, extra, _ = KINDS[mode]
        two = bidirectional and mode != "gru_reset_before"
        last = k == len(modes) - 1
        merge = str(rng.choice(["concat", "sum", "ave", "mul"])) if two and last else "concat"
        size, name = units if stacked else int(rng.integers(1, 6)), f"rnn_{k}"
        use_bias = bool(rng.integers(2))
        layer = getattr(keras.layers, class_name)(size, return_sequences=True, use_bias=use_bias,
                                                  **extra, **({} if two else {"name": name}))
        if two:
            layer = keras.layers.Bidirectional(layer, merge_mode=merge, name=name)
        layers.append(layer)
        specs.append((f"rnn_{k}", layer, 2 if two else 1, merge, mode))
        untold += (name,) if mode == "gru_reset_before" and not use_bias else ()
    model = keras.Sequential([keras.Input((None, width)), keras.layers.Masking(), *layers])
    make_keras_files.randomise(model, rng)
    x, mask = random_batch(rng, width)
    record = make_keras_files.Recorder(mask)
    y = x
    for name, layer, directions, merge, mode in specs:
        y = record.run(name, layer, y, directions=directions, merge_mode=merge, has_cell=mode == "lstm",
                       reset_before=mode == "gru_reset_before")
    model.save(tmp_path / "m.keras")
    model.save_weights(tmp_path / "m.weights.h5")
    model.save(tmp_path / "m.h5")
    hints = {name: KINDS[mode][2] for name, *_, mode in specs}
    for path in (tmp_path / "m.keras", tmp_path / "m.h5"):
        found = check_file(path, record, {})
        assert found[1].feeds_from == "rnn_0", path.name
    check_file(tmp_path / "m.weights.h5", record, hints, untold)
    if stacked and first != "gru_reset_before":  # the pair as one 2-layer network computes the second's output
        whole = stack(read_file(tmp_path / "m.keras"))
        first_input = rnn_arrays(record.arrays, "rnn_0")["x"]
        second = {**rnn_arrays(record.arrays, "rnn_1"), "x": first_input}
        second.pop("h", None)
        run_like_keras(whole.with_hints(), second, record.lengths, record.rnns["rnn_1"]["merge_mode"])
        assert whole.config.num_layers == 2


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_random_cudnn_layers_of_keras2_read_back_exactly(tmp_path: Path, mode: str, bidirectional: bool) -> None:
    rng = np.random.default_rng(stable_seed("keras2-cudnn-read", mode, bidirectional))
    width, units = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    cudnn_class, plain, extra = {"lstm": (v1_layers.CuDNNLSTM, tf_keras.layers.LSTM, {}),
                                 "gru": (v1_layers.CuDNNGRU, tf_keras.layers.GRU, {"reset_after": True})}[mode]
    name = "cudnn_rnn_layer"
    cudnn = cudnn_class(units, return_sequences=True, **({} if bidirectional else {"name": name}))
    twin = plain(units, return_sequences=True, **extra)
    if bidirectional:
        cudnn, twin = tf_keras.layers.Bidirectional(cudnn, name=name), tf_keras.layers.Bidirectional(twin)
    model = tf_keras.Sequential([tf_keras.layers.InputLayer((None, width)), cudnn])
    make_keras_files.randomise(model, rng)
    twin.build((None, None, width))
    twin.set_weights(preprocess_weights_for_loading(twin, cudnn.get_weights()))
    x, mask = random_batch(rng, width)
    captured = make_keras_files.capture_cudnn_params(lambda: model(x))
    record = make_keras_files.Recorder(mask)
    record.run(name, cudnn, x, directions=2 if bidirectional else 1, has_cell=mode == "lstm",
               keras_layer=twin)
    model.save(tmp_path / "m.h5")
    model.save_weights(tmp_path / "w.h5")
    model.save(tmp_path / "m.keras")
    for path in (tmp_path / "m.h5", tmp_path / "w.h5", tmp_path / "m.keras"):
        (found,) = check_file(path, record, {})
        config = found.config
        assert found.fmt == "torch" and found.conversion() == "exact"
        tensors = to_format("torch", found.to_params().value, config).value
        one = RNNConfig(config.rnn_mode, 1, config.num_units, config.input_size)
        for direction, suffix in enumerate(("", "_reverse")[:config.num_directions]):
            mine = {name.removesuffix(suffix) if suffix else name: value for name, value in tensors.items()
                    if name.endswith("_reverse") == bool(suffix)}
            assert np.array_equal(from_format("torch", mine, one).value, captured[direction]), (path.name, direction)


@pytest.mark.parametrize("first", list(KINDS))
def test_random_keras2_models_read_back_from_every_file(tmp_path: Path, first: str) -> None:
    rng = np.random.default_rng(stable_seed("keras2-read", first))
    width = int(rng.integers(1, 5))
    specs, layers, untold = [], [], ()
    for k in range(2):
        mode = first if k == 0 else str(rng.choice(list(KINDS)))
        class_name, extra, _ = KINDS[mode]
        two = bool(rng.integers(2)) and mode != "gru_reset_before"
        name, use_bias = f"rnn_{k}", bool(rng.integers(2))
        untold += (name,) if mode == "gru_reset_before" and not use_bias else ()
        layer = getattr(tf_keras.layers, class_name)(int(rng.integers(1, 6)), return_sequences=True,
                                                     use_bias=use_bias, **extra, **({} if two else {"name": name}))
        if two:
            layer = tf_keras.layers.Bidirectional(layer, name=name)
        layers.append(layer)
        specs.append((f"rnn_{k}", layer, 2 if two else 1, mode))
    x_in = tf_keras.Input((None, width))
    y = tf_keras.layers.Masking()(x_in)
    for layer in layers:
        y = layer(y)
    model = tf_keras.Model(x_in, y)
    make_keras_files.randomise(model, rng)
    x, mask = random_batch(rng, width)
    record = make_keras_files.Recorder(mask)
    y = x
    for name, layer, directions, mode in specs:
        y = record.run(name, layer, y, directions=directions, has_cell=mode == "lstm",
                       reset_before=mode == "gru_reset_before")
    model.save(tmp_path / "m.h5")
    model.save_weights(tmp_path / "w.h5")
    model.save(tmp_path / "m.keras")
    for path in (tmp_path / "m.h5", tmp_path / "m.keras"):
        assert check_file(path, record, {})[1].feeds_from == "rnn_0"
    check_file(tmp_path / "w.h5", record, {name: KINDS[mode][2] for name, *_, mode in specs}, untold)


@keras.saving.register_keras_serializable(package="cudnn_rnn_tests")
class Tagger(keras.Model):
    """A subclassed model: its saved config does not list its layers."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.encoder = keras.layers.LSTM(3, return_sequences=True, name="encoder")
        self.decoder = keras.layers.GRU(2, return_sequences=True, name="decoder")

    def call(self, x: Any, mask: Any = None) -> Any:
        return self.decoder(self.encoder(x, mask=mask), mask=mask)


def test_a_subclassed_keras3_model_is_read_from_its_weights(tmp_path: Path) -> None:
    rng = np.random.default_rng(stable_seed("keras3-subclassed"))
    model = Tagger()
    model(np.zeros((1, 3, 2), np.float32))
    make_keras_files.randomise(model, rng)
    x, mask = random_batch(rng, 2)
    record = make_keras_files.Recorder(mask)
    record.run("decoder", model.decoder, record.run("encoder", model.encoder, x, has_cell=True))
    model.save(tmp_path / "tagger.keras")
    for found in check_file(tmp_path / "tagger.keras", record, {}):
        assert found.notes[0].startswith("the config of the Tagger model does not list its layers: ")


def test_a_mixed_precision_layer_is_read_with_its_float32_weights(tmp_path: Path) -> None:
    model = keras.Sequential([keras.Input((None, 2)), keras.layers.LSTM(3, dtype="mixed_float16", name="half")])
    model.save(tmp_path / "m.keras")
    (found,) = read_file(tmp_path / "m.keras")
    assert found.fields["dtype"] == "float32" and found.conversion() == "exact"
    assert found.notes == ("dtype policy 'mixed_float16': Keras runs this layer in float16 from float32 weights; the "
                           "weights are read as stored",)
