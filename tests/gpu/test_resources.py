"""A steady loop creates nothing new: 10,000 calls keep memory-pool usage, caches and open cuDNN
objects constant (marked long: about 10 to 20 s of host time); bounded caches stay bounded under
churn; objects of ended threads are freed."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from cudnn_rnn._cudnn import _cache as _cudnn_cache  # noqa: E402
from cudnn_rnn._cudnn._descriptors import live_counts  # noqa: E402
from gpu_support import on_gpu, run  # noqa: E402
from rnn_testing import Case, forward_backward, random_arrays  # noqa: E402

CASE = Case("lstm", num_layers=2, num_units=8, input_size=4, direction="bidirectional", num_proj=3, max_time=5,
            batch=4, dtype="float32", dropout=0.2, seed=1)
LENGTHS = [(5, 5, 5, 5), (5, 0, 3, 1), (2, 5, 4, 0)]


def _snapshot() -> tuple:
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    info = _cudnn_cache.cache_info()
    return pool.used_bytes(), pool.total_bytes(), info["networks"], info["plans"], live_counts()


@pytest.mark.long
def test_ten_thousand_calls_grow_nothing() -> None:
    cases = [CASE.with_(lengths=lengths) for lengths in LENGTHS]
    arrays = [on_gpu(random_arrays(case, np.random.default_rng(i))) for i, case in enumerate(cases)]
    for i in range(30):  # warm-up: every plan, workspace size and pool block exists afterwards
        forward_backward(cases[i % 3], arrays[i % 3])
    before = _snapshot()
    for i in range(10_000):
        forward_backward(cases[i % 3], arrays[i % 3])
    assert _snapshot() == before


def test_caches_stay_bounded_under_churn() -> None:
    _cudnn_cache.clear_caches()
    rng = np.random.default_rng(31)
    case = CASE.with_(dropout=0.0)
    a = on_gpu(random_arrays(case, rng))
    for _ in range(3 * _cudnn_cache.PLAN_CACHE_SIZE):  # a new lengths pattern each call: a new plan each call
        lengths = rng.integers(0, case.max_time + 1, case.batch).astype(np.int32)
        run(case, a.with_(lengths=lengths))
        info = _cudnn_cache.cache_info()
        assert info["plans"] <= _cudnn_cache.PLAN_CACHE_SIZE
        assert live_counts().get("RNNDataDescriptor", 0) <= 2 * _cudnn_cache.PLAN_CACHE_SIZE
    for hidden in range(1, _cudnn_cache.NETWORK_CACHE_SIZE + 5):  # a new configuration each call
        other = Case("gru", num_units=hidden, input_size=2, max_time=2, batch=2)
        run(other, on_gpu(random_arrays(other, rng)))
        assert _cudnn_cache.cache_info()["networks"] <= _cudnn_cache.NETWORK_CACHE_SIZE
    _cudnn_cache.clear_caches()
    assert live_counts() == {}


def test_objects_of_an_ended_thread_are_freed() -> None:
    _cudnn_cache.clear_caches()
    a = on_gpu(random_arrays(CASE, np.random.default_rng(32)))
    seen: list[dict] = []
    worker = threading.Thread(target=lambda: seen.append(live_counts()) if run(CASE, a) else None)
    worker.start()
    worker.join()
    assert seen and seen[0].get("Handle") == 1 and seen[0].get("RNNDescriptor", 0) >= 1  # the worker built some
    gc.collect()
    assert live_counts() == {}
