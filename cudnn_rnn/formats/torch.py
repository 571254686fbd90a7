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
    FormatFacts,
    Notes,
    OmittedBiases,
    ShapeReading,
    TensorNames,
    no_refusal,
    pseudo_layers,
    with_explicit_skip_input,
)

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


def _fields(config: RNNConfig) -> tuple[str, ...]:
    fields = ("input", "recurrent", "input_bias", "recurrent_bias")
    return fields + ("projection",) if config.num_proj else fields


def _key(field: str, layer: int, direction: int) -> str:
    return TENSOR_NAMES.name(field, layer, direction)


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    gn, p, n = config.num_gates * config.num_units, config.state_size, config.num_units
    result = {}
    for _, layer, direction in pseudo_layers(config):
        field_shapes = {"input": (gn, config.layer_input_size(layer)), "recurrent": (gn, p),
                        "input_bias": (gn,), "recurrent_bias": (gn,), "projection": (p, n)}
        for field in _fields(config):
            result[_key(field, layer, direction)] = field_shapes[field]
    return result


def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    cells = with_explicit_skip_input(cells, config, xp)
    return {_key(field, layer, direction): xp.array(getattr(cells[k], field))
            for k, layer, direction in pseudo_layers(config) for field in _fields(config)}


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    return tuple(
        CellWeights(**{field: xp.array(tensors[_key(field, layer, direction)]) for field in _fields(config)})
        for _, layer, direction in pseudo_layers(config))


refusal = no_refusal

FACTS = FormatFacts(
    "torch", "nn.LSTM/GRU/RNN state_dict: weight_ih_l{k}[_reverse], bias_hh_l{k}, ...",
    omitted_biases=OmittedBiases(
        ("input_bias", "recurrent_bias"),
        "the state_dict has no biases (bias=False): zero biases are used, the same function"),
    reading=ShapeReading(
        sizes={"gate_rows": ("input", 0), "input_size": ("input", 1), "state_size": ("recurrent", 1),
               "num_units": ("projection", 1)},
        described="nn.LSTM/GRU/RNN weights", layers_from="input", projection="projection",
        mode_question="an nn.RNN state_dict does not say its nonlinearity"),
)
