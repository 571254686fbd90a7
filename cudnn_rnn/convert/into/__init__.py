"""Put converted RNN weights into the user's own model file: a copy of it with the RNN's tensors replaced.

::

    write_into("model.pt", "tuned.pt", rnn, prefix="encoder.rnn")     # a parent module's state_dict
    write_into("model.safetensors", "tuned.safetensors", layer)        # the one RNN of the right shapes
    write_into("model.keras", "tuned.keras", rnn, name=["lstm", "lstm_1"])   # a 2-layer network

MODEL's kinds and the format of their RNNs are :data:`INTO_KINDS`; :func:`write_into`'s options pick
the RNN, which is otherwise the only one, or the only one of the converted RNN's shapes (Keras: as many
layers as the network has).

Only the bytes of the replaced tensors change (and, in a zip archive, the checksums of the members
holding them); MODEL itself is never written. A torch.save file may keep another tensor in bytes of
the RNN's (tied weights, a view): such a MODEL is refused, naming both tensors, unless
``change_shared=True`` lets them take the new values; two of the RNN's own tensors may share storage
only where their new values agree. The replaced tensors must have MODEL's shapes (a refusal names
the first that differs); values are stored in MODEL's dtype, exactly or (with ``allow_approximation``)
rounded. Before OUT takes its name, it is read back and the replaced tensors compared.
"""

from __future__ import annotations

import mmap
import os
import shutil
import zipfile
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..._checks import flag, path_argument
from ...files import write_through_path
from ...formats import InexactConversionError
from ..readers import (WEIGHTS_MEMBER, FileReadError, FoundRNN, checked_layout, file_kind, listing, locate,
                       member_data_offset, named, read_file)
from ..saving import Written, as_found, converted, ending
from ._stored import StoredTensor, fix_zip_checksums, patch, reads_back
from ._torch_zip import shared_tensor, state_dicts

__all__ = ["write_into"]

#: the kinds of MODEL file (:data:`~cudnn_rnn.convert.readers.FILE_KINDS`) -> the format of the tensors replaced
INTO_KINDS: dict[str, str] = {"torch": "torch", "safetensors": "torch", "keras": "keras", "hdf5": "keras"}


@dataclass(frozen=True)
class _Slot:
    """One tensor to replace: its name in messages, where MODEL keeps it (None: MODEL stores no such tensor,
    as a bias=False layer stores no bias), and the shape MODEL has for it."""

    label: str
    stored: StoredTensor | None
    shape: tuple[int, ...]


