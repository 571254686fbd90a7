"""The reference backend's cells (``_cells``): exact weight scaling, the exp-based activations, and
step functions that allocate no array per time step."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from cudnn_rnn.cpu import _cells

MODES = ["lstm", "gru", "rnn_tanh", "rnn_relu"]
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_matches_numpy_and_takes_every_value(dtype: type) -> None:
    x = np.concatenate([np.linspace(-30, 30, 100001), [0.0, 1e-30, -1e-30, 1e-8, 400.0, -400.0, np.inf, -np.inf]])
    x = x.astype(dtype)
    with np.errstate(over="ignore"):  # as in the backend: exp(+large) = inf is the intended limit
        got = _cells.tanh(x, np.empty_like(x), np)
    np.testing.assert_allclose(got, np.tanh(x), rtol=0, atol=2 * np.finfo(dtype).eps)
    assert np.isnan(_cells.tanh(np.array([np.nan], dtype), np.empty(1, dtype), np))[0]


@pytest.mark.parametrize("mode", MODES)
def test_forward_weights_are_the_scaled_gates_in_forward_order(mode: str) -> None:
    rng = np.random.default_rng(0)
    g, n, width = GATES[mode], 3, 5
    weights = dict(W=rng.standard_normal((g * n, width)), R=rng.standard_normal((g * n, n)),
                   bW=rng.standard_normal(g * n), bR=rng.standard_normal(g * n), Proj=None)
    fw = _cells.forward_weights(mode, n, weights, np)
    for position, gate in enumerate(_cells.FORWARD_ORDER[mode]):
        scale = _cells.SCALES[mode][position]
        rows, cudnn_rows = slice(position * n, (position + 1) * n), slice(gate * n, (gate + 1) * n)
        np.testing.assert_array_equal(fw.W[rows], scale * weights["W"][cudnn_rows])  # exact: powers of two
        np.testing.assert_array_equal(fw.R[rows], scale * weights["R"][cudnn_rows])
        bias = weights["bW"][cudnn_rows] + (0 if mode == "gru" and gate == 2 else weights["bR"][cudnn_rows])
        np.testing.assert_array_equal(fw.bias[rows], scale * bias)
    if mode == "gru":
        np.testing.assert_array_equal(fw.bR_n, -2 * weights["bR"][2 * n:])


def _allocated_during(action) -> int:
    """Peak bytes allocated beyond what was live when ``action`` started (NumPy data included)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        action()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


#: what NumPy itself may hold during one ufunc call: its fixed-size iteration buffers (np.getbufsize()
#: elements each, float64) for up to three strided operands, and a few array headers
NUMPY_CALL_BUFFERS = 3 * np.getbufsize() * 8 + 16 * 1024


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padded", [False, True])
def test_a_time_step_allocates_no_arrays(mode: str, padded: bool) -> None:
    """Every step writes into buffers made once per call: one [B, N] temporary (512 KiB here) would
    exceed what NumPy's ufunc machinery holds by itself."""
    rng = np.random.default_rng(1)
    batch, n, g, steps = 64, 1024, GATES[mode], 3
    assert batch * n * 8 > 2 * NUMPY_CALL_BUFFERS
    weights = dict(W=rng.standard_normal((g * n, n)), R=rng.standard_normal((g * n, n)) / 32,
                   bW=rng.standard_normal(g * n), bR=rng.standard_normal(g * n), Proj=None)
    fw = _cells.forward_weights(mode, n, weights, np)
    ws = _cells.Workspace(batch, g, n, n, np.float64, np)
    gates = rng.standard_normal((steps, batch, g * n))
    hidden = gates if mode.startswith("rnn") else np.empty((steps, batch, n))
    cell = np.empty((steps, batch, n)) if mode == "lstm" else None
    rec_n = np.empty((steps, batch, n)) if mode == "gru" else None
    h0, c0 = rng.standard_normal((batch, n)), rng.standard_normal((batch, n))
    invalid = (np.arange(batch) % 3 == 0)[:, None] if padded else None

    def forward() -> None:
        for t in range(steps):
            h_prev = hidden[t - 1] if t else h0
            c_prev = None if cell is None else (cell[t - 1] if t else c0)
            _cells.step_forward(mode, fw, gates[t], h_prev, c_prev, hidden[t], None if cell is None else cell[t],
                                None if rec_n is None else rec_n[t], ws, np)
            if invalid is not None:
                np.copyto(hidden[t], h_prev, where=invalid)

    with np.errstate(over="ignore"):
        assert _allocated_during(forward) < NUMPY_CALL_BUFFERS
    previous = np.concatenate([h0[None] if cell is None else c0[None], (hidden if cell is None else cell)[:-1]])
    factors = _cells.Factors(dg=np.empty((steps, batch, g * n)), dr=np.empty((steps, batch, g * n)),
                             k=np.empty((steps, batch, n)), carry=np.empty((steps, batch, n)), unprojected=None)
    if mode != "gru":
        factors.dr = factors.dg
    blocked_invalid = None if invalid is None else np.broadcast_to(invalid, (steps, batch, 1))
    _cells.factors(mode, n, gates, cell, previous if cell is not None else None, rec_n,
                   previous if mode == "gru" else None, factors, blocked_invalid, np)
    dh, dc, dy = rng.standard_normal((batch, n)), rng.standard_normal((batch, n)), rng.standard_normal((batch, n))

    def backward() -> None:
        for j in reversed(range(steps)):
            _cells.step_backward(mode, n, j, factors, weights["R"], None, dh, dy, dc if mode == "lstm" else None,
                                 None, invalid, ws, np)

    assert _allocated_during(backward) < NUMPY_CALL_BUFFERS
