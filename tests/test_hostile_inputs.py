"""Hostile input never hangs, crashes or eats memory: only the documented exceptions come out.

Every public way in (the ops, the params-buffer functions, RNNConfig, the format converters, the layers,
the optimisers, the params-file and checkpoint readers, the ``cudnn-rnn`` command) is driven with huge
and negative integers, 10**400, NaN and infinities, bools and strings where numbers go, floats where
ints go, zero-size, wrong-rank, wrong-dtype and object arrays, read-only broadcasts with a 2**40-long
axis, None, and hostile files (valid checksums, hostile contents) and paths. Arguments may only be
refused with ValueError or TypeError, checkpoints with CheckpointError, params files with ValueError
(FileNotFoundError for a path that names no file, IsADirectoryError for a folder), and the command
exits 0 or 2 with one ``error:`` line and no traceback. The layers' ``lengths`` must be ints in
[0, T] and ``training`` a bool, or the refusal names them.

Each test runs its whole property in one child process (a fresh interpreter running the test again, never
a fork) under an address-space limit and a deadline (tests/support/hostile.py): a hang, a crash or a
MemoryError fails the test naming the example.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import shutil
import struct
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import timedelta
from io import BytesIO
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cudnn_rnn
from cudnn_rnn import GRU, LSTM, RNN, CheckpointError, RNNConfig, checkpoint, optim
from cudnn_rnn.cpu import _backend as _reference  # noqa: F401  (imported with the module: no example pays for it)
from cudnn_rnn.checkpoint import _container
from cudnn_rnn.cli import main as cli_main
from cudnn_rnn.convert import from_format, to_format
from cudnn_rnn.formats import FORMATS
from cudnn_rnn.layers import RecurrentLayer
from cudnn_rnn.params_file import write_params_file
from hostile import (BAD_FLOATS, EXAMPLE_SECONDS, HUGE_INTS, NEGATIVE_INTS, NOT_NUMBERS, REAL_OVERFLOWS, START_SECONDS,
                     Hang, V, guarded, huge, run_in_child)

#: the wall clock a whole property may take in its child before it is killed as a hang
WALL_SECONDS = 60.0
ARGUMENT_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError)

#: pytest-timeout's mark where it is installed: a second guard around the child's own deadline
_second_guard: Callable[[Callable[..., Any]], Callable[..., Any]] = (
    pytest.mark.timeout(START_SECONDS + WALL_SECONDS + 30) if importlib.util.find_spec("pytest_timeout") is not None
    else (lambda function: function))


def _settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=timedelta(seconds=3), derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def pinned_or(pinned: list[Any], general: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Draw one of the ``pinned`` hostile cases half the time, so each is tried every run, else a ``general`` one."""
    return st.one_of(st.sampled_from(pinned), general)


def _value(label: str) -> V:
    """The hostile value of ``label`` from the shared pools."""
    return next(v for v in ANY_HOSTILE if v.label == label)


def refused_or_done(call: Callable[[], Any], errors: tuple[type[Exception], ...] = ARGUMENT_ERRORS) -> Any:
    """``call()``'s result, or None when it raised one of ``errors``; anything else propagates (and fails)."""
    try:
        return call()
    except errors:
        return None


def refused_naming(call: Callable[[], Any], name: str) -> None:
    """``call()`` must raise ValueError or TypeError whose message names ``name``."""
    try:
        call()
    except ARGUMENT_ERRORS as error:
        assert name in str(error), f"the refusal does not name {name!r}: {type(error).__name__}: {error}"
        return
    raise AssertionError(f"accepted: it must be refused with a ValueError or TypeError naming {name!r}")


# ---- hostile values ----------------------------------------------------------------------------------------
STRINGS: list[V] = [V(repr(s) if len(s) < 20 else f"'x'*{len(s)}", s)
                    for s in ("", "LSTM", "lstm ", "lstm\x00", "gru\n", "\u00e9", "x" * 10000, "float32\n", "None")]
ODD_DTYPES: list[V] = [V(repr(d), d) for d in ("int32", "complex64", "object", "float32,float32", "(2,)f4", "S0",
                                                "M8[ns]", "V4", "bool", "U99999999999")]
ODD_DTYPES += [V("[('a', 'f4')]", [("a", "f4")]), V("np.int64", np.int64), V("int", int), V("object", object)]
#: every hostile scalar, for any argument
ANY_HOSTILE: list[V] = HUGE_INTS + NEGATIVE_INTS + BAD_FLOATS + REAL_OVERFLOWS + NOT_NUMBERS + STRINGS
hostile_scalars = st.sampled_from(ANY_HOSTILE)
MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")

def _floating(array: np.ndarray) -> np.dtype:
    """The array's dtype if it can hold NaN, else float64."""
    return array.dtype if array.dtype.kind in "fc" else np.dtype(np.float64)


#: array changes by name: each takes the valid array and returns the hostile one (huge axes come apart)
ARRAY_CHANGES: dict[str, Callable[[np.ndarray], Any]] = {
    "None": lambda a: None,
    "python list": lambda a: a.tolist(),
    "int32": lambda a: a.astype(np.int32),
    "int64": lambda a: a.astype(np.int64),
    "uint8": lambda a: a.astype(np.uint8),
    "complex64": lambda a: a.astype(np.complex64),
    "bool": lambda a: a.astype(bool),
    "object": lambda a: a.astype(object),
    "bytes": lambda a: a.astype("S4"),
    "float16": lambda a: a.astype(np.float16),
    "other float": lambda a: a.astype(np.float32 if a.dtype == np.float64 else np.float64),
    "0-d": lambda a: np.array(0.5, a.dtype),
    "rank + 1": lambda a: a[..., None],
    "rank - 1": lambda a: (a.reshape(a.shape[:-2] + (a.shape[-2] * a.shape[-1],)) if a.ndim >= 2
                           else np.array(0.5, a.dtype)),
    "empty first axis": lambda a: np.zeros((0,) + a.shape[1:], a.dtype),
    "empty last axis": lambda a: np.zeros(a.shape[:-1] + (0,), a.dtype),
    "last axis + 1": lambda a: np.zeros(a.shape[:-1] + (a.shape[-1] + 1,), a.dtype),
    "all NaN": lambda a: np.full(a.shape, np.nan, _floating(a)),
    "all inf": lambda a: np.full(a.shape, np.inf, _floating(a)),
    "all -inf": lambda a: np.full(a.shape, -np.inf, _floating(a)),
    "huge axis 0": lambda a: huge(a, 0),
    "huge last axis": lambda a: huge(a, a.ndim - 1),
    "huge axis 1": lambda a: huge(a, 1) if a.ndim >= 2 else huge(a, 0),
    "reversed view": lambda a: a[::-1],
}
array_changes = st.sampled_from(sorted(ARRAY_CHANGES))


def changed(array: np.ndarray, change: str) -> Any:
    return ARRAY_CHANGES[change](array)


# ---- a valid op call -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpCall:
    """A valid call of the ops, small: the arrays are made from it by :meth:`arrays`."""

    mode: str
    layers: int
    bidirectional: bool
    units: int
    input_size: int
    proj: int
    time: int
    batch: int
    time_major: bool
    dtype: str
    with_lengths: bool

    @property
    def state_width(self) -> int:
        return self.proj or self.units

    def attributes(self) -> dict[str, Any]:
        return {"rnn_mode": self.mode, "input_mode": "linear_input",
                "direction": "bidirectional" if self.bidirectional else "unidirectional", "dropout": 0.0,
                "seed": 0, "seed2": 0, "num_proj": self.proj, "time_major": self.time_major, "algo": "standard"}

    def arrays(self) -> dict[str, Any]:
        d = 2 if self.bidirectional else 1
        t, b = self.time, self.batch

        def seq(width: int) -> np.ndarray:
            shape = (t, b, width) if self.time_major else (b, t, width)
            return np.linspace(-1, 1, math.prod(shape)).reshape(shape).astype(self.dtype)

        def state(width: int) -> np.ndarray:
            shape = (self.layers * d, b, width) if self.time_major else (b, self.layers * d, width)
            return np.full(shape, 0.25, self.dtype)

        size = cudnn_rnn.cudnn_rnn_params_size(self.layers, self.units, self.input_size, rnn_mode=self.mode,
                                               direction=self.attributes()["direction"], num_proj=self.proj)
        lengths = np.arange(b, dtype=np.int32) % (t + 1) if self.with_lengths else None
        return {"input": seq(self.input_size), "input_h": state(self.state_width),
                "input_c": state(self.units) if self.mode == "lstm" else None,
                "params": np.linspace(-0.5, 0.5, size).astype(self.dtype), "sequence_lengths": lengths}


