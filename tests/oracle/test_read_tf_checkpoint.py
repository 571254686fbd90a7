"""The TensorFlow checkpoint reader on real checkpoints (tests/golden/files/tf_checkpoint), bad paths and hostile files.

Golden checkpoints (scripts/make_tf_checkpoint_files.py): TF1 CudnnRNN canonical variables
written by tf.compat.v1.train.Saver, and Keras 3 / tf_keras models saved by tf.train.Checkpoint,
each with TF's or Keras's own outputs on a ragged batch. Every RNN found is converted, run
through ``cudnn_rnn_v3`` and compared (float32, 1e-5). Hostile indexes are written with valid
table checksums (tests/support/tf_checkpoint_testing.py), so TensorFlow's reader meets each bad
entry, in the reader's child process: those it aborts on end there, in a FileReadError naming the
checkpoint. Each read is a child that imports TensorFlow (seconds), so a golden checkpoint is read
once (:func:`read_golden`).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
pytest.importorskip("tensorflow")  # the reader parses the index with TensorFlow's protos (oracle extra)
pytestmark = pytest.mark.oracle

import cudnn_rnn  # noqa: E402
from cudnn_rnn.convert.readers import FILE_KINDS, FileReadError, FoundRNN, file_kind, read_file  # noqa: E402
from tf_checkpoint_testing import compare, rewrite_index, run_ours, step_reset_before  # noqa: E402
from rnn_testing import load_script, read_refusal  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "files" / "tf_checkpoint"
SETTINGS = ("the checkpoint keeps no layer settings: Keras's defaults are assumed (activation tanh, "
            "recurrent_activation sigmoid, go_backwards=False)")
MERGE = "merge_mode='concat' is assumed (cuDNN concatenates the two directions)"
NEEDS_SIMPLE = ("needs: a SimpleRNN's weights do not say its activation: pass rnn_mode='rnn_tanh' or "
                "rnn_mode='rnn_relu'")


def described(mode: str, layers: int, units: int, inputs: int, direction: str = "unidirectional") -> str:
    return (f"rnn_mode={mode}, num_layers={layers}, num_units={units}, input_size={inputs}, direction={direction}, "
            "num_proj=0, input_mode=linear_input, dtype=float32")


#: case -> [(name, source, fmt, describe(), conversion() or its start)], in the reader's order
EXPECTED: dict[str, list[tuple[str, str, str, str, str]]] = {
    "tf1_cudnn_lstm": [
        ("cudnn_lstm", "TF1 CudnnLSTM (canonical variables)", "tf_cell", described("lstm", 2, 4, 3), "exact")],
    "tf1_encoder_decoder": [
        ("decoder/cudnn_rnn_relu", "TF1 CudnnRNNTanh or CudnnRNNRelu (canonical variables)", "tf_cell",
         described("rnn_relu?", 1, 4, 6), "exact"),
        ("encoder/cudnn_gru", "TF1 CudnnGRU (canonical variables)", "tf_cell",
         described("gru", 2, 3, 3, "bidirectional"), "exact")],
    "tf1_unscoped": [
        ("classifier", "TF1 CudnnRNNTanh or CudnnRNNRelu (canonical variables)", "tf_cell", described("?", 1, 3, 6),
         "needs: a basic_rnn_cell's variables do not say its activation: pass rnn_mode='rnn_tanh' or "
         "rnn_mode='rnn_relu'"),
        ("stack_bidirectional_rnn", "TF1 CudnnLSTM (canonical variables)", "tf_cell",
         described("lstm", 1, 3, 2, "bidirectional"), "exact")],
    "keras3_checkpoint": [
        ("model/_operations/4", "Keras 3 LSTM", "keras", described("lstm", 1, 4, 3), "exact"),
        ("model/_operations/5", "Keras 3 Bidirectional(GRU)", "keras", described("gru", 1, 3, 4, "bidirectional"),
         "exact"),
        ("model/_operations/6", "Keras 3 SimpleRNN", "keras", described("?", 1, 2, 6), NEEDS_SIMPLE)],
    "tf_keras_checkpoint": [
        ("model/layer_with_weights-0", "Keras 2 (tf_keras) LSTM", "keras", described("lstm", 1, 3, 3), "exact"),
        ("model/layer_with_weights-1", "Keras 2 (tf_keras) Bidirectional(LSTM)", "keras",
         described("lstm", 1, 2, 3, "bidirectional"), "exact"),
        ("model/layer_with_weights-2", "Keras 2 (tf_keras) GRU(reset_after=False)", "gru_block_cell",
         described("gru", 1, 3, 4), "approximate: format 'gru_block_cell' is a reset-before GRU"),
        ("model/layer_with_weights-3", "Keras 2 (tf_keras) Bidirectional(GRU(reset_after=False))", "keras",
         described("gru", 1, 2, 3, "bidirectional"),
         "refused: Bidirectional(GRU(reset_after=False)) is a reset-before GRU in both directions, which cuDNN "
         "cannot run"),
        ("model/layer_with_weights-4", "Keras 2 (tf_keras) SimpleRNN", "keras", described("?", 1, 2, 4),
         NEEDS_SIMPLE)],
}


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("make_tf_checkpoint_files")


def expected_records(case: str) -> dict[str, dict[str, np.ndarray]]:
    """RNN name -> its recorded batch and framework outputs."""
    with np.load(GOLDEN / case / "expected.npz") as archive:
        arrays = dict(archive)
    records: dict[str, dict[str, np.ndarray]] = {}
    for i, name in enumerate(arrays["names"]):
        records[str(name)] = {key.split("/", 1)[1]: value for key, value in arrays.items()
                              if key.startswith(f"{i}/")}
    return records


@functools.cache
def read_golden(case: str) -> list[FoundRNN]:
    """What read_file finds in a golden checkpoint, read once per test session."""
    return read_file(GOLDEN / case)


def copy_case(case: str, tmp_path: Path) -> Path:
    folder = tmp_path / case
    shutil.copytree(GOLDEN / case, folder)
    return folder


def prefix_of(folder: Path) -> str:
    (index,) = folder.glob("*.index")
    return str(index)[:-len(".index")]


# ---- what each golden checkpoint holds ----------------------------------------------------------
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_golden_checkpoint_lists_its_rnns(case: str) -> None:
    found = read_golden(case)
    assert [(item.name, item.source, item.fmt, item.describe()) for item in found] == \
        [entry[:4] for entry in EXPECTED[case]]
    for item, entry in zip(found, EXPECTED[case]):
        conversion = item.conversion()
        assert conversion == entry[4] or (entry[4] != "exact" and conversion.startswith(entry[4])), conversion


def test_tf1_notes_name_the_opaque_buffer_and_the_assumed_mode() -> None:
    decoder, encoder = read_golden("tf1_encoder_decoder")
    assert decoder.notes == (
        "the opaque buffer 'decoder/cudnn_rnn_relu/opaque_kernel' is not read (its layout belongs to the GPU that "
        "wrote it); the canonical variables beside it hold the same weights",
        "rnn_mode=rnn_relu is assumed from the scope name 'decoder/cudnn_rnn_relu' (the layer's default name); the "
        "variables do not say tanh or relu")
    assert decoder.questions["rnn_mode"].default == "rnn_relu"
    assert decoder.with_hints(rnn_mode="rnn_tanh").config.rnn_mode == "rnn_tanh"  # still a question: answerable
    assert sorted(encoder.tensors)[0] == "stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/" \
                                         "cudnn_compatible_gru_cell/" \
                                         "candidate/hidden_projection/bias"  # the scope is stripped: tf_cell names


def test_keras_notes() -> None:
    lstm, bidi, head = read_golden("keras3_checkpoint")
    assert lstm.notes == ("the checkpoint keeps no layer names: this is the object at 'model/_operations/4' of the "
                          "saved model", SETTINGS)
    assert bidi.notes[0] == MERGE
    assert head.notes[-1] == "the checkpoint keeps no layer settings: Keras's defaults are assumed (go_backwards=False)"
    no_bias, _, reset_before, _, _ = read_golden("tf_keras_checkpoint")
    assert no_bias.notes[-1] == "the layers have no biases (use_bias=False): zero biases are used, the same function"
    assert reset_before.notes[-1].startswith("GRU(reset_after=False) is a reset-before GRU (TF's GRUBlockCell)")


# ---- each RNN found runs as the framework did -----------------------------------------------------
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_golden_rnns_run_like_the_framework(case: str) -> None:
    records = expected_records(case)
    checked = 0
    for found in read_golden(case):
        record = records[found.name]
        if found.fmt == "gru_block_cell" or found.refusal:
            continue  # not cuDNN's function: see test_reset_before_gru_steps_like_tf_keras
        compare(run_ours(found, record), record, found.name)
        checked += 1
    assert checked == sum(1 for entry in EXPECTED[case] if not entry[4].startswith(("approximate", "refused")))


def test_reset_before_gru_steps_like_tf_keras() -> None:
    """GRU(reset_after=False) comes out in the gru_block_cell format: TF's GRUBlockCell kernel
    (cudnn_rnn.gru_block_cell) stepped over those tensors equals tf_keras's GRU output."""
    found = read_golden("tf_keras_checkpoint")[2]
    record = expected_records("tf_keras_checkpoint")[found.name]
    compare(step_reset_before(dict(found.tensors), record), record, found.name)
    with pytest.raises(ValueError, match="reset-before GRU"):
        found.to_params()
    assert found.to_params(allow_approximation=True).approximations


