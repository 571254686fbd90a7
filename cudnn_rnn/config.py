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

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import TypeAlias, cast

import numpy as np
from numpy.typing import DTypeLike

from . import _dtypes
from ._checks import choice, real_in_range, shown

__all__ = [
    "ModeSpec",
    "MODES",
    "DIRECTIONS",
    "INPUT_MODES",
    "DTYPES",
    "BUILTIN_DTYPES",
    "COMPUTE_DTYPES",
    "DTYPE_PACKAGES",
    "ALGOS",
    "PERSISTENT_ALGOS",
    "RNNConfig",
    "tf_seed64",
    "resolve_input_mode",
    "MAX_ARRAY_BYTES",
    "params_element_count",
    "dtype_name",
    "numpy_dtype",
]


@dataclass(frozen=True)
class ModeSpec:
    """Facts about one cell type.

    Args:
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
        """The number of gates G (1, 3 or 4)."""
        return len(self.gates)


#: rnn_mode string -> the facts of that cell type
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

#: supported element types. float16 and bfloat16 compute in float32 (:data:`COMPUTE_DTYPES`); bfloat16 is
#: ``ml_dtypes.bfloat16`` (see :func:`numpy_dtype`), and the cuDNN backend runs it from cuDNN 9.13 on GPUs of
#: compute capability 8.0 and newer.
DTYPES: tuple[str, ...] = _dtypes.PARAMS

#: the supported dtypes NumPy has built in (what model files hold as such); bfloat16 needs ml_dtypes.
BUILTIN_DTYPES: tuple[str, ...] = _dtypes.BUILTIN_PARAMS

#: dtype name -> the wider dtype its arithmetic runs in (the others compute in themselves).
COMPUTE_DTYPES: dict[str, str] = _dtypes.COMPUTE

#: dtype name -> the package that registers it with NumPy, imported only when that dtype is used.
DTYPE_PACKAGES: dict[str, str] = _dtypes.PACKAGES

#: The names of cuDNN's RNN algorithms (``cudnnRNNAlgo_t`` CUDNN_RNN_ALGO_<NAME>), and ``"auto"``, with
#: which the cuDNN backend picks one per call from what the GPU benchmark measured
#: (``_cudnn._settings.AUTO_RULES``), the standard one where it measured nothing. The reference
#: backend computes the same math for all.
ALGOS: tuple[str, ...] = ("standard", "persist_static", "persist_dynamic", "persist_static_small_h", "auto")

#: The persistent algorithms, which keep the recurrent weights on chip across steps (fast for small
#: batches). cuDNN runs them without projection only, on time-major data, and on batches whose
#: sequences all have one length of at least 1 (the ops refuse other lengths, and run a batch-major
#: call time-major on cuDNN).
PERSISTENT_ALGOS: tuple[str, ...] = ("persist_static", "persist_dynamic", "persist_static_small_h")

#: the type of ``RNNConfig.layout_key``, (rnn_mode, input_mode, direction, num_layers, num_units, input_size,
#: num_proj)
LayoutKey: TypeAlias = tuple[str, str, str, int, int, int, int]

#: dtype name -> bytes per element, so a buffer's size is checked without importing ml_dtypes
ITEMSIZES: dict[str, int] = _dtypes.ITEMSIZES

#: The most bytes one array can hold (NumPy's and CuPy's sizes are C ``intp``): a params buffer
#: of more is refused by :class:`RNNConfig`.
MAX_ARRAY_BYTES: int = int(np.iinfo(np.intp).max)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

#: The largest num_layers, num_units, input_size and num_proj, and the most steps T and sequences B
#: of a call, that cuDNN and TensorFlow take (each is a C int, and so are the sequence lengths).
MAX_SIZE: int = _INT32_MAX


def is_count(value: object) -> bool:
    """Whether ``value`` is a non-negative integer (Python or NumPy; bools are not counts)."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Integral) and int(value) >= 0


