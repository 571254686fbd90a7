"""Write small real TensorFlow checkpoints for tests/oracle/test_read_tf_checkpoint.py, with the frameworks' outputs.

Each case is a folder ``tests/golden/files/tf_checkpoint/{case}/`` holding the checkpoint as
TensorFlow wrote it (the ``checkpoint`` state file, ``PREFIX.index``, ``PREFIX.data-00000-of-00001``)
and ``expected.npz``::

    names                                  the RNNs in the reader's order (names as it gives them)
    {i}/x [B, T, I], {i}/lengths [B]       a ragged batch (batch-major; lengths include T)
    {i}/h0, {i}/c0 [K, B, N]               initial states (K = layers * directions; c0 for LSTMs)
    {i}/output [B, T, D*N]                 the framework's output, zero at padded steps
    {i}/output_h, {i}/output_c [K, B, N]   its final states (at each sequence's last valid step)
    {i}/rnn_mode                           the answer for a simple RNN whose mode the file cannot tell

RNN i has no entries when the reader refuses it (a bidirectional reset-before GRU).

TF1 cases: the variables TF1's CudnnLSTM / CudnnGRU / CudnnRNNRelu / CudnnRNNTanh layers save,
by the names TF 1.15's ``CudnnOpaqueParamsSaveable`` gives them (how they were established:
the docstring of ``cudnn_rnn/convert/readers/_tf_checkpoint.py``), beside the opaque buffer
and its Adam slots, written by a real ``tf.compat.v1.train.Saver`` (TF 2's ``tf.contrib`` is
gone, so the layers themselves cannot run). Values are drawn at random; the outputs come from
TF's own kernels for the cuDNN-compatible cells that read these variables:

* LSTM: ``tf.raw_ops.LSTMBlockCell`` with forget_bias=0, no peepholes, no clip
  (``CudnnCompatibleLSTMCell`` is ``LSTMBlockCell(forget_bias=0)``);
* GRU: ``CudnnCompatibleGRUCell.call`` written in TF ops;
* RNN: ``BasicRNNCell.call``, activation(concat([x, h]) @ kernel + bias), in TF ops.

Keras cases: real Keras 3 and tf_keras models with random weights, saved with
``tf.train.Checkpoint``; the outputs come from each layer's own computation (a copy with
``return_state=True`` and the same weights) on a masked batch with initial states.

Needs tensorflow, keras 3 and tf_keras. Run:  python scripts/make_tf_checkpoint_files.py
(overwrites the folders; the bytes are the same on every run).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _golden_io import write_npz  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "golden" / "files" / "tf_checkpoint"
T, LENGTHS = 5, (5, 3, 1, 4)
B = len(LENGTHS)
DIRECTIONS = ("fw", "bw")

#: rnn_mode -> TF's cuDNN-compatible cell scope (the names TF1's saveables write)
CELLS = {"lstm": "cudnn_compatible_lstm_cell", "gru": "cudnn_compatible_gru_cell",
         "rnn_tanh": "basic_rnn_cell", "rnn_relu": "basic_rnn_cell"}


def draw(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 0.6) -> np.ndarray:
    return (scale * rng.uniform(-1, 1, shape)).astype(np.float32)


def ragged_batch(rng: np.random.Generator, width: int, states: int, units: int, cell: bool) -> dict[str, np.ndarray]:
    return {"x": draw(rng, (B, T, width), 1.0), "lengths": np.array(LENGTHS, np.int32),
            "h0": draw(rng, (states, B, units), 0.5), **({"c0": draw(rng, (states, B, units), 0.5)} if cell else {})}


# ---- TF1: the canonical variables of a CudnnRNN layer, and TF's cells that run them ---------------
def cell_prefix(mode: str, layer: int, direction: int, bidirectional: bool) -> str:
    if bidirectional:
        return f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{DIRECTIONS[direction]}/{CELLS[mode]}"
    return f"rnn/multi_rnn_cell/cell_{layer}/{CELLS[mode]}"


def canonical_variables(rng: np.random.Generator, mode: str, layers: int, units: int, input_size: int,
                        bidirectional: bool) -> dict[str, np.ndarray]:
    """Random values for every variable TF1's saveable writes for such a layer (no scope)."""
    d = 2 if bidirectional else 1
    gates = {"lstm": 4, "rnn_tanh": 1, "rnn_relu": 1}.get(mode)
    result = {}
    for layer in range(layers):
        width = input_size if layer == 0 else d * units
        for direction in range(d):
            prefix = cell_prefix(mode, layer, direction, bidirectional)
            if mode == "gru":
                result.update({f"{prefix}/gates/kernel": draw(rng, (width + units, 2 * units)),
                               f"{prefix}/gates/bias": draw(rng, (2 * units,)),
                               f"{prefix}/candidate/input_projection/kernel": draw(rng, (width, units)),
                               f"{prefix}/candidate/input_projection/bias": draw(rng, (units,)),
                               f"{prefix}/candidate/hidden_projection/kernel": draw(rng, (units, units)),
                               f"{prefix}/candidate/hidden_projection/bias": draw(rng, (units,))})
            else:
                result.update({f"{prefix}/kernel": draw(rng, (width + units, gates * units)),
                               f"{prefix}/bias": draw(rng, (gates * units,))})
    return result


