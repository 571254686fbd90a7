"""The files cudnn_rnn writes: how each one's name ends, and the Keras facts its Keras files follow.

One place for each fact, imported by the writers (:mod:`cudnn_rnn.convert.saving`, whose
:data:`~cudnn_rnn.convert.saving.CONTAINERS` table says what each ending holds and how it is
written; :mod:`cudnn_rnn.convert.keras_export`), the readers (:mod:`cudnn_rnn.convert.readers`)
and :func:`cudnn_rnn.files.extension`. It imports only the dtype table, so that the lowest modules can use it.
"""

from __future__ import annotations

from ._dtypes import PACKAGES

__all__ = ["NPZ", "PT", "PTH", "SAFETENSORS", "KERAS", "KERAS_WEIGHTS", "ONNX", "ENDINGS", "COMPOUND_ENDINGS",
           "KERAS_VERSION", "KERAS_DTYPE_ATTRIBUTE", "KERAS_MARKED_DTYPES", "CHECKPOINT_FORMAT"]

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
