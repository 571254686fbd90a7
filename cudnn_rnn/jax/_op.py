"""``cudnn_rnn.jax.cudnn_rnn``: the op as a ``jax.custom_vjp`` over two ``jax.experimental.buffer_callback`` calls.

    primal    FORWARD(input, input_h, [input_c], params, [lengths], [seed, seed2]) -> output, output_h, [output_c],
              [reserve]                                       (shapes checked while tracing: _bridge.signature)
    fwd rule  the same forward, training; residuals: its operands, its outputs and the reserve
    bwd rule  BACKWARD(operands, outputs, their cotangents, reserve)
              -> input_backprop, input_h_backprop, [input_c_backprop], params_backprop

A callback runs the op, with the config made once while tracing, on XLA's own buffers, writing its results
straight into XLA's where it can (``out``; the op copies the others): the reference backend on NumPy views
(CPU), cuDNN on CuPy views with XLA's stream current (CUDA). The reserve is sized while tracing for the
longest platform JAX has; each fills its front. Differentiated, ``is_training=False`` runs as training with
dropout 0 (the same outputs). Inside ``jax.shard_map`` results vary over every mesh axis an operand
varies over, so that a replicated operand's gradient is summed over them (JAX's transpose of ``pcast``).
Each callback sits in a ``jax.custom_jvp`` whose rule raises: no second order.

The seeds are values, never attributes (see :func:`cudnn_rnn`): a call whose dropout acts takes seed and
seed2 as operands of shape () (an int as int32) read in the callback; any other takes none, its seeds 0 in
``_Call``. A new seed at every step makes no new callback.
"""

from __future__ import annotations

import contextlib
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

SECOND_ORDER = ("cudnn_rnn.jax: second-order differentiation (a gradient of the gradient: jax.grad of jax.grad, "
                "jax.hessian) is not supported; the op has first-order reverse mode (jax.grad, jax.vjp, jax.jacrev)")
#: the backward's operands after the forward's, by name; "_c" ones only for an LSTM
_RESIDUALS = ("output", "output_h", "output_c", "output_backprop", "output_h_backprop", "output_c_backprop",
              "reserve_space")


@dataclass(frozen=True)
class _Call:
    """What a traced call fixes: its config and layout (``sig``), whether it trains, its operands' names, the
    reserve's length."""

    is_training: bool
    names: tuple[str, ...]  # input, input_h, [input_c], params, [sequence_lengths], [seed, seed2] (dropout acts)
    sig: _bridge.Signature
    reserve_elements: int


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


@contextlib.contextmanager
def _arrays(ctx: Any, buffers: Sequence[Any]) -> Iterator[list[Any]]:
    """NumPy views of host buffers; on a GPU CuPy views, inside the call's device and XLA's stream."""
    try:
        stream = ctx.stream
    except jax.errors.JaxRuntimeError:  # no GPU context: a CPU call
        yield [np.asarray(buffer) for buffer in buffers]
        return
    from .._cudnn._streams import external_stream, import_cupy

    cupy = import_cupy()
    pointers = [buffer.__cuda_array_interface__["data"][0] for buffer in buffers]
    device = next((cupy.cuda.runtime.pointerGetAttributes(p).device for p in pointers if p), cupy.cuda.Device().id)
    with cupy.cuda.Device(device), external_stream(stream, device):
        def view(buffer: Any, pointer: int) -> Any:  # XLA owns the memory: no owner
            memory = cupy.cuda.UnownedMemory(pointer, int(np.prod(buffer.shape)) * buffer.dtype.itemsize, None, device)
            return cupy.ndarray(buffer.shape, buffer.dtype, cupy.cuda.MemoryPointer(memory, 0))
        yield [view(buffer, pointer) for buffer, pointer in zip(buffers, pointers)]