def _int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int in [``minimum``, 2**31 - 1] (a C int); else TypeError or ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {type(value).__name__} {shown(value)}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {shown(value)}")
    if value > _INT32_MAX:
        raise ValueError(f"{name} must be <= {_INT32_MAX} (a C int, as cuDNN and TensorFlow take it); "
                         f"got {shown(value)}")
    return value


def dtype_name(dtype: object, argument: str = "dtype") -> str:
    """Return the canonical name ("float32", ...) of a supported dtype, else TypeError.

    Takes a name, a NumPy dtype or a scalar type (``np.float32``, ``ml_dtypes.bfloat16``); the
    name ``"bfloat16"`` needs no ml_dtypes (:func:`numpy_dtype` does).
    """
    try:
        return _NAMED[dtype]
    except (KeyError, TypeError):  # TypeError: not hashable
        pass
    try:  # anything np.dtype does not take raises the TypeError handled here
        name: str = np.dtype(cast(DTypeLike, dtype)).name
    except TypeError:
        name = str(getattr(dtype, "name", dtype))
    if name not in DTYPES:
        raise TypeError(f"{argument} must be one of {DTYPES}; got {name!r}")
    if isinstance(dtype, (str, np.dtype, type)) and len(_NAMED) < _NAMED_MAX:
        _NAMED[dtype] = name
    return name


#: what :func:`dtype_name` has named (names, dtypes, scalar types), so that a call's dtypes cost a lookup each
_NAMED: dict[object, str] = {}
_NAMED_MAX = 64


def numpy_dtype(dtype: object, argument: str = "dtype") -> np.dtype:
    """The NumPy dtype of what :func:`dtype_name` takes (``argument`` names it in messages).

    ``"bfloat16"`` is ``ml_dtypes.bfloat16``: ml_dtypes is imported here, when that dtype is first
    asked for, and never otherwise.

    Raises:
        TypeError: an unsupported dtype.
        ImportError: ``"bfloat16"`` without the ml_dtypes package (the message says what to install).
    """
    return _dtypes.numpy_dtype(dtype_name(dtype, argument))


def resolve_input_mode(input_mode: str, input_size: int, num_units: int) -> str:
    """``input_mode`` (one of :data:`INPUT_MODES`, else TypeError or ValueError) with ``auto_select`` resolved as
    TF's params ops do: ``"skip_input"`` iff input_size == num_units, else ``"linear_input"``."""
    choice("input_mode", input_mode, INPUT_MODES)
    if input_mode == "auto_select":
        return "skip_input" if input_size == num_units else "linear_input"
    return input_mode


def tf_seed64(seed: int, seed2: int) -> int:
    """TF's 64-bit dropout seed, ``(uint64(seed) << 32) | uint64(seed2)``.

    Both attrs are C ``int`` and are sign-extended on promotion, so a negative seed2
    sets the whole upper half and hides ``seed`` (seed=7, seed2=-3 equals seed=8, seed2=-3). Returns a Python
    int in [0, 2**64).
    """
    mask64 = (1 << 64) - 1
    return (((seed & mask64) << 32) | (seed2 & mask64)) & mask64


def params_element_count(config: "RNNConfig", *, skip_input_keeps_input_biases: bool) -> int:
    """The number of elements of ``config``'s params buffer, in closed form, exact at any size.

    The one formula of the params size (:func:`cudnn_rnn.layout.params_size` passes its layout
    facts: whether layer 0 keeps its input biases under skip_input)::

        L*D pseudo-layers, each G*N*width input (none for layer 0 under skip_input),
        G*N*P recurrent, P*N projection (num_proj > 0) and 2*G*N bias elements,
        less layer 0's D*G*N input biases under skip_input unless they are kept.
    """
    g, n, p, d = config.num_gates, config.num_units, config.state_size, config.num_directions
    first_width = 0 if config.skip_input else config.input_size
    matrices = d * g * n * (first_width + (config.num_layers - 1) * config.output_size)
    per_pseudo_layer = g * n * p + (p * n if config.num_proj else 0) + 2 * g * n
    dropped_biases = d * g * n if config.skip_input and not skip_input_keeps_input_biases else 0
    return matrices + config.num_pseudo_layers * per_pseudo_layer - dropped_biases


