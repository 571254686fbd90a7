"""Bad input, property-based: only ValueError / TypeError naming the argument may come out.

Each example draws a valid call of one public function, then breaks one or two of its arguments
(wrong rank, shape, dtype, kind, value, None, a python list, a foreign reserve_space, bad attribute
strings or ints...). A break that is certainly invalid must raise ValueError or TypeError whose
message names the broken argument (or one it is checked against); a break that may be valid (a NaN
in the data, a longer T, ...) may also succeed. Any other exception fails the test.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable

import ml_dtypes  # noqa: F401  (registers NumPy's "bfloat16", one of the drawn dtypes)
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cudnn_rnn
from rnn_testing import Case, forward, random_arrays

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- things that are not the right array ------------------------------------------------------
class NotAnArray:
    """Has an array's shape, dtype and ndim, but is neither a NumPy nor a CuPy array."""

    def __init__(self, like: np.ndarray) -> None:
        self.shape, self.dtype, self.ndim, self.size = like.shape, like.dtype, like.ndim, like.size

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.shape}"


#: A class that CuPy-kind detection takes for ``cupy.ndarray``: passed with NumPy arrays, it is a mixed call.
FakeCupyArray = type("ndarray", (NotAnArray,), {"__module__": "cupy._core.core"})


@dataclass(frozen=True)
class Break:
    """One way to break a call: ``apply`` edits the keyword arguments in place.

    ``names``: the error must name one of these arguments; None when the result may be valid.
    ``warns``: NumPy may warn about the values (inf - inf ...); such RuntimeWarnings are allowed.
    ``resizes``: changes one dimension; two such breaks may agree again (B+1 for x and for h_prev).
    """

    what: str
    apply: Callable[[dict[str, Any]], None]
    names: frozenset[str] | None
    warns: bool = False
    resizes: bool = False

    def __repr__(self) -> str:
        return f"Break({self.what})"


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(kwargs: dict[str, Any]) -> None:
        kwargs[name] = value

    return apply


def _with_value(array: np.ndarray, value: float, rng: np.random.Generator) -> np.ndarray:
    out = array.copy()
    if out.size:
        out.ravel()[int(rng.integers(out.size))] = value
    return out


def _bump(array: np.ndarray, axis: int, grow: bool) -> np.ndarray:
    """``array`` with one more (zero) or one fewer entry along ``axis``."""
    if grow or array.shape[axis] == 0:
        extra = list(array.shape)
        extra[axis] = 1
        return np.concatenate([array, np.zeros(extra, dtype=array.dtype)], axis=axis)
    return np.delete(array, 0, axis=axis)


def array_breaks(name: str, value: Any, related: frozenset[str], rng: np.random.Generator, *,
                 required: bool = True, any_float: bool = False, maybe_valid_axes: tuple[int, ...] = ()
                 ) -> list[Break]:
    """Generic ways to break array argument ``name``. Errors may name ``name`` or ``related``.

    ``any_float``: another float dtype is fine for this argument; ``maybe_valid_axes``: a longer
    or shorter axis may be valid.
    """
    names = frozenset({name}) | related
    if value is None:
        return [Break(f"{name}=list", _set(name, [[0.0]]), names)] if required else []
    other_float = np.float32 if value.dtype == np.float64 else np.float64
    with np.errstate(all="ignore"):  # casting a reserve_space's header bits may overflow
        return _array_breaks(name, value, names, other_float, rng, required, any_float, maybe_valid_axes)


def _array_breaks(name: str, value: np.ndarray, names: frozenset[str], other_float: type,
                  rng: np.random.Generator, required: bool, any_float: bool,
                  maybe_valid_axes: tuple[int, ...]) -> list[Break]:
    breaks = [
        Break(f"{name} rank+1", _set(name, value[..., None]), names),
        Break(f"{name} rank-1", _set(name, value.reshape(-1) if value.ndim > 1 else np.array(value[0])), names),
        Break(f"{name} int8", _set(name, value.astype(np.int8)), names),
        Break(f"{name} as a python list", _set(name, value.tolist()), names),
        Break(f"{name} not an array", _set(name, NotAnArray(value)), names),
        Break(f"{name} a 0-d array", _set(name, np.asarray(1.0, dtype=value.dtype)), names),
        Break(f"{name} {np.dtype(other_float).name}", _set(name, value.astype(other_float)),
              None if any_float else names),
        Break(f"{name} complex", _set(name, value.astype(np.complex128)), names),
        Break(f"{name} a fake cupy array", _set(name, FakeCupyArray(value)), names),
        Break(f"{name} with NaN", _set(name, _with_value(value, np.nan, rng)), None),
        Break(f"{name} with inf", _set(name, _with_value(value, np.inf, rng)), None, warns=True),
        Break(f"{name} non-contiguous", _set(name, np.repeat(value, 2, axis=-1)[..., ::2]), None),
    ]
    if required:
        breaks.append(Break(f"{name}=None", _set(name, None), names))
    for axis in range(value.ndim):
        for grow in (True, False):
            maybe = axis in maybe_valid_axes
            breaks.append(Break(f"{name} axis {axis} {'+1' if grow else '-1'}",
                                _set(name, _bump(value, axis, grow)), None if maybe else names, resizes=True))
    return breaks


