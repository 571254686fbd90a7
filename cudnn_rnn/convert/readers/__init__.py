"""Find the RNNs in the model files people have, with their configuration read from the file.

::

    found = read_file("model.keras")          # [FoundRNN, ...], one per RNN layer in the file
    found[0].describe()                        # "rnn_mode=lstm, num_layers=1, num_units=64, ..."
    params = found[0].to_params().value        # cuDNN's params buffer, exact or refused
    stacked = stack(found[:2])                 # consecutive layers as one 2-layer network

The file's content, not its name, says what it is (:data:`FILE_KINDS`); each kind has a reader
module, which imports its framework (h5py, torch, onnx, tensorflow) only inside the functions
that read such a file, so each is needed only for its own files:

=================  ========================================================  ==================  ================
kind               recognised by                                             reader              options it takes
=================  ========================================================  ==================  ================
``npz``            a zip of ``.npy`` members                                 ``_npz_file``       prefix
``keras``          a zip with ``config.json`` and ``model.weights.h5``       ``_keras_file``
``hdf5``           the HDF5 signature (``.weights.h5``, Keras 2 ``.h5``)     ``_keras_file``
``torch``          a zip with ``data.pkl`` (torch.save), or a pickle         ``_torch_file``     key, prefix,
                                                                                                 trust_pickle
``onnx``           ``.onnx``, or a protobuf starting with ir_version         ``_onnx_file``
``tf_checkpoint``  ``PREFIX.index`` beside the path, or a checkpoint folder  ``_tf_checkpoint``
=================  ========================================================  ==================  ================

Every kind takes ``fmt`` when it names a format the kind can hold; :func:`read_file` refuses an
option a kind does not take (:data:`OPTION_USES`) before its reader runs, naming what to do
instead. A reader module has one function, ``read(path, kind, options) -> list[FoundRNN]``. Anything
that goes wrong reading a file comes out as :class:`FileReadError` (a ValueError), one line,
naming the file; a reader never unpickles unless ``trust_pickle=True``, and checks declared
sizes before reading data (see :mod:`._found`).
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..._checks import flag
from ...formats._table import FORMATS, to_format
from . import _keras_file, _npz_file, _onnx_file, _tf_checkpoint, _torch_file
from ._found import CONFIG_FIELDS, PARAMS_FORMAT, FileReadError, FoundRNN, Question, ReadOptions, one_line

__all__ = ["FILE_KINDS", "OPTION_USES", "FileKind", "FileReadError", "FoundRNN", "Question", "ReadOptions",
           "file_kind", "read_file", "stack", "choose", "one_line", "CONFIG_FIELDS", "PARAMS_FORMAT"]

#: the options of :func:`read_file` that only some kinds of file take -> what they apply to
OPTION_USES: dict[str, str] = {
    "key": "PyTorch checkpoint dicts (the entry holding the state_dict)",
    "prefix": "PyTorch state_dicts (the key prefix of the RNN in a parent module)",
    "trust_pickle": "PyTorch files (unpickling whole saved modules)",
}


@dataclass(frozen=True)
class FileKind:
    """One kind of model file.

    Attributes:
        name: the kind's name (a key of :data:`FILE_KINDS`).
        description: what it is, with its article, for messages ("an ONNX model").
        read: the reader module's ``read(path, kind, options) -> [FoundRNN, ...]``.
        formats: the ``fmt`` formats such a file can hold (None: any, as for .npz).
        options: the options of :data:`OPTION_USES` it takes; :func:`read_file` refuses the others.
        naming: how such a file tells its RNNs apart, for the message that refuses ``key``/``prefix``.
    """

    name: str
    description: str
    read: Callable[[str, str, ReadOptions], list[FoundRNN]]
    formats: tuple[str, ...] | None
    options: tuple[str, ...]
    naming: str


#: kind name -> the kind, in the order of the table above
FILE_KINDS: dict[str, FileKind] = {kind.name: kind for kind in (
    FileKind("npz", "a NumPy .npz archive", _npz_file.read, None, ("prefix",),
             "an .npz archive names its RNNs by file, or by key prefix for a parent module's torch tensors"),
    FileKind("keras", "a Keras 3 .keras archive", _keras_file.read, ("keras",), (),
             "a Keras file names its RNNs by layer"),
    FileKind("hdf5", "an HDF5 file (Keras .weights.h5 or legacy Keras 2 .h5 model)", _keras_file.read, ("keras",), (),
             "a Keras file names its RNNs by layer"),
    FileKind("torch", "a PyTorch file (torch.save)", _torch_file.read, ("torch",), ("key", "prefix", "trust_pickle"),
             "a PyTorch file names its RNNs by key prefix"),
    FileKind("onnx", "an ONNX model", _onnx_file.read, ("onnx",), (),
             "an ONNX model names its RNNs by node"),
    FileKind("tf_checkpoint", "a TensorFlow checkpoint", _tf_checkpoint.read, ("tf_cell", "keras", "gru_block_cell"),
             (), "a TensorFlow checkpoint names its RNNs by variable scope"),
)}

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
ZIP_LOCAL_HEADER = b"PK\x03\x04"  # a zip archive's first bytes; its directory sits at the end
PICKLE_PROTOCOL_OPCODE = 0x80   # the first byte of a pickle of protocol 2 or later
ONNX_IR_VERSION_TAG = 0x08      # ModelProto field 1 (ir_version), varint: the first byte of every ONNX model
TF_CHECKPOINT_SUFFIXES = (".index", ".data-")


def _tf_checkpoint_path(path: str) -> bool:
    """Whether ``path`` names a TensorFlow checkpoint: its prefix, ``.index``, a ``.data-*`` shard, the
    ``checkpoint`` state file, a SavedModel's ``saved_model.pb``, or a folder holding one."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, "checkpoint")) or any(
            name.endswith(".index") for name in os.listdir(path)) or os.path.isdir(os.path.join(path, "variables"))
    base, folder = os.path.basename(path), os.path.dirname(path)
    if base == "saved_model.pb":
        return os.path.isdir(os.path.join(folder, "variables"))
    return ((not os.path.exists(path) and os.path.isfile(path + ".index")) or base.endswith(".index")
            or base == "checkpoint" or bool(re.search(r"\.data-\d+-of-\d+$", base)))


