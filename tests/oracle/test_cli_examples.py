"""Every ``cudnn-rnn convert --help`` example, run on real files made by Keras 3 and PyTorch, with the
result checked against the framework that made the file (the .npz-only examples run in
tests/test_cli_convert.py)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras  # noqa: E402
import onnxruntime  # noqa: E402
import torch  # noqa: E402

import cudnn_rnn  # noqa: E402
from convert_testing import random_params, relative_error, rng_for  # noqa: E402
from cudnn_rnn import RNNConfig  # noqa: E402
from cudnn_rnn.cli import main  # noqa: E402
from cudnn_rnn.convert import from_format  # noqa: E402
from cudnn_rnn.cli.convert import EXAMPLES  # noqa: E402
from cudnn_rnn.params_file import read_params_file, write_params_file  # noqa: E402

pytestmark = pytest.mark.oracle


def argv_of(index: int) -> list[str]:
    return shlex.split(" ".join(EXAMPLES[index][1]))[2:]


def keras_weights(layer: keras.layers.Layer) -> dict[str, np.ndarray]:
    kernel, recurrent, bias = (np.asarray(w) for w in layer.get_weights())
    return {"layer_0/forward/kernel": kernel, "layer_0/forward/recurrent_kernel": recurrent,
            "layer_0/forward/bias": bias}


def ragged_batch(features: int, seed: str) -> tuple[np.ndarray, np.ndarray]:
    rng = rng_for(seed)
    x = rng.uniform(-1, 1, (3, 6, features)).astype(np.float32)
    return x, np.array([6, 2, 4], np.int32)


def make_single_keras(path: Path) -> Callable[[], None]:
    inputs = keras.Input((None, 5))
    lstm = keras.layers.LSTM(7, return_sequences=True, name="encoder")
    model = keras.Model(inputs, keras.layers.Dense(2)(lstm(inputs)))
    model.save(path)

    def check() -> None:
        saved = read_params_file(path.parent / "params.npz")
        assert saved.config == RNNConfig("lstm", 1, 7, 5)
        expected = from_format("keras", keras_weights(lstm), saved.config).value
        assert saved.params.tobytes() == expected.tobytes()
        layer = cudnn_rnn.LSTM.load(path.parent / "params.npz")
        x, _ = ragged_batch(5, "single")
        y, _, _ = layer.forward(x)
        assert relative_error(y, np.asarray(lstm(x))) <= 1e-5
    return check


def make_checkpoint(path: Path) -> Callable[[], None]:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = torch.nn.Module()
            self.encoder.rnn = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True)
            self.decoder = torch.nn.GRU(12, 6)
            self.head = torch.nn.Linear(6, 3)

    model = Model()
    torch.save({"model": model.state_dict(), "epoch": 3, "optimizer": {"lr": 0.1}}, path)

    def check() -> None:
        saved = read_params_file(path.parent / "params.npz")
        config = RNNConfig("lstm", 2, 6, 4, direction="bidirectional")
        assert saved.config == config
        state = {k: v.numpy() for k, v in model.encoder.rnn.state_dict().items()}
        assert saved.params.tobytes() == from_format("torch", state, config).value.tobytes()
    return check


def make_stacked_keras(path: Path) -> Callable[[], None]:
    inputs = keras.Input((None, 3))
    first = keras.layers.LSTM(5, return_sequences=True, name="lstm")
    second = keras.layers.LSTM(5, return_sequences=True, name="lstm_1")
    model = keras.Model(inputs, second(first(inputs)))
    model.save(path)

    def check() -> None:
        module = torch.nn.LSTM(3, 5, num_layers=2, batch_first=True)
        module.load_state_dict(torch.load(path.parent / "lstm.pt", weights_only=True), strict=True)
        x, _ = ragged_batch(3, "stacked")
        with torch.no_grad():
            theirs = module(torch.from_numpy(x))[0].numpy()
        assert relative_error(theirs, np.asarray(model(x))) <= 1e-5
    return check


def make_relu_rnn(path: Path) -> Callable[[], None]:
    module = torch.nn.RNN(3, 4, nonlinearity="relu")
    torch.save(module.state_dict(), path)

    def check() -> None:
        saved = read_params_file(path.parent / "params.npz")
        assert saved.config == RNNConfig("rnn_relu", 1, 4, 3)
        x, lengths = ragged_batch(3, "relu")
        x = np.ascontiguousarray(x.transpose(1, 0, 2))
        h0 = np.zeros((1, 3, 4), np.float32)
        ours = cudnn_rnn.cudnn_rnn_v3(x, h0, None, saved.params, None, rnn_mode="rnn_relu", is_training=False)
        with torch.no_grad():
            theirs = module(torch.from_numpy(x))[0].numpy()
        assert relative_error(ours.output, theirs) <= 1e-5
    return check


def make_params_file(path: Path) -> Callable[[], None]:
    config = RNNConfig("lstm", 2, 8, 4, direction="bidirectional")
    params = random_params(config, rng_for("onnx-example"))
    write_params_file(path, params, config)

    def check() -> None:
        x, lengths = ragged_batch(4, "onnx")
        x = np.ascontiguousarray(x.transpose(1, 0, 2))
        h0 = np.zeros((4, 3, 8), np.float32)
        session = onnxruntime.InferenceSession(str(path.parent / "model.onnx"), providers=["CPUExecutionProvider"])
        y = session.run(["Y"], {"X": x, "sequence_lens": lengths, "initial_h": h0, "initial_c": h0})[0]
        ours = cudnn_rnn.cudnn_rnn_v3(x, h0, h0, params, lengths, direction="bidirectional", is_training=False)
        assert relative_error(y, ours.output) <= 1e-5
    return check


def make_bare_params(path: Path) -> Callable[[], None]:
    config = RNNConfig("lstm", 2, 32, 16, direction="bidirectional")
    params = random_params(config, rng_for("bare"))
    np.savez(path, params=params)

    def check() -> None:
        module = torch.nn.LSTM(16, 32, num_layers=2, bidirectional=True)
        module.load_state_dict(torch.load(path.parent / "lstm.pt", weights_only=True), strict=True)
        state = {k: v.numpy() for k, v in module.state_dict().items()}
        assert from_format("torch", state, config).value.tobytes() == params.tobytes()
    return check


def make_keras_for_safetensors(path: Path) -> Callable[[], None]:
    inputs = keras.Input((None, 5))
    lstm = keras.layers.LSTM(7, return_sequences=True, name="encoder")
    keras.Model(inputs, lstm(inputs)).save(path)

    def check() -> None:
        from safetensors.torch import load_file

        module = torch.nn.LSTM(5, 7, batch_first=True)
        module.load_state_dict(load_file(str(path.parent / "lstm.safetensors")), strict=True)
        x, _ = ragged_batch(5, "safetensors")
        with torch.no_grad():
            theirs = module(torch.from_numpy(x))[0].numpy()
        assert relative_error(theirs, np.asarray(lstm(x))) <= 1e-5
    return check


def make_params_for_keras(path: Path) -> Callable[[], None]:
    config = RNNConfig("lstm", 2, 8, 4, direction="bidirectional")
    params = random_params(config, rng_for("keras-example"))
    write_params_file(path, params, config)

    def check() -> None:
        model = keras.saving.load_model(path.parent / "lstm.keras")
        x, _ = ragged_batch(4, "keras")
        ours = cudnn_rnn.LSTM.load(path).forward(x, training=False)[0]
        assert relative_error(np.asarray(model(x)), ours) <= 1e-5
    return check


class Tagger(torch.nn.Module):
    """A user's model: encoder.rnn (the example's 2-layer bidirectional LSTM), then a head."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Module()
        self.encoder.rnn = torch.nn.LSTM(4, 8, num_layers=2, bidirectional=True, batch_first=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder.rnn(x)[0])


