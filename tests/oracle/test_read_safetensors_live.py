"""safetensors files written now by ``safetensors.torch.save_file`` from real torch modules, read back and run
against torch.

Each RNN (nn.LSTM with a projection, bidirectional, 2 layers; nn.GRU; nn.RNN tanh and relu) is saved as its own
state_dict, and an Embedding -> LSTM -> Linear model as a parent module's state_dict (the LSTM under
``encoder.rnn``). ``read_file`` finds them, ``cudnn_rnn_v3`` (NumPy backend) runs the converted params, and the
outputs are compared with torch's on the same inputs: float32 to 1e-5 relative to each output's largest value.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

import cudnn_rnn  # noqa: E402
from cudnn_rnn.convert.readers import FILE_KINDS, file_kind, read_file  # noqa: E402
from rnn_testing import DTYPE_TOLERANCE, load_script, relative_error, stable_seed  # noqa: E402

make_torch_files = load_script("make_torch_files")

#: case -> the module saved (built after seeding torch)
MODULES = {
    "lstm_proj_bi_L2": lambda: torch.nn.LSTM(3, 5, 2, bidirectional=True, proj_size=2),
    "gru_bi": lambda: torch.nn.GRU(4, 3, bidirectional=True),
    "gru_batch_first_L2": lambda: torch.nn.GRU(2, 4, 2, batch_first=True),
    "rnn_tanh_L2": lambda: torch.nn.RNN(3, 4, 2),
    "rnn_relu_bi": lambda: torch.nn.RNN(3, 4, nonlinearity="relu", bidirectional=True),
    "lstm_no_bias": lambda: torch.nn.LSTM(2, 3, bias=False),
}

TOLERANCE = DTYPE_TOLERANCE["float32"]


@pytest.mark.oracle
@pytest.mark.parametrize("case", list(MODULES))
def test_a_saved_rnn_runs_as_torch_runs_it(tmp_path: Path, case: str) -> None:
    rng = np.random.default_rng(stable_seed("read-safetensors-live", case))
    torch.manual_seed(int(rng.integers(1 << 31)))
    module = MODULES[case]()
    path = tmp_path / "rnn.safetensors"
    safetensors_torch.save_file(module.state_dict(), str(path), metadata={"format": "pt"})
    assert file_kind(str(path)) is FILE_KINDS["safetensors"]
    (found,) = read_file(path)
    assert found.name == "rnn.safetensors"
    assert found.source == f"PyTorch nn.{type(module).__name__} state_dict in a safetensors file"
    mode = make_torch_files.rnn_mode_of(module)
    if mode.startswith("rnn_"):
        assert found.questions["rnn_mode"].choices == ("rnn_tanh", "rnn_relu")
        found = found.with_hints(rnn_mode=mode)
    assert found.fields["rnn_mode"] == mode and found.conversion() == "exact"
    record = make_torch_files.torch_run(module, rng, "float32", (5, 2, 4))
    ours = make_torch_files.our_run(found, record, not module.batch_first)
    for key, value in ours.items():
        error = relative_error(value, record[key])
        assert error <= TOLERANCE, f"{case} {key}: relative error {error:.3g}"


class Tagger(torch.nn.Module):
    """Embedding -> LSTM (under ``encoder.rnn``) -> Linear over every step."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(11, 4)
        self.encoder = torch.nn.Module()
        self.encoder.rnn = torch.nn.LSTM(4, 6, 2, bidirectional=True, proj_size=3)
        self.head = torch.nn.Linear(6, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        steps, _ = self.encoder.rnn(self.embed(tokens))
        return self.head(steps)


@pytest.mark.oracle
def test_a_parent_modules_state_dict_runs_as_the_module_does(tmp_path: Path) -> None:
    """The whole model: torch's output against embedding lookup -> cudnn_rnn_v3 -> linear head in NumPy, the
    embedding and head read from the same file by the safetensors package, the RNN by read_file."""
    torch.manual_seed(3)
    model = Tagger().eval()
    path = tmp_path / "tagger.safetensors"
    safetensors_torch.save_file(model.state_dict(), str(path))
    (found,) = read_file(path)
    assert found.name == "encoder.rnn" and found.source == "PyTorch nn.LSTM state_dict in a safetensors file"
    (alone,) = read_file(path, prefix="encoder.rnn")
    assert np.array_equal(alone.to_params().value, found.to_params().value)
    config = found.config
    assert (config.num_layers, config.num_units, config.num_proj, config.direction) == (2, 6, 3, "bidirectional")

    rng = np.random.default_rng(stable_seed("read-safetensors-live", "tagger"))
    steps, batch = 7, 3
    tokens = rng.integers(0, 11, (steps, batch))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's note that oneDNN runs no LSTM with projections
        expected = model(torch.from_numpy(tokens)).numpy()

    weights = safetensors_numpy.load_file(str(path))
    x = weights["embed.weight"][tokens]
    zeros_h = np.zeros((2 * config.num_layers, batch, config.num_proj), np.float32)
    zeros_c = np.zeros((2 * config.num_layers, batch, config.num_units), np.float32)
    result = cudnn_rnn.cudnn_rnn_v3(x, zeros_h, zeros_c, found.to_params().value, np.full(batch, steps, np.int32),
                                    rnn_mode="lstm", direction="bidirectional", num_proj=config.num_proj,
                                    is_training=False)
    ours = np.asarray(result.output) @ weights["head.weight"].T + weights["head.bias"]
    error = relative_error(ours, expected)
    assert error <= TOLERANCE, f"the tagger's output: relative error {error:.3g}"


@pytest.mark.oracle
def test_bfloat16_weights_read_as_float32_exactly(tmp_path: Path) -> None:
    """A bfloat16 state_dict (as torch saves it): read as float32 with a note, equal to torch's own widening."""
    torch.manual_seed(5)
    module = torch.nn.GRU(3, 4).to(torch.bfloat16)
    path = tmp_path / "bf16.safetensors"
    safetensors_torch.save_file(module.state_dict(), str(path))
    (found,) = read_file(path)
    assert found.notes[-1] == "the tensors are bfloat16: read as float32, exactly"
    for name, tensor in module.state_dict().items():
        assert found.tensors[name].dtype == np.float32
        assert np.array_equal(found.tensors[name], tensor.to(torch.float32).numpy())
