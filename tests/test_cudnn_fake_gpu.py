"""The cuDNN backend's handling of devices, streams and host transfers, on tests/support/fake_gpu.py.

Every call goes through the public ops (so ops.py's copies and transposes count too):

* devices: arrays on GPU 1 while GPU 0 is current stay on GPU 1 (every copy, every cuDNN call),
  and every cuDNN object is destroyed with its own GPU current, by clear_caches and by the
  garbage collector;
* streams: cached device arrays used from a second stream are ordered (the second stream waits
  for the upload; a dropout state is used in turn) and go back to the pool only after every
  stream that used them is done; one stream alone records no event;
* host transfers: a training step with NumPy lengths never reads from or waits for the device,
  host_reserved or not (the reserve's own checks are in tests/test_reserve.py, those of ops.py
  in tests/test_ops.py);
* padding: NaN and inf in padded x and dy never reach cuDNN;
* a layer's backward: cuDNN adds the weight gradient straight into the layer's grad;
* CUDA graphs: the steady-state training step records without a host transfer, and the graph
  keeps the cached arrays it reads.
"""

from __future__ import annotations

import gc
import sys
import threading
import types
import weakref
from typing import Any, Callable

import numpy as np
import pytest

from cudnn_rnn._cudnn import _backend as _cudnn, _cache as _cudnn_cache
from cudnn_rnn import cuda_graph
from cudnn_rnn.optim import SGD
from cudnn_testing import DROPPY, device_arrays, train_step
from fake_gpu import FakeCudnn, ndarray, to_device
from rnn_testing import Arrays, Case


def cupy() -> Any:
    return sys.modules["cupy"]


def the_plan() -> Any:
    (network,) = _cudnn_cache.thread_context(0).networks.values()
    (plan,) = network.plans.values()
    return plan


def watch_release(fake_cudnn: FakeCudnn, array: Any, name: str) -> None:
    """Log ``("freed", name)`` when ``array``'s memory goes back to the pool."""
    weakref.finalize(array, fake_cudnn.gpu.log.append, ("freed", name))


def drop_thread_caches() -> None:
    """Forget this thread's cached objects without closing them, as when a thread ends."""
    _cudnn_cache._forget(threading.get_ident())


def waits(log: list[tuple]) -> list[tuple[int, int]]:
    """(stream waited for, stream that waits) for each event wait in ``log``."""
    recorded = {entry[1]: entry[2] for entry in log if entry[0] == "record"}
    return [(recorded[entry[2]], entry[1]) for entry in log if entry[0] == "wait"]


# ==== devices ===================================================================================
@pytest.mark.parametrize("time_major", [True, False])
def test_arrays_on_gpu_1_stay_there_while_gpu_0_is_current(fake_cudnn: FakeCudnn, time_major: bool) -> None:
    case = DROPPY.with_(time_major=time_major)
    a = device_arrays(case, device=1)
    wide = to_device(np.repeat(np.asarray(a.x.view(np.ndarray)), 2, axis=2), 1)
    a = a.with_(x=wide[:, :, ::2])  # not contiguous: the op copies it
    assert not a.x.flags.c_contiguous and fake_cudnn.gpu.current_device == 0
    results = train_step(case, a)
    assert fake_cudnn.gpu.violations == [], "every copy and kernel ran on GPU 1"
    for name, value in results.items():
        if isinstance(value, ndarray):
            assert value.device_id == 1, name
    assert set(fake_cudnn.created_on.values()) == {1}, "every cuDNN object belongs to GPU 1"
    assert fake_cudnn.gpu.current_device == 0, "the caller's device is current again"


def test_objects_are_destroyed_with_their_own_gpu_current(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY, device=1)
    train_step(DROPPY, a)
    _cudnn_cache.clear_caches()  # with GPU 0 current
    kinds = {kind for kind, _, _ in fake_cudnn.destroyed}
    assert kinds == {"", "RNNDescriptor", "DropoutDescriptor", "RNNDataDescriptor", "TensorDescriptor"}
    assert {(created, current) for _, created, current in fake_cudnn.destroyed} == {(1, 1)}
    fake_cudnn.destroyed.clear()
    train_step(DROPPY, a)
    drop_thread_caches()
    gc.collect()
    assert fake_cudnn.open == {} and {kind for kind, _, _ in fake_cudnn.destroyed} == kinds
    assert {(created, current) for _, created, current in fake_cudnn.destroyed} == {(1, 1)}, "finalizers too"
    assert fake_cudnn.gpu.current_device == 0


