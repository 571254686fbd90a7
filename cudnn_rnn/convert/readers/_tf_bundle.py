"""Check a TensorFlow checkpoint's index before TensorFlow's reader sees it.

A checkpoint ``PREFIX`` is ``PREFIX.index`` (a sorted table: key -> ``BundleEntryProto``, the
key ``""`` holding the ``BundleHeaderProto``) and the data shards
``PREFIX.data-{shard:05d}-of-{num_shards:05d}``::

    .index   [data block]... [meta-index block] [index block] [footer: 2 block handles, magic]
    block    entries (varint shared, varint unshared, varint value length, key tail, value)...
             restart offsets (uint32)..., restart count (uint32); then 1 type byte, 4 CRC bytes
    entry    dtype, shape [d0, d1, ...], shard_id, offset, size, crc32c, slices

TensorFlow's C++ reader aborts the whole process (it does not raise) on some malformed
entries: a negative or overflowing dimension, or more than 254 dimensions. So
:func:`read_index` parses the table here and checks every entry (dtype known, dimensions
non-negative, the element count representable, ``size`` equal to the declared bytes, the bytes
inside an existing shard; a partitioned variable's whole shape no larger than the data files)
before any tensor is read. TensorFlow then verifies the block and data checksums itself (a
flipped byte raises there).
"""

from __future__ import annotations

import glob
import math
import os
import struct
from dataclasses import dataclass
from typing import Any

from ._found import FileReadError

__all__ = ["BundleEntry", "read_index", "shard_path", "MAX_DIMS"]

#: the last 8 bytes of every table TensorFlow writes
TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_BYTES = 48
BLOCK_TRAILER_BYTES = 5  # type byte + masked CRC32C
UNCOMPRESSED_BLOCK = 0

#: TensorShape holds at most this many dimensions (TensorFlow aborts beyond it)
MAX_DIMS = 254
#: TensorShape counts elements in a signed 64-bit integer
MAX_ELEMENTS = 2**63 - 1
#: a sanity bound on the shard count the header may declare
MAX_SHARDS = 100_000
#: dtypes whose size is not elements * itemsize (their bytes are only bounded by the shard)
VARIABLE_SIZE_DTYPES = ("string", "variant", "resource")


@dataclass(frozen=True)
class BundleEntry:
    """One tensor of the checkpoint, as its index declares it."""

    dtype: str                  # TensorFlow's dtype name ("float32", "string", ...)
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    sliced: bool                # a partitioned variable (its slices are stored under other keys)


