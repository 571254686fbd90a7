"""The op as PyTorch custom operators: ``torch.ops.cudnn_rnn.rnn_forward`` and ``rnn_backward``.

Both are ``torch.library.custom_op`` operators, so that they run eagerly, under autograd and inside
``torch.compile(fullgraph=True)`` alike::

    rnn_forward(input, input_h, input_c?, params, sequence_lengths?, step?, <attributes>, is_training,
                dropout_state) -> (output, output_h, output_c, reserve_space)   output_c: (0,) for non-LSTM modes
    rnn_backward(<the forward's tensors>, output, output_h, output_c, output_backprop?, output_h_backprop?,
                 output_c_backprop?, reserve_space, <attributes>)
        -> (input_backprop, input_h_backprop, input_c_backprop, params_backprop)

The real kernels run the library's op on views of the tensors' own memory: NumPy views on the
CPU (the reference backend; bfloat16 through an int16 view), CuPy arrays through DLPack on CUDA
(cuDNN, on PyTorch's current stream and device). Results come back the same way, without a
copy. The fake kernels give the shapes from :func:`cudnn_rnn._bridge.signature`; the reserve's
length is the backend's own (:meth:`cudnn_rnn._bridge.Signature.reserve_elements`), or a size
known only at run time when T or B is symbolic. Autograd runs ``rnn_backward`` with the
forward's reserve as the residual; a derivative of ``rnn_backward`` (double backward) raises.

``step``, a 0-d integer tensor, replaces ``seed2`` when given: a module's step counter, read
only when the kernel runs, so that compiled code does not specialise on it. The modules keep it in
host memory, so reading it never waits for a GPU (a step tensor on a GPU would: one small copy).

``dropout_state``, an integer, names a module's own dropout RNG (:class:`DropoutState`; 0: none): on
cuDNN the masks then come from it, seeded once per GPU and advancing, as a layer's, instead of a
set-up of cuDNN's dropout state from (seed, step) at every step.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from typing import Any, Iterator, Optional

import numpy as np
import torch
from torch import Tensor

from .. import _bridge
from .._arrays import Array
from .._dropout_rng import DropoutRNG

__all__ = ["cudnn_rnn", "check_call", "rnn_forward", "numpy_dtype_of", "to_array", "to_tensor", "DropoutState"]

#: PyTorch dtypes -> the library's dtype names
_DTYPE_NAMES: dict[torch.dtype, str] = {torch.float16: "float16", torch.float32: "float32",
                                        torch.float64: "float64", torch.bfloat16: "bfloat16"}

#: the device types the op runs on (the platforms of :data:`cudnn_rnn._bridge.PLATFORMS`)
_DEVICE_TYPES = tuple(_bridge.PLATFORMS)


# ---- tensors <-> arrays ------------------------------------------------------------------------
def _bfloat16() -> np.dtype:
    import ml_dtypes

    dtype: np.dtype = np.dtype(ml_dtypes.bfloat16)
    return dtype


def numpy_dtype_of(dtype: torch.dtype) -> object:
    """The name of a supported PyTorch dtype (``"float32"``, ...), else PyTorch's name without ``torch.``.

    What the library's dtype checks take, so that an unsupported dtype gets the library's message.
    """
    return _DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def to_array(tensor: Tensor) -> Array:
    """A NumPy (CPU) or CuPy (CUDA) array viewing ``tensor``'s memory: no copy.

    bfloat16 goes through an int16 view (``ml_dtypes.bfloat16`` on the array side). On CUDA, run it
    inside :func:`_on_device` so that DLPack hands the tensor over on PyTorch's current stream.
    """
    value = tensor.detach()
    bfloat16 = value.dtype == torch.bfloat16
    if bfloat16:
        value = value.view(torch.int16)
    if value.device.type == "cpu":
        array: Array = value.numpy()
    else:
        from .._cudnn_streams import import_cupy

        cupy = import_cupy()
        if value.numel() == 0:  # nothing to view (and no address to hand over)
            with cupy.cuda.Device(value.device.index):
                array = cupy.empty(tuple(value.shape), dtype=value.new_empty(0, device="cpu").numpy().dtype)
        else:
            array = cupy.from_dlpack(value)
    return array.view(_bfloat16()) if bfloat16 else array


def to_tensor(array: Array) -> Tensor:
    """A tensor viewing a fresh result array of the op (NumPy or CuPy): no copy.

    Run inside :func:`_on_device` for CuPy arrays (DLPack on PyTorch's current stream).
    """
    bfloat16 = array.dtype.name == "bfloat16"
    if bfloat16:
        array = array.view(np.int16)
    if isinstance(array, np.ndarray):
        if not array.flags.writeable:  # never for the op's own results; PyTorch tensors are writable
            array = array.copy()
        tensor = torch.from_numpy(array)
    elif array.size == 0:  # nothing to view (and no address to hand over)
        dtype = torch.from_numpy(np.empty(0, array.dtype)).dtype
        tensor = torch.empty(tuple(array.shape), dtype=dtype, device=torch.device("cuda", array.device.id))
    else:
        from torch.utils.dlpack import from_dlpack

        tensor = from_dlpack(array)
    if bfloat16:
        tensor = tensor.view(torch.bfloat16)
    return tensor if tensor.is_contiguous() else tensor.contiguous()


@contextlib.contextmanager
def _on_device(device: torch.device) -> Iterator[None]:
    """On CUDA: ``device`` current for CuPy, and CuPy's current stream PyTorch's; nothing on the CPU."""
    if device.type != "cuda":
        yield
        return
    from .._cudnn_streams import import_cupy

    cupy = import_cupy()
    index = device.index if device.index is not None else torch.cuda.current_device()
    with cupy.cuda.Device(index):
        with cupy.cuda.ExternalStream(torch.cuda.current_stream(index).cuda_stream, index):
            yield


def _optional_array(tensor: Optional[Tensor]) -> Array | None:
    return None if tensor is None else to_array(tensor)


# ---- checks --------------------------------------------------------------------------------------
def check_call(attrs: _bridge.Attrs, input: object, input_h: object, input_c: object, params: object,
               sequence_lengths: object, is_training: bool) -> _bridge.Signature:
    """Check a call from its tensors' types, devices, shapes and dtypes: the op's TypeError/ValueError, and
    this bridge's for a value neither a tensor nor None, or tensors not all on one CPU or one GPU."""
    named = {"input": input, "input_h": input_h, "params": params,
             "input_c": input_c if attrs.rnn_mode == "lstm" else None, "sequence_lengths": sequence_lengths}
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
    sig = _bridge.signature(attrs, shapes.get("input"), shapes.get("input_h"), shapes.get("input_c"),
                            shapes.get("params"), None if x is None else numpy_dtype_of(x.dtype),
                            None if lengths is None else tuple(lengths.shape),
                            None if lengths is None else numpy_dtype_of(lengths.dtype), is_training=is_training,
                            dtypes={name: numpy_dtype_of(t.dtype) for name, t in tensors.items() if name != "input"})
    if lengths is not None and x is not None and lengths.device not in (x.device, torch.device("cpu")):
        raise ValueError(f"sequence_lengths must be on the CPU or on the device of input ({x.device}); "
                         f"got {lengths.device}")
    return sig


# ---- a module's dropout RNG, reachable from the kernel ---------------------------------------------
#: DropoutState.key -> its RNG, while its DropoutState lives
_dropout_rngs: dict[int, DropoutRNG] = {}
_keys = itertools.count(1)


class DropoutState:
    """A module's own :class:`~cudnn_rnn._dropout_rng.DropoutRNG` and the integer ``key`` the forward operator takes.

    An operator's arguments are tensors and scalars, so a module passes ``key`` and the kernel finds
    the RNG by it. A copy (``copy.deepcopy``, pickling) holds a copy of the state under a key of its
    own; the key is forgotten when its holder is collected.
    """

    def __init__(self, saved: Optional[dict[str, Any]] = None) -> None:
        self.rng = DropoutRNG()
        self.rng.load(saved)
        self.key = next(_keys)
        _dropout_rngs[self.key] = self.rng
        weakref.finalize(self, _dropout_rngs.pop, self.key, None)

    def __deepcopy__(self, memo: dict[int, Any]) -> "DropoutState":
        return DropoutState(self.rng.state())

    def __reduce__(self) -> tuple[Any, ...]:
        return DropoutState, (self.rng.state(),)


# ---- the custom operators ------------------------------------------------------------------------
#: Both operators allocate their results and cuDNN's workspaces from CuPy's memory pool, which a CUDA
#: graph of PyTorch's cannot own: a cudaMalloc during a capture fails it, and a block freed after the
#: capture would be reused while replays still read it. ``cudagraph_unsafe`` keeps them out of
#: ``torch.cuda.graph`` captures made by ``torch.compile(mode="reduce-overhead")`` (cudagraph trees).
_TAGS = (torch.Tag.cudagraph_unsafe,)

def _attrs(rnn_mode: str, input_mode: str, direction: str, dropout: float, seed: int, seed2: int, num_proj: int,
           time_major: bool, algo: str, step: Optional[Tensor]) -> _bridge.Attrs:
    """The call's attributes; ``seed2`` is ``step``'s value when a step tensor is given (read here, on the host)."""
    if step is not None:
        seed2 = int(step.item())
    return _bridge.Attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj, time_major, algo)


