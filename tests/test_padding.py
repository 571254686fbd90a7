"""Padding is never read, as the ops promise: NaN and inf at t >= len[b] in ``input`` and in
``output_backprop`` change no output and no gradient, bit for bit, on the reference backend.

tests/gpu/test_padding_gpu.py asks the same of the cuDNN backend.
"""

from __future__ import annotations

import numpy as np
import pytest

from rnn_testing import RECORD_RESULTS, Arrays, Case, forward_backward, random_arrays, stable_seed

#: lengths with a full row, a length-0 row and rows that end early, in no order
LENGTHS = (5, 0, 2, 5, 1)
POISON = (np.nan, np.inf, -np.inf)


def poisoned(case: Case, a: Arrays) -> Arrays:
    """``a`` with NaN, inf and -inf written into every padded position of x and dy."""
    x, dy = a.x.copy(), a.dy.copy()
    padded_rows = [row for row, length in enumerate(case.lengths) if length < case.max_time]
    for i, row in enumerate(padded_rows):
        length = case.lengths[row]
        pad = (slice(length, None), row) if case.time_major else (row, slice(length, None))
        x[pad] = POISON[i % len(POISON)]
        dy[pad] = POISON[(i + 1) % len(POISON)]
    return a.with_(x=x, dy=dy)


def zero_padded(case: Case, a: Arrays) -> Arrays:
    """``a`` with every padded position of x and dy set to 0."""
    x, dy = a.x.copy(), a.dy.copy()
    for row, length in enumerate(case.lengths):
        pad = (slice(length, None), row) if case.time_major else (row, slice(length, None))
        x[pad] = 0
        dy[pad] = 0
    return a.with_(x=x, dy=dy)


def assert_padding_ignored(case: Case, a: Arrays) -> None:
    noisy = poisoned(case, a)
    assert np.isnan(noisy.x).any() and np.isinf(noisy.dy).any()  # the poison is really there
    expected = forward_backward(case, zero_padded(case, a))
    got = forward_backward(case, noisy)
    for name in RECORD_RESULTS:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=f"{name} for {case}")
        assert np.isfinite(got[name]).all(), name


#: every mode, direction and layout (2 layers); then projection with dropout, skip_input, low precision
MODE_CASES = [(mode, direction, time_major) for mode in ("rnn_relu", "rnn_tanh", "lstm", "gru")
              for direction in ("unidirectional", "bidirectional") for time_major in (True, False)]
FEATURE_CASES = {
    "lstm-projection-dropout": Case("lstm", num_layers=3, num_units=5, input_size=3, direction="bidirectional",
                                    num_proj=2, max_time=5, batch=5, lengths=LENGTHS, dropout=0.4, seed=3, seed2=8),
    "gru-skip-input-float32": Case("gru", num_layers=2, num_units=4, input_size=4, input_mode="skip_input",
                                   max_time=5, batch=5, lengths=LENGTHS, time_major=False, dtype="float32"),
    "tanh-float16": Case("rnn_tanh", num_layers=2, num_units=3, input_size=2, direction="bidirectional", max_time=5,
                         batch=5, lengths=LENGTHS, dtype="float16"),
}


def mode_case(mode: str, direction: str, time_major: bool) -> tuple[Case, Arrays]:
    """A 2-layer case of ``mode`` with :data:`LENGTHS`, and its random arrays."""
    case = Case(mode, num_layers=2, num_units=4, input_size=3, direction=direction, max_time=5,
                batch=len(LENGTHS), lengths=LENGTHS, time_major=time_major)
    return case, random_arrays(case, np.random.default_rng(stable_seed(mode, direction, time_major)))


def feature_case(name: str) -> tuple[Case, Arrays]:
    """The case :data:`FEATURE_CASES` names, and its random arrays."""
    case = FEATURE_CASES[name]
    return case, random_arrays(case, np.random.default_rng(stable_seed(case)))


@pytest.mark.parametrize("mode, direction, time_major", MODE_CASES)
def test_nan_and_inf_in_padding_change_nothing(mode: str, direction: str, time_major: bool) -> None:
    assert_padding_ignored(*mode_case(mode, direction, time_major))


@pytest.mark.parametrize("name", list(FEATURE_CASES))
def test_padding_ignored_with_projection_dropout_skip_input_and_low_precision(name: str) -> None:
    assert_padding_ignored(*feature_case(name))
