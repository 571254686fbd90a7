"""The hub every format converts through: one pseudo-layer's weights in cuDNN's gate order.

A params buffer is unpacked (through :mod:`cudnn_rnn.layout`, the one source of truth for
where things sit) into a tuple of :class:`CellWeights`, one per pseudo-layer
k = layer * D + dir. Each format (its module's :class:`FormatSpec`) is then a pure rearrangement of
those arrays: gate blocks reordered, transposed, concatenated or summed, as its table says.

Shapes (G gates, N num_units, P = num_proj or N, width = I for layer 0 and D*P above)::

    input           W   [G*N, width]   gates stacked in cuDNN order (lstm i,f,g,o; gru r,u,n)
    recurrent       R   [G*N, P]
    input_bias      bW  [G*N]
    recurrent_bias  bR  [G*N]
    projection          [P, N]         LSTM with num_proj > 0, else None
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, cast

from .._arrays import Array, array_module
from .._checks import flag
from ..config import RNNConfig, dtype_name
from ..layout import params_layout, params_size
from ._reading import ConfigRead, TensorNames, TensorShapes


class InexactConversionError(ValueError):
    """The conversion would change the function the weights compute.

    Raised, naming the reason, unless the caller passes ``allow_approximation=True``; the
    result then lists what changed in :attr:`Converted.approximations`.
    """


@dataclass(frozen=True)
class Converted:
    """The result of a conversion.

    Attributes:
        value: ``dict[str, array]`` of named tensors (to a format, shaped as
            :func:`cudnn_rnn.convert.expected_shapes` says), or the 1-D ``[params_size]`` params
            array (from a format).
        approximations: empty when the result computes exactly the same function; otherwise
            one sentence per thing that changed.
    """

    value: Any
    approximations: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        """Whether the result computes exactly the same function (no approximations)."""
        return not self.approximations


class Notes:
    """Collects approximations; refuses the first one unless approximations are allowed."""

    def __init__(self, allow_approximation: bool) -> None:
        self.allow_approximation = flag("allow_approximation", allow_approximation)
        self.approximations: list[str] = []

    def approximate(self, sentence: str) -> None:
        """Record ``sentence``, or raise InexactConversionError when approximations are refused."""
        if not self.allow_approximation:
            raise InexactConversionError(f"{sentence} Pass allow_approximation=True to accept this.")
        if sentence not in self.approximations:
            self.approximations.append(sentence)


@dataclass(frozen=True)
class CellWeights:
    """The weights of one pseudo-layer, gates in cuDNN order (see the module docstring)."""

    input: Array | None
    recurrent: Array
    input_bias: Array
    recurrent_bias: Array
    projection: Array | None = None


# ---- format specs -------------------------------------------------------------------------------
@dataclass(frozen=True)
class OmittedBiases:
    """Biases a format's files may leave out (layers built without biases), read as zeros: the same function.

    Attributes:
        fields: the bias fields (of the format's :class:`TensorNames`).
        note: what a reader notes when they are left out; ``{layer}`` names the layer.
        per_layer: each layer may leave them out alone (ONNX's optional ``B``); else a network
            has all of them or none.
    """

    fields: tuple[str, ...]
    note: str
    per_layer: bool = False


def no_refusal(config: RNNConfig) -> None:
    """The refusal of a format that holds every configuration."""
    return None


@dataclass(frozen=True)
class FormatSpec:
    """One named format, the one record of its facts: what it can hold, its tensor names and shapes, its
    two directions, and how a reader recognises its files and reads their configuration (each format's
    module makes its ``SPEC``).

    Attributes:
        name: the format's name in :data:`cudnn_rnn.formats.FORMATS`.
        summary: one line for help texts.
        shapes: ``shapes(config)`` -> ``{tensor name: shape}``, in the format's own order.
        encode: ``encode(cells, config, notes, xp)`` -> ``{tensor name: array}``.
        decode: ``decode(tensors, config, notes, xp)`` -> cells (tensors already checked
            against ``shapes``).
        refusal: ``refusal(config)`` is None when the format can hold ``config``, else the
            reason it cannot (no approximation exists, so this is always an error).
        names: the tensor names by field, layer and direction; None where they depend on more
            (tf_cell's cell scopes).
        omitted_biases: the biases its files may leave out, or None.
        reading: ``reading(spec, tensors)`` -> the :class:`ConfigRead` that the names and shapes
            of ``tensors`` (:class:`TensorShapes`) tell, raising a ValueError where they do not
            form one RNN of the format; None where they cannot tell the sizes (canonical).
        signature: a pattern (``search``) matching names that only this format's tensors have:
            how a file of named tensors is recognised; by default ``names.signature()``.
    """

    name: str
    summary: str
    shapes: Callable[[RNNConfig], dict[str, tuple[int, ...]]]
    encode: Callable[..., dict[str, Array]]
    decode: Callable[..., tuple[CellWeights, ...]]
    refusal: Callable[[RNNConfig], str | None] = no_refusal
    names: TensorNames | None = None
    omitted_biases: OmittedBiases | None = None
    reading: Callable[["FormatSpec", TensorShapes], ConfigRead] | None = None
    signature: re.Pattern[str] | None = None

    def __post_init__(self) -> None:
        if self.signature is None and self.names is not None:
            object.__setattr__(self, "signature", self.names.signature())


def projection_refusal(fmt: str, why: str) -> Callable[[RNNConfig], str | None]:
    """The refusal of a format without an LSTM projection; ``why`` says what it lacks."""
    def refusal(config: RNNConfig) -> str | None:
        if config.num_proj:
            return (f"format {fmt!r} cannot hold an LSTM projection (num_proj={config.num_proj}): {why}; "
                    "use 'torch', 'tf_cell' or 'canonical'")
        return None
    return refusal


# ---- gate facts ---------------------------------------------------------------------------------
#: Gates whose two biases enter the math only as their sum bW + bR, so summing them into one
#: bias (or moving a bias from one slot to the other) is exact. GRU's candidate n is the
#: exception: its recurrent bias sits inside r * (R_n h + bR_n).
FOLDABLE_BIAS_GATES: dict[str, tuple[str, ...]] = {
    "rnn_relu": ("h",),
    "rnn_tanh": ("h",),
    "lstm": ("i", "f", "g", "o"),
    "gru": ("r", "u"),
}


def gate_order(orders: Mapping[str, Sequence[str]], config: RNNConfig) -> tuple[str, ...]:
    """A format's gate order for ``config``'s mode (cuDNN gate names), from its table.

    Single-gate modes (rnn_relu, rnn_tanh) need no table entry.
    """
    if config.num_gates == 1:
        return config.mode.gates
    return tuple(orders[config.rnn_mode])


def reorder_gates(stacked: Array, src: Sequence[str], dst: Sequence[str], xp: Any, axis: int = 0) -> Array:
    """Reorder the equal gate blocks of ``stacked`` along ``axis`` from order ``src`` to ``dst``.

    ``dst`` may name a subset of ``src`` (e.g. only r and u). Returns a new array.
    """
    blocks = dict(zip(src, xp.split(stacked, len(src), axis=axis)))
    return xp.concatenate([blocks[gate] for gate in dst], axis=axis)


def to_gate_order(cells: Sequence[CellWeights], config: RNNConfig, orders: Mapping[str, Sequence[str]],
                  xp: Any) -> tuple[CellWeights, ...]:
    """``cells`` as a format that reorders gates holds them: skip_input's identities written out, the gate
    blocks of every matrix and bias in the format's order (its table ``orders``, read by :func:`gate_order`)."""
    return _reordered(with_explicit_skip_input(cells, config, xp), config.mode.gates, gate_order(orders, config), xp)


def from_gate_order(cells: Sequence[CellWeights], config: RNNConfig, orders: Mapping[str, Sequence[str]],
                    xp: Any) -> tuple[CellWeights, ...]:
    """The cells of such a format (gate blocks in the order of its table ``orders``) in cuDNN's gate order."""
    return _reordered(cells, gate_order(orders, config), config.mode.gates, xp)


def _reordered(cells: Sequence[CellWeights], src: Sequence[str], dst: Sequence[str],
               xp: Any) -> tuple[CellWeights, ...]:
    """``cells`` with the gate blocks of their matrices and biases reordered from ``src`` to ``dst`` (new arrays)."""
    fields = ("input", "recurrent", "input_bias", "recurrent_bias")
    return tuple(dataclasses.replace(cell, **{field: reorder_gates(getattr(cell, field), src, dst, xp)
                                              for field in fields}) for cell in cells)


def pseudo_layers(config: RNNConfig) -> list[tuple[int, int, int]]:
    """``[(k, layer, direction), ...]`` for k = layer * D + direction."""
    return [(k, *divmod(k, config.num_directions)) for k in range(config.num_pseudo_layers)]


# ---- params <-> cells ---------------------------------------------------------------------------
def cells_from_params(params: Array, config: RNNConfig, xp: Any) -> tuple[CellWeights, ...]:
    """Copy every pseudo-layer's weights out of a params buffer.

    Absent entries (layer 0's input matrices under skip_input) are None; absent input biases
    (if cuDNN's layout drops them under skip_input) read as zeros, which is what they mean.
    """
    layout = params_layout(config)
    g, n = config.num_gates, config.num_units
    cells = []
    for k, _, _ in pseudo_layers(config):
        w = layout.gate_block(params, k, "input")
        bw = layout.bias_block(params, k, "input")
        proj = layout.projection(params, k)
        cells.append(CellWeights(
            input=None if w is None else xp.array(w),
            recurrent=xp.array(layout.gate_block(params, k, "recurrent")),
            input_bias=xp.zeros(g * n, dtype=params.dtype) if bw is None else xp.array(bw),
            recurrent_bias=xp.array(layout.bias_block(params, k, "recurrent")),
            projection=None if proj is None else xp.array(proj),
        ))
    return tuple(cells)


def params_from_cells(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any,
                      dtype: Any) -> Array:
    """Pack cells into a fresh params buffer of ``dtype``.

    If the layout has no slot for an input bias that is not zero, the bias is moved into the
    recurrent bias where the math only sees their sum (exact) and dropped, as an
    approximation, where it does not (GRU's candidate gate).
    """
    layout = params_layout(config)
    params = xp.zeros(layout.size, dtype=dtype)
    for (k, _, _), cell in zip(pseudo_layers(config), cells):
        if cell.input is not None:
            layout.gate_block(params, k, "input")[...] = cell.input
        layout.gate_block(params, k, "recurrent")[...] = cell.recurrent
        recurrent_bias = cell.recurrent_bias
        input_bias_slot = layout.bias_block(params, k, "input")
        if input_bias_slot is not None:
            input_bias_slot[...] = cell.input_bias
        elif bool(xp.any(cell.input_bias != 0)):
            recurrent_bias = _fold_homeless_input_bias(cell.input_bias, recurrent_bias, k, config, notes)
        layout.bias_block(params, k, "recurrent")[...] = recurrent_bias
        if cell.projection is not None:
            layout.projection(params, k)[...] = cell.projection
    return params


def _fold_homeless_input_bias(input_bias: Array, recurrent_bias: Array, k: int, config: RNNConfig,
                              notes: Notes) -> Array:
    """Move an input bias the layout cannot store into the recurrent bias, gate by gate."""
    n = config.num_units
    folded = recurrent_bias.copy()
    for index, gate in enumerate(config.mode.gates):
        part = slice(index * n, (index + 1) * n)
        if gate in FOLDABLE_BIAS_GATES[config.rnn_mode]:
            folded[part] = recurrent_bias[part] + input_bias[part]
        elif bool((input_bias[part] != 0).any()):
            notes.approximate(
                f"pseudo-layer {k}'s input bias of gate {gate!r} was dropped: this params layout has no "
                f"input biases under skip_input, and that bias cannot move into the recurrent one.")
    return folded


# ---- skip_input ---------------------------------------------------------------------------------
def _identity_stack(config: RNNConfig, dtype: Any, xp: Any) -> Array:
    """[G*N, N]: one identity per gate, the explicit form of skip_input's "x in place of W x"."""
    return xp.concatenate([xp.eye(config.num_units, dtype=dtype)] * config.num_gates, axis=0)


def with_explicit_skip_input(cells: Sequence[CellWeights], config: RNNConfig, xp: Any) -> tuple[CellWeights, ...]:
    """Replace the absent input matrices of skip_input by identities (the same function, exactly)."""
    return tuple(cell if cell.input is not None
                 else dataclasses.replace(cell, input=_identity_stack(config, cell.recurrent.dtype, xp))
                 for cell in cells)


def without_explicit_skip_input(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes,
                                xp: Any) -> tuple[CellWeights, ...]:
    """Drop layer 0's input matrices for a skip_input configuration.

    Exact when they are identities; otherwise an approximation (skip_input adds x itself).
    """
    if not config.skip_input:
        return tuple(cells)
    result = []
    for (k, layer, _), cell in zip(pseudo_layers(config), cells):
        if layer == 0 and cell.input is not None:
            if not bool(xp.array_equal(cell.input, _identity_stack(config, cell.input.dtype, xp))):
                notes.approximate(
                    f"pseudo-layer {k}'s input matrices were dropped: they are not identities, and "
                    f"input_mode='skip_input' adds x directly in place of W x.")
            cell = dataclasses.replace(cell, input=None)
        result.append(cell)
    return tuple(result)


# ---- argument checks shared by the public functions --------------------------------------------
def check_params(params: object, config: RNNConfig) -> Any:
    """Validate the params buffer; returns its array module."""
    xp = array_module(params=params)
    array = cast(Array, params)  # array_module refused anything but a NumPy or CuPy array
    size = params_size(config)  # closed form, before anything walks the layers
    if array.ndim != 1 or array.shape[0] != size:
        raise ValueError(f"params must be 1-D with {size} elements for this configuration ({describe(config)}); "
                         f"got shape {tuple(array.shape)}")
    dtype_name(array.dtype, "params.dtype")
    return xp


def check_tensors(fmt: str, tensors: object, shapes: dict[str, tuple[int, ...]], config: RNNConfig) -> tuple[Any, Any]:
    """``(xp, dtype)`` of ``tensors``, which must hold exactly the names and shapes of ``shapes`` and one float dtype
    (the errors ``from_format`` lists)."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a mapping of name -> array for format {fmt!r}; got {type(tensors).__name__}")
    mismatched = {"missing": [name for name in shapes if name not in tensors],
                  "unexpected": [name for name in tensors if name not in shapes]}
    if any(mismatched.values()):
        parts = "; ".join(f"{label} {names}" for label, names in mismatched.items() if names)
        raise ValueError(f"format {fmt!r} tensors do not match the configuration ({describe(config)}): "
                         f"{parts}; expected exactly {list(shapes)}")
    xp = array_module(**{f"tensors[{name!r}]": tensors[name] for name in shapes})
    for name, shape in shapes.items():
        actual = tuple(tensors[name].shape)
        if actual != shape:
            raise ValueError(f"format {fmt!r} tensor {name!r} must have shape {shape} for this configuration "
                             f"({describe(config)}); got {actual}")
    names = list(shapes)
    dtypes = [str(tensors[name].dtype) for name in names]
    majority = max(dtypes, key=dtypes.count) if dtypes else "float32"
    odd = next((name for name, dtype in zip(names, dtypes) if dtype != majority), None)
    if odd is not None:
        raise TypeError(f"format {fmt!r} tensors must share one dtype; tensor {odd!r} is {tensors[odd].dtype} "
                        f"while the others are {majority}")
    dtype = dtype_name(majority, f"format {fmt!r} tensors' dtype")
    return xp, dtype


def describe(config: RNNConfig) -> str:
    """A one-line description of the layout-relevant fields of ``config``."""
    text = (f"rnn_mode={config.rnn_mode!r}, num_layers={config.num_layers}, num_units={config.num_units}, "
            f"input_size={config.input_size}, direction={config.direction!r}")
    if config.num_proj:
        text += f", num_proj={config.num_proj}"
    if config.skip_input:
        text += ", input_mode='skip_input'"
    return text

