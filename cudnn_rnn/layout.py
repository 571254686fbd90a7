"""The params buffer: one table-driven source of truth for its layout.

cuDNN keeps every weight of a multi-layer RNN in one opaque 1-D buffer (TF's
``params``). This module describes where each matrix and bias sits, and every
other part of the package (params size, canonical conversion, both backends,
the layer classes, the format converters) walks the same table.

Layout (as far as public sources tell; see :data:`UNCONFIRMED` for the rest)::

    for k in pseudo-layers 0 .. L*D-1:                  # k = layer * D + dir
        W[k, 0] .. W[k, G-1]      input matrices,      each [N, width_k]   (row-major)
        R[k, G] .. R[k, 2G-1]     recurrent matrices,  each [N, P]
        Proj[k]                   LSTM projection (linLayerID 8), [P, N]  (position: UNCONFIRMED)
    for k in pseudo-layers 0 .. L*D-1:
        bW[k, 0] .. bW[k, G-1]    input biases,        each [N]
        bR[k, G] .. bR[k, 2G-1]   recurrent biases,    each [N]

    width_k = I for layer 0, D*P above. skip_input drops layer 0's input matrices.

The canonical form (TF's ``CudnnRNNParamsToCanonical``) lists, per pseudo-layer, the
matrices in linLayerID order followed by the projection, and the 2G biases.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

from ._arrays import array_module
from .config import RNNConfig, dtype_name

__all__ = [
    "LayoutAssumptions",
    "UNCONFIRMED",
    "ParamEntry",
    "ParamsLayout",
    "params_layout",
    "params_size",
    "PROJECTION_ID",
    "cudnn_rnn_params_size",
    "cudnn_rnn_params_to_canonical",
    "cudnn_rnn_canonical_to_params",
]

#: cuDNN's linLayerID of the LSTM projection matrix.
PROJECTION_ID = 8


# ==== Layout facts NOT yet confirmed by cuDNN =================================================
# Everything the public sources leave open is in this one record. tests/gpu/test_layout_cudnn.py
# asks cudnnGetRNNWeightParams on a GPU and fails, naming the field, where cuDNN disagrees:
# settle it by changing the values here, never the code that walks the table.
@dataclass(frozen=True)
class LayoutAssumptions:
    """Open questions about cuDNN's weight space, answered as data.

    Attributes:
        projection_position: where the LSTM projection matrix of pseudo-layer k sits:
            ``"after_pseudo_layer"`` (right after R[k, 2G-1]) or ``"after_all_matrices"``
            (all projections after every pseudo-layer's matrices, before the biases).
        skip_input_keeps_input_biases: whether layer 0 keeps its G input biases per
            direction under ``skip_input`` (its input matrices are known to be absent).
        verified_on: where the values were confirmed; empty while unconfirmed.
    """

    projection_position: Literal["after_pseudo_layer", "after_all_matrices"] = "after_pseudo_layer"
    skip_input_keeps_input_biases: bool = True
    verified_on: str = ""


UNCONFIRMED = LayoutAssumptions()
# ==============================================================================================


@dataclass(frozen=True)
class ParamEntry:
    """One matrix or bias of the params buffer.

    Attributes:
        kind: ``"matrix"`` or ``"bias"``.
        pseudo_layer: k = layer * D + dir.
        lin_layer_id: cuDNN's linLayerID (0..G-1 input, G..2G-1 recurrent, 8 projection).
        side: ``"input"``, ``"recurrent"`` or ``"projection"``.
        gate: the gate name (``"i"``, ``"r"``, ...), or ``"proj"``.
        shape: ``(rows, cols)`` for matrices, ``(N,)`` for biases.
        offset: element offset in the params buffer.
    """

    kind: Literal["matrix", "bias"]
    pseudo_layer: int
    lin_layer_id: int
    side: Literal["input", "recurrent", "projection"]
    gate: str
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def stop(self) -> int:
        return self.offset + self.size

    def describe(self) -> str:
        where = f"pseudo-layer {self.pseudo_layer}"
        if self.side == "projection":
            return f"{where} projection matrix (linLayerID {PROJECTION_ID})"
        return f"{where} {self.side} {self.kind} of gate {self.gate!r} (linLayerID {self.lin_layer_id})"


@dataclass(frozen=True)
class ParamsLayout:
    """Every entry of one configuration's params buffer.

    Attributes:
        config: the configuration (only its ``layout_key`` fields matter).
        weights: matrices in canonical order.
        biases: biases in canonical order.
        size: total number of elements (``cudnn_rnn_params_size``).
    """

    config: RNNConfig
    weights: tuple[ParamEntry, ...]
    biases: tuple[ParamEntry, ...]
    size: int

    def entry(self, pseudo_layer: int, lin_layer_id: int, kind: str = "matrix") -> ParamEntry | None:
        """The entry for (pseudo_layer, lin_layer_id, kind), or None when it is absent."""
        return self._index.get((pseudo_layer, lin_layer_id, kind))

    @functools.cached_property
    def _index(self) -> dict[tuple[int, int, str], ParamEntry]:
        return {(e.pseudo_layer, e.lin_layer_id, e.kind): e for e in self.weights + self.biases}

    def view(self, params: Any, entry: ParamEntry) -> Any:
        """A view of ``entry`` inside the 1-D ``params`` array (writes go through)."""
        return params[entry.offset:entry.stop].reshape(entry.shape)

    def gate_block(self, params: Any, pseudo_layer: int, side: str) -> Any:
        """The G stacked input or recurrent matrices of one pseudo-layer as a [G*N, width] view.

        Gates of one side are contiguous in the buffer, so this is a view, not a copy.
        Returns None for layer 0's input side under skip_input.
        """
        g = self.config.num_gates
        first = 0 if side == "input" else g
        head = self.entry(pseudo_layer, first, "matrix")
        if head is None:
            return None
        rows = g * head.shape[0]
        return params[head.offset:head.offset + rows * head.shape[1]].reshape(rows, head.shape[1])

    def bias_block(self, params: Any, pseudo_layer: int, side: str) -> Any:
        """The G stacked input or recurrent biases of one pseudo-layer as a [G*N] view (or None)."""
        g = self.config.num_gates
        first = 0 if side == "input" else g
        head = self.entry(pseudo_layer, first, "bias")
        if head is None:
            return None
        return params[head.offset:head.offset + g * head.shape[0]]

    def projection(self, params: Any, pseudo_layer: int) -> Any:
        """The [P, N] projection matrix view of one pseudo-layer (None without projection)."""
        entry = self.entry(pseudo_layer, PROJECTION_ID, "matrix")
        return None if entry is None else self.view(params, entry)


def _entries(config: RNNConfig, facts: LayoutAssumptions) -> tuple[list, list, int]:
    """Walk cuDNN's buffer order and return (canonical weights, canonical biases, size)."""
    g, n, p = config.num_gates, config.num_units, config.state_size
    d = config.num_directions
    gates = config.mode.gates
    offset = 0

    def make(kind: str, k: int, lin_id: int, shape: tuple[int, ...]) -> ParamEntry:
        nonlocal offset
        if lin_id == PROJECTION_ID:
            side, gate = "projection", "proj"
        else:
            side, gate = ("input" if lin_id < g else "recurrent"), gates[lin_id % g]
        entry = ParamEntry(kind, k, lin_id, side, gate, shape, offset)  # type: ignore[arg-type]
        offset += entry.size
        return entry

    matrices: dict[tuple[int, int], ParamEntry] = {}
    projections: dict[int, ParamEntry] = {}

    def add_projection(k: int) -> None:
        projections[k] = make("matrix", k, PROJECTION_ID, (p, n))

    for k in range(config.num_pseudo_layers):
        layer = k // d
        width = config.layer_input_size(layer)
        for lin_id in range(2 * g):
            is_input = lin_id < g
            if is_input and layer == 0 and config.skip_input:
                continue
            matrices[k, lin_id] = make("matrix", k, lin_id, (n, width if is_input else p))
        if config.num_proj and facts.projection_position == "after_pseudo_layer":
            add_projection(k)
    if config.num_proj and facts.projection_position == "after_all_matrices":
        for k in range(config.num_pseudo_layers):
            add_projection(k)

    biases: list[ParamEntry] = []
    for k in range(config.num_pseudo_layers):
        for lin_id in range(2 * g):
            is_input = lin_id < g
            if is_input and k < d and config.skip_input and not facts.skip_input_keeps_input_biases:
                continue
            biases.append(make("bias", k, lin_id, (n,)))

    weights: list[ParamEntry] = []
    for k in range(config.num_pseudo_layers):
        weights.extend(matrices[k, i] for i in range(2 * g) if (k, i) in matrices)
        if k in projections:
            weights.append(projections[k])
    return weights, biases, offset


@functools.lru_cache(maxsize=256)
def _cached_layout(key: tuple, facts: LayoutAssumptions) -> ParamsLayout:
    mode, input_mode, direction, layers, units, input_size, proj = key
    config = RNNConfig(mode, layers, units, input_size, input_mode=input_mode, direction=direction, num_proj=proj)
    weights, biases, size = _entries(config, facts)
    return ParamsLayout(config, tuple(weights), tuple(biases), size)


def params_size(config: RNNConfig, facts: LayoutAssumptions | None = None) -> int:
    """The number of elements of ``config``'s params buffer, without walking it (``params_layout(config).size``).

    Per pseudo-layer: G*N*width input matrices (none for layer 0 under skip_input), G*N*P recurrent
    matrices, the P*N projection, 2*G*N biases (layer 0's input biases under skip_input as
    ``facts`` say). Checking a size against this costs nothing however many layers a
    configuration (from a file, say) claims.
    """
    facts = facts or UNCONFIRMED
    g, n, p, d = config.num_gates, config.num_units, config.state_size, config.num_directions
    first_width = 0 if config.skip_input else config.input_size
    matrices = d * g * n * (first_width + (config.num_layers - 1) * config.output_size)
    per_pseudo_layer = g * n * p + (p * n if config.num_proj else 0) + 2 * g * n
    dropped_biases = d * g * n if config.skip_input and not facts.skip_input_keeps_input_biases else 0
    return matrices + config.num_pseudo_layers * per_pseudo_layer - dropped_biases


def params_layout(config: RNNConfig, facts: LayoutAssumptions | None = None) -> ParamsLayout:
    """The (cached) layout of ``config``'s params buffer."""
    return _cached_layout(config.layout_key, facts or UNCONFIRMED)


def _layout_config(num_layers: int, num_units: int, input_size: int, rnn_mode: str, input_mode: str,
                   direction: str, num_proj: int, dtype: object = "float32") -> RNNConfig:
    return RNNConfig(rnn_mode, num_layers, num_units, input_size, input_mode=input_mode,
                     direction=direction, num_proj=num_proj, dtype=dtype_name(dtype))


def cudnn_rnn_params_size(num_layers: int, num_units: int, input_size: int, *, rnn_mode: str = "lstm",
                          input_mode: str = "linear_input", direction: str = "unidirectional",
                          num_proj: int = 0, dtype: object = "float32") -> int:
    """Number of elements of the params buffer (cuDNN's weight-space size / element size).

    Equivalent of TF's ``CudnnRNNParamsSize``; returns a Python int.
    """
    config = _layout_config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj, dtype)
    return params_layout(config).size


