"""Array-kind dispatch: NumPy arrays run on the CPU, CuPy arrays on the GPU, on their own device.

CuPy is never imported here unless a CuPy array is actually passed in.

CuPy allocates every new array (a copy, a transpose made contiguous, zeros) on the *current*
device, so an op on arrays of GPU 1 while GPU 0 is current must make GPU 1 current first::

    with on_device(device_of(input=x, params=params)):   # a null context for NumPy arrays
        ...                                              # every copy lands beside the inputs
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, ContextManager, TypeAlias, TypeGuard

import numpy as np

__all__ = ["Array", "is_cupy_array", "array_module", "array_kind", "checked_kind", "device_of", "on_device", "beside",
           "to_host", "copy_into"]

#: A NumPy or CuPy ndarray. CuPy ships no type information, so to the type checker this is ``Any``;
#: in annotations it says "an array" where a plain ``Any`` would say nothing.
Array: TypeAlias = Any


def is_cupy_array(value: object) -> TypeGuard[Array]:
    """True for a ``cupy.ndarray`` (checked without importing CuPy)."""
    cls = type(value)
    return cls.__name__ == "ndarray" and cls.__module__.split(".")[0] == "cupy"


def array_kind(value: object) -> str | None:
    """``"numpy"``, ``"cupy"``, or None for anything else."""
    if is_cupy_array(value):  # first: a CuPy array is never a NumPy array, whatever it derives from
        return "cupy"
    if isinstance(value, np.ndarray):
        return "numpy"
    return None


def checked_kind(name: str, value: object) -> str:
    """``value``'s :func:`array_kind`; a TypeError naming the argument ``name`` for anything but an array."""
    kind = array_kind(value)
    if kind is None:
        raise TypeError(f"{name} must be a numpy.ndarray or cupy.ndarray; got {type(value).__name__}")
    return kind


def array_module(**arrays: object) -> types.ModuleType:
    """The module (numpy or cupy) of the named arrays; all must be of one kind.

    Raises TypeError naming the argument for a non-array (None included) or for a mix of
    NumPy and CuPy arrays. Leave optional arguments that are None out of the call.
    """
    kinds = {name: checked_kind(name, value) for name, value in arrays.items()}
    found = set(kinds.values())
    if len(found) > 1:
        detail = ", ".join(f"{name}: {kind}" for name, kind in kinds.items())
        raise TypeError(f"all arrays of one call must be of one kind (all NumPy or all CuPy); got {detail}")
    if found == {"cupy"}:
        import cupy

        module: types.ModuleType = cupy
        return module
    return np


def device_of(**arrays: object) -> int | None:
    """The GPU that every named CuPy array lives on (None when none is a CuPy array).

    Raises ValueError naming each argument's device when they differ. None values are skipped.
    """
    devices = {name: value.data.device_id for name, value in arrays.items() if is_cupy_array(value)}
    if len(set(devices.values())) > 1:
        where = ", ".join(f"{name} on device {device}" for name, device in devices.items())
        raise ValueError(f"all arrays of one call must be on one GPU; got {where}")
    return next(iter(devices.values()), None)


def on_device(device_id: int | None) -> ContextManager[Any]:
    """A context in which ``device_id`` is CUDA's current device (nothing changes for None)."""
    if device_id is None:
        return contextlib.nullcontext()
    import cupy

    device: ContextManager[Any] = cupy.cuda.Device(device_id)
    return device


def beside(array: Array) -> ContextManager[Any]:
    """A context with ``array``'s GPU current, so that what is made inside lands beside it (nothing for NumPy)."""
    return on_device(array.data.device_id if is_cupy_array(array) else None)


def to_host(array: Array) -> np.ndarray:
    """A NumPy array with the values of a NumPy or CuPy array (a device-to-host copy for CuPy)."""
    return array.get() if is_cupy_array(array) else np.asarray(array)


def copy_into(target: Array, source: Array) -> None:
    """``target[...] = source`` between any two of NumPy and CuPy, on ``target``'s device.

    The caller has checked that the shapes and dtypes agree.
    """
    if not is_cupy_array(target):
        target[...] = to_host(source)
        return
    import cupy

    with beside(target):
        if not is_cupy_array(source):
            source = cupy.asarray(source)
        elif source.data.device_id != target.data.device_id:
            source = source.copy()  # CuPy copies onto the current device
        target[...] = source
