"""A layer's dropout RNG on cuDNN, on the fake GPU (tests/support/fake_gpu.py; its training forward draws from the
network's dropout state, records the state it started from in ``drawn``, and advances it).

* seeded once per layer and GPU: a layer's training steps (and a bridge's calls with a module's RNG) set the
  dropout descriptor up once, however many steps they take, where op calls with a new seed2 every step set it
  up every step;
* the state advances: each step starts from the state the previous one left, and two layers (or op calls in
  between) sharing one cached network keep their own streams;
* no set-up inside a recorded CUDA graph, and the layer's state buffer is kept for the graph;
* checkpoints and state dicts carry the state: a layer that loads it on the same GPU model draws exactly the
  uninterrupted run's states; on another (or with ``keep_seed``) it starts anew from (seed, step), with a
  warning for the other GPU; NumPy layers have none and ignore one; a damaged one is refused.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import LSTM, _bridge, checkpoint
from cudnn_rnn._cudnn import _cache as _cudnn_cache, _lib
from cudnn_rnn._cudnn._dropout_rng import DropoutRNG
from cudnn_rnn.config import RNNConfig
from cudnn_rnn.cuda_graph import capture
from fake_gpu import FakeCudnn, FakeStream, to_device

BATCH, TIME, INPUT = 3, 4, 2


def _layer(cupy: types.ModuleType, seed: int = 1, **options: Any) -> LSTM:
    return LSTM(INPUT, 5, num_layers=2, dropout=0.4, seed=seed, xp=cupy, **options)


def _step(layer: LSTM) -> None:
    x = to_device(np.ones((BATCH, TIME, INPUT), np.float32), 0)
    y, _, _ = layer(x, [4, 2, 3])
    layer.backward(y)


def _seed_pattern(seed: int, step: int) -> bytes:
    """The state the fake's cudnnSetDropoutDescriptor makes from TF's 64-bit seed of (seed, step)."""
    seed64 = RNNConfig("lstm", 2, 5, INPUT, seed=seed, seed2=step).seed64
    return bytes([seed64 % 251]) * FakeCudnn.DROPOUT_STATES


def _advanced(state: bytes, steps: int) -> bytes:
    return bytes((b + steps) % 256 for b in state)


def _setups(fake: FakeCudnn) -> list[int]:
    """The seed of every cudnnSetDropoutDescriptor call with a state (p > 0) so far."""
    return [call[3] for call in fake.calls if call[0] == "set_dropout" and call[1] > 0]


def test_a_layer_sets_its_dropout_state_up_once_and_lets_it_advance(fake_cudnn: FakeCudnn,
                                                                    fake_cupy: types.ModuleType) -> None:
    layer = _layer(fake_cupy)
    for _ in range(5):
        _step(layer)
    assert len(_setups(fake_cudnn)) == 1, "one cuRAND set-up for five steps"
    start = _seed_pattern(1, 0)
    assert fake_cudnn.drawn == [_advanced(start, k) for k in range(5)], "each step starts where the last one ended"
    assert layer.step == 5
    saved = layer.state_dict()["dropout_rng"]
    assert saved["device"] == f"Fake GPU, cuDNN {fake_cudnn.version}, {FakeCudnn.DROPOUT_STATES} bytes"
    assert saved["states"].view(np.ndarray).tobytes() == _advanced(start, 5)


def test_op_calls_with_a_new_seed_every_step_set_it_up_every_step(fake_cudnn: FakeCudnn,
                                                                  fake_cupy: types.ModuleType) -> None:
    # what the layers did before: the op's masks are a function of (seed, seed2), so a new seed2 is a new set-up
    layer = _layer(fake_cupy)
    x = to_device(np.ones((TIME, BATCH, INPUT), np.float32), 0)
    h0 = to_device(np.zeros((2, BATCH, 5), np.float32), 0)
    for seed2 in range(4):
        cudnn_rnn.cudnn_rnn_v3(x, h0, h0, layer.params, dropout=0.4, seed=1, seed2=seed2)
    assert len(_setups(fake_cudnn)) == 4
    assert fake_cudnn.drawn == [_seed_pattern(1, seed2) for seed2 in range(4)]


def test_a_bridge_call_with_a_modules_rng_sets_it_up_once(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType) -> None:
    # what cudnn_rnn.torch's modules pass through the bridge: their own RNG, and their step as seed2
    layer = _layer(fake_cupy)
    params, config = layer.params, layer.config
    x = to_device(np.ones((TIME, BATCH, INPUT), np.float32), 0)
    h0 = to_device(np.zeros((2, BATCH, 5), np.float32), 0)
    rng = DropoutRNG()
    for step in range(4):
        _bridge.forward(config.replace(seed2=step), x, h0, h0, params, None, time_major=True, is_training=True,
                        dropout_rng=rng)
    assert len(_setups(fake_cudnn)) == 1, "one cuRAND set-up for four steps"
    assert fake_cudnn.drawn == [_advanced(_seed_pattern(1, 0), k) for k in range(4)]


def test_layers_and_op_calls_sharing_a_network_keep_their_own_streams(fake_cudnn: FakeCudnn,
                                                                      fake_cupy: types.ModuleType) -> None:
    first, second = _layer(fake_cupy, seed=1), _layer(fake_cupy, seed=2)
    x = to_device(np.ones((TIME, BATCH, INPUT), np.float32), 0)
    h0 = to_device(np.zeros((2, BATCH, 5), np.float32), 0)
    _step(first)
    _step(second)
    cudnn_rnn.cudnn_rnn_v3(x, h0, h0, first.params, dropout=0.4, seed=9, seed2=9)  # an op call in between
    _step(first)
    _step(second)
    assert _cudnn_cache.cache_info()["networks"] == 1, "one cached network serves all of them"
    one, two = _seed_pattern(1, 0), _seed_pattern(2, 0)
    assert fake_cudnn.drawn == [one, two, _seed_pattern(9, 9), _advanced(one, 1), _advanced(two, 1)]


def test_no_dropout_set_up_happens_inside_a_recorded_graph(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    layer = _layer(fake_cupy)
    set_dropout = _lib.set_dropout
    recorded: list[bool] = []

    def watched(*args: Any) -> None:
        recorded.append(fake_cudnn.gpu.current_stream().capturing)
        set_dropout(*args)

    monkeypatch.setattr(_lib, "set_dropout", watched)
    stream = FakeStream(non_blocking=True)
    with stream:
        graph = capture(lambda: _step(layer), stream=stream)  # a warm-up step, then a recorded one
        graph.replay()
    assert recorded and not any(recorded), "set up in the warm-up only"
    assert fake_cudnn.drawn[1] == _advanced(fake_cudnn.drawn[0], 1), "the recorded step draws on from the warm-up"
    states = layer.state_dict()["dropout_rng"]["states"]
    assert any(kept is states for kept in graph._graphs[0].kept), "the graph keeps the layer's state buffer"


def test_a_checkpoint_resumes_the_same_states_on_the_same_gpu(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType,
                                                              tmp_path: Path) -> None:
    uninterrupted = _layer(fake_cupy)
    for _ in range(4):
        _step(uninterrupted)
    expected = fake_cudnn.drawn[2:]
    first = _layer(fake_cupy)
    for _ in range(2):
        _step(first)
    checkpoint.save(tmp_path / "run.ckpt", layers={"lstm": first})
    found = checkpoint.load(tmp_path / "run.ckpt")
    assert type(found.layers["lstm"]["dropout_rng"]["states"]) is np.ndarray
    resumed = _layer(fake_cupy, seed=7)
    found.restore(layers={"lstm": resumed})
    del fake_cudnn.drawn[:]
    for _ in range(2):
        _step(resumed)
    assert fake_cudnn.drawn == expected
    for source, made in ((first, _layer(fake_cupy)), (first, None)):  # state dicts, and from_state_dict
        target = made or LSTM.from_state_dict(source.state_dict(), xp=fake_cupy)
        if made is not None:
            target.load_state_dict(source.state_dict())
        del fake_cudnn.drawn[:]
        _step(target)
        assert fake_cudnn.drawn == [_advanced(_seed_pattern(1, 0), 2)]


def test_on_another_gpu_model_the_masks_start_anew_from_seed_and_step(fake_cudnn: FakeCudnn,
                                                                      fake_cupy: types.ModuleType) -> None:
    first = _layer(fake_cupy)
    for _ in range(3):
        _step(first)
    state = first.state_dict()
    state["dropout_rng"] = {**state["dropout_rng"], "device": "Other GPU, cuDNN 91000, 64 bytes"}
    resumed = _layer(fake_cupy, seed=5)
    resumed.load_state_dict(state)
    del fake_cudnn.drawn[:]
    with pytest.warns(UserWarning, match="saved on Other GPU, cuDNN 91000, 64 bytes; this is Fake GPU, cuDNN "
                                         r"92800, 64 bytes: the masks start anew from its seed and step"):
        _step(resumed)
    assert fake_cudnn.drawn == [_seed_pattern(1, 3)], "seed 1 (the saved one), step 3"


def test_keep_seed_and_numpy_layers_take_no_rng_state(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType) -> None:
    trained = _layer(fake_cupy)
    for _ in range(2):
        _step(trained)
    own = _layer(fake_cupy, seed=4)
    own.load_state_dict(trained.state_dict(), keep_seed=True)  # data-parallel ranks: masks of their own
    del fake_cudnn.drawn[:]
    _step(own)
    assert fake_cudnn.drawn == [_seed_pattern(4, 2)]
    host = LSTM(INPUT, 5, num_layers=2, dropout=0.4, seed=1)
    host.load_state_dict(trained.state_dict())
    assert host.state_dict()["dropout_rng"] is None
    assert LSTM.from_state_dict(trained.state_dict()).state_dict()["dropout_rng"] is None
    x = np.ones((BATCH, TIME, INPUT), np.float32)
    y, _, _ = host(x, [4, 2, 3])  # the reference backend: masks of (seed, step), as always
    reference = LSTM.from_params(host.params, host.config, step=2)(x, [4, 2, 3])[0]
    np.testing.assert_array_equal(y, reference)


def test_a_state_dict_without_an_rng_state_still_loads(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType) -> None:
    trained = _layer(fake_cupy)
    _step(trained)
    state = {key: value for key, value in trained.state_dict().items() if key != "dropout_rng"}  # an older save
    target = _layer(fake_cupy, seed=3)
    target.load_state_dict(state)
    del fake_cudnn.drawn[:]
    _step(target)
    assert fake_cudnn.drawn == [_seed_pattern(1, 1)]


@pytest.mark.parametrize("damage, message", [
    ({"device": 3, "states": np.zeros(4, np.uint8)}, "must hold a device name"),
    ({"device": "G", "states": np.zeros(4, np.float32)}, r".* non-empty 1-D uint8 array; got str and float32 \(4,\)"),
    ({"device": "G", "states": np.zeros((2, 2), np.uint8)}, r".* got str and uint8 \(2, 2\)"),
    ({"device": "G", "states": np.zeros(0, np.uint8)}, r".* got str and uint8 \(0,\)"),
    ({"states": np.zeros(4, np.uint8)}, r"must be None or a dict with keys \['device', 'states'\]; got \['states'\]"),
    ("seeded", r"must be None or a dict with keys \['device', 'states'\]; got str"),
])
def test_a_damaged_rng_state_is_refused_naming_it(damage: Any, message: str) -> None:
    layer = LSTM(INPUT, 5, num_layers=2, dropout=0.4)
    state = {**layer.state_dict(), "dropout_rng": damage}
    with pytest.raises(ValueError, match=rf"state_dict: 'dropout_rng' {message}"):
        layer.load_state_dict(state)
    assert "cupy" not in sys.modules or sys.modules["cupy"] is not None


def test_a_layer_loads_its_own_state(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType) -> None:
    layer = _layer(fake_cupy)
    for _ in range(2):
        _step(layer)
    layer.load_state_dict(layer.state_dict())  # its own live state array: copied before it is let go
    del fake_cudnn.drawn[:]
    _step(layer)
    assert fake_cudnn.drawn == [_advanced(_seed_pattern(1, 0), 2)]
