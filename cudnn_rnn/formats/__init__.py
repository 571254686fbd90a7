"""RNN weights between cuDNN's params buffer and every common framework's layout, converted.

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

**Where it sits.** These conversions take arrays and give arrays; the layers build ``export`` on them, and
:mod:`cudnn_rnn.convert` adds the model-file readers and writers (and re-exports these names). Imports run one way::

    config, layout  ->  formats  ->  layers  ->  convert (the file readers and writers)

Each format is one module of this package, whose docstring and tables give its names, shapes and gate order.
"""

from __future__ import annotations

from ._core import Converted, InexactConversionError
from . import _table
from ._table import convert_between, expected_shapes, from_format, to_format
from .mygrad import gru_block_cell_to_mygrad, mygrad_to_gru_block_cell

# what the layers, convert and the cli build on besides __all__ (each ``as`` marks a name exported from here)
from ._core import (FormatSpec as FormatSpec, check_params as check_params, check_tensors as check_tensors,
                    describe as describe, reorder_gates as reorder_gates)
from ._reading import MODE_BY_GATES as MODE_BY_GATES, TensorShapes as TensorShapes
from ._table import PREFIXED_TORCH_NAME as PREFIXED_TORCH_NAME, guess_format as guess_format

#: The format names, in the order of the table above (``"canonical"``, ``"torch"``, ...).
FORMATS: tuple[str, ...] = _table.FORMATS

#: Format name -> its ``FormatSpec`` (the one record of a format's facts), in the order of :data:`FORMATS`.
#:
#: :meta hide-value:
FORMAT_SPECS = _table.FORMAT_SPECS

__all__ = [
    "FORMATS",
    "FORMAT_SPECS",
    "Converted",
    "InexactConversionError",
    "to_format",
    "from_format",
    "convert_between",
    "expected_shapes",
    "gru_block_cell_to_mygrad",
    "mygrad_to_gru_block_cell",
]
