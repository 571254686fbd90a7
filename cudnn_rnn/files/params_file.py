"""The ``.npz`` file that holds a params buffer with its configuration.

Written by :meth:`cudnn_rnn.LSTM.save` (and GRU, RNN) and by ``cudnn-rnn convert``; read by
:meth:`cudnn_rnn.LSTM.load` and by the converter, so a converted model loads straight into a
layer::

    params  [S]   the buffer in cuDNN's layout, in its own dtype (stored bit for bit; bfloat16, which
                  an .npy cannot name, as its uint16 bit patterns: ``config`` names the dtype)
    config  ()    JSON of the RNNConfig fields (rnn_mode, num_layers, ..., seed2, dtype)
    step    ()    int64: the layer's training-step counter (0 for a converted model)
    format  ()    int64: this file layout's version, FORMAT_VERSION

Reading never unpickles (``allow_pickle=False``) and checks every field before use. Writing is
atomic (:func:`cudnn_rnn.files.write_bytes`): a kill during a save leaves the previous file whole.

The same three things, as a dict, are a layer's state (``layer.state_dict()``, which
:mod:`cudnn_rnn.checkpoint` stores), with the dropout RNG state of a layer trained on cuDNN::

    {"config": {"rnn_mode": ..., ..., "dtype": ...}, "step": int, "params": [S] array,
     "dropout_rng": None or {"device": str, "states": uint8 array}}     (may be absent)
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import zipfile
from dataclasses import dataclass
from typing import IO, Any, cast

import numpy as np

from .._arrays import Array, array_kind, to_host
from .._checks import checked_count
from .._cudnn._dropout_rng import checked_state
from .._dtypes import BY_NAME, PACKAGES
from ..config import RNNConfig, numpy_dtype
from ..layout import params_size
from . import DAMAGED_ZIP, PathLike, decompression_bomb, read_bytes, read_npy_header, write_bytes

__all__ = ["FORMAT_VERSION", "KEYS", "ParamsFile", "write_params_file", "read_params_file"]

#: the version of this file layout, stored in ``format``
FORMAT_VERSION = 1

#: dtypes an ``.npy`` cannot name (NumPy would write anonymous void data) -> the unsigned type whose bit
#: patterns store them; the configuration names the dtype, so reading views them back exactly
STORED_BITS: dict[str, str] = {name: f"uint{8 * BY_NAME[name].itemsize}" for name in PACKAGES}

#: the arrays of a params file
KEYS: tuple[str, ...] = ("params", "config", "step", "format")

#: the RNNConfig fields stored in ``config``: all that its constructor takes, in its order
CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RNNConfig) if f.init)


@dataclass(frozen=True)
class ParamsFile:
    """What a params file (or a layer's state dict) holds, checked.

    Args:
        params: [params_size]: the buffer in the configuration's dtype; host NumPy when read
            from a file, the state's own array (NumPy or CuPy) when parsed from a state dict.
        config: the configuration the buffer belongs to.
        step: the layer's training-step counter, >= 0.
    """

    params: Array
    config: RNNConfig
    step: int


def write_params_file(file: PathLike | IO[bytes], params: Array, config: RNNConfig, step: int = 0) -> None:
    """Write ``params`` with ``config`` and ``step`` as a params file.

    Args:
        file: a path (written atomically by :func:`cudnn_rnn.files.write_bytes`) or a binary file object.
        params, config, step: as :class:`ParamsFile`'s (params NumPy or CuPy).

    Raises:
        ValueError: params does not have the size and dtype of ``config``.
    """
    host = to_host(params)
    check_params_buffer(host, config, "params")
    stored = host.view(STORED_BITS[config.dtype]) if config.dtype in STORED_BITS else host
    config_text = np.array(json.dumps(config_fields(config)))
    step_value, version = np.array(int(step), np.int64), np.array(FORMAT_VERSION, np.int64)
    target = io.BytesIO() if isinstance(file, (str, os.PathLike)) else file
    np.savez(target, params=stored, config=config_text, step=step_value, format=version)
    if isinstance(file, (str, os.PathLike)):
        write_bytes(file, cast(io.BytesIO, target).getbuffer())


def _read_member(archive: zipfile.ZipFile, name: str) -> np.ndarray:
    """Member ``name``'s array, its declared sizes checked against what the archive stores before any is read."""
    info = archive.getinfo(f"{name}.npy")
    if decompression_bomb(info.file_size, max(info.compress_size, 1)):
        raise ValueError(f"member {name!r} declares {info.file_size} bytes from {info.compress_size} stored: more "
                         "than any compression gives")
    with archive.open(info) as member:
        shape, dtype = read_npy_header(member, name)
        declared = math.prod(shape) * dtype.itemsize
        if dtype.hasobject or declared > info.file_size - member.tell():
            raise ValueError(f"member {name!r} declares {dtype} {shape} ({declared} bytes) but the archive "
                             f"holds {info.file_size - member.tell()}")
        member.seek(0)
        array: np.ndarray = np.lib.format.read_array(member, allow_pickle=False)
    return array


def read_params_file(path: PathLike) -> ParamsFile:
    """Read a params file written by :func:`write_params_file`.

    Args:
        path: the ``.npz`` file.

    Returns:
        Its params (host NumPy), configuration and step counter, all checked.

    Raises:
        ValueError: not a params file (names what is missing), a member declaring more than the
            archive holds, another format version, a config that does not validate, or params
            that do not match the config; a pipe, device or socket instead of a file.
        FileNotFoundError: no such file.
        IsADirectoryError: ``path`` is a folder.
    """
    where = repr(os.fspath(path))
    data = read_bytes(path, "params file")  # a folder, a pipe or a device is refused, never waited on
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [name[:-4] for name in archive.namelist() if name.endswith(".npy")]
            arrays = {name: _read_member(archive, name) for name in KEYS if name in names}
    except DAMAGED_ZIP as error:
        raise ValueError(f"{where} is not a whole params file (a damaged or truncated archive, or another kind "
                         f"of file: {error})") from None
    missing = [name for name in KEYS if name not in names]
    if missing:
        raise ValueError(f"{where} is not a cudnn_rnn params file (a saved layer or a converted model): "
                         f"missing {missing}; it holds {sorted(names)}")
    return parse_params_file(arrays, where)


def parse_params_file(arrays: dict[str, np.ndarray], where: str) -> ParamsFile:
    """Check and decode the arrays of a params file (``where`` names it in messages)."""
    version = arrays["format"]
    if version.shape != () or version.dtype.kind not in "iu" or int(version) != FORMAT_VERSION:
        raise ValueError(f"{where} has params-file format {version!r}; this version reads format {FORMAT_VERSION}")
    text = arrays["config"]
    if text.shape != () or text.dtype.kind != "U":
        raise ValueError(f"{where}: 'config' must be a JSON string; got a {text.dtype} array of shape {text.shape}")
    try:
        fields = json.loads(str(text))
    except (json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"{where}: 'config' is not valid JSON ({str(error)[:200]})") from None
    config = config_from_fields(fields, where)
    stored_step = arrays["step"]
    if stored_step.shape != () or stored_step.dtype.kind not in "iu":
        raise ValueError(f"{where}: 'step' must be an integer scalar >= 0; got {stored_step.dtype} "
                         f"{stored_step!r:.40}")
    step = checked_count(f"{where}: 'step'", int(stored_step))
    params = np.array(arrays["params"])
    if config.dtype in STORED_BITS and params.dtype == np.dtype(STORED_BITS[config.dtype]):
        params = params.view(numpy_dtype(config.dtype))
    check_params_buffer(params, config, f"params in {where}")
    return ParamsFile(params, config, step)


def config_fields(config: RNNConfig) -> dict[str, Any]:
    """The :data:`CONFIG_FIELDS` of ``config`` by name, JSON-ready (strings and numbers)."""
    return {name: getattr(config, name) for name in CONFIG_FIELDS}


def config_from_fields(fields: Any, where: str) -> RNNConfig:
    """The configuration that :func:`config_fields` gave ``fields`` (some may be left to their defaults); a
    ValueError naming ``where`` for what is not a dict of known fields that make a valid configuration."""
    if not isinstance(fields, dict) or set(fields) - set(CONFIG_FIELDS):
        raise ValueError(f"{where}: 'config' must be an object with fields among {list(CONFIG_FIELDS)}; "
                         f"got {fields!r:.200}")
    try:
        return RNNConfig(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: invalid configuration: {error}") from None


def parse_layer_state(state: Any, where: str) -> ParamsFile:
    """The params (the state's own array, NumPy or CuPy, not a copy), configuration and step of what should be a
    layer's ``state_dict()`` (``where`` names it in messages), checked.

    ``dropout_rng`` (a layer's cuDNN RNG state, or None) may be absent, as in states saved
    before it existed; it is checked here and taken by the layer itself.

    Raises:
        ValueError: the first thing that is wrong with the keys, configuration, step or the
            params' size and dtype, naming ``where`` and the key.
        TypeError: ``params`` is not a NumPy or CuPy array.
    """
    if not isinstance(state, dict) or set(state) - {"dropout_rng"} != {"config", "step", "params"}:
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{where}: a layer's state must be a dict with keys ['config', 'params', 'step'] (and "
                         f"optionally 'dropout_rng'); got {keys}")
    checked_state(state.get("dropout_rng"), where)
    config = config_from_fields(state["config"], where)
    step = checked_count(f"{where}: 'step'", state["step"])
    params = state["params"]
    if array_kind(params) is None:
        raise TypeError(f"{where}: 'params' must be a numpy.ndarray or cupy.ndarray; got {type(params).__name__}")
    check_params_buffer(params, config, f"params in {where}")
    return ParamsFile(params, config, step)


def check_params_buffer(params: Array, config: RNNConfig, what: str) -> None:
    """Refuse ``params`` (NumPy or CuPy; ``what`` names it) with a ValueError unless it is the 1-D
    [params_size(config)] buffer of ``config.dtype``."""
    size = params_size(config)  # in closed form: a file claiming 10**9 layers is refused at once
    if tuple(params.shape) != (size,) or params.dtype.name != config.dtype:
        raise ValueError(f"{what} must be [{size}] {config.dtype} for its configuration; "
                         f"got {params.shape} {params.dtype}")
