"""The ops' semantics (:mod:`cudnn_rnn.ops`, TensorFlow's CudnnRNNV3): sequence lengths, reverse direction, length 0,
empty shapes, layouts, dtypes, reserve_space.

Most checks compare the op with itself on rearranged data (one sequence alone, the transposed
layout, a hand-reversed input), so they hold independently of the math tested elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn.layout import params_layout
from rnn_testing import (DTYPE_TOLERANCE, Arrays, Case, assert_close, forward, forward_backward, random_arrays,
                         random_case, stable_seed)

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
GRAD_NAMES = ("dx", "dh0", "dc0", "dparams")


def ragged(rnn_mode: str, **changes: object) -> tuple[Case, Arrays]:
    """A 2-layer bidirectional case with unsorted lengths including 0 and T, and its arrays."""
    fields = dict(num_layers=2, num_units=4, input_size=3, direction="bidirectional", max_time=5, batch=4,
                  lengths=(3, 5, 0, 1), num_proj=2 if rnn_mode == "lstm" else 0)
    fields.update(changes)
    case = Case(rnn_mode, **fields)
    return case, random_arrays(case, np.random.default_rng(stable_seed("ragged", case)))


def time_major_view(case: Case, value: np.ndarray) -> np.ndarray:
    """A sequence or state array of ``case``'s layout seen time-major ([T, B, F] / [L*D, B, F])."""
    return value if case.time_major else value.transpose(1, 0, 2)


def batch_rows(case: Case, value: np.ndarray, rows: list[int]) -> np.ndarray:
    """The given sequences of a sequence or state array, in ``case``'s layout."""
    return np.ascontiguousarray(value[:, rows] if case.time_major else value[rows])


# ---- sequence lengths ---------------------------------------------------------------------------------
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("rnn_mode", MODES)
def test_padding_rows_are_zero_and_ignored(rnn_mode: str, time_major: bool) -> None:
    case, a = ragged(rnn_mode, time_major=time_major)
    got = forward_backward(case, a)
    past_end = np.arange(case.max_time)[:, None] >= np.asarray(case.lengths)[None, :]  # [T, B]
    assert np.all(time_major_view(case, got["y"])[past_end] == 0)
    assert np.all(time_major_view(case, got["dx"])[past_end] == 0)
    assert np.any(time_major_view(case, got["y"])[~past_end] != 0)

    noisy_dy = time_major_view(case, a.dy).copy()
    noisy_dy[past_end] = 1e3
    noisy = forward_backward(case, a.with_(dy=np.ascontiguousarray(time_major_view(case, noisy_dy))))
    for name in GRAD_NAMES:
        np.testing.assert_array_equal(noisy[name], got[name], err_msg=f"{name} depends on output_backprop past the end")


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("rnn_mode", MODES)
def test_each_sequence_equals_running_it_alone(rnn_mode: str, time_major: bool) -> None:
    """Row b of a ragged batch == the sequence x[:len_b, b] run alone (T = len_b, B = 1).

    This pins the final states to each sequence's own last step, the reverse direction to each
    sequence's own span (len-1 .. 0, output aligned with input t), and rows to be independent.
    """
    case, a = ragged(rnn_mode, time_major=time_major)
    batch = forward_backward(case, a)
    for b, length in enumerate(case.lengths):
        if length == 0:
            continue
        alone = case.with_(max_time=length, batch=1, lengths=None)

        def cut(value: np.ndarray, b: int = b, length: int = length) -> np.ndarray:
            rows = batch_rows(case, value, [b])
            return np.ascontiguousarray(rows[:length] if time_major else rows[:, :length])

        single = Arrays(x=cut(a.x), h0=batch_rows(case, a.h0, [b]),
                        c0=None if a.c0 is None else batch_rows(case, a.c0, [b]), params=a.params, lengths=None,
                        dy=cut(a.dy), dhy=batch_rows(case, a.dhy, [b]),
                        dcy=None if a.dcy is None else batch_rows(case, a.dcy, [b]))
        got = forward_backward(alone, single)
        assert_close(got["y"], cut(batch["y"]), 1e-12, f"output of sequence {b}")
        assert_close(got["dx"], cut(batch["dx"]), 1e-12, f"input_backprop of sequence {b}")
        for name in ("hy", "cy", "dh0", "dc0") if case.is_lstm else ("hy", "dh0"):
            assert_close(got[name], batch_rows(case, batch[name], [b]), 1e-12, f"{name} of sequence {b}")


