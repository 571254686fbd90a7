"""Convert the RNN weights of a model file into cuDNN params or another framework's format.

``cudnn-rnn convert [--to FORMAT] [--name NAME ...] [overrides] IN OUT``

IN is any file :func:`cudnn_rnn.convert.read_file` reads (Keras .keras/.weights.h5/.h5, PyTorch
.pt, ONNX, TensorFlow checkpoints, .npz); its kind comes from its content and the configuration
from its tensors, so no size needs typing. Configuration flags are overrides: checked against
what the file says, and needed only where the file cannot tell (the command asks for the one
flag that is missing, by name). OUT is written by its extension:

* ``.npz``: ``--to params`` (the default) writes a params file (params + configuration, see
  :mod:`cudnn_rnn.params_file`) that ``cudnn_rnn.LSTM.load`` etc. read directly; ``--to FORMAT``
  writes that format's named tensors (not bfloat16 ones, which an ``.npz`` cannot name).
* ``.pt``: the named tensors as a ``torch.save``-d state_dict (needs torch; bfloat16 stays
  ``torch.bfloat16``).
* ``.onnx``: a runnable ONNX model (``--to onnx``; needs onnx).

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
from typing import Any, Callable, Sequence

import numpy as np

from ..config import RNNConfig
from ..convert import FORMAT_SPECS, Converted, convert_between, to_format
from ..formats._core import describe
from ..convert.onnx_export import DEFAULT_OPSET, export_onnx
from ..convert.readers import PARAMS_FORMAT, FoundRNN, choose, one_line
from ..files import write_through_path
from ..params_file import STORED_BITS, write_params_file
from ._flags import error_line
from ._reading import CLI_FORMATS, CommandError, add_reading_arguments, hints_from, read_found

__all__ = ["add_arguments", "read_and_choose", "run", "main", "WRITERS", "EXAMPLES", "CLI_FORMATS"]

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
def _import(module: str, purpose: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise CommandError(f"{purpose} needs the '{module}' package: pip install {module}") from None


def _write_npz(path: str, tensors: dict[str, np.ndarray]) -> None:
    narrow = [name for name, value in tensors.items() if value.dtype.name in STORED_BITS]
    if narrow:  # np.savez would write anonymous void data
        raise TypeError(f"an .npz of named tensors cannot name bfloat16 (tensor {narrow[0]!r}); write a .pt "
                        f"(torch.bfloat16) or a params file (--to {PARAMS_FORMAT})")
    with open(path, "wb") as handle:  # numeric tensors: nothing to pickle, and no name taken for savez's flag
        np.savez(handle, allow_pickle=False, **tensors)


def _torch_tensor(torch: Any, value: np.ndarray) -> Any:
    """``value`` as a CPU tensor; bfloat16 through its bit patterns (torch takes no ml_dtypes array), exactly."""
    value = np.ascontiguousarray(value)
    if value.dtype.name == "bfloat16":
        return torch.from_numpy(value.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(value)


def _write_pt(path: str, tensors: dict[str, np.ndarray]) -> None:
    torch = _import("torch", "writing .pt files")
    torch.save({name: _torch_tensor(torch, value) for name, value in tensors.items()}, path)


#: output extension -> how named tensors are written (.onnx is export_onnx's model, written apart)
WRITERS: dict[str, Callable[[str, dict[str, np.ndarray]], None] | None] = {
    ".npz": _write_npz,
    ".pt": _write_pt,
    ".onnx": None,
}


def _output_extension(path: str) -> str:
    extension = os.path.splitext(path)[1].lower()
    if extension not in WRITERS:
        raise CommandError(f"OUT {path!r} must end in one of {tuple(WRITERS)}; got {extension or 'no extension'!r}")
    return extension


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


def _write(target: str, write: Callable[[str], None]) -> None:
    """``write_through_path(target, write)``; an OSError (permission, disk full, a folder gone) as one line."""
    try:
        write_through_path(target, write)
    except OSError as error:
        raise CommandError(f"cannot write OUT {target!r}: {_out_problem(target) or _reason(error)}") from None


# ---- reading -------------------------------------------------------------------------------------
def read_and_choose(args: argparse.Namespace) -> tuple[FoundRNN, RNNConfig]:
    """The one RNN of ``args.input`` the command works on, with the overrides applied, and its config.

    Args:
        args: the parsed command line (``input``, the reading options, ``name``, ``stack`` and
            the configuration overrides).

    Returns:
        ``(found, config)``: the chosen (or stacked) RNN and its complete configuration.

    Raises:
        CommandError: the file cannot be read, names no such RNN, holds several without a
            choice, or does not tell a field that no flag gives (one message line).
    """
    found = read_found(args)
    try:
        chosen = choose(found, args.name or (), stack_all=args.stack, hints=hints_from(args))
        return chosen, chosen.config
    except (ValueError, TypeError) as error:
        raise CommandError(one_line(error)) from None


# ---- the command ----------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``convert``'s arguments (and its examples, as the epilog) to ``parser``.

    Args:
        parser: the ``convert`` subparser, or a parser of its own (see :func:`main`).
    """
    parser.epilog = _epilog()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--to", dest="target_format", default=PARAMS_FORMAT, choices=CLI_FORMATS, metavar="FORMAT",
                        help=f"format of OUT: {', '.join(CLI_FORMATS)} (default {PARAMS_FORMAT})")
    choosing = parser.add_argument_group("choosing the RNN (when IN holds several; see cudnn-rnn inspect)")
    choosing.add_argument("--name", action="append", metavar="NAME",
                          help="the RNN to convert; repeat to stack consecutive layers into one network")
    choosing.add_argument("--stack", action="store_true", help="stack every RNN of IN, in file order")
    add_reading_arguments(parser)
    parser.add_argument("--allow-approximation", action="store_true",
                        help="accept a conversion that changes the function (e.g. cuDNN GRU <-> GRUBlockCell); "
                             "what changed is printed")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists (never the input)")
    onnx = parser.add_argument_group("ONNX model output (--to onnx with OUT ending in .onnx)")
    onnx.add_argument("--batch-major", action="store_true", help="X, Y and states batch-major, as time_major=False")
    onnx.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
    parser.add_argument("input", metavar="IN", help="the model file to read")
    parser.add_argument("output", metavar="OUT", help="output file (.npz, .pt, or .onnx for --to onnx)")


