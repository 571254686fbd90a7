"""The compiled cells' recurrent product (``cpu._gemm``) against float64 NumPy, and the cells' two ways to it.

``product`` over every remainder of its tiles (rows), of its panels (columns) and depths 0, 1 and odd, in
float32 and float64; it writes exactly out[:M, :N] (a wider buffer's other columns keep their values); it
refuses shapes that disagree and rows that are not contiguous. The fused cells give the same results
packed (``PACK_ROWS`` rows and more; the input projection too, for a W of at most ``INPUT_PACK_BYTES``) and
through BLAS. ``add_product`` (out += a @ b by BLAS from compiled code) in every storage order, allocating
nothing, and the weight gradients of backprop going through it.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

pytest.importorskip("numba")

import cudnn_rnn  # noqa: E402
from cudnn_rnn import cpu  # noqa: E402
from cudnn_rnn.cpu import _fused_cells, _gemm  # noqa: E402

TOLERANCE = {np.float32: 2e-6, np.float64: 1e-14}
ROWS, NR = _gemm.TILE[0], _gemm.columns_per_panel(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("depth", [0, 1, 7, 130])
def test_product_matches_numpy_over_every_tile_remainder(dtype: type, depth: int) -> None:
    rng = np.random.default_rng(depth)
    for rows in range(0, 2 * ROWS + 2):
        for columns in (1, NR - 1, NR, NR + 3, 3 * NR):
            a, b = rng.standard_normal((rows, depth)).astype(dtype), rng.standard_normal((depth, columns)).astype(dtype)
            out = np.full((rows, columns), np.nan, dtype=dtype)
            _gemm.product(a, _gemm.pack(b), out)
            exact = a.astype(np.float64) @ b.astype(np.float64)
            scale = max(1.0, float(np.abs(exact).max(initial=0.0)))
            assert np.abs(out - exact).max(initial=0.0) <= TOLERANCE[dtype] * scale * max(1, depth), (rows, columns)


def test_product_writes_only_its_columns_and_reads_strided_rows() -> None:
    rng = np.random.default_rng(1)
    wide_a = rng.standard_normal((5, 40)).astype(np.float32)
    a, b = wide_a[:, :17], rng.standard_normal((17, NR + 5)).astype(np.float32)  # rows 40 apart
    buffer = np.full((5, NR + 12), -7.0, dtype=np.float32)
    _gemm.product(a, _gemm.pack(b), buffer[:, :NR + 5])
    np.testing.assert_allclose(buffer[:, :NR + 5], a @ b, rtol=1e-5, atol=1e-5)
    assert np.all(buffer[:, NR + 5:] == -7.0)  # the last panel's padding is never stored


def test_product_refuses_what_it_cannot_multiply() -> None:
    a, b = np.ones((3, 4), np.float32), np.ones((4, 6), np.float32)
    with pytest.raises(ValueError, match="shapes"):
        _gemm.product(a, _gemm.pack(b), np.empty((3, NR + 1), np.float32))  # more columns than the panels hold
    with pytest.raises(ValueError, match="shapes"):
        _gemm.product(np.ones((3, 5), np.float32), _gemm.pack(b), np.empty((3, 6), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        _gemm.product(np.ones((4, 3), np.float32).T, _gemm.pack(b), np.empty((3, 6), np.float32))


def test_pack_lays_out_panels_of_columns() -> None:
    b = np.arange(3 * (NR + 2), dtype=np.float32).reshape(3, NR + 2)
    panels = _gemm.pack(b)
    assert panels.shape == (2, 3, NR) and panels.flags.c_contiguous
    np.testing.assert_array_equal(panels[0], b[:, :NR])
    np.testing.assert_array_equal(panels[1, :, :2], b[:, NR:])
    assert np.all(panels[1, :, 2:] == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pack_reads_any_strides_in_either_order(dtype: type) -> None:
    """R^T (a transposed view, read along R's rows), a contiguous matrix and strided views pack alike."""
    nr = _gemm.columns_per_panel(dtype)
    big = np.random.default_rng(2).standard_normal((3 * nr + 7, 2 * nr + 9)).astype(dtype)
    for b in (big.T, np.ascontiguousarray(big.T), big, big[1::2, ::3], big[::3, 1::2].T, big[:0], big[:, :1].T):
        panels = _gemm.pack(b)
        k, n = b.shape
        assert panels.shape == (-(-n // nr), k, nr) and panels.flags.c_contiguous, b.shape
        expected = np.zeros((panels.shape[0] * nr, k), dtype=dtype)
        expected[:n] = b.T
        np.testing.assert_array_equal(panels.transpose(0, 2, 1).reshape(expected.shape), expected)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_the_cells_agree_packed_and_through_blas(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu.set_cells("fused")
    try:
        rng = np.random.default_rng(3)
        steps, batch, inputs, units = 5, 3, 4, 6
        size = int(cudnn_rnn.cudnn_rnn_params_size(2, units, inputs, rnn_mode=mode, direction="bidirectional"))
        x = rng.standard_normal((steps, batch, inputs)).astype(np.float32)
        h = rng.standard_normal((4, batch, units)).astype(np.float32)
        c = rng.standard_normal((4, batch, units)).astype(np.float32) if mode == "lstm" else None
        params = (0.3 * rng.standard_normal(size)).astype(np.float32)
        lengths = np.array([5, 2, 4], np.int32)
        attrs = dict(rnn_mode=mode, direction="bidirectional")

        def run() -> list[np.ndarray]:
            out = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, **attrs)
            grads = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, params, lengths, out.output, out.output_h, out.output_c,
                                                    np.ones_like(out.output), None, None, out.reserve_space, **attrs)
            return [a for a in (*out[:3], *grads) if a.size]

        packs: list[tuple[int, ...]] = []

        def counted_pack(b: np.ndarray) -> np.ndarray:
            packs.append(b.shape)
            return _gemm.pack(b)

        monkeypatch.setattr(_fused_cells, "pack", counted_pack)
        packed = run()
        assert len(packs) == 4 + 4 + 4  # W^T and R^T in the forward, R in backprop, for each of the 4 pseudo-layers
        packs.clear()
        monkeypatch.setattr(_fused_cells, "INPUT_PACK_BYTES", 0)  # the input projection through BLAS
        recurrent_packed = run()
        assert len(packs) == 4 + 4
        packs.clear()
        monkeypatch.setattr(_fused_cells, "PACK_ROWS", steps * batch + 1)  # every product through BLAS
        blas = run()
        assert packs == []
        for results in (packed, recurrent_packed):
            for mine, other in zip(results, blas, strict=True):
                np.testing.assert_allclose(mine, other, rtol=0, atol=1e-5 * max(1.0, float(np.abs(other).max())))
    finally:
        cpu.set_cells("auto")


def test_the_parts_of_a_call_share_one_packing_of_each_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two parts of the batch (each a wavefront of two layers) pack each pseudo-layer's matrices once per call."""
    from cudnn_rnn.cpu import _parts

    cpu.set_cells("fused")
    monkeypatch.setattr(_parts, "PART_GRAIN", 0)
    cudnn_rnn.set_num_threads(4)
    try:
        rng = np.random.default_rng(4)
        steps, batch, inputs, units = 6, 4, 5, 7
        size = int(cudnn_rnn.cudnn_rnn_params_size(2, units, inputs, rnn_mode="lstm"))
        x = rng.standard_normal((steps, batch, inputs)).astype(np.float32)
        h, c = (rng.standard_normal((2, batch, units)).astype(np.float32) for _ in range(2))
        params = (0.3 * rng.standard_normal(size)).astype(np.float32)
        seen: list[_parts.Schedule] = []
        schedule = _parts.schedule
        monkeypatch.setattr(_parts, "schedule", lambda *args: seen.append(schedule(*args)) or seen[-1])
        packs: list[tuple[int, ...]] = []
        monkeypatch.setattr(_fused_cells, "pack", lambda b: packs.append(b.shape) or _gemm.pack(b))
        out = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, rnn_mode="lstm")
        assert len(packs) == 2 * 2  # W^T and R^T of each of the 2 layers
        grads = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, params, None, out.output, out.output_h, out.output_c,
                                                np.ones_like(out.output), None, None, out.reserve_space,
                                                rnn_mode="lstm")
        assert len(packs) == 2 * 2 + 2  # and R of each in backprop
        assert all(len(s.parts) == 2 and s.layers_together for s in seen)  # 2 parts, each a wavefront of 2 layers
        cpu.set_cells("numpy")
        reference = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, rnn_mode="lstm")
        reference_grads = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, params, None, reference.output,
                                                          reference.output_h, reference.output_c,
                                                          np.ones_like(out.output), None, None,
                                                          reference.reserve_space, rnn_mode="lstm")
        for mine, other in zip((*out[:3], *grads), (*reference[:3], *reference_grads), strict=True):
            np.testing.assert_allclose(mine, other, rtol=0, atol=1e-5 * max(1.0, float(np.abs(other).max())))
    finally:
        cudnn_rnn.set_num_threads(None)
        cpu.set_cells("auto")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_product_adds_in_every_storage_order(dtype: type) -> None:
    rng = np.random.default_rng(5)
    for m, k, n in ((5, 7, 3), (64, 300, 129), (1, 1, 1), (3, 0, 4), (0, 4, 2)):
        for orders in ("CCC", "CFC", "FCC", "FFC", "CCF", "FFF"):
            a = np.asarray(rng.standard_normal((m, k)), dtype, order=orders[0])
            b = np.asarray(rng.standard_normal((k, n)), dtype, order=orders[1])
            out = np.asarray(rng.standard_normal((m, n)), dtype, order=orders[2])
            expected = out.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
            _gemm.add_product(a, b, out)
            scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
            assert np.abs(out - expected).max(initial=0.0) <= 50 * TOLERANCE[dtype] * scale, (m, k, n, orders)


