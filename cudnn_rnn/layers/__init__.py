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

The classes' base, :class:`RecurrentLayer`, is in ``_recurrent_layer`` (it writes each class's Args from one
table), the arguments' checks in ``_args``, Keras' initialisation in ``_initializers``.
"""

from __future__ import annotations

import types

from .._checks import one_of
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

    Initialisation is Keras' (:func:`cudnn_rnn.layers.keras_init_params`), with ``unit_forget_bias`` on by default.
    """

    modes = ("lstm",)

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, bidirectional: bool = False,
                 num_proj: int = 0, dropout: float = 0.0, input_mode: str = "linear_input", dtype: object = "float32",
                 xp: types.ModuleType | None = None, seed: int = 0, unit_forget_bias: bool = True,
                 algo: str = "standard") -> None:
        super().__init__(input_size, num_units, num_layers, rnn_mode="lstm", bidirectional=bidirectional,
                         num_proj=num_proj, dropout=dropout, input_mode=input_mode, dtype=dtype, xp=xp, seed=seed,
                         unit_forget_bias=unit_forget_bias, algo=algo)


class GRU(RecurrentLayer):
    """Gated recurrent unit, cuDNN's variant (reset applied after the recurrent matmul; Keras reset_after=True).

    Gates r, u, n (cuDNN order)::

        r, u = sigmoid(W_* x_t + bW_* + R_* h_{t-1} + bR_*)
        n = tanh(W_n x_t + bW_n + r * (R_n h_{t-1} + bR_n));   h_t = (1 - u) * n + u * h_{t-1}
    """

    modes = ("gru",)

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, bidirectional: bool = False,
                 dropout: float = 0.0, input_mode: str = "linear_input", dtype: object = "float32",
                 xp: types.ModuleType | None = None, seed: int = 0, algo: str = "standard") -> None:
        super().__init__(input_size, num_units, num_layers, rnn_mode="gru", bidirectional=bidirectional,
                         dropout=dropout, input_mode=input_mode, dtype=dtype, xp=xp, seed=seed, algo=algo)


#: RNN's ``activation`` -> the rnn_mode it names (the first is the default)
_ACTIVATIONS: dict[str, str] = {"tanh": "rnn_tanh", "relu": "rnn_relu"}


class RNN(RecurrentLayer):
    """Plain (Elman) RNN: ``h_t = act(W x_t + bW + R h_{t-1} + bR)`` with act = tanh or relu."""

    modes = tuple(_ACTIVATIONS.values())

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, activation: str = "tanh",
                 bidirectional: bool = False, dropout: float = 0.0, input_mode: str = "linear_input",
                 dtype: object = "float32", xp: types.ModuleType | None = None, seed: int = 0,
                 algo: str = "standard") -> None:
        rnn_mode = _ACTIVATIONS[one_of("activation", activation, _ACTIVATIONS)]
        super().__init__(input_size, num_units, num_layers, rnn_mode=rnn_mode, bidirectional=bidirectional,
                         dropout=dropout, input_mode=input_mode, dtype=dtype, xp=xp, seed=seed, algo=algo)

    @property
    def activation(self) -> str:
        """The activation function, ``"tanh"`` or ``"relu"``."""
        return self.config.rnn_mode.removeprefix("rnn_")

    def _extra_repr(self) -> list[str]:
        return super()._extra_repr() + [f"activation={self.activation!r}"]
