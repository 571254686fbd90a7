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
from ._found import BFLOAT16_NOTE, FileReadError, FoundRNN, ReadOptions
from ._state_dict import READ_DTYPES, check_one_dtype, rnns_in_state_dict, select_rnns

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
    groups = select_rnns(path, list(layout.entries), options.prefix)
    for names in groups.values():
        check_one_dtype(path, {key: layout.entries[key].dtype_name for key in names.values()}, READ_DTYPES)
    try:
        with open(path, "rb") as handle:
            arrays = {key: _tensor(handle, layout.entries[key]) for names in groups.values() for key in names.values()}
    except SafetensorsError as error:
        raise FileReadError(path, f"a damaged safetensors file: {error.reason}") from None
    found = rnns_in_state_dict(path, arrays, options, SOURCE)
    bfloat16 = {prefix for prefix, names in groups.items()
                if layout.entries[names["weight_ih_l0"]].dtype_name == "bfloat16"}
    return [item.replace(notes=item.notes + (BFLOAT16_NOTE,))
            if prefix in bfloat16 else item for item, prefix in zip(found, groups)]
