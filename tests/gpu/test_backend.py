"""The cuDNN backend against the reference backend, and what the backend handles itself.

Random cases cover every mode, 1-3 layers, both directions, projection, skip_input, both layouts
and unsorted lengths including 0; float64 must match to 1e-10 relative, float32 (FMA math) to
1e-5, float16 loosely, all against the float64 reference on the same values.
"""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

import cudnn_rnn  # noqa: E402
from cudnn_rnn._cudnn import _backend as _cudnn, _cache as _cudnn_cache, _settings as _cudnn_settings, _lib  # noqa: E402
from cudnn_rnn import _reserve  # noqa: E402
from cudnn_rnn._cudnn._descriptors import live_counts  # noqa: E402
from gpu_support import (RESULTS, TOLERANCE, as_float64, assert_results_close, on_gpu, random_gpu_case,  # noqa: E402
                         run)
from rnn_testing import Arrays, Case, forward, random_arrays, relative_error, stable_seed  # noqa: E402

CASES_PER_DTYPE = {"float64": 60, "float32": 40, "float16": 25}


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_matches_the_reference_on_random_cases(dtype: str) -> None:
    rng = np.random.default_rng(20260101 + len(dtype))
    zero_lengths = 0
    for _ in range(CASES_PER_DTYPE[dtype]):
        case = random_gpu_case(rng, dtype)
        a = random_arrays(case, rng)
        zero_lengths += case.lengths is not None and 0 in case.lengths
        expected = run(case.with_(dtype="float64"), as_float64(a))
        assert_results_close(run(case, on_gpu(a)), expected, TOLERANCE[dtype], case)
    assert zero_lengths >= 3  # the draw really covered length 0


@pytest.mark.parametrize("mode", ["rnn_relu", "rnn_tanh", "lstm", "gru"])
@pytest.mark.parametrize("time_major", [True, False])
def test_every_mode_deep_bidirectional_ragged(mode: str, time_major: bool) -> None:
    case = Case(mode, num_layers=3, num_units=6, input_size=5, direction="bidirectional",
                num_proj=3 if mode == "lstm" else 0, max_time=7, batch=5, lengths=(7, 0, 3, 1, 7),
                time_major=time_major)
    a = random_arrays(case, np.random.default_rng(stable_seed(mode, time_major)))
    assert_results_close(run(case, on_gpu(a)), run(case, a), TOLERANCE["float64"], case)


@pytest.mark.parametrize("shape", [dict(batch=0, lengths=()), dict(max_time=0, lengths=(0, 0, 0)),
                                   dict(lengths=(0, 0, 0))])
def test_empty_batches_and_all_zero_lengths(shape: dict) -> None:
    case = Case("lstm", num_layers=2, direction="bidirectional", num_proj=2, **shape)
    a = random_arrays(case, np.random.default_rng(3))
    ours, expected = run(case, on_gpu(a)), run(case, a)
    assert_results_close(ours, expected, TOLERANCE["float64"], case)
    assert not ours["y"].any() and not ours["dx"].any() and not ours["dparams"].any()
    np.testing.assert_array_equal(ours["hy"], a.h0)
    np.testing.assert_array_equal(ours["cy"], a.c0)
    np.testing.assert_array_equal(ours["dh0"], a.dhy)
    np.testing.assert_array_equal(ours["dc0"], a.dcy)


def test_length_zero_rows_pass_states_through_and_ignore_padding() -> None:
    case = Case("gru", num_layers=2, direction="bidirectional", max_time=5, batch=4, lengths=(5, 0, 2, 0))
    a = random_arrays(case, np.random.default_rng(5))
    clean = run(case, on_gpu(a))
    noisy_x = a.x.copy()
    for row, length in enumerate(case.lengths):
        noisy_x[length:, row] = 1e3  # padding: never read
    noisy_x[0, [1, 3]] = np.nan  # cuDNN runs length-0 rows for one step; the backend zeroes that input
    noisy_dy = a.dy.copy()
    noisy_dy[:, [1, 3]] = 1e6  # ignored: past the sequences' lengths
    noisy = run(case, on_gpu(a.with_(x=noisy_x, dy=noisy_dy)))
    for name in RESULTS:
        np.testing.assert_array_equal(noisy[name], clean[name], err_msg=name)
    for row in (1, 3):
        assert not clean["y"][:, row].any() and not clean["dx"][:, row].any()
        np.testing.assert_array_equal(clean["hy"][:, row], a.h0[:, row])
        np.testing.assert_array_equal(clean["dh0"][:, row], a.dhy[:, row])


