"""The reference backend's cells as compiled passes (numba): the same equations as ``_cells``, fused.

``step_forward``, ``factors`` and ``step_backward`` take the arguments of ``_cells``'s (which stays
the reference and the fallback). Per step the matrix products stay NumPy's (BLAS); everything
between them, a dozen NumPy calls in ``_cells``, is one pass over the rows here: forward, ``R h``
then one kernel; backward, one kernel then ``dg @ R``. Each value is computed by the same formula as
``_cells`` (sig(a) = 1/(1 + exp(-a)) from the pre-scaled gates, tanh(a) = 2 sig(2a) - 1), with an
exponential written out below so that the loops vectorise: Cephes' ``expf`` (degree-6 polynomial) in
float32 and ``exp`` (rational Pade form) in float64, after reduction by ln 2, each within 2 units in
the last place of the exact value. So the two paths agree to float rounding. Compiled functions are
cached on disk (``cache=True``: next to this file, or numba's user cache where that is read-only): a
second process compiles nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, types
from numba.extending import overload

from .._arrays import Array
from . import _cells
from ._cells import Factors, ForwardWeights, Workspace

__all__ = ["step_forward", "factors", "step_backward", "KERNELS"]


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
def _sigmoid_rows(a: Any, b: Any, width: int) -> None:
    """a[:, :width] <- 1 / (1 + exp(a + b)) (a and b hold -x: the scaled pre-activations)."""
    one = a.dtype.type(1)
    for row in range(a.shape[0]):
        ar, br = a[row], b[row]
        for j in range(width):
            ar[j] = one / (one + _exp(ar[j] + br[j]))


@_jit
def _tanh_from_sigmoid(values: Any) -> None:
    """In place, over a 1-D row: s = sig(2x) <- tanh(x) = 2 s - 1."""
    one, two = values.dtype.type(1), values.dtype.type(2)
    for j in range(values.shape[0]):
        values[j] = two * values[j] - one


@_jit
def _carry_rows(invalid: Any, target: Any, source: Any) -> None:
    """target[b] <- source[b] where ``invalid[b]`` (the state carried past a sequence's end)."""
    for row in range(target.shape[0]):
        if invalid[row, 0]:
            target[row, :] = source[row, :]


@_jit
def _lstm_forward(gates: Any, rec: Any, c_prev: Any, h_out: Any, c_out: Any) -> None:
    """gates [B, 4N] (i, f, o, g pre-activations, scaled) <- activations; c_out <- f c_{t-1} + i g;
    h_out <- o tanh(c_t)."""
    one, minus_two, two = gates.dtype.type(1), gates.dtype.type(-2), gates.dtype.type(2)
    n = c_out.shape[1]
    _sigmoid_rows(gates, rec, 4 * n)
    for row in range(gates.shape[0]):
        g, cp, co, ho = gates[row], c_prev[row], c_out[row], h_out[row]
        _tanh_from_sigmoid(g[3 * n:])
        for j in range(n):
            co[j] = g[n + j] * cp[j] + g[j] * g[3 * n + j]
        for j in range(n):
            ho[j] = g[2 * n + j] * (two * (one / (one + _exp(minus_two * co[j]))) - one)


@_jit
def _gru_forward(gates: Any, rec: Any, bR_n: Any, h_prev: Any, h_out: Any, rec_n_out: Any) -> None:
    """gates [B, 3N] (r, u, n input pre-activations, scaled) <- activations; rec [B, 3N] = scaled R h;
    rec_n_out <- R_n h + bR_n; h_out <- n + u*(h_prev - n)."""
    one, two, minus_half = gates.dtype.type(1), gates.dtype.type(2), gates.dtype.type(-0.5)
    n = h_out.shape[1]
    _sigmoid_rows(gates, rec, 2 * n)
    for row in range(gates.shape[0]):
        g, rn, hp, ho = gates[row], rec_n_out[row], h_prev[row], h_out[row]
        rec_row = rec[row]
        for j in range(n):
            rn[j] = rec_row[2 * n + j] + bR_n[j]  # -2 (R_n h + bR_n)
        for j in range(n):
            g[2 * n + j] = two * (one / (one + _exp(g[2 * n + j] + g[j] * rn[j]))) - one
        for j in range(n):
            rn[j] *= minus_half
        for j in range(n):
            ho[j] = g[2 * n + j] + g[n + j] * (hp[j] - g[2 * n + j])


@_jit
def _rnn_forward(gates: Any, rec: Any, relu: bool) -> None:
    """gates [B, N] <- act(gates + rec): relu, or tanh from the scaled -2a."""
    one, two, zero = gates.dtype.type(1), gates.dtype.type(2), gates.dtype.type(0)
    for row in range(gates.shape[0]):
        g, r = gates[row], rec[row]
        if relu:
            for j in range(g.shape[0]):
                a = g[j] + r[j]
                g[j] = a if (a > zero or a != a) else zero  # NaN stays NaN, as np.maximum
        else:
            for j in range(g.shape[0]):
                g[j] = two * (one / (one + _exp(g[j] + r[j]))) - one


def step_forward(mode: str, fw: ForwardWeights, gates: Array, h_prev: Array, c_prev: Array | None,
                 h_out: Array, c_out: Array | None, rec_n_out: Array | None, ws: Workspace, xp: Any,
                 invalid: Array | None = None) -> None:
    """As ``_cells.step_forward`` (rows where ``invalid`` [B, 1] carry the state)."""
    np.matmul(h_prev, fw.R.T, out=ws.rec)
    if mode == "lstm":
        assert c_prev is not None and c_out is not None, "an LSTM step has c"
        unprojected = h_out if fw.Proj is None else ws.n
        _lstm_forward(gates, ws.rec, c_prev, unprojected, c_out)
        if fw.Proj is not None:
            np.matmul(unprojected, fw.Proj.T, out=h_out)
        if invalid is not None:
            _carry_rows(invalid, c_out, c_prev)
    elif mode == "gru":
        assert fw.bR_n is not None, "a GRU step has bR_n"
        _gru_forward(gates, ws.rec, fw.bR_n, h_prev, h_out, ws.n2 if rec_n_out is None else rec_n_out)
    else:
        _rnn_forward(gates, ws.rec, mode == "rnn_relu")
    if invalid is not None:
        _carry_rows(invalid, h_out, h_prev)


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


def step_backward(mode: str, n: int, j: int, f: Factors, R: Array, Proj: Array | None, dh: Array, dy: Array,
                  dc: Array | None, d_projected: Array | None, invalid: Array | None, ws: Workspace,
                  xp: Any) -> None:
    """As ``_cells.step_backward``."""
    dh_total = ws.p
    np.add(dh, dy, out=dh_total)
    dg = f.dg[j]
    if mode == "lstm":
        assert f.k is not None and f.carry is not None and dc is not None, "an LSTM step has k, carry and dc"
        dm = _cells.unprojected_gradient(dh_total, Proj, d_projected, invalid, ws, np)
        _lstm_step(dm, f.k[j], f.carry[j], dg, dc)
        np.matmul(dg, R, out=dh)
    elif mode == "gru":
        assert f.carry is not None, "a GRU step has carry"
        _gru_step(dh_total, dg, f.dr[j])
        np.matmul(f.dr[j], R, out=dh)
        _add_carried(dh, dh_total, f.carry[j])
        return
    else:
        dg *= dh_total
        np.matmul(dg, R, out=dh)
    if invalid is not None:
        _carry_rows(invalid, dh, dh_total)


#: every compiled function, for the tests of the disk cache
KERNELS = (_sigmoid_rows, _tanh_from_sigmoid, _carry_rows, _lstm_forward, _gru_forward, _rnn_forward, _lstm_factors,
           _gru_factors, _rnn_factors, _lstm_step, _gru_step, _add_carried)
