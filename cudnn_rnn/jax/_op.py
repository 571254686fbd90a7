"""``cudnn_rnn.jax.cudnn_rnn``: the op as a ``jax.custom_vjp`` over two ``jax.experimental.buffer_callback`` calls.

    primal    FORWARD(input, input_h, [input_c], params, [lengths], [seed2]) -> output, output_h, [output_c],
              [reserve]                                       (shapes checked while tracing: _bridge.signature)
    fwd rule  the same forward, training; residuals: its operands, its outputs and the reserve
    bwd rule  BACKWARD(residuals, output_backprop, output_h_backprop, [output_c_backprop])
              -> input_backprop, input_h_backprop, [input_c_backprop], params_backprop

Each runs the op on XLA's own buffers: the reference backend on NumPy views (CPU), cuDNN on CuPy views
with XLA's stream current (CUDA). The reserve is sized while tracing for the longest platform JAX has;
each fills its front. Differentiated, ``is_training=False`` runs as training with dropout 0 (the same
outputs). Inside ``jax.shard_map`` results vary over every mesh axis an operand varies over, so that a
replicated operand's gradient is summed over them (JAX's transpose of ``pcast``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.buffer_callback import buffer_callback

from .. import _bridge
from ..config import RNNConfig
from ..ops import _host_lengths

__all__ = ["cudnn_rnn", "init_params"]

SECOND_ORDER = ("cudnn_rnn.jax: second-order differentiation (a gradient of the gradient: jax.grad of jax.grad, "
                "jax.hessian) is not supported; the op has first-order reverse mode (jax.grad, jax.vjp, jax.jacrev)")


@dataclass(frozen=True)
class _Call:
    """What a traced call fixes: its attributes, whether it trains, its shapes and the reserve's length."""

    attrs: _bridge.Attrs
    is_training: bool
    has_lengths: bool
    has_seed2: bool  # seed2 is a traced integer scalar (an operand), not the attribute
    sig: _bridge.Signature
    reserve_elements: int

    def operands(self) -> tuple[str, ...]:
        """The forward's operand names: input, input_h, [input_c], params, [sequence_lengths], [seed2]."""
        return ("input", "input_h", *(("input_c",) if self.attrs.has_cell else ()), "params",
                *(("sequence_lengths",) if self.has_lengths else ()), *(("seed2",) if self.has_seed2 else ()))


@functools.cache
def _has_cuda() -> bool:
    """Whether JAX has a CUDA backend here (then a call may run on ``cuda`` as well as ``cpu``)."""
    with contextlib.suppress(RuntimeError):
        return bool(jax.devices("cuda"))
    return False


def _reserve_elements(sig: _bridge.Signature) -> int:
    """The longest training reserve of the call on the platforms JAX has (see the module docstring)."""
    sizes = [sig.reserve_elements("cpu")]
    if _has_cuda():
        with contextlib.suppress(ImportError):  # no CuPy or cuDNN: the CUDA call reports that if it runs there
            sizes.append(sig.reserve_elements("cuda"))
    return max(sizes)


# ---- the buffers XLA hands a callback, as arrays ----------------------------------------------------
@contextlib.contextmanager
def _arrays(ctx: Any, buffers: Sequence[Any]) -> Iterator[list[Any]]:
    """NumPy views of host buffers; on a GPU CuPy views, inside the call's device and XLA's stream."""
    try:
        stream = ctx.stream
    except jax.errors.JaxRuntimeError:  # no GPU context: a CPU call
        yield [np.asarray(buffer) for buffer in buffers]
        return
    from .._cudnn_streams import import_cupy

    cupy = import_cupy()
    pointers = [buffer.__cuda_array_interface__["data"][0] for buffer in buffers]
    device = next((cupy.cuda.runtime.pointerGetAttributes(p).device for p in pointers if p), cupy.cuda.Device().id)
    with cupy.cuda.Device(device), cupy.cuda.ExternalStream(stream, device):
        def view(buffer: Any, pointer: int) -> Any:  # XLA owns the memory: no owner
            nbytes = int(np.prod(buffer.shape)) * buffer.dtype.itemsize
            memory = cupy.cuda.UnownedMemory(pointer, nbytes, None, device)
            return cupy.ndarray(buffer.shape, buffer.dtype, cupy.cuda.MemoryPointer(memory, 0))

        yield [view(buffer, pointer) for buffer, pointer in zip(buffers, pointers)]


