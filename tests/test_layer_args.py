"""A layer's mistakes in the layer's words: forward, backward, load and from_params check every
argument in terms of input_size, num_units, num_layers, bidirectional, lengths, h0/c0 and dtype,
before the op (whose words are params sizes and input_h) sees the call."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import GRU, LSTM, RNN

B, T, INPUT, N = 3, 5, 4, 8


def _x(dtype: Any = np.float32, time_major: bool = False) -> np.ndarray:
    shape = (T, B, INPUT) if time_major else (B, T, INPUT)
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def _layer() -> LSTM:
    return LSTM(INPUT, N, num_layers=2, dropout=0.25)


# ---- lengths: integers in [0, T], one per sequence, exactly as the op takes them ------------------
@pytest.mark.parametrize("lengths, error, words", [
    ([1.5, 2.7, 1], TypeError, r"lengths\[0\] must be an integer; got float 1.5"),
    (["1", "2", "3"], TypeError, r"lengths\[0\] must be an integer; got str '1'"),
    ([True, False, True], TypeError, r"lengths\[0\] must be an integer; got bool True"),
    ([2, np.bool_(True), 1], TypeError, r"lengths\[1\] must be an integer; got bool_? (np.)?True_?"),
    ([2, None, 1], TypeError, r"lengths\[1\] must be an integer; got NoneType None"),
    ([2**40, 1, 1], ValueError, r"lengths\[0\] = 1099511627776 is outside \[0, 5\] \(T, the steps of x\)"),
    ([1, -1, 1], ValueError, r"lengths\[1\] = -1 is outside \[0, 5\]"),
    ([1, 6, 1], ValueError, r"lengths\[1\] = 6 is outside \[0, 5\]"),
    ([1, 2], ValueError, r"lengths must hold 3 values, one per sequence of x, whose batch is 3; got 2"),
    ("123", TypeError, r"lengths must be a list of ints or an int32/int64 array; got str"),
    ({1, 2, 3}, TypeError, r"lengths must be a list of ints or an int32/int64 array; got set"),
    (np.array([1.0, 2.0, 3.0]), TypeError, r"int32/int64 array; got an array of dtype float64"),
    (np.array([1, 2, 3], dtype=np.int16), TypeError, r"got an array of dtype int16"),
    (np.array([True, True, False]), TypeError, r"got an array of dtype bool"),
    (np.array([1, 2, 3, 4]), ValueError, r"lengths must have shape \(3,\), one per sequence of x, whose batch is 3; "
                                         r"got shape \(4,\)"),
    (np.array([1, 9, 3]), ValueError, r"lengths\[1\] = 9 is outside \[0, 5\]"),
    (np.array([1, -2, 3], dtype=np.int64), ValueError, r"lengths\[1\] = -2 is outside \[0, 5\]"),
])
def test_lengths_are_integers_in_range_one_per_sequence(lengths: Any, error: type[Exception], words: str) -> None:
    layer = _layer()
    with pytest.raises(error, match=words):
        layer.forward(_x(), lengths)
    assert layer.step == 0  # refused before anything ran


@pytest.mark.parametrize("lengths", [[1, 0, 5], (1, 0, 5), range(1, 4), [np.int64(1), np.int32(0), 5],
                                     np.array([1, 0, 5], dtype=np.int32), np.array([1, 0, 5], dtype=np.int64)])
def test_valid_lengths_give_what_the_op_gives(lengths: Any) -> None:
    layer = _layer()
    x = _x()
    y, h, c = layer.forward(x, lengths, training=False)
    op_lengths = np.array(list(lengths), dtype=np.int32)
    zeros = np.zeros((B, 2, N), np.float32)
    expected = cudnn_rnn.cudnn_rnn_v3(x, zeros, zeros, layer.params, op_lengths, is_training=False, time_major=False)
    np.testing.assert_array_equal(y, expected.output)
    np.testing.assert_array_equal(h, expected.output_h)
    np.testing.assert_array_equal(c, expected.output_c)


# ---- training and time_major: True or False only ----------------------------------------------------
@pytest.mark.parametrize("name", ["training", "time_major"])
@pytest.mark.parametrize("value", ["no", "", {}, [], 1, 0, None, 1.0])
def test_flags_are_true_or_false_only(name: str, value: Any) -> None:
    layer = _layer()
    with pytest.raises(TypeError, match=rf"{name} must be a bool; got {type(value).__name__}"):
        layer.forward(_x(), **{name: value})
    assert layer.step == 0
    with pytest.raises(RuntimeError, match="backward needs a preceding forward"):
        layer.backward(None)


def test_numpy_bools_are_flags() -> None:
    layer = _layer()
    layer.forward(_x(time_major=True), time_major=np.True_, training=np.True_)
    assert layer.step == 1
    layer.backward(None)
    layer.forward(_x(), training=np.False_)
    assert layer.step == 1


# ---- x, h0, c0 in the layer's terms ---------------------------------------------------------------------
def _refusals() -> list[tuple[str, Callable[[LSTM], Any], type[Exception], str]]:
    x = _x()
    return [
        ("features", lambda layer: layer.forward(np.zeros((B, T, 6), np.float32)), ValueError,
         r"x has 6 features per step \(x.shape\[2\]\) but this layer's input_size is 4"),
        ("x float64", lambda layer: layer.forward(x.astype(np.float64)), TypeError,
         r"x has dtype float64 but this layer's dtype is float32: cast it \(x.astype\('float32'\)\), or build the "
         r"layer with dtype='float64'"),
        ("x int", lambda layer: layer.forward(x.astype(np.int64)), TypeError,
         r"x has dtype int64 but this layer's dtype is float32: .*a layer's dtype is one of"),
        ("x object", lambda layer: layer.forward(x.astype(object)), TypeError, r"x has dtype object"),
        ("x 2-D", lambda layer: layer.forward(x[0]), ValueError,
         r"x must be 3-D, \[B, T, I\] \(batch-major: time_major=False\); got shape \(5, 4\)"),
        ("x list", lambda layer: layer.forward(x.tolist()), TypeError,
         r"x must be a numpy.ndarray \[B, T, I\]; got list"),
        ("h0 time-major", lambda layer: layer.forward(x, h0=np.zeros((2, B, N), np.float32)), ValueError,
         r"h0 must be \[B, L\*D, P\] = \(3, 2, 8\) \(batch-major: time_major=False\) for this layer \(input_size=4, "
         r"num_units=8, num_layers=2: L\*D = 2, P = 8\) and a batch of 3; got \(2, 3, 8\), the time-major layout "
         r"\[L\*D, B, P\]: pass h0.transpose\(1, 0, 2\) \(with time_major=True x would be read as \[T, B, I\] "
         r"too\)$"),
        ("c0 batch-major in a time-major call",
         lambda layer: layer.forward(_x(time_major=True), c0=np.zeros((B, 2, N), np.float32), time_major=True),
         ValueError, r"c0 must be \[L\*D, B, N\] = \(2, 3, 8\) \(time-major: time_major=True\).* got \(3, 2, 8\), the "
                     r"batch-major layout \[B, L\*D, N\]: pass c0.transpose\(1, 0, 2\) \(with time_major=False x "
                     r"would be read as \[B, T, I\] too\)$"),
        ("x time-major with a time-major h0 in a batch-major call",  # nn.LSTM's input and state
         lambda layer: layer.forward(_x(time_major=True), h0=np.zeros((2, B, N), np.float32)), ValueError,
         r"h0 must be \[B, L\*D, P\] = \(5, 2, 8\) \(batch-major: time_major=False\) for this layer \(input_size=4, "
         r"num_units=8, num_layers=2: L\*D = 2, P = 8\) and a batch of 5; got \(2, 3, 8\): x \(5, 3, 4\) looks "
         r"time-major, \[T, B, I\] with B = 3, and h0 fits that layout, \[L\*D, B, P\]: pass time_major=True, or "
         r"make both batch-major \(x.transpose\(1, 0, 2\) and h0.transpose\(1, 0, 2\)\)$"),
        ("x batch-major with a batch-major c0 in a time-major call",
         lambda layer: layer.forward(x, c0=np.zeros((B, 2, N), np.float32), time_major=True), ValueError,
         r"c0 must be \[L\*D, B, N\] = \(2, 5, 8\) \(time-major: time_major=True\).* got \(3, 2, 8\): x \(3, 5, 4\) "
         r"looks batch-major, \[B, T, I\] with B = 3, and c0 fits that layout, \[B, L\*D, N\]: pass "
         r"time_major=False, or make both time-major \(x.transpose\(1, 0, 2\) and c0.transpose\(1, 0, 2\)\)$"),
        ("h0 of another batch, x either way", lambda layer: layer.forward(x, h0=np.zeros((2, 4, N), np.float32)),
         ValueError, r"and a batch of 3; got \(2, 4, 8\)$"),
        ("h0 one layer", lambda layer: layer.forward(x, h0=np.zeros((B, 1, N), np.float32)), ValueError,
         r"h0 must be \[B, L\*D, P\] = \(3, 2, 8\) .* got \(3, 1, 8\)$"),
        ("h0 float64", lambda layer: layer.forward(x, h0=np.zeros((B, 2, N))), TypeError,
         r"h0 has dtype float64 but this layer's dtype is float32: cast it \(h0.astype\('float32'\)\)"),
        ("c0 list", lambda layer: layer.forward(x, c0=[[0.0]]), TypeError,
         r"c0 must be a numpy.ndarray \[B, L\*D, N\]; got list"),
    ]


@pytest.mark.parametrize("case", _refusals(), ids=lambda case: case[0])
def test_forward_refusals_speak_of_the_layer(case: tuple[str, Callable[[LSTM], Any], type[Exception], str]) -> None:
    _, call, error, words = case
    layer = _layer()
    with pytest.raises(error, match=words) as caught:
        call(layer)
    assert "input_h" not in str(caught.value) and "params must" not in str(caught.value)
    assert layer.step == 0


def test_projection_and_bidirectional_states_name_their_widths() -> None:
    layer = LSTM(INPUT, N, num_layers=1, bidirectional=True, num_proj=3)
    x = _x()
    with pytest.raises(ValueError, match=r"h0 must be \[B, L\*D, P\] = \(3, 2, 3\) .*input_size=4, num_units=8, "
                                         r"num_layers=1, bidirectional=True, num_proj=3: L\*D = 2, P = 3\)"):
        layer.forward(x, h0=np.zeros((B, 2, N), np.float32))
    with pytest.raises(ValueError, match=r"c0 must be \[B, L\*D, N\] = \(3, 2, 8\) .* N = 8\) and a batch of 3; "
                                         r"got \(3, 2, 3\)"):
        layer.forward(x, c0=np.zeros((B, 2, 3), np.float32))
    y, h, c = layer.forward(x, h0=np.zeros((B, 2, 3), np.float32), c0=np.zeros((B, 2, N), np.float32))
    assert y.shape == (B, T, 6) and h.shape == (B, 2, 3) and c is not None and c.shape == (B, 2, N)


@pytest.mark.parametrize("cls", [GRU, RNN])
def test_cell_state_only_for_lstm(cls: type[GRU] | type[RNN]) -> None:
    with pytest.raises(ValueError, match="c0 is only for LSTM"):
        cls(INPUT, N).forward(_x(), c0=np.zeros((B, 1, N), np.float32))


# ---- backward -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, words", [
    ({"dy": np.zeros((B, T, 7), np.float32)}, ValueError,
     r"dy must have the shape of y from the last training forward, \(3, 5, 8\); got \(3, 5, 7\)"),
    ({"dy": np.zeros((T, B, N), np.float32)}, ValueError, r"dy must have the shape of y .* got \(5, 3, 8\)"),
    ({"dy": np.zeros((B, T, N))}, TypeError, r"dy has dtype float64 but this layer's dtype is float32"),
    ({"dy": None, "dh": np.zeros((2, B, N), np.float32)}, ValueError,
     r"dh must have the shape of h from the last training forward, \(3, 2, 8\); got \(2, 3, 8\)"),
    ({"dy": None, "dc": np.zeros((B, 1, N), np.float32)}, ValueError, r"dc must have the shape of c"),
    ({"dy": "zeros"}, TypeError, r"dy must be a numpy.ndarray shaped like y; got str"),
])
def test_backward_refusals_name_the_gradient(kwargs: dict[str, Any], error: type[Exception], words: str) -> None:
    layer = _layer()
    layer.forward(_x())
    with pytest.raises(error, match=words):
        layer.backward(**kwargs)
    assert not layer.grad.any()
    layer.backward(None)  # the forward's saved state is still there for a correct backward


# ---- load -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [123, None, b"layer.npz", ["layer.npz"]])
def test_load_names_a_path_of_the_wrong_type(path: Any) -> None:
    with pytest.raises(TypeError, match=rf"path must be a str or os.PathLike path; got {type(path).__name__}"):
        LSTM.load(path)
