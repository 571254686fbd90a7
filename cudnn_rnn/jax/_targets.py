"""The XLA FFI targets of ``cudnn_rnn.jax``: the op's forward and backprop on the buffers XLA hands them.

Two targets, each registered for the ``cpu`` and the ``CUDA`` platform (once, at the first call)::

    FORWARD   forward_operands(...)  -> forward_results(...)    runs _bridge.forward
    BACKWARD  backward_operands(...) -> backward_results(...)   runs _bridge.backward

Which optional operands and results a call has follows from its attributes: ``input_c``,
``output_c`` and their gradients for LSTM only, ``sequence_lengths`` when ``has_lengths``, the
reserve when ``is_training``. The attributes are the op's
(:class:`cudnn_rnn._bridge.Attrs`; strings, a float64, int64s and bools) plus those two flags.

On ``cpu`` the target runs the reference backend on NumPy views of XLA's host buffers (no copy of
an operand) and copies each result into the buffer XLA allocated for it. On ``CUDA`` it runs cuDNN
on CuPy views of XLA's device buffers (``cupy.cuda.UnownedMemory``), with the call's device
current and XLA's stream as CuPy's current stream (``cupy.cuda.ExternalStream``): every kernel and
copy is ordered on that stream and nothing waits for the device, except that sequence_lengths,
when given, are read to the host (cuDNN takes them from host memory), which waits for the
stream's work so far. A training forward's reserve fills the front of a result buffer that may be
longer (sized for every platform JAX has, see ``_op``); the backprop reads the front it needs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any, Callable, Iterator, Mapping

import jax
import numpy as np

from .. import _bridge
from . import _xla_ffi

__all__ = ["FORWARD", "BACKWARD", "forward_operands", "forward_results", "backward_operands", "backward_results",
           "ffi_attributes", "ensure_registered"]

FORWARD = "cudnn_rnn_forward"
BACKWARD = "cudnn_rnn_backward"

#: the op's attributes as FFI attributes: name -> how a value is sent (NumPy scalar types keep XLA's types exact)
_ATTRIBUTE_KINDS: dict[str, str] = {"rnn_mode": "str", "input_mode": "str", "direction": "str", "dropout": "float64",
                                    "seed": "int64", "seed2": "int64", "num_proj": "int64", "time_major": "bool",
                                    "algo": "str"}

#: the XLA platforms both targets are registered for
_PLATFORMS = ("cpu", "CUDA")


def forward_operands(has_cell: bool, has_lengths: bool, has_seed2: bool = False) -> tuple[str, ...]:
    """The forward's operands, in order: input, input_h, [input_c], params, [sequence_lengths], [seed2]."""
    return ("input", "input_h", *(("input_c",) if has_cell else ()), "params",
            *(("sequence_lengths",) if has_lengths else ()), *(("seed2",) if has_seed2 else ()))


def forward_results(has_cell: bool, is_training: bool) -> tuple[str, ...]:
    """The forward's results, in order: output, output_h, [output_c], [reserve_space]."""
    return ("output", "output_h", *(("output_c",) if has_cell else ()), *(("reserve_space",) if is_training else ()))


def backward_operands(has_cell: bool, has_lengths: bool, has_seed2: bool = False) -> tuple[str, ...]:
    """The backprop's operands: the forward's, its outputs, their gradients, and the reserve."""
    cell = ("output_c",) if has_cell else ()
    return (*forward_operands(has_cell, has_lengths, has_seed2), "output", "output_h", *cell, "output_backprop",
            "output_h_backprop", *(f"{name}_backprop" for name in cell), "reserve_space")


def backward_results(has_cell: bool) -> tuple[str, ...]:
    """The backprop's results: input_backprop, input_h_backprop, [input_c_backprop], params_backprop."""
    return ("input_backprop", "input_h_backprop", *(("input_c_backprop",) if has_cell else ()), "params_backprop")


def ffi_attributes(attrs: _bridge.Attrs, **flags: bool) -> dict[str, Any]:
    """``attrs`` (and ``flags``, bools) as the keyword attributes of ``jax.ffi.ffi_call``."""
    kinds = {"str": str, "float64": np.float64, "int64": np.int64, "bool": np.bool_}
    values = {name: kinds[kind](getattr(attrs, name)) for name, kind in _ATTRIBUTE_KINDS.items()}
    values.update({name: np.bool_(value) for name, value in flags.items()})
    return values


def _decode(attributes: Mapping[str, object]) -> tuple[_bridge.Attrs, dict[str, bool]]:
    """The call's :class:`~cudnn_rnn._bridge.Attrs` and its flags, from the FFI attributes."""
    kinds = {"str": str, "float64": float, "int64": int, "bool": bool}
    op = {name: kinds[kind](attributes[name]) for name, kind in _ATTRIBUTE_KINDS.items()}
    flags = {name: bool(value) for name, value in attributes.items() if name not in _ATTRIBUTE_KINDS}
    return _bridge.Attrs(**op), flags


