"""The reference backend's cells compiled (numba): the same equations as ``_cells``, one loop per chunk of steps.

``forward_weights``, ``steps_forward``, ``factors`` and ``steps_backward`` take the arguments of ``_cells``'s
(which stays the reference and the fallback). ``steps_forward`` runs a chunk's steps in one compiled loop: per
step ``R h`` (``_gemm.product`` on R^T packed once per call, ``forward_weights``; BLAS from the compiled code,
numba's ``np.dot`` on SciPy's, for a call too small to pack), then one pass over the rows for the cell, which
adds the biases; ``input_product`` runs a chunk's input projection on W^T packed likewise where W is small
(``INPUT_PACK_BYTES``), else by BLAS; ``steps_backward`` runs a block's steps latest first, one pass then
``dg @ R`` (R packed by ``backward_recurrent``). The weights are read in the params' order (cuDNN's gate order,
unscaled: nothing is rearranged per call); the activations are written in ``_cells.FORWARD_ORDER``, as the
reserve keeps them. Each value is computed by the same formula as ``_cells`` (sig(a) = 1/(1 + exp(-a)),
tanh(a) = 2 sig(2a) - 1: ``_cells`` scales the weights by -1 and -2 instead, which is exact), with an
exponential written out below so that the loops vectorise: Cephes' ``expf`` (degree-6 polynomial) in float32
and ``exp`` (rational Pade form) in float64, after reduction by ln 2, each within 2 units in the last place of
the exact value. So the two paths agree to float rounding. Compiled functions are cached on disk
(``cache=True``: next to this file, or numba's user cache where that is read-only): a second process compiles
nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import scipy.linalg.cython_blas  # noqa: F401  (the BLAS compiled code calls: loaded now, so its threads are set too)
from numba import njit, types
from numba.extending import overload

from .._arrays import Array
from ._cells import Factors, ForwardWeights, LayerWeights, Workspace, folded_biases
from ._gemm import add_product as _add_product
from ._gemm import pack, product

__all__ = ["PACK_ROWS", "INPUT_PACK_BYTES", "forward_weights", "input_product", "steps_forward", "factors",
           "backward_recurrent", "steps_backward", "add_product", "KERNELS"]

#: the rows (T*B) of a call from which the recurrent matrix is packed for ``_gemm.product`` (packing reads
#: and writes it once; each row's product then runs faster than BLAS's: below, a decode step, it does not pay)
PACK_ROWS = 8
#: the largest W (bytes) whose W^T ``forward_weights`` packs for the input projection too: packed, a matrix that
#: stays in a core's L2 cache runs at 1.1-1.35x BLAS's rate on these rows (K = 63-128); larger, BLAS's own
#: blocking is as fast or faster
INPUT_PACK_BYTES = 1 << 19


def _exp(x: float) -> float:
    """exp(x) in x's own precision, vectorisable (compiled only: see the overload)."""
    raise NotImplementedError("compiled only")


@overload(_exp, inline="always")
def _exp_overload(x: Any) -> Any:
    if x == types.float32:
        f32 = np.float32

        def exp32(x: Any) -> Any:
            v = min(max(x, f32(-104.0)), f32(89.0))  # beyond, exp is 0 or inf in float32: so is the scaling
            k = np.floor(v * f32(1.44269504088896341) + f32(0.5))
            r = v - k * f32(0.693359375) + k * f32(2.12194440e-4)
            p = ((((f32(1.9875691500e-4) * r + f32(1.3981999507e-3)) * r + f32(8.3334519073e-3)) * r
                  + f32(4.1665795894e-2)) * r + f32(1.6666665459e-1)) * r + f32(5.0000001201e-1)
            low = np.int32(k) >> np.int32(1)  # 2**k as 2**low * 2**(k - low), both normal numbers
            high = np.int32(k) - low
            scale_low = np.int32((low + np.int32(127)) << np.int32(23)).view(np.float32)
            scale_high = np.int32((high + np.int32(127)) << np.int32(23)).view(np.float32)
            return (p * r * r + r + f32(1.0)) * scale_low * scale_high

        return exp32
    if x == types.float64:

        def exp64(x: Any) -> Any:
            v = min(max(x, -746.0), 710.0)
            k = np.floor(v * 1.4426950408889634073599 + 0.5)
            r = v - k * 6.93145751953125e-1 - k * 1.42860682030941723212e-6
            rr = r * r
            p = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr + 9.99999999999999999910e-1)
            q = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
                 + 2.27265548208155028766e-1) * rr + 2.00000000000000000009e0
            low = np.int64(k) >> np.int64(1)
            high = np.int64(k) - low
            scale_low = np.int64((low + np.int64(1023)) << np.int64(52)).view(np.float64)
            scale_high = np.int64((high + np.int64(1023)) << np.int64(52)).view(np.float64)
            return (1.0 + 2.0 * (p / (q - p))) * scale_low * scale_high

        return exp64
    return None


