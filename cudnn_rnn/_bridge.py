"""What the framework bridges (``cudnn_rnn.jax``, ``cudnn_rnn.torch``) share: the op on arrays a framework owns.

A bridge traces a call with shapes only, then runs it on NumPy or CuPy views of the framework's
buffers::

    attrs = Attrs(rnn_mode="gru", time_major=False, ...)          the op's attributes, as the caller gave them
    sig = signature(attrs, x.shape, h.shape, None, p.shape, dtype, lengths.shape, lengths.dtype,
                    is_training=True)                             the op's own errors, from shapes alone
    sig.output_shape, sig.output_h_shape, sig.output_c_shape, sig.reserve_elements("cpu" | "cuda")
    outputs = forward(attrs, x, h, c, p, lengths, is_training=True)         -> cudnn_rnn.RNNOutputs
    outputs = forward(..., dropout_rng=rng)                       a module's own dropout RNG, as a layer's
    grads = backward(attrs, x, h, c, p, lengths, y, hy, cy, dy, dhy, dcy, reserve)  -> RNNGradients
    copy_into(framework_buffer, outputs.output)                   results into buffers the framework made
    init_params(config, seed)                                     a layer's initial params buffer

A training forward's reserve_space is sized before any data exists (:meth:`Signature.reserve_elements`
per platform) and travels through the framework's graph as the backward's residual, which is checked as
an array, its header unread (``ops.backprop_from_residual``: on CuPy that would wait for the device).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import _signature
from ._arrays import Array, array_module
from ._checks import flag
from ._signature import PLATFORMS, Shape, Signature
from .config import RNNConfig, check_config
from .layers import keras_init_params
from .ops import DropoutRNG, RNNGradients, RNNOutputs, backprop_from_residual, forward_with_rng

__all__ = ["Attrs", "Signature", "signature", "forward", "backward", "copy_into", "init_params", "PLATFORMS"]


@dataclass(frozen=True)
class Attrs:
    """The op's attributes as the caller gave them (checked by :func:`signature`, as the op checks them)."""

    rnn_mode: str = "lstm"
    input_mode: str = "linear_input"
    direction: str = "unidirectional"
    dropout: float = 0.0
    seed: int = 0
    seed2: int = 0
    num_proj: int = 0
    time_major: bool = True
    algo: str = "standard"

    def op_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``cudnn_rnn_v3`` / ``cudnn_rnn_backprop_v3`` (``is_training`` aside)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    @property
    def has_cell(self) -> bool:
        """Whether the call carries a cell state (``input_c``, ``output_c``): LSTM."""
        return self.rnn_mode == "lstm"


def signature(attrs: Attrs, input_shape: Shape | None, input_h_shape: Shape | None, input_c_shape: Shape | None,
              params_shape: Shape | None, dtype: object, lengths_shape: Shape | None = None,
              lengths_dtype: object = None, *, is_training: bool = True,
              dtypes: Mapping[str, object] | None = None) -> Signature:
    """:func:`cudnn_rnn._signature.signature` with ``attrs``, then ``is_training`` checked (the op's order).

    A None shape is an array given as None; ``dtypes`` names the dtypes of input_h, input_c and
    params where they may differ from the input's. Raises the op's TypeError/ValueError.
    """
    sig = _signature.signature(input_shape, input_h_shape, input_c_shape, params_shape, dtype, lengths_shape,
                               lengths_dtype, dtypes=dtypes, **attrs.op_kwargs())
    flag("is_training", is_training)
    return sig


def forward(attrs: Attrs, input: Array, input_h: Array, input_c: Array | None, params: Array,
            sequence_lengths: Array | None, *, is_training: bool, dropout_rng: DropoutRNG | None = None
            ) -> RNNOutputs:
    """:func:`cudnn_rnn.cudnn_rnn_v3` with ``attrs`` (NumPy: reference backend; CuPy: cuDNN on the current stream).

    ``dropout_rng``: a module's own dropout RNG, as a layer's (``ops.forward_with_rng``).
    """
    return forward_with_rng(input, input_h, input_c, params, sequence_lengths, dropout_rng,
                            is_training=is_training, **attrs.op_kwargs())


def backward(attrs: Attrs, input: Array, input_h: Array, input_c: Array | None, params: Array,
             sequence_lengths: Array | None, output: Array, output_h: Array, output_c: Array | None,
             output_backprop: Array | None, output_h_backprop: Array | None, output_c_backprop: Array | None,
             reserve_space: Array) -> RNNGradients:
    """The gradients of :func:`forward` from its residual ``reserve_space`` (see the module docstring).

    Upstream gradients None mean zeros; output_c and output_c_backprop are ignored for non-LSTM modes.
    """
    cell = attrs.has_cell
    return backprop_from_residual(input, input_h, input_c if cell else None, params, sequence_lengths, output,
                                  output_h, output_c if cell else None, output_backprop, output_h_backprop,
                                  output_c_backprop if cell else None, reserve_space, **attrs.op_kwargs())


def copy_into(destination: Array, source: Array) -> None:
    """Copy an op result into a buffer the framework made; a 1-D reserve_space fills the front of a longer one."""
    array_module(destination=destination, source=source)  # both of one kind
    if destination.shape == source.shape:
        destination[...] = source
        return
    if destination.ndim == source.ndim == 1 and destination.shape[0] >= source.shape[0]:
        destination[:source.shape[0]] = source
        return
    raise ValueError(f"the framework's buffer has shape {tuple(destination.shape)}, the result "
                     f"{tuple(source.shape)}: the call was traced for another platform or shapes")


def init_params(config: RNNConfig, seed: int = 0) -> np.ndarray:
    """The params buffer the layer classes start from with ``seed`` (LSTM: forget-gate bias 1, as ``cudnn_rnn.LSTM``).

    Returns a host array [params_size] of ``config.dtype``.
    """
    check_config(config)
    config.replace(seed=seed)  # refuses what a layer's seed refuses, in its words
    return keras_init_params(config, seed=seed, unit_forget_bias=config.has_cell)