def _seeded(call: _Call, named: dict[str, Any]) -> _bridge.Attrs:
    """The call's attributes with a traced seed2's value (a scalar operand; on a GPU, reading it waits)."""
    return dataclasses.replace(call.attrs, seed2=int(named["seed2"].reshape(()))) if call.has_seed2 else call.attrs


@functools.lru_cache(maxsize=256)  # one callback per call signature, so that JAX's caches see the same one
def _callbacks(call: _Call) -> tuple[Callable[..., None], Callable[..., None]]:
    """The forward's and the backward's callbacks of ``call``: ``(ctx, out, *operands) -> None``."""
    cell, names = call.attrs.has_cell, call.operands()
    result_names = ("output", "output_h", *(("output_c",) if cell else ()),
                    *(("reserve_space",) if call.is_training else ()))
    grad_names = ("input_backprop", "input_h_backprop", *(("input_c_backprop",) if cell else ()), "params_backprop")
    outputs = ("output", "output_h", *(("output_c",) if cell else ()))

    def forward(ctx: Any, out: Sequence[Any], *operands: Any) -> None:
        with _arrays(ctx, [*operands, *out]) as arrays:
            a = dict(zip(names, arrays))
            results = _bridge.forward(_seeded(call, a), a["input"], a["input_h"], a.get("input_c"), a["params"],
                                      a.get("sequence_lengths"), is_training=call.is_training)
            for name, destination in zip(result_names, arrays[len(operands):]):
                _bridge.copy_into(destination, getattr(results, name))

    def backward(ctx: Any, out: Sequence[Any], *operands: Any) -> None:
        with _arrays(ctx, [*operands, *out]) as arrays:
            a = dict(zip((*names, *outputs, *(f"{name}_backprop" for name in outputs), "reserve_space"), arrays))
            grads = _bridge.backward(_seeded(call, a), a["input"], a["input_h"], a.get("input_c"), a["params"],
                                     a.get("sequence_lengths"), a["output"], a["output_h"], a.get("output_c"),
                                     a["output_backprop"], a["output_h_backprop"], a.get("output_c_backprop"),
                                     a["reserve_space"])
            for name, destination in zip(grad_names, arrays[len(operands):]):
                _bridge.copy_into(destination, getattr(grads, name))

    return forward, backward


# ---- shard_map: results vary over the axes the operands vary over ---------------------------------------
def _varying(value: Any) -> frozenset[str]:
    """The mesh axes ``value`` varies over inside ``jax.shard_map`` (none outside it)."""
    aval = jax.typeof(value)
    manual = getattr(aval, "manual_axis_type", None)  # JAX >= 0.10; before, the set was ``aval.vma``
    return frozenset(manual.varying) if manual is not None else frozenset(getattr(aval, "vma", ()))


def _vary(values: Sequence[Any], axes: frozenset[str]) -> list[Any]:
    """``values``, each cast to vary over ``axes`` (``jax.lax.pcast``) where it does not yet."""
    def cast(value: Any) -> Any:
        missing = tuple(sorted(axes - _varying(value)))
        return jax.lax.pcast(value, missing, to="varying") if missing else value

    return [value if value is None else cast(value) for value in values]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _run(callback: Callable[..., None], results: tuple[tuple[tuple[int, ...], Any], ...], *operands: Any
         ) -> list[Any]:
    """One callback's results ``[(shape, dtype)]``; not differentiable itself: the custom_vjp differentiates."""
    axes = frozenset().union(*(_varying(operand) for operand in operands))
    shapes = tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in results)  # type: ignore[no-untyped-call]
    return _vary(buffer_callback(callback, shapes, vmap_method="sequential")(*operands), axes)


@_run.defjvp
def _no_second_order(callback: Any, results: Any, primals: Any, tangents: Any) -> Any:
    raise NotImplementedError(SECOND_ORDER)  # reached by differentiating a forward or backward inside a gradient


