"""The library's layers as ``torch.nn.Module``s: :class:`LSTM`, :class:`GRU` and :class:`RNN`, each with one
``nn.Parameter``, ``params`` (cuDNN's layout), and a buffer, ``step`` (training forwards so far, the dropout
seed2 of the next). Shapes (``time_major=True`` swaps the first two axes of each), P = num_proj or N::

    x [B, T, I] -> y [B, T, D*P]   h0, h [B, L*D, P]   c0, c [B, L*D, N] (LSTM; None otherwise)

``LSTM.from_torch(nn_lstm)`` (and GRU's, RNN's) builds one from PyTorch's ``nn.LSTM``/``nn.GRU``/``nn.RNN``,
with its weights and its layout (``time_major = not batch_first``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from .. import layers
from .._arrays import Array, beside
from .._checks import MAX_COUNT, checked_count, flag
from ..config import DTYPES, RNNConfig, numpy_dtype
from ..formats.torch import MODULE_CLASSES, TENSOR_NAMES, module_fields
from ..layers import SEED2_PERIOD, ArgumentCheck, RecurrentLayer, constructor_arguments
from ._op import DropoutState, check_step, numpy_dtype_of, rnn, to_array, to_tensor

__all__ = ["LSTM", "GRU", "RNN"]

_Module = TypeVar("_Module", bound="_RecurrentModule")


@dataclass(frozen=True)
class _TensorCheck(ArgumentCheck):
    """A layer's argument checks (messages in the layer's terms) on tensors beside a module's params."""

    device: torch.device = torch.device("cpu")

    def swap_axes(self, name: str) -> str:
        return f"{name}.transpose(0, 1)"

    def _array(self, name: str, value: object, layout: str) -> Any:
        if not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor {layout}; got {type(value).__name__}")
        if value.device != self.device:
            raise TypeError(f"{name} is on {value.device} but this module's params are on {self.device}: move "
                            f"{name} there ({name}.to({str(self.device)!r})), or the module")
        if (dtype := numpy_dtype_of(value.dtype)) != self.config.dtype:
            rebuild = f", or the module (module.to(torch.{dtype}))" if dtype in DTYPES else ""
            raise TypeError(f"{name} has dtype {value.dtype} but this module's dtype is {self.config.dtype}: cast "
                            f"it ({name}.to(torch.{self.config.dtype})){rebuild}")
        return value


