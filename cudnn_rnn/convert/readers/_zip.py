"""Zip archives (``.keras``, ``torch.save``, ``.npz``): every member checked before any is read.

    with zipfile.ZipFile(path) as archive:
        members = checked_members(path, archive)     {name: ZipInfo}, in archive order
        data = read_member(path, archive, members["config.json"], limit=64 << 20)   bytes, as many as declared

Every member of the archive is checked against the file, from its directory entry and its local
header, before anything is decompressed; a reader passes only what differs (how much one member
may take in memory):

==============================================  ===============================================
a member is refused when                        because
==============================================  ===============================================
it is encrypted                                 no file read here has a password
it is compressed other than stored or deflated  what NumPy, Keras and torch write; nothing else
                                                is read
its local header and data run past the end      the archive is truncated, or its directory
of the file                                     lies
no local header is where the directory says     the directory points elsewhere
stored, it declares a size but stores another   stored bytes are the member itself
deflated, it declares more than                 deflate expands at most about 1032 times: a
MAX_COMPRESSION_RATIO times what it stores      decompression bomb
its name is in the archive twice                two readers could read different members
(read) it declares more than ``limit``          the reader's bound on memory: extract it instead
(read) it holds other than it declares          a damaged archive
==============================================  ===============================================

What ``zipfile`` and ``zlib`` raise on damaged data (a bad CRC, a broken deflate stream) is
:data:`READ_ERRORS`; each reader turns it into its own FileReadError.
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
from typing import BinaryIO

from ...files import (DAMAGED_ZIP, ZIP_LOCAL_HEADER as LOCAL_HEADER_SIGNATURE, ZIP_READ_ERRORS as READ_ERRORS,
                      decompression_bomb)
from ._found import FileReadError, one_line

__all__ = ["checked_members", "read_member", "member_data_offset", "READ_ERRORS", "DAMAGED_ZIP",
           "LOCAL_HEADER_SIGNATURE"]

#: a member's local header: its signature, then 22 bytes of fields, then the lengths of its name
#: and extra field (u16 each); the name, the extra field and the data follow
LOCAL_HEADER = struct.Struct("<4s22sHH")

#: the compression methods read
READ_METHODS: tuple[int, ...] = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)


def _check_member(path: str, info: zipfile.ZipInfo, file: BinaryIO, size: int) -> None:
    """Refuse a member the ``size``-byte ``file`` cannot hold as its directory entry says (see the module docstring)."""
    name = one_line(info.filename, 80)
    if info.flag_bits & 0x1:
        raise FileReadError(path, f"zip member {name!r} is encrypted")
    if info.compress_type not in READ_METHODS:
        raise FileReadError(path, f"zip member {name!r} uses compression method {info.compress_type}; only stored "
                                  f"({zipfile.ZIP_STORED}) and deflated ({zipfile.ZIP_DEFLATED}) members are read")
    past_the_end = FileReadError(path, f"zip member {name!r} claims {info.compress_size} bytes at offset "
                                       f"{info.header_offset}, past the end of the {size}-byte file: the file is "
                                       "truncated or corrupt")
    if info.header_offset + LOCAL_HEADER.size + info.compress_size > size:
        raise past_the_end
    file.seek(info.header_offset)
    start = _data_start(file.read(LOCAL_HEADER.size), 0, info)
    if start is None:
        raise FileReadError(path, f"zip member {name!r} has no local header at offset {info.header_offset}, where "
                                  "the archive's directory says it is: the file is corrupt")
    if start + info.compress_size > size:
        raise past_the_end
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise FileReadError(path, f"zip member {name!r} declares {info.file_size} bytes but stores "
                                  f"{info.compress_size}: the file is corrupt")
    if decompression_bomb(info.file_size, info.compress_size):
        raise FileReadError(path, f"zip member {name!r} declares {info.file_size} bytes from {info.compress_size} "
                                  "compressed bytes, more than deflate can expand (a decompression bomb)")


def _data_start(buffer: bytes | mmap.mmap, at: int, info: zipfile.ZipInfo) -> int | None:
    """Where the data of member ``info`` starts, from its local header at ``buffer[at:]``; None: no local header."""
    signature, _, name_length, extra_length = LOCAL_HEADER.unpack_from(buffer, at)
    if signature != LOCAL_HEADER_SIGNATURE:
        return None
    return int(info.header_offset + LOCAL_HEADER.size + name_length + extra_length)


def member_data_offset(buffer: bytes | mmap.mmap, info: zipfile.ZipInfo) -> int:
    """Where a member's data starts in the archive's bytes: after its local header, name and extra field.

    Raises:
        ValueError: no local header is where the directory says.
    """
    start = _data_start(buffer, info.header_offset, info)
    if start is None:
        raise ValueError(f"member {info.filename!r} has no local header where the archive's directory says")
    return start


def checked_members(path: str, archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """``{name: ZipInfo}`` of every member of ``archive`` (the zip file at ``path``), each checked.

    Raises:
        FileReadError: a member refused (see the module docstring), naming it.
    """
    infos = archive.infolist()
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        for info in infos:
            _check_member(path, info, file, size)
    members: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        if info.filename in members:  # the first name seen twice, in one pass however many members
            raise FileReadError(path, f"the zip archive holds member {one_line(info.filename, 80)!r} twice: "
                                      "the file is corrupt")
        members[info.filename] = info
    return members


def read_member(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int | None = None) -> bytes:
    """The bytes of a member :func:`checked_members` returned: exactly its declared size, at most ``limit``.

    Raises:
        FileReadError: it declares more than ``limit`` bytes, or holds other than it declares.
        READ_ERRORS: damaged data (a bad CRC, a broken deflate stream).
    """
    name = one_line(info.filename, 80)
    if limit is not None and info.file_size > limit:
        raise FileReadError(path, f"zip member {name!r} holds {info.file_size} bytes, more than {limit} read in "
                                  "memory; extract it and read the extracted file")
    with archive.open(info) as member:
        data = member.read(info.file_size + 1)
    if len(data) != info.file_size:
        raise FileReadError(path, f"zip member {name!r} holds {len(data)} bytes, not the {info.file_size} it declares")
    return data