_jit = njit(cache=True, error_model="numpy", nogil=True, fastmath={"contract"})  # a*b + c may be one FMA

# Each loop below reads and writes few arrays, one contiguous row of each: that is what lets the
# compiler vectorise it (with many arrays in one loop it cannot rule out their overlap cheaply).


@_jit
def _sigmoid_rows(a: Any, b: Any, bias: Any, width: int) -> None:
    """a[:, :width] <- sig(a + b + bias) = 1 / (1 + exp(-(a + b + bias)))."""
    one = a.dtype.type(1)
    for row in range(a.shape[0]):
        ar, br = a[row], b[row]
        for j in range(width):
            ar[j] = one / (one + _exp(-(ar[j] + br[j] + bias[j])))


@_jit
def _carry_rows(invalid: Any, target: Any, source: Any) -> None:
    """target[b] <- source[b] where ``invalid[b]`` (the state carried past a sequence's end)."""
    for row in range(target.shape[0]):
        if invalid[row, 0]:
            target[row, :] = source[row, :]


@_jit
def _lstm_forward(gates: Any, rec: Any, bias: Any, c_prev: Any, h_out: Any, c_out: Any) -> None:
    """gates [B, 4N]: W x in cuDNN's order (i, f, g, o) <- the activations in ``FORWARD_ORDER`` (i, f, o, g),
    with ``rec`` = R h_{t-1} and ``bias`` = bW + bR added; c_out <- f c_{t-1} + i g; h_out <- o tanh(c_t)."""
    one, minus_two, two = gates.dtype.type(1), gates.dtype.type(-2), gates.dtype.type(2)
    n = c_out.shape[1]
    _sigmoid_rows(gates, rec, bias, 2 * n)
    for row in range(gates.shape[0]):
        g, r = gates[row], rec[row]
        for j in range(n):
            candidate = g[2 * n + j] + r[2 * n + j] + bias[2 * n + j]
            output = g[3 * n + j] + r[3 * n + j] + bias[3 * n + j]
            g[2 * n + j] = one / (one + _exp(-output))
            g[3 * n + j] = two * (one / (one + _exp(minus_two * candidate))) - one
        cp, co, ho = c_prev[row], c_out[row], h_out[row]
        for j in range(n):
            co[j] = g[n + j] * cp[j] + g[j] * g[3 * n + j]
        for j in range(n):
            ho[j] = g[2 * n + j] * (two * (one / (one + _exp(minus_two * co[j]))) - one)


@_jit
def _gru_forward(gates: Any, rec: Any, bias: Any, bR_n: Any, h_prev: Any, h_out: Any, rec_n_out: Any) -> None:
    """gates [B, 3N] (r, u, n: W x) <- activations, with ``rec`` = R h_{t-1} and ``bias`` (bW, + bR for r and u)
    added; rec_n_out <- R_n h + bR_n; h_out <- n + u*(h_prev - n)."""
    one, minus_two, two = gates.dtype.type(1), gates.dtype.type(-2), gates.dtype.type(2)
    n = h_out.shape[1]
    _sigmoid_rows(gates, rec, bias, 2 * n)
    for row in range(gates.shape[0]):
        g, rn, hp, ho = gates[row], rec_n_out[row], h_prev[row], h_out[row]
        rec_row = rec[row]
        for j in range(n):
            rn[j] = rec_row[2 * n + j] + bR_n[j]
        for j in range(n):
            a = g[2 * n + j] + bias[2 * n + j] + g[j] * rn[j]
            g[2 * n + j] = two * (one / (one + _exp(minus_two * a))) - one
        for j in range(n):
            ho[j] = g[2 * n + j] + g[n + j] * (hp[j] - g[2 * n + j])