@pytest.mark.parametrize("rnn_mode", MODES)
def test_reverse_direction_runs_each_span_backwards(rnn_mode: str) -> None:
    """The reverse half of a bidirectional layer == a forward layer with its weights on the
    span-reversed input (x'[t] = x[len-1-t] for t < len), reversed back."""
    bi = Case(rnn_mode, num_layers=1, num_units=3, input_size=2, direction="bidirectional", max_time=5, batch=3,
              lengths=(5, 2, 4))
    a = random_arrays(bi, np.random.default_rng(stable_seed("reverse", rnn_mode)))
    uni = bi.with_(direction="unidirectional")
    bi_layout, uni_layout = params_layout(bi.config()), params_layout(uni.config())
    uni_params = np.zeros(uni_layout.size)
    for entry in uni_layout.weights + uni_layout.biases:  # pseudo-layer 0 of uni <- pseudo-layer 1 of bi
        source = bi_layout.entry(1, entry.lin_layer_id, entry.kind)
        uni_layout.view(uni_params, entry)[...] = bi_layout.view(a.params, source)

    t = np.arange(bi.max_time)[:, None]
    lengths = np.asarray(bi.lengths)[None, :]
    flip = np.where(t < lengths, lengths - 1 - t, t)  # [T, B], its own inverse
    columns = np.arange(bi.batch)[None, :]
    reversed_x = a.x[flip, columns]

    def pick(state: np.ndarray | None) -> np.ndarray | None:  # the reverse pseudo-layer's initial state
        return None if state is None else np.ascontiguousarray(state[1:2])

    uni_out = forward(uni, Arrays(x=reversed_x, h0=pick(a.h0), c0=pick(a.c0), params=uni_params,
                                  lengths=a.lengths, dy=a.dy, dhy=a.dhy, dcy=a.dcy))
    bi_out = forward(bi, a)
    p = bi.state_size
    assert_close(bi_out.output[:, :, p:], uni_out.output[flip, columns], 1e-12, "reverse-direction output")
    assert_close(bi_out.output_h[1:2], uni_out.output_h, 1e-12, "reverse-direction final state")


# ---- length 0 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("rnn_mode", MODES)
def test_length_zero_passes_states_through(rnn_mode: str, time_major: bool) -> None:
    case, a = ragged(rnn_mode, time_major=time_major)
    zero = case.lengths.index(0)
    got = forward_backward(case, a)
    assert np.all(batch_rows(case, got["y"], [zero]) == 0)
    assert np.all(batch_rows(case, got["dx"], [zero]) == 0)
    pairs = [("hy", a.h0), ("dh0", a.dhy)] + ([("cy", a.c0), ("dc0", a.dcy)] if case.is_lstm else [])
    for name, expected in pairs:
        np.testing.assert_array_equal(batch_rows(case, got[name], [zero]), batch_rows(case, expected, [zero]),
                                      err_msg=name)

    # no params contribution: the same batch without that row gives the same params gradient
    rows = [b for b in range(case.batch) if b != zero]
    rest = case.with_(batch=len(rows), lengths=tuple(case.lengths[b] for b in rows))
    sub = Arrays(**{name: (value if name == "params" or value is None else
                           value[rows] if name == "lengths" else batch_rows(case, value, rows))
                    for name, value in vars(a).items()})
    assert_close(forward_backward(rest, sub)["dparams"], got["dparams"], 1e-12, "params gradient")


@pytest.mark.parametrize("rnn_mode", MODES)
def test_all_lengths_zero(rnn_mode: str) -> None:
    case, a = ragged(rnn_mode, lengths=(0, 0, 0, 0))
    got = forward_backward(case, a)
    assert not np.any(got["y"]) and not np.any(got["dx"]) and not np.any(got["dparams"])
    np.testing.assert_array_equal(got["hy"], a.h0)
    np.testing.assert_array_equal(got["dh0"], a.dhy)
    if case.is_lstm:
        np.testing.assert_array_equal(got["cy"], a.c0)
        np.testing.assert_array_equal(got["dc0"], a.dcy)


