"""Write converted RNN weights as the file a framework loads as it is: OUT's name chooses the container.

::

    write_file("lstm.safetensors", rnn)        # nn.LSTM state_dict names in a safetensors file
    write_file("model.keras", rnn)             # a Keras 3 model: Input -> LSTM (keras.saving.load_model)
    write_file("params.npz", layer)            # a params file (cudnn_rnn.LSTM.load)
    write_file("gru.pt", (params, config))     # torch.save of an nn.GRU state_dict

``fmt`` names the format of the tensors written; each container holds some formats, its framework's own by
default. :data:`CONTAINERS` has one row per ending: what the file holds, what reads it back and how it is
written. Every file is written whole or not at all (:mod:`cudnn_rnn.files`). A conversion that would change
the function is refused unless ``allow_approximation=True`` (then :attr:`Written.approximations` says what
changed), as in :func:`~cudnn_rnn.convert.to_format`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from .._arrays import to_host
from .._checks import flag, path_argument
from .._dtypes import PACKAGES, as_bits
from ..config import RNNConfig
from ..files import (KERAS, KERAS_WEIGHTS, NPZ, ONNX, PT, PTH, SAFETENSORS, atomic_write, encode, extension,
                     write_bytes, write_through_path)
from ..formats import FORMATS, Converted, check_params, convert_between, to_format
from ..formats.onnx import node_attributes
from ..layers import RecurrentLayer
from ..files.params_file import write_params_file
from .keras_export import write_keras
from .onnx_export import DEFAULT_OPSET, export_onnx
from .readers import CONFIG_FIELDS, PARAMS_FORMAT, FoundRNN

__all__ = ["CONTAINERS", "Container", "Written", "container_of", "ending", "suffixes_for", "as_found", "converted",
           "layer_class_name", "write_file"]

#: every format a container of named tensors can hold: the params buffer, then the named formats
ANY_FORMAT: tuple[str, ...] = (PARAMS_FORMAT, *FORMATS)


@dataclass(frozen=True)
class Request:
    """One write, as :func:`write_file` hands it to a container's writer: ``tensors`` are in the format the writer
    takes (``container.writes_from``, else ``fmt``); ``time_major`` and ``opset`` are ONNX's."""

    path: str
    container: Container
    fmt: str
    tensors: dict[str, Any]
    config: RNNConfig
    time_major: bool = True
    opset: int = DEFAULT_OPSET


#: a container's writer: writes the request's file, and says what it holds (:attr:`Written.what`)
Writer = Callable[[Request], str]


@dataclass(frozen=True)
class Container:
    """A kind of output file: one row of :data:`CONTAINERS`.

    Attributes:
        suffix: how its name ends (``".keras"``, ``".weights.h5"``).
        formats: the formats it holds, its default first.
        description: what it is, for messages ("a Keras 3 model").
        loaded_by: what loads it, for messages and the guide.
        kind: what :func:`~cudnn_rnn.convert.read_file` finds it to be (a key of ``readers.FILE_KINDS``).
        writer: how it is written.
        writes_from: the format its writer takes (the params buffer, for the model exporters); None: the
            format written.
        default_loader: the framework's loader that takes only the default format (``{layer}``: the RNN's
            class name), named by the command line where another format is written; empty where none is.
    """

    suffix: str
    formats: tuple[str, ...]
    description: str
    loaded_by: str
    kind: str
    writer: Writer
    writes_from: str | None = None
    default_loader: str = ""

    @property
    def default(self) -> str:
        """The format written when none is named."""
        return self.formats[0]


def _first(default: str) -> tuple[str, ...]:
    return (default, *(name for name in ANY_FORMAT if name != default))


# ---- the writers -----------------------------------------------------------------------------------------------
def _save_npz(path: str, tensors: dict[str, np.ndarray]) -> None:
    narrow = [name for name, value in tensors.items() if value.dtype.name in PACKAGES]
    if narrow:  # np.savez would write anonymous void data
        raise TypeError(f"an .npz of named tensors cannot name bfloat16 (tensor {narrow[0]!r}); write a .pt, a "
                        f".safetensors or a params file (fmt={PARAMS_FORMAT!r}) instead")
    with atomic_write(path) as handle:  # numeric tensors: nothing to pickle
        np.savez(handle, allow_pickle=False, **tensors)


def _save_pt(path: str, tensors: dict[str, np.ndarray]) -> None:
    try:
        import torch
    except ImportError:
        raise ImportError("writing a .pt file needs the 'torch' package: pip install torch", name="torch") from None
    state = {name: torch.from_numpy(as_bits(np.ascontiguousarray(value))).view(getattr(torch, value.dtype.name))
             for name, value in tensors.items()}  # (bfloat16 through its bit patterns: torch takes no ml_dtypes array)
    write_through_path(path, lambda partial: torch.save(state, partial))


