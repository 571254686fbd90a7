"""Read and write model files of every common framework, and convert RNN weights between cuDNN's params
buffer and their layouts.

**Weights in memory.** The named formats (``canonical``, ``torch``, ``keras``, ``tf_cell``, ``onnx``,
``gru_block_cell``, ``mygrad``) and their conversions, exact or refused, are :mod:`cudnn_rnn.formats`'
(``to_format``, ``from_format``, ``convert_between``, ``expected_shapes``, ``Converted``,
``InexactConversionError``, and the exact GRUBlockCell <-> mygrad pair): see its page. The guides'
``from cudnn_rnn.convert import to_format, from_format, ...`` takes them from here too.

**Model files.** :func:`read_file` finds every RNN in a Keras, PyTorch, ONNX, TensorFlow or
.npz file, with the configuration read from the file (``cudnn_rnn.convert.readers``)::

    [rnn] = read_file("model.keras")       # FoundRNN: name, source, fmt, tensors, fields
    params = rnn.to_params().value           # exact, or refused (InexactConversionError)
    config = rnn.config                      # the RNNConfig the file describes

**Files the frameworks load.** :func:`write_file` writes an RNN (found in a file, a layer of
this library, or ``(params, config)``) into the container its file name chooses (:data:`CONTAINERS`),
in the form the target framework loads as it is. :func:`write_into` puts it into the user's own
model file, replacing that model's RNN and nothing else (module ``cudnn_rnn.convert.into``)::

    write_file("lstm.keras", rnn)                                   # keras.saving.load_model reads it
    write_into("model.pt", "tuned.pt", layer, prefix="encoder.rnn")  # a copy of model.pt, RNN replaced
"""

from __future__ import annotations

# the conversions the guides import from here (each ``as`` marks a name exported from here; their home is formats)
from ..formats import (Converted as Converted, InexactConversionError as InexactConversionError,
                       expected_shapes as expected_shapes, from_format as from_format,
                       gru_block_cell_to_mygrad as gru_block_cell_to_mygrad,
                       mygrad_to_gru_block_cell as mygrad_to_gru_block_cell, to_format as to_format)
from .into import write_into
from .keras_export import export_keras
from .onnx_export import export_onnx
from .readers import FileReadError, FoundRNN, Question, read_file, stack, stack_problem
from . import saving as _saving
from .saving import Written, write_file

__all__ = [
    "export_onnx",
    "export_keras",
    "write_file",
    "write_into",
    "Written",
    "CONTAINERS",
    "FoundRNN",
    "Question",
    "FileReadError",
    "read_file",
    "stack",
    "stack_problem",
]

#: File ending -> the container :func:`write_file` writes for it: the formats it holds, its default
#: first, what it is, what loads it, what :func:`read_file` finds it to be, and how it is written.
#:
#: :meta hide-value:
CONTAINERS = _saving.CONTAINERS