def test_objects_of_an_ended_thread_are_destroyed_on_their_gpu(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY, device=1)
    worker = threading.Thread(target=train_step, args=(DROPPY, a))
    worker.start()
    worker.join()
    gc.collect()
    assert fake_cudnn.open == {}
    assert fake_cudnn.destroyed and {(created, current) for _, created, current in fake_cudnn.destroyed} == {(1, 1)}


# ==== streams ===================================================================================
def test_one_stream_records_no_event(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY)
    stream = cupy().cuda.Stream(non_blocking=True)
    with stream:
        for seed2 in (4, 4, 5, 4):
            train_step(DROPPY, a, seed2=seed2)
    assert [entry for entry in fake_cudnn.gpu.log if entry[0] in ("record", "wait")] == []


@pytest.mark.parametrize("release", ["eviction", "clear_caches", "garbage collection"])
def test_a_plan_used_on_a_second_stream(fake_cudnn: FakeCudnn, monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    case = DROPPY.with_(dropout=0.0)
    a = device_arrays(case)
    home, other = cupy().cuda.Stream(non_blocking=True), cupy().cuda.Stream(non_blocking=True)
    with home:
        train_step(case, a)
    watch_release(fake_cudnn, the_plan().buffers.arrays[0], "plan block")
    log = fake_cudnn.gpu.log
    start = len(log)
    with other:
        train_step(case, a)
    second = log[start:]
    assert waits(second) == [(home.ptr, other.ptr)], "the first use on another stream waits for the upload"
    assert second.index(("cudnnRNNForward", other.ptr)) > max(i for i, e in enumerate(second) if e[0] == "wait")
    start = len(log)
    with other:
        train_step(case, a)
    assert waits(log[start:]) == [], "once is enough"
    start = len(log)
    if release == "eviction":
        monkeypatch.setattr(_cudnn_cache, "PLAN_CACHE_SIZE", 1)
        _cudnn_cache.thread_context(0).networks.values()[-1].plans.maxsize = 1  # the step's network
        with home:
            train_step(case, a.with_(lengths=np.array([1, 2, 3], np.int32)))
    elif release == "clear_caches":
        _cudnn_cache.clear_caches()
    else:
        drop_thread_caches()
        gc.collect()
    released = [e for e in log[start:] if e[0] in ("record", "wait", "freed")]
    assert waits(released) == [(other.ptr, home.ptr)], "home waits for the other stream ..."
    assert released[-1] == ("freed", "plan block"), "... before the block goes back to the pool"


def test_a_dropout_state_is_used_by_one_stream_at_a_time(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY)
    first, second = cupy().cuda.Stream(non_blocking=True), cupy().cuda.Stream(non_blocking=True)
    log = fake_cudnn.gpu.log
    with first:
        train_step(DROPPY, a)
    for stream, waited in ((second, first), (first, second), (second, first)):
        start = len(log)
        with stream:
            train_step(DROPPY, a)
        assert (waited.ptr, stream.ptr) in waits(log[start:])
        forward = log.index(("cudnnRNNForward", stream.ptr), start)
        assert all(i < forward for i, e in enumerate(log) if i >= start and e[0] == "wait")


def test_a_reserve_sized_while_tracing_seeds_the_dropout_states_on_the_callers_stream(fake_cudnn: FakeCudnn) -> None:
    # a bridge asks the reserve's length before any data exists; building the network there sets up its dropout
    # states (cuRAND, on the handle's stream) and copies them aside on the caller's: both on one stream
    first, second = cupy().cuda.Stream(non_blocking=True), cupy().cuda.Stream(non_blocking=True)
    with first:
        train_step(DROPPY.with_(dropout=0.0), device_arrays(DROPPY))  # the handle last bound to the first stream
    log = fake_cudnn.gpu.log
    start = len(log)
    with second:
        _cudnn.reserve_elements(DROPPY.config(), DROPPY.max_time, DROPPY.batch, True, 0)
    built = [entry for entry in log[start:] if entry[0] in ("cudnnSetDropoutDescriptor", "copy")]
    assert built[:2] == [("cudnnSetDropoutDescriptor", second.ptr), ("copy", second.ptr)], built


def test_a_foreign_stream_reaches_cupy_through_the_cuda_stream_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    # the bridges hand CuPy the address of XLA's or PyTorch's stream: CuPy 14 takes it as an object with
    # __cuda_stream__ (ExternalStream is deprecated there); an older CuPy has ExternalStream alone
    from cudnn_rnn._cudnn._streams import external_stream

    taken: list[Any] = []

    class Cupy14Stream:
        @classmethod
        def from_external(cls, foreign: Any) -> str:
            taken.append(foreign.__cuda_stream__())
            return "the stream"

    def external(pointer: int, device_id: int) -> str:
        taken.append(("ExternalStream", pointer, device_id))
        return "the stream"

    for stream_class, expected in ((Cupy14Stream, (0, 0x7F00)), (object, ("ExternalStream", 0x7F00, 1))):
        taken.clear()
        cuda = types.SimpleNamespace(Stream=stream_class, ExternalStream=external)
        monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
        assert external_stream(0x7F00, 1) == "the stream" and taken == [expected], stream_class


# ==== host transfers ============================================================================
@pytest.mark.parametrize("pass_host_reserved", [True, False])
def test_a_training_step_with_numpy_lengths_never_waits(fake_cudnn: FakeCudnn, pass_host_reserved: bool) -> None:
    a = device_arrays(DROPPY)
    optimiser = SGD([a.params], lr=0.1, momentum=0.9)
    with fake_cudnn.gpu.counting() as first:
        train_step(DROPPY, a, pass_host_reserved=pass_host_reserved, optimiser=optimiser)
    assert first == {"h2d": 1}, "a new plan uploads its block once, without waiting"
    with fake_cudnn.gpu.counting() as steady:
        for seed2 in (4, 5, 6):  # an advancing seed, as the layer classes use
            train_step(DROPPY, a, pass_host_reserved=pass_host_reserved, optimiser=optimiser, seed2=seed2)
    assert steady == {}, "no read, upload or wait in steady state"


# ==== padding ===================================================================================
def poisoned(case: Case, a: Arrays) -> Arrays:
    """NaN in every padded position of x, inf in dy's."""
    x, dy = np.array(a.x.view(np.ndarray)), np.array(a.dy.view(np.ndarray))
    for row, length in enumerate(case.lengths):
        pad = (slice(length, None), row) if case.time_major else (row, slice(length, None))
        x[pad], dy[pad] = np.nan, np.inf
    return a.with_(x=to_device(x), dy=to_device(dy))


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("lengths", [(5, 0, 3), (5, 2, 3)], ids=["a-length-0-row", "no-length-0-row"])
def test_padding_never_reaches_cudnn(fake_cudnn: FakeCudnn, time_major: bool, lengths: tuple[int, ...]) -> None:
    case = DROPPY.with_(time_major=time_major, lengths=lengths)
    train_step(case, poisoned(case, device_arrays(case)))
    for name in ("x", "dy", "weights_x"):
        assert np.isfinite(fake_cudnn.seen[name]).all(), name


def test_what_cudnn_ignoring_padding_would_save(fake_cudnn: FakeCudnn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cudnn, "CUDNN_IGNORES_PADDING", True)
    case = DROPPY.with_(lengths=(5, 2, 3))
    train_step(case, poisoned(case, device_arrays(case)))
    assert np.isnan(fake_cudnn.seen["x"]).any() and np.isinf(fake_cudnn.seen["dy"]).any(), (
        "no select: x and dy as given")
    case = DROPPY.with_(lengths=(5, 0, 3))  # a length-0 row still needs its step 0 zeroed
    train_step(case, poisoned(case, device_arrays(case)))
    assert np.isfinite(fake_cudnn.seen["x"]).all() and np.isfinite(fake_cudnn.seen["dy"]).all()


# ==== CUDA graphs ===============================================================================
def graph_step(fake_cudnn: FakeCudnn) -> tuple[Callable[[], None], Arrays]:
    a = device_arrays(DROPPY)
    optimiser = SGD([a.params], lr=0.1, momentum=0.9)
    return (lambda: train_step(DROPPY, a, optimiser=optimiser, pass_host_reserved=False)), a


def test_the_steady_training_step_records_without_host_transfers(fake_cudnn: FakeCudnn) -> None:
    step, a = graph_step(fake_cudnn)
    stream = cupy().cuda.Stream(non_blocking=True)
    with stream:
        step()
    objects, calls, start = dict(fake_cudnn.open), len(fake_cudnn.calls), len(fake_cudnn.gpu.log)
    with fake_cudnn.gpu.counting() as made:
        with stream:
            stream.begin_capture()  # the fake, like CUDA, refuses transfers and waits from here on
            step()
            stream.end_capture()
    assert made == {} and fake_cudnn.open == objects
    assert [c for c in fake_cudnn.calls[calls:] if c[0] != "set_stream"] == [], "no descriptor, no cuRAND set-up"
    assert [e for e in fake_cudnn.gpu.log[start:] if e[0] in ("record", "wait")] == []


def test_a_new_lengths_pattern_cannot_be_recorded(fake_cudnn: FakeCudnn) -> None:
    step, a = graph_step(fake_cudnn)
    stream = cupy().cuda.Stream(non_blocking=True)
    with stream:
        step()
        objects = dict(fake_cudnn.open)
        stream.begin_capture()
        with pytest.raises(RuntimeError, match="capturing, so h2d is not allowed"):
            train_step(DROPPY, a.with_(lengths=np.array([1, 1, 1], np.int32)))
        stream.end_capture()
    assert fake_cudnn.open == objects, "the half-built plan closed its descriptors at once"


def test_capture_keeps_what_the_graph_reads(fake_cudnn: FakeCudnn) -> None:
    step, _ = graph_step(fake_cudnn)
    captured = cuda_graph.capture(step)
    log = fake_cudnn.gpu.log
    begin = log.index(("begin_capture", captured.stream.ptr))
    assert log.index(("cudnnRNNForward", captured.stream.ptr)) < begin, "the warm-up ran on the capture stream"
    assert log.index(("end_capture", captured.stream.ptr)) > begin
    block = weakref.ref(the_plan().buffers.arrays[0])
    _cudnn_cache.clear_caches()
    gc.collect()
    assert block() is not None, "the graph still reads the plan's block"
    captured.replay()
    assert log[-1] == ("launch", captured.stream.ptr)
    del captured
    gc.collect()
    assert block() is None


def test_capture_ends_the_recording_when_the_step_fails(fake_cudnn: FakeCudnn) -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the step failed")

    stream = cupy().cuda.Stream(non_blocking=True)
    with pytest.raises(RuntimeError, match="the step failed"):
        cuda_graph.capture(step, stream=stream)
    assert not stream.is_capturing()
    with pytest.raises(ValueError, match="warmup must be an int >= 1"):
        cuda_graph.capture(step, warmup=0)


def test_a_layers_backward_adds_the_weight_gradient_straight_into_its_grad(
        fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """cudnnRNNBackwardWeights_v8 (WGRAD_MODE_ADD) gets the layer's own grad buffer: nothing params-sized is
    allocated or zeroed for it, and what was in it stays (the fake adds 1 to every element)."""
    import fake_gpu
    from cudnn_rnn import LSTM

    layer = LSTM(3, 5, num_layers=2, xp=fake_cupy)
    layer.grad[...] = 0.5
    grad, size = layer.grad, layer.params.size
    layer.forward(to_device(np.ones((2, 4, 3), np.float32)))
    allocate, shapes = fake_gpu._allocate, []

    def recorded(shape: Any, *args: Any, **kwargs: Any) -> Any:
        shapes.append(shape)
        return allocate(shape, *args, **kwargs)

    monkeypatch.setattr(fake_gpu, "_allocate", recorded)
    layer.backward(to_device(np.ones((2, 4, 5), np.float32)))
    assert fake_cudnn.seen["dweights"] == grad.data.ptr and layer.grad is grad
    assert shapes and all(int(np.prod(shape)) != size for shape in shapes), shapes
    np.testing.assert_array_equal(grad.view(np.ndarray), np.full(size, 1.5, np.float32))