@functools.lru_cache(maxsize=256)  # one callback per call and direction, so that JAX's caches see the same one
def _callback(call: _Call, backward: bool) -> Callable[..., None]:
    """The forward's or the backward's callback of ``call``: ``(ctx, out, *operands) -> None``."""
    cell = call.sig.config.has_cell
    outputs = ("output", "output_h", *(("output_c",) if cell else ()))
    names = (*call.names, *(name for name in _RESIDUALS if cell or "_c" not in name)) if backward else call.names
    results = (("input_backprop", "input_h_backprop", *(("input_c_backprop",) if cell else ()), "params_backprop")
               if backward else (*outputs, *(("reserve_space",) if call.is_training else ())))

    def run(ctx: Any, out: Sequence[Any], *operands: Any) -> None:
        with _arrays(ctx, [*operands, *out]) as arrays:
            a, into = dict(zip(names, arrays)), dict(zip(results, arrays[len(operands):]))
            config = call.sig.config if "seed" not in a else call.sig.config.replace(  # both or neither, range checked
                seed=int(a["seed"].reshape(())), seed2=int(a["seed2"].reshape(())))
            args = (config, a["input"], a["input_h"], a.get("input_c"), a["params"], a.get("sequence_lengths"))
            if backward:  # the results written into XLA's buffers; the params gradient added into a zeroed one
                params_grad = into.pop("params_backprop")
                params_grad[...] = 0
                _bridge.backward(*args, *(a.get(name) for name in _RESIDUALS), time_major=call.sig.time_major,
                                 params_grad=params_grad, out=into)
            else:
                _bridge.forward(*args, time_major=call.sig.time_major, is_training=call.is_training, out=into)

    return run


def _varying(value: Any) -> frozenset[str]:
    """The mesh axes ``value`` varies over inside ``jax.shard_map`` (none outside it)."""
    aval = jax.typeof(value)
    manual = getattr(aval, "manual_axis_type", None)  # JAX >= 0.10; before, the set was ``aval.vma``
    return frozenset(manual.varying) if manual is not None else frozenset(getattr(aval, "vma", ()))


def _vary(values: Sequence[Any]) -> list[Any]:
    """``values``, each cast (``jax.lax.pcast``) to vary over every mesh axis one of them varies over."""
    axes = frozenset().union(*map(_varying, values))
    return [jax.lax.pcast(value, missing, to="varying") if (missing := tuple(sorted(axes - _varying(value)))) else value
            for value in values]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _run(callback: Callable[..., None], results: tuple[tuple[tuple[int, ...], Any], ...], *operands: Any
         ) -> list[Any]:
    """One callback's results ``[(shape, dtype)]``, varying as its operands; differentiating it raises."""
    shapes = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in results]  # type: ignore[no-untyped-call]
    outputs = buffer_callback(callback, shapes, vmap_method="sequential")(*operands)
    return _vary([*operands, *outputs])[len(operands):]


@_run.defjvp
def _no_second_order(callback: Any, results: Any, primals: Any, tangents: Any) -> Any:
    raise NotImplementedError(SECOND_ORDER)  # reached by differentiating a forward or backward inside a gradient


def _forward(call: _Call, operands: tuple[Any, ...]) -> tuple[tuple[Any, Any, Any], list[Any]]:
    """The forward's ``(output, output_h, output_c or None)`` and all its results (the reserve last, training)."""
    sig, cell = call.sig, call.sig.config.has_cell
    shapes = [sig.output_shape, sig.output_h_shape, *((sig.output_c_shape,) if cell else ()),
              *(((call.reserve_elements,),) if call.is_training else ())]
    outputs = _run(_callback(call, False), tuple((shape, sig.dtype) for shape in shapes), *operands)
    return (outputs[0], outputs[1], outputs[2] if cell else None), outputs


@functools.lru_cache(maxsize=256)  # asked by the fwd and the bwd rule: the reserve's size is found once
def _differentiated(call: _Call) -> _Call:
    """The call a differentiated forward runs: a training one (dropout 0 where the caller asked for inference)."""
    if call.is_training:
        return call
    sig = replace(call.sig, config=call.sig.config.replace(dropout=0.0))
    return replace(call, is_training=True, sig=sig, reserve_elements=_reserve_elements(sig))