def lstm_block_step(w: dict[str, Any], prefix: str, x: Any, h: Any, c: Any) -> tuple[Any, Any]:
    """One step of TF's LSTMBlockCell kernel as CudnnCompatibleLSTMCell runs it."""
    import tensorflow as tf

    zeros = tf.zeros([h.shape[1]], x.dtype)
    out = tf.raw_ops.LSTMBlockCell(x=x, cs_prev=c, h_prev=h, w=w[f"{prefix}/kernel"], wci=zeros, wcf=zeros, wco=zeros,
                                   b=w[f"{prefix}/bias"], forget_bias=0.0, cell_clip=-1.0, use_peephole=False)
    return out.h, out.cs


def compatible_gru_step(w: dict[str, Any], prefix: str, x: Any, h: Any, c: Any) -> tuple[Any, Any]:
    """CudnnCompatibleGRUCell.call (TF 1.15) in TF ops."""
    import tensorflow as tf

    r, u = tf.split(tf.sigmoid(tf.matmul(tf.concat([x, h], 1), w[f"{prefix}/gates/kernel"])
                               + w[f"{prefix}/gates/bias"]),
                    2, axis=1)
    candidate = tf.matmul(x, w[f"{prefix}/candidate/input_projection/kernel"]) + \
        w[f"{prefix}/candidate/input_projection/bias"]
    candidate += r * (tf.matmul(h, w[f"{prefix}/candidate/hidden_projection/kernel"]) +
                      w[f"{prefix}/candidate/hidden_projection/bias"])
    return (1 - u) * tf.tanh(candidate) + u * h, c


def basic_rnn_step(activation: str) -> Callable[..., tuple[Any, Any]]:
    """BasicRNNCell.call in TF ops: activation(concat([x, h]) @ kernel + bias)."""
    def step(w: dict[str, Any], prefix: str, x: Any, h: Any, c: Any) -> tuple[Any, Any]:
        import tensorflow as tf

        value = tf.matmul(tf.concat([x, h], 1), w[f"{prefix}/kernel"]) + w[f"{prefix}/bias"]
        return (tf.tanh(value) if activation == "tanh" else tf.nn.relu(value)), c
    return step


STEPS: dict[str, Callable[..., tuple[Any, Any]]] = {
    "lstm": lstm_block_step, "gru": compatible_gru_step,
    "rnn_tanh": basic_rnn_step("tanh"), "rnn_relu": basic_rnn_step("relu")}


