"""Tensors where a file stores them (:class:`StoredTensor`), and writing new values there in place.

A stored tensor is found by a locator (``_torch_zip.state_dicts``, the Keras reader's ``locate``,
``safetensors_places``) in a file that was read and checked first (its tensors within the file, a
zip member holding them stored, not compressed). The bytes a tensor's elements take are its
:class:`Extent`; :func:`overlapping` tells whether two tensors share any.
"""

from __future__ import annotations

import math
import mmap
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ...config import numpy_dtype
from ..readers import member_data_offset

__all__ = ["StoredTensor", "Extent", "overlapping", "patch", "reads_back", "fix_zip_checksums"]

#: the work :func:`numpy.shares_memory` may do to tell exactly whether two strided tensors share a byte (beyond
#: it, they count as sharing one); tensors as files store them (a few dimensions) need far less. (numpy's stubs
#: spell only its two named bounds, -1 and 0; it takes any.)
_MAX_SHARING_WORK: Any = 1 << 20

#: what numpy raises when that work is not enough (numpy.exceptions from numpy 1.25 on)
_TOO_HARD: type[Exception] = getattr(np, "exceptions", np).TooHardError


@dataclass(frozen=True)
class Extent:
    """The bytes of a file that one tensor's elements take, whatever their type.

    Attributes:
        member: the zip member holding them (its checksum must be renewed once they change), or None.
        offset: the byte offset of the first element in the file.
        shape: the tensor's shape.
        strides: bytes between neighbours along each axis (C order for most files).
        itemsize: bytes per element.
    """

    member: str | None
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int

    def span(self) -> tuple[int, int]:
        """The first byte and one past the last byte it touches."""
        if any(size == 0 for size in self.shape):
            return self.offset, self.offset
        low = self.offset + sum(min(0, (size - 1) * stride) for size, stride in zip(self.shape, self.strides))
        high = self.offset + sum(max(0, (size - 1) * stride) for size, stride in zip(self.shape, self.strides))
        return low, high + self.itemsize


def overlapping(buffer: mmap.mmap, first: Extent, second: Extent) -> bool:
    """Whether two tensors of the file mapped as ``buffer`` share a byte: in the same member, within the
    same span, and exactly (:func:`numpy.shares_memory`), not only interleaved. One that cannot be told
    (an extent past the file's end, strides too intricate) counts as sharing."""
    (low, high), (other_low, other_high) = first.span(), second.span()
    if first.member != second.member or not (low < other_high and other_low < high):
        return False
    try:
        views = [np.ndarray(extent.shape, np.dtype(f"V{extent.itemsize}"), buffer=buffer, offset=extent.offset,
                            strides=extent.strides) for extent in (first, second)]
        return bool(np.shares_memory(views[0], views[1], max_work=_MAX_SHARING_WORK))
    except (ValueError, TypeError, _TOO_HARD):
        return True