@st.composite
def op_calls(draw: st.DrawFn, min_batch: int = 0) -> OpCall:
    mode = draw(st.sampled_from(MODES))
    units = draw(st.integers(1, 3))
    proj = draw(st.integers(0, units - 1)) if mode == "lstm" else 0
    return OpCall(mode, draw(st.integers(1, 2)), draw(st.booleans()), units, draw(st.integers(1, 3)), proj,
                  draw(st.integers(0, 3)), draw(st.integers(min_batch, 2)), draw(st.booleans()),
                  draw(st.sampled_from(["float32", "float64"])), draw(st.booleans()))


LENGTHS_CHANGES: dict[str, Callable[[int, int], Any]] = {
    "int64 2**62": lambda b, t: np.full(b, 2**62, np.int64),
    "int64 -1": lambda b, t: np.full(b, -1, np.int64),
    "int32 T + 1": lambda b, t: np.full(b, t + 1, np.int32),
    "uint64": lambda b, t: np.zeros(b, np.uint64),
    "float64": lambda b, t: np.zeros(b, np.float64),
    "bool": lambda b, t: np.zeros(b, bool),
    "object": lambda b, t: np.array([0] * b, dtype=object),
    "python list": lambda b, t: [t] * b,
    "0-d": lambda b, t: np.array(0, np.int32),
    "2-D": lambda b, t: np.zeros((b, 1), np.int32),
    "batch + 1": lambda b, t: np.zeros(b + 1, np.int32),
    "huge broadcast": lambda b, t: np.broadcast_to(np.int32(0), (2**40,)),
    "int16": lambda b, t: np.zeros(b, np.int16),
}

STATE_ARRAYS = {"input_h", "input_c", "output_h", "output_c", "output_h_backprop", "output_c_backprop"}


def op_change(arrays: dict[str, Any], valid: dict[str, Any], call: OpCall, name: str, change: str) -> None:
    """Set ``arrays[name]`` to a change of the valid call's array, keeping huge axes inconsistent with the rest."""
    if name == "sequence_lengths" and change in LENGTHS_CHANGES:
        arrays[name] = LENGTHS_CHANGES[change](call.batch, call.time)
        return
    base = valid[name] if name != "sequence_lengths" else np.zeros(call.batch, np.int32)
    if base is None:  # input_c of a GRU/RNN: anything goes there
        base = np.zeros((1, max(call.batch, 1), call.units), call.dtype)
    if change == "huge layers axis":  # L*D of the states: what the params layout is built from
        change = "huge axis 0" if call.time_major or name not in STATE_ARRAYS else "huge axis 1"
    if name == "input" and change.startswith("huge") and change != "huge last axis":
        # a huge T with everything else valid would be a valid (endless) call: make the batch huge instead
        change = "huge axis 1" if call.time_major else "huge axis 0"
    arrays[name] = changed(base, change)


LENGTH_CHANGE_NAMES = sorted(LENGTHS_CHANGES)
OP_ARRAYS = ("input", "input_h", "input_c", "params", "sequence_lengths")
OP_ATTRIBUTES = ("rnn_mode", "input_mode", "direction", "dropout", "seed", "seed2", "num_proj", "is_training",
                 "time_major", "algo")
array_edit = st.tuples(st.just("array"), st.sampled_from(OP_ARRAYS), array_changes)
lengths_edit = st.tuples(st.just("array"), st.just("sequence_lengths"), st.sampled_from(LENGTH_CHANGE_NAMES))
attribute_edit = st.tuples(st.just("attribute"), st.sampled_from(OP_ATTRIBUTES), hostile_scalars)


def _is_huge(change: object) -> bool:
    return isinstance(change, str) and "huge" in change


def _apply_op_edits(call: OpCall, kwargs: dict[str, Any], arrays: dict[str, Any],
                    edits: list[tuple[str, str, Any]]) -> None:
    valid = dict(arrays)
    huge_done = False
    for kind, name, value in edits:
        if kind == "array" and not (huge_done and _is_huge(value)):  # two huge axes could agree: a valid call
            huge_done = huge_done or _is_huge(value)
            op_change(arrays, valid, call, name, value)
        elif kind == "attribute":
            kwargs[name] = value.value


# ---- the ops and the params-buffer functions ----------------------------------------------------------------
#: hostile calls every run tries: a huge L*D in the states (the params layout must not be built from it first),
#: and numbers whose float() overflows
PINNED_OP_EDITS: list[list[tuple[str, str, Any]]] = [
    [("array", "input_h", "huge layers axis")], [("array", "input_c", "huge layers axis")],
    [("array", "input", "huge last axis")], [("array", "input_h", "huge last axis")],
    [("attribute", "dropout", _value("10**400"))], [("attribute", "dropout", _value("Fraction(10**400)"))],
    [("attribute", "num_proj", _value("2**40"))], [("attribute", "seed", _value("10**400"))],
    [("array", "sequence_lengths", "int64 2**62")], [("attribute", "is_training", _value("'1'"))],
]


@_second_guard
def test_forward_op_refuses_hostile_arguments(request: pytest.FixtureRequest) -> None:
    """cudnn_rnn_v3: a valid small call with one or two arguments made hostile."""

    @_settings(150)
    @given(call=op_calls(), edits=pinned_or(PINNED_OP_EDITS, st.lists(st.one_of(array_edit, lengths_edit,
                                                                              attribute_edit), min_size=1, max_size=2)))
    @guarded
    def prop(call: OpCall, edits: list[tuple[str, str, Any]]) -> None:
        arrays = call.arrays()
        kwargs: dict[str, Any] = {**call.attributes(), "is_training": True}
        _apply_op_edits(call, kwargs, arrays, edits)
        refused_or_done(lambda: cudnn_rnn.cudnn_rnn_v3(**arrays, **kwargs))

    run_in_child(prop, request, WALL_SECONDS)


BACKPROP_ARRAYS = OP_ARRAYS + ("output", "output_h", "output_c", "output_backprop", "output_h_backprop",
                               "output_c_backprop", "reserve_space", "host_reserved")
RESERVE_CHANGES: dict[str, Callable[[np.ndarray], Any]] = {
    "first 10": lambda r: r[:10],
    "zeros": lambda r: np.zeros_like(r),
    "copy with NaN header": lambda r: np.concatenate([np.full(min(r.size, 64), np.nan, r.dtype), r[64:]]),
    "copy": lambda r: r.copy(),
    "doubled": lambda r: np.concatenate([r, r]),
}
HOST_RESERVED_CHANGES: dict[str, Callable[[np.ndarray], Any]] = {
    "int64": lambda h: h.astype(np.int64),
    "2-D": lambda h: h.reshape(2, -1),
    "zeros": lambda h: np.zeros_like(h),
    "empty": lambda h: h[:0],
    "python list": lambda h: h.tolist(),
    "huge broadcast": lambda h: np.broadcast_to(h[:1], (2**40,)),
    "object": lambda h: h.astype(object),
}
PINNED_BACKPROP_EDITS: list[list[tuple[str, str, Any]]] = [
    edits for edits in PINNED_OP_EDITS if edits[0][1] != "is_training"] + [
    [("array", "output_h", "huge layers axis")], [("array", "output_h_backprop", "huge layers axis")],
    [("reserve", "reserve_space", "first 10")], [("reserve", "host_reserved", "huge broadcast")]]
backprop_array_edit = st.tuples(st.just("array"), st.sampled_from(BACKPROP_ARRAYS), array_changes)
reserve_edit = st.tuples(st.just("reserve"), st.sampled_from(["reserve_space", "host_reserved"]),
                         st.sampled_from(sorted(set(RESERVE_CHANGES) | set(HOST_RESERVED_CHANGES))))
backprop_attribute_edit = st.tuples(st.just("attribute"), st.sampled_from([a for a in OP_ATTRIBUTES
                                                                           if a != "is_training"]), hostile_scalars)