# ---- the custom_vjp --------------------------------------------------------------------------------------
def _forward(call: _Call, operands: Sequence[Any]) -> list[Any]:
    sig, cell = call.sig, call.attrs.has_cell
    results = [sig.output_shape, sig.output_h_shape, *((sig.output_c_shape,) if cell else ()),
               *(((call.reserve_elements,),) if call.is_training else ())]
    return _run(_callbacks(call)[0], tuple((shape, sig.dtype) for shape in results), *operands)


def _present(call: _Call, x: Any, h: Any, c: Any, params: Any, lengths: Any, seed2: Any) -> list[Any]:
    return [x, h, *((c,) if call.attrs.has_cell else ()), params, *((lengths,) if call.has_lengths else ()),
            *((seed2,) if call.has_seed2 else ())]


def _primal(call: _Call, x: Any, h: Any, c: Any, params: Any, lengths: Any, seed2: Any) -> tuple[Any, Any, Any]:
    outputs = _forward(call, _present(call, x, h, c, params, lengths, seed2))
    return outputs[0], outputs[1], outputs[2] if call.attrs.has_cell else None


def _differentiated(call: _Call) -> _Call:
    """The call a differentiated forward runs: a training one (dropout 0 where the caller asked for inference)."""
    if call.is_training:
        return call
    sig = replace(call.sig, config=call.sig.config.replace(dropout=0.0))
    return replace(call, attrs=replace(call.attrs, dropout=0.0), is_training=True, sig=sig,
                   reserve_elements=_reserve_elements(sig))


def _fwd(call: _Call, x: Any, h: Any, c: Any, params: Any, lengths: Any, seed2: Any) -> tuple[Any, Any]:
    run = _differentiated(call)
    operands = _present(run, x, h, c, params, lengths, seed2)
    outputs = _forward(run, operands)
    return (outputs[0], outputs[1], outputs[2] if run.attrs.has_cell else None), (operands, outputs)


def _backward(call: _Call, *operands: Any) -> list[Any]:
    named = dict(zip(call.operands(), operands))
    shapes = tuple((named[name].shape, named[name].dtype) for name in ("input", "input_h", "input_c", "params")
                   if name in named)
    return _run(_callbacks(call)[1], shapes, *operands)


def _bwd(call: _Call, residuals: Any, cotangents: Any) -> tuple[Any, ...]:
    run = _differentiated(call)
    operands, outputs = residuals
    cell = run.attrs.has_cell
    count = 3 if cell else 2  # output, output_h, [output_c]
    grads = _backward(run, *operands, *outputs[:count], *cotangents[:count], outputs[-1])
    return grads[0], grads[1], grads[2] if cell else None, grads[-1], None, None


_rnn = jax.custom_vjp(_primal, nondiff_argnums=(0,))
_rnn.defvjp(_fwd, _bwd)


def _traced_seed2(seed2: Any) -> Any:
    """A seed2 given as an integer array of shape () (a traced value: one compilation for every step's seed), as a
    jax.Array; None for a Python int (the attribute, checked as the op checks it)."""
    if not (hasattr(seed2, "shape") and hasattr(seed2, "dtype")) or isinstance(seed2, (np.integer, int)):
        return None
    if not jnp.issubdtype(seed2.dtype, jnp.integer):
        raise TypeError(f"seed2 must be an int or an integer array of shape (); got an array of dtype {seed2.dtype}")
    if tuple(seed2.shape) != ():
        raise ValueError(f"seed2 must be an int or an integer array of shape (); got shape {tuple(seed2.shape)}")
    return jnp.asarray(seed2)