# ---- the target bodies ---------------------------------------------------------------------------
#: how a platform's body views a buffer of the call: (buffer, writable) -> a NumPy or CuPy array
_View = Callable[[_xla_ffi.Buffer, bool], Any]


def _seeded(attrs: _bridge.Attrs, operands: Mapping[str, Any]) -> _bridge.Attrs:
    """``attrs`` with a traced seed2's value (a scalar operand; on a GPU, reading it waits for the stream)."""
    if "seed2" not in operands:
        return attrs
    return dataclasses.replace(attrs, seed2=int(operands["seed2"].reshape(())))


def _run_forward(frame: _xla_ffi.CallFrame, view: _View) -> None:
    attrs, flags = _decode(frame.attrs)
    is_training, has_lengths = flags["is_training"], flags["has_lengths"]
    a = dict(zip(forward_operands(attrs.has_cell, has_lengths, flags.get("has_seed2", False)),
                 (view(b, False) for b in frame.args)))
    attrs = _seeded(attrs, a)
    outputs = _bridge.forward(attrs, a["input"], a["input_h"], a.get("input_c"), a["params"],
                              a.get("sequence_lengths"), is_training=is_training)
    for name, buffer in zip(forward_results(attrs.has_cell, is_training), frame.rets):
        _bridge.copy_into(view(buffer, True), getattr(outputs, name))


def _run_backward(frame: _xla_ffi.CallFrame, view: _View) -> None:
    attrs, flags = _decode(frame.attrs)
    a = dict(zip(backward_operands(attrs.has_cell, flags["has_lengths"], flags.get("has_seed2", False)),
                 (view(b, False) for b in frame.args)))
    attrs = _seeded(attrs, a)
    grads = _bridge.backward(attrs, a["input"], a["input_h"], a.get("input_c"), a["params"],
                             a.get("sequence_lengths"), a["output"], a["output_h"], a.get("output_c"),
                             a["output_backprop"], a["output_h_backprop"], a.get("output_c_backprop"),
                             a["reserve_space"])
    for name, buffer in zip(backward_results(attrs.has_cell), frame.rets):
        _bridge.copy_into(view(buffer, True), getattr(grads, name))


def _host_view(buffer: _xla_ffi.Buffer, writable: bool) -> Any:
    return _xla_ffi.host_view(buffer, writable=writable)


def _cpu(run: Callable[[_xla_ffi.CallFrame, _View], None]) -> Callable[[_xla_ffi.CallFrame], None]:
    def body(frame: _xla_ffi.CallFrame) -> None:
        run(frame, _host_view)

    return body


@contextlib.contextmanager
def _on_xla_stream(cupy: Any, frame: _xla_ffi.CallFrame) -> Iterator[int]:
    """The call's device current and XLA's stream CuPy's current stream; yields the device ordinal."""
    device = frame.device_ordinal()
    with cupy.cuda.Device(device), cupy.cuda.ExternalStream(frame.stream(), device):
        yield device


def _cuda(run: Callable[[_xla_ffi.CallFrame, _View], None]) -> Callable[[_xla_ffi.CallFrame], None]:
    def body(frame: _xla_ffi.CallFrame) -> None:
        from .._cudnn_streams import import_cupy

        cupy = import_cupy()
        with _on_xla_stream(cupy, frame) as device:
            def device_view(buffer: _xla_ffi.Buffer, writable: bool) -> Any:  # XLA owns the memory: no owner
                memory = cupy.cuda.UnownedMemory(buffer.data, buffer.nbytes, None, device)
                return cupy.ndarray(buffer.shape, buffer.dtype, cupy.cuda.MemoryPointer(memory, 0))

            run(frame, device_view)

    return body


#: XLA platform -> how a body of that platform wraps the shared run
_BODIES: dict[str, Callable[[Callable[[_xla_ffi.CallFrame, _View], None]], Callable[[_xla_ffi.CallFrame], None]]] = {
    "cpu": _cpu, "CUDA": _cuda}

_registered = False
_lock = threading.Lock()


def ensure_registered() -> None:
    """Register both targets for every platform of :data:`_PLATFORMS`, once per process."""
    global _registered
    with _lock:
        if _registered:
            return
        for name, run in ((FORWARD, _run_forward), (BACKWARD, _run_backward)):
            for platform in _PLATFORMS:
                jax.ffi.register_ffi_target(name, _xla_ffi.handler_capsule(_BODIES[platform](run)),
                                            platform=platform)
        _registered = True
