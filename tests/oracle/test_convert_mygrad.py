"""The ``mygrad`` format against live mygrad: ``mygrad.nnet.layers.gru`` is a reset-before GRU.

* mygrad weights -> gru_block_cell weights (exact), then our ``gru_block_cell`` op stepped over
  the sequence equals mygrad's ``gru`` forward.
* cuDNN <-> mygrad is an approximation: with the reset gate saturated at 1 (where the doc
  says the two GRUs agree) the converted weights reproduce mygrad's sequence through
  ``cudnn_rnn_v3``; with an ordinary reset gate they do not, which is why it is refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from mygrad.nnet.layers.gru import gru as mygrad_gru  # needs numba as well

import cudnn_rnn
from convert_testing import relative_error, rng_for
from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import (
    InexactConversionError,
    from_format,
    gru_block_cell_to_mygrad,
    mygrad_to_gru_block_cell,
    to_format,
)
from cudnn_rnn.formats import convert_between

pytestmark = pytest.mark.oracle

NAMES = ("Uz", "Wz", "bz", "Ur", "Wr", "br", "Uh", "Wh", "bh")


def random_mygrad_weights(i: int, n: int, rng: np.random.Generator, dtype: str) -> dict[str, np.ndarray]:
    shapes = {"U": (i, n), "W": (n, n), "b": (n,)}
    return {name: rng.uniform(-0.8, 0.8, shapes[name[0]]).astype(dtype) for name in NAMES}


def mygrad_forward(weights: dict[str, np.ndarray], x: np.ndarray, s0: np.ndarray) -> np.ndarray:
    """mygrad's hidden states for x [T, B, I]: [T, B, N] (its s[1:])."""
    return mygrad_gru(x, *(weights[name] for name in NAMES), s0=s0, constant=True).data[1:]


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("float64", 1e-12)])
def test_our_gru_block_cell_op_on_converted_weights_equals_mygrad(dtype: str, tolerance: float) -> None:
    rng = rng_for("op", dtype)
    i, n, b, t = 3, 5, 4, 6
    weights = random_mygrad_weights(i, n, rng, dtype)
    block = mygrad_to_gru_block_cell(weights)
    x = rng.uniform(-1, 1, (t, b, i)).astype(dtype)
    s0 = rng.uniform(-1, 1, (b, n)).astype(dtype)
    expected = mygrad_forward(weights, x, s0)
    h = s0
    for time in range(t):
        h = cudnn_rnn.gru_block_cell(x[time], h, block["w_ru"], block["w_c"], block["b_ru"], block["b_c"])[3]
        assert relative_error(h, expected[time]) <= tolerance, time
    # and the pair is exact both ways, bit for bit
    back = gru_block_cell_to_mygrad(block)
    assert list(back) == list(NAMES)
    assert all(back[name].tobytes() == weights[name].tobytes() for name in NAMES)


def test_cudnn_gru_from_mygrad_agrees_where_the_reset_gate_is_one() -> None:
    rng = rng_for("saturated")
    i, n, b, t = 3, 4, 2, 5
    config = RNNConfig("gru", 1, n, i)
    weights = random_mygrad_weights(i, n, rng, "float64")
    weights["br"] = np.full(n, 60.0)  # sigmoid(60 + small) == 1.0 in float64: r == 1
    weights["Ur"] = weights["Ur"] * 1e-3
    weights["Wr"] = weights["Wr"] * 1e-3
    with pytest.raises(InexactConversionError, match="reset-before"):
        from_format("mygrad", weights, config)
    converted = from_format("mygrad", weights, config, allow_approximation=True)
    assert len(converted.approximations) == 1 and "r == 1" in converted.approximations[0]
    x = rng.uniform(-1, 1, (t, b, i))
    s0 = rng.uniform(-1, 1, (b, n))
    ours = cudnn_rnn.cudnn_rnn_v3(x, s0[None], None, converted.value, rnn_mode="gru", is_training=False)
    assert relative_error(ours.output, mygrad_forward(weights, x, s0)) <= 1e-12


def test_cudnn_gru_and_mygrad_differ_with_an_ordinary_reset_gate() -> None:
    rng = rng_for("ordinary")
    i, n, b, t = 3, 4, 2, 5
    config = RNNConfig("gru", 1, n, i)
    size = cudnn_rnn.cudnn_rnn_params_size(1, n, i, rnn_mode="gru")
    params = rng.uniform(-0.8, 0.8, size)
    converted = to_format("mygrad", params, config, allow_approximation=True)
    assert len(converted.approximations) == 2  # reset placement, and bR_n folded into bh
    x = rng.uniform(-1, 1, (t, b, i))
    s0 = rng.uniform(-1, 1, (b, n))
    ours = cudnn_rnn.cudnn_rnn_v3(x, s0[None], None, params, rnn_mode="gru", is_training=False)
    assert relative_error(ours.output, mygrad_forward(converted.value, x, s0)) > 1e-3
    # the same numbers through gru_block_cell: the direct pair agrees with the route through params
    block = convert_between("mygrad", "gru_block_cell", converted.value, config)
    assert block.approximations == ()
    assert all(np.array_equal(block.value[k], v)
               for k, v in to_format("gru_block_cell", params, config, allow_approximation=True).value.items())