def cudnn_rnn(input: Any, input_h: Any, input_c: Any, params: Any, sequence_lengths: Any = None, *,
              rnn_mode: str = "lstm", input_mode: str = "linear_input", direction: str = "unidirectional",
              dropout: float = 0.0, seed: int = 0, seed2: int = 0, num_proj: int = 0, is_training: bool = True,
              time_major: bool = True, algo: str = "standard") -> tuple[Any, Any, Any]:
    """:func:`cudnn_rnn.cudnn_rnn_v3` on ``jax.Array``\\ s, under ``jax.jit``, ``jax.grad``, ``vmap``, ``shard_map``.

    The op's semantics, shapes and errors exactly (L layers, D directions, B batch, T max length,
    I input size, N num_units, P = num_proj or N)::

        time_major=True:  input [T, B, I], input_h [L*D, B, P], input_c [L*D, B, N] (LSTM)
                          -> output [T, B, D*P], output_h [L*D, B, P], output_c [L*D, B, N] (LSTM; else None)
        time_major=False: the first two axes of each swapped ([B, T, I], [B, L*D, P], ...)
        params [params_size] (init_params gives a layer's); sequence_lengths None or int32/int64 [B] in [0, T]

    Attributes are static, but ``seed2`` may be an integer array of shape () (a traced step counter:
    one compilation for every step). Differentiable in first-order reverse mode (``jax.grad``, ``jax.vjp``,
    ``jax.jacrev``) with respect to input, input_h, input_c and params, by the library's backprop;
    sequence_lengths get no gradient. Forward mode (``jax.jvp``, ``jax.jacfwd``) raises JAX's error
    for a ``custom_vjp``; second order (``jax.hessian``, grad of grad) raises NotImplementedError.

    On a GPU it runs on XLA's stream without host synchronisation, but lengths and a traced seed2
    are read to the host; cuDNN's workspaces come from CuPy's pool (start JAX with
    ``XLA_PYTHON_CLIENT_PREALLOCATE=false``).

    Returns:
        ``(output, output_h, output_c)``, ``output_c`` None for the modes without a cell.

    Raises:
        TypeError, ValueError: while tracing, with the op's messages, for what shapes, dtypes,
            attributes and host (NumPy) lengths decide. What only traced values decide (lengths
            outside [0, T], a persistent ``algo`` with unequal lengths) fails when the call runs:
            an XLA error (``jax.errors.JaxRuntimeError``, or ``ValueError`` on JAX's fast dispatch
            path) whose text ends with the op's message.
    """
    traced_seed2 = _traced_seed2(seed2)
    attrs = _bridge.Attrs(rnn_mode, input_mode, direction, dropout, seed, 0 if traced_seed2 is not None else seed2,
                          num_proj, time_major, algo)
    cell = attrs.rnn_mode == "lstm"
    named = {"input": input, "input_h": input_h, "input_c": input_c if cell else None, "params": params}
    lengths = sequence_lengths
    for name, value in (*named.items(), ("sequence_lengths", lengths)):  # arrays: jax.Array, tracer or NumPy
        if value is not None and not (hasattr(value, "shape") and hasattr(value, "dtype")):
            kind = ("None or an int32 or int64 array of shape [batch]" if name == "sequence_lengths"
                    else "a jax.Array or numpy.ndarray")
            raise TypeError(f"{name} must be {kind}; got {type(value).__name__}")
    arrays = {name: value for name, value in named.items() if value is not None}

    def shape(name: str) -> Any:
        return None if name not in arrays else tuple(arrays[name].shape)

    sig = _bridge.signature(attrs, shape("input"), shape("input_h"), shape("input_c"), shape("params"),
                            getattr(input, "dtype", None), None if lengths is None else tuple(lengths.shape),
                            None if lengths is None else lengths.dtype, is_training=is_training,
                            dtypes={name: array.dtype for name, array in arrays.items() if name != "input"})
    if isinstance(lengths, np.ndarray):  # host values: checked before JAX may narrow int64 to int32
        _host_lengths(lengths, sig.batch, sig.max_time)
    call = _Call(attrs, bool(is_training), lengths is not None, traced_seed2 is not None, sig, _reserve_elements(sig))
    operands = [None if value is None else jnp.asarray(value)
                for value in (*(named[name] for name in ("input", "input_h", "input_c", "params")), lengths,
                              traced_seed2)]
    axes = frozenset().union(*(_varying(value) for value in operands if value is not None))
    output, output_h, output_c = _rnn(call, *_vary(operands, axes))
    return output, output_h, output_c if cell else None


def init_params(config: RNNConfig, seed: int = 0) -> Any:
    """The params buffer ``cudnn_rnn.LSTM(..., seed=seed).params`` (and GRU, RNN) holds for ``config``, as a
    ``jax.Array`` [params_size] of ``config.dtype`` (float64 needs JAX's x64 mode): Glorot-uniform input
    matrices, orthogonal recurrent matrices, zero biases, an LSTM's forget-gate bias 1. The seeds a
    layer refuses are refused in its words."""
    return jnp.asarray(_bridge.init_params(config, seed))
