"""ONNX models from any exporter: every ``LSTM``, ``GRU`` and ``RNN`` node, its weights in the ``onnx`` format.

::

    read("model.onnx", "onnx", ReadOptions())  ->  [FoundRNN, ...]     one per node, in graph order
    found.name        the node's name ("/LSTM_1", "node_GRU_45", "LSTM__250")
    found.source      "ONNX LSTM node (torch.onnx.export)"
    found.tensors     {"layer_0/W": [D, G*N, I], "layer_0/R": [D, G*N, N], "layer_0/B": [D, 2*G*N]}
    found.feeds_from  the RNN node whose Y is this node's X (a stacked layer)

===============================  ==================================================================
the node                         what is found
===============================  ==================================================================
W, R, B (LSTM's P)               an initializer, a ``Constant`` node, or nodes computing it from
                                 those (torch's ``do_constant_folding=False``), folded by onnx's
                                 reference evaluator (:mod:`._onnx_graph`)
attributes                       hidden_size and direction checked against W and R; an RNN node's
                                 ``activations`` Tanh/Relu give rnn_tanh/rnn_relu; ``layout=1`` noted
X = another node's Y             ``feeds_from``: X computed from Y [T, D, B, N] alone is [T, B, D*N]
                                 (torch's Transpose+Reshape, tf2onnx's per-direction Slice+Squeeze+
                                 Concat, the dynamo exporter's Shape arithmetic: a probe Y of
                                 distinct values is evaluated through them), with the same
                                 sequence_lens
GRU ``linear_before_reset=0``    a reset-before GRU: in the ``gru_block_cell`` format when one
                                 direction (exact there; approximate as cuDNN params), else refused
cuDNN cannot run it              ``refusal`` naming it: peepholes P not all zero (all-zero P is
                                 harmless and noted), ``clip``, ``input_forget=1``, activations
                                 other than the defaults, ``direction="reverse"`` alone
===============================  ==================================================================

Hostile files: the model is at most 2 GiB (a protobuf cannot be larger) and must parse as an
ONNX ``ModelProto`` with an IR version, a graph and an ONNX opset, else FileReadError. External
data must sit in the model's folder (no absolute path, no ``..``, no link leading out, a
regular file) and its offset and length must lie within that file; every tensor's declared
shape is checked against the bytes stored for it before anything is read, so a lying header
never makes the reader allocate. Folding is bounded in memory and time (see :mod:`._onnx_graph`).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..._dtypes import names as dtype_names
from ...formats.gru_block_cell import keras_reset_before_to_gru_block_cell
from ...formats.onnx import ACTIVATIONS
from ._found import FileReadError, FoundRNN, ReadOptions, check_declared_size, common_dtype, one_line
from ._infer import infer
from ._onnx_graph import ONNX_DOMAINS, Graph, MalformedGraph, NotFolded, int_attribute

__all__ = ["read"]

#: the largest serialized protobuf; bigger ONNX models keep their weights as external data
MAX_MODEL_BYTES = 2**31 - 1

#: folding may allocate at most this many times the bytes the model stores (plus FOLDING_SLACK)
FOLDING_FACTOR = 16
FOLDING_SLACK = 2**20

#: the time and batch sizes of the probe that tells a stacked node's input (the model's own where it declares them
#: and the probe stays under PROBE_ELEMENTS)
PROBE_STEPS, PROBE_BATCH, PROBE_ELEMENTS = 3, 2, 2**20


@dataclass(frozen=True)
class Operator:
    """One recurrent ONNX operator: gates per cell, inputs by position, activations of one direction."""

    gates: int
    inputs: tuple[str, ...]
    activations: tuple[str, ...]


_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h")

#: op_type -> the operator (ONNX's default activations, lower-cased; cuDNN runs exactly these)
OPERATORS: dict[str, Operator] = {
    "LSTM": Operator(4, _INPUTS + ("initial_c", "P"), ("sigmoid", "tanh", "tanh")),
    "GRU": Operator(3, _INPUTS, ("sigmoid", "tanh")),
    "RNN": Operator(1, _INPUTS, ("tanh",)),
}

#: an RNN node's activation (lower-cased) -> rnn_mode
RNN_MODES: dict[str, str] = {name.lower(): mode for mode, name in ACTIVATIONS.items()}

#: the direction attribute -> the directions W holds
DIRECTION_COUNTS: dict[str, int] = {"forward": 1, "reverse": 1, "bidirectional": 2}

#: ModelProto.producer_name -> the exporter, for FoundRNN.source
EXPORTERS: dict[str, str] = {"pytorch": "torch.onnx.export", "tf2onnx": "tf2onnx", "cudnn_rnn": "cudnn_rnn export_onnx"}

#: the attributes read -> the AttributeProto type each must have (1 FLOAT, 2 INT, 3 STRING, 8 STRINGS)
ATTRIBUTE_TYPES: dict[str, int] = {"hidden_size": 2, "direction": 3, "activations": 8, "clip": 1, "input_forget": 2,
                                   "linear_before_reset": 2, "layout": 2}

#: TensorProto element type -> the dtype of the tensors read (RNN weights, and the integers and booleans of shape
#: arithmetic)
ELEMENT_TYPES: dict[int, str] = {code: name for code, name in dtype_names("onnx").items()
                                 if name in ("float16", "float32", "float64", "int32", "int64", "bool")}
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL

#: attribute -> (whether its value is one cuDNN cannot run, why and what to do)
REFUSED_ATTRIBUTES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "direction": (lambda value: value == "reverse",
                  "runs the sequences backwards only, and cuDNN has no reverse-only RNN: feed each sequence reversed "
                  "within its length to a unidirectional network of these weights, or export a bidirectional one"),
    "clip": (lambda value: True, "clips the gates' inputs, which cuDNN cannot: export the model without clip"),
    "input_forget": (bool, "couples the input and forget gates, which cuDNN's LSTM cannot: export the model with "
                           "input_forget=0"),
}

RESET_BEFORE_REFUSAL = ("attribute linear_before_reset=0 makes a reset-before GRU (the reset gate scales h before the "
                        "candidate's recurrent matmul), which cuDNN's GRU is not; the 'gru_block_cell' format holds "
                        "one, but only one direction")
RESET_BEFORE_NOTE = ("attribute linear_before_reset=0 makes a reset-before GRU, held exactly in the 'gru_block_cell' "
                     "format (TF's GRUBlockCell; 'mygrad' too); cuDNN's GRU resets after the recurrent matmul, so "
                     "cuDNN params of it are only an approximation")


def read(path: str, kind: str, options: ReadOptions) -> list[FoundRNN]:
    """Every LSTM, GRU and RNN node of the ONNX model ``path`` (see the module docstring)."""
    return _Reader(path).found()


# ---- the file ----------------------------------------------------------------------------------------
def _read_model_proto(path: str) -> tuple[Any, int]:
    """The ModelProto, without its external data, and its ONNX opset; FileReadError when it is none."""
    import onnx

    size = os.path.getsize(path)
    if size > MAX_MODEL_BYTES:
        raise FileReadError(path, f"the file has {size} bytes, more than a protobuf can hold ({MAX_MODEL_BYTES}); "
                                  "ONNX models that large keep their weights as external data")
    with open(path, "rb") as handle:
        data = handle.read()
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as error:  # protobuf's DecodeError, or its parser's limits on a hostile file
        raise FileReadError(path, f"not an ONNX model, or a truncated or corrupt one: the protobuf does not parse "
                                  f"({type(error).__name__}: {one_line(error, 160)})") from None
    if not model.ir_version or not model.HasField("graph"):
        raise FileReadError(path, "not an ONNX model: it parses as a protobuf but declares no IR version or no graph "
                                  "(a truncated file, or another format such as a TensorFlow .pb)")
    opsets = [entry.version for entry in model.opset_import if entry.domain in ONNX_DOMAINS]
    if not opsets:
        raise FileReadError(path, "the model declares no opset for the ONNX operators (opset_import): a truncated "
                                  "file, or not an ONNX model")
    return model, max(opsets)


def _enum_name(enum: Any, value: int) -> str:
    """The name of ``value`` in a protobuf enum of onnx's (``#99`` where it has none)."""
    return str(enum.Name(value)) if value in enum.values() else f"#{value}"