def _convert(found: FoundRNN, config: RNNConfig, target: str, allow: bool) -> Converted:
    """``found``'s weights in format ``target`` ("params": ``{"params": buffer}``)."""
    if target == PARAMS_FORMAT:
        converted = found.to_params(allow_approximation=allow)
        return Converted({PARAMS_FORMAT: converted.value}, converted.approximations)
    if found.fmt == PARAMS_FORMAT:
        return to_format(target, found.tensors[PARAMS_FORMAT], config, allow_approximation=allow)
    if found.refusal and found.fmt != target:
        raise ValueError(f"{found.name} ({found.source}): {found.refusal}")
    return convert_between(found.fmt, target, found.tensors, config, allow_approximation=allow)


def run(args: argparse.Namespace) -> int:
    """Run ``cudnn-rnn convert``: read, convert, write, and print what was done.

    Args:
        args: the command line parsed by a parser that :func:`add_arguments` set up.

    Returns:
        The exit status: 0 once OUT is written, 2 for any refused input, or an OUT that cannot be
        written (its folder is missing, permission denied, no space left): the one-line message on
        stderr, naming flags or OUT; nothing written, no partial file left.
    """
    try:
        _run(args)
    except CommandError as error:
        print(error_line("convert", error), file=sys.stderr)
        return 2
    return 0


def _run(args: argparse.Namespace) -> None:
    target = args.target_format
    out_extension = _output_extension(args.output)
    if out_extension == ".onnx" and target != "onnx":
        raise CommandError(f"a .onnx output is an ONNX model, written for --to onnx; got --to {target}")
    _check_paths(args.input, args.output, args.force)
    found, config = read_and_choose(args)
    try:
        if out_extension == ".onnx":
            params = _convert(found, config, PARAMS_FORMAT, args.allow_approximation)
            result = Converted(None, params.approximations)

            def write_model(path: str) -> None:  # (export_onnx returns the model too: not wanted here)
                export_onnx(params.value[PARAMS_FORMAT], config, path, time_major=not args.batch_major,
                            opset=args.opset)

            _write(args.output, write_model)
            written = f"an ONNX model ({config.num_layers} {_onnx_node(config)} node(s), opset {args.opset})"
        elif target == PARAMS_FORMAT and out_extension == ".npz":
            result = _convert(found, config, target, args.allow_approximation)
            _write(args.output, lambda path: write_params_file(path, result.value[PARAMS_FORMAT], config))
            layer_class = {"lstm": "LSTM", "gru": "GRU"}.get(config.rnn_mode, "RNN")
            written = f"a params file (params and configuration: cudnn_rnn.{layer_class}.load reads it)"
        else:
            result = _convert(found, config, target, args.allow_approximation)
            writer = WRITERS[out_extension]
            assert writer is not None  # only .onnx has no writer, and it is written above
            _write(args.output, lambda path: writer(path, result.value))
            written = f"{len(result.value)} tensor(s)"
    except (ValueError, TypeError, ImportError) as error:
        raise CommandError(one_line(error)) from None

    print(f"converted {found.name} ({found.source}, format {found.fmt}) -> {target} ({describe(config)}, "
          f"dtype={config.dtype})")
    print(f"read {len(found.tensors)} tensor(s) from {args.input}; wrote {written} to {args.output}")
    for note in found.notes:
        print(f"note: {note}")
    if result.approximations:
        print("approximated (the result computes a different function):")
        for sentence in result.approximations:
            print(f"  - {sentence}")
    else:
        print("exact: the result computes the same function")


def _onnx_node(config: RNNConfig) -> str:
    from ..formats._onnx import node_attributes

    return node_attributes(config)[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``cudnn-rnn convert`` alone: ``main(["IN", "OUT"])`` runs ``cudnn-rnn convert IN OUT``.

    Args:
        argv: the arguments after ``convert``; ``sys.argv[1:]`` when None.

    Returns:
        The exit status, as :func:`run`.
    """
    parser = argparse.ArgumentParser(prog="cudnn-rnn convert", description=(__doc__ or "").splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))

