"""What a layer's ``load`` says when it is given a model file instead of a params file.

    model_file_hint("gru.pt", wanted="LSTM", classes={"lstm": "LSTM", "gru": "GRU", ...})
    -> ". It is a PyTorch file (torch.save), a model file holding a GRU (PyTorch nn.GRU state_dict: rnn_mode=gru,
       num_layers=1, num_units=4, ...), not an LSTM: load the RNN it holds with
       cudnn_rnn.convert.read_file('gru.pt')[0].to_layer(), or convert it ... `cudnn-rnn convert gru.pt OUT.npz`"

Naming the RNNs a file holds takes :func:`cudnn_rnn.convert.read_file`, which sits above the layers
(it builds them): the package hands it in once (:func:`read_model_files_with`), so that the layers
never import ``convert``. Without it (the layers used alone) the hint names the file's kind only.
"""

from __future__ import annotations

import shlex
import zipfile
from typing import Callable, Mapping, Sequence

__all__ = ["HeldRNN", "model_file_hint", "read_model_files_with"]

#: what a model file holds, one RNN each: (where it comes from, e.g. "PyTorch nn.GRU state_dict", its rnn_mode
#: or None where the file leaves it open, its configuration in words, e.g. "rnn_mode=gru, num_layers=1, ...")
HeldRNN = tuple[str, "str | None", str]

_reader: list[Callable[[str], Sequence[HeldRNN]]] = []  # the one reader handed in, if any


def read_model_files_with(reader: Callable[[str], Sequence[HeldRNN]]) -> None:
    """Name the RNNs of model files with ``reader`` from now on (the package calls this once, lazily importing
    ``cudnn_rnn.convert`` inside ``reader``)."""
    _reader[:] = [reader]


def _held(path: str) -> Sequence[HeldRNN]:
    """The RNNs ``path`` holds as the reader finds them; none where there is no reader or it refuses the file."""
    if not _reader:
        return ()
    try:
        return _reader[0](path)
    except (ValueError, TypeError, OSError, KeyError, IndexError, RecursionError, zipfile.BadZipFile):
        return ()


def _a(name: str) -> str:
    """``name`` with its article, as it is read aloud: "an LSTM", "a GRU", "an RNN"."""
    return f"{'an' if name[:1] in 'AEFHILMNORSX' else 'a'} {name}"


def model_file_hint(path: str, wanted: str | None, classes: Mapping[str, str]) -> str:
    """What to say after "not a params file" when ``path`` is a model file that
    :func:`cudnn_rnn.convert.read_file` reads (``""`` when it is not): its kind, the RNNs it holds
    (``classes``: each rnn_mode's layer class, by name), that none is a ``wanted`` (the class whose
    ``load`` was called; None for any), and how to load its RNN.

    An .npz is such a file where its members' names are a format's or a parent module's torch names, as
    the .npz reader tells them (:func:`~cudnn_rnn.formats.guess_format`). Asked only once a load has
    failed, so what it needs is imported here.
    """
    from ..files import MODEL_FILE_KINDS, model_file_kind

    try:
        kind = model_file_kind(path)
        if kind == "npz":
            from ..formats import PREFIXED_TORCH_NAME, guess_format

            with zipfile.ZipFile(path) as archive:
                names = [name.removesuffix(".npy") for name in archive.namelist()]
            if guess_format(names) is None and not any(PREFIXED_TORCH_NAME.search(name) for name in names):
                return ""
    except (ValueError, OSError, zipfile.BadZipFile):
        return ""
    held = [(classes.get(mode, "RNN") if mode else "RNN", source, fields) for source, mode, fields in _held(path)]
    holding = f" holding {'; '.join(f'{_a(name)} ({source}: {fields})' for name, source, fields in held)}" \
        if held else ""
    other = f", not {_a(wanted)}" if wanted and held and all(name != wanted for name, _, _ in held) else ""
    return (f". It is {MODEL_FILE_KINDS[kind]}, a model file{holding}{other}: load the RNN it holds with "
            f"cudnn_rnn.convert.read_file({path!r})[0].to_layer(), or convert it to a params file with "
            f"`cudnn-rnn convert {shlex.quote(path)} OUT.npz`")
