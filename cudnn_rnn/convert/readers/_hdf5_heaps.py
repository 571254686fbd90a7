"""HDF5 global heaps, checked in the file's raw bytes before libhdf5 reads them.

    check_global_heaps(data, fail)   data: the whole file (bytes or an mmap); fail(reason) -> FileReadError

=========================  =====================================================================
global heap collection     "GCOL", version 1, 3 reserved bytes, its size (L bytes)
each object                index u16, references u16, 4 reserved bytes, size (L bytes),
                           data padded to 8 bytes (index 0: the free space)
=========================  =====================================================================

L, the superblock's "size of lengths", is 8 unless the superblock says otherwise. libhdf5 steps
from one object to the next by its size; a size that does not move it on would keep it there
forever, so such a collection is refused before libhdf5 sees the file.
"""

from __future__ import annotations

from typing import Any, Callable

from ._found import FileReadError

__all__ = ["check_global_heaps", "GLOBAL_HEAP", "GLOBAL_HEAP_MIN_SIZE"]


#: HDF5's global heap collection (where variable-length strings live): "GCOL", version 1, 3 reserved
#: bytes, its size; then objects [index u16, references u16, 4 reserved, size, data padded to 8 bytes],
#: index 0 being the free space. Lengths take 8 bytes unless the superblock says otherwise.
GLOBAL_HEAP = b"GCOL"
GLOBAL_HEAP_MIN_SIZE = 4096


def _size_of_lengths(data: Any) -> int:
    """The superblock's "size of lengths" (byte 14 of versions 0 and 1, byte 10 of versions 2 and 3)."""
    base = 0
    while base + 16 <= len(data) and data[base:base + 8] != b"\x89HDF\r\n\x1a\n":
        base = base * 2 or 512  # the superblock sits at 0, 512, 1024, 2048, ...
    if base + 16 > len(data):
        return 8
    return data[base + (14 if data[base + 8] < 2 else 10)] or 8


def check_global_heaps(data: Any, fail: Callable[[str], FileReadError]) -> None:
    """Refuse a global heap collection whose list of objects never ends.

    libhdf5 steps through a collection by each object's size; an object that does not move it on
    (a free-space entry of size 0, or a size that wraps the address around) makes it loop forever.
    """
    lengths = _size_of_lengths(data)
    header = 8 + lengths
    start = data.find(GLOBAL_HEAP)
    while start >= 0:
        size = int.from_bytes(data[start + 8:start + header], "little")
        if data[start + 4:start + 8] == b"\x01\x00\x00\x00" and size >= GLOBAL_HEAP_MIN_SIZE:
            position, end = start + header, min(start + size, len(data))
            while position + header <= end:
                index = int.from_bytes(data[position:position + 2], "little")
                length = int.from_bytes(data[position + 8:position + header], "little")
                step = (header + -(-length // 8) * 8 if index else length) % 2 ** 64
                if step == 0 or step >= 2 ** 63:
                    raise fail(f"the global heap at byte {start} is corrupt (object {index} at byte {position} has "
                               f"size {length}), which would never finish reading")
                position += step
        start = data.find(GLOBAL_HEAP, start + 4)
