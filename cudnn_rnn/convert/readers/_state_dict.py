"""The RNNs of a state_dict, one per key prefix (PyTorch files, and torch names in an .npz archive).

    rnn_groups(["encoder.rnn.weight_ih_l0", "encoder.rnn.weight_hh_l0", ..., "head.weight"])
        -> {"encoder.rnn.": {"weight_ih_l0": "encoder.rnn.weight_ih_l0", "weight_hh_l0": ...}}
    rnns_in_state_dict(path, {key: np.ndarray}, options, "state_dict in an .npz archive")
        -> [FoundRNN("encoder.rnn", "PyTorch nn.LSTM state_dict in an .npz archive", "torch", ...)]

A prefix holds an RNN when it has a ``weight_ih_l0``; its configuration is read off the shapes
(:mod:`._infer`), an ``nn.RNN``'s tanh or relu being a question.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Collection, Mapping

import numpy as np

from ..._dtypes import BUILTIN_PARAMS, COMPUTE, PACKAGES, PARAMS
from ._found import BFLOAT16_NOTE, FileReadError, FoundRNN, ReadOptions, one_line, shared_dtype
from ._infer import infer

__all__ = ["rnns_in_state_dict", "rnn_groups", "select_rnns", "READ_DTYPES"]


#: gates per cell -> the torch class whose state_dict it is
RNN_CLASSES: dict[int, str] = {4: "nn.LSTM", 3: "nn.GRU", 1: "nn.RNN"}

#: a stored tensor's dtype -> the NumPy dtype a PyTorch or safetensors file's RNN tensor is read as (others are
#: refused): a type NumPy has none for without a package (bfloat16) as the type it computes in (float32: exactly)
READ_DTYPES: dict[str, str] = {name: COMPUTE.get(name, name) if name in PACKAGES else name for name in PARAMS}


_RNN_KEY = re.compile(r"^((?:.*\.)?)((?:weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l\d+(?:_reverse)?)$")
_CELL_KEY = re.compile(r"(^|\.)weight_ih$")


def rnn_groups(keys: Any) -> dict[str, dict[str, str]]:
    """``{prefix: {torch name: key}}`` for every prefix with a ``{prefix}weight_ih_l0`` key, in key order.

    ``"encoder.rnn.weight_ih_l0"`` has prefix ``"encoder.rnn."`` and torch name ``"weight_ih_l0"``;
    a plain state_dict has prefix ``""``.
    """
    matches = [(key, _RNN_KEY.match(key)) for key in keys if isinstance(key, str)]
    groups: dict[str, dict[str, str]] = {m.group(1): {} for _, m in matches if m and m.group(2) == "weight_ih_l0"}
    for key, match in matches:
        if match and match.group(1) in groups:
            groups[match.group(1)][match.group(2)] = key
    return groups


def select_rnns(path: str, keys: list[str], prefix: str | None) -> dict[str, dict[str, str]]:
    """The RNN groups to read: all of them, or the one under ``prefix``; FileReadError if none."""
    groups = rnn_groups(keys)
    if prefix is not None:
        wanted = prefix.strip()
        wanted += "." if wanted and not wanted.endswith(".") else ""
        if wanted not in groups:
            where = ("RNNs are under " + ", ".join(repr(p) for p in groups)) if groups else "it holds no RNN"
            raise FileReadError(path, f"no RNN under prefix {prefix!r} (no key {wanted + 'weight_ih_l0'!r}); {where}")
        return {wanted: groups[wanted]}
    if not groups:
        cells = [key for key in keys if isinstance(key, str) and _CELL_KEY.search(key)]
        cell_note = (f"; {cells[0]!r} belongs to an nn.LSTMCell/GRUCell/RNNCell, which is not read" if cells else "")
        raise FileReadError(path, f"a state_dict of {len(keys)} tensors ({_listing(keys)}) with no LSTM, GRU or RNN "
                                  f"weights (no key ends in 'weight_ih_l0'){cell_note}")
    return groups


def _listing(keys: list[Any], limit: int = 6) -> str:
    shown = ", ".join(one_line(repr(key), 60) for key in keys[:limit])
    return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def rnns_in_state_dict(path: str, state_dict: Mapping[str, Any], options: ReadOptions, source: str, *,
                       dtype_of: Callable[[Any], str] = lambda array: str(array.dtype),
                       read: Callable[[list[str]], Mapping[str, np.ndarray]] | None = None,
                       readable: Collection[str] = BUILTIN_PARAMS) -> list[FoundRNN]:
    """Every RNN in a (parent module's) state_dict, one per key prefix.

    Args:
        path: the file, for names and messages.
        state_dict: ``{key: tensor}`` (NumPy arrays, or what ``dtype_of`` and ``read`` take); keys such as
            ``"rnn.weight_ih_l0"``; other keys are ignored.
        options: ``options.prefix`` picks the RNN under one prefix (``"rnn."`` or ``"rnn"``).
        source: what holds the state_dict, e.g. ``"state_dict in an .npz archive"``; each RNN's
            source is ``"PyTorch nn.LSTM " + source``.
        dtype_of: a tensor's dtype name; an RNN's must be one, among ``readable``, before anything is read.
        read: the chosen RNNs' keys -> their NumPy arrays (bfloat16 as float32, noted); None: the tensors as they are.

    Returns:
        ``[FoundRNN, ...]`` in the ``torch`` format, named by prefix (the file's base name for a
        plain state_dict), the configuration read off the shapes (an ``nn.RNN``'s tanh/relu is a
        question), bias=False layers with zero biases (noted).

    Raises:
        FileReadError: no RNN (under the prefix).
        ValueError: tensors that do not form an RNN (naming it).
        TypeError: an RNN's tensors of mixed or unreadable dtypes (naming the tensor).
    """
    groups = select_rnns(path, list(state_dict), options.prefix)
    for names in groups.values():
        dtypes = {key: dtype_of(state_dict[key]) for key in names.values()}
        majority = shared_dtype(dtypes, f"cannot read {path!r}: an RNN's ")
        if majority not in readable:
            raise TypeError(f"cannot read {path!r}: tensor {next(iter(dtypes))!r} is {majority}; an RNN's weights "
                            f"must be {', '.join(readable)}")
    keys = [key for names in groups.values() for key in names.values()]
    arrays = read(keys) if read is not None else {key: state_dict[key] for key in keys}
    found = []
    for prefix, names in groups.items():
        tensors = {name: arrays[key] for name, key in names.items()}
        inferred = infer("torch", tensors, f"the RNN under {prefix!r}" if prefix else "the state_dict")
        units = int(inferred.fields["num_units"])
        rnn_class = RNN_CLASSES[tensors["weight_ih_l0"].shape[0] // units]
        notes = tuple(inferred.notes)
        if dtype_of(state_dict[names["weight_ih_l0"]]) == "bfloat16":
            notes += (BFLOAT16_NOTE,)
        name = prefix[:-1] if prefix else os.path.basename(path)
        found.append(FoundRNN(name, f"PyTorch {rnn_class} {source}", "torch", inferred.tensors, inferred.fields,
                              inferred.questions, notes))
    return found
