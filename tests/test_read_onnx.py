"""Reading ONNX models (``read_file`` on .onnx): real exports, every refusal, hostile files.

The golden models in tests/golden/files/onnx/ were written by torch.onnx.export (TorchScript
and dynamo exporters), tf2onnx (Keras 2 and Keras 3), cudnn_rnn's export_onnx and onnx.helper;
ONNX Runtime's outputs on a ragged batch sit beside each (scripts/make_onnx_files.py). Each is
read, its RNNs stacked along ``feeds_from``, converted and run through ``cudnn_rnn_v3``, which
must equal ONNX Runtime to 1e-5. Refusals and hostile files are built here with onnx.helper.
"""

from __future__ import annotations

import json
import os
import re
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rnn_testing import assert_close

import cudnn_rnn
from cudnn_rnn.convert import read_file
from cudnn_rnn.convert.readers import FileReadError, FoundRNN, _onnx_graph, choose, stack
from cudnn_rnn.convert.readers._child import run_isolated

GOLDEN = Path(__file__).resolve().parent / "golden" / "files" / "onnx"
TOLERANCE = 1e-5


def _fields(units: int, input_size: int, direction: str, mode: str) -> dict[str, Any]:
    return dict(rnn_mode=mode, num_layers=1, num_units=units, input_size=input_size, direction=direction,
                num_proj=0, input_mode="linear_input", dtype="float32")


TORCH, TF2ONNX = "torch.onnx.export", "tf2onnx"
#: golden model -> [(source, fmt, fields)] of every RNN found, in file order; the names are the
#: nodes' own (meta["nodes"], read by the script from the graph; tf2onnx numbers them differently
#: each run), and each node after the first is fed by the one before
EXPECTED: dict[str, list[tuple[str, str, dict[str, Any]]]] = {
    "torch_lstm_L2_bi_opset14": [
        (f"ONNX LSTM node ({TORCH})", "onnx", _fields(4, 3, "bidirectional", "lstm")),
        (f"ONNX LSTM node ({TORCH})", "onnx", _fields(4, 8, "bidirectional", "lstm"))],
    "torch_gru_L2_batch_first_dynamo_opset18": [
        (f"ONNX GRU node ({TORCH})", "onnx", _fields(4, 3, "unidirectional", "gru")),
        (f"ONNX GRU node ({TORCH})", "onnx", _fields(4, 4, "unidirectional", "gru"))],
    "torch_rnn_relu_L2_bi_opset21": [
        (f"ONNX RNN node ({TORCH})", "onnx", _fields(4, 3, "bidirectional", "rnn_relu")),
        (f"ONNX RNN node ({TORCH})", "onnx", _fields(4, 8, "bidirectional", "rnn_relu"))],
    "torch_lstm_L2_no_bias_unfolded_opset17": [
        (f"ONNX LSTM node ({TORCH})", "onnx", _fields(4, 3, "unidirectional", "lstm")),
        (f"ONNX LSTM node ({TORCH})", "onnx", _fields(4, 4, "unidirectional", "lstm"))],
    "tf2onnx_keras2_bidirectional_lstm_L2": [
        (f"ONNX LSTM node ({TF2ONNX})", "onnx", _fields(4, 3, "bidirectional", "lstm")),
        (f"ONNX LSTM node ({TF2ONNX})", "onnx", _fields(4, 8, "bidirectional", "lstm"))],
    "tf2onnx_keras2_gru": [(f"ONNX GRU node ({TF2ONNX})", "onnx", _fields(4, 3, "unidirectional", "gru"))],
    "tf2onnx_keras3_lstm_L2": [
        (f"ONNX LSTM node ({TF2ONNX})", "onnx", _fields(4, 3, "unidirectional", "lstm")),
        (f"ONNX LSTM node ({TF2ONNX})", "onnx", _fields(4, 4, "unidirectional", "lstm"))],
    "cudnn_rnn_gru_L2_bi": [
        ("ONNX GRU node (cudnn_rnn export_onnx)", "onnx", _fields(4, 3, "bidirectional", "gru")),
        ("ONNX GRU node (cudnn_rnn export_onnx)", "onnx", _fields(4, 8, "bidirectional", "gru"))],
    "helper_lstm_zero_peepholes_bi": [("ONNX LSTM node (onnx.helper)", "onnx", _fields(4, 3, "bidirectional", "lstm"))],
    "helper_gru_reset_before": [
        ("ONNX GRU node (onnx.helper)", "gru_block_cell", _fields(4, 3, "unidirectional", "gru"))],
}

#: the node names of the golden exports whose exporters name them reproducibly
NODE_NAMES: dict[str, list[str]] = {
    "torch_lstm_L2_bi_opset14": ["/LSTM", "/LSTM_1"],
    "torch_gru_L2_batch_first_dynamo_opset18": ["node_GRU_48", "node_GRU_96"],
    "torch_rnn_relu_L2_bi_opset21": ["/RNN", "/RNN_1"],
    "torch_lstm_L2_no_bias_unfolded_opset17": ["/LSTM", "/LSTM_1"],
    "cudnn_rnn_gru_L2_bi": ["layer_0/Y", "layer_1/Y"],
    "helper_lstm_zero_peepholes_bi": ["lstm_node"],
    "helper_gru_reset_before": ["gru_node"],
}


def listing(found: list[FoundRNN]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(f.source, f.fmt, dict(f.fields)) for f in found]


