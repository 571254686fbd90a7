"""The safetensors layout, written and checked by the ``safetensors`` package (imported when a file is).

Layout (every integer little-endian)::

    [0, 8)        n: u64, the header's length, at most MAX_HEADER_BYTES (4 MiB)
    [8, 8 + n)    the header, UTF-8 JSON (padded with spaces so the data starts at a multiple of 8):
                    {"__metadata__": {"<key>": "<text>", ...},                  (optional, str -> str)
                     "<array name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...}
    [8 + n, end)  the arrays' bytes back to back, C order, little-endian; data_offsets count from 8 + n

A file is checked in three steps before any array is used: its first 8 bytes (:func:`header_length`),
then by the safetensors package, which refuses anything that is not a safetensors file (the header not
UTF-8 JSON, ``__metadata__`` not str -> str, a dtype code it does not know, shapes or offsets not
non-negative integers, a byte count that is not the shape's, arrays that overlap, leave holes or do not
end where the file does), then each entry against what this module reads (:func:`_entry`). Every
refusal is a :class:`SafetensorsError`, in the package's own words but for a file whose size is not the
one its header declares (:func:`_layout`).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Mapping

import numpy as np

from .. import _dtypes

__all__ = ["DTYPES", "EXTENSION_DTYPES", "MAX_HEADER_BYTES", "MAX_DIMENSIONS", "MAX_ARRAY_BYTES", "METADATA_KEY",
           "HEADER_LENGTH", "SafetensorsError", "Entry", "Layout", "serialize", "encode", "header_length",
           "read_layout", "read_array", "decode"]

#: safetensors dtype code -> NumPy dtype name, from the dtype table (``{"F32": "float32", "BF16": "bfloat16", ...}``)
_NAMES: dict[str, str] = _dtypes.names("safetensors")

#: safetensors dtype code -> little-endian NumPy dtype, for the types NumPy has built in
DTYPES: dict[str, np.dtype] = {code: np.dtype(name).newbyteorder("<") for code, name in _NAMES.items()
                               if name not in _dtypes.PACKAGES}

#: safetensors dtype code -> (dtype name, item size) of the types a package registers (bfloat16: ml_dtypes)
EXTENSION_DTYPES: dict[str, tuple[str, int]] = {code: (name, _dtypes.BY_NAME[name].itemsize)
                                                for code, name in _NAMES.items() if name in _dtypes.PACKAGES}

#: the longest header read or written: 4 MiB, far above any RNN file's (kilobytes; a parent module of 10,000
#: tensors has about 1 MB), and low enough that the worst header under it (70,000 empty arrays, a checkpoint's
#: checksum forged) is checked and refused in about a second and 200 MB
MAX_HEADER_BYTES = 4 * 2**20

#: the bound in messages
_BOUND = f"{MAX_HEADER_BYTES} ({MAX_HEADER_BYTES // 2**20} MiB)"

#: the most dimensions an array may have (NumPy 1's bound)
MAX_DIMENSIONS = 32

#: no array (not even an empty one: each dimension counts) may span this many bytes
MAX_ARRAY_BYTES = 2**62

#: the header's key that holds the str -> str metadata instead of an array
METADATA_KEY = "__metadata__"

#: the 8-byte little-endian length in front of the header
HEADER_LENGTH = struct.Struct("<Q")

#: what the package puts in front of every reason
_PACKAGE_PREFIX = re.compile(r"^Error while deserializing( header)?: ")
#: the package's words for a file whose size is not the one its header declares (its last check)
_INCOMPLETE = re.compile(_PACKAGE_PREFIX.pattern + "(incomplete metadata|MetadataIncompleteBuffer)")
#: the fewest bytes an array's entry takes in a header besides its name:
#: ``"":{"dtype":"U8","shape":[],"data_offsets":[0,0]},``
_ENTRY_BYTES = 50


class SafetensorsError(ValueError):
    """A safetensors file whose layout is broken; the message is a one-line reason, without the file's name.

    Args:
        reason: what is wrong (kept as :attr:`reason`).
    """

    def __init__(self, reason: str) -> None:  # (its one argument is its args: it pickles across processes)
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Entry:
    """One array of a safetensors file, as its header declares it (checked).

    Attributes:
        name: the array's name (its key in the header).
        code: its dtype code (``"F32"``; a key of ``_dtypes.names("safetensors")``).
        shape: its shape, C order.
        begin: the ABSOLUTE offset in the file of its first byte.
        end: the absolute offset just past its last byte (``end - begin == nbytes``).
    """

    name: str
    code: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def dtype(self) -> np.dtype:
        """The little-endian NumPy dtype (``bfloat16`` needs ml_dtypes, imported here)."""
        dtype: np.dtype = _dtypes.numpy_dtype(self.dtype_name).newbyteorder("<")
        return dtype

    @property
    def dtype_name(self) -> str:
        """The dtype's name (``"float32"``, ``"bfloat16"``), without importing ml_dtypes."""
        return _NAMES[self.code]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _dtypes.BY_NAME[self.dtype_name].itemsize

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
    """What a safetensors file's header declares, every part checked.

    Attributes:
        data_start: the absolute offset of the data (8 + the header length).
        entries: array name -> :class:`Entry` (absolute offsets), in header order.
        metadata: the ``__metadata__`` texts (empty when the file has none).
    """

    data_start: int
    entries: dict[str, Entry]
    metadata: dict[str, str]


