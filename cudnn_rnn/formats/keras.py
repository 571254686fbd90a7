"""``keras``: the weights of Keras ``LSTM``, ``GRU(reset_after=True)`` and ``SimpleRNN`` layers.

One Keras layer per cuDNN layer and direction (a bidirectional layer is
``keras.layers.Bidirectional``, whose ``get_weights()`` lists the forward layer's weights,
then the backward layer's), its weights :data:`FIELDS`: W and R with each gate block
transposed, and the bias, bW + bR but for a GRU's rows [bW, bR] (:data:`TWO_BIAS_MODES`).
Gate orders: LSTM i,f,c,o (cuDNN's); GRU z,r,h (cuDNN's u,r,n: the first two swap).
rnn_tanh is ``SimpleRNN(activation="tanh")`` and rnn_relu ``SimpleRNN(activation="relu")``.

This module also holds the facts about Keras's RNN layers that the readers of Keras files and
TensorFlow checkpoints share (its tables below).

Exactness is as :mod:`cudnn_rnn.convert` says; Keras -> cuDNN puts a single bias into bR and zeros
into bW, as Keras's own cuDNN path does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .._arrays import Array
from ..config import MODES, RNNConfig
from ._core import (
    CellWeights,
    FormatSpec,
    Notes,
    OmittedBiases,
    from_gate_order,
    projection_refusal,
    pseudo_layers,
    to_gate_order,
)
from ._reading import ShapeReading, TensorNames, TensorShapes

#: rnn_mode -> Keras's gate order, in cuDNN gate names
GATE_ORDERS: dict[str, tuple[str, ...]] = {"lstm": ("i", "f", "g", "o"), "gru": ("u", "r", "n")}

#: modes whose Keras layer keeps both biases (as rows [bW, bR]); the others keep their sum
TWO_BIAS_MODES: tuple[str, ...] = ("gru",)

DIRECTION_NAMES: tuple[str, ...] = ("forward", "backward")
#: the weights of one direction, in the order every Keras RNN cell creates them
FIELDS: tuple[str, ...] = ("kernel", "recurrent_kernel", "bias")

#: per direction, the attribute of a Bidirectional that holds its layer: the group of a Keras 3 weights
#: store, the edge of a TF object graph (a SavedModel or legacy file names the layer itself "forward_lstm")
DIRECTION_LAYERS: tuple[str, ...] = ("forward_layer", "backward_layer")


# ---- the RNN layer classes -----------------------------------------------------------------------
@dataclass(frozen=True)
class LayerKind:
    """A Keras RNN layer class.

    Attributes:
        class_name: Keras's class name.
        rnn_mode: its cuDNN mode; None for SimpleRNN, whose activation decides (:data:`SIMPLE_RNN_MODES`).
        cell: the cell class that ``keras.layers.RNN`` runs as this layer; None for the CuDNN layers.
        cell_scope: the variable scope of that cell's weights in a TF graph (``lstm/lstm_cell/kernel``).
        cudnn_layout: Keras 2's CuDNNLSTM / CuDNNGRU (cuDNN's matrices and both biases).
    """

    class_name: str
    rnn_mode: str | None
    cell: str | None = None
    cell_scope: str | None = None
    cudnn_layout: bool = False

    @property
    def gates(self) -> int:
        """The gate blocks G of its weights: kernel [width, G*N], recurrent_kernel [N, G*N]."""
        return len(MODES[self.rnn_mode].gates) if self.rnn_mode else 1  # SimpleRNN: one, either activation


LAYER_KINDS: dict[str, LayerKind] = {kind.class_name: kind for kind in (
    LayerKind("LSTM", "lstm", "LSTMCell", "lstm_cell"),
    LayerKind("GRU", "gru", "GRUCell", "gru_cell"),
    LayerKind("SimpleRNN", None, "SimpleRNNCell", "simple_rnn_cell"),
    LayerKind("CuDNNLSTM", "lstm", cudnn_layout=True),
    LayerKind("CuDNNGRU", "gru", cudnn_layout=True),
)}

#: keras.layers.RNN(cell): the cell class -> the layer class it runs as
CELL_LAYERS: dict[str, str] = {kind.cell: kind.class_name for kind in LAYER_KINDS.values() if kind.cell}

#: a cell's variable scope in a TF graph -> the layer class
CELL_SCOPES: dict[str, str] = {kind.cell_scope: kind.class_name for kind in LAYER_KINDS.values() if kind.cell_scope}

#: gate blocks G -> the layer class whose weights have them (the CuDNN layers differ only by their bias)
CLASS_BY_GATES: dict[int, str] = {kind.gates: kind.class_name for kind in LAYER_KINDS.values()
                                  if not kind.cudnn_layout}

#: the activations cuDNN's LSTM and GRU compute, which are Keras's defaults; anything else is refused by name
CUDNN_ACTIVATIONS: dict[str, str] = {"activation": "tanh", "recurrent_activation": "sigmoid"}

#: SimpleRNN activation -> rnn_mode
SIMPLE_RNN_MODES: dict[str, str] = {"tanh": "rnn_tanh", "relu": "rnn_relu"}


# ---- the keras format ----------------------------------------------------------------------------
TENSOR_NAMES = TensorNames({field: "layer_{layer}/{direction}/" + field for field in FIELDS}, DIRECTION_NAMES)


refusal = projection_refusal("keras", "Keras layers have none")


#: what a GRU(reset_after=False) is, said by every reader that finds one and by this format's refusal of its bias
RESET_BEFORE_NOTE = ("GRU(reset_after=False) is a reset-before GRU (TF's GRUBlockCell), whose weights the "
                     "'gru_block_cell' or 'mygrad' format holds exactly (cudnn_rnn.gru_block_cell runs it) and cuDNN "
                     "params only approximately (allow_approximation=True), since cuDNN's GRU applies the reset gate "
                     "after the recurrent matmul")


def reset_before_refusal(tensors: TensorShapes, fields: Mapping[str, Any]) -> str | None:
    """A GRU with one (3N,) bias is GRU(reset_after=False), which no cuDNN layout holds."""
    bias = TENSOR_NAMES.name("bias")
    if fields.get("rnn_mode") == "gru" and bias in tensors and len(tensors.shapes[bias]) == 1:
        return f"the 'keras' format holds no GRU bias of shape (3N,): {RESET_BEFORE_NOTE}"
    return None


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    gn, n = config.num_gates * config.num_units, config.num_units
    bias_shape = (2, gn) if config.rnn_mode in TWO_BIAS_MODES else (gn,)
    result: dict[str, tuple[int, ...]] = {}
    for _, layer, direction in pseudo_layers(config):
        result[TENSOR_NAMES.name("kernel", layer, direction)] = (config.layer_input_size(layer), gn)
        result[TENSOR_NAMES.name("recurrent_kernel", layer, direction)] = (n, gn)
        result[TENSOR_NAMES.name("bias", layer, direction)] = bias_shape
    return result


def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    result = {}
    for cell, (_, layer, direction) in zip(to_gate_order(cells, config, GATE_ORDERS, xp), pseudo_layers(config)):
        bias = (xp.stack([cell.input_bias, cell.recurrent_bias]) if config.rnn_mode in TWO_BIAS_MODES
                else cell.input_bias + cell.recurrent_bias)
        for field, value in zip(FIELDS, (xp.transpose(cell.input), xp.transpose(cell.recurrent), bias)):
            result[TENSOR_NAMES.name(field, layer, direction)] = xp.ascontiguousarray(value)
    return result


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    return from_gate_order([_cell(tensors, config, layer, direction, xp) for _, layer, direction in
                            pseudo_layers(config)], config, GATE_ORDERS, xp)


def _cell(tensors: Mapping[str, Array], config: RNNConfig, layer: int, direction: int, xp: Any) -> CellWeights:
    """A direction's weights, in Keras's gate order."""
    kernel, recurrent_kernel, bias = (tensors[TENSOR_NAMES.name(field, layer, direction)] for field in FIELDS)
    if config.rnn_mode in TWO_BIAS_MODES:
        input_bias, recurrent_bias = bias[0], bias[1]
    else:  # the single bias goes to bR, zeros to bW (Keras's own cuDNN path does the same)
        input_bias, recurrent_bias = xp.zeros_like(bias), bias
    return CellWeights(kernel.T, recurrent_kernel.T, input_bias, recurrent_bias)


SPEC = FormatSpec(
    "keras", "Keras LSTM, GRU(reset_after=True), SimpleRNN: layer_{l}/forward/kernel, ...", shapes, encode, decode,
    refusal=refusal, names=TENSOR_NAMES,
    omitted_biases=OmittedBiases(
        ("bias",), "the layers have no biases (use_bias=False): zero biases are used, the same function"),
    reading=ShapeReading(
        sizes={"input_size": ("kernel", 0), "gate_rows": ("kernel", 1), "num_units": ("recurrent_kernel", 0)},
        described="layer_{l}/{forward|backward}/kernel, ...",
        mode_question="a SimpleRNN's weights do not say its activation", refuse=reset_before_refusal),
)