@_second_guard
def test_backprop_op_refuses_hostile_arguments(request: pytest.FixtureRequest) -> None:
    """cudnn_rnn_backprop_v3 after a valid training forward, with one or two arguments made hostile."""

    @_settings(120)
    @given(call=op_calls(), edits=pinned_or(PINNED_BACKPROP_EDITS, st.lists(st.one_of(
        backprop_array_edit, reserve_edit, lengths_edit, backprop_attribute_edit), min_size=1, max_size=2)))
    @guarded
    def prop(call: OpCall, edits: list[tuple[str, str, Any]]) -> None:
        arrays = call.arrays()
        attributes = call.attributes()
        out = cudnn_rnn.cudnn_rnn_v3(**arrays, **attributes, is_training=True)
        arrays.update(output=out.output, output_h=out.output_h,
                      output_c=out.output_c if call.mode == "lstm" else None, output_backprop=np.ones_like(out.output),
                      output_h_backprop=np.ones_like(out.output_h),
                      output_c_backprop=np.ones_like(out.output_c) if call.mode == "lstm" else None,
                      reserve_space=out.reserve_space, host_reserved=out.host_reserved)
        valid = dict(arrays)
        huge_done = False
        for kind, name, value in edits:
            if kind == "reserve":
                table = RESERVE_CHANGES if name == "reserve_space" else HOST_RESERVED_CHANGES
                if value in table:
                    arrays[name] = table[value](valid[name])
            elif kind == "array" and not (huge_done and _is_huge(value)):  # two huge axes could agree
                huge_done = huge_done or _is_huge(value)
                op_change(arrays, valid, call, name, value)
            elif kind == "attribute":
                attributes[name] = value.value
        refused_or_done(lambda: cudnn_rnn.cudnn_rnn_backprop_v3(**arrays, **attributes))

    run_in_child(prop, request, WALL_SECONDS)


#: sizes no layout may be built for before they are refused (or counted in closed form)
PINNED_SIZE_EDITS: list[list[tuple[str, V]]] = [[(name, _value(label))] for name in ("num_layers", "num_units",
                                                                                   "input_size")
                                               for label in ("2**31", "2**40", "10**400")]
PINNED_SIZE_EDITS += [[("num_proj", _value("2**40"))], [("dtype", _value("10**400"))]]
SIZE_ARGUMENTS = ("num_layers", "num_units", "input_size", "rnn_mode", "input_mode", "direction", "num_proj",
                  "dtype")
size_values = st.one_of(hostile_scalars, st.sampled_from(ODD_DTYPES))


@_second_guard
def test_params_functions_refuse_hostile_arguments(request: pytest.FixtureRequest) -> None:
    """cudnn_rnn_params_size, cudnn_rnn_params_to_canonical and cudnn_rnn_canonical_to_params."""
    listy = st.sampled_from(sorted(LIST_CHANGES))

    @_settings(150)
    @given(function=st.sampled_from(["size", "to_canonical", "to_params"]), mode=st.sampled_from(MODES),
           edits=pinned_or(PINNED_SIZE_EDITS, st.lists(st.tuples(st.sampled_from(SIZE_ARGUMENTS), size_values),
                                                     max_size=2)),
           params_change=st.none() | array_changes, entry=st.integers(0, 100), entry_change=st.none() | array_changes,
           list_change=st.none() | listy)
    @guarded
    def prop(function: str, mode: str, edits: list[tuple[str, V]], params_change: str | None, entry: int,
             entry_change: str | None, list_change: str | None) -> None:
        kwargs: dict[str, Any] = {"num_layers": 2, "num_units": 3, "input_size": 2, "rnn_mode": mode,
                                  "input_mode": "linear_input", "direction": "bidirectional", "num_proj": 0,
                                  "dtype": "float32"}
        valid = dict(kwargs)
        for name, value in edits:
            kwargs[name] = value.value
        if function == "size":
            refused_or_done(lambda: cudnn_rnn.cudnn_rnn_params_size(**kwargs))
            return
        del kwargs["dtype"], valid["dtype"]
        params = np.linspace(-1, 1, cudnn_rnn.cudnn_rnn_params_size(**valid), dtype=np.float32)
        if function == "to_canonical":
            hostile = params if params_change is None else changed(params, params_change)
            refused_or_done(lambda: cudnn_rnn.cudnn_rnn_params_to_canonical(params=hostile, **kwargs))
            return
        weights, biases = cudnn_rnn.cudnn_rnn_params_to_canonical(params=params, **valid)
        target: list[Any] = weights if entry % 2 else biases
        if entry_change is not None:
            target[entry % len(target)] = changed(target[entry % len(target)], entry_change)
        given_weights: Any = weights
        if list_change is not None:
            given_weights = LIST_CHANGES[list_change](weights)
        refused_or_done(lambda: cudnn_rnn.cudnn_rnn_canonical_to_params(weights=given_weights, biases=biases,
                                                                        **kwargs))

    run_in_child(prop, request, WALL_SECONDS)


def _object_array(items: list[Any]) -> np.ndarray:
    """A 1-D object array holding ``items`` (np.array would try to stack them)."""
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item
    return array


#: changes of the list of canonical weights
LIST_CHANGES: dict[str, Callable[[list[Any]], Any]] = {
    "drop one": lambda w: w[:-1], "add one": lambda w: w + w[:1], "tuple": tuple,
    "generator": lambda w: (x for x in w), "ndarray": _object_array, "None": lambda w: None,
    "dict": lambda w: dict(enumerate(w))}
CONFIG_FIELDS = ("rnn_mode", "num_layers", "num_units", "input_size", "input_mode", "direction", "num_proj",
                 "dropout", "seed", "seed2", "dtype", "algo")
VALID_CONFIG: dict[str, Any] = {"rnn_mode": "lstm", "num_layers": 1, "num_units": 3, "input_size": 2,
                                "input_mode": "linear_input", "direction": "unidirectional", "num_proj": 0,
                                "dropout": 0.0, "seed": 0, "seed2": 0, "dtype": "float32", "algo": "standard"}


PINNED_CONFIG_EDITS: list[list[tuple[str, V]]] = PINNED_SIZE_EDITS + [
    [(name, _value(label))] for name in ("dropout", "seed", "seed2")
    for label in ("10**400", "-10**400", "Fraction(10**400)", "np.longdouble(1e400)", "nan")]


@_second_guard
def test_config_refuses_hostile_fields(request: pytest.FixtureRequest) -> None:
    """RNNConfig(...) and RNNConfig.replace(...) with one to three hostile fields (dropout=10**400 included)."""

    @_settings(200)
    @given(edits=pinned_or(PINNED_CONFIG_EDITS, st.lists(st.tuples(st.sampled_from(CONFIG_FIELDS), size_values),
                                                       min_size=1, max_size=3)))
    @guarded
    def prop(edits: list[tuple[str, V]]) -> None:
        fields = dict(VALID_CONFIG)
        for name, value in edits:
            fields[name] = value.value
        config = refused_or_done(lambda: RNNConfig(**fields))
        if config is not None:
            refused_or_done(lambda: cudnn_rnn.cudnn_rnn_params_size(
                config.num_layers, config.num_units, config.input_size, rnn_mode=config.rnn_mode,
                input_mode=config.input_mode, direction=config.direction, num_proj=config.num_proj))
        base = RNNConfig(**VALID_CONFIG)
        refused_or_done(lambda: base.replace(**{name: value.value for name, value in edits}))

    run_in_child(prop, request, WALL_SECONDS)


# ---- the format converters ------------------------------------------------------------------------------------
#: changes of a format's named tensors (given the name of the first)
TENSORS_CHANGES: dict[str, Callable[[dict[Any, Any], str], Any]] = {
    "drop one": lambda t, first: {k: v for k, v in t.items() if k != first},
    "add one": lambda t, first: {**t, "extra": t[first]}, "int key": lambda t, first: {**t, 1: t[first]},
    "list of pairs": lambda t, first: list(t.items()), "None": lambda t, first: None,
    "mixed dtypes": lambda t, first: {**t, list(t)[-1]: t[list(t)[-1]].astype(np.float64)}}


