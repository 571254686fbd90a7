"""Dropout through cuDNN: seeded masks that repeat on every call, and exact gradients with dropout on.

cuDNN applies inverted dropout to the output of every layer but the last, in training only. Its
masks come from a cuDNN dropout descriptor seeded with TF's 64-bit seed; the backend restores the
RNG state before every training forward, so a (seed, seed2) pair is a fixed function of the
inputs and gradients can be checked by finite differences in float64. A layer's masks come from
its own RNG state instead: set up once, advancing from step to step, saved and restored exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from cudnn_rnn._cudnn import _cache as _cudnn_cache  # noqa: E402
from cudnn_rnn._cudnn._descriptors import live_counts  # noqa: E402
from gpu_support import on_gpu, run  # noqa: E402
from rnn_testing import Arrays, Case, forward, random_arrays, relative_error  # noqa: E402

DROPPY = Case("lstm", num_layers=3, num_units=16, input_size=8, direction="bidirectional", num_proj=6,
              max_time=6, batch=5, lengths=(6, 3, 0, 1, 6), dropout=0.4, seed=7, seed2=11)


def _forward(case: Case, a: Arrays, **overrides) -> list[np.ndarray]:
    """(y, hy, cy) on the host."""
    return [value.get() for value in forward(case, a, **overrides)[:3]]


def _same(first: list[np.ndarray], second: list[np.ndarray]) -> bool:
    return all(np.array_equal(p, q) for p, q in zip(first, second))


@pytest.fixture(scope="module")
def droppy() -> Arrays:
    return on_gpu(random_arrays(DROPPY, np.random.default_rng(21)))


def test_same_seeds_give_the_same_masks_on_every_call(droppy: Arrays) -> None:
    first = _forward(DROPPY, droppy)
    other = DROPPY.with_(rnn_mode="gru", num_proj=0)
    _forward(other, on_gpu(random_arrays(other, np.random.default_rng(22))))  # another network in between
    for _ in range(3):
        assert _same(_forward(DROPPY, droppy), first)
        _forward(DROPPY, droppy, seed=8)  # another seed in between re-seeds the same network's state
    assert not _same(_forward(DROPPY, droppy, dropout=0.0), first)  # dropout really acts


def test_advancing_seeds_reuse_the_network(droppy: Arrays) -> None:
    _forward(DROPPY, droppy)
    before = (_cudnn_cache.cache_info()["networks"], live_counts())
    for step in range(20):  # the layer classes use the step counter as seed2
        _forward(DROPPY, droppy, seed2=step)
    assert (_cudnn_cache.cache_info()["networks"], live_counts()) == before


def test_different_seeds_give_different_masks(droppy: Arrays) -> None:
    first = _forward(DROPPY, droppy)
    assert not _same(_forward(DROPPY, droppy, seed=8), first)
    assert not _same(_forward(DROPPY, droppy, seed2=12), first)


def test_tf_seed_semantics(droppy: Arrays) -> None:
    # seed2 < 0 is sign-extended and hides seed, exactly as in TF
    assert _same(_forward(DROPPY, droppy, seed=7, seed2=-3), _forward(DROPPY, droppy, seed=8, seed2=-3))


def test_no_dropout_at_inference_or_after_the_last_layer(droppy: Arrays) -> None:
    assert _same(_forward(DROPPY, droppy, is_training=False), _forward(DROPPY, droppy, is_training=False, dropout=0.0))
    one = DROPPY.with_(num_layers=1)
    a = on_gpu(random_arrays(one, np.random.default_rng(23)))
    assert _same(_forward(one, a), _forward(one, a, dropout=0.0))


def _loss(case: Case, a: Arrays) -> float:
    y, hy, cy = _forward(case, a)
    return float(np.sum(y * a.dy.get()) + np.sum(hy * a.dhy.get()) +
                 (np.sum(cy * a.dcy.get()) if a.dcy is not None else 0.0))


@pytest.mark.parametrize("case", [
    DROPPY.with_(num_units=5, input_size=4, num_proj=3, max_time=4, batch=4, lengths=(4, 0, 2, 3)),
    Case("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", max_time=4, batch=3,
         lengths=(2, 4, 1), time_major=False, dropout=0.5, seed=3),
], ids=["lstm", "gru"])
def test_gradients_match_finite_differences_with_dropout_on(case: Case) -> None:
    rng = np.random.default_rng(24)
    a = on_gpu(random_arrays(case, rng))
    grads = run(case, a)
    names = {"x": "dx", "h0": "dh0", "c0": "dc0", "params": "dparams"}
    eps = 1e-6
    for argument, gradient in names.items():
        value = getattr(a, argument)
        if value is None:
            continue
        for _ in range(2):
            direction = cupy.asarray(rng.standard_normal(value.shape))
            plus = _loss(case, a.with_(**{argument: value + eps * direction}))
            minus = _loss(case, a.with_(**{argument: value - eps * direction}))
            numeric = (plus - minus) / (2 * eps)
            analytic = float(np.sum(grads[gradient] * direction.get()))
            assert relative_error(analytic, numeric) <= 1e-6, (argument, analytic, numeric)



def _layer_outputs(layer: Any, x: Any, steps: int) -> list[np.ndarray]:
    """The output of ``steps`` training forwards (each with its backward; the params do not change), on the host."""
    outputs = []
    for _ in range(steps):
        y, _, _ = layer(x, [6, 3, 0, 1, 6])
        layer.backward(y)
        outputs.append(y.get())
    return outputs


def test_a_layers_masks_advance_and_resume_exactly_from_its_state() -> None:
    from cudnn_rnn import LSTM

    x = cupy.asarray(np.random.default_rng(23).standard_normal((5, 6, 8)))

    def make(seed: int) -> LSTM:
        return LSTM(8, 16, num_layers=3, bidirectional=True, dropout=0.4, dtype="float64", xp=cupy, seed=seed)

    uninterrupted = _layer_outputs(make(7), x, 4)
    assert not np.array_equal(uninterrupted[0], uninterrupted[1]), "each step draws new masks"
    first = make(7)
    assert _same(_layer_outputs(first, x, 2), uninterrupted[:2]), "the same seed draws the same stream"
    resumed = make(9)
    resumed.load_state_dict(first.state_dict())  # the seed, the step and the RNG state
    assert _same(_layer_outputs(resumed, x, 2), uninterrupted[2:]), "a restored state resumes the stream exactly"