@dataclass(frozen=True)
class RNNConfig:
    """One validated RNN configuration.

    Construct it with the TF attribute strings; ``input_mode="auto_select"`` is resolved on
    construction (:func:`cudnn_rnn.config.resolve_input_mode`). Every field keeps the name and meaning of the
    argument it was built from.

    Args:
        rnn_mode: ``"lstm"``, ``"gru"``, ``"rnn_tanh"`` or ``"rnn_relu"``.
        num_layers: L >= 1, the number of stacked layers.
        num_units: N >= 1, the width of each cell's state.
        input_size: I >= 1, the width of each step of the input.
        input_mode: ``"linear_input"``, ``"skip_input"`` (needs ``input_size == num_units``) or
            ``"auto_select"``.
        direction: ``"unidirectional"`` (D = 1) or ``"bidirectional"`` (D = 2).
        num_proj: P < N, the width of an LSTM's projected state; 0 for no projection.
        dropout: the probability in [0, 1) of dropping each output of every layer but the last
            while training.
        seed: TF's op-level dropout seed (a C ``int``).
        seed2: TF's second dropout seed (a C ``int``).
        dtype: one of :data:`cudnn_rnn.config.DTYPES` (which says what each computes in and needs), or a
            NumPy dtype or scalar type of one of them (``ml_dtypes.bfloat16``); stored as its name.
        algo: the cuDNN algorithm, one of :data:`cudnn_rnn.config.ALGOS` (``"standard"`` by default), which
            says what each does. It changes how cuDNN computes, not the result or the params layout.

    Attributes:
        mode: the :data:`cudnn_rnn.config.MODES` entry of ``rnn_mode`` (gate names, cell state, cuDNN's number).

    Raises:
        TypeError: a field has the wrong type (a float size, a non-string mode, an
            unsupported dtype).
        ValueError: an unknown string, a non-positive size or one above 2**31 - 1 (a C int, as
            cuDNN and TensorFlow take sizes), ``num_proj`` with a
            non-LSTM mode or ``num_proj >= num_units``, ``skip_input`` with
            ``input_size != num_units``, ``dropout`` outside [0, 1) (inf and NaN included), a
            seed outside C ``int``, a persistent ``algo`` with ``num_proj > 0``, or sizes whose
            params buffer would hold more than :data:`cudnn_rnn.config.MAX_ARRAY_BYTES` bytes of ``dtype``
            (found in closed form, at once, however large the sizes).
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
    algo: str = "standard"
    mode: ModeSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "rnn_mode", choice("rnn_mode", self.rnn_mode, MODES))
        set_(self, "direction", choice("direction", self.direction, DIRECTIONS))
        for name, smallest in (("num_layers", 1), ("num_units", 1), ("input_size", 1), ("num_proj", 0),
                               ("seed", _INT32_MIN), ("seed2", _INT32_MIN)):
            set_(self, name, _int(name, getattr(self, name), smallest))
        set_(self, "dtype", dtype_name(self.dtype))
        set_(self, "algo", choice("algo", self.algo, ALGOS))
        set_(self, "mode", MODES[self.rnn_mode])
        set_(self, "input_mode", resolve_input_mode(self.input_mode, self.input_size, self.num_units))

        set_(self, "dropout", real_in_range("dropout", self.dropout, 0.0, 1.0, low_closed=True))

        if self.num_proj:
            if self.rnn_mode != "lstm":
                raise ValueError(f"num_proj > 0 needs rnn_mode='lstm'; got rnn_mode={self.rnn_mode!r}, "
                                 f"num_proj={self.num_proj}")
            if self.num_proj >= self.num_units:
                raise ValueError(f"num_proj must be < num_units={self.num_units}; "
                                 f"got num_proj={self.num_proj}")
            if self.algo in PERSISTENT_ALGOS:
                raise ValueError(f"num_proj > 0 needs algo='standard' or 'auto' (cuDNN runs projection with the "
                                 f"standard algorithm only); got algo={self.algo!r}, num_proj={self.num_proj}")
        if self.input_mode == "skip_input" and self.input_size != self.num_units:
            raise ValueError(
                f"input_mode='skip_input' needs input_size == num_units; got input_size={self.input_size}, "
                f"num_units={self.num_units}"
            )
        self._check_buffer_fits()

    def _check_buffer_fits(self) -> None:
        """Refuse sizes whose params buffer no array can hold, before anything walks its layers.

        The count is the closed form (each size a C int, so the product is small to compute), at
        its smallest: layer 0's input biases dropped under skip_input, whichever way the layout
        facts say.
        """
        elements = params_element_count(self, skip_input_keeps_input_biases=False)
        size = elements * ITEMSIZES[self.dtype]
        if size <= MAX_ARRAY_BYTES:
            return
        named = f"num_layers={self.num_layers}, num_units={self.num_units}, input_size={self.input_size}"
        if self.num_proj:
            named += f", num_proj={self.num_proj}"
        raise ValueError(f"{named} give a params buffer of at least {elements} elements ({size} bytes of "
                         f"{self.dtype}), more than an array can hold (at most {MAX_ARRAY_BYTES} bytes)")

    # -- derived facts -------------------------------------------------------------------
    @property
    def num_gates(self) -> int:
        """The number of gates per cell, G."""
        return self.mode.num_gates

    @property
    def has_cell(self) -> bool:
        """Whether the cell carries a ``c`` state (LSTM only)."""
        return self.mode.has_cell

    @property
    def num_directions(self) -> int:
        """The number of directions, D (1 or 2)."""
        return DIRECTIONS[self.direction]

    @property
    def num_pseudo_layers(self) -> int:
        """The number of pseudo-layers, L * D (one per layer and direction)."""
        return self.num_layers * self.num_directions

    @property
    def state_size(self) -> int:
        """The width P of h and of each direction's output (num_proj, or num_units without projection)."""
        return self.num_proj or self.num_units

    @property
    def output_size(self) -> int:
        """The width of the output sequence, D * P."""
        return self.num_directions * self.state_size

    @property
    def skip_input(self) -> bool:
        """Whether the input feeds layer 0's gates directly (``input_mode == "skip_input"``)."""
        return self.input_mode == "skip_input"

    @property
    def inter_layer_dropout(self) -> float:
        """The dropout probability that acts in training.

        Dropout applies to every layer's output but the last, so this is 0.0 for a one-layer
        network whatever ``dropout`` says.
        """
        return self.dropout if self.num_layers > 1 else 0.0

    @property
    def seed64(self) -> int:
        """TF's 64-bit dropout seed (see :func:`cudnn_rnn.config.tf_seed64`)."""
        return tf_seed64(self.seed, self.seed2)

    def layer_input_size(self, layer: int) -> int:
        """The width of the input of physical layer ``layer``: I for layer 0, D * P for the layers above."""
        return self.input_size if layer == 0 else self.output_size

    @property
    def layout_key(self) -> LayoutKey:
        """The fields that determine the params layout (dropout, seeds, dtype and algo do not).

        ``(rnn_mode, input_mode, direction, num_layers, num_units, input_size, num_proj)``.
        """
        return (self.rnn_mode, self.input_mode, self.direction, self.num_layers, self.num_units,
                self.input_size, self.num_proj)

    def replace(self, **changes: object) -> "RNNConfig":
        """A copy with some constructor fields changed, validated again (the constructor's errors; TypeError for an
        unknown field name)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        fields.update(changes)
        return RNNConfig(**fields)


def check_config(config: object) -> RNNConfig:
    """``config`` itself when it is an :class:`RNNConfig`; else TypeError naming the argument ``config``."""
    if not isinstance(config, RNNConfig):
        raise TypeError(f"config must be a cudnn_rnn.RNNConfig; got {type(config).__name__}")
    return config
