"""The ``torch`` format against live PyTorch: nn.LSTM / nn.GRU / nn.RNN loaded with converted weights.

Both directions are checked: params -> torch state_dict -> module, and module state_dict ->
params -> our reference op. The module runs on packed ragged sequences; its padded outputs,
h_n and c_n must equal ``cudnn_rnn_v3``'s output, output_h and output_c.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import cudnn_rnn
from convert_testing import random_params, relative_error, rng_for
from rnn_testing import load_module
from cudnn_rnn import RNNConfig
from cudnn_rnn.cli.convert import main as cli_convert
from cudnn_rnn.convert import from_format, to_format

TOLERANCE = {"float32": 1e-5, "float64": 1e-12}

#: rnn_mode -> (module class, extra constructor arguments)
MODULES = {
    "lstm": (torch.nn.LSTM, {}),
    "gru": (torch.nn.GRU, {}),
    "rnn_tanh": (torch.nn.RNN, {"nonlinearity": "tanh"}),
    "rnn_relu": (torch.nn.RNN, {"nonlinearity": "relu"}),
}

CASES = [
    # (rnn_mode, num_layers, direction, num_proj, dtype)
    ("lstm", 2, "bidirectional", 0, "float32"),
    ("lstm", 2, "bidirectional", 2, "float32"),
    ("lstm", 3, "unidirectional", 3, "float64"),
    ("gru", 2, "bidirectional", 0, "float32"),
    ("gru", 1, "unidirectional", 0, "float64"),
    ("rnn_tanh", 2, "bidirectional", 0, "float32"),
    ("rnn_relu", 2, "unidirectional", 0, "float64"),
]


def make_module(config: RNNConfig, dtype: str) -> torch.nn.Module:
    cls, extra = MODULES[config.rnn_mode]
    if config.num_proj:
        extra = dict(extra, proj_size=config.num_proj)
    module = cls(config.input_size, config.num_units, num_layers=config.num_layers,
                 bidirectional=config.num_directions == 2, **extra)
    return module.to(getattr(torch, dtype)).eval()


def run_torch(module: torch.nn.Module, config: RNNConfig, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
              lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.from_numpy(lengths.astype(np.int64)),
                                                     enforce_sorted=False)
    state = (torch.from_numpy(h0), torch.from_numpy(c0)) if config.has_cell else torch.from_numpy(h0)
    with torch.no_grad():
        out, final = module(packed, state)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
    finals = final if config.has_cell else (final,)
    return (y.numpy(),) + tuple(f.numpy() for f in finals)


def run_ours(config: RNNConfig, params: np.ndarray, x, h0, c0, lengths) -> tuple[np.ndarray, ...]:
    out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, lengths, rnn_mode=config.rnn_mode, direction=config.direction,
                                 num_proj=config.num_proj, is_training=False)
    return (out.output, out.output_h, out.output_c) if config.has_cell else (out.output, out.output_h)


def random_inputs(config: RNNConfig, dtype: str, rng: np.random.Generator) -> tuple:
    t, b = 5, 4
    k = config.num_pseudo_layers
    x = rng.uniform(-1, 1, (t, b, config.input_size)).astype(dtype)
    h0 = rng.uniform(-1, 1, (k, b, config.state_size)).astype(dtype)
    c0 = rng.uniform(-1, 1, (k, b, config.num_units)).astype(dtype) if config.has_cell else None
    lengths = np.array([5, 2, 4, 1], dtype=np.int32)
    return x, h0, c0, lengths


@pytest.mark.oracle
@pytest.mark.parametrize("mode, layers, direction, proj, dtype", CASES)
def test_params_to_torch_module(mode: str, layers: int, direction: str, proj: int, dtype: str) -> None:
    rng = rng_for(mode, layers, direction, proj, dtype)
    config = RNNConfig(mode, layers, 4, 3, direction=direction, num_proj=proj)
    params = random_params(config, rng, dtype)
    module = make_module(config, dtype)
    state_dict = {name: torch.from_numpy(value) for name, value in to_format("torch", params, config).value.items()}
    module.load_state_dict(state_dict, strict=True)
    inputs = random_inputs(config, dtype, rng)
    for name, ours, theirs in zip(("output", "output_h", "output_c"), run_ours(config, params, *inputs),
                                  run_torch(module, config, *inputs)):
        assert relative_error(ours, theirs) <= TOLERANCE[dtype], name


@pytest.mark.oracle
@pytest.mark.parametrize("mode, layers, direction, proj, dtype", CASES)
def test_torch_module_to_params(mode: str, layers: int, direction: str, proj: int, dtype: str) -> None:
    rng = rng_for(mode, layers, direction, proj, dtype, "from")
    torch.manual_seed(int(rng.integers(2**31)))
    config = RNNConfig(mode, layers, 4, 3, direction=direction, num_proj=proj)
    module = make_module(config, dtype)
    tensors = {name: value.detach().numpy() for name, value in module.state_dict().items()}
    converted = from_format("torch", tensors, config)
    assert converted.approximations == ()
    inputs = random_inputs(config, dtype, rng)
    for name, ours, theirs in zip(("output", "output_h", "output_c"), run_ours(config, converted.value, *inputs),
                                  run_torch(module, config, *inputs)):
        assert relative_error(ours, theirs) <= TOLERANCE[dtype], name
    # and back: the state_dict comes back bit for bit
    again = to_format("torch", converted.value, config).value
    assert list(again) == list(tensors)
    for name, value in tensors.items():
        assert again[name].tobytes() == value.tobytes(), name


@pytest.mark.oracle
def test_skip_input_equals_torch_with_identity_input_matrices() -> None:
    """skip_input has no layer-0 input matrices; torch gets identities and computes the same function."""
    rng = np.random.default_rng(7)
    config = RNNConfig("lstm", 2, 4, 4, input_mode="skip_input", direction="bidirectional")
    params = random_params(config, rng, "float64")
    module = make_module(config, "float64")
    module.load_state_dict({k: torch.from_numpy(v) for k, v in to_format("torch", params, config).value.items()})
    x, h0, c0, lengths = random_inputs(config, "float64", rng)
    out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, lengths, input_mode="skip_input", direction="bidirectional",
                                 is_training=False)
    for ours, theirs in zip((out.output, out.output_h, out.output_c), run_torch(module, config, x, h0, c0, lengths)):
        assert relative_error(ours, theirs) <= 1e-12


@pytest.mark.oracle
def test_convert_torch_lstm_example_runs_and_agrees(tmp_path) -> None:
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, str(root / "examples" / "convert_torch_lstm.py"), "--out", str(tmp_path)],
                            capture_output=True, text=True, cwd=root, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(root)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all outputs agree" in result.stdout
    assert (tmp_path / "lstm.onnx").is_file() and (tmp_path / "params.npz").is_file()


@pytest.mark.oracle
def test_convert_torch_lstm_example_takes_out_and_keep_as_its_former_name() -> None:
    """The output folder is --out, as in every example; --keep, the name it had, means the same."""
    example = load_module(Path(__file__).resolve().parents[2] / "examples" / "convert_torch_lstm.py")
    parser = example.argument_parser()
    assert parser.parse_args(["--out", "a"]).out == parser.parse_args(["--keep", "a"]).out == Path("a")
    assert parser.parse_args([]).out is None
    assert "--out DIR, --keep DIR" in parser.format_help()


@pytest.mark.oracle
def test_cli_says_when_a_pt_file_holds_names_nn_lstm_does_not_load(tmp_path: Path, capsys) -> None:
    """--to keras into model.pt: written, with one line saying nn.LSTM loads --to torch, which is true of
    torch's own load_state_dict: it refuses the keras names and takes the torch ones."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4)
    torch.save(lstm.state_dict(), tmp_path / "model.pt")
    assert cli_convert(["--to", "keras", str(tmp_path / "model.pt"), str(tmp_path / "out.pt")]) == 0
    out = capsys.readouterr().out
    assert (f"note: {tmp_path / 'out.pt'} holds the keras format's tensor names; torch's nn.LSTM.load_state_dict "
            "loads --to torch") in out.splitlines()
    with pytest.raises(RuntimeError, match="Missing key"):
        torch.nn.LSTM(3, 4).load_state_dict(torch.load(tmp_path / "out.pt"))
    assert cli_convert(["--to", "torch", str(tmp_path / "model.pt"), str(tmp_path / "torch.pt")]) == 0
    assert "tensor names" not in capsys.readouterr().out
    torch.nn.LSTM(3, 4).load_state_dict(torch.load(tmp_path / "torch.pt"))
