"""The ``cudnn-rnn`` command: ``cudnn-rnn info``, ``cudnn-rnn inspect`` and ``cudnn-rnn convert``.

Run it as ``cudnn-rnn COMMAND ...`` or ``python -m cudnn_rnn COMMAND ...``. Each subcommand is a
module of this package exposing ``add_arguments(parser)`` and ``run(args) -> int``; :data:`COMMANDS`
lists them and :func:`main` wires them together.
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Sequence

from . import convert, info, inspect

__all__ = ["main", "build_parser", "COMMANDS", "SUBCOMMANDS"]

#: (subcommand, its module, one-line help), in the order ``cudnn-rnn --help`` lists them
COMMANDS: tuple[tuple[str, ModuleType, str], ...] = (
    ("info", info, "show the cuDNN, CUDA and GPU versions and which backends are usable"),
    ("inspect", inspect, "list the RNNs in a model file, their configurations and conversions"),
    ("convert", convert, "convert the RNN weights of a model file into cuDNN params or another format"),
)

#: subcommand name -> (module path, one-line help): :data:`COMMANDS` looked up by name
SUBCOMMANDS: dict[str, tuple[str, str]] = {name: (module.__name__, help_text) for name, module, help_text in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    """The ``cudnn-rnn`` parser: one subparser per entry of :data:`COMMANDS`, described by the first line of its
    module's docstring, with the module's ``run`` as its ``run`` default."""
    parser = argparse.ArgumentParser(prog="cudnn-rnn", description="cuDNN fused RNNs for CuPy and NumPy.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_text in COMMANDS:
        doc = (module.__doc__ or help_text).strip()
        sub = subparsers.add_parser(name, help=help_text, description=doc.splitlines()[0],
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cudnn-rnn`` (the console script's entry point).

    Args:
        argv: the arguments after the command's name, e.g. ``["convert", "IN", "OUT"]``;
            ``sys.argv[1:]`` when None.

    Returns:
        The exit status: the subcommand's (0 on success, 2 for refused input), or 2, after the
        help, when no subcommand is given. argparse itself exits with status 2 on unknown flags.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    return int(args.run(args) or 0)

