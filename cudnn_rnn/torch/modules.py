"""The layer classes as ``torch.nn.Module``s: :class:`LSTM`, :class:`GRU` and :class:`RNN`.

Each module holds one ``nn.Parameter``, ``params``: the opaque buffer in cuDNN's layout (see
:mod:`cudnn_rnn.layout`), initialised as :class:`cudnn_rnn.LSTM` (etc.) initialises it with the
same seed; and one buffer, ``step``, the number of training forwards so far, which is the dropout
``seed2`` of the next one (as a layer's ``step``). On cuDNN its dropout masks come from the
module's own RNG, as a layer's: seeded from (seed, step) at the first training forward on a GPU,
then advancing, with no set-up of cuDNN's dropout state at every step. Shapes (L layers, D directions, B batch, T max
length, I input size, N num_units, P = num_proj or N)::

    x           [B, T, I]      ([T, B, I] with time_major=True)
    y           [B, T, D*P]    ([T, B, D*P])
    h0, h       [B, L*D, P]    ([L*D, B, P])      states follow the layout of x
    c0, c       [B, L*D, N]    ([L*D, B, N])      LSTM only; None for GRU and RNN

::

    lstm = LSTM(input_size=16, num_units=64, num_layers=2, dropout=0.1)
    y, h, c = lstm(x, lengths)             # autograd through cudnn_rnn's backprop
    lstm.to("cuda"); lstm.double()         # cuDNN on CUDA tensors; the dtype follows params
    layer = lstm.to_layer()                # a cudnn_rnn.LSTM (params copied; step, dropout RNG kept); from_layer back
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from .. import layers
from .._arrays import Array, beside
from .._checks import flag
from .._layer_args import ArgumentCheck
from .._recurrent_layer import RecurrentLayer, constructor_arguments
from ..config import DTYPES, RNNConfig
from ._op import DropoutState, numpy_dtype_of, rnn, to_array, to_tensor

__all__ = ["LSTM", "GRU", "RNN"]

#: seed2 (the step counter) stays a non-negative C int, as a layer's
_SEED2_PERIOD = 2**31

_Module = TypeVar("_Module", bound="_RecurrentModule")


@dataclass(frozen=True)
class _TensorCheck(ArgumentCheck):
    """A layer's argument checks (messages in the layer's terms) on tensors beside a module's params."""

    device: torch.device = torch.device("cpu")

    def _array(self, name: str, value: object, layout: str) -> Any:
        if not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor {layout}; got {type(value).__name__}")
        if value.device != self.device:
            raise TypeError(f"{name} is on {value.device} but this module's params are on {self.device}: move "
                            f"{name} there ({name}.to({str(self.device)!r})), or the module")
        dtype = numpy_dtype_of(value.dtype)
        if dtype != self.config.dtype:
            rebuild = (f", or the module (module.to(torch.{dtype}))" if dtype in DTYPES
                       else f" (a module's dtype is one of {DTYPES})")
            raise TypeError(f"{name} has dtype {value.dtype} but this module's dtype is {self.config.dtype}: cast "
                            f"it ({name}.to(torch.{self.config.dtype})){rebuild}")
        return value

    def tensor_lengths(self, lengths: object, batch: int, max_time: int) -> Optional[Tensor]:
        """:meth:`lengths` for a list or a tensor; returns None or int32/int64 [B] (a list becomes a CPU tensor).

        CPU tensors have their values checked here; CUDA lengths by the op, which reads them back.
        """
        if not isinstance(lengths, Tensor):
            checked = self.lengths(lengths, batch, max_time)
            return None if checked is None else torch.from_numpy(checked)
        if lengths.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"lengths must be a list of ints or an int32/int64 tensor; got a tensor of dtype "
                            f"{lengths.dtype}")
        if lengths.device.type == "cpu":
            self.lengths(lengths.numpy(), batch, max_time)
        else:  # the shape alone, on a stand-in of the shape
            self.lengths(np.broadcast_to(np.zeros((), np.int32), tuple(lengths.shape)), batch, max_time)
        return lengths


