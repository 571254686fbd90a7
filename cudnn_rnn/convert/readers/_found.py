"""What a reader returns for each RNN in a file, and the checks every reader shares.

A reader turns a file into ``[FoundRNN, ...]``: the RNN's tensors in one of the named formats
of :mod:`cudnn_rnn.convert` (or ``"params"``, the opaque buffer itself), the configuration
fields the file tells, and a :class:`Question` for each field it cannot tell::

    FoundRNN(name="encoder", source="Keras 3 LSTM", fmt="keras", tensors={...},
             fields={"rnn_mode": "lstm", "num_layers": 1, "num_units": 64, ...})
    found.with_hints(rnn_mode="rnn_relu")   # fill a question; any other field is checked
    found.config                             # RNNConfig, or ValueError naming the missing argument
    found.to_params()                        # Converted(params, approximations)

Every message is one line (:func:`one_line`), names the file, tensor or node at fault, and says
what to do, naming Python arguments as a call spells them (``num_units=NUM_UNITS``). Declared sizes
are checked against what the file stores before anything is read (:func:`check_declared_size`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ...config import RNNConfig, dtype_name
from ...files import MAX_COMPRESSION_RATIO, decompression_bomb
from ...formats import FORMATS, Converted, InexactConversionError, check_params, from_format
from ...layers import RecurrentLayer

__all__ = [
    "CONFIG_FIELDS",
    "PARAMS_FORMAT",
    "MAX_COMPRESSION_RATIO",
    "FileReadError",
    "Question",
    "ReadOptions",
    "FoundRNN",
    "one_line",
    "questions_for_all",
    "check_declared_size",
    "common_dtype",
]

#: the RNNConfig fields that describe a set of weights (dropout and seeds are not in weight files)
CONFIG_FIELDS: tuple[str, ...] = ("rnn_mode", "num_layers", "num_units", "input_size", "direction", "num_proj",
                                  "input_mode", "dtype")

#: the pseudo-format of a bare params buffer: tensors == {"params": buffer}
PARAMS_FORMAT = "params"

_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-_])")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


class FileReadError(ValueError):
    """A file that cannot be read as asked: ``cannot read 'PATH': REASON``, one line.

    Attributes:
        path: the file (or checkpoint prefix, or folder), as given.
        reason: what is wrong and what to do, made one line by ``one_line``.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = one_line(reason)
        super().__init__(f"cannot read {path!r}: {self.reason}")


def one_line(text: object, limit: int = 400) -> str:
    """``str(text)`` as one printable line, for messages that quote what a file holds: terminal escape codes and
    control characters removed, whitespace collapsed, at most ``limit`` characters (a longer text ends in ``...``)."""
    flat = _CONTROLS.sub(" ", _ESCAPES.sub("", str(text)))
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[:limit - 3].rstrip() + "..."


@dataclass(frozen=True)
class Question:
    """A configuration field the file cannot tell: the values it may take and why it is unknown.

    Attributes:
        choices: the values the field may take; empty when any valid value may do (e.g.
            num_units of a bare params buffer).
        reason: why the file cannot tell it, one clause (the start of the message asking for it).
        default: taken if the question is not answered (as ``direction`` is
            ``'unidirectional'`` unless told otherwise); None: it must be answered.
    """

    choices: tuple[Any, ...]
    reason: str
    default: Any = None

    def options(self, field_name: str) -> str:
        """What to pass to answer the question about ``field_name``, as a call spells it:
        ``"rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'"`` (the choices), or ``"num_units=NUM_UNITS"``."""
        if self.choices:
            return " or ".join(_argument(field_name, choice) for choice in self.choices)
        return f"{field_name}={field_name.upper()}"


def _argument(name: str, value: Any) -> str:
    """``name=value`` as a call spells it: ``rnn_mode='lstm'``, ``num_units=4``."""
    return f"{name}={value!r}" if isinstance(value, str) else f"{name}={value}"


