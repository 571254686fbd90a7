"""The cuDNN backend: cudnn_rnn.ops's backend interface (:func:`forward`, :func:`backward`,
:func:`reserve_elements`) on CuPy arrays, through cuDNN 9.

Shapes: those of :func:`cudnn_rnn.cudnn_rnn_v3`'s table, with the states always [L*D, B, X] (c0, cy,
dcy None but for LSTM), ``lengths`` host int32 [B] and ``reserve`` [header | cuDNN reserve bytes] of
x's dtype (empty when not training). ops.py guarantees T >= 1, B >= 1, dtypes, and lengths in
[0, T]; it checks the reserve with ``_reserve`` before backward. ``out`` maps result names (``output``,
``output_h``, ``output_c``, ``reserve_space``; ``input_backprop``, ``input_h_backprop``,
``input_c_backprop``) to buffers of the result's shape and dtype, C-contiguous, that the backend
writes instead of allocating (a reserve_space buffer may be longer: it fills the front and is returned
whole); ``params_grad`` is a buffer the params gradient is added into (returned as dparams).

How a call runs. Everything happens with the arrays' own GPU current (arrays on different GPUs
are a ValueError) and on CuPy's current stream of that GPU. The call finds the calling thread's
handle, network and plan for its device in ``_cache`` (binding the handle to the stream, then
building what is missing), and makes three short cuDNN calls at most: cudnnRNNForward, then in
backprop cudnnRNNBackwardData_v8 and cudnnRNNBackwardWeights_v8 (ADD into ``params_grad``, or into a
zeroed buffer).

No host synchronisation. A call never waits for the device: a new plan uploads its block
without waiting (CuPy stages it in pinned memory), the reserve header is a device-to-device copy
from the plan, and backprop checks the reserve on the host (``_reserve``). A call whose plan is
cached and whose dropout seed is unchanged enqueues device work only, so a whole training step
can be recorded in a CUDA graph (``cudnn_rnn.cuda_graph``).

What cuDNN refuses or leaves open is handled here:

* Length-0 rows run for one step on a zeroed input (cuDNN rejects length 0), then their output
  rows are zeroed and hy/cy are set to h0/c0. In backprop their dy/dhy/dcy rows are zeroed before
  the call (so they add nothing to the params gradient), dx rows are zero, and dhy/dcy pass
  straight to dh0/dc0.
* Padding is never read: unless :data:`CUDNN_IGNORES_PADDING`, x and dy reach cuDNN with every
  position t >= len[b] set to 0 by one select (NaN and inf there included).
* Non-contiguous arrays are made contiguous; a params buffer of the wrong size raises ValueError.

Dropout masks come from the network's RNG state, rewound to the call's seed before every training
forward of an op call, or restored from a layer's own advancing RNG (``_cache``,
``_dropout_rng``); backprop reads the forward's masks from the reserve, and runs on a copy of it
(see RESERVE_SURVIVES_BACKWARD). Masks differ from the reference backend's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _arrays, _reserve
from ..config import RNNConfig, numpy_dtype
from . import _lib
from ._cache import BatchPlan, Network, thread_context
from ._dropout_rng import DropoutRNG
from ._lib import ForwardMode, WgradMode
from ._settings import check_dtype_supported
from ._streams import copy, import_cupy

__all__ = ["forward", "backward", "reserve_elements", "RESERVE_SURVIVES_BACKWARD", "CUDNN_IGNORES_PADDING"]

#: Whether cudnnRNNBackwardData_v8/BackwardWeights_v8 leave the reserve space as the forward wrote it.
#: The headers mark it [in,out], so until a GPU run shows otherwise (tests/gpu/test_backend.py
#: asks), backprop runs on a copy and a reserve_space can be used for more than one backprop.
RESERVE_SURVIVES_BACKWARD = False

#: Whether cuDNN leaves the padded positions (t >= len[b]) of x and dy unread, so that NaN there
#: changes nothing. No public source says; until a GPU run shows it (tests/gpu/test_padding_gpu.py
#: asks), calls with padded rows pass x and dy through one select that zeroes the padding.
CUDNN_IGNORES_PADDING = False


def _device_of(**arrays: Any) -> int:
    device = _arrays.device_of(**arrays)
    assert device is not None, "the cuDNN backend runs on CuPy arrays"
    return device


def _contiguous(cupy: Any, *arrays: Any) -> list[Any]:
    return [a if a is None or a.flags.c_contiguous else cupy.ascontiguousarray(a) for a in arrays]


def _pointer(array: Any) -> int:
    return 0 if array is None or array.size == 0 else array.data.ptr


def _buffer(out: Any, name: str, shape: tuple[int, ...], dtype: Any, zero: bool) -> Any:
    """``out[name]`` (zeroed if ``zero``) where the caller gave it, else a new array of ``shape``."""
    given = None if out is None else out.get(name)
    if given is None:
        cupy = import_cupy()
        return (cupy.zeros if zero else cupy.empty)(shape, dtype=dtype)
    if zero:
        given[...] = 0
    return given


def _length_zero_rows(rows: Any, time_major: bool, sequence: Any, h_out: Any, h_in: Any, c_out: Any, c_in: Any
                      ) -> None:
    """Batch rows ``rows`` (length 0): zero in ``sequence`` (y or dx) at every step, states passed straight through."""
    if rows is not None:
        sequence[(slice(None), rows) if time_major else (rows,)] = 0
        h_out[:, rows] = h_in[:, rows]
        if c_out is not None:
            c_out[:, rows] = c_in[:, rows]


def _rows_zeroed(state: Any, rows: Any) -> Any:
    """A state gradient [L*D, B, X] (or None) with batch rows ``rows`` (or none) set to 0: a copy where any are."""
    if state is None or rows is None:
        return state
    state = state.copy()
    state[:, rows] = 0
    return state


def _begin(config: RNNConfig, training: bool, device_id: int, x: Any, params: Any, lengths: np.ndarray,
           time_major: bool) -> tuple[Any, int, Network, BatchPlan]:
    """Bind the handle to the current stream and find (or build) the network and plan of a call.

    Runs with the call's device current; returns (stream, handle, network, plan).
    """
    cupy = import_cupy()
    max_time, batch = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
    lengths = np.ascontiguousarray(lengths, dtype=np.int32)
    check_dtype_supported(config.dtype, device_id)  # bfloat16's cuDNN and GPU, before any cuDNN object
    stream = cupy.cuda.get_current_stream()
    context = thread_context(device_id)
    network, plan = context.network_and_plan(config, training, stream, max_time, batch, time_major, lengths)
    handle = context.handle.pointer  # bound to the stream by network_and_plan
    if params.nbytes != network.weight_space_size:
        expected = network.weight_space_size // params.itemsize
        raise ValueError(f"params must have {expected} elements for this configuration (cuDNN's weight space); "
                         f"got {params.size}")
    plan.buffers.use(stream)
    return stream, handle, network, plan


def reserve_elements(config: RNNConfig, max_time: int, batch: int, time_major: bool, device_id: int) -> int:
    """Length of the reserve_space a training forward of [T, B] returns on GPU ``device_id``: header and payload.

    ``time_major`` is the layout the backend runs (time-major for a persistent algorithm). cuDNN
    sizes the reserve from T, B and the network, not from each sequence's length, so the plan for
    full lengths gives it; the plan is cached for the calls that follow. A framework bridge asks
    this while tracing, before any data exists.
    """
    cupy = import_cupy()
    with cupy.cuda.Device(device_id):
        check_dtype_supported(config.dtype, device_id)
        stream = cupy.cuda.get_current_stream()
        lengths = np.full(batch, max_time, dtype=np.int32)
        _, plan = thread_context(device_id).network_and_plan(config, True, stream, max_time, batch, time_major,
                                                             lengths)
        dtype = numpy_dtype(config.dtype)
        return _reserve.header_elements(dtype) + -(-plan.reserve_size // dtype.itemsize)


def _without_padding(values: Any, plan: BatchPlan) -> Any:
    """x or dy ([T, B, F] or [B, T, F]) with every padded position set to 0 by a select, when a row has
    length 0 (cuDNN runs it for one step) and, unless CUDNN_IGNORES_PADDING, whenever a row is padded."""
    if plan.valid is None or (CUDNN_IGNORES_PADDING and plan.zero_rows is None):
        return values
    return import_cupy().where(plan.valid, values, plan.zero)


def forward(config: RNNConfig, x: Any, h0: Any, c0: Any, params: Any, lengths: np.ndarray, *,
            is_training: bool, time_major: bool, dropout_rng: DropoutRNG | None = None,
            out: dict[str, Any] | None = None) -> tuple[Any, Any, Any, Any]:
    """cudnnRNNForward: (y, hy, cy, reserve); see the module docstring for shapes.

    Dropout masks come from ``config``'s seeds, or from a layer's ``dropout_rng``, which advances.
    """
    cupy = import_cupy()
    device_id = _device_of(x=x, h0=h0, c0=c0, params=params, **(out or {}))
    with cupy.cuda.Device(device_id):
        x, h0, c0, params = _contiguous(cupy, x, h0, c0, params)
        stream, handle, network, plan = _begin(config, is_training, device_id, x, params, lengths, time_major)
        y_shape = x.shape[:2] + (config.output_size,)
        y = _buffer(out, "output", y_shape, x.dtype, plan.padded)
        hy = _buffer(out, "output_h", h0.shape, x.dtype, False)
        cy = None if c0 is None else _buffer(out, "output_c", c0.shape, x.dtype, False)
        if is_training:
            reserve_size = plan.reserve_size
            reserve = _reserve.buffer(out, cupy, x.dtype, -(-reserve_size // x.itemsize))
            copy(_reserve.header_view(reserve), plan.header, stream)
            reserve_pointer = _pointer(_reserve.payload(reserve))
            workspace = cupy.empty(plan.training_workspace, dtype=cupy.uint8)
            if dropout_rng is None:
                network.dropout.rewind(handle, stream, config.seed64)
            else:
                network.dropout.restore(handle, stream, dropout_rng, config.seed64)
        else:
            reserve, reserve_size, reserve_pointer = cupy.empty(0, dtype=x.dtype), 0, 0
            workspace = cupy.empty(plan.inference_workspace, dtype=cupy.uint8)
        x_run = _without_padding(x, plan)
        _lib.rnn_forward(
            handle, network.rnn.pointer, ForwardMode.TRAINING if is_training else ForwardMode.INFERENCE,
            plan.dev_lengths.data.ptr, plan.x_desc.pointer, x_run.data.ptr,
            plan.y_desc.pointer, y.data.ptr, plan.h_desc.pointer, h0.data.ptr, hy.data.ptr,
            plan.c_pointer, _pointer(c0), _pointer(cy), params.nbytes, params.data.ptr,
            workspace.nbytes, _pointer(workspace), reserve_size, reserve_pointer)
        if is_training and dropout_rng is not None:
            network.dropout.keep(stream, dropout_rng)
        _length_zero_rows(plan.zero_rows, time_major, y, hy, h0, cy, c0)
    return y, hy, cy, reserve


def backward(config: RNNConfig, x: Any, h0: Any, c0: Any, params: Any, lengths: np.ndarray, y: Any, dy: Any,
             dhy: Any, dcy: Any, reserve: Any, *, time_major: bool, out: dict[str, Any] | None = None,
             params_grad: Any = None) -> tuple[Any, Any, Any, Any]:
    """cudnnRNNBackwardData_v8 then cudnnRNNBackwardWeights_v8: (dx, dh0, dc0, dparams).

    The weight gradient is added into ``params_grad`` as it is (WGRAD_MODE_ADD, nothing allocated or zeroed
    for it), or into a zeroed buffer of its own.
    """
    cupy = import_cupy()
    device_id = _device_of(x=x, h0=h0, c0=c0, params=params, output=y, output_backprop=dy,
                           output_h_backprop=dhy, output_c_backprop=dcy, reserve_space=reserve,
                           params_grad=params_grad, **(out or {}))
    with cupy.cuda.Device(device_id):
        x, h0, c0, params, y, dy, dhy, dcy, reserve = _contiguous(cupy, x, h0, c0, params, y, dy, dhy, dcy, reserve)
        _, handle, network, plan = _begin(config, True, device_id, x, params, lengths, time_major)
        payload = _reserve.payload(reserve)
        if payload.nbytes < plan.reserve_size:
            raise ValueError(f"reserve_space must hold {plan.reserve_size} bytes after its header for this call; "
                             f"got {payload.nbytes}: pass the reserve_space of the matching training forward")
        if not RESERVE_SURVIVES_BACKWARD:
            payload = payload.copy()
        rows = plan.zero_rows
        dhy_run, dcy_run = (_rows_zeroed(state, rows) for state in (dhy, dcy))
        dy_run, x_run = _without_padding(dy, plan), _without_padding(x, plan)
        dx = _buffer(out, "input_backprop", x.shape, x.dtype, plan.padded)
        dh0 = _buffer(out, "input_h_backprop", h0.shape, x.dtype, False)
        dc0 = None if c0 is None else _buffer(out, "input_c_backprop", c0.shape, x.dtype, False)
        dparams = cupy.zeros_like(params) if params_grad is None else params_grad
        workspace = cupy.empty(plan.training_workspace, dtype=cupy.uint8)
        rnn, lengths_pointer = network.rnn.pointer, plan.dev_lengths.data.ptr
        _lib.rnn_backward_data(
            handle, rnn, lengths_pointer, plan.y_desc.pointer, y.data.ptr, dy_run.data.ptr,
            plan.x_desc.pointer, dx.data.ptr, plan.h_desc.pointer, h0.data.ptr, dhy_run.data.ptr, dh0.data.ptr,
            plan.c_pointer, _pointer(c0), _pointer(dcy_run), _pointer(dc0), params.nbytes, params.data.ptr,
            workspace.nbytes, _pointer(workspace), plan.reserve_size, _pointer(payload))
        _lib.rnn_backward_weights(
            handle, rnn, WgradMode.ADD, lengths_pointer, plan.x_desc.pointer, x_run.data.ptr,
            plan.h_desc.pointer, h0.data.ptr, plan.y_desc.pointer, y.data.ptr, dparams.nbytes, dparams.data.ptr,
            workspace.nbytes, _pointer(workspace), plan.reserve_size, _pointer(payload))
        _length_zero_rows(rows, time_major, dx, dh0, dhy, dc0, dcy)
    return dx, dh0, dc0, dparams
