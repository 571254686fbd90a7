"""One checkpoint: :func:`save` everything a training step depends on, :func:`load` it back, restore it.

A file holds one entry per key of :data:`CONTENTS_KEYS`, each what :func:`save` takes for it (a layer or
an optimiser as its ``state_dict()``), as a JSON text with the arrays beside it (``_tree``, ``_container``).
"""

from __future__ import annotations

import json
import os
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from .._arrays import Array, array_kind, copy_into
from .._checks import checked_count
from ..distributed import Communicator
from ..errors import CheckpointError
from ..files import PathLike, read_bytes, write_bytes
from ..files.params_file import parse_layer_state
from ..layers import RecurrentLayer
from ..optim import SGD, Adam
from . import _container
from ._tree import flatten, unflatten

__all__ = ["Checkpoint", "save", "load"]

#: the top-level keys of a checkpoint's contents
CONTENTS_KEYS: tuple[str, ...] = ("step", "layers", "optimizers", "arrays", "state")

#: optimiser kind -> class (what a checkpoint's optimiser entries may be)
OPTIMIZERS: dict[str, type[SGD | Adam]] = {cls.__name__: cls for cls in (SGD, Adam)}

#: group -> (whether a value belongs in it, what it must be): checked by save and by restore
GROUP_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "layers": (lambda value: isinstance(value, RecurrentLayer), "a cudnn_rnn layer (LSTM, GRU, RNN)"),
    "optimizers": (lambda value: isinstance(value, tuple(OPTIMIZERS.values())),
                   f"a cudnn_rnn.optim optimiser ({', '.join(OPTIMIZERS)})"),
    "arrays": (lambda value: array_kind(value) is not None, "a numpy.ndarray or cupy.ndarray"),
}


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint file holds, checked, on the host.

    Made by :func:`load` and :meth:`CheckpointManager.latest`; the constructor takes the attributes
    below, in their order.

    Attributes:
        path: the file it was read from.
        step: the step number it was saved under (:class:`CheckpointManager`), or None.
        layers: name -> a layer's state dict (``config`` fields, ``step``, ``params`` NumPy).
        optimizers: name -> an optimiser's state dict (arrays NumPy).
        arrays: name -> NumPy array.
        state: the caller's own values (arrays in it come back as NumPy arrays, tuples as lists).
    """

    path: str
    step: int | None
    layers: dict[str, dict[str, Any]]
    optimizers: dict[str, dict[str, Any]]
    arrays: dict[str, np.ndarray]
    state: dict[str, Any]

    def restore(self, *, layers: Mapping[str, RecurrentLayer] | None = None,
                optimizers: Mapping[str, SGD | Adam] | None = None, arrays: Mapping[str, Array] | None = None,
                keep_seeds: bool = False) -> None:
        """Copy the saved values into existing objects, in place (NumPy or CuPy, any device).

        Each group given must name exactly the entries the checkpoint holds; a group left out
        is not restored. Everything is checked before anything changes, so a refused restore
        leaves every object as it was.

        Args:
            layers: name -> layer, as :func:`save` takes them: params (in place), step and seed.
            optimizers: name -> optimiser, as :func:`save` takes them: step count, hyperparameters
                and state (in place).
            arrays: name -> NumPy or CuPy array of the saved shape and dtype, overwritten in place.
            keep_seeds: keep each layer's own dropout seed, as
                :meth:`~cudnn_rnn.layers.RecurrentLayer.load_state_dict`'s ``keep_seed`` does.

        Raises:
            ValueError: a group names other entries than the checkpoint holds, a layer of another
                configuration (each differing field named), a saved state that :func:`load` would
                refuse (the field named), the state of another kind of optimiser, or an array of
                another shape.
            TypeError: a group that is not a dict with str keys, an entry of the wrong kind (not a
                layer, optimiser or array), a saved hyperparameter of the wrong type, or an array of
                another dtype.
        """
        where = repr(self.path)
        loaders: list[Callable[[], None]] = []
        for name, layer in _matching("layers", layers, self.layers, where).items():
            what = f"checkpoint {where} layers[{name!r}]"
            loaders.append(layer.state_loader(self.layers[name], keep_seed=keep_seeds, where=what))
        for name, optimiser in _matching("optimizers", optimizers, self.optimizers, where).items():
            loaders.append(optimiser.state_loader(self.optimizers[name], where=f"checkpoint {where} "
                                                                               f"optimizers[{name!r}]"))
        for name, target in _matching("arrays", arrays, self.arrays, where).items():
            loaders.append(_array_loader(target, self.arrays[name], f"arrays[{name!r}]", where))
        for load in loaders:
            load()

    def layer(self, name: str, *, xp: types.ModuleType | None = None) -> RecurrentLayer:
        """:meth:`~cudnn_rnn.layers.RecurrentLayer.from_state_dict` of the saved layer ``name`` (one of
        :attr:`layers`) onto ``xp``, with that method's errors; a KeyError when there is no such layer."""
        if name not in self.layers:
            raise KeyError(f"checkpoint {self.path!r} holds no layer {name!r}; it holds {sorted(self.layers)}")
        parse_layer_state(self.layers[name], f"checkpoint {self.path!r} layers[{name!r}]")
        return RecurrentLayer.from_state_dict(self.layers[name], xp=xp)


