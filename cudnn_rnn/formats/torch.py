"""``torch``: the state_dict of ``torch.nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``.

PyTorch keeps cuDNN's two biases and gate orders (lstm i,f,g,o; gru r,z,n with z = cuDNN's
u), so this format is a renaming of the cells' fields (:data:`NAMES`; the projection is LSTM's
``proj_size``), exact both ways. rnn_relu / rnn_tanh are ``nn.RNN(nonlinearity="relu" /
"tanh")``. PyTorch has no skip_input, held as :mod:`cudnn_rnn.convert` says.
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
    pseudo_layers,
    with_explicit_skip_input,
)
from ._reading import ShapeReading, TensorNames

#: CellWeights field -> state_dict key pattern
NAMES: dict[str, str] = {
    "input": "weight_ih_l{layer}{suffix}",
    "recurrent": "weight_hh_l{layer}{suffix}",
    "input_bias": "bias_ih_l{layer}{suffix}",
    "recurrent_bias": "bias_hh_l{layer}{suffix}",
    "projection": "weight_hr_l{layer}{suffix}",
}

#: direction -> key suffix
SUFFIXES: tuple[str, ...] = ("", "_reverse")

TENSOR_NAMES = TensorNames(NAMES, SUFFIXES, direction_key="suffix")

#: ``nn.RNNBase.mode`` -> rnn_mode
MODULE_MODES: dict[str, str] = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}
#: rnn_mode -> the ``torch.nn`` class that runs it
MODULE_CLASSES: dict[str, str] = {"lstm": "nn.LSTM", "gru": "nn.GRU", "rnn_tanh": "nn.RNN", "rnn_relu": "nn.RNN"}
#: RNNConfig size field -> the ``nn.RNNBase`` attribute that holds it
MODULE_SIZES: dict[str, str] = {"num_units": "hidden_size", "num_layers": "num_layers", "input_size": "input_size",
                                "num_proj": "proj_size"}


def module_fields(module: Any) -> dict[str, Any]:
    """The configuration an ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (or an object pickled as one) says by its
    attributes: rnn_mode, the sizes of :data:`MODULE_SIZES` and direction, each where it is of the right type;
    empty for anything else."""
    mode = getattr(module, "mode", None)
    if not isinstance(mode, str) or mode not in MODULE_MODES:
        return {}
    fields: dict[str, Any] = {"rnn_mode": MODULE_MODES[mode]}
    for field_name, attribute in MODULE_SIZES.items():
        value = getattr(module, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            fields[field_name] = value
    if isinstance(getattr(module, "bidirectional", None), bool):
        fields["direction"] = "bidirectional" if module.bidirectional else "unidirectional"
    return fields


def _fields(config: RNNConfig) -> tuple[str, ...]:
    fields = ("input", "recurrent", "input_bias", "recurrent_bias")
    return fields + ("projection",) if config.num_proj else fields


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    gn, p, n = config.num_gates * config.num_units, config.state_size, config.num_units
    result = {}
    for _, layer, direction in pseudo_layers(config):
        field_shapes = {"input": (gn, config.layer_input_size(layer)), "recurrent": (gn, p),
                        "input_bias": (gn,), "recurrent_bias": (gn,), "projection": (p, n)}
        for field in _fields(config):
            result[TENSOR_NAMES.name(field, layer, direction)] = field_shapes[field]
    return result


def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    cells = with_explicit_skip_input(cells, config, xp)
    return {TENSOR_NAMES.name(field, layer, direction): xp.array(getattr(cells[k], field))
            for k, layer, direction in pseudo_layers(config) for field in _fields(config)}


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    return tuple(
        CellWeights(**{field: xp.array(tensors[TENSOR_NAMES.name(field, layer, direction)])
                       for field in _fields(config)})
        for _, layer, direction in pseudo_layers(config))


SPEC = FormatSpec(
    "torch", "nn.LSTM/GRU/RNN state_dict: weight_ih_l{k}[_reverse], bias_hh_l{k}, ...", shapes, encode, decode,
    names=TENSOR_NAMES,
    omitted_biases=OmittedBiases(
        ("input_bias", "recurrent_bias"),
        "the state_dict has no biases (bias=False): zero biases are used, the same function"),
    reading=ShapeReading(
        sizes={"gate_rows": ("input", 0), "input_size": ("input", 1), "state_size": ("recurrent", 1),
               "num_units": ("projection", 1)},
        described="nn.LSTM/GRU/RNN weights", layers_from="input", projection="projection",
        mode_question="an nn.RNN state_dict does not say its nonlinearity"),
)
