"""The weight formats of other frameworks and the conversions to and from the params buffer.

This package holds the conversions of weights alone (arrays in, arrays out): the layers build on
it for ``export``, and :mod:`cudnn_rnn.convert`, the public home of every name here, adds the
model-file readers on top, which build layers. Imports run one way::

    config, layout  ->  formats  ->  layers  ->  convert (formats' names + the file readers)

Each format is one module (``_canonical``, ``_torch``, ``_keras``, ``_tf_cell``, ``_onnx``,
``_gru_block_cell``, ``_mygrad``) defining the names every format's module defines (``FACTS``,
``TENSOR_NAMES``, ``refusal``, ``shapes``, ``encode``, ``decode``); ``_table`` makes one
``FormatSpec`` of each module in its table, and walks them::

    to_format(fmt, params, config)    -> Converted(value={name: array}, approximations=())
    from_format(fmt, tensors, config) -> Converted(value=params, approximations=())
"""

from __future__ import annotations

from ._core import Converted, InexactConversionError
from ._mygrad import gru_block_cell_to_mygrad, mygrad_to_gru_block_cell
from ._table import FORMAT_SPECS, FORMATS, convert_between, expected_shapes, from_format, to_format

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