def write_into(model: str | os.PathLike[str], out: str | os.PathLike[str], rnn: Any, *, prefix: str | None = None,
               name: str | Sequence[str] | None = None, key: str | None = None,
               allow_approximation: bool = False, change_shared: bool = False) -> Written:
    """Write a copy of ``model`` to ``out`` with ``rnn``'s weights in place of its RNN's (see the module docstring).

    Args:
        model: the user's model file (never modified).
        out: the copy to write (replaced if it exists; it must end as ``model`` does).
        rnn: the weights, as :func:`~cudnn_rnn.convert.write_file` takes them.
        prefix, key: as :func:`~cudnn_rnn.convert.read_file` takes them, for MODEL.
        name: Keras files: the layer to fill, or one layer per cuDNN layer of a multi-layer network.
        allow_approximation: accept a conversion, or a rounding into MODEL's dtype, that changes the function.
        change_shared: let MODEL's tensors that share storage with the RNN's (tied weights, views) take the
            new values with them; otherwise such a MODEL is refused.

    Returns:
        :class:`~cudnn_rnn.convert.Written`: ``what`` names the RNN replaced and the tensor count.

    Raises:
        FileReadError: MODEL cannot be read, or holds no such RNN.
        ValueError: an option that does not apply, no single RNN to replace (listing them), a tensor
            whose shape differs (naming it), a tensor that shares storage with the RNN's (naming both;
            unless ``change_shared``), ``out`` naming ``model`` or ending otherwise.
        InexactConversionError: the conversion or the rounding into MODEL's dtype changes the function.
        TypeError: ``rnn`` is of no accepted kind.
        OSError: ``out`` cannot be written (nothing is left behind).
    """
    model_path, out_path = path_argument("model", model), path_argument("out", out)
    for argument, text in (("prefix", prefix), ("key", key)):
        if text is not None and not isinstance(text, str):
            raise TypeError(f"{argument} must be a str or None; got {type(text).__name__} {text!r:.60}")
    if name is not None and not isinstance(name, str) and not (
            isinstance(name, (list, tuple)) and name and all(isinstance(item, str) for item in name)):
        raise TypeError(f"name must be a layer name, a non-empty list of them, or None; got {name!r:.60}")
    flag("allow_approximation", allow_approximation)
    flag("change_shared", change_shared)
    kind = file_kind(model_path)
    if kind.name not in INTO_KINDS:
        raise ValueError(f"model {model_path!r} is {kind.description}; weights can be written into "
                         "PyTorch (.pt), safetensors and Keras (.keras, .weights.h5) files")
    if ending(out_path) != ending(model_path):
        raise ValueError(f"out {out_path!r} is a copy of model {model_path!r}, so it must end in "
                         f"{ending(model_path) or 'no extension'!r} as well; got {ending(out_path) or 'none'!r}")
    if os.path.exists(out_path) and os.path.samefile(model_path, out_path):
        raise ValueError(f"out {out_path!r} is model itself; model is never modified: choose another out")
    source = as_found(rnn)
    config = source.config
    fmt = INTO_KINDS[kind.name]
    result = converted(source, fmt, allow_approximation=allow_approximation)
    tensors = dict(result.value)
    trail: tuple[str, ...] | None = None  # (the torch.save mapping holding the RNN)
    if fmt == "torch":
        if name is not None:
            raise ValueError(f"name= picks a Keras layer; model {model_path!r} is {kind.description}: use prefix=")
        target, slots, trail = _torch_slots(model_path, kind.name, prefix, key, tensors)
    else:
        if prefix is not None or key is not None:
            raise ValueError(f"prefix= and key= pick a PyTorch RNN; model {model_path!r} is {kind.description}: "
                             "use name=")
        target, slots = _keras_slots(model_path, kind.name, name, tensors, config.num_layers)
    writes, notes = _values(slots, tensors, allow_approximation)
    shared = shared_tensor(model_path, trail, list(writes)) if trail is not None and not change_shared else None
    if shared is not None:
        raise ValueError(f"tensor {shared[0]!r} of model {model_path!r} shares its storage with tensor {shared[1]!r} "
                         "(tied weights, or a view), which would change with the RNN: pass change_shared=True to let "
                         "the tensors that share the RNN's storage take its new values")
    members = sorted({stored.member for stored, _ in writes.values() if stored.member})

    def write(partial: str) -> None:
        shutil.copyfile(model_path, partial)
        with open(partial, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
            patch(mapped, writes)
            fix_zip_checksums(partial, mapped, members)
            mapped.flush()
        _check_written(partial, writes, members)

    write_through_path(out_path, write)
    return Written(out_path, fmt, f"a copy of {model_path} with the {len(writes)} tensor(s) of {target} replaced",
                   tuple(result.approximations) + tuple(notes))


# ---- which tensors -------------------------------------------------------------------------------------------
def _pick_one(path: str, candidates: list[FoundRNN], tensors: Mapping[str, np.ndarray], option: str) -> FoundRNN:
    """The one candidate to replace: the only one, or the only one of the converted tensors' shapes."""
    if len(candidates) == 1:
        return candidates[0]
    fitting = [found for found in candidates if set(found.tensors) == set(tensors) and all(
        tuple(found.tensors[name].shape) == tuple(tensors[name].shape) for name in tensors)]
    if len(fitting) == 1:
        return fitting[0]
    how = "none has" if not fitting else f"{len(fitting)} have"
    raise ValueError(f"model {path!r} holds {len(candidates)} RNNs ({listing(candidates)}) and {how} the converted "
                     f"RNN's shapes: pick one with {option}")


def _torch_slots(path: str, kind: str, prefix: str | None, key: str | None,
                 tensors: Mapping[str, np.ndarray]) -> tuple[str, dict[str, _Slot], tuple[str, ...] | None]:
    """What to replace in a torch.save or safetensors file: the RNN's description, its slots, and the trail of
    the torch.save mapping that holds it (None: a safetensors file)."""
    found = [item for item in read_file(path, prefix=prefix, key=key) if item.fmt == "torch"]
    if not found:
        raise FileReadError(path, "it holds no nn.LSTM, nn.GRU or nn.RNN state_dict whose tensors could be replaced")
    chosen = _pick_one(path, found, tensors, "prefix=")
    trail, places = (None, safetensors_places(path)) if kind == "safetensors" else _torch_places(path, chosen, key)
    start = f"{chosen.name}." if any(name.startswith(f"{chosen.name}.") for name in places) else ""
    slots = {name: _Slot(start + name, places.get(start + name), tuple(value.shape))
             for name, value in chosen.tensors.items()}
    return f"the RNN under {start!r}" if start else f"the RNN {chosen.name}", slots, trail


def _torch_places(path: str, chosen: FoundRNN, key: str | None) -> tuple[tuple[str, ...], dict[str, StoredTensor]]:
    """Where the torch file keeps the tensors of ``chosen``: the trail of the mapping that holds its first
    weight, and the mapping's tensors."""
    first = next(iter(chosen.tensors))
    mappings = [mapping for mapping in state_dicts(path) if (key is None or mapping.trail[:1] == (key,))
                and (f"{chosen.name}.{first}" in mapping.tensors or first in mapping.tensors
                     or f"{chosen.name}.{first}" in mapping.others or first in mapping.others)]
    if len(mappings) != 1:
        raise FileReadError(path, f"found the RNN {chosen.name} in {len(mappings)} places of the pickle; pass key= "
                                  "to name the checkpoint entry that holds it")
    (mapping,) = mappings
    for name, why in mapping.others.items():
        if name == first or name.startswith(f"{chosen.name}."):
            raise FileReadError(path, f"tensor {name!r} cannot be replaced in place: {why}")
    return mapping.trail, mapping.tensors


def _keras_slots(path: str, kind: str, name: str | Sequence[str] | None, tensors: Mapping[str, np.ndarray],
                 num_layers: int) -> tuple[str, dict[str, _Slot]]:
    found = read_file(path)
    layers = {places.name: places for places in locate(path, kind)}
    names = [name] if isinstance(name, str) else list(name or ())
    if names:
        picked = named(found, names, f"model {path!r}")
    elif len(found) == num_layers:
        picked = list(found)
    elif num_layers == 1:
        picked = [_pick_one(path, found, tensors, "name=")]
    else:
        raise ValueError(f"model {path!r} holds {len(found)} RNN layers ({listing(found)}); the converted network has "
                         f"{num_layers}: name one layer per network layer with name=[FIRST, SECOND, ...]")
    if len(picked) != num_layers:
        raise ValueError(f"the converted network has {num_layers} layer(s); name= names {len(picked)}: name one "
                         "Keras layer per network layer")
    member_start = _member_start(path) if kind == "keras" else 0
    slots = {}
    for index, item in enumerate(picked):
        places = layers.get(item.name)
        if places is None or places.why:
            raise ValueError(f"layer {item.name!r} of model {path!r} ({item.source}) cannot be written: "
                             f"{places.why if places else 'its weights were not found'}")
        for tensor, value in item.tensors.items():
            dataset = places.places.get(tensor)
            stored = None  # (no dataset: a weight the layer does not store, as a bias with use_bias=False)
            if dataset is not None:
                if dataset.offset is None:
                    raise ValueError(f"layer {item.name!r} of model {path!r}: dataset {dataset.dataset!r} is stored "
                                     "chunked or compressed, or in a type other than its marked dtype, so it cannot "
                                     "be replaced in place: save the model again with keras")
                stored = StoredTensor.contiguous(member_start + dataset.offset, dataset.shape, dataset.dtype,
                                                 dataset.byteorder, WEIGHTS_MEMBER if kind == "keras" else None)
            where = f" ({dataset.dataset})" if dataset else ""
            label = f"{item.name}: {tensor.split('/', 1)[1].replace('/', ' ')}{where}"
            slots[f"layer_{index}/{tensor.split('/', 1)[1]}"] = _Slot(label, stored, tuple(value.shape))
    return "layer(s) " + ", ".join(repr(item.name) for item in picked), slots


def _member_start(path: str) -> int:
    """Where the ``.keras`` archive's weights member starts (it must be stored, as Keras stores it)."""
    with open(path, "rb") as handle, zipfile.ZipFile(handle) as archive:
        info = archive.getinfo(WEIGHTS_MEMBER)
        if info.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"model {path!r} compresses {WEIGHTS_MEMBER!r}, so its weights cannot be replaced in "
                             "place: save it again with keras (which stores it uncompressed)")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return member_data_offset(mapped, info)


