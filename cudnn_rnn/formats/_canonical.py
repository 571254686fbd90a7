"""``canonical``: TF's CudnnRNNParamsToCanonical lists, as named tensors.

``weights/{i}`` is the i-th canonical matrix and ``biases/{i}`` the i-th canonical bias, in
the order of :func:`cudnn_rnn.cudnn_rnn_params_to_canonical` (per pseudo-layer: matrices in
linLayerID order, then the projection; the 2G biases). Exact both ways for every
configuration, skip_input included (layer 0's input matrices are simply not listed).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .._arrays import Array
from ..config import RNNConfig
from ..layout import params_layout
from ._core import CellWeights, FormatFacts, Notes, TensorNames, cells_from_params, no_refusal, params_from_cells

TENSOR_NAMES = TensorNames({"weights": "weights/{index}", "biases": "biases/{index}"})


def _names(config: RNNConfig) -> tuple[list[str], list[str]]:
    layout = params_layout(config)
    return ([TENSOR_NAMES.name("weights", index=i) for i in range(len(layout.weights))],
            [TENSOR_NAMES.name("biases", index=i) for i in range(len(layout.biases))])


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    layout = params_layout(config)
    weight_names, bias_names = _names(config)
    result = {name: entry.shape for name, entry in zip(weight_names, layout.weights)}
    result.update({name: entry.shape for name, entry in zip(bias_names, layout.biases)})
    return result


def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    layout = params_layout(config)
    params = params_from_cells(cells, config, notes, xp, cells[0].recurrent.dtype)
    weight_names, bias_names = _names(config)
    entries = list(zip(weight_names, layout.weights)) + list(zip(bias_names, layout.biases))
    return {name: xp.array(layout.view(params, entry)) for name, entry in entries}


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    layout = params_layout(config)
    weight_names, bias_names = _names(config)
    dtype = tensors[weight_names[0]].dtype
    params = xp.zeros(layout.size, dtype=dtype)
    for name, entry in list(zip(weight_names, layout.weights)) + list(zip(bias_names, layout.biases)):
        layout.view(params, entry)[...] = tensors[name]
    return cells_from_params(params, config, xp)


refusal = no_refusal

FACTS = FormatFacts("canonical", "TF's CudnnRNNParamsToCanonical lists: weights/{i}, biases/{i}")
