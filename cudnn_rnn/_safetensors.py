"""The safetensors layout: named arrays behind a JSON header, written and read without the safetensors package.

Layout (every integer little-endian)::

    [0, 8)        n: u64, the length of the header (at most MAX_HEADER_BYTES)
    [8, 8 + n)    the header: UTF-8 JSON, padded with spaces so the data starts at a multiple of 8
                    {"__metadata__": {"<key>": "<text>", ...},                  (optional, str -> str)
                     "<array name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]},
                     ...}
    [8 + n, end)  the arrays' bytes back to back, C order, little-endian, no holes; each array's
                  data_offsets count from 8 + n

The dtype codes read and written (nothing else is: an unknown code is refused, naming the known ones):

==========  ==============  ===========  ==========================================
code        NumPy dtype     item bytes   table
==========  ==============  ===========  ==========================================
``BOOL``    ``bool``        1            :data:`DTYPES`
``U8``      ``uint8``       1            :data:`DTYPES`
``I8``      ``int8``        1            :data:`DTYPES`
``U16``     ``uint16``      2            :data:`DTYPES`
``I16``     ``int16``       2            :data:`DTYPES`
``U32``     ``uint32``      4            :data:`DTYPES`
``I32``     ``int32``       4            :data:`DTYPES`
``U64``     ``uint64``      8            :data:`DTYPES`
``I64``     ``int64``       8            :data:`DTYPES`
``F16``     ``float16``     2            :data:`DTYPES`
``F32``     ``float32``     4            :data:`DTYPES`
``F64``     ``float64``     8            :data:`DTYPES`
``BF16``    ``bfloat16``    2            :data:`EXTENSION_DTYPES` (ml_dtypes, imported only when
                                         such an array is written or read as bfloat16)
==========  ==============  ===========  ==========================================

:func:`read_layout` checks the whole header before any array's data is read, and never trusts a
size it has not checked:

=====================================  ======================================================
what                                   refused unless
=====================================  ======================================================
the header length                      at most :data:`MAX_HEADER_BYTES`, and within the file
the header                             UTF-8 JSON, an object, its arrays and objects nested
                                       at most :data:`MAX_NESTING` deep (a nesting too deep
                                       to parse is refused too, never raised)
``__metadata__``                       absent, null, or an object of str values
each array's entry                     exactly ``dtype``, ``shape``, ``data_offsets``
``dtype``                              a code of the table above
``shape``                              a list of at most :data:`MAX_DIMENSIONS` non-negative
                                       ints (bools are not ints); under :data:`MAX_ARRAY_BYTES`
``data_offsets``                       ``[begin, end]``, ints, 0 <= begin <= end
the byte count                         ``end - begin == prod(shape) * item bytes`` (Python ints)
the arrays together                    back to back from 0, no overlap, no hole, ending exactly
                                       where the file ends
=====================================  ======================================================

Every refusal is a :class:`SafetensorsError` with a one-line reason that does not name the file
(the caller adds it). Nothing recurses into the header's values once it has parsed (its nesting is
counted over its bytes), and a value quoted in a message is shortened first, so a hostile header
costs time and memory in proportion to its own size.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Mapping

import numpy as np

from .config import numpy_dtype

__all__ = ["DTYPES", "EXTENSION_DTYPES", "MAX_HEADER_BYTES", "MAX_DIMENSIONS", "MAX_ARRAY_BYTES", "MAX_NESTING",
           "METADATA_KEY", "HEADER_LENGTH", "SafetensorsError", "Entry", "Layout", "encode", "parse_header",
           "check_metadata", "check_entries", "read_layout", "read_array"]

#: safetensors dtype code -> NumPy dtype (little-endian)
DTYPES: dict[str, np.dtype] = {code: np.dtype(name).newbyteorder("<") for code, name in (
    ("BOOL", "bool"), ("U8", "uint8"), ("I8", "int8"), ("U16", "uint16"), ("I16", "int16"), ("U32", "uint32"),
    ("I32", "int32"), ("U64", "uint64"), ("I64", "int64"), ("F16", "float16"), ("F32", "float32"),
    ("F64", "float64"))}

#: safetensors dtype code -> (dtype name, item size) of the dtypes NumPy has no type for without an extension
#: (bfloat16: ml_dtypes, imported only when such an array is written or read as bfloat16)
EXTENSION_DTYPES: dict[str, tuple[str, int]] = {"BF16": ("bfloat16", 2)}

#: NumPy dtype name -> safetensors code
_CODES: dict[str, str] = {**{dtype.name: code for code, dtype in DTYPES.items()},
                          **{name: code for code, (name, _) in EXTENSION_DTYPES.items()}}

#: the largest header read (the safetensors library's own bound is 100 MB)
MAX_HEADER_BYTES = 64 * 2**20

#: the most dimensions an array may have
MAX_DIMENSIONS = 32

#: no array (not even an empty one: each dimension counts) may span this many bytes (NumPy's own bound)
MAX_ARRAY_BYTES = 2**62

#: the deepest nesting of JSON arrays and objects a header may have (the layout itself nests 3: the header, an
#: entry, its shape)
MAX_NESTING = 16

#: the header's key that holds the str -> str metadata instead of an array
METADATA_KEY = "__metadata__"

#: the 8-byte little-endian length in front of the header
HEADER_LENGTH = struct.Struct("<Q")

#: a JSON string (of a header that parsed: every string is closed)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
#: byte -> how it changes the nesting of JSON outside strings
_NESTING_STEPS = np.zeros(256, np.int8)
_NESTING_STEPS[[ord("["), ord("{")]], _NESTING_STEPS[[ord("]"), ord("}")]] = 1, -1
_SCAN_CHUNK = 2**20

#: how values quoted in messages are shortened: bounded depth and length whatever the header holds (a list of
#: up to 40 items, as any shape within MAX_DIMENSIONS, is shown whole)
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 3, 40, 8
_SHORT.maxstring = _SHORT.maxlong = _SHORT.maxother = 40


class SafetensorsError(ValueError):
    """A safetensors file whose layout is broken; the message is a one-line reason, without the file's name.

    Args:
        reason: what is wrong (kept as :attr:`reason`).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def __reduce__(self) -> tuple[type[SafetensorsError], tuple[str]]:  # picklable across processes
        return (type(self), (self.reason,))


