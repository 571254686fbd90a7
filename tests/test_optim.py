"""Optimisers and clipping against steps worked out by hand from the update formulas."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

import numpy as np
import pytest

from cudnn_rnn.optim import SGD, Adam, clip_grad_norm


def _pair() -> tuple[np.ndarray, np.ndarray]:
    """A flat 'params' buffer and a 2-D readout matrix, as the examples mix them."""
    return np.array([1.0, -2.0]), np.array([[0.5], [3.0]], dtype=np.float32)


G1 = ([0.5, 0.25], [[1.0], [-4.0]])
G2 = ([0.1, -0.2], [[0.0], [2.0]])


def _grads(values: tuple[list, list], like: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    return [np.array(v, dtype=p.dtype) for v, p in zip(values, like)]


def test_sgd_plain_step_by_hand() -> None:
    flat, dense = _pair()
    opt = SGD([flat, dense], lr=0.1)
    opt.step(_grads(G1, (flat, dense)))
    np.testing.assert_allclose(flat, [0.95, -2.025], rtol=0, atol=1e-15)
    np.testing.assert_allclose(dense, [[0.4], [3.4]], rtol=0, atol=1e-6)
    assert flat.dtype == np.float64 and dense.dtype == np.float32  # updated in place, dtypes kept


def test_sgd_momentum_two_steps_by_hand() -> None:
    flat, dense = _pair()
    opt = SGD([flat, dense], lr=0.1, momentum=0.9)
    opt.step(_grads(G1, (flat, dense)))  # v = g1
    opt.step(_grads(G2, (flat, dense)))  # v = 0.9 * g1 + g2
    # flat: v2 = [0.55, 0.025]; p = p0 - 0.1 * g1 - 0.1 * v2
    np.testing.assert_allclose(flat, [0.895, -2.0275], rtol=0, atol=1e-14)
    # dense: v1 = [1, -4], v2 = [0.9, -1.6]; p = [0.5 - 0.1 - 0.09, 3 + 0.4 + 0.16]
    np.testing.assert_allclose(dense, [[0.31], [3.56]], rtol=0, atol=1e-6)


def test_sgd_nesterov_two_steps_by_hand() -> None:
    flat, dense = _pair()
    opt = SGD([flat, dense], lr=0.1, momentum=0.9, nesterov=True)
    opt.step(_grads(G1, (flat, dense)))
    # step 1: v = [0.5, 0.25]; direction g + 0.9 v = [0.95, 0.475]
    np.testing.assert_allclose(flat, [0.905, -2.0475], rtol=0, atol=1e-14)
    opt.step(_grads(G2, (flat, dense)))
    # step 2: v = [0.55, 0.025]; direction [0.1 + 0.495, -0.2 + 0.0225] = [0.595, -0.1775]
    np.testing.assert_allclose(flat, [0.8455, -2.02975], rtol=0, atol=1e-14)


def _adam_scalar(p: float, grads: list[float], lr: float, b1: float, b2: float, eps: float) -> float:
    """Adam for one scalar, written out from Kingma & Ba's Algorithm 1 (PyTorch's eps placement)."""
    m = s = 0.0
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        s = b2 * s + (1 - b2) * g * g
        p -= lr * (m / (1 - b1**t)) / (math.sqrt(s / (1 - b2**t)) + eps)
    return p


def test_adam_first_step_is_lr_times_sign() -> None:
    flat, dense = _pair()
    opt = Adam([flat, dense], lr=0.1)
    opt.step(_grads(G1, (flat, dense)))
    # m_hat = g and s_hat = g**2 at t = 1, so each entry moves by lr * g / (|g| + eps) ~ lr * sign(g)
    np.testing.assert_allclose(flat, [0.9, -2.1], rtol=0, atol=1e-8)
    np.testing.assert_allclose(dense, [[0.4], [3.1]], rtol=0, atol=1e-6)


def test_adam_two_steps_match_scalar_formula() -> None:
    flat, dense = _pair()
    opt = Adam([flat, dense], lr=0.05, betas=(0.8, 0.99), eps=1e-3)
    opt.step(_grads(G1, (flat, dense)))
    opt.step(_grads(G2, (flat, dense)))
    expected_flat = [_adam_scalar(1.0, [0.5, 0.1], 0.05, 0.8, 0.99, 1e-3),
                     _adam_scalar(-2.0, [0.25, -0.2], 0.05, 0.8, 0.99, 1e-3)]
    np.testing.assert_allclose(flat, expected_flat, rtol=0, atol=1e-14)
    # the second entry, worked by hand: m = 0.8*0.05 + 0.2*(-0.2) = 0 after step 2, so step 2 moves nothing
    assert flat[1] == pytest.approx(-2.0 - 0.05 * 0.25 / (0.25 + 1e-3), abs=1e-14)
    expected_dense = [[_adam_scalar(0.5, [1.0, 0.0], 0.05, 0.8, 0.99, 1e-3)],
                      [_adam_scalar(3.0, [-4.0, 2.0], 0.05, 0.8, 0.99, 1e-3)]]
    np.testing.assert_allclose(dense, expected_dense, rtol=1e-6)
    assert opt.steps == 2


def test_float16_params_use_float32_state() -> None:
    p = np.array([1.0, 1.0], dtype=np.float16)
    opt = Adam([p], lr=1e-3)
    opt.step([np.array([1e-4, -1e-4], dtype=np.float16)])
    assert opt.first_moment[0].dtype == np.float32
    assert p.dtype == np.float16
    np.testing.assert_allclose(p.astype(np.float64), [0.999, 1.001], atol=1e-3)


def test_clip_grad_norm_scales_to_max_norm() -> None:
    a, b = np.array([3.0, 0.0]), np.array([[0.0], [4.0]], dtype=np.float32)
    total = clip_grad_norm([a, b], max_norm=1.0)
    assert total == pytest.approx(5.0)
    np.testing.assert_allclose(a, [0.6, 0.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(b, [[0.0], [0.8]], rtol=0, atol=1e-7)
    assert math.sqrt(float((a**2).sum() + (b.astype(np.float64) ** 2).sum())) == pytest.approx(1.0, abs=1e-7)


def test_clip_grad_norm_leaves_small_gradients_alone() -> None:
    a = np.array([0.3, -0.4])
    total = clip_grad_norm([a], max_norm=1.0)
    assert total == pytest.approx(0.5)
    np.testing.assert_array_equal(a, [0.3, -0.4])


@pytest.mark.parametrize("call, error, words", [
    (lambda: SGD([np.zeros(2)], lr=0.0), ValueError, "lr"),
    (lambda: SGD([np.zeros(2)], lr=0.1, momentum=1.0), ValueError, "momentum"),
    (lambda: SGD([np.zeros(2)], lr=0.1, nesterov=True), ValueError, "nesterov"),
    (lambda: SGD([np.zeros(2, dtype=np.int32)], lr=0.1), TypeError, "params_list[0]"),
    (lambda: SGD([], lr=0.1), ValueError, "params_list"),
    (lambda: Adam([np.zeros(2)], betas=(0.9,)), TypeError, "betas"),
    (lambda: Adam([np.zeros(2)], eps=-1.0), ValueError, "eps"),
    (lambda: Adam([np.zeros(2)]).step([np.zeros(3)]), ValueError, "grads_list[0]"),
    (lambda: Adam([np.zeros(2)]).step([np.zeros(2), np.zeros(2)]), ValueError, "grads_list"),
    (lambda: clip_grad_norm([[1.0, 2.0]], 1.0), TypeError, "grads_list[0]"),
    (lambda: clip_grad_norm([np.zeros(2)], 0), ValueError, "max_norm"),
])
def test_bad_arguments_are_named(call, error, words: str) -> None:
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        call()


#: argument (as its message names it) -> the call that passes ``value`` as that argument, and its expected range
NUMERIC_ARGUMENTS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "SGD lr": (lambda value: SGD([np.zeros(2)], lr=value), "lr must be a finite float > 0"),
    "SGD momentum": (lambda value: SGD([np.zeros(2)], lr=0.1, momentum=value),
                     "momentum must be a finite float in [0, 1)"),
    "Adam lr": (lambda value: Adam([np.zeros(2)], lr=value), "lr must be a finite float > 0"),
    "Adam betas[0]": (lambda value: Adam([np.zeros(2)], betas=(value, 0.999)),
                      "betas[0] must be a finite float in [0, 1)"),
    "Adam betas[1]": (lambda value: Adam([np.zeros(2)], betas=(0.9, value)),
                      "betas[1] must be a finite float in [0, 1)"),
    "Adam eps": (lambda value: Adam([np.zeros(2)], eps=value), "eps must be a finite float > 0"),
    "clip_grad_norm max_norm": (lambda value: clip_grad_norm([np.zeros(2)], value),
                                "max_norm must be a finite float > 0"),
}

#: a bad value -> (the error, how the message shows the value): huge integers by their digit count
BAD_VALUES: dict[str, tuple[Any, type[Exception], str]] = {
    "10**400": (10**400, ValueError, "401 digits"),
    "-10**400": (-10**400, ValueError, "401 digits"),
    "Fraction(10**400)": (Fraction(10**400), ValueError, "Fraction("),
    "inf": (math.inf, ValueError, "inf"),
    "-inf": (-math.inf, ValueError, "-inf"),
    "nan": (math.nan, ValueError, "nan"),
    "numpy nan": (np.float32("nan"), ValueError, "nan"),
    "True": (True, TypeError, "bool True"),
    "numpy True": (np.True_, TypeError, "True"),
    "'0.1'": ("0.1", TypeError, "str '0.1'"),
    "complex": (0.1 + 0j, TypeError, "complex"),
}


@pytest.mark.parametrize("value", list(BAD_VALUES))
@pytest.mark.parametrize("argument", list(NUMERIC_ARGUMENTS))
def test_every_numeric_argument_refuses_huge_infinite_nan_bool_and_text(argument: str, value: str) -> None:
    """TypeError for a non-number or bool, ValueError for the rest: the argument, its range and the value named.

    Never an OverflowError, and a 401-digit integer is shown by its digit count, not its digits.
    """
    call, expected = NUMERIC_ARGUMENTS[argument]
    bad, error, shown = BAD_VALUES[value]
    with pytest.raises(error) as caught:
        call(bad)
    message = str(caught.value)
    assert message.startswith(f"{expected}; got "), message
    assert shown in message and len(message) < 200, message


def test_an_integer_beyond_the_float_range_is_refused_and_one_within_it_taken() -> None:
    sgd = SGD([np.zeros(2)], lr=10**300)
    assert sgd.lr == 1e300 and type(sgd.lr) is float
    with pytest.raises(ValueError, match=r"^lr must be a finite float > 0; got .*\b310 digits\)?$"):
        SGD([np.zeros(2)], lr=10**309)


@pytest.mark.parametrize(("key", "value", "error", "words"), [
    ("steps", 10**400, ValueError, r"state_dict\['steps'\] must be a non-negative integer < 2\*\*63; got .*401 digits"),
    ("steps", 2**63, ValueError, r"state_dict\['steps'\] must be a non-negative integer < 2\*\*63"),
    ("steps", True, ValueError, r"state_dict\['steps'\] must be a non-negative integer < 2\*\*63; got bool True"),
    ("lr", 10**400, ValueError, r"state_dict\['lr'\] must be a finite float > 0; got .*401 digits"),
    ("eps", -10**400, ValueError, r"state_dict\['eps'\] must be a finite float > 0; got .*401 digits"),
    ("betas", [0.9, 10**400], ValueError,
     r"state_dict\['betas'\]\[1\] must be a finite float in \[0, 1\); got .*401 digits"),
    ("betas", [math.nan, 0.9], ValueError, r"state_dict\['betas'\]\[0\] must be a finite float in \[0, 1\); got nan"),
    ("lr", True, TypeError, r"state_dict\['lr'\] must be a finite float > 0; got bool True"),
], ids=["steps 10**400", "steps 2**63", "steps True", "lr 10**400", "eps -10**400", "betas[1] 10**400",
        "betas[0] nan", "lr True"])
def test_a_state_dict_number_out_of_range_is_refused_and_nothing_changes(key: str, value: Any,
                                                                         error: type[Exception], words: str) -> None:
    adam = Adam([np.ones(2)], lr=0.01)
    adam.step([np.ones(2)])
    before = adam.state_dict()
    with pytest.raises(error, match=words):
        adam.load_state_dict(dict(before, **{key: value}))
    assert (adam.steps, adam.lr, adam.betas, adam.eps) == (1, 0.01, (0.9, 0.999), 1e-8)
    adam.step([np.ones(2)])  # and it still steps


def test_the_largest_step_count_loads_and_steps_and_one_more_is_refused() -> None:
    """A step count of 2**63 - 1 (the most a checkpoint holds) loads and Adam's bias correction still computes;
    2**63 is refused (before, any integer loaded, and a step after 10**400 raised OverflowError)."""
    p = np.ones(2)
    adam = Adam([p], lr=0.01)
    adam.load_state_dict(dict(adam.state_dict(), steps=2**63 - 1))
    adam.step([np.ones(2)])
    assert adam.steps == 2**63 and np.all(np.isfinite(p))
    with pytest.raises(ValueError, match=r"state_dict\['steps'\] must be a non-negative integer < 2\*\*63; got "
                                         "9223372036854775808"):
        adam.load_state_dict(adam.state_dict())