def test_bidirectional_reset_before_gru_is_refused_by_name() -> None:
    found = read_golden("tf_keras_checkpoint")[3]
    with pytest.raises(ValueError, match=r"^model/layer_with_weights-3 \(Keras 2 \(tf_keras\) Bidirectional\(GRU\("
                                         r"reset_after=False\)\)\): Bidirectional\(GRU\(reset_after=False\)\) is a "
                                         r"reset-before GRU in both directions"):
        found.to_params(allow_approximation=True)


# ---- paths ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["folder", "prefix", "index", "data"])
def test_every_path_form_reads_the_same_checkpoint(form: str) -> None:
    folder = GOLDEN / "tf1_cudnn_lstm"
    prefix = prefix_of(folder)
    path = {"folder": str(folder), "prefix": prefix, "index": prefix + ".index",
            "data": prefix + ".data-00000-of-00001"}[form]
    assert file_kind(path) is FILE_KINDS["tf_checkpoint"]
    (found,) = read_golden("tf1_cudnn_lstm") if form == "folder" else read_file(path)
    assert found.name == "cudnn_lstm" and found.conversion() == "exact"


def test_the_state_file_itself_stands_for_its_folder() -> None:
    """cudnn-rnn's file_kind does not route a bare ``checkpoint`` file here yet; the reader takes it."""
    from cudnn_rnn.convert.readers._tf_checkpoint import locate

    folder = GOLDEN / "tf1_cudnn_lstm"
    assert locate(str(folder / "checkpoint")).prefix == prefix_of(folder)


