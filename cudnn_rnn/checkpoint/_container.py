"""The checkpoint file: named arrays and a JSON text, in the safetensors layout, with a SHA-256 checksum.

Layout (every integer little-endian; any safetensors reader opens the file)::

    [0, 8)        n: u64, the length of the header
    [8, 8 + n)    the header: UTF-8 JSON, padded with spaces so the data starts at a multiple of 8
                    {"__metadata__": {"format": "cudnn_rnn.checkpoint", "version": "1",
                                      "checksum": "sha256:<64 hex digits>", "contents": "<JSON text>"},
                     "<array name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
    [8 + n, end)  the arrays' bytes back to back, C order, in the order of their offsets

The checksum is the SHA-256 of the whole file with its 64 hex digits written as zeros, so any
changed, missing or added byte (a bit flip, a truncation, a torn write) is caught before a
single value is used. Reading never unpickles and never trusts a size it has not checked:
the header is bounded, every array's dtype comes from :data:`DTYPES` (or :data:`EXTENSION_DTYPES`:
bfloat16, read with ml_dtypes), its byte count is its shape's product times its item size (in
Python integers, no overflow), and the arrays tile the data exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from typing import Any

import numpy as np

from ..config import numpy_dtype
from ..errors import CheckpointError

__all__ = ["FORMAT", "VERSION", "DTYPES", "EXTENSION_DTYPES", "MAX_HEADER_BYTES", "encode", "decode"]

FORMAT = "cudnn_rnn.checkpoint"
VERSION = "1"

#: safetensors dtype code -> NumPy dtype (little-endian); nothing else is read or written
DTYPES: dict[str, np.dtype] = {code: np.dtype(name).newbyteorder("<") for code, name in (
    ("BOOL", "bool"), ("U8", "uint8"), ("I8", "int8"), ("U16", "uint16"), ("I16", "int16"), ("U32", "uint32"),
    ("I32", "int32"), ("U64", "uint64"), ("I64", "int64"), ("F16", "float16"), ("F32", "float32"),
    ("F64", "float64"))}

#: safetensors dtype code -> (dtype name, item size) of the dtypes NumPy has no type for without an extension
#: (bfloat16: ml_dtypes, imported only when such an array is written or read)
EXTENSION_DTYPES: dict[str, tuple[str, int]] = {"BF16": ("bfloat16", 2)}

#: NumPy dtype name -> safetensors code
_CODES: dict[str, str] = {**{dtype.name: code for code, dtype in DTYPES.items()},
                          **{name: code for code, (name, _) in EXTENSION_DTYPES.items()}}


def _dtype(code: str) -> np.dtype:
    """The NumPy dtype of a dtype code of :data:`DTYPES` or :data:`EXTENSION_DTYPES` (little-endian)."""
    return DTYPES[code] if code in DTYPES else numpy_dtype(EXTENSION_DTYPES[code][0]).newbyteorder("<")


def _itemsize(code: str) -> int:
    return DTYPES[code].itemsize if code in DTYPES else EXTENSION_DTYPES[code][1]

#: the largest header read (the safetensors library's own bound is 100 MB)
MAX_HEADER_BYTES = 64 * 2**20

#: the most dimensions an array may have
MAX_DIMENSIONS = 32

#: no array (not even an empty one: each dimension counts) may span this many bytes (NumPy's own bound)
MAX_ARRAY_BYTES = 2**62

_CHECKSUM_PREFIX = "sha256:"
_ZERO_DIGEST = "0" * 64
_LENGTH = struct.Struct("<Q")

#: the first bytes of files that are often mistaken for a checkpoint -> what they are
_MAGICS: dict[bytes, str] = {
    b"PK\x03\x04": "a zip archive (an .npz, .keras or PyTorch file?)",
    b"PK\x05\x06": "an empty zip archive",
    b"\x89HDF\r\n\x1a\n": "an HDF5 file (a Keras .h5?)",
    b"\x80\x02": "a Python pickle",
    b"\x80\x03": "a Python pickle",
    b"\x80\x04": "a Python pickle",
    b"\x80\x05": "a Python pickle",
    b"\x89PNG": "a PNG image",
    b"\x93NUMPY": "a .npy array",
}


def encode(arrays: dict[str, np.ndarray], contents: str) -> list[bytes | memoryview]:
    """The file's bytes as a list of chunks to write back to back: the header, then each array's buffer.

    ``arrays`` are host NumPy arrays of a dtype in :data:`DTYPES` or :data:`EXTENSION_DTYPES`; ``contents`` is a
    JSON text.
    """
    entries: dict[str, Any] = {}
    buffers: list[memoryview] = []
    offset = 0
    for name, array in arrays.items():
        code = _CODES.get(array.dtype.name)
        if code is None:
            raise TypeError(f"array {name!r} has dtype {array.dtype}; a checkpoint holds {sorted(_CODES)}")
        data = np.asarray(array, dtype=_dtype(code), order="C")  # (not ascontiguousarray: it makes 0-d 1-d)
        buffers.append(data.reshape(-1).view(np.uint8).data)  # (as bytes: a memoryview cannot hold bfloat16)
        entries[name] = {"dtype": code, "shape": list(data.shape), "data_offsets": [offset, offset + data.nbytes]}
        offset += data.nbytes
    metadata = {"format": FORMAT, "version": VERSION, "checksum": _CHECKSUM_PREFIX + _ZERO_DIGEST,
                "contents": contents}
    text = json.dumps({"__metadata__": metadata, **entries}, separators=(",", ":"), ensure_ascii=True)
    header = text.encode("ascii")
    header += b" " * (-(len(header) + _LENGTH.size) % 8)
    head = _LENGTH.pack(len(header)) + header
    digest = hashlib.sha256(head)
    for buffer in buffers:
        digest.update(buffer)
    head = head.replace(_quoted(_ZERO_DIGEST), _quoted(digest.hexdigest()), 1)
    return [head, *buffers]


def decode(blob: bytes | bytearray, where: str) -> tuple[dict[str, np.ndarray], str]:
    """The arrays and the contents text of a checkpoint file's bytes, after checking every byte.

    ``where`` names the file in messages. Raises :class:`CheckpointError` for anything that is
    not a whole, unchanged checkpoint of this format version.
    """
    view = memoryview(blob)
    if len(view) == 0:
        raise CheckpointError(where, "the file is empty (0 bytes): a write that never finished, or not a checkpoint")
    length = _LENGTH.unpack_from(view)[0] if len(view) >= _LENGTH.size + 2 else None
    if length is None or length > MAX_HEADER_BYTES or view[_LENGTH.size] != ord("{"):
        for magic, kind in _MAGICS.items():  # only once it is clear the file is not one of ours
            if bytes(view[:len(magic)]) == magic:
                raise CheckpointError(where, f"this is {kind}, not a cudnn_rnn checkpoint")
        if length is None:
            raise CheckpointError(where, f"the file is too short ({len(view)} bytes) to be a checkpoint")
        raise CheckpointError(where, "not a cudnn_rnn checkpoint (its first 8 bytes are not the length of a JSON "
                                     f"header of at most {MAX_HEADER_BYTES} bytes)")
    data_start = _LENGTH.size + length
    if data_start > len(view):
        raise CheckpointError(where, f"the file is truncated: its header says {length} bytes, and only "
                                     f"{len(view) - _LENGTH.size} follow its length")
    header_bytes = bytes(view[_LENGTH.size:data_start])
    header = _parse_header(header_bytes, where)
    metadata = _metadata(header.pop("__metadata__", None), where)
    entries = _entries(header, len(view) - data_start, where)
    _check_digest(view, header_bytes, metadata["checksum"], where)
    arrays = {name: np.frombuffer(view, _dtype(dtype), math.prod(shape), data_start + begin).reshape(shape).copy()
              for name, (dtype, shape, begin) in entries.items()}
    return arrays, metadata["contents"]


def _quoted(digest: str) -> bytes:
    return f'"{_CHECKSUM_PREFIX}{digest}"'.encode("ascii")


def _parse_header(header_bytes: bytes, where: str) -> dict[str, Any]:
    try:
        header = json.loads(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise CheckpointError(where, f"the header is not valid JSON ({type(error).__name__}: {error})"[:300]) from None
    if not isinstance(header, dict):
        raise CheckpointError(where, f"the header must be a JSON object; got {type(header).__name__}")
    return header


def _metadata(metadata: Any, where: str) -> dict[str, str]:
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise CheckpointError(where, f"a safetensors file, but not a cudnn_rnn checkpoint (no __metadata__ with "
                                     f"format {FORMAT!r})")
    if metadata.get("version") != VERSION:
        raise CheckpointError(where, f"checkpoint format version {metadata.get('version')!r:.20}; this "
                                     f"version of cudnn_rnn reads version {VERSION!r}")
    for key in ("checksum", "contents"):
        if not isinstance(metadata.get(key), str):
            raise CheckpointError(where, f"its metadata has no {key!r} text")
    checksum = metadata["checksum"]
    digits = checksum[len(_CHECKSUM_PREFIX):]
    if not checksum.startswith(_CHECKSUM_PREFIX) or len(digits) != 64 or set(digits) - set("0123456789abcdef"):
        raise CheckpointError(where, f"its checksum must be 'sha256:' and 64 hex digits; got {checksum[:80]!r}")
    return metadata


def _entries(header: dict[str, Any], data_bytes: int, where: str) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """name -> (dtype code, shape, begin) for every array, after checking that they tile the data exactly."""
    entries: dict[str, tuple[str, tuple[int, ...], int]] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise CheckpointError(where, f"array {name[:80]!r}: its entry must hold exactly dtype, shape and "
                                         "data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or (dtype not in DTYPES and dtype not in EXTENSION_DTYPES):
            raise CheckpointError(where, f"array {name[:80]!r}: dtype {str(dtype)[:20]!r} is not one of "
                                         f"{sorted([*DTYPES, *EXTENSION_DTYPES])}")
        if not _integers(shape, MAX_DIMENSIONS):
            raise CheckpointError(where, f"array {name[:80]!r}: shape must be a list of at most {MAX_DIMENSIONS} "
                                         f"non-negative integers; got {str(shape)[:80]}")
        if not _integers(offsets, 2) or len(offsets) != 2 or offsets[0] > offsets[1]:
            raise CheckpointError(where, f"array {name[:80]!r}: data_offsets must be [begin, end] with "
                                         f"0 <= begin <= end; got {str(offsets)[:80]}")
        if math.prod(max(size, 1) for size in shape) * _itemsize(dtype) >= MAX_ARRAY_BYTES:
            raise CheckpointError(where, f"array {name[:80]!r}: shape {str(shape)[:80]} is larger than any array "
                                         "can be")
        nbytes = math.prod(shape) * _itemsize(dtype)
        if offsets[1] - offsets[0] != nbytes:
            raise CheckpointError(where, f"array {name[:80]!r}: {dtype} {shape} needs {nbytes} bytes; its offsets "
                                         f"span {offsets[1] - offsets[0]}")
        entries[name] = (dtype, tuple(shape), offsets[0])
        spans.append((offsets[0], offsets[1], name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise CheckpointError(where, f"array {name[:80]!r} starts at byte {begin} of the data; the arrays must "
                                         f"lie back to back, so it should start at {position}")
        position = end
    if position != data_bytes:
        state = "truncated" if position > data_bytes else "longer than its header says"
        raise CheckpointError(where, f"the file is {state}: its arrays take {position} bytes after the header, "
                                     f"and {data_bytes} are there")
    return entries


def _integers(values: Any, most: int) -> bool:
    return (isinstance(values, list) and len(values) <= most
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values))


def _check_digest(view: memoryview, header_bytes: bytes, checksum: str, where: str) -> None:
    stored = checksum[len(_CHECKSUM_PREFIX):]
    quoted = _quoted(stored)
    if header_bytes.count(quoted) != 1:
        raise CheckpointError(where, "its checksum does not appear exactly once in its header")
    digest = hashlib.sha256(_LENGTH.pack(len(header_bytes)))
    digest.update(header_bytes.replace(quoted, _quoted(_ZERO_DIGEST), 1))
    digest.update(view[_LENGTH.size + len(header_bytes):])
    if digest.hexdigest() != stored:
        raise CheckpointError(where, "the file is damaged: its SHA-256 checksum does not match its contents "
                                     "(changed or cut short after it was written)")