def _named(save: Callable[[str, dict[str, np.ndarray]], None]) -> Writer:
    """The writer of a container of named tensors that ``save(path, tensors)`` writes."""
    def write(request: Request) -> str:
        save(request.path, request.tensors)
        return f"{len(request.tensors)} tensor(s)"

    return write


def _write_npz(request: Request) -> str:
    """A params file (the params format), or the named tensors of another format."""
    if request.fmt != PARAMS_FORMAT:
        return _named(_save_npz)(request)
    config = request.config
    write_params_file(request.path, request.tensors[PARAMS_FORMAT], config)
    return f"a params file (params and configuration: cudnn_rnn.{layer_class_name(config)}.load reads it)"


def layer_class_name(config: RNNConfig) -> str:
    """The class name of an RNN of ``config``, the same in cudnn_rnn and torch.nn: LSTM, GRU or RNN."""
    return {"lstm": "LSTM", "gru": "GRU"}.get(config.rnn_mode, "RNN")


def _keras(weights_only: bool) -> Writer:
    """The writer of a Keras 3 model (``keras_export``: why it does not go through Keras), or of its weights."""
    reads_it = "" if weights_only else ": keras.saving.load_model reads it"

    def write(request: Request) -> str:
        config = request.config
        write_keras(request.tensors[PARAMS_FORMAT], config, request.path, weights_only=weights_only)
        return f"{request.container.description} ({config.num_layers} layer(s){reads_it})"

    return write


def _write_onnx(request: Request) -> str:
    config = request.config
    export_onnx(request.tensors[PARAMS_FORMAT], config, request.path, time_major=request.time_major,
                opset=request.opset)
    return f"an ONNX model ({config.num_layers} {node_attributes(config)[0]} node(s), opset {request.opset})"


# ---- the table -------------------------------------------------------------------------------------------------
#: what loads the torch format's tensors from a file
_STATE_DICT_LOADER = "torch's nn.{layer}.load_state_dict"

_TORCH_SAVE = Container(PT, _first("torch"), "a torch.save file", "torch.load", "torch", _named(_save_pt),
                        default_loader=_STATE_DICT_LOADER)

#: OUT's ending -> its container (a name ending in ``.weights.h5`` is Keras weights, not ``.h5``); the endings are
#: ``cudnn_rnn.files.ENDINGS``, in its order
CONTAINERS: dict[str, Container] = {container.suffix: container for container in (
    Container(NPZ, _first(PARAMS_FORMAT), "a NumPy .npz archive", "cudnn_rnn.LSTM.load (a params file), np.load",
              "npz", _write_npz),
    _TORCH_SAVE,
    replace(_TORCH_SAVE, suffix=PTH),
    Container(SAFETENSORS, _first("torch"), "a safetensors file", "safetensors.torch.load_file", "safetensors",
              _named(lambda path, tensors: write_bytes(path, encode(tensors))), default_loader=_STATE_DICT_LOADER),
    Container(KERAS, ("keras",), "a Keras 3 model", "keras.saving.load_model", "keras", _keras(False),
              writes_from=PARAMS_FORMAT),
    Container(KERAS_WEIGHTS, ("keras",), "a Keras 3 weights file", "keras.Model.load_weights", "hdf5", _keras(True),
              writes_from=PARAMS_FORMAT),
    Container(ONNX, ("onnx",), "an ONNX model", "onnxruntime.InferenceSession", "onnx", _write_onnx,
              writes_from=PARAMS_FORMAT),
)}


@dataclass(frozen=True)
class Written:
    """What :func:`write_file` (or :func:`~cudnn_rnn.convert.write_into`) wrote.

    Attributes:
        path: the file written.
        fmt: the format of its tensors (``"params"`` for a params file).
        what: what it holds, in words ("a Keras 3 model (1 LSTM layer)", "8 tensor(s)").
        approximations: what changed, one sentence each (empty: the same function).
    """

    path: str
    fmt: str
    what: str
    approximations: tuple[str, ...] = ()


def ending(path: str) -> str:
    """How the file name of ``path`` ends, in lower case (``.weights.h5`` counts as one ending)."""
    return extension(os.path.basename(path)).lower()


def container_of(path: str | os.PathLike[str], argument: str = "path") -> Container:
    """The container the name of ``path`` chooses; a ValueError naming the file (as ``argument``: "path", "OUT")
    and :data:`CONTAINERS`' suffixes when it ends in none of them."""
    suffix = ending(os.fspath(path))
    if suffix in CONTAINERS:
        return CONTAINERS[suffix]
    raise ValueError(f"{argument} {os.fspath(path)!r} must end in one of {tuple(CONTAINERS)}; got "
                     f"{suffix or 'no extension'!r}")