def run_tf_cells(mode: str, variables: dict[str, np.ndarray], layers: int, bidirectional: bool,
                 batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Stacked (bidirectional) TF cells over a ragged batch, each row stepped over its own length
    (the reverse direction from its last valid step), as cuDNN runs sequence lengths."""
    import tensorflow as tf

    weights = {name: tf.constant(value) for name, value in variables.items()}
    d = 2 if bidirectional else 1
    valid = np.arange(T)[None, :] < batch["lengths"][:, None]
    layer_input = batch["x"]
    finals_h, finals_c = [], []
    for layer in range(layers):
        outputs = []
        for direction in range(d):
            k = layer * d + direction
            h = tf.constant(batch["h0"][k])
            c = tf.constant(batch["c0"][k] if "c0" in batch else batch["h0"][k])
            y = np.zeros(layer_input.shape[:2] + (h.shape[1],), np.float32)
            for t in (range(T) if direction == 0 else reversed(range(T))):
                new_h, new_c = STEPS[mode](weights, cell_prefix(mode, layer, direction, bidirectional),
                                           tf.constant(layer_input[:, t]), h, c)
                mask = tf.constant(valid[:, t:t + 1])
                h, c = tf.where(mask, new_h, h), tf.where(mask, new_c, c)
                y[:, t] = np.where(valid[:, t:t + 1], new_h.numpy(), 0)
            outputs.append(y)
            finals_h.append(h.numpy())
            finals_c.append(c.numpy())
        layer_input = np.concatenate(outputs, axis=-1)
    result = {"output": layer_input, "output_h": np.stack(finals_h)}
    if mode == "lstm":
        result["output_c"] = np.stack(finals_c)
    return result


def save_tf1(folder: Path, variables: dict[str, np.ndarray], step: int = 1000) -> None:
    """The variables (and a global_step) as a name-based checkpoint written by tf.compat.v1.train.Saver."""
    import tensorflow as tf

    with tf.Graph().as_default():
        for name, value in variables.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver(save_relative_paths=True)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(global_step.assign(step))
            saver.save(session, str(folder / "model.ckpt"), global_step=step, write_meta_graph=False)


def cudnn_layer(rng: np.random.Generator, scope: str, mode: str, layers: int, units: int, input_size: int,
                bidirectional: bool, opaque: bool = True) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(variables under ``scope``, one expected record) for one TF1 CudnnRNN layer."""
    import cudnn_rnn

    canonical = canonical_variables(rng, mode, layers, units, input_size, bidirectional)
    batch = ragged_batch(rng, input_size, layers * (2 if bidirectional else 1), units, mode == "lstm")
    expected = {**batch, **run_tf_cells(mode, canonical, layers, bidirectional, batch)}
    stem = f"{scope}/" if scope else ""
    variables = {stem + name: value for name, value in canonical.items()}
    if opaque:  # the opaque buffer and its Adam slots sit beside the canonical variables (never read)
        size = cudnn_rnn.cudnn_rnn_params_size(layers, units, input_size, rnn_mode=mode,
                                               direction="bidirectional" if bidirectional else "unidirectional")
        variables[f"{stem}opaque_kernel"] = draw(rng, (size,))
        for slot in ("Adam", "Adam_1"):
            variables[f"{stem}opaque_kernel/{slot}"] = np.zeros(size, np.float32)
    return variables, expected


def tf1_case(name: str, layers: list[tuple[str, dict[str, Any]]], extra: dict[str, np.ndarray],
             answers: dict[int, str] | None = None) -> None:
    rng = np.random.default_rng(len(name))
    variables, records = dict(extra), []
    for scope, spec in layers:
        layer_variables, expected = cudnn_layer(rng, scope, **spec)
        variables.update(layer_variables)
        records.append(expected)
    folder = fresh(name)
    save_tf1(folder, variables)
    names = [scope or ("stack_bidirectional_rnn" if spec["bidirectional"] else "rnn") for scope, spec in layers]
    write_expected(folder, names, records, answers or {})


# ---- Keras: real models saved with tf.train.Checkpoint -------------------------------------------
def randomize(model: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    model.set_weights([draw(rng, np.shape(w)) for w in model.get_weights()])


def stateful_copy(keras: Any, layer: Any) -> Any:
    """A copy of an RNN layer (or Bidirectional) returning sequences and states, same weights."""
    def copy(inner: Any) -> Any:
        config = {**inner.get_config(), "return_sequences": True, "return_state": True, "go_backwards": False}
        config.pop("name", None)
        return type(inner).from_config(config)
    if isinstance(layer, keras.layers.Bidirectional):
        return keras.layers.Bidirectional(copy(layer.forward_layer), merge_mode="concat")
    return copy(layer)


def keras_record(keras: Any, layer: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The layer's own outputs on a masked ragged batch with initial states."""
    import tensorflow as tf

    bidirectional = isinstance(layer, keras.layers.Bidirectional)
    inner = layer.forward_layer if bidirectional else layer
    units = inner.cell.units
    lstm = isinstance(inner, keras.layers.LSTM)
    width = int(inner.cell.kernel.shape[0])
    d = 2 if bidirectional else 1
    batch = ragged_batch(rng, width, d, units, lstm)
    copy = stateful_copy(keras, layer)
    mask = tf.constant(np.arange(T)[None, :] < batch["lengths"][:, None])
    states = [tf.constant(batch[name][k]) for k in range(d) for name in (("h0", "c0") if lstm else ("h0",))]
    copy(tf.constant(batch["x"]), initial_state=states, mask=mask)  # builds the weights
    copy.set_weights(layer.get_weights())
    result = copy(tf.constant(batch["x"]), initial_state=states, mask=mask)
    output, finals = result[0].numpy(), [state.numpy() for state in result[1:]]
    output[~mask.numpy()] = 0
    per = 2 if lstm else 1
    record = {**batch, "output": output, "output_h": np.stack(finals[0::per])}
    if lstm:
        record["output_c"] = np.stack(finals[1::per])
    return record


def keras3_case(name: str) -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    inputs = keras.Input((None, 3))
    x = keras.layers.Masking()(inputs)
    x = keras.layers.LSTM(4, return_sequences=True, name="encoder")(x)
    x = keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True), name="bidi")(x)
    x = keras.layers.SimpleRNN(2, activation="relu", name="head")(x)
    model = keras.Model(inputs, keras.layers.Dense(1, name="out")(x))
    randomize(model, 3)
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    folder = fresh(name)
    tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(folder / "ckpt"))
    rng = np.random.default_rng(13)
    rnns = [model.get_layer(layer) for layer in ("encoder", "bidi", "head")]
    write_expected(folder, ["model/_operations/4", "model/_operations/5", "model/_operations/6"],
                   [keras_record(keras, layer, rng) for layer in rnns], {2: "rnn_relu"})