@_second_guard
def test_convert_refuses_hostile_arguments(request: pytest.FixtureRequest) -> None:
    """cudnn_rnn.convert.to_format / from_format with hostile formats, params, tensors, configs and flags."""
    hostile_configs = st.sampled_from([V("None", None), V("dict of fields", dict(VALID_CONFIG)), V("'lstm'", "lstm"),
                                       V("2**31 layers", ("lstm", 2**31, 1, 1)), V("2**40 units", ("gru", 1, 2**40, 1)),
                                       V("2**40 inputs", ("lstm", 1, 1, 2**40)),
                                       V("10**400 layers", ("rnn_tanh", 10**400, 1, 1))])
    tensor_edits = st.sampled_from(sorted(TENSORS_CHANGES))

    @_settings(120)
    @given(mode=st.sampled_from(("lstm", "gru", "rnn_tanh")), fmt=st.sampled_from(FORMATS),
           direction=st.sampled_from(["to", "from"]), fmt_change=st.none() | st.sampled_from(STRINGS + NOT_NUMBERS),
           config_change=st.none() | hostile_configs, params_change=st.none() | array_changes,
           tensors_change=st.none() | tensor_edits, allow=st.sampled_from([V("False", False), V("True", True)]
                                                                            + NOT_NUMBERS[3:8]))
    @guarded
    def prop(mode: str, fmt: str, direction: str, fmt_change: V | None, config_change: V | None,
             params_change: str | None, tensors_change: str | None, allow: V) -> None:
        config = RNNConfig(mode, 1, 3, 2)
        params = np.linspace(-1, 1, cudnn_rnn.cudnn_rnn_params_size(1, 3, 2, rnn_mode=mode), dtype=np.float32)
        given_config: Any = config
        if config_change is not None:
            value = config_change.value
            given_config = refused_or_done(lambda: RNNConfig(*value)) if isinstance(value, tuple) else value
            if isinstance(value, tuple) and given_config is None:
                return  # refused already by RNNConfig
        given_fmt = fmt if fmt_change is None else fmt_change.value
        if direction == "to":
            hostile = params if params_change is None else changed(params, params_change)
            refused_or_done(lambda: to_format(given_fmt, hostile, given_config, allow_approximation=allow.value))
            return
        tensors = refused_or_done(lambda: to_format(fmt, params, config, allow_approximation=True))
        if tensors is None:
            return  # this format cannot hold this mode
        valid: dict[str, Any] = dict(tensors.value)
        first = next(iter(valid))
        named: Any = dict(valid) if tensors_change is None else TENSORS_CHANGES[tensors_change](valid, first)
        if params_change is not None and isinstance(named, dict) and first in named:
            named[first] = changed(valid[first], params_change)
        refused_or_done(lambda: from_format(given_fmt, named, given_config, allow_approximation=allow.value))

    run_in_child(prop, request, WALL_SECONDS)


# ---- the layers -----------------------------------------------------------------------------------------------
LAYER_CLASSES: dict[str, type[RecurrentLayer]] = {"LSTM": LSTM, "GRU": GRU, "RNN": RNN}
LAYER_ARGUMENTS = ("input_size", "num_units", "num_layers", "bidirectional", "dropout", "input_mode", "dtype", "xp",
                   "seed", "algo", "num_proj", "unit_forget_bias", "activation")
XP_VALUES: list[V] = [V("math module", math), V("'numpy'", "numpy"), V("np.random", np.random), V("np", np),
                      V("json module", json)]


@_second_guard
def test_layer_constructors_refuse_hostile_arguments(request: pytest.FixtureRequest) -> None:
    """LSTM/GRU/RNN(...) with one or two hostile arguments (huge sizes and dropout=10**400 included)."""

    @_settings(150)
    @given(cls=st.sampled_from(sorted(LAYER_CLASSES)),
           edits=pinned_or(PINNED_CONFIG_EDITS, st.lists(st.tuples(
               st.sampled_from(LAYER_ARGUMENTS), st.one_of(hostile_scalars, st.sampled_from(ODD_DTYPES + XP_VALUES))),
               min_size=1, max_size=2)))
    @guarded
    def prop(cls: str, edits: list[tuple[str, V]]) -> None:
        kwargs: dict[str, Any] = {"input_size": 2, "num_units": 3, "num_layers": 1}
        allowed = {"LSTM": {"num_proj", "unit_forget_bias"}, "RNN": {"activation"}}.get(cls, set())
        for name, value in edits:
            if name in LAYER_ARGUMENTS[:10] or name in allowed:
                kwargs[name] = value.value
        refused_or_done(lambda: LAYER_CLASSES[cls](**kwargs))

    run_in_child(prop, request, WALL_SECONDS)


@dataclass(frozen=True)
class LayerCall:
    """A small layer and a valid forward call of it."""

    cls: str
    input_size: int
    units: int
    layers: int
    bidirectional: bool
    proj: int
    dropout: float
    time: int
    batch: int
    time_major: bool

    def layer(self) -> RecurrentLayer:
        extra: dict[str, Any] = {"num_proj": self.proj} if self.cls == "LSTM" else {}
        return LAYER_CLASSES[self.cls](self.input_size, self.units, self.layers, bidirectional=self.bidirectional,
                                       dropout=self.dropout, **extra)

    def x(self) -> np.ndarray:
        shape = (self.time, self.batch, self.input_size) if self.time_major else (self.batch, self.time,
                                                                                   self.input_size)
        return np.linspace(-1, 1, math.prod(shape), dtype=np.float32).reshape(shape)

    def state(self, width: int) -> np.ndarray:
        d = 2 if self.bidirectional else 1
        shape = (self.layers * d, self.batch, width) if self.time_major else (self.batch, self.layers * d, width)
        return np.full(shape, 0.5, np.float32)


@st.composite
def layer_calls(draw: st.DrawFn, min_batch: int = 0) -> LayerCall:
    cls = draw(st.sampled_from(sorted(LAYER_CLASSES)))
    units = draw(st.integers(1, 3))
    proj = draw(st.integers(0, units - 1)) if cls == "LSTM" else 0
    return LayerCall(cls, draw(st.integers(1, 3)), units, draw(st.integers(1, 2)), draw(st.booleans()), proj,
                     draw(st.sampled_from([0.0, 0.5])), draw(st.integers(0, 3)), draw(st.integers(min_batch, 2)),
                     draw(st.booleans()))


#: x changes beyond ARRAY_CHANGES: a huge batch that is invalid anyway (must be refused before anything is allocated)
X_CHANGES: dict[str, Callable[[np.ndarray, bool], Any]] = {
    "huge batch, wrong width": lambda x, tm: huge(np.zeros(x.shape[:2] + (x.shape[2] + 1,), x.dtype), 1 if tm else 0),
    "huge batch, int32": lambda x, tm: huge(x.astype(np.int32), 1 if tm else 0),
    "huge batch, float64": lambda x, tm: huge(x.astype(np.float64), 1 if tm else 0),
    "huge batch, 4-D": lambda x, tm: huge(x[..., None], 1 if tm else 0),
    "huge width": lambda x, tm: huge(x, 2),
}
FORWARD_ARGUMENTS = ("x", "lengths", "h0", "c0", "time_major", "training")
forward_edit = st.tuples(st.sampled_from(FORWARD_ARGUMENTS),
                         st.one_of(array_changes, st.sampled_from(sorted(X_CHANGES)), hostile_scalars))
gradient_edit = st.tuples(st.sampled_from(["dy", "dh", "dc"]), array_changes)


@_second_guard
def test_layer_forward_backward_refuse_hostile_arguments(request: pytest.FixtureRequest) -> None:
    """layer.forward(x, lengths, h0, c0, time_major=..., training=...) then layer.backward(dy, dh, dc)."""

    @_settings(150)
    @given(call=layer_calls(), edits=st.lists(forward_edit, min_size=1, max_size=2),
           gradient_edits=st.lists(gradient_edit, max_size=2))
    @guarded
    def prop(call: LayerCall, edits: list[tuple[str, Any]], gradient_edits: list[tuple[str, str]]) -> None:
        layer = call.layer()
        x = call.x()
        width = layer.config.state_size
        kwargs: dict[str, Any] = {"x": x, "lengths": None, "h0": None, "c0": None, "time_major": call.time_major,
                                  "training": True}
        valid_arrays = {"x": x, "h0": call.state(width), "c0": call.state(call.units),
                        "lengths": np.zeros(call.batch, np.int64)}
        for name, value in edits:
            if isinstance(value, V):
                kwargs[name] = value.value
            elif name == "x" and value in X_CHANGES:
                kwargs["x"] = X_CHANGES[value](x, call.time_major)
            elif value in ARRAY_CHANGES and name in valid_arrays:
                if name == "x" and value in ("huge axis 0", "huge axis 1"):
                    value = "huge last axis"  # a huge T or B alone is a valid call, of endless work
                kwargs[name] = changed(valid_arrays[name], value)
        result = refused_or_done(lambda: layer.forward(**kwargs))
        if result is None or kwargs["training"] is not True:
            return
        y, h, c = result
        grads: dict[str, Any] = {"dy": np.ones_like(y), "dh": None, "dc": None}
        for name, value in gradient_edits:
            like = {"dy": y, "dh": h, "dc": c if c is not None else h}[name]
            grads[name] = changed(like, value)
        refused_or_done(lambda: layer.backward(**grads))

    run_in_child(prop, request, WALL_SECONDS)