# ---- writing --------------------------------------------------------------------------------------------
def serialize(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    """A safetensors file's bytes, written by the safetensors package.

    Args:
        arrays: name -> host NumPy array of a dtype of ``_dtypes.names("safetensors")`` (any byte
            order and memory order: written little-endian, C order). The package lays the data
            out by dtype, then name; the header lists the arrays in that order.
        metadata: the ``__metadata__`` texts, str -> str; None writes no ``__metadata__``.

    Raises:
        TypeError: a name or metadata key/value that is not a str, a value that is not a NumPy
            array, or an array of another dtype (naming it).
        ValueError: an array named ``"__metadata__"``, or a header that would be longer than
            :data:`MAX_HEADER_BYTES` (naming what fills it).
    """
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a mapping of str to str or None; got {type(metadata).__name__}")
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"metadata must map str to str; got {str(key)[:40]!r}: {type(value).__name__}")
    codes = {name: code for code, name in _NAMES.items()}
    tensors: dict[str, np.ndarray] = {}
    for name, array in arrays.items():
        if not isinstance(name, str):
            raise TypeError(f"array names must be str; got {type(name).__name__} {str(name)[:40]!r}")
        if name == METADATA_KEY:
            raise ValueError(f"an array cannot be named {METADATA_KEY!r} (the header's metadata key)")
        if not isinstance(array, np.ndarray):
            raise TypeError(f"array {name!r} must be a NumPy array; got {type(array).__name__}")
        if array.dtype.name not in codes:
            raise TypeError(f"array {name!r} has dtype {array.dtype}; a safetensors file holds {sorted(codes)}")
        # (asarray, not ascontiguousarray: that makes a 0-d array 1-d; the package takes each buffer as it lies)
        tensors[name] = np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")
    texts = dict(metadata) if metadata is not None else None
    least = sum(len(key.encode()) + len(value.encode()) for key, value in (texts or {}).items()) + sum(
        len(name.encode()) + _ENTRY_BYTES for name in tensors)
    if least > MAX_HEADER_BYTES:
        raise ValueError(_too_large(f"at least {least}", tensors, texts))
    from safetensors.numpy import save

    blob = save(tensors, metadata=texts)
    (length,) = HEADER_LENGTH.unpack_from(blob)
    if length > MAX_HEADER_BYTES:
        raise ValueError(_too_large(str(length), tensors, texts))
    return blob


