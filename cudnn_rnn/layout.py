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
import math
from dataclasses import dataclass
from typing import Literal, Sequence

from ._arrays import Array, array_module
from .config import LayoutKey, RNNConfig, dtype_name, params_element_count

__all__ = [
    "LayoutAssumptions",
    "UNCONFIRMED",
    "ParamEntry",
    "ParamsLayout",
    "params_layout",
    "params_size",
    "entry_counts",
    "PROJECTION_ID",
    "cudnn_rnn_params_size",
    "cudnn_rnn_params_to_canonical",
    "cudnn_rnn_canonical_to_params",
]

#: cuDNN's linLayerID of the LSTM projection matrix.
PROJECTION_ID = 8


@dataclass(frozen=True)
class LayoutAssumptions:
    """Open questions about cuDNN's weight space, answered as data.

    Everything the public sources leave open is in this one record. tests/gpu/test_layout_cudnn.py asks
    cudnnGetRNNWeightParams on a GPU and fails, naming the field, where cuDNN disagrees: settle it by
    changing the values of :data:`UNCONFIRMED`, never the code that walks the table. Each argument is
    kept as the attribute of the same name.

    Args:
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


#: The layout facts in use, the defaults of :class:`LayoutAssumptions` until a GPU run confirms or corrects them.
UNCONFIRMED = LayoutAssumptions()


@dataclass(frozen=True)
class ParamEntry:
    """One matrix or bias of the params buffer.

    Each argument is kept as the attribute of the same name.

    Args:
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
        """The number of elements, the product of ``shape``."""
        return math.prod(self.shape)

    @property
    def stop(self) -> int:
        """The element offset just past the entry, ``offset + size``."""
        return self.offset + self.size

    def describe(self) -> str:
        """The entry in words, for messages.

        Returns:
            Its pseudo-layer, side, kind, gate and linLayerID, e.g.
            ``"pseudo-layer 1 input matrix of gate 'f' (linLayerID 1)"``.
        """
        where = f"pseudo-layer {self.pseudo_layer}"
        if self.side == "projection":
            return f"{where} projection matrix (linLayerID {PROJECTION_ID})"
        return f"{where} {self.side} {self.kind} of gate {self.gate!r} (linLayerID {self.lin_layer_id})"


