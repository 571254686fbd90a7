"""The ``keras``, ``tf_cell`` and ``gru_block_cell`` formats against live Keras 3 and TensorFlow.

* keras: LSTM / GRU(reset_after=True) / SimpleRNN layers (stacked, and wrapped in
  keras.layers.Bidirectional) loaded with converted weights, on masked ragged batches, equal
  ``cudnn_rnn_v3`` at every valid step and in the final states; and the other way round.
* tf_cell: TF's ``LSTMBlockCell`` kernel (what CudnnCompatibleLSTMCell runs, forget_bias=0)
  stepped over the converted kernel and bias; the GRU through TF ops that transcribe
  ``CudnnCompatibleGRUCell.call``.
* gru_block_cell: TF's ``GRUBlockCell`` kernel on weights converted from mygrad equals
  mygrad's GRU (both reset-before), and equals our ``gru_block_cell`` op.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras  # noqa: E402
import mygrad.nnet.layers.gru as mygrad_gru  # noqa: E402  (needs numba)
import tensorflow as tf  # noqa: E402

import cudnn_rnn  # noqa: E402
from convert_testing import random_params, relative_error, rng_for  # noqa: E402
from cudnn_rnn import RNNConfig  # noqa: E402
from cudnn_rnn.convert import (  # noqa: E402
    from_format,
    gru_block_cell_to_mygrad,
    mygrad_to_gru_block_cell,
    to_format,
)

pytestmark = pytest.mark.oracle

TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
DIRECTION_NAMES = ("forward", "backward")

#: rnn_mode -> (Keras layer class, constructor arguments)
KERAS_LAYERS = {
    "lstm": (keras.layers.LSTM, {}),
    "gru": (keras.layers.GRU, {"reset_after": True}),
    "rnn_tanh": (keras.layers.SimpleRNN, {"activation": "tanh"}),
    "rnn_relu": (keras.layers.SimpleRNN, {"activation": "relu"}),
}


def run_keras(config: RNNConfig, weights: dict[str, np.ndarray], x_btf: np.ndarray, h0: np.ndarray,
              c0: np.ndarray | None, lengths: np.ndarray, dtype: str
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Stacked Keras layers on batch-major x with a right-padded mask.

    Returns (output [B, T, D*N], h [L*D, B, N], c [L*D, B, N] or None).
    """
    cls, extra = KERAS_LAYERS[config.rnn_mode]
    d = config.num_directions
    mask = np.arange(x_btf.shape[1])[None, :] < lengths[:, None]
    inputs = tf.constant(x_btf)
    finals_h, finals_c = [], []
    for layer in range(config.num_layers):
        rnn = cls(config.num_units, return_sequences=True, return_state=True, dtype=dtype, **extra)
        if d == 2:
            rnn = keras.layers.Bidirectional(rnn, merge_mode="concat", dtype=dtype)
        states = []
        for direction in range(d):
            k = layer * d + direction
            states.append(tf.constant(h0[k]))
            if config.has_cell:
                states.append(tf.constant(c0[k]))
        rnn(inputs, initial_state=states, mask=tf.constant(mask))  # builds the weights
        rnn.set_weights([weights[f"layer_{layer}/{DIRECTION_NAMES[direction]}/{field}"]
                         for direction in range(d) for field in ("kernel", "recurrent_kernel", "bias")])
        result = rnn(inputs, initial_state=states, mask=tf.constant(mask))
        inputs, per_direction = result[0], result[1:]
        step = 2 if config.has_cell else 1
        for direction in range(d):
            finals_h.append(per_direction[direction * step].numpy())
            if config.has_cell:
                finals_c.append(per_direction[direction * step + 1].numpy())
    return inputs.numpy(), np.stack(finals_h), (np.stack(finals_c) if config.has_cell else None)


