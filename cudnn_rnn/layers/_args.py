"""A layer's arguments, checked in the layer's own words before the op sees them.

A layer's caller thinks in ``input_size``, ``num_units``, ``num_layers``, ``bidirectional``,
``lengths``, ``h0``/``c0`` and ``dtype``, not in the op's ``params`` size or ``input_h``. Each check
here refuses a mistake with a ``TypeError`` or ``ValueError`` that names the argument, what the
layer expects and what it got, and says how to mend it where there is one way::

    ArgumentCheck(config, xp).input(x, time_major)     -> (B, T)
    ArgumentCheck(config, xp).inputs(x, h0, c0, ...)   -> (B, T), after input and state of h0 and c0
    ArgumentCheck(config, xp).lengths(lengths, B, T)   -> None, the caller's int array, or int32 [B]
    ArgumentCheck(config, xp).state("h0", h0, B, ...)  h0 or c0, in the layout of _LAYOUTS (after input: a state
                                                       that fits x read in the other layout says so)
    ArgumentCheck(config, xp).gradients(dy, dh, dc, y, h, c)
                                                       dy, dh, dc shaped like y, h, c (dc: LSTM only)
"""

from __future__ import annotations

import numbers
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._arrays import Array, array_kind, array_module
from .._checks import first_outside
from ..config import DTYPES, MAX_SIZE, RNNConfig, numpy_dtype
from ..layout import params_size

__all__ = ["size_arguments", "ArgumentCheck"]

#: the layouts of x and the states, by time_major, in the layer's letters
_LAYOUTS: dict[bool, dict[str, str]] = {
    False: {"x": "[B, T, I]", "h0": "[B, L*D, P]", "c0": "[B, L*D, N]", "name": "batch-major"},
    True: {"x": "[T, B, I]", "h0": "[L*D, B, P]", "c0": "[L*D, B, N]", "name": "time-major"},
}

#: a state's name -> (the config attribute of its width, that width's name in the layer's words)
_STATE_WIDTHS: dict[str, tuple[str, str]] = {"h0": ("state_size", "P"), "c0": ("num_units", "N")}


def size_arguments(config: RNNConfig) -> list[str]:
    """``config``'s sizes as a layer's constructor arguments: ``input_size``, ``num_units`` and ``num_layers``,
    then ``bidirectional`` and ``num_proj`` where set."""
    c = config
    parts = [f"input_size={c.input_size}", f"num_units={c.num_units}", f"num_layers={c.num_layers}"]
    if c.num_directions == 2:
        parts.append("bidirectional=True")
    if c.num_proj:
        parts.append(f"num_proj={c.num_proj}")
    return parts


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in value.shape)


