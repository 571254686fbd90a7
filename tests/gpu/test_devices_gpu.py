"""Devices and streams on a real GPU: arrays on GPU 1 while GPU 0 is current (needs two GPUs),
and a plan built on one stream (its upload still queued behind other work) serving another."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from gpu_support import TOLERANCE, assert_results_close, host, on_gpu, run  # noqa: E402
from rnn_testing import Case, forward_backward, random_arrays  # noqa: E402

CASE = Case("lstm", num_layers=2, num_units=8, input_size=5, direction="bidirectional", num_proj=3, max_time=6,
            batch=4, lengths=(6, 0, 2, 5), dropout=0.3, seed=2, time_major=False)


def test_arrays_on_gpu_1_while_gpu_0_is_current() -> None:
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    a = random_arrays(CASE, np.random.default_rng(1))
    with cupy.cuda.Device(1):
        on_1 = on_gpu(a)
        on_1 = on_1.with_(x=cupy.asfortranarray(on_1.x))  # not C-contiguous: the op copies it
    assert cupy.cuda.Device().id == 0
    results = forward_backward(CASE, on_1)
    assert cupy.cuda.Device().id == 0
    for name, value in results.items():
        assert value.device.id == 1, name
    with cupy.cuda.Device(1):
        expected = run(CASE, on_gpu(a))
    assert_results_close({name: host(value) for name, value in results.items()}, expected, TOLERANCE["float64"],
                         CASE)


def test_a_plan_built_on_a_busy_stream_serves_another_stream() -> None:
    case = CASE.with_(dropout=0.0, lengths=(6, 3, 1, 4))
    a = on_gpu(random_arrays(case, np.random.default_rng(2)))
    expected = run(case, a)
    from cudnn_rnn._cudnn import _cache as _cudnn_cache

    _cudnn_cache.clear_caches()  # the next call builds the plan again
    busy, other = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    with busy:
        big = cupy.ones((4096, 4096), dtype=cupy.float32)
        for _ in range(20):  # ~ tens of ms of work queued ahead of the plan's upload
            big = big @ big * (1.0 / 4096)
        forward_backward(case, a)  # builds the plan on the busy stream
    with other:
        got = {name: host(value) for name, value in forward_backward(case, a).items()}
    assert_results_close(got, expected, TOLERANCE["float64"], case)
