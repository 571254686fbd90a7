"""Keras' initialisation of an RNN's params buffer (the layers' default), in cuDNN's layout:
:func:`keras_init_params`, from Keras' :func:`glorot_uniform` and :func:`orthogonal`.

Re-exported by :mod:`cudnn_rnn.layers`, where they are documented.
"""

from __future__ import annotations

import numpy as np

from ..config import RNNConfig, numpy_dtype
from ..layout import params_layout, params_size

__all__ = ["glorot_uniform", "orthogonal", "keras_init_params"]


def glorot_uniform(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    """Keras' ``GlorotUniform`` for a kernel ``[fan_in, fan_out]``: U(-a, a), a = sqrt(6 / (fan_in + fan_out)).

    Args:
        rng: the generator to draw from.
        fan_in: the kernel's rows.
        fan_out: the kernel's columns.

    Returns:
        A float64 [fan_in, fan_out] array.
    """
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out))


def orthogonal(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Keras' ``Orthogonal`` initializer (gain 1) for a ``[rows, cols]`` kernel.

    QR of a standard normal ``[max, min]`` matrix, signs fixed by diag(R) so the result is
    Haar-distributed; transposed when rows < cols.

    Args:
        rng: the generator to draw from.
        rows: the kernel's rows.
        cols: the kernel's columns.

    Returns:
        A float64 [rows, cols] array with orthonormal rows if rows <= cols, orthonormal columns
        otherwise.
    """
    normal = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(normal)
    q *= np.sign(np.diag(r))
    return q.T if rows < cols else q


def keras_init_params(config: RNNConfig, *, seed: int = 0, unit_forget_bias: bool = True) -> np.ndarray:
    """A params buffer initialised as Keras initialises its LSTM/GRU/SimpleRNN layers.

    Per pseudo-layer k (each direction drawn independently, in buffer order), with
    G gates, N units, P = num_proj or N and ``width`` = the layer's input width:

    - input matrices: Keras' stacked kernel ``K_in [width, G*N]`` ~ GlorotUniform with
      fan_in = width, fan_out = G*N; the G cuDNN matrices [N, width] are the column blocks
      of K_in, transposed. Absent for layer 0 under skip_input.
    - recurrent matrices: Keras' stacked ``K_rec [P, G*N]`` ~ Orthogonal, so the stacked
      cuDNN block ``R = K_rec^T [G*N, P]`` has orthonormal columns (R^T R = I_P; for
      relu/tanh, where G*N == P, R is square orthogonal).
    - projection (LSTM with num_proj): TF's kernel ``[N, P]`` ~ GlorotUniform, stored
      transposed as [P, N].
    - biases: zero. With ``unit_forget_bias`` (LSTM only) the forget gate's *recurrent*
      bias bR_f is 1.0 and its input bias bW_f stays 0, as Keras' single LSTM bias maps to
      cuDNN's recurrent bias (input biases zero).

    Draws are made in float64 from ``numpy.random.default_rng(seed mod 2**32)`` and cast to
    ``config.dtype``, so the buffer depends only on (config, seed, unit_forget_bias), not on
    the backend.

    Args:
        config: the configuration of the buffer.
        seed: any int; reduced mod 2**32.
        unit_forget_bias: set an LSTM's forget-gate recurrent bias to 1.0.

    Returns:
        a host NumPy array of ``cudnn_rnn_params_size`` elements and ``config.dtype``.
    """
    params = np.zeros(params_size(config), dtype=np.float64)  # a buffer too big fails here, before the layout
    layout = params_layout(config)
    rng = np.random.default_rng(seed % 2**32)
    g, n, p = config.num_gates, config.num_units, config.state_size
    for k in range(config.num_pseudo_layers):
        w = layout.gate_block(params, k, "input")
        if w is not None:
            w[...] = glorot_uniform(rng, w.shape[1], g * n).T
        layout.gate_block(params, k, "recurrent")[...] = orthogonal(rng, p, g * n).T
        proj = layout.projection(params, k)
        if proj is not None:
            proj[...] = glorot_uniform(rng, n, p).T
        if unit_forget_bias and config.rnn_mode == "lstm":
            forget = layout.entry(k, g + config.mode.gates.index("f"), "bias")
            assert forget is not None, "every pseudo-layer has its recurrent biases"
            layout.view(params, forget)[...] = 1.0
    return params.astype(numpy_dtype(config.dtype))
