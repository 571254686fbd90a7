"""List the RNNs in a model file: name, configuration, params size, and how they convert.

``cudnn-rnn inspect [--json] [reading options] [overrides] FILE``

For each RNN :func:`cudnn_rnn.convert.read_file` finds::

    1. lstm_1 (Keras 3 LSTM, format keras)
       rnn_mode=lstm, num_layers=1, num_units=64, input_size=16, ..., dtype=float32
       params: 20992 elements; to cuDNN params: exact
       stacks on: lstm

"stacks on" names the RNN whose output feeds this one where ``convert --stack`` accepts the two
as one network; where it does not, "input from" names it and says why they do not stack.
"?" marks a field the file does not tell (with a default after it, the value assumed); the
conversion line then says which flag to pass. ``--json`` prints the same as a JSON list.
Exit status 2 when the file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..convert.readers import FoundRNN, stack_problem
from ..layout import params_size
from ._flags import error_line, in_flags
from ._reading import CommandError, add_reading_arguments, hints_from, read_found

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``inspect``'s arguments to ``parser``, the ``inspect`` subparser."""
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of text")
    add_reading_arguments(parser)
    parser.add_argument("input", metavar="FILE", help="the model file to read")


def describe_found(found: FoundRNN, below: FoundRNN | None = None) -> dict[str, Any]:
    """What ``inspect`` reports for one RNN, as JSON-ready data.

    Args:
        found: one RNN that :func:`cudnn_rnn.convert.read_file` found, with the overrides applied.
        below: the RNN of the same file whose output feeds ``found`` (``found.feeds_from``), if any.

    Returns:
        ``{"name", "source", "format", "configuration", "unknown", "params_size", "conversion",
        "notes", "input_from", "stacks_on", "no_stack"}``: ``configuration`` the fields the file
        tells, ``unknown`` the question for each field it does not (in flags), ``params_size`` the
        number of elements of the cuDNN params buffer (None when the configuration is incomplete
        or refused), ``conversion`` how the RNN converts to cuDNN params, ``input_from`` the RNN
        whose output feeds it (None for none), ``stacks_on`` that RNN where ``convert --stack``
        accepts the pair (else None), ``no_stack`` why it does not (else None).
    """
    try:
        size = params_size(found.config) if found.complete and not found.refusal else None
    except ValueError:  # the fields do not form a valid configuration: conversion() says why
        size = None
    problem = stack_problem(below, found) if below is not None else None
    return {
        "name": found.name,
        "source": found.source,
        "format": found.fmt,
        "configuration": dict(found.fields),
        "unknown": {name: in_flags(question.options(name)) for name, question in found.questions.items()},
        "params_size": size,
        "conversion": in_flags(found.conversion()),
        "notes": list(found.notes),
        "input_from": found.feeds_from,
        "stacks_on": found.feeds_from if found.feeds_from and not problem else None,
        "no_stack": problem,
    }


def _text(index: int, report: dict[str, Any], found: FoundRNN) -> list[str]:
    size = "?" if report["params_size"] is None else f"{report['params_size']} elements"
    lines = [f"{index}. {found.name} ({found.source}, format {found.fmt})",
             f"   {found.describe()}",
             f"   params: {size}; to cuDNN params: {report['conversion']}"]
    lines += [f"   note: {note}" for note in found.notes]
    if report["stacks_on"]:
        lines.append(f"   stacks on: {report['stacks_on']}")
    elif report["input_from"]:
        lines.append(f"   input from: {report['input_from']} (they do not stack: {report['no_stack']})")
    return lines


def run(args: argparse.Namespace) -> int:
    """Run ``cudnn-rnn inspect`` on ``args`` (as :func:`add_arguments` sets them up): print every RNN of the file
    (text, or a JSON list with ``--json``). The exit status: 0, or 2 when the file cannot be read (the one-line
    message on stderr)."""
    try:
        found = [item.with_hints(**hints_from(args)) for item in read_found(args)]
    except (CommandError, ValueError, TypeError) as error:
        print(error_line("inspect", error), file=sys.stderr)
        return 2
    by_name = {item.name: item for item in found}
    reports = [describe_found(item, by_name.get(item.feeds_from or "")) for item in found]
    if args.json:
        print(json.dumps(reports, indent=2, default=str))
        return 0
    print(f"{args.input}: {len(found)} RNN(s)")
    for index, (report, item) in enumerate(zip(reports, found), start=1):
        print("\n".join(_text(index, report, item)))
    if any(report["stacks_on"] for report in reports):
        print("consecutive layers stack into one network: cudnn-rnn convert --name A --name B ... (or --stack)")
    return 0