@torch.library.custom_op("cudnn_rnn::rnn_forward", mutates_args=(), tags=_TAGS)
def rnn_forward(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
                sequence_lengths: Optional[Tensor], step: Optional[Tensor], rnn_mode: str, input_mode: str,
                direction: str, dropout: float, seed: int, seed2: int, num_proj: int, is_training: bool,
                time_major: bool, algo: str, dropout_state: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`cudnn_rnn.cudnn_rnn_v3` on tensors: (output, output_h, output_c or (0,), reserve_space).

    ``dropout_state``: a :class:`DropoutState`'s key, whose RNG draws cuDNN's masks; 0 for the seeds'.
    """
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj, time_major, algo, step)
    rng = _dropout_rngs.get(dropout_state) if dropout_state else None
    with _on_device(input.device):
        outputs = _bridge.forward(attrs, to_array(input), to_array(input_h), _optional_array(input_c),
                                  to_array(params), _optional_array(sequence_lengths), is_training=is_training,
                                  dropout_rng=rng)
        return (to_tensor(outputs.output), to_tensor(outputs.output_h), to_tensor(outputs.output_c),
                to_tensor(outputs.reserve_space))


@torch.library.custom_op("cudnn_rnn::rnn_backward", mutates_args=(), tags=_TAGS)
def rnn_backward(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
                 sequence_lengths: Optional[Tensor], step: Optional[Tensor], output: Tensor, output_h: Tensor,
                 output_c: Tensor, output_backprop: Optional[Tensor], output_h_backprop: Optional[Tensor],
                 output_c_backprop: Optional[Tensor], reserve_space: Tensor, rnn_mode: str, input_mode: str,
                 direction: str, dropout: float, seed: int, seed2: int, num_proj: int, time_major: bool,
                 algo: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`cudnn_rnn.cudnn_rnn_backprop_v3` on tensors, from the forward's reserve_space.

    Returns (input_backprop, input_h_backprop, input_c_backprop or (0,), params_backprop).
    """
    if reserve_space.numel() == 0:
        raise RuntimeError("cudnn_rnn: backward needs a forward run with is_training=True (an inference "
                           "forward keeps no reserve_space)")
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj, time_major, algo, step)
    with _on_device(input.device):
        grads = _bridge.backward(attrs, to_array(input), to_array(input_h), _optional_array(input_c),
                                 to_array(params), _optional_array(sequence_lengths), to_array(output),
                                 to_array(output_h), to_array(output_c), _optional_array(output_backprop),
                                 _optional_array(output_h_backprop), _optional_array(output_c_backprop),
                                 to_array(reserve_space))
        return (to_tensor(grads.input_backprop), to_tensor(grads.input_h_backprop),
                to_tensor(grads.input_c_backprop), to_tensor(grads.params_backprop))