def test_folder_without_state_file_reads_its_one_checkpoint(tmp_path: Path) -> None:
    folder = copy_case("tf1_cudnn_lstm", tmp_path)
    (folder / "checkpoint").unlink()
    assert [item.name for item in read_file(folder)] == ["cudnn_lstm"]
    shutil.copy(prefix_of(folder) + ".index", folder / "other.index")
    assert read_refusal(folder).endswith(
        "the folder holds 2 checkpoint indexes ['model.ckpt-1000.index', 'other.index'] and no 'checkpoint' state "
        "file: pass one checkpoint prefix (PREFIX, with PREFIX.index beside it)")


def test_state_file_naming_a_checkpoint_outside_the_folder_is_refused(tmp_path: Path) -> None:
    folder = copy_case("tf1_cudnn_lstm", tmp_path)
    elsewhere = copy_case("tf1_unscoped", tmp_path)
    for name in elsewhere.glob("model.ckpt-1000.*"):
        name.rename(elsewhere / name.name.replace("model.ckpt-1000", "other-5"))
    other = str(elsewhere / "other-5")
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "{other}"\n')
    assert read_refusal(folder).endswith(
        f"the state file 'checkpoint' names the checkpoint {other!r}, outside the folder: pass the checkpoint prefix "
        "itself (PREFIX, with PREFIX.index beside it)")
    (folder / "checkpoint").write_text('model_checkpoint_path: "../tf1_unscoped/other-5"\n')
    assert "outside the folder" in read_refusal(folder)