def save(path: PathLike, *, layers: Mapping[str, RecurrentLayer] | None = None,
         optimizers: Mapping[str, SGD | Adam] | None = None, arrays: Mapping[str, Array] | None = None,
         state: Mapping[str, Any] | None = None, step: int | None = None) -> None:
    """Write a checkpoint to ``path`` atomically (a kill leaves the previous file whole).

    Args:
        path: the file to write; an existing file is replaced.
        layers: name -> layer (:class:`cudnn_rnn.LSTM`, :class:`cudnn_rnn.GRU`,
            :class:`cudnn_rnn.RNN`): its configuration, step and params.
        optimizers: name -> optimiser (:class:`cudnn_rnn.optim.SGD`, :class:`cudnn_rnn.optim.Adam`):
            its state dict.
        arrays: name -> NumPy or CuPy array of any shape (any other model arrays), stored on the host.
        state: the caller's own values: None, bool, int, float, str, lists, dicts with str keys,
            NumPy or CuPy arrays (a NumPy ``Generator``'s ``bit_generator.state`` is such a dict).
        step: a step number to store with it (the manager's), a non-negative integer.

    Raises:
        TypeError: a value of a kind that cannot be stored (not a layer, optimiser or array where
            one is expected, a dict key that is not a str, an array of another dtype than bool,
            integer, float16/32/64 or bfloat16), named by its place.
        ValueError: a value that cannot be stored as it is (a step that is not an integer in
            [0, 2**63), the reserved key ``"$array"``, an integer of more than 4000 digits), or a
            layer or optimiser whose state :func:`load` would refuse, named by its place.
    """
    contents: dict[str, Any] = {
        "step": _checked_step(step),
        "layers": {name: layer.state_dict() for name, layer in _of_kind("layers", layers).items()},
        "optimizers": {name: opt.state_dict() for name, opt in _of_kind("optimizers", optimizers).items()},
        "arrays": dict(_of_kind("arrays", arrays)),
        "state": dict(_mapping("state", state))}
    _check_states(contents["layers"], contents["optimizers"])
    tree, tensors = flatten(contents)
    text = json.dumps(tree, separators=(",", ":"))
    write_bytes(path, _container.encode(tensors, text))


def load(path: PathLike, *, comm: Communicator | None = None) -> Checkpoint:
    """Read and check the checkpoint at ``path``.

    Args:
        path: the checkpoint file.
        comm: a :class:`cudnn_rnn.distributed.Communicator`: rank 0 reads the file and broadcasts
            its bytes, and every rank returns the same checkpoint (or raises the same error).
            None: this process reads the file itself.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: anything else that keeps the file from being a whole, consistent checkpoint,
            a number out of range included (a step count not an integer in [0, 2**63), a hyperparameter
            NaN, infinite, too large for a float or outside its range, a bool where a number goes);
            the message names the file and the field.
    """
    found = share_from_root(comm, lambda: (os.fspath(path), read_checkpoint_bytes(path)))
    assert found is not None
    return from_bytes(*found)


def read_checkpoint_bytes(path: PathLike) -> bytes:
    """The bytes of the file at ``path``; CheckpointError for a folder or a file that is not a regular file."""
    try:
        return read_bytes(path, "checkpoint")
    except (IsADirectoryError, ValueError) as error:
        raise CheckpointError(os.fspath(path), str(error)) from None


def from_bytes(where: str, blob: bytes | bytearray) -> Checkpoint:
    """The checkpoint whose file content is ``blob`` (``where`` names it in messages)."""
    arrays, text = _container.decode(blob, where)
    try:
        tree = json.loads(text)
        if not isinstance(tree, dict) or set(tree) != set(CONTENTS_KEYS):
            keys = sorted(tree) if isinstance(tree, dict) else type(tree).__name__
            raise ValueError(f"its contents must have the keys {list(CONTENTS_KEYS)}; got {keys}")
        used: set[str] = set()
        contents = unflatten(tree, arrays, used)
        if used != set(arrays):
            raise ValueError(f"it holds arrays that nothing refers to: {sorted(set(arrays) - used)[:5]}")
        for group in CONTENTS_KEYS[1:]:
            if not isinstance(contents[group], dict):
                raise ValueError(f"its {group!r} must be an object; got {type(contents[group]).__name__}")
        step = _checked_step(contents["step"])
        _check_states(contents["layers"], contents["optimizers"])
        for name, array in contents["arrays"].items():
            if array_kind(array) is None:
                raise ValueError(f"arrays[{name!r}] must be an array; got {type(array).__name__}")
    except (ValueError, TypeError, OverflowError, RecursionError) as error:
        raise CheckpointError(where, f"its contents are inconsistent: {error}"[:500]) from None
    return Checkpoint(where, step, contents["layers"], contents["optimizers"], contents["arrays"], contents["state"])


