"""bfloat16 (``ml_dtypes.bfloat16``) wherever it can be honoured, and a clear refusal everywhere else.

* The reference backend computes in float32: a forward equals, bit for bit, the float32 forward on the
  same (bfloat16) values rounded to bfloat16; backprop agrees with float32's within bfloat16's precision
  (it reads activations the reserve kept in bfloat16); outputs, gradients and the reserve are bfloat16.
* The cuDNN backend, on tests/support/fake_gpu.py: bfloat16 CuPy arrays reach cuDNN as
  CUDNN_DATA_BFLOAT16 with FLOAT math precision and tensor-op math; a cuDNN before 9.13 or a GPU below
  compute capability 8.0 is refused, naming both, before any cuDNN object is made, and each GPU is
  asked once. The numbers on a real GPU: tests/gpu/test_bfloat16_gpu.py.
* Layers train (one step equals the float32 step rounded), optimisers keep float32 state, params files
  and checkpoints keep bfloat16 bit for bit, ONNX export needs opset 22, GRUBlockCell refuses it, and
  without ml_dtypes the package imports and runs (bfloat16 then says what to install).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn._cudnn import _settings as _cudnn_settings, _descriptors, _lib
from cudnn_rnn import checkpoint
from cudnn_rnn.config import RNNConfig, numpy_dtype
from cudnn_rnn.convert import export_onnx, read_file, to_format
from cudnn_rnn.errors import CudnnError
from cudnn_rnn.optim import SGD, Adam, clip_grad_norm
from cudnn_testing import LIBRARY, REPO, device_arrays, train_step
from fake_gpu import FakeCudnn
from rnn_testing import DTYPE_TOLERANCE, Arrays, Case, assert_close, forward_backward, random_arrays, stable_seed

BF16 = np.dtype(ml_dtypes.bfloat16)
TOLERANCE = DTYPE_TOLERANCE["bfloat16"]

CASES = {
    "lstm projected bidirectional ragged": Case("lstm", num_layers=2, num_units=5, input_size=3,
                                                direction="bidirectional", num_proj=3, max_time=6, batch=4,
                                                lengths=(6, 0, 2, 5), dtype="bfloat16"),
    "gru batch-major": Case("gru", num_layers=2, num_units=4, input_size=4, max_time=5, batch=3, lengths=(5, 1, 3),
                            time_major=False, dtype="bfloat16"),
    "tanh skip_input": Case("rnn_tanh", num_units=4, input_size=4, input_mode="skip_input",
                            direction="bidirectional", max_time=4, batch=2, dtype="bfloat16"),
    "relu dropout": Case("rnn_relu", num_layers=3, num_units=3, input_size=2, max_time=5, batch=3, dropout=0.3,
                         seed=4, seed2=9, dtype="bfloat16"),
}


def widened(a: Arrays) -> Arrays:
    """The same values in float32 (exactly: every bfloat16 is a float32)."""
    return Arrays(**{name: value if value is None or name == "lengths" else value.astype(np.float32)
                     for name, value in vars(a).items()})


# ==== the reference backend ======================================================================
@pytest.mark.parametrize("name", CASES)
def test_reference_computes_in_float32_and_rounds_to_bfloat16(name: str) -> None:
    case = CASES[name]
    a = random_arrays(case, np.random.default_rng(stable_seed(name)))
    ours = forward_backward(case, a)
    wide = forward_backward(case.with_(dtype="float32"), widened(a))
    for key, value in ours.items():
        assert value.dtype == BF16, f"{key} is {value.dtype}"
        if key in ("y", "hy", "cy"):  # float32 arithmetic on the same values, rounded once
            np.testing.assert_array_equal(value, wide[key].astype(BF16), err_msg=key)
        else:  # backprop reads the bfloat16 reserve
            assert_close(value, wide[key].astype(BF16), TOLERANCE, key)
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **case.attrs())
    assert out.reserve_space.dtype == BF16 and out.reserve_space.size > 0


def test_bfloat16_gradients_match_central_differences_of_the_float32_function() -> None:
    """d loss / d params against central differences of the float32 forward, loss = sum(y * dy)."""
    case = Case("gru", num_units=3, input_size=2, max_time=4, batch=2, lengths=(4, 2), dtype="bfloat16")
    a = random_arrays(case, np.random.default_rng(7))
    dparams = forward_backward(case, a.with_(dhy=np.zeros_like(a.dhy)))["dparams"]
    wide = widened(a)

    def loss(params: np.ndarray) -> float:
        out = cudnn_rnn.cudnn_rnn_v3(wide.x, wide.h0, None, params, wide.lengths, rnn_mode="gru", is_training=False)
        return float(np.sum(out.output.astype(np.float64) * wide.dy))

    step = 1e-2
    numeric = np.array([(loss(wide.params + step * e) - loss(wide.params - step * e)) / (2 * step)
                        for e in np.eye(wide.params.size, dtype=np.float32)])
    assert_close(dparams, numeric, TOLERANCE, "dparams")


# ==== bad input ===================================================================================
@pytest.mark.parametrize("name", ["input_h", "input_c", "params"])
def test_forward_names_a_float32_array_beside_bfloat16_ones(name: str) -> None:
    case = Case("lstm", dtype="bfloat16")
    a = random_arrays(case, np.random.default_rng(1))
    kwargs: dict[str, Any] = dict(input=a.x, input_h=a.h0, input_c=a.c0, params=a.params)
    kwargs[name] = kwargs[name].astype(np.float32)
    with pytest.raises(TypeError, match=rf"^{name} must have the dtype of input \(bfloat16\); got float32$"):
        cudnn_rnn.cudnn_rnn_v3(**kwargs, **case.attrs())
    float32 = widened(a)
    with pytest.raises(TypeError, match=r"^params must have the dtype of input \(float32\); got bfloat16$"):
        cudnn_rnn.cudnn_rnn_v3(float32.x, float32.h0, float32.c0, a.params, **case.attrs())


@pytest.mark.parametrize("name", ["output", "output_backprop", "output_h_backprop", "output_c_backprop",
                                  "reserve_space"])
def test_backprop_names_a_float32_array_beside_bfloat16_ones(name: str) -> None:
    case = Case("lstm", dtype="bfloat16")
    a = random_arrays(case, np.random.default_rng(2))
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, **case.attrs())
    kwargs: dict[str, Any] = dict(
        input=a.x, input_h=a.h0, input_c=a.c0, params=a.params, sequence_lengths=None, output=out.output,
        output_h=out.output_h, output_c=out.output_c, output_backprop=a.dy, output_h_backprop=a.dhy,
        output_c_backprop=a.dcy, reserve_space=out.reserve_space, host_reserved=out.host_reserved)
    kwargs[name] = kwargs[name].astype(np.float32)
    with pytest.raises(TypeError, match=rf"^{name} must have the dtype of input \(bfloat16\); got float32$"):
        cudnn_rnn.cudnn_rnn_backprop_v3(**kwargs, **case.attrs())


def test_gru_block_cell_refuses_bfloat16() -> None:
    b, i, h = 2, 3, 4
    arrays = [np.zeros(shape, BF16) for shape in ((b, i), (b, h), (i + h, 2 * h), (i + h, h), (2 * h,), (h,))]
    with pytest.raises(TypeError, match=r"x.dtype must be one of \('float16', 'float32', 'float64'\).*"
                                        r"cast bfloat16 arrays to float32.*got 'bfloat16'"):
        cudnn_rnn.gru_block_cell(*arrays)


# ==== the cuDNN backend on the fake GPU ===========================================================
FAKE_CASE = Case("lstm", num_layers=2, num_units=5, input_size=3, direction="bidirectional", num_proj=2,
                 max_time=5, batch=3, lengths=(5, 0, 3), dtype="bfloat16")


def test_bfloat16_reaches_cudnn_as_bfloat16_data_with_float_math(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(FAKE_CASE)
    results = train_step(FAKE_CASE, a)
    (fields,) = fake_cudnn.rnns.values()
    # PyTorch's math types for bfloat16 (tensor-op math is for half only): FMA, or DEFAULT with TF32 allowed
    assert (fields.data_type, fields.math_prec, fields.math_type) == (
        _lib.DataType.BFLOAT16, _lib.DataType.FLOAT, _lib.MathType.FMA_MATH)
    data_types = {call[1].data_type for call in fake_cudnn.calls if call[0] == "data"}
    assert data_types == {_lib.DataType.BFLOAT16}  # x and y
    assert {data_type for data_type, _, _ in fake_cudnn.tensors.values()} == {_lib.DataType.BFLOAT16}  # h, c, weights
    assert fake_cudnn.seen["weight_size"] == a.params.size * 2
    np.testing.assert_array_equal(fake_cudnn.seen["x"][:, 0], np.asarray(a.x)[:, 0])  # the values, unconverted
    for name in ("output", "output_h", "output_c", "reserve_space", "input_backprop", "params_backprop"):
        assert results[name].dtype == BF16, name
    assert np.all(np.asarray(results["params_backprop"]) == 1)  # what the fake's weight gradient adds


@pytest.mark.parametrize("version, capability", [(91200, (9, 0)), (92800, (7, 5)), (90100, (6, 1))])
def test_old_cudnn_or_gpu_refuses_bfloat16_before_any_cudnn_object(
        fake_cudnn: FakeCudnn, version: int, capability: tuple[int, int]) -> None:
    fake_cudnn.version, fake_cudnn.gpu.compute_capability = version, capability
    with pytest.raises(TypeError) as raised:
        train_step(FAKE_CASE, device_arrays(FAKE_CASE))
    message = str(raised.value)
    major, minor = capability
    for words in ("input.dtype is bfloat16", "GPU 0", "cuDNN >= 9.13.0", "compute capability >= 8.0",
                  f"this is cuDNN {_lib.version_string(version)}", f"compute capability {major}.{minor}", "float32"):
        assert words in message, (words, message)
    assert fake_cudnn.created_on == {} and fake_cudnn.destroyed == [], "no cuDNN object was made"
    float32 = FAKE_CASE.with_(dtype="float32")
    assert train_step(float32, device_arrays(float32))["output"].dtype == np.float32  # only bfloat16 is gated


def test_cudnn_9_13_on_compute_capability_8_0_runs_bfloat16(fake_cudnn: FakeCudnn) -> None:
    fake_cudnn.version, fake_cudnn.gpu.compute_capability = 91300, (8, 0)
    assert train_step(FAKE_CASE, device_arrays(FAKE_CASE))["output"].dtype == BF16


def test_each_gpu_is_asked_once(fake_cudnn: FakeCudnn, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = sys.modules["cupy"].cuda.runtime
    asked: list[int] = []
    properties = runtime.getDeviceProperties
    monkeypatch.setattr(runtime, "getDeviceProperties", lambda device: asked.append(device) or properties(device))
    float32 = FAKE_CASE.with_(dtype="float32")
    train_step(float32, device_arrays(float32))
    assert asked == [], "float32 needs no device properties"
    for _ in range(2):
        train_step(FAKE_CASE, device_arrays(FAKE_CASE))
    train_step(FAKE_CASE, device_arrays(FAKE_CASE, device=1))
    assert asked == [0, 1]
    fake_cudnn.gpu.compute_capability = (7, 0)  # not asked again: the answer is kept
    train_step(FAKE_CASE, device_arrays(FAKE_CASE))


@pytest.mark.skipif(LIBRARY is None or LIBRARY.version < 91300, reason="needs libcudnn.so.9 of 9.13 or newer "
                    "(pip install nvidia-cudnn-cu12)")
def test_the_installed_cudnn_takes_bfloat16_data_with_float_math_precision_only() -> None:
    """Handle-free descriptors: what the backend sets is accepted, a bfloat16 math precision is not."""
    config = RNNConfig("lstm", 2, 5, 3, direction="bidirectional", num_proj=2, dtype="bfloat16")
    fields = _cudnn_settings.rnn_fields(config, "standard", _cudnn_settings.current_math_type("bfloat16"), 0)
    with _descriptors.RNNDescriptor(fields) as descriptor:
        assert descriptor.read() == fields
    narrow = _lib.RNNDescriptorFields(**{**fields.__dict__, "math_prec": _lib.DataType.BFLOAT16})
    with pytest.raises(CudnnError) as raised:
        _descriptors.RNNDescriptor(narrow)
    assert raised.value.status_name == "CUDNN_STATUS_NOT_SUPPORTED"
    data = _lib.RNNDataFields(_lib.DataType.BFLOAT16, _lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, 6, 4, 5, (6, 0, 2, 3),
                              -1.5)
    with _descriptors.RNNDataDescriptor(data) as descriptor:
        assert descriptor.read() == data  # the padding value travels as bfloat16 bits


# ==== layers, optimisers, files ===================================================================
def test_a_layer_training_step_in_bfloat16_is_the_float32_step_rounded() -> None:
    layer = cudnn_rnn.LSTM(3, 4, num_layers=2, dtype="bfloat16", seed=5)
    assert layer.params.dtype == BF16 and layer.grad.dtype == BF16
    wide = cudnn_rnn.LSTM.from_params(layer.params.astype(np.float32), layer.config.replace(dtype="float32"))
    x = np.random.default_rng(3).uniform(-1, 1, (3, 6, 3)).astype(BF16)
    lengths = [6, 2, 4]
    y, h, c = layer(x, lengths)
    y32, h32, c32 = wide(x.astype(np.float32), lengths)
    for ours, theirs in ((y, y32), (h, h32), (c, c32)):
        np.testing.assert_array_equal(ours, theirs.astype(BF16))
    dx, dh0, dc0 = layer.backward(y)  # loss = sum(y**2) / 2
    wide.backward(y.astype(np.float32))
    assert dx.dtype == dh0.dtype == dc0.dtype == BF16
    assert_close(layer.grad, wide.grad.astype(BF16), TOLERANCE, "grad")
    before = layer.params.copy()
    adam, adam32 = Adam([layer.params], lr=1e-2), Adam([wide.params], lr=1e-2)
    adam.step([layer.grad])
    adam32.step([layer.grad.astype(np.float32)])  # the same gradient values, on float32 params
    assert layer.params.dtype == BF16 and adam.first_moment[0].dtype == adam.second_moment[0].dtype == np.float32
    np.testing.assert_array_equal(layer.params, wide.params.astype(BF16))  # float32 arithmetic, rounded once
    assert np.count_nonzero(layer.params != before) > layer.params.size // 2


def test_sgd_and_clipping_on_bfloat16() -> None:
    params = np.linspace(-1, 1, 9).astype(BF16)
    grad = np.linspace(3, -3, 9).astype(BF16)
    sgd = SGD([params], lr=0.1, momentum=0.9, nesterov=True)
    assert sgd.velocity[0].dtype == np.float32
    expected = params.astype(np.float32) - np.float32(0.1) * (grad.astype(np.float32) * np.float32(1.9))
    sgd.step([grad])
    np.testing.assert_array_equal(params, expected.astype(BF16))
    norm = clip_grad_norm([grad], 1.0)
    assert norm == pytest.approx(float(np.linalg.norm(np.linspace(3, -3, 9))), rel=1e-6)
    assert grad.dtype == BF16 and float(np.linalg.norm(grad.astype(np.float64))) == pytest.approx(1.0, rel=TOLERANCE)
    state = sgd.state_dict()
    again = SGD([params.copy()], lr=0.5, momentum=0.5, nesterov=True)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.velocity[0], sgd.velocity[0])


def test_params_file_keeps_bfloat16_bit_for_bit(tmp_path: Path) -> None:
    layer = cudnn_rnn.GRU(2, 3, dtype="bfloat16", bidirectional=True, seed=2)
    layer.params[...] = np.random.default_rng(4).uniform(-2, 2, layer.params.size).astype(BF16)
    path = tmp_path / "gru.npz"
    layer.save(path)
    with np.load(path) as raw:  # an .npy cannot name bfloat16: its bits, and the dtype in the config
        assert raw["params"].dtype == np.uint16 and json.loads(str(raw["config"]))["dtype"] == "bfloat16"
    loaded = cudnn_rnn.GRU.load(path)
    assert loaded.params.dtype == BF16 and loaded.params.tobytes() == layer.params.tobytes()
    assert loaded.config == layer.config
    (found,) = read_file(str(path))
    assert found.fields["dtype"] == "bfloat16" and found.to_params().value.tobytes() == layer.params.tobytes()


def test_cudnn_rnn_convert_writes_bfloat16_to_pt_exactly_and_refuses_an_npz_of_tensors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from cudnn_rnn.cli import convert

    layer = cudnn_rnn.LSTM(3, 4, dtype="bfloat16", seed=3)
    layer.save(tmp_path / "lstm.npz")
    assert convert.main(["--to", "torch", str(tmp_path / "lstm.npz"), str(tmp_path / "lstm.pt")]) == 0
    state = torch.load(tmp_path / "lstm.pt", weights_only=True)
    expected = to_format("torch", layer.params, layer.config).value
    assert set(state) == set(expected)
    for name, tensor in state.items():
        assert tensor.dtype == torch.bfloat16, name
        np.testing.assert_array_equal(tensor.view(torch.int16).numpy(), expected[name].view(np.int16))
    capsys.readouterr()
    assert convert.main(["--to", "torch", str(tmp_path / "lstm.npz"), str(tmp_path / "tensors.npz")]) == 2
    assert "an .npz of named tensors cannot name bfloat16" in capsys.readouterr().err
    assert not (tmp_path / "tensors.npz").exists()


def test_checkpoint_keeps_bfloat16_layers_and_float32_optimiser_state(tmp_path: Path) -> None:
    layer = cudnn_rnn.RNN(3, 4, dtype="bfloat16", seed=1)
    adam = Adam([layer.params])
    x = np.random.default_rng(5).uniform(-1, 1, (2, 3, 3)).astype(BF16)
    y, _, _ = layer(x)
    layer.backward(y)
    adam.step([layer.grad])
    path = tmp_path / "run.safetensors"
    checkpoint.save(path, layers={"rnn": layer}, optimizers={"adam": adam}, arrays={"grad": layer.grad})
    blob = path.read_bytes()
    header = json.loads(blob[8:8 + int.from_bytes(blob[:8], "little")])
    assert header["layers/rnn/params"]["dtype"] == "BF16" and header["arrays/grad"]["dtype"] == "BF16"
    assert header["optimizers/adam/first_moment/0"]["dtype"] == "F32"
    begin, end = header["layers/rnn/params"]["data_offsets"]
    data_start = 8 + int.from_bytes(blob[:8], "little")
    assert blob[data_start + begin:data_start + end] == layer.params.tobytes()  # safetensors' BF16: the bits
    other = cudnn_rnn.RNN(3, 4, dtype="bfloat16", seed=9)
    other_adam, grad = Adam([other.params]), np.zeros_like(layer.grad)
    checkpoint.load(path).restore(layers={"rnn": other}, optimizers={"adam": other_adam}, arrays={"grad": grad})
    assert other.params.tobytes() == layer.params.tobytes() and grad.tobytes() == layer.grad.tobytes()
    np.testing.assert_array_equal(other_adam.second_moment[0], adam.second_moment[0])


def test_onnx_export_of_bfloat16_needs_opset_22(tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    config = RNNConfig("lstm", 2, 4, 3, direction="bidirectional", dtype="bfloat16")
    params = np.random.default_rng(6).uniform(-1, 1, cudnn_rnn.cudnn_rnn_params_size(
        2, 4, 3, direction="bidirectional")).astype(BF16)
    with pytest.raises(ValueError, match=r"bfloat16 params need opset >= 22 .*got opset=17"):
        export_onnx(params, config, tmp_path / "old.onnx")
    with pytest.warns(UserWarning, match="the model is bfloat16"):
        model = export_onnx(params, config, tmp_path / "lstm.onnx", opset=22)
    expected = to_format("onnx", params, config).value
    weights = {tensor.name: tensor for tensor in model.graph.initializer if tensor.name in expected}
    assert set(weights) == set(expected)
    for name, tensor in weights.items():
        assert tensor.data_type == onnx.TensorProto.BFLOAT16, name
        np.testing.assert_array_equal(numpy_helper.to_array(tensor).view(np.uint16), expected[name].view(np.uint16))


# ==== the dtype and its package =====================================================================
def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return result.stdout


def test_ml_dtypes_is_imported_only_for_bfloat16() -> None:
    code = ("import sys, numpy as np, cudnn_rnn, cudnn_rnn.convert, cudnn_rnn.checkpoint\n"
            "layer = cudnn_rnn.LSTM(3, 4)\n"
            "y, h, c = layer(np.ones((2, 5, 3), np.float32)); layer.backward(y)\n"
            "print('ml_dtypes' in sys.modules)\n"
            "cudnn_rnn.config.numpy_dtype('bfloat16')\n"
            "print('ml_dtypes' in sys.modules)\n")
    assert _run(code).split() == ["False", "True"]


def test_without_ml_dtypes_everything_else_runs_and_bfloat16_says_what_to_install() -> None:
    code = ("import sys\n"
            "sys.modules['ml_dtypes'] = None  # as if it were not installed: importing it raises ImportError\n"
            "import numpy as np, cudnn_rnn\n"
            "from cudnn_rnn.config import RNNConfig, numpy_dtype\n"
            "layer = cudnn_rnn.GRU(3, 4, dtype='float16')\n"
            "y, h, _ = layer(np.ones((2, 5, 3), np.float16)); layer.backward(y)\n"
            "print(RNNConfig('lstm', 1, 4, 3, dtype='bfloat16').dtype)  # the name alone needs no ml_dtypes\n"
            "for make in (lambda: numpy_dtype('bfloat16'), lambda: cudnn_rnn.LSTM(3, 4, dtype='bfloat16')):\n"
            "    try:\n"
            "        make()\n"
            "    except ImportError as error:\n"
            "        print(error)\n")
    lines = _run(code).splitlines()
    assert lines[0] == "bfloat16" and len(lines) == 3
    for line in lines[1:]:
        assert line == ("dtype 'bfloat16' needs the 'ml_dtypes' package: pip install ml_dtypes "
                        "(or pip install 'cudnn_rnn[bfloat16]')"), line


def test_numpy_dtype_resolves_every_spelling() -> None:
    for spelling in ("bfloat16", ml_dtypes.bfloat16, BF16):
        assert numpy_dtype(spelling) == BF16
    for spelling, expected in (("float16", np.float16), (np.float32, np.float32), (np.dtype("float64"), np.float64)):
        assert numpy_dtype(spelling) == np.dtype(expected)
    with pytest.raises(TypeError, match=r"^precision must be one of .*'bfloat16'\); got 'float8_e4m3fn'$"):
        numpy_dtype(ml_dtypes.float8_e4m3fn, "precision")