#: lengths a layer must refuse (as TypeError or ValueError naming ``lengths``): only ints in [0, T] are lengths
BAD_LENGTHS: list[V] = [
    V("[1.5, 2.7]", [1.5, 2.7]), V("['1', '2']", ["1", "2"]), V("[True, False]", [True, False]),
    V("[2**40, 1]", [2**40, 1]), V("[10**400, 0]", [10**400, 0]), V("[-1, 0]", [-1, 0]), V("[T + 1, 0]", "T+1"),
    V("[nan, 0]", [math.nan, 0]), V("[inf, 0]", [math.inf, 0]), V("[None, 0]", [None, 0]), V("[[1], [0]]", [[1], [0]]),
    V("[1j, 0]", [1j, 0]), V("[np.float64(1.0), 0]", [np.float64(1.0), 0]),
    V("[np.bool_(True), 0]", [np.bool_(True), 0]),
    V("['', 0]", ["", 0]), V("[b'1', 0]", [b"1", 0]), V("'12'", "12"), V("{}", {}), V("[{}, 0]", [{}, 0]),
    V("np.array([1.5, 0.5])", np.array([1.5, 0.5])), V("np.array([True, False])", np.array([True, False])),
    V("np.array(['1', '0'])", np.array(["1", "0"])), V("np.array([2**40, 1])", np.array([2**40, 1])),
]
#: training flags a layer must refuse (as TypeError or ValueError naming ``training``)
BAD_TRAINING: list[V] = [V("'no'", "no"), V("''", ""), V("{}", {}), V("[]", []), V("None", None), V("1", 1), V("0", 0),
                         V("1.0", 1.0), V("np.int64(1)", np.int64(1)), V("np.array(True)", np.array(True)),
                         V("'False'", "False"), V("nan", math.nan)]


def _lengths_for(value: Any, batch: int, time: int) -> Any:
    """A bad lengths pattern sized to the batch (lists and arrays repeat their entries)."""
    if isinstance(value, str) and value == "T+1":
        return [time + 1] + [0] * (batch - 1)
    if isinstance(value, list):
        return [value[i % len(value)] for i in range(batch)]
    if isinstance(value, np.ndarray):
        return np.resize(value, batch)
    return value


@_second_guard
def test_layer_forward_refuses_lengths_that_are_not_ints_in_range(request: pytest.FixtureRequest) -> None:
    """forward(lengths=[1.5, 2.7] / ['1', '2'] / [True, False] / [2**40, 1] ...) is a refusal naming lengths."""

    @_settings(80)
    @given(call=layer_calls(min_batch=1), lengths=st.sampled_from(BAD_LENGTHS), training=st.booleans())
    @guarded
    def prop(call: LayerCall, lengths: V, training: bool) -> None:
        layer = call.layer()
        bad = _lengths_for(lengths.value, call.batch, call.time)
        refused_naming(lambda: layer.forward(call.x(), lengths=bad, time_major=call.time_major, training=training),
                       "lengths")

    run_in_child(prop, request, WALL_SECONDS)


@_second_guard
def test_layer_forward_refuses_training_that_is_not_a_bool(request: pytest.FixtureRequest) -> None:
    """forward(training='no' / {} / 1 / None ...) is a refusal naming training: only True, False or np.bool_."""

    @_settings(40)
    @given(call=layer_calls(), training=st.sampled_from(BAD_TRAINING))
    @guarded
    def prop(call: LayerCall, training: V) -> None:
        layer = call.layer()
        refused_naming(lambda: layer.forward(call.x(), time_major=call.time_major, training=training.value),
                       "training")

    run_in_child(prop, request, WALL_SECONDS)


PINNED_STATE_EDITS: list[tuple[str, V]] = [("dropout", _value("10**400")), ("dropout", _value("Fraction(10**400)")),
                                           ("num_layers", _value("2**40")), ("num_units", _value("10**400")),
                                           ("input_size", _value("2**31"))]
STATE_KEYS = ("config", "step", "params", "dropout_rng", "extra")
DROPOUT_RNG_VALUES: list[V] = [V("{}", {}), V("{'device': 1, 'states': 2}", {"device": 1, "states": 2}),
                               V("states float", {"device": "x", "states": np.zeros(4)}),
                               V("states huge", {"device": "x", "states": np.broadcast_to(np.uint8(0), (2**40,))})]


@_second_guard
def test_layer_states_and_from_params_refuse_hostile_input(request: pytest.FixtureRequest) -> None:
    """load_state_dict / from_state_dict / from_params with hostile states, configs, params, steps and modules."""
    targets = st.sampled_from(["load_state_dict", "from_state_dict", "from_params"])

    @_settings(150)
    @given(target=targets, edit=st.none() | pinned_or(PINNED_STATE_EDITS, st.tuples(
        st.sampled_from(CONFIG_FIELDS + ("bogus",)), st.one_of(hostile_scalars, st.sampled_from(ODD_DTYPES)))),
           key=st.none() | st.sampled_from(STATE_KEYS), key_value=st.one_of(hostile_scalars, array_changes,
                                                                             st.sampled_from(DROPOUT_RNG_VALUES)),
           xp=st.none() | st.sampled_from(XP_VALUES), keep_seed=st.sampled_from([V("False", False)] + NOT_NUMBERS[:6]))
    @guarded
    def prop(target: str, edit: tuple[str, V] | None, key: str | None, key_value: Any, xp: V | None,
             keep_seed: V) -> None:
        layer = LSTM(2, 3)
        state: Any = dict(layer.state_dict())
        state["config"] = dict(state["config"])
        if edit is not None:
            state["config"][edit[0]] = edit[1].value
        if key is not None:
            if isinstance(key_value, V):
                state[key] = key_value.value
            else:
                state[key] = changed(layer.params, key_value) if key != "dropout_rng" else None
        module = None if xp is None else xp.value
        if target == "load_state_dict":
            refused_or_done(lambda: layer.load_state_dict(state, keep_seed=keep_seed.value))
        elif target == "from_state_dict":
            refused_or_done(lambda: RecurrentLayer.from_state_dict(state, xp=module))
        else:
            config: Any = refused_or_done(lambda: RNNConfig(**state["config"])) if isinstance(state, dict) else None
            params: Any = state.get("params") if isinstance(state, dict) else None
            step: Any = state.get("step") if isinstance(state, dict) else None
            refused_or_done(lambda: LSTM.from_params(params, config, xp=module, step=step))

    run_in_child(prop, request, WALL_SECONDS)


# ---- the optimisers -------------------------------------------------------------------------------------------
def _parameter_list(change: str) -> Any:
    good = np.ones(4, np.float32)
    return {"empty": [], "None": None, "str": "abc", "[None]": [None], "[list]": [[1.0, 2.0]],
            "[int32]": [good.astype(np.int32)], "[object]": [good.astype(object)],
            "[complex64]": [good.astype(np.complex64)], "[0-d]": [np.array(1.0, np.float32)],
            "[huge read-only broadcast]": [np.broadcast_to(np.float32(1), (2**40,))],
            "[read-only]": [np.broadcast_to(np.float32(1), (4,))], "ndarray": good, "tuple": (good,),
            "generator": (g for g in [good]), "[float16]": [good.astype(np.float16)], "dict": {0: good},
            "[all NaN]": [np.full(4, np.nan, np.float32)]}[change]


PARAMETER_LISTS = ["empty", "None", "str", "[None]", "[list]", "[int32]", "[object]", "[complex64]", "[0-d]",
                   "[huge read-only broadcast]", "[read-only]", "ndarray", "tuple", "generator", "[float16]", "dict",
                   "[all NaN]"]
BETAS: list[V] = [V("(0.9,)", (0.9,)), V("(1.0, 0.5)", (1.0, 0.5)), V("(nan, 0.9)", (math.nan, 0.9)), V("'ab'", "ab"),
                  V("(10**400, 0.9)", (10**400, 0.9)), V("np.array([0.9, 0.99])", np.array([0.9, 0.99])),
                  V("(0.9, '0.99')", (0.9, "0.99")), V("(True, 0.5)", (True, 0.5))]
OPTIMISER_STEPS = ("SGD", "Adam", "clip_grad_norm", "step", "load_state_dict")
OPTIMISER_ARGUMENTS = ("params_list", "lr", "momentum", "nesterov", "betas", "eps", "max_norm", "steps", "kind",
                       "velocity", "first_moment", "second_moment", "bogus")
