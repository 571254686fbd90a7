"""The checkpoint file: named arrays and a JSON text in a safetensors file, with a SHA-256 checksum.

The header (any safetensors reader opens the file; ``cudnn_rnn.files`` reads and writes it)::

    {"__metadata__": {"format": "cudnn_rnn.checkpoint", "version": "1",
                      "checksum": "sha256:<64 hex digits>", "contents": "<JSON text>"},
     "<array name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}

Writing: the safetensors package writes the file with the 64 digits all zeros; the SHA-256 of those
bytes then takes their place (same length). Reading: the first 8 bytes are checked, then the
package checks the layout and ``cudnn_rnn.files`` each entry; then the metadata, then
the checksum (the file with its digits zeroed again), so any changed, missing or added byte (a bit
flip, a truncation, a torn write) is caught before a single value is used. Nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ..errors import CheckpointError
from ..files import (CHECKPOINT_FORMAT as FORMAT, HDF5_SIGNATURE, HEADER_LENGTH as _LENGTH, MAX_HEADER_BYTES,
                     PICKLE_PROTOCOL_OPCODE, ZIP_LOCAL_HEADER, SafetensorsError)
from ..files import decode as _decode, encode as _encode

__all__ = ["encode", "decode"]

VERSION = "1"

_CHECKSUM_PREFIX = "sha256:"
_ZERO_DIGEST = "0" * 64

#: the first bytes of files that are often mistaken for a checkpoint -> what they are
_MAGICS: dict[bytes, str] = {
    ZIP_LOCAL_HEADER: "a zip archive (an .npz, .keras or PyTorch file?)",
    b"PK\x05\x06": "an empty zip archive",
    HDF5_SIGNATURE: "an HDF5 file (a Keras .h5?)",
    **{bytes([PICKLE_PROTOCOL_OPCODE, protocol]): "a Python pickle" for protocol in range(2, 6)},
    b"\x89PNG": "a PNG image",
    np.lib.format.MAGIC_PREFIX: "a .npy array",
}


def encode(arrays: dict[str, np.ndarray], contents: str) -> list[bytes | memoryview]:
    """The file's bytes as a list of chunks to write back to back: the header, then each array's bytes.

    ``arrays`` are host NumPy arrays of the dtypes ``_tree`` lets into a checkpoint (every one safetensors has
    a code for); ``contents`` is a JSON text.

    Raises:
        ValueError: a header that would be over :data:`MAX_HEADER_BYTES` (naming the contents
            text's size when that is what fills it), which no reader would take.
    """
    text_bytes = len(json.dumps(contents, ensure_ascii=False).encode())  # (as the header holds it: quoted, escaped)
    if text_bytes > MAX_HEADER_BYTES:
        raise ValueError(f"the checkpoint's contents text (the layers' and optimisers' settings and state=, as JSON) "
                         f"takes {text_bytes} bytes of the header, more than the {MAX_HEADER_BYTES} "
                         f"({MAX_HEADER_BYTES // 2**20} MiB) a "
                         "checkpoint's header may have to be read back: store large values as NumPy arrays (in "
                         "state= or arrays=), which lie beside the header")
    metadata = {"format": FORMAT, "version": VERSION, "checksum": _CHECKSUM_PREFIX + _ZERO_DIGEST,
                "contents": contents}
    head, *buffers = _encode(arrays, metadata)
    digest = hashlib.sha256(head)
    for buffer in buffers:
        digest.update(buffer)
    return [bytes(head).replace(_quoted(_ZERO_DIGEST), _quoted(digest.hexdigest()), 1), *buffers]


def decode(blob: bytes | bytearray, where: str) -> tuple[dict[str, np.ndarray], str]:
    """The arrays and the contents text of a checkpoint file's bytes, after checking every byte.

    ``where`` names the file in messages. Raises :class:`CheckpointError` for anything that is
    not a whole, unchanged checkpoint of this format version.
    """
    view = memoryview(blob)
    if len(view) == 0:
        raise CheckpointError(where, "the file is empty (0 bytes): a write that never finished, or not a checkpoint")
    length = _LENGTH.unpack_from(view)[0] if len(view) >= _LENGTH.size + 2 else None
    if (length is None or view[_LENGTH.size] != ord("{")
            or (length > MAX_HEADER_BYTES and _LENGTH.size + length > len(view))):
        for magic, kind in _MAGICS.items():  # only once it is clear the file is not one of ours
            if bytes(view[:len(magic)]) == magic:
                raise CheckpointError(where, f"this is {kind}, not a cudnn_rnn checkpoint")
        if length is None:
            raise CheckpointError(where, f"the file is too short ({len(view)} bytes) to be a checkpoint")
        raise CheckpointError(where, "not a cudnn_rnn checkpoint (its first 8 bytes are not the length of a JSON "
                                     f"header of at most {MAX_HEADER_BYTES} bytes)")
    try:
        layout, arrays = _decode(blob)
    except SafetensorsError as error:
        raise CheckpointError(where, error.reason) from None
    metadata = layout.metadata
    if metadata.get("format") != FORMAT:
        raise CheckpointError(where, f"a safetensors file, but not a cudnn_rnn checkpoint (no __metadata__ with "
                                     f"format {FORMAT!r})")
    if metadata.get("version") != VERSION:
        raise CheckpointError(where, f"checkpoint format version {metadata.get('version')!r:.20}; this "
                                     f"version of cudnn_rnn reads version {VERSION!r}")
    for key in ("checksum", "contents"):
        if not isinstance(metadata.get(key), str):
            raise CheckpointError(where, f"its metadata has no {key!r} text")
    checksum = metadata["checksum"]
    stored = checksum[len(_CHECKSUM_PREFIX):]
    if not checksum.startswith(_CHECKSUM_PREFIX) or len(stored) != 64 or set(stored) - set("0123456789abcdef"):
        raise CheckpointError(where, f"its checksum must be 'sha256:' and 64 hex digits; got {checksum[:80]!r}")
    header_bytes, quoted = bytes(view[_LENGTH.size:layout.data_start]), _quoted(stored)
    if header_bytes.count(quoted) != 1:
        raise CheckpointError(where, "its checksum does not appear exactly once in its header")
    digest = hashlib.sha256(_LENGTH.pack(len(header_bytes)))
    digest.update(header_bytes.replace(quoted, _quoted(_ZERO_DIGEST), 1))
    digest.update(view[layout.data_start:])
    if digest.hexdigest() != stored:
        raise CheckpointError(where, "the file is damaged: its SHA-256 checksum does not match its contents "
                                     "(changed or cut short after it was written)")
    return arrays, metadata["contents"]


def _quoted(digest: str) -> bytes:
    return f'"{_CHECKSUM_PREFIX}{digest}"'.encode("ascii")
