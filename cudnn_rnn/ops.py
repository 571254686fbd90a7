"""The public ops: TensorFlow's CudnnRNNV3 / CudnnRNNBackpropV3 on NumPy or CuPy arrays.

This layer owns everything both backends share: argument validation (every error names the
argument, the expected and the actual value), the batch-major state transposition, empty
batches and sequences, recording each forward's reserve and checking it before backprop
(``_reserve`` owns both: host-side, so a training step never waits for the device), and dispatch
by array kind (NumPy -> the reference backend, CuPy -> cuDNN). CuPy arrays must all live on one
GPU; every op runs with that GPU current, so each copy it makes lands beside its inputs whatever
device the caller has current.

Host synchronisation: none with NumPy ``sequence_lengths`` (or None); CuPy lengths are read back
(cuDNN's data descriptors take them from host memory). A step recorded as a CUDA graph
(``cudnn_rnn.cuda_graph``) takes NumPy lengths only, and each call on CuPy arrays tells the
recording which lengths and shapes its graph freezes (``_graph_watch``). Shapes: the table of
:func:`cudnn_rnn_v3`; the layer classes' forward: :func:`forward_with_rng`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from . import _reserve
from ._arrays import Array, array_kind, array_module, device_of, on_device, to_host
from ._checks import first_outside, flag
from . import _graph_watch
from ._signature import Signature, check, check_head, signature
from .config import PERSISTENT_ALGOS, RNNConfig

# the dropout RNG a layer or a module owns and hands to the forward (each ``as`` marks a name exported from here)
from ._cudnn._dropout_rng import DropoutRNG as DropoutRNG

__all__ = ["RNNOutputs", "RNNGradients", "cudnn_rnn_v3", "cudnn_rnn_backprop_v3"]


class RNNOutputs(NamedTuple):
    """Outputs of :func:`cudnn_rnn_v3`, shaped as its table says: the input's kind and dtype but ``host_reserved``."""

    #: The last layer's output sequence; rows past a sequence's length are 0.
    output: Array
    #: Each sequence's hidden state after its own last step (the initial state for length 0).
    output_h: Array
    #: Likewise the cell state (LSTM); shape (0,) for the other modes.
    output_c: Array
    #: What backprop needs from this forward, 1-D of the input's dtype; empty when not training.
    reserve_space: Array
    #: The fingerprint of the call, int8 [8] on the host, checked by :func:`cudnn_rnn_backprop_v3`.
    host_reserved: np.ndarray


class RNNGradients(NamedTuple):
    """Outputs of :func:`cudnn_rnn_backprop_v3`: gradients shaped like the forward's inputs."""

    #: The gradient d loss / d input; 0 at rows past a sequence's length.
    input_backprop: Array
    #: The gradient d loss / d input_h.
    input_h_backprop: Array
    #: The gradient d loss / d input_c (LSTM); shape (0,) for the other modes.
    input_c_backprop: Array
    #: The gradient d loss / d params, a fresh array in the params layout.
    params_backprop: Array


