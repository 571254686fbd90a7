"""The validated RNN configuration shared by the params layout and every backend.

An :class:`RNNConfig` is frozen and hashable, so it doubles as the key of every
cache (params layouts, cuDNN descriptors). Facts that differ between cell types
live in the :data:`MODES` table, not in ``if`` ladders.

Notation used across the package::

    L = num_layers, D = 1 or 2 (direction), N = num_units, I = input_size,
    P = num_proj if num_proj > 0 else N   (width of h and of each direction's output)
    G = gates per cell: 1 (rnn_relu, rnn_tanh), 4 (lstm: i, f, g, o), 3 (gru: r, u, n)
    pseudo-layer k = layer * D + dir      (dir 0 = forward, 1 = reverse)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "ModeSpec",
    "MODES",
    "DIRECTIONS",
    "INPUT_MODES",
    "DTYPES",
    "RNNConfig",
    "tf_seed64",
    "resolve_input_mode",
    "is_count",
]


@dataclass(frozen=True)
class ModeSpec:
    """Facts about one cell type.

    Attributes:
        name: TF's ``rnn_mode`` string.
        gates: gate names in cuDNN's linLayerID order (input matrices 0..G-1,
            recurrent matrices G..2G-1).
        has_cell: whether the cell carries a ``c`` state (LSTM only).
        cudnn_mode: the ``cudnnRNNMode_t`` value.
    """

    name: str
    gates: tuple[str, ...]
    has_cell: bool
    cudnn_mode: int

    @property
    def num_gates(self) -> int:
        return len(self.gates)


MODES: dict[str, ModeSpec] = {
    "rnn_relu": ModeSpec("rnn_relu", ("h",), False, 0),
    "rnn_tanh": ModeSpec("rnn_tanh", ("h",), False, 1),
    "lstm": ModeSpec("lstm", ("i", "f", "g", "o"), True, 2),
    "gru": ModeSpec("gru", ("r", "u", "n"), False, 3),
}

#: direction string -> number of directions D
DIRECTIONS: dict[str, int] = {"unidirectional": 1, "bidirectional": 2}

#: input_mode strings; "auto_select" is resolved to one of the first two.
INPUT_MODES: tuple[str, ...] = ("linear_input", "skip_input", "auto_select")

#: supported element types (float16 computes in float32).
DTYPES: tuple[str, ...] = ("float16", "float32", "float64")

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _choice(name: str, value: object, allowed: tuple[str, ...] | dict) -> str:
    options = tuple(allowed)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {options}; got {type(value).__name__} {value!r}")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}; got {value!r}")
    return value


def is_count(value: object) -> bool:
    """Whether ``value`` is a non-negative integer (Python or NumPy; bools are not counts)."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Integral) and value >= 0


def _int(name: str, value: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}; got {value}")
    return value


def dtype_name(dtype: object, argument: str = "dtype") -> str:
    """Return the canonical name ("float32", ...) of a supported dtype, else TypeError."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(getattr(dtype, "name", dtype))
    if name not in DTYPES:
        raise TypeError(f"{argument} must be one of {DTYPES}; got {name!r}")
    return name


def resolve_input_mode(input_mode: str, input_size: int, num_units: int) -> str:
    """Resolve ``auto_select`` as TF's params ops do: skip_input iff input_size == num_units."""
    _choice("input_mode", input_mode, INPUT_MODES)
    if input_mode == "auto_select":
        return "skip_input" if input_size == num_units else "linear_input"
    return input_mode


def tf_seed64(seed: int, seed2: int) -> int:
    """TF's 64-bit dropout seed: ``(uint64(seed) << 32) | uint64(seed2)``.

    Both attrs are C ``int`` and are sign-extended on promotion, so a negative seed2
    sets the whole upper half and hides ``seed`` (seed=7, seed2=-3 equals seed=8, seed2=-3).
    """
    mask64 = (1 << 64) - 1
    return (((seed & mask64) << 32) | (seed2 & mask64)) & mask64


