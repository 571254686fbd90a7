"""cudnn_rnn.params_file: what write_params_file writes reads back complete (through the .npz reader
and RecurrentLayer.load), and a damaged params file is refused by read_params_file and read_file alike."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import read_file
from cudnn_rnn.convert.readers import FileReadError
from cudnn_rnn.params_file import read_params_file, write_params_file

from reading_testing import CONFIGS, random_params, savez


@pytest.mark.parametrize("name", list(CONFIGS))
def test_params_files_are_complete(tmp_path: Path, name: str) -> None:
    config = CONFIGS[name]
    params = random_params(config, 3)
    write_params_file(tmp_path / "p.npz", params, config)
    rnn = read_file(tmp_path / "p.npz")[0]
    assert rnn.source == "cudnn_rnn params file" and rnn.fmt == "params" and rnn.complete and not rnn.questions
    assert rnn.config == config
    assert rnn.to_params().value.tobytes() == params.tobytes()
    layer = cudnn_rnn.layers.RecurrentLayer.load(tmp_path / "p.npz")
    assert layer.config == config and layer.params.tobytes() == params.tobytes() and layer.step == 0


GOLDEN_FILES = Path(__file__).parent / "golden" / "files"


@pytest.mark.parametrize("model, kind", [("torch/lstm_float64.pt", "a PyTorch file (torch.save)"),
                                         ("torch/whole_lstm.pt", "a PyTorch file (torch.save)"),
                                         ("keras/keras3_float64.keras", "a Keras 3 .keras archive"),
                                         ("keras/keras2_model.h5", "an HDF5 file"),
                                         ("onnx/torch_lstm_L2_bi_opset14.onnx", "an ONNX model")])
def test_loading_a_model_file_says_how_to_load_it(model: str, kind: str) -> None:
    """LSTM.load of a model file (not a params file) names its kind and the two ways to load the RNN in it."""
    path = str(GOLDEN_FILES / model)
    with pytest.raises(ValueError) as refused:
        cudnn_rnn.LSTM.load(path)
    message = str(refused.value)
    assert "is not a" in message and f"It is {kind}" in message, message
    assert f"cudnn_rnn.convert.read_file({path!r})[0].to_layer()" in message
    assert f"`cudnn-rnn convert {path} OUT.npz`" in message
    if model.startswith("torch/lstm"):  # what the message says works
        layer = read_file(path)[0].to_layer()
        assert isinstance(layer, cudnn_rnn.LSTM)


def test_loading_a_model_file_of_another_kind_of_rnn_names_the_rnn_it_holds(tmp_path: Path) -> None:
    """LSTM.load of a torch.save'd nn.GRU state_dict says it holds a GRU, not an LSTM, and how to load it.

    Before, it said only that the file was missing the params file's members and "holds []".
    """
    import torch

    torch.manual_seed(0)
    path = str(tmp_path / "gru.pt")
    torch.save(torch.nn.GRU(3, 4, num_layers=2).state_dict(), path)
    with pytest.raises(ValueError) as refused:
        cudnn_rnn.LSTM.load(path)
    message = str(refused.value)
    assert "holds []" not in message and "missing" not in message, message
    assert message.startswith(f"{path!r} is not a cudnn_rnn params file"), message
    assert ("It is a PyTorch file (torch.save), a model file holding a GRU (PyTorch nn.GRU state_dict: "
            "rnn_mode=gru, num_layers=2, num_units=4, input_size=3, ") in message, message
    assert ", not an LSTM: load the RNN it holds with " in message, message
    with pytest.raises(ValueError) as refused:  # the right class: no "not a ..."
        cudnn_rnn.GRU.load(path)
    assert "a model file holding a GRU (" in str(refused.value) and "not a" not in str(refused.value).split("GRU (")[1]
    assert isinstance(read_file(path)[0].to_layer(), cudnn_rnn.GRU)  # what the message says works


def test_an_npz_of_torch_tensors_gets_the_hint_and_other_npz_files_do_not(tmp_path: Path) -> None:
    """An .npz is a model file where read_file finds a format's (or a parent module's torch) tensors in it; arrays
    of no format get no hint."""
    config = RNNConfig("lstm", 1, 4, 3)
    found = read_file(GOLDEN_FILES / "torch" / "lstm_float64.pt")[0]
    np.savez(tmp_path / "torch_tensors.npz", **found.tensors)
    np.savez(tmp_path / "parent_module.npz", **{f"encoder.rnn.{name}": value for name, value in found.tensors.items()})
    np.savez(tmp_path / "other.npz", a=random_params(config, 1))
    for name in ("torch_tensors.npz", "parent_module.npz"):
        assert read_file(tmp_path / name)
        with pytest.raises(ValueError, match=r"It is a NumPy \.npz archive, a model file holding an LSTM \(.* "
                                             r"in an \.npz archive: rnn_mode=lstm, .*\): load the RNN"):
            cudnn_rnn.LSTM.load(tmp_path / name)
    with pytest.raises(ValueError, match=r"it holds \['a'\]$"):
        cudnn_rnn.LSTM.load(tmp_path / "other.npz")


@pytest.mark.parametrize("change, match", [
    (lambda a: a.update(format=np.array(2)), "has params-file format"),
    (lambda a: a.update(config=np.array("{not json")), "'config' is not valid JSON"),
    (lambda a: a.update(config=np.array(json.dumps({"rnn_mode": "lstm", "evil": 1}))), "must be an object with"),
    (lambda a: a.update(config=np.array(json.dumps({"rnn_mode": "lstm", "num_layers": 0, "num_units": 2,
                                                    "input_size": 2}))), "invalid configuration: num_layers"),
    (lambda a: a.update(params=a["params"][:-1]), "must be [44] float32 for its configuration; got"),
    (lambda a: a.update(step=np.array(1.5)), "'step' must be an integer scalar"),
])
def test_a_damaged_params_file_is_refused(tmp_path: Path, change, match: str) -> None:
    config = RNNConfig("rnn_tanh", 1, 4, 5)
    buffer = io.BytesIO()
    write_params_file(buffer, random_params(config), config)
    with np.load(io.BytesIO(buffer.getvalue())) as data:
        arrays = {name: data[name] for name in data.files}
    change(arrays)
    with pytest.raises(ValueError, match=match.replace("[", r"\[").replace("]", r"\]")):
        read_params_file(savez(tmp_path / "p.npz", **arrays))
    with pytest.raises(FileReadError, match=match.replace("[", r"\[").replace("]", r"\]")):
        read_file(tmp_path / "p.npz")