def attr_breaks(case: Case, with_states: bool = True) -> list[Break]:
    """Bad attribute values, each certainly invalid.

    ``with_states``: the call also gets input_h, so a num_proj other than its width is invalid too.
    """
    bad: list[tuple[str, Any]] = [
        ("rnn_mode", "LSTM"), ("rnn_mode", "cudnn"), ("rnn_mode", 2), ("rnn_mode", None),
        ("input_mode", "linear"), ("input_mode", 0), ("direction", "bi"), ("direction", 2),
        ("dropout", 1.0), ("dropout", -0.5), ("dropout", float("nan")), ("dropout", "0.1"),
        ("seed", 2**31), ("seed", -(2**31) - 1), ("seed", 1.5), ("seed2", "3"), ("seed2", 2**40),
        ("num_proj", -1), ("num_proj", 1.5), ("num_proj", "1"),
        ("time_major", "yes"), ("time_major", None),
    ]
    if case.is_lstm:
        bad += [("num_proj", case.num_units)] + [("num_proj", case.state_size + 1)] * with_states
    else:
        bad += [("num_proj", 1)]
    if case.input_size != case.num_units:
        bad += [("input_mode", "skip_input")]
    related = {"num_proj": {"input_h", "input_c"}, "input_mode": {"input_size", "params"}}
    return [Break(f"{name}={value!r}", _set(name, value), frozenset({name} | related.get(name, set())))
            for name, value in bad]


# ---- drawing valid calls ---------------------------------------------------------------------------
@st.composite
def cases(draw: st.DrawFn) -> Case:
    mode = draw(st.sampled_from(MODES))
    num_units = draw(st.integers(2, 4))
    max_time = draw(st.integers(1, 4))
    batch = draw(st.integers(1, 3))
    lengths = draw(st.none() | st.lists(st.integers(0, max_time), min_size=batch, max_size=batch).map(tuple))
    return Case(
        rnn_mode=mode, num_layers=draw(st.integers(1, 2)), num_units=num_units,
        input_size=draw(st.integers(1, 4)), direction=draw(st.sampled_from(["unidirectional", "bidirectional"])),
        num_proj=draw(st.integers(1, num_units - 1)) if mode == "lstm" and draw(st.booleans()) else 0,
        max_time=max_time, batch=batch, lengths=lengths, time_major=draw(st.booleans()),
        dtype=draw(st.sampled_from(["float32", "float64", "bfloat16"])),
        dropout=draw(st.sampled_from([0.0, 0.5])), seed=draw(st.integers(-5, 5)))


def forward_kwargs(case: Case, rng: np.random.Generator) -> dict[str, Any]:
    a = random_arrays(case, rng)
    return dict(input=a.x, input_h=a.h0, input_c=a.c0, params=a.params, sequence_lengths=a.lengths,
                is_training=True, **case.attrs())


def forward_breaks(case: Case, kwargs: dict[str, Any], rng: np.random.Generator) -> list[Break]:
    shape_related = frozenset({"input", "input_h", "input_c", "params", "sequence_lengths", "num_proj"})
    time_axis = 0 if case.time_major else 1
    breaks = array_breaks("input", kwargs["input"], shape_related, rng, maybe_valid_axes=(time_axis,))
    breaks += array_breaks("input_h", kwargs["input_h"], shape_related, rng)
    breaks += array_breaks("params", kwargs["params"], frozenset({"input"}), rng)
    if case.is_lstm:
        breaks += array_breaks("input_c", kwargs["input_c"], shape_related, rng)
    breaks += lengths_breaks(case, kwargs["sequence_lengths"], rng)
    breaks += attr_breaks(case)
    breaks.append(Break("is_training='no'", _set("is_training", "no"), frozenset({"is_training"})))
    return breaks


