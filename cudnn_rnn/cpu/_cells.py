"""The reference backend's cells: the math of one time step, forward and backward, per mode.

Gates in cuDNN's linLayerID order, ``a = W x_t + bW + R h_{t-1} + bR`` ([B, G*N]), sig = logistic::

    lstm  i, f, g, o = sig(a_i), sig(a_f), tanh(a_g), sig(a_o)
          c_t = f*c_{t-1} + i*g ;  h_t = o*tanh(c_t)            (projection: h_t <- h_t @ Proj.T)
    gru   r, u = sig(a_r), sig(a_u) ;  n = tanh(W_n x_t + bW_n + r*(R_n h_{t-1} + bR_n))
          h_t = n + u*(h_{t-1} - n)
    rnn   h_t = act(a)                                          (act = tanh or relu)

Backward, with dh the gradient reaching h_t (from above and from step t+1) and dc reaching c_t::

    lstm  dc' = dc + dh*o*(1 - tanh(c_t)^2)
          da_i = dc'*g*i(1-i),  da_f = dc'*c_{t-1}*f(1-f),  da_g = dc'*i*(1-g^2),  da_o = dh*tanh(c_t)*o(1-o)
          dh_{t-1} = da @ R ;  dc_{t-1} = dc'*f
    gru   dn = dh*(1-u)*(1-n^2) ;  da_u = dh*(h_{t-1}-n)*u(1-u) ;  da_r = dn*(R_n h_{t-1}+bR_n)*r(1-r)
          d(R h + bR) = [da_r, da_u, dn*r] ;  dh_{t-1} = dh*u + d(R h + bR) @ R
    rnn   da = dh*act'(a) ;  dh_{t-1} = da @ R

How this runs fast on NumPy (every value is the one the equations give; only the work is arranged):

- Both activations come from one exponential: sig(a) = 1 / (1 + exp(-a)) and tanh(a) = 2 sig(2a) - 1
  (NumPy's exp is two to three times faster than its tanh). -a and -2a come straight out of the
  GEMMs because each gate's rows of W, R and the biases are scaled by -1 or -2 once per call
  (exact: powers of two), so one ``exp`` covers all the gates of a step. The LSTM runs its gates
  as i, f, o, g so that the sigmoid ones are adjacent; the reserve keeps them in that order
  (``FORWARD_ORDER``).
- Backward splits each equation into factors that depend only on what forward saved (``factors``,
  computed for a block of steps at once) and the few products with dh and dc that are serial
  (``step_backward``). Past a sequence's end the factors are 0 (and the carried multipliers 1),
  so the serial step needs no branch.
- Every operation writes into a buffer allocated once per call (``out=``): no allocation per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from .._arrays import Array

__all__ = ["FORWARD_ORDER", "SCALES", "LayerWeights", "ForwardWeights", "forward_weights", "folded_biases",
           "Workspace", "input_product", "step_forward", "steps_forward", "tanh", "lstm_hidden", "Factors", "factors",
           "step_backward", "backward_recurrent", "steps_backward", "add_product"]

#: the order in which each mode's gates sit in the reserve and the forward GEMMs (cuDNN gate indices)
FORWARD_ORDER: dict[str, tuple[int, ...]] = {"lstm": (0, 1, 3, 2), "gru": (0, 1, 2), "rnn_tanh": (0,),
                                             "rnn_relu": (0,)}
#: the factor each gate's pre-activation is computed with, in FORWARD_ORDER: -1 for a sigmoid and
#: -2 for a tanh (both then come from exp, see ``_activate_``), 1 for relu
SCALES: dict[str, tuple[float, ...]] = {"lstm": (-1.0, -1.0, -1.0, -2.0), "gru": (-1.0, -1.0, -2.0),
                                        "rnn_tanh": (-2.0,), "rnn_relu": (1.0,)}


class LayerWeights(TypedDict):
    """One pseudo-layer's matrices and biases in cuDNN's gate order, each side's gates stacked (views of
    a params buffer, or of its gradient): ``W`` [G*N, width] (None for layer 0 under skip_input), ``R``
    [G*N, P], ``bW`` [G*N] (None where the layout has no input biases), ``bR`` [G*N], ``Proj`` [P, N]
    (None without projection)."""

    W: Array | None
    R: Array
    bW: Array | None
    bR: Array
    Proj: Array | None


@dataclass(frozen=True)
class ForwardWeights:
    """One pseudo-layer's weights as a cells module's forward steps use them: here (``forward_weights``) gates
    in ``FORWARD_ORDER``, each gate's rows times its ``SCALES`` factor; the compiled cells' take the params'
    own, in cuDNN's order and unscaled. ``W`` [G*N, width] (None under skip_input, then ``input_scale``
    (G factors) scales x per gate; the compiled cells: W^T packed where it is small), ``R`` [G*N, P] (the
    compiled cells: R^T packed, ``_gemm.pack``, where the call's rows pay for it), ``bias`` [G*N] (bW + bR,
    without GRU's bR_n), ``bR_n`` [N] (GRU, scaled like its gate), ``Proj`` [P, N] (LSTM projection)."""

    W: Array | None
    R: Array
    bias: Array
    input_scale: tuple[float, ...]
    bR_n: Array | None
    Proj: Array | None


def forward_weights(mode: str, num_units: int, weights: LayerWeights, xp: Any, rows: int = 0) -> ForwardWeights:
    """Reorder and scale ``weights`` (cuDNN order: W, R, bW, bR, Proj; see ``_backend``) for the forward of
    ``rows`` (T*B) rows (which the compiled cells' choice takes into account; here, unused)."""
    order, n, scale = FORWARD_ORDER[mode], num_units, SCALES[mode]

    def arrange(stacked: Array) -> Array:
        blocks = stacked.reshape(len(order), n, -1)[list(order)]
        return (blocks * xp.asarray(scale, dtype=stacked.dtype)[:, None, None]).reshape(len(order) * n, -1)

    bias, bR_n = folded_biases(mode, n, weights)
    if bR_n is not None:
        bR_n *= scale[2]  # scaled like its gate (by a Python float: it keeps the params' dtype)
    W = weights["W"]
    return ForwardWeights(W=None if W is None else arrange(W), R=arrange(weights["R"]), bias=arrange(bias)[:, 0],
                          input_scale=scale, bR_n=bR_n, Proj=weights["Proj"])


def input_product(fw: ForwardWeights, x: Array, out: Array, xp: Any) -> None:
    """out [M, G*N] <- x [M, width] @ W^T: the input projection of M rows (steps x batch)."""
    assert fw.W is not None, "an input projection has W"
    xp.matmul(x, fw.W.T, out=out)


def folded_biases(mode: str, num_units: int, weights: LayerWeights) -> tuple[Array, Array | None]:
    """(bW + bR, in cuDNN's order, without a GRU's bR_n; that bR_n [N] or None), both new arrays: bR_n sits inside
    r * (R_n h + bR_n), so it cannot join the other biases added to W x."""
    bias = weights["bR"].copy()
    bR_n = None
    if mode == "gru":
        bR_n = bias[2 * num_units:].copy()
        bias[2 * num_units:] = 0
    if weights["bW"] is not None:
        bias += weights["bW"]
    return bias, bR_n


class Workspace:
    """Per-call scratch of the step functions, [B, width] rows allocated once."""

    def __init__(self, batch: int, num_gates: int, num_units: int, state_size: int, dtype: object, xp: Any) -> None:
        self.rec = xp.empty((batch, num_gates * num_units), dtype=dtype)  # R h (+ bR_n)
        self.n = xp.empty((batch, num_units), dtype=dtype)
        self.n2 = xp.empty((batch, num_units), dtype=dtype)
        self.p = xp.empty((batch, state_size), dtype=dtype)


def _gate(a: Array, j: int, n: int) -> Array:
    return a[..., j * n:(j + 1) * n]


def step_forward(mode: str, fw: ForwardWeights, gates: Array, h_prev: Array, c_prev: Array | None,
                 h_out: Array, c_out: Array | None, rec_n_out: Array | None, ws: Workspace, xp: Any,
                 invalid: Array | None = None) -> None:
    """One step for all rows. ``gates`` [B, G*N] holds the (scaled) input pre-activations on entry
    and the gate activations on return; writes h_t into ``h_out`` [B, P], c_t into ``c_out`` (LSTM),
    R_n h + bR_n into ``rec_n_out`` (GRU, when saved). For the RNN modes ``h_out`` is ``gates``.
    Rows where ``invalid`` [B, 1] (past their sequence's end) carry h_prev and c_prev instead."""
    _step(mode, fw, gates, h_prev, c_prev, h_out, c_out, rec_n_out, ws, xp)
    if invalid is not None:
        xp.copyto(h_out, h_prev, where=invalid)
        if c_out is not None:
            xp.copyto(c_out, c_prev, where=invalid)


def steps_forward(mode: str, fw: ForwardWeights, gates: Array, h_init: Array, c_init: Array | None,
                  h_rows: Array, c_rows: Array | None, rec_n_rows: Array | None, ws: Workspace, xp: Any,
                  invalid: Array | None = None) -> None:
    """``step_forward`` over s steps in order: ``gates`` [s, B, G*N] (the input pre-activations without
    ``fw.bias``, added first), ``h_rows`` [s, B, P] (the RNN modes: ``gates`` itself), ``c_rows`` and ``rec_n_rows``
    [s, B, N] or None, ``invalid`` [s, B, 1] or None. Step j starts from row j-1 of ``h_rows`` and ``c_rows``
    (``h_init`` [B, P] and ``c_init`` [B, N] at j = 0)."""
    gates += fw.bias
    for j in range(gates.shape[0]):
        h_prev = h_rows[j - 1] if j else h_init
        c_prev = None if c_rows is None else (c_rows[j - 1] if j else c_init)
        step_forward(mode, fw, gates[j], h_prev, c_prev, h_rows[j], None if c_rows is None else c_rows[j],
                     None if rec_n_rows is None else rec_n_rows[j], ws, xp, None if invalid is None else invalid[j])


def _step(mode: str, fw: ForwardWeights, gates: Array, h_prev: Array, c_prev: Array | None,
          h_out: Array, c_out: Array | None, rec_n_out: Array | None, ws: Workspace, xp: Any) -> None:
    n = ws.n.shape[-1]
    xp.matmul(h_prev, fw.R.T, out=ws.rec)
    if mode == "gru":
        rec_n = ws.rec[:, 2 * n:]
        rec_n += fw.bR_n  # -2 (R_n h + bR_n)
        ru = gates[:, :2 * n]
        ru += ws.rec[:, :2 * n]
        _activate_(ru, xp)
        if rec_n_out is not None:
            xp.multiply(rec_n, -0.5, out=rec_n_out)
        r, u, new = _gate(gates, 0, n), _gate(gates, 1, n), _gate(gates, 2, n)
        xp.multiply(r, rec_n, out=ws.n)
        new += ws.n
        _activate_(new, xp, as_tanh=True)
        xp.subtract(h_prev, new, out=ws.n)
        ws.n *= u
        xp.add(new, ws.n, out=h_out)
        return
    gates += ws.rec
    if mode == "rnn_relu":
        xp.maximum(gates, 0, out=gates)
        return
    if mode == "rnn_tanh":
        _activate_(gates, xp, as_tanh=True)
        return
    _activate_(gates, xp)
    i, f, o, g = (_gate(gates, j, n) for j in range(4))  # FORWARD_ORDER
    _tanh_from_sigmoid_(g)
    xp.multiply(f, c_prev, out=c_out)
    xp.multiply(i, g, out=ws.n)
    c_out += ws.n
    tanh(c_out, ws.n, xp)
    if fw.Proj is None:
        xp.multiply(o, ws.n, out=h_out)
    else:
        ws.n *= o
        xp.matmul(ws.n, fw.Proj.T, out=h_out)


def lstm_hidden(gates: Array, cell: Array, out: Array, xp: Any) -> Array:
    """``out`` [B, N] <- h = o*tanh(c) of an LSTM step from its saved ``gates`` (FORWARD_ORDER) and ``cell``."""
    tanh(cell, out, xp)
    out *= _gate(gates, 2, out.shape[-1])
    return out


def _activate_(a: Array, xp: Any, as_tanh: bool = False) -> None:
    """In place: a (holding -x, or -2x where ``tanh``) <- sig(x) = 1 / (1 + exp(-x)), or
    tanh(x) = 2 sig(2x) - 1 (``as_tanh``). Infinities give the limits; exp's overflow is silenced by the caller."""
    xp.exp(a, out=a)
    a += 1
    xp.reciprocal(a, out=a)
    if as_tanh:
        _tanh_from_sigmoid_(a)


def _tanh_from_sigmoid_(s: Array) -> None:
    """In place: s = sig(2x) <- tanh(x) = 2 s - 1."""
    s *= 2
    s -= 1


def tanh(x: Array, out: Array, xp: Any) -> Array:
    """``out`` <- tanh(x), the same way the gates compute it (``_activate_``)."""
    xp.multiply(x, -2, out=out)
    _activate_(out, xp, as_tanh=True)
    return out


@dataclass
class Factors:
    """What ``factors`` fills for a block of steps and ``step_backward`` consumes per step.

    ``dg`` [s, B, G*N] (cuDNN gate order) holds the factors of d(pre-activation) and becomes it;
    ``dr`` the same for d(R h + bR) (GRU; else ``dg`` itself). ``k`` [s, B, N]: LSTM o*(1-tanh(c)^2),
    GRU unused. ``carry`` [s, B, N]: LSTM f, GRU u, set to 1 past each sequence's end.
    ``unprojected`` [s, B, N]: LSTM, o*tanh(c) (the h before any projection), or None when not needed.
    """

    dg: Array
    dr: Array
    k: Array | None
    carry: Array | None
    unprojected: Array | None


def factors(mode: str, n: int, gates: Array, cell: Array | None, cell_prev: Array | None, rec_n: Array | None,
            h_prev: Array | None, out: Factors, invalid: Array | None, xp: Any) -> None:
    """Fill ``out`` for a block of s steps from the saved activations (vectorised over the block).

    ``gates`` [s, B, G*N] in FORWARD_ORDER; ``cell`` / ``cell_prev`` [s, B, N] c_t and c_{t-1} (LSTM);
    ``rec_n`` [s, B, N] and ``h_prev`` [s, B, P] (GRU); ``invalid`` [s, B, 1] marks padding or is None.
    """
    dg, k, carry = out.dg, out.k, out.carry
    if mode in ("rnn_tanh", "rnn_relu"):
        if mode == "rnn_tanh":
            xp.multiply(gates, gates, out=dg)
            xp.subtract(1, dg, out=dg)
        else:
            xp.greater(gates, 0, out=dg)
    elif mode == "lstm":
        assert k is not None and carry is not None, "an LSTM's factors have k and carry"
        i, f, o, g = (_gate(gates, j, n) for j in range(4))
        da_i, da_f, da_g, da_o = (_gate(dg, j, n) for j in range(4))
        tanh(cell, k, xp)  # tanh(c) for now
        if out.unprojected is not None:
            xp.multiply(o, k, out=out.unprojected)
        xp.subtract(1, o, out=da_o)
        da_o *= o
        da_o *= k
        k *= k
        xp.subtract(1, k, out=k)
        k *= o
        xp.subtract(1, i, out=da_i)
        da_i *= i
        da_i *= g
        xp.subtract(1, f, out=da_f)
        da_f *= f
        da_f *= cell_prev
        xp.multiply(g, g, out=da_g)
        xp.subtract(1, da_g, out=da_g)
        da_g *= i
        carry[...] = f
    else:  # gru
        assert carry is not None, "a GRU's factors have carry"
        r, u, new = (_gate(gates, j, n) for j in range(3))
        da_r, da_u, da_n = (_gate(dg, j, n) for j in range(3))
        xp.multiply(new, new, out=da_n)
        xp.subtract(1, da_n, out=da_n)
        xp.subtract(1, u, out=da_r)  # (1-u) for now
        da_n *= da_r
        xp.subtract(h_prev, new, out=da_u)
        da_r *= u  # u(1-u)
        da_u *= da_r
        xp.subtract(1, r, out=da_r)
        da_r *= r
        da_r *= rec_n
        _gate(out.dr, 2, n)[...] = r
        carry[...] = u
    if invalid is not None:
        xp.copyto(dg, 0, where=invalid)
        if out.dr is not dg:
            xp.copyto(out.dr, 0, where=invalid)
        for array in (k, out.unprojected):
            if array is not None:
                xp.copyto(array, 0, where=invalid)
        if carry is not None:
            xp.copyto(carry, 1, where=invalid)


def unprojected_gradient(dh_total: Array, Proj: Array | None, d_projected: Array | None, invalid: Array | None,
                         ws: Workspace, xp: Any) -> Array:
    """An LSTM step's gradient [B, N] reaching o*tanh(c_t): ``dh_total`` itself, or through the projection
    ``dh_total @ Proj`` (in ``ws.n``), after ``d_projected`` [B, P] <- dh_total (0 past the end: ``invalid``)."""
    if Proj is None:
        return dh_total
    assert d_projected is not None, "a projecting LSTM step has d_projected"
    d_projected[...] = dh_total
    if invalid is not None:
        xp.copyto(d_projected, 0, where=invalid)
    xp.matmul(dh_total, Proj, out=ws.n)
    return ws.n


def step_backward(mode: str, n: int, j: int, f: Factors, R: Array, Proj: Array | None, dh: Array, dy: Array,
                  dc: Array | None, d_projected: Array | None, invalid: Array | None, ws: Workspace,
                  xp: Any) -> None:
    """Backprop step j of a block in place: ``dh`` [B, P] (the gradient from step t+1) becomes
    d h_{t-1}, ``dc`` [B, N] becomes d c_{t-1}; row j of ``f.dg`` / ``f.dr`` becomes d(pre-activation) /
    d(R h + bR). ``dy`` [B, P] is the gradient from above; ``d_projected`` [B, P] receives dh_t when
    the LSTM projects. ``invalid`` [B, 1] (or None) marks rows past their sequence's end."""
    dh_total = ws.p
    xp.add(dh, dy, out=dh_total)
    dg = f.dg[j]
    if mode == "lstm":
        assert f.k is not None and f.carry is not None and dc is not None, "an LSTM step has k, carry and dc"
        dm = unprojected_gradient(dh_total, Proj, d_projected, invalid, ws, xp)
        xp.multiply(dm, f.k[j], out=ws.n2)
        dc += ws.n2
        ifg = dg[:, :3 * n].reshape(dg.shape[0], 3, n)
        xp.multiply(ifg, dc[:, None, :], out=ifg)
        _gate(dg, 3, n)[...] *= dm
        dc *= f.carry[j]
        xp.matmul(dg, R, out=dh)
    elif mode == "gru":
        assert f.carry is not None, "a GRU step has carry"
        dr = f.dr[j]
        da_r, da_u, dn = (_gate(dg, g, n) for g in range(3))
        dn *= dh_total
        da_u *= dh_total
        da_r *= dn
        dr[:, :2 * n] = dg[:, :2 * n]
        _gate(dr, 2, n)[...] *= dn
        xp.matmul(dr, R, out=dh)
        dh_total *= f.carry[j]
        dh += dh_total
        return  # past the end: dr = 0 and carry = 1, so dh_{t-1} = dh_t already
    else:
        dg *= dh_total
        xp.matmul(dg, R, out=dh)
    if invalid is not None:  # past the end the state was carried: so is its gradient
        xp.copyto(dh, dh_total, where=invalid)


def add_product(target: Array, left: Array, right: Array, xp: Any) -> None:
    """target += left @ right (a weight gradient's share of a chunk of steps)."""
    target += left @ right


def backward_recurrent(R: Array, rows: int, xp: Any) -> Array:
    """R [G*N, P] as ``steps_backward`` takes it for a backprop of ``rows`` (T*B) rows: itself (the compiled
    cells' may pack it)."""
    return R


def steps_backward(mode: str, n: int, f: Factors, R: Array, Proj: Array | None, dh: Array, dy: Array,
                   dc: Array | None, d_projected: Array | None, invalid: Array | None, ws: Workspace,
                   xp: Any) -> None:
    """``step_backward`` over the s steps of a block of ``f``, latest first: ``dy`` [s, B, P], ``d_projected``
    [s, B, P] or None, ``invalid`` [s, B, 1] or None; ``dh`` and ``dc`` carry the gradient from step to step."""
    for j in reversed(range(f.dg.shape[0])):
        step_backward(mode, n, j, f, R, Proj, dh, dy[j], dc, None if d_projected is None else d_projected[j],
                      None if invalid is None else invalid[j], ws, xp)