def golden(name: str) -> tuple[Path, dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz") as data:
        arrays = {key: data[key] for key in data.files}
    return GOLDEN / f"{name}.onnx", json.loads(str(arrays.pop("meta"))), arrays


def run_network(network: FoundRNN, arrays: dict[str, np.ndarray]) -> Any:
    config = network.config
    return cudnn_rnn.cudnn_rnn_v3(arrays["input/x"], arrays["input/h0"], arrays.get("input/c0"),
                                  network.to_params().value, arrays["input/lengths"], rnn_mode=config.rnn_mode,
                                  direction=config.direction, is_training=False)


def assert_outputs(result: Any, arrays: dict[str, np.ndarray], what: str) -> None:
    assert_close(result.output, arrays["expected/output"], TOLERANCE, f"{what}: output")
    assert_close(result.output_h, arrays["expected/output_h"], TOLERANCE, f"{what}: output_h")
    if "expected/output_c" in arrays:
        assert_close(result.output_c, arrays["expected/output_c"], TOLERANCE, f"{what}: output_c")


# ---- the golden exports ----------------------------------------------------------------------------
def test_every_golden_model_has_expectations() -> None:
    assert sorted(EXPECTED) == sorted(path.stem for path in GOLDEN.glob("*.onnx"))
    assert sum(path.stat().st_size for path in GOLDEN.iterdir()) < 200_000


@pytest.mark.parametrize("name", [name for name, rnns in EXPECTED.items() if rnns[0][1] == "onnx"])
def test_golden_export_equals_onnxruntime(name: str) -> None:
    path, meta, arrays = golden(name)
    found = read_file(path)
    assert listing(found) == EXPECTED[name]
    assert [f.name for f in found] == meta["nodes"] == NODE_NAMES.get(name, meta["nodes"])
    assert [f.feeds_from for f in found] == [None, *meta["nodes"][:-1]]
    assert all(f.conversion() == "exact" and not f.questions and f.refusal is None for f in found)
    network = choose(found, stack_all=True)  # the nodes in file order, each fed by the one before
    assert network.config.num_layers == len(found)
    assert_outputs(run_network(network, arrays), arrays, name)


def test_golden_reset_before_gru_is_held_exactly_as_gru_block_cell() -> None:
    """linear_before_reset=0 is TF's GRUBlockCell: stepping it over the ragged batch equals ONNX Runtime."""
    path, _, arrays = golden("helper_gru_reset_before")
    (found,) = read_file(path)
    assert listing([found]) == EXPECTED["helper_gru_reset_before"] and found.name == "gru_node"
    assert any("linear_before_reset=0" in note and "gru_block_cell" in note for note in found.notes)
    assert found.conversion().startswith("approximate: ")
    x, lengths = arrays["input/x"], arrays["input/lengths"]
    h = arrays["input/h0"][0]
    y = np.zeros(arrays["expected/output"].shape, np.float32)
    for t in range(x.shape[0]):
        step = cudnn_rnn.gru_block_cell(x[t], h, *(found.tensors[k] for k in ("w_ru", "w_c", "b_ru", "b_c")))[3]
        active = (t < lengths)[:, None]
        h, y[t] = np.where(active, step, h), np.where(active, step, 0)
    assert_close(y, arrays["expected/output"], TOLERANCE, "output")
    assert_close(h[None], arrays["expected/output_h"], TOLERANCE, "output_h")
    approximate = found.to_params(allow_approximation=True)
    assert approximate.approximations and approximate.value.dtype == np.float32


def test_golden_zero_peepholes_are_noted_and_converted_exactly() -> None:
    (found,) = read_file(GOLDEN / "helper_lstm_zero_peepholes_bi.onnx")
    assert found.notes == ("input P (peephole weights) is all zeros: no peephole connections, the same function",)


def test_stacked_nodes_can_be_picked_one_by_one() -> None:
    first, second = read_file(GOLDEN / "torch_lstm_L2_bi_opset14.onnx")
    assert choose([first, second], ["/LSTM"]) is first
    assert stack([first, second]).name == "/LSTM+/LSTM_1"
    with pytest.raises(ValueError, match=r"the file holds 2 RNNs: /LSTM .*; pick one with names=\[NAME\]"):
        choose([first, second])


def test_read_file_refuses_another_format_for_onnx() -> None:
    with pytest.raises(FileReadError, match="holds the onnx format, not 'torch'"):
        read_file(GOLDEN / "tf2onnx_keras2_gru.onnx", fmt="torch")


# ---- models built here ------------------------------------------------------------------------------
N, INPUT_SIZE, D = 3, 2, 1
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def weights(op: str, directions: int = 1, seed: int = 0, input_size: int = INPUT_SIZE, dtype: str = "float32"
            ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = GATES[op]
    return {"W": rng.uniform(-1, 1, (directions, g * N, input_size)).astype(dtype),
            "R": rng.uniform(-1, 1, (directions, g * N, N)).astype(dtype),
            "B": rng.uniform(-1, 1, (directions, 2 * g * N)).astype(dtype)}


def save_model(path: Path, nodes: list[Any], initializers: dict[str, np.ndarray] | list[Any],
               inputs: tuple[str, ...] = ("X",), opset: int = 14, producer: str = "test") -> Path:
    tensors = [numpy_helper.from_array(v, k) for k, v in initializers.items()] if isinstance(initializers, dict) \
        else initializers
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                                           for name in inputs],
                              [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)], tensors)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name=producer,
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.save(model, str(path))
    return path


