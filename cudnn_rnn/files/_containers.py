"""The files cudnn_rnn writes and reads: how each one's name ends, how each kind of model file starts,
and the Keras facts its Keras files follow.

One place for each fact, for the writers (:mod:`cudnn_rnn.convert.saving`, whose
:data:`~cudnn_rnn.convert.saving.CONTAINERS` table says what each ending holds), the readers
(:mod:`cudnn_rnn.convert.readers`) and the layers; it imports only the dtype and safetensors
tables, so that the lowest modules can use it::

    model_file_kind("lstm.pt")  -> "torch"      (a key of MODEL_FILE_KINDS; a ValueError saying why not)
"""

from __future__ import annotations

import os
import re
import zipfile
import zlib

from .._dtypes import PACKAGES
from ._safetensors import HEADER_LENGTH, MAX_HEADER_BYTES

__all__ = ["NPZ", "PT", "PTH", "SAFETENSORS", "KERAS", "KERAS_WEIGHTS", "ONNX", "ENDINGS", "COMPOUND_ENDINGS",
           "KERAS_VERSION", "KERAS_DTYPE_ATTRIBUTE", "KERAS_MARKED_DTYPES", "CHECKPOINT_FORMAT", "MODEL_FILE_KINDS",
           "model_file_kind"]

NPZ = ".npz"                    # a params file, or named tensors (np.load)
PT, PTH = ".pt", ".pth"         # torch.save of a state_dict
SAFETENSORS = ".safetensors"    # a state_dict without pickle
KERAS = ".keras"                # a Keras 3 model (a zip archive)
KERAS_WEIGHTS = ".weights.h5"   # a Keras 3 model's weights (HDF5), as model.save_weights writes them
ONNX = ".onnx"                  # a runnable ONNX model

#: every ending a written file's name may have, in the order of the containers' table
ENDINGS: tuple[str, ...] = (NPZ, PT, PTH, SAFETENSORS, KERAS, KERAS_WEIGHTS, ONNX)

#: the endings of two parts, which a writer looking at its path must see whole (``m.weights.h5``)
COMPOUND_ENDINGS: tuple[str, ...] = tuple(ending for ending in ENDINGS if ending.count(".") > 1)

#: the ``__metadata__`` ``format`` of a checkpoint (cudnn_rnn.checkpoint), a safetensors file of its own kind
CHECKPOINT_FORMAT = "cudnn_rnn.checkpoint"

#: the Keras version whose files the Keras writer writes, byte for byte (written into a ``.keras``
#: archive's metadata.json); ``tests/oracle/test_export_keras_live.py`` checks the files against it
KERAS_VERSION = "3.15.1"

#: the HDF5 attribute by which Keras marks a dataset it stores as opaque bytes: it names the dtype held
KERAS_DTYPE_ATTRIBUTE = "dtype"

#: the dtypes Keras stores that way, those NumPy has no name for: bfloat16 as 2-byte opaque data, ``dtype="bfloat16"``
KERAS_MARKED_DTYPES: tuple[str, ...] = tuple(PACKAGES)


# ---- what a model file is, from its content -------------------------------------------------------------------
#: the kinds of model file cudnn_rnn reads -> what each is, with its article, for messages
MODEL_FILE_KINDS: dict[str, str] = {
    "npz": "a NumPy .npz archive",
    "keras": "a Keras 3 .keras archive",
    "hdf5": "an HDF5 file (Keras .weights.h5 or legacy Keras 2 .h5 model)",
    "torch": "a PyTorch file (torch.save)",
    "safetensors": "a safetensors file",
    "onnx": "an ONNX model",
    "tf_checkpoint": "a TensorFlow checkpoint",
}

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
ZIP_LOCAL_HEADER = b"PK\x03\x04"  # a zip archive's first bytes; its directory sits at the end
SAFETENSORS_OPENING = ord("{")  # the header's first byte, after its 8-byte little-endian length
PICKLE_PROTOCOL_OPCODE = 0x80   # the first byte of a pickle of protocol 2 or later
ONNX_IR_VERSION_TAG = 0x08      # ModelProto field 1 (ir_version), varint: the first byte of every ONNX model

