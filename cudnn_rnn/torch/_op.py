"""The op as custom operators, ``torch.ops.cudnn_rnn.rnn_forward`` and ``rnn_backward``, and their autograd.

The kernels run the library's op on views of the tensors' memory: NumPy on the CPU (the reference
backend), CuPy through DLPack on CUDA (cuDNN, on PyTorch's current stream). The fake kernels check
the shapes (:func:`cudnn_rnn._bridge.signature`) as ``torch.compile`` traces, and give the reserve a
length in the traced T and B on the CPU (``T * B * per_step + header``), so that a new T or B traces no new
graph. ``step``, a 0-d integer tensor in [0, 2**31), replaces ``seed2`` when the kernel runs (so compiled
code does not specialise on it; a module passes its counter modulo 2**31, never negative: a negative seed2
would hide ``seed``); ``dropout_state`` is the key of a module's :class:`DropoutState` (0: none), the RNG
of cuDNN's masks.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import weakref
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
from torch import Tensor

from .. import _bridge, _signature
from .._arrays import Array
from .._cudnn._dropout_rng import DropoutRNG
from .._cudnn._streams import external_stream, import_cupy
from .._dtypes import PACKAGES, as_bits, from_bits, numpy_dtype

__all__ = ["cudnn_rnn", "check_call", "check_step", "rnn", "numpy_dtype_of", "to_array", "to_tensor",
           "DropoutState"]


# ---- tensors <-> arrays ------------------------------------------------------------------------
def numpy_dtype_of(dtype: torch.dtype) -> str:
    """A PyTorch dtype's name, the library's for the float dtypes (``"float32"``, ``"bfloat16"``, ...)."""
    return str(dtype).removeprefix("torch.")


def to_array(tensor: Tensor) -> Array:
    """A NumPy (CPU) or CuPy (CUDA, inside :func:`_on_device`) array viewing ``tensor``'s memory."""
    value = tensor.detach()
    name = numpy_dtype_of(value.dtype)
    if name in PACKAGES:  # through its bits: NumPy has no bfloat16, ml_dtypes' is the array's
        value = value.view(torch.int16)
    if value.device.type == "cpu":
        array: Array = value.numpy()
    else:
        cupy = import_cupy()
        if value.numel() == 0:  # nothing to view (and no address to hand over)
            with cupy.cuda.Device(value.device.index):
                array = cupy.empty(tuple(value.shape), dtype=numpy_dtype(numpy_dtype_of(value.dtype)))
        else:
            array = cupy.from_dlpack(value)
    return from_bits(array, name)


def to_tensor(array: Array) -> Tensor:
    """A tensor viewing a result array of the op (NumPy, or CuPy inside :func:`_on_device`)."""
    name = array.dtype.name
    array = as_bits(array)  # torch takes no ml_dtypes array: bfloat16 through its bits
    if isinstance(array, np.ndarray):
        tensor = torch.from_numpy(array if array.flags.writeable else array.copy())
    elif array.size == 0:  # nothing to view (and no address to hand over): nothing to copy
        tensor = torch.from_numpy(np.empty(array.shape, array.dtype)).to(torch.device("cuda", array.device.id))
    else:
        tensor = torch.utils.dlpack.from_dlpack(array)
    return tensor.view(getattr(torch, name)).contiguous()


@contextlib.contextmanager
def _on_device(device: torch.device) -> Iterator[None]:
    """On CUDA: ``device`` current for CuPy, and CuPy's current stream PyTorch's; nothing on the CPU."""
    if device.type != "cuda":
        yield
        return
    cupy = import_cupy()
    index = device.index if device.index is not None else torch.cuda.current_device()
    with cupy.cuda.Device(index), external_stream(torch.cuda.current_stream(index).cuda_stream, index):
        yield