@dataclass(frozen=True)
class StoredTensor(Extent):
    """Where a file keeps one tensor: its extent, and its element type's name ("float32", "bfloat16", ...)
    stored in byte order ``byteorder`` ("<" or ">")."""

    dtype: str
    byteorder: str = "<"

    @classmethod
    def contiguous(cls, offset: int, shape: Sequence[int], dtype: str, byteorder: str = "<",
                   member: str | None = None, itemsize: int | None = None) -> "StoredTensor":
        """A tensor stored in C order from ``offset`` on (``itemsize``: bytes per element, for a dtype that is
        not an RNN's)."""
        itemsize = numpy_dtype(dtype).itemsize if itemsize is None else itemsize
        shape = tuple(int(size) for size in shape)
        strides = tuple(itemsize * math.prod(max(size, 1) for size in shape[axis + 1:]) for axis in range(len(shape)))
        return cls(member, offset, shape, strides, itemsize, dtype, byteorder)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype of its bytes in the file."""
        stored: np.dtype = numpy_dtype(self.dtype).newbyteorder(">" if self.byteorder == ">" else "<")
        return stored

    def view(self, buffer: mmap.mmap) -> np.ndarray:
        """Its elements in the mapped file (an array that looks into ``buffer``, which cannot close while it lives)."""
        view: np.ndarray = np.ndarray(self.shape, self.numpy_dtype, buffer=buffer, offset=self.offset,
                                      strides=self.strides)
        return view


def patch(mapped: mmap.mmap, writes: Mapping[str, tuple[StoredTensor, np.ndarray]]) -> None:
    """Write each array at its stored place in the mapped file.

    Two tensors that share bytes (tied in the file) are both written only where their new values agree
    there, so that each reads back as written.

    Raises:
        ValueError: two tensors share bytes and their new values differ there (naming them).
    """
    for stored, values in writes.values():
        stored.view(mapped)[...] = values
    keys = list(writes)
    for index, key in enumerate(keys):
        for other in keys[index + 1:]:
            if overlapping(mapped, writes[key][0], writes[other][0]) and not (
                    reads_back(mapped, *writes[key]) and reads_back(mapped, *writes[other])):
                raise ValueError(f"tensors {key!r} and {other!r} share storage in the model (tied) and their new "
                                 "values differ there: one storage cannot hold both; give them the same values, "
                                 "or save the model with the two untied")


def reads_back(mapped: mmap.mmap, stored: StoredTensor, values: np.ndarray) -> bool:
    """Whether the mapped file holds ``values`` at ``stored``'s place (the view gone once this returns)."""
    return bool(np.array_equal(stored.view(mapped), values, equal_nan=True))


_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # central directory header, 46 bytes
_CENTRAL_SIGNATURE, _DESCRIPTOR_SIGNATURE = b"PK\x01\x02", b"PK\x07\x08"
_LOCAL_CRC, _CENTRAL_CRC = 14, 16


def _central_entries(mapped: mmap.mmap, archive: zipfile.ZipFile) -> dict[str, int]:
    """Member name -> the offset of its central directory entry."""
    entries, position = {}, archive.start_dir
    for info in archive.infolist():
        fields = _CENTRAL.unpack_from(mapped, position)
        if fields[0] != _CENTRAL_SIGNATURE:
            raise ValueError(f"the archive's directory is damaged at byte {position}")
        entries[info.filename] = position
        position += _CENTRAL.size + fields[10] + fields[11] + fields[12]
    return entries


def fix_zip_checksums(path: str, mapped: mmap.mmap, members: Sequence[str]) -> None:
    """Recompute the CRC-32 of each named (stored) member of the archive ``path``, open as ``mapped``, and write
    it where the archive keeps it.

    A zip archive keeps a member's checksum in its local header, in its central directory entry,
    and, where the member's flags say so, in a data descriptor after its data.
    """
    if not members:
        return
    with zipfile.ZipFile(path) as archive:  # (only its directory is read: the map holds the data)
        central = _central_entries(mapped, archive)
        for name in dict.fromkeys(members):
            info = archive.getinfo(name)
            start = member_data_offset(mapped, info)
            checksum = struct.pack("<I", zlib.crc32(memoryview(mapped)[start:start + info.file_size]) & 0xFFFFFFFF)
            local = slice(info.header_offset + _LOCAL_CRC, info.header_offset + _LOCAL_CRC + 4)
            if not (info.flag_bits & 0x8 and mapped[local] == bytes(4)):  # (zero: the descriptor holds it)
                mapped[local] = checksum
            mapped[central[name] + _CENTRAL_CRC:central[name] + _CENTRAL_CRC + 4] = checksum
            if info.flag_bits & 0x8:  # a data descriptor follows the data, with or without its signature
                after = start + info.compress_size
                at = after + 4 if mapped[after:after + 4] == _DESCRIPTOR_SIGNATURE else after
                mapped[at:at + 4] = checksum