@_jit
def _rnn_forward(gates: Any, rec: Any, bias: Any, relu: bool) -> None:
    """gates [B, N] <- act(gates + rec + bias): relu, or tanh."""
    one, two, zero, minus_two = gates.dtype.type(1), gates.dtype.type(2), gates.dtype.type(0), gates.dtype.type(-2)
    for row in range(gates.shape[0]):
        g, r = gates[row], rec[row]
        if relu:
            for j in range(g.shape[0]):
                a = g[j] + r[j] + bias[j]
                g[j] = a if (a > zero or a != a) else zero  # NaN stays NaN, as np.maximum
        else:
            for j in range(g.shape[0]):
                g[j] = two * (one / (one + _exp(minus_two * (g[j] + r[j] + bias[j])))) - one


def forward_weights(mode: str, num_units: int, weights: LayerWeights, xp: Any, rows: int = 0) -> ForwardWeights:
    """``weights`` as the compiled steps take them (the module docstring): R^T packed from ``PACK_ROWS`` rows
    (T*B), and so W^T where it is at most ``INPUT_PACK_BYTES``."""
    bias, bR_n = folded_biases(mode, num_units, weights)
    num_gates = weights["R"].shape[0] // num_units
    W = weights["W"]
    if W is not None and rows >= PACK_ROWS and W.size * W.itemsize <= INPUT_PACK_BYTES:
        W = pack(W.T)
    return ForwardWeights(W=W, R=_packed(weights["R"].T, rows), bias=bias,
                          input_scale=(1.0,) * num_gates, bR_n=bR_n, Proj=weights["Proj"])


def input_product(fw: ForwardWeights, x: Array, out: Array, xp: Any) -> None:
    """As ``_cells.input_product``: by ``_gemm.product`` where ``forward_weights`` packed W^T, else by BLAS."""
    assert fw.W is not None, "an input projection has W"
    if fw.W.ndim == 3:
        product(x, fw.W, out)
    else:
        np.matmul(x, fw.W.T, out=out)


def add_product(target: Array, left: Array, right: Array, xp: Any) -> None:
    """As ``_cells.add_product``, with no temporary where ``target`` is contiguous: BLAS adds into it
    (``_gemm.add_product``)."""
    if target.flags.c_contiguous or target.flags.f_contiguous:
        _add_product(_blas_operand(left), _blas_operand(right), target)
    else:
        target += left @ right


def _blas_operand(matrix: Array) -> Array:
    """``matrix`` itself where it is C- or F-contiguous (BLAS reads it as it lies), else a C-contiguous copy."""
    return matrix if matrix.flags.c_contiguous or matrix.flags.f_contiguous else np.ascontiguousarray(matrix)


def backward_recurrent(R: Array, rows: int, xp: Any) -> Array:
    """As ``_cells.backward_recurrent``: R packed (``_gemm.pack``) from ``PACK_ROWS`` rows, else itself."""
    return _packed(R, rows)


def _packed(matrix: Array, rows: int) -> Array:
    """The right operand of a call's products of ``rows`` rows in all: packed from ``PACK_ROWS`` rows, else itself."""
    return pack(matrix) if rows >= PACK_ROWS else matrix


def _operands(matrix: Array) -> tuple[Array, Array]:
    """(the matrix for BLAS, its panels for ``_gemm.product``) of a matrix or its panels: the other one empty."""
    if matrix.ndim == 3:
        return _absent(matrix.dtype, 2), matrix
    return matrix, _absent(matrix.dtype, 3)


@_jit
def _recurrent(a: Any, matrix: Any, panels: Any, out: Any) -> None:
    """out <- a @ the matrix: by ``_gemm.product`` where its panels are given, else by BLAS."""
    if panels.shape[0] > 0:
        product(a, panels, out)
    else:
        np.dot(a, matrix, out)


