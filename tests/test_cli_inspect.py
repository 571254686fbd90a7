"""``cudnn-rnn inspect``: what it lists for .npz files (NumPy only), as text and JSON, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn import RNNConfig
from cudnn_rnn.cli import main
from cudnn_rnn.convert import to_format
from cudnn_rnn.layout import params_layout
from cudnn_rnn.params_file import write_params_file


def params_for(config: RNNConfig) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, params_layout(config).size).astype(config.dtype)


def test_inspect_lists_the_configuration_size_and_conversion(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = RNNConfig("lstm", 2, 6, 3, direction="bidirectional", num_proj=4)
    path = tmp_path / "lstm.npz"
    np.savez(path, **to_format("torch", params_for(config), config).value)
    assert main(["inspect", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: 1 RNN(s)",
        "1. lstm.npz (torch tensors in an .npz archive, format torch)",
        "   rnn_mode=lstm, num_layers=2, num_units=6, input_size=3, direction=bidirectional, num_proj=4, "
        "input_mode=linear_input, dtype=float32",
        f"   params: {params_layout(config).size} elements; to cuDNN params: exact",
    ]


def test_inspect_asks_for_what_the_file_cannot_tell(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = RNNConfig("rnn_relu", 1, 5, 3)
    path = tmp_path / "rnn.npz"
    np.savez(path, **to_format("torch", params_for(config), config).value)
    assert main(["inspect", "--json", str(path)]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["unknown"] == {"rnn_mode": "--rnn-mode rnn_tanh or --rnn-mode rnn_relu"}
    assert report["params_size"] is None
    assert report["conversion"] == ("needs: an nn.RNN state_dict does not say its nonlinearity: pass --rnn-mode "
                                    "rnn_tanh or --rnn-mode rnn_relu")
    assert main(["inspect", "--json", "--rnn-mode", "rnn_relu", str(path)]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["configuration"]["rnn_mode"] == "rnn_relu" and report["conversion"] == "exact"
    assert report["params_size"] == params_layout(config).size


def test_inspect_reports_a_params_file_and_a_reset_before_gru(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = RNNConfig("gru", 1, 4, 2, dtype="float64")
    write_params_file(tmp_path / "p.npz", params_for(config), config)
    np.savez(tmp_path / "block.npz", **to_format("gru_block_cell", params_for(config), config,
                                                 allow_approximation=True).value)
    assert main(["inspect", "--json", str(tmp_path / "p.npz")]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["source"] == "cudnn_rnn params file" and report["configuration"]["dtype"] == "float64"
    assert main(["inspect", str(tmp_path / "block.npz")]) == 0
    assert "to cuDNN params: approximate: format 'gru_block_cell' is a reset-before GRU" in capsys.readouterr().out


def test_inspect_refuses_unreadable_files_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "junk.pt").write_bytes(b"\x1b[2Jjunk")
    assert main(["inspect", str(tmp_path / "junk.pt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cudnn-rnn inspect: error: cannot read ") and "not a model file of a known kind" in err
    assert len(err.strip().splitlines()) == 1 and "\x1b" not in err


KERAS_GOLDEN = Path(__file__).parent / "golden" / "files" / "keras"


def test_stacks_on_only_where_convert_stack_accepts_the_pair(capsys: pytest.CaptureFixture) -> None:
    """An LSTM feeding a GRU is 'input from', with the reason; two chaining LSTMs 'stack on' (and --stack agrees)."""
    functional = KERAS_GOLDEN / "keras3_functional.keras"
    assert main(["inspect", str(functional)]) == 0
    out = capsys.readouterr().out
    assert "stacks on" not in out and "--stack" not in out
    assert "   input from: encoder (they do not stack: rnn_mode is 'gru', encoder's is 'lstm')" in out.splitlines()
    assert main(["inspect", "--json", str(functional)]) == 0
    [_, bi_gru, _] = json.loads(capsys.readouterr().out)
    assert (bi_gru["input_from"], bi_gru["stacks_on"]) == ("encoder", None)
    assert bi_gru["no_stack"] == "rnn_mode is 'gru', encoder's is 'lstm'"
    assert main(["convert", "--stack", str(functional), "x.npz"]) == 2
    assert "cannot stack bi_gru on encoder" in capsys.readouterr().err
    chained = KERAS_GOLDEN / "keras3_bidirectional_stack.keras"
    assert main(["inspect", str(chained)]) == 0
    out = capsys.readouterr().out
    assert "   stacks on: bi_1" in out.splitlines() and "(or --stack)" in out