# ---- checks --------------------------------------------------------------------------------------
def check_call(input: object, input_h: object, input_c: object, params: object, sequence_lengths: object,
               **attrs: Any) -> _bridge.Signature:
    """Check a call (``attrs``: the op's keywords, ``is_training`` among them) from its tensors' types, devices,
    shapes and dtypes: the op's TypeError/ValueError, and this bridge's for a value neither a tensor nor None,
    or tensors not all on one CPU or one GPU."""
    named = {"input": input, "input_h": input_h, "params": params,
             "input_c": input_c if attrs["rnn_mode"] == "lstm" else None, "sequence_lengths": sequence_lengths}
    for name, value in named.items():
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor" + (" or None" if name == "sequence_lengths" else "")
                            + f"; got {type(value).__name__}")
    tensors = {name: value for name, value in named.items() if isinstance(value, Tensor)}
    lengths = tensors.pop("sequence_lengths", None)
    for name, tensor in tensors.items():
        if tensor.device.type not in _bridge.PLATFORMS:
            raise TypeError(f"cudnn_rnn.torch runs on CPU and CUDA tensors; got {name} on {tensor.device}")
    devices = {tensor.device for tensor in tensors.values()}
    if len(devices) > 1:
        detail = ", ".join(f"{name} on {tensor.device}" for name, tensor in tensors.items())
        if len({device.type for device in devices}) > 1:
            raise TypeError(f"all tensors of one call must be on one device (all CPU or all CUDA); got {detail}")
        raise ValueError(f"all arrays of one call must be on one GPU; got {detail}")
    x, shapes = tensors.get("input"), {name: tuple(tensor.shape) for name, tensor in tensors.items()}
    sig = _bridge.signature(shapes.get("input"), shapes.get("input_h"), shapes.get("input_c"),
                            shapes.get("params"), None if x is None else numpy_dtype_of(x.dtype),
                            None if lengths is None else tuple(lengths.shape),
                            None if lengths is None else numpy_dtype_of(lengths.dtype), **attrs,
                            dtypes={name: numpy_dtype_of(t.dtype) for name, t in tensors.items() if name != "input"})
    if lengths is not None and x is not None and lengths.device not in (x.device, torch.device("cpu")):
        raise ValueError(f"sequence_lengths must be on the CPU or on the device of input ({x.device}); "
                         f"got {lengths.device}")
    return sig


def check_step(step: object, name: str = "step") -> None:
    """Refuse (TypeError, naming ``name``) a step that is not a 0-d integer tensor."""
    if not isinstance(step, Tensor) or step.dim() or step.dtype.is_floating_point or step.dtype.is_complex \
            or step.dtype == torch.bool:
        got = f"a {step.dim()}-d {step.dtype} tensor" if isinstance(step, Tensor) else type(step).__name__
        raise TypeError(f"{name} must be a 0-d integer tensor; got {got}")


#: the op's attributes in the custom operators' schema order (the forward's has ``is_training`` after ``num_proj``)
_ATTRIBUTES = ("rnn_mode", "input_mode", "direction", "dropout", "seed", "seed2", "num_proj", "time_major", "algo")


def _kernel_signature(tensors: tuple[Optional[Tensor], ...], step: Optional[Tensor], attributes: tuple[Any, ...]
                      ) -> _bridge.Signature:
    """A kernel's call, its attributes (the schema's, in :data:`_ATTRIBUTES` order) and the shapes of ``tensors``
    (input, input_h, input_c, params, sequence_lengths) checked once into its config; ``seed2`` is ``step``'s value
    when a step tensor is given (read here, on the host): a ValueError naming ``step`` unless it is in
    [0, 2**31 - 1] (a negative seed2 would hide ``seed``)."""
    attrs = dict(zip(_ATTRIBUTES, attributes))
    if step is not None:
        check_step(step)
        attrs["seed2"] = int(step.item())
        if not 0 <= attrs["seed2"] < 2**31:
            raise ValueError(f"step must be in [0, 2**31 - 1], a non-negative C int as seed2 (a negative seed2 "
                             f"would hide seed); got {attrs['seed2']}")
    x, h, c, p, lengths = (None if t is None else tuple(t.shape) for t in tensors)
    return _signature.signature(x, h, c, p, numpy_dtype_of(tensors[0].dtype) if tensors[0] is not None else None,
                                lengths, None if tensors[4] is None else numpy_dtype_of(tensors[4].dtype), **attrs)