def make_params_and_model(path: Path) -> Callable[[], None]:
    config = RNNConfig("lstm", 2, 8, 4, direction="bidirectional")
    params = random_params(config, rng_for("into-example"))
    write_params_file(path, params, config)
    model = Tagger()
    torch.save(model.state_dict(), path.parent / "model.pt")

    def check() -> None:
        tuned = Tagger()
        tuned.load_state_dict(torch.load(path.parent / "tuned.pt", weights_only=True), strict=True)
        x, _ = ragged_batch(4, "into")
        with torch.no_grad():
            theirs = tuned(torch.from_numpy(x)).numpy()
            head = (model.head.weight.numpy(), model.head.bias.numpy())
        ours = cudnn_rnn.LSTM.load(path).forward(x, training=False)[0]
        assert relative_error(theirs, ours @ head[0].T + head[1]) <= 1e-5
    return check


#: (input file name, output file name) -> how to make the input (returns the check of the example's output)
MAKERS: dict[tuple[str, str], Callable[[Path], Callable[[], None]]] = {
    ("model.keras", "params.npz"): make_single_keras,
    ("checkpoint.pt", "params.npz"): make_checkpoint,
    ("stacked.keras", "lstm.pt"): make_stacked_keras,
    ("rnn.pt", "params.npz"): make_relu_rnn,
    ("params.npz", "model.onnx"): make_params_file,
    ("model.keras", "lstm.safetensors"): make_keras_for_safetensors,
    ("params.npz", "lstm.keras"): make_params_for_keras,
    ("params.npz", "tuned.pt"): make_params_and_model,
}


def needs_a_maker(index: int) -> bool:
    argv = argv_of(index)
    return not ("--from" in argv and all(path.endswith(".npz") for path in argv[-2:]))


@pytest.mark.parametrize("index", [index for index in range(len(EXAMPLES)) if needs_a_maker(index)])
def test_help_example_runs_on_a_real_file(index: int, tmp_path: Path, monkeypatch, capsys) -> None:
    argv = argv_of(index)
    source = argv[-2]
    maker = (make_bare_params if "--from" in argv and argv[argv.index("--from") + 1] == "params"
             else MAKERS[source, argv[-1]])
    monkeypatch.chdir(tmp_path)
    check = maker(tmp_path / source)
    assert main(["convert", *argv]) == 0, capsys.readouterr().err
    assert "exact: the result computes the same function" in capsys.readouterr().out
    check()