class _RecurrentModule(nn.Module):
    """The base of :class:`LSTM`, :class:`GRU` and :class:`RNN`: one params buffer, a step counter, the op.

    Attributes:
        params: ``nn.Parameter`` [params_size] in cuDNN's layout; its dtype is the module's.
        step: int64 buffer (0-d): training forwards so far, the dropout seed2 of the next one. It
            stays in host memory whichever device the module moves to (``.to``, ``.cuda``), so that
            the kernel reads it without waiting for a GPU.
    """

    #: the library's layer class of the same kind
    layer_class: ClassVar[type[RecurrentLayer]]
    #: rnn_mode -> the module class that holds it
    _classes: ClassVar[dict[str, type["_RecurrentModule"]]] = {}

    params: nn.Parameter
    step: Tensor

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for mode in cls.layer_class.modes:
            _RecurrentModule._classes.setdefault(mode, cls)

    def _setup(self, config: RNNConfig, params: Tensor, step: int, dropout_rng: Optional[dict[str, Any]] = None
               ) -> None:
        nn.Module.__init__(self)
        self._config = config
        self._configs: dict[torch.dtype, RNNConfig] = {params.dtype: config}
        self.params = nn.Parameter(params)
        self.register_buffer("step", torch.tensor(step, dtype=torch.int64))
        self._dropout = DropoutState(dropout_rng)

    def _apply(self, fn: Any, recurse: bool = True) -> "_RecurrentModule":
        """``nn.Module._apply`` (``.to``, ``.cuda``, ``.double``, ...), the step counter left in host memory."""
        step = self.step
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        self._buffers["step"] = step
        return self

    def _setup_from(self, layer: RecurrentLayer, params: Optional[Array] = None) -> None:
        """Hold ``layer``'s config, step and dropout RNG state, and ``params`` (by default the layer's own buffer)."""
        params = layer.params if params is None else params
        self._setup(layer.config, to_tensor(params), layer.step, layer.state_dict()["dropout_rng"])

    @property
    def config(self) -> RNNConfig:
        """The configuration, its ``dtype`` that of ``params`` now (after ``.double()`` and alike)."""
        dtype = self.params.dtype
        if dtype not in self._configs:
            self._configs[dtype] = self._config.replace(dtype=numpy_dtype_of(dtype))
        return self._configs[dtype]

    # -- forward --------------------------------------------------------------------------------------
    def _checked_lengths(self, x: Tensor, lengths: object, h0: Optional[Tensor], c0: Optional[Tensor],
                         time_major: bool) -> Optional[Tensor]:
        """Check the arguments in the layer's terms; returns ``lengths`` as a tensor (or None)."""
        config = self.config
        check = _TensorCheck(config, np, self.params.device)
        time_major = flag("time_major", time_major)
        batch, max_time = check.input(x, time_major)
        if not config.has_cell and c0 is not None:
            raise ValueError(f"c0 is only for LSTM; this layer is {config.rnn_mode!r}, so c0 must be None")
        check.state("h0", h0, batch, time_major)
        check.state("c0", c0, batch, time_major)
        return check.tensor_lengths(lengths, batch, max_time)

    def forward(self, x: Tensor, lengths: Tensor | Sequence[int] | None = None, h0: Optional[Tensor] = None,
                c0: Optional[Tensor] = None, *, time_major: bool = False) -> tuple[Tensor, Tensor, Optional[Tensor]]:
        """Run the RNN over a batch of sequences.

        In training mode (``module.train()``) dropout acts with seed = ``config.seed`` and seed2 =
        ``step``, and ``step`` += 1, as a layer's training forward on NumPy. In eval mode there is
        no dropout and ``step`` stays; an eval-mode forward whose result needs a gradient still
        keeps what the backward needs.

        Args:
            x: [B, T, I] ([T, B, I] if time_major), the module's dtype and device.
            lengths: None (every sequence has length T), or [B] ints in [0, T]: a list or an
                int32/int64 tensor (best on the CPU: CUDA lengths are read back); outputs past a
                sequence's length are 0.
            h0: initial hidden states [B, L*D, P] ([L*D, B, P]); None means zeros.
            c0: initial cell states [B, L*D, N] ([L*D, B, N]) for LSTM; None means zeros.
            time_major: the layout of x, y and the states.

        Returns:
            (y [B, T, D*P], h [B, L*D, P], c [B, L*D, N] or None for GRU/RNN) ([T, B, D*P],
            [L*D, B, P], [L*D, B, N] with time_major): the output sequence and each sequence's
            final states.

        Raises:
            TypeError: ``x``, ``h0`` or ``c0`` is not a tensor of this module's device and dtype;
                ``lengths`` is neither a list of ints nor an int32/int64 tensor; ``time_major`` is
                not a bool.
            ValueError: as a layer's forward (:meth:`cudnn_rnn.layers.RecurrentLayer.forward`),
                in the layer's terms.
        """
        config = self._config
        if not torch.compiler.is_compiling():  # compiled code is checked by the op as it is traced
            lengths = self._checked_lengths(x, lengths, h0, c0, time_major)
        elif lengths is not None and not isinstance(lengths, Tensor):
            lengths = torch.tensor(list(lengths), dtype=torch.int32)
        batch = x.shape[1] if time_major else x.shape[0]
        pseudo_layers = config.num_pseudo_layers
        state = (pseudo_layers, batch) if time_major else (batch, pseudo_layers)
        if h0 is None:
            h0 = x.new_zeros((*state, config.state_size))
        if c0 is None and config.has_cell:
            c0 = x.new_zeros((*state, config.num_units))
        needs_grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, h0, c0, self.params))
        dropout, step = 0.0, None
        if self.training:
            dropout = config.dropout
            if config.inter_layer_dropout:  # a fresh tensor: the counter moves on below
                step = torch.remainder(self.step, _SEED2_PERIOD)
            self.step.add_(1)
        y, h, c, _ = rnn(x, h0, c0 if config.has_cell else None, self.params,
                         lengths if isinstance(lengths, Tensor) else None, step, config.rnn_mode,
                         config.input_mode, config.direction, dropout, config.seed, 0, config.num_proj,
                         self.training or needs_grad, time_major, config.algo, self._dropout.key)
        return y, h, (c if config.has_cell else None)

    # -- to and from the library's layers --------------------------------------------------------------
    @classmethod
    def from_layer(cls: type[_Module], layer: RecurrentLayer) -> _Module:
        """A module holding a copy of ``layer``'s params (NumPy: a CPU tensor; CuPy: CUDA), its config and step.

        ``RNN.from_layer`` (etc.) takes the library's layer of the same kind only.

        Raises:
            TypeError: ``layer`` is not a :class:`cudnn_rnn.layers.RecurrentLayer`.
            ValueError: ``layer`` is of another kind than ``cls`` holds.
        """
        if not isinstance(layer, RecurrentLayer):
            raise TypeError(f"layer must be a cudnn_rnn layer (LSTM, GRU or RNN); got {type(layer).__name__}")
        target = _RecurrentModule._classes[layer.config.rnn_mode]
        if not issubclass(target, cls):
            raise ValueError(f"layer is a {type(layer).__name__} (rnn_mode={layer.config.rnn_mode!r}); "
                             f"{cls.__name__}.from_layer cannot hold it (use {target.__name__}.from_layer)")
        module = target.__new__(target)
        with beside(layer.params):  # a CuPy copy on the layer's own GPU
            params = layer.params.copy()
        module._setup_from(layer, params)
        assert isinstance(module, cls)
        return module

    def to_layer(self) -> RecurrentLayer:
        """The library's layer of this kind holding a copy of ``params`` (CPU: NumPy; CUDA: CuPy), config, step and
        dropout RNG state."""
        layer = RecurrentLayer.from_params(to_array(self.params), self.config, step=int(self.step.item()))
        rng_state = self._dropout.rng.state()
        if rng_state is not None:  # a module trained with dropout on cuDNN: the layer draws the masks that follow
            layer.load_state_dict({**layer.state_dict(), "dropout_rng": rng_state})
        return layer

    def extra_repr(self) -> str:
        return ", ".join(constructor_arguments(self.config))