def test_add_product_allocates_nothing_and_refuses_shapes_that_disagree() -> None:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((1024, 256)).astype(np.float32).T  # [256, 1024], F: as backprop's dg^T
    b, out = rng.standard_normal((1024, 512)).astype(np.float32), np.zeros((256, 512), np.float32)
    _gemm.add_product(a, b, out)  # compiled (or loaded) before the count
    tracemalloc.start()
    try:
        _gemm.add_product(a, b, out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4096  # a @ b would be 512 KiB
    np.testing.assert_allclose(out, 2 * (a.astype(np.float64) @ b), rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="do not agree"):
        _gemm.add_product(a, b[:-1], out)


def test_backprop_adds_each_later_chunk_of_weight_gradients_through_add_product(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 3 chunks of steps, every chunk after the first backprop sees (the last in time) adds its share of W's,
    R's and the projection's gradients by ``add_product``; the gradients are the NumPy cells' (the reference's)."""
    calls: list[tuple[int, ...]] = []
    original = _fused_cells._add_product

    def counted(left: np.ndarray, right: np.ndarray, target: np.ndarray) -> None:
        calls.append(target.shape)
        original(left, right, target)

    monkeypatch.setattr(_fused_cells, "_add_product", counted)
    rng = np.random.default_rng(7)
    t, b, i, n, p = 70, 3, 5, 6, 4  # TIME_CHUNK 32: chunks [64, 70), [32, 64), [0, 32)
    params = rng.standard_normal(cudnn_rnn.cudnn_rnn_params_size(1, n, i, num_proj=p)) * 0.3
    x, h, c = rng.standard_normal((t, b, i)), np.zeros((1, b, p)), np.zeros((1, b, n))
    results = {}
    for kind in ("numpy", "fused"):
        monkeypatch.setattr(cpu, "cells_module", lambda kind=kind: cpu._cells if kind == "numpy" else _fused_cells)
        forward = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, num_proj=p)
        dy = np.ones_like(forward.output)
        results[kind] = cudnn_rnn.cudnn_rnn_backprop_v3(
            x, h, c, params, None, forward.output, forward.output_h, forward.output_c, dy, np.zeros_like(h),
            np.zeros_like(c), forward.reserve_space, forward.host_reserved, num_proj=p).params_backprop
    np.testing.assert_allclose(results["fused"], results["numpy"], rtol=1e-10, atol=1e-12)
    # the first chunk backprop sees writes its products; each later one adds W's, R's and Proj's, and the one
    # starting at step 0 adds R's share of h0 too
    assert sorted(calls) == sorted([(4 * n, i), (4 * n, p), (p, n)] * 2 + [(4 * n, p)])