@functools.lru_cache(maxsize=64)
def _absent(dtype: Any, ndim: int) -> Array:
    """An empty array that stands for an argument a compiled loop does without (its size tells the loop): one per
    dtype and rank, shared (it holds nothing to write)."""
    return np.empty((0,) * ndim, dtype=dtype)


@_jit
def _lstm_steps(gates: Any, RT: Any, panels: Any, bias: Any, ProjT: Any, h_init: Any, c_init: Any, h_rows: Any,
                c_rows: Any, invalid: Any, rec: Any, unprojected: Any) -> None:
    """LSTM steps j = 0 .. s-1: rec <- h_{j-1} R^T (``_recurrent``), the cell (``bias`` added), h_j <- o tanh(c_j)
    (times Proj^T when ``ProjT`` is not empty), rows past their end carried (when ``invalid`` is not empty)."""
    projecting, padded = ProjT.shape[0] > 0, invalid.shape[0] > 0
    for j in range(gates.shape[0]):
        h_prev = h_init if j == 0 else h_rows[j - 1]
        c_prev = c_init if j == 0 else c_rows[j - 1]
        _recurrent(h_prev, RT, panels, rec)
        if projecting:
            _lstm_forward(gates[j], rec, bias, c_prev, unprojected, c_rows[j])
            np.dot(unprojected, ProjT, h_rows[j])
        else:
            _lstm_forward(gates[j], rec, bias, c_prev, h_rows[j], c_rows[j])
        if padded:
            _carry_rows(invalid[j], c_rows[j], c_prev)
            _carry_rows(invalid[j], h_rows[j], h_prev)


@_jit
def _gru_steps(gates: Any, RT: Any, panels: Any, bias: Any, bR_n: Any, h_init: Any, h_rows: Any, rec_n_rows: Any,
               invalid: Any, rec: Any, rec_n_scratch: Any) -> None:
    """GRU steps j = 0 .. s-1: rec <- h_{j-1} R^T (``_recurrent``), the cell (``bias`` added; R_n h + bR_n into
    ``rec_n_rows`` when it is not empty), rows past their end carried."""
    saving, padded = rec_n_rows.shape[0] > 0, invalid.shape[0] > 0
    for j in range(gates.shape[0]):
        h_prev = h_init if j == 0 else h_rows[j - 1]
        _recurrent(h_prev, RT, panels, rec)
        _gru_forward(gates[j], rec, bias, bR_n, h_prev, h_rows[j], rec_n_rows[j] if saving else rec_n_scratch)
        if padded:
            _carry_rows(invalid[j], h_rows[j], h_prev)


@_jit
def _rnn_steps(gates: Any, RT: Any, panels: Any, bias: Any, relu: bool, h_init: Any, invalid: Any, rec: Any) -> None:
    """Plain RNN steps j = 0 .. s-1 in place of ``gates`` (which become h): rec <- h_{j-1} R^T, act(+ ``bias``)."""
    padded = invalid.shape[0] > 0
    for j in range(gates.shape[0]):
        h_prev = h_init if j == 0 else gates[j - 1]
        _recurrent(h_prev, RT, panels, rec)
        _rnn_forward(gates[j], rec, bias, relu)
        if padded:
            _carry_rows(invalid[j], gates[j], h_prev)


def steps_forward(mode: str, fw: ForwardWeights, gates: Array, h_init: Array, c_init: Array | None,
                  h_rows: Array, c_rows: Array | None, rec_n_rows: Array | None, ws: Workspace, xp: Any,
                  invalid: Array | None = None) -> None:
    """As ``_cells.steps_forward``."""
    dtype = gates.dtype
    padding = _absent(bool, 3) if invalid is None else invalid
    RT, panels = _operands(fw.R)
    if mode == "lstm":
        assert c_init is not None and c_rows is not None, "an LSTM has c"
        _lstm_steps(gates, RT, panels, fw.bias, _absent(dtype, 2) if fw.Proj is None else fw.Proj.T, h_init, c_init,
                    h_rows, c_rows, padding, ws.rec, ws.n)
    elif mode == "gru":
        assert fw.bR_n is not None, "a GRU has bR_n"
        _gru_steps(gates, RT, panels, fw.bias, fw.bR_n, h_init, h_rows,
                   _absent(dtype, 3) if rec_n_rows is None else rec_n_rows, padding, ws.rec, ws.n2)
    else:
        _rnn_steps(gates, RT, panels, fw.bias, mode == "rnn_relu", h_init, padding, ws.rec)


