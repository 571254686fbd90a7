"""The layer classes' one constructor: its arguments, what each means, and which class takes which.

Which class takes which argument is the rule :class:`~cudnn_rnn.layers.RecurrentLayer` states (a mode
chosen by an argument of the class's own: :class:`ModeArgument`); a class's signature (``inspect.signature``,
``help``) and the ``Args`` and ``Raises`` of its docstring are built here from the base's signature and
one table of meanings (:data:`_MEANINGS`)::

    method_signature(RecurrentLayer._build)               -> the base's inspect.Signature
    class_signature(base, modes, mode_argument, defaults) -> a subclass's
    class_doc(doc, signature, mode_argument)              -> its docstring, Args and Raises added
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from typing import Callable, Mapping

__all__ = ["ModeArgument", "method_signature", "class_signature", "class_doc"]


@dataclass(frozen=True)
class _Meaning:
    """One constructor argument: its ``Args`` entry, and the modes it serves (every mode: ``()``)."""

    doc: str
    modes: tuple[str, ...] = ()


#: argument -> what it means, in the docstrings of every class that takes it
_MEANINGS: dict[str, _Meaning] = {
    "input_size": _Meaning("I, the width of each input step."),
    "num_units": _Meaning("N, the width of each cell's state."),
    "num_layers": _Meaning("L, the number of stacked layers."),
    "rnn_mode": _Meaning('``"lstm"``, ``"gru"``, ``"rnn_tanh"`` or ``"rnn_relu"``.'),
    "bidirectional": _Meaning("D = 2 if True."),
    "num_proj": _Meaning("P < N to project an LSTM's emitted state (0: none).", ("lstm",)),
    "dropout": _Meaning("in [0, 1), on the outputs of every layer but the last, while training."),
    "input_mode": _Meaning('``"linear_input"``, ``"skip_input"`` (needs I == N) or ``"auto_select"``.'),
    "dtype": _Meaning('``"float16"``, ``"float32"``, ``"float64"`` or ``"bfloat16"`` (or that NumPy dtype; '
                      "bfloat16 is ``ml_dtypes.bfloat16`` and computes in float32)."),
    "xp": _Meaning("numpy (the default; reference backend) or cupy (cuDNN)."),
    "seed": _Meaning("initialisation and dropout seed (a C int)."),
    "unit_forget_bias": _Meaning("put 1.0 in an LSTM's forget-gate recurrent bias bR_f (bW_f stays 0).",
                                 ("lstm",)),
    "algo": _Meaning('cuDNN\'s algorithm (``"standard"``, the persistent ones or ``"auto"``; see '
                     ":data:`cudnn_rnn.config.ALGOS`); the same math whichever runs."),
}

#: what every constructor raises; ``{mode}`` is where a class with a mode argument names it
_RAISES: dict[str, str] = {
    "TypeError": "a flag that is not a bool, a size that is not an integer, an unsupported dtype, or an ``xp`` "
                 "that is not numpy or cupy.",
    "ValueError": "{mode}an unknown mode string, a size that is not positive or above a C int, a params buffer no "
                  "array can hold, or an impossible combination (see :class:`cudnn_rnn.RNNConfig`).",
    "MemoryError": "a params buffer (or its gradient) that an array can hold but this machine cannot allocate; the "
                   "message names the sizes (``num_layers``, ...) and the bytes needed (a buffer too big is refused "
                   "at once, before any layer is initialised).",
}


@dataclass(frozen=True)
class ModeArgument:
    """The argument by which a class of several modes is told which (``RNN``'s ``activation``).

    Each argument is kept as the attribute of the same name.

    Args:
        name: the argument's name.
        modes: its value -> rnn_mode; the first value is the default.
        doc: its ``Args`` entry.
    """

    name: str
    modes: Mapping[str, str]
    doc: str

    def mode(self, value: object) -> str:
        """The rnn_mode ``value`` names; a ValueError naming the argument for any other value."""
        if not isinstance(value, str) or value not in self.modes:
            raise ValueError(f"{self.name} must be one of {tuple(self.modes)}; got {value!r}")
        return self.modes[value]

    def parameter(self) -> inspect.Parameter:
        """The argument in a signature: keyword-only, a string, its first value by default."""
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=next(iter(self.modes)),
                                 annotation="str")


def method_signature(method: Callable[..., object]) -> inspect.Signature:
    """The signature of ``method`` less its first argument (``self``): the base's constructor."""
    signature = inspect.signature(method)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def class_signature(base: inspect.Signature, modes: tuple[str, ...], mode_argument: ModeArgument | None,
                    defaults: Mapping[str, object]) -> inspect.Signature:
    """A layer class's constructor signature, from the base's (which takes ``rnn_mode``).

    Args:
        base: the base's signature (``self`` left out).
        modes: the modes the class holds.
        mode_argument: how it is told which, where it holds several; None: its one mode (or,
            holding none of its own, any: ``rnn_mode``).
        defaults: argument -> the class's own default.

    Returns:
        The base's arguments that serve all of ``modes``, in its order, ``rnn_mode`` replaced by
        ``mode_argument`` (or left out), ``defaults`` applied.
    """
    parameters = []
    for parameter in base.parameters.values():
        if parameter.name == "rnn_mode" and (mode_argument or modes):  # a class of no modes takes any, by rnn_mode
            parameters += [mode_argument.parameter()] if mode_argument else []
        elif set(modes) <= set(_MEANINGS[parameter.name].modes or modes):
            parameters.append(parameter.replace(default=defaults.get(parameter.name, parameter.default)))
    return base.replace(parameters=parameters)


def class_doc(doc: str | None, signature: inspect.Signature, mode_argument: ModeArgument | None = None) -> str:
    """``doc`` (a class's docstring) with the ``Args`` of ``signature`` and the constructor's ``Raises`` added."""
    meanings = {name: meaning.doc for name, meaning in _MEANINGS.items()}
    if mode_argument is not None:
        meanings[mode_argument.name] = mode_argument.doc
    mode = f"an unknown ``{mode_argument.name}``, " if mode_argument else ""
    args = _section("Args", {name: meanings[name] for name in signature.parameters})
    raises = _section("Raises", {name: text.format(mode=mode) for name, text in _RAISES.items()})
    return "\n\n".join([inspect.cleandoc(doc or ""), args, raises])


def _section(title: str, entries: Mapping[str, str]) -> str:
    """A Google-style docstring section: ``title:``, then ``name: text`` per entry, wrapped."""
    return "\n".join([f"{title}:"] + [textwrap.fill(f"{name}: {text}", 100, initial_indent="    ",
                                                     subsequent_indent="        ", break_on_hyphens=False)
                                       for name, text in entries.items()])
