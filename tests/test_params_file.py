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