#: what zipfile and zlib raise reading a damaged archive (RuntimeError: a member it cannot decrypt)
ZIP_READ_ERRORS: tuple[type[Exception], ...] = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError,
                                                OSError, NotImplementedError, RuntimeError)
#: what opening and reading a damaged archive raises: those, and ValueError (zipfile's for some malformed headers,
#: numpy's for a malformed .npy header)
DAMAGED_ZIP: tuple[type[Exception], ...] = (*ZIP_READ_ERRORS, ValueError)


def model_file_kind(path: str) -> str:
    """Which of :data:`MODEL_FILE_KINDS` the model file ``path`` is, from its content (and, for ONNX, its extension).

    Args:
        path: the file, a TensorFlow checkpoint prefix, or a folder holding a checkpoint.

    Raises:
        ValueError: missing, empty, unreadable, or of no kind that can be read; the message is the reason
            alone (the caller names the file).
    """
    if _tf_checkpoint_path(path):
        return "tf_checkpoint"
    if not os.path.isfile(path):
        raise ValueError("no such file" if not os.path.exists(path) else "not a regular file")
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
            file_size = os.fstat(handle.fileno()).st_size
    except OSError as error:
        raise ValueError(f"cannot open it: {error.strerror or error}") from None
    if not head:
        raise ValueError("the file is empty")
    if head.startswith(HDF5_SIGNATURE):
        return "hdf5"
    if zipfile.is_zipfile(path):
        return _zip_kind(path)
    if head.startswith(ZIP_LOCAL_HEADER):
        raise ValueError("a zip archive without its central directory (.keras, .npz and torch.save files are zip "
                         "archives): the file is truncated or corrupt")
    # before the one-byte pickle and ONNX checks: a safetensors header length's low byte may be 0x80 or 0x08.
    # A safetensors file starts with a u64 n >= 2, then ``{``; it is one when 8 + n fits in the file.
    header_length = None
    if len(head) > HEADER_LENGTH.size and head[HEADER_LENGTH.size] == SAFETENSORS_OPENING:
        (length,) = HEADER_LENGTH.unpack_from(head)
        header_length = int(length) if length >= 2 else None
    if header_length is not None and HEADER_LENGTH.size + header_length <= file_size:
        return "safetensors"  # (its reader refuses a header over MAX_HEADER_BYTES, naming the bound)
    if head[0] == PICKLE_PROTOCOL_OPCODE:
        return "torch"
    if path.lower().endswith(ONNX) or head[0] == ONNX_IR_VERSION_TAG:
        return "onnx"
    if header_length is not None and header_length <= MAX_HEADER_BYTES:
        raise ValueError(f"a truncated safetensors file: its header is {header_length} bytes, and only "
                         f"{file_size - HEADER_LENGTH.size} follow its length")
    known = ", ".join(MODEL_FILE_KINDS.values())
    raise ValueError(f"not a model file of a known kind ({known}); it starts with bytes {head[:8].hex(' ')}")


def _tf_checkpoint_path(path: str) -> bool:
    """Whether ``path`` names a TensorFlow checkpoint: its prefix, ``.index``, a ``.data-*`` shard, the
    ``checkpoint`` state file, a SavedModel's ``saved_model.pb``, or a folder holding one."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, "checkpoint")) or any(
            name.endswith(".index") for name in os.listdir(path)) or os.path.isdir(os.path.join(path, "variables"))
    base, folder = os.path.basename(path), os.path.dirname(path)
    if base == "saved_model.pb":
        return os.path.isdir(os.path.join(folder, "variables"))
    return ((not os.path.exists(path) and os.path.isfile(path + ".index")) or base.endswith(".index")
            or base == "checkpoint" or bool(re.search(r"\.data-\d+-of-\d+$", base)))


def _zip_kind(path: str) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except DAMAGED_ZIP as error:
        raise ValueError(f"a damaged zip archive ({error})") from None
    if "config.json" in names and any(name.endswith(KERAS_WEIGHTS) for name in names):
        return "keras"
    if any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        return "torch"
    if all(name.endswith(".npy") for name in names):
        return "npz"
    raise ValueError("a zip archive that is neither a .keras model, a torch.save file nor an .npz archive; "
                     f"it holds {sorted(names)[:8]}")