@dataclass(frozen=True)
class _ValidatedCall(Signature):
    """The arguments of one op, validated, in the backends' terms: its signature and its arrays."""

    xp: types.ModuleType
    device: int | None  # the GPU of every CuPy array of the call; None for NumPy
    lengths: np.ndarray  # host int32 [B]
    x: Array  # caller layout; C-contiguous once placed()
    h0: Array  # caller layout; [L*D, B, P] C-contiguous once placed()
    c0: Array | None  # likewise [L*D, B, N] (LSTM)
    params: Array  # C-contiguous once placed()

    @property
    def backend_name(self) -> str:
        return "reference" if self.xp is np else "cudnn"

    def backend(self) -> types.ModuleType:
        if self.xp is np:
            from .cpu import _backend as reference_backend

            return reference_backend
        from ._cudnn import _backend as cudnn_backend

        return cudnn_backend

    @property
    def run_time_major(self) -> bool:
        """The layout the backend runs (``Signature.runs_time_major``)."""
        return self.runs_time_major(self.xp is not np)

    @property
    def reserve_key(self) -> _reserve.ForwardKey:
        """The forward call whose reserve this call writes (a forward) or needs (a backprop), as the backend runs it."""
        return _reserve.ForwardKey(self.backend_name, self.config, self.max_time, self.batch, self.run_time_major,
                                   self.lengths)

    def placed(self) -> "_ValidatedCall":
        """The call with x contiguous in the run layout, contiguous params and [L*D, B, X] states.

        Run with the call's device current.
        """
        return dataclasses.replace(self, x=self.seq_in(self.x), params=self.xp.ascontiguousarray(self.params),
                                   h0=self.states_in(self.h0), c0=None if self.c0 is None else self.states_in(self.c0))

    def seq_in(self, values: Array) -> Array:
        """A sequence ([T, B, F] or [B, T, F] as the caller lays it out) in the run layout, contiguous."""
        swap = self.time_major != self.run_time_major
        return self.xp.ascontiguousarray(values.transpose(1, 0, 2) if swap else values)

    def seq_out(self, values: Array) -> Array:
        """A sequence in the run layout back in the caller's layout (itself when they agree)."""
        return values if self.time_major == self.run_time_major else self.seq_in(values)

    def states_out(self, state: Array) -> Array:
        """[L*D, B, X] -> caller layout, contiguous (the swap is its own inverse: ``states_in`` is this too)."""
        return self.xp.ascontiguousarray(state if self.time_major else state.transpose(1, 0, 2))

    states_in = states_out  # caller layout -> [L*D, B, X]

    def empty(self) -> Array:
        """The (0,)-shaped array returned for c of non-LSTM modes."""
        return self.xp.empty((0,), dtype=self.x.dtype)


def _check_array(name: str, array: Array, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """A ValueError unless ``array`` has ``shape``, then a TypeError unless it has ``dtype`` (the input's)."""
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(array.shape)}")
    if array.dtype != dtype:
        raise TypeError(f"{name} must have the dtype of input ({dtype}); got {array.dtype}")


def _host_lengths(sequence_lengths: object, batch: int, max_time: int) -> np.ndarray:
    """Validate ``sequence_lengths`` and return it as a host int32 array [B]."""
    if sequence_lengths is None:
        return np.full(batch, max_time, dtype=np.int32)
    if array_kind(sequence_lengths) is None:
        raise TypeError("sequence_lengths must be None or a numpy/cupy int32 or int64 array of shape "
                        f"[batch]; got {type(sequence_lengths).__name__}")
    host = to_host(sequence_lengths)  # its dtype and shape checked by the call's signature
    i = first_outside(host, max_time)
    if i is not None:
        raise ValueError(f"sequence_lengths values must be in [0, {max_time}] (the max time); "
                         f"got sequence_lengths[{i}] = {int(host[i])}")
    return host.astype(np.int32)


#: A call's shape check: ``_signature.signature`` with the op's keywords, or ``_signature.check`` with a config
_ShapeCheck = Callable[..., Signature]


def _prepare(config: RNNConfig, time_major: bool, input: Array, input_h: Array, input_c: Array | None,
             params: Array, sequence_lengths: object) -> _ValidatedCall:
    """The validated call of the internal op path: the shapes held to ``config`` (``_signature.check``)."""
    return _validated(functools.partial(check, config, time_major), config.has_cell, input, input_h, input_c, params,
                      sequence_lengths)


def _op_check(attrs: dict[str, Any], input: Array, input_h: Array, input_c: Array | None,
              params: Array) -> tuple[_ShapeCheck, bool]:
    """A public op's shape check (its keywords ``attrs``) and whether the call has a cell, after ``check_head``."""
    rnn_mode = check_head(attrs["rnn_mode"], attrs["direction"], attrs["time_major"], {
        "input": input is None, "input_h": input_h is None, "params": params is None, "input_c": input_c is None})[0]
    return functools.partial(signature, **attrs), rnn_mode == "lstm"


