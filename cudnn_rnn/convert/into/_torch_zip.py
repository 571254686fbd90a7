"""Where a torch.save zip archive keeps each tensor, from its pickle read without running it.

    state_dicts(path) -> [StateDict(trail=("model",), tensors={"rnn.weight_ih_l0": StoredTensor(...), ...}), ...]

``torch.save`` writes ``<top>/data.pkl`` and one stored member ``<top>/data/<key>`` per storage.
Each tensor in the pickle is ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
...)``, its storage the persistent id ``("storage", <dtype>Storage, key, location, numel)``: so
the tensor's elements lie in member ``data/<key>`` from element ``offset`` on, ``stride``
elements apart. The archive and its pickle are checked as the PyTorch reader checks them
(``_torch_file.inspect_zip``). Every mapping of the pickle (a state_dict, or one inside a checkpoint dict,
``SEARCH_DEPTH`` deep, as the reader searches) whose values include tensors is listed.
"""

from __future__ import annotations

import mmap
import zipfile
from dataclasses import dataclass, field
from typing import Any

from ..._dtypes import BY_NAME, names
from ..readers import (SEARCH_DEPTH, STORAGE_ITEMSIZES, ZIP_MAGIC, FileReadError, Layout, Pickled, inspect_zip,
                       member_data_offset)
from ._stored import StoredTensor

__all__ = ["StateDict", "state_dicts", "STORAGE_DTYPES"]

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


def _tensor(value: Any, layout: Layout, mapped: mmap.mmap) -> StoredTensor | str | None:
    """The stored place of a pickled tensor, a reason it has none, or None for something that is no tensor."""
    if isinstance(value, Pickled) and value.name in _REBUILD_PARAMETER and value.args:
        value = value.args[0]
    if not (isinstance(value, Pickled) and value.name in _REBUILD_TENSOR and len(value.args) >= 4):
        return None
    record, offset, size, stride = value.args[:4]
    shape, strides = _sequence(size), _sequence(stride)
    if not (isinstance(record, tuple) and len(record) == 5 and record[0] == "storage") or shape is None \
            or strides is None or not isinstance(offset, int) or len(shape) != len(strides):
        return "its pickled record is not a plain tensor's"
    storage = getattr(record[1], "name", "")
    dtype = STORAGE_DTYPES.get(storage)
    if dtype is None:
        return f"its storage is {storage or record[1]!s:.40}, not a float type"
    info = layout.members[f"{layout.top}/data/{record[2]}"]  # (inspect_zip found every storage record's member)
    if info.compress_type != zipfile.ZIP_STORED:
        return "its storage is compressed in the archive"
    itemsize = STORAGE_ITEMSIZES[storage]
    start = member_data_offset(mapped, info)
    stored = StoredTensor(start + offset * itemsize, shape, tuple(s * itemsize for s in strides), dtype,
                          member=info.filename)
    low, high = stored.span()
    if low < start or high > start + info.file_size:
        return "it reaches outside its storage"
    return stored


def state_dicts(path: str) -> list[StateDict]:
    """Every mapping of tensors in the torch.save zip archive ``path``, with where each tensor lies.

    Raises:
        FileReadError: not a torch.save zip archive (a legacy torch.save file cannot be written in
            place: save it again with torch.save), or a damaged one.
    """
    with open(path, "rb") as handle:
        if handle.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
            raise FileReadError(path, "a legacy (non-zip) torch.save file, whose tensors cannot be replaced in "
                                      "place: load it and torch.save it again (the zip format is torch's default)")
        layout = inspect_zip(path, handle)
        if layout.torchscript:
            raise FileReadError(path, "a TorchScript archive: save the weights with torch.save(model.state_dict(), "
                                      "path) and write into that")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
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