def _dtype(code: str) -> np.dtype:
    """The NumPy dtype of a code of :data:`DTYPES` or :data:`EXTENSION_DTYPES` (little-endian)."""
    return DTYPES[code] if code in DTYPES else numpy_dtype(EXTENSION_DTYPES[code][0]).newbyteorder("<")


def _itemsize(code: str) -> int:
    return DTYPES[code].itemsize if code in DTYPES else EXTENSION_DTYPES[code][1]


@dataclass(frozen=True)
class Entry:
    """One array of a safetensors file, as its header declares it (checked by :func:`check_entries`).

    Attributes:
        name: the array's name (its key in the header).
        code: its dtype code (``"F32"``; a key of :data:`DTYPES` or :data:`EXTENSION_DTYPES`).
        shape: its shape, C order.
        begin: the ABSOLUTE offset in the file of its first byte.
        end: the absolute offset just past its last byte (``end - begin == nbytes``).

    ``dtype`` (the little-endian NumPy dtype; ml_dtypes for ``BF16``, imported when first asked
    for), ``dtype_name``, ``itemsize``, ``count`` and ``nbytes`` are read off these.
    """

    name: str
    code: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def dtype(self) -> np.dtype:
        """The little-endian NumPy dtype (``bfloat16`` needs ml_dtypes, imported here)."""
        return _dtype(self.code)

    @property
    def dtype_name(self) -> str:
        """The dtype's name (``"float32"``, ``"bfloat16"``), without importing ml_dtypes."""
        return EXTENSION_DTYPES[self.code][0] if self.code in EXTENSION_DTYPES else DTYPES[self.code].name

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _itemsize(self.code)

    @property
    def count(self) -> int:
        """Elements: the product of :attr:`shape`."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of data: ``end - begin``."""
        return self.end - self.begin


