"""What the framework bridges (``cudnn_rnn.jax``, ``cudnn_rnn.torch``) share: the op on arrays a framework owns.

A bridge traces a call with shapes only, then runs it on NumPy or CuPy views of the framework's
buffers, with the one validated config the trace made::

    sig = signature(x.shape, h.shape, None, p.shape, dtype, lengths.shape, lengths.dtype, rnn_mode="gru",
                    time_major=False, ..., is_training=True)    the op's own errors, from shapes and keywords
    sig.config, sig.output_shape, ..., sig.reserve_elements("cpu" | "cuda")
    outputs = forward(sig.config, x, h, c, p, lengths, time_major=..., is_training=True)   -> RNNOutputs
    outputs = forward(..., dropout_rng=rng, out={"output": buffer, ...})   a module's RNG; results written into
                                                                           the framework's buffers
    grads = backward(sig.config, x, h, c, p, lengths, y, hy, cy, dy, dhy, dcy, reserve, time_major=...,
                     params_grad=zeroed_buffer, out={...})            -> RNNGradients
    init_params(config, seed)                                     a layer's initial params buffer

A call's shapes are held to its config every time it runs (``_signature.check``). A training forward's
reserve_space is sized before any data exists (:meth:`Signature.reserve_elements` per platform) and travels
through the framework's graph as the backward's residual, which is checked as an array, its header unread
(``ops.backprop``'s ``from_residual``: on CuPy that would wait for the device).
"""

from __future__ import annotations

import functools

import numpy as np

from ._signature import PLATFORMS, Signature
from .config import RNNConfig, check_config
from .layers import keras_init_params

# each ``as`` marks a name the bridges take from here
from ._signature import signature as signature
from .ops import backprop, forward_with_rng as forward

#: ``ops.backprop`` of a reserve_space that is the bridge's own forward's residual (its header unread)
backward = functools.partial(backprop, from_residual=True)

__all__ = ["Signature", "signature", "forward", "backward", "init_params", "PLATFORMS"]


def init_params(config: RNNConfig, seed: int = 0) -> np.ndarray:
    """The params buffer the layer classes start from with ``seed`` (LSTM: forget-gate bias 1, as ``cudnn_rnn.LSTM``).

    Returns a host array [params_size] of ``config.dtype``.
    """
    check_config(config)
    config.replace(seed=seed)  # refuses what a layer's seed refuses, in its words
    return keras_init_params(config, seed=seed, unit_forget_bias=config.has_cell)
