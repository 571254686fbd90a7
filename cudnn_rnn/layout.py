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
import itertools
import math
from dataclasses import dataclass, field
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
    changing the values of :data:`UNCONFIRMED`, never the code that walks the table.

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


class _Sized:
    """What has a ``shape`` and so a ``size``: entries and their slots."""

    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        """The number of elements, the product of ``shape``."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class ParamEntry(_Sized):
    """One matrix or bias of the params buffer.

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
    def stop(self) -> int:
        """The element offset just past the entry, ``offset + size``."""
        return self.offset + self.size

    def describe(self) -> str:
        """The entry in words, for messages: ``"pseudo-layer 1 input matrix of gate 'f' (linLayerID 1)"``."""
        where = f"pseudo-layer {self.pseudo_layer}"
        if self.side == "projection":
            return f"{where} projection matrix (linLayerID {PROJECTION_ID})"
        return f"{where} {self.side} {self.kind} of gate {self.gate!r} (linLayerID {self.lin_layer_id})"


@dataclass(frozen=True)
class _Slot(_Sized):
    """Where one entry of a pseudo-layer sits in that pseudo-layer's part of a :class:`_Region`.

    Args:
        kind, lin_layer_id, shape: as :class:`ParamEntry`'s.
        offset: elements from the start of the pseudo-layer's part to the entry.
    """

    kind: Literal["matrix", "bias"]
    lin_layer_id: int
    shape: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class _Region:
    """A stretch of the buffer that holds one part per pseudo-layer, k = 0 .. L*D-1 in turn, end to end.

    Args:
        start: the element offset of the region.
        directions: D.
        patterns: the slots of a part of layer 0's pseudo-layers, then of a layer above's, each in buffer
            order, end to end from 0.
        strides: the elements of each pattern's part.
    """

    start: int
    directions: int
    patterns: tuple[tuple[_Slot, ...], tuple[_Slot, ...]]
    strides: tuple[int, int]

    def begin(self, pseudo_layer: int) -> int:
        """The element offset of ``pseudo_layer``'s part."""
        d = self.directions
        return self.start + min(pseudo_layer, d) * self.strides[0] + max(pseudo_layer - d, 0) * self.strides[1]


#: (kind, lin_layer_id) -> the slot of that entry in a pattern, with its region
_Where = dict[tuple[str, int], tuple[_Region, _Slot]]