@_jit
def _lstm_factors(gates: Any, cell: Any, cell_prev: Any, invalid: Any, dg: Any, k: Any, carry: Any,
                  unprojected: Any, has_unprojected: bool) -> None:
    """Over rows (steps x batch): dg (i, f, g, o) <- i(1-i)g, f(1-f)c_{t-1}, (1-g^2)i, o(1-o)tanh(c);
    k <- o(1 - tanh(c)^2); carry <- f; unprojected <- o tanh(c); past the end 0 (carry 1)."""
    one, minus_two, two, zero = gates.dtype.type(1), gates.dtype.type(-2), gates.dtype.type(2), gates.dtype.type(0)
    n = cell.shape[1]
    for row in range(gates.shape[0]):
        g, c, cp, d, kr, cr = gates[row], cell[row], cell_prev[row], dg[row], k[row], carry[row]
        if invalid[row, 0]:
            d[:] = zero
            kr[:] = zero
            cr[:] = one
            if has_unprojected:
                unprojected[row, :] = zero
            continue
        for j in range(n):
            kr[j] = two * (one / (one + _exp(minus_two * c[j]))) - one  # tanh(c) for now
        if has_unprojected:
            up = unprojected[row]
            for j in range(n):
                up[j] = g[2 * n + j] * kr[j]
        for j in range(n):
            d[3 * n + j] = (one - g[2 * n + j]) * g[2 * n + j] * kr[j]
        for j in range(n):
            kr[j] = (one - kr[j] * kr[j]) * g[2 * n + j]
        for j in range(n):
            d[j] = (one - g[j]) * g[j] * g[3 * n + j]
        for j in range(n):
            d[n + j] = (one - g[n + j]) * g[n + j] * cp[j]
        for j in range(n):
            d[2 * n + j] = (one - g[3 * n + j] * g[3 * n + j]) * g[j]
        for j in range(n):
            cr[j] = g[n + j]


@_jit
def _gru_factors(gates: Any, rec_n: Any, h_prev: Any, invalid: Any, dg: Any, dr: Any, carry: Any) -> None:
    """Over rows: dg <- (1-r)r(R_n h + bR_n), (h_{t-1} - n)(1-u)u, (1 - n^2)(1-u); dr's third block <- r;
    carry <- u; past the end dg and dr 0, carry 1."""
    one, zero = gates.dtype.type(1), gates.dtype.type(0)
    n = rec_n.shape[1]
    for row in range(gates.shape[0]):
        g, d, r, cr = gates[row], dg[row], dr[row], carry[row]
        if invalid[row, 0]:
            d[:] = zero
            r[:] = zero
            cr[:] = one
            continue
        rn, hp = rec_n[row], h_prev[row]
        for j in range(n):
            d[j] = (one - g[j]) * g[j] * rn[j]
        for j in range(n):
            d[n + j] = (hp[j] - g[2 * n + j]) * ((one - g[n + j]) * g[n + j])
        for j in range(n):
            d[2 * n + j] = (one - g[2 * n + j] * g[2 * n + j]) * (one - g[n + j])
        for j in range(n):
            r[2 * n + j] = g[j]
        for j in range(n):
            cr[j] = g[n + j]


@_jit
def _rnn_factors(gates: Any, relu: bool, invalid: Any, dg: Any) -> None:
    """Over rows: dg <- act'(a) from the activations (relu: 1 where positive; tanh: 1 - h^2); 0 past the end."""
    one, zero = gates.dtype.type(1), gates.dtype.type(0)
    for row in range(gates.shape[0]):
        g, d = gates[row], dg[row]
        if invalid[row, 0]:
            d[:] = zero
        elif relu:
            for j in range(g.shape[0]):
                d[j] = one if g[j] > zero else zero
        else:
            for j in range(g.shape[0]):
                d[j] = one - g[j] * g[j]


