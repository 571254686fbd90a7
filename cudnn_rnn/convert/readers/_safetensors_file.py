"""safetensors files: the RNNs of a (parent module's) PyTorch state_dict, read without torch.

The RNNs are found as in a ``torch.save`` state_dict (:mod:`._state_dict`: one RNN named after the
file, or each RNN of a parent module named by its key prefix, ``prefix`` choosing one); a
cudnn_rnn checkpoint is refused, naming ``cudnn_rnn.checkpoint.load``. Only the header is read
(:func:`checked_layout`) until the RNNs' keys are chosen by their names; then only those tensors'
bytes, each dtype read as the PyTorch reader reads it (:func:`_tensor`).
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from ...files import CHECKPOINT_FORMAT, Entry, Layout, SafetensorsError, read_array, read_layout
from ..._dtypes import widen_bfloat16
from ._found import FileReadError, FoundRNN, ReadOptions
from ._state_dict import READ_DTYPES, rnns_in_state_dict

__all__ = ["read", "checked_layout"]

#: what holds each RNN's state_dict, in its source ("PyTorch nn.LSTM state_dict in a safetensors file")
SOURCE = "state_dict in a safetensors file"

_BFLOAT16_BITS = np.dtype("<u2")


def _tensor(handle: BinaryIO, entry: Entry) -> np.ndarray:
    """The tensor of ``entry`` as its ``READ_DTYPES`` dtype: bfloat16 widened to float32 exactly."""
    if entry.dtype_name != "bfloat16":
        return read_array(handle, entry)
    return widen_bfloat16(read_array(handle, entry, _BFLOAT16_BITS))


def checked_layout(path: str) -> Layout:
    """The checked layout of the safetensors file ``path``; FileReadError naming it for anything refused."""
    try:
        return read_layout(path)
    except SafetensorsError as error:
        raise FileReadError(path, f"a damaged safetensors file: {error.reason}") from None


def read(path: str, kind: str, options: ReadOptions) -> list[FoundRNN]:
    """Every RNN in a safetensors file (see the module docstring)."""
    layout = checked_layout(path)
    if layout.metadata.get("format") == CHECKPOINT_FORMAT:
        raise FileReadError(path, "a cudnn_rnn checkpoint, not a model file: read it with "
                                  "cudnn_rnn.checkpoint.load(path)")
    with open(path, "rb") as handle:
        try:
            return rnns_in_state_dict(path, layout.entries, options, SOURCE, dtype_of=lambda entry: entry.dtype_name,
                                      read=lambda keys: {key: _tensor(handle, layout.entries[key]) for key in keys},
                                      readable=READ_DTYPES)
        except SafetensorsError as error:
            raise FileReadError(path, f"a damaged safetensors file: {error.reason}") from None
