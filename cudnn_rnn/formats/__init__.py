"""The weight formats of other frameworks and the conversions to and from the params buffer.

This package holds the conversions of weights alone (arrays in, arrays out): the layers build on
it for ``export``, and :mod:`cudnn_rnn.convert`, the public home of every name here, adds the
model-file readers on top, which build layers. Imports run one way::

    config, layout  ->  formats  ->  layers  ->  convert (formats' names + the file readers)

Each format is one module (``_table.FORMAT_MODULES``) defining what ``_core.FormatModule`` says;
``_table`` makes one ``FormatSpec`` of each, and walks them.
"""

from __future__ import annotations

from ._core import Converted, InexactConversionError
from ._table import FORMAT_SPECS, FORMATS, convert_between, expected_shapes, from_format, to_format
from .mygrad import gru_block_cell_to_mygrad, mygrad_to_gru_block_cell

# what the layers, convert and the cli build on besides __all__ (each ``as`` marks a name exported from here)
from ._core import (MODE_BY_GATES as MODE_BY_GATES, FormatSpec as FormatSpec, TensorShapes as TensorShapes,
                    check_params as check_params, check_tensors as check_tensors, describe as describe,
                    reorder_gates as reorder_gates)
from ._table import PREFIXED_TORCH_NAME as PREFIXED_TORCH_NAME, guess_format as guess_format

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
