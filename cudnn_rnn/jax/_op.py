"""``cudnn_rnn.jax.cudnn_rnn``: the op as a ``jax.custom_vjp`` over two XLA FFI calls.

Tracing a call checks it from its shapes (``_bridge.signature``: the op's own errors), then emits::

    primal    FORWARD(input, input_h, [input_c], params, [lengths], [seed2]) -> output, output_h, [output_c],
              [reserve]
    fwd rule  the same forward, training: the reserve and every operand and output are the residuals
    bwd rule  BACKWARD(residuals, output_backprop, output_h_backprop, [output_c_backprop])
              -> input_backprop, input_h_backprop, [input_c_backprop], params_backprop

The reserve's length is decided while tracing, before the platform that runs the computation is
known: it is the longest a training forward keeps on any platform JAX has here (the reference
backend's on ``cpu``; cuDNN's on ``cuda``, asked on CuPy's current GPU), and each platform fills
its front. Under differentiation a forward with ``is_training=False`` runs as a training forward
with dropout 0 (the same outputs: an inference forward applies no dropout), so that its gradient
exists; without differentiation it runs as asked and keeps no reserve.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import _bridge
from ..config import RNNConfig
from . import _targets

__all__ = ["cudnn_rnn", "init_params"]

#: jax.ShapeDtypeStruct (untyped in JAX): (shape, dtype) -> a result's shape and dtype for jax.ffi.ffi_call
_result: Callable[[tuple[int, ...], Any], Any] = jax.ShapeDtypeStruct


@dataclass(frozen=True)
class _Call:
    """What a traced call fixes: its attributes, whether it trains, its shapes and the reserve's length."""

    attrs: _bridge.Attrs
    is_training: bool
    has_lengths: bool
    has_seed2: bool  # seed2 is a traced integer scalar (an operand), not the attribute
    sig: _bridge.Signature
    reserve_elements: int


@functools.cache
def _platforms() -> tuple[str, ...]:
    """The platforms of ``_bridge.PLATFORMS`` that JAX can run here: ``cpu``, and ``cuda`` with a CUDA backend."""
    try:
        jax.devices("cuda")
    except RuntimeError:  # JAX has no CUDA backend here
        return ("cpu",)
    return ("cpu", "cuda")


def _reserve_elements(sig: _bridge.Signature) -> int:
    """The longest training reserve of the call on the platforms JAX has (see the module docstring)."""
    sizes = [sig.reserve_elements("cpu")]
    if "cuda" in _platforms():
        try:
            sizes.append(sig.reserve_elements("cuda"))
        except ImportError:  # no CuPy or cuDNN: the CUDA target reports that if the call runs there
            pass
    return max(sizes)


