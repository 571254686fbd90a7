"""The framework bridges' shared core (``cudnn_rnn._bridge``): shapes alone give the op's errors and sizes.

The oracle is the public op itself: every size :func:`signature` predicts is the size the op
returns, every refusal is the op's own, and the residual backward equals cudnn_rnn_backprop_v3.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudnn_rnn
from typing import Any

from cudnn_rnn import _bridge, ops

#: the op's keywords as a caller gives them (TF's defaults for the others)
Attrs = dict[str, Any]

CASES = [  # (attrs, num_layers, input_size, num_units)
    (dict(rnn_mode="lstm", num_proj=2, direction="bidirectional", time_major=False), 2, 3, 4),
    (dict(rnn_mode="gru", time_major=True), 1, 3, 4),
    (dict(rnn_mode="rnn_relu", input_mode="skip_input", time_major=False), 2, 4, 4),
    (dict(rnn_mode="rnn_tanh", direction="bidirectional", dropout=0.5, seed=3, seed2=9), 2, 2, 3),
]


def _arrays(attrs: Attrs, layers: int, inputs: int, units: int, max_time: int = 5, batch: int = 3,
            dtype: type = np.float64) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    direction, num_proj = attrs.get("direction", "unidirectional"), attrs.get("num_proj", 0)
    d = 2 if direction == "bidirectional" else 1
    p = num_proj or units
    config = cudnn_rnn.RNNConfig(attrs.get("rnn_mode", "lstm"), layers, units, inputs,
                                 input_mode=attrs.get("input_mode", "linear_input"), direction=direction,
                                 num_proj=num_proj, dtype=np.dtype(dtype).name)
    params = _bridge.init_params(config, seed=1)
    time_major = attrs.get("time_major", True)
    seq = (max_time, batch) if time_major else (batch, max_time)
    state = (layers * d, batch) if time_major else (batch, layers * d)
    x = rng.standard_normal(seq + (inputs,)).astype(dtype)
    h = rng.standard_normal(state + (p,)).astype(dtype)
    c = rng.standard_normal(state + (units,)).astype(dtype) if config.has_cell else None
    return x, h, c, params


def _traced(attrs: Attrs, x: np.ndarray, h: np.ndarray, c: np.ndarray | None, params: np.ndarray) -> Any:
    """The signature a bridge traces the call with: its config and layout."""
    return _bridge.signature(x.shape, h.shape, None if c is None else c.shape, params.shape, x.dtype, **attrs)


@pytest.mark.parametrize("attrs, layers, inputs, units", CASES)
def test_the_signature_predicts_the_ops_shapes_and_the_cpu_reserve(attrs: Attrs, layers: int, inputs: int,
                                                                   units: int) -> None:
    x, h, c, params = _arrays(attrs, layers, inputs, units)
    lengths = np.array([5, 0, 2], dtype=np.int32)
    sig = _bridge.signature(x.shape, h.shape, None if c is None else c.shape, params.shape, x.dtype,
                            lengths.shape, lengths.dtype, **attrs)
    out = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, is_training=True, **attrs)
    assert (sig.output_shape, sig.output_h_shape, sig.output_c_shape) == (out.output.shape, out.output_h.shape,
                                                                          out.output_c.shape)
    assert sig.reserve_elements("cpu") == out.reserve_space.shape[0]
    assert sig.config.rnn_mode == attrs["rnn_mode"] and sig.dtype == np.float64


def test_an_empty_batch_keeps_only_the_header() -> None:
    attrs = dict(rnn_mode="gru")
    x, h, _, params = _arrays(attrs, 1, 3, 4, batch=0)
    sig = _bridge.signature(x.shape, h.shape, None, params.shape, x.dtype, **attrs)
    out = cudnn_rnn.cudnn_rnn_v3(x, h, None, params, is_training=True, **attrs)
    assert sig.reserve_elements("cpu") == out.reserve_space.shape[0] > 0


@pytest.mark.parametrize("attrs, layers, inputs, units", CASES)
def test_the_residual_backward_is_the_public_backprop(attrs: Attrs, layers: int, inputs: int,
                                                      units: int) -> None:
    x, h, c, params = _arrays(attrs, layers, inputs, units)
    lengths = np.array([4, 0, 5], dtype=np.int64)
    sig = _traced(attrs, x, h, c, params)
    out = _bridge.forward(sig.config, x, h, c, params, lengths, time_major=sig.time_major, is_training=True)
    dy = np.random.default_rng(1).standard_normal(out.output.shape)
    expected = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, params, lengths, out.output, out.output_h, out.output_c,
                                               dy, None, None, out.reserve_space, **attrs)
    # a buffer of the framework's (no record of it exists), as long as the reserve or longer (sized for a GPU too)
    for longer in (0, 100):
        residual = np.zeros(out.reserve_space.shape[0] + longer, out.reserve_space.dtype)
        ops._copy_into(residual, out.reserve_space)
        grads = _bridge.backward(sig.config, x, h, c, params, lengths, out.output, out.output_h, out.output_c, dy,
                                 None, None, residual, time_major=sig.time_major)
        for got, want in zip(grads, expected):
            np.testing.assert_array_equal(got, want)


def test_the_residual_backward_still_checks_the_reserve_as_an_array() -> None:
    attrs = dict(rnn_mode="gru")
    x, h, _, params = _arrays(attrs, 1, 3, 4)
    config = _traced(attrs, x, h, None, params).config
    out = _bridge.forward(config, x, h, None, params, None, time_major=True, is_training=True)
    args = (config, x, h, None, params, None, out.output, out.output_h, None, None, None, None)
    with pytest.raises(TypeError, match=r"reserve_space must have the dtype of input \(float64\); got float32"):
        _bridge.backward(*args, np.zeros(out.reserve_space.shape, np.float32), time_major=True)
    with pytest.raises(ValueError, match="reserve_space is empty: the forward ran with is_training=False"):
        _bridge.backward(*args, np.empty(0), time_major=True)


@pytest.mark.parametrize("change, error, message", [
    (dict(input_h_shape=(1, 3, 5)), ValueError, r"input_h and input_c must have the same shape without projection"),
    (dict(params_shape=(7,)), ValueError, r"params must have \d+ elements \(cudnn_rnn_params_size"),
    (dict(dtype=np.int32), TypeError, r"input.dtype must be one of"),
    (dict(input_c_shape=None), TypeError, r"input_c must be an array for rnn_mode='lstm'; got None"),
    (dict(lengths_shape=(4,)), ValueError, r"sequence_lengths must have shape \(3,\) \(the batch size\); got \(4,\)"),
    (dict(lengths_dtype=np.float32), TypeError, r"sequence_lengths must have dtype int32 or int64; got float32"),
    (dict(direction="both"), ValueError, r"direction must be one of"),
    (dict(dropout=1.5), ValueError, r"dropout"),
    (dict(is_training=1), TypeError, r"is_training"),
])
def test_shapes_alone_give_the_ops_own_refusals(change: dict[str, object], error: type[Exception],
                                                message: str) -> None:
    x, h, c, params = _arrays({}, 1, 3, 4)
    args: dict[str, object] = dict(input_shape=x.shape, input_h_shape=h.shape, input_c_shape=c.shape,
                                   params_shape=params.shape, dtype=x.dtype, lengths_shape=(3,),
                                   lengths_dtype=np.int32, is_training=True)
    args.update(change)
    with pytest.raises(error, match=message):
        _bridge.signature(**args)  # type: ignore[arg-type]
    if {"direction", "dropout", "is_training"} & set(change):
        return
    arrays = {"input": np.zeros(args["input_shape"], args["dtype"]),  # type: ignore[call-overload]
              "input_h": np.zeros(args["input_h_shape"], args["dtype"]),  # type: ignore[call-overload]
              "input_c": None if args["input_c_shape"] is None else np.zeros(args["input_c_shape"], args["dtype"]),  # type: ignore[call-overload]  # noqa: E501
              "params": np.zeros(args["params_shape"], args["dtype"]),  # type: ignore[call-overload]
              "sequence_lengths": np.zeros(args["lengths_shape"], args["lengths_dtype"])}  # type: ignore[call-overload]
    with pytest.raises(error, match=message):  # the op itself says the same
        cudnn_rnn.cudnn_rnn_v3(**arrays)  # type: ignore[arg-type]


def test_each_arrays_own_dtype_gets_the_ops_refusal_in_its_order() -> None:
    x, h, c, params = _arrays({}, 1, 3, 4)
    shapes = (x.shape, h.shape, c.shape, params.shape, x.dtype)
    with pytest.raises(TypeError, match=r"^params must have the dtype of input \(float64\); got float32$"):
        _bridge.signature(*shapes, dtypes={"params": np.float32, "input_h": np.float64})
    with pytest.raises(TypeError, match=r"^input_h must have the dtype of input \(float64\); got float16$"):
        _bridge.signature(x.shape, (1, 3, 5), c.shape, params.shape, x.dtype, dtypes={"input_h": "float16"})
    with pytest.raises(TypeError, match=r"^input_c must have the dtype of input \(float64\); got complex32$"):
        _bridge.signature(*shapes, dtypes={"input_c": "complex32"})  # a dtype NumPy cannot stand in for
    with pytest.raises(TypeError, match=r"^input.dtype must be one of .*; got 'int64'$"):
        _bridge.signature(x.shape, h.shape, c.shape, params.shape, np.int64, dtypes={"params": np.float32})
    assert _bridge.signature(*shapes, dtypes={"params": np.float64}).dtype == np.float64


def test_a_result_the_op_copies_fills_a_framework_buffer() -> None:
    destination = np.full(6, -1.0)
    ops._copy_into(destination, np.arange(4.0))
    np.testing.assert_array_equal(destination, [0, 1, 2, 3, -1, -1])
    grid = np.zeros((2, 3))
    ops._copy_into(grid, np.ones((2, 3)))
    assert grid.sum() == 6
    with pytest.raises(ValueError, match=r"buffer has shape \(2,\), the result \(4,\): the call was traced"):
        ops._copy_into(np.zeros(2), np.arange(4.0))


def test_init_params_is_the_layers_buffer() -> None:
    for layer in (cudnn_rnn.LSTM(3, 4, 2, num_proj=2, seed=5), cudnn_rnn.GRU(3, 4, bidirectional=True, seed=5),
                  cudnn_rnn.RNN(3, 4, activation="relu", seed=5, dtype="float64")):
        np.testing.assert_array_equal(_bridge.init_params(layer.config, seed=5), layer.params)
    assert not np.array_equal(_bridge.init_params(layer.config, seed=6), layer.params)
    with pytest.raises(TypeError, match="config must be a cudnn_rnn.RNNConfig; got dict"):
        _bridge.init_params({}, 0)  # type: ignore[arg-type]


def test_a_platform_outside_the_table_is_refused() -> None:
    sig = _bridge.signature((2, 1, 3), (1, 1, 4), None, (cudnn_rnn.GRU(3, 4).params.size,), np.float32,
                            rnn_mode="gru")
    with pytest.raises(ValueError, match=r"platform must be one of \('cpu', 'cuda'\); got 'tpu'"):
        sig.reserve_elements("tpu")


def test_shapes_too_large_for_any_array_get_the_ops_size_message() -> None:
    """Shapes alone: no array of the shape is made, so a shape no memory could hold gets the op's own check."""
    with pytest.raises(ValueError, match=r"^input has 1099511627776 steps \(T = input.shape\[0\]\); cuDNN takes at "
                                         r"most 2147483647 \(a C int\)$"):
        _bridge.signature((2**40, 2**30, 3), (1, 2**30, 4), None, (96,), "float32", rnn_mode="gru")


