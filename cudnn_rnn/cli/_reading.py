"""How ``cudnn-rnn inspect`` and ``cudnn-rnn convert`` read their input: the reading options, the
configuration overrides, and :func:`read_found`, which reads the file as they say."""

from __future__ import annotations

import argparse
from typing import Any

from ..config import DIRECTIONS, INPUT_MODES, MODES
from ..formats import FORMATS
from ..convert.readers import CONFIG_FIELDS, PARAMS_FORMAT, FoundRNN, one_line, read_file

__all__ = ["CLI_FORMATS", "CommandError", "add_reading_arguments", "hints_from", "read_found"]

#: --from / --to choices: the opaque buffer, then every named format
CLI_FORMATS: tuple[str, ...] = (PARAMS_FORMAT,) + FORMATS


class CommandError(Exception):
    """A problem with the command's input, reported as one line and exit status 2."""


def add_reading_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say how to read a file and the configuration overrides."""
    reading = parser.add_argument_group("reading the input")
    reading.add_argument("--from", dest="source_format", choices=CLI_FORMATS, metavar="FORMAT",
                         help="format of the named tensors in an .npz IN (default: from the tensor names); "
                              "other files say their own format")
    reading.add_argument("--key", help="PyTorch checkpoint dict: the entry holding the state_dict (e.g. model)")
    reading.add_argument("--prefix", help="PyTorch: the key prefix of the RNN in a parent module (e.g. rnn.)")
    reading.add_argument("--trust-pickle", action="store_true",
                         help="PyTorch: unpickle a whole saved module (this RUNS CODE from the file: only for files "
                              "you trust; save model.state_dict() instead where you can)")
    config = parser.add_argument_group(
        "configuration overrides (read from the file; checked against it; needed only where it cannot tell)")
    config.add_argument("--rnn-mode", choices=tuple(MODES))
    config.add_argument("--num-layers", type=int, metavar="L")
    config.add_argument("--num-units", type=int, metavar="N")
    config.add_argument("--input-size", type=int, metavar="I")
    config.add_argument("--direction", choices=tuple(DIRECTIONS))
    config.add_argument("--num-proj", type=int, metavar="P", help="LSTM projection size (0: none)")
    config.add_argument("--input-mode", choices=INPUT_MODES)


def hints_from(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration overrides given on the command line (None: not given)."""
    return {name: getattr(args, name, None) for name in CONFIG_FIELDS if name != "dtype"}


def read_found(args: argparse.Namespace) -> list[FoundRNN]:
    """Every RNN in ``args.input``, read as the reading options say (CommandError on failure)."""
    try:
        return read_file(args.input, key=args.key, prefix=args.prefix, trust_pickle=args.trust_pickle,
                         fmt=args.source_format)
    except (ValueError, TypeError) as error:
        raise CommandError(one_line(error)) from None