@dataclass(frozen=True)
class ParamsLayout:
    """Every entry of one configuration's params buffer.

    Each argument is kept as the attribute of the same name. The methods take ``params``, a [size]
    params buffer of this layout (NumPy or CuPy) or its gradient, and ``pseudo_layer``, k = layer * D
    + dir, and return views into ``params`` (writes go through).

    Args:
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
        """Look an entry up by its cuDNN coordinates.

        Args:
            pseudo_layer, lin_layer_id, kind: as :class:`ParamEntry`'s.

        Returns:
            The entry, or None when the buffer has none there (layer 0's input matrices under
            skip_input, a projection's bias, an ID out of range).
        """
        return self._index.get((pseudo_layer, lin_layer_id, kind))

    @functools.cached_property
    def _index(self) -> dict[tuple[int, int, str], ParamEntry]:
        return {(e.pseudo_layer, e.lin_layer_id, e.kind): e for e in self.weights + self.biases}

    def view(self, params: Array, entry: ParamEntry) -> Array:
        """A view of one entry inside a params buffer.

        Args:
            params: the buffer.
            entry: one of this layout's ``weights`` or ``biases``.

        Returns:
            The view, shaped ``entry.shape``.
        """
        return params[entry.offset:entry.stop].reshape(entry.shape)

    def gate_block(self, params: Array, pseudo_layer: int, side: str) -> Array:
        """The G stacked input or recurrent matrices of one pseudo-layer as one view.

        Gates of one side are contiguous in the buffer, so this is a view, not a copy.

        Args:
            params, pseudo_layer: the buffer and k.
            side: ``"input"`` or ``"recurrent"``.

        Returns:
            The [G*N, width] view (width = the layer's input width, or P for the recurrent
            side); None for layer 0's input side under skip_input.
        """
        return self._block(params, pseudo_layer, side, "matrix")

    def bias_block(self, params: Array, pseudo_layer: int, side: str) -> Array:
        """The G stacked input or recurrent biases of one pseudo-layer as one view.

        Args:
            params, pseudo_layer: the buffer and k.
            side: ``"input"`` or ``"recurrent"``.

        Returns:
            The [G*N] view, or None where the layout has no such biases.
        """
        return self._block(params, pseudo_layer, side, "bias")

    def _block(self, params: Array, pseudo_layer: int, side: str, kind: str) -> Array:
        g = self.config.num_gates
        head = self.entry(pseudo_layer, 0 if side == "input" else g, kind)
        if head is None:
            return None
        return params[head.offset:head.offset + g * head.size].reshape(g * head.shape[0], *head.shape[1:])

    def projection(self, params: Array, pseudo_layer: int) -> Array:
        """The projection matrix of one pseudo-layer as a view.

        Args:
            params, pseudo_layer: the buffer and k.

        Returns:
            The [P, N] view, or None without projection.
        """
        entry = self.entry(pseudo_layer, PROJECTION_ID, "matrix")
        return None if entry is None else self.view(params, entry)


def _entries(config: RNNConfig, facts: LayoutAssumptions) -> tuple[list[ParamEntry], list[ParamEntry], int]:
    """Walk cuDNN's buffer order and return (canonical weights, canonical biases, size)."""
    g, n, p = config.num_gates, config.num_units, config.state_size
    d = config.num_directions
    gates = config.mode.gates
    offset = 0

    def make(kind: Literal["matrix", "bias"], k: int, lin_id: int, shape: tuple[int, ...]) -> ParamEntry:
        nonlocal offset
        side: Literal["input", "recurrent", "projection"]
        if lin_id == PROJECTION_ID:
            side, gate = "projection", "proj"
        else:
            side, gate = ("input" if lin_id < g else "recurrent"), gates[lin_id % g]
        entry = ParamEntry(kind, k, lin_id, side, gate, shape, offset)
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
def _cached_layout(key: LayoutKey, facts: LayoutAssumptions) -> ParamsLayout:
    mode, input_mode, direction, layers, units, input_size, proj = key
    config = RNNConfig(mode, layers, units, input_size, input_mode=input_mode, direction=direction, num_proj=proj)
    weights, biases, size = _entries(config, facts)
    return ParamsLayout(config, tuple(weights), tuple(biases), size)


def params_size(config: RNNConfig, facts: LayoutAssumptions | None = None) -> int:
    """The number of elements of ``config``'s params buffer, without walking it (``params_layout(config).size``).

    The closed form of :func:`cudnn_rnn.config.params_element_count` with ``facts``' biases: checking a
    size against this costs nothing however many layers a configuration (from a file, say) claims.

    Args:
        config: the configuration.
        facts: the layout facts to assume; :data:`UNCONFIRMED` by default.

    Returns:
        The element count, a Python int.
    """
    facts = facts or UNCONFIRMED
    return params_element_count(config, skip_input_keeps_input_biases=facts.skip_input_keeps_input_biases)


def entry_counts(config: RNNConfig, facts: LayoutAssumptions | None = None) -> tuple[int, int]:
    """The numbers of canonical weights and biases, without walking the layout.

    ``(len(params_layout(config).weights), len(params_layout(config).biases))``: the entries of the
    module docstring's layout, counted in closed form.

    Args:
        config: the configuration.
        facts: the layout facts to assume; :data:`UNCONFIRMED` by default.

    Returns:
        ``(weights, biases)``, Python ints.
    """
    facts = facts or UNCONFIRMED
    g, d, k = config.num_gates, config.num_directions, config.num_pseudo_layers
    skipped = d * g if config.skip_input else 0
    weights = k * 2 * g - skipped + (k if config.num_proj else 0)
    biases = k * 2 * g - (0 if facts.skip_input_keeps_input_biases else skipped)
    return weights, biases


def params_layout(config: RNNConfig, facts: LayoutAssumptions | None = None) -> ParamsLayout:
    """The layout of ``config``'s params buffer (cached: equal layout keys give the same object).

    Args:
        config: the configuration (only its ``layout_key`` fields matter).
        facts: the layout facts to assume; :data:`UNCONFIRMED` by default.
    """
    return _cached_layout(config.layout_key, facts or UNCONFIRMED)


def _layout_config(num_layers: int, num_units: int, input_size: int, rnn_mode: str, input_mode: str,
                   direction: str, num_proj: int, dtype: object = "float32") -> RNNConfig:
    return RNNConfig(rnn_mode, num_layers, num_units, input_size, input_mode=input_mode,
                     direction=direction, num_proj=num_proj, dtype=dtype_name(dtype))


def cudnn_rnn_params_size(num_layers: int, num_units: int, input_size: int, *, rnn_mode: str = "lstm",
                          input_mode: str = "linear_input", direction: str = "unidirectional",
                          num_proj: int = 0, dtype: object = "float32") -> int:
    """Number of elements of the params buffer (cuDNN's weight-space size / element size).

    Equivalent of TF's ``CudnnRNNParamsSize``.

    Args:
        num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj: the
            configuration, as the :class:`~cudnn_rnn.config.RNNConfig` fields of those names.
        dtype: one of :data:`cudnn_rnn.config.DTYPES` (or that NumPy dtype); checked, but the count
            does not depend on it.

    Returns:
        The element count, a Python int.

    Raises:
        TypeError: a size that is not an integer, a mode that is not a string, or an unsupported dtype.
        ValueError: an unknown mode string, a non-positive size, an impossible combination, or
            sizes whose buffer no array of ``dtype`` can hold (see :class:`cudnn_rnn.RNNConfig`).
    """
    config = _layout_config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj, dtype)
    return params_size(config)