def file_kind(path: str) -> FileKind:
    """What kind of model file ``path`` is, from its content (and, for ONNX, its extension).

    Args:
        path: the file, a TensorFlow checkpoint prefix, or a folder holding a checkpoint.

    Returns:
        Its :class:`FileKind`, one of :data:`FILE_KINDS`.

    Raises:
        FileReadError: missing, empty, unreadable, or of no kind that can be read.
    """
    if _tf_checkpoint_path(path):
        return FILE_KINDS["tf_checkpoint"]
    if not os.path.isfile(path):
        raise FileReadError(path, "no such file" if not os.path.exists(path) else "not a regular file")
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as error:
        raise FileReadError(path, f"cannot open it: {error.strerror or error}") from None
    if not head:
        raise FileReadError(path, "the file is empty")
    if head.startswith(HDF5_SIGNATURE):
        return FILE_KINDS["hdf5"]
    if zipfile.is_zipfile(path):
        return _zip_kind(path)
    if head.startswith(ZIP_LOCAL_HEADER):
        raise FileReadError(path, "a zip archive without its central directory (.keras, .npz and torch.save files are "
                                  "zip archives): the file is truncated or corrupt")
    if head[0] == PICKLE_PROTOCOL_OPCODE:
        return FILE_KINDS["torch"]
    if path.lower().endswith(".onnx") or head[0] == ONNX_IR_VERSION_TAG:
        return FILE_KINDS["onnx"]
    known = ", ".join(kind.description for kind in FILE_KINDS.values())
    raise FileReadError(path, f"not a model file of a known kind ({known}); it starts with bytes {head[:8].hex(' ')}")


def _zip_kind(path: str) -> FileKind:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, RuntimeError) as error:
        raise FileReadError(path, f"a damaged zip archive ({one_line(error)})") from None
    if "config.json" in names and any(name.endswith(".weights.h5") for name in names):
        return FILE_KINDS["keras"]
    if any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        return FILE_KINDS["torch"]
    if all(name.endswith(".npy") for name in names):
        return FILE_KINDS["npz"]
    raise FileReadError(path, "a zip archive that is neither a .keras model, a torch.save file nor an .npz archive; "
                              f"it holds {sorted(names)[:8]}")


