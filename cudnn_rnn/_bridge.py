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

The reserve_space of a training forward is an output the framework must size before any data
exists: :meth:`Signature.reserve_elements` gives its length for the backend a platform runs (the
reference backend on ``"cpu"``, cuDNN on ``"cuda"``). It travels through the framework's graph as
the backward's residual, so :func:`backward` checks it as an array but does not read its header
(``ops.backprop_from_residual``): on CuPy that would wait for the device.

``init_params(config, seed)`` is the buffer the layer classes start from with that seed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ._arrays import Array, array_module
from ._initializers import keras_init_params
from .config import PERSISTENT_ALGOS, RNNConfig, numpy_dtype
from ._dropout_rng import DropoutRNG
from .ops import RNNGradients, RNNOutputs, _prepare, backprop_from_residual, forward_with_rng

__all__ = ["Attrs", "Signature", "signature", "forward", "backward", "copy_into", "init_params", "PLATFORMS"]

#: The platforms a bridge runs on, and the backend each runs.
PLATFORMS = {"cpu": "reference", "cuda": "cudnn"}


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


@dataclass(frozen=True)
class Signature:
    """One call's sizes, from shapes alone.

    Shapes in the call's layout: ``output_shape`` [T, B, D*P] or [B, T, D*P], ``output_h_shape``
    [L*D, B, P] or [B, L*D, P], ``output_c_shape`` [L*D, B, N] or [B, L*D, N] for LSTM and (0,)
    otherwise (as the op returns).
    """

    config: RNNConfig
    time_major: bool
    max_time: int
    batch: int
    dtype: np.dtype
    output_shape: tuple[int, ...]
    output_h_shape: tuple[int, ...]
    output_c_shape: tuple[int, ...]

    def reserve_elements(self, platform: str) -> int:
        """Length of a training forward's reserve_space (1-D, the input's dtype) when ``platform`` runs the call.

        ``"cpu"`` runs the reference backend; ``"cuda"`` runs cuDNN and asks it (CuPy and a GPU needed,
        on CuPy's current device). A call with T == 0 or B == 0 keeps only the header.
        """
        from . import _reserve

        if platform not in PLATFORMS:
            raise ValueError(f"platform must be one of {tuple(PLATFORMS)}; got {platform!r}")
        config, head = self.config, _reserve.header_elements(self.dtype)
        if self.max_time == 0 or self.batch == 0:
            return head
        if platform == "cpu":
            from ._reference import ReserveLayout

            return head + ReserveLayout.build(config, self.max_time, self.batch).size
        from . import _cudnn
        from ._cudnn_streams import import_cupy

        run_time_major = self.time_major or config.algo in PERSISTENT_ALGOS  # as ops' run_time_major on cuDNN
        device = import_cupy().cuda.Device().id
        return _cudnn.reserve_elements(config, self.max_time, self.batch, run_time_major, device)


def _stand_in(shape: tuple[int, ...], dtype: np.dtype, fill: int = 0) -> np.ndarray:
    """A read-only array of ``shape`` that costs one element: what the op's checks need of an argument."""
    return np.broadcast_to(np.asarray(fill, dtype=dtype), tuple(int(n) for n in shape))


def _as_numpy_dtype(dtype: object) -> np.dtype | None:
    """``dtype`` as a NumPy dtype (bfloat16: ml_dtypes'), or None where NumPy has none for it."""
    try:
        return numpy_dtype(dtype)  # the supported ones, bfloat16 among them
    except TypeError:
        pass
    try:
        return np.dtype(dtype)  # type: ignore[call-overload, no-any-return]
    except TypeError:
        return None


