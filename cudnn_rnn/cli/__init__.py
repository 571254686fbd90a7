"""The ``cudnn-rnn`` command: ``cudnn-rnn info``, ``cudnn-rnn inspect`` and ``cudnn-rnn convert``.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

__all__ = ["main", "SUBCOMMANDS"]

#: subcommand name -> (module path, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "info": ("cudnn_rnn.info", "show the cuDNN, CUDA and GPU versions and which backends are usable"),
    "inspect": ("cudnn_rnn.convert.inspect_cli", "list the RNNs in a model file, their configurations and conversions"),
    "convert": ("cudnn_rnn.convert.cli", "convert the RNN weights of a model file into cuDNN params or another format"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudnn-rnn", description="cuDNN fused RNNs for CuPy and NumPy.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or help_text).strip()
        sub = subparsers.add_parser(name, help=help_text, description=doc.splitlines()[0],
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