def test_state_file_with_the_absolute_path_of_a_moved_folder_is_followed(tmp_path: Path) -> None:
    """TF1's Saver wrote absolute paths by default; a moved folder still has the checkpoint by name."""
    folder = copy_case("tf1_cudnn_lstm", tmp_path)
    (folder / "checkpoint").write_text('model_checkpoint_path: "/gone/away/model.ckpt-1000"\n')
    assert [item.name for item in read_file(folder)] == ["cudnn_lstm"]


def test_state_file_naming_nothing_is_refused(tmp_path: Path) -> None:
    folder = copy_case("tf1_cudnn_lstm", tmp_path)
    (folder / "checkpoint").write_text("this is { not a state file")
    assert read_refusal(folder).endswith("the state file 'checkpoint' in the folder names no checkpoint (it is empty "
                                         "or does not parse): pass a checkpoint prefix such as FOLDER/ckpt-1")


def test_missing_index_and_missing_data_shard(tmp_path: Path) -> None:
    folder = copy_case("tf1_cudnn_lstm", tmp_path)
    prefix = prefix_of(folder)
    os.remove(prefix + ".data-00000-of-00001")
    assert read_refusal(prefix).endswith("the checkpoint's data files 'model.ckpt-1000.data-*' are missing: copy every "
                                         ".data-* file of the checkpoint beside its .index")
    os.remove(prefix + ".index")
    shutil.copy(GOLDEN / "tf1_cudnn_lstm" / "model.ckpt-1000.data-00000-of-00001", folder)
    assert read_refusal(prefix + ".data-00000-of-00001").endswith(
        "the checkpoint index 'model.ckpt-1000.index' is missing: a TensorFlow checkpoint is PREFIX.index with its "
        "PREFIX.data-* files beside it")


def test_pytorch_options_are_refused() -> None:
    assert read_refusal(GOLDEN / "tf1_cudnn_lstm", prefix="rnn.").endswith(
        "prefix= applies to PyTorch state_dicts in torch.save and safetensors files (the key prefix of the RNN in a "
        "parent module), not to a TensorFlow "
        "checkpoint; a TensorFlow checkpoint names its RNNs by variable scope: pick one by its name with names=[NAME] "
        "(the names are listed by cudnn-rnn inspect)")
    assert "key= applies to PyTorch checkpoint dicts" in read_refusal(GOLDEN / "tf1_cudnn_lstm", key="model")


# ---- checkpoints without RNNs, and malformed RNN variables ---------------------------------------
def test_checkpoint_without_rnn_says_what_it_holds(tmp_path: Path, script: ModuleType) -> None:
    script.save_tf1(tmp_path, {"dense/kernel": np.ones((3, 2), np.float32), "dense/bias": np.zeros(2, np.float32)})
    assert read_refusal(tmp_path).endswith(
        "this TensorFlow checkpoint holds no LSTM, GRU or simple RNN (looked for TF1 CudnnRNN canonical variables "
        "and Keras RNN layers); it holds 3 variable(s): dense/bias [2], dense/kernel [3, 2], global_step []")


