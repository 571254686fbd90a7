"""A whole training step (forward, backprop, SGD update of the flat params) recorded as a CUDA
graph and replayed gives what the same steps give eagerly; recording it also proves that the
steady-state step makes no host transfer or wait (CUDA refuses them while recording). A replay
after the lengths changed in place is refused (and changes nothing), or with
``on_new_lengths="recapture"`` gives what eager steps with those lengths give. A layer's step
with dropout replays new masks every time, from the layer's own RNG, as eager steps draw them."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

import cudnn_rnn  # noqa: E402
from cudnn_rnn.cuda_graph import capture  # noqa: E402
from cudnn_rnn.optim import SGD  # noqa: E402
from gpu_support import on_gpu  # noqa: E402
from rnn_testing import Case, random_arrays, relative_error, stable_seed  # noqa: E402

STEPS = 4
#: the lengths of step i of a run whose lengths change in place between steps (CASES[0]'s batch of 5)
LENGTHS = [(7, 0, 3, 7, 1), (2, 7, 7, 1, 0), (2, 7, 7, 1, 0), (7, 0, 3, 7, 1), (5, 5, 5, 5, 5), (2, 7, 7, 1, 0)]
CASES = [
    Case("lstm", num_layers=2, num_units=16, input_size=8, direction="bidirectional", num_proj=6, max_time=7,
         batch=5, lengths=(7, 0, 3, 7, 1), dropout=0.3, seed=5, seed2=2, time_major=False),
    Case("gru", num_layers=2, num_units=32, input_size=16, max_time=9, batch=4, dtype="float32"),
]


def _trainer(case: Case, stream: Any, varying_lengths: bool = False
             ) -> tuple[Callable[[int], Callable[[], None]], Any, SGD]:
    """A step factory for ``case`` on ``stream``: step(i) loads batch i into x (and, with ``varying_lengths``,
    ``LENGTHS[i]`` into the lengths array) in place, then trains on it. Every array is made on ``stream``,
    so that each step's work is ordered after it (CuPy's default stream does not order a non-blocking one)."""
    rng = np.random.default_rng(stable_seed(case))
    with stream:
        a = on_gpu(random_arrays(case, rng))
        batches = [cupy.asarray(rng.uniform(-1, 1, a.x.shape).astype(case.dtype)) for _ in range(len(LENGTHS))]
        target = cupy.asarray(rng.uniform(-1, 1, a.dy.shape).astype(case.dtype))
        params = a.params.copy()
        optimiser = SGD([params], lr=0.05, momentum=0.9)
    attrs = case.attrs()

    def train() -> None:  # 0.5 * |y - target|^2 over the valid steps
        out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, params, a.lengths, is_training=True, **attrs)
        grads = cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, params, a.lengths, out.output, out.output_h,
                                                out.output_c, out.output - target, None, None, out.reserve_space,
                                                out.host_reserved, **attrs)
        optimiser.step([grads.params_backprop])

    def step(i: int) -> Callable[[], None]:
        a.x[...] = batches[i]
        if varying_lengths:
            a.lengths[...] = LENGTHS[i]  # the NumPy array the op calls get: the graph watches it
        return train

    return step, params, optimiser


@pytest.mark.parametrize("case", CASES, ids=["lstm-float64", "gru-float32"])
def test_replayed_steps_equal_eager_steps(case: Case) -> None:
    stream = cupy.cuda.Stream(non_blocking=True)
    step, eager_params, eager_optimiser = _trainer(case, stream)
    with stream:
        start = eager_params.copy()
        for i in range(STEPS):
            step(i)()
    stream.synchronize()

    step, params, optimiser = _trainer(case, stream)
    with stream:
        captured = capture(step(0), stream=stream)  # the warm-up is step 0
        for i in range(1, STEPS):
            step(i)  # loads batch i into x, on the stream, before the replay
            captured.replay()
    stream.synchronize()
    tolerance = {"float64": 1e-12, "float32": 1e-6}[case.dtype]
    assert relative_error(eager_params.get(), start.get()) > 1e-3, "the steps really train"
    assert relative_error(params.get(), eager_params.get()) <= tolerance
    assert relative_error(optimiser.velocity[0].get(), eager_optimiser.velocity[0].get()) <= tolerance


def test_a_replay_with_other_lengths_is_refused_and_changes_nothing() -> None:
    stream = cupy.cuda.Stream(non_blocking=True)
    step, params, _ = _trainer(CASES[0], stream, varying_lengths=True)
    with stream:
        captured = capture(step(0), stream=stream)
        before = params.copy()
        step(1)
        with pytest.raises(ValueError, match=r"sequence_lengths now holds \[2, 7, 7, 1, 0\] but the graph was "
                                             r"recorded with \[7, 0, 3, 7, 1\]"):
            captured.replay()
    stream.synchronize()
    assert cupy.array_equal(params, before), "the refused replay launched nothing"


def test_recaptured_replays_with_changing_lengths_equal_eager_steps() -> None:
    case = CASES[0]
    stream = cupy.cuda.Stream(non_blocking=True)
    step, eager_params, eager_optimiser = _trainer(case, stream, varying_lengths=True)
    with stream:
        for i in range(len(LENGTHS)):
            step(i)()
    stream.synchronize()

    step, params, optimiser = _trainer(case, stream, varying_lengths=True)
    with stream:  # with 2 graphs kept, (5, 5, 5, 5, 5) drops the graph of LENGTHS[1], recorded again at the end
        captured = capture(step(0), stream=stream, on_new_lengths="recapture", max_graphs=2)
        for i in range(1, len(LENGTHS)):
            step(i)
            captured.replay()
    stream.synchronize()
    assert relative_error(params.get(), eager_params.get()) <= 1e-12
    assert relative_error(optimiser.velocity[0].get(), eager_optimiser.velocity[0].get()) <= 1e-12


def test_a_layers_replayed_steps_draw_new_masks_as_eager_steps_do() -> None:
    from cudnn_rnn import GRU

    rng = np.random.default_rng(31)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # every array on the stream the steps run on
        x = cupy.asarray(rng.uniform(-1, 1, (4, 6, 8)))
        target = cupy.asarray(rng.uniform(-1, 1, (4, 6, 16)))

    def trainer() -> tuple[GRU, Callable[[], None]]:
        with stream:
            layer = GRU(8, 16, num_layers=3, dropout=0.5, dtype="float64", xp=cupy, seed=4)
            optimiser = SGD([layer.params], lr=0.05)

        def train() -> None:
            y, _, _ = layer(x, [6, 2, 5, 6])
            layer.zero_grad()
            layer.backward(y - target)
            optimiser.step([layer.grad])

        return layer, train

    eager, train = trainer()
    with stream:
        for _ in range(STEPS):
            train()
    replayed, train = trainer()
    with stream:
        captured = capture(train, stream=stream)  # the warm-up is step 0
        for _ in range(1, STEPS):
            captured.replay()
    stream.synchronize()
    assert relative_error(replayed.params.get(), eager.params.get()) <= 1e-12
    states = (replayed.state_dict()["dropout_rng"]["states"], eager.state_dict()["dropout_rng"]["states"])
    assert np.array_equal(*(s.get() for s in states)), "the RNG advanced once per replay"
