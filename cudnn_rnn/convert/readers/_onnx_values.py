"""What the names of an ONNX graph fold to, as far as reading its RNNs needs.

::

    y = Sequence.of_rnn("/LSTM", 2, 64, batch_major=False)   an LSTM's Y: [T, D, B, N]
    y.axes                    (("T",), ("D",), ("B",), ("N",))     y.sizes  {"N": 64, "D": 2}
    Transpose [0, 2, 1, 3], then Reshape [0, 0, -1]:   axes (("T",), ("B",), ("D", "N"))   [T, B, D*N]
    Shape of that:            Dims(((1, ("T",)), (1, ("B",)), (128, ())))    T, B and 128
    Slice [1:2] of axis 1 of y:   axes (("T",), (), ("B",), ("N",)), picked=1   the backward direction

A :data:`Value` is one of:

================  ===========================================================================
``np.ndarray``    a constant: an initializer, a ``Constant`` node, or an operator of constants
``Sequence``      an RNN node's Y ([T, D, B, N]; [B, T, D, N] with ``layout=1``) after layout
                  operators: which of the atoms T, B, D, N each axis holds, major first
``Dims``          a shape vector read off a Sequence (``Shape``), each entry a product of a
                  known factor and atoms (a :data:`Dim`), for the ``Reshape`` that follows it
================  ===========================================================================

A name whose value is computed at run time raises :class:`NotFolded`; a node no valid graph
holds raises :class:`MalformedGraph` (a ValueError).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

import numpy as np

__all__ = ["NotFolded", "MalformedGraph", "Sequence", "Dims", "Dim", "Value", "TIME", "BATCH", "DIRECTIONS", "UNITS"]

#: the atoms of an RNN output: time, batch, direction (only when 2), units
TIME, BATCH, DIRECTIONS, UNITS = "T", "B", "D", "N"

#: a factor and the atoms of unknown size whose product a dimension is
Dim = tuple[int, tuple[str, ...]]


class NotFolded(Exception):
    """The value is computed at run time: a graph input, or an operator not followed here."""


class MalformedGraph(ValueError):
    """A node that no valid ONNX graph holds (bad axes, a cycle, ...), or folding past the budget."""


@dataclass(frozen=True)
class Sequence:
    """An RNN node's Y after layout operators.

    Attributes:
        source: the RNN whose Y this is.
        axes: per axis, the atoms it merges, major first (``()`` is an axis of size 1).
        sizes: the atoms' known sizes (D and N; T or B once a Reshape fixed them).
        picked: the one direction a Slice kept (its axis then has size 1), else None.
    """

    source: str
    axes: tuple[tuple[str, ...], ...]
    sizes: Mapping[str, int]
    picked: int | None = None

    @classmethod
    def of_rnn(cls, source: str, directions: int, units: int, batch_major: bool) -> "Sequence":
        """Y of an RNN node: [T, D, B, N], or [B, T, D, N] for ``layout=1``."""
        direction = (DIRECTIONS,) if directions == 2 else ()
        sizes = {UNITS: units, **({DIRECTIONS: 2} if directions == 2 else {})}
        first = ((BATCH,), (TIME,)) if batch_major else ((TIME,),)
        rest = ((BATCH,),) if not batch_major else ()
        return cls(source, (*first, direction, *rest, (UNITS,)), sizes)

    @staticmethod
    def stacked_input(directions: int, batch_major: bool) -> tuple[tuple[str, ...], ...]:
        """The axes of the X that stacks on such a Y: [T, B, D*N] ([B, T, D*N] for ``layout=1``)."""
        features = (DIRECTIONS, UNITS) if directions == 2 else (UNITS,)
        return ((BATCH,), (TIME,), features) if batch_major else ((TIME,), (BATCH,), features)

    def size(self, atoms: Iterable[str]) -> int | None:
        atoms = tuple(atoms)
        if any(atom not in self.sizes for atom in atoms):
            return None
        return math.prod(self.sizes[atom] for atom in atoms)

    def dim(self, atoms: Iterable[str]) -> Dim:
        known = [atom for atom in atoms if atom in self.sizes]
        return math.prod(self.sizes[atom] for atom in known), tuple(sorted(a for a in atoms if a not in self.sizes))


@dataclass(frozen=True)
class Dims:
    """A shape vector read off a :class:`Sequence` (or a scalar taken from one)."""

    dims: tuple[Dim, ...]
    scalar: bool = False


Value = Union[np.ndarray, Sequence, Dims]