def rnn_model(path: Path, op: str = "LSTM", directions: int = 1, inputs: tuple[str, ...] = ("X", "W", "R", "B"),
              extra: dict[str, np.ndarray] | None = None, name: str = "rnn", **attributes: Any) -> Path:
    direction = {1: "forward", 2: "bidirectional"}[directions]
    attributes = {"direction": direction, "hidden_size": N, **attributes}
    node = helper.make_node(op, list(inputs), ["Y", "Y_h"], name=name, **attributes)
    return save_model(path, [node], {**weights(op, directions), **(extra or {})})


def one(path: Path) -> FoundRNN:
    (found,) = read_file(path)
    return found


def refused(path: Path, match: str) -> FoundRNN:
    found = one(path)
    assert found.refusal is not None and match in found.refusal, found.refusal
    assert found.conversion().startswith("refused: ") and match in found.conversion()
    prefix = f"^{re.escape(found.name)} \\(ONNX .* node \\(test\\)\\): "
    with pytest.raises(ValueError, match=f"{prefix}.*{re.escape(match)}"):
        found.to_params()
    return found


def test_rnn_node_activations_tell_the_mode(tmp_path: Path) -> None:
    assert one(rnn_model(tmp_path / "a.onnx", "RNN")).fields["rnn_mode"] == "rnn_tanh"  # ONNX's default
    relu = one(rnn_model(tmp_path / "b.onnx", "RNN", 2, activations=["Relu", "Relu"]))
    assert relu.fields["rnn_mode"] == "rnn_relu" and not relu.questions and relu.conversion() == "exact"
    assert one(rnn_model(tmp_path / "c.onnx", "RNN", activations=["tanh"])).fields["rnn_mode"] == "rnn_tanh"


def test_converted_single_node_equals_the_onnx_format(tmp_path: Path) -> None:
    found = one(rnn_model(tmp_path / "m.onnx", "GRU", 2, linear_before_reset=1))
    assert found.source == "ONNX GRU node (test)" and found.fmt == "onnx"
    expected = weights("GRU", 2)
    assert {k: v.tolist() for k, v in found.tensors.items()} == {f"layer_0/{k}": v.tolist()
                                                                  for k, v in expected.items()}


@pytest.mark.parametrize("op, directions, attributes, match", [
    ("LSTM", 1, {"clip": 3.0}, "attribute clip=3.0 clips the gates' inputs"),
    ("LSTM", 1, {"input_forget": 1}, "attribute input_forget=1 couples the input and forget gates"),
    ("LSTM", 1, {"activations": ["Sigmoid", "Relu", "Tanh"]},
     "attribute activations=['Sigmoid', 'Relu', 'Tanh']: cuDNN's LSTM runs only Sigmoid, Tanh, Tanh"),
    ("GRU", 1, {"activations": ["HardSigmoid", "Tanh"], "linear_before_reset": 1},
     "cuDNN's GRU runs only Sigmoid, Tanh"),
    ("RNN", 1, {"activations": ["Sigmoid"]}, "attribute activations=['Sigmoid']: cuDNN's RNN runs Tanh or Relu"),
    ("RNN", 2, {"activations": ["Tanh", "Relu"]}, "the same in both directions"),
    ("GRU", 2, {"linear_before_reset": 0}, "attribute linear_before_reset=0 makes a reset-before GRU"),
    ("GRU", 1, {"direction": "reverse", "linear_before_reset": 1}, "attribute direction='reverse'"),
    ("LSTM", 1, {"direction": "reverse"}, "cuDNN has no reverse-only RNN"),
])
def test_what_cudnn_cannot_run_is_refused_by_name(tmp_path: Path, op: str, directions: int,
                                                  attributes: dict[str, Any], match: str) -> None:
    found = refused(rnn_model(tmp_path / "m.onnx", op, directions, **attributes), match)
    assert found.fmt == "onnx" and found.describe().startswith("rnn_mode=")


def test_peepholes_that_are_not_zero_are_refused(tmp_path: Path) -> None:
    peepholes = np.zeros((1, 3 * N), np.float32)
    peepholes[0, 4] = 0.5
    inputs = ("X", "W", "R", "B", "", "", "", "P")
    refused(rnn_model(tmp_path / "p.onnx", inputs=inputs, extra={"P": peepholes}),
            "input P (peephole weights) is not all zeros, and cuDNN's LSTM has no peephole connections")
    graph_input = tmp_path / "q.onnx"
    node = helper.make_node("LSTM", list(inputs), ["Y"], name="rnn", hidden_size=N)
    save_model(graph_input, [node], weights("LSTM"), inputs=("X", "P"))
    refused(graph_input, "input P (peephole weights) 'P' is a graph input, so it cannot be checked to be zero")
    zero = one(rnn_model(tmp_path / "z.onnx", inputs=inputs, extra={"P": np.zeros((1, 3 * N), np.float32)}))
    assert zero.conversion() == "exact" and "all zeros" in zero.notes[0]


def test_reset_before_gru_note_and_format(tmp_path: Path) -> None:
    found = one(rnn_model(tmp_path / "m.onnx", "GRU"))  # linear_before_reset defaults to 0
    assert found.fmt == "gru_block_cell" and found.refusal is None
    assert sorted(found.tensors) == ["b_c", "b_ru", "w_c", "w_ru"]
    w = weights("GRU")
    assert found.tensors["w_c"].tolist() == np.concatenate([w["W"][0, 2 * N:].T, w["R"][0, 2 * N:].T]).tolist()
    assert np.allclose(found.tensors["b_c"], w["B"][0, 2 * N:3 * N] + w["B"][0, 5 * N:])
    assert found.conversion().startswith("approximate: ")


