"""A CUDA graph freezes the sequence lengths and shapes it was recorded with (cuDNN takes the lengths
from host memory), so ``cuda_graph.CapturedStep.replay`` checks them first: on tests/support/fake_gpu.py.

* ``on_new_lengths="raise"`` (the default): a replay after the step's lengths array changed in
  place raises ValueError naming sequence_lengths with both values, and launches nothing; the
  same values launch the graph without running the step; so does a changed input shape.
* ``"recapture"``: new lengths run the step eagerly once (no launch) and record a graph for them;
  lengths recorded before launch their own graph again; at most ``max_graphs`` graphs are kept,
  and a dropped one releases what it held.
* The layers are watched too: a NumPy lengths array reaches the op as the caller's own object, and
  a list given to a layer is watched itself.
* CuPy lengths in a recorded step and bad options are refused with errors that say why.

What a replay does is read off the fake's log: cuDNN calls enqueued outside a capture ran
eagerly, calls between ``begin_capture`` and ``end_capture`` were only recorded, and each
``launch`` is one graph launch.
"""

from __future__ import annotations

import gc
import sys
import types
import weakref
from typing import Any, Callable

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn._cudnn import _cache as _cudnn_cache
from cudnn_rnn import cuda_graph
from cudnn_testing import DROPPY, device_arrays, train_step
from fake_gpu import FakeCudnn, to_device
from rnn_testing import Arrays

CUDNN_CALLS = ("cudnnRNNForward", "cudnnRNNBackwardData_v8", "cudnnRNNBackwardWeights_v8")
RECORDED = np.array([5, 0, 3], np.int32)  # DROPPY's lengths: what the graph is recorded with


def cupy() -> Any:
    return sys.modules["cupy"]


def what_ran(log: list[tuple]) -> dict[str, int]:
    """Counts of what ``log`` shows really running: ``eager`` cuDNN calls (outside a capture),
    ``recorded`` cuDNN calls (inside one), ``captures`` and ``launches``."""
    counts = dict(eager=0, recorded=0, captures=0, launches=0)
    capturing = False
    for entry in log:
        if entry[0] == "begin_capture":
            capturing = True
            counts["captures"] += 1
        elif entry[0] == "end_capture":
            capturing = False
        elif entry[0] == "launch":
            counts["launches"] += 1
        elif entry[0] in CUDNN_CALLS:
            counts["recorded" if capturing else "eager"] += 1
    return counts


class Replays:
    """A captured DROPPY training step (NumPy lengths ``arrays.lengths``), and what each replay did."""

    def __init__(self, fake_cudnn: FakeCudnn, **options: Any) -> None:
        self.log = fake_cudnn.gpu.log
        self.arrays: Arrays = device_arrays(DROPPY)
        assert np.array_equal(self.arrays.lengths, RECORDED)
        self.step_runs = 0

        def step() -> None:
            self.step_runs += 1
            train_step(DROPPY, self.arrays, pass_host_reserved=False)

        self.captured = cuda_graph.capture(step, **options)
        self.first = self.captured.graph

    def replay(self) -> dict[str, int]:
        """Replay once; what ran (see :func:`what_ran`) and ``step_runs``, the step's Python runs."""
        start, runs = len(self.log), self.step_runs
        self.captured.replay()
        return {**what_ran(self.log[start:]), "step_runs": self.step_runs - runs}


LAUNCHED = dict(eager=0, recorded=0, captures=0, launches=1, step_runs=0)
RAN_AND_RECORDED = dict(eager=3, recorded=3, captures=1, launches=0, step_runs=2)  # eager forward + backprop


# ==== on_new_lengths="raise" ======================================================================
def test_the_same_lengths_launch_the_graph_without_running_the_step(fake_cudnn: FakeCudnn) -> None:
    replays = Replays(fake_cudnn)
    assert what_ran(replays.log) == dict(eager=3, recorded=3, captures=1, launches=0), "one warm-up, one recording"
    for _ in range(3):
        assert replays.replay() == LAUNCHED
    replays.arrays.lengths[...] = RECORDED.copy()  # rewritten with equal values
    assert replays.replay() == LAUNCHED
    assert replays.first.launches == 4 and replays.captured.graph is replays.first


