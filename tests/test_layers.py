"""Layer classes: gradients against the functional op and finite differences, init, dropout seeds, save/load."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

import ml_dtypes  # noqa: F401  (registers NumPy's "bfloat16")
import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn.layers import GRU, LSTM, RNN, RecurrentLayer, glorot_uniform, keras_init_params, orthogonal
from cudnn_rnn.layout import params_layout
from cudnn_rnn.optim import SGD
from signatures import source_signature


def assert_close(actual: Any, expected: Any, tolerance: float, what: str) -> None:
    """max |actual - expected| <= tolerance * max |expected|, naming ``what`` on failure."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    error = np.abs(actual - expected).max() / max(np.abs(expected).max(), 1e-300)
    assert error <= tolerance, f"{what}: relative error {error:.3g} > {tolerance:.1g}"

#: tiny float64 layers of every kind, with the features that change the math switched on
LAYER_CASES: dict[str, Callable[[], RecurrentLayer]] = {
    "lstm_proj_bidi_2l": lambda: LSTM(2, 3, 2, bidirectional=True, num_proj=2, dropout=0.4, dtype="float64", seed=3),
    "gru_bidi_2l": lambda: GRU(3, 3, 2, bidirectional=True, dropout=0.3, dtype="float64", seed=5),
    "rnn_tanh_2l": lambda: RNN(2, 4, 2, activation="tanh", dropout=0.25, dtype="float64", seed=7),
    "rnn_relu_skip": lambda: RNN(3, 3, 1, activation="relu", input_mode="skip_input", dtype="float64", seed=11),
}