def test_notes_on_states_layout_missing_bias_and_overridable_weights(tmp_path: Path) -> None:
    h0 = np.full((1, 1, N), 0.5, np.float32)
    node = helper.make_node("GRU", ["X", "W", "R", "", "", "h0"], ["Y"], name="gru", hidden_size=N,
                            linear_before_reset=1, layout=1)
    w = weights("GRU")
    path = save_model(tmp_path / "m.onnx", [node], {"W": w["W"], "R": w["R"], "h0": h0}, inputs=("X", "W"))
    found = one(path)
    assert found.notes == (
        "the node has no B input: zero biases, as ONNX specifies, the same function",
        "attribute layout=1: its X, Y and states are batch-major (time_major=False)",
        "input W 'W' is also a graph input: the file's values are defaults the caller may replace",
        "input initial_h is a constant that is not all zeros: pass it as input_h to compute what the model computes")
    assert found.tensors["layer_0/B"].tolist() == [[0.0] * 18]


def test_weights_through_identity_constant_and_chains(tmp_path: Path) -> None:
    w = weights("LSTM")
    nodes = [helper.make_node("Constant", [], ["w_flat"], name="c",
                              value=numpy_helper.from_array(w["W"].reshape(-1), "v")),
             helper.make_node("Reshape", ["w_flat", "shape"], ["w"], name="reshape"),
             helper.make_node("Identity", ["R_init"], ["r"], name="identity"),
             helper.make_node("Transpose", ["b_t"], ["b"], name="transpose", perm=[1, 0]),
             helper.make_node("LSTM", ["X", "w", "r", "b"], ["Y"], name="lstm", hidden_size=N)]
    path = save_model(tmp_path / "m.onnx", nodes, {"shape": np.array([1, 4 * N, INPUT_SIZE], np.int64),
                                                    "R_init": w["R"], "b_t": np.ascontiguousarray(w["B"].T)})
    found = one(path)
    assert {k: v.tolist() for k, v in found.tensors.items()} == {f"layer_0/{k}": v.tolist() for k, v in w.items()}


def test_unnamed_and_duplicate_nodes_get_names(tmp_path: Path) -> None:
    w = weights("RNN")
    nodes = [helper.make_node("RNN", ["X", "W", "R", "B"], ["Y1"], hidden_size=N),
             helper.make_node("RNN", ["X", "W", "R", "B"], ["Y2"], name="same", hidden_size=N),
             helper.make_node("RNN", ["X", "W", "R", "B"], ["Y3"], name="same", hidden_size=N)]
    assert [f.name for f in read_file(save_model(tmp_path / "m.onnx", nodes, w))] == ["RNN_0", "same", "same@2"]


def test_stacked_nodes_with_different_sequence_lens_do_not_stack(tmp_path: Path) -> None:
    w1, w2 = weights("GRU", seed=1), weights("GRU", seed=2, input_size=N)
    nodes = [helper.make_node("GRU", ["X", "W1", "R1", "B1", "len_a"], ["Y1"], name="g1", hidden_size=N,
                              linear_before_reset=1),
             helper.make_node("Squeeze", ["Y1", "axis"], ["X2"], name="squeeze"),
             helper.make_node("GRU", ["X2", "W2", "R2", "B2", "len_b"], ["Y2"], name="g2", hidden_size=N,
                              linear_before_reset=1)]
    initializers = {**{f"{k}1": v for k, v in w1.items()}, **{f"{k}2": v for k, v in w2.items()},
                    "axis": np.array([1], np.int64)}
    _, second = read_file(save_model(tmp_path / "m.onnx", nodes, initializers, inputs=("X", "len_a", "len_b")))
    assert second.feeds_from is None and "take different sequence_lens" in second.notes[0]
    nodes[2].input[4] = "len_a"
    _, second = read_file(save_model(tmp_path / "n.onnx", nodes, initializers, inputs=("X", "len_a")))
    assert second.feeds_from == "g1"


