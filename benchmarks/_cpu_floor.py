"""What bounds bench_cpu.py's step from below: the GEMM floor (the step's matrix products alone) and the machine's
limit (those products' multiply-adds at the rate of one large float32 sgemm).

bench_cpu.py imports it by name (``from _cpu_floor import ...``) with this folder on ``sys.path``.

The products of one step, per layer and direction, with width = I for layer 0 and D*N above, G gates (4 LSTM,
3 GRU), N hidden, P = N (no projection); W [G*N, width] and R [G*N, P] C-contiguous, as our params store them,
g / dg the gate pre-activations and their gradients [T, B, G*N], h the hidden states [T, B, P] (random values:
only the shapes matter; h[-1] stands for h0):

========  ====================  =====  ====================================
pass      product               count  shapes
========  ====================  =====  ====================================
forward   x @ W.T  (input)      1      [T*B, width] @ [width, G*N]
forward   h[t-1] @ R.T          T      [B, P] @ [P, G*N]
backward  dg[t] @ R  (dh)       T      [B, G*N] @ [G*N, P]
backward  dg @ W  (dx)          1      [T*B, G*N] @ [G*N, width]
backward  dg.T @ x  (dW)        1      [G*N, T*B] @ [T*B, width]
backward  dg.T @ h  (dR)        1      [G*N, T*B] @ [T*B, P]
========  ====================  =====  ====================================

A product [m, k] @ [k, n] is m*k*n multiply-adds; the forward's sum is T*B*G*N*(width + P) per layer and
direction, and the backward's is twice that. The limit of a step is

    limit_ms = 2 * multiply-adds / (sgemm GFLOP/s * 1e6)

with the sgemm [S, S] @ [S, S] (S = ``LIMIT_SIZE``, 2*S**3 FLOPs) timed on the same threads as the other sides.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from _bench_configs import GATES, Bench
from _bench_report import median_ms
from threadpoolctl import threadpool_limits

#: one product of the floor: np.matmul(a, b, out=out)
Product = tuple[np.ndarray, np.ndarray, np.ndarray]
#: the sgemm of the machine's limit: [S, S] @ [S, S] in float32
LIMIT_SIZE = 2048
#: its untimed and timed runs (median reported)
LIMIT_WARMUP, LIMIT_REPEATS = 1, 5


def floor_products(bench: Bench, backward: bool, dtype: type = np.float32,
                   rng: np.random.Generator | None = None) -> list[Product]:
    """The products of one step (the module's table), every forward product first; ``backward=False``: the
    forward's alone (inference). Each operand is preallocated and C-contiguous (a transpose is a view); the
    operands read are drawn from ``rng`` (uniform(-1, 1)), left unwritten without one (to count the products)."""
    t, b, n = bench.max_time, bench.batch, bench.hidden
    gn, p = GATES[bench.mode] * n, n

    def operand(*shape: int) -> np.ndarray:
        return np.empty(shape, dtype) if rng is None else rng.uniform(-1.0, 1.0, shape).astype(dtype)

    forward: list[Product] = []
    backprop: list[Product] = []
    for layer in range(bench.layers):
        width = bench.inputs if layer == 0 else bench.directions * n
        for _ in range(bench.directions):
            x, w, r, h = operand(t * b, width), operand(gn, width), operand(gn, p), operand(t, b, p)
            g = np.empty((t, b, gn), dtype)
            forward += [(x, w.T, g.reshape(t * b, gn)), *((h[s], r.T, g[s]) for s in range(t))]
            if backward:
                dg, dh = operand(t, b, gn), np.empty((b, p), dtype)
                flat = dg.reshape(t * b, gn)
                backprop += [*((dg[s], r, dh) for s in range(t)), (flat, w, np.empty((t * b, width), dtype)),
                             (flat.T, x, np.empty((gn, width), dtype)),
                             (flat.T, h.reshape(t * b, p), np.empty((gn, p), dtype))]
    return forward + backprop


def gemm_floor(bench: Bench, dtype: type, backward: bool, threads: int) -> Callable[[], None]:
    """The matrix products of one step, alone (:func:`floor_products`): NumPy's BLAS (``np.matmul(..., out=...)``)
    on preallocated operands of ``dtype``, its pools held at ``threads`` (whatever the last side left them at).
    Returns the step; ``backward=False`` runs the forward products only."""
    products = floor_products(bench, backward, dtype, np.random.default_rng(1))

    def step() -> None:
        with threadpool_limits(limits=threads, user_api="blas"):
            for a, b, out in products:
                np.matmul(a, b, out=out)

    return step


def multiply_adds(bench: Bench, backward: bool) -> int:
    """The multiply-adds of :func:`gemm_floor`'s products: sum of m*k*n over its [m, k] @ [k, n]; training
    (``backward=True``) = forward + backward = 3 x forward."""
    return sum(a.shape[0] * a.shape[1] * b.shape[1] for a, b, _ in floor_products(bench, backward))


def limit_ms(count: int, gflops: float) -> float:
    """Milliseconds of ``count`` multiply-adds (2 FLOPs each) at ``gflops`` GFLOP/s."""
    return 2 * count / (gflops * 1e6)


def machine_limit(threads: int, size: int = LIMIT_SIZE, warmup: int = LIMIT_WARMUP,
                  repeats: int = LIMIT_REPEATS) -> dict[str, Any]:
    """The record's ``limit``: one float32 sgemm [size, size] @ [size, size] (``np.matmul`` with ``out=`` on
    preallocated operands), NumPy's BLAS pools held at ``threads``; ``median_ms`` of ``repeats`` after ``warmup``
    untimed runs (``times_ms`` all of them, ``spread`` max/min), ``gflops`` = 2*size**3 / median."""
    rng = np.random.default_rng(2)
    a, b = (rng.uniform(-1.0, 1.0, (size, size)).astype(np.float32) for _ in range(2))
    out = np.empty((size, size), np.float32)
    with threadpool_limits(limits=threads, user_api="blas"):
        timed = median_ms({"sgemm": lambda: np.matmul(a, b, out=out)}, warmup, repeats, "")
    return dict(m=size, k=size, n=size, dtype="float32", threads=threads, warmup=warmup, repeats=repeats,
                median_ms=timed["sgemm_ms"], times_ms=timed["sgemm_times_ms"], spread=timed["spread"],
                gflops=2 * size**3 / (timed["sgemm_ms"] * 1e6))
