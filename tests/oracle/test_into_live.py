"""Converted weights loaded and run by the frameworks themselves: .safetensors into nn.LSTM/GRU/RNN through
``safetensors.torch.load_file``; ``convert --into`` a parent module's state_dict (torch.save and safetensors)
and a multi-layer Keras model, each then run whole by its framework and compared with the reference
backend on the same inputs (float32 to 1e-5 relative to the largest output); a model whose output layer is
tied to its LSTM, refused unless ``--change-shared``, then run with the tied layer holding the new weights.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from cudnn_rnn import GRU, LSTM, RNN, cudnn_rnn_v3  # noqa: E402
from cudnn_rnn.cli.convert import main as convert_main  # noqa: E402
from cudnn_rnn.convert import to_format, write_file, write_into  # noqa: E402
from rnn_testing import relative_error  # noqa: E402

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

#: (mode, layers, bidirectional, projection): every mode, both directions, two layers, a projected LSTM
CASES = [("lstm", 1, False, 0), ("gru", 2, True, 0), ("rnn_tanh", 1, True, 0), ("rnn_relu", 2, False, 0),
         ("lstm", 2, True, 2)]
LAYERS = {"lstm": LSTM, "gru": GRU, "rnn_tanh": RNN, "rnn_relu": RNN}
MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN, "rnn_relu": torch.nn.RNN}


def layer_for(mode: str, input_size: int, units: int, layers: int, bidirectional: bool, proj: int, seed: int):
    options = {"num_proj": proj} if proj else {}
    if mode.startswith("rnn_"):
        options["activation"] = mode[4:]
    return LAYERS[mode](input_size, units, num_layers=layers, bidirectional=bidirectional, seed=seed, **options)


def module_for(mode: str, input_size: int, units: int, layers: int, bidirectional: bool, proj: int):
    options = {"proj_size": proj} if proj else {}
    if mode.startswith("rnn_"):
        options["nonlinearity"] = mode[4:]
    return MODULES[mode](input_size, units, num_layers=layers, bidirectional=bidirectional, **options)


@pytest.mark.parametrize("mode, layers, bidirectional, proj", CASES)
def test_safetensors_load_into_torchs_own_module(tmp_path: Path, mode: str, layers: int, bidirectional: bool,
                                                 proj: int) -> None:
    layer = layer_for(mode, 3, 5, layers, bidirectional, proj, seed=11)
    write_file(tmp_path / "rnn.safetensors", layer)
    module = module_for(mode, 3, 5, layers, bidirectional, proj)
    module.load_state_dict(safetensors_torch.load_file(str(tmp_path / "rnn.safetensors")))
    x = np.random.default_rng(1).standard_normal((6, 4, 3)).astype(np.float32)
    lengths = np.array([6, 2, 5, 1], np.int32)
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.from_numpy(lengths),
                                                     enforce_sorted=False)
    with torch.no_grad():
        out, state = module(packed)
    expected, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=6)
    config = layer.config
    h0 = np.zeros((config.num_layers * config.num_directions, 4, proj or 5), np.float32)
    c0 = np.zeros((config.num_layers * config.num_directions, 4, 5), np.float32)
    y, h, c = cudnn_rnn_v3(x, h0, c0, layer.params, lengths, rnn_mode=mode, direction=config.direction,
                           num_proj=proj, is_training=False)[:3]
    assert relative_error(y, expected.numpy()) < 1e-5
    assert relative_error(h, (state[0] if mode == "lstm" else state).numpy()) < 1e-5


class Tagger(torch.nn.Module):
    """A user's model: Embedding -> encoder.rnn (2-layer bidirectional LSTM) -> head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(13, 4)
        self.encoder = torch.nn.Module()
        self.encoder.rnn = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True)
        self.head = torch.nn.Linear(12, 3)

    def forward(self, tokens):
        y, _ = self.encoder.rnn(self.embed(tokens))
        return self.head(y)


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_into_a_parent_module_then_run_it(tmp_path: Path, suffix: str) -> None:
    torch.manual_seed(0)
    tagger = Tagger()
    model = tmp_path / f"model{suffix}"
    if suffix == ".pt":
        torch.save(tagger.state_dict(), model)
    else:
        safetensors_torch.save_file(tagger.state_dict(), str(model))
    layer = LSTM(4, 6, num_layers=2, bidirectional=True, seed=5)
    layer.save(tmp_path / "params.npz")
    out = tmp_path / f"tuned{suffix}"
    assert convert_main([str(tmp_path / "params.npz"), str(out), "--into", str(model), "--prefix", "encoder.rnn"]) == 0
    tuned = Tagger()
    tuned.load_state_dict(torch.load(out) if suffix == ".pt" else safetensors_torch.load_file(str(out)))
    tokens = torch.from_numpy(np.random.default_rng(2).integers(0, 13, (7, 3)))
    with torch.no_grad():
        got = tuned(tokens).numpy()
        embedded = tagger.embed(tokens).numpy()
        head_weight, head_bias = tagger.head.weight.numpy(), tagger.head.bias.numpy()
    y, _, _ = layer.forward(embedded, time_major=True, training=False)
    assert relative_error(got, y @ head_weight.T + head_bias) < 1e-5
    for key, value in tagger.state_dict().items():  # everything else is the model's own
        if not key.startswith("encoder.rnn."):
            assert torch.equal(tuned.state_dict()[key], value), key