# ---- empty batches and sequences ---------------------------------------------------------------------
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("empty", ["max_time", "batch"])
@pytest.mark.parametrize("rnn_mode", MODES)
def test_empty_time_or_batch(rnn_mode: str, empty: str, time_major: bool) -> None:
    case, _ = ragged(rnn_mode, time_major=time_major)
    case = case.with_(**{empty: 0}, lengths=(0,) * (case.batch if empty == "max_time" else 0))
    a = random_arrays(case, np.random.default_rng(0))
    got = forward_backward(case, a)
    out_width = case.num_directions * case.state_size
    assert got["y"].shape == case.seq_shape(out_width) and got["y"].dtype == np.float64
    assert got["dx"].shape == a.x.shape and not np.any(got["dx"])
    assert got["dparams"].shape == a.params.shape and not np.any(got["dparams"])
    np.testing.assert_array_equal(got["hy"], a.h0)
    np.testing.assert_array_equal(got["dh0"], a.dhy)
    if case.is_lstm:
        np.testing.assert_array_equal(got["cy"], a.c0)
        np.testing.assert_array_equal(got["dc0"], a.dcy)
    else:
        assert got["cy"].shape == (0,) and got["dc0"].shape == (0,)
    assert forward(case.with_(lengths=None), a.with_(lengths=None)).output.shape == case.seq_shape(out_width)


# ---- layouts ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("rnn_mode", MODES)
def test_batch_major_equals_time_major_transposed(rnn_mode: str) -> None:
    """time_major=False on transposed data gives the transposed results, with truly batch-major
    states: h[b, k] is pseudo-layer k of sequence b (L*D = 4 and B = 4, so a reshape would differ)."""
    tm, a = ragged(rnn_mode)
    bm = tm.with_(time_major=False)

    def t(value: np.ndarray | None) -> np.ndarray | None:
        return None if value is None or value.ndim != 3 else np.ascontiguousarray(value.transpose(1, 0, 2))

    b = Arrays(x=t(a.x), h0=t(a.h0), c0=t(a.c0), params=a.params, lengths=a.lengths, dy=t(a.dy), dhy=t(a.dhy),
               dcy=t(a.dcy))
    got_tm, got_bm = forward_backward(tm, a), forward_backward(bm, b)
    for name, value in got_tm.items():
        expected = value if value.ndim != 3 else value.transpose(1, 0, 2)
        np.testing.assert_array_equal(got_bm[name], expected, err_msg=name)
    reshaped = got_tm["hy"].reshape(got_bm["hy"].shape)  # TF's reinterpretation, deliberately not ours
    assert not np.array_equal(got_bm["hy"], reshaped)


def test_random_cases_batch_major_equals_time_major(rng: np.random.Generator) -> None:
    """The same on random configurations (any mode, layers, direction, projection, lengths)."""
    for _ in range(12):
        tm = random_case(rng, time_major=True)
        a = random_arrays(tm, rng)
        b = Arrays(**{name: (np.ascontiguousarray(value.transpose(1, 0, 2))
                             if isinstance(value, np.ndarray) and value.ndim == 3 else value)
                      for name, value in vars(a).items()})
        got_tm, got_bm = forward_backward(tm, a), forward_backward(tm.with_(time_major=False), b)
        for name, value in got_tm.items():
            expected = value if value.ndim != 3 else value.transpose(1, 0, 2)
            np.testing.assert_array_equal(got_bm[name], expected, err_msg=f"{name} of {tm}")


@pytest.mark.parametrize("rnn_mode", ["rnn_relu", "rnn_tanh", "gru"])
def test_non_lstm_c_is_empty_and_input_c_ignored(rnn_mode: str) -> None:
    case, a = ragged(rnn_mode)
    assert a.c0 is None
    got = forward_backward(case, a)
    assert got["cy"].shape == (0,) and got["cy"].dtype == a.x.dtype
    assert got["dc0"].shape == (0,) and got["dc0"].dtype == a.x.dtype
    ignored = forward_backward(case, a.with_(c0=np.ones((7,)), dcy=np.ones(3)))
    for name, value in got.items():
        np.testing.assert_array_equal(ignored[name], value, err_msg=name)


def test_missing_upstream_gradients_are_zeros() -> None:
    case, a = ragged("lstm")
    out = forward(case, a)
    zeros = forward_backward(case, a.with_(dy=np.zeros_like(a.dy), dhy=np.zeros_like(a.dhy),
                                           dcy=np.zeros_like(a.dcy)))
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                            out.output_c, None, None, None, out.reserve_space, out.host_reserved,
                                            **case.attrs())
    for name, value in zip(GRAD_NAMES, grads):
        np.testing.assert_array_equal(value, zeros[name], err_msg=name)