# ---- fake kernels: shapes without data ------------------------------------------------------------
def _hint(size: Any) -> int:
    """A size's value for checks that must not specialise the trace on it (T and B), without adding a guard.

    A symbolic size gives its hint (the value of the example the trace started from); one that has
    none (an unbacked size, known only at run time) gives 1, so that only the kernel, which checks
    every call, sees its value. ``SymNode.has_hint``/``hint`` are read rather than a hint helper of
    ``torch.fx.experimental.symbolic_shapes``, whose name changes between the releases the torch
    extra admits.
    """
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    if is_concrete_int(size):
        return int(size)
    node = size.node
    return int(node.hint) if node.has_hint() else 1


def _traced_shapes(attrs: _bridge.Attrs, input: Tensor, input_h: Tensor, input_c: Optional[Tensor],
                   params: Tensor, sequence_lengths: Optional[Tensor], is_training: bool
                   ) -> tuple[_bridge.Signature, Any, Any]:
    """The call's signature, with T and B as the trace has them (maybe symbolic).

    The sizes that make the configuration (I, L*D, P, N, the params size) are specialised on:
    an RNN's sizes are fixed. T and B are checked by their hints and stay symbolic.
    """
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    time_axis, batch_axis = (0, 1) if attrs.time_major else (1, 0)
    max_time, batch = input.shape[time_axis], input.shape[batch_axis]

    def sizes(tensor: Tensor, keep: dict[int, Any]) -> tuple[int, ...]:
        return tuple(_hint(n) if axis in keep else int(n) for axis, n in enumerate(tensor.shape))

    seq, state = {time_axis: max_time, batch_axis: batch}, {batch_axis: batch}
    lengths = None if sequence_lengths is None else sizes(sequence_lengths, {0: batch})
    sig = _bridge.signature(attrs, sizes(input, seq), sizes(input_h, state),
                            None if input_c is None else sizes(input_c, state), sizes(params, {}),
                            numpy_dtype_of(input.dtype), lengths,
                            None if sequence_lengths is None else numpy_dtype_of(sequence_lengths.dtype),
                            is_training=is_training)
    symbolic = not (is_concrete_int(max_time) and is_concrete_int(batch))
    return sig, (max_time, batch) if symbolic else (sig.max_time, sig.batch), symbolic