@dataclass(frozen=True)
class Layout:
    """What a safetensors file's header declares, every part checked (:func:`read_layout`).

    Attributes:
        data_start: the absolute offset of the data (8 + the header length).
        entries: array name -> :class:`Entry` (absolute offsets), in header order.
        metadata: the ``__metadata__`` texts (empty when the file has none).
    """

    data_start: int
    entries: dict[str, Entry]
    metadata: dict[str, str]


# ---- writing --------------------------------------------------------------------------------------------
def encode(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> list[bytes | memoryview]:
    """A safetensors file as chunks to write back to back: the length and header, then each array's bytes.

    Args:
        arrays: name -> host NumPy array of a dtype in :data:`DTYPES` or :data:`EXTENSION_DTYPES`
            (any byte order and memory order: written little-endian, C order), in the order the
            header lists them and the data holds them.
        metadata: the ``__metadata__`` texts, str -> str; None writes no ``__metadata__``.

    Returns:
        ``[length + header, array bytes, ...]``: the header is ASCII JSON padded with spaces so
        the data starts at a multiple of 8.

    Raises:
        TypeError: a name or metadata key/value that is not a str, a value that is not a NumPy
            array, or an array of another dtype (naming it).
        ValueError: an array named ``"__metadata__"``.
    """
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a mapping of str to str or None; got {type(metadata).__name__}")
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"metadata must map str to str; got {_SHORT.repr(key)}: {type(value).__name__}")
    entries: dict[str, Any] = {}
    buffers: list[memoryview] = []
    offset = 0
    for name, array in arrays.items():
        if not isinstance(name, str):
            raise TypeError(f"array names must be str; got {type(name).__name__} {_SHORT.repr(name)}")
        if name == METADATA_KEY:
            raise ValueError(f"an array cannot be named {METADATA_KEY!r} (the header's metadata key)")
        if not isinstance(array, np.ndarray):
            raise TypeError(f"array {name!r} must be a NumPy array; got {type(array).__name__}")
        code = _CODES.get(array.dtype.name)
        if code is None:
            raise TypeError(f"array {name!r} has dtype {array.dtype}; a safetensors file holds {sorted(_CODES)}")
        data = np.asarray(array, dtype=_dtype(code), order="C")  # (not ascontiguousarray: it makes 0-d 1-d)
        buffers.append(data.reshape(-1).view(np.uint8).data)  # (as bytes: a memoryview cannot hold bfloat16)
        entries[name] = {"dtype": code, "shape": list(data.shape), "data_offsets": [offset, offset + data.nbytes]}
        offset += data.nbytes
    header = {METADATA_KEY: dict(metadata), **entries} if metadata is not None else entries
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * (-(len(text) + HEADER_LENGTH.size) % 8)
    return [HEADER_LENGTH.pack(len(text)) + text, *buffers]


# ---- checking a header -----------------------------------------------------------------------------------
def parse_header(header: bytes) -> dict[str, Any]:
    """The header's JSON object.

    Args:
        header: the header's bytes (UTF-8 JSON, trailing spaces allowed).

    Returns:
        The object, ``__metadata__`` included.

    Raises:
        SafetensorsError: not UTF-8, not JSON (a nesting too deep to parse included), nested
            deeper than :data:`MAX_NESTING`, or not an object.
    """
    try:
        value = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as error:
        raise SafetensorsError(f"the header is not valid JSON ({type(error).__name__}: {error})"[:300]) from None
    depth = _nesting(header)
    if depth > MAX_NESTING:
        raise SafetensorsError(f"the header nests JSON arrays and objects {depth} deep; a safetensors header nests "
                               f"3 (at most {MAX_NESTING} are read)")
    if not isinstance(value, dict):
        raise SafetensorsError(f"the header must be a JSON object; got {type(value).__name__}")
    return value