def lengths_breaks(case: Case, lengths: np.ndarray | None, rng: np.random.Generator) -> list[Break]:
    names = frozenset({"sequence_lengths"})
    full = np.full(case.batch, case.max_time, dtype=np.int32) if lengths is None else lengths
    b = int(rng.integers(case.batch))
    return [
        Break("lengths -1", _set("sequence_lengths", _with_value(full, -1, rng)), names),
        Break("lengths T+1", _set("sequence_lengths", _with_value(full, case.max_time + 1, rng)), names),
        Break("lengths 2**40", _set("sequence_lengths", _with_value(full.astype(np.int64), 2**40, rng)), names),
        Break("lengths float", _set("sequence_lengths", full.astype(np.float32)), names),
        Break("lengths int16", _set("sequence_lengths", full.astype(np.int16)), names),
        Break("lengths uint32", _set("sequence_lengths", full.astype(np.uint32)), names),
        Break("lengths bool", _set("sequence_lengths", full > 0), names),
        Break("lengths list", _set("sequence_lengths", full.tolist()), names),
        Break("lengths 2-D", _set("sequence_lengths", full[None]), names),
        Break("lengths scalar", _set("sequence_lengths", np.int32(case.max_time)), names),
        Break("lengths B+1", _set("sequence_lengths", np.append(full, 1).astype(np.int32)), names),
        Break("lengths B-1", _set("sequence_lengths", full[1:]), names),
        Break("lengths not an array", _set("sequence_lengths", NotAnArray(full)), names),
        Break("other valid lengths", _set("sequence_lengths", _with_value(full, int(rng.integers(case.max_time + 1)),
                                                                         rng)), None),
        Break(f"lengths[{b}] = 0", _set("sequence_lengths", _with_value(full, 0, rng)), None),
        Break("lengths int64", _set("sequence_lengths", full.astype(np.int64)), None),
    ]


def backprop_kwargs(case: Case, rng: np.random.Generator) -> dict[str, Any]:
    a = random_arrays(case, rng)
    out = forward(case, a)
    return dict(input=a.x, input_h=a.h0, input_c=a.c0, params=a.params, sequence_lengths=a.lengths,
                output=out.output, output_h=out.output_h, output_c=out.output_c, output_backprop=a.dy,
                output_h_backprop=a.dhy, output_c_backprop=a.dcy, reserve_space=out.reserve_space,
                host_reserved=out.host_reserved, **case.attrs())


def backprop_breaks(case: Case, kwargs: dict[str, Any], rng: np.random.Generator) -> list[Break]:
    breaks = forward_breaks(case, kwargs, rng)
    breaks = [b for b in breaks if b.what != "is_training='no'"]
    # once the forward's attributes or inputs change, the reserve_space no longer matches: say so
    breaks = [replace(b, names=None if b.names is None else b.names | {"reserve_space"}) for b in breaks]
    for name in ("output", "output_h", "output_backprop", "output_h_backprop") + (
            ("output_c", "output_c_backprop") if case.is_lstm else ()):
        optional = name.endswith("backprop")
        breaks += array_breaks(name, kwargs[name], frozenset({name}), rng, required=not optional)
    # a longer reserve_space (the forward's, then more) is legal: each backend reads the front it needs
    breaks += [replace(b, names=None) if b.what == "reserve_space axis 0 +1" else b
               for b in array_breaks("reserve_space", kwargs["reserve_space"], frozenset(), rng)]

    other_case = case.with_(max_time=case.max_time + 1, lengths=None)
    foreign = forward(other_case, random_arrays(other_case, rng))
    breaks += [
        Break("reserve_space of another call", _set("reserve_space", foreign.reserve_space),
              frozenset({"reserve_space", "host_reserved"})),
        Break("reserve_space zeroed", _set("reserve_space", np.zeros_like(kwargs["reserve_space"])),
              frozenset({"reserve_space"})),
        Break("reserve_space of inference", _set("reserve_space", np.empty(0, dtype=case.dtype)),
              frozenset({"reserve_space"})),
        Break("host_reserved of another call", _set("host_reserved", foreign.host_reserved),
              frozenset({"host_reserved"})),
        Break("host_reserved int32", _set("host_reserved", kwargs["host_reserved"].astype(np.int32)),
              frozenset({"host_reserved"})),
        Break("host_reserved list", _set("host_reserved", kwargs["host_reserved"].tolist()),
              frozenset({"host_reserved"})),
        Break("host_reserved None", _set("host_reserved", None), None),
        Break("host_reserved empty", _set("host_reserved", np.empty(0, dtype=np.int8)), None),
        Break("upstream gradients None", lambda kw: kw.update(output_backprop=None, output_h_backprop=None,
                                                              output_c_backprop=None), None),
    ]
    return breaks


