"""Processing order and natural time: how a direction of a layer walks its sequences.

    order = TimeOrder(reverse=True, lengths=np.array([5, 3]), max_time=5, xp=np)
    order.gather(x, 0, 2)        # steps 0, 1 of each sequence, reversed within its own span: [2, B, F]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._arrays import Array

__all__ = ["TimeOrder"]


class TimeOrder:
    """Maps one direction's processing steps to natural time positions.

    The forward direction processes t = 0 .. T-1 in place. The reverse direction processes each
    sequence from its last valid step back to its first (step t reads position len-1-t), so padding is
    never reached; that is a per-column permutation of time, so gathers and scatters never collide. When
    every sequence is T long that permutation is a plain reversal of time, done with views instead of gathers.
    """

    def __init__(self, reverse: bool, lengths: np.ndarray, max_time: int, xp: Any) -> None:
        self.max_time = max_time
        self.reversed = reverse and bool(np.all(lengths == max_time))
        self.index = None
        if reverse and not self.reversed:  # [T, B]: t -> len-1-t for t < len, else t (its own inverse)
            t = np.arange(max_time)[:, None]
            self.index = xp.asarray(np.where(t < lengths, lengths - 1 - t, t))
        self.columns = xp.arange(len(lengths)) if self.index is not None else None

    @property
    def natural(self) -> bool:
        """Whether processing step t is position t."""
        return self.index is None and not self.reversed

    def _positions(self, start: int, stop: int) -> slice:
        """The natural positions of steps [start, stop) of a reversal, in natural order."""
        return slice(self.max_time - stop, self.max_time - start)

    def gather(self, values: Array, start: int, stop: int) -> Array:
        """Processing steps [start, stop) of a natural-order [T, B, F] array."""
        if self.reversed:
            return values[self._positions(start, stop)][::-1]
        if self.index is None:
            return values[start:stop]
        return values[self.index[start:stop], self.columns]

    def scatter_add(self, target: Array, start: int, stop: int, values: Array) -> None:
        """target[position of steps start..stop) += values (processing order [stop-start, B, F])."""
        if self.reversed:
            target[self._positions(start, stop)] += values[::-1]
        elif self.index is None:
            target[start:stop] += values
        else:
            target[self.index[start:stop], self.columns] += values

    def put_valid(self, target: Array, start: int, stop: int, values: Array, valid: Array | None, xp: Any) -> None:
        """target[position of steps start..stop) = values where valid (the rest of ``target`` stays 0)."""
        if self.reversed:  # no padding
            target[self._positions(start, stop)] = values[::-1]
        elif self.index is None:
            if valid is None:
                target[start:stop] = values
            else:
                xp.copyto(target[start:stop], values, where=valid[start:stop])
        else:
            if valid is not None:
                values = xp.where(valid[start:stop], values, xp.zeros((), dtype=values.dtype))
            target[self.index[start:stop], self.columns] = values