def shard_path(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _varint(buffer: bytes, position: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= end or shift > 63:
            raise ValueError("a varint runs past its block")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, position


def _block(data: bytes, handle: tuple[int, int]) -> tuple[int, int]:
    """The (start, end) of a block's contents, checked to lie inside the file and be uncompressed."""
    offset, size = handle
    end = offset + size
    if end + BLOCK_TRAILER_BYTES > len(data):
        raise ValueError(f"a block handle ({offset}, {size}) points past the end of the file ({len(data)} bytes)")
    if data[end] != UNCOMPRESSED_BLOCK:
        raise ValueError(f"a block is compressed (type {data[end]}), which TensorFlow's checkpoint writer never does")
    return offset, end


def _entries(data: bytes, start: int, end: int) -> list[tuple[bytes, bytes]]:
    if end - start < 4:
        raise ValueError("a block is too short to hold its restart count")
    restarts = struct.unpack_from("<I", data, end - 4)[0]
    limit = end - 4 - 4 * restarts
    if restarts < 1 or limit < start:
        raise ValueError(f"a block declares {restarts} restart points, which do not fit in it")
    entries, key, position = [], b"", start
    while position < limit:
        shared, position = _varint(data, position, limit)
        unshared, position = _varint(data, position, limit)
        length, position = _varint(data, position, limit)
        if shared > len(key) or position + unshared + length > limit:
            raise ValueError("a table entry runs past its block")
        key = key[:shared] + data[position:position + unshared]
        position += unshared
        entries.append((key, data[position:position + length]))
        position += length
    return entries


def _table(data: bytes) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a table, in order."""
    if len(data) < FOOTER_BYTES:
        raise ValueError(f"the index is {len(data)} bytes, shorter than a table footer")
    if struct.unpack_from("<Q", data, len(data) - 8)[0] != TABLE_MAGIC:
        raise ValueError("the index does not end with a table's magic number")
    footer_end = len(data) - 8
    position = len(data) - FOOTER_BYTES
    _, position = _varint(data, position, footer_end)       # meta-index handle (unused)
    _, position = _varint(data, position, footer_end)
    index_offset, position = _varint(data, position, footer_end)
    index_size, _ = _varint(data, position, footer_end)
    entries = []
    for _, handle in _entries(data, *_block(data, (index_offset, index_size))):
        offset, position = _varint(handle, 0, len(handle))
        size, _ = _varint(handle, position, len(handle))
        entries += _entries(data, *_block(data, (offset, size)))
    return entries


def _check_entry(path: str, key: str, entry: Any, num_shards: int, shard_sizes: dict[int, int | None],
                 prefix: str, stored_total: int) -> BundleEntry:
    """``entry`` (a ``BundleEntryProto``, which TensorFlow ships untyped) checked against the data files."""
    import tensorflow as tf

    try:
        dtype = tf.dtypes.as_dtype(entry.dtype)
    except TypeError:
        raise FileReadError(path, f"variable {key!r} declares an unknown dtype number {entry.dtype}: the index is "
                                  "corrupt") from None
    dims = [int(dim.size) for dim in entry.shape.dim]
    if len(dims) > MAX_DIMS:
        raise FileReadError(path, f"variable {key!r} declares {len(dims)} dimensions (at most {MAX_DIMS}): the "
                                  "index is corrupt")
    if any(d < 0 for d in dims):
        raise FileReadError(path, f"variable {key!r} declares a negative dimension in shape {tuple(dims)}: the "
                                  "index is corrupt")
    elements = math.prod(dims)
    if elements > MAX_ELEMENTS:
        raise FileReadError(path, f"variable {key!r} declares shape {tuple(dims)}, more elements than a tensor can "
                                  "have: the index is corrupt")
    if not 0 <= entry.shard_id < num_shards:
        raise FileReadError(path, f"variable {key!r} is in shard {entry.shard_id}, but the checkpoint has "
                                  f"{num_shards} shard(s): the index is corrupt")
    if entry.slices:  # a partitioned variable: TensorFlow assembles the whole shape from its slices
        if dtype.name not in VARIABLE_SIZE_DTYPES and elements * dtype.size > stored_total:
            raise FileReadError(path, f"variable {key!r} declares shape {tuple(dims)} ({elements * dtype.size} bytes) "
                                      f"but the checkpoint stores only {stored_total} bytes: the index is corrupt")
        for extents in entry.slices:
            if len(extents.extent) != len(dims) or any(
                    e.start < 0 or (e.HasField("length") and (e.length < 0 or e.start + e.length > d))
                    for e, d in zip(extents.extent, dims)):
                raise FileReadError(path, f"variable {key!r} declares slices that do not fit its shape "
                                          f"{tuple(dims)}: the index is corrupt")
        return BundleEntry(dtype.name, tuple(dims), int(entry.shard_id), int(entry.offset), int(entry.size), True)
    if dtype.name not in VARIABLE_SIZE_DTYPES and entry.size != elements * dtype.size:
        raise FileReadError(path, f"variable {key!r} declares shape {tuple(dims)} ({elements * dtype.size} bytes of "
                                  f"{dtype.name}) but stores {entry.size} bytes: the checkpoint is corrupt")
    data_path = shard_path(prefix, int(entry.shard_id), num_shards)
    if entry.shard_id not in shard_sizes:
        shard_sizes[entry.shard_id] = os.path.getsize(data_path) if os.path.isfile(data_path) else None
    stored = shard_sizes[entry.shard_id]
    if stored is None:
        raise FileReadError(path, f"variable {key!r} is in the data file {os.path.basename(data_path)!r}, which is "
                                  "missing: copy every .data-* file of the checkpoint beside its .index")
    if entry.offset < 0 or entry.size < 0 or entry.offset + entry.size > stored:
        raise FileReadError(data_path, f"variable {key!r} declares bytes {entry.offset}..{entry.offset + entry.size} "
                                       f"but the file holds only {stored} bytes: "
                                       "the checkpoint is truncated or corrupt")
    return BundleEntry(dtype.name, tuple(dims), int(entry.shard_id), int(entry.offset), int(entry.size), False)


def read_index(prefix: str) -> dict[str, BundleEntry]:
    """Every variable the checkpoint ``prefix`` declares, each entry checked against its data shard.

    Raises:
        FileReadError: the index is missing, truncated or corrupt, or an entry declares a
            shape, dtype or byte range that its data file cannot hold.
    """
    from tensorflow.core.protobuf import tensor_bundle_pb2
    from google.protobuf.message import DecodeError

    path = prefix + ".index"
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise FileReadError(path, f"cannot open it: {error.strerror or error}") from None
    try:
        table = _table(data)
    except (ValueError, IndexError, struct.error) as error:
        raise FileReadError(path, f"not a readable TensorFlow checkpoint index ({error}): the file is truncated or "
                                  "corrupt") from None
    if not table or table[0][0] != b"":
        raise FileReadError(path, "the checkpoint index has no header entry: the file is corrupt")
    try:
        header = tensor_bundle_pb2.BundleHeaderProto.FromString(table[0][1])
    except DecodeError:
        raise FileReadError(path, "the checkpoint index header does not parse: the file is corrupt") from None
    if not 1 <= header.num_shards <= MAX_SHARDS:
        raise FileReadError(path, f"the checkpoint index declares {header.num_shards} data shards: the file is corrupt")
    entries: dict[str, BundleEntry] = {}
    shard_sizes: dict[int, int | None] = {}
    stored_total = sum(os.path.getsize(name) for name in glob.glob(glob.escape(prefix) + ".data-*-of-*")
                       if os.path.isfile(name))
    for raw_key, value in table[1:]:
        key = raw_key.decode("utf-8", errors="backslashreplace")  # slices of partitioned variables: binary keys
        try:
            entry = tensor_bundle_pb2.BundleEntryProto.FromString(value)
        except DecodeError:
            raise FileReadError(path, f"the index entry of variable {key!r} does not parse: "
                                      "the file is corrupt") from None
        entries[key] = _check_entry(path, key, entry, header.num_shards, shard_sizes, prefix, stored_total)
    return entries