def signature(attrs: Attrs, input_shape: tuple[int, ...], input_h_shape: tuple[int, ...],
              input_c_shape: tuple[int, ...] | None, params_shape: tuple[int, ...], dtype: object,
              lengths_shape: tuple[int, ...] | None = None, lengths_dtype: object = None, *,
              is_training: bool = True, dtypes: Mapping[str, object] | None = None) -> Signature:
    """Check a call from its shapes and dtypes, as :func:`cudnn_rnn.cudnn_rnn_v3` checks its arrays.

    The same TypeError/ValueError, with the op's own messages, for anything the shapes, dtypes and
    attributes decide; what only the values decide (lengths outside [0, T], a persistent ``algo``
    with ragged lengths) is refused when the call runs.

    Args:
        attrs: the call's attributes.
        input_shape, input_h_shape, input_c_shape, params_shape: the arrays' shapes (input_c None:
            absent, allowed for the modes without a cell).
        dtype: the input's dtype.
        lengths_shape, lengths_dtype: sequence_lengths' shape and dtype, or None for no lengths.
        is_training: checked to be a bool.
        dtypes: the dtypes of ``"input_h"``, ``"input_c"`` and ``"params"`` where they may differ
            from the input's (a bridge passes each array's own): the op refuses a mixed call, in
            its own order and words. Absent names have the input's dtype.

    Returns:
        The call's :class:`Signature`.
    """
    from ._checks import flag

    # every stand-in has its array's own dtype, so that the op refuses a bad or mixed one in its own order
    input_dtype = _as_numpy_dtype(dtype)
    if input_dtype is None:
        numpy_dtype(dtype, "input.dtype")  # the op's refusal of a dtype it does not take
    own: dict[str, np.dtype] = {}
    for name, value in (dtypes or {}).items():
        own_dtype = _as_numpy_dtype(value)
        if own_dtype is None:  # the op's refusal of any dtype but the input's (NumPy cannot stand in for it)
            raise TypeError(f"{name} must have the dtype of input ({numpy_dtype(dtype, 'input.dtype')}); "
                            f"got {value}")
        own[name] = own_dtype
    assert input_dtype is not None
    lengths = None
    if lengths_shape is not None:
        lengths_type = np.dtype(np.int64) if lengths_dtype is None else _as_numpy_dtype(lengths_dtype)
        if lengths_type is None:
            raise TypeError(f"sequence_lengths must have dtype int32 or int64; got {lengths_dtype}")
        time_axis = 0 if attrs.time_major is True else 1
        max_time = int(input_shape[time_axis]) if len(input_shape) == 3 else 0
        lengths = _stand_in(lengths_shape, lengths_type, max_time)  # valid values: only shapes are checked here
    cell = None if input_c_shape is None else _stand_in(input_c_shape, own.get("input_c", input_dtype))
    call = _prepare(_stand_in(input_shape, input_dtype), _stand_in(input_h_shape, own.get("input_h", input_dtype)),
                    cell, _stand_in(params_shape, own.get("params", input_dtype)), lengths, **attrs.op_kwargs())
    flag("is_training", is_training)  # after the arrays, as the op checks it
    io_dtype = numpy_dtype(call.x.dtype)
    config = call.config
    output_c_shape = call.state_shape(config.num_units) if config.has_cell else (0,)
    return Signature(config, call.time_major, call.max_time, call.batch, io_dtype,
                     call.seq_shape(config.output_size), call.state_shape(config.state_size), output_c_shape)


def forward(attrs: Attrs, input: Array, input_h: Array, input_c: Array | None, params: Array,
            sequence_lengths: Array | None, *, is_training: bool, dropout_rng: DropoutRNG | None = None
            ) -> RNNOutputs:
    """:func:`cudnn_rnn.cudnn_rnn_v3` with ``attrs`` (NumPy: reference backend; CuPy: cuDNN on the current stream).

    ``dropout_rng``: a module's own dropout RNG, as a layer's (``ops.forward_with_rng``): on cuDNN the
    masks come from it, seeded from (seed, seed2) once per GPU and advancing from call to call, instead
    of a set-up of cuDNN's dropout state from the seeds at every call whose seeds changed.
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
    """Copy an op result into a buffer the framework made (NumPy, or CuPy on the current stream).

    Shapes must match, except for a 1-D reserve_space, which fills the front of a destination at
    least as long (cuDNN reads only the length it asked for).
    """
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
    if not isinstance(config, RNNConfig):
        raise TypeError(f"config must be a cudnn_rnn.RNNConfig; got {type(config).__name__}")
    return keras_init_params(config, seed=seed, unit_forget_bias=config.has_cell)
