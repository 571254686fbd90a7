"""Dropout: cuDNN's inverted dropout between layers, seeded with TF's 64-bit seed.

The measuring experiment: a multi-layer rnn_relu whose layers above the first are identities
(W = I, R = 0, biases 0) and whose first layer has strictly positive outputs. Then each upper
layer just passes on its (dropped-out) input, and y_with_dropout / y_without_dropout is exactly
the product of the masks between the layers: 0 or 1/(1-p) per layer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import cudnn_rnn_backprop_v3
from cudnn_rnn.layout import params_layout
from rnn_testing import Arrays, Case, forward, forward_backward, random_arrays, stable_seed

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")


def identity_stack(case: Case, rng: np.random.Generator) -> np.ndarray:
    """rnn_relu params: layer 0 random with input bias 1 (outputs > 0), every upper layer an identity."""
    layout = params_layout(case.config())
    params = np.zeros(layout.size, dtype=case.dtype)
    for entry in layout.weights + layout.biases:
        view = layout.view(params, entry)
        if entry.pseudo_layer == 0:
            view[...] = 1.0 if entry.kind == "bias" and entry.side == "input" else rng.uniform(-0.1, 0.1, entry.shape)
        elif entry.kind == "matrix" and entry.side == "input":
            view[...] = np.eye(*entry.shape)
    return params


def mask_ratio(p: float, num_layers: int, seed: int = 1, seed2: int = 2) -> np.ndarray:
    """y(dropout=p) / y(dropout=0) for the identity stack: the product of the masks, [T, B, N]."""
    case = Case("rnn_relu", num_layers=num_layers, num_units=16, input_size=3, max_time=20, batch=8,
                dropout=p, seed=seed, seed2=seed2)
    rng = np.random.default_rng(stable_seed("identity-stack", num_layers))
    a = random_arrays(case, rng).with_(params=identity_stack(case, rng))
    a = a.with_(h0=np.abs(a.h0))
    dropped = forward(case, a).output
    plain = forward(case.with_(dropout=0.0), a).output
    assert np.all(plain > 0), "the experiment needs strictly positive layer outputs"
    return dropped / plain


def binomial_tolerance(p_keep: float, n: int, sigmas: float = 5.0) -> float:
    return sigmas * math.sqrt(p_keep * (1 - p_keep) / n)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_kept_fraction_and_survivor_scale(p: float) -> None:
    ratio = mask_ratio(p, num_layers=2)
    kept = ratio != 0
    np.testing.assert_allclose(ratio[kept], 1 / (1 - p), rtol=1e-12)
    fraction = kept.mean()
    assert abs(fraction - (1 - p)) <= binomial_tolerance(1 - p, ratio.size), f"kept {fraction:.4f}, expected {1 - p}"


def test_every_layer_but_the_last_is_dropped() -> None:
    """3 layers: two masks, so values are 0 or 1/(1-p)^2 and the kept fraction is (1-p)^2."""
    p = 0.3
    ratio = mask_ratio(p, num_layers=3)
    kept = ratio != 0
    np.testing.assert_allclose(ratio[kept], 1 / (1 - p) ** 2, rtol=1e-12)
    assert abs(kept.mean() - (1 - p) ** 2) <= binomial_tolerance((1 - p) ** 2, ratio.size)


def test_masks_are_drawn_per_element() -> None:
    """Not one mask shared by all time steps or all sequences."""
    kept = mask_ratio(0.5, num_layers=2) != 0  # [T, B, N]
    assert not np.all(kept == kept[:1]), "the same mask at every time step"
    assert not np.all(kept == kept[:, :1]), "the same mask for every sequence"


def _dropout_case(**changes: object) -> tuple[Case, Arrays]:
    case = Case("lstm", num_layers=3, num_units=4, input_size=3, direction="bidirectional", max_time=5, batch=3,
                lengths=(5, 2, 4), dropout=0.5, seed=3, seed2=4, **changes)
    return case, random_arrays(case, np.random.default_rng(stable_seed("dropout-case")))


def test_same_seeds_are_bit_identical() -> None:
    case, a = _dropout_case()
    first, second = forward_backward(case, a), forward_backward(case, a)
    for name, value in first.items():
        np.testing.assert_array_equal(second[name], value, err_msg=name)
    assert not np.array_equal(first["y"], forward_backward(case.with_(dropout=0.0), a)["y"])


@pytest.mark.parametrize("other", [dict(seed=4), dict(seed2=5), dict(seed=0, seed2=0), dict(seed2=-4)])
def test_different_seeds_differ(other: dict) -> None:
    case, a = _dropout_case()
    base = forward_backward(case, a)
    changed = forward_backward(case.with_(**other), a)
    assert not np.array_equal(base["y"], changed["y"])
    assert not np.array_equal(base["dparams"], changed["dparams"])


def test_tf_seed_semantics_negative_seed2_hides_seed() -> None:
    """TF's seed is (seed << 32) | seed2 with seed2 sign-extended: seed2 < 0 overwrites seed's bits."""
    case, a = _dropout_case()
    seven, eight = forward_backward(case.with_(seed=7, seed2=-3), a), forward_backward(case.with_(seed=8, seed2=-3), a)
    for name, value in seven.items():
        np.testing.assert_array_equal(eight[name], value, err_msg=name)
    positive_seven = forward_backward(case.with_(seed=7, seed2=3), a)["y"]
    positive_eight = forward_backward(case.with_(seed=8, seed2=3), a)["y"]
    assert not np.array_equal(positive_seven, positive_eight)


@pytest.mark.parametrize("rnn_mode", MODES)
@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_one_layer_models_are_unaffected(rnn_mode: str, direction: str) -> None:
    case = Case(rnn_mode, num_layers=1, num_units=4, input_size=2, direction=direction, max_time=4, batch=3,
                lengths=(4, 1, 3), dropout=0.7, seed=1, seed2=2)
    a = random_arrays(case, np.random.default_rng(stable_seed("one-layer", rnn_mode, direction)))
    with_dropout, without = forward_backward(case, a), forward_backward(case.with_(dropout=0.0), a)
    for name, value in without.items():
        np.testing.assert_array_equal(with_dropout[name], value, err_msg=name)


@pytest.mark.parametrize("rnn_mode", MODES)
def test_is_training_false_disables_dropout(rnn_mode: str) -> None:
    case = Case(rnn_mode, num_layers=2, num_units=4, input_size=2, max_time=4, batch=3, dropout=0.6, seed=9)
    a = random_arrays(case, np.random.default_rng(stable_seed("inference", rnn_mode)))
    inference = forward(case, a, is_training=False)
    no_dropout = forward(case.with_(dropout=0.0), a, is_training=True)
    training = forward(case, a, is_training=True)
    np.testing.assert_array_equal(inference.output, no_dropout.output)
    np.testing.assert_array_equal(inference.output_h, no_dropout.output_h)
    np.testing.assert_array_equal(inference.output_c, no_dropout.output_c)
    assert not np.array_equal(training.output, no_dropout.output)


@pytest.mark.parametrize("dropout", [1.0, -0.1, 1.5, float("nan"), float("inf")])
def test_dropout_outside_unit_interval_is_a_value_error(dropout: float) -> None:
    case, a = _dropout_case()
    with pytest.raises(ValueError, match="dropout"):
        forward(case.with_(dropout=dropout), a)
    good = forward(case, a)
    with pytest.raises(ValueError, match="dropout"):
        attrs = case.with_(dropout=dropout).attrs()
        cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, good.output, good.output_h, good.output_c,
                              a.dy, a.dhy, a.dcy, good.reserve_space, good.host_reserved, **attrs)


@pytest.mark.parametrize("dropout", ["0.5", None, True])
def test_dropout_of_the_wrong_type_is_a_type_error(dropout: object) -> None:
    case, a = _dropout_case()
    with pytest.raises(TypeError, match="dropout"):
        forward(case.with_(dropout=dropout), a)


def test_a_training_steps_backprop_finds_the_mask_its_forward_drew(monkeypatch: pytest.MonkeyPatch) -> None:
    """One draw per layer per training step (forward and backprop), a new draw for a new seed, and the
    kept draws bounded by KEPT_MASKS."""
    from cudnn_rnn.cpu import _dropout as _backend

    draws: list[int] = []
    generator = np.random.default_rng

    def counting(seed: object) -> np.random.Generator:
        draws.append(1)
        return generator(seed)  # type: ignore[arg-type]

    monkeypatch.setattr(_backend.np.random, "default_rng", counting)
    layers, units, batch, steps = 3, 4, 2, 5
    size = int(cudnn_rnn.cudnn_rnn_params_size(layers, units, units))
    x = np.ones((steps, batch, units), np.float32)
    h = np.zeros((layers, batch, units), np.float32)
    params = np.full(size, 0.1, np.float32)
    for seed2 in range(2 * _backend.KEPT_MASKS):
        draws.clear()
        out = cudnn_rnn.cudnn_rnn_v3(x, h, h, params, None, dropout=0.5, seed=1, seed2=seed2)
        cudnn_rnn.cudnn_rnn_backprop_v3(x, h, h, params, None, out.output, out.output_h, out.output_c, out.output,
                                        None, None, out.reserve_space, dropout=0.5, seed=1, seed2=seed2)
        assert len(draws) == layers - 1
        assert len(_backend._kept_masks) <= _backend.KEPT_MASKS
