"""Padding is never read on the cuDNN backend either: NaN and inf at t >= len[b] in input and
output_backprop change no output and no gradient, bit for bit (tests/test_padding.py asks the
same of the reference backend); and whether cuDNN itself reads padding, which settles
``_cudnn.CUDNN_IGNORES_PADDING``.
"""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from cudnn_rnn._cudnn import _backend as _cudnn  # noqa: E402
from gpu_support import RESULTS, on_gpu, run  # noqa: E402
from rnn_testing import Arrays, Case, random_arrays, stable_seed  # noqa: E402
from test_padding import FEATURE_CASES, MODE_CASES, feature_case, mode_case, poisoned, zero_padded  # noqa: E402


def _equal(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> list[str]:
    """The names of the results that differ (bit for bit; NaN differs from everything)."""
    return [name for name in RESULTS if not np.array_equal(first[name], second[name])]


def _assert_padding_ignored(case: Case, a: Arrays) -> None:
    clean = run(case, on_gpu(zero_padded(case, a)))
    again = run(case, on_gpu(zero_padded(case, a)))
    assert _equal(clean, again) == [], "cuDNN is not bitwise reproducible here: compare with a tolerance"
    noisy = run(case, on_gpu(poisoned(case, a)))
    assert _equal(noisy, clean) == [], f"padding changed these results for {case}"


@pytest.mark.parametrize("mode, direction, time_major", MODE_CASES)
def test_nan_and_inf_in_padding_change_nothing(mode: str, direction: str, time_major: bool) -> None:
    _assert_padding_ignored(*mode_case(mode, direction, time_major))


@pytest.mark.parametrize("name", list(FEATURE_CASES))
def test_padding_ignored_with_projection_dropout_skip_input_and_low_precision(name: str) -> None:
    _assert_padding_ignored(*feature_case(name))


#: no row of length 0: those rows are zeroed whatever CUDNN_IGNORES_PADDING says
UNPADDED_ZERO = (5, 2, 3, 5, 1)


def test_whether_cudnn_reads_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settles _cudnn.CUDNN_IGNORES_PADDING: with the backend's select switched off, does NaN or
    inf in padded x and dy change any result?"""
    recorded = _cudnn.CUDNN_IGNORES_PADDING
    monkeypatch.setattr(_cudnn, "CUDNN_IGNORES_PADDING", True)
    changed: dict[str, list[str]] = {}
    for mode in ("rnn_relu", "lstm", "gru"):
        for time_major in (True, False):
            case = Case(mode, num_layers=2, num_units=6, input_size=5, direction="bidirectional", max_time=5,
                        batch=len(UNPADDED_ZERO), lengths=UNPADDED_ZERO, time_major=time_major)
            a = random_arrays(case, np.random.default_rng(stable_seed("reads", mode, time_major)))
            differing = _equal(run(case, on_gpu(poisoned(case, a))), run(case, on_gpu(zero_padded(case, a))))
            if differing:
                changed[f"{mode} time_major={time_major}"] = differing
    ignores = not changed
    assert ignores == recorded, (f"cuDNN {'ignores' if ignores else 'reads'} padding ({changed or 'no change'}): "
                                 f"set _cudnn.CUDNN_IGNORES_PADDING = {ignores}")