def test_opaque_buffer_alone_is_a_params_buffer_with_questions(tmp_path: Path, script: ModuleType) -> None:
    """A Saver given an explicit var_list keeps only the opaque buffer (and its optimizer slots)."""
    size = cudnn_rnn.cudnn_rnn_params_size(2, 4, 3, rnn_mode="gru")
    params = np.random.default_rng(0).uniform(-1, 1, size).astype(np.float32)
    script.save_tf1(tmp_path, {"encoder/cudnn_gru/opaque_kernel": params,
                               "encoder/cudnn_gru/opaque_kernel/Adam": np.zeros(size, np.float32)})
    (found,) = read_file(tmp_path)
    assert (found.name, found.source, found.fmt) == ("encoder/cudnn_gru", "TF1 CudnnGRU opaque buffer (no canonical "
                                                     "variables)", "params")
    assert found.describe() == ("rnn_mode=gru?, num_layers=?, num_units=?, input_size=?, direction=unidirectional?, "
                                "num_proj=0?, input_mode=linear_input?, dtype=float32")
    assert found.conversion() == (
        "needs: a TF1 opaque buffer does not say its configuration: pass num_layers=NUM_LAYERS, "
        "num_units=NUM_UNITS, input_size=INPUT_SIZE")
    np.testing.assert_array_equal(found.with_hints(num_layers=2, num_units=4, input_size=3).to_params().value, params)
    with pytest.raises(ValueError, match="params"):
        found.with_hints(num_layers=1, num_units=4, input_size=3).to_params()


def save_partitioned(folder: Path, variables: dict[str, np.ndarray], partitioned: str) -> None:
    """A TF1 checkpoint whose variable ``partitioned`` is split in 3 slices along its rows."""
    import tensorflow as tf

    with tf.Graph().as_default():
        for name, value in variables.items():
            extra = {"partitioner": tf.compat.v1.fixed_size_partitioner(3)} if name == partitioned else {}
            tf.compat.v1.get_variable(name, initializer=tf.constant(value), **extra)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(folder / "model.ckpt"), write_meta_graph=False)


PARTITIONED = "lm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"


def test_partitioned_variable_is_assembled(tmp_path: Path, script: ModuleType) -> None:
    variables = {f"lm/{name}": value for name, value in
                 script.canonical_variables(np.random.default_rng(1), "lstm", 1, 2, 3, False).items()}
    save_partitioned(tmp_path, variables, PARTITIONED)
    (found,) = read_file(tmp_path)
    assert found.conversion() == "exact"
    np.testing.assert_array_equal(found.tensors[PARTITIONED.removeprefix("lm/")], variables[PARTITIONED])


def test_partitioned_variable_with_an_absurd_shape_is_refused(tmp_path: Path, script: ModuleType) -> None:
    variables = {f"lm/{name}": value for name, value in
                 script.canonical_variables(np.random.default_rng(1), "lstm", 1, 2, 3, False).items()}
    save_partitioned(tmp_path, variables, PARTITIONED)
    prefix = prefix_of(tmp_path)
    rewrite_index(prefix, {PARTITIONED: _dims(1 << 30, 8)})
    message = read_refusal(prefix)
    assert message.startswith(f"cannot read {prefix!r}: TensorFlow cannot read variable {PARTITIONED!r} (ValueError: "
                              "Does not have sufficient slices for partitioned tensor ")
    assert message.endswith("to restore in slice_spec: -:-): the checkpoint is truncated or corrupt"), message


def test_tf1_scope_with_a_missing_layer_is_named(tmp_path: Path, script: ModuleType) -> None:
    variables = script.canonical_variables(np.random.default_rng(0), "lstm", 3, 2, 3, False)
    variables = {f"enc/{name}": value for name, value in variables.items() if "cell_1/" not in name}
    script.save_tf1(tmp_path, variables)
    assert read_refusal(tmp_path).endswith(
        "enc (TF1 CudnnLSTM (canonical variables)): the tensors do not form a 'tf_cell' RNN: layer(s) [1] are "
        "missing (cell_{l} found for layers [0, 2])")


def test_tf1_variable_of_a_wrong_shape_is_named(tmp_path: Path, script: ModuleType) -> None:
    variables = script.canonical_variables(np.random.default_rng(0), "gru", 1, 2, 3, False)
    variables["rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/bias"] = np.zeros(5, np.float32)
    script.save_tf1(tmp_path, variables)
    message = read_refusal(tmp_path)
    assert "rnn (TF1 CudnnGRU (canonical variables)): format 'tf_cell' tensor " \
           "'rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/bias' must have shape (4,)" in message