def test_a_replay_after_the_lengths_changed_in_place_is_refused(fake_cudnn: FakeCudnn) -> None:
    replays = Replays(fake_cudnn)
    replays.arrays.lengths[...] = [1, 2, 3]
    start = len(replays.log)
    with pytest.raises(ValueError, match=r"sequence_lengths now holds \[1, 2, 3\] but the graph was recorded "
                                         r"with \[5, 0, 3\].*on_new_lengths='recapture'"):
        replays.captured.replay()
    assert replays.log[start:] == [] and replays.step_runs == 2 and replays.first.launches == 0, "nothing ran"
    replays.arrays.lengths[...] = RECORDED
    assert replays.replay() == LAUNCHED, "the recorded lengths back in place: the graph fits again"


def test_long_lengths_are_abbreviated_in_the_refusal(fake_cudnn: FakeCudnn) -> None:
    case = DROPPY.with_(batch=40, lengths=tuple(i % 6 for i in range(40)))
    a = device_arrays(case)
    captured = cuda_graph.capture(lambda: train_step(case, a, pass_host_reserved=False))
    a.lengths[-1] = 0
    with pytest.raises(ValueError) as refused:
        captured.replay()
    message = str(refused.value)
    assert "now holds [0, 1, 2, 3, ..., 0, 1, 2, 0]" in message and "recorded with [0, 1, 2, 3, ..., 0, 1, 2, 3]" \
        in message, message


def test_a_replay_after_the_input_changed_shape_is_refused(fake_cudnn: FakeCudnn) -> None:
    replays = Replays(fake_cudnn)
    x = replays.arrays.x
    recorded = x.shape
    x.shape = (x.shape[1], x.shape[0], x.shape[2])  # in place: the same memory, other T and B
    with pytest.raises(ValueError, match=r"input now has shape \(5, 3, 3\) but the graph was recorded with "
                                         r"shape \(3, 5, 3\)"):
        replays.captured.replay()
    x.shape = recorded
    assert replays.replay() == LAUNCHED


def test_calls_on_numpy_arrays_in_the_step_are_not_watched(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY)
    host_lengths = np.array([2, 1, 0], np.int32)
    host = cudnn_rnn.cudnn_rnn_params_size(1, 2, 1, rnn_mode="gru")
    params = np.zeros(host)

    def step() -> None:
        train_step(DROPPY, a, pass_host_reserved=False)
        cudnn_rnn.cudnn_rnn_v3(np.zeros((2, 3, 1)), np.zeros((1, 3, 2)), None, params, host_lengths,
                               rnn_mode="gru")  # host work: not part of the graph

    captured = cuda_graph.capture(step)
    host_lengths[...] = [1, 1, 1]
    captured.replay()
    assert captured.graph.launches == 1


# ==== on_new_lengths="recapture" ==================================================================
def test_new_lengths_run_the_step_eagerly_and_record_a_graph_for_them(fake_cudnn: FakeCudnn) -> None:
    replays = Replays(fake_cudnn, on_new_lengths="recapture")
    other = np.array([2, 5, 1], np.int32)
    replays.arrays.lengths[...] = other
    assert replays.replay() == RAN_AND_RECORDED, "this replay's work ran eagerly, and the step was recorded"
    assert np.array_equal(fake_cudnn.seen["lengths"], other), "with the new lengths"
    second = replays.captured.graph
    assert second is not replays.first and second.launches == 0 and replays.first.launches == 0
    assert replays.replay() == LAUNCHED and second.launches == 1
    replays.arrays.lengths[...] = RECORDED
    assert replays.replay() == LAUNCHED, "the first lengths again: their graph, not a new recording"
    assert replays.first.launches == 1 and replays.captured.graph is replays.first
    replays.arrays.lengths[...] = other
    assert replays.replay() == LAUNCHED and second.launches == 2


def plan_block(lengths: np.ndarray) -> Any:
    """The device block of the backend's plan for ``lengths`` (DROPPY's one network)."""
    (network,) = _cudnn_cache.thread_context(0).networks.values()
    (plan,) = [plan for key, plan in zip(network.plans.keys(), network.plans.values())
               if key[3] == lengths.astype(np.int32).tobytes()]
    return plan.buffers.arrays[0]


def test_at_most_max_graphs_are_kept_and_a_dropped_one_releases_what_it_held(fake_cudnn: FakeCudnn) -> None:
    replays = Replays(fake_cudnn, on_new_lengths="recapture", max_graphs=2)
    lengths = replays.arrays.lengths
    second, third = np.array([1, 1, 1], np.int32), np.array([2, 2, 2], np.int32)
    lengths[...] = second
    assert replays.replay() == RAN_AND_RECORDED
    graph_of_second = weakref.ref(replays.captured.graph)
    block_of_second = weakref.ref(plan_block(second))
    lengths[...] = RECORDED
    assert replays.replay() == LAUNCHED  # the first graph is now the most recently used
    lengths[...] = third
    assert replays.replay() == RAN_AND_RECORDED  # a third graph: the second one, least recently used, goes
    block_of_first = weakref.ref(plan_block(RECORDED))
    _cudnn_cache.clear_caches()
    gc.collect()
    assert graph_of_second() is None and block_of_second() is None, "the dropped graph released its plan's block"
    assert block_of_first() is not None, "a kept graph still holds the block it reads"
    lengths[...] = RECORDED
    assert replays.replay() == LAUNCHED
    lengths[...] = second
    assert replays.replay() == RAN_AND_RECORDED, "the dropped lengths are recorded again"


