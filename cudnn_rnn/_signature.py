"""One call of the op from its shapes alone: what it refuses and the shapes it returns.

Pure functions of shapes, dtypes and attributes, the op's first check, that the op
(``ops._prepare``) and the framework bridges (which trace with shapes only) call alike::

    sig = signature((T, B, I), (L*D, B, P), (L*D, B, N) or None, (params_size,), "float32",
                    lengths_shape=(B,), lengths_dtype="int32", rnn_mode="lstm", ..., time_major=True)
    sig = check(config, time_major, (T, B, I), ...)          the shapes held to a validated RNNConfig
    sig.config, sig.max_time, sig.batch                     the RNNConfig of the call, T and B
    sig.output_shape, sig.output_h_shape, sig.output_c_shape   as cudnn_rnn_v3's table says; output_c (0,)
                                                            for the modes without a cell
    sig.reserve_elements("cpu" | "cuda")                    a training forward's reserve_space length

:func:`signature` checks the op's keywords once, into the call's config; :func:`check` is what
the internal op path (layers, bridges) runs on every call with the config it holds. Every refusal
is the op's own (TypeError/ValueError naming the argument, expected and actual), in the op's
order; a ``None`` shape is a missing array. What only values decide (lengths outside [0, T], a
persistent ``algo`` with unequal lengths) is left to the op.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import numpy as np

from ._checks import flag, one_of, shown
from .config import DIRECTIONS, MAX_SIZE, MODES, PERSISTENT_ALGOS, RNNConfig, numpy_dtype
from .layout import params_size

__all__ = ["Signature", "signature", "check", "check_head", "PLATFORMS"]

Shape = tuple[int, ...]

#: The platforms a call runs on, and the backend each runs.
PLATFORMS = {"cpu": "reference", "cuda": "cudnn"}


@dataclass(frozen=True)
class Signature:
    """One call's sizes, from shapes alone (shapes in the call's layout, see the module docstring)."""

    config: RNNConfig
    time_major: bool
    max_time: int
    batch: int
    dtype: np.dtype

    def seq_shape(self, width: int) -> Shape:
        """A sequence of ``width`` features in the call's layout: [T, B, width] or [B, T, width]."""
        t, b = self.max_time, self.batch
        return (t, b, width) if self.time_major else (b, t, width)

    def state_shape(self, width: int) -> Shape:
        """A state of ``width`` in the call's layout: [L*D, B, width] or [B, L*D, width]."""
        ld, b = self.config.num_pseudo_layers, self.batch
        return (ld, b, width) if self.time_major else (b, ld, width)

    @property
    def output_shape(self) -> Shape:
        return self.seq_shape(self.config.output_size)

    @property
    def output_h_shape(self) -> Shape:
        return self.state_shape(self.config.state_size)

    @property
    def output_c_shape(self) -> Shape:
        return self.state_shape(self.config.num_units) if self.config.has_cell else (0,)

    def runs_time_major(self, cudnn: bool) -> bool:
        """The layout the backend runs: the caller's, but time-major for a persistent algorithm on cuDNN.

        x and dy go in transposed, y and dx come back in the caller's layout (why:
        :data:`~cudnn_rnn.config.PERSISTENT_ALGOS`); ``"auto"`` runs the standard algorithm on
        batch-major input instead.
        """
        return self.time_major or (cudnn and self.config.algo in PERSISTENT_ALGOS)

    def reserve_elements(self, platform: str) -> int:
        """Length of a training forward's reserve_space (1-D, the input's dtype) when ``platform`` runs the call.

        ``"cpu"`` runs the reference backend; ``"cuda"`` runs cuDNN and asks it (CuPy and a GPU needed,
        on CuPy's current device). A call with T == 0 or B == 0 keeps only the header.
        """
        from . import _reserve

        if platform not in PLATFORMS:
            raise ValueError(f"platform must be one of {tuple(PLATFORMS)}; got {platform!r}")
        if platform == "cpu":
            return int(self.cpu_reserve_elements(self.max_time, self.batch))
        if self.max_time == 0 or self.batch == 0:
            return _reserve.header_elements(self.dtype)
        from ._cudnn import _backend as cudnn_backend
        from ._cudnn._streams import import_cupy

        return cudnn_backend.reserve_elements(self.config, self.max_time, self.batch, self.runs_time_major(True),
                                              import_cupy().cuda.Device().id)

    def cpu_reserve_elements(self, max_time: Any, batch: Any) -> Any:
        """``reserve_elements("cpu")`` for any T and B, given as ints or as a framework's symbolic sizes (a
        ``torch.SymInt`` as ``torch.compile`` traces): every array the reference backend keeps is [T, B, width],
        so the length is ``header + T * B * per_step``, the header alone where T or B is 0."""
        from . import _reserve
        from .cpu._backend import ReserveLayout

        return _reserve.header_elements(self.dtype) + max_time * batch * ReserveLayout.build(self.config, 1, 1).size


