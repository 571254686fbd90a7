"""Packing a list of arrays into one message, on NumPy and CuPy alike.

A *signature* names what one rank passes to a collective: per array its (kind, shape, dtype).
A :class:`PackLayout` places those arrays in one byte buffer, arrays of one dtype back to back
in a *group*, each group starting on a 256-byte boundary::

    buffer (uint8, nbytes)
    | group float32: arrays[0] arrays[2] ... | pad | group float64: arrays[1] ... | pad |

A group is one typed, contiguous reduction message; the whole buffer is one broadcast
message. When the arrays already lie back to back in one buffer (see :func:`fuse_arrays`),
:func:`contiguous_span` returns that memory as one 1-D view, and nothing is copied at all.

Nothing here talks to MPI or NCCL, and nothing imports CuPy: the array module comes from
the arrays, so NumPy runs every line of it.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass
from typing import Any, Sequence, TypeAlias

import numpy as np

from .._arrays import Array, array_kind, array_module

__all__ = ["Signature", "PackLayout", "signature_of", "mismatch_message", "contiguous_span", "fuse_arrays", "address"]

#: (kind "numpy" / "cupy" / None for a non-array, shape, dtype / None for a non-array) per array;
#: hashable and picklable
Signature: TypeAlias = tuple[tuple[str | None, tuple[int, ...], np.dtype[Any] | None], ...]

#: every group starts on this byte boundary (a CUDA allocation's own alignment)
GROUP_ALIGNMENT = 256


def signature_of(arrays: Sequence[Array]) -> Signature:
    """``((kind, shape, dtype), ...)``: what a rank passes, in a form ranks can compare.

    Only meaningful for arrays: validate first (anything else gets kind None, shape () and dtype None).
    """
    return tuple((array_kind(a), getattr(a, "shape", ()), getattr(a, "dtype", None)) for a in arrays)


def mismatch_message(operation: str, gathered: Sequence[tuple[Signature, int | None]]) -> str | None:
    """None when every rank passed the same arrays (and root); else a message naming what differs.

    ``gathered[r]`` is ``(signature, root)`` as rank r passed it (root None for a reduction).
    Every rank computes the same message from the same gathered list, so every rank raises alike.
    """
    reference = gathered[0]
    differing = [rank for rank, entry in enumerate(gathered) if entry != reference]
    if not differing:
        return None
    lines = [f"{operation}: every rank must pass the same number of arrays with the same shapes and dtypes, "
             f"in the same order; rank 0 passed {_describe(reference)}"]
    for rank in differing[:3]:
        lines.append(f"rank {rank} passed {_describe(gathered[rank])}{_first_difference(reference, gathered[rank])}")
    if len(differing) > 3:
        lines.append(f"and {len(differing) - 3} more ranks differ from rank 0")
    return "; ".join(lines)


def _describe(entry: tuple[Signature, int | None]) -> str:
    """``[(3, 4) float32 numpy, (5,) float64 numpy] with root=1``: what a rank passed, as people read it."""
    signature, root = entry
    arrays = ", ".join(f"{shape} {np.dtype(dtype).name} {kind}" for kind, shape, dtype in signature)
    return f"[{arrays}]" + ("" if root is None else f" with root={root}")


def _first_difference(reference: tuple[Signature, int | None], other: tuple[Signature, int | None]) -> str:
    (ref_sig, ref_root), (sig, root) = reference, other
    if len(ref_sig) != len(sig):
        return f" (number of arrays: {len(sig)} instead of {len(ref_sig)})"
    for i, (a, b) in enumerate(zip(ref_sig, sig)):
        if a != b:
            return f" (first difference at arrays[{i}])"
    return f" (root {root} instead of {ref_root})" if root != ref_root else ""


# ---- layout ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Group:
    """The arrays of one dtype: ``size`` elements from byte ``byte_offset`` of the buffer."""

    dtype: np.dtype
    byte_offset: int
    size: int

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


@dataclass(frozen=True)
class Slot:
    """Where one array sits: elements [offset, offset + size) of group ``group``."""

    group: int
    offset: int
    size: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class PackLayout:
    """The places of a signature's arrays in one byte buffer of ``nbytes`` bytes.

    Groups follow the order in which their dtypes first appear; arrays keep their order
    within a group. ``slots[i]`` is ``arrays[i]``.
    """

    groups: tuple[Group, ...]
    slots: tuple[Slot, ...]
    nbytes: int

    @classmethod
    def of(cls, signature: Signature) -> "PackLayout":
        dtypes = list(dict.fromkeys(np.dtype(dtype) for _, _, dtype in signature))
        sizes = [0] * len(dtypes)
        slots = []
        for _, shape, dtype in signature:
            group = dtypes.index(np.dtype(dtype))
            size = math.prod(shape)
            slots.append(Slot(group, sizes[group], size, tuple(shape)))
            sizes[group] += size
        groups, offset = [], 0
        for dtype, size in zip(dtypes, sizes):
            groups.append(Group(dtype, offset, size))
            offset += -(-size * dtype.itemsize // GROUP_ALIGNMENT) * GROUP_ALIGNMENT  # rounded up
        return cls(tuple(groups), tuple(slots), offset)

    @property
    def data_nbytes(self) -> int:
        """The bytes up to the end of the last group's data (``nbytes`` less the last group's padding).

        For one dtype this is exactly the arrays' bytes back to back: what a rank whose arrays
        lie in one buffer sends or receives in place, so both ways give one message size.
        """
        return self.groups[-1].byte_offset + self.groups[-1].nbytes if self.groups else 0

    def allocate(self, xp: types.ModuleType) -> Array:
        """A new uint8 buffer of ``nbytes`` (at least 1 byte) on ``xp``."""
        return xp.empty(max(self.nbytes, 1), dtype=np.uint8)

    def group_views(self, buffer: Array) -> list[Array]:
        """One typed 1-D view of ``buffer`` per group."""
        return [buffer[g.byte_offset:g.byte_offset + g.nbytes].view(g.dtype) for g in self.groups]

    def slot_views(self, buffer: Array) -> list[Array]:
        """One view of ``buffer`` per array, shaped like it."""
        groups = self.group_views(buffer)
        return [groups[s.group][s.offset:s.offset + s.size].reshape(s.shape) for s in self.slots]


# ---- zero-copy ---------------------------------------------------------------------------------
def address(array: Array) -> int:
    """The address of ``array``'s first element (host or device)."""
    interface = getattr(array, "__cuda_array_interface__", None) or array.__array_interface__
    return int(interface["data"][0])