def _validated(shapes_check: _ShapeCheck, has_cell: bool, input: Array, input_h: Array, input_c: Array | None,
               params: Array, sequence_lengths: object, extra: dict[str, Array | None] | None = None
               ) -> _ValidatedCall:
    """Validate what every op shares (array kinds, devices, then the shapes by ``shapes_check``, then the lengths)."""
    cell = input_c if has_cell else None  # the c state of the call: LSTM only
    arrays = {"input": input, "input_h": input_h, "params": params}
    if cell is not None:
        arrays["input_c"] = cell
    arrays.update({name: value for name, value in (extra or {}).items() if value is not None})
    xp = array_module(**arrays)
    device = device_of(**arrays)
    lengths: Any = sequence_lengths if array_kind(sequence_lengths) is not None else None  # else refused below
    own_dtypes: dict[str, object] = {name: arrays[name].dtype for name in ("input_h", "input_c", "params")
                                     if name in arrays}
    sig = shapes_check(input.shape, input_h.shape, None if cell is None else cell.shape, params.shape, input.dtype,
                       None if lengths is None else lengths.shape, None if lengths is None else lengths.dtype,
                       dtypes=own_dtypes)
    config, max_time, batch = sig.config, sig.max_time, sig.batch
    if array_kind(sequence_lengths) == "cupy":
        device_of(**arrays, sequence_lengths=sequence_lengths)
    _graph_watch.saw_call(sequence_lengths, input)  # a CUDA graph being recorded freezes these lengths and shapes
    lengths = _host_lengths(sequence_lengths, batch, max_time)
    if config.algo in PERSISTENT_ALGOS and batch and max_time and (lengths.min() != lengths.max() or not lengths.min()):
        raise ValueError(f"algo={config.algo!r} runs only batches whose sequences all have one length of at least 1 "
                         "(cuDNN's persistent kernels take one sequence length for the whole batch); got "
                         f"sequence_lengths from {int(lengths.min())} to {int(lengths.max())}: use algo='standard' "
                         "or 'auto'")
    return _ValidatedCall(config, sig.time_major, max_time, batch, sig.dtype, xp, device, lengths, input, input_h, cell,
                          params)