def _rows(array: Array | None) -> Array | None:
    """[s, B, F] as [s*B, F] (a view: the blocks are contiguous)."""
    return None if array is None else array.reshape(-1, array.shape[-1])


def factors(mode: str, n: int, gates: Array, cell: Array | None, cell_prev: Array | None, rec_n: Array | None,
            h_prev: Array | None, out: Factors, invalid: Array | None, xp: Any) -> None:
    """As ``_cells.factors``."""
    rows = np.zeros((gates.shape[0] * gates.shape[1], 1), dtype=bool) if invalid is None else _rows(invalid)
    if mode == "lstm":
        assert cell is not None and cell_prev is not None and out.k is not None and out.carry is not None
        unprojected = out.unprojected
        _lstm_factors(_rows(gates), _rows(cell), _rows(cell_prev), rows, _rows(out.dg), _rows(out.k),
                      _rows(out.carry), _rows(out.k if unprojected is None else unprojected), unprojected is not None)
    elif mode == "gru":
        assert rec_n is not None and h_prev is not None and out.carry is not None
        _gru_factors(_rows(gates), _rows(rec_n), _rows(h_prev), rows, _rows(out.dg), _rows(out.dr), _rows(out.carry))
    else:
        _rnn_factors(_rows(gates), mode == "rnn_relu", rows, _rows(out.dg))


@_jit
def _lstm_step(dm: Any, k: Any, carry: Any, dg: Any, dc: Any) -> None:
    """dc <- dc + dm*k; dg's i, f, g blocks *= dc, its o block *= dm; then dc *= carry (d c_{t-1})."""
    n = dc.shape[1]
    for row in range(dc.shape[0]):
        m, kr, cr, d, c = dm[row], k[row], carry[row], dg[row], dc[row]
        for j in range(n):
            c[j] += m[j] * kr[j]
        for j in range(n):
            d[j] *= c[j]
            d[n + j] *= c[j]
            d[2 * n + j] *= c[j]
        for j in range(n):
            d[3 * n + j] *= m[j]
        for j in range(n):
            c[j] *= cr[j]


@_jit
def _gru_step(dh_total: Any, dg: Any, dr: Any) -> None:
    """dn, du *= dh; dr_r *= dn; d(R h + bR) <- [dg_r, dg_u, dr_n * dn] (dr_n holds r)."""
    n = dh_total.shape[1]
    for row in range(dg.shape[0]):
        dh, d, r = dh_total[row], dg[row], dr[row]
        for j in range(n):
            d[2 * n + j] *= dh[j]
            d[n + j] *= dh[j]
        for j in range(n):
            d[j] *= d[2 * n + j]
        for j in range(2 * n):
            r[j] = d[j]
        for j in range(n):
            r[2 * n + j] *= d[2 * n + j]


@_jit
def _add_carried(dh: Any, dh_total: Any, carry: Any) -> None:
    """dh += dh_total * carry (a GRU's d h_{t-1} through u)."""
    for row in range(dh.shape[0]):
        d, t, c = dh[row], dh_total[row], carry[row]
        for j in range(d.shape[0]):
            d[j] += t[j] * c[j]


@_jit
def _add_rows(a: Any, b: Any, out: Any) -> None:
    """out <- a + b over [B, F] rows."""
    for row in range(out.shape[0]):
        ar, br, o = a[row], b[row], out[row]
        for j in range(o.shape[0]):
            o[j] = ar[j] + br[j]


@_jit
def _zero_rows(invalid: Any, target: Any) -> None:
    """target[b] <- 0 where ``invalid[b]``."""
    for row in range(target.shape[0]):
        if invalid[row, 0]:
            target[row, :] = 0