def _count(text: str, what: str, path: str) -> int:
    if not re.fullmatch(r"\d{1,19}", text.strip()):
        raise FileReadError(path, f"{what} must be a non-negative integer; got {text[:40]!r}")
    return int(text)


class _TensorData:
    """The file's tensors, decoded on demand, checked as the module docstring's Hostile files says."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))

    def external(self, tensor: Any, what: str) -> tuple[str, int, int]:
        """(file, offset, bytes available) of an external tensor, its location checked."""
        entries = {entry.key: entry.value for entry in tensor.external_data}
        location = entries.get("location", "")
        where = f"{what} keeps its data in {location!r}"
        if not location:
            raise FileReadError(self.path, f"{what} is marked external but names no location")
        if re.match(r"^([\\/]|[A-Za-z]:)", location) or "\x00" in location:  # absolute here or on Windows
            raise FileReadError(self.path, f"{where}, an absolute path: external data must sit in the model's folder")
        if ".." in re.split(r"[\\/]+", location):
            raise FileReadError(self.path, f"{where}, which leaves the model's folder: external data must sit in it")
        full = os.path.realpath(os.path.join(self.folder, location))
        if os.path.commonpath([full, self.folder]) != self.folder:
            raise FileReadError(self.path, f"{where}, a link that leads out of the model's folder: external data "
                                           "must sit in it")
        if not os.path.isfile(full):
            state = "not a regular file" if os.path.exists(full) else "missing"
            raise FileReadError(self.path, f"{where}, which is {state}: copy the data file beside the model")
        size = os.path.getsize(full)
        offset = _count(entries.get("offset", "0"), f"the offset of {what}", self.path)
        length = _count(entries["length"], f"the length of {what}", self.path) if "length" in entries else \
            max(size - offset, 0)
        if offset + length > size:
            raise FileReadError(self.path, f"{where} at bytes {offset}..{offset + length}, but that file has only "
                                           f"{size} bytes: it is truncated or belongs to another model")
        return full, offset, length

    def decode(self, tensor: Any, what: str) -> np.ndarray:
        """The array of a TensorProto (float16/32/64, int32/64 or bool)."""
        from onnx import TensorProto, helper, numpy_helper

        if tensor.data_type not in ELEMENT_TYPES:
            name = _enum_name(TensorProto.DataType, tensor.data_type)
            raise FileReadError(self.path, f"{what} has element type {name}, which is not read: RNN weights must be "
                                           "float16, float32 or float64")
        dtype = np.dtype(ELEMENT_TYPES[tensor.data_type])
        shape = tuple(int(d) for d in tensor.dims)
        if tensor.HasField("segment"):
            raise FileReadError(self.path, f"{what} is stored in segments, which are not read")
        if tensor.data_location != _EXTERNAL:
            # typed values are one per element (float16's bit patterns too, in int32_data)
            stored = len(tensor.raw_data) or len(getattr(tensor, helper.tensor_dtype_to_field(tensor.data_type))) * \
                dtype.itemsize
            declared = check_declared_size(self.path, what, shape, dtype.itemsize, stored, compressed=False)
            if declared != stored:
                raise FileReadError(self.path, f"{what} declares shape {shape} ({declared} bytes) but stores {stored} "
                                               "bytes: the file is corrupt")
            return numpy_helper.to_array(tensor)
        full, offset, available = self.external(tensor, what)
        declared = check_declared_size(self.path, what, shape, dtype.itemsize, available, compressed=False)
        if any(entry.key == "length" for entry in tensor.external_data) and declared != available:
            raise FileReadError(self.path, f"{what} declares shape {shape} ({declared} bytes) but its external data "
                                           f"length is {available} bytes: the file is corrupt")
        with open(full, "rb") as handle:
            handle.seek(offset)
            data = handle.read(declared)
        if len(data) != declared:
            raise FileReadError(self.path, f"{what}: its data file ended after {len(data)} of {declared} bytes")
        return np.frombuffer(data, dtype.newbyteorder("<")).astype(dtype).reshape(shape)


# ---- the graph ---------------------------------------------------------------------------------------
def _subgraphs(nodes: Any) -> list[Any]:
    """The Loop/If/Scan bodies the nodes hold (GRAPH and GRAPHS attributes)."""
    return [graph for node in nodes for attribute in node.attribute
            for graph in ([attribute.g] if attribute.type == 5 else attribute.graphs)]


def _subgraph_rnns(model: Any) -> int:
    """RNN nodes inside Loop/If/Scan bodies and model-local functions (which are not read)."""
    nodes = [node for function in model.functions for node in function.node]
    pending = _subgraphs(model.graph.node)
    while pending:
        graph = pending.pop()
        nodes.extend(graph.node)
        pending.extend(_subgraphs(graph.node))
    return sum(node.op_type in OPERATORS for node in nodes)


def _no_rnn(model: Any) -> str:
    ops = Counter(node.op_type for node in model.graph.node)
    listing = ", ".join(f"{op} x{count}" for op, count in ops.most_common(8)) or "none"
    message = f"the model has no LSTM, GRU or RNN node (its nodes: {listing})"
    inside = _subgraph_rnns(model)
    if inside:
        return message + f"; {inside} sit inside Loop/If/Scan bodies or model functions, which are not read"
    if ops.keys() & {"Loop", "Scan", "MatMul", "Gemm"}:
        return (message + "; the exporter unrolled the recurrence into Loop or MatMul nodes (torch.onnx.export with "
                "dynamo=True does so for nn.RNN, tf2onnx for some Keras layers), which cannot be read as an RNN: "
                "export with dynamo=False, or read the framework's own weights file")
    return message


class _Reader:
    """One model being read: its tensors, its folded values and its RNN nodes."""

    def __init__(self, path: str) -> None:
        self.model, opset = _read_model_proto(path)
        graph = self.model.graph
        data = _TensorData(path)
        self.graph_inputs = {value.name: value for value in graph.input}
        stored = os.path.getsize(path)
        # TENSOR attributes (4): a Constant's value, which may be external data too
        values = [(attribute.t, f"the value of node {node.name!r}") for node in graph.node
                  for attribute in node.attribute if attribute.type == 4]
        for tensor, what in [*((t, f"initializer {t.name!r}") for t in graph.initializer), *values]:
            if tensor.data_location == _EXTERNAL:
                stored += data.external(tensor, what)[2]
        self.graph = Graph(path, graph, data.decode, opset, FOLDING_FACTOR * stored + FOLDING_SLACK)
        self.values: dict[str, np.ndarray | Exception] = {}
        producer = one_line(self.model.producer_name, 60)
        self.exporter = EXPORTERS.get(producer.lower()) or one_line(
            f"{producer} {self.model.producer_version}" if producer else "", 80)

    def found(self) -> list[FoundRNN]:
        indexed = [(index, node) for index, node in enumerate(self.model.graph.node)
                   if node.op_type in OPERATORS and node.domain in ONNX_DOMAINS]
        if not indexed:
            raise ValueError(_no_rnn(self.model))
        nodes, names, used = [node for _, node in indexed], [], set()
        for index, node in indexed:
            name = one_line(node.name, 120) or f"{node.op_type}_{index}"
            name = f"{name}@{index}" if name in used else name
            used.add(name)
            names.append(name)
        # every node's W, R, B, then P, then initial_h and initial_c: folded together (one child process at most)
        self.values = self.graph.fold(filter(None, (_input(node, i) for i in (1, 2, 3, 7, 5, 6) for node in nodes)))
        found = [self._node(node, name) for node, name in zip(nodes, names)]
        return self._link(nodes, found)

    # -- one node ------------------------------------------------------------------------------------
    def _node(self, node: Any, name: str) -> FoundRNN:
        op = OPERATORS[node.op_type]
        where = f"node {name!r} ({node.op_type})"
        if len(node.input) > len(op.inputs):
            raise ValueError(f"{where} has {len(node.input)} inputs; an ONNX {node.op_type} takes at most "
                             f"{len(op.inputs)}")
        inputs = {role: _input(node, index) for index, role in enumerate(op.inputs)}
        attributes = _attributes(node, where)
        direction = attributes.get("direction", "forward")
        if direction not in DIRECTION_COUNTS:
            raise ValueError(f"{where}: attribute direction={direction!r} is not forward, reverse or bidirectional")
        if attributes.get("layout", 0) not in (0, 1):
            raise ValueError(f"{where}: attribute layout={attributes['layout']} is not 0 or 1")
        directions = DIRECTION_COUNTS[direction]
        weights, notes = self._weights(where, node.op_type, inputs, directions, attributes.get("hidden_size"))
        units = weights["R"].shape[-1]
        tensors = {f"layer_0/{role}": value for role, value in weights.items()}
        inferred = infer("onnx", tensors, where)
        fields, questions = dict(inferred.fields), dict(inferred.questions)
        refusals = [f"attribute {key}={attributes[key]!r} {why}" for key, (refused, why) in REFUSED_ATTRIBUTES.items()
                    if key in attributes and refused(attributes[key])]
        mode, activation_refusal = _activations(node.op_type, op, attributes, directions)
        refusals += [activation_refusal] if activation_refusal else []
        if mode is not None:
            fields["rnn_mode"] = mode
            questions.pop("rnn_mode", None)
        if inputs.get("P"):
            peephole_refusal, peephole_note = self._peepholes(where, inputs["P"], directions, units)
            refusals += [peephole_refusal] if peephole_refusal else []
            notes += [peephole_note] if peephole_note else []
        fmt = "onnx"
        if node.op_type == "GRU" and not attributes.get("linear_before_reset", 0):
            if directions == 2 or refusals:
                refusals.append(RESET_BEFORE_REFUSAL)
            else:
                fmt, tensors = "gru_block_cell", _reset_before(weights, units)
                fields = {**infer(fmt, tensors).fields, "dtype": fields["dtype"]}
                notes.append(RESET_BEFORE_NOTE)
        if attributes.get("layout", 0) == 1:
            notes.append("attribute layout=1: its X, Y and states are batch-major (time_major=False)")
        notes += [f"input {role} {inputs[role]!r} is also a graph input: the file's values are defaults the caller "
                  "may replace" for role in ("W", "R", "B") if inputs[role] in self.graph_inputs]
        notes += self._state_notes(inputs)
        source = f"ONNX {node.op_type} node" + (f" ({self.exporter})" if self.exporter else "")
        return FoundRNN(name=name, source=source, fmt=fmt, tensors=tensors, fields=fields, questions=questions,
                        notes=tuple(notes), refusal="; ".join(refusals) or None)

    def _weights(self, where: str, op_type: str, inputs: dict[str, str], directions: int,
                 hidden_size: int | None) -> tuple[dict[str, np.ndarray], list[str]]:
        """W, R and B (zeros when the node has none, as ONNX specifies), checked against the attributes."""
        gates = OPERATORS[op_type].gates
        weights = {role: self._weight(where, role, inputs[role]) for role in ("W", "R", "B") if inputs[role]}
        for role in ("W", "R"):
            if role not in weights:
                raise ValueError(f"{where} has no {role} input")
        common_dtype({f"input {role} {inputs[role]!r}": value for role, value in weights.items()}, where)
        w, r = weights["W"], weights["R"]
        if w.ndim != 3 or r.ndim != 3 or w.shape[0] != directions or r.shape[0] != directions:
            raise ValueError(f"{where}: W {w.shape} and R {r.shape} must be [{directions}, rows, columns] for "
                             f"{directions} direction(s)")
        units = r.shape[-1]
        if hidden_size is not None and hidden_size != units:
            raise ValueError(f"{where}: attribute hidden_size={hidden_size} disagrees with R of shape {r.shape}")
        if w.shape[1] != gates * units or r.shape[1] != gates * units:
            raise ValueError(f"{where}: W {w.shape} and R {r.shape} must have {gates}*{units} rows, the gates of "
                             f"an {op_type} with hidden size {units}")
        if "B" in weights:
            return weights, []
        weights["B"] = np.zeros((directions, 2 * gates * units), w.dtype)
        return weights, ["the node has no B input: zero biases, as ONNX specifies, the same function"]

    def _weight(self, where: str, role: str, name: str) -> np.ndarray:
        value = self.values[name]
        if isinstance(value, FileReadError):
            raise value
        if isinstance(value, NotFolded):
            raise ValueError(f"{where}: its {role} input {name!r} is {value}; only weights stored in the file "
                             "(initializers or Constant nodes, and nodes computing it from those) can be read")
        if isinstance(value, Exception):
            raise ValueError(f"{where}: its {role} input {name!r} cannot be folded: {value}")
        return value

    def _peepholes(self, where: str, name: str, directions: int, units: int) -> tuple[str | None, str | None]:
        peepholes = self.values[name]
        if isinstance(peepholes, FileReadError):
            raise peepholes
        if isinstance(peepholes, (NotFolded, MalformedGraph)):
            return (f"input P (peephole weights) {name!r} is {peepholes}, so it cannot be checked to be zero; "
                    "cuDNN's LSTM has no peephole connections"), None
        if not isinstance(peepholes, np.ndarray) or peepholes.shape != (directions, 3 * units):
            raise ValueError(f"{where}: input P {name!r} must have shape ({directions}, {3 * units})")
        if np.any(peepholes != 0):
            return ("input P (peephole weights) is not all zeros, and cuDNN's LSTM has no peephole connections: "
                    "the model cannot be converted; retrain or export it without peepholes"), None
        return None, "input P (peephole weights) is all zeros: no peephole connections, the same function"

    def _state_notes(self, inputs: dict[str, str]) -> list[str]:
        notes = []
        for state, argument in (("initial_h", "input_h"), ("initial_c", "input_c")):
            if not inputs.get(state):
                continue
            value = self.values[inputs[state]]  # (an exception: given at run time, or computed from the batch)
            if isinstance(value, np.ndarray) and np.any(value != 0):
                notes.append(f"input {state} is a constant that is not all zeros: pass it as {argument} to compute "
                             "what the model computes")
        return notes

    # -- stacked nodes -------------------------------------------------------------------------------
    def _link(self, nodes: list[Any], found: list[FoundRNN]) -> list[FoundRNN]:
        """Set feeds_from where a node's X is another node's whole Y, rearranged as a stacked layer's input."""
        outputs = {node.output[0]: (node, item) for node, item in zip(nodes, found) if node.output and node.output[0]}
        sizes: dict[str, tuple[int, int]] = {}
        linked = []
        for node, item in zip(nodes, found):
            x = _input(node, 0)
            sizes[item.name] = self._declared_sizes(x, int_attribute(node, "layout") == 1)
            try:
                sources = set(self.graph.trace(x, outputs).sources) if x else set()
            except (NotFolded, MalformedGraph):
                sources = set()
            if len(sources) == 1:
                source_node, source = outputs[next(iter(sources))]
                if source is not item and self._stacks(x, node, source_node, source, sizes):
                    sizes[item.name] = sizes.get(source.name, sizes[item.name])
                    if _input(source_node, 4) == _input(node, 4):
                        item = item.replace(feeds_from=source.name)
                    else:
                        item = item.replace(notes=item.notes + (
                            f"its input is {source.name}'s output, but the two take different sequence_lens, so they "
                            "do not stack as one network",))
            linked.append(item)
        return linked

    def _declared_sizes(self, x: str, batch_major: bool) -> tuple[int, int]:
        """(T, B) of a graph input X where the model declares them, else the probe's own."""
        value = self.graph_inputs.get(x)
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim] if value is not None else []
        if len(dims) != 3:
            return PROBE_STEPS, PROBE_BATCH
        steps, batch = (dims[1], dims[0]) if batch_major else (dims[0], dims[1])
        return steps if steps > 0 else PROBE_STEPS, batch if batch > 0 else PROBE_BATCH

    def _stacks(self, x: str, node: Any, source_node: Any, source: FoundRNN, sizes: dict[str, tuple[int, int]]
                ) -> bool:
        """Whether X, computed from the source's Y, is Y [T, D, B, N] as [T, B, D*N] ([B, T, D*N] for layout=1):
        a probe Y of distinct values is evaluated to X."""
        steps, batch = sizes.get(source.name, (PROBE_STEPS, PROBE_BATCH))
        directions = 2 if source.fields.get("direction") == "bidirectional" else 1
        units = source.fields["num_units"]
        if steps * batch * directions * units > PROBE_ELEMENTS:
            steps, batch = PROBE_STEPS, PROBE_BATCH
        probe = np.arange(steps * batch * directions * units, dtype=np.float64).reshape(steps, batch, directions,
                                                                                          units)
        y = probe.transpose(1, 0, 2, 3) if int_attribute(source_node, "layout") == 1 else probe.transpose(0, 2, 1, 3)
        expected = probe.transpose(1, 0, 2, 3) if int_attribute(node, "layout") == 1 else probe
        value = self.graph.probe(x, {source_node.output[0]: np.ascontiguousarray(y)})
        return value is not None and value.dtype == np.float64 and np.array_equal(
            value, expected.reshape(*expected.shape[:2], -1))