def test_a_missing_array_gets_the_ops_refusal() -> None:
    with pytest.raises(TypeError, match=r"^input, params must be an array; got None$"):
        _bridge.signature(None, (1, 2, 4), None, None, "float32", rnn_mode="gru")
    with pytest.raises(TypeError, match=r"^input_c must be an array for rnn_mode='lstm'; got None$"):
        _bridge.signature((5, 2, 3), (1, 2, 4), None, (128,), "float32", rnn_mode="lstm")
    for shapes in ((None, (1, 2, 4), None, None), ((5, 2, 3), (1, 2, 4), None, (128,))):
        with pytest.raises(TypeError) as op_error:
            cudnn_rnn.cudnn_rnn_v3(*(None if shape is None else np.zeros(shape, np.float32) for shape in shapes),
                                   rnn_mode="lstm")
        with pytest.raises(TypeError) as shapes_error:
            _bridge.signature(*shapes, "float32", rnn_mode="lstm")
        assert str(shapes_error.value) == str(op_error.value)


@pytest.mark.parametrize("seed", [True, 2**40, 10**400, "1", None, 1.0, -2**31 - 1],
                         ids=["True", "2**40", "10**400", "str", "None", "float", "below-int32"])
def test_init_params_refuses_the_seeds_a_layer_refuses(seed: object) -> None:
    config = cudnn_rnn.RNNConfig("lstm", 1, 3, 2)
    with pytest.raises((TypeError, ValueError)) as layer_error:
        cudnn_rnn.LSTM(2, 3, seed=seed)  # type: ignore[arg-type]
    with pytest.raises(layer_error.type, match=r"^seed must be") as bridge_error:
        _bridge.init_params(config, seed)  # type: ignore[arg-type]
    assert str(bridge_error.value) == str(layer_error.value)
