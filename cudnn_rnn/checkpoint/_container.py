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

The layout itself (header, dtype codes, the checks of each entry) is :mod:`cudnn_rnn._safetensors`,
shared with the model files read and written elsewhere; this module adds what makes a file a
checkpoint: the ``__metadata__`` keys above, the checksum, and :class:`CheckpointError` naming the file.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .. import _safetensors
from .._safetensors import (DTYPES, EXTENSION_DTYPES, HEADER_LENGTH as _LENGTH, MAX_ARRAY_BYTES, MAX_DIMENSIONS,
                            MAX_HEADER_BYTES, SafetensorsError)
from ..errors import CheckpointError

__all__ = ["FORMAT", "VERSION", "DTYPES", "EXTENSION_DTYPES", "MAX_HEADER_BYTES", "MAX_DIMENSIONS", "MAX_ARRAY_BYTES",
           "encode", "decode"]

FORMAT = "cudnn_rnn.checkpoint"
VERSION = "1"

#: NumPy dtype name -> safetensors code: what a checkpoint holds
_CODES: frozenset[str] = frozenset([*(dtype.name for dtype in DTYPES.values()),
                                    *(name for name, _ in EXTENSION_DTYPES.values())])

_CHECKSUM_PREFIX = "sha256:"
_ZERO_DIGEST = "0" * 64

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
    for name, array in arrays.items():
        if array.dtype.name not in _CODES:
            raise TypeError(f"array {name!r} has dtype {array.dtype}; a checkpoint holds {sorted(_CODES)}")
    metadata = {"format": FORMAT, "version": VERSION, "checksum": _CHECKSUM_PREFIX + _ZERO_DIGEST,
                "contents": contents}
    head, *buffers = _safetensors.encode(arrays, metadata)
    digest = hashlib.sha256(head)
    for buffer in buffers:
        digest.update(buffer)
    head = bytes(head).replace(_quoted(_ZERO_DIGEST), _quoted(digest.hexdigest()), 1)
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
    try:
        header = _safetensors.parse_header(header_bytes)
        metadata = _metadata(header.pop("__metadata__", None), where)
        entries = _safetensors.check_entries(header, data_start, len(view) - data_start)
    except SafetensorsError as error:
        raise CheckpointError(where, error.reason) from None
    _check_digest(view, header_bytes, metadata["checksum"], where)
    arrays = {name: np.frombuffer(view, entry.dtype, entry.count, entry.begin).reshape(entry.shape).copy()
              for name, entry in entries.items()}
    return arrays, metadata["contents"]


def _quoted(digest: str) -> bytes:
    return f'"{_CHECKSUM_PREFIX}{digest}"'.encode("ascii")


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