def _primal(call: _Call, operands: tuple[Any, ...]) -> tuple[Any, Any, Any]:
    return _forward(call, operands)[0]


def _fwd(call: _Call, operands: tuple[Any, ...]) -> tuple[tuple[Any, Any, Any], Any]:
    returned, outputs = _forward(_differentiated(call), operands)
    return returned, (operands, outputs)


def _bwd(call: _Call, residuals: Any, cotangents: Any) -> tuple[Any]:
    operands, outputs = residuals
    n = 3 if call.sig.config.has_cell else 2  # output, output_h, [output_c]; input, input_h, [input_c] (and params)
    grads = _run(_callback(_differentiated(call), True), tuple((a.shape, a.dtype) for a in operands[:n + 1]),
                 *operands, *outputs[:n], *cotangents[:n], outputs[-1])
    return (tuple(grads) + (None,) * (len(operands) - n - 1),)  # no gradient for lengths and the seeds


_rnn = jax.custom_vjp(_primal, nondiff_argnums=(0,))
_rnn.defvjp(_fwd, _bwd)


def _seed_array(name: str, value: Any) -> Any:
    """``value`` as a jax.Array if it is an integer array of shape () (a traced step counter, say); None for
    anything else (an int: the signature checks it, and refuses what is no int, as the op does)."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")) or isinstance(value, (np.integer, int)):
        return None
    if not jnp.issubdtype(value.dtype, jnp.integer):
        raise TypeError(f"{name} must be an int or an integer array of shape (); got an array of dtype {value.dtype}")
    if tuple(value.shape) != ():
        raise ValueError(f"{name} must be an int or an integer array of shape (); got shape {tuple(value.shape)}")
    return jnp.asarray(value)


def cudnn_rnn(input: Any, input_h: Any, input_c: Any, params: Any, sequence_lengths: Any = None, *,
              rnn_mode: str = "lstm", input_mode: str = "linear_input", direction: str = "unidirectional",
              dropout: float = 0.0, seed: Any = 0, seed2: Any = 0, num_proj: int = 0, is_training: bool = True,
              time_major: bool = True, algo: str = "standard") -> tuple[Any, Any, Any]:
    """:func:`cudnn_rnn.cudnn_rnn_v3` on ``jax.Array``\\ s, under ``jax.jit``, ``jax.grad``, ``vmap``, ``shard_map``.

    The op's semantics, shapes and errors exactly (L layers, D directions, B batch, T max length,
    I input size, N num_units, P = num_proj or N)::

        time_major=True:  input [T, B, I], input_h [L*D, B, P], input_c [L*D, B, N] (LSTM)
                          -> output [T, B, D*P], output_h [L*D, B, P], output_c [L*D, B, N] (LSTM; else None)
        time_major=False: the first two axes of each swapped ([B, T, I], [B, L*D, P], ...)
        params [params_size] (init_params gives a layer's); sequence_lengths None or int32/int64 [B] in [0, T]

    Returns ``(output, output_h, output_c)``, output_c None without a cell. NumPy arrays become JAX's
    (float64 is float32 unless x64 is on); NumPy lengths are checked first. Attributes are static; the
    seeds are values of the computation: ``seed`` and ``seed2`` are each an int or an integer array of
    shape () (a traced step counter), C ints, and a training call draws its masks from the pair's
    64-bit seed (:func:`cudnn_rnn.config.tf_seed64`) as the op does, so a new seed at every step
    compiles nothing new. Where no dropout acts (``dropout=0``, ``is_training=False``, one layer)
    the seeds change nothing and are not passed; where it acts they are read to the host when the call
    runs (on a GPU, after the work queued before it). First-order reverse mode
    (``jax.grad``, ``jax.vjp``, ``jax.jacrev``) differentiates input, input_h, input_c and params by the
    library's backprop; sequence_lengths get no gradient. Forward mode (``jax.jvp``, ``jax.jacfwd``)
    raises JAX's TypeError for a ``custom_vjp``, second order (grad of grad, ``jax.hessian``)
    NotImplementedError; ``jax.linearize`` returns the outputs, and calling the linear function it
    returns raises that TypeError. On a GPU it runs on XLA's stream with no host sync, but reads lengths
    and, where dropout acts, the seeds to the host.

    Raises:
        TypeError, ValueError: while tracing, the op's, for what shapes, dtypes, attributes, int seeds
            and host lengths decide; a seed array that is not an integer array of shape (). What traced
            values decide (lengths outside [0, T], a persistent ``algo`` with unequal lengths, a traced
            seed outside a C int) fails when the call runs: an XLA error (``jax.errors.JaxRuntimeError``,
            or ``ValueError`` on JAX's fast dispatch path) whose text ends with the op's error.
    """
    seeds = {"seed": seed, "seed2": seed2}  # operands of shape () after the arrays where dropout acts
    seed_arrays = {name: _seed_array(name, value) for name, value in seeds.items()}
    ints = {name: 0 if seed_arrays[name] is not None else value for name, value in seeds.items()}
    named = {"input": input, "input_h": input_h, "input_c": input_c if rnn_mode == "lstm" else None,
             "params": params, "sequence_lengths": sequence_lengths}
    for name, value in named.items():  # arrays: jax.Array, tracer or NumPy
        if value is not None and not (hasattr(value, "shape") and hasattr(value, "dtype")):
            kind = "None or an int32 or int64 array of shape [batch]" if name == "sequence_lengths" else \
                "a jax.Array or numpy.ndarray"
            raise TypeError(f"{name} must be {kind}; got {type(value).__name__}")
    arrays = {name: value if name == "sequence_lengths" else jnp.asarray(value)  # lengths: checked before narrowing
              for name, value in named.items() if value is not None}

    def shape(name: str) -> Any:
        return None if name not in arrays else tuple(arrays[name].shape)

    sig = _bridge.signature(shape("input"), shape("input_h"), shape("input_c"), shape("params"),
                            arrays["input"].dtype if "input" in arrays else None, shape("sequence_lengths"),
                            getattr(sequence_lengths, "dtype", None), rnn_mode=rnn_mode, input_mode=input_mode,
                            direction=direction, dropout=dropout, num_proj=num_proj, time_major=time_major,
                            algo=algo, is_training=is_training, **ints,  # an int seed checked as the op checks it
                            dtypes={name: arrays[name].dtype for name in ("input_h", "input_c", "params")
                                    if name in arrays})
    if isinstance(sequence_lengths, np.ndarray):
        _host_lengths(sequence_lengths, sig.batch, sig.max_time)
    if is_training and sig.config.inter_layer_dropout > 0:  # the dropout that acts: the seeds are values
        for name, value in seeds.items():
            arrays[name] = jnp.asarray(value, jnp.int32) if seed_arrays[name] is None else seed_arrays[name]
    sig = replace(sig, config=sig.config.replace(seed=0, seed2=0))  # the seeds key no callback: operands, or none
    call = _Call(bool(is_training), tuple(arrays), sig, _reserve_elements(sig))
    return _rnn(call, tuple(_vary([jnp.asarray(value) for value in arrays.values()])))


def init_params(config: RNNConfig, seed: int = 0) -> Any:
    """The params buffer ``cudnn_rnn.LSTM(..., seed=seed).params`` (and GRU, RNN) holds for ``config``, as a
    ``jax.Array`` [params_size] of ``config.dtype`` (float64 needs JAX's x64 mode): Glorot-uniform input
    matrices, orthogonal recurrent matrices, zero biases, an LSTM's forget-gate bias 1. The seeds a
    layer refuses are refused in its words."""
    return jnp.asarray(_bridge.init_params(config, seed))
