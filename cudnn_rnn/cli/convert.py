"""Convert the RNN weights of a model file into cuDNN params or another framework's format.

``cudnn-rnn convert [--to FORMAT] [--name NAME ...] [overrides] IN OUT``
``cudnn-rnn convert IN OUT --into MODEL [--prefix PREFIX | --name LAYER ...]``

IN is any file :func:`cudnn_rnn.convert.read_file` reads (Keras .keras/.weights.h5/.h5, PyTorch
.pt, ONNX, TensorFlow checkpoints, .npz); its kind comes from its content and the configuration
from its tensors, so no size needs typing. Configuration flags are overrides: checked against
what the file says, and needed only where the file cannot tell (the command asks for the one
flag that is missing, by name). OUT's name chooses the container, in the form its framework loads
as it is (:func:`cudnn_rnn.convert.write_file`), and ``--to`` defaults to that framework's format:

* ``.npz``: a params file (params + configuration, see :mod:`cudnn_rnn.params_file`) that
  ``cudnn_rnn.LSTM.load`` etc. read directly; ``--to FORMAT`` writes that format's named tensors
  (not bfloat16 ones, which an ``.npz`` cannot name).
* ``.pt``/``.pth``: a ``torch.save``-d state_dict (``--to torch``, the default; needs torch).
* ``.safetensors``: the same state_dict in a safetensors file (no pickle; needs nothing).
* ``.keras``: a Keras 3 model (``keras.saving.load_model`` loads it); ``.weights.h5``: its weights
  (``--to keras``; needs h5py).
* ``.onnx``: a runnable ONNX model (``--to onnx``; needs onnx).

An OUT whose container cannot hold ``--to``'s format is refused, naming both. One that holds it, but
not as its framework loads it (``--to keras`` into a ``.pt``, which ``nn.LSTM.load_state_dict`` would
refuse), is written with a ``note:`` line naming the ``--to`` that framework loads.

``--into MODEL`` writes OUT as a copy of the user's own model file MODEL in which the converted
RNN's tensors replace those of MODEL's RNN (one Keras layer per network layer), inferred where
MODEL leaves no doubt (:func:`cudnn_rnn.convert.write_into`); IN must then hold one RNN (or
``--stack`` its layers). A MODEL whose other tensors share storage with the RNN's (tied weights,
views) is refused, naming both, unless ``--change-shared`` lets them take the new values.

The command refuses unreadable or mismatched input with one message line and exit status 2,
never writes over its input, and replaces an existing output only with ``--force``. An OUT it
cannot write (its folder missing, a folder in its place, permission denied, no space left) is
reported the same way, naming OUT, and leaves no file behind.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import Callable, Sequence

from ..files import ONNX
from ..config import RNNConfig
from ..convert.into import write_into
from ..convert.onnx_export import DEFAULT_OPSET
from ..convert.readers import PARAMS_FORMAT, FoundRNN, choose, listing, one_line
from ..convert.saving import (CONTAINERS, Container, Written, container_of, layer_class_name, suffixes_for,
                               write_file)
from ..formats import FORMAT_SPECS, describe
from ._flags import error_line
from ._reading import CLI_FORMATS, CommandError, add_reading_arguments, hints_from, read_found

__all__ = ["add_arguments", "run", "main", "EXAMPLES"]

#: (what it does, the command line in lines): shown by ``--help`` and run by the tests
EXAMPLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a Keras model's only RNN -> cuDNN params (sizes read from the file; LSTM.load reads params.npz)",
     ("cudnn-rnn convert model.keras params.npz",)),
    ("the RNN under 'encoder.rnn.' in a PyTorch checkpoint {'model': state_dict, ...} -> cuDNN params",
     ("cudnn-rnn convert --key model --prefix encoder.rnn. checkpoint.pt params.npz",)),
    ("two stacked Keras layers as one 2-layer network, into a PyTorch nn.LSTM state_dict",
     ("cudnn-rnn convert --name lstm --name lstm_1 --to torch stacked.keras lstm.pt",)),
    ("an nn.RNN state_dict does not say tanh or relu: the one flag the file cannot tell",
     ("cudnn-rnn convert --rnn-mode rnn_relu rnn.pt params.npz",)),
    ("cuDNN params -> a runnable ONNX model (inputs X, sequence_lens, initial_h, initial_c)",
     ("cudnn-rnn convert --to onnx params.npz model.onnx",)),
    ("Keras GRU(reset_after=True) weights in an .npz -> a PyTorch nn.GRU state_dict, both as .npz",
     ("cudnn-rnn convert --from keras --to torch keras_gru.npz torch_gru.npz",)),
    ("TF GRUBlockCell -> cuDNN GRU: a different function (reset before), so it must be asked for",
     ("cudnn-rnn convert --from gru_block_cell --to params --allow-approximation block.npz gru_params.npz",)),
    ("a Keras model's RNN -> a PyTorch nn.LSTM state_dict in a safetensors file (no pickle)",
     ("cudnn-rnn convert model.keras lstm.safetensors",)),
    ("cuDNN params -> a Keras 3 model file that keras.saving.load_model loads as it is",
     ("cudnn-rnn convert params.npz lstm.keras",)),
    ("cuDNN params into the user's own PyTorch model: a copy with the RNN under 'encoder.rnn.' replaced",
     ("cudnn-rnn convert --into model.pt --prefix encoder.rnn params.npz tuned.pt",)),
    ("a bare params buffer holds no configuration: give it all",
     ("cudnn-rnn convert --from params --to torch --rnn-mode lstm --num-layers 2",
      "--num-units 32 --input-size 16 --direction bidirectional params.npz lstm.pt")),
)


def _epilog() -> str:
    lines = ["examples:"]
    for purpose, command in EXAMPLES:
        lines += [f"  # {purpose}", "  " + " \\\n      ".join(command), ""]
    lines += ["formats:",
              f"  {PARAMS_FORMAT:15} the opaque cuDNN params buffer (with its configuration in a params file)"]
    lines += [f"  {name:15} {spec.summary}" for name, spec in FORMAT_SPECS.items()]
    lines += ["", "`cudnn-rnn inspect IN` lists the RNNs a file holds and their configurations.",
              "Each format's tensor names, shapes and gate order are in the docstrings of cudnn_rnn.convert",
              "and its format modules."]
    return "\n".join(lines)


# ---- output files --------------------------------------------------------------------------------
def _out_problem(target: str) -> str | None:
    """Why OUT cannot be written, where that can be told without writing: its folder, or OUT a folder."""
    folder = os.path.dirname(target) or os.curdir
    try:
        if not stat.S_ISDIR(os.stat(folder).st_mode):
            return f"its folder {folder!r} is a file, not a folder"
        if os.path.isdir(target):
            return "it is a folder; give a file name"
    except FileNotFoundError:
        return f"its folder {folder!r} does not exist"
    except NotADirectoryError:
        return f"its folder {folder!r} does not exist (a part of its path is a file)"
    except OSError as error:
        return _reason(error)
    return None


def _reason(error: OSError) -> str:
    """What went wrong, in plain words: the error's strerror ("permission denied", "no space left on device")."""
    text = error.strerror or one_line(error)
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def _check_paths(source: str, target: str, force: bool) -> None:
    problem = _out_problem(target)
    if problem:
        raise CommandError(f"cannot write OUT {target!r}: {problem}")
    if os.path.lexists(target):
        try:
            same = os.path.exists(target) and os.path.exists(source) and os.path.samefile(source, target)
        except OSError as error:
            raise CommandError(f"cannot write OUT {target!r}: {_reason(error)}") from None
        if same:
            raise CommandError(f"output {target!r} is the input file (the same path, or a link to it); "
                               "choose another output")
        if not force:
            raise CommandError(f"output {target!r} already exists; pass --force to replace it")