def _input(node: Any, index: int) -> str:
    return node.input[index] if index < len(node.input) else ""


def _attributes(node: Any, where: str) -> dict[str, Any]:
    """The attributes this reader uses, each checked to have its type; strings decoded."""
    from onnx import AttributeProto, helper

    types = AttributeProto.AttributeType
    result: dict[str, Any] = {}
    for attribute in node.attribute:
        expected = ATTRIBUTE_TYPES.get(attribute.name)
        if expected is None:
            continue
        if attribute.type != expected:
            raise ValueError(f"{where}: attribute {attribute.name} must be {types.Name(expected)}; got "
                             f"{_enum_name(types, attribute.type)}")
        value = helper.get_attribute_value(attribute)
        if isinstance(value, bytes):
            value = one_line(value.decode("utf-8", "replace"), 60)
        elif isinstance(value, list):
            value = [one_line(v.decode("utf-8", "replace"), 60) for v in value]
        result[attribute.name] = value
    return result


def _activations(op_type: str, op: Operator, attributes: dict[str, Any],
                 directions: int) -> tuple[str | None, str | None]:
    """(rnn_mode the activations give (RNN nodes), refusal) for the node's ``activations``."""
    given = attributes.get("activations")
    activations = [name.lower() for name in given] if given else list(op.activations) * directions
    if op_type == "RNN":
        modes = [RNN_MODES.get(name) for name in activations]
        if len(modes) == directions and None not in modes and len(set(modes)) == 1:
            return modes[0], None
        return None, (f"attribute activations={given}: cuDNN's RNN runs Tanh or Relu, the same in both directions; "
                      "export with one of those")
    if activations != list(op.activations) * directions:
        defaults = ", ".join(name.capitalize() for name in op.activations)
        return None, (f"attribute activations={given}: cuDNN's {op_type} runs only {defaults} (ONNX's defaults); "
                      "export with those")
    return None, None


def _reset_before(weights: dict[str, np.ndarray], units: int) -> dict[str, np.ndarray]:
    """An ONNX GRU with linear_before_reset=0 (one direction) as gru_block_cell tensors: the same function.

    ONNX's W [3N, I] and R [3N, N] hold their gates in Keras's order z, r, h, so transposed they are a
    Keras GRU(reset_after=False)'s kernels; the two biases add up (R's bias is outside the reset)."""
    bias = weights["B"][0]
    return keras_reset_before_to_gru_block_cell(weights["W"][0].T, weights["R"][0].T,
                                                bias[:3 * units] + bias[3 * units:], np)