@dataclass(frozen=True)
class ReadOptions:
    """How to read a file, beyond what its content says: :func:`~cudnn_rnn.convert.read_file`'s options."""

    key: str | None = None
    prefix: str | None = None
    trust_pickle: bool = False
    fmt: str | None = None


@dataclass(frozen=True)
class FoundRNN:
    """One RNN found in a file.

    Attributes:
        name: where it sits in the file (a layer name, a key prefix, an ONNX node name).
        source: what it is, in the file's own terms ("Keras 3 LSTM", "PyTorch nn.GRU state_dict").
        fmt: the format ``tensors`` are in: a name in :data:`cudnn_rnn.formats.FORMATS`, or
            ``"params"`` for ``{"params": buffer}`` (a ``[params_size]`` buffer).
        tensors: ``{name: numpy array}`` in that format (host arrays, one dtype), shaped as
            :func:`cudnn_rnn.convert.expected_shapes` says for :attr:`config`.
        fields: the configuration fields the file tells: ``{field: value}`` for fields among
            rnn_mode, num_layers, num_units, input_size, direction, num_proj, input_mode and
            dtype.
        questions: field -> :class:`~cudnn_rnn.convert.Question`, for the fields it cannot tell.
        notes: facts worth knowing, one sentence each (e.g. "bias=False: zero biases").
        refusal: why these weights can never become a cuDNN params buffer (e.g. peepholes), or
            None. Other formats may still hold them (see ``fmt``).
        feeds_from: the name of the RNN found in the same file whose full output sequence is
            this RNN's input with nothing in between, when the file tells (whether the two
            stack into one network is :func:`~cudnn_rnn.convert.readers.stack_problem`'s answer).
        parts: the RNNs, as read from the file, that a stacked RNN was made of (see
            :func:`~cudnn_rnn.convert.stack`); empty for an RNN read as it is.
    """

    name: str
    source: str
    fmt: str
    tensors: Mapping[str, np.ndarray]
    fields: Mapping[str, Any]
    questions: Mapping[str, Question] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    refusal: str | None = None
    feeds_from: str | None = None
    parts: tuple["FoundRNN", ...] = ()

    def __post_init__(self) -> None:
        if self.fmt != PARAMS_FORMAT and self.fmt not in FORMATS:
            raise ValueError(f"fmt must be {PARAMS_FORMAT!r} or one of {FORMATS}; got {self.fmt!r}")
        unknown = (set(self.fields) | set(self.questions)) - set(CONFIG_FIELDS)
        if unknown:
            raise ValueError(f"fields and questions must be among {CONFIG_FIELDS}; got {sorted(unknown)}")
        for name in ("tensors", "fields", "questions"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name) or {})))
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "parts", tuple(self.parts))

    def replace(self, **changes: Any) -> "FoundRNN":
        """A copy with some attributes changed (``name=``, ``notes=``, ...), checked as a new one is."""
        return dataclasses.replace(self, **changes)

    # -- configuration ---------------------------------------------------------------------------
    def with_hints(self, **hints: Any) -> "FoundRNN":
        """Answer questions with ``hints`` (config fields: ``rnn_mode="rnn_relu"``, ``num_units=64``, ...; None
        means not given) and check the rest.

        Returns:
            A copy in which the questions the hints answer have become fields; ``self`` when
            no hint is given.

        Raises:
            ValueError: a hint disagrees with what the file says, or is not a choice the file allows.
            TypeError: a hint is not a config field.
        """
        given = {name: value for name, value in hints.items() if value is not None}
        if not given:
            return self
        unknown = set(given) - set(CONFIG_FIELDS)
        if unknown:
            raise TypeError(f"hints must be among {CONFIG_FIELDS}; got {sorted(unknown)}")
        fields, questions = dict(self.fields), dict(self.questions)
        for name, value in given.items():
            if name in questions:
                choices = questions[name].choices
                if choices and value not in choices:
                    raise ValueError(f"{_argument(name, value)} is not possible for {self.name} ({self.source}); "
                                     f"it can be {' or '.join(map(str, choices))}")
                fields[name] = value
                del questions[name]
            elif name in fields and not same_field(name, fields[name], value):
                raise ValueError(f"{_argument(name, value)} disagrees with the file: {self.name} "
                                 f"({self.source}) has {name}={fields[name]!r}; drop the argument or pick another RNN")
            else:
                fields[name] = value
        return self.replace(fields=fields, questions=questions)

    @property
    def config(self) -> RNNConfig:
        """The complete configuration, from the fields and the defaults of unanswered questions.

        Raises:
            ValueError: a field the file cannot tell was not given (naming the argument to pass), or
                the fields do not form a valid configuration.
        """
        by_reason: dict[str, list[str]] = {}  # the open questions, one sentence per reason
        for name, question in self.questions.items():
            if question.default is None:
                by_reason.setdefault(question.reason, []).append(name)
        if by_reason:
            raise ValueError(f"{self.name} ({self.source}): " + "; ".join(
                f"{reason}: pass {', '.join(self.questions[name].options(name) for name in names)}"
                for reason, names in by_reason.items()))
        fields = known_fields(self)
        missing = [name for name in CONFIG_FIELDS if name not in fields]
        if missing:
            raise ValueError(f"{self.name} ({self.source}): the file does not tell {missing}; pass "
                             + ", ".join(f"{name}={name.upper()}" for name in missing))
        try:
            return RNNConfig(**{name: fields[name] for name in CONFIG_FIELDS})
        except (TypeError, ValueError) as error:
            raise ValueError(f"{self.name} ({self.source}): invalid configuration: {error}") from None

    @property
    def complete(self) -> bool:
        """Whether every config field is known (so :attr:`config` can be built)."""
        return set(CONFIG_FIELDS) <= set(known_fields(self))

    # -- conversion ------------------------------------------------------------------------------
    def to_params(self, *, allow_approximation: bool = False) -> Converted:
        """The cuDNN params buffer of these weights; ``allow_approximation`` accepts a conversion that changes the
        function (the result says what changed).

        Returns:
            ``Converted(value=params, approximations)``: ``params`` a fresh ``[params_size]``
            NumPy array of the tensors' dtype, in the layout of :attr:`config`.

        Raises:
            ValueError: a question is unanswered, or the weights cannot become cuDNN params
                (:attr:`refusal`).
            InexactConversionError: the conversion changes the function and approximations
                were not allowed.
        """
        if self.refusal:
            raise ValueError(f"{self.name} ({self.source}): {self.refusal}")
        config = self.config
        if self.fmt == PARAMS_FORMAT:
            params = self.tensors["params"]
            check_params(params, config)
            return Converted(np.array(params))
        return from_format(self.fmt, self.tensors, config, allow_approximation=allow_approximation)

    def to_layer(self, *, xp: types.ModuleType | None = None, allow_approximation: bool = False) -> RecurrentLayer:
        """A trainable layer holding these weights: ``RecurrentLayer.from_params(self.to_params().value,
        self.config, xp=xp)``, a :class:`cudnn_rnn.LSTM`, :class:`cudnn_rnn.GRU` or :class:`cudnn_rnn.RNN` as the
        mode says, on the array module ``xp`` (numpy, the default, or cupy); raises as :meth:`to_params`."""
        params = self.to_params(allow_approximation=allow_approximation).value
        return RecurrentLayer.from_params(params, self.config, xp=xp)

    def conversion(self) -> str:
        """How these weights become cuDNN params: ``"exact"``, ``"approximate: ..."`` (what would change),
        ``"refused: ..."`` (why not) or ``"needs: ..."`` (the arguments to pass)."""
        if self.refusal:
            return f"refused: {self.refusal}"
        try:
            self.to_params()  # (incomplete: its config's ValueError names the arguments to pass)
        except InexactConversionError as error:
            return "approximate: " + str(error).split(" Pass allow_approximation")[0]
        except (TypeError, ValueError) as error:
            return f"refused: {one_line(error)}" if self.complete else "needs: " + str(error).split(": ", 1)[-1]
        return "exact"

    def describe(self) -> str:
        """The configuration as far as the file tells it, in one line: ``"rnn_mode=lstm, num_layers=1, ..."``,
        ``?`` marking what the file does not tell (after a default: assumed, as ``direction=unidirectional?``)."""
        parts = []
        for name in CONFIG_FIELDS:
            if name in self.fields:
                parts.append(f"{name}={self.fields[name]}")
            elif name in self.questions:
                default = self.questions[name].default
                parts.append(f"{name}=?" if default is None else f"{name}={default}?")
        return ", ".join(parts)