def test_outputs_cut_between_nodes_do_not_stack(tmp_path: Path) -> None:
    """Y's time axis sliced, or its directions swapped, is not a stacked layer's input."""
    w1, w2 = weights("LSTM", 2, seed=1), weights("LSTM", 2, seed=2, input_size=2 * N)
    initializers = {**{f"{k}1": v for k, v in w1.items()}, **{f"{k}2": v for k, v in w2.items()},
                    "shape": np.array([0, 0, -1], np.int64), "s": np.array([1], np.int64),
                    "e": np.array([2**62], np.int64), "a": np.array([0], np.int64)}

    def layers(between: list[Any]) -> list[Any]:
        return [helper.make_node("LSTM", ["X", "W1", "R1", "B1"], ["Y1"], name="l1", hidden_size=N,
                                 direction="bidirectional"), *between,
                helper.make_node("LSTM", ["X2", "W2", "R2", "B2"], ["Y2"], name="l2", hidden_size=N,
                                 direction="bidirectional")]

    def second(between: list[Any], name: str) -> FoundRNN:
        return read_file(save_model(tmp_path / name, layers(between), initializers))[1]

    torch_like = [helper.make_node("Transpose", ["Y1"], ["T1"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["T1", "shape"], ["X2"])]
    assert second(torch_like, "a.onnx").feeds_from == "l1"
    swapped = [helper.make_node("Transpose", ["Y1"], ["T1"], perm=[0, 2, 3, 1]),
               helper.make_node("Reshape", ["T1", "shape"], ["X2"])]
    assert second(swapped, "b.onnx").feeds_from is None
    cut = [helper.make_node("Slice", ["Y1", "s", "e", "a"], ["S1"]), *torch_like]
    cut[1].input[0] = "S1"
    assert second(cut, "c.onnx").feeds_from is None


def test_a_reshape_to_the_declared_sizes_stacks(tmp_path: Path) -> None:
    """A Reshape to fixed [T, B, D*N] between nodes stacks where the model's input declares that T and B."""
    w1, w2 = weights("LSTM", seed=1), weights("LSTM", seed=2, input_size=N)
    initializers = {**{f"{k}1": v for k, v in w1.items()}, **{f"{k}2": v for k, v in w2.items()},
                    "shape": np.array([7, 5, N], np.int64)}
    nodes = [helper.make_node("LSTM", ["X", "W1", "R1", "B1"], ["Y1"], name="l1", hidden_size=N),
             helper.make_node("Reshape", ["Y1", "shape"], ["X2"]),
             helper.make_node("LSTM", ["X2", "W2", "R2", "B2"], ["Y2"], name="l2", hidden_size=N)]
    path = save_model(tmp_path / "m.onnx", nodes, initializers)
    model = onnx.load(str(path))
    assert read_file(path)[1].feeds_from is None  # T and B unknown: the probe's own do not fit [7, 5, N]
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("X", TensorProto.FLOAT, [7, 5, INPUT_SIZE]))
    onnx.save(model, str(path))
    assert read_file(path)[1].feeds_from == "l1"


# ---- bad graphs ---------------------------------------------------------------------------------------
def test_weights_the_file_does_not_store_are_refused_by_name(tmp_path: Path) -> None:
    node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], name="lstm", hidden_size=N)
    w = weights("LSTM")
    with pytest.raises(FileReadError, match="node 'lstm' \\(LSTM\\): its W input 'W' is a graph input; only weights "
                                            "stored in the file"):
        read_file(save_model(tmp_path / "a.onnx", [node], {"R": w["R"]}, inputs=("X", "W")))
    random = helper.make_node("RandomUniformLike", ["A"], ["W"], name="rand")
    with pytest.raises(FileReadError, match="its W input 'W' is computed by a RandomUniformLike node 'rand', which is "
                                            "not followed"):
        read_file(save_model(tmp_path / "b.onnx", [random, node], {"R": w["R"], "A": np.eye(2, dtype=np.float32)}))
    matmul = helper.make_node("MatMul", ["X", "A"], ["W"], name="mm")
    with pytest.raises(FileReadError, match="its W input 'W' is computed from 'X', which is a graph input"):
        read_file(save_model(tmp_path / "m.onnx", [matmul, node], {"R": w["R"], "A": np.eye(2, dtype=np.float32)}))
    with pytest.raises(FileReadError, match="its W input 'W' is produced by no node"):
        read_file(save_model(tmp_path / "c.onnx", [node], {"R": w["R"]}))


def test_cycles_deep_chains_and_folding_bombs_are_refused(tmp_path: Path) -> None:
    w = weights("LSTM")
    lstm = helper.make_node("LSTM", ["X", "a", "R"], ["Y"], name="lstm", hidden_size=N)
    cycle = [helper.make_node("Identity", ["b"], ["a"], name="i1"),
             helper.make_node("Identity", ["a"], ["b"], name="i2")]
    with pytest.raises(FileReadError, match="its W input 'a' cannot be folded: the graph has a cycle through 'a'"):
        read_file(save_model(tmp_path / "cycle.onnx", [*cycle, lstm], {"R": w["R"]}))
    chain = [helper.make_node("Identity", [f"c{i + 1}"], [f"c{i}"], name=f"i{i}") for i in range(100)]
    lstm.input[1] = "c0"
    with pytest.raises(FileReadError, match="chain of more than 64 nodes"):
        read_file(save_model(tmp_path / "deep.onnx", [*chain, lstm], {"R": w["R"], "c100": w["W"]}))
    big = np.zeros((1, 1 << 16), np.float32)  # 256 KiB, doubled 30 times by Concat would be 256 TiB
    doubling = [helper.make_node("Concat", [f"d{i}", f"d{i}"], [f"d{i + 1}"], name=f"cat{i}", axis=1)
                for i in range(30)]
    lstm.input[1] = "d30"
    tracemalloc.start()
    try:
        with pytest.raises(FileReadError, match="folding node 'cat[0-9]+' \\(Concat\\) would take more than "
                                                "[0-9]+ bytes, far more than the file stores"):
            read_file(save_model(tmp_path / "bomb.onnx", [*doubling, lstm], {"R": w["R"], "d0": big}))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20