def _dtype(dtype: object) -> object:
    """A PyTorch dtype as the library's name; anything else as it is (the layer checks it)."""
    return numpy_dtype_of(dtype) if isinstance(dtype, torch.dtype) else dtype


class LSTM(_RecurrentModule):
    """Long short-term memory, cuDNN's (and TF's CudnnLSTM) variant, optionally with projection, as an ``nn.Module``.

    Gates i, f, g, o (cuDNN order)::

        i, f, o = sigmoid(W_* x_t + bW_* + R_* h_{t-1} + bR_*);  g = tanh(W_g x_t + bW_g + R_g h_{t-1} + bR_g)
        c_t = f * c_{t-1} + i * g;   h_t = o * tanh(c_t);   with num_proj: h_t <- P h_t  ([P, N])

    The arguments, initialisation and errors are :class:`cudnn_rnn.LSTM`'s; ``dtype`` may also be a
    PyTorch dtype. The module starts on the CPU (``.to("cuda")`` moves it).

    Args:
        input_size: I, the width of each input step.
        num_units: N, the width of the cell state.
        num_layers: L, the number of stacked layers.
        bidirectional: D = 2 if True.
        num_proj: P < N to project the emitted state (0: none).
        dropout: in [0, 1), on the outputs of every layer but the last, while training.
        input_mode: ``"linear_input"``, ``"skip_input"`` (needs I == N) or ``"auto_select"``.
        dtype: ``"float16"``, ``"float32"``, ``"float64"`` or ``"bfloat16"`` (or that NumPy or PyTorch dtype).
        seed: initialisation and dropout seed (a C int).
        unit_forget_bias: put 1.0 in the forget gate's recurrent bias bR_f (bW_f stays 0).
        algo: cuDNN's algorithm (see :data:`cudnn_rnn.config.ALGOS`); the same math whichever runs.
    """

    layer_class = layers.LSTM

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, bidirectional: bool = False,
                 num_proj: int = 0, dropout: float = 0.0, input_mode: str = "linear_input", dtype: object = "float32",
                 seed: int = 0, unit_forget_bias: bool = True, algo: str = "standard") -> None:
        self._setup_from(layers.LSTM(input_size, num_units, num_layers, bidirectional=bidirectional, num_proj=num_proj,
                                     dropout=dropout, input_mode=input_mode, dtype=_dtype(dtype), seed=seed,
                                     unit_forget_bias=unit_forget_bias, algo=algo))