def known_fields(found: FoundRNN) -> dict[str, Any]:
    """The fields ``found`` tells, with the defaults of its questions where they have one."""
    defaults = {name: question.default for name, question in found.questions.items() if question.default is not None}
    return {**defaults, **found.fields}


def same_field(name: str, a: Any, b: Any) -> bool:
    """Whether two values of config field ``name`` say the same (dtype names and objects alike)."""
    if name == "dtype":
        try:
            return dtype_name(a) == dtype_name(b)
        except TypeError:
            return False
    if name == "input_mode" and "auto_select" in (a, b):
        return True  # auto_select resolves to what the sizes say; RNNConfig checks the rest
    return bool(a == b)


#: what the command line assumes for fields no file of a format tells
DEFAULTS: dict[str, Any] = {"direction": "unidirectional", "num_proj": 0, "input_mode": "linear_input"}


def questions_for_all(reason: str) -> dict[str, Question]:
    """A question for every field but dtype (the sizes of a bare buffer, say), with the
    command line's defaults for direction, num_proj and input_mode."""
    return {name: Question((), reason, DEFAULTS.get(name)) for name in CONFIG_FIELDS if name != "dtype"}


# ---- what every reader shares --------------------------------------------------------------------
#: the note on an RNN whose bfloat16 weights were read as float32 (every bfloat16 value is a float32 one)
BFLOAT16_NOTE = "the tensors are bfloat16: read as float32, exactly"