def test_lengths_none_int32_int64_agree() -> None:
    case, a = ragged("gru", lengths=(5, 5, 5, 5))
    reference = forward_backward(case, a)
    for lengths in (None, np.full(4, 5, dtype=np.int64)):
        got = forward_backward(case, a.with_(lengths=lengths))
        for name, value in reference.items():
            np.testing.assert_array_equal(got[name], value, err_msg=name)


# ---- params_backprop, inputs ------------------------------------------------------------------------
def test_params_backprop_is_fresh_and_inputs_are_untouched() -> None:
    case, a = ragged("lstm")
    copies = {name: None if value is None else value.copy() for name, value in vars(a).items()}
    first = forward_backward(case, a)
    second = forward_backward(case, a)
    np.testing.assert_array_equal(second["dparams"], first["dparams"])  # not accumulated
    assert not np.shares_memory(first["dparams"], second["dparams"])
    assert not np.shares_memory(first["dparams"], a.params)
    for name, value in copies.items():
        if value is not None:
            np.testing.assert_array_equal(getattr(a, name), value, err_msg=f"{name} was modified")


# ---- dtypes -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("rnn_mode", MODES)
def test_low_precision_is_close_to_float64(rnn_mode: str, dtype: str) -> None:
    """float32 / float16 results vs float64 on the same (rounded) inputs, relative to each tensor's max."""
    case, a = ragged(rnn_mode, dtype=dtype)
    low = forward_backward(case, a)

    def widen(value: np.ndarray | None) -> np.ndarray | None:
        return None if value is None or value.dtype.kind != "f" else value.astype(np.float64)

    wide = forward_backward(case.with_(dtype="float64"),
                            Arrays(**{name: widen(v) if name != "lengths" else v for name, v in vars(a).items()}))
    tolerance = {"float32": 1e-5, "float16": DTYPE_TOLERANCE["float16"]}[dtype]
    for name, value in low.items():
        assert value.dtype == np.dtype(dtype), f"{name} has dtype {value.dtype}"
        assert_close(value, wide[name], tolerance, name)


# ---- reserve_space ---------------------------------------------------------------------------------------
def _backprop(case: Case, a: Arrays, out: cudnn_rnn.RNNOutputs, **changes: object) -> cudnn_rnn.RNNGradients:
    args = dict(reserve_space=out.reserve_space, host_reserved=out.host_reserved)
    args.update(changes)
    return cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                           out.output_c, a.dy, a.dhy, a.dcy, args["reserve_space"],
                                           args["host_reserved"], **case.attrs())


@pytest.mark.parametrize("other", [
    dict(lengths=(3, 5, 1, 1)),  # other lengths, same shapes
    dict(max_time=4, lengths=(3, 4, 0, 1)),  # other T
    dict(rnn_mode="gru", num_proj=0),  # other mode
    dict(direction="unidirectional"),  # other direction
    dict(time_major=False),  # other layout
    dict(seed=1, dropout=0.5),  # other dropout attributes
])
def test_reserve_space_of_another_call_is_a_value_error(other: dict) -> None:
    case, a = ragged("lstm")
    other_case = case.with_(**other)
    b = random_arrays(other_case, np.random.default_rng(1))
    foreign = forward(other_case, b)
    with pytest.raises(ValueError, match="reserve_space"):
        _backprop(case, a, forward(case, a), reserve_space=foreign.reserve_space, host_reserved=None)


def test_reserve_space_tampering_is_caught() -> None:
    case, a = ragged("gru")
    out = forward(case, a)
    with pytest.raises(ValueError, match="reserve_space"):
        _backprop(case, a, out, reserve_space=out.reserve_space[:-1])
    with pytest.raises(ValueError, match="reserve_space"):
        _backprop(case, a, out, reserve_space=np.zeros_like(out.reserve_space))
    other = forward(case.with_(lengths=(1, 1, 1, 1)), a.with_(lengths=np.ones(4, dtype=np.int32)))
    with pytest.raises(ValueError, match="host_reserved"):
        _backprop(case, a, out, host_reserved=other.host_reserved)


def test_inference_reserve_is_empty_and_rejected_by_backprop() -> None:
    case, a = ragged("lstm")
    out = forward(case, a, is_training=False)
    assert out.reserve_space.shape == (0,) and out.reserve_space.dtype == a.x.dtype
    training = forward(case, a, is_training=True)
    np.testing.assert_array_equal(out.output, training.output)
    with pytest.raises(ValueError, match="is_training"):
        _backprop(case, a, out)