def test_any_operator_over_constants_folds_in_one_child_process(tmp_path: Path, monkeypatch: Any) -> None:
    """W and R computed by MatMul (not of the operators bounded beforehand) fold in one child process; the
    golden models, whose inputs are initializers or bounded chains, in none."""
    children = []

    def counted(path: str, work: Any, reader: Any) -> Any:
        children.append(reader.library)
        return run_isolated(path, work, reader=reader)

    monkeypatch.setattr(_onnx_graph, "run_isolated", counted)
    w = weights("LSTM")
    nodes = [helper.make_node("MatMul", ["W_half", "two"], ["w"], name="mm_w"),
             helper.make_node("MatMul", ["R_half", "two3"], ["r"], name="mm_r"),
             helper.make_node("LSTM", ["X", "w", "r", "B"], ["Y"], name="lstm", hidden_size=N)]
    initializers: dict[str, np.ndarray] = {"W_half": w["W"] / 2, "R_half": w["R"] / 2, "B": w["B"],
                                           "two": 2 * np.eye(INPUT_SIZE, dtype=np.float32),
                                           "two3": 2 * np.eye(N, dtype=np.float32)}
    found = one(save_model(tmp_path / "m.onnx", nodes, initializers))
    assert children == ["onnx's reference evaluator"]
    assert {k: v.tolist() for k, v in found.tensors.items()} == {f"layer_0/{k}": v.tolist() for k, v in w.items()}
    for path in sorted(GOLDEN.glob("*.onnx")):
        read_file(path)
    assert children == ["onnx's reference evaluator"]


@pytest.mark.parametrize("blowup, match", [
    ("zeros", "folding node 'blowup' \\(ConstantOfShape\\) would take more than [0-9]+ bytes, far more than the file "
              "stores: the graph is not a plain export"),
    ("range", "folding node 'blowup' \\(Range\\) ran out of memory"),
    ("loop", "its W input 'W' is computed by a Loop node 'blowup', which is not followed here"),
])
def test_evaluator_blowups_are_refused_in_bounded_memory(tmp_path: Path, blowup: str, match: str) -> None:
    """A constant 2**40 zeros (refused before it is made), a Range of 2**36 numbers (in the child process,
    whose memory is bounded) or a Loop (never run) feeding W: refused naming the file, this process unharmed."""
    w = weights("LSTM")
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"])], "body",
                             [helper.make_tensor_value_info(n, t, None) for n, t in (("i", 7), ("c", 9))],
                             [helper.make_tensor_value_info("c_out", 9, None)])
    producers = {"zeros": helper.make_node("ConstantOfShape", ["huge"], ["W"], name="blowup"),
                 "range": helper.make_node("Range", ["zero", "huge_scalar", "one"], ["W"], name="blowup"),
                 "loop": helper.make_node("Loop", ["huge_scalar", ""], ["W"], name="blowup", body=body)}
    lstm = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], name="lstm", hidden_size=N)
    initializers: dict[str, np.ndarray] = {"R": w["R"], "huge": np.array([1, 1 << 40, 2], np.int64),
                                           "huge_scalar": np.array(1 << 36), "zero": np.array(0), "one": np.array(1)}
    path = save_model(tmp_path / f"{blowup}.onnx", [producers[blowup], lstm], initializers)
    tracemalloc.start()
    try:
        with pytest.raises(FileReadError, match=f"^cannot read '.*{blowup}.onnx': .*{match}"):
            read_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20


@pytest.mark.parametrize("attributes, match", [
    ({"hidden_size": 5}, "attribute hidden_size=5 disagrees with R of shape (1, 12, 3)"),
    ({"direction": "sideways"}, "attribute direction='sideways' is not forward, reverse or bidirectional"),
    ({"direction": "bidirectional"}, "W (1, 12, 2) and R (1, 12, 3) must be [2, rows, columns] for 2 direction"),
    ({"hidden_size": "three"}, "attribute hidden_size must be INT; got STRING"),
    ({"layout": 2}, "attribute layout=2 is not 0 or 1"),
])
def test_inconsistent_attributes_are_refused(tmp_path: Path, attributes: dict[str, Any], match: str) -> None:
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], name="lstm", **{"hidden_size": N, **attributes})
    with pytest.raises(FileReadError, match=f"node 'lstm' \\(LSTM\\): {re.escape(match)}"):
        read_file(save_model(tmp_path / "m.onnx", [node], weights("LSTM")))


def test_wrong_gate_count_and_dtypes_are_refused(tmp_path: Path) -> None:
    gru_weights = weights("GRU")
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], name="lstm", hidden_size=N)
    with pytest.raises(FileReadError, match="must have 4\\*3 rows, the gates of an LSTM with hidden size 3"):
        read_file(save_model(tmp_path / "a.onnx", [node], gru_weights))
    mixed = {**weights("LSTM"), "R": weights("LSTM", dtype="float64")["R"]}
    with pytest.raises(TypeError, match="node 'lstm' \\(LSTM\\): tensors must share one dtype; tensor \"input R 'R'\" "
                                        "is float64 while the others are float32"):
        read_file(save_model(tmp_path / "b.onnx", [node], mixed))
    ints = {k: v.astype(np.int64) for k, v in weights("LSTM").items()}
    with pytest.raises(TypeError, match="the tensors' dtype must be one of"):
        read_file(save_model(tmp_path / "c.onnx", [node], ints))
    bf16 = helper.make_tensor("W", TensorProto.BFLOAT16, [1, 12, 2], np.zeros(24, np.uint16).tobytes(), raw=True)
    w = weights("LSTM")
    with pytest.raises(FileReadError, match="initializer 'W' has element type BFLOAT16, which is not read"):
        read_file(save_model(tmp_path / "d.onnx", [node], [bf16, *(numpy_helper.from_array(w[k], k) for k in "RB")]))