def compare_with_ours(config: RNNConfig, params: np.ndarray, weights: dict[str, np.ndarray], dtype: str,
                      rng: np.random.Generator) -> None:
    t, b = 5, 4
    k = config.num_pseudo_layers
    x = rng.uniform(-1, 1, (b, t, config.input_size)).astype(dtype)
    h0 = rng.uniform(-1, 1, (k, b, config.num_units)).astype(dtype)
    c0 = rng.uniform(-1, 1, (k, b, config.num_units)).astype(dtype) if config.has_cell else None
    lengths = np.array([5, 2, 4, 3], dtype=np.int32)
    ours = cudnn_rnn.cudnn_rnn_v3(x, np.swapaxes(h0, 0, 1), None if c0 is None else np.swapaxes(c0, 0, 1), params,
                                  lengths, rnn_mode=config.rnn_mode, direction=config.direction, is_training=False,
                                  time_major=False)
    y, h, c = run_keras(config, weights, x, h0, c0, lengths, dtype)
    valid = np.arange(t)[None, :] < lengths[:, None]
    assert relative_error(ours.output[valid], y[valid]) <= TOLERANCE[dtype], "output"
    assert relative_error(np.swapaxes(ours.output_h, 0, 1), h) <= TOLERANCE[dtype], "output_h"
    if config.has_cell:
        assert relative_error(np.swapaxes(ours.output_c, 0, 1), c) <= TOLERANCE[dtype], "output_c"


KERAS_CASES = [
    ("lstm", 1, "unidirectional", "float32"),
    ("lstm", 2, "bidirectional", "float32"),
    ("gru", 1, "unidirectional", "float64"),
    ("gru", 2, "bidirectional", "float32"),
    ("rnn_tanh", 1, "bidirectional", "float32"),
    ("rnn_relu", 2, "unidirectional", "float64"),
]


@pytest.mark.parametrize("mode, layers, direction, dtype", KERAS_CASES)
def test_params_to_keras_layers(mode: str, layers: int, direction: str, dtype: str) -> None:
    rng = rng_for("to", mode, layers, direction, dtype)
    config = RNNConfig(mode, layers, 4, 3, direction=direction)
    params = random_params(config, rng, dtype)
    converted = to_format("keras", params, config)
    assert converted.approximations == ()
    compare_with_ours(config, params, converted.value, dtype, rng)


@pytest.mark.parametrize("mode, layers, direction, dtype", KERAS_CASES)
def test_keras_weights_to_params(mode: str, layers: int, direction: str, dtype: str) -> None:
    """Keras-shaped random weights -> params: ours equals Keras run with those very weights."""
    rng = rng_for("from", mode, layers, direction, dtype)
    config = RNNConfig(mode, layers, 4, 3, direction=direction)
    shapes = to_format("keras", random_params(config, rng, dtype), config).value
    weights = {name: rng.uniform(-0.6, 0.6, value.shape).astype(dtype) for name, value in shapes.items()}
    params = from_format("keras", weights, config).value
    compare_with_ours(config, params, weights, dtype, rng)


# ---- tf_cell ------------------------------------------------------------------------------------
def tf_cell_prefix(config: RNNConfig, layer: int, direction: int) -> str:
    cell = {"lstm": "cudnn_compatible_lstm_cell", "gru": "cudnn_compatible_gru_cell"}[config.rnn_mode]
    if config.num_directions == 1:
        return f"rnn/multi_rnn_cell/cell_{layer}/{cell}"
    return f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{('fw', 'bw')[direction]}/{cell}"


def lstm_block_step(tensors, prefix, x, h, c):
    """One step of TF's LSTMBlockCell kernel with CudnnCompatibleLSTMCell's settings."""
    n = h.shape[1]
    zeros = tf.zeros([n], dtype=x.dtype)
    out = tf.raw_ops.LSTMBlockCell(x=x, cs_prev=c, h_prev=h, w=tensors[f"{prefix}/kernel"], wci=zeros, wcf=zeros,
                                   wco=zeros, b=tensors[f"{prefix}/bias"], forget_bias=0.0, cell_clip=-1.0,
                                   use_peephole=False)
    return out.h, out.cs