# ---- the property ---------------------------------------------------------------------------------
def assert_clear_error_or_success(function: Callable[..., Any], kwargs: dict[str, Any],
                                  chosen: list[Break]) -> None:
    """Call ``function``: it may fail only with ValueError/TypeError naming a broken argument.

    When every chosen break is certainly invalid (and no two resize), it must fail.
    """
    maybe_valid = any(b.names is None for b in chosen) or sum(b.resizes for b in chosen) > 1
    try:
        with warnings.catch_warnings():
            if any(b.warns for b in chosen):
                warnings.simplefilter("ignore", RuntimeWarning)
            function(**kwargs)
    except (ValueError, TypeError) as error:
        if maybe_valid:
            return
        names = sorted(frozenset().union(*(b.names for b in chosen)))
        message = str(error)
        assert any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", message) for n in names), (
            f"{type(error).__name__} for {chosen} names none of {names}: {message}")
        return
    assert maybe_valid, f"{chosen} was accepted by {function.__name__}"


def _apply(draw: st.DrawFn, kwargs: dict[str, Any], breaks: list[Break]) -> list[Break]:
    count = draw(st.integers(1, 2))
    chosen = [draw(st.sampled_from(breaks)) for _ in range(count)]
    for b in chosen:
        b.apply(kwargs)
    return chosen


@SETTINGS
@given(st.data(), cases(), st.integers(0, 2**32 - 1))
def test_cudnn_rnn_v3_bad_input(data: st.DataObject, case: Case, seed: int) -> None:
    rng = np.random.default_rng(seed)
    kwargs = forward_kwargs(case, rng)
    chosen = _apply(data.draw, kwargs, forward_breaks(case, kwargs, rng))
    assert_clear_error_or_success(cudnn_rnn.cudnn_rnn_v3, kwargs, chosen)


@SETTINGS
@given(st.data(), cases(), st.integers(0, 2**32 - 1))
def test_cudnn_rnn_backprop_v3_bad_input(data: st.DataObject, case: Case, seed: int) -> None:
    rng = np.random.default_rng(seed)
    kwargs = backprop_kwargs(case, rng)
    chosen = _apply(data.draw, kwargs, backprop_breaks(case, kwargs, rng))
    assert_clear_error_or_success(cudnn_rnn.cudnn_rnn_backprop_v3, kwargs, chosen)


# ---- params functions -----------------------------------------------------------------------------
def layout_kwargs(case: Case) -> dict[str, Any]:
    return dict(num_layers=case.num_layers, num_units=case.num_units, input_size=case.input_size,
                **case.layout_attrs())


def size_breaks(case: Case) -> list[Break]:
    bad: list[tuple[str, Any]] = [
        (name, value) for name in ("num_layers", "num_units", "input_size")
        for value in (0, -1, 1.5, "2", None, True, np.float64(2.0))]
    breaks = [Break(f"{n}={v!r}", _set(n, v), frozenset({n, "num_proj", "input_mode"})) for n, v in bad]
    return breaks + [b for b in attr_breaks(case, with_states=False) if b.what.split("=")[0] in (
        "rnn_mode", "input_mode", "direction", "num_proj")]


@SETTINGS
@given(st.data(), cases())
def test_cudnn_rnn_params_size_bad_input(data: st.DataObject, case: Case) -> None:
    kwargs = dict(layout_kwargs(case), dtype=case.dtype)
    breaks = size_breaks(case) + [Break(f"dtype={v!r}", _set("dtype", v), frozenset({"dtype"}))
                                  for v in ("int32", "float8", "bfloat17", np.int64, object, "", 3)]
    chosen = _apply(data.draw, kwargs, breaks)
    assert_clear_error_or_success(cudnn_rnn.cudnn_rnn_params_size, kwargs, chosen)


@SETTINGS
@given(st.data(), cases(), st.integers(0, 2**32 - 1))
def test_cudnn_rnn_params_to_canonical_bad_input(data: st.DataObject, case: Case, seed: int) -> None:
    rng = np.random.default_rng(seed)
    kwargs = dict(layout_kwargs(case), params=random_arrays(case, rng).params)
    # (a lone fake CuPy array is not a mixed call: it would be taken for CuPy, so it is left out)
    breaks = size_breaks(case) + [b for b in array_breaks("params", kwargs["params"], frozenset(), rng,
                                                          any_float=True) if "fake cupy" not in b.what]
    chosen = _apply(data.draw, kwargs, breaks)
    assert_clear_error_or_success(cudnn_rnn.cudnn_rnn_params_to_canonical, kwargs, chosen)