def test_models_without_rnn_nodes_say_why(tmp_path: Path) -> None:
    add = helper.make_node("Add", ["X", "X"], ["Y"], name="add")
    with pytest.raises(FileReadError, match="the model has no LSTM, GRU or RNN node \\(its nodes: Add x1\\)$"):
        read_file(save_model(tmp_path / "add.onnx", [add], {}))
    unrolled = [helper.make_node("MatMul", ["X", "M"], ["Z"]), helper.make_node("Relu", ["Z"], ["Y"])]
    with pytest.raises(FileReadError, match="unrolled the recurrence into Loop or MatMul nodes .*dynamo=False"):
        read_file(save_model(tmp_path / "mm.onnx", unrolled, {"M": np.eye(2, dtype=np.float32)}))
    body = helper.make_graph([helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=N)], "body", [], [])
    loop = helper.make_node("If", ["cond"], ["Y"], then_branch=body, else_branch=body)
    with pytest.raises(FileReadError, match="2 sit inside Loop/If/Scan bodies or model functions, which are not read"):
        read_file(save_model(tmp_path / "if.onnx", [loop], {}, inputs=("cond",)))


# ---- hostile files -------------------------------------------------------------------------------------
def test_truncated_corrupt_and_foreign_files(tmp_path: Path) -> None:
    data = (GOLDEN / "torch_lstm_L2_bi_opset14.onnx").read_bytes()
    cases = {
        "half.onnx": data[:len(data) // 2],
        "corrupt.onnx": data[:40] + b"\xff" * 64 + data[104:],
        "text.onnx": b"this is a text file, renamed\n" * 4,
        "image.onnx": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(FileReadError, match="not an ONNX model, or a truncated or corrupt one: the protobuf does "
                                                "not parse"):
            read_file(tmp_path / name)
    model = onnx.load(str(GOLDEN / "torch_lstm_L2_bi_opset14.onnx"))
    del model.opset_import[:]  # what a file cut just after its graph holds
    (tmp_path / "cut.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(FileReadError, match="declares no opset for the ONNX operators"):
        read_file(tmp_path / "cut.onnx")
    (tmp_path / "other.pb").write_bytes(b"\x08\x01\x12\x03abc")  # a protobuf, first byte 0x08, but no graph
    with pytest.raises(FileReadError, match="declares no IR version or no graph"):
        read_file(tmp_path / "other.pb")


def test_a_file_larger_than_a_protobuf_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.onnx"
    with open(path, "wb") as handle:
        handle.write(b"\x08\x07")
        handle.truncate(2**31)  # sparse: nothing is written or read
    with pytest.raises(FileReadError, match="the file has 2147483648 bytes, more than a protobuf can hold"):
        read_file(path)


def _lstm_with(tmp_path: Path, w_tensor: Any, name: str = "m.onnx") -> Path:
    w = weights("LSTM")
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], name="lstm", hidden_size=N)
    return save_model(tmp_path / name, [node], [w_tensor, *(numpy_helper.from_array(w[k], k) for k in "RB")])


@pytest.mark.parametrize("dims, data, match", [
    ([1, 12, 2], b"\x00" * 10, "tensor .initializer 'W'. declares shape \\(1, 12, 2\\) \\(96 bytes\\) but the file "
                               "stores only 10 bytes for it"),
    ([1 << 40, 1 << 40, 1 << 40], b"\x00" * 96, "declares shape \\(1099511627776, 1099511627776, 1099511627776\\) "
                                                "\\([0-9]+ bytes\\) but the file stores only 96 bytes"),
    ([1, -12, 2], b"\x00" * 96, "declares an invalid shape \\(1, -12, 2\\)"),
    ([1, 12, 1], b"\x00" * 96, "declares shape \\(1, 12, 1\\) \\(48 bytes\\) but stores 96 bytes: the file is corrupt"),
])
def test_initializers_whose_dims_disagree_with_their_data(tmp_path: Path, dims: list[int], data: bytes,
                                                         match: str) -> None:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=dims, raw_data=data)
    tracemalloc.start()
    try:
        with pytest.raises(FileReadError, match=match):
            read_file(_lstm_with(tmp_path, tensor))
        assert tracemalloc.get_traced_memory()[1] < 50 * 2**20  # nothing of the declared size was allocated
    finally:
        tracemalloc.stop()


def test_typed_values_must_match_their_dims(tmp_path: Path) -> None:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1, 12, 2], float_data=[0.5] * 23)
    with pytest.raises(FileReadError, match="declares shape \\(1, 12, 2\\) \\(96 bytes\\) but the file stores only 92"):
        read_file(_lstm_with(tmp_path, tensor))
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1, 12, 2], float_data=[0.5] * 24)
    assert one(_lstm_with(tmp_path, tensor, "ok.onnx")).tensors["layer_0/W"].tolist() == [[[0.5] * 2] * 12]


def external(name: str, location: str, offset: int | None = None, length: int | None = None,
             dims: tuple[int, ...] = (1, 12, 2)) -> Any:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": offset, "length": length}
    for key, value in entries.items():
        if value is not None:
            tensor.external_data.add(key=key, value=str(value))
    return tensor


def test_external_data_inside_the_folder_is_read(tmp_path: Path) -> None:
    w = weights("LSTM")
    (tmp_path / "weights.bin").write_bytes(b"\x00" * 16 + w["W"].astype("<f4").tobytes())
    found = one(_lstm_with(tmp_path, external("W", "weights.bin", 16, 96)))
    assert found.tensors["layer_0/W"].tolist() == w["W"].tolist()
    model_dir = tmp_path / "saved"
    model_dir.mkdir()
    model = onnx.load(str(GOLDEN / "torch_lstm_L2_bi_opset14.onnx"))
    onnx.save(model, str(model_dir / "m.onnx"), save_as_external_data=True, location="m.onnx.data",
              size_threshold=0)
    ours = read_file(model_dir / "m.onnx")
    inline = read_file(GOLDEN / "torch_lstm_L2_bi_opset14.onnx")
    assert [{k: v.tolist() for k, v in f.tensors.items()} for f in ours] == \
           [{k: v.tolist() for k, v in f.tensors.items()} for f in inline]