def cudnn_rnn_v3(input: Array, input_h: Array, input_c: Array | None, params: Array,
                 sequence_lengths: Array | None = None, *, rnn_mode: str = "lstm", input_mode: str = "linear_input",
                 direction: str = "unidirectional", dropout: float = 0.0, seed: int = 0, seed2: int = 0,
                 num_proj: int = 0, is_training: bool = True, time_major: bool = True,
                 algo: str = "standard") -> RNNOutputs:
    """Run a multi-layer RNN: TensorFlow's ``CudnnRNNV3`` on NumPy (reference) or CuPy (cuDNN) arrays.

    The sizes L, D, N, I and P are read from the shapes of ``input``, ``input_h`` and ``input_c``;
    every array must be of one kind, on one GPU for CuPy. The shapes (B batch, T max length):

    =====================================  ================  ================
    tensor                                 time_major=True   time_major=False
    =====================================  ================  ================
    input / input_backprop                 [T, B, I]         [B, T, I]
    output / output_backprop               [T, B, D*P]       [B, T, D*P]
    input_h, output_h and their backprops  [L*D, B, P]       [B, L*D, P]
    input_c, output_c and their backprops  [L*D, B, N]       [B, L*D, N]
    params, params_backprop                [params_size]     [params_size]
    =====================================  ================  ================

    With time_major=False the states are truly batch-major (``h[b, k]`` is pseudo-layer k of
    sequence b); TF instead reinterprets that memory as [L*D, B, P]. Both agree when L*D == 1
    or B == 1.

    Args:
        input: the input sequence, of a :data:`~cudnn_rnn.config.DTYPES` dtype (which says what each
            computes in and needs).
        input_h: initial hidden states, input's dtype.
        input_c: initial cell states for LSTM; ignored (None accepted) otherwise.
        params: the params buffer (:func:`cudnn_rnn.cudnn_rnn_params_size` elements, input's dtype).
        sequence_lengths: None (all T) or int32/int64 [B] with values in [0, T], any order. NumPy
            lengths cost no synchronisation; CuPy lengths are read back to the host (one wait).
        rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj: as the
            :class:`~cudnn_rnn.RNNConfig` fields of those names; dropout acts only with ``is_training``.
        is_training: keep a reserve space for backprop and apply dropout.
        time_major: the layout of input, output and the states.
        algo: cuDNN's algorithm, as :class:`~cudnn_rnn.RNNConfig`'s ``algo``. A persistent one runs
            only the calls :data:`cudnn_rnn.config.PERSISTENT_ALGOS` describes; ``"auto"`` runs the
            standard algorithm where a persistent one cannot run the call. The result is the same
            math whichever runs; the reference backend checks the call and computes as always.

    Returns:
        :class:`cudnn_rnn.RNNOutputs`, in the layout ``time_major`` names.

    Raises:
        TypeError: an argument that is not an array (or None where allowed), arrays of mixed
            kinds or dtypes, an unsupported dtype (bfloat16 CuPy arrays where cuDNN or the GPU is
            too old), or a flag that is not a bool.
        ValueError: a shape that does not fit the others, params of the wrong size (compared with
            the closed-form size before any per-layer work, however many layers input_h has), lengths
            outside [0, T], arrays on different GPUs, an attribute TF would refuse, or an ``algo``
            the call cannot run (a persistent one with projection, or with sequence lengths that
            are not all equal and at least 1).
        ~cudnn_rnn.CudnnError: cuDNN refused the persistent ``algo`` named for this call.
    """
    attrs = dict(rnn_mode=rnn_mode, input_mode=input_mode, direction=direction, dropout=dropout, seed=seed,
                 seed2=seed2, num_proj=num_proj, time_major=time_major, algo=algo)
    return _forward(_validated(*_op_check(attrs, input, input_h, input_c, params), input, input_h, input_c, params,
                               sequence_lengths), is_training, None, None)


def forward_with_rng(config: RNNConfig, input: Array, input_h: Array, input_c: Array | None, params: Array,
                     sequence_lengths: Array | None = None, *, time_major: bool, is_training: bool,
                     dropout_rng: DropoutRNG | None = None, out: Mapping[str, Array] | None = None) -> RNNOutputs:
    """:func:`cudnn_rnn_v3` of a validated ``config`` (the layers' and the bridges' forward), its arrays held to it.

    ``dropout_rng``: the cuDNN backend draws the dropout masks from this layer's RNG, seeded from
    (seed, seed2) at its first training forward on a GPU and advancing from call to call (see
    ``_cudnn._dropout_rng``); None draws them from (seed, seed2), as the reference backend always does.
    ``out``: buffers the results are written into, by :class:`RNNOutputs` field (a reserve_space
    fills the front of a longer 1-D buffer); the backend writes straight into those already in its
    layout and dtype, the others are copied. Results and errors as :func:`cudnn_rnn_v3`'s (the
    shapes' as ``_signature.check`` says).
    """
    return _forward(_prepare(config, time_major, input, input_h, input_c, params, sequence_lengths), is_training,
                    dropout_rng, out)


