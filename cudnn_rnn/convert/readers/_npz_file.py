"""``.npz`` archives: a params file, a bare params buffer, or the named tensors of a format.

=====================================  ==========================================================
the archive holds                      what is found
=====================================  ==========================================================
params, config, step, format           a params file (:mod:`cudnn_rnn.params_file`): complete
params                                 a bare buffer: dtype only; every size is a question
a format's names (``weight_ih_l0``)    that format (``fmt=`` or :func:`~cudnn_rnn.formats.guess_format`),
                                       the configuration read off the shapes (:mod:`._infer`)
a parent module's torch names          each RNN under its prefix (``rnn.weight_ih_l0``)
=====================================  ==========================================================

How each member is checked before its data is read (nothing is unpickled): :func:`read_npz_safely`.
"""

from __future__ import annotations

import functools
import os
import zipfile

import numpy as np

from ...files import read_npy_header
from ...files.params_file import KEYS as PARAMS_FILE_KEYS, parse_params_file
from ...formats import PREFIXED_TORCH_NAME, guess_format
from ._found import (CONFIG_FIELDS, PARAMS_FORMAT, FileReadError, FoundRNN, ReadOptions, check_declared_size,
                     common_dtype, questions_for_all)
from ._infer import infer
from ._state_dict import rnns_in_state_dict
from ._zip import DAMAGED_ZIP, checked_members

__all__ = ["read"]


def read_npz_safely(path: str) -> dict[str, np.ndarray]:
    """``{name: array}`` of an .npz archive, every member checked against the archive
    (:func:`~._zip.checked_members`) and each array's declared size against the bytes stored first.

    Raises:
        FileReadError: a damaged archive, a member refused by :mod:`._zip`, a non-.npy member,
            object arrays, or an array that declares more data than the archive stores.
    """
    arrays = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in checked_members(path, archive).values():
                if not info.filename.endswith(".npy"):
                    raise FileReadError(path, f"member {info.filename!r} is not an .npy array")
                name = info.filename[:-4]
                compressed = info.compress_type != zipfile.ZIP_STORED
                with archive.open(info) as member:
                    shape, dtype = read_npy_header(member, name, functools.partial(FileReadError, path))
                    if dtype.hasobject:
                        raise FileReadError(path, f"member {name!r} holds Python objects (a pickle), which are never "
                                                  "loaded; save plain numeric arrays")
                    stored = info.compress_size if compressed else info.file_size - member.tell()
                    check_declared_size(path, name, shape, dtype.itemsize, stored, compressed)
                    member.seek(0)
                    arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    except FileReadError:
        raise
    except DAMAGED_ZIP as error:
        raise FileReadError(path, f"a damaged .npz archive ({type(error).__name__}: {error})") from None
    return arrays


def read(path: str, kind: str, options: ReadOptions) -> list[FoundRNN]:
    """The RNN an .npz archive holds (see the module docstring)."""
    arrays = read_npz_safely(path)
    name = os.path.basename(path)
    if set(PARAMS_FILE_KEYS) <= set(arrays):
        saved = parse_params_file({key: arrays[key] for key in PARAMS_FILE_KEYS}, repr(path))
        fields = {field: getattr(saved.config, field) for field in CONFIG_FIELDS}
        return [FoundRNN(name, "cudnn_rnn params file", PARAMS_FORMAT, {"params": saved.params}, fields)]
    if not arrays:
        raise FileReadError(path, "the archive holds no arrays")
    fmt = options.fmt or guess_format(arrays)
    if fmt == PARAMS_FORMAT or (fmt is None and set(arrays) == {"params"}):
        if set(arrays) != {"params"}:
            raise FileReadError(path, "a params buffer is one array named 'params'; "
                                      f"the archive holds {sorted(arrays)}")
        params = arrays["params"]
        if params.ndim != 1:
            raise FileReadError(path, f"'params' must be 1-D; got shape {params.shape}")
        dtype = common_dtype(arrays, f"{path!r}")
        return [FoundRNN(name, "bare params buffer", PARAMS_FORMAT, arrays, {"dtype": dtype},
                         questions_for_all("a bare params buffer does not say its configuration"))]
    if fmt is None:
        if any(PREFIXED_TORCH_NAME.search(key) for key in arrays):
            return rnns_in_state_dict(path, arrays, options, "state_dict in an .npz archive")
        raise FileReadError(path, f"the archive holds neither a params buffer nor the tensors of a known format "
                                  f"(it holds {sorted(arrays)[:8]}): pass fmt=FORMAT")
    inferred = infer(fmt, arrays)
    return [FoundRNN(name, f"{fmt} tensors in an .npz archive", fmt, inferred.tensors, inferred.fields,
                     inferred.questions, tuple(inferred.notes))]