def check_head(rnn_mode: object, direction: object, time_major: object, missing: Mapping[str, bool]
               ) -> tuple[str, str, bool]:
    """The op's first checks: the mode strings, ``time_major``, then the arrays given as None (``missing``).

    Returns ``(rnn_mode, direction, time_major)``, checked.
    """
    mode = one_of("rnn_mode", rnn_mode, MODES)
    checked_direction = one_of("direction", direction, DIRECTIONS)
    major = flag("time_major", time_major)
    absent = [name for name in ("input", "input_h", "params") if missing.get(name)]
    if absent:
        raise TypeError(f"{', '.join(absent)} must be an array; got None")
    if MODES[mode].has_cell and missing.get("input_c"):
        raise TypeError("input_c must be an array for rnn_mode='lstm'; got None")
    return mode, checked_direction, major


def _numpy_dtype(dtype: object) -> np.dtype | None:
    """``dtype`` as a NumPy dtype (bfloat16: ml_dtypes'), or None where NumPy has none for it."""
    try:
        return numpy_dtype(dtype)  # the supported ones, bfloat16 among them
    except TypeError:
        pass
    try:
        return np.dtype(dtype)  # type: ignore[call-overload, no-any-return]
    except TypeError:
        return None


def _rank(name: str, shape: Shape, rank: int) -> None:
    if len(shape) != rank:
        raise ValueError(f"{name} must be a {rank}-D array; got shape {shape} ({len(shape)}-D)")


def _same_dtype(name: str, value: object, dtype: np.dtype) -> None:
    own = _numpy_dtype(value)
    if own is None or own != dtype:  # (NumPy reads None as float64)
        raise TypeError(f"{name} must have the dtype of input ({dtype}); got {value if own is None else own}")


class _Shapes(NamedTuple):
    """A call's array shapes as ints (input_c's None without a cell), its dtype, T and B: ranks and dtypes checked."""

    x: Shape
    h: Shape
    c: Shape | None
    params: Shape
    dtype: np.dtype
    max_time: int
    batch: int


def _shapes(has_cell: bool, time_major: bool, input_shape: Shape, input_h_shape: Shape, input_c_shape: Shape | None,
            params_shape: Shape, dtype: object, dtypes: Mapping[str, object] | None) -> _Shapes:
    """The checks of the arrays one by one, in the op's order: each rank and dtype, then T and B at most a C int."""
    shapes = {"input_h": tuple(int(n) for n in input_h_shape), "params": tuple(int(n) for n in params_shape)}
    if has_cell and input_c_shape is not None:
        shapes["input_c"] = tuple(int(n) for n in input_c_shape)
    x_shape = tuple(int(n) for n in input_shape)
    _rank("input", x_shape, 3)
    io_dtype = numpy_dtype(dtype, "input.dtype")
    own = dtypes or {}
    for name in ("input_h", "input_c") if has_cell else ("input_h",):
        _rank(name, shapes[name], 3)
        _same_dtype(name, own.get(name, io_dtype), io_dtype)
    _rank("params", shapes["params"], 1)
    _same_dtype("params", own.get("params", io_dtype), io_dtype)
    layers_axis, batch_axis = (0, 1) if time_major else (1, 0)  # input's time axis is input_h's layers axis
    for what, letter, axis in (("steps", "T", layers_axis), ("sequences", "B", batch_axis)):
        if x_shape[axis] > MAX_SIZE:
            raise ValueError(f"input has {x_shape[axis]} {what} ({letter} = input.shape[{axis}]); cuDNN takes "
                             f"at most {MAX_SIZE} (a C int)")
    return _Shapes(x_shape, shapes["input_h"], shapes.get("input_c"), shapes["params"], io_dtype,
                   x_shape[layers_axis], x_shape[batch_axis])