def _nesting(header: bytes) -> int:
    """How deep the arrays and objects of a header that parsed nest, counted over its bytes outside strings
    (in C-speed passes, never recursing, whatever the header holds)."""
    codes = np.frombuffer(_STRING.sub(b"", header), np.uint8)
    depth = deepest = 0
    for start in range(0, len(codes), _SCAN_CHUNK):
        levels = np.cumsum(_NESTING_STEPS[codes[start:start + _SCAN_CHUNK]], dtype=np.int64) + depth
        deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
    return deepest


def check_metadata(value: Any) -> dict[str, str]:
    """The ``__metadata__`` value as a dict of texts (``{}`` for None: absent or null).

    Raises:
        SafetensorsError: not an object, or a value in it that is not a str.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SafetensorsError(f"{METADATA_KEY} must be an object of str values; got {type(value).__name__} "
                               f"{_SHORT.repr(value)}")
    for key, text in value.items():
        if not isinstance(text, str):
            raise SafetensorsError(f"{METADATA_KEY} must be an object of str values; {_SHORT.repr(key)} is a "
                                   f"{type(text).__name__} {_SHORT.repr(text)}")
    return dict(value)


def check_entries(header: Mapping[str, Any], data_start: int, data_bytes: int) -> dict[str, Entry]:
    """Every array entry of a header (``__metadata__`` taken out), checked against the data.

    Args:
        header: array name -> its entry, as parsed.
        data_start: the absolute offset of the data (the entries' offsets count from here).
        data_bytes: the bytes the file holds from ``data_start`` on.

    Returns:
        name -> :class:`Entry` with absolute offsets, in header order.

    Raises:
        SafetensorsError: an entry that is not exactly {dtype, shape, data_offsets}, an unknown
            dtype code, a bad shape or offsets, a byte count that is not the shape's, or arrays
            that do not tile the data exactly (overlapping, holes, data too short or too long).
    """
    entries: dict[str, Entry] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"array {name[:80]!r}: its entry must hold exactly dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or (dtype not in DTYPES and dtype not in EXTENSION_DTYPES):
            shown = dtype if isinstance(dtype, str) else _SHORT.repr(dtype)
            raise SafetensorsError(f"array {name[:80]!r}: dtype {shown[:20]!r} is not one of "
                                   f"{sorted([*DTYPES, *EXTENSION_DTYPES])}")
        if not _integers(shape, MAX_DIMENSIONS):
            raise SafetensorsError(f"array {name[:80]!r}: shape must be a list of at most {MAX_DIMENSIONS} "
                                   f"non-negative integers; got {_SHORT.repr(shape)[:80]}")
        if not _integers(offsets, 2) or len(offsets) != 2 or offsets[0] > offsets[1]:
            raise SafetensorsError(f"array {name[:80]!r}: data_offsets must be [begin, end] with 0 <= begin <= end; "
                                   f"got {_SHORT.repr(offsets)[:80]}")
        if math.prod(max(size, 1) for size in shape) * _itemsize(dtype) >= MAX_ARRAY_BYTES:
            raise SafetensorsError(f"array {name[:80]!r}: shape {_SHORT.repr(shape)[:80]} is larger than any array "
                                   "can be")
        nbytes = math.prod(shape) * _itemsize(dtype)
        if offsets[1] - offsets[0] != nbytes:
            raise SafetensorsError(f"array {name[:80]!r}: {dtype} {shape} needs {nbytes} bytes; its offsets span "
                                   f"{offsets[1] - offsets[0]}")
        entries[name] = Entry(name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])
        spans.append((offsets[0], offsets[1], name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise SafetensorsError(f"array {name[:80]!r} starts at byte {begin} of the data; the arrays must lie "
                                   f"back to back, so it should start at {position}")
        position = end
    if position != data_bytes:
        state = "truncated" if position > data_bytes else "longer than its header says"
        raise SafetensorsError(f"the file is {state}: its arrays take {position} bytes after the header, and "
                               f"{data_bytes} are there")
    return entries


def _integers(values: Any, most: int) -> bool:
    """Whether ``values`` is a list of at most ``most`` non-negative ints (bools excluded), looking at no more."""
    return (isinstance(values, list) and len(values) <= most
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values))


# ---- reading a file --------------------------------------------------------------------------------------
def read_layout(handle: BinaryIO, file_size: int) -> Layout:
    """The checked layout of an open safetensors file, reading only its length and header.

    Args:
        handle: the file, open for binary reading and seekable (its position is moved).
        file_size: its size in bytes.

    Returns:
        The :class:`Layout`: every entry checked and tiling the data exactly, offsets absolute.

    Raises:
        SafetensorsError: the file is too short, its header length is over
            :data:`MAX_HEADER_BYTES` or past the file's end, or anything :func:`parse_header`,
            :func:`check_metadata` or :func:`check_entries` refuses.
    """
    size = HEADER_LENGTH.size
    if file_size < size:
        raise SafetensorsError(f"the file is too short ({file_size} bytes) to hold a safetensors header")
    handle.seek(0)
    head = handle.read(size)
    if len(head) != size:
        raise SafetensorsError(f"the file is truncated: it ends after {len(head)} bytes")
    (length,) = HEADER_LENGTH.unpack(head)
    if length > MAX_HEADER_BYTES:
        raise SafetensorsError(f"its first 8 bytes give a header of {length} bytes, more than the {MAX_HEADER_BYTES} "
                               "a safetensors header may have (not a safetensors file, or a damaged one)")
    if size + length > file_size:
        raise SafetensorsError(f"the file is truncated: its header says {length} bytes, and only "
                               f"{file_size - size} follow its length")
    text = handle.read(length)
    if len(text) != length:
        raise SafetensorsError(f"the file is truncated: its header says {length} bytes, and only {len(text)} "
                               "could be read")
    header = parse_header(text)
    metadata = check_metadata(header.pop(METADATA_KEY, None))
    entries = check_entries(header, size + length, file_size - size - length)
    return Layout(size + length, entries, metadata)


def read_array(handle: BinaryIO, entry: Entry, dtype: np.dtype | None = None) -> np.ndarray:
    """One array of an open safetensors file, reading only its bytes, as a new host array.

    Args:
        handle: the file, open for binary reading and seekable (its position is moved).
        entry: the array's entry from :func:`read_layout` of this file.
        dtype: read the bytes as this dtype of the same item size instead (e.g. ``<u2`` for the
            bits of a bfloat16 array, which then needs no ml_dtypes); None: ``entry.dtype``.

    Returns:
        A writable C-ordered array of ``entry.shape``, in the declared little-endian dtype.

    Raises:
        SafetensorsError: the file ends before the array does (changed since its layout was read).
        ValueError: ``dtype`` of another item size.
    """
    as_dtype = entry.dtype if dtype is None else np.dtype(dtype)
    if as_dtype.itemsize != entry.itemsize:
        raise ValueError(f"dtype must have the item size of {entry.code} ({entry.itemsize} bytes); got {as_dtype} "
                         f"({as_dtype.itemsize} bytes)")
    buffer = bytearray(entry.nbytes)
    view = memoryview(buffer)
    handle.seek(entry.begin)
    filled = 0
    while filled < entry.nbytes:
        got = handle.readinto(view[filled:])  # type: ignore[attr-defined]
        if not got:
            raise SafetensorsError(f"the file is truncated: array {entry.name[:80]!r} takes bytes [{entry.begin}, "
                                   f"{entry.end}) and the file ends at {entry.begin + filled}")
        filled += got
    return np.frombuffer(buffer, as_dtype).reshape(entry.shape)