class TiedModel(torch.nn.Module):
    """embed -> rnn (nn.LSTM(6, 6)) -> project, whose weight is the LSTM's weight_hh_l0 (tied, both (24, 6))."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(13, 6)
        self.rnn = torch.nn.LSTM(6, 6)
        self.project = torch.nn.Linear(6, 24, bias=False)
        self.project.weight = self.rnn.weight_hh_l0

    def forward(self, tokens):
        y, _ = self.rnn(self.embed(tokens))
        return self.project(y)


def test_into_a_tied_model_only_with_change_shared_then_run_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    torch.manual_seed(1)
    tied = TiedModel()
    torch.save(tied.state_dict(), tmp_path / "model.pt")
    layer = LSTM(6, 6, seed=9)
    layer.save(tmp_path / "params.npz")
    argv = [str(tmp_path / "params.npz"), str(tmp_path / "tuned.pt"), "--into", str(tmp_path / "model.pt")]
    assert convert_main(argv) == 2
    assert "tensor 'rnn.weight_hh_l0' of model" in capsys.readouterr().err
    assert convert_main([*argv, "--change-shared"]) == 0
    tuned = TiedModel()
    tuned.load_state_dict(torch.load(tmp_path / "tuned.pt"))
    tokens = torch.from_numpy(np.random.default_rng(4).integers(0, 13, (5, 2)))
    with torch.no_grad():
        got = tuned(tokens).numpy()
        embedded = tied.embed(tokens).numpy()
    y, _, _ = layer.forward(embedded, time_major=True, training=False)
    weight_hh = to_format("torch", layer.params, layer.config).value["weight_hh_l0"]
    assert relative_error(got, y @ weight_hh.T) < 1e-5  # the tied layer holds the new weight_hh_l0


def test_into_a_multi_layer_keras_model_then_run_it(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    inputs = keras.Input((None, 3))
    hidden = keras.layers.GRU(5, return_sequences=True, name="first")(inputs)
    hidden = keras.layers.GRU(5, return_sequences=True, name="second")(hidden)
    outputs = keras.layers.Dense(2, name="head")(hidden)
    model = keras.Model(inputs, outputs)
    model.save(tmp_path / "model.keras")
    layer = GRU(3, 5, num_layers=2, seed=8)
    out = tmp_path / "tuned.keras"
    write_into(tmp_path / "model.keras", out, layer, name=["first", "second"])
    tuned = keras.saving.load_model(out)
    x = np.random.default_rng(3).standard_normal((4, 6, 3)).astype(np.float32)
    lengths = np.array([6, 3, 1, 5])
    mask = np.arange(6)[None, :] < lengths[:, None]
    got = np.asarray(tuned(x, mask=mask))
    kernel, bias = (np.asarray(weight) for weight in model.get_layer("head").get_weights())
    y, _, _ = layer.forward(x, lengths, training=False)
    expected = y @ kernel + bias
    assert relative_error(got[mask], expected[mask]) < 1e-5
    for name in ("head",):
        for before, after in zip(model.get_layer(name).get_weights(), tuned.get_layer(name).get_weights()):
            assert np.array_equal(before, after)
