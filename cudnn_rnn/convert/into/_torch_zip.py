"""Where a torch.save zip archive keeps each tensor, from its pickle read without running it.

    state_dicts(path) -> [StateDict(trail=("model",), tensors={"rnn.weight_ih_l0": StoredTensor(...), ...}), ...]

``torch.save`` writes ``<top>/data.pkl`` and one stored member ``<top>/data/<key>`` per storage. Each tensor
in the pickle is ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)``, its storage the
persistent id ``("storage", <dtype>Storage, key, location, numel)``: its elements lie in member ``data/<key>``
from element ``offset`` on, ``stride`` elements apart. The archive and its pickle are checked as the PyTorch
reader checks them (``_torch_file.inspect_zip``); every mapping of tensors, ``SEARCH_DEPTH`` deep, is listed.
:func:`shared_tensor` finds another tensor, anywhere in the pickle, whose elements share bytes with one of a
mapping's (tied weights, a view saved beside its base, or the same tensor or mapping in several places).
"""

from __future__ import annotations

import mmap
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from ..._dtypes import BY_NAME, names
from ..readers import (LOCAL_HEADER_SIGNATURE, SEARCH_DEPTH, STORAGE_ITEMSIZES, FileReadError, Layout, Pickled,
                       inspect_zip, member_data_offset)
from ._stored import Extent, StoredTensor, overlapping

__all__ = ["state_dicts", "shared_tensor"]

#: torch's typed storage classes -> the dtype of their elements (the ones an RNN's weights can have)
STORAGE_DTYPES: dict[str, str] = {storage: name for storage, name in names("torch_storage").items()
                                  if BY_NAME[name].params}

#: the functions that rebuild a tensor from a storage record, and a Parameter from a tensor
_REBUILD_TENSOR = {"_rebuild_tensor", "_rebuild_tensor_v2"}
_REBUILD_PARAMETER = {"_rebuild_parameter", "_rebuild_parameter_with_state"}


@dataclass
class StateDict:
    """A mapping of the pickle and where its tensors lie (those of a dtype in :data:`STORAGE_DTYPES`)."""

    trail: tuple[str, ...]
    tensors: dict[str, StoredTensor] = field(default_factory=dict)
    others: dict[str, str] = field(default_factory=dict)  # key -> why it cannot be written in place


def _items(value: Any) -> list[tuple[Any, Any]] | None:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, Pickled) and value.name == "OrderedDict":
        return [item for item in value.items if isinstance(item, tuple) and len(item) == 2]
    return None


def _sequence(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, Pickled) and value.args:  # torch.Size(tuple)
        value = value.args[0]
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    return None


def _is_record(value: Any) -> bool:
    """Whether ``value`` is a pickled storage record, ``("storage", type, key, location, size)``."""
    return isinstance(value, tuple) and len(value) == 5 and value[0] == "storage"


def _unwrapped(value: Any) -> Any:
    """The tensor a pickled Parameter wraps; anything else as it is."""
    if isinstance(value, Pickled) and value.name in _REBUILD_PARAMETER and value.args:
        return value.args[0]
    return value


def _rebuild_args(value: Pickled) -> tuple[Any, int, tuple[int, ...], tuple[int, ...]] | None:
    """The storage record, element offset, shape and element strides a pickled tensor is rebuilt from; None where
    they are not a plain tensor's."""
    if len(value.args) < 4:
        return None
    record, offset, size, stride = value.args[:4]
    shape, strides = _sequence(size), _sequence(stride)
    if not _is_record(record) or shape is None or strides is None or not isinstance(offset, int) \
            or len(shape) != len(strides):
        return None
    return record, offset, shape, strides


def _storage(record: Any, layout: Layout, mapped: mmap.mmap) -> tuple[zipfile.ZipInfo, int, int]:
    """The member holding a storage record's elements, where they start, and their size in bytes (1: unknown)."""
    info = layout.members[f"{layout.top}/data/{record[2]}"]  # (inspect_zip found every storage record's member)
    return info, member_data_offset(mapped, info), STORAGE_ITEMSIZES.get(getattr(record[1], "name", ""), 1)