def test_external_data_outside_the_folder_or_beyond_its_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\x00" * 96)
    (folder / "data.bin").write_bytes(b"\x00" * 100)
    os.symlink(secret, folder / "link.bin")
    cases = [
        (external("W", str(secret)), "an absolute path: external data must sit in the model's folder"),
        (external("W", "../secret.bin"), "which leaves the model's folder"),
        (external("W", "sub/../../secret.bin"), "which leaves the model's folder"),
        (external("W", "link.bin"), "a link that leads out of the model's folder"),
        (external("W", "missing.bin"), "'missing.bin', which is missing: copy the data file beside the model"),
        (external("W", "data.bin", 8, 96), "at bytes 8..104, but that file has only 100 bytes"),
        (external("W", "data.bin", 0, 48), "declares shape \\(1, 12, 2\\) \\(96 bytes\\) but the file stores only 48"),
        (external("W", "data.bin", 0, 100), "declares shape \\(1, 12, 2\\) \\(96 bytes\\) but its external data length "
                                            "is 100 bytes"),
        (external("W", "data.bin", dims=(1 << 40, 12, 2)), "but the file stores only 100 bytes"),
        (external("W", "data.bin", offset="ten"), "the offset of initializer 'W' must be a non-negative integer"),
        (external("W", ""), "is marked external but names no location"),
    ]
    for tensor, match in cases:
        with pytest.raises(FileReadError, match=match):
            read_file(_lstm_with(folder, tensor))
    unused = external("unused", "../secret.bin")  # refused even where no RNN reads it
    w = weights("LSTM")
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], name="lstm", hidden_size=N)
    path = save_model(folder / "u.onnx", [node], [unused, *(numpy_helper.from_array(w[k], k) for k in "WRB")])
    with pytest.raises(FileReadError, match="initializer 'unused' keeps its data in '../secret.bin'"):
        read_file(path)


def _mutate_graph(model: Any, rng: np.random.Generator) -> None:
    """One random edit of the kinds a damaged or hostile file holds."""
    graph, choice = model.graph, int(rng.integers(5))
    if choice == 0 and graph.node:  # another operator
        graph.node[int(rng.integers(len(graph.node)))].op_type = str(rng.choice(
            ["Identity", "Transpose", "Squeeze", "Reshape", "Slice", "Concat", "Shape", "Mul", "LSTM", "GRU", "RNN"]))
    elif choice == 1 and graph.node:  # an input rewired
        node = graph.node[int(rng.integers(len(graph.node)))]
        names = [o for n in graph.node for o in n.output] + [t.name for t in graph.initializer] + ["", "nowhere"]
        if node.input:
            node.input[int(rng.integers(len(node.input)))] = str(rng.choice(names))
    elif choice == 2 and graph.initializer:  # dims or element type changed
        tensor = graph.initializer[int(rng.integers(len(graph.initializer)))]
        if tensor.dims and rng.integers(2):
            tensor.dims[int(rng.integers(len(tensor.dims)))] = int(rng.choice([0, 1, -1, 7, 1 << 40]))
        else:
            tensor.data_type = int(rng.choice([1, 6, 7, 8, 10, 11, 16, 99]))
    elif choice == 3 and graph.node:  # an attribute of another type or value
        node = graph.node[int(rng.integers(len(graph.node)))]
        if node.attribute:
            attribute = node.attribute[int(rng.integers(len(node.attribute)))]
            attribute.type = int(rng.choice([1, 2, 3, 4, 6, 7, 8]))
            attribute.i, attribute.s = int(rng.choice([0, 1, -5, 1 << 40])), b"\x1b[31mreverse"
            attribute.ints.extend([int(v) for v in rng.choice([-1, 0, 2, 1 << 62], 2)])
    elif graph.node:
        del graph.node[int(rng.integers(len(graph.node)))]


def test_damaged_files_fail_cleanly(tmp_path: Path) -> None:
    """Random byte damage and random graph edits of the golden models: each either reads, or fails
    with a one-line FileReadError/TypeError (never another exception, never a crash)."""
    rng = np.random.default_rng(2024)
    sources = sorted(GOLDEN.glob("*.onnx"))
    models = [onnx.load(str(path)) for path in sources]
    outcomes = {"read": 0, "refused": 0}
    for trial in range(600):
        path = tmp_path / f"m{trial % 2}.onnx"
        if trial % 2:
            data = bytearray(sources[int(rng.integers(len(sources)))].read_bytes())
            for position in rng.integers(0, len(data), int(rng.choice([1, 3, 16]))):
                data[int(position)] = int(rng.integers(256))
            path.write_bytes(bytes(data))
        else:
            model = onnx.ModelProto()
            model.CopyFrom(models[int(rng.integers(len(models)))])
            for _ in range(int(rng.integers(1, 4))):
                _mutate_graph(model, rng)
            path.write_bytes(model.SerializeToString())
        try:
            for found in read_file(path):
                found.describe(), found.conversion()
            outcomes["read"] += 1
        except (FileReadError, TypeError) as error:
            assert "\n" not in str(error) and "\x1b" not in str(error), str(error)
            outcomes["refused"] += 1
    assert min(outcomes.values()) > 50, outcomes