def _as_array(name: str, value: Any) -> Any:
    """``value`` if it is an array (a jax.Array, a tracer, a NumPy array); TypeError otherwise."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise TypeError(f"{name} must be a jax.Array or numpy.ndarray; got {type(value).__name__}")
    return jnp.asarray(value)


def _extras(call: _Call, lengths: Any, seed2: Any) -> tuple[Any, ...]:
    """The optional operands a call has, in order: sequence_lengths, then a traced seed2."""
    return (*((lengths,) if call.has_lengths else ()), *((seed2,) if call.has_seed2 else ()))


def _flags(call: _Call) -> dict[str, bool]:
    return {"has_lengths": call.has_lengths, "has_seed2": call.has_seed2}


def _traced_seed2(seed2: Any) -> Any:
    """A seed2 given as an integer array of shape () (a traced value: one compilation for every step's seed), as
    an int64 jax.Array; None for a Python int (the attribute, checked as the op checks it)."""
    if not (hasattr(seed2, "shape") and hasattr(seed2, "dtype")) or isinstance(seed2, (np.integer, int)):
        return None
    if not jnp.issubdtype(seed2.dtype, jnp.integer):
        raise TypeError(f"seed2 must be an int or an integer array of shape (); got an array of dtype {seed2.dtype}")
    if tuple(seed2.shape) != ():
        raise ValueError(f"seed2 must be an int or an integer array of shape (); got shape {tuple(seed2.shape)}")
    return jnp.asarray(seed2)


def _forward(call: _Call, x: Any, h: Any, c: Any, params: Any, lengths: Any, seed2: Any, *,
             training: bool) -> list[Any]:
    attrs, sig = call.attrs, call.sig
    shapes = {"output": sig.output_shape, "output_h": sig.output_h_shape, "output_c": sig.output_c_shape,
              "reserve_space": (call.reserve_elements,)}
    results = [_result(shapes[name], sig.dtype)
               for name in _targets.forward_results(attrs.has_cell, training)]
    operands = (x, h, *((c,) if attrs.has_cell else ()), params, *_extras(call, lengths, seed2))
    _targets.ensure_registered()
    outputs = jax.ffi.ffi_call(_targets.FORWARD, results, vmap_method="sequential")(
        *operands, **_targets.ffi_attributes(attrs, is_training=training, **_flags(call)))
    return list(outputs)


def _primal(call: _Call, x: Any, h: Any, c: Any, params: Any, lengths: Any, seed2: Any) -> tuple[Any, Any, Any]:
    outputs = _forward(call, x, h, c, params, lengths, seed2, training=call.is_training)
    return outputs[0], outputs[1], outputs[2] if call.attrs.has_cell else None


def _differentiated(call: _Call) -> _Call:
    """The call a differentiated forward runs: a training one (dropout 0 where the caller asked for inference)."""
    if call.is_training:
        return call
    sig = replace(call.sig, config=call.sig.config.replace(dropout=0.0))
    return replace(call, attrs=replace(call.attrs, dropout=0.0), is_training=True, sig=sig,
                   reserve_elements=_reserve_elements(sig))


def _fwd(call: _Call, x: Any, h: Any, c: Any, params: Any, lengths: Any,
         seed2: Any) -> tuple[tuple[Any, Any, Any], Any]:
    run = _differentiated(call)
    outputs = _forward(run, x, h, c, params, lengths, seed2, training=True)
    y, hy, cy = outputs[0], outputs[1], outputs[2] if run.attrs.has_cell else None
    return (y, hy, cy), (x, h, c, params, lengths, seed2, y, hy, cy, outputs[-1])


def _bwd(call: _Call, residuals: Any, cotangents: Any) -> tuple[Any, ...]:
    run = _differentiated(call)
    x, h, c, params, lengths, seed2, y, hy, cy, reserve = residuals
    dy, dhy, dcy = cotangents
    cell = run.attrs.has_cell
    operands = (x, h, *((c,) if cell else ()), params, *_extras(run, lengths, seed2), y, hy,
                *((cy,) if cell else ()), dy, dhy, *((dcy,) if cell else ()), reserve)
    shapes = {"input_backprop": x, "input_h_backprop": h, "input_c_backprop": c, "params_backprop": params}
    results = [_result(shapes[name].shape, shapes[name].dtype)
               for name in _targets.backward_results(cell)]
    grads = jax.ffi.ffi_call(_targets.BACKWARD, results, vmap_method="sequential")(
        *operands, **_targets.ffi_attributes(run.attrs, **_flags(run)))
    return grads[0], grads[1], grads[2] if cell else None, grads[-1], None, None


_rnn = jax.custom_vjp(_primal, nondiff_argnums=(0,))
_rnn.defvjp(_fwd, _bwd)


def cudnn_rnn(input: Any, input_h: Any, input_c: Any, params: Any, sequence_lengths: Any = None, *,
              rnn_mode: str = "lstm", input_mode: str = "linear_input", direction: str = "unidirectional",
              dropout: float = 0.0, seed: int = 0, seed2: int = 0, num_proj: int = 0, is_training: bool = True,
              time_major: bool = True, algo: str = "standard") -> tuple[Any, Any, Any]:
    """:func:`cudnn_rnn.cudnn_rnn_v3` on ``jax.Array``\\ s, under ``jax.jit``, ``jax.grad`` and ``jax.vjp``.

    The op's semantics and shapes exactly (L layers, D directions, B batch, T max length, I input
    size, N num_units, P = num_proj or N)::

        time_major=True:  input [T, B, I], input_h [L*D, B, P], input_c [L*D, B, N] (LSTM)
                          -> output [T, B, D*P], output_h [L*D, B, P], output_c [L*D, B, N] (LSTM; else None)
        time_major=False: the first two axes of each swapped ([B, T, I], [B, L*D, P], ...)
        params [params_size] (cudnn_rnn.cudnn_rnn_params_size; init_params gives a layer's)

    Output rows past a sequence's length are 0, output_h/output_c hold each sequence's state after
    its own last step. Differentiable with respect to input, input_h, input_c and params (the
    library's backprop from the forward's reserve, a residual); sequence_lengths, integers, get no
    gradient. Every array shares one dtype: float32, float64 (JAX's x64 mode), float16 or bfloat16
    (the last two compute in float32).

    Runs as XLA FFI calls: on a CPU device the reference backend on NumPy views of XLA's buffers,
    on a CUDA device cuDNN on CuPy views of them, on XLA's stream with no host synchronisation,
    except that ``sequence_lengths``, when given, are read to the host (cuDNN takes them from host
    memory): the call waits for the work queued before it. Pass ``None`` for all-T lengths in a
    hot loop on the GPU. cuDNN's workspaces and the op's temporaries come from CuPy's memory pool:
    start JAX with ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (or a smaller
    ``XLA_PYTHON_CLIENT_MEM_FRACTION``) to leave it room.

    Args:
        input: [T, B, I] or [B, T, I].
        input_h: [L*D, B, P] or [B, L*D, P]: initial hidden states.
        input_c: [L*D, B, N] or [B, L*D, N]: initial cell states for LSTM; ignored (None accepted)
            otherwise.
        params: [params_size]: the params buffer.
        sequence_lengths: None (all T) or an int32/int64 array [B] with values in [0, T].
        rnn_mode: as for :func:`cudnn_rnn.cudnn_rnn_v3`, like every attribute below. Static (as
            all but a traced ``seed2``): a new value traces anew.
        input_mode: as for the op.
        direction: as for the op.
        dropout: as for the op. The masks come from (seed, seed2): the same in every call with
            the same seeds.
        seed: as for the op.
        seed2: an int, or an integer array of shape () (a traced value, e.g. a training step's
            counter): then one compilation serves every step, the value is read when the call
            runs (on a GPU that waits for the work queued before it) and must be a C int.
        num_proj: as for the op.
        is_training: as for the op. Under differentiation, ``is_training=False`` runs as a
            training forward without dropout.
        time_major: as for the op.
        algo: as for the op.

    Returns:
        ``(output, output_h, output_c)``, ``output_c`` None for the modes without a cell.

    Raises:
        TypeError, ValueError: while tracing, with the op's messages, for what shapes, dtypes and
            attributes decide. What only the values decide (lengths outside [0, T], a persistent
            ``algo`` with unequal lengths) fails when the computation runs: JAX raises the XLA
            error, ``jax.errors.JaxRuntimeError`` (``ValueError`` on JAX's fast dispatch path), whose
            message is the op's after XLA's ``INVALID_ARGUMENT:``.
    """
    traced_seed2 = _traced_seed2(seed2)
    attrs = _bridge.Attrs(rnn_mode, input_mode, direction, dropout, seed, 0 if traced_seed2 is not None else seed2,
                          num_proj, time_major, algo)
    missing = [name for name, value in (("input", input), ("input_h", input_h), ("params", params)) if value is None]
    if missing:
        raise TypeError(f"{', '.join(missing)} must be an array; got None")
    x, h, p = _as_array("input", input), _as_array("input_h", input_h), _as_array("params", params)
    cell = attrs.rnn_mode == "lstm"
    c = _as_array("input_c", input_c) if cell and input_c is not None else None
    lengths = None
    if sequence_lengths is not None:
        if not (hasattr(sequence_lengths, "shape") and hasattr(sequence_lengths, "dtype")):
            raise TypeError("sequence_lengths must be None or an int32 or int64 array of shape [batch]; "
                            f"got {type(sequence_lengths).__name__}")
        lengths = sequence_lengths
    own_dtypes = {name: array.dtype for name, array in (("input_h", h), ("input_c", c), ("params", p))
                  if array is not None}
    sig = _bridge.signature(attrs, x.shape, h.shape, None if c is None else c.shape, p.shape, x.dtype,
                            None if lengths is None else tuple(lengths.shape),
                            None if lengths is None else lengths.dtype, is_training=is_training, dtypes=own_dtypes)
    if lengths is not None:
        lengths = _as_array("sequence_lengths", lengths)
    call = _Call(attrs, bool(is_training), lengths is not None, traced_seed2 is not None, sig, _reserve_elements(sig))
    output, output_h, output_c = _rnn(call, x, h, c, p, lengths, traced_seed2)
    return output, output_h, output_c if cell else None


def init_params(config: RNNConfig, seed: int = 0) -> Any:
    """The params buffer the layer classes start from with ``seed``, as a ``jax.Array`` [params_size].

    The same values as ``cudnn_rnn.LSTM(..., seed=seed).params`` (and GRU, RNN) for the
    configuration ``config``, in ``config.dtype`` (float64 needs JAX's x64 mode): Glorot-uniform
    input matrices, orthogonal recurrent matrices, zero biases, and an LSTM's forget-gate bias 1.
    """
    return jnp.asarray(_bridge.init_params(config, seed))