def _extent(value: Any, layout: Layout, mapped: mmap.mmap) -> Extent | None:
    """The bytes a pickled tensor of any type takes, all its storage's for a storage record met alone (or a
    tensor of an unknown kind, whose record is met inside it); None for anything else."""
    tensor = isinstance(value, Pickled) and value.name in _REBUILD_TENSOR and bool(value.args)
    record = value.args[0] if tensor else value
    if not _is_record(record):
        return None
    info, start, itemsize = _storage(record, layout, mapped)
    parts = _rebuild_args(value) if tensor else None
    if parts is None:
        return Extent(info.filename, start, (info.compress_size,), (1,), 1)
    _, offset, shape, strides = parts
    return Extent(info.filename, start + offset * itemsize, shape, tuple(stride * itemsize for stride in strides),
                  itemsize)


def _tensor(value: Any, layout: Layout, mapped: mmap.mmap) -> StoredTensor | str | None:
    """The stored place of a pickled tensor, a reason it has none, or None for something that is no tensor."""
    value = _unwrapped(value)
    if not (isinstance(value, Pickled) and value.name in _REBUILD_TENSOR and len(value.args) >= 4):
        return None
    parts = _rebuild_args(value)
    if parts is None:
        return "its pickled record is not a plain tensor's"
    record, offset, shape, strides = parts
    storage = getattr(record[1], "name", "")
    dtype = STORAGE_DTYPES.get(storage)
    if dtype is None:
        return f"its storage is {storage or record[1]!s:.40}, not a float type"
    info, start, itemsize = _storage(record, layout, mapped)
    if info.compress_type != zipfile.ZIP_STORED:
        return "its storage is compressed in the archive"
    stored = StoredTensor(info.filename, start + offset * itemsize, shape, tuple(s * itemsize for s in strides),
                          itemsize, dtype)
    low, high = stored.span()
    if low < start or high > start + info.file_size:
        return "it reaches outside its storage"
    return stored


@contextmanager
def _opened(path: str) -> Iterator[tuple[Layout, mmap.mmap]]:
    """The checked layout of the torch.save zip archive ``path`` and the file, mapped for reading.

    Raises:
        FileReadError: not a torch.save zip archive (a legacy torch.save file cannot be written in
            place: save it again with torch.save), or a damaged one.
    """
    with open(path, "rb") as handle:
        if handle.read(len(LOCAL_HEADER_SIGNATURE)) != LOCAL_HEADER_SIGNATURE:
            raise FileReadError(path, "a legacy (non-zip) torch.save file, whose tensors cannot be replaced in "
                                      "place: load it and torch.save it again (the zip format is torch's default)")
        layout = inspect_zip(path, handle)
        if layout.torchscript:
            raise FileReadError(path, "a TorchScript archive: save the weights with torch.save(model.state_dict(), "
                                      "path) and write into that")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield layout, mapped


def state_dicts(path: str) -> list[StateDict]:
    """Every mapping of tensors in the torch.save zip archive ``path``, with where each tensor lies.

    Raises:
        FileReadError: as :func:`_opened`.
    """
    with _opened(path) as (layout, mapped):
        found: list[StateDict] = []

        def walk(value: Any, trail: tuple[str, ...]) -> None:
            items = _items(value)
            if items is None or len(trail) > SEARCH_DEPTH:
                return
            mapping = StateDict(trail)
            for key, item in items:
                place = _tensor(item, layout, mapped)
                if isinstance(place, StoredTensor) and isinstance(key, str):
                    mapping.tensors[key] = place
                elif isinstance(place, str) and isinstance(key, str):
                    mapping.others[key] = place
                elif isinstance(key, str):
                    walk(item, (*trail, key))
            if mapping.tensors or mapping.others:
                found.append(mapping)

        walk(layout.root, ())
    return found