@dataclass(frozen=True)
class ParamsLayout:
    """Every entry of one configuration's params buffer, from a table of two patterns per region.

    Each loop of the layout above (a region) is held as two patterns, a pseudo-layer of layer 0's and one
    of a layer above's, so where pseudo-layer k's entries sit is arithmetic and a lookup costs the same
    however many layers there are. Only :attr:`weights` and :attr:`biases` list them all (when first asked).

    The methods take ``params``, a [size] params buffer of this layout (NumPy or CuPy) or its
    gradient, and ``pseudo_layer``, k = layer * D + dir, and return views into ``params`` (writes go
    through).

    Args:
        config: the configuration (only its ``layout_key`` fields matter).
        facts: the layout facts assumed.

    Attributes:
        size: total number of elements (``cudnn_rnn_params_size``).
    """

    config: RNNConfig
    facts: LayoutAssumptions
    size: int = field(init=False)
    _regions: tuple[_Region, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        regions, size = _regions(self.config, self.facts)
        object.__setattr__(self, "_regions", regions)
        object.__setattr__(self, "size", size)

    @functools.cached_property
    def weights(self) -> tuple[ParamEntry, ...]:
        """The matrices in canonical order (per pseudo-layer, by linLayerID, the projection last)."""
        return self._listed("matrix")

    @functools.cached_property
    def biases(self) -> tuple[ParamEntry, ...]:
        """The biases in canonical order (per pseudo-layer, by linLayerID)."""
        return self._listed("bias")

    def _listed(self, kind: str) -> tuple[ParamEntry, ...]:
        patterns = [sorted((slot.lin_layer_id, region, slot) for region, slot in where.values() if slot.kind == kind)
                    for where in self._where]
        d = self.config.num_directions
        return tuple(self._entry(k, region, slot) for k in range(self.config.num_pseudo_layers)
                     for _, region, slot in patterns[k >= d])

    @functools.cached_property
    def _where(self) -> tuple[_Where, ...]:
        """Per pattern (layer 0's pseudo-layers, those above), each entry's region and slot."""
        return tuple({(slot.kind, slot.lin_layer_id): (region, slot) for region in self._regions
                      for slot in region.patterns[above]} for above in (0, 1))

    def _entry(self, pseudo_layer: int, region: _Region, slot: _Slot) -> ParamEntry:
        g, lin_id = self.config.num_gates, slot.lin_layer_id
        side: Literal["input", "recurrent", "projection"]
        if lin_id == PROJECTION_ID:
            side, gate = "projection", "proj"
        else:
            side, gate = ("input" if lin_id < g else "recurrent"), self.config.mode.gates[lin_id % g]
        offset = region.begin(pseudo_layer) + slot.offset
        return ParamEntry(slot.kind, pseudo_layer, lin_id, side, gate, slot.shape, offset)

    def _find(self, pseudo_layer: int, lin_layer_id: int, kind: str) -> tuple[_Region, _Slot] | None:
        if not 0 <= pseudo_layer < self.config.num_pseudo_layers:
            return None
        return self._where[pseudo_layer >= self.config.num_directions].get((kind, lin_layer_id))

    def entry(self, pseudo_layer: int, lin_layer_id: int, kind: str = "matrix") -> ParamEntry | None:
        """The entry at these cuDNN coordinates (as :class:`ParamEntry`'s), or None when the buffer has none there
        (layer 0's input matrices under skip_input, a projection's bias, an ID or pseudo-layer out of range)."""
        found = self._find(pseudo_layer, lin_layer_id, kind)
        return None if found is None else self._entry(pseudo_layer, *found)

    def runs(self) -> tuple[range, ...]:
        """The pseudo-layers in runs whose entries have the same shapes and lie equally far apart: layer 0's
        ``range(0, D)`` and, with more than one layer, ``range(D, L*D)`` (what :meth:`stack` takes)."""
        d, k = self.config.num_directions, self.config.num_pseudo_layers
        return (range(0, d),) + ((range(d, k),) if k > d else ())

    def view(self, params: Array, entry: ParamEntry) -> Array:
        """A view, shaped ``entry.shape``, of one of this layout's ``weights`` or ``biases`` inside ``params``."""
        return params[entry.offset:entry.stop].reshape(entry.shape)

    def stack(self, params: Array, pseudo_layers: range, lin_layer_id: int, kind: str = "matrix",
              count: int = 1) -> Array:
        """``count`` entries of each of several pseudo-layers, from linLayerID ``lin_layer_id`` on, as one view.

        Args:
            params: the buffer.
            pseudo_layers: consecutive pseudo-layers (step 1) inside one of :meth:`runs`.
            lin_layer_id, kind: the first entry's, as :class:`ParamEntry`'s.
            count: how many entries of consecutive linLayerIDs (they lie end to end: the G gates of one side).

        Returns:
            The ``[len(pseudo_layers), count*rows, cols]`` view (``[len(pseudo_layers), count*rows]`` for
            biases), or None where the buffer has no such entry.

        Raises:
            ValueError: ``pseudo_layers`` not consecutive inside one run, or ``count`` entries from
                ``lin_layer_id`` on that are not all there with one shape.
        """
        found = self._head(pseudo_layers, lin_layer_id, kind, count)
        if found is None:
            return None
        region, head = found
        base, stride = region.begin(pseudo_layers.start), region.strides[pseudo_layers.start >= region.directions]
        parts = params[base:base + len(pseudo_layers) * stride].reshape(len(pseudo_layers), stride)
        block = parts[:, head.offset:head.offset + count * head.size]
        return block.reshape(len(pseudo_layers), count * head.shape[0], *head.shape[1:])

    def _head(self, pseudo_layers: range, lin_layer_id: int, kind: str, count: int) -> tuple[_Region, _Slot] | None:
        """The region and slot, in the first of ``pseudo_layers``, of the first of ``count`` entries of consecutive
        linLayerIDs, or None where the buffer has no entry ``lin_layer_id``. ValueError unless ``pseudo_layers`` are
        consecutive pseudo-layers inside one of :meth:`runs` and the entries lie end to end with one shape."""
        if pseudo_layers.step != 1 or not any(pseudo_layers.start in run and pseudo_layers.stop - 1 in run
                                              for run in self.runs()):
            raise ValueError(f"pseudo_layers must be consecutive pseudo-layers inside one of {self.runs()}; "
                             f"got {pseudo_layers}")
        found = self._find(pseudo_layers.start, lin_layer_id, kind)
        if found is None:
            return None
        head = found[1]
        tail = self._find(pseudo_layers.start, lin_layer_id + count - 1, kind)
        if tail is None or tail[1].shape != head.shape or tail[1].offset != head.offset + (count - 1) * head.size:
            raise ValueError(f"{count} {kind} entries from linLayerID {lin_layer_id} on are not one block")
        return found

    def block_span(self, pseudo_layer: int, side: str, kind: str) -> tuple[int, tuple[int, ...]] | None:
        """Where the G stacked entries of one ``side`` of a pseudo-layer lie (:meth:`gate_block` for ``kind``
        ``"matrix"``, :meth:`bias_block` for ``"bias"``): (the first element's offset, the block's shape), or None
        where the layout has none. Worked out once per layout and arguments: a call's weights cost a slice each."""
        key = (pseudo_layer, side == "input", kind == "bias")
        if key not in self._spans:
            g = self.config.num_gates
            found = self._head(range(pseudo_layer, pseudo_layer + 1), 0 if side == "input" else g, kind, g)
            span = None
            if found is not None:
                region, head = found
                span = (region.begin(pseudo_layer) + head.offset, (g * head.shape[0], *head.shape[1:]))
            self._spans[key] = span
        return self._spans[key]

    @functools.cached_property
    def _spans(self) -> dict[tuple[int, bool, bool], tuple[int, tuple[int, ...]] | None]:
        return {}

    def gate_block(self, params: Array, pseudo_layer: int, side: str) -> Array:
        """The G stacked matrices of one ``side`` (``"input"`` or ``"recurrent"``) of a pseudo-layer, as one view:
        [G*N, width] (the layer's input width, or P for the recurrent side); None for layer 0's input side under
        skip_input."""
        return self._block(params, pseudo_layer, side, "matrix")

    def bias_block(self, params: Array, pseudo_layer: int, side: str) -> Array:
        """The G stacked biases of one ``side`` of a pseudo-layer as one [G*N] view; None where the layout has none."""
        return self._block(params, pseudo_layer, side, "bias")

    def _block(self, params: Array, pseudo_layer: int, side: str, kind: str) -> Array:
        span = self.block_span(pseudo_layer, side, kind)
        if span is None:
            return None
        start, shape = span
        return params[start:start + math.prod(shape)].reshape(shape)

    def projection(self, params: Array, pseudo_layer: int) -> Array:
        """The [P, N] projection matrix of one pseudo-layer as a view; None without projection."""
        entry = self.entry(pseudo_layer, PROJECTION_ID, "matrix")
        return None if entry is None else self.view(params, entry)


#: an entry as the walk of cuDNN's buffer order meets it: (kind, lin_layer_id, shape)
_Walked = tuple[Literal["matrix", "bias"], int, tuple[int, ...]]


def _patterns(config: RNNConfig, facts: LayoutAssumptions, layer: int) -> list[list[_Walked]]:
    """Walk cuDNN's buffer order for one pseudo-layer of ``layer``: per region (the matrices, the projections
    after all matrices, the biases), its entries in buffer order."""
    g, n, p = config.num_gates, config.num_units, config.state_size
    width = config.layer_input_size(layer)
    skipped = layer == 0 and config.skip_input  # the input side of layer 0 under skip_input
    matrices: list[_Walked] = [("matrix", lin_id, (n, width if lin_id < g else p)) for lin_id in range(2 * g)
                               if not (skipped and lin_id < g)]
    projections: list[_Walked] = [("matrix", PROJECTION_ID, (p, n))] if config.num_proj else []
    biases: list[_Walked] = [("bias", lin_id, (n,)) for lin_id in range(2 * g)
                             if not (skipped and lin_id < g and not facts.skip_input_keeps_input_biases)]
    if facts.projection_position == "after_all_matrices":
        return [matrices, projections, biases]
    return [matrices + projections, [], biases]


def _regions(config: RNNConfig, facts: LayoutAssumptions) -> tuple[tuple[_Region, ...], int]:
    """The regions of ``config``'s buffer (a region no pseudo-layer has entries in left out) and its size."""
    d, k = config.num_directions, config.num_pseudo_layers
    regions: list[_Region] = []
    start = 0
    for first, above in zip(_patterns(config, facts, 0), _patterns(config, facts, 1)):
        patterns = tuple(tuple(_Slot(kind, lin_id, shape, offset) for (kind, lin_id, shape), offset in
                               zip(walk, itertools.accumulate((math.prod(shape) for _, _, shape in walk), initial=0)))
                         for walk in (first, above))
        strides = (sum(s.size for s in patterns[0]), sum(s.size for s in patterns[1]))
        if strides != (0, 0):
            regions.append(_Region(start, d, (patterns[0], patterns[1]), strides))
            start += d * strides[0] + (k - d) * strides[1]
    return tuple(regions), start


@functools.lru_cache(maxsize=256)
def _cached_layout(key: LayoutKey, facts: LayoutAssumptions) -> ParamsLayout:
    mode, input_mode, direction, layers, units, input_size, proj = key
    config = RNNConfig(mode, layers, units, input_size, input_mode=input_mode, direction=direction, num_proj=proj)
    return ParamsLayout(config, facts)


def params_size(config: RNNConfig, facts: LayoutAssumptions | None = None) -> int:
    """The number of elements of ``config``'s params buffer, without walking it (``params_layout(config).size``).

    The closed form of :func:`cudnn_rnn.config.params_element_count` with ``facts``' biases (:data:`UNCONFIRMED`
    by default): checking a size against this costs nothing however many layers a configuration claims.
    """
    facts = facts or UNCONFIRMED
    return params_element_count(config, skip_input_keeps_input_biases=facts.skip_input_keeps_input_biases)


def entry_counts(config: RNNConfig, facts: LayoutAssumptions | None = None) -> tuple[int, int]:
    """``(len(params_layout(config).weights), len(params_layout(config).biases))`` in closed form, without walking
    the layout (``facts``: :data:`UNCONFIRMED` by default)."""
    facts = facts or UNCONFIRMED
    g, d, k = config.num_gates, config.num_directions, config.num_pseudo_layers
    skipped = d * g if config.skip_input else 0
    weights = k * 2 * g - skipped + (k if config.num_proj else 0)
    biases = k * 2 * g - (0 if facts.skip_input_keeps_input_biases else skipped)
    return weights, biases


def params_layout(config: RNNConfig, facts: LayoutAssumptions | None = None) -> ParamsLayout:
    """The layout of ``config``'s params buffer under ``facts`` (:data:`UNCONFIRMED` by default), cached: equal
    layout keys give the same object."""
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
    pairs = list(zip(arrays.items(), layout.weights + layout.biases))  # the counts are checked above
    for (label, array), entry in pairs:  # every shape before the buffer is made
        if tuple(array.shape) != entry.shape:
            raise ValueError(f"{label} ({entry.describe()}) must have shape {entry.shape}; got {tuple(array.shape)}")
    params = xp.zeros(layout.size, dtype=dtype)
    for (_, array), entry in pairs:
        layout.view(params, entry)[...] = array
    return params