def check_declared_size(path: str, name: str, shape: tuple[int, ...], itemsize: int, stored_bytes: int,
                        compressed: bool) -> int:
    """Refuse tensor ``name`` of ``path`` if its declared ``shape`` (non-negative ints) of ``itemsize``-byte
    elements needs more than the ``stored_bytes`` the file stores for it (when ``compressed``, deflated: at
    most :data:`MAX_COMPRESSION_RATIO` times smaller than the data); returns its size in bytes.

    Raises:
        FileReadError: a negative or non-integer dimension, or more data declared than stored.
    """
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise FileReadError(path, f"tensor {name!r} declares an invalid shape {tuple(shape)}")
    declared = math.prod(int(d) for d in shape) * int(itemsize)
    if (decompression_bomb(declared, stored_bytes) if compressed else declared > stored_bytes):
        raise FileReadError(
            path, f"tensor {name!r} declares shape {tuple(int(d) for d in shape)} ({declared} bytes) but the file "
                  f"stores only {stored_bytes} bytes for it: the file is truncated or corrupt")
    return declared


def common_dtype(tensors: Mapping[str, Any], what: str) -> str:
    """The one float dtype (name) of ``tensors``; TypeError naming the tensor whose dtype differs."""
    if not tensors:
        raise ValueError(f"{what}: no tensors")
    majority = shared_dtype({name: str(tensor.dtype) for name, tensor in tensors.items()}, f"{what}: ")
    return dtype_name(majority, f"{what}: the tensors' dtype")


def shared_dtype(dtypes: Mapping[str, str], opening: str) -> str:
    """The dtype most of ``dtypes`` (tensor -> dtype name) have; TypeError, the message after ``opening``,
    naming a tensor whose dtype differs."""
    values = list(dtypes.values())
    majority = max(values, key=values.count)
    odd = next((name for name, dtype in dtypes.items() if dtype != majority), None)
    if odd is not None:
        raise TypeError(f"{opening}tensors must share one dtype; tensor {odd!r} is {dtypes[odd]} "
                        f"while the others are {majority}")
    return majority
