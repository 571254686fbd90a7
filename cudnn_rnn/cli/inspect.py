"""List the RNNs in a model file: name, configuration, params size, and how they convert.

``cudnn-rnn inspect [--json] [reading options] [overrides] FILE``

For each RNN :func:`cudnn_rnn.convert.read_file` finds::

    1. lstm_1 (Keras 3 LSTM, format keras)
       rnn_mode=lstm, num_layers=1, num_units=64, input_size=16, ..., dtype=float32
       params: 20992 elements; to cuDNN params: exact
       stacks on: lstm

"?" marks a field the file does not tell (with a default after it, the value assumed); the
conversion line then says which flag to pass. ``--json`` prints the same as a JSON list.
Exit status 2 when the file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..convert.readers import FoundRNN
from ..layout import params_size
from ._flags import error_line, in_flags
from ._reading import CommandError, add_reading_arguments, hints_from, read_found

__all__ = ["add_arguments", "run", "describe_found"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``inspect``'s arguments to ``parser``.

    Args:
        parser: the ``inspect`` subparser.
    """
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of text")
    add_reading_arguments(parser)
    parser.add_argument("input", metavar="FILE", help="the model file to read")


def describe_found(found: FoundRNN) -> dict[str, Any]:
    """What ``inspect`` reports for one RNN, as JSON-ready data.

    Args:
        found: one RNN that :func:`cudnn_rnn.convert.read_file` found, with the overrides applied.

    Returns:
        ``{"name", "source", "format", "configuration", "unknown", "params_size", "conversion",
        "notes", "stacks_on"}``: ``configuration`` the fields the file tells, ``unknown`` the
        question for each field it does not (in flags), ``params_size`` the number of elements
        of the cuDNN params buffer (None when the configuration is incomplete or refused),
        ``conversion`` how the RNN converts to cuDNN params, ``stacks_on`` the RNN it feeds
        from (None for none).
    """
    try:
        size = params_size(found.config) if found.complete and not found.refusal else None
    except ValueError:  # the fields do not form a valid configuration: conversion() says why
        size = None
    return {
        "name": found.name,
        "source": found.source,
        "format": found.fmt,
        "configuration": dict(found.fields),
        "unknown": {name: in_flags(question.options(name)) for name, question in found.questions.items()},
        "params_size": size,
        "conversion": in_flags(found.conversion()),
        "notes": list(found.notes),
        "stacks_on": found.feeds_from,
    }


def _text(index: int, report: dict[str, Any], found: FoundRNN) -> list[str]:
    size = "?" if report["params_size"] is None else f"{report['params_size']} elements"
    lines = [f"{index}. {found.name} ({found.source}, format {found.fmt})",
             f"   {found.describe()}",
             f"   params: {size}; to cuDNN params: {report['conversion']}"]
    lines += [f"   note: {note}" for note in found.notes]
    if found.feeds_from:
        lines.append(f"   stacks on: {found.feeds_from}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Run ``cudnn-rnn inspect``: print every RNN of the file (text, or a JSON list with ``--json``).

    Args:
        args: the command line parsed by a parser that :func:`add_arguments` set up.

    Returns:
        The exit status: 0, or 2 when the file cannot be read (the one-line message on stderr).
    """
    try:
        found = [item.with_hints(**hints_from(args)) for item in read_found(args)]
    except (CommandError, ValueError, TypeError) as error:
        print(error_line("inspect", error), file=sys.stderr)
        return 2
    reports = [describe_found(item) for item in found]
    if args.json:
        print(json.dumps(reports, indent=2, default=str))
        return 0
    print(f"{args.input}: {len(found)} RNN(s)")
    for index, (report, item) in enumerate(zip(reports, found), start=1):
        print("\n".join(_text(index, report, item)))
    chains = [item for item in found if item.feeds_from]
    if chains:
        print("consecutive layers stack into one network: cudnn-rnn convert --name A --name B ... (or --stack)")
    return 0
