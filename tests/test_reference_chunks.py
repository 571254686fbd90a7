"""The reference backend processes time in chunks (and backprop's factors in blocks of a chunk);
neither size may change any result."""

from __future__ import annotations

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn.cpu import _backend as _reference

CASES = [
    dict(rnn_mode="lstm", direction="bidirectional", num_proj=2, num_layers=2, dropout=0.3),
    dict(rnn_mode="gru", direction="bidirectional", num_layers=2),
    dict(rnn_mode="rnn_relu", direction="unidirectional", num_layers=1, input_mode="skip_input"),
    dict(rnn_mode="rnn_tanh", direction="bidirectional", num_layers=3, input_mode="skip_input", dropout=0.5),
]


def run(case: dict, time_major: bool, lengths: np.ndarray) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    layers, directions = case["num_layers"], 2 if case["direction"] == "bidirectional" else 1
    units, inputs, batch, steps = 4, 4, len(lengths), 11
    state = case.get("num_proj") or units
    attrs = {k: v for k, v in case.items() if k != "num_layers"}
    size = cudnn_rnn.cudnn_rnn_params_size(layers, units, inputs, **{k: v for k, v in attrs.items() if k != "dropout"})
    params = rng.uniform(-0.5, 0.5, size)
    x = rng.standard_normal((steps, batch, inputs) if time_major else (batch, steps, inputs))
    h_shape = (layers * directions, batch, state) if time_major else (batch, layers * directions, state)
    c_shape = h_shape[:2] + (units,)
    h0, c0 = rng.standard_normal(h_shape), rng.standard_normal(c_shape)
    out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, lengths, time_major=time_major, seed=3, seed2=9, **attrs)
    dy, dh = rng.standard_normal(out.output.shape), rng.standard_normal(h_shape)
    dc = rng.standard_normal(c_shape)
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(x, h0, c0, params, lengths, *out[:3], dy, dh, dc, out.reserve_space,
                                            time_major=time_major, seed=3, seed2=9, **attrs)
    return [out.output, out.output_h, out.output_c, *grads]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["rnn_mode"])
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_chunk_size_does_not_change_results(monkeypatch: pytest.MonkeyPatch, case: dict, time_major: bool,
                                            chunk: int) -> None:
    lengths = np.array([11, 0, 4, 7, 1], np.int32)
    whole = run(case, time_major, lengths)  # 11 steps fit in one default chunk
    assert 11 <= _reference.TIME_CHUNK
    monkeypatch.setattr(_reference, "TIME_CHUNK", chunk)
    chunked = run(case, time_major, lengths)
    for expected, actual in zip(whole, chunked):
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["rnn_mode"])
@pytest.mark.parametrize("lengths", [[11, 0, 4, 7, 1], [11, 11, 11]], ids=["padded", "full"])
@pytest.mark.parametrize("block", [1, 3])
def test_factor_block_size_does_not_change_results(monkeypatch: pytest.MonkeyPatch, case: dict, lengths: list,
                                                   block: int) -> None:
    lengths = np.array(lengths, np.int32)
    whole = run(case, True, lengths)  # one block per chunk
    gates = {"lstm": 4, "gru": 3}.get(case["rnn_mode"], 1)
    monkeypatch.setattr(_reference, "TIME_CHUNK", 5)  # 11 steps: chunks of 5, 5, 1, which 3 does not divide
    monkeypatch.setattr(_reference, "FACTOR_BLOCK", block * len(lengths) * gates * 4)  # [block, B, G*N]
    blocked = run(case, True, lengths)
    for expected, actual in zip(whole, blocked):
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["rnn_mode"])
def test_backprop_chunks_capped_by_size_do_not_change_results(monkeypatch: pytest.MonkeyPatch, case: dict) -> None:
    lengths = np.array([11, 0, 4, 7, 1], np.int32)
    whole = run(case, False, lengths)
    monkeypatch.setattr(_reference, "BACKWARD_CHUNK", 2 * len(lengths) * 4 * 4)  # 2 steps per chunk (8 for RNN)
    capped = run(case, False, lengths)
    for expected, actual in zip(whole, capped):
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)
