"""``onnx``: the W, R, B inputs of ONNX ``LSTM`` / ``GRU`` / ``RNN`` nodes, one node per layer.

Each layer's ``W``, ``R`` and ``B`` (:data:`TENSOR_NAMES`) stack its directions (0 forward, 1
reverse): the input matrices, the recurrent ones, and [Wb | Rb], the input biases then the recurrent.
Gate orders: LSTM i,o,f,c; GRU z,r,h (cuDNN's u,r,n) with ``linear_before_reset=1``, which is
cuDNN's GRU; RNN one gate with activation Tanh or Relu. :func:`cudnn_rnn.convert.export_onnx`
writes a runnable model from these tensors.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .._arrays import Array
from ..config import RNNConfig
from ._core import (
    CellWeights,
    FormatSpec,
    Notes,
    OmittedBiases,
    from_gate_order,
    projection_refusal,
    to_gate_order,
)
from ._reading import ShapeReading, TensorNames, TensorShapes

#: rnn_mode -> ONNX's gate order, in cuDNN gate names
GATE_ORDERS: dict[str, tuple[str, ...]] = {"lstm": ("i", "o", "f", "g"), "gru": ("u", "r", "n")}

#: rnn_mode -> (ONNX operator, extra node attributes)
OPERATORS: dict[str, tuple[str, dict[str, Any]]] = {
    "lstm": ("LSTM", {}),
    "gru": ("GRU", {"linear_before_reset": 1}),
    "rnn_tanh": ("RNN", {}),
    "rnn_relu": ("RNN", {}),
}

#: rnn_mode -> the RNN node's activation (one per direction in the node's ``activations``)
ACTIVATIONS: dict[str, str] = {"rnn_tanh": "Tanh", "rnn_relu": "Relu"}


def node_attributes(config: RNNConfig) -> tuple[str, dict[str, Any]]:
    """The ONNX operator for ``config``'s mode and its attributes other than direction and hidden_size."""
    op, attributes = OPERATORS[config.rnn_mode]
    if config.rnn_mode in ACTIVATIONS:
        attributes = dict(attributes, activations=[ACTIVATIONS[config.rnn_mode]] * config.num_directions)
    return op, attributes


FIELDS: tuple[str, ...] = ("W", "R", "B")

#: one name per layer and field; the directions are the tensors' first axis
TENSOR_NAMES = TensorNames({field: "layer_{layer}/" + field for field in FIELDS})


def key(layer: int, field: str) -> str:
    """The tensor name of ``field`` ("W", "R" or "B") of layer ``layer``."""
    return TENSOR_NAMES.name(field, layer)


refusal = projection_refusal("onnx", "an ONNX LSTM node feeds back its unprojected h")


def direction_refusal(tensors: TensorShapes, fields: Mapping[str, Any]) -> str | None:
    """W's first axis counts the directions: 1 or 2."""
    name = key(0, "W")
    directions = tensors.shapes[name][0]
    return None if directions in (1, 2) else f"tensor {name!r} has {directions} directions; ONNX has 1 or 2"


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    d, gn = config.num_directions, config.num_gates * config.num_units
    result: dict[str, tuple[int, ...]] = {}
    for layer in range(config.num_layers):
        result[key(layer, "W")] = (d, gn, config.layer_input_size(layer))
        result[key(layer, "R")] = (d, gn, config.num_units)
        result[key(layer, "B")] = (d, 2 * gn)
    return result


def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    cells, d = to_gate_order(cells, config, GATE_ORDERS, xp), config.num_directions
    result = {}
    for layer in range(config.num_layers):
        layer_cells = cells[layer * d:(layer + 1) * d]
        result[key(layer, "W")] = xp.stack([c.input for c in layer_cells])
        result[key(layer, "R")] = xp.stack([c.recurrent for c in layer_cells])
        result[key(layer, "B")] = xp.stack([xp.concatenate([c.input_bias, c.recurrent_bias]) for c in layer_cells])
    return result


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    gn = config.num_gates * config.num_units
    layers = [(tensors[key(layer, "W")], tensors[key(layer, "R")], tensors[key(layer, "B")])
              for layer in range(config.num_layers)]
    return from_gate_order([CellWeights(w[direction], r[direction], b[direction, :gn], b[direction, gn:])
                            for w, r, b in layers for direction in range(config.num_directions)],
                           config, GATE_ORDERS, xp)


SPEC = FormatSpec(
    "onnx", "ONNX LSTM/GRU/RNN node inputs: layer_{l}/W, layer_{l}/R, layer_{l}/B", shapes, encode, decode,
    refusal=refusal, names=TENSOR_NAMES,
    omitted_biases=OmittedBiases(("B",), "layer {layer} has no B: zero biases are used, the same function",
                                 per_layer=True),
    reading=ShapeReading(
        sizes={"num_directions": ("W", 0), "gate_rows": ("W", 1), "input_size": ("W", 2), "num_units": ("R", 2)},
        ndim=3, described="layer_{l}/W, R, B", layers_from="W",
        mode_question="an ONNX RNN's weights do not say its activation", refuse=direction_refusal),
)