def test_rnn_variable_that_is_not_float_is_named(tmp_path: Path, script: ModuleType) -> None:
    variables = script.canonical_variables(np.random.default_rng(0), "lstm", 1, 2, 3, False)
    variables["rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias"] = np.zeros(8, np.int32)
    script.save_tf1(tmp_path, variables)
    assert read_refusal(tmp_path).endswith(
        "rnn: variable 'rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias' is int32 of shape (8,); RNN "
        "weights are 1-D or 2-D arrays of float16, float32, float64")


def test_garbage_object_graph_is_refused(tmp_path: Path) -> None:
    import tensorflow as tf

    tf.raw_ops.SaveV2(prefix=str(tmp_path / "ckpt"), tensor_names=["_CHECKPOINTABLE_OBJECT_GRAPH", "x"],
                      shape_and_slices=["", ""], tensors=[tf.constant(b"\xff\xfe not a proto"), tf.constant(1.0)])
    assert read_refusal(tmp_path).endswith("the checkpoint's object graph (_CHECKPOINTABLE_OBJECT_GRAPH) "
                                           "does not parse: the checkpoint is corrupt")


# ---- truncated, corrupt and hostile files --------------------------------------------------------
LSTM_KERNEL = "cudnn_lstm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"


@pytest.mark.parametrize("cut", [0, 10, 100, 300])
def test_truncated_index(tmp_path: Path, cut: int) -> None:
    prefix = prefix_of(copy_case("tf1_cudnn_lstm", tmp_path))
    with open(prefix + ".index", "r+b") as handle:
        handle.truncate(cut)
    message = read_refusal(prefix)
    assert message.startswith(f"cannot read {prefix!r}: TensorFlow cannot open the checkpoint (OpError: ")
    assert "sstable" in message and message.endswith("it is truncated or corrupt"), message


@pytest.mark.parametrize("cut", [0, 100, 1000, 4000])
def test_truncated_data(tmp_path: Path, cut: int) -> None:
    prefix = prefix_of(copy_case("tf1_cudnn_lstm", tmp_path))
    with open(prefix + ".data-00000-of-00001", "r+b") as handle:
        handle.truncate(cut)
    message = read_refusal(prefix)
    assert message.startswith(f"cannot read {prefix!r}: TensorFlow cannot read variable ")
    assert "Read less bytes than requested" in message and message.endswith("the checkpoint is truncated or corrupt")


@pytest.mark.parametrize("case", ["tf1_cudnn_lstm", "keras3_checkpoint"])
def test_flipped_data_bytes_fail_the_checksum(tmp_path: Path, case: str) -> None:
    prefix = prefix_of(copy_case(case, tmp_path))
    data = bytearray(Path(prefix + ".data-00000-of-00001").read_bytes())
    for position in range(0, len(data), 7):
        data[position] ^= 0x5A
    Path(prefix + ".data-00000-of-00001").write_bytes(bytes(data))
    message = read_refusal(prefix)
    assert "TensorFlow cannot read variable" in message and "checksum does not match" in message.lower()


def test_flipped_index_bytes(tmp_path: Path) -> None:
    prefix = prefix_of(copy_case("tf1_cudnn_lstm", tmp_path))
    data = bytearray(Path(prefix + ".index").read_bytes())
    data[60] ^= 0xFF
    Path(prefix + ".index").write_bytes(bytes(data))
    assert "truncated or corrupt" in read_refusal(prefix)


def _dims(*sizes: int):
    def change(entry) -> None:
        del entry.shape.dim[:]
        for size in sizes:
            entry.shape.dim.add(size=size)
    return change


#: what the reader says when TensorFlow's C++ reader aborts the child (SIGABRT)
CRASHED = f"TensorFlow's checkpoint reader crashed reading it (exit code {-signal.SIGABRT}): the file is corrupt"
READ_FAILS = f"TensorFlow cannot read variable {LSTM_KERNEL!r}"

