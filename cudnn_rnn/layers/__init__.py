"""Layer classes for training: :class:`LSTM`, :class:`GRU` and :class:`RNN`.

A layer owns ONE flat ``params`` buffer in cuDNN's layout (see :mod:`cudnn_rnn.layout`) and a
same-shaped ``grad`` buffer, and runs the functional ops :func:`cudnn_rnn.cudnn_rnn_v3` /
:func:`cudnn_rnn.cudnn_rnn_backprop_v3` on the backend its array module picks. Per-matrix access
is through views (:meth:`RecurrentLayer.weights`), so an optimiser only ever sees one buffer.

Shapes (L layers, D directions, B batch, T max length, I input size, N num_units,
P = num_proj or N)::

    x, dx      [B, T, I]      ([T, B, I] with time_major=True)
    y, dy      [B, T, D*P]    ([T, B, D*P])
    h0, h, dh  [B, L*D, P]    ([L*D, B, P])      states follow the op's layout
    c0, c, dc  [B, L*D, N]    ([L*D, B, N])      LSTM only; None for GRU and RNN

A typical step (``layer(x, ...)`` is ``layer.forward(x, ...)``)::

    layer = LSTM(input_size=16, num_units=64, num_layers=2, dropout=0.1)
    y, h, c = layer.forward(x, lengths)          # keeps what backward needs
    dx, dh0, dc0 = layer.backward(dy)            # ADDS d loss / d params into layer.grad
    optimiser.step([layer.grad]); layer.zero_grad()

The package: the three classes here; their base, :class:`RecurrentLayer`, in ``_recurrent_layer``, with
one constructor for all (its arguments and their docs: ``_constructor``; their checks: ``_args``); Keras'
initialisation in ``_initializers``. This module exports the base and the initialisers with the classes.
"""

from __future__ import annotations

from ._constructor import ModeArgument
from ._initializers import glorot_uniform, keras_init_params, orthogonal
from ._recurrent_layer import RecurrentLayer

# what cudnn_rnn.torch's modules share with the layers besides __all__ (each ``as`` marks a name exported from here)
from ._args import ArgumentCheck as ArgumentCheck
from ._recurrent_layer import SEED2_PERIOD as SEED2_PERIOD, constructor_arguments as constructor_arguments
# how the package hands the layers its model-file reader, for the refusal of a model file given to ``load``
from ._model_files import HeldRNN as HeldRNN, read_model_files_with as read_model_files_with

__all__ = ["RecurrentLayer", "LSTM", "GRU", "RNN", "keras_init_params", "orthogonal", "glorot_uniform"]


class LSTM(RecurrentLayer):
    """Long short-term memory, cuDNN's (and TF's CudnnLSTM) variant, optionally with projection.

    Gates i, f, g, o (cuDNN order)::

        i, f, o = sigmoid(W_* x_t + bW_* + R_* h_{t-1} + bR_*);  g = tanh(W_g x_t + bW_g + R_g h_{t-1} + bR_g)
        c_t = f * c_{t-1} + i * g;   h_t = o * tanh(c_t);   with num_proj: h_t <- P h_t  ([P, N])

    Initialisation is Keras' (:func:`cudnn_rnn.layers.keras_init_params`; ``unit_forget_bias`` below).
    """

    modes = ("lstm",)
    _defaults = {"unit_forget_bias": True}


class GRU(RecurrentLayer):
    """Gated recurrent unit, cuDNN's variant (reset applied after the recurrent matmul; Keras reset_after=True).

    Gates r, u, n (cuDNN order)::

        r, u = sigmoid(W_* x_t + bW_* + R_* h_{t-1} + bR_*)
        n = tanh(W_n x_t + bW_n + r * (R_n h_{t-1} + bR_n));   h_t = (1 - u) * n + u * h_{t-1}
    """

    modes = ("gru",)


class RNN(RecurrentLayer):
    """Plain (Elman) RNN: ``h_t = act(W x_t + bW + R h_{t-1} + bR)`` with act = tanh or relu."""

    modes = ("rnn_tanh", "rnn_relu")
    _mode_argument = ModeArgument("activation", {mode.removeprefix("rnn_"): mode for mode in modes},
                                 '``"tanh"`` (rnn_mode ``"rnn_tanh"``) or ``"relu"`` (``"rnn_relu"``).')

    @property
    def activation(self) -> str:
        """The activation function, ``"tanh"`` or ``"relu"``."""
        return self.config.rnn_mode.removeprefix("rnn_")

    def _extra_repr(self) -> list[str]:
        return super()._extra_repr() + [f"activation={self.activation!r}"]