@SETTINGS
@given(st.data(), cases(), st.integers(0, 2**32 - 1))
def test_cudnn_rnn_canonical_to_params_bad_input(data: st.DataObject, case: Case, seed: int) -> None:
    rng = np.random.default_rng(seed)
    weights, biases = cudnn_rnn.cudnn_rnn_params_to_canonical(params=random_arrays(case, rng).params,
                                                              **layout_kwargs(case))
    kwargs = dict(layout_kwargs(case), weights=weights, biases=biases)
    breaks = size_breaks(case)
    for name, entries in (("weights", weights), ("biases", biases)):
        i = int(rng.integers(len(entries)))
        entry_names = frozenset({name, f"{name}[{i}]"})

        def replace_entry(change: Callable[[np.ndarray], Any], name: str = name, i: int = i,
                          entries: list = entries) -> Callable[[dict[str, Any]], None]:
            return _set(name, [change(e) if j == i else e for j, e in enumerate(entries)])

        breaks += [
            Break(f"{name} one fewer", _set(name, entries[:-1]), frozenset({name})),
            Break(f"{name} one more", _set(name, entries + entries[:1]), frozenset({name})),
            Break(f"{name}=None", _set(name, None), frozenset({name})),
            Break(f"{name}=3", _set(name, 3), frozenset({name})),
            Break(f"{name}[{i}] rank+1", replace_entry(lambda e: e[..., None]), entry_names),
            Break(f"{name}[{i}] +1 row", replace_entry(lambda e: np.concatenate([e, e[:1]])), entry_names),
            Break(f"{name}[{i}] float32/64", replace_entry(
                lambda e: e.astype(np.float32 if e.dtype == np.float64 else np.float64)),
                frozenset({"weights", "biases", f"{name}[{i}]"})),
            Break(f"{name}[{i}] int", replace_entry(lambda e: e.astype(np.int64)),
                  frozenset({"weights", "biases", f"{name}[{i}]"})),
            Break(f"{name}[{i}] list", replace_entry(lambda e: e.tolist()), entry_names),
            Break(f"{name}[{i}] None", replace_entry(lambda e: None), entry_names),
            Break(f"{name}[{i}] fake cupy", replace_entry(FakeCupyArray),
                  frozenset({"weights", "biases"}) | entry_names),
            Break(f"{name}[{i}] NaN", replace_entry(lambda e: _with_value(e, np.nan, rng)), None),
        ]
    chosen = _apply(data.draw, kwargs, breaks)
    assert_clear_error_or_success(cudnn_rnn.cudnn_rnn_canonical_to_params, kwargs, chosen)


# ---- GRUBlockCell --------------------------------------------------------------------------------------
@st.composite
def gru_block_arguments(draw: st.DrawFn) -> tuple[dict[str, np.ndarray], np.random.Generator]:
    b, i, h = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shapes = dict(x=(b, i), h_prev=(b, h), w_ru=(i + h, 2 * h), w_c=(i + h, h), b_ru=(2 * h,), b_c=(h,))
    return {name: rng.uniform(-1, 1, shape).astype(dtype) for name, shape in shapes.items()}, rng


def gru_breaks(kwargs: dict[str, Any], rng: np.random.Generator) -> list[Break]:
    everything = frozenset(kwargs)
    breaks: list[Break] = []
    for name, value in kwargs.items():
        breaks += array_breaks(name, value, frozenset({name}) if name not in ("x", "h_prev") else everything, rng)
    return breaks


@SETTINGS
@given(st.data(), gru_block_arguments())
def test_gru_block_cell_bad_input(data: st.DataObject, drawn: tuple[dict, np.random.Generator]) -> None:
    kwargs, rng = drawn
    chosen = _apply(data.draw, kwargs, gru_breaks(kwargs, rng))
    assert_clear_error_or_success(cudnn_rnn.gru_block_cell, kwargs, chosen)


@SETTINGS
@given(st.data(), gru_block_arguments())
def test_gru_block_cell_grad_bad_input(data: st.DataObject, drawn: tuple[dict, np.random.Generator]) -> None:
    kwargs, rng = drawn
    r, u, c, h = cudnn_rnn.gru_block_cell(**kwargs)
    kwargs.update(r=r, u=u, c=c, d_h=rng.uniform(-1, 1, h.shape).astype(h.dtype))
    chosen = _apply(data.draw, kwargs, gru_breaks(kwargs, rng))
    assert_clear_error_or_success(cudnn_rnn.gru_block_cell_grad, kwargs, chosen)
