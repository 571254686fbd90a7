"""The TensorFlow checkpoint reader on fresh checkpoints from live Keras 3, tf_keras and TF1-style Savers.

* Random Keras 3 and tf_keras models (stacked LSTM / GRU / SimpleRNN, some in Bidirectional, a
  Masking input) saved with ``tf.train.Checkpoint`` (with optimizer state), ``save_weights`` in
  TF format, and as SavedModels: every RNN layer is found, converted, run by ``cudnn_rnn_v3``
  and equals the layer's own output on a masked ragged batch with initial states (1e-5).
* Random TF1 CudnnRNN canonical variables (modes, layers, directions, scopes) written by
  ``tf.compat.v1.train.Saver``, against TF's cell kernels (scripts/make_tf_checkpoint_files.py).
* TensorFlow's own reader, in a subprocess: it raises on truncated and corrupt files, and
  aborts the process on a negative dimension in the index, which is why the reader runs it in a
  child process (cudnn_rnn/convert/readers/_child.py): the child ends, this process lives on.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from convert_testing import rng_for  # noqa: E402
from cudnn_rnn.convert.readers import FileReadError, read_file  # noqa: E402
from tf_checkpoint_testing import compare, rewrite_index, run_ours, step_reset_before  # noqa: E402
from rnn_testing import load_script  # noqa: E402

pytestmark = pytest.mark.oracle

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "files" / "tf_checkpoint"


script = load_script("make_tf_checkpoint_files")


# ---- Keras -------------------------------------------------------------------------------------
def random_model(api: Any, rng: np.random.Generator, max_layers: int = 3) -> tuple[Any, list[Any]]:
    """A model of 1..max_layers stacked random RNN layers (some Bidirectional) behind Masking, random weights."""
    inputs = api.Input((None, int(rng.integers(1, 5))))
    x = api.layers.Masking()(inputs)
    rnns = []
    for i in range(int(rng.integers(1, max_layers + 1))):
        kind = str(rng.choice(["LSTM", "GRU", "SimpleRNN"]))
        extra: dict[str, Any] = {}
        if kind == "SimpleRNN":
            extra["activation"] = str(rng.choice(["tanh", "relu"]))
        if kind == "GRU":
            extra["reset_after"] = bool(rng.integers(2))
        if rng.integers(3) == 0:
            extra["use_bias"] = False
        layer = getattr(api.layers, kind)(int(rng.integers(1, 6)), return_sequences=True, name=f"rnn_{i}", **extra)
        if rng.integers(2):
            layer = api.layers.Bidirectional(layer, name=f"bidi_{i}")
        x = layer(x)
        rnns.append(layer)
    model = api.Model(inputs, api.layers.Dense(1, name="out")(x))
    script.randomize(model, int(rng.integers(1 << 30)))
    return model, rnns


def check_layer(api: Any, found: Any, layer: Any, rng: np.random.Generator) -> None:
    """``found`` computes what ``layer`` computes (or is the refusal / approximation it must be)."""
    bidirectional = isinstance(layer, api.layers.Bidirectional)
    inner = layer.forward_layer if bidirectional else layer
    if isinstance(inner, api.layers.GRU) and not inner.reset_after and not inner.use_bias:
        # without a bias the checkpoint cannot tell reset_after: read as Keras's default, and said so
        assert "reset_after=True (Keras's default) is assumed" in " ".join(found.notes)
        return
    if isinstance(inner, api.layers.GRU) and not inner.reset_after:
        if bidirectional:
            assert found.refusal and "reset-before GRU in both directions" in found.refusal
            return
        assert found.fmt == "gru_block_cell" and found.conversion().startswith("approximate: ")
        record = script.keras_record(api, layer, rng)
        compare(step_reset_before(dict(found.tensors), record), record, found.name)
        return
    record = script.keras_record(api, layer, rng)
    if isinstance(inner, api.layers.SimpleRNN):
        record["rnn_mode"] = np.array("rnn_" + inner.activation.__name__)
    compare(run_ours(found, record), record, found.name)


def check_in_order(api: Any, found: list[Any], rnns: list[Any], rng: np.random.Generator) -> None:
    assert len(found) == len(rnns), [item.name for item in found]
    for item, layer in zip(found, rnns):
        check_layer(api, item, layer, rng)


@pytest.mark.parametrize("seed", range(4))
def test_keras3_checkpoint(tmp_path: Path, seed: int) -> None:
    rng = rng_for("keras3 checkpoint", seed)
    model, rnns = random_model(keras, rng)
    objects: dict[str, Any] = {"model": model}
    if seed % 2:
        objects["optimizer"] = keras.optimizers.Adam()
        objects["optimizer"].build(model.trainable_variables)
    tf.train.Checkpoint(**objects).save(str(tmp_path / "ckpt"))
    found = read_file(tmp_path)
    assert all(item.source.startswith("Keras 3 ") and item.name.startswith("model/_operations/") for item in found)
    check_in_order(keras, found, rnns, rng)


@pytest.mark.parametrize("seed", range(2))
def test_keras3_saved_model_names_the_layers(tmp_path: Path, seed: int) -> None:
    rng = rng_for("keras3 saved model", seed)
    model, rnns = random_model(keras, rng)
    model.export(str(tmp_path / "exported"), verbose=False)
    for path in (tmp_path / "exported", tmp_path / "exported" / "variables"):
        found = read_file(path)
        assert [item.name for item in found] == [layer.name for layer in rnns]
        check_in_order(keras, found, rnns, rng)


@pytest.mark.parametrize("seed", range(3))
def test_tf_keras_checkpoint_and_save_weights(tmp_path: Path, seed: int) -> None:
    rng = rng_for("tf_keras checkpoint", seed)
    model, rnns = random_model(tf_keras, rng)
    tf.train.Checkpoint(model=model, step=tf.Variable(7)).save(str(tmp_path / "ckpt" / "ckpt"))
    model.save_weights(str(tmp_path / "weights" / "w"))
    for path, root in ((tmp_path / "ckpt", "model/"), (tmp_path / "weights" / "w.index", "")):
        found = read_file(path)
        assert [item.name for item in found] == [f"{root}layer_with_weights-{i}" for i in range(len(rnns))]
        check_in_order(tf_keras, found, rnns, rng)


def test_tf_keras_saved_model_names_the_layers(tmp_path: Path) -> None:
    rng = rng_for("tf_keras saved model")
    model, rnns = random_model(tf_keras, rng, max_layers=2)
    tf.saved_model.save(model, str(tmp_path / "saved"))
    found = read_file(tmp_path / "saved")
    assert [item.name for item in found] == [layer.name for layer in rnns]
    check_in_order(tf_keras, found, rnns, rng)


def test_tf_keras_graph_mode_saver_checkpoint(tmp_path: Path) -> None:
    """tf_keras layers built in a TF1 graph and saved by tf.compat.v1.train.Saver: found by name."""
    with tf.Graph().as_default():
        inputs = tf_keras.Input((None, 3))
        x = tf_keras.layers.LSTM(4, return_sequences=True, name="encoder")(inputs)
        tf_keras.layers.Bidirectional(tf_keras.layers.GRU(2, return_sequences=True), name="bidi")(x)
        variables = tf.compat.v1.global_variables()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = dict(zip((v.name[:-2] for v in variables), session.run(variables)))
            saver.save(session, str(tmp_path / "model.ckpt"), write_meta_graph=False)
    encoder, bidi = read_file(tmp_path)
    assert (encoder.name, encoder.source, encoder.conversion()) == ("encoder", "Keras LSTM (name-based checkpoint)",
                                                                    "exact")
    assert (bidi.name, bidi.source, bidi.conversion()) == ("bidi", "Keras Bidirectional(GRU) (name-based checkpoint)",
                                                           "exact")
    for found, layers in ((encoder, {"forward": "encoder"}),
                          (bidi, {"forward": "bidi/forward_gru", "backward": "bidi/backward_gru"})):
        for direction, layer in layers.items():
            cell = "lstm_cell" if found is encoder else "gru_cell"
            for field in ("kernel", "recurrent_kernel", "bias"):
                np.testing.assert_array_equal(found.tensors[f"layer_0/{direction}/{field}"],
                                              values[f"{layer}/{cell}/{field}"])


# ---- TF1 CudnnRNN canonical variables ------------------------------------------------------------
#: rnn_mode -> the default scope (layer name) of TF1's CudnnRNN layer for it
DEFAULT_SCOPES = {"lstm": "cudnn_lstm", "gru": "cudnn_gru", "rnn_tanh": "cudnn_rnn_tanh", "rnn_relu": "cudnn_rnn_relu"}


@pytest.mark.parametrize("seed", range(6))
def test_tf1_cudnn_canonical_variables(tmp_path: Path, seed: int) -> None:
    """One or three layers per checkpoint, under default, user-named or no scopes."""
    rng = rng_for("tf1", seed)
    layouts = []
    variables: dict[str, np.ndarray] = {}
    for kind in (("named", "default_1", "bare") if seed % 2 else ("default",)):
        mode = str(rng.choice(list(DEFAULT_SCOPES)))
        scope = {"named": "outer/encoder", "default": DEFAULT_SCOPES[mode],
                 "default_1": f"outer/{DEFAULT_SCOPES[mode]}_1", "bare": ""}[kind]
        spec = {"mode": mode, "layers": int(rng.integers(1, 4)), "units": int(rng.integers(1, 5)),
                "input_size": int(rng.integers(1, 5)), "bidirectional": bool(rng.integers(2)),
                "opaque": bool(rng.integers(2))}
        layer_variables, record = script.cudnn_layer(rng, scope, **spec)
        variables.update(layer_variables)
        name = scope or ("stack_bidirectional_rnn" if spec["bidirectional"] else "rnn")
        layouts.append((name, kind, spec, record))
    script.save_tf1(tmp_path, variables)
    found = {item.name: item for item in read_file(tmp_path)}
    assert sorted(found) == sorted(name for name, *_ in layouts)
    for name, kind, spec, record in layouts:
        item = found[name]
        assert item.fmt == "tf_cell" and item.fields["num_layers"] == spec["layers"]
        if spec["mode"].startswith("rnn_"):  # a default comes only from the layer's default scope name
            assert item.questions["rnn_mode"].default == (spec["mode"] if kind.startswith("default") else None)
            record["rnn_mode"] = np.array(spec["mode"])
        compare(run_ours(item, record), record, name)


# ---- TensorFlow's own reader on bad files ------------------------------------------------------
TF_READS = ("import os, sys\n"
            "os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
            "import tensorflow as tf\n"
            "for prefix in sys.argv[1:]:\n"
            "    try:\n"
            "        reader = tf.train.load_checkpoint(prefix)\n"
            "        for key in reader.get_variable_to_shape_map():\n"
            "            reader.get_tensor(key)\n"
            "        print('read', flush=True)\n"
            "    except Exception as error:\n"
            "        print('raised', type(error).__name__, flush=True)\n")


def tensorflow_reads(*prefixes: str) -> subprocess.CompletedProcess:
    """TensorFlow's reader on each checkpoint, in a fresh process (one line per checkpoint)."""
    return subprocess.run([sys.executable, "-c", TF_READS, *prefixes], capture_output=True, text=True, timeout=300)