@dataclass(frozen=True)
class ArgumentCheck:
    """The checks of one layer's call, against the layer's configuration and array module."""

    config: RNNConfig
    xp: types.ModuleType
    #: the shape of x as :meth:`input` last took it (the call's), which :meth:`state` names in its hints
    _x_shape: list[tuple[int, ...]] = field(default_factory=list, init=False, repr=False, compare=False)

    def swap_axes(self, name: str) -> str:
        """How the caller swaps the first two axes of ``name`` (NumPy and CuPy: ``name.transpose(1, 0, 2)``)."""
        return f"{name}.transpose(1, 0, 2)"

    def describe(self) -> str:
        """The layer's sizes as its constructor takes them (``input_size=4, num_units=8, ...``)."""
        return ", ".join(size_arguments(self.config))

    def _array(self, name: str, value: object, layout: str) -> Any:
        """``value`` when it is an array of the layer's module and dtype, else a TypeError."""
        kind = array_kind(value)
        if kind is None:
            raise TypeError(f"{name} must be a {self.xp.__name__}.ndarray {layout}; got {type(value).__name__}")
        if array_module(**{name: value}) is not self.xp:
            raise TypeError(f"{name} is a {kind}.ndarray but this layer's params are on {self.xp.__name__}: move "
                            f"{name} there, or build the layer with xp={kind}")
        array: Any = value
        dtype = numpy_dtype(self.config.dtype)
        if array.dtype != dtype:
            rebuild = (f", or build the layer with dtype={array.dtype.name!r}" if array.dtype.name in DTYPES
                       else f" (a layer's dtype is one of {DTYPES})")
            raise TypeError(f"{name} has dtype {array.dtype} but this layer's dtype is {self.config.dtype}: cast it "
                            f"({name}.astype({self.config.dtype!r})){rebuild}")
        return array

    def params(self, params: Any) -> None:
        """Check a NumPy or CuPy params buffer given for this configuration (``from_params``): a ValueError
        unless it is the 1-D [params_size] buffer of the configuration's dtype."""
        size = params_size(self.config)
        if params.ndim != 1 or params.shape[0] != size:
            raise ValueError(f"params must be 1-D with {size} elements, the params size of config (rnn_mode="
                             f"{self.config.rnn_mode!r}, {self.describe()}); got shape {_shape(params)}")
        if params.dtype.name != self.config.dtype:
            raise ValueError(f"params has dtype {params.dtype} but config.dtype is {self.config.dtype!r}: cast it "
                             f"(params.astype({self.config.dtype!r})) or pass config.replace(dtype="
                             f"{params.dtype.name!r})")

    def input(self, x: object, time_major: bool) -> tuple[int, int]:
        """Check ``x`` in the layout ``time_major`` chooses and return its ``(B, T)``; T is at most
        :data:`cudnn_rnn.config.MAX_SIZE`."""
        layout = _LAYOUTS[time_major]
        array = self._array("x", x, layout["x"])
        if array.ndim != 3:
            raise ValueError(f"x must be 3-D, {layout['x']} ({layout['name']}: time_major={time_major}); "
                             f"got shape {_shape(array)}")
        self._x_shape[:] = [_shape(array)]
        features = int(array.shape[2])
        if features != self.config.input_size:
            raise ValueError(f"x has {features} features per step (x.shape[2]) but this layer's input_size is "
                             f"{self.config.input_size}")
        max_time, batch = (array.shape[0], array.shape[1]) if time_major else (array.shape[1], array.shape[0])
        if max_time > MAX_SIZE:
            raise ValueError(f"x has {max_time} steps (T = x.shape[{0 if time_major else 1}]); a sequence has at "
                             f"most {MAX_SIZE}")
        return int(batch), int(max_time)

    def inputs(self, x: object, h0: object, c0: object, time_major: bool) -> tuple[int, int]:
        """Check a forward's ``x`` (:meth:`input`) and its initial states (:meth:`state`; ``c0`` for an LSTM only)
        and return x's ``(B, T)``."""
        batch, max_time = self.input(x, time_major)
        self._cell_only("c0", c0)
        self.state("h0", h0, batch, time_major)
        self.state("c0", c0, batch, time_major)
        return batch, max_time

    def lengths(self, lengths: object, batch: int, max_time: int) -> Any:
        """Check ``lengths``, as ``forward`` takes them, against a batch of ``batch`` sequences of up to
        ``max_time`` steps: a NumPy array's values here, at no cost to a GPU; a CuPy array's (a CuPy
        layer's) by the op, which reads it back."""
        if lengths is None:
            return None
        counted = f"one per sequence of x, whose batch is {batch}"
        if array_kind(lengths) is not None:
            array: Any = lengths
            on_host = array_kind(array) == "numpy"
            if not on_host and self.xp is np:
                raise TypeError("lengths is a cupy.ndarray but this layer's params are on numpy; pass a list or a "
                                "numpy array")
            if array.dtype not in (np.int32, np.int64):
                raise TypeError(f"lengths must be a list of ints or an int32/int64 array; got an array of dtype "
                                f"{array.dtype}")
            if _shape(array) != (batch,):
                raise ValueError(f"lengths must have shape ({batch},), {counted}; got shape {_shape(array)}")
            index = first_outside(array, max_time) if on_host else None
            if index is not None:
                raise ValueError(f"lengths[{index}] = {int(array[index])} is outside [0, {max_time}] (T, the steps "
                                 "of x)")
            return array
        if isinstance(lengths, (str, bytes)) or not isinstance(lengths, (list, tuple, range)):
            raise TypeError(f"lengths must be a list of ints or an int32/int64 array; got {type(lengths).__name__}")
        values = list(lengths)
        if len(values) != batch:
            raise ValueError(f"lengths must hold {batch} values, {counted}; got {len(values)}")
        for index, value in enumerate(values):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
                raise TypeError(f"lengths[{index}] must be an integer; got {type(value).__name__} {value!r}")
            if not 0 <= int(value) <= max_time:
                raise ValueError(f"lengths[{index}] = {int(value)} is outside [0, {max_time}] (T, the steps of x)")
        return np.array([int(value) for value in values], dtype=np.int32)

    def state(self, name: str, value: object, batch: int, time_major: bool) -> None:
        """Check the initial state ``name`` (``"h0"`` or ``"c0"``; None passes) against the layer, the batch
        and the layout ``time_major`` chooses. A state in the other layout is named as such; so is one that fits
        x (as :meth:`input` took it) read in the other layout, T and B swapped: x [T, B, I] in a batch-major
        call with h0 [L*D, B, P] (``nn.LSTM``'s layout) is told to pass ``time_major=True``."""
        if value is None:
            return
        layout = _LAYOUTS[time_major]
        array = self._array(name, value, layout[name])
        attribute, letter = _STATE_WIDTHS[name]
        layers, width = self.config.num_pseudo_layers, int(getattr(self.config, attribute))
        expected = (layers, batch, width) if time_major else (batch, layers, width)
        got = _shape(array)
        if got == expected:
            return
        message = (f"{name} must be {layout[name]} = {expected} ({layout['name']}: time_major={time_major}) for this "
                   f"layer ({self.describe()}: L*D = {layers}, {letter} = {width}) and a batch of {batch}; "
                   f"got {got}")
        swapped, other = (expected[1], expected[0], width), _LAYOUTS[not time_major]
        if got == swapped and layers != batch:
            message += (f", the {other['name']} layout {other[name]}: pass {self.swap_axes(name)} (with "
                        f"time_major={not time_major} x would be read as {other['x']} too)")
        elif self._x_shape:
            x_shape = self._x_shape[0]
            steps = x_shape[0] if time_major else x_shape[1]  # B if x is in the other layout
            if steps != batch and got == ((steps, layers, width) if time_major else (layers, steps, width)):
                message += (f": x {x_shape} looks {other['name']}, {other['x']} with B = {steps}, and {name} fits that "
                            f"layout, {other[name]}: pass time_major={not time_major}, or make both "
                            f"{layout['name']} ({self.swap_axes('x')} and {self.swap_axes(name)})")
        raise ValueError(message)

    def gradients(self, dy: object, dh: object, dc: object, y: Array, h: Array, c: Array) -> None:
        """Check backward's gradients (None passes: zeros) against the outputs of the last training forward that
        they belong to, ``y``, ``h`` and ``c``: ``dc`` for an LSTM only, each of them shaped like its output."""
        self._cell_only("dc", dc)
        for name, value, like, of in (("dy", dy, y, "y"), ("dh", dh, h, "h"), ("dc", dc, c, "c")):
            if value is None:
                continue
            array = self._array(name, value, f"shaped like {of}")
            if _shape(array) != _shape(like):
                raise ValueError(f"{name} must have the shape of {of} from the last training forward, {_shape(like)}; "
                                 f"got {_shape(array)}")

    def _cell_only(self, name: str, value: object) -> None:
        """A ValueError when ``value`` (``c0`` or ``dc``) is given to a layer without a cell state (GRU, RNN)."""
        if not self.config.has_cell and value is not None:
            raise ValueError(f"{name} is only for LSTM; this layer is {self.config.rnn_mode!r}, so {name} must be None")