# ---- tensors that share storage ----------------------------------------------------------------------------
def _children(value: Any) -> list[tuple[Any, Any]]:
    """What a pickled object holds, each with its key (None: a part that no key of the user's names)."""
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, (list, tuple)):
        return list(enumerate(value))
    if isinstance(value, (set, frozenset)):
        return [(None, item) for item in value]
    if isinstance(value, Pickled):
        items = _items(value)
        return [(None, item) for item in (*value.args, value.state)] + (
            items if items is not None else [(None, item) for item in value.items])
    return []


def _linked(value: Any) -> bool:
    """Whether ``value`` is an object of the pickle that it may refer to in several places."""
    return isinstance(value, (dict, list, tuple, set, frozenset, Pickled))


def _places(root: Any, layout: Layout, mapped: mmap.mmap) -> tuple[dict[int, list[tuple[Any, Any]]],
                                                                    dict[int, Extent]]:
    """Every object of the pickle (each walked once): ``places``, its id -> the first two (object holding it,
    its key there); ``extents``, a tensor's (or a storage record's) id -> the bytes it takes."""
    places: dict[int, list[tuple[Any, Any]]] = {id(root): []}
    extents: dict[int, Extent] = {}
    stack = [root]
    while stack:
        value = stack.pop()
        extent = _extent(value, layout, mapped)
        if extent is not None:
            extents[id(value)] = extent
            continue
        for key, item in _children(value):
            if _linked(item):
                seen = id(item) in places
                if len(places.setdefault(id(item), [])) < 2:
                    places[id(item)].append((value, key))
                if not seen:
                    stack.append(item)
    return places, extents


def shared_tensor(path: str, trail: tuple[str, ...], names: Sequence[str]) -> tuple[str, str] | None:
    """One of ``names`` (tensors of the mapping at ``trail``, as :func:`state_dicts` lists it) and another tensor
    of the pickle whose elements share bytes with it (tied to it, a view of it, or the tensor itself, or a
    mapping holding it, in another place too), or None where there is none.

    The other tensor is named by its keys (and list indices) from the pickle's top, those of ``trail``
    left out inside its mapping: ``"decoder.weight"``, ``"ema/encoder.rnn.weight_ih_l0"``.

    Raises:
        FileReadError: as :func:`state_dicts`.
    """
    with _opened(path) as (layout, mapped):
        root = layout.root
        chain = [root]  # the objects from the top down to the mapping, along trail
        for step in trail:
            chain.append([item for key, item in _items(chain[-1]) or () if key == step][-1])
        mine = {tensor: [item for key, item in _items(chain[-1]) or () if key == tensor][-1] for tensor in names}
        places, extents = _places(root, layout, mapped)

        def named(holder: Any, key: Any) -> str:
            keys = [key]
            while holder is not root:  # (the first places lead back to the top)
                holder, key = places[id(holder)][0]
                keys.append(key)
            keys = [part for part in reversed(keys) if part is not None]
            return "/".join(str(part) for part in (keys[len(trail):] if tuple(keys[:len(trail)]) == trail else keys))

        own = {(id(chain[-1]), tensor) for tensor in names}
        for tensor, item in mine.items():
            for holder, key in places[id(item)]:
                if (id(holder), key) not in own:  # the same tensor in another place
                    return tensor, named(holder, key)
            for depth, holder in enumerate(chain[1:]):
                for parent, key in places[id(holder)]:
                    if parent is not chain[depth] or key != trail[depth]:  # a mapping on the way, in another place
                        return tensor, "/".join((named(parent, key), *trail[depth + 1:], tensor))
        ids = {tensor: id(_unwrapped(item)) for tensor, item in mine.items()}  # (a Parameter's extent: its tensor's)
        for tensor in mine:
            for other, extent in extents.items():
                if other not in ids.values() and places[other] and overlapping(mapped, extents[ids[tensor]], extent):
                    return tensor, named(*places[other][0])
    return None