@_jit
def _lstm_back_steps(dg: Any, k: Any, carry: Any, R: Any, panels: Any, Proj: Any, dh: Any, dy: Any, dc: Any,
                     d_projected: Any, invalid: Any, dh_total: Any, dm: Any) -> None:
    """LSTM backprop over the steps of a block, latest first (``_lstm_step``, then dh <- dg R, ``_recurrent``)."""
    projecting, padded = Proj.shape[0] > 0, invalid.shape[0] > 0
    for j in range(dg.shape[0] - 1, -1, -1):
        _add_rows(dh, dy[j], dh_total)
        if projecting:
            d_projected[j, :, :] = dh_total
            if padded:
                _zero_rows(invalid[j], d_projected[j])
            np.dot(dh_total, Proj, dm)
            _lstm_step(dm, k[j], carry[j], dg[j], dc)
        else:
            _lstm_step(dh_total, k[j], carry[j], dg[j], dc)
        _recurrent(dg[j], R, panels, dh)
        if padded:
            _carry_rows(invalid[j], dh, dh_total)


@_jit
def _gru_back_steps(dg: Any, dr: Any, carry: Any, R: Any, panels: Any, dh: Any, dy: Any, dh_total: Any) -> None:
    """GRU backprop over the steps of a block, latest first (past the end dr = 0 and carry = 1)."""
    for j in range(dg.shape[0] - 1, -1, -1):
        _add_rows(dh, dy[j], dh_total)
        _gru_step(dh_total, dg[j], dr[j])
        _recurrent(dr[j], R, panels, dh)
        _add_carried(dh, dh_total, carry[j])


@_jit
def _rnn_back_steps(dg: Any, R: Any, panels: Any, dh: Any, dy: Any, invalid: Any, dh_total: Any) -> None:
    """Plain RNN backprop over the steps of a block, latest first: dg *= dh_total, dh <- dg R."""
    padded = invalid.shape[0] > 0
    for j in range(dg.shape[0] - 1, -1, -1):
        _add_rows(dh, dy[j], dh_total)
        _multiply_rows(dg[j], dh_total)
        _recurrent(dg[j], R, panels, dh)
        if padded:
            _carry_rows(invalid[j], dh, dh_total)


@_jit
def _multiply_rows(target: Any, factor: Any) -> None:
    """target *= factor over [B, F] rows."""
    for row in range(target.shape[0]):
        t, f = target[row], factor[row]
        for j in range(t.shape[0]):
            t[j] *= f[j]


def steps_backward(mode: str, n: int, f: Factors, R: Array, Proj: Array | None, dh: Array, dy: Array,
                   dc: Array | None, d_projected: Array | None, invalid: Array | None, ws: Workspace,
                   xp: Any) -> None:
    """As ``_cells.steps_backward`` (``R`` as ``backward_recurrent`` gives it)."""
    dtype, dy = f.dg.dtype, np.ascontiguousarray(dy)
    padding = _absent(bool, 3) if invalid is None else np.ascontiguousarray(invalid)
    R, panels = _operands(R)
    R = np.ascontiguousarray(R)
    if mode == "lstm":
        assert f.k is not None and f.carry is not None and dc is not None, "an LSTM has k, carry and dc"
        _lstm_back_steps(f.dg, f.k, f.carry, R, panels,
                         _absent(dtype, 2) if Proj is None else np.ascontiguousarray(Proj), dh, dy, dc,
                         _absent(dtype, 3) if d_projected is None else d_projected, padding, ws.p, ws.n)
    elif mode == "gru":
        assert f.carry is not None, "a GRU has carry"
        _gru_back_steps(f.dg, f.dr, f.carry, R, panels, dh, dy, ws.p)
    else:
        _rnn_back_steps(f.dg, R, panels, dh, dy, padding, ws.p)


#: every compiled function, for the tests of the disk cache
KERNELS = (_sigmoid_rows, _carry_rows, _lstm_forward, _gru_forward, _rnn_forward, _lstm_factors,
           _gru_factors, _rnn_factors, _lstm_step, _gru_step, _add_carried, _lstm_steps, _gru_steps, _rnn_steps,
           _add_rows, _zero_rows, _recurrent, _lstm_back_steps, _gru_back_steps, _rnn_back_steps, _multiply_rows,
           product, _add_product)