def _with_sizes(shape: tuple[int, ...], time_major: bool, max_time: Any, batch: Any, sequence: bool) -> list[Any]:
    """``shape`` (a sequence's or a state's, in the call's layout) with T and B put back as traced."""
    dims: list[Any] = list(shape)
    if len(dims) != 3:
        return dims
    if sequence:
        dims[0], dims[1] = (max_time, batch) if time_major else (batch, max_time)
    else:
        dims[1 if time_major else 0] = batch
    return dims


@rnn_forward.register_fake
def _rnn_forward_fake(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
                      sequence_lengths: Optional[Tensor], step: Optional[Tensor], rnn_mode: str, input_mode: str,
                      direction: str, dropout: float, seed: int, seed2: int, num_proj: int, is_training: bool,
                      time_major: bool, algo: str, dropout_state: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    attrs = _bridge.Attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj, time_major, algo)
    sig, (max_time, batch), symbolic = _traced_shapes(attrs, input, input_h, input_c, params, sequence_lengths,
                                                      is_training)
    output = input.new_empty(_with_sizes(sig.output_shape, time_major, max_time, batch, True))
    output_h = input.new_empty(_with_sizes(sig.output_h_shape, time_major, max_time, batch, False))
    output_c = input.new_empty(_with_sizes(sig.output_c_shape, time_major, max_time, batch, False))
    if not is_training:
        reserve: Any = 0
    elif symbolic:
        reserve = torch.library.get_ctx().new_dynamic_size()
    else:
        if input.device.type not in _DEVICE_TYPES:
            raise TypeError(f"cudnn_rnn.torch runs on CPU and CUDA tensors; got input on {input.device}")
        with _on_device(input.device):
            reserve = sig.reserve_elements(input.device.type)
    return output, output_h, output_c, input.new_empty((reserve,))