class _RecurrentModule(nn.Module):
    """The modules' base: a subclass names its layer class (``layer=layers.LSTM``) and has its constructor less
    ``xp`` (``dtype`` may be a PyTorch dtype). ``step`` (int64, 0-d, in [0, 2**63): ``load_state_dict`` refuses
    others, a training forward at 2**63 - 1 raises) stays in host memory, so the kernel reads it without a wait.
    ``time_major`` (False, batch-major, unless set; ``from_torch`` sets ``not batch_first``) is the layout of a
    ``forward`` that does not name one; like ``batch_first``, it is not part of ``state_dict``."""

    layer_class: ClassVar[type[RecurrentLayer]]
    params: nn.Parameter
    step: Tensor
    time_major: bool = False

    def __init_subclass__(cls, layer: type[RecurrentLayer], **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.layer_class = layer

    def _hold(self, layer: RecurrentLayer, params: Optional[Array] = None) -> None:
        """Take ``layer``'s config, step, dropout RNG state and ``params`` (by default a view of the layer's)."""
        nn.Module.__init__(self)
        self._config = layer.config
        self.params = nn.Parameter(to_tensor(layer.params if params is None else params))
        self.register_buffer("step", torch.tensor(layer.step, dtype=torch.int64))
        self._dropout = DropoutState(layer.state_dict()["dropout_rng"])

    def _apply(self, fn: Any, recurse: bool = True) -> "_RecurrentModule":
        step = self.step  # ``.to``, ``.cuda``, ``.double``, ...: the step counter stays
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        self._buffers["step"] = step
        return self

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        torch_keys = [key for key in state_dict if key.startswith(prefix) and TENSOR_NAMES.parse(key[len(prefix):])]
        if torch_keys and prefix + "params" not in state_dict:  # an nn.LSTM's: PyTorch would list missing keys only
            theirs, ours = MODULE_CLASSES[self._config.rnn_mode], type(self).__name__
            raise ValueError(
                f"state_dict holds the weights of a PyTorch {theirs} ({', '.join(torch_keys[:2])}, ...), not this "
                f"module's {prefix}params and {prefix}step: load them into an {theirs} and build this module from it "
                f"with cudnn_rnn.torch.{ours}.from_torch(that_module), or convert them into params: "
                "module.params.data.copy_(torch.from_numpy(cudnn_rnn.convert.from_format('torch', {name: "
                "tensor.numpy() for name, tensor in state_dict.items()}, module.config).value))")
        if prefix + "step" in state_dict:  # refused as a layer refuses it, before anything loads
            check_step(state_dict[prefix + "step"], prefix + "step")
            checked_count(prefix + "step", int(state_dict[prefix + "step"]))
        super()._load_from_state_dict(state_dict, prefix, *args)

    @property
    def config(self) -> RNNConfig:
        """The configuration, its ``dtype`` that of ``params`` now (after ``.double()`` and alike)."""
        dtype = numpy_dtype_of(self.params.dtype)
        return self._config if dtype == self._config.dtype else self._config.replace(dtype=dtype)

    def forward(self, x: Tensor, lengths: Tensor | Sequence[int] | None = None, h0: Optional[Tensor] = None,
                c0: Optional[Tensor] = None, *, time_major: Optional[bool] = None
                ) -> tuple[Tensor, Tensor, Optional[Tensor]]:
        """:meth:`cudnn_rnn.layers.RecurrentLayer.forward` on tensors of the module's device and dtype: ``(y, h, c)``,
        its errors. ``lengths``: None, a list or an int32/int64 tensor [B] (best on the CPU: CUDA lengths are read
        back; a tensor under ``torch.compile``, where a list's values are guarded on). ``time_major``: None is the
        module's own (``self.time_major``). Training mode (``module.train()``): dropout with seed2 = ``step``, then
        ``step`` += 1; eval mode: no dropout, ``step`` stays, and a result that needs a gradient still has one."""
        config = self._config
        if time_major is None:
            time_major = self.time_major
        if not torch.compiler.is_compiling():  # compiled code is checked by the op as it is traced
            check = _TensorCheck(self.config, np, self.params.device)
            time_major = flag("time_major", time_major)
            batch, max_time = check.inputs(x, h0, c0, time_major)
            if not isinstance(lengths, Tensor):  # a list: checked, a CPU tensor
                lengths = None if (host := check.lengths(lengths, batch, max_time)) is None else torch.from_numpy(host)
            elif lengths.dtype not in (torch.int32, torch.int64):
                raise TypeError(f"lengths must be a list of ints or an int32/int64 tensor; got a tensor of dtype "
                                f"{lengths.dtype}")
            else:  # CUDA lengths: the shape here, the values by the op
                check.lengths(lengths.numpy() if lengths.device.type == "cpu" else
                              np.broadcast_to(np.int32(0), lengths.shape), batch, max_time)
        elif lengths is not None and not isinstance(lengths, Tensor):
            lengths = torch.tensor(list(lengths), dtype=torch.int32)
        state = (config.num_pseudo_layers, x.shape[1]) if time_major else (x.shape[0], config.num_pseudo_layers)
        h0 = x.new_zeros((*state, config.state_size)) if h0 is None else h0
        if c0 is None and config.has_cell:
            c0 = x.new_zeros((*state, config.num_units))
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (x, h0, c0, self.params) if t is not None)
        dropout, step = 0.0, None
        if self.training:
            dropout = config.dropout
            if config.inter_layer_dropout:  # a fresh tensor: the counter moves on below
                step = torch.remainder(self.step, SEED2_PERIOD)
            torch._assert_async(self.step < MAX_COUNT, f"step must stay a non-negative integer < 2**63: a training "
                                                       f"forward at step {MAX_COUNT} is refused")
            self.step.add_(1)
        y, h, c, _ = rnn(x, h0, c0 if config.has_cell else None, self.params, lengths, step, config.rnn_mode,
                         config.input_mode, config.direction, dropout, config.seed, 0, config.num_proj,
                         self.training or needs_grad, time_major, config.algo, self._dropout.key)
        return y, h, (c if config.has_cell else None)

    @classmethod
    def from_layer(cls: type[_Module], layer: RecurrentLayer) -> _Module:
        """A module of ``layer``'s kind holding a copy of its params (NumPy: CPU, CuPy: CUDA), config, step and RNG."""
        if not isinstance(layer, RecurrentLayer):
            raise TypeError(f"layer must be a cudnn_rnn layer (LSTM, GRU or RNN); got {type(layer).__name__}")
        if not isinstance(layer, cls.layer_class):
            raise ValueError(f"layer is a {type(layer).__name__} (rnn_mode={layer.config.rnn_mode!r}); "
                             f"{cls.__name__}.from_layer cannot hold it (use {type(layer).__name__}.from_layer)")
        module = cls.__new__(cls)
        with beside(layer.params):  # a CuPy copy on the layer's own GPU
            module._hold(layer, layer.params.copy())
        return module

    @classmethod
    def from_torch(cls: type[_Module], module: nn.Module, *, seed: int = 0, algo: str = "standard") -> _Module:
        """PyTorch's ``module``, an ``nn.LSTM`` (into :class:`LSTM`), ``nn.GRU`` (:class:`GRU`) or ``nn.RNN``
        (:class:`RNN`), with its weights exactly, its sizes, ``bidirectional``, ``dropout``, ``proj_size`` (as
        ``num_proj``; ``bias=False``: zero biases), dtype, device, mode and ``time_major = not batch_first``. Unlike
        PyTorch's, the states are in x's layout ([L*D, B, P] time-major, [B, L*D, P] batch-major) and ``forward``
        returns ``(y, h, c)``. ``seed`` and ``algo`` are the constructor's. A TypeError for any other module, or
        weights neither on the CPU nor on CUDA or of no dtype of the library; a ValueError for another kind (an
        ``nn.RNN`` into :class:`LSTM`) or a setting the library refuses (``dropout=1``)."""
        from ..convert import expected_shapes, from_format

        if not isinstance(module, nn.RNNBase) or not (fields := module_fields(module)):
            raise TypeError(f"module must be a torch.nn.LSTM, nn.GRU or nn.RNN; got {type(module).__name__}")
        if (rnn_mode := fields["rnn_mode"]) not in cls.layer_class.modes:
            theirs = MODULE_CLASSES[rnn_mode]
            ours = next(other for other in (LSTM, GRU, RNN) if rnn_mode in other.layer_class.modes).__name__
            kind = f"{theirs} (nonlinearity={module.nonlinearity!r})" if theirs == "nn.RNN" else theirs
            raise ValueError(f"module is a torch.{kind}; {cls.__name__}.from_torch takes a torch."
                             f"{MODULE_CLASSES[cls.layer_class.modes[0]]}: use "
                             f"cudnn_rnn.torch.{ours}.from_torch(module)")
        weight = module.all_weights[0][0]  # weight_ih_l0
        dtype = numpy_dtype_of(weight.dtype)
        if weight.device.type not in ("cpu", "cuda") or dtype not in DTYPES:
            raise TypeError(f"module's weights are {weight.dtype} on {weight.device}; from_torch takes one of "
                            f"{DTYPES} on the CPU or a CUDA GPU")
        config = RNNConfig(**fields, dropout=float(module.dropout), seed=seed, dtype=dtype, algo=algo)
        weights = {name: to_array(getattr(module, name).detach().cpu()) if module.bias or name.startswith("weight")
                   else np.zeros(shape, numpy_dtype(dtype))  # a parametrised weight as it acts; bias=False: zeros
                   for name, shape in expected_shapes("torch", config).items()}
        result = cls.__new__(cls)
        result._hold(RecurrentLayer.from_params(from_format("torch", weights, config).value, config))
        result.time_major = not module.batch_first
        return result.train(module.training).to(weight.device)

    def to_layer(self) -> RecurrentLayer:
        """The library's layer of this kind holding a copy of ``params`` (CPU: NumPy; CUDA: CuPy), config, step, RNG."""
        layer = RecurrentLayer.from_params(to_array(self.params), self.config, step=int(self.step.item()))
        if (rng_state := self._dropout.rng.state()) is not None:  # trained with dropout on cuDNN: the masks go on
            layer.load_state_dict({**layer.state_dict(), "dropout_rng": rng_state})
        return layer

    def extra_repr(self) -> str:
        return ", ".join(constructor_arguments(self.config) + (["time_major=True"] if self.time_major else []))