def cudnn_rnn_params_to_canonical(num_layers: int, num_units: int, input_size: int, params: Any, *,
                                  rnn_mode: str = "lstm", input_mode: str = "linear_input",
                                  direction: str = "unidirectional",
                                  num_proj: int = 0) -> tuple[list[Any], list[Any]]:
    """Split a params buffer into canonical matrices and biases (TF's CudnnRNNParamsToCanonical).

    Args:
        params: 1-D array of ``cudnn_rnn_params_size(...)`` elements (NumPy or CuPy).

    Returns:
        ``(weights, biases)``: per pseudo-layer k, the matrices in linLayerID order ([N, width]
        input, [N, P] recurrent) then the [P, N] projection; and the 2G biases [N]. Each is a
        fresh copy. Under skip_input, layer 0's input matrices are not listed.
    """
    xp = array_module(params=params)
    config = _layout_config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
    layout = params_layout(config)
    if params.ndim != 1 or params.shape[0] != layout.size:
        raise ValueError(f"params must be 1-D with {layout.size} elements for this configuration; "
                         f"got shape {tuple(params.shape)}")
    dtype_name(params.dtype, "params.dtype")
    weights = [xp.array(layout.view(params, e)) for e in layout.weights]
    biases = [xp.array(layout.view(params, e)) for e in layout.biases]
    return weights, biases