def _forward(call: _ValidatedCall, is_training: bool, dropout_rng: DropoutRNG | None,
             out: Mapping[str, Array] | None) -> RNNOutputs:
    is_training = flag("is_training", is_training)
    xp, config, key = call.xp, call.config, call.reserve_key
    shapes = {"output": call.output_shape, "output_h": call.output_h_shape,
              "output_c": call.state_shape(config.num_units), "reserve_space": None}
    with on_device(call.device):
        call = call.placed()
        direct = _destinations(call, out, shapes)
        if call.max_time == 0 or call.batch == 0:
            y = xp.zeros(call.output_shape, dtype=call.x.dtype)
            hy, cy = call.h0.copy(), None if call.c0 is None else call.c0.copy()
            reserve = _reserve.header_only(xp, y.dtype, key) if is_training else xp.empty(0, y.dtype)
        else:  # the backend writes the header of its training reserves
            # the reference backend's masks always come from the seeds: only cuDNN takes a layer's RNG
            rng = {} if dropout_rng is None or call.xp is np else {"dropout_rng": dropout_rng}
            y, hy, cy, reserve = call.backend().forward(config, call.x, call.h0, call.c0, call.params, call.lengths,
                                                         is_training=is_training, time_major=call.run_time_major,
                                                         out=direct, **rng)
            y = call.seq_out(y)
        results = {"output": y, "output_h": call.states_out(hy),
                   "output_c": call.empty() if cy is None else call.states_out(cy), "reserve_space": reserve}
        results.update({name: _deliver(buffer, results[name]) for name, buffer in (out or {}).items()})
    return RNNOutputs(**results, host_reserved=_reserve.record(results["reserve_space"], key))


def _destinations(call: _ValidatedCall, out: Mapping[str, Array] | None,
                  shapes: Mapping[str, tuple[int, ...] | None]) -> dict[str, Array]:
    """Check the buffers ``out`` gives (a 1-D reserve_space of any length, the others the results' shapes) and
    return those a backend writes as they are: C-contiguous, of the call's dtype and in the layout it runs."""
    direct = {}
    for name, buffer in (out or {}).items():
        array_module(input=call.x, **{name: buffer})
        shape = shapes[name]
        if (buffer.ndim != 1) if shape is None else (tuple(buffer.shape) != shape):
            raise ValueError(f"the buffer for {name} has shape {tuple(buffer.shape)}, the result "
                             f"{'1-D' if shape is None else shape}: the call was traced for another platform or "
                             "shapes")
        as_run = shape is None or (call.time_major == call.run_time_major if name in _SEQUENCES else call.time_major)
        if as_run and buffer.dtype == call.x.dtype and buffer.flags.c_contiguous:
            direct[name] = buffer
    return direct


#: the results shaped as sequences (the others of rank 3 are states)
_SEQUENCES = ("output", "input_backprop")


def _deliver(destination: Array, result: Array) -> Array:
    """``destination`` holding ``result``: itself where the backend wrote it there, else a copy (:func:`_copy_into`)."""
    if result is not destination:
        _copy_into(destination, result)
    return destination


def _copy_into(destination: Array, source: Array) -> None:
    """Copy a result into a buffer the caller gave; a 1-D reserve_space fills the front of a longer one."""
    if destination.ndim == source.ndim == 1 and destination.shape[0] >= source.shape[0]:
        destination[:source.shape[0]] = source
    elif destination.shape == source.shape:
        destination[...] = source
    else:
        raise ValueError(f"the buffer has shape {tuple(destination.shape)}, the result {tuple(source.shape)}: the "
                         "call was traced for another platform or shapes")