# ---- the values ----------------------------------------------------------------------------------------------
def _values(slots: Mapping[str, _Slot], tensors: Mapping[str, np.ndarray],
            allow_approximation: bool) -> tuple[dict[str, tuple[StoredTensor, np.ndarray]], list[str]]:
    """Each converted tensor checked against its slot, cast to the stored dtype (exactly, or rounded if allowed)."""
    for name in (*tensors, *slots):
        if name not in slots:
            raise ValueError(f"the converted RNN has tensor {name!r}, which the model's RNN lacks (a direction or "
                             "layer more than it has)")
        if name not in tensors:
            raise ValueError(f"the model's tensor {slots[name].label!r} has no counterpart in the converted RNN "
                             "(a direction or layer fewer than it has)")
    writes, notes = {}, []
    for name, value in tensors.items():
        slot = slots[name]
        if tuple(value.shape) != slot.shape:
            raise ValueError(f"tensor {slot.label!r} has shape {slot.shape} in the model; the converted RNN's is "
                             f"{tuple(value.shape)}: the RNNs differ in size, gates or directions")
        if slot.stored is None:
            if np.any(value != 0):
                raise ValueError(f"the model stores no {slot.label!r} (a layer without biases); the converted "
                                 "values are not all zero")
            continue
        cast = np.asarray(value).astype(slot.stored.numpy_dtype)
        if not np.array_equal(cast.astype(value.dtype), value, equal_nan=True):
            message = (f"tensor {slot.label!r} is {slot.stored.dtype} in the model; the converted {value.dtype} "
                       "values do not all fit it exactly")
            if not allow_approximation:
                raise InexactConversionError(f"{message}. Pass allow_approximation=True to round them.")
            notes.append(f"{message}: rounded")
        writes[slot.label] = (slot.stored, cast)
    return writes, list(dict.fromkeys(notes))


def _check_written(path: str, writes: Mapping[str, tuple[StoredTensor, np.ndarray]], members: Sequence[str]) -> None:
    """Read the written tensors back from ``path`` and compare them with what was meant; check the members' CRCs."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        for label, (stored, values) in writes.items():
            if not reads_back(mapped, stored, values):  # pragma: no cover - a bug, not a user error
                raise AssertionError(f"tensor {label!r} reads back other values than were written")
    if members:
        with zipfile.ZipFile(path) as archive:
            for name in members:  # (zipfile checks each member's CRC-32 as it reads it whole)
                with archive.open(name) as member:
                    while member.read(1 << 24):
                        pass


def safetensors_places(path: str) -> dict[str, StoredTensor]:
    """Where a safetensors file keeps each tensor: the absolute offsets its header gives, once the safetensors
    package has checked the file (``cudnn_rnn.files.read_layout``)."""
    layout = checked_layout(path)
    return {name: StoredTensor.contiguous(entry.begin, entry.shape, entry.dtype_name, itemsize=entry.itemsize)
            for name, entry in layout.entries.items()}