_BIG, _NONE = _value("10**400"), _value("None")
#: (what, optimiser kind, argument, value, parameter list, whether the parameter list is the value)
PINNED_OPTIMISER_CASES: list[tuple[str, str, str, V, str, bool]] = [
    ("Adam", "Adam", "lr", _BIG, "empty", False), ("SGD", "SGD", "lr", _BIG, "empty", False),
    ("Adam", "Adam", "eps", _value("Fraction(10**400)"), "empty", False),
    ("Adam", "Adam", "betas", BETAS[4], "empty", False), ("SGD", "SGD", "momentum", _value("-10**400"), "empty", False),
    ("clip_grad_norm", "SGD", "max_norm", _BIG, "empty", False),
    ("load_state_dict", "Adam", "lr", _BIG, "empty", False),
    ("load_state_dict", "Adam", "betas", BETAS[4], "empty", False),
    ("load_state_dict", "SGD", "momentum", _BIG, "empty", False),
    ("SGD", "SGD", "params_list", _NONE, "[huge read-only broadcast]", True),
    ("Adam", "Adam", "params_list", _NONE, "[huge read-only broadcast]", True),
    ("clip_grad_norm", "SGD", "params_list", _NONE, "[huge read-only broadcast]", True),
]


@_second_guard
def test_optimisers_refuse_hostile_arguments(request: pytest.FixtureRequest) -> None:
    """optim.SGD / optim.Adam / optim.clip_grad_norm, their step and load_state_dict (lr=10**400 included)."""
    values = st.one_of(hostile_scalars, st.sampled_from(BETAS))

    @_settings(150)
    @given(case=pinned_or(PINNED_OPTIMISER_CASES, st.tuples(
        st.sampled_from(OPTIMISER_STEPS), st.sampled_from(["SGD", "Adam"]), st.sampled_from(OPTIMISER_ARGUMENTS),
        values, st.sampled_from(PARAMETER_LISTS), st.booleans())))
    @guarded
    def prop(case: tuple[str, str, str, V, str, bool]) -> None:
        what, kind, argument, value, parameters, use_list = case
        hostile = _parameter_list(parameters) if use_list else value.value
        if what in ("SGD", "Adam"):
            kwargs: dict[str, Any] = ({"params_list": [np.ones(4, np.float32)], "lr": 0.1, "momentum": 0.5,
                                       "nesterov": False} if what == "SGD" else
                                      {"params_list": [np.ones(4, np.float32)], "lr": 1e-3, "betas": (0.9, 0.99),
                                       "eps": 1e-8})
            if argument in kwargs:
                kwargs[argument] = hostile
            refused_or_done(lambda: getattr(optim, what)(**kwargs))
            return
        if what == "clip_grad_norm":
            grads: Any = [np.ones(4, np.float32)]
            norm: Any = 1.0
            if argument == "max_norm":
                norm = value.value
            else:
                grads = hostile
            refused_or_done(lambda: optim.clip_grad_norm(grads, norm))
            return
        params = [np.ones(4, np.float32), np.ones((2, 3), np.float64)]
        optimiser = optim.SGD(params, lr=0.1, momentum=0.5) if kind == "SGD" else optim.Adam(params)
        if what == "step":
            refused_or_done(lambda: optimiser.step(hostile))
            return
        state: Any = dict(optimiser.state_dict())
        if argument == "bogus":
            state = hostile
        else:
            state[argument] = hostile
        refused_or_done(lambda: optimiser.load_state_dict(state))

    run_in_child(prop, request, WALL_SECONDS)


# ---- the params-file reader ------------------------------------------------------------------------------------
def _saved_layer_arrays() -> dict[str, np.ndarray]:
    buffer = BytesIO()
    layer = LSTM(2, 3)
    write_params_file(buffer, layer.params, layer.config, 7)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _npy_claiming(shape: tuple[int, ...], descr: str) -> bytes:
    """An .npy member whose header claims ``shape`` of ``descr`` and whose data is 16 bytes."""
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode("latin1")
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 16


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _npy(value: np.ndarray) -> bytes:
    buffer = BytesIO()
    np.lib.format.write_array(buffer, value, allow_pickle=True)
    return buffer.getvalue()


JSON_VALUES: list[V] = [V("10**400", 10**400), V("-10**400", -(10**400)), V("1e400 (inf)", math.inf),
                        V("nan", math.nan), V("2**40", 2**40), V("2**63", 2**63), V("-1", -1), V("1.5", 1.5),
                        V("'x'", "x"), V("''", ""), V("None", None), V("True", True), V("[]", []), V("{}", {}),
                        V("2**31", 2**31), V("'float64'", "float64"), V("'bfloat16'", "bfloat16"), V("0", 0)]
CONFIG_TEXTS: list[V] = [V("'[' * 100000", "[" * 100000), V("'{\"a\":' * 50000", '{"a":' * 50000), V("'[]'", "[]"),
                         V("'null'", "null"), V("'1e400'", "1e400"), V("''", ""), V("'\\x00'", "\x00"),
                         V("num_layers of 5000 digits", '{"num_layers": ' + "9" * 5000 + "}"),
                         V("'{'", "{"), V("'\"lstm\"'", '"lstm"')]
MEMBER_VALUES: list[V] = [
    V("int32 [84]", np.zeros(84, np.int32)), V("complex64 [84]", np.zeros(84, np.complex64)),
    V("float32 [2, 42]", np.zeros((2, 42), np.float32)), V("float32 []", np.zeros(0, np.float32)),
    V("float64 [84]", np.zeros(84)), V("object", np.array([None], dtype=object)),
    V("uint16 [84]", np.zeros(84, np.uint16)), V("-1", np.array(-1)), V("2**63 uint64", np.array(2**63, np.uint64)),
    V("1.5", np.array(1.5)), V("'1'", np.array("1")),
    V("[1]", np.array([1])), V("2", np.array(2)), V("b'{}'", np.array(b"{}")), V("['a', 'b']", np.array(["a", "b"])),
    V("float32 NaN [84]", np.full(84, np.nan, np.float32)), V("bool", np.array(True)),
]
CLAIMED_SHAPES: list[V] = [V("(2**40,) <f4", ((2**40,), "<f4")), V("(2**31,) <f4", ((2**31,), "<f4")),
                           V("() <U1000000000", ((), "<U1000000000")), V("(2**62, 4) <f4", ((2**62, 4), "<f4")),
                           V("(2**40,) |O", ((2**40,), "|O")), V("(-1,) <f4", ((-1,), "<f4"))]
RAW_FILES: list[V] = [V("empty", b""), V("zip local header only", b"PK\x03\x04" + b"\0" * 40),
                      V("garbage", bytes(range(256)) * 4), V("empty zip", _zip({})), V("a .npy", _npy(np.zeros(3))),
                      V("zip of text", _zip({"params.npy": b"not an npy"}))]
PATHS = ("missing", "folder", "fifo", "/dev/null", "file under a file")

#: path kind -> what reading it raises besides the reader's own refusal: no file there is a FileNotFoundError
#: (a path through a file names none either), and a folder an IsADirectoryError, as ``open`` says
PATH_ERRORS: dict[str, tuple[type[Exception], ...]] = {
    "missing": (FileNotFoundError,), "file under a file": (FileNotFoundError,), "folder": (IsADirectoryError,)}