def compatible_gru_step(tensors, prefix, x, h, c):
    """CudnnCompatibleGRUCell.call, written with TF ops (TF 1.15 contrib source)."""
    gates = tf.sigmoid(tf.matmul(tf.concat([x, h], 1), tensors[f"{prefix}/gates/kernel"])
                       + tensors[f"{prefix}/gates/bias"])
    r, u = tf.split(gates, 2, axis=1)
    candidate = tf.matmul(x, tensors[f"{prefix}/candidate/input_projection/kernel"]) + \
        tensors[f"{prefix}/candidate/input_projection/bias"]
    candidate += r * (tf.matmul(h, tensors[f"{prefix}/candidate/hidden_projection/kernel"]) +
                      tensors[f"{prefix}/candidate/hidden_projection/bias"])
    candidate = tf.tanh(candidate)
    return (1 - u) * candidate + u * h, c


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_tf_cell_runs_like_ours(mode: str) -> None:
    rng = rng_for("tf_cell", mode)
    config = RNNConfig(mode, 2, 4, 3, direction="bidirectional")
    params = random_params(config, rng)
    tensors = {name: tf.constant(value) for name, value in to_format("tf_cell", params, config).value.items()}
    t, b, d = 5, 3, 2
    x = rng.uniform(-1, 1, (t, b, 3)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (4, b, 4)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (4, b, 4)).astype(np.float32)
    step = lstm_block_step if mode == "lstm" else compatible_gru_step
    layer_input = x
    finals = []
    for layer in range(2):
        outputs = []
        for direction in range(d):
            k = layer * d + direction
            h, c = tf.constant(h0[k]), tf.constant(c0[k])
            ys = [None] * t
            for time in (range(t) if direction == 0 else reversed(range(t))):
                h, c = step(tensors, tf_cell_prefix(config, layer, direction), tf.constant(layer_input[time]), h, c)
                ys[time] = h.numpy()
            outputs.append(np.stack(ys))
            finals.append(h.numpy())
        layer_input = np.concatenate(outputs, axis=-1)
    ours = cudnn_rnn.cudnn_rnn_v3(x, h0, c0 if mode == "lstm" else None, params, rnn_mode=mode,
                                  direction="bidirectional", is_training=False)
    assert relative_error(ours.output, layer_input) <= 1e-5
    assert relative_error(ours.output_h, np.stack(finals)) <= 1e-5


# ---- gru_block_cell -----------------------------------------------------------------------------
def test_gru_block_cell_kernel_equals_mygrad_and_our_op() -> None:
    rng = rng_for("block")
    i, n, b, t = 3, 4, 2, 5
    mygrad_weights = {name: rng.uniform(-0.8, 0.8, (i, n) if name[0] == "U" else (n, n) if name[0] == "W" else (n,))
                      .astype(np.float32) for name in ("Uz", "Wz", "bz", "Ur", "Wr", "br", "Uh", "Wh", "bh")}
    block = mygrad_to_gru_block_cell(mygrad_weights)
    assert all(np.array_equal(gru_block_cell_to_mygrad(block)[k], v) for k, v in mygrad_weights.items())
    x = rng.uniform(-1, 1, (t, b, i)).astype(np.float32)
    s0 = rng.uniform(-1, 1, (b, n)).astype(np.float32)
    expected = mygrad_gru(x, *(mygrad_weights[k] for k in ("Uz", "Wz", "bz", "Ur", "Wr", "br", "Uh", "Wh", "bh")),
                              s0=s0, constant=True).data
    h_tf = h_ours = s0
    for time in range(t):
        h_tf = tf.raw_ops.GRUBlockCell(x=x[time], h_prev=h_tf, **block).h.numpy()
        h_ours = cudnn_rnn.gru_block_cell(x[time], h_ours, **block)[3]
        assert relative_error(h_tf, expected[time + 1]) <= 1e-5
        assert relative_error(h_ours, h_tf) <= 1e-5