# ---- a module's dropout RNG, reachable from the kernel ---------------------------------------------
_dropout_rngs: dict[int, DropoutRNG] = {}  # DropoutState.key -> its RNG, while its DropoutState lives
_keys = itertools.count(1)


class DropoutState:
    """A module's own :class:`~cudnn_rnn._cudnn._dropout_rng.DropoutRNG` under an integer ``key``, which the forward op
    takes; a copy (deepcopy, pickle) holds a copy under a key of its own, and a key is forgotten with its holder."""

    def __init__(self, saved: Optional[dict[str, Any]] = None) -> None:
        self.rng = DropoutRNG()
        self.rng.load(saved)
        self.key = next(_keys)
        _dropout_rngs[self.key] = self.rng
        weakref.finalize(self, _dropout_rngs.pop, self.key, None)

    def __reduce__(self) -> tuple[Any, ...]:
        return DropoutState, (self.rng.state(),)


# ---- the custom operators ------------------------------------------------------------------------
#: Both allocate from CuPy's memory pool, which a CUDA graph of PyTorch's cannot own: ``cudagraph_unsafe``
#: keeps them out of the captures of ``torch.compile(mode="reduce-overhead")``.
_TAGS = (torch.Tag.cudagraph_unsafe,)


@torch.library.custom_op("cudnn_rnn::rnn_forward", mutates_args=(), tags=_TAGS)
def rnn_forward(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
                sequence_lengths: Optional[Tensor], step: Optional[Tensor], rnn_mode: str, input_mode: str,
                direction: str, dropout: float, seed: int, seed2: int, num_proj: int, is_training: bool,
                time_major: bool, algo: str, dropout_state: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`cudnn_rnn.cudnn_rnn_v3` on tensors: (output, output_h, output_c or (0,), reserve_space)."""
    tensors = (input, input_h, input_c, params, sequence_lengths)
    sig = _kernel_signature(tensors, step, (rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj,
                                            time_major, algo))
    rng = _dropout_rngs.get(dropout_state) if dropout_state else None
    with _on_device(input.device):
        arrays = [None if t is None else to_array(t) for t in tensors]
        out = _bridge.forward(sig.config, *arrays, time_major=time_major, is_training=is_training, dropout_rng=rng)
        return to_tensor(out.output), to_tensor(out.output_h), to_tensor(out.output_c), to_tensor(out.reserve_space)


@torch.library.custom_op("cudnn_rnn::rnn_backward", mutates_args=(), tags=_TAGS)
def rnn_backward(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
                 sequence_lengths: Optional[Tensor], step: Optional[Tensor], output: Tensor, output_h: Tensor,
                 output_c: Tensor, output_backprop: Optional[Tensor], output_h_backprop: Optional[Tensor],
                 output_c_backprop: Optional[Tensor], reserve_space: Tensor, rnn_mode: str, input_mode: str,
                 direction: str, dropout: float, seed: int, seed2: int, num_proj: int, time_major: bool,
                 algo: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`cudnn_rnn.cudnn_rnn_backprop_v3` on tensors: the four gradients (input_c's (0,) without a cell)."""
    if reserve_space.numel() == 0:
        raise RuntimeError("cudnn_rnn: backward needs a forward run with is_training=True (an inference "
                           "forward keeps no reserve_space)")
    tensors = (input, input_h, input_c, params, sequence_lengths)
    sig = _kernel_signature(tensors, step, (rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj,
                                            time_major, algo))
    with _on_device(input.device):
        grads = _bridge.backward(sig.config, *(None if t is None else to_array(t) for t in (
            *tensors, output, output_h, output_c, output_backprop, output_h_backprop, output_c_backprop,
            reserve_space)), time_major=time_major)
        return tuple(to_tensor(g) for g in grads)  # type: ignore[return-value]


def _loop(op: Callable[..., tuple[Tensor, ...]], info: Any, in_dims: tuple[Optional[int], ...], *args: Any) -> Any:
    """A vmap rule: ``op`` on each slice, the results stacked (``jacrev`` vmaps the backward)."""
    results = [op(*(arg if axis is None else arg.select(axis, i) for arg, axis in zip(args, in_dims)))
               for i in range(info.batch_size)]
    return tuple(torch.stack(values) for values in zip(*results)), (0, 0, 0, 0)


rnn_forward.register_vmap(functools.partial(_loop, rnn_forward))
rnn_backward.register_vmap(functools.partial(_loop, rnn_backward))


# ---- fake kernels: shapes without data ------------------------------------------------------------
@rnn_forward.register_fake
def _rnn_forward_fake(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
                      sequence_lengths: Optional[Tensor], step: Optional[Tensor], rnn_mode: str, input_mode: str,
                      direction: str, dropout: float, seed: int, seed2: int, num_proj: int, is_training: bool,
                      time_major: bool, algo: str, dropout_state: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The shapes, checked: the configuration's sizes specialised on, T and B (maybe symbolic) checked by their
    hints (``SymNode``'s, whose helpers' names change between releases; 1 for an unbacked size) without a guard.
    The outputs have the input's T and B, and output_h (output_c) the shape of input_h (input_c). The reserve's
    length is ``sig.cpu_reserve_elements`` of T and B on the CPU (symbolic where they are: no graph break, no
    guard); on CUDA cuDNN sizes it, for concrete T and B only, so a symbolic T or B gives it an unbacked size."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    attrs: dict[str, Any] = dict(zip(_ATTRIBUTES, (rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj,
                                                  time_major, algo)))
    batch_axis = 1 if time_major else 0

    def sizes(tensor: Optional[Tensor], *keep: int) -> tuple[int, ...] | None:
        return None if tensor is None else tuple(int(n) if axis not in keep or is_concrete_int(n) else
                                                 int(n.node.hint) if n.node.has_hint() else 1
                                                 for axis, n in enumerate(list[Any](tensor.shape)))

    sig = _bridge.signature(sizes(input, 0, 1), sizes(input_h, batch_axis), sizes(input_c, batch_axis),
                            sizes(params), numpy_dtype_of(input.dtype), sizes(sequence_lengths, 0),
                            None if sequence_lengths is None else numpy_dtype_of(sequence_lengths.dtype),
                            is_training=is_training, **attrs)
    reserve: Any = 0
    if is_training and input.device.type == "cpu":
        reserve = sig.cpu_reserve_elements(input.shape[0], input.shape[1])
    elif is_training and not all(is_concrete_int(n) for n in input.shape[:2]):
        reserve = torch.library.get_ctx().new_dynamic_size()
    elif is_training:
        with _on_device(input.device):
            reserve = sig.reserve_elements(input.device.type)
    output_c = input.new_empty(input_c.shape) if input_c is not None and sig.config.has_cell else input.new_empty(0)
    return (input.new_empty((*input.shape[:2], sig.output_shape[2])), input.new_empty(input_h.shape), output_c,
            input.new_empty((reserve,)))