#: hostile index entries for the LSTM kernel [7, 16] -> the end of the message (TensorFlow's own words in the middle)
HOSTILE_ENTRIES = {
    "absurd shape": (_dims(1 << 20, 1 << 20), f"{READ_FAILS} (OpError: Invalid size in bundle entry: key "
                     f"{LSTM_KERNEL}; stored size 448; expected size 4398046511104): the checkpoint is truncated or "
                     "corrupt"),
    "negative dimension": (_dims(-7, 16), CRASHED),
    "overflowing shape": (_dims(1 << 40, 1 << 40), CRASHED),
    "too many dimensions": (_dims(*[1] * 300), CRASHED),
    "unknown dtype": (lambda entry: setattr(entry, "dtype", 999), "TensorFlow cannot open the checkpoint (TypeError: "
                      "999 does not correspond to a valid tensorflow::DataType): it is truncated or corrupt"),
    "bytes past the end": (lambda entry: setattr(entry, "offset", 1 << 40), f"{READ_FAILS} (IndexError: Read less "
                           "bytes than requested): the checkpoint is truncated or corrupt"),
    "negative offset": (lambda entry: setattr(entry, "offset", -64), f"{READ_FAILS} (ValueError: Seeking to a negative "
                        "position: -64): the checkpoint is truncated or corrupt"),
    "absent shard": (lambda entry: setattr(entry, "shard_id", 7), "model.ckpt-1000.data-00007-of-00001; No such file "
                     "or directory): the checkpoint is truncated or corrupt"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ENTRIES))
def test_hostile_index_entry_is_refused_naming_the_checkpoint(tmp_path: Path, case: str) -> None:
    """TensorFlow's reader aborts its process on some of these (see the live test): the reader's child ends, this
    process lives on, and the refusal names the checkpoint."""
    change, ending = HOSTILE_ENTRIES[case]
    prefix = prefix_of(copy_case("tf1_cudnn_lstm", tmp_path))
    rewrite_index(prefix, {LSTM_KERNEL: change})
    with pytest.raises(FileReadError) as refused:
        read_file(prefix)
    assert refused.value.path == prefix and str(refused.value).endswith(ending), refused.value
    if ending.startswith(READ_FAILS):
        assert str(refused.value).startswith(f"cannot read {prefix!r}: {READ_FAILS} ")


def test_rewritten_index_without_changes_still_reads(tmp_path: Path) -> None:
    """The hostile tests' table writer itself produces indexes TensorFlow reads."""
    prefix = prefix_of(copy_case("tf1_cudnn_lstm", tmp_path))
    rewrite_index(prefix, {})
    assert read_file(prefix)[0].conversion() == "exact"


@pytest.mark.parametrize("shards", [0, 10**9])
def test_hostile_header(tmp_path: Path, shards: int) -> None:
    """A header declaring 0 or 10**9 shards: TensorFlow looks for a data file of that name."""
    prefix = prefix_of(copy_case("tf1_cudnn_lstm", tmp_path))
    rewrite_index(prefix, {"": lambda header: setattr(header, "num_shards", shards)})
    assert read_refusal(prefix).endswith(f"model.ckpt-1000.data-00000-of-{shards:05d}; No such file or directory): "
                                         "the checkpoint is truncated or corrupt")


def test_compressed_index_block_is_refused(tmp_path: Path) -> None:
    """TensorFlow's checkpoint writer never compresses a block; its reader refuses one (a snappy block of raw bytes)."""
    prefix = prefix_of(copy_case("tf1_cudnn_lstm", tmp_path))
    rewrite_index(prefix, {}, block_type=1)
    message = read_refusal(prefix)
    assert message.startswith(f"cannot read {prefix!r}: TensorFlow cannot open the checkpoint (OpError: Unable to read "
                              f"file ({prefix}.index)") and message.endswith("it is truncated or corrupt"), message


def test_index_of_another_kind_of_file(tmp_path: Path) -> None:
    (tmp_path / "model.index").write_bytes(b"PK\x03\x04" + bytes(200))
    assert read_refusal(tmp_path / "model.index").endswith(
        "TensorFlow cannot open the checkpoint (OpError: not an sstable (bad magic number)): it is truncated or "
        "corrupt")