def as_found(rnn: Any) -> FoundRNN:
    """``rnn`` as a :class:`FoundRNN`: a found RNN as it is; a layer or ``(params, config)`` as its params.

    Raises:
        TypeError: anything else, or a pair whose parts are not a buffer and an RNNConfig.
        ValueError: params that do not fit the config.
    """
    if isinstance(rnn, FoundRNN):
        return rnn
    if isinstance(rnn, RecurrentLayer):
        params, config, source = rnn.params, rnn.config, f"a cudnn_rnn.{type(rnn).__name__} layer"
    elif isinstance(rnn, tuple) and len(rnn) == 2 and isinstance(rnn[1], RNNConfig):
        (params, config), source = rnn, "a params buffer"
    else:
        raise TypeError("rnn must be a FoundRNN (from read_file), a cudnn_rnn.LSTM/GRU/RNN layer or a (params, "
                        f"config) pair; got {type(rnn).__name__}")
    check_params(params, config)
    fields = {name: getattr(config, name) for name in CONFIG_FIELDS}
    return FoundRNN("params", source, PARAMS_FORMAT, {PARAMS_FORMAT: to_host(params)}, fields)


def converted(found: FoundRNN, fmt: str, *, allow_approximation: bool = False) -> Converted:
    """``found``'s weights in format ``fmt`` (``"params"``: ``{"params": buffer}``), exact or refused as
    :meth:`FoundRNN.to_params` and :func:`~cudnn_rnn.convert.to_format` refuse them."""
    config = found.config
    if fmt == PARAMS_FORMAT:
        params = found.to_params(allow_approximation=allow_approximation)
        return Converted({PARAMS_FORMAT: params.value}, params.approximations)
    if found.fmt == PARAMS_FORMAT:
        return to_format(fmt, found.tensors[PARAMS_FORMAT], config, allow_approximation=allow_approximation)
    if found.refusal and found.fmt != fmt:
        raise ValueError(f"{found.name} ({found.source}): {found.refusal}")
    return convert_between(found.fmt, fmt, found.tensors, config, allow_approximation=allow_approximation)


def suffixes_for(fmt: str) -> str:
    """The endings whose containers hold format ``fmt``, for messages: ``".npz or .pt or .pth or .safetensors"``."""
    return " or ".join(suffix for suffix, container in CONTAINERS.items() if fmt in container.formats)


# ---- the function ----------------------------------------------------------------------------------------------
def write_file(path: str | os.PathLike[str], rnn: Any, fmt: str | None = None, *,
               allow_approximation: bool = False, time_major: bool = True, opset: int = DEFAULT_OPSET) -> Written:
    """Write ``rnn``'s weights to ``path``, in the container its name chooses (see the module docstring).

    Args:
        path: the file to write (replaced if it exists); its ending chooses the container.
        rnn: a :class:`FoundRNN`, a ``cudnn_rnn.LSTM``/``GRU``/``RNN`` layer, or ``(params, config)``.
        fmt: the format of the tensors written; None: the container's default.
        allow_approximation: accept a conversion that changes the function.
        time_major: ONNX only: the model's inputs and outputs time-major (else batch-major).
        opset: ONNX only: the opset of the model.

    Returns:
        :class:`Written`: what was written, and the approximations made.

    Raises:
        ValueError: an unknown ending, a format the container does not hold (naming both), a
            question the source leaves open, or weights the format cannot hold.
        InexactConversionError: the conversion changes the function and approximations were not allowed.
        TypeError: ``rnn`` is of no accepted kind.
        ImportError: the container's package (torch, h5py, onnx) is missing.
        OSError: the file cannot be written (nothing is left behind).
    """
    target = path_argument("path", path)
    flag("allow_approximation", allow_approximation)
    flag("time_major", time_major)
    if not isinstance(opset, int) or isinstance(opset, bool):
        raise TypeError(f"opset must be an int; got {type(opset).__name__} {opset!r:.40}")
    container = container_of(target)
    fmt = container.default if fmt is None else fmt
    if fmt not in ANY_FORMAT:
        raise ValueError(f"fmt must be None or one of {ANY_FORMAT}; got {fmt!r}")
    if fmt not in container.formats:
        held = " or ".join(repr(name) for name in container.formats)
        raise ValueError(f"a {container.suffix} file is {container.description}, which holds the {held} format, "
                         f"not {fmt!r}: choose another format, or a file name ending in {suffixes_for(fmt)}")
    found = as_found(rnn)
    result = converted(found, container.writes_from or fmt, allow_approximation=allow_approximation)
    what = container.writer(Request(target, container, fmt, dict(result.value), found.config, time_major, opset))
    return Written(target, fmt, what, tuple(result.approximations))