def _backend_args(case: Case, a: Arrays) -> tuple:
    """What ops.py hands the backend: config, x, h0, c0, params (time-major states) and host lengths."""
    assert case.time_major
    g = on_gpu(a)
    return (case.config(), g.x, g.h0, g.c0, g.params,
            np.full(case.batch, case.max_time, np.int32) if a.lengths is None else a.lengths)


def test_backend_makes_non_contiguous_inputs_contiguous() -> None:
    case = Case("lstm", num_layers=2, max_time=4, batch=3, num_units=4, input_size=3)
    a = random_arrays(case, np.random.default_rng(7))
    config, x, h0, c0, params, lengths = _backend_args(case, a)
    wide = cupy.zeros((4, 3, 8))
    wide[:, :, ::2][:, :, :3] = x  # x lives in every other column of a wider array
    strided_x = wide[:, :, ::2][:, :, :3]
    fortran_h0 = cupy.asfortranarray(h0)
    assert not strided_x.flags.c_contiguous and not fortran_h0.flags.c_contiguous
    expected = _cudnn.forward(config, x, h0, c0, params, lengths, is_training=False, time_major=True)
    got = _cudnn.forward(config, strided_x, fortran_h0, c0, params, lengths, is_training=False, time_major=True)
    for mine, theirs in zip(got[:3], expected[:3]):
        cupy.testing.assert_array_equal(mine, theirs)


def test_backend_refuses_a_params_buffer_of_the_wrong_size() -> None:
    case = Case("gru")
    config, x, h0, c0, params, lengths = _backend_args(case, random_arrays(case, np.random.default_rng(8)))
    with pytest.raises(ValueError, match=rf"params must have {params.size} elements .*; got {params.size - 1}"):
        _cudnn.forward(config, x, h0, c0, params[:-1], lengths, is_training=True, time_major=True)


def test_backend_refuses_arrays_on_different_gpus() -> None:
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    case = Case("lstm")
    config, x, h0, c0, params, lengths = _backend_args(case, random_arrays(case, np.random.default_rng(9)))
    with cupy.cuda.Device(1):
        params_elsewhere = cupy.asarray(params.get())
    with pytest.raises(ValueError, match="one GPU; got x on device 0, h0 on device 0, c0 on device 0, "
                                         "params on device 1"):
        _cudnn.forward(config, x, h0, c0, params_elsewhere, lengths, is_training=True, time_major=True)


def test_inference_equals_training_without_dropout_and_keeps_no_reserve() -> None:
    case = Case("lstm", num_layers=2, direction="bidirectional", lengths=(4, 1, 2), time_major=False)
    a = on_gpu(random_arrays(case, np.random.default_rng(10)))
    train, infer = forward(case, a, is_training=True), forward(case, a, is_training=False)
    for mine, theirs in zip(infer[:3], train[:3]):
        assert relative_error(mine.get(), theirs.get()) <= 1e-12
    assert infer.reserve_space.shape == (0,)
    assert train.reserve_space.size > _reserve.header_elements(np.float64)


def _backprop(case: Case, a: Arrays, out: cudnn_rnn.RNNOutputs) -> list[np.ndarray]:
    """cudnn_rnn_backprop_v3 for the forward ``out``; the four gradients on the host."""
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                            out.output_c, a.dy, a.dhy, a.dcy, out.reserve_space, out.host_reserved,
                                            **case.attrs())
    return [g.get() for g in grads]


RESERVE_CASES = (Case("lstm", num_layers=2, direction="bidirectional", num_proj=2, dropout=0.4, seed=1,
                      lengths=(4, 2, 3)),
                 Case("gru", num_layers=3, lengths=(4, 4, 1)),
                 Case("rnn_tanh", num_layers=2, direction="bidirectional"))


def _bytes(array: cupy.ndarray) -> np.ndarray:
    """The array's bytes on the host: reserves are opaque, and NaN bit patterns in them are not equal as floats."""
    return cupy.asnumpy(array.view(cupy.uint8))