def cudnn_rnn_backprop_v3(input: Array, input_h: Array, input_c: Array | None, params: Array,
                          sequence_lengths: Array | None, output: Array, output_h: Array, output_c: Array | None,
                          output_backprop: Array | None, output_h_backprop: Array | None,
                          output_c_backprop: Array | None, reserve_space: Array, host_reserved: Array | None = None,
                          *, rnn_mode: str = "lstm", input_mode: str = "linear_input",
                          direction: str = "unidirectional", dropout: float = 0.0, seed: int = 0, seed2: int = 0,
                          num_proj: int = 0, time_major: bool = True, algo: str = "standard") -> RNNGradients:
    """Gradients of :func:`cudnn_rnn_v3`: TensorFlow's ``CudnnRNNBackpropV3``.

    Takes the forward's inputs, outputs and reserve_space (from a call with is_training=True and
    the same attributes) plus the upstream gradients (None means zeros), shaped as the table of
    :func:`cudnn_rnn_v3` says. Upstream gradients at output rows past a sequence's length are
    ignored and input_backprop there is 0; for a length-0 sequence the h/c gradients pass straight
    through to input_h/input_c_backprop.

    Args:
        input, input_h, input_c, params, sequence_lengths: the forward's (input_c: LSTM; ignored,
            None accepted, otherwise).
        output, output_h, output_c: the forward's outputs (output_c: LSTM; ignored otherwise).
        output_backprop, output_h_backprop, output_c_backprop: d loss / d output, output_h and
            (LSTM) output_c, or None for zeros.
        reserve_space: the forward's reserve_space (1-D, input's dtype).
        host_reserved: the forward's host_reserved (int8 [8]), or None to skip that check.
        rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj, time_major, algo: the
            forward's (the reserve of one algorithm is refused by another).

    Returns:
        :class:`cudnn_rnn.RNNGradients`, in the layout ``time_major`` names.

    Raises:
        TypeError: as for :func:`cudnn_rnn_v3`, and for a missing output, output_h or (LSTM)
            output_c, or a reserve_space of another dtype.
        ValueError: as for :func:`cudnn_rnn_v3`, for gradients shaped unlike the outputs, and for
            a reserve_space or host_reserved that does not come from the matching training forward.
    """
    attrs = dict(rnn_mode=rnn_mode, input_mode=input_mode, direction=direction, dropout=dropout, seed=seed,
                 seed2=seed2, num_proj=num_proj, time_major=time_major, algo=algo)
    return _backprop(*_op_check(attrs, input, input_h, input_c, params), input, input_h, input_c, params,
                     sequence_lengths, output, output_h, output_c, output_backprop, output_h_backprop,
                     output_c_backprop, reserve_space, host_reserved, False, None, None)


def backprop(config: RNNConfig, input: Array, input_h: Array, input_c: Array | None, params: Array,
             sequence_lengths: Array | None, output: Array, output_h: Array, output_c: Array | None,
             output_backprop: Array | None, output_h_backprop: Array | None, output_c_backprop: Array | None,
             reserve_space: Array, host_reserved: Array | None = None, *, time_major: bool,
             params_grad: Array | None = None, out: Mapping[str, Array] | None = None,
             from_residual: bool = False) -> RNNGradients:
    """:func:`cudnn_rnn_backprop_v3` of a validated ``config`` (the layers' and the bridges' backward).

    ``params_grad``: a buffer shaped and typed like ``params`` that the params gradient is ADDED
    into (cuDNN accumulates into it directly, nothing else is allocated for it), returned as
    ``params_backprop``; None returns a fresh gradient. ``out``: buffers for input_backprop,
    input_h_backprop and input_c_backprop, as :func:`forward_with_rng`'s. ``from_residual``: the
    reserve_space is a framework bridge's own forward's residual, in a buffer of the framework's (so
    no record of it exists): it is checked as an array (rank, dtype, length) but its header is not
    read, which on CuPy would wait for the device. Results and errors as
    :func:`cudnn_rnn_backprop_v3`'s (the shapes' as ``_signature.check`` says).
    """
    return _backprop(functools.partial(check, config, time_major), config.has_cell, input, input_h, input_c, params,
                     sequence_lengths, output, output_h, output_c, output_backprop, output_h_backprop,
                     output_c_backprop, reserve_space, host_reserved, from_residual, params_grad, out)