@rnn_backward.register_fake
def _rnn_backward_fake(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
                       *rest: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    cell = torch.empty_like(input_c) if input_c is not None and rest[9] == "lstm" else input.new_empty(0)  # rnn_mode
    return torch.empty_like(input), torch.empty_like(input_h), cell, torch.empty_like(params)


# ---- autograd: first-order reverse mode ------------------------------------------------------------
_FORWARD_MODE = ("cudnn_rnn.torch: forward-mode differentiation (torch.func.jvp, torch.autograd.forward_ad, "
                 "jacfwd, hessian) is not supported; use reverse mode (backward, torch.autograd.grad, "
                 "torch.func.grad, vjp, jacrev)")
_SECOND_ORDER = ("cudnn_rnn.torch: second-order differentiation (a gradient of the gradient) is not supported; "
                 "the op's gradient is its own backprop, which has no derivative")


class _RNN(torch.autograd.Function):
    """``rnn_forward`` as an autograd.Function (the same arguments and results; the vmap rule generated from the
    operator's own, :func:`_loop`): its gradient ``rnn_backward`` of the forward's reserve; forward mode raises.
    ``forward`` calls ``torch.ops.cudnn_rnn``'s packet, which Dynamo traces (it cannot wrap the CustomOpDef)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(*args: Any) -> Any:
        return torch.ops.cudnn_rnn.rnn_forward(*args)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        ctx.attributes = inputs[6:13] + inputs[14:16]  # the backprop's: no is_training, no RNG (masks in the reserve)
        ctx.set_materialize_grads(False)  # an unused output's gradient is None (the backprop reads zeros)
        ctx.save_for_backward(*inputs[:6], *output)

    @staticmethod
    def backward(ctx: Any, *grads: Optional[Tensor]) -> tuple[Optional[Tensor], ...]:
        *forward, reserve = ctx.saved_tensors
        has_cell = ctx.attributes[0] == "lstm"
        backprop: Any = _Backprop.apply if torch.is_grad_enabled() else rnn_backward  # a graph for create_graph
        dx, dh, dc, dparams = backprop(*forward, grads[0], grads[1], grads[2] if has_cell else None, reserve,
                                       *ctx.attributes)
        return (dx, dh, dc if has_cell and forward[2] is not None else None, dparams) + (None,) * 13

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        raise NotImplementedError(_FORWARD_MODE)


class _TracedRNN(_RNN):  # as torch.compile traces it: Dynamo refuses an autograd.Function with a jvp
    jvp = torch.autograd.Function.jvp


class _Backprop(torch.autograd.Function):
    """``rnn_backward`` (as :class:`_RNN` is ``rnn_forward``) where a graph of the gradient is built: its own
    derivative raises."""

    generate_vmap_rule = True

    @staticmethod
    def forward(*args: Any) -> Any:
        return torch.ops.cudnn_rnn.rnn_backward(*args)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise NotImplementedError(_SECOND_ORDER)

    jvp = backward


def rnn(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``rnn_forward`` (the same arguments and results), differentiable: see :class:`_RNN`."""
    function = _TracedRNN if torch.compiler.is_compiling() else _RNN
    return function.apply(*args)  # type: ignore[no-untyped-call, no-any-return]


# ---- the public function -------------------------------------------------------------------------
def cudnn_rnn(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
              sequence_lengths: Optional[Tensor] = None, *, rnn_mode: str = "lstm",
              input_mode: str = "linear_input", direction: str = "unidirectional", dropout: float = 0.0,
              seed: int = 0, seed2: int = 0, num_proj: int = 0, is_training: bool = True, time_major: bool = True,
              algo: str = "standard") -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """:func:`cudnn_rnn.cudnn_rnn_v3` on tensors (its arguments, semantics and errors), differentiable in reverse mode.

    Tensors of one dtype on one device (CPU: the reference backend; CUDA: cuDNN), but ``sequence_lengths``
    (None or int32/int64 [B], best on the CPU). Shapes (time_major; else the first two axes swapped)::

        input [T, B, I]  input_h [L*D, B, P]  input_c [L*D, B, N]  params [params_size]
        -> output [T, B, D*P], output_h [L*D, B, P], output_c [L*D, B, N] (LSTM; None otherwise)

    The gradient w.r.t. input, input_h, input_c and params (autograd, ``torch.func.grad``, ``vjp``,
    ``jacrev``) is :func:`cudnn_rnn.cudnn_rnn_backprop_v3` of the forward's reserve (it needs
    ``is_training=True``); ``sequence_lengths`` has none. Forward mode (``torch.func.jvp``, ``jacfwd``,
    ``hessian``) and second order raise ``NotImplementedError``. ``torch.compile`` traces it whole.
    """
    if not torch.compiler.is_compiling():  # compiled code is checked by the fake kernel, once, as it is traced
        check_call(input, input_h, input_c, params, sequence_lengths, rnn_mode=rnn_mode, input_mode=input_mode,
                   direction=direction, dropout=dropout, seed=seed, seed2=seed2, num_proj=num_proj,
                   is_training=is_training, time_major=time_major, algo=algo)
        dropout, seed, seed2, num_proj = float(dropout), int(seed), int(seed2), int(num_proj)
        is_training, time_major = bool(is_training), bool(time_major)
    has_cell = rnn_mode == "lstm"
    output, output_h, output_c, _ = rnn(input, input_h, input_c if has_cell else None, params, sequence_lengths,
                                        None, rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj,
                                        is_training, time_major, algo, 0)
    return output, output_h, (output_c if has_cell else None)