def test_backprop_can_run_twice_on_one_reserve() -> None:
    for case in RESERVE_CASES:
        a = on_gpu(random_arrays(case, np.random.default_rng(11)))
        out = forward(case, a)
        reserve_before = _bytes(out.reserve_space)
        for g1, g2 in zip(_backprop(case, a, out), _backprop(case, a, out)):
            np.testing.assert_array_equal(g1, g2)
        np.testing.assert_array_equal(_bytes(out.reserve_space), reserve_before)


def test_whether_cudnn_backprop_keeps_the_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settles _cudnn.RESERVE_SURVIVES_BACKWARD: with the copy switched off, does a second backprop
    on the same reserve still give the same gradients and leave the reserve's bytes alone?"""
    recorded = _cudnn.RESERVE_SURVIVES_BACKWARD
    monkeypatch.setattr(_cudnn, "RESERVE_SURVIVES_BACKWARD", True)
    survives = True
    for case in RESERVE_CASES:
        a = on_gpu(random_arrays(case, np.random.default_rng(12)))
        out = forward(case, a)
        before = _bytes(out.reserve_space)
        first, second = _backprop(case, a, out), _backprop(case, a, out)
        survives &= all(np.array_equal(g1, g2) for g1, g2 in zip(first, second))
        survives &= bool(np.array_equal(_bytes(out.reserve_space), before))
    assert survives == recorded, (f"cuDNN {'keeps' if survives else 'changes'} the reserve space in backprop: "
                                  f"set _cudnn.RESERVE_SURVIVES_BACKWARD = {survives}")


def test_tf32_is_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    case = Case("lstm", num_layers=2, num_units=64, input_size=64, max_time=6, batch=8, dtype="float32")
    a = random_arrays(case, np.random.default_rng(13))
    expected = run(case.with_(dtype="float64"), as_float64(a))
    monkeypatch.setattr(_cudnn_settings, "_tf32", False)
    fma = run(case, on_gpu(a))
    assert_results_close(fma, expected, TOLERANCE["float32"], case)
    _cudnn_settings.allow_tf32(True)
    tf32 = run(case, on_gpu(a))
    assert_results_close(tf32, expected, 1e-2, case)  # TF32 keeps 10 mantissa bits in the GEMMs
    assert any(key.math_type == _lib.MathType.DEFAULT_MATH for context in _cudnn_cache._contexts().values()
               for key in context.networks.keys())


def test_handle_follows_the_current_stream() -> None:
    case = Case("gru")
    a = on_gpu(random_arrays(case, np.random.default_rng(14)))
    expected = run(case, a)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        on_stream = run(case, a)
        handle = _cudnn_cache.thread_context(cupy.cuda.Device().id).handle.pointer
        assert _lib.get_stream(handle) == stream.ptr
    for name in RESULTS:
        np.testing.assert_array_equal(on_stream[name], expected[name], err_msg=name)


def test_dropout_descriptor_round_trip() -> None:
    case = Case("lstm", num_layers=2, dropout=0.25, seed=5, seed2=9)
    a = on_gpu(random_arrays(case, np.random.default_rng(15)))
    run(case, a)
    context = _cudnn_cache.thread_context(cupy.cuda.Device().id)
    network = context.networks.values()[-1]  # the one the call used last
    probability, states, seed = _lib.get_dropout(network.dropout.descriptor.pointer, context.handle.pointer)
    assert probability == pytest.approx(0.25) and seed == case.config().seed64 == (5 << 32) | 9
    assert states == network.dropout.working.data.ptr
    rnn = network.rnn.read()
    assert rnn.dropout_desc == network.dropout.descriptor.pointer and rnn.proj_size == rnn.hidden_size


def test_clear_caches_frees_every_descriptor() -> None:
    case = Case("lstm", num_layers=2, lengths=(4, 1, 0))
    run(case, on_gpu(random_arrays(case, np.random.default_rng(16))))
    assert _cudnn_cache.cache_info()["plans"] >= 1
    _cudnn_cache.clear_caches()
    assert _cudnn_cache.cache_info()["networks"] == 0
    assert live_counts() == {}  # no other thread holds any