def read_file(path: str | os.PathLike[str], *, key: str | None = None, prefix: str | None = None,
              trust_pickle: bool = False, fmt: str | None = None) -> list[FoundRNN]:
    """Every RNN in the model file ``path``, in the file's order.

    Args:
        path: a Keras .keras/.weights.h5/.h5, PyTorch .pt/.pth/.bin, ONNX, TensorFlow checkpoint
            or .npz file, told apart by its content (a checkpoint by its prefix, ``.index``
            or folder).
        key: the entry of a PyTorch checkpoint dict holding the state_dict (found by itself
            when exactly one entry is a state_dict).
        prefix: the key prefix of the RNN in a parent module's state_dict (e.g. ``"rnn."``).
        trust_pickle: unpickle whole PyTorch modules (this runs code from the file).
        fmt: the format of the named tensors in an .npz (guessed from the names otherwise).

    Returns:
        ``[FoundRNN, ...]``, one per RNN in file order, its tensors host arrays; fields a file
        cannot tell are questions, answered with :meth:`FoundRNN.with_hints`.

    Raises:
        FileReadError: the file cannot be read, is of no known kind, holds no RNN, or takes
            no such option (``key``, ``prefix``, ``trust_pickle`` or ``fmt``).
        ValueError: ``fmt`` is not a format name.
        TypeError: bad arguments, or tensors of mixed dtypes (naming the odd tensor).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__}")
    for name, value in (("key", key), ("prefix", prefix)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None; got {type(value).__name__} {value!r}")
    flag("trust_pickle", trust_pickle)
    if fmt is not None and fmt != PARAMS_FORMAT and fmt not in FORMATS:
        raise ValueError(f"fmt must be None, {PARAMS_FORMAT!r} or one of {FORMATS}; got {fmt!r}")
    path = os.fspath(path)
    kind = file_kind(path)
    if fmt is not None and kind.formats is not None and fmt not in kind.formats:
        raise FileReadError(path, f"this is {kind.description}, which holds the {' or '.join(kind.formats)} "
                                  f"format, not {fmt!r}: leave the format out (it is read from the file)")
    given = {"key": key is not None, "prefix": prefix is not None, "trust_pickle": trust_pickle}
    for option in OPTION_USES:
        if given[option] and option not in kind.options:
            raise FileReadError(path, _refusal(option, kind))
    try:
        found = kind.read(path, kind.name, ReadOptions(key=key, prefix=prefix, trust_pickle=trust_pickle, fmt=fmt))
    except (FileReadError, TypeError):
        raise
    except ImportError as error:
        module = getattr(error, "name", None) or "a package"
        raise FileReadError(path, f"reading {kind.description} needs the {module!r} package "
                                  f"(pip install {module}): {one_line(error)}") from None
    except ValueError as error:
        raise FileReadError(path, str(error)) from None
    except Exception as error:  # a parser's failure on a malformed file is the file's fault
        raise FileReadError(path, f"not readable as {kind.description} ({type(error).__name__}: "
                                  f"{one_line(error, 200)})") from None
    if not found:
        raise FileReadError(path, f"the file is {kind.description} but holds no LSTM, GRU or simple RNN")
    return found


def _refusal(option: str, kind: FileKind) -> str:
    """Why ``kind`` does not take ``option``, and what to do instead."""
    instead = ("nothing in it is unpickled: leave trust_pickle= out" if option == "trust_pickle" else
               f"{kind.naming}: pick one by its name with names=[NAME] (the names are listed by cudnn-rnn inspect)")
    return f"{option}= applies to {OPTION_USES[option]}, not to {kind.description}; {instead}"


# ---- choosing and stacking --------------------------------------------------------------------------
_TORCH_LAYER = re.compile(r"_l(\d+)")


def _shift_layer(name: str, offset: int) -> str:
    """A torch tensor name with its layer index moved up by ``offset``: ``weight_ih_l0`` -> ``weight_ih_l2``."""
    return _TORCH_LAYER.sub(lambda match: f"_l{int(match.group(1)) + offset}", name)


def stack(found: Sequence[FoundRNN]) -> FoundRNN:
    """Consecutive RNNs as one multi-layer network (layer i's input is layer i-1's output).

    Each must convert to cuDNN params exactly and share mode, units, projection, direction and
    dtype; layer i's input size must be layer i-1's output size.

    Args:
        found: the RNNs, first layer first (each with every question answered).

    Returns:
        A :class:`FoundRNN` in the ``torch`` format with the layers' counts summed, its name
        the names joined by ``+``. One RNN is returned as it is.

    Raises:
        ValueError: no RNN is given, the RNNs do not chain, a question is unanswered, or one of
            them cannot become cuDNN params.
        InexactConversionError: one of them converts only approximately.
    """
    found = list(found)
    if not found:
        raise ValueError("stack needs at least one RNN")
    if len(found) == 1:
        return found[0]
    configs = [item.config for item in found]
    first = configs[0]
    for (previous, before), (item, config) in zip(zip(found, configs), zip(found[1:], configs[1:])):
        for name in ("rnn_mode", "num_units", "num_proj", "direction", "dtype"):
            if getattr(config, name) != getattr(first, name):
                raise ValueError(f"cannot stack {item.name} on {previous.name}: {name} is {getattr(config, name)!r}, "
                                 f"the first layer's is {getattr(first, name)!r}")
        if config.input_size != before.output_size or config.skip_input:
            raise ValueError(f"cannot stack {item.name} on {previous.name}: its input size is {config.input_size}, "
                             f"{previous.name} outputs {before.output_size} features per step")
    tensors, notes, offset = {}, [], 0
    for item, config in zip(found, configs):
        converted = item.to_params()
        if converted.approximations:  # pragma: no cover - to_params raises before this
            raise ValueError(f"cannot stack {item.name}: it converts only approximately")
        for name, value in to_format("torch", converted.value, config).value.items():
            tensors[_shift_layer(name, offset)] = value
        notes += [f"{item.name}: {note}" for note in item.notes]
        offset += config.num_layers
    fields = {name: getattr(first, name) for name in CONFIG_FIELDS}
    fields["num_layers"] = offset
    return FoundRNN(name="+".join(item.name for item in found),
                    source=f"{len(found)} stacked layers ({', '.join(item.source for item in found)})",
                    fmt="torch", tensors=tensors, fields=fields, notes=tuple(notes))


def choose(found: Sequence[FoundRNN], names: Sequence[str] = (), *, stack_all: bool = False,
           hints: Mapping[str, Any] | None = None) -> FoundRNN:
    """The one RNN a conversion should take from a file's ``found`` list, with ``hints`` applied.

    RNNs to be stacked get their questions answered first, and the stacked network is checked
    as a whole.

    Args:
        found: what :func:`read_file` returned.
        names: RNNs picked by name; several are stacked, in the order given.
        stack_all: stack every RNN found, in file order (when no ``names`` are given);
            otherwise the file must hold exactly one RNN.
        hints: configuration fields (None meaning not given) that answer what the file cannot
            tell, checked against the rest (:meth:`FoundRNN.with_hints`).

    Returns:
        The chosen :class:`FoundRNN` (stacked, see :func:`stack`), with the hints applied.

    Raises:
        ValueError: an unknown name, several RNNs and no choice (listing them), or a hint
            that disagrees with the file.
    """
    given = {name: value for name, value in (hints or {}).items() if value is not None}
    by_name = {item.name: item for item in found}
    listing = "; ".join(f"{item.name} ({item.source})" for item in found)
    if names:
        unknown = [name for name in names if name not in by_name]
        if unknown:
            raise ValueError(f"no RNN named {unknown[0]!r} in the file; it holds: {listing}")
        picked = [by_name[name] for name in names]
    elif stack_all or len(found) == 1:
        picked = list(found)
    else:
        raise ValueError(f"the file holds {len(found)} RNNs: {listing}; pick one with names=[NAME], or stack "
                         "consecutive layers with names=[FIRST, SECOND] or stack_all=True")
    if len(picked) > 1:
        picked = [item.with_hints(**{name: value for name, value in given.items() if name in item.questions})
                  for item in picked]
    return stack(picked).with_hints(**given)
