"""``ops.py``: what the ops do around a backend. The validated call (dispatch by array kind, batch-major
states made time-major and back, the key of its reserve), every forward recorded and every backprop's
reserve checked through ``_reserve`` before the backend runs, empty batches and sequences without a
backend, and, on tests/support/fake_gpu.py, all arrays of a call on one GPU and CuPy lengths read back once.
The refusals of bad arguments are in tests/test_bad_input.py; the semantics in tests/test_semantics.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn._cudnn import _backend as _cudnn
from cudnn_rnn.cpu import _backend as _reference
from cudnn_rnn import _reserve, ops
from cudnn_testing import DROPPY, device_arrays, train_step
from fake_gpu import FakeCudnn, ndarray, to_device
from rnn_testing import Arrays, Case, random_arrays

CASE = Case("lstm", num_layers=2, num_units=5, input_size=3, direction="bidirectional", num_proj=2, max_time=5,
            batch=3, lengths=(5, 0, 3), dropout=0.5, seed=3, seed2=4, time_major=False)


def validated(case: Case, a: Arrays) -> ops._ValidatedCall:
    return ops._prepare(case.config(), case.time_major, a.x, a.h0, a.c0, a.params, a.lengths)


def backprop(case: Case, a: Arrays, out: ops.RNNOutputs, reserve: Any, host_reserved: Any = None) -> Any:
    return cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                           out.output_c, a.dy, a.dhy, a.dcy, reserve, host_reserved, **case.attrs())


# ==== the validated call ==========================================================================
def test_a_numpy_call_runs_the_reference_backend_and_keys_its_reserve() -> None:
    a = random_arrays(CASE, np.random.default_rng(1))
    call = validated(CASE, a)
    assert call.backend_name == "reference" and call.backend() is _reference and call.device is None
    key = call.reserve_key
    assert (key.backend, key.config, key.max_time, key.batch, key.time_major) == (
        "reference", CASE.config(), CASE.max_time, CASE.batch, CASE.time_major)
    np.testing.assert_array_equal(key.lengths, CASE.lengths)
    assert key.lengths.dtype == np.int32


def test_a_cupy_call_runs_the_cudnn_backend_on_the_arrays_gpu(fake_cudnn: FakeCudnn) -> None:
    call = validated(DROPPY, device_arrays(DROPPY, device=1))
    assert call.backend_name == "cudnn" and call.backend() is _cudnn and call.device == 1
    assert call.reserve_key.backend == "cudnn"


def test_batch_major_states_are_placed_time_major_and_returned_batch_major() -> None:
    a = random_arrays(CASE, np.random.default_rng(2))
    call = validated(CASE, a)
    placed = call.placed()
    layers = CASE.config().num_pseudo_layers
    assert placed.h0.shape == (layers, CASE.batch, CASE.state_size) and placed.h0.flags.c_contiguous
    np.testing.assert_array_equal(placed.h0, a.h0.transpose(1, 0, 2))
    np.testing.assert_array_equal(placed.c0, a.c0.transpose(1, 0, 2))
    np.testing.assert_array_equal(call.states_out(placed.h0), a.h0)
    assert placed.x.flags.c_contiguous and placed.params.flags.c_contiguous


# ==== the reserve, recorded and checked through _reserve ==========================================
def test_every_forward_is_recorded_and_returns_its_fingerprint() -> None:
    a = random_arrays(CASE, np.random.default_rng(3))
    key = validated(CASE, a).reserve_key
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **CASE.attrs())
    assert out.host_reserved.tobytes() == key.fingerprint
    assert _reserve.recorded_fingerprint(out.reserve_space) == key.fingerprint
    assert _reserve.read_header(out.reserve_space) == key.header_tag
    inference = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, is_training=False, **CASE.attrs())
    assert inference.host_reserved.tobytes() == key.fingerprint and inference.reserve_space.shape == (0,)
    assert _reserve.recorded_fingerprint(inference.reserve_space) is None


def test_backprop_checks_the_reserve_before_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    a = random_arrays(CASE, np.random.default_rng(4))
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **CASE.attrs())
    checked: list[tuple] = []
    check = _reserve.check
    monkeypatch.setattr(_reserve, "check", lambda *args: checked.append(args) or check(*args))

    def no_backend(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the backend ran on a reserve of another call")

    monkeypatch.setattr(_reference, "backward", no_backend)
    other = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, np.array([5, 5, 1], np.int32), **CASE.attrs())
    with pytest.raises(ValueError, match="reserve_space was made by a different forward call"):
        backprop(CASE, a, out, other.reserve_space)
    ((reserve, host_reserved, key),) = checked
    assert reserve is other.reserve_space and host_reserved is None
    assert key.fingerprint == out.host_reserved.tobytes(), "checked against this backprop's own call"


@pytest.mark.parametrize("shape", [dict(max_time=0, lengths=(0, 0, 0)), dict(batch=0, lengths=())],
                         ids=["T=0", "B=0"])
def test_an_empty_call_trains_without_a_backend_on_a_header_only_reserve(shape: dict,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASE.with_(**shape)
    a = random_arrays(case, np.random.default_rng(5))

    def no_backend(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an empty call reached the backend")

    monkeypatch.setattr(_reference, "forward", no_backend)
    monkeypatch.setattr(_reference, "backward", no_backend)
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **case.attrs())
    key = validated(case, a).reserve_key
    assert out.reserve_space.shape == (_reserve.header_elements(case.dtype),)
    assert _reserve.read_header(out.reserve_space) == key.header_tag
    grads = backprop(case, a, out, out.reserve_space.copy(), out.host_reserved)  # a copy: checked by its header
    assert not grads.input_backprop.any() and not grads.params_backprop.any()
    np.testing.assert_array_equal(grads.input_h_backprop, a.dhy)


# ==== devices and host transfers, on the fake GPU =================================================
def test_empty_batches_on_gpu_1_stay_there(fake_cudnn: FakeCudnn) -> None:
    case = DROPPY.with_(batch=0, lengths=())
    results = train_step(case, device_arrays(case, device=1))
    assert all(value.device_id == 1 for value in results.values() if isinstance(value, ndarray))
    assert fake_cudnn.gpu.violations == []


def test_mixed_devices_are_a_value_error_naming_the_arguments(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY, device=0)
    with pytest.raises(ValueError, match="all arrays of one call must be on one GPU; got input on device 0, "
                                         "input_h on device 0, params on device 1, input_c on device 0"):
        cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, to_device(np.array(a.params.view(np.ndarray)), 1), a.lengths,
                               **DROPPY.attrs())


def test_cupy_sequence_lengths_are_read_once_per_call(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY)
    train_step(DROPPY, a)
    with fake_cudnn.gpu.counting() as made:
        train_step(DROPPY, a.with_(lengths=to_device(a.lengths)))
    assert made == {"d2h": 2}, "forward and backprop each read the lengths back (cuDNN needs them on the host)"


def test_the_internal_op_path_holds_every_calls_shapes_to_its_config() -> None:
    """A config checked once still meets every call's arrays: one of another width is refused, naming it."""
    case = Case("gru", num_layers=1, num_units=4, input_size=3, max_time=2, batch=2, dtype="float32")
    a = random_arrays(case, np.random.default_rng(0))
    config, wrong = case.config(), r" for this configuration; got "
    with pytest.raises(ValueError, match=r"^input must have shape \(2, 2, 3\)" + wrong + r"\(2, 2, 5\)$"):
        ops.forward_with_rng(config, np.zeros((2, 2, 5), np.float32), a.h0, None, a.params, time_major=True,
                             is_training=False)
    with pytest.raises(ValueError, match=r"^input_h must have shape \(1, 2, 4\)" + wrong + r"\(2, 2, 4\)$"):
        ops.forward_with_rng(config, a.x, np.zeros((2, 2, 4), np.float32), None, a.params, time_major=True,
                             is_training=False)
    with pytest.raises(TypeError, match=r"^input must have the configuration's dtype \(float32\); got float64$"):
        ops.forward_with_rng(config, a.x.astype(np.float64), a.h0.astype(np.float64), None,
                             a.params.astype(np.float64), time_major=True, is_training=False)