def _inputs(layer: RecurrentLayer, rng: np.random.Generator, batch: int = 3, max_time: int = 4,
            time_major: bool = False) -> dict[str, Any]:
    """x, h0, c0 and loss weights (wy, wh, wc) for a batch of the layer's shape."""
    c = layer.config
    k = c.num_pseudo_layers

    def draw(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(c.dtype)

    seq = (max_time, batch) if time_major else (batch, max_time)
    state = (k, batch) if time_major else (batch, k)
    return dict(x=draw(*seq, c.input_size), h0=draw(*state, c.state_size),
                c0=draw(*state, c.num_units) if c.has_cell else None,
                wy=draw(*seq, c.output_size), wh=draw(*state, c.state_size),
                wc=draw(*state, c.num_units) if c.has_cell else None)


def _loss(layer: RecurrentLayer, a: dict[str, Any], lengths: Any, step: int, time_major: bool = False) -> float:
    """sum(wy * y) + sum(wh * h) + sum(wc * c) of a training forward at dropout seed2 = step."""
    layer.step = step
    y, h, c = layer.forward(a["x"], lengths, a["h0"], a["c0"], time_major=time_major)
    loss = float(np.sum(a["wy"] * y) + np.sum(a["wh"] * h))
    return loss + (float(np.sum(a["wc"] * c)) if c is not None else 0.0)


def _central_difference(f: Callable[[], float], array: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """d f / d array by central differences, perturbing ``array`` in place."""
    grad = np.zeros(array.shape)
    for index in np.ndindex(*array.shape):
        saved = array[index]
        array[index] = saved + eps
        up = f()
        array[index] = saved - eps
        down = f()
        array[index] = saved
        grad[index] = (up - down) / (2 * eps)
    return grad


@pytest.mark.parametrize("name", list(LAYER_CASES))
def test_layer_gradients_match_finite_differences(name: str, rng: np.random.Generator) -> None:
    layer = LAYER_CASES[name]()
    a = _inputs(layer, rng)
    lengths = [4, 1, 0]  # a full, a length-1 and an empty sequence
    step = 9
    _loss(layer, a, lengths, step)
    dx, dh0, dc0 = layer.backward(a["wy"], a["wh"], a["wc"])
    assert layer.step == step + 1

    def loss() -> float:
        return _loss(layer, a, lengths, step)

    assert_close(layer.grad, _central_difference(loss, layer.params), 1e-6, "d loss / d params")
    assert_close(dx, _central_difference(loss, a["x"]), 1e-6, "dx")
    assert_close(dh0, _central_difference(loss, a["h0"]), 1e-6, "dh0")
    if layer.config.has_cell:
        assert_close(dc0, _central_difference(loss, a["c0"]), 1e-6, "dc0")
    else:
        assert dc0 is None
    assert np.all(dx[2] == 0) and np.all(dx[1, 1:] == 0), "dx past a sequence's length must be 0"


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("name", ["lstm_proj_bidi_2l", "gru_bidi_2l"])
def test_layer_equals_functional_op(name: str, time_major: bool, rng: np.random.Generator) -> None:
    layer = LAYER_CASES[name]()
    c = layer.config
    a = _inputs(layer, rng, time_major=time_major)
    lengths = np.array([2, 4, 3], dtype=np.int32)
    layer.step = 17
    y, h, cy = layer.forward(a["x"], lengths, a["h0"], a["c0"], time_major=time_major)
    dx, dh0, dc0 = layer.backward(a["wy"], a["wh"], a["wc"])

    attrs = dict(rnn_mode=c.rnn_mode, input_mode=c.input_mode, direction=c.direction, dropout=c.dropout,
                 seed=c.seed, seed2=17, num_proj=c.num_proj, time_major=time_major)
    out = cudnn_rnn.cudnn_rnn_v3(a["x"], a["h0"], a["c0"], layer.params, lengths, is_training=True, **attrs)
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(a["x"], a["h0"], a["c0"], layer.params, lengths, out.output,
                                            out.output_h, out.output_c, a["wy"], a["wh"], a["wc"],
                                            out.reserve_space, out.host_reserved, **attrs)
    np.testing.assert_array_equal(y, out.output)
    np.testing.assert_array_equal(h, out.output_h)
    np.testing.assert_array_equal(dx, grads.input_backprop)
    np.testing.assert_array_equal(dh0, grads.input_h_backprop)
    np.testing.assert_array_equal(layer.grad, grads.params_backprop)
    if c.has_cell:
        np.testing.assert_array_equal(cy, out.output_c)
        np.testing.assert_array_equal(dc0, grads.input_c_backprop)
    else:
        assert cy is None and dc0 is None


def test_backward_accumulates_until_zero_grad(rng: np.random.Generator) -> None:
    layer = GRU(2, 3, dtype="float64")
    a = _inputs(layer, rng)
    grads = []
    for _ in range(2):
        before = layer.grad.copy()
        layer.forward(a["x"], None, a["h0"])
        layer.backward(a["wy"], a["wh"])
        grads.append(layer.grad - before)
    np.testing.assert_allclose(grads[0], grads[1], rtol=0, atol=0)  # no dropout: same gradient twice
    assert np.abs(grads[0]).max() > 0
    np.testing.assert_allclose(layer.grad, 2 * grads[0], rtol=1e-15)
    buffer = layer.grad
    layer.zero_grad()
    assert not layer.grad.any() and layer.grad is buffer


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_backward_adds_the_ops_params_gradient_into_grad_in_place(dtype: str, rng: np.random.Generator) -> None:
    """The backend adds into the layer's own buffer what the public op returns, rounded to the dtype first."""
    layer = GRU(2, 3, 2, dropout=0.5, seed=4, dtype=dtype)
    a = _inputs(layer, rng)
    buffer, expected = layer.grad, np.zeros_like(layer.grad)
    for step in range(2):
        layer.forward(a["x"], None, a["h0"])
        layer.backward(a["wy"], a["wh"])
        attrs = dict(rnn_mode="gru", dropout=0.5, seed=4, seed2=step, time_major=False)
        out = cudnn_rnn.cudnn_rnn_v3(a["x"], a["h0"], None, layer.params, **attrs)
        expected += cudnn_rnn.cudnn_rnn_backprop_v3(a["x"], a["h0"], None, layer.params, None, out.output,
                                                    out.output_h, None, a["wy"], a["wh"], None, out.reserve_space,
                                                    **attrs).params_backprop
    assert layer.grad is buffer
    np.testing.assert_array_equal(layer.grad, expected)


def test_missing_states_are_zeros_and_outputs_masked(rng: np.random.Generator) -> None:
    layer = LSTM(3, 4, 1, dtype="float64", seed=1)
    a = _inputs(layer, rng)
    zeros_h, zeros_c = np.zeros_like(a["h0"]), np.zeros_like(a["c0"])
    y1, h1, c1 = layer.forward(a["x"], [4, 2, 0], training=False)
    y2, h2, c2 = layer.forward(a["x"], [4, 2, 0], zeros_h, zeros_c, training=False)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(h1, h2)
    np.testing.assert_array_equal(c1, c2)
    assert not y1[1, 2:].any() and not y1[2].any()
    assert not h1[2].any() and not c1[2].any()  # length 0: final state = initial state (zeros)


# ---- dropout seeds -----------------------------------------------------------------------------
def test_dropout_masks_change_between_steps_and_follow_the_step_counter(rng: np.random.Generator) -> None:
    layer = LSTM(3, 4, 2, dropout=0.5, dtype="float64", seed=21)
    a = _inputs(layer, rng)
    y0, _, _ = layer.forward(a["x"])
    y1, _, _ = layer.forward(a["x"])
    assert layer.step == 2
    assert not np.allclose(y0, y1), "dropout masks must change from one training step to the next"
    again = LSTM(3, 4, 2, dropout=0.5, dtype="float64", seed=21)
    again.step = 1
    np.testing.assert_array_equal(again.forward(a["x"])[0], y1)  # step 1 = seed2 1, whatever came before
    c = layer.config
    direct = cudnn_rnn.cudnn_rnn_v3(a["x"], np.zeros_like(a["h0"]), np.zeros_like(a["c0"]), layer.params,
                                    rnn_mode="lstm", dropout=0.5, seed=21, seed2=0, time_major=False)
    np.testing.assert_array_equal(direct.output, y0)
    assert c.seed == 21


def test_a_training_forward_at_the_last_step_is_refused_and_the_state_stays_savable(tmp_path: Path) -> None:
    """At step 2**63 - 1 a training forward raises naming step, changing nothing; the layer saves and loads.

    Before, the forward ran (step became 2**63), then save() raised a bare OverflowError and
    load_state_dict(state_dict()) refused the layer's own state.
    """
    layer = LSTM(3, 4, num_layers=2, dropout=0.3)
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    layer.step = 2**63 - 1
    with pytest.raises(ValueError, match=r"step must stay a non-negative integer < 2\*\*63: a training forward at "
                                         r"step 9223372036854775807 is refused"):
        layer.forward(x)
    assert layer.step == 2**63 - 1 and layer._saved is None
    layer.forward(x, training=False)  # inference leaves the step alone: allowed
    layer.save(tmp_path / "last.npz")
    assert LSTM.load(tmp_path / "last.npz").step == 2**63 - 1
    layer.load_state_dict(layer.state_dict())
    layer.step = 2**63 - 2
    layer.forward(x)
    assert layer.step == 2**63 - 1  # the last training forward there is


def test_inference_has_no_dropout_and_keeps_nothing(rng: np.random.Generator) -> None:
    layer = GRU(3, 4, 2, dropout=0.5, dtype="float64", seed=2)
    plain = GRU(3, 4, 2, dropout=0.0, dtype="float64", seed=2)
    np.testing.assert_array_equal(layer.params, plain.params)
    a = _inputs(layer, rng)
    y_eval, _, _ = layer.forward(a["x"], training=False)
    np.testing.assert_array_equal(y_eval, layer.forward(a["x"], training=False)[0])
    np.testing.assert_array_equal(y_eval, plain.forward(a["x"])[0])
    assert layer.step == 0
    with pytest.raises(RuntimeError, match="training=True"):
        layer.backward(np.ones_like(y_eval))


def _short_training_run(seed: int, rng_seed: int = 0) -> np.ndarray:
    data = np.random.default_rng(rng_seed)
    layer = LSTM(3, 5, 2, dropout=0.3, seed=seed)
    opt = SGD([layer.params], lr=0.1, momentum=0.9)
    x = data.standard_normal((4, 6, 3)).astype(np.float32)
    target = data.standard_normal((4, 6, 5)).astype(np.float32)
    for _ in range(3):
        y, _, _ = layer.forward(x, [6, 5, 1, 3])
        layer.zero_grad()
        layer.backward(2 * (y - target) / y.size)
        opt.step([layer.grad])
    return layer.params.copy()


def test_same_seed_reproduces_a_training_run_and_another_seed_differs() -> None:
    first = _short_training_run(seed=4)
    np.testing.assert_array_equal(first, _short_training_run(seed=4))
    assert not np.array_equal(first, _short_training_run(seed=5))


# ---- initialisation ----------------------------------------------------------------------------
def test_init_matches_keras_rules() -> None:
    n, i, p = 32, 16, 8
    layer = LSTM(i, n, 2, bidirectional=True, num_proj=p, dtype="float64", seed=1)
    layout = params_layout(layer.config)
    g = 4
    for k in range(layer.config.num_pseudo_layers):
        width = i if k < 2 else 2 * p
        w = layout.gate_block(layer.params, k, "input")
        limit = np.sqrt(6.0 / (width + g * n))
        assert w.shape == (g * n, width)
        assert np.abs(w).max() <= limit and np.abs(w).max() > 0.95 * limit
        assert abs(w.var() - limit**2 / 3) < 0.12 * limit**2 / 3  # variance of U(-a, a)
        r = layout.gate_block(layer.params, k, "recurrent")
        assert r.shape == (g * n, p)
        np.testing.assert_allclose(r.T @ r, np.eye(p), atol=1e-12)  # stacked block: orthonormal columns
        proj = layout.projection(layer.params, k)
        proj_limit = np.sqrt(6.0 / (n + p))
        assert np.abs(proj).max() <= proj_limit and np.abs(proj).max() > 0.9 * proj_limit
        b_in, b_rec = layout.bias_block(layer.params, k, "input"), layout.bias_block(layer.params, k, "recurrent")
        assert not b_in.any()
        np.testing.assert_array_equal(b_rec[n:2 * n], 1.0)  # gate order i, f, g, o: bR_f = 1
        assert not np.delete(b_rec, np.s_[n:2 * n]).any()
    named = layer.weights()
    np.testing.assert_array_equal(named["bR_f_l1_reverse"], 1.0)
    assert not named["bW_f_l1_reverse"].any()


def test_square_recurrent_matrix_is_orthogonal_and_forget_bias_optional() -> None:
    rnn = RNN(5, 6, seed=3, dtype="float64")
    r = rnn.weights()["R_h_l0"]
    np.testing.assert_allclose(r @ r.T, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(r.T @ r, np.eye(6), atol=1e-12)
    lstm = LSTM(3, 4, unit_forget_bias=False)
    assert not lstm.weights()["bR_f_l0"].any()
    gru = GRU(3, 4, input_mode="auto_select")
    assert not np.concatenate([v.ravel() for k, v in gru.weights().items() if k.startswith("b")]).any()


def test_init_is_deterministic_and_dtype_independent() -> None:
    a = LSTM(3, 4, 2, seed=8, dtype="float64")
    np.testing.assert_array_equal(a.params, LSTM(3, 4, 2, seed=8, dtype="float64").params)
    np.testing.assert_array_equal(a.params.astype(np.float32), LSTM(3, 4, 2, seed=8).params)
    assert not np.array_equal(a.params, LSTM(3, 4, 2, seed=9, dtype="float64").params)
    np.testing.assert_array_equal(keras_init_params(a.config, seed=8), a.params)


def test_init_helpers() -> None:
    rng = np.random.default_rng(0)
    tall, wide = orthogonal(rng, 7, 3), orthogonal(rng, 3, 7)
    np.testing.assert_allclose(tall.T @ tall, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(wide @ wide.T, np.eye(3), atol=1e-12)
    k = glorot_uniform(rng, 10, 30)
    assert k.shape == (10, 30) and np.abs(k).max() <= np.sqrt(6 / 40)


# ---- views, save/load, repr, errors ------------------------------------------------------------
def test_named_views_write_through_and_cover_the_buffer() -> None:
    layer = LSTM(3, 4, 1, bidirectional=True, num_proj=2)
    views = layer.weights()
    assert sum(v.size for v in views.values()) == layer.params.size
    assert views["W_g_l0_reverse"].shape == (4, 3) and views["R_o_l0"].shape == (4, 2)
    assert views["P_l0"].shape == (2, 4) and views["bW_i_l0"].shape == (4,)
    views["W_g_l0_reverse"][...] = 7.0
    weights, _ = cudnn_rnn.cudnn_rnn_params_to_canonical(1, 4, 3, layer.params, direction="bidirectional",
                                                         num_proj=2)
    np.testing.assert_array_equal(weights[9 + 2], 7.0)  # pseudo-layer 1: W_i, W_f, W_g, ...
    layer.grads()["bR_o_l0"][...] = 1.0
    assert layer.grad.sum() == 4


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
def test_save_load_round_trip_is_bit_exact(dtype: str, tmp_path, rng: np.random.Generator) -> None:
    layer = LSTM(3, 5, 2, bidirectional=True, num_proj=3, dropout=0.2, dtype=dtype, seed=-6)
    layer.params += rng.standard_normal(layer.params.size).astype(dtype)  # not just the init
    layer.step = 41
    path = tmp_path / "layer.npz"
    layer.save(path)
    loaded = LSTM.load(path)
    assert type(loaded) is LSTM
    assert loaded.config == layer.config and loaded.step == 41
    assert loaded.params.dtype == np.dtype(dtype)
    assert loaded.params.tobytes() == layer.params.tobytes()
    x = rng.standard_normal((2, 3, 3)).astype(dtype)
    np.testing.assert_array_equal(loaded.forward(x)[0], layer.forward(x)[0])  # same step, same dropout
    generic = RecurrentLayer.load(path)
    assert type(generic) is LSTM


def test_load_checks_the_layer_kind(tmp_path) -> None:
    RNN(2, 3, activation="relu").save(tmp_path / "rnn.npz")
    loaded = RNN.load(tmp_path / "rnn.npz")
    assert loaded.activation == "relu"
    with pytest.raises(ValueError, match="holds a RNN"):
        GRU.load(tmp_path / "rnn.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="not a cudnn_rnn params file"):
        RecurrentLayer.load(tmp_path / "other.npz")


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
def test_from_params_builds_the_layer_the_config_names(name: str, rng: np.random.Generator) -> None:
    layer = LAYER_CASES[name]()
    layer.params += rng.standard_normal(layer.params.size)
    layer.step = 7
    built = RecurrentLayer.from_params(layer.params, layer.config, step=7)
    assert type(built) is type(layer) and built.config == layer.config and built.step == 7
    assert built.params.tobytes() == layer.params.tobytes()
    assert not np.shares_memory(built.params, layer.params)  # a copy: the layer owns its buffer
    inputs = _inputs(layer, rng)
    for training in (False, True):  # the same step and seed: the same dropout masks
        np.testing.assert_array_equal(built.forward(inputs["x"], training=training)[0],
                                      layer.forward(inputs["x"], training=training)[0])
    layer.params[...] = 0
    assert built.params.any()
    assert type(type(layer).from_params(built.params, built.config)) is type(layer)


def test_from_params_takes_converted_weights() -> None:
    source = GRU(3, 4, 2, bidirectional=True, seed=4)
    tensors = source.export("torch").value
    params = cudnn_rnn.convert.from_format("torch", tensors, source.config).value
    built = GRU.from_params(params, source.config)
    assert built.params.tobytes() == source.params.tobytes()


@pytest.mark.parametrize("call, error, words", [
    (lambda: LSTM.from_params(GRU(2, 3).params, GRU(2, 3).config), ValueError,
     r"config holds a GRU \(rnn_mode='gru'\); LSTM.from_params cannot read it \(use RecurrentLayer.from_params\)"),
    (lambda: GRU.from_params(GRU(2, 3).params[:-1], GRU(2, 3).config), ValueError,
     r"params must be 1-D with 63 elements, the params size of config \(rnn_mode='gru', input_size=2, "
     r"num_units=3, num_layers=1\); got shape \(62,\)"),
    (lambda: GRU.from_params(GRU(2, 3).params.astype(np.float64), GRU(2, 3).config), ValueError,
     r"params has dtype float64 but config.dtype is 'float32': cast it \(params.astype\('float32'\)\) or pass "
     r"config.replace\(dtype='float64'\)"),
    (lambda: GRU.from_params(list(GRU(2, 3).params), GRU(2, 3).config), TypeError,
     "params must be a numpy.ndarray or cupy.ndarray; got list"),
    (lambda: GRU.from_params(GRU(2, 3).params, "gru"), TypeError, "config must be a cudnn_rnn.RNNConfig; got str"),
    (lambda: GRU.from_params(GRU(2, 3).params, GRU(2, 3).config, step=-1), ValueError,
     r"step must be a non-negative integer < 2\*\*63; got -1"),
    (lambda: GRU.from_params(GRU(2, 3).params, GRU(2, 3).config, step=2**63), ValueError,
     r"step must be a non-negative integer < 2\*\*63; got 9223372036854775808"),
    (lambda: GRU.from_params(GRU(2, 3).params, GRU(2, 3).config, xp=np.linalg), TypeError, "xp must be"),
])
def test_from_params_refusals_name_the_argument(call, error, words: str) -> None:
    with pytest.raises(error, match=words):
        call()


def test_repr_names_the_settings() -> None:
    text = repr(LSTM(3, 4, 2, bidirectional=True, dropout=0.1))
    assert text.startswith("LSTM(input_size=3, num_units=4, num_layers=2, bidirectional=True, dropout=0.1)")
    assert "params on numpy" in text and "step 0" in text
    assert "activation='relu'" in repr(RNN(2, 2, activation="relu"))


@pytest.mark.parametrize("call, error, words", [
    (lambda: LSTM(3, 4).forward([[[1.0, 2.0, 3.0]]]), TypeError, "x must be a numpy.ndarray"),
    (lambda: LSTM(3, 4).forward(np.zeros((2, 3), np.float32)), ValueError, "x must be 3-D"),
    (lambda: GRU(3, 4).forward(np.zeros((1, 2, 3), np.float32), c0=np.zeros((1, 1, 4), np.float32)),
     ValueError, "c0 is only for LSTM"),
    (lambda: GRU(3, 4).backward(None), RuntimeError, "preceding forward"),
    (lambda: RNN(3, 4, activation="sigmoid"), ValueError, "activation"),
    (lambda: LSTM(3, 4, xp=np.linalg), TypeError, "xp"),
    (lambda: LSTM(3, 4, bidirectional="yes"), TypeError, "bidirectional"),
    (lambda: LSTM(3, 4, num_proj=4), ValueError, "num_proj"),
    (lambda: LSTM(3, 4, dtype="int32"), TypeError, "dtype"),
    (lambda: LSTM(3, 4).forward(np.zeros((1, 2, 3), np.float64)), TypeError, "dtype"),
])
def test_bad_arguments_are_named(call, error, words: str) -> None:
    with pytest.raises(error, match=words):
        call()


#: each class's constructor arguments past the sizes, in order (LSTM's alone serve a projection and a forget bias)
CONSTRUCTOR_OPTIONS = {
    RecurrentLayer: ("rnn_mode", "bidirectional", "num_proj", "dropout", "input_mode", "dtype", "xp", "seed",
                     "unit_forget_bias", "algo"),
    LSTM: ("bidirectional", "num_proj", "dropout", "input_mode", "dtype", "xp", "seed", "unit_forget_bias", "algo"),
    GRU: ("bidirectional", "dropout", "input_mode", "dtype", "xp", "seed", "algo"),
    RNN: ("activation", "bidirectional", "dropout", "input_mode", "dtype", "xp", "seed", "algo"),
}


@pytest.mark.parametrize("cls", list(CONSTRUCTOR_OPTIONS))
def test_each_class_shows_and_documents_its_own_constructor_arguments(cls: type[RecurrentLayer]) -> None:
    parameters = inspect.signature(cls).parameters
    assert tuple(parameters) == ("input_size", "num_units", "num_layers") + CONSTRUCTOR_OPTIONS[cls]
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in CONSTRUCTOR_OPTIONS[cls])
    args = (inspect.getdoc(cls) or "").split("Args:\n")[1].split("\n\nRaises:\n")[0]
    assert [line.split(":")[0].strip() for line in args.splitlines() if not line.startswith(" " * 8)] == \
        list(parameters)
    if "unit_forget_bias" in parameters:  # an LSTM's forget gate starts at 1.0, the base's (any mode) at 0.0
        assert parameters["unit_forget_bias"].default is (cls is LSTM)
    for name in set(CONSTRUCTOR_OPTIONS[RecurrentLayer]) - set(parameters):
        with pytest.raises(TypeError, match=f"^{cls.__name__}\\.__init__\\(\\) got an unexpected keyword argument "
                                            f"'{name}'$"):
            cls(3, 4, **{name: 2})
    with pytest.raises(TypeError, match=f"^{cls.__name__}\\.__init__\\(\\) missing 1 required positional argument: "
                                        f"'num_units'$"):
        cls(3)


@pytest.mark.parametrize("cls", list(CONSTRUCTOR_OPTIONS))
def test_each_signature_shown_is_the_one_its_source_states(cls: type[RecurrentLayer]) -> None:
    # what a reader of the source, inspect.signature (help, the docs) and a type checker see is one text
    assert "__init__" in vars(cls)
    assert inspect.signature(cls) == source_signature(cls.__init__)


# ---- export through cudnn_rnn.convert ------------------------------------------------------------
def test_export_torch_names_the_layer_views() -> None:
    layer = LSTM(3, 4, 2, bidirectional=True, num_proj=2, seed=2)
    exported = layer.export("torch")
    assert exported.approximations == ()
    views = layer.weights()
    for layer_index in range(2):
        for suffix in ("", "_reverse"):
            tag = f"l{layer_index}{suffix}"
            stacked = {side: np.concatenate([views[f"{side}_{gate}_{tag}"] for gate in "ifgo"])
                       for side in ("W", "R", "bW", "bR")}
            np.testing.assert_array_equal(exported.value[f"weight_ih_{tag}"], stacked["W"])
            np.testing.assert_array_equal(exported.value[f"weight_hh_{tag}"], stacked["R"])
            np.testing.assert_array_equal(exported.value[f"bias_ih_{tag}"], stacked["bW"])
            np.testing.assert_array_equal(exported.value[f"bias_hh_{tag}"], stacked["bR"])
            np.testing.assert_array_equal(exported.value[f"weight_hr_{tag}"], views[f"P_{tag}"])
    assert len(exported.value) == 2 * 2 * 5


def test_export_refuses_an_inexact_conversion_unless_allowed() -> None:
    from cudnn_rnn.convert import InexactConversionError

    gru = GRU(3, 4)
    with pytest.raises(InexactConversionError):
        gru.export("gru_block_cell")
    approximate = gru.export("gru_block_cell", allow_approximation=True)
    assert approximate.approximations, "an allowed approximation must say what changed"
    assert set(approximate.value) == {"w_ru", "w_c", "b_ru", "b_c"}
    assert approximate.value["w_ru"].shape == (3 + 4, 2 * 4)