def _writing(target: str, write: Callable[[], Written]) -> Written:
    """``write()``; an OSError (permission, disk full, a folder gone) as one line naming OUT, a refusal as one line."""
    try:
        return write()
    except OSError as error:
        raise CommandError(f"cannot write OUT {target!r}: {_out_problem(target) or _reason(error)}") from None
    except (ValueError, TypeError, ImportError) as error:
        raise CommandError(one_line(error)) from None


# ---- reading -------------------------------------------------------------------------------------
def read_and_choose(args: argparse.Namespace) -> tuple[FoundRNN, RNNConfig]:
    """``(found, config)``: the one RNN of ``args.input`` the command works on (chosen by ``name`` or ``stack``,
    with the overrides applied) and its complete configuration. With ``into``, ``name``, ``prefix`` and ``key``
    are MODEL's and IN is read without them. A CommandError (one message line) when the file cannot be read,
    names no such RNN, holds several without a choice, or does not tell a field that no flag gives."""
    into = getattr(args, "into", None) is not None
    found = read_found(argparse.Namespace(**{**vars(args), "key": None, "prefix": None}) if into else args)
    try:
        if into and len(found) > 1 and not args.stack:
            raise ValueError(f"IN holds {len(found)} RNNs ({listing(found)}); with --into, --name and --prefix "
                             "choose in MODEL: convert the one you want first (cudnn-rnn convert --name NAME IN "
                             "rnn.npz), or --stack them all")
        chosen = choose(found, () if into else args.name or (), stack_all=args.stack, hints=hints_from(args))
        return chosen, chosen.config
    except (ValueError, TypeError) as error:
        raise CommandError(one_line(error)) from None


