"""TensorFlow's GRUBlockCell and GRUBlockCellGrad (a reset-*before* GRU, one bias per gate).

Forward (the kernel's formulas, not the published doc's)::

    [r_bar, u_bar] = [x, h_prev] @ w_ru + b_ru        # w_ru [I+H, 2H], columns [r | u]
    r, u = sigmoid(r_bar), sigmoid(u_bar)
    c = tanh([x, h_prev * r] @ w_c + b_c)             # w_c [I+H, H]
    h = u * (h_prev - c) + c

Backward (GRUBlockCellGrad)::

    d_c_bar = d_h * (1 - u) * (1 - c^2)
    d_u_bar = d_h * (h_prev - c) * u * (1 - u)
    [d_x2, d_hr] = d_c_bar @ w_c^T                    # split at I
    d_r_bar = d_hr * h_prev * r * (1 - r)
    [d_x1, d_h1] = [d_r_bar, d_u_bar] @ w_ru^T        # split at I
    d_x = d_x1 + d_x2 ;  d_h_prev = d_h1 + d_hr * r + d_h * u

and the weight gradients TF's python wrapper adds (:func:`gru_block_cell_weight_grads`)::

    d_w_ru = [x, h_prev]^T @ d_r_bar_u_bar ;   d_b_ru = sum_batch(d_r_bar_u_bar)
    d_w_c  = [x, h_prev * r]^T @ d_c_bar ;     d_b_c  = sum_batch(d_c_bar)

The cuDNN GRU of ``cudnn_rnn_v3`` applies the reset after the recurrent matmul and has two
biases per gate: a different function, not a different layout.
"""

from __future__ import annotations

import types

from ._arrays import Array, array_module
from .config import BUILTIN_DTYPES, dtype_name

__all__ = ["gru_block_cell", "gru_block_cell_grad", "gru_block_cell_weight_grads"]


def _validate(arrays: dict[str, Array]) -> types.ModuleType:
    """One kind, one float dtype, exact shapes (every argument's, by name, from B, I, H of x and h_prev); returns
    the module."""
    xp = array_module(**arrays)
    x, h_prev = arrays["x"], arrays["h_prev"]
    for name, value in (("x", x), ("h_prev", h_prev)):
        if value.ndim != 2:
            raise ValueError(f"{name} must be a 2-D array [batch, size]; got shape {tuple(value.shape)}")
    (b, i), h = x.shape, h_prev.shape[1]
    expected_shapes = {"x": (b, i), "h_prev": (b, h), "w_ru": (i + h, 2 * h), "w_c": (i + h, h), "b_ru": (2 * h,),
                       "b_c": (h,), "r": (b, h), "u": (b, h), "c": (b, h), "d_h": (b, h), "d_r_bar_u_bar": (b, 2 * h),
                       "d_c_bar": (b, h)}
    dtype = dtype_name(x.dtype, "x.dtype")
    if dtype not in BUILTIN_DTYPES:  # no float32 compute path here, and NumPy's bfloat16 matmul returns float32
        raise TypeError(f"x.dtype must be one of {BUILTIN_DTYPES} (the cell computes in its arrays' own dtype; cast "
                        f"bfloat16 arrays to float32); got {dtype!r}")
    for name, value in arrays.items():
        if value.dtype != dtype:
            raise TypeError(f"{name} must have the dtype of x ({dtype}); got {value.dtype}")
        expected = expected_shapes[name]
        if tuple(value.shape) != expected:
            raise ValueError(f"{name} must have shape {expected}; got {tuple(value.shape)}")
    return xp


