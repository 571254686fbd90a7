"""Record golden files for tests/test_convert_golden.py: framework weights, inputs and the framework's outputs.

Each case is one small ``tests/golden/convert/{name}.npz`` holding:

    meta                  JSON: format, RNNConfig fields, time_major, framework and version
    weights/{tensor}      the weights in the format's own names (as the framework uses them)
    input/x, input/h0, input/c0 (LSTM), input/lengths
    expected/output, expected/output_h, expected/output_c (LSTM)
                          what the framework computed, in cudnn_rnn_v3's shapes and layout

so the default test suite checks each format against real framework output with NumPy only.
Needs torch, tensorflow + keras, onnx + onnxruntime and mygrad (+ numba).

Run:  python scripts/make_convert_golden.py          (overwrites the files)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

OUT = Path(__file__).resolve().parents[1] / "tests" / "golden" / "convert"
T, B, LENGTHS = 4, 3, (4, 1, 3)


def draw(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.uniform(-1, 1, shape)).astype(dtype)


def record(name: str, meta: dict[str, Any], weights: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
           expected: dict[str, np.ndarray]) -> None:
    arrays = {"meta": np.array(json.dumps(meta, sort_keys=True))}
    arrays.update({f"weights/{k}": v for k, v in weights.items()})
    arrays.update({f"input/{k}": v for k, v in inputs.items() if v is not None})
    arrays.update({f"expected/{k}": v for k, v in expected.items() if v is not None})
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"{name}.npz", "wb") as handle:
        np.savez_compressed(handle, **arrays)
    print(f"wrote {OUT / name}.npz ({sum(a.nbytes for a in arrays.values())} bytes of arrays)")


def config_meta(fmt: str, mode: str, layers: int, units: int, input_size: int, direction: str = "unidirectional",
                num_proj: int = 0, time_major: bool = True, **framework: str) -> dict[str, Any]:
    return dict(format=fmt, rnn_mode=mode, num_layers=layers, num_units=units, input_size=input_size,
                direction=direction, num_proj=num_proj, time_major=time_major, **framework)


# ---- torch ----------------------------------------------------------------------------------------
def torch_case(name: str, mode: str, layers: int, direction: str, num_proj: int = 0) -> None:
    import torch

    rng = np.random.default_rng(len(name))
    torch.manual_seed(len(name))
    units, input_size, d = 3, 2, 2 if direction == "bidirectional" else 1
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[mode]
    extra = {"proj_size": num_proj} if num_proj else {}
    module = cls(input_size, units, num_layers=layers, bidirectional=d == 2, **extra).double().eval()
    p = num_proj or units
    x = draw(rng, (T, B, input_size), "float64")
    h0 = draw(rng, (layers * d, B, p), "float64")
    c0 = draw(rng, (layers * d, B, units), "float64") if mode == "lstm" else None
    lengths = np.array(LENGTHS, np.int32)
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.tensor(LENGTHS), enforce_sorted=False)
    with torch.no_grad():
        out, final = module(packed, (torch.from_numpy(h0), torch.from_numpy(c0)) if c0 is not None
                            else torch.from_numpy(h0))
    y = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=T)[0].numpy()
    h, c = (final[0].numpy(), final[1].numpy()) if c0 is not None else (final.numpy(), None)
    record(name, config_meta("torch", mode, layers, units, input_size, direction, num_proj,
                             framework="torch", version=torch.__version__),
           {k: v.numpy() for k, v in module.state_dict().items()},
           dict(x=x, h0=h0, c0=c0, lengths=lengths), dict(output=y, output_h=h, output_c=c))


# ---- keras ----------------------------------------------------------------------------------------
def keras_case(name: str, mode: str, direction: str, dtype: str) -> None:
    import keras

    rng = np.random.default_rng(len(name) + 100)
    units, input_size, d = 3, 2, 2 if direction == "bidirectional" else 1
    layer_cls, extra = {"lstm": (keras.layers.LSTM, {}), "gru": (keras.layers.GRU, {"reset_after": True}),
                        "rnn_relu": (keras.layers.SimpleRNN, {"activation": "relu"})}[mode]
    rnn = layer_cls(units, return_sequences=True, return_state=True, dtype=dtype, **extra)
    if d == 2:
        rnn = keras.layers.Bidirectional(rnn, dtype=dtype)
    x = draw(rng, (B, T, input_size), dtype)  # Keras is batch-major
    h0 = draw(rng, (d, B, units), dtype)
    c0 = draw(rng, (d, B, units), dtype) if mode == "lstm" else None
    states = [s for k in range(d) for s in ([h0[k], c0[k]] if c0 is not None else [h0[k]])]
    mask = np.arange(T)[None, :] < np.array(LENGTHS)[:, None]
    rnn(x, initial_state=states, mask=mask)
    weights = [draw(rng, w.shape, dtype, 0.7) for w in rnn.get_weights()]
    rnn.set_weights(weights)
    result = [np.asarray(r) for r in rnn(x, initial_state=states, mask=mask)]
    step = 2 if c0 is not None else 1
    finals = result[1:]
    h = np.stack([finals[k * step] for k in range(d)])
    c = np.stack([finals[k * step + 1] for k in range(d)]) if c0 is not None else None
    names = [f"layer_0/{side}/{field}" for side in ("forward", "backward")[:d]
             for field in ("kernel", "recurrent_kernel", "bias")]
    y = np.where(mask[:, :, None], result[0], 0)  # Keras repeats the last output on masked steps; cuDNN writes 0
    record(name, config_meta("keras", mode, 1, units, input_size, direction, time_major=False,
                             framework="keras", version=keras.__version__),
           dict(zip(names, weights)),
           dict(x=x, h0=np.swapaxes(h0, 0, 1), c0=None if c0 is None else np.swapaxes(c0, 0, 1),
                lengths=np.array(LENGTHS, np.int32)),
           dict(output=y, output_h=np.swapaxes(h, 0, 1), output_c=None if c is None else np.swapaxes(c, 0, 1)))


# ---- tf_cell: TF's LSTMBlockCell kernel, the cell CudnnCompatibleLSTMCell runs -----------------------
def tf_cell_lstm_case(name: str) -> None:
    import tensorflow as tf

    rng = np.random.default_rng(7)
    units, input_size = 3, 2
    prefix = "rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell"
    weights = {f"{prefix}/kernel": draw(rng, (input_size + units, 4 * units), "float32", 0.7),
               f"{prefix}/bias": draw(rng, (4 * units,), "float32", 0.7)}
    x = draw(rng, (T, B, input_size), "float32")
    h0, c0 = draw(rng, (1, B, units), "float32"), draw(rng, (1, B, units), "float32")
    h, c, ys = h0[0], c0[0], []
    zeros = np.zeros(units, np.float32)
    for t in range(T):
        step = tf.raw_ops.LSTMBlockCell(x=x[t], cs_prev=c, h_prev=h, w=weights[f"{prefix}/kernel"], wci=zeros,
                                        wcf=zeros, wco=zeros, b=weights[f"{prefix}/bias"], forget_bias=0.0,
                                        cell_clip=-1.0, use_peephole=False)
        h, c = step.h.numpy(), step.cs.numpy()
        ys.append(h)
    record(name, config_meta("tf_cell", "lstm", 1, units, input_size, framework="tensorflow", version=tf.__version__),
           weights, dict(x=x, h0=h0, c0=c0, lengths=np.full(B, T, np.int32)),
           dict(output=np.stack(ys), output_h=h[None], output_c=c[None]))


# ---- onnx: one bidirectional GRU node (linear_before_reset=1) in onnxruntime --------------------------
def onnx_gru_case(name: str) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    units, input_size, d = 3, 2, 2
    weights = {"layer_0/W": draw(rng, (d, 3 * units, input_size), "float32", 0.7),
               "layer_0/R": draw(rng, (d, 3 * units, units), "float32", 0.7),
               "layer_0/B": draw(rng, (d, 6 * units), "float32", 0.7)}
    node = helper.make_node("GRU", ["X", "W", "R", "B", "sequence_lens", "initial_h"], ["Y", "Y_h"],
                            direction="bidirectional", hidden_size=units, linear_before_reset=1)
    graph = helper.make_graph(
        [node], "gru",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, input_size]),
         helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, [B]),
         helper.make_tensor_value_info("initial_h", TensorProto.FLOAT, [d, B, units])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights[f"layer_0/{k}"], k) for k in ("W", "R", "B")])
    opsets = [helper.make_opsetid("", 14)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    x = draw(rng, (T, B, input_size), "float32")
    h0 = draw(rng, (d, B, units), "float32")
    lengths = np.array(LENGTHS, np.int32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y, y_h = session.run(None, {"X": x, "sequence_lens": lengths, "initial_h": h0})
    record(name, config_meta("onnx", "gru", 1, units, input_size, "bidirectional", framework="onnxruntime",
                             version=ort.__version__, onnx_version=onnx.__version__),
           weights, dict(x=x, h0=h0, lengths=lengths),
           dict(output=y.transpose(0, 2, 1, 3).reshape(T, B, d * units), output_h=y_h))


# ---- mygrad: its reset-before gru, whose weights convert exactly to GRUBlockCell's ---------------------
def mygrad_case(name: str) -> None:
    import mygrad
    from mygrad.nnet.layers.gru import gru

    rng = np.random.default_rng(13)
    units, input_size = 3, 2
    shapes = {"U": (input_size, units), "W": (units, units), "b": (units,)}
    weights = {k: draw(rng, shapes[k[0]], "float64", 0.8)
               for k in ("Uz", "Wz", "bz", "Ur", "Wr", "br", "Uh", "Wh", "bh")}
    x = draw(rng, (T, B, input_size), "float64")
    s0 = draw(rng, (B, units), "float64")
    states = gru(x, *weights.values(), s0=s0, constant=True).data
    record(name, config_meta("mygrad", "gru", 1, units, input_size, framework="mygrad", version=mygrad.__version__),
           weights, dict(x=x, h0=s0[None], lengths=np.full(B, T, np.int32)),
           dict(output=states[1:], output_h=states[-1][None]))


CASES: dict[str, Callable[[], None]] = {
    "torch_lstm_L2_bi_proj": lambda: torch_case("torch_lstm_L2_bi_proj", "lstm", 2, "bidirectional", num_proj=2),
    "torch_gru_L2_bi": lambda: torch_case("torch_gru_L2_bi", "gru", 2, "bidirectional"),
    "keras_lstm": lambda: keras_case("keras_lstm", "lstm", "unidirectional", "float32"),
    "keras_gru_bi": lambda: keras_case("keras_gru_bi", "gru", "bidirectional", "float64"),
    "keras_simple_rnn_relu_bi": lambda: keras_case("keras_simple_rnn_relu_bi", "rnn_relu", "bidirectional", "float64"),
    "tf_cell_lstm": lambda: tf_cell_lstm_case("tf_cell_lstm"),
    "onnx_gru_bi": lambda: onnx_gru_case("onnx_gru_bi"),
    "mygrad_gru": lambda: mygrad_case("mygrad_gru"),
}


if __name__ == "__main__":
    for make in CASES.values():
        make()
