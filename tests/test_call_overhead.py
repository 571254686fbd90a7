"""What a call costs before any arithmetic: a configuration is checked once per distinct set of attributes, not
at every call (counted, not timed), and a repeated call gives the same results as the first."""

from __future__ import annotations

import numpy as np
import pytest

from cudnn_rnn import RNNConfig, cudnn_rnn_params_size, cudnn_rnn_v3
from cudnn_rnn.layers import LSTM


@pytest.fixture
def configs_built(monkeypatch: pytest.MonkeyPatch) -> list[RNNConfig]:
    """Every RNNConfig validated (constructed or replaced) from now on."""
    built: list[RNNConfig] = []
    original = RNNConfig.__post_init__

    def counted(self: RNNConfig) -> None:
        original(self)
        built.append(self)

    monkeypatch.setattr(RNNConfig, "__post_init__", counted)
    return built


def test_a_repeated_op_call_checks_its_configuration_once(configs_built: list[RNNConfig]) -> None:
    rng = np.random.default_rng(0)
    params = rng.standard_normal(cudnn_rnn_params_size(2, 5, 3, rnn_mode="gru", direction="bidirectional"))
    x, h = rng.standard_normal((4, 2, 3)), np.zeros((4, 2, 5))
    kw = dict(rnn_mode="gru", direction="bidirectional", is_training=False, seed=7)
    first = cudnn_rnn_v3(x, h, None, params, **kw)
    del configs_built[:]
    for _ in range(5):
        again = cudnn_rnn_v3(x, h, None, params, **kw)
        np.testing.assert_array_equal(again.output, first.output)
    assert configs_built == []
    cudnn_rnn_v3(x, h, None, params, **{**kw, "seed": 8})  # another attribute: checked again
    assert len(configs_built) == 1 and configs_built[0].seed == 8


def test_the_attributes_keep_their_types_and_errors(configs_built: list[RNNConfig]) -> None:
    """1 and True are different attributes (a bool num_proj is refused, however often 1 was seen), and an
    unhashable attribute gets the constructor's own error."""
    rng = np.random.default_rng(1)
    x, h, c = rng.standard_normal((3, 2, 4)), np.zeros((1, 2, 3)), np.zeros((1, 2, 6))
    params = rng.standard_normal(cudnn_rnn_params_size(1, 6, 4, num_proj=3))
    cudnn_rnn_v3(x, h, c, params, num_proj=3, is_training=False)
    with pytest.raises(TypeError, match="num_proj must be an integer"):
        cudnn_rnn_v3(x, h, c, params, num_proj=3.0, is_training=False)
    with pytest.raises(TypeError, match="dropout"):
        cudnn_rnn_v3(x, h, c, params, num_proj=3, dropout=[0.5], is_training=False)


def test_a_layer_decoding_step_by_step_checks_its_configuration_once(configs_built: list[RNNConfig]) -> None:
    lstm = LSTM(3, 4, 2, dropout=0.25, seed=3)
    token = np.random.default_rng(2).standard_normal((1, 1, 3)).astype(np.float32)
    y, h, c = lstm.forward(token, training=False)
    del configs_built[:]
    for _ in range(20):
        y, h, c = lstm.forward(token, None, h, c, training=False)
    assert configs_built == []
    lstm.forward(token, training=True)  # step 0: the seed2 the inference calls ran with
    assert configs_built == []
    lstm.forward(token, training=True)  # step 1 has a seed2 of its own
    assert [config.seed2 for config in configs_built] == [1]