def gru_block_cell(x: Array, h_prev: Array, w_ru: Array, w_c: Array, b_ru: Array, b_c: Array
                   ) -> tuple[Array, Array, Array, Array]:
    """TF's ``GRUBlockCell``: one step of a reset-before GRU.

    All arrays are of one kind (NumPy or CuPy) and one dtype (float16, float32 or float64).

    Args:
        x: [B, I]: the step's input.
        h_prev: [B, H]: the previous hidden state.
        w_ru: [I+H, 2H]: the reset and update gates' kernel, columns ``[r | u]``.
        w_c: [I+H, H]: the candidate's kernel.
        b_ru: [2H]: the reset and update gates' bias.
        b_c: [H]: the candidate's bias.

    Returns:
        (r, u, c, h), each [B, H]: the reset gate, the update gate, the candidate and the new
        hidden state.

    Raises:
        TypeError: arrays of mixed kinds or dtypes, or an unsupported dtype.
        ValueError: a shape that does not fit x's and h_prev's.
    """
    xp = _validate(dict(x=x, h_prev=h_prev, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c))
    h = h_prev.shape[1]
    ru = 0.5 * (1.0 + xp.tanh(0.5 * (xp.concatenate([x, h_prev], axis=1) @ w_ru + b_ru)))  # sigmoid, as tanh
    r, u = ru[:, :h], ru[:, h:]
    c = xp.tanh(xp.concatenate([x, h_prev * r], axis=1) @ w_c + b_c)
    return xp.ascontiguousarray(r), xp.ascontiguousarray(u), c, u * (h_prev - c) + c


def gru_block_cell_grad(x: Array, h_prev: Array, w_ru: Array, w_c: Array, b_ru: Array, b_c: Array, r: Array,
                        u: Array, c: Array, d_h: Array) -> tuple[Array, Array, Array, Array]:
    """TF's ``GRUBlockCellGrad``: the input gradients of one :func:`gru_block_cell` step.

    Arrays, and the errors for them, as :func:`gru_block_cell`'s.

    Args:
        x, h_prev, w_ru, w_c, b_ru, b_c: the forward's arguments.
        r, u, c: the forward's reset gate, update gate and candidate.
        d_h: [B, H]: the gradient of the forward's h.

    Returns:
        (d_x [B, I], d_h_prev [B, H], d_c_bar [B, H], d_r_bar_u_bar [B, 2H]): the gradients of
        x and h_prev, and of the candidate's and the gates' pre-activations.
    """
    xp = _validate(dict(x=x, h_prev=h_prev, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c, r=r, u=u, c=c, d_h=d_h))
    i = x.shape[1]
    d_c_bar = d_h * (1 - u) * (1 - c * c)
    d_u_bar = d_h * (h_prev - c) * u * (1 - u)
    d_xh2 = d_c_bar @ w_c.T
    d_x2, d_hr = d_xh2[:, :i], d_xh2[:, i:]
    d_r_bar = d_hr * h_prev * r * (1 - r)
    d_r_bar_u_bar = xp.concatenate([d_r_bar, d_u_bar], axis=1)
    d_xh1 = d_r_bar_u_bar @ w_ru.T
    d_x = d_xh1[:, :i] + d_x2
    d_h_prev = d_xh1[:, i:] + d_hr * r + d_h * u
    return d_x, d_h_prev, d_c_bar, d_r_bar_u_bar


def gru_block_cell_weight_grads(x: Array, h_prev: Array, r: Array, d_r_bar_u_bar: Array, d_c_bar: Array
                                ) -> tuple[Array, Array, Array, Array]:
    """The weight and bias gradients TF's python gradient of GRUBlockCell computes.

    Arrays, and the errors for them, as :func:`gru_block_cell`'s.

    Args:
        x, h_prev, r: the forward's input, previous hidden state and reset gate.
        d_r_bar_u_bar, d_c_bar: from :func:`gru_block_cell_grad`.

    Returns:
        (d_w_ru [I+H, 2H], d_w_c [I+H, H], d_b_ru [2H], d_b_c [H]).
    """
    xp = _validate(dict(x=x, h_prev=h_prev, r=r, d_r_bar_u_bar=d_r_bar_u_bar, d_c_bar=d_c_bar))
    d_w_ru = xp.concatenate([x, h_prev], axis=1).T @ d_r_bar_u_bar
    d_w_c = xp.concatenate([x, h_prev * r], axis=1).T @ d_c_bar
    return d_w_ru, d_w_c, d_r_bar_u_bar.sum(axis=0), d_c_bar.sum(axis=0)
