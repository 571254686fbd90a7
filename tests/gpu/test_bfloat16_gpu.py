"""bfloat16 on a real GPU: cuDNN's results against the reference backend computing in float32 on the same
(bfloat16) values, loosely (bfloat16 keeps 8 significant bits, and cuDNN may round between steps).

cuDNN runs bfloat16 RNNs from 9.13 on GPUs of compute capability 8.0 and newer; elsewhere the comparisons
skip with the reason and the refusal itself is checked instead.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

import cudnn_rnn  # noqa: E402
from cudnn_rnn._cudnn import _settings as _cudnn_settings, _lib  # noqa: E402
from cudnn_rnn.optim import Adam  # noqa: E402
from gpu_support import RESULTS, on_gpu, random_gpu_case, run  # noqa: E402
from rnn_testing import Arrays, Case, random_arrays, relative_error  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
#: cuDNN in bfloat16 against the float32 reference on the same values, relative to each tensor's max
TOLERANCE = 5e-2
CASES = 30


def refusal() -> str | None:
    """Why cuDNN cannot run bfloat16 on GPU 0 here (None when it can)."""
    return _cudnn_settings.dtype_refusal("bfloat16", _lib.library().version, _cudnn_settings.compute_capability(0))


def needs_bfloat16() -> None:
    reason = refusal()
    if reason is not None:
        pytest.skip(f"cuDNN cannot run bfloat16 here: {reason}")


def widened(a: Arrays) -> Arrays:
    return Arrays(**{name: value if value is None or name == "lengths" else value.astype(np.float32)
                     for name, value in vars(a).items()})


def test_matches_the_float32_reference_on_random_cases() -> None:
    needs_bfloat16()
    rng = np.random.default_rng(20260213)
    for _ in range(CASES):
        case = random_gpu_case(rng, "bfloat16")
        a = random_arrays(case, rng)
        ours = run(case, on_gpu(a))
        expected = run(case.with_(dtype="float32"), widened(a))
        for name in RESULTS:
            assert ours[name].dtype == BF16, name
            error = relative_error(ours[name], expected[name])
            assert error <= TOLERANCE, f"{name}: relative error {error:.3g} > {TOLERANCE:g} for {case}"


def test_a_layer_trains_in_bfloat16_on_the_gpu() -> None:
    needs_bfloat16()
    layer = cudnn_rnn.GRU(5, 8, num_layers=2, bidirectional=True, dtype="bfloat16", xp=cupy, seed=3)
    host = cudnn_rnn.GRU.from_params(cupy.asnumpy(layer.params).astype(np.float32),
                                     layer.config.replace(dtype="float32"))
    x = np.random.default_rng(1).uniform(-1, 1, (4, 7, 5)).astype(BF16)
    lengths = np.array([7, 3, 0, 5], np.int32)
    y, _, _ = layer(cupy.asarray(x), lengths)
    y_host, _, _ = host(x.astype(np.float32), lengths)
    assert y.dtype == BF16 and relative_error(cupy.asnumpy(y), y_host) <= TOLERANCE
    layer.backward(y)
    host.backward(cupy.asnumpy(y).astype(np.float32))
    assert relative_error(cupy.asnumpy(layer.grad), host.grad) <= TOLERANCE
    before = cupy.asnumpy(layer.params)
    adam = Adam([layer.params], lr=1e-2)
    adam.step([layer.grad])
    assert adam.first_moment[0].dtype == np.float32 and layer.params.dtype == BF16
    assert np.count_nonzero(cupy.asnumpy(layer.params) != before) > before.size // 2


def test_an_old_cudnn_or_gpu_refuses_bfloat16_by_name() -> None:
    reason = refusal()
    if reason is None:
        pytest.skip("this cuDNN and GPU run bfloat16 (the refusal is checked on tests/support/fake_gpu.py)")
    case = Case("lstm", dtype="bfloat16")
    a = on_gpu(random_arrays(case, np.random.default_rng(2)))
    with pytest.raises(TypeError, match="input.dtype is bfloat16, which the cuDNN backend cannot run on GPU 0"):
        cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, **case.attrs())
