"""What a CUDA graph freezes of the op calls it records, and the host check that a replay still fits.

A graph replays the lengths and shapes it was recorded with (why: :mod:`cudnn_rnn.cuda_graph`). While
``cuda_graph`` records inside :func:`recording`, each op call on CuPy arrays reports :func:`saw_call`; the
:class:`Frozen` keeps the caller's own ``sequence_lengths`` object and ``input`` array with a copy of the
lengths and the shape, and its ``change()`` compares them on the host: no device work, no synchronisation.
This module imports no CuPy and nothing of the backends.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import numpy as np

from ._arrays import Array, is_cupy_array

__all__ = ["Frozen", "recording", "saw_call"]

#: ``frozen``: the :class:`Frozen` that op calls on this thread report to, if a graph is being recorded
_local = threading.local()


def abbreviated(values: Any) -> str:
    """``values`` as a short list for a message: ``[5, 3, 0]``, or its ends around ``...`` when long."""
    return np.array2string(np.asarray(values), separator=", ", threshold=12, edgeitems=4)


class Frozen:
    """The lengths and shapes one recorded run of a step froze into its graph."""

    def __init__(self) -> None:
        #: (the caller's sequence_lengths object, a copy of the values it held), one per object and value
        self.lengths: list[tuple[object, np.ndarray]] = []
        #: (an op call's input array, its shape then), one per array
        self.inputs: list[tuple[Array, tuple[int, ...]]] = []

    def add(self, sequence_lengths: object, input: Array) -> None:
        """Watch one op call's ``sequence_lengths`` (None: every row has length T, nothing to watch)."""
        if not any(seen is input for seen, _ in self.inputs):
            self.inputs.append((input, tuple(input.shape)))
        if sequence_lengths is None:
            return
        values = np.array(sequence_lengths)  # a copy: the caller may change its array in place later
        if not any(seen is sequence_lengths and np.array_equal(held, values) for seen, held in self.lengths):
            self.lengths.append((sequence_lengths, values))

    def change(self) -> str | None:
        """None while every watched object holds what was recorded; else a sentence saying what changed."""
        for source, held in self.lengths:
            now = np.asarray(source)
            if not np.array_equal(now, held):
                return (f"sequence_lengths now holds {abbreviated(now)} but the graph was recorded with "
                        f"{abbreviated(held)}")
        for array, shape in self.inputs:
            if tuple(array.shape) != shape:
                return f"input now has shape {tuple(array.shape)} but the graph was recorded with shape {shape}"
        return None


@contextlib.contextmanager
def recording() -> Iterator[Frozen]:
    """While inside (on this thread), every op call on CuPy arrays reports what it freezes to the yielded
    :class:`Frozen`."""
    previous = getattr(_local, "frozen", None)
    frozen = Frozen()
    _local.frozen = frozen
    try:
        yield frozen
    finally:
        _local.frozen = previous


def saw_call(sequence_lengths: object, input: Array) -> None:
    """Report an op call's lengths object as the caller passed it, and its input (a no-op unless a
    graph is being recorded on this thread and ``input`` is a CuPy array).

    Raises:
        TypeError: ``sequence_lengths`` is a CuPy array while a graph is being recorded.
    """
    frozen: Frozen | None = getattr(_local, "frozen", None)
    if frozen is None or not is_cupy_array(input):
        return
    if is_cupy_array(sequence_lengths):
        raise TypeError("sequence_lengths must be a NumPy array or None in a step recorded as a CUDA graph: "
                        "CuPy lengths are read back to the host (cuDNN takes the lengths from host memory), "
                        "and a capture cannot record a transfer to the host; got a cupy.ndarray")
    frozen.add(sequence_lengths, input)