def share_from_root(comm: Communicator | None,
                    read: Callable[[], tuple[str, bytes] | None]) -> tuple[str, bytes] | None:
    """``read()`` on rank 0, its (name, bytes) or None sent to every rank of ``comm``.

    Without a communicator (or with one process) it is just ``read()``. If ``read`` raises on
    rank 0, every other rank raises a CheckpointError that carries rank 0's message, so no rank
    is left waiting.
    """
    if comm is None or comm.size == 1:
        return read()
    found: tuple[str, bytes] | None = None
    failure: BaseException | None = None
    if comm.rank == 0:
        try:
            found = read()
        except Exception as error:  # every rank must hear of it, whatever it is
            failure = error
        name, data = found if found is not None else ("", b"")
        message = (f"{type(failure).__name__}: {failure}" if failure is not None else "").encode()
        head = np.array([2 if failure else (1 if found else 0), len(name.encode()), len(data), len(message)],
                        np.int64)
        payload = np.frombuffer(bytearray(name.encode() + data + message), np.uint8)
    else:
        head = np.zeros(4, np.int64)
    comm.broadcast([head])
    status, name_length, data_length, message_length = (int(value) for value in head)
    if comm.rank != 0:
        payload = np.empty(name_length + data_length + message_length, np.uint8)
    comm.broadcast([payload])
    if failure is not None:
        raise failure
    raw = payload.tobytes()
    if status == 2:
        raise CheckpointError("(read on rank 0)", raw[name_length + data_length:].decode(errors="replace"))
    if status == 0:
        return None
    return raw[:name_length].decode(), raw[name_length:name_length + data_length]


def _mapping(group: str, value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError(f"{group} must be a dict with str keys; got {type(value).__name__}")
    return value


def _of_kind(group: str, values: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``values`` (a dict, or None for none), each checked to be what ``group`` holds (:data:`GROUP_KINDS`)."""
    values = _mapping(group, values)
    belongs, what = GROUP_KINDS[group]
    for name, value in values.items():
        if not belongs(value):
            raise TypeError(f"{group}[{name!r}] must be {what}; got {type(value).__name__}")
    return values


def _matching(group: str, given: Mapping[str, Any] | None, saved: dict[str, Any], where: str) -> Mapping[str, Any]:
    """``given`` (nothing to restore when None), which must name exactly the entries ``saved`` has."""
    if given is None:
        return {}
    given = _of_kind(group, given)
    if set(given) != set(saved):
        raise ValueError(f"checkpoint {where} holds {group} {sorted(saved)}; restore was given {sorted(given)}")
    return given


def _checked_step(step: Any) -> int | None:
    """None, or ``step`` as an int in [0, 2**63); ValueError otherwise."""
    return None if step is None else checked_count("step", step)


def _check_states(layers: dict[str, Any], optimizers: dict[str, Any]) -> None:
    """Refuse layers' and optimisers' state dicts that :meth:`Checkpoint.restore` would refuse, each named."""
    for name, layer in layers.items():
        parse_layer_state(layer, f"layers[{name!r}]")
    for name, optimiser in optimizers.items():
        kind = optimiser.get("kind") if isinstance(optimiser, dict) else None
        if kind not in OPTIMIZERS:
            raise ValueError(f"optimizers[{name!r}] must be the state of one of {list(OPTIMIZERS)}; "
                             f"got kind {str(kind)[:40]!r}")
        OPTIMIZERS[kind].checked_state(optimiser, f"optimizers[{name!r}]")


def _array_loader(target: Array, saved: np.ndarray, what: str, where: str) -> Callable[[], None]:
    if tuple(target.shape) != saved.shape:
        raise ValueError(f"checkpoint {where} {what} has shape {saved.shape}; the array given has "
                         f"{tuple(target.shape)}")
    if target.dtype != saved.dtype:
        raise TypeError(f"checkpoint {where} {what} is {saved.dtype}; the array given is {target.dtype}")
    return lambda: copy_into(target, saved)