def _backprop(shapes_check: _ShapeCheck, has_cell: bool, input: Array, input_h: Array, input_c: Array | None,
              params: Array, sequence_lengths: Array | None, output: Array, output_h: Array, output_c: Array | None,
              output_backprop: Array | None, output_h_backprop: Array | None, output_c_backprop: Array | None,
              reserve_space: Array, host_reserved: Array | None, from_residual: bool, params_grad: Array | None,
              out: Mapping[str, Array] | None) -> RNNGradients:
    """Validate a backprop's arguments (the forward's as :func:`_validated`, then the outputs and their gradients,
    ``params_grad`` and the reserve) and run it."""
    extra: dict[str, Array | None] = {"output": output, "output_h": output_h, "output_backprop": output_backprop,
                                      "output_h_backprop": output_h_backprop, "reserve_space": reserve_space}
    if has_cell:
        extra.update(output_c=output_c, output_c_backprop=output_c_backprop)
    call = _validated(shapes_check, has_cell, input, input_h, input_c, params, sequence_lengths, extra)
    xp, config, dtype = call.xp, call.config, call.x.dtype
    y_shape, h_shape, c_shape = call.output_shape, call.output_h_shape, call.state_shape(config.num_units)
    expected = {"output": y_shape, "output_h": h_shape, "output_backprop": y_shape, "output_h_backprop": h_shape}
    if call.c0 is not None:  # LSTM
        expected.update(output_c=c_shape, output_c_backprop=c_shape)
    for name, shape in expected.items():
        value = extra[name]
        if value is None:
            if name in ("output", "output_h", "output_c"):
                raise TypeError(f"{name} must be the forward's {name} array; got None")
            continue
        _check_array(name, value, shape, dtype)
    if params_grad is not None:
        array_module(input=call.x, params_grad=params_grad)
        _check_array("params_grad", params_grad, call.params.shape, dtype)
    with on_device(call.device):  # a reserve that is not the forward's own array has its header read there
        if from_residual:
            _reserve.check_array(reserve_space, call.reserve_key)
        else:
            _reserve.check(reserve_space, host_reserved, call.reserve_key)
        call = call.placed()
        direct = _destinations(call, out, {"input_backprop": call.seq_shape(config.input_size),
                                           "input_h_backprop": h_shape, "input_c_backprop": c_shape})
        dy = xp.zeros(y_shape, dtype=dtype) if output_backprop is None else output_backprop
        dhy = call.states_in(xp.zeros(h_shape, dtype=dtype) if output_h_backprop is None else output_h_backprop)
        dcy = None
        if config.has_cell:
            dcy = call.states_in(xp.zeros(c_shape, dtype=dtype) if output_c_backprop is None else output_c_backprop)
        into = params_grad if params_grad is not None and params_grad.flags.c_contiguous else None
        if call.max_time == 0 or call.batch == 0:
            dx = xp.zeros(call.seq_shape(config.input_size), dtype=dtype)
            dh0, dc0 = dhy.copy(), None if dcy is None else dcy.copy()
            dparams = params_grad if params_grad is not None else xp.zeros(call.params.shape, dtype=dtype)
        else:
            dx, dh0, dc0, dparams = call.backend().backward(
                config, call.x, call.h0, call.c0, call.params, call.lengths, call.seq_in(output), call.seq_in(dy),
                dhy, dcy, reserve_space, time_major=call.run_time_major, out=direct, params_grad=into)
            dx = call.seq_out(dx)
        if params_grad is not None and dparams is not params_grad:  # a strided buffer: added here
            params_grad += dparams
            dparams = params_grad
        results = {"input_backprop": dx, "input_h_backprop": call.states_out(dh0),
                   "input_c_backprop": call.empty() if dc0 is None else call.states_out(dc0)}
        results.update({name: _deliver(buffer, results[name]) for name, buffer in (out or {}).items()})
    return RNNGradients(**results, params_backprop=dparams)