def _write_params_file(folder: Path, edit: str, member: str, value: Any) -> Path:
    """A params file in ``folder`` with one hostile edit."""
    path = folder / "layer.npz"
    arrays = dict(_SAVED)
    members = {name + ".npy": _npy(array) for name, array in arrays.items()}
    if edit == "config field":
        fields = json.loads(str(arrays["config"]))
        fields[member] = value.value
        members["config.npy"] = _npy(np.array(json.dumps(fields)))
    elif edit == "config text":
        members["config.npy"] = _npy(np.array(value.value))
    elif edit == "member":
        members[member + ".npy"] = _npy(value.value)
    elif edit == "drop member":
        del members[member + ".npy"]
    elif edit == "extra member":
        members["evil.npy"] = _npy(np.zeros(3))
    elif edit == "claimed shape":
        members[member + ".npy"] = _npy_claiming(*value.value)
    elif edit in ("raw", "truncated"):
        blob = value.value if edit == "raw" else _zip(members)[: len(_zip(members)) // 2]
        path.write_bytes(blob)
        return path
    path.write_bytes(_zip(members))
    return path


def _hostile_path(folder: Path, kind: str) -> Path:
    if kind == "missing":
        return folder / "nowhere" / "layer.npz"
    if kind == "folder":
        (folder / "dir.npz").mkdir()
        return folder / "dir.npz"
    if kind == "fifo":
        os.mkfifo(folder / "pipe.npz")
        return folder / "pipe.npz"
    if kind == "file under a file":
        (folder / "file").write_bytes(b"x")
        return folder / "file" / "layer.npz"
    return Path(kind)


_SAVED: dict[str, np.ndarray] = _saved_layer_arrays()


def _labelled(pool: list[V], label: str) -> V:
    return next(v for v in pool if v.label == label)


#: hostile files every run tries: numbers whose float() overflows, a huge layer count, deep nesting, huge claims
PINNED_FILE_EDITS: list[tuple[str, str, V]] = [
    ("config field", "dropout", _labelled(JSON_VALUES, "10**400")),
    ("config field", "num_layers", _labelled(JSON_VALUES, "2**40")),
    ("config field", "num_units", _labelled(JSON_VALUES, "10**400")),
    ("config text", "config", CONFIG_TEXTS[0]), ("config text", "config", CONFIG_TEXTS[1]),
    ("claimed shape", "params", CLAIMED_SHAPES[0]), ("claimed shape", "config", CLAIMED_SHAPES[2]),
]


@_second_guard
def test_params_file_reader_refuses_hostile_files(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """LSTM.load(path): hostile config (10**400, deep nesting), members, claimed shapes, raw bytes, paths."""
    members = st.sampled_from(["params", "config", "step", "format"])
    edits = st.one_of(
        st.sampled_from(PINNED_FILE_EDITS),
        st.tuples(st.just("config field"), st.sampled_from(sorted(VALID_CONFIG) + ["bogus"]),
                  st.sampled_from(JSON_VALUES)),
        st.tuples(st.just("config text"), st.just("config"), st.sampled_from(CONFIG_TEXTS)),
        st.tuples(st.just("member"), members, st.sampled_from(MEMBER_VALUES)),
        st.tuples(st.just("claimed shape"), members, st.sampled_from(CLAIMED_SHAPES)),
        st.tuples(st.sampled_from(["drop member", "extra member", "truncated"]), members, st.just(V("-", None))),
        st.tuples(st.just("raw"), st.just("-"), st.sampled_from(RAW_FILES)))

    @_settings(120)
    @given(edit=edits)
    @guarded
    def prop(edit: tuple[str, str, V]) -> None:
        kind, member, value = edit
        work = Path(tempfile.mkdtemp(dir=tmp_path))
        try:
            path = _write_params_file(work, kind, member, value)
            refused_or_done(lambda: LSTM.load(path), (ValueError,))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    run_in_child(prop, request, WALL_SECONDS)


@_second_guard
def test_params_file_reader_refuses_paths_that_are_not_files(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """LSTM.load(path) of a FIFO (no writer: opening it blocks), a folder, a path under a file, /dev/null, nothing.

    Every path is tried (a hang on one does not hide the others); all that fail are named together.
    """

    @guarded
    def load(kind: str) -> None:
        work = Path(tempfile.mkdtemp(dir=tmp_path))
        try:
            path = _hostile_path(work, kind)
            errors = (ValueError, *PATH_ERRORS.get(kind, ()))
            refused_or_done(lambda: LSTM.load(path), errors)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def every_path() -> None:
        failures = []
        for kind in PATHS:
            try:
                load(kind)
            except Hang:
                failures.append(f"LSTM.load(<{kind}>): still running after {EXAMPLE_SECONDS} s (a hang)")
            except Exception as error:
                failures.append(f"LSTM.load(<{kind}>): {type(error).__name__}: {error}")
        assert not failures, "\n".join(failures)

    run_in_child(every_path, request, WALL_SECONDS)


# ---- the checkpoint reader -------------------------------------------------------------------------------------
def _checkpoint_tree() -> tuple[Any, dict[str, np.ndarray]]:
    """A valid checkpoint's contents tree (JSON-ready, arrays by reference) and its arrays."""
    from cudnn_rnn.checkpoint._tree import flatten

    layer = LSTM(2, 3)
    adam, sgd = optim.Adam([layer.params]), optim.SGD([layer.params], lr=0.1, momentum=0.5)
    contents = {"step": 5, "layers": {"lstm": layer.state_dict()},
                "optimizers": {"adam": adam.state_dict(), "sgd": sgd.state_dict()},
                "arrays": {"w": np.ones((2, 2), np.float32)}, "state": {"epoch": 1, "cursor": [1, 2]}}
    return flatten(contents)


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON tree (dict keys and list indices), the root included."""
    found = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            found += _paths(value, prefix + (key,))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            found += _paths(value, prefix + (index,))
    return found


_TREE, _TENSORS = _checkpoint_tree()
TREE_PATHS = _paths(_TREE)[1:]
TREE_VALUES: list[V] = JSON_VALUES + [V("{'$array': 'missing'}", {"$array": "missing"}),
                                      V("{'$array': 'arrays/w'} again", {"$array": "arrays/w"}),
                                      V("{'$array': 1}", {"$array": 1}), V("[[[...]]] x 5000", "DEEP"),
                                      V("'lstm'", "lstm"), V("'Adam'", "Adam"), V("[0.9, 10**400]", [0.9, 10**400]),
                                      V("[1e400, 0.9]", [math.inf, 0.9])]
TENSOR_VALUES: list[V] = [V("int32 [84]", np.zeros(84, np.int32)), V("float32 [0]", np.zeros(0, np.float32)),
                          V("float64 [84]", np.zeros(84)), V("float32 [84, 1]", np.zeros((84, 1), np.float32)),
                          V("bool [84]", np.zeros(84, bool)), V("uint64 [84]", np.zeros(84, np.uint64)),
                          V("float32 NaN [84]", np.full(84, np.nan, np.float32)), V("uint8 []", np.zeros(0, np.uint8))]


#: hostile contents every run tries: numbers whose float() overflows, a huge layer count, deep nesting
PINNED_TREE_EDITS: list[tuple[tuple[Any, ...], V]] = [
    (("layers", "lstm", "config", "dropout"), _labelled(TREE_VALUES, "10**400")),
    (("layers", "lstm", "config", "num_layers"), _labelled(TREE_VALUES, "2**40")),
    (("layers", "lstm", "config", "num_units"), _labelled(TREE_VALUES, "10**400")),
    (("layers", "lstm", "step"), _labelled(TREE_VALUES, "-10**400")),
    (("optimizers", "adam", "lr"), _labelled(TREE_VALUES, "10**400")),
    (("optimizers", "adam", "eps"), _labelled(TREE_VALUES, "-10**400")),
    (("optimizers", "adam", "betas"), _labelled(TREE_VALUES, "[0.9, 10**400]")),
    (("optimizers", "sgd", "momentum"), _labelled(TREE_VALUES, "10**400")),
    (("optimizers", "sgd", "steps"), _labelled(TREE_VALUES, "10**400")),
    (("step",), _labelled(TREE_VALUES, "10**400")), (("state",), _labelled(TREE_VALUES, "[[[...]]] x 5000")),
]
assert all(place in TREE_PATHS for place, _ in PINNED_TREE_EDITS)


def _set_at(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    tree = json.loads(json.dumps(tree))
    node = tree
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return tree


@_second_guard
def test_checkpoint_reader_refuses_hostile_contents(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """checkpoint.load: files with a valid checksum whose contents or arrays are hostile; paths that are not files."""

    @_settings(150)
    @given(edit=pinned_or(PINNED_TREE_EDITS, st.tuples(st.sampled_from(TREE_PATHS), st.sampled_from(TREE_VALUES))),
           tensor=st.none() | st.tuples(st.sampled_from(sorted(_TENSORS)), st.sampled_from(TENSOR_VALUES)),
           path=st.none() | st.sampled_from(["folder", "fifo", "/dev/null", "file under a file"]))
    @guarded
    def prop(edit: tuple[tuple[Any, ...], V], tensor: tuple[str, V] | None, path: str | None) -> None:
        place, value = edit
        hostile = value.value
        tree = _set_at(_TREE, place, "\0DEEP\0" if hostile == "DEEP" else hostile)
        text = json.dumps(tree).replace('"\\u0000DEEP\\u0000"', "[" * 5000 + "]" * 5000)
        tensors = dict(_TENSORS)
        if tensor is not None:
            tensors[tensor[0]] = tensor[1].value
        blob = b"".join(bytes(chunk) for chunk in _container.encode(tensors, text))
        work = Path(tempfile.mkdtemp(dir=tmp_path))
        try:
            target = work / "hostile.safetensors"
            target.write_bytes(blob)
            if path is not None:
                target = _hostile_path(work, path)
            not_there = (FileNotFoundError,) if path == "file under a file" else ()  # (checkpoint.load's own)
            loaded = refused_or_done(lambda: checkpoint.load(target), (CheckpointError, *not_there))
            if loaded is None:
                return
            for name in loaded.layers:
                loaded.layer(name)
            fresh = LSTM(2, 3)
            refused_or_done(lambda: loaded.restore(layers={name: fresh for name in loaded.layers}))
            optimisers = {"adam": optim.Adam([fresh.params]), "sgd": optim.SGD([fresh.params], lr=0.1, momentum=0.5)}
            refused_or_done(lambda: loaded.restore(optimizers={name: optimisers.get(name, optimisers["adam"])
                                                               for name in loaded.optimizers}))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    run_in_child(prop, request, WALL_SECONDS)


# ---- the command ------------------------------------------------------------------------------------------------
INT_TEXTS: list[str] = ["0", "-1", "3", "2147483648", "1099511627776", "1.5", "abc", "", "nan", "0x10", "1_0",
                        "\u0663", " 2 ", "9" * 400]


def _flag_values() -> list[V]:
    flags: list[tuple[str, ...]] = []
    for flag in ("--num-layers", "--num-units", "--input-size", "--num-proj", "--opset"):
        flags += [(flag, text) for text in INT_TEXTS]
    for flag, texts in (("--to", ["params", "torch", "keras", "onnx", "bogus", ""]),
                        ("--from", ["params", "torch", "keras", "bogus", ""]),
                        ("--rnn-mode", ["lstm", "gru", "bogus"]), ("--direction", ["bidirectional", "x"]),
                        ("--input-mode", ["skip_input", "x"]), ("--name", ["lstm", "nope", "", "\n", "a\x1b[31m"]),
                        ("--key", ["model", "", "\x00"]), ("--prefix", ["rnn.", ""])):
        flags += [(flag, text) for text in texts]
    flags += [(flag,) for flag in ("--trust-pickle", "--stack", "--allow-approximation", "--force", "--batch-major",
                                   "--json", "--bogus-flag")]
    config = ("--from", "params", "--rnn-mode", "lstm")
    for layers, units, inputs in (("1", "3", "2"), ("1099511627776", "3", "2"), ("1", "1099511627776", "2"),
                                  ("1", "3", "1099511627776"), ("9" * 400, "3", "2"), ("2147483648", "1", "1")):
        flags.append(config + ("--num-layers", layers, "--num-units", units, "--input-size", inputs))
    return [V(" ".join(f if len(f) < 20 else f"<{len(f)} chars>" for f in flag), flag) for flag in flags]


CLI_FLAGS = _flag_values()
CLI_INPUTS = ("params file", "torch npz", "bare params", "params file of 2**40 layers", "missing", "folder", "fifo",
              "empty", "garbage", "name of 300 chars", "name with newline", "name with NUL", "/dev/null",
              "file under a file")
CLI_OUTPUTS = ("new.npz", "new.pt", "new.onnx", "new.txt", "", "missing folder/out.npz", "folder.npz",
               "under a file/out.npz", "name of 300 chars.npz", "same as input", "existing.npz", "nul\x00.npz",
               "newline\n.npz")


def _cli_blobs() -> dict[str, bytes]:
    layer = LSTM(2, 3)
    buffer = BytesIO()
    write_params_file(buffer, layer.params, layer.config)
    torch_tensors = to_format("torch", layer.params, layer.config).value
    hostile = dict(_SAVED)
    fields = json.loads(str(hostile["config"]))
    fields["num_layers"] = 2**40
    hostile["config"] = np.array(json.dumps(fields))

    def npz(**arrays: Any) -> bytes:
        out = BytesIO()
        np.savez(out, **arrays)
        return out.getvalue()

    return {"params file": buffer.getvalue(), "torch npz": npz(**torch_tensors),
            "bare params": npz(params=layer.params), "params file of 2**40 layers": npz(**hostile)}


_CLI_BLOBS = _cli_blobs()
_FORCE = _labelled(CLI_FLAGS, "--force")
_HUGE_FLAGS = [v for v in CLI_FLAGS if v.label.startswith("--from params --rnn-mode lstm")][1:]
#: (command, flags, IN, OUT) every run tries: OUT's folder missing, OUT a folder, OUT under a file, huge sizes
PINNED_CLI_CASES: list[tuple[str, list[V], str, str]] = [
    ("inspect", [_labelled(CLI_FLAGS, "--num-layers 0")], "name with newline", ""),
    ("convert", [], "params file", "missing folder/out.npz"), ("convert", [_FORCE], "params file", "folder.npz"),
    ("convert", [], "params file", "under a file/out.npz"), ("convert", [], "params file", "name of 300 chars.npz"),
    ("convert", [_FORCE], "torch npz", "folder.npz"), ("convert", [], "params file of 2**40 layers", "new.npz"),
    ("inspect", [], "fifo", ""), ("convert", [], "fifo", "new.npz"),
] + [(command, [flags], "bare params", "new.npz") for flags in _HUGE_FLAGS for command in ("inspect", "convert")]


def _cli_input(work: Path, kind: str) -> str:
    if kind in _CLI_BLOBS:
        (work / "in.npz").write_bytes(_CLI_BLOBS[kind])
        return str(work / "in.npz")
    names = {"name of 300 chars": "n" * 300 + ".npz", "name with newline": "in\n.npz", "name with NUL": "in\x00.npz"}
    if kind in names:
        if "\x00" not in names[kind] and len(names[kind]) < 256:
            (work / names[kind]).write_bytes(_CLI_BLOBS["params file"])
        return str(work / names[kind])
    if kind == "empty":
        (work / "empty.npz").write_bytes(b"")
        return str(work / "empty.npz")
    if kind == "garbage":
        (work / "garbage.npz").write_bytes(bytes(range(256)))
        return str(work / "garbage.npz")
    return str(_hostile_path(work, kind))


def _cli_output(work: Path, kind: str, source: str) -> str:
    if kind == "same as input":
        return source
    if kind == "folder.npz":
        (work / "folder.npz").mkdir()
    if kind == "existing.npz":
        (work / "existing.npz").write_bytes(b"x")
    if kind == "under a file/out.npz":
        (work / "under a file").write_bytes(b"x")
    if kind == "name of 300 chars.npz":
        return str(work / ("o" * 300 + ".npz"))
    return str(work / kind) if kind else ""


@_second_guard
def test_cli_refuses_hostile_flags_and_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              request: pytest.FixtureRequest) -> None:
    """``cudnn-rnn inspect/convert``: exit 0 or 2, one ``error:`` line, never a traceback (OUT's folder missing,
    OUT a folder, OUT under a file, FIFOs, huge sizes in flags and files)."""

    for module in ("torch", "onnx"):  # .pt and .onnx outputs import them: not inside an example's deadline
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)

    @_settings(100)
    @given(case=pinned_or(PINNED_CLI_CASES, st.tuples(
        st.sampled_from(["inspect", "convert"]), st.lists(st.sampled_from(CLI_FLAGS), max_size=3),
        st.sampled_from(CLI_INPUTS), st.sampled_from(CLI_OUTPUTS))))
    @guarded
    def prop(case: tuple[str, list[V], str, str]) -> None:
        command, flags, source, target = case
        work = Path(tempfile.mkdtemp(dir=tmp_path))
        try:
            argv = [command] + [part for flag in flags for part in flag.value]
            argv.append(_cli_input(work, source))
            if command == "convert":
                argv.append(_cli_output(work, target, argv[-1]))
            capsys.readouterr()
            try:
                status: Any = cli_main(argv)
                exited = False
            except SystemExit as exit:
                status, exited = exit.code, True
            err = capsys.readouterr().err
            assert "Traceback" not in err, err
            assert status in (0, 2), f"exit status {status!r}; stderr: {err!r}"
            if status == 2:
                errors = [line for line in err.splitlines() if "error:" in line]
                assert len(errors) == 1, f"not one error line: {err!r}"
                assert exited or len(err.strip().splitlines()) == 1, f"more than the error line: {err!r}"
        finally:
            shutil.rmtree(work, ignore_errors=True)

    run_in_child(prop, request, WALL_SECONDS)
