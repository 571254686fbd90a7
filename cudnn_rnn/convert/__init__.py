"""Convert RNN weights between cuDNN's params buffer and every common framework's layout.

Each named format is a dict of named tensors (NumPy or CuPy arrays) that converts to and
from the opaque params buffer of an :class:`cudnn_rnn.RNNConfig`::

    to_format(fmt, params, config)    -> Converted(value={name: array}, approximations=())
    from_format(fmt, tensors, config) -> Converted(value=params, approximations=())

====================  ==========================================================  ==============
format                what it is                                                  holds
====================  ==========================================================  ==============
``canonical``         TF's CudnnRNNParamsToCanonical: weights/{i}, biases/{i}         everything
``torch``             nn.LSTM / nn.GRU / nn.RNN state_dict                        everything
``keras``             Keras LSTM / GRU(reset_after=True) / SimpleRNN weights      no projection
``tf_cell``           TF CudnnCompatibleLSTMCell / GRUCell / BasicRNNCell vars    everything
``onnx``              ONNX LSTM / GRU(linear_before_reset=1) / RNN: W, R, B       no projection
``gru_block_cell``    TF GRUBlockCell: w_ru, w_c, b_ru, b_c (reset-before GRU)    one GRU layer
``mygrad``            mygrad.nnet.layers.gru: Uz, Wz, bz, ... (reset-before GRU)  one GRU layer
====================  ==========================================================  ==============

Each format is a module of ``cudnn_rnn.formats``, whose docstring and tables give its names,
shapes and gate order.

**Exactness.** A conversion computes exactly the same function, or is refused as
:class:`InexactConversionError` says:

* Two biases summed into one (Keras LSTM/SimpleRNN, tf_cell LSTM/RNN and GRU r/u gates) is
  exact: the math only ever sees the sum. Going back puts the sum into one slot (Keras: bR)
  or halves (tf_cell, as TF does).
  GRU's candidate recurrent bias is never summed (it sits inside r * (R_n h + bR_n)).
* cuDNN's GRU (reset *after* the recurrent matmul) and the reset-before GRUs
  (gru_block_cell, mygrad) are different functions: every conversion between them is an
  approximation; gru_block_cell <-> mygrad is exact (:func:`convert_between`).
* A projection cannot be held by keras or onnx, nor several layers by gru_block_cell or
  mygrad: always refused (ValueError), approximation or not.
* skip_input: formats with explicit input matrices get identities (exact); on the way back
  they must be identities, else dropping them is an approximation.

Round trips: format -> params -> format is bit-exact for every format; params -> format ->
params is bit-exact for formats that keep both biases (canonical, torch, onnx, keras GRU),
and the same function (the bias sums unchanged) for the others. Values keep their dtype.

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

from .. import formats as _formats
from ..formats import (Converted, InexactConversionError, convert_between, expected_shapes, from_format,
                       gru_block_cell_to_mygrad, mygrad_to_gru_block_cell, to_format)
from .into import write_into
from .keras_export import export_keras
from .onnx_export import export_onnx
from .readers import FileReadError, FoundRNN, Question, read_file, stack, stack_problem
from . import saving as _saving
from .saving import Written, write_file

__all__ = [
    "FORMATS",
    "FORMAT_SPECS",
    "Converted",
    "InexactConversionError",
    "to_format",
    "from_format",
    "convert_between",
    "expected_shapes",
    "export_onnx",
    "export_keras",
    "write_file",
    "write_into",
    "Written",
    "CONTAINERS",
    "gru_block_cell_to_mygrad",
    "mygrad_to_gru_block_cell",
    "FoundRNN",
    "Question",
    "FileReadError",
    "read_file",
    "stack",
    "stack_problem",
]

#: The format names, in the order of the table above (``"canonical"``, ``"torch"``, ...).
FORMATS: tuple[str, ...] = _formats.FORMATS

#: Format name -> its spec (a ``FormatSpec``, the one record of a format's facts: its tensor names and
#: shapes, what it cannot hold, both directions, how a reader recognises its files), in the order of
#: :data:`FORMATS`.
#:
#: :meta hide-value:
FORMAT_SPECS = _formats.FORMAT_SPECS

#: File ending -> the container :func:`write_file` writes for it: the formats it holds, its default
#: first, what it is, what loads it, what :func:`read_file` finds it to be, and how it is written.
#:
#: :meta hide-value:
CONTAINERS = _saving.CONTAINERS
