"""Keras' initialisation of an RNN's params buffer (the layers' default), in cuDNN's layout:
:func:`keras_init_params`, from Keras' :func:`glorot_uniform` and :func:`orthogonal`.

Re-exported by :mod:`cudnn_rnn.layers`, where they are documented.
"""

from __future__ import annotations

import numpy as np

from ..config import RNNConfig, numpy_dtype
from ..layout import PROJECTION_ID, ParamsLayout, params_layout, params_size

__all__ = ["glorot_uniform", "orthogonal", "keras_init_params"]


def glorot_uniform(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    """Keras' ``GlorotUniform`` for a kernel ``[fan_in, fan_out]``, drawn from ``rng`` in float64:
    U(-a, a), a = sqrt(6 / (fan_in + fan_out))."""
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out))


def orthogonal(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Keras' ``Orthogonal`` initializer (gain 1) for a ``[rows, cols]`` kernel, drawn from ``rng`` in float64.

    QR of a standard normal ``[max, min]`` matrix, signs fixed by diag(R) so the result is
    Haar-distributed; transposed when rows < cols: orthonormal rows if rows <= cols, orthonormal
    columns otherwise.
    """
    return _orthonormal(rng.standard_normal((max(rows, cols), min(rows, cols))), rows, cols)


def _orthonormal(normal: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """:func:`orthogonal` of its standard normal draws ``normal`` [..., max(rows, cols), min(rows, cols)], for one
    kernel or a stack of them: the [..., rows, cols] kernels."""
    q, r = np.linalg.qr(normal)
    q *= np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
    return np.swapaxes(q, -1, -2) if rows < cols else q


#: float64 elements of the recurrent kernels' draws stacked for a batch of pseudo-layers (:func:`_draw`), which bounds
#: the initialiser's temporaries to a few MiB besides the buffer (or a few times one recurrent kernel, where more)
_BATCH_ELEMENTS = 2**17


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

    Draws are made in float64 from ``numpy.random.default_rng(seed mod 2**32)``, in that order,
    and cast to ``config.dtype`` as they are written into the buffer, so the buffer depends only
    on (config, seed, unit_forget_bias), not on the backend. Besides the buffer, the temporaries
    are those of a batch of pseudo-layers' draws (a few MiB), however many layers there are.

    Args:
        config: the configuration of the buffer.
        seed: any int; reduced mod 2**32.
        unit_forget_bias: set an LSTM's forget-gate recurrent bias to 1.0.

    Returns:
        a host NumPy array of ``cudnn_rnn_params_size`` elements and ``config.dtype``.

    Raises:
        MemoryError: the buffer cannot be allocated (NumPy's refusal, before anything is drawn).
    """
    params = np.zeros(params_size(config), dtype=numpy_dtype(config.dtype))  # too big fails here, before any draw
    layout = params_layout(config)
    rng = np.random.default_rng(seed % 2**32)
    g = config.num_gates
    for run in layout.runs():
        batch = max(1, _BATCH_ELEMENTS // layout.stack(params, run[:1], g, count=g).size)
        for start in range(run.start, run.stop, batch):
            _draw(rng, layout, params, range(start, min(start + batch, run.stop)))
        if unit_forget_bias and config.rnn_mode == "lstm":
            layout.stack(params, run, g + config.mode.gates.index("f"), "bias")[...] = 1.0
    return params


def _draw(rng: np.random.Generator, layout: ParamsLayout, params: np.ndarray, pseudo_layers: range) -> None:
    """Draw the matrices of ``pseudo_layers`` (consecutive, inside one of ``layout.runs()``) into ``params``.

    Each pseudo-layer's draws come in :func:`keras_init_params`' order, one pseudo-layer after the
    other, as if each were drawn alone: its input and projection kernels go into the buffer as they are
    drawn, its recurrent kernel's normal draws into a stack whose QR decompositions run as one call.
    """
    g = layout.config.num_gates
    inputs = layout.stack(params, pseudo_layers, 0, count=g)  # [B, G*N, width], None under skip_input
    recurrent = layout.stack(params, pseudo_layers, g, count=g)  # [B, G*N, P]
    projections = layout.stack(params, pseudo_layers, PROJECTION_ID)  # [B, P, N], None without projection
    gn, p = recurrent.shape[1:]
    normals = np.empty((len(pseudo_layers), max(p, gn), min(p, gn)))  # orthogonal(rng, p, gn)'s draws, stacked
    for j in range(len(pseudo_layers)):
        if inputs is not None:
            inputs[j] = glorot_uniform(rng, inputs.shape[2], gn).T
        rng.standard_normal(out=normals[j])
        if projections is not None:
            projections[j] = glorot_uniform(rng, projections.shape[2], p).T
    recurrent[...] = np.swapaxes(_orthonormal(normals, p, gn), 1, 2)