class GRU(_RecurrentModule):
    """Gated recurrent unit, cuDNN's variant (reset after the recurrent matmul), as an ``nn.Module``.

    Gates r, u, n (cuDNN order)::

        r, u = sigmoid(W_* x_t + bW_* + R_* h_{t-1} + bR_*)
        n = tanh(W_n x_t + bW_n + r * (R_n h_{t-1} + bR_n));   h_t = (1 - u) * n + u * h_{t-1}

    The arguments, initialisation and errors are :class:`cudnn_rnn.GRU`'s (see :class:`LSTM`).

    Args:
        input_size: I, the width of each input step.
        num_units: N, the width of the state.
        num_layers: L, the number of stacked layers.
        bidirectional: D = 2 if True.
        dropout: in [0, 1), on the outputs of every layer but the last, while training.
        input_mode: ``"linear_input"``, ``"skip_input"`` (needs I == N) or ``"auto_select"``.
        dtype: ``"float16"``, ``"float32"``, ``"float64"`` or ``"bfloat16"`` (or that NumPy or PyTorch dtype).
        seed: initialisation and dropout seed (a C int).
        algo: cuDNN's algorithm (see :data:`cudnn_rnn.config.ALGOS`); the same math whichever runs.
    """

    layer_class = layers.GRU

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, bidirectional: bool = False,
                 dropout: float = 0.0, input_mode: str = "linear_input", dtype: object = "float32", seed: int = 0,
                 algo: str = "standard") -> None:
        self._setup_from(layers.GRU(input_size, num_units, num_layers, bidirectional=bidirectional, dropout=dropout,
                                    input_mode=input_mode, dtype=_dtype(dtype), seed=seed, algo=algo))


class RNN(_RecurrentModule):
    """Plain (Elman) RNN, ``h_t = act(W x_t + bW + R h_{t-1} + bR)`` with act = tanh or relu, as an ``nn.Module``.

    The arguments, initialisation and errors are :class:`cudnn_rnn.RNN`'s (see :class:`LSTM`).

    Args:
        input_size: I, the width of each input step.
        num_units: N, the width of the state.
        num_layers: L, the number of stacked layers.
        activation: ``"tanh"`` (rnn_mode ``"rnn_tanh"``) or ``"relu"`` (``"rnn_relu"``).
        bidirectional: D = 2 if True.
        dropout: in [0, 1), on the outputs of every layer but the last, while training.
        input_mode: ``"linear_input"``, ``"skip_input"`` (needs I == N) or ``"auto_select"``.
        dtype: ``"float16"``, ``"float32"``, ``"float64"`` or ``"bfloat16"`` (or that NumPy or PyTorch dtype).
        seed: initialisation and dropout seed (a C int).
        algo: cuDNN's algorithm (see :data:`cudnn_rnn.config.ALGOS`); the same math whichever runs.
    """

    layer_class = layers.RNN

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, activation: str = "tanh",
                 bidirectional: bool = False, dropout: float = 0.0, input_mode: str = "linear_input",
                 dtype: object = "float32", seed: int = 0, algo: str = "standard") -> None:
        self._setup_from(layers.RNN(input_size, num_units, num_layers, activation=activation,
                                    bidirectional=bidirectional, dropout=dropout, input_mode=input_mode,
                                    dtype=_dtype(dtype), seed=seed, algo=algo))

    @property
    def activation(self) -> str:
        """The activation function, ``"tanh"`` or ``"relu"``."""
        return "relu" if self._config.rnn_mode == "rnn_relu" else "tanh"

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation!r}"