def encode(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> list[bytes | memoryview]:
    """:func:`serialize`'s file as chunks to write back to back: ``[length + header, array bytes, ...]``, the
    arrays in the file's order (views of the one buffer).

    The package writes ``__metadata__`` from a hash map, in an order that changes from process to process;
    here it is in the order given, so that the same arrays and metadata always make the same bytes (the
    header keeps its length: the same JSON, reordered)."""
    view = memoryview(serialize(arrays, metadata))
    length = HEADER_LENGTH.unpack_from(view)[0]
    data_start = HEADER_LENGTH.size + length
    header = json.loads(bytes(view[HEADER_LENGTH.size:data_start]))
    head: bytes | memoryview = view[:data_start]
    if metadata is not None:
        header[METADATA_KEY] = {key: header[METADATA_KEY][key] for key in metadata}
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(text) <= length:  # (always: the same JSON; else the package's order stands)
            head = HEADER_LENGTH.pack(length) + text.ljust(length)
    header.pop(METADATA_KEY, None)
    spans = sorted(entry["data_offsets"] for entry in header.values())
    return [head, *(view[data_start + begin:data_start + end] for begin, end in spans)]


def _too_large(length: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None) -> str:
    """Why a header cannot be written: its size, the bound, and what fills it."""
    names = sum(len(name.encode()) for name in tensors)
    parts = [f"{len(tensors)} array entries (names of {names} bytes)"]
    parts += [f"metadata {key[:40]!r} of {len(value.encode())} bytes" for key, value in sorted(
        (metadata or {}).items(), key=lambda item: -len(item[1]))[:2]]
    return (f"the safetensors header would be {length} bytes, more than the {_BOUND} a header may "
            f"have to be read back (cudnn_rnn.files.MAX_HEADER_BYTES); it holds {', '.join(parts)}")


# ---- reading -----------------------------------------------------------------------------------------------
def header_length(head: bytes, file_size: int) -> int:
    """The header length n given by a file's first 8 bytes, checked before anything else is read.

    Raises:
        SafetensorsError: fewer than 8 bytes, n over :data:`MAX_HEADER_BYTES`, or 8 + n past
            the file's end (``file_size`` bytes).
    """
    if len(head) < HEADER_LENGTH.size:
        raise SafetensorsError(f"the file is too short ({file_size} bytes) to hold a safetensors header")
    (length,) = HEADER_LENGTH.unpack_from(head)
    if length > MAX_HEADER_BYTES:
        raise SafetensorsError(f"its first 8 bytes give a header of {length} bytes, more than the {MAX_HEADER_BYTES} "
                               f"a safetensors header may have here ({MAX_HEADER_BYTES // 2**20} MiB: not a "
                               "safetensors file, or a damaged or hostile one)")
    if HEADER_LENGTH.size + length > file_size:
        raise SafetensorsError(f"the file is truncated: its header says {length} bytes, and only "
                               f"{file_size - HEADER_LENGTH.size} follow its length")
    return int(length)


def read_layout(path: str | os.PathLike[str]) -> Layout:
    """The checked layout of a safetensors file, from its length and header (the package maps the file,
    reading none of its data).

    Raises:
        SafetensorsError: anything :func:`header_length`, the package or this module's checks
            refuse (see the module docstring).
        OSError: the file cannot be read.
    """
    import safetensors

    with open(path, "rb") as handle:
        file_size = os.fstat(handle.fileno()).st_size
        length = header_length(handle.read(HEADER_LENGTH.size), file_size)
        header = handle.read(length)
    failure = None
    try:
        with safetensors.safe_open(os.fspath(path), framework="numpy"):
            pass
    except safetensors.SafetensorError as error:
        failure = str(error)
    return _layout(header, file_size, failure)


def decode(blob: bytes | bytearray) -> tuple[Layout, dict[str, np.ndarray]]:
    """``(layout, arrays)`` of a safetensors file's bytes, checked and refused as :func:`read_layout` does (the
    package reads them): each array writable, of its entry's little-endian dtype and shape, in header order
    (bfloat16 needs ml_dtypes)."""
    import safetensors

    length = header_length(bytes(blob[:HEADER_LENGTH.size]), len(blob))
    failure = None
    tensors: list[tuple[str, dict[str, Any]]] = []
    deserialize: Any = safetensors.deserialize  # (its stub leaves it untyped)
    try:
        tensors = deserialize(blob if isinstance(blob, bytes) else bytes(blob))
    except safetensors.SafetensorError as error:
        failure = str(error)
    layout = _layout(bytes(blob[HEADER_LENGTH.size:HEADER_LENGTH.size + length]), len(blob), failure)
    found: dict[str, np.ndarray] = {}
    while tensors:  # (each buffer becomes its array, and is let go: nothing is held twice)
        name, tensor = tensors.pop()
        entry = layout.entries[name]
        array = np.frombuffer(tensor["data"], entry.dtype).reshape(entry.shape)
        found[name] = array if array.flags.writeable else array.copy()
    return layout, {name: found[name] for name in layout.entries}


def _layout(header: bytes, file_size: int, failure: str | None) -> Layout:
    """The layout of a file whose header is ``header``, given what the package said of it (``failure``: its
    refusal, None when it took the file)."""
    reason = " ".join(_PACKAGE_PREFIX.sub("", failure or "").split())[:300]  # (the package's, when it refused)
    if failure is not None and not _INCOMPLETE.match(failure):
        raise SafetensorsError(reason)
    value = json.loads(header)  # (a JSON object: the package read it first, bounded and nested at most 128 deep)
    data_start = HEADER_LENGTH.size + len(header)
    metadata = value.pop(METADATA_KEY, None) or {}
    entries = {name: _entry(name, entry, data_start) for name, entry in value.items()}
    end = max((entry.end for entry in entries.values()), default=data_start)
    if end != file_size:
        state = "truncated" if end > file_size else "longer than its header says"
        raise SafetensorsError(f"the file is {state}: its arrays take {end - data_start} bytes after the header, and "
                               f"{file_size - data_start} are there")
    if failure is not None:  # (the package's words for the size, and the sizes agree: say what it said)
        raise SafetensorsError(reason)
    return Layout(data_start, entries, metadata)


def _entry(name: str, entry: Any, data_start: int) -> Entry:
    """One array's entry, after the package's checks, checked against what this module reads (the package takes
    entries with other keys, dtypes NumPy has no type for, any number of dimensions, empty arrays of any extent)."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise SafetensorsError(f"array {name[:80]!r}: its entry must hold exactly dtype, shape and data_offsets")
    code, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
    if code not in _NAMES:
        raise SafetensorsError(f"array {name[:80]!r}: dtype {str(code)[:20]!r} is not one of {sorted(_NAMES)}")
    if len(shape) > MAX_DIMENSIONS:
        raise SafetensorsError(f"array {name[:80]!r}: shape must be a list of at most {MAX_DIMENSIONS} non-negative "
                               f"integers; got {len(shape)} of them")
    if math.prod(max(size, 1) for size in shape) * _dtypes.BY_NAME[_NAMES[code]].itemsize >= MAX_ARRAY_BYTES:
        raise SafetensorsError(f"array {name[:80]!r}: shape {str(shape)[:80]} is larger than any array can be")
    return Entry(name, code, tuple(shape), data_start + begin, data_start + end)


def read_array(handle: BinaryIO, entry: Entry, dtype: np.dtype | None = None) -> np.ndarray:
    """One array of an open safetensors file, reading only its bytes, as a new host array.

    Args:
        handle: the file, open for buffered binary reading (``open(path, "rb")``), seekable (its position is moved).
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
    handle.seek(entry.begin)
    filled = handle.readinto(buffer)  # type: ignore[attr-defined]  # (a buffered file fills it, up to its end)
    if filled < entry.nbytes:
        raise SafetensorsError(f"the file is truncated: array {entry.name[:80]!r} takes bytes [{entry.begin}, "
                               f"{entry.end}) and the file ends at {entry.begin + filled}")
    return np.frombuffer(buffer, as_dtype).reshape(entry.shape)