def _layer_dtype(dtype: object) -> object:
    """A module's ``dtype`` as its layer takes it: a PyTorch dtype as NumPy's name of it, any other as given."""
    return numpy_dtype_of(dtype) if isinstance(dtype, torch.dtype) else dtype


class LSTM(_RecurrentModule, layer=layers.LSTM):
    """:class:`cudnn_rnn.LSTM` (its gates, arguments less ``xp``, initialisation, errors) as an ``nn.Module``."""

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, bidirectional: bool = False,
                 num_proj: int = 0, dropout: float = 0.0, input_mode: str = "linear_input", dtype: object = "float32",
                 seed: int = 0, unit_forget_bias: bool = True, algo: str = "standard") -> None:
        self._hold(layers.LSTM(input_size, num_units, num_layers, bidirectional=bidirectional, num_proj=num_proj,
                               dropout=dropout, input_mode=input_mode, dtype=_layer_dtype(dtype), seed=seed,
                               unit_forget_bias=unit_forget_bias, algo=algo))


class GRU(_RecurrentModule, layer=layers.GRU):
    """:class:`cudnn_rnn.GRU` (its gates, arguments less ``xp``, initialisation, errors) as an ``nn.Module``."""

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, bidirectional: bool = False,
                 dropout: float = 0.0, input_mode: str = "linear_input", dtype: object = "float32", seed: int = 0,
                 algo: str = "standard") -> None:
        self._hold(layers.GRU(input_size, num_units, num_layers, bidirectional=bidirectional, dropout=dropout,
                              input_mode=input_mode, dtype=_layer_dtype(dtype), seed=seed, algo=algo))


class RNN(_RecurrentModule, layer=layers.RNN):
    """:class:`cudnn_rnn.RNN` (its cell, arguments less ``xp``, initialisation, errors) as an ``nn.Module``."""

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, activation: str = "tanh",
                 bidirectional: bool = False, dropout: float = 0.0, input_mode: str = "linear_input",
                 dtype: object = "float32", seed: int = 0, algo: str = "standard") -> None:
        self._hold(layers.RNN(input_size, num_units, num_layers, activation=activation, bidirectional=bidirectional,
                              dropout=dropout, input_mode=input_mode, dtype=_layer_dtype(dtype), seed=seed, algo=algo))

    @property
    def activation(self) -> str:
        """``"tanh"`` or ``"relu"``."""
        return self.config.rnn_mode.removeprefix("rnn_")

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation!r}"