def cudnn_rnn_canonical_to_params(num_layers: int, num_units: int, input_size: int, weights: Sequence[Any],
                                  biases: Sequence[Any], *, rnn_mode: str = "lstm",
                                  input_mode: str = "linear_input", direction: str = "unidirectional",
                                  num_proj: int = 0) -> Any:
    """Pack canonical matrices and biases into a params buffer (TF's CudnnRNNCanonicalToParams).

    ``weights`` and ``biases`` are ordered as :func:`cudnn_rnn_params_to_canonical` returns them.
    All must be arrays of one kind and one floating dtype; the result has that dtype.

    Raises:
        ValueError: a wrong number of weights or biases, or an entry of the wrong shape
            (the message names the entry).
        TypeError: mixed array kinds or dtypes.
    """
    config = _layout_config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
    layout = params_layout(config)
    for name, value in (("weights", weights), ("biases", biases)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of arrays; got {type(value).__name__}")
    weights, biases = list(weights), list(biases)
    for name, given, expected in (("weights", weights, layout.weights), ("biases", biases, layout.biases)):
        if len(given) != len(expected):
            raise ValueError(f"{name} must have {len(expected)} entries for this configuration; got {len(given)}")
    arrays = {f"weights[{i}]": w for i, w in enumerate(weights)}
    arrays.update({f"biases[{i}]": b for i, b in enumerate(biases)})
    xp = array_module(**arrays)
    dtypes = {str(a.dtype) for a in arrays.values()}
    if len(dtypes) > 1:
        raise TypeError(f"weights and biases must share one dtype; got {sorted(dtypes)}")
    dtype = dtype_name(next(iter(dtypes)) if dtypes else "float32", "weights dtype")
    params = xp.zeros(layout.size, dtype=dtype)
    for name, given, expected in (("weights", weights, layout.weights), ("biases", biases, layout.biases)):
        for i, (array, entry) in enumerate(zip(given, expected)):
            if tuple(array.shape) != entry.shape:
                raise ValueError(f"{name}[{i}] ({entry.describe()}) must have shape {entry.shape}; "
                                 f"got {tuple(array.shape)}")
            layout.view(params, entry)[...] = array
    return params
