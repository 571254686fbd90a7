"""The public API on CuPy arrays beyond the ops: weight conversions stay on the device and equal the
NumPy results; a layer with ``xp=cupy`` computes what the same layer computes on NumPy; a stream
another framework owns becomes CuPy's current stream as this CuPy wants it (no deprecated API)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from cudnn_rnn import LSTM, RNNConfig  # noqa: E402
from cudnn_rnn.convert import from_format, to_format  # noqa: E402
from cudnn_rnn.layout import params_layout  # noqa: E402
from rnn_testing import relative_error  # noqa: E402

RESET_BEFORE = ("gru_block_cell", "mygrad")


@pytest.mark.parametrize("fmt", ["canonical", "torch", "keras", "tf_cell", "onnx", "gru_block_cell", "mygrad"])
def test_cupy_arrays_convert_on_the_device(fmt: str) -> None:
    allow = fmt in RESET_BEFORE
    config = RNNConfig("gru", 1, 3, 2) if allow else RNNConfig("gru", 2, 3, 2, direction="bidirectional")
    params = np.random.default_rng(4).uniform(-1, 1, params_layout(config).size).astype(np.float32)
    on_host = to_format(fmt, params, config, allow_approximation=allow)
    on_device = to_format(fmt, cupy.asarray(params), config, allow_approximation=allow)
    assert on_device.approximations == on_host.approximations
    for name, value in on_host.value.items():
        assert isinstance(on_device.value[name], cupy.ndarray)
        assert np.array_equal(cupy.asnumpy(on_device.value[name]), value), name
    back = from_format(fmt, on_device.value, config, allow_approximation=allow).value
    assert isinstance(back, cupy.ndarray)
    assert np.array_equal(cupy.asnumpy(back), from_format(fmt, on_host.value, config, allow_approximation=allow).value)


def test_cupy_layer_matches_numpy_layer() -> None:
    cpu = LSTM(3, 4, 2, bidirectional=True, dtype="float64", seed=1)
    gpu = LSTM(3, 4, 2, bidirectional=True, dtype="float64", seed=1, xp=cupy)
    x = np.random.default_rng(0).standard_normal((2, 5, 3))
    y_cpu, _, _ = cpu.forward(x, [5, 2])
    y_gpu, _, _ = gpu.forward(cupy.asarray(x), [5, 2])
    dy = np.ones_like(y_cpu)
    cpu.backward(dy)
    gpu.backward(cupy.asarray(dy))
    assert relative_error(cupy.asnumpy(y_gpu), y_cpu) <= 1e-10
    assert relative_error(cupy.asnumpy(gpu.grad), cpu.grad) <= 1e-10


def test_a_foreign_stream_becomes_cupys_current_stream_without_a_deprecation() -> None:
    from cudnn_rnn._cudnn._streams import external_stream

    foreign = cupy.cuda.Stream(non_blocking=True)  # stands for XLA's or PyTorch's: only its address is handed over
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # CuPy 14 deprecates cupy.cuda.ExternalStream
        with cupy.cuda.Device(0), external_stream(foreign.ptr, 0):
            assert cupy.cuda.get_current_stream().ptr == foreign.ptr
            doubled = cupy.arange(4) * 2
    assert cupy.cuda.get_current_stream().ptr != foreign.ptr
    foreign.synchronize()
    assert doubled.get().tolist() == [0, 2, 4, 6]