def bad_copy(tmp_path: Path, damage: str) -> str:
    folder = tmp_path / damage.replace(" ", "_")
    shutil.copytree(GOLDEN / "tf1_cudnn_lstm", folder)
    prefix = str(folder / "model.ckpt-1000")
    if damage == "cut index":
        os.truncate(prefix + ".index", 300)
    elif damage == "cut data":
        os.truncate(prefix + ".data-00000-of-00001", 1000)
    elif damage == "flipped data":
        data = bytearray(Path(prefix + ".data-00000-of-00001").read_bytes())
        for position in range(0, len(data), 97):  # a byte in every variable
            data[position] ^= 0xFF
        Path(prefix + ".data-00000-of-00001").write_bytes(bytes(data))
    return prefix


def test_tensorflow_raises_on_truncated_and_corrupt_files(tmp_path: Path) -> None:
    damages = ("cut index", "cut data", "flipped data")
    prefixes = [bad_copy(tmp_path, damage) for damage in damages]
    result = tensorflow_reads(*prefixes)
    assert result.returncode == 0, (result.returncode, result.stderr[-500:])
    lines = result.stdout.splitlines()
    assert len(lines) == len(damages) and all(line.startswith("raised ") for line in lines), lines
    for prefix in prefixes:
        with pytest.raises(FileReadError):
            read_file(prefix)


def test_tensorflow_aborts_on_a_negative_dimension_which_the_reader_refuses(tmp_path: Path) -> None:
    """Why TensorFlow reads in a child process: TF 2.21's C++ reader aborts; the child's abort is a refusal."""
    prefix = bad_copy(tmp_path, "negative dimension")
    kernel = "cudnn_lstm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"
    rewrite_index(prefix, {kernel: lambda entry: setattr(entry.shape.dim[0], "size", -7)})
    result = tensorflow_reads(prefix)
    assert result.returncode == -signal.SIGABRT and not result.stdout, (result.returncode, result.stderr[-500:])
    with pytest.raises(FileReadError, match=rf"crashed reading it \(exit code {-signal.SIGABRT}\)") as refused:
        read_file(prefix)
    assert refused.value.path == prefix  # and this process lives on