def tf_keras_case(name: str) -> None:
    import tensorflow as tf
    import tf_keras as keras

    keras.utils.set_random_seed(2)
    inputs = keras.Input((None, 3))
    x = keras.layers.Masking()(inputs)
    x = keras.layers.LSTM(3, use_bias=False, return_sequences=True, name="encoder")(x)
    x = keras.layers.Bidirectional(keras.layers.LSTM(2, return_sequences=True), name="bidi")(x)
    x = keras.layers.GRU(3, reset_after=False, return_sequences=True, name="gru_v1")(x)
    x = keras.layers.Bidirectional(keras.layers.GRU(2, reset_after=False, return_sequences=True), name="bidi_v1")(x)
    x = keras.layers.SimpleRNN(2, name="head")(x)
    model = keras.Model(inputs, keras.layers.Dense(1, name="out")(x))
    randomize(model, 2)
    folder = fresh(name)
    tf.train.Checkpoint(model=model).save(str(folder / "ckpt"))
    rng = np.random.default_rng(12)
    layers = ("encoder", "bidi", "gru_v1", "bidi_v1", "head")
    records = [{} if layer == "bidi_v1" else keras_record(keras, model.get_layer(layer), rng) for layer in layers]
    write_expected(folder, [f"model/layer_with_weights-{i}" for i in range(len(layers))], records, {4: "rnn_tanh"})


# ---- writing -----------------------------------------------------------------------------------
def fresh(name: str) -> Path:
    folder = OUT / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def write_expected(folder: Path, names: list[str], records: list[dict[str, np.ndarray]],
                   answers: dict[int, str]) -> None:
    arrays: dict[str, np.ndarray] = {"names": np.array(names)}
    for i, record in enumerate(records):
        arrays.update({f"{i}/{key}": value for key, value in record.items()})
        if i in answers:
            arrays[f"{i}/rnn_mode"] = np.array(answers[i])
    write_npz(folder / "expected.npz", arrays)
    total = sum(path.stat().st_size for path in folder.iterdir())
    print(f"wrote {folder} ({total} bytes)")


def main() -> None:
    tf1_case("tf1_cudnn_lstm",
             [("cudnn_lstm", dict(mode="lstm", layers=2, units=4, input_size=3, bidirectional=False))],
             {"dense/kernel": np.full((4, 2), 0.5, np.float32), "dense/bias": np.zeros(2, np.float32)})
    tf1_case("tf1_encoder_decoder",
             [("encoder/cudnn_gru", dict(mode="gru", layers=2, units=3, input_size=3, bidirectional=True)),
              ("decoder/cudnn_rnn_relu", dict(mode="rnn_relu", layers=1, units=4, input_size=6,
                                              bidirectional=False))], {})
    tf1_case("tf1_unscoped",
             [("classifier", dict(mode="rnn_tanh", layers=1, units=3, input_size=6, bidirectional=False,
                                  opaque=False)),
              ("", dict(mode="lstm", layers=1, units=3, input_size=2, bidirectional=True, opaque=False))],
             {}, {0: "rnn_tanh"})
    keras3_case("keras3_checkpoint")
    tf_keras_case("tf_keras_checkpoint")


if __name__ == "__main__":
    main()
