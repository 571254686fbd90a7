"""``canonical``: TF's CudnnRNNParamsToCanonical lists, as named tensors.

``weights/{i}`` is the i-th canonical matrix and ``biases/{i}`` the i-th canonical bias, in
the order of :func:`cudnn_rnn.cudnn_rnn_params_to_canonical`. Exact both ways for every
configuration, skip_input included (layer 0's input matrices are simply not listed).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .._arrays import Array
from ..config import RNNConfig
from ..layout import ParamEntry, params_layout
from ._core import CellWeights, FormatSpec, Notes, cells_from_params, params_from_cells
from ._reading import TensorNames

TENSOR_NAMES = TensorNames({"weights": "weights/{index}", "biases": "biases/{index}"})


def _entries(config: RNNConfig) -> list[tuple[str, ParamEntry]]:
    """Each tensor's name and its entry in the params layout: the matrices, then the biases."""
    layout = params_layout(config)
    return ([(TENSOR_NAMES.name("weights", index=i), entry) for i, entry in enumerate(layout.weights)]
            + [(TENSOR_NAMES.name("biases", index=i), entry) for i, entry in enumerate(layout.biases)])


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    return {name: entry.shape for name, entry in _entries(config)}


def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    layout = params_layout(config)
    params = params_from_cells(cells, config, notes, xp, cells[0].recurrent.dtype)
    return {name: xp.array(layout.view(params, entry)) for name, entry in _entries(config)}


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    layout, entries = params_layout(config), _entries(config)
    params = xp.zeros(layout.size, dtype=tensors[entries[0][0]].dtype)
    for name, entry in entries:
        layout.view(params, entry)[...] = tensors[name]
    return cells_from_params(params, config, xp)


SPEC = FormatSpec("canonical", "TF's CudnnRNNParamsToCanonical lists: weights/{i}, biases/{i}", shapes, encode, decode,
                  names=TENSOR_NAMES)