@rnn_backward.register_fake
def _rnn_backward_fake(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
                       sequence_lengths: Optional[Tensor], step: Optional[Tensor], output: Tensor, output_h: Tensor,
                       output_c: Tensor, output_backprop: Optional[Tensor], output_h_backprop: Optional[Tensor],
                       output_c_backprop: Optional[Tensor], reserve_space: Tensor, rnn_mode: str, input_mode: str,
                       direction: str, dropout: float, seed: int, seed2: int, num_proj: int, time_major: bool,
                       algo: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    input_c_backprop = torch.empty_like(input_c) if input_c is not None and rnn_mode == "lstm" else input.new_empty(0)
    return torch.empty_like(input), torch.empty_like(input_h), input_c_backprop, torch.empty_like(params)


# ---- autograd -------------------------------------------------------------------------------------
_ATTRIBUTES = ("rnn_mode", "input_mode", "direction", "dropout", "seed", "seed2", "num_proj", "is_training",
               "time_major", "algo", "dropout_state")


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
    input, input_h, input_c, params, sequence_lengths, step, *attributes = inputs
    ctx.attributes = dict(zip(_ATTRIBUTES, attributes))
    # an output the loss does not use gets None, not a zero tensor (the reserve's would be as long as the reserve):
    # the backprop takes None as zeros
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(input, input_h, input_c, params, sequence_lengths, step, *output)


def _backward(ctx: Any, output_backprop: Optional[Tensor], output_h_backprop: Optional[Tensor],
              output_c_backprop: Optional[Tensor], _reserve_backprop: Optional[Tensor]) -> tuple[Any, ...]:
    input, input_h, input_c, params, sequence_lengths, step, output, output_h, output_c, reserve = ctx.saved_tensors
    attributes = dict(ctx.attributes)
    # the backprop takes no RNG: cuDNN's masks are in the reserve, the reference backend's come from the seeds
    del attributes["is_training"], attributes["dropout_state"]
    has_cell = attributes["rnn_mode"] == "lstm"
    grads = rnn_backward(input, input_h, input_c, params, sequence_lengths, step, output, output_h, output_c,
                         output_backprop, output_h_backprop, output_c_backprop if has_cell else None, reserve,
                         **attributes)
    input_backprop, input_h_backprop, input_c_backprop, params_backprop = grads
    cell = input_c_backprop if has_cell and input_c is not None else None
    return (input_backprop, input_h_backprop, cell, params_backprop, None, None) + (None,) * len(_ATTRIBUTES)


def _no_double_backward(ctx: Any, *grads: Optional[Tensor]) -> tuple[Any, ...]:
    raise RuntimeError("cudnn_rnn.torch: double backward (a gradient of the gradient) is not supported")


rnn_forward.register_autograd(_backward, setup_context=_setup_context)
rnn_backward.register_autograd(_no_double_backward)


# ---- the public function -------------------------------------------------------------------------
def cudnn_rnn(input: Tensor, input_h: Tensor, input_c: Optional[Tensor], params: Tensor,
              sequence_lengths: Optional[Tensor] = None, *, rnn_mode: str = "lstm",
              input_mode: str = "linear_input", direction: str = "unidirectional", dropout: float = 0.0,
              seed: int = 0, seed2: int = 0, num_proj: int = 0, is_training: bool = True, time_major: bool = True,
              algo: str = "standard") -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """Run a multi-layer RNN on tensors: :func:`cudnn_rnn.cudnn_rnn_v3`, differentiable with PyTorch's autograd.

    The arguments, shapes, semantics and errors are those of :func:`cudnn_rnn.cudnn_rnn_v3`, on
    tensors (``torch.Tensor``; L layers, D directions, B batch, T max length, I input size, N num_units,
    P = num_proj or N)::

        input [T, B, I]  input_h [L*D, B, P]  input_c [L*D, B, N]  params [params_size]     (time_major)
        output [T, B, D*P]  output_h [L*D, B, P]  output_c [L*D, B, N] (LSTM; None otherwise)
        with time_major=False the first two axes of every sequence and state are swapped

    CPU tensors run the reference backend on NumPy views of their memory, CUDA tensors run cuDNN
    on CuPy views (DLPack), on PyTorch's current device and stream; results come back without a
    copy. ``sequence_lengths`` (None, or int32/int64 [B]) is best kept on the CPU: CUDA lengths are
    read back to the host (one wait). Every tensor but ``sequence_lengths`` is on one device and
    of one dtype: float16, float32, float64 or bfloat16 (float16 and bfloat16 compute in float32).

    The gradient with respect to input, input_h, input_c and params is
    :func:`cudnn_rnn.cudnn_rnn_backprop_v3` of the forward's reserve (this library's backprop, not
    PyTorch's); it needs ``is_training=True``, which also applies dropout (with ``seed``, ``seed2``).
    Double backward (a gradient of the gradient) is not supported: it raises ``RuntimeError``.
    The call is one custom operator (``torch.ops.cudnn_rnn.rnn_forward``), so ``torch.compile``
    traces it without a graph break.

    Returns:
        ``(output, output_h, output_c)``; ``output_c`` is None for the modes without a cell state.

    Raises:
        TypeError: as :func:`cudnn_rnn.cudnn_rnn_v3` (an argument that is not a tensor, a bad dtype
            or flag), and for tensors on a device type other than CPU and CUDA, or on both.
        ValueError: as :func:`cudnn_rnn.cudnn_rnn_v3` (shapes, attributes, lengths outside [0, T]),
            and for tensors on different GPUs.
    """
    attrs = _bridge.Attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj, time_major, algo)
    if not torch.compiler.is_compiling():  # compiled code is checked by the fake kernel, once, as it is traced
        check_call(attrs, input, input_h, input_c, params, sequence_lengths, is_training)
        dropout, seed, seed2, num_proj = float(dropout), int(seed), int(seed2), int(num_proj)
        is_training, time_major = bool(is_training), bool(time_major)
    has_cell = rnn_mode == "lstm"
    output, output_h, output_c, _ = rnn_forward(input, input_h, input_c if has_cell else None, params,
                                                sequence_lengths, None, rnn_mode, input_mode, direction, dropout,
                                                seed, seed2, num_proj, is_training, time_major, algo, 0)
    return output, output_h, (output_c if has_cell else None)
