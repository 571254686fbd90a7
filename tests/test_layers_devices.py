"""Layers and optimisers whose arrays live on GPU 1 while GPU 0 is current, on the fake GPU (tests/support/fake_gpu.py).

CuPy makes every new array (zeros, ``*_like``, a copy, a temporary of arithmetic) on the *current*
device, and a kernel that touches another GPU's memory fails or is slow there. So everything a
layer or an optimiser makes for its own arrays must be made on their GPU: the default h0/c0, the
gradient buffer, ``grad +=`` in backward, ``zero_grad``, the copy ``from_params`` takes, the
optimisers' temporaries and ``clip_grad_norm``'s. The fake records every kernel that touches an
array of another device as a violation; the ``fake_cudnn`` fixture fails a test that made one.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from cudnn_rnn import GRU, LSTM, RNN
from cudnn_rnn.layers import RecurrentLayer
from cudnn_rnn.optim import SGD, Adam, clip_grad_norm
from fake_gpu import FakeCudnn, FakeDevice, to_device

LAYERS = {"lstm": lambda xp: LSTM(3, 4, num_layers=2, bidirectional=True, dropout=0.3, xp=xp, seed=1),
          "gru": lambda xp: GRU(3, 4, xp=xp, seed=2),
          "rnn": lambda xp: RNN(3, 4, activation="relu", xp=xp, seed=3)}


def _on_gpu_1(make: object, cupy: types.ModuleType) -> RecurrentLayer:
    with FakeDevice(1):
        layer = make(cupy)  # type: ignore[operator]
    assert layer.params.device_id == layer.grad.device_id == 1
    return layer


@pytest.mark.parametrize("kind", list(LAYERS))
def test_a_layer_on_gpu_1_trains_while_gpu_0_is_current(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType,
                                                         kind: str) -> None:
    layer = _on_gpu_1(LAYERS[kind], fake_cupy)
    x = to_device(np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32), 1)
    optimisers = [SGD([layer.params], lr=0.1, momentum=0.9, nesterov=True), Adam([layer.params], lr=0.01)]
    assert fake_cudnn.gpu.current_device == 0
    for optimiser in optimisers:
        y, h, c = layer.forward(x, lengths=[5, 2])  # h0 and c0 made by the layer
        assert y.device_id == h.device_id == 1 and (c is None or c.device_id == 1)
        layer.zero_grad()
        dx, dh0, dc0 = layer.backward(y)
        assert dx.device_id == layer.grad.device_id == 1
        assert clip_grad_norm([layer.grad], 0.5) > 0
        optimiser.step([layer.grad])
    assert fake_cudnn.gpu.violations == []
    assert layer.params.device_id == 1 and all(state.device_id == 1 for optimiser in optimisers
                                               for state in optimiser.state_dict().get("velocity", [])
                                               + optimiser.state_dict().get("first_moment", []))


def test_the_fake_records_a_kernel_on_another_gpu(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType) -> None:
    # what every test above relies on: an update made with GPU 0 current on GPU 1's arrays is caught
    params = to_device(np.ones(4), 1)
    params -= to_device(np.ones(4), 1)
    assert fake_cudnn.gpu.violations and "device 1" in fake_cudnn.gpu.violations[0]
    fake_cudnn.gpu.violations.clear()


def test_from_params_keeps_a_layer_beside_its_params(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType) -> None:
    source = _on_gpu_1(LAYERS["gru"], fake_cupy)
    copy = RecurrentLayer.from_params(source.params, source.config)
    assert copy.params.device_id == copy.grad.device_id == 1
    assert copy.params is not source.params
    np.testing.assert_array_equal(copy.params.view(np.ndarray), source.params.view(np.ndarray))