def contiguous_span(arrays: Sequence[Array]) -> Array | None:
    """A 1-D view covering exactly ``arrays``, when they lie back to back in one buffer; else None.

    True when every array is C-contiguous, all share one dtype and one owning buffer (a
    C-contiguous array of that dtype), and ``arrays[i + 1]`` starts where ``arrays[i]`` ends.
    A single C-contiguous array is its own span. Empty arrays are passed over.
    """
    arrays = [a for a in arrays if a.size]
    if not arrays:
        return None
    first = arrays[0]
    root = first if first.base is None else first.base
    if type(root) is not type(first) or not root.flags.c_contiguous or any(
            a.dtype != root.dtype or not a.flags.c_contiguous or (a if a.base is None else a.base) is not root
            for a in arrays):
        return None
    start = end = address(first)
    for a in arrays:
        if address(a) != end:
            return None
        end += a.nbytes
    offset = (start - address(root)) // root.dtype.itemsize
    return root.reshape(-1)[offset:offset + (end - start) // root.dtype.itemsize]


def fuse_arrays(arrays: Sequence[Array]) -> list[Array]:
    """Copies of ``arrays`` placed back to back in one new buffer: views of it, same shapes and values.

    Give the views to your model in place of the originals (``layer.grad = views[0]``, ...): a
    collective over the views then works on their one buffer directly, with no copy in or out.

    Args:
        arrays: NumPy or CuPy arrays of any shapes, all of one kind and one dtype (CuPy: on the
            current device, where the buffer is allocated).

    Returns:
        One view per array, ``views[i]`` shaped like ``arrays[i]`` and holding its values; the
        views lie back to back, in order, in one new 1-D buffer of ``sum(a.size)`` elements.

    Raises:
        ValueError: no arrays.
        TypeError: a non-array, a mix of NumPy and CuPy arrays, or more than one dtype.
    """
    arrays = list(arrays)
    if not arrays:
        raise ValueError("fuse_arrays needs at least one array; got an empty list")
    xp = array_module(**{f"arrays[{i}]": a for i, a in enumerate(arrays)})
    dtypes = {np.dtype(a.dtype) for a in arrays}
    if len(dtypes) > 1:
        raise TypeError(f"fuse_arrays needs arrays of one dtype; got {sorted(d.name for d in dtypes)}")
    ends = np.cumsum([int(a.size) for a in arrays])
    flat = xp.empty(int(ends[-1]), dtype=arrays[0].dtype)
    views = [flat[end - a.size:end].reshape(a.shape) for a, end in zip(arrays, ends)]
    for view, a in zip(views, arrays):
        view[...] = a
    return views
