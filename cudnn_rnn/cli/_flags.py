"""The library's Python arguments as the ``cudnn-rnn`` flags that give them, and the library's
messages spelt in those flags.

The library's messages name Python arguments; the command reports them in its own terms::

    pass fmt=FORMAT                                    pass --from FORMAT
    pick one with names=[NAME], ... or stack_all=True  pick one with --name NAME, ... or --stack
    pass rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'    pass --rnn-mode rnn_tanh or --rnn-mode rnn_relu
    num_layers=3 disagrees with the file: ... has      --num-layers 3 disagrees with the file: ... has
        num_layers=2; drop the argument ...                num_layers=2; drop the flag ...
    ... Pass allow_approximation=True to accept this.  ... Pass --allow-approximation to accept this.

An argument is ``name=VALUE`` for a name in :data:`FLAGS`, VALUE being ``True``, a quoted string,
a list, an integer or an upper-case placeholder (``KEY``), or nothing (``key=`` names the argument
itself). The configuration fields (``rnn_mode=``, ``num_units=`` ...) also spell the file's own
values ("has num_proj=0", "(num_proj=2)"), so those are translated only where a message asks for
them or names what was given: a message's opening argument, and the list after "pass". Every
other argument, and any bare ``name=``, is translated wherever it stands; "argument" becomes "flag".
"""

from __future__ import annotations

import re
import shlex

from ..convert.readers import CONFIG_FIELDS, one_line

__all__ = ["FLAGS", "in_flags", "error_line"]

#: Python argument (of read_file, choose, FoundRNN.with_hints, to_params, write_into) -> the flag that gives it
FLAGS: dict[str, str] = {
    "fmt": "--from",
    "key": "--key",
    "prefix": "--prefix",
    "trust_pickle": "--trust-pickle",
    "names": "--name",
    "stack_all": "--stack",
    "allow_approximation": "--allow-approximation",
    "change_shared": "--change-shared",
    "rnn_mode": "--rnn-mode",
    "num_layers": "--num-layers",
    "num_units": "--num-units",
    "input_size": "--input-size",
    "direction": "--direction",
    "num_proj": "--num-proj",
    "input_mode": "--input-mode",
}

# name=VALUE, or a bare name=; not inside a path or a quoted name ("/data/key=1", "'fmt=x'")
_ARGUMENT = (rf"(?<![\w./'-])({'|'.join(FLAGS)})="
             r"(?:(True|'[^']*'|\[[^\]]*\]|-?\d+|[A-Z][A-Z0-9_]*)(?![\w.])|(?![\w'\[-]))")
_ANY_ARGUMENT = re.compile(_ARGUMENT)
#: an argument opening the message, or after "pass", with those joined to it by ", " or " or "
_ASKED = re.compile(rf"(?:^|(?<=\b[Pp]ass )){_ARGUMENT}(?:(?:, | or ){_ARGUMENT})*")
_NOUN = re.compile(r"\bargument(s?)\b")


def _flag(match: re.Match[str]) -> str:
    """One argument as its flag(s): ``key='model'`` -> ``--key model``, ``names=[A, B]`` ->
    ``--name A --name B``, ``stack_all=True`` or ``key=`` -> ``--stack`` or ``--key``."""
    flag, value = FLAGS[match[1]], match[2]
    if value is None or value == "True":
        return flag
    if value.startswith("["):
        items = [item.strip().strip("'") for item in value[1:-1].split(",") if item.strip()]
        return " ".join(f"{flag} {shlex.quote(item)}" for item in items)
    if value.startswith("'"):
        value = shlex.quote(value[1:-1])
    return f"{flag} {value}"


def _flag_unless_a_value(match: re.Match[str]) -> str:
    """The flag, except for a configuration field with a value outside an argument's place (a fact)."""
    return match[0] if match[2] is not None and match[1] in CONFIG_FIELDS else _flag(match)


def in_flags(message: str) -> str:
    """``message`` with the Python arguments it names spelt as ``cudnn-rnn`` flags (see the module
    docstring); a message naming none is returned unchanged."""
    message = _ASKED.sub(lambda asked: _ANY_ARGUMENT.sub(_flag, asked[0]), message)
    return _NOUN.sub(r"flag\1", _ANY_ARGUMENT.sub(_flag_unless_a_value, message))


def error_line(command: str, error: BaseException) -> str:
    """The one line a command prints for ``error``: ``cudnn-rnn COMMAND: error: MESSAGE``, the message in flags.

    A file name or value inside the message that holds a newline or a control character (a file
    named ``"in\\n.npz"``) cannot break the line: they become spaces.
    """
    return f"cudnn-rnn {command}: error: {one_line(in_flags(str(error)), 4000)}"

