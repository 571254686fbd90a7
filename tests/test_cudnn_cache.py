"""``_cudnn_cache``: what a network is keyed by, the caches' bounds, clear_caches and cache_info, and the
dropout state rewound before every training forward (on tests/support/fake_gpu.py). How cached device arrays are
shared between streams is in tests/test_cudnn_fake_gpu.py.
"""

from __future__ import annotations

import collections
import gc
import threading
from typing import Any

import pytest

from cudnn_rnn._cudnn import _cache as _cudnn_cache, _settings as _cudnn_settings
from cudnn_rnn._cudnn._cache import NetworkKey
from cudnn_rnn._cudnn._lib import MathType
from cudnn_rnn.config import RNNConfig
from cudnn_testing import LSTMP, backend_forward, backend_inputs
from fake_gpu import FakeCudnn


def test_network_key_ignores_dropout_where_cudnn_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cudnn_settings, "_tf32", False)
    two = RNNConfig("lstm", 2, 4, 3, dropout=0.5, seed=7, seed2=-3)
    def key(config: RNNConfig, training: bool) -> NetworkKey:
        return NetworkKey.of(config, training, "standard", 3)

    assert key(two, training=False) == key(two.replace(dropout=0.0, seed=0, seed2=0), training=False)
    assert key(two, training=True).dropout == 0.5
    assert key(two, training=True) == NetworkKey(two.layout_key, "float32", MathType.FMA_MATH, 0.5, "standard",
                                                 "standard", 0)
    assert key(two, training=True) != key(two.replace(dropout=0.25), training=True)
    # seeds are applied to a network's dropout state, not keyed: an advancing seed reuses the network
    assert key(two, training=True) == key(two.replace(seed=8, seed2=3), training=True)
    one = RNNConfig("gru", 1, 4, 3, dropout=0.5, seed=1)
    assert key(one, training=True) == key(one.replace(dropout=0.0, seed=0), training=True)


def test_network_key_holds_the_algorithm_asked_for_and_the_one_run() -> None:
    config = RNNConfig("gru", 1, 4, 3)
    auto = NetworkKey.of(config.replace(algo="auto"), True, "standard", 8)
    assert (auto.requested_algo, auto.algo) == ("auto", "standard")
    assert auto != NetworkKey.of(config, True, "standard", 8), "auto and standard reserves carry other headers"
    static = NetworkKey.of(config.replace(algo="persist_static"), True, "persist_static", 8)
    assert static.dynamic_batch == 0 and static == NetworkKey.of(config.replace(algo="persist_static"), True,
                                                                 "persist_static", 16)
    dynamic = config.replace(algo="persist_dynamic")
    assert NetworkKey.of(dynamic, True, "persist_dynamic", 8).dynamic_batch == 8
    assert NetworkKey.of(dynamic, True, "persist_dynamic", 8) != NetworkKey.of(dynamic, True, "persist_dynamic", 16)


def test_clear_caches_and_cache_info_without_a_gpu() -> None:
    _cudnn_cache.clear_caches()  # nothing cached on this thread: needs no CuPy
    info_now = _cudnn_cache.cache_info()
    assert (info_now["devices"], info_now["networks"], info_now["plans"]) == ([], 0, 0)


def test_contexts_are_the_threads_own_and_go_when_a_python_thread_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cudnn_cache, "_by_thread", {})
    found: dict[str, Any] = {}

    def worker() -> None:
        found["ident"] = threading.get_ident()
        found["same"] = _cudnn_cache._contexts() is _cudnn_cache._contexts()
        found["kept"] = found["ident"] in _cudnn_cache._by_thread

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    gc.collect()
    assert found["same"] and found["kept"]
    assert found["ident"] not in _cudnn_cache._by_thread, "dropped when the thread ended"
    assert _cudnn_cache._contexts() is not None and threading.get_ident() in _cudnn_cache._by_thread


def test_threads_python_did_not_start_keep_contexts_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # what such a thread looks like from Python (tests/test_jax_bridge.py runs the real ones: XLA's)
    monkeypatch.setattr(_cudnn_cache, "_by_thread", {})
    monkeypatch.setattr(_cudnn_cache, "_foreign_threads", set())
    monkeypatch.setattr(_cudnn_cache, "MAX_FOREIGN_THREADS", 1)
    monkeypatch.setattr(_cudnn_cache, "_started_by_python", lambda: False)
    found: list[bool] = []
    first_called, both_called = threading.Event(), threading.Barrier(2)

    def call_twice(wait_for_the_first: bool) -> None:
        if wait_for_the_first:
            first_called.wait(10)
        found.append(_cudnn_cache._contexts() is _cudnn_cache._contexts())
        first_called.set()
        both_called.wait(10)  # both alive at once: two identities

    threads = [threading.Thread(target=call_twice, args=(wait,)) for wait in (False, True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [True, False], "the first keeps its contexts for good; the second, past the bound, per call"
    assert len(_cudnn_cache._foreign_threads) == 1 and len(_cudnn_cache._by_thread) == 1


def test_fake_steady_calls_create_nothing_and_caches_are_bounded(fake_cudnn: FakeCudnn,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    a = backend_inputs(LSTMP, 4, 3)
    backend_forward(LSTMP, a, [4, 4, 4])
    created = len(fake_cudnn.open)
    for _ in range(5):
        backend_forward(LSTMP, a, [4, 4, 4])
    assert len(fake_cudnn.open) == created  # cache hits only
    assert _cudnn_cache.cache_info()["networks"] == 1 and _cudnn_cache.cache_info()["plans"] == 1
    backend_forward(LSTMP, a, [4, 4, 4], training=False)  # inference: a dropout-free network of its own
    assert _cudnn_cache.cache_info()["networks"] == 2
    monkeypatch.setattr(_cudnn_cache, "PLAN_CACHE_SIZE", 2)
    _cudnn_cache.clear_caches()
    assert fake_cudnn.open == {}
    for lengths in ([1, 2, 3], [2, 2, 2], [3, 3, 0], [4, 1, 1]):
        backend_forward(LSTMP, a, lengths)
    assert _cudnn_cache.cache_info()["plans"] == 2
    # the handle (""), one network's RNN and dropout descriptors, and two plans of two data and two tensor descriptors
    assert collections.Counter(fake_cudnn.open.values()) == {"": 1, "DropoutDescriptor": 1, "RNNDescriptor": 1,
                                                            "RNNDataDescriptor": 4, "TensorDescriptor": 4}


def test_fake_dropout_state_is_rewound_before_every_training_forward(fake_cudnn: FakeCudnn) -> None:
    a = backend_inputs(LSTMP, 4, 3)
    backend_forward(LSTMP, a, [4, 2, 3])
    created = dict(fake_cudnn.open)
    for seed2 in (1, 1, 5, 6, 1, 1):  # the seed of each call; the state it must start from is the seed's own
        config = LSTMP.replace(seed2=seed2)
        backend_forward(config, a, [4, 2, 3])
        assert (fake_cudnn.seen["states"] == config.seed64 % 251).all(), seed2
    assert fake_cudnn.open == created  # new seeds re-seed the same descriptor: nothing new is built
    reseeds = [call[3] for call in fake_cudnn.calls if call[0] == "set_dropout"]
    assert reseeds == [LSTMP.seed64] + [LSTMP.replace(seed2=s).seed64 for s in (5, 6, 1)]