@dataclass(frozen=True)
class RNNConfig:
    """One validated RNN configuration.

    Construct it with the TF attribute strings; ``input_mode="auto_select"`` is
    resolved on construction (skip_input iff ``input_size == num_units``), so the
    stored ``input_mode`` is always ``"linear_input"`` or ``"skip_input"``.

    Raises:
        TypeError: a field has the wrong type (a float size, a non-string mode).
        ValueError: an unknown string, a non-positive size, ``num_proj`` with a
            non-LSTM mode or ``num_proj >= num_units``, ``skip_input`` with
            ``input_size != num_units``, or ``dropout`` outside [0, 1).
    """

    rnn_mode: str
    num_layers: int
    num_units: int
    input_size: int
    input_mode: str = "linear_input"
    direction: str = "unidirectional"
    num_proj: int = 0
    dropout: float = 0.0
    seed: int = 0
    seed2: int = 0
    dtype: str = "float32"
    mode: ModeSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "rnn_mode", _choice("rnn_mode", self.rnn_mode, MODES))
        set_(self, "direction", _choice("direction", self.direction, DIRECTIONS))
        set_(self, "num_layers", _int("num_layers", self.num_layers, minimum=1))
        set_(self, "num_units", _int("num_units", self.num_units, minimum=1))
        set_(self, "input_size", _int("input_size", self.input_size, minimum=1))
        set_(self, "num_proj", _int("num_proj", self.num_proj, minimum=0))
        set_(self, "seed", _int("seed", self.seed, minimum=_INT32_MIN, maximum=_INT32_MAX))
        set_(self, "seed2", _int("seed2", self.seed2, minimum=_INT32_MIN, maximum=_INT32_MAX))
        set_(self, "dtype", dtype_name(self.dtype))
        set_(self, "mode", MODES[self.rnn_mode])
        set_(self, "input_mode", resolve_input_mode(self.input_mode, self.input_size, self.num_units))

        if isinstance(self.dropout, (bool, np.bool_)) or not isinstance(self.dropout, numbers.Real):
            raise TypeError(f"dropout must be a float in [0, 1); got {type(self.dropout).__name__} {self.dropout!r}")
        dropout = float(self.dropout)
        if not (0.0 <= dropout < 1.0) or math.isnan(dropout):
            raise ValueError(f"dropout must be in [0, 1); got {dropout!r}")
        set_(self, "dropout", dropout)

        if self.num_proj:
            if self.rnn_mode != "lstm":
                raise ValueError(f"num_proj > 0 needs rnn_mode='lstm'; got rnn_mode={self.rnn_mode!r}, "
                                 f"num_proj={self.num_proj}")
            if self.num_proj >= self.num_units:
                raise ValueError(f"num_proj must be < num_units={self.num_units}; got num_proj={self.num_proj}")
        if self.input_mode == "skip_input" and self.input_size != self.num_units:
            raise ValueError(
                f"input_mode='skip_input' needs input_size == num_units; got input_size={self.input_size}, "
                f"num_units={self.num_units}"
            )

    # -- derived facts -------------------------------------------------------------------
    @property
    def num_gates(self) -> int:
        """G: gates per cell."""
        return self.mode.num_gates

    @property
    def has_cell(self) -> bool:
        """True for LSTM, the only mode with a ``c`` state."""
        return self.mode.has_cell

    @property
    def num_directions(self) -> int:
        """D: 1 or 2."""
        return DIRECTIONS[self.direction]

    @property
    def num_pseudo_layers(self) -> int:
        """L * D."""
        return self.num_layers * self.num_directions

    @property
    def state_size(self) -> int:
        """P: width of h and of each direction's output (num_proj, or num_units without projection)."""
        return self.num_proj or self.num_units

    @property
    def output_size(self) -> int:
        """D * P: width of the output sequence."""
        return self.num_directions * self.state_size

    @property
    def skip_input(self) -> bool:
        return self.input_mode == "skip_input"

    @property
    def inter_layer_dropout(self) -> float:
        """The dropout probability that acts in training: on every layer's output but the last,
        so 0.0 for a one-layer network."""
        return self.dropout if self.num_layers > 1 else 0.0

    @property
    def seed64(self) -> int:
        """TF's 64-bit dropout seed, see :func:`tf_seed64`."""
        return tf_seed64(self.seed, self.seed2)

    def layer_input_size(self, layer: int) -> int:
        """Width of the input of physical layer ``layer``: I for layer 0, D*P above."""
        return self.input_size if layer == 0 else self.output_size

    @property
    def layout_key(self) -> tuple:
        """The fields that determine the params layout (dropout, seeds and dtype do not)."""
        return (self.rnn_mode, self.input_mode, self.direction, self.num_layers, self.num_units,
                self.input_size, self.num_proj)

    def replace(self, **changes: object) -> "RNNConfig":
        """A copy with some fields changed (validated again)."""
        fields = {name: getattr(self, name) for name in (
            "rnn_mode", "num_layers", "num_units", "input_size", "input_mode", "direction",
            "num_proj", "dropout", "seed", "seed2", "dtype")}
        fields.update(changes)
        return RNNConfig(**fields)  # type: ignore[arg-type]