def signature(input_shape: Shape | None, input_h_shape: Shape | None, input_c_shape: Shape | None,
              params_shape: Shape | None, dtype: object, lengths_shape: Shape | None = None,
              lengths_dtype: object = None, *, rnn_mode: str = "lstm", input_mode: str = "linear_input",
              direction: str = "unidirectional", dropout: float = 0.0, seed: int = 0, seed2: int = 0,
              num_proj: int = 0, time_major: bool = True, algo: str = "standard", is_training: object = True,
              dtypes: Mapping[str, object] | None = None) -> Signature:
    """Check a call of :func:`cudnn_rnn.cudnn_rnn_v3` from its shapes and attributes, as the op checks its arrays.

    The attributes and the sizes the shapes give become the call's :class:`~cudnn_rnn.RNNConfig`
    (``sig.config``), which :func:`check` then holds the shapes to; ``is_training`` is checked last.

    Args:
        input_shape, input_h_shape, input_c_shape, params_shape: the arrays' shapes; None for an
            array given as None (input_c: allowed for the modes without a cell, and ignored there).
        dtype: the input's dtype (a NumPy dtype, or a name such as ``"float32"``).
        lengths_shape, lengths_dtype: sequence_lengths' shape and dtype (int64 if None), or None
            for no lengths.
        rnn_mode ... is_training: the op's attributes, its defaults.
        dtypes: the dtypes of ``"input_h"``, ``"input_c"`` and ``"params"`` where they may differ
            from the input's; absent names have the input's dtype.
    """
    rnn_mode, direction, time_major = check_head(rnn_mode, direction, time_major, {
        "input": input_shape is None, "input_h": input_h_shape is None, "params": params_shape is None,
        "input_c": input_c_shape is None})
    assert input_shape is not None and input_h_shape is not None and params_shape is not None
    has_cell = MODES[rnn_mode].has_cell
    given = _shapes(has_cell, time_major, input_shape, input_h_shape, input_c_shape, params_shape, dtype, dtypes)
    h_shape, d, input_size = given.h, DIRECTIONS[direction], given.x[2]
    layers_axis, batch_axis = (0, 1) if time_major else (1, 0)
    pseudo_layers, state_size = h_shape[layers_axis], h_shape[2]
    if pseudo_layers == 0 or pseudo_layers % d:
        raise ValueError(f"input_h.shape[{layers_axis}] must be a positive multiple of {d} (num_layers * "
                         f"directions for direction={direction!r}); got {pseudo_layers}")
    if h_shape[batch_axis] != given.batch:
        raise ValueError(f"input_h.shape[{batch_axis}] must equal the batch size {given.batch}; "
                         f"got {h_shape[batch_axis]}")
    if input_size < 1:
        raise ValueError(f"input.shape[2] (input_size) must be >= 1; got {input_size}")
    if state_size < 1:
        raise ValueError(f"input_h.shape[2] (num_units or num_proj) must be >= 1; got {state_size}")
    num_units = state_size
    if given.c is not None:
        if given.c[:2] != h_shape[:2]:
            raise ValueError(f"input_c.shape[:2] must equal input_h.shape[:2] = {h_shape[:2]}; got {given.c[:2]}")
        num_units = given.c[2]
        if not isinstance(num_proj, (int, np.integer)) or isinstance(num_proj, (bool, np.bool_)):
            raise TypeError(f"num_proj must be an integer; got {type(num_proj).__name__} {shown(num_proj)}")
        if num_proj and state_size != num_proj:
            raise ValueError(f"input_h.shape[2] must equal num_proj={shown(num_proj)} under projection; "
                             f"got {state_size}")
        if not num_proj and state_size != num_units:
            raise ValueError("input_h and input_c must have the same shape without projection; got input_h "
                             f"{h_shape} and input_c {given.c}")
    sizes = (rnn_mode, pseudo_layers // d, num_units, input_size)
    attrs = dict(input_mode=input_mode, direction=direction, num_proj=num_proj, dropout=dropout, seed=seed,
                 seed2=seed2, dtype=given.dtype.name, algo=algo)
    try:
        config = _config(*sizes, **attrs)
    except TypeError:  # an unhashable attribute: the constructor, uncached, says what is wrong with it
        config = RNNConfig(*sizes, **attrs)
    sig = _fit(config, time_major, given, lengths_shape, lengths_dtype)
    flag("is_training", is_training)
    return sig


#: ``RNNConfig``, validated once per distinct call (``typed``: 1 and True differ)
_config = functools.lru_cache(maxsize=256, typed=True)(RNNConfig)


def check(config: RNNConfig, time_major: bool, input_shape: Shape, input_h_shape: Shape,
          input_c_shape: Shape | None, params_shape: Shape, dtype: object, lengths_shape: Shape | None = None,
          lengths_dtype: object = None, *, dtypes: Mapping[str, object] | None = None) -> Signature:
    """Check a call's shapes against a validated ``config`` (the internal op path: layers, bridges).

    Arguments as :func:`signature`'s, the attributes replaced by ``config`` and the layout
    ``time_major``; the shapes must be exactly those ``config`` gives (ValueError naming the array,
    the expected and the actual shape), the dtype ``config.dtype`` (TypeError).
    """
    time_major = check_head(config.rnn_mode, config.direction, time_major, {"input_c": input_c_shape is None})[2]
    given = _shapes(config.has_cell, time_major, input_shape, input_h_shape, input_c_shape, params_shape, dtype,
                    dtypes)
    if given.dtype.name != config.dtype:
        raise TypeError(f"input must have the configuration's dtype ({config.dtype}); got {given.dtype}")
    return _fit(config, time_major, given, lengths_shape, lengths_dtype)


def _fit(config: RNNConfig, time_major: bool, given: _Shapes, lengths_shape: Shape | None,
         lengths_dtype: object) -> Signature:
    """The shapes held to ``config`` (the sizes a keyword call's shapes gave pass at once), then the lengths."""
    sig = Signature(config, time_major, given.max_time, given.batch, given.dtype)
    expected = {"input": sig.seq_shape(config.input_size), "input_h": sig.output_h_shape}
    if config.has_cell:
        expected["input_c"] = sig.output_c_shape
    for name, shape in zip(expected, (given.x, given.h, given.c)):
        if shape != expected[name]:
            raise ValueError(f"{name} must have shape {expected[name]} for this configuration; got {shape}")
    size = params_size(config)  # closed form: nothing walks the layers of a call refused here
    if given.params[0] != size:
        raise ValueError(f"params must have {size} elements (cudnn_rnn_params_size for this configuration); "
                         f"got {given.params[0]}")
    if lengths_shape is not None:
        lengths_type = _numpy_dtype(np.int64 if lengths_dtype is None else lengths_dtype)
        if lengths_type is None or lengths_type not in (np.int32, np.int64):
            raise TypeError("sequence_lengths must have dtype int32 or int64; "
                            f"got {lengths_dtype if lengths_type is None else lengths_type}")
        if tuple(lengths_shape) != (sig.batch,):
            raise ValueError(f"sequence_lengths must have shape ({sig.batch},) (the batch size); "
                             f"got {tuple(lengths_shape)}")
    return sig