def test_a_failing_eager_run_leaves_the_graphs_as_they_were(fake_cudnn: FakeCudnn) -> None:
    replays = Replays(fake_cudnn, on_new_lengths="recapture")
    replays.arrays.lengths[...] = [9, 9, 9]  # past T = 5: the op refuses them
    with pytest.raises(ValueError, match=r"sequence_lengths values must be in \[0, 5\]"):
        replays.captured.replay()
    assert not replays.captured.stream.is_capturing()
    replays.arrays.lengths[...] = RECORDED
    assert replays.replay() == LAUNCHED and replays.captured.graph is replays.first


# ==== layers ======================================================================================
def layer_step(monkeypatch: pytest.MonkeyPatch, lengths: Any) -> tuple[Callable[[], None], Any]:
    """A training step of a CuPy LSTM layer on [B=3, T=5, I=3] inputs with ``lengths``; (step, layer)."""
    module = types.ModuleType("cupy")  # the layers take a module for xp
    module.__dict__.update(vars(cupy()))
    monkeypatch.setitem(sys.modules, "cupy", module)
    layer = cudnn_rnn.LSTM(input_size=3, num_units=4, xp=module)
    x = to_device(np.random.default_rng(0).uniform(-1, 1, (3, 5, 3)).astype(np.float32))

    def step() -> None:
        layer.zero_grad()
        y, _, _ = layer.forward(x, lengths)
        layer.backward(y)

    return step, layer


@pytest.mark.parametrize("kind", ["array", "list"])
def test_a_layer_step_is_watched(fake_cudnn: FakeCudnn, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    lengths: Any = np.array([5, 2, 4], np.int32) if kind == "array" else [5, 2, 4]
    step, layer = layer_step(monkeypatch, lengths)
    captured = cuda_graph.capture(step)
    captured.replay()
    assert captured.graph.launches == 1
    lengths[1] = 3
    with pytest.raises(ValueError, match=r"sequence_lengths now holds \[5, 3, 4\] but the graph was recorded "
                                         r"with \[5, 2, 4\]"):
        captured.replay()
    recapturing = cuda_graph.capture(step, on_new_lengths="recapture")
    lengths[1] = 1
    recapturing.replay()
    assert np.array_equal(fake_cudnn.seen["lengths"], [5, 1, 4]) and recapturing.graph.launches == 0


# ==== refusals ====================================================================================
def test_cupy_lengths_cannot_be_recorded(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY)
    a = a.with_(lengths=to_device(a.lengths))
    stream = cupy().cuda.Stream(non_blocking=True)
    with pytest.raises(TypeError, match="sequence_lengths must be a NumPy array or None in a step recorded as a "
                                        "CUDA graph: CuPy lengths are read back to the host"):
        cuda_graph.capture(lambda: train_step(DROPPY, a, pass_host_reserved=False), stream=stream)
    assert not stream.is_capturing()
    assert what_ran(fake_cudnn.gpu.log)["eager"] == 3, "the warm-up ran, with CuPy lengths, as eager calls may"


@pytest.mark.parametrize("options, message", [
    (dict(on_new_lengths="sometimes"), "on_new_lengths must be one of 'raise', 'recapture'; got 'sometimes'"),
    (dict(on_new_lengths=None), "on_new_lengths must be one of 'raise', 'recapture'; got None"),
    (dict(max_graphs=0), "max_graphs must be an int >= 1 .*; got 0"),
    (dict(max_graphs=True), "max_graphs must be an int >= 1 .*; got True"),
    (dict(max_graphs=2.0), "max_graphs must be an int >= 1 .*; got 2.0"),
])
def test_bad_options_are_refused_before_anything_runs(fake_cudnn: FakeCudnn, options: dict[str, Any],
                                                     message: str) -> None:
    runs: list[int] = []
    with pytest.raises(ValueError, match=message):
        cuda_graph.capture(lambda: runs.append(1), **options)
    assert runs == []