# ---- the command ----------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``convert``'s arguments (and its examples, as the epilog) to ``parser``, the ``convert`` subparser."""
    parser.epilog = _epilog()
    defaults = ", ".join(f"{suffix} {container.default}" for suffix, container in CONTAINERS.items())
    parser.add_argument("--to", dest="target_format", default=None, choices=CLI_FORMATS, metavar="FORMAT",
                        help=f"format of OUT: {', '.join(CLI_FORMATS)} (default: OUT's own: {defaults})")
    choosing = parser.add_argument_group("choosing the RNN (when IN holds several; see cudnn-rnn inspect)")
    choosing.add_argument("--name", action="append", metavar="NAME",
                          help="the RNN to convert; repeat to stack consecutive layers into one network "
                               "(with --into: MODEL's Keras layer(s) to fill)")
    choosing.add_argument("--stack", action="store_true", help="stack every RNN of IN, in file order")
    add_reading_arguments(parser)
    into = parser.add_argument_group("into the user's own model (OUT: a copy of MODEL with the RNN replaced)")
    into.add_argument("--into", metavar="MODEL",
                      help="a torch.save or safetensors state_dict, or a Keras .keras/.weights.h5 file; never "
                           "modified. --prefix (torch, safetensors), --name (Keras) and --key then choose in MODEL")
    into.add_argument("--change-shared", action="store_true",
                      help="let the tensors of MODEL that share storage with the RNN (tied weights, views) take "
                           "the new values too; without it, such a MODEL is refused, naming both tensors")
    parser.add_argument("--allow-approximation", action="store_true",
                        help="accept a conversion that changes the function (e.g. cuDNN GRU <-> GRUBlockCell); "
                             "what changed is printed")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists (never the input)")
    onnx = parser.add_argument_group(f"ONNX model output (OUT ending in {ONNX})")
    onnx.add_argument("--batch-major", action="store_true", help="X, Y and states batch-major, as time_major=False")
    onnx.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
    parser.add_argument("input", metavar="IN", help="the model file to read")
    parser.add_argument("output", metavar="OUT", help=f"output file: its name chooses the container "
                                                      f"({', '.join(CONTAINERS)})")


def run(args: argparse.Namespace) -> int:
    """Run ``cudnn-rnn convert`` on ``args`` (as :func:`add_arguments` sets them up): read, convert, write, and
    print what was done. The exit status: 0 once OUT is written, else 2 (the module docstring says when)."""
    try:
        _run(args)
    except CommandError as error:
        print(error_line("convert", error), file=sys.stderr)
        return 2
    return 0


def _run(args: argparse.Namespace) -> None:
    container: Container | None = None  # OUT's, where OUT is written from scratch (not --into)
    if args.into is None:
        if args.change_shared:
            raise CommandError("--change-shared applies with --into MODEL only")
        try:
            container = container_of(args.output, "OUT")
        except ValueError as error:
            raise CommandError(str(error)) from None
        if args.target_format is not None and args.target_format not in container.formats:
            raise CommandError(f"OUT {args.output!r} is {container.description}, which holds the "
                               f"{' or '.join(container.formats)} format, not --to {args.target_format}: name OUT "
                               f"ending in {suffixes_for(args.target_format)}, or drop --to")
    else:
        if args.target_format is not None:
            raise CommandError("--to does not apply with --into: OUT is a copy of MODEL, in MODEL's own format")
        if args.batch_major or args.opset != DEFAULT_OPSET:
            raise CommandError("--batch-major and --opset apply to ONNX output, not with --into")
        _check_paths(args.into, args.output, args.force)
    _check_paths(args.input, args.output, args.force)
    found, config = read_and_choose(args)
    if args.into is None:
        written = _writing(args.output, lambda: write_file(
            args.output, found, args.target_format, allow_approximation=args.allow_approximation,
            time_major=not args.batch_major, opset=args.opset))
    else:
        written = _writing(args.output, lambda: write_into(
            args.into, args.output, found, prefix=args.prefix, name=args.name, key=args.key,
            allow_approximation=args.allow_approximation, change_shared=args.change_shared))
    parts = found.parts or (found,)
    formats = "+".join(dict.fromkeys(part.fmt for part in parts))
    print(f"converted {found.name} ({found.source}, format {formats}) -> {written.fmt} ({describe(config)}, "
          f"dtype={config.dtype})")
    print(f"read {sum(len(part.tensors) for part in parts)} tensor(s) from {args.input}; wrote {written.what} to "
          f"{args.output}")
    for note in found.notes:
        print(f"note: {note}")
    if container is not None and container.default_loader and written.fmt != container.default:
        loader = container.default_loader.format(layer=layer_class_name(config))
        print(f"note: {args.output} holds the {written.fmt} format's tensor names; {loader} loads --to "
              f"{container.default}")
    if written.approximations:
        print("approximated (the result computes a different function):")
        for sentence in written.approximations:
            print(f"  - {sentence}")
    else:
        print("exact: the result computes the same function")


def main(argv: Sequence[str] | None = None) -> int:
    """``cudnn-rnn convert`` alone: ``main(["IN", "OUT"])`` runs ``cudnn-rnn convert IN OUT`` (``argv``:
    ``sys.argv[1:]`` when None); returns its exit status."""
    from . import main as cudnn_rnn_main

    return cudnn_rnn_main(["convert", *(sys.argv[1:] if argv is None else argv)])
