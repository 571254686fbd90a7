"""Find the RNNs in the model files people have, with their configuration read from the file.

::

    found = read_file("model.keras")          # [FoundRNN, ...], one per RNN layer in the file
    found[0].describe()                        # "rnn_mode=lstm, num_layers=1, num_units=64, ..."
    stacked = stack(found[:2])                 # consecutive layers as one 2-layer network

The file's content, not its name, says what it is (:func:`file_kind`: one of :data:`FILE_KINDS`, each
with its reader module and the options it takes); a reader module imports its framework (h5py, torch,
onnx, tensorflow) only inside the functions that read such a file, so each is needed only for its own files.

:func:`read_file` refuses an option a kind does not take (:data:`OPTION_USES`), or a format it cannot
hold, before its reader runs, naming what to do instead. Anything that goes wrong reading a file comes
out as :class:`FileReadError` (a ValueError), one line, naming the file; a reader never unpickles unless
``trust_pickle=True``, and checks declared sizes before reading data (see :mod:`._found`).

Each format is read by its framework's own reader (h5py, TensorFlow's checkpoint reader, ``onnx``,
``torch.load``, ``np.load``), those that can crash, loop or allocate without bound on a hostile file
in a child process (:mod:`._child`). Parsing is hand-written only for the zip members and pickles of
PyTorch files (:mod:`._zip`, :mod:`._pickle_inspector`), inspected before ``torch.load`` and written
into without being unpickled, and for the safetensors layout (``cudnn_rnn.files``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..._checks import flag, path_argument
from ...files import MODEL_FILE_KINDS, model_file_kind
from ...config import DIRECTIONS
from ...formats import FORMATS, to_format
from . import _keras_file, _npz_file, _onnx_file, _safetensors_file, _tf_checkpoint, _torch_file
from ._found import CONFIG_FIELDS, PARAMS_FORMAT, FileReadError, FoundRNN, Question, ReadOptions, one_line
from ._found import known_fields as _known_fields, same_field as _same_field

# what convert.into and the Keras writer share with the readers of the files they write (each ``as`` marks a name
# exported from here): where a file's parts sit, as the readers find them
from ._keras_file import CONFIG_MEMBER as CONFIG_MEMBER, METADATA_MEMBER as METADATA_MEMBER, locate as locate
from ._keras_file import WEIGHTS_MEMBER as WEIGHTS_MEMBER
from ._pickle_inspector import Pickled as Pickled
from ._safetensors_file import checked_layout as checked_layout
from ._torch_file import SEARCH_DEPTH as SEARCH_DEPTH, STORAGE_ITEMSIZES as STORAGE_ITEMSIZES
from ._torch_file import Layout as Layout, inspect_zip as inspect_zip
from ._zip import LOCAL_HEADER_SIGNATURE as LOCAL_HEADER_SIGNATURE, member_data_offset as member_data_offset

__all__ = ["FILE_KINDS", "OPTION_USES", "FileReadError", "FoundRNN", "Question", "file_kind", "read_file", "stack",
           "stack_problem", "choose", "listing", "named", "one_line", "CONFIG_FIELDS", "PARAMS_FORMAT"]

#: the options of :func:`read_file` that only some kinds of file take -> what they apply to
OPTION_USES: dict[str, str] = {
    "key": "PyTorch checkpoint dicts (the entry holding the state_dict)",
    "prefix": "PyTorch state_dicts in torch.save and safetensors files (the key prefix of the RNN in a parent "
              "module)",
    "trust_pickle": "PyTorch files (unpickling whole saved modules)",
}


@dataclass(frozen=True)
class FileKind:
    """One kind of model file: its ``name`` (a key of ``MODEL_FILE_KINDS``), its reader module's ``read(path, kind,
    options)``, the ``fmt`` formats it can hold (None: any, as for .npz), the options of :data:`OPTION_USES` it takes,
    and how it tells its RNNs apart (``naming``, for the message that refuses ``key``/``prefix``)."""

    name: str
    read: Callable[[str, str, ReadOptions], list[FoundRNN]]
    formats: tuple[str, ...] | None
    options: tuple[str, ...]
    naming: str

    @property
    def description(self) -> str:
        """What it is, with its article, for messages ("an ONNX model")."""
        return MODEL_FILE_KINDS[self.name]


#: kind name -> the kind
FILE_KINDS: dict[str, FileKind] = {kind.name: kind for kind in (
    FileKind("npz", _npz_file.read, None, ("prefix",),
             "an .npz archive names its RNNs by file, or by key prefix for a parent module's torch tensors"),
    *(FileKind(name, _keras_file.read, ("keras",), (), "a Keras file names its RNNs by layer")
      for name in ("keras", "hdf5")),
    FileKind("torch", _torch_file.read, ("torch",), ("key", "prefix", "trust_pickle"),
             "a PyTorch file names its RNNs by key prefix"),
    FileKind("safetensors", _safetensors_file.read, ("torch",), ("prefix",),
             "a safetensors file names its RNNs by key prefix"),
    FileKind("onnx", _onnx_file.read, ("onnx",), (),
             "an ONNX model names its RNNs by node"),
    FileKind("tf_checkpoint", _tf_checkpoint.read, ("tf_cell", "keras", "gru_block_cell"),
             (), "a TensorFlow checkpoint names its RNNs by variable scope"),
)}


def file_kind(path: str) -> FileKind:
    """Which of :data:`FILE_KINDS` the model file ``path`` is, from its content (and, for ONNX, its extension).

    Args:
        path: the file, a TensorFlow checkpoint prefix, or a folder holding a checkpoint.

    Raises:
        FileReadError: missing, empty, unreadable, or of no kind that can be read.
    """
    try:
        return FILE_KINDS[model_file_kind(path)]
    except ValueError as error:
        raise FileReadError(path, str(error)) from None


def read_file(path: str | os.PathLike[str], *, key: str | None = None, prefix: str | None = None,
              trust_pickle: bool = False, fmt: str | None = None) -> list[FoundRNN]:
    """Every RNN in the model file ``path``, in the file's order.

    Args:
        path: a Keras .keras/.weights.h5/.h5, PyTorch .pt/.pth/.bin, safetensors, ONNX, TensorFlow
            checkpoint or .npz file, told apart by its content (a checkpoint by its prefix,
            ``.index`` or folder).
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
    path = path_argument("path", path)
    for name, value in (("key", key), ("prefix", prefix)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None; got {type(value).__name__} {value!r}")
    flag("trust_pickle", trust_pickle)
    if fmt is not None and fmt != PARAMS_FORMAT and fmt not in FORMATS:
        raise ValueError(f"fmt must be None, {PARAMS_FORMAT!r} or one of {FORMATS}; got {fmt!r}")
    kind = file_kind(path)
    if fmt is not None and kind.formats is not None and fmt not in kind.formats:
        raise FileReadError(path, f"this is {kind.description}, which holds the {' or '.join(kind.formats)} "
                                  f"format, not {fmt!r}: leave the format out (it is read from the file)")
    given = {"key": key is not None, "prefix": prefix is not None, "trust_pickle": trust_pickle}
    for option in OPTION_USES:
        if given[option] and option not in kind.options:
            instead = ("nothing in it is unpickled: leave trust_pickle= out" if option == "trust_pickle" else
                       f"{kind.naming}: pick one by its name with names=[NAME] (the names are listed by cudnn-rnn "
                       "inspect)")
            raise FileReadError(path, f"{option}= applies to {OPTION_USES[option]}, not to {kind.description}; "
                                      f"{instead}")
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


# ---- choosing and stacking --------------------------------------------------------------------------
def _shift_layer(name: str, offset: int) -> str:
    """A torch tensor name with its layer index moved up by ``offset``: ``weight_ih_l0`` -> ``weight_ih_l2``."""
    return re.sub(r"_l(\d+)", lambda match: f"_l{int(match.group(1)) + offset}", name)


def stack(found: Sequence[FoundRNN]) -> FoundRNN:
    """Consecutive RNNs as one multi-layer network (layer i's input is layer i-1's output).

    Each must convert to cuDNN params exactly and stack on the one before (:func:`stack_problem`).

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
    for previous, item in zip(found, found[1:]):
        problem = stack_problem(previous, item, found[0], conversions=False)
        if problem:
            raise ValueError(f"cannot stack {item.name} on {previous.name}: {problem}")
    tensors, notes, offset = {}, [], 0
    for item, config in zip(found, configs):
        for name, value in to_format("torch", item.to_params().value, config).value.items():  # (exact, or refused)
            tensors[_shift_layer(name, offset)] = value
        notes += [f"{item.name}: {note}" for note in item.notes]
        offset += config.num_layers
    fields = {**{name: getattr(configs[0], name) for name in CONFIG_FIELDS}, "num_layers": offset}
    return FoundRNN(name="+".join(item.name for item in found),
                    source=f"{len(found)} stacked layers ({', '.join(item.source for item in found)})",
                    fmt="torch", tensors=tensors, fields=fields, notes=tuple(notes),
                    parts=tuple(part for item in found for part in (item.parts or (item,))))


#: the fields every layer of a stack shares with the first
_SHARED_FIELDS: tuple[str, ...] = ("rnn_mode", "num_units", "num_proj", "direction", "dtype")


def stack_problem(below: FoundRNN, above: FoundRNN, first: FoundRNN | None = None, *,
                  conversions: bool = True) -> str | None:
    """Why ``above`` cannot be stacked on ``below`` by :func:`stack` (None: it can), as far as the file tells.

    Fields that a file leaves as open questions are not compared. ``first`` is the stack's first layer,
    whose shared fields (mode, units, projection, direction, dtype) every layer must have (``below``
    when None). With ``conversions``, a layer that converts to cuDNN params only approximately, or not
    at all, is a problem too.

    Returns:
        The reason in a few words ("rnn_mode is 'gru', the first layer's is 'lstm'"), or None.
    """
    base, lower, upper = _known_fields(first or below), _known_fields(below), _known_fields(above)
    for name in _SHARED_FIELDS:
        if name in upper and name in base and not _same_field(name, upper[name], base[name]):
            whose = "the first layer's" if first is not None else f"{below.name}'s"
            return f"{name} is {upper[name]!r}, {whose} is {base[name]!r}"
    if upper.get("input_mode") == "skip_input":
        return "its input_mode is skip_input (no input matrices), which only a first layer may have"
    if all(name in lower for name in ("num_units", "num_proj", "direction")) and "input_size" in upper:
        width = (lower["num_proj"] or lower["num_units"]) * DIRECTIONS.get(lower["direction"], 1)  # (output_size)
        if upper["input_size"] != width:
            return f"its input size is {upper['input_size']}, {below.name} outputs {width} features per step"
    for item in (below, above) if conversions else ():
        conversion = item.conversion()
        if conversion.startswith("approximate"):
            return f"{item.name} converts to cuDNN params only approximately"
        if conversion.startswith("refused"):
            return f"{item.name} cannot become cuDNN params"
    return None


def listing(found: Sequence[FoundRNN]) -> str:
    """The RNNs of a file for a message: ``"encoder (Keras 3 LSTM); decoder (Keras 3 GRU)"``."""
    return "; ".join(f"{item.name} ({item.source})" for item in found)


def named(found: Sequence[FoundRNN], names: Sequence[str], where: str) -> list[FoundRNN]:
    """The RNNs of ``found`` named ``names``, in that order; ValueError naming the first unknown name, ``where``
    it was looked for ("the file", "model 'm.keras'") and what is there."""
    by_name = {item.name: item for item in found}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ValueError(f"no RNN named {unknown[0]!r} in {where}; it holds: {listing(found)}")
    return [by_name[name] for name in names]


def choose(found: Sequence[FoundRNN], names: Sequence[str] = (), *, stack_all: bool = False,
           hints: Mapping[str, Any] | None = None) -> FoundRNN:
    """The one RNN a conversion should take from a file's ``found`` list, with ``hints`` applied.

    RNNs to be stacked get their questions answered first, then the stacked network is checked.

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
    if names:
        picked = named(found, names, "the file")
    elif stack_all or len(found) == 1:
        picked = list(found)
    else:
        raise ValueError(f"the file holds {len(found)} RNNs: {listing(found)}; pick one with names=[NAME], or "
                         "stack consecutive layers with names=[FIRST, SECOND] or stack_all=True")
    if len(picked) > 1:
        picked = [item.with_hints(**{name: value for name, value in given.items() if name in item.questions})
                  for item in picked]
    return stack(picked).with_hints(**given)