def cudnn_rnn_params_to_canonical(num_layers: int, num_units: int, input_size: int, params: Array, *,
                                  rnn_mode: str = "lstm", input_mode: str = "linear_input",
                                  direction: str = "unidirectional",
                                  num_proj: int = 0) -> tuple[list[Array], list[Array]]:
    """Split a params buffer into canonical matrices and biases (TF's CudnnRNNParamsToCanonical).

    Args:
        num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj: the
            configuration, as the :class:`~cudnn_rnn.config.RNNConfig` fields of those names.
        params: [params_size]: the buffer (NumPy or CuPy, of a :data:`~cudnn_rnn.config.DTYPES` dtype).

    Returns:
        ``(weights, biases)`` in the canonical form, shaped as the layout of :mod:`cudnn_rnn.layout`
        says; each a fresh copy of ``params``' kind and dtype.

    Raises:
        TypeError: ``params`` is not a NumPy or CuPy array or has an unsupported dtype, or an
            attribute has the wrong type.
        ValueError: ``params`` is not 1-D with the configuration's size (checked in closed form
            before any per-layer work), or an attribute is invalid.
    """
    xp = array_module(params=params)
    dtype = dtype_name(params.dtype, "params.dtype")
    config = _layout_config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj, dtype)
    size = params_size(config)
    if params.ndim != 1 or params.shape[0] != size:
        raise ValueError(f"params must be 1-D with {size} elements for this configuration; "
                         f"got shape {tuple(params.shape)}")
    layout = params_layout(config)
    weights = [xp.array(layout.view(params, e)) for e in layout.weights]
    biases = [xp.array(layout.view(params, e)) for e in layout.biases]
    return weights, biases


def cudnn_rnn_canonical_to_params(num_layers: int, num_units: int, input_size: int, weights: Sequence[Array],
                                  biases: Sequence[Array], *, rnn_mode: str = "lstm",
                                  input_mode: str = "linear_input", direction: str = "unidirectional",
                                  num_proj: int = 0) -> Array:
    """Pack canonical matrices and biases into a params buffer (TF's CudnnRNNCanonicalToParams).

    All arrays must be of one kind and one floating dtype; the result has that dtype.

    Args:
        num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj: the
            configuration, as the :class:`~cudnn_rnn.config.RNNConfig` fields of those names.
        weights, biases: lists of the matrices and biases in the order and shapes
            :func:`cudnn_rnn_params_to_canonical` returns them.

    Returns:
        [params_size]: a new params buffer of the arrays' kind and dtype.

    Raises:
        ValueError: a wrong number of weights or biases (compared in closed form before any
            per-layer work), an entry of the wrong shape (the message names the entry), or an
            attribute :class:`cudnn_rnn.RNNConfig` refuses.
        TypeError: ``weights`` or ``biases`` not a list, mixed array kinds or dtypes, or an
            unsupported dtype.
    """
    config = _layout_config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
    for name, value in (("weights", weights), ("biases", biases)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of arrays; got {type(value).__name__}")
    weights, biases = list(weights), list(biases)
    for name, given, count in zip(("weights", "biases"), (weights, biases), entry_counts(config)):
        if len(given) != count:
            raise ValueError(f"{name} must have {count} entries for this configuration; got {len(given)}")
    layout = params_layout(config)
    arrays = {f"weights[{i}]": w for i, w in enumerate(weights)}
    arrays.update({f"biases[{i}]": b for i, b in enumerate(biases)})
    xp = array_module(**arrays)
    dtypes = {str(a.dtype) for a in arrays.values()}
    if len(dtypes) > 1:
        raise TypeError(f"weights and biases must share one dtype; got {sorted(dtypes)}")
    dtype = dtype_name(next(iter(dtypes)) if dtypes else "float32", "weights dtype")
    pairs = [(name, i, array, entry) for name, given, expected in (("weights", weights, layout.weights),
                                                                   ("biases", biases, layout.biases))
             for i, (array, entry) in enumerate(zip(given, expected))]
    for name, i, array, entry in pairs:  # every shape before the buffer is made
        if tuple(array.shape) != entry.shape:
            raise ValueError(f"{name}[{i}] ({entry.describe()}) must have shape {entry.shape}; "
                             f"got {tuple(array.shape)}")
    params = xp.zeros(layout.size, dtype=dtype)
    for _, _, array, entry in pairs:
        layout.view(params, entry)[...] = array
    return params
