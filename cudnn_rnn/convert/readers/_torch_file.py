"""PyTorch files (``torch.save`` zip archives and legacy pickles), read with ``torch.load``.

===========================================  ============================================================
the file holds                               what is found
===========================================  ============================================================
a state_dict (``weight_ih_l0``, ...)         one RNN, named after the file
a parent module's state_dict                 every RNN inside, by key prefix (``encoder.rnn.`` ->
                                             ``encoder.rnn``); ``prefix`` picks one
a checkpoint ``{"model": state_dict, ...}``  the entry holding an RNN (``key`` picks one)
a whole pickled ``nn.Module``                only with ``trust_pickle``: its state_dict, with mode,
                                             nonlinearity and batch_first taken from the modules
===========================================  ============================================================

::

    torch.load(file, map_location="cpu", weights_only=not trust_pickle)

Before torch sees the file it is inspected without running anything from it (its zip members by
:mod:`._zip`, its pickles by :mod:`._pickle_inspector`), to check every storage record: ``numel *
itemsize`` against the data the file stores for it, so torch never allocates a size the file cannot
fill. After loading, only the tensors of the RNNs found (:mod:`._state_dict`) are copied out (dense,
on the CPU, each no larger than its storage, all together bounded by the file's size).
"""

from __future__ import annotations

import functools
import io
import mmap
import os
import pickle
import re
import warnings
import zipfile
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Mapping

import numpy as np

from ..._dtypes import BY_NAME, names as dtype_names
from ...formats.torch import module_fields
from ._found import FileReadError, FoundRNN, ReadOptions, check_declared_size, one_line
from ._pickle_inspector import Pickled, inspect_pickle
from ._state_dict import READ_DTYPES, rnn_groups, rnns_in_state_dict, select_rnns
from ._zip import DAMAGED_ZIP, LOCAL_HEADER_SIGNATURE, checked_members, read_member

__all__ = ["read", "inspect_zip", "Layout", "STORAGE_ITEMSIZES", "SEARCH_DEPTH"]

#: the legacy typed-storage classes torch.save names in its pickles -> bytes per element (frozen in torch: newer
#: dtypes are saved as an UntypedStorage of bytes): the dtype table's, and those of types no RNN has
STORAGE_ITEMSIZES: dict[str, int] = {
    **{storage: BY_NAME[name].itemsize for storage, name in dtype_names("torch_storage").items()},
    "ComplexDoubleStorage": 16, "ComplexFloatStorage": 8, "QInt8Storage": 1, "QInt32Storage": 4,
    "QUInt8Storage": 1, "QUInt4x2Storage": 1, "QUInt2x4Storage": 1, "UntypedStorage": 1,
}

#: the first two pickles of a legacy (non-zip) torch.save file
LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL_VERSION = 1001

#: the tensors copied out may total this many times the file's size (shared or tied storage)
MAX_COPY_FACTOR = 4
#: how deep a checkpoint dict is searched for state_dicts
SEARCH_DEPTH = 3

_GLOBAL_IN_MESSAGE = re.compile(r"GLOBAL ([A-Za-z_][\w.]*)")
#: names a pickle of plain tensors and containers refers to (left out when naming what a file holds)
_TENSOR_PICKLE_NAMES = re.compile(
    r"^(torch\._utils\._rebuild_\w+|torch\._tensor\._rebuild_\w+|collections\.OrderedDict|_codecs\.encode"
    r"|(__builtin__|builtins)\.(set|bytearray|complex)|torch\.(Size|device|Tensor|\w+Storage)"
    r"|torch\.nn\.parameter\.Parameter|torch\.serialization\._get_layout"
    r"|torch\.(b?float|u?int|bool|complex|half|double|long|short|c?float)\w*)$")


# ---- torch's storage records ---------------------------------------------------------------------------
def _storage_itemsize(path: str, storage_type: Any, what: str) -> int:
    name = getattr(storage_type, "name", None)
    if not (isinstance(storage_type, type) and issubclass(storage_type, Pickled)) or name not in STORAGE_ITEMSIZES:
        raise FileReadError(path, f"{what} has an unknown storage type {one_line(name or storage_type, 80)!r}: "
                                  "the file is corrupt or from an unknown PyTorch version")
    return STORAGE_ITEMSIZES[name]


def _count(path: str, value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FileReadError(path, f"{what} declares an invalid size {one_line(repr(value), 60)}: the file is corrupt")
    return value


# ---- the two file layouts -----------------------------------------------------------------------------
@dataclass
class Layout:
    """What inspection found: the names the file's pickle refers to; whether it is TorchScript; for a
    torch.save zip archive, the pickle's top object (stand-ins, see :mod:`._pickle_inspector`), the archive's
    top folder and its checked members."""

    names: list[str]
    torchscript: bool = False
    root: Any = None
    top: str = ""
    members: dict[str, zipfile.ZipInfo] = field(default_factory=dict)


def inspect_zip(path: str, handle: BinaryIO) -> Layout:
    """Check a torch.save zip archive: every member (:mod:`._zip`), then every storage record of data.pkl."""
    try:
        archive = zipfile.ZipFile(handle)
        members = checked_members(path, archive)
        if not members:
            raise FileReadError(path, "an empty zip archive")
        top = next(iter(members)).split("/", 1)[0]
        if f"{top}/constants.pkl" in members or any(name.startswith(f"{top}/code/") for name in members):
            return Layout([], torchscript=True)
        pickle_name = f"{top}/data.pkl"
        if pickle_name not in members:
            raise FileReadError(path, f"a zip archive without {pickle_name!r}: not a torch.save file")
        data = read_member(path, archive, members[pickle_name])
    except FileReadError:
        raise
    except DAMAGED_ZIP as error:
        raise FileReadError(path, f"a damaged zip archive ({one_line(error, 160)})") from None
    inspected = inspect_pickle(path, io.BytesIO(data), len(data), "data.pkl")
    for record in inspected.records:
        if not (isinstance(record, tuple) and len(record) == 5 and record[0] == "storage"):
            raise FileReadError(path, f"data.pkl refers to {one_line(repr(record), 80)}, not a storage record: "
                                      "the file is corrupt")
        storage_type, key, _, numel = record[1:]
        member = members.get(f"{top}/data/{key}")
        what = f"storage record 'data/{one_line(key, 40)}'"
        if member is None:
            raise FileReadError(path, f"{what} is missing from the archive: the file is truncated or corrupt")
        itemsize = _storage_itemsize(path, storage_type, what)
        check_declared_size(path, f"data/{key}", (_count(path, numel, what),), itemsize, member.file_size, False)
    return Layout(inspected.names, root=inspected.root, top=top, members=members)


def _inspect_legacy(path: str, handle: BinaryIO, size: int) -> Layout:
    """Check a legacy torch.save file: five pickles (magic number, protocol, system info, the
    object, the storage keys), then each storage as an 8-byte count and its data."""
    with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        magic = inspect_pickle(path, view, size, "the pickle")
        if magic.root != LEGACY_MAGIC_NUMBER or isinstance(magic.root, bool):
            objects = [name for name in magic.names if not _TENSOR_PICKLE_NAMES.match(name)]
            named = f" naming {', '.join(one_line(name, 60) for name in objects[:4])}" if objects else ""
            raise FileReadError(path, f"a Python pickle{named} that torch.save did not write (torch.save files start "
                                      "with its magic number): save tensors with torch.save(model.state_dict(), path)")
        protocol = inspect_pickle(path, view, size, "the protocol pickle")
        if protocol.root != LEGACY_PROTOCOL_VERSION:
            raise FileReadError(path, "a legacy torch.save file of unknown protocol "
                                      f"{one_line(repr(protocol.root), 40)}")
        inspect_pickle(path, view, size, "the system-information pickle")
        body = inspect_pickle(path, view, size, "the object pickle")
        keys = inspect_pickle(path, view, size, "the storage-key pickle").root
        data_bytes = size - view.tell()
    if not isinstance(keys, list):
        raise FileReadError(path, "the storage-key pickle is not a list: the file is corrupt")
    roots: dict[Any, int] = {}
    for record in body.records:
        if isinstance(record, tuple) and record and record[0] == "module":
            continue
        if not (isinstance(record, tuple) and len(record) == 6 and record[0] == "storage"):
            raise FileReadError(path, f"the pickle refers to {one_line(repr(record), 80)}, not a storage record: "
                                      "the file is corrupt")
        storage_type, root_key, _, numel, view_metadata = record[1:]
        what = f"storage {one_line(repr(root_key), 40)}"
        itemsize = _storage_itemsize(path, storage_type, what)
        numel = _count(path, numel, what)
        if not isinstance(root_key, (str, int)):
            raise FileReadError(path, f"{what} has an invalid key: the file is corrupt")
        nbytes = check_declared_size(path, f"storage {root_key}", (numel,), itemsize, data_bytes, False)
        roots.setdefault(root_key, nbytes)
        if view_metadata is not None:
            if not (isinstance(view_metadata, tuple) and len(view_metadata) == 3):
                raise FileReadError(path, f"{what} has an invalid view record: the file is corrupt")
            offset, view_size = (_count(path, value, what) for value in view_metadata[1:])
            if offset + view_size > numel:
                raise FileReadError(path, f"{what} has a view of {view_size} elements at {offset} past its {numel} "
                                          "elements: the file is corrupt")
    unknown = [key for key in keys if not isinstance(key, (str, int)) or key not in roots]
    if unknown:
        raise FileReadError(path, f"the storage-key list names {one_line(repr(unknown[0]), 40)}, which no tensor uses: "
                                  "the file is corrupt")
    declared = sum(roots.values()) + 8 * len(keys)
    if declared > data_bytes:
        raise FileReadError(path, f"the storages declare {declared} bytes but the file holds {data_bytes} after its "
                                  "pickles: the file is truncated or corrupt")
    return Layout(body.names)


# ---- loading --------------------------------------------------------------------------------------------
#: what to do with a file whose pickled objects would run code
_SAVE_INSTEAD = ("save the weights with torch.save(model.state_dict(), path) instead, or pass trust_pickle=True if you "
                 "trust this file")


def _unsafe_message(error: BaseException, layout: Layout) -> str:
    named = list(dict.fromkeys(_GLOBAL_IN_MESSAGE.findall(str(error))))
    named += [name for name in layout.names if not _TENSOR_PICKLE_NAMES.match(name) and name not in named]
    what = f" ({', '.join(one_line(name, 60) for name in named[:4])})" if named else ""
    return (f"the file holds pickled Python objects{what} that would run code to load, so they are not loaded: "
            + _SAVE_INSTEAD)


def _torch_load(path: str, handle: BinaryIO, layout: Layout, trust_pickle: bool) -> Any:
    """``torch.load`` of the inspected file (``weights_only`` unless ``trust_pickle``), its errors as FileReadError."""
    import torch

    if layout.torchscript and not trust_pickle:
        raise FileReadError(path, "a TorchScript archive (torch.jit.save) runs its code when loaded: " + _SAVE_INSTEAD)
    handle.seek(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(handle, map_location="cpu", weights_only=not trust_pickle)
    except pickle.UnpicklingError as error:
        if not trust_pickle:
            raise FileReadError(path, _unsafe_message(error, layout)) from None
        raise FileReadError(path, f"a damaged PyTorch file ({one_line(error, 200)})") from None
    except (AttributeError, ImportError) as error:
        raise FileReadError(path, f"the pickled objects need code that cannot be found here ({type(error).__name__}: "
                                  f"{one_line(error, 160)}): import the module that defines them first, or save "
                                  "torch.save(model.state_dict(), path) instead") from None
    except MemoryError:
        raise FileReadError(path, "loading it ran out of memory") from None
    except Exception as error:  # torch's reader failing on a damaged file
        raise FileReadError(path, f"not a readable PyTorch file ({type(error).__name__}: {one_line(error, 200)})") \
            from None


# ---- what the loaded object is --------------------------------------------------------------------------
def _is_state_dict(value: Any) -> bool:
    import torch

    return (isinstance(value, Mapping) and len(value) > 0 and all(isinstance(key, str) for key in value)
            and all(isinstance(item, torch.Tensor) or key.endswith("_extra_state") for key, item in value.items()))


def _describe(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"tensor {_torch_dtype(value)} {list(value.shape)}"
    if isinstance(value, torch.nn.Module):
        return f"{_class_name(value)} module"
    if _is_state_dict(value):
        return f"state_dict of {len(value)} tensors"
    if isinstance(value, Mapping):
        return f"dict of {len(value)} entries"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


def _entries(mapping: Mapping[Any, Any], limit: int = 8) -> str:
    items = list(mapping.items())
    shown = ", ".join(f"{one_line(repr(key), 40)} ({_describe(value)})" for key, value in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def _class_name(module: Any) -> str:
    """``nn.LSTM`` for torch's own classes (also compiled by TorchScript), else the class's name."""
    cls = type(module)
    original = getattr(module, "original_name", None)  # a TorchScript module keeps its class's name here
    if cls.__name__ == "RecursiveScriptModule" and isinstance(original, str):
        return original
    return f"nn.{cls.__name__}" if cls.__module__.startswith("torch.nn.") else cls.__name__


def _holds_rnn(value: Any) -> bool:
    import torch

    if isinstance(value, torch.nn.Module):
        return bool(rnn_groups(value.state_dict()))
    return _is_state_dict(value) and bool(rnn_groups(value))


def _candidates(mapping: Mapping[Any, Any], trail: str = "", depth: int = 1) -> list[tuple[str, Any]]:
    """``[(entry path, value)]`` of the state_dicts (or modules) holding an RNN inside a checkpoint dict."""
    found = []
    for key, value in list(mapping.items())[:10_000]:
        if not isinstance(key, str):
            continue
        where = f"{trail}/{key}" if trail else key
        if _holds_rnn(value):
            found.append((where, value))
        elif isinstance(value, Mapping) and depth < SEARCH_DEPTH and not _is_state_dict(value):
            found += _candidates(value, where, depth + 1)
    return found


def _entry(path: str, checkpoint: Any, key: str) -> Any:
    if not isinstance(checkpoint, Mapping) or _is_state_dict(checkpoint):
        raise FileReadError(path, f"key={key!r} picks a checkpoint entry, but the file holds a "
                                  f"{_describe(checkpoint)}: leave the key out")
    if key in checkpoint:
        return checkpoint[key]
    value: Any = checkpoint
    for part in key.split("/"):
        if not isinstance(value, Mapping) or part not in value:
            raise FileReadError(path, f"the checkpoint has no entry {key!r}; it holds {_entries(checkpoint)}")
        value = value[part]
    return value


def _pick(path: str, loaded: Any, options: ReadOptions) -> tuple[Any, str | None]:
    """The state_dict (or trusted module) to read, and the checkpoint entry it came from."""
    import torch

    if options.key is not None:
        value = _entry(path, loaded, options.key)
        if not (_is_state_dict(value) or isinstance(value, torch.nn.Module)):
            raise FileReadError(path, f"checkpoint entry {options.key!r} is a {_describe(value)}, not a state_dict")
        return value, options.key
    if isinstance(loaded, torch.nn.Module) or _is_state_dict(loaded):
        return loaded, None
    if not isinstance(loaded, Mapping):
        raise FileReadError(path, f"the file holds a {_describe(loaded)}, not a state_dict or a checkpoint dict: "
                                  "save the weights with torch.save(model.state_dict(), path)")
    candidates = _candidates(loaded)
    if len(candidates) == 1:
        return candidates[0][1], candidates[0][0]
    if candidates:
        listed = ", ".join(repr(where) for where, _ in candidates)
        raise FileReadError(path, f"the checkpoint holds {len(candidates)} state_dicts with RNN weights ({listed}): "
                                  "pick one with key=KEY")
    if any(_is_state_dict(value) for value in loaded.values()):
        raise FileReadError(path, f"a checkpoint dict whose state_dicts hold no LSTM, GRU or RNN weights (no key ends "
                                  f"in 'weight_ih_l0'); it holds {_entries(loaded)}")
    raise FileReadError(path, f"the file holds a dict that is not a state_dict and holds none: {_entries(loaded)}; "
                              "save the weights with torch.save(model.state_dict(), path)")


# ---- tensors out of torch ------------------------------------------------------------------------------
def _torch_dtype(tensor: Any) -> str:
    return str(tensor.dtype).replace("torch.", "")


def _checked_nbytes(path: str, key: str, tensor: Any) -> int:
    """Bytes of ``tensor`` once copied out; FileReadError unless it is a dense CPU tensor no
    larger than its own storage."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise FileReadError(path, f"{key!r} is a {type(tensor).__name__}, not a tensor")
    try:
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_nested:
            kind = "quantized" if tensor.is_quantized else "nested" if tensor.is_nested else str(tensor.layout)
            raise FileReadError(path, f"tensor {key!r} is a {kind} tensor; an RNN's weights are dense tensors")
        if tensor.device.type != "cpu":
            raise FileReadError(path, f"tensor {key!r} holds no data (a {tensor.device.type} tensor)")
        stored = tensor.untyped_storage().nbytes() // max(tensor.element_size(), 1)
    except FileReadError:
        raise
    except Exception as error:  # a tensor torch rebuilt but cannot describe
        raise FileReadError(path, f"tensor {key!r} cannot be read ({type(error).__name__}: {one_line(error, 120)})") \
            from None
    if tensor.numel() > stored:
        raise FileReadError(path, f"tensor {key!r} declares shape {list(tensor.shape)} ({tensor.numel()} elements) "
                                  f"over a storage of {stored} elements: the file is corrupt")
    return tensor.numel() * BY_NAME[READ_DTYPES[_torch_dtype(tensor)]].itemsize


def _to_numpy(tensor: Any) -> np.ndarray:
    """An exact C-ordered copy (never a view into the file's storage); bfloat16 widened to float32."""
    import torch

    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.to(torch.float32)
    return np.array(tensor.numpy(), copy=True, order="C")


def _arrays(path: str, state: Mapping[str, Any], file_size: int, keys: list[str]) -> dict[str, np.ndarray]:
    """The tensors of ``keys`` as NumPy arrays, each checked and their total bounded before anything is copied."""
    total = sum(_checked_nbytes(path, key, state[key]) for key in keys)
    budget = MAX_COPY_FACTOR * file_size + 4096
    if total > budget:
        raise FileReadError(path, f"the RNNs' tensors would take {total} bytes, more than {MAX_COPY_FACTOR} times the "
                                  f"{file_size}-byte file (they share storage): read one RNN at a time with "
                                  "prefix=PREFIX")
    return {key: _to_numpy(state[key]) for key in keys}


def _module_hints(module: Any) -> tuple[dict[str, Any], list[str]]:
    """What a pickled ``nn.RNNBase`` says beyond its state_dict: hints (checked against the
    shapes) and notes."""
    hints = module_fields(module)
    notes: list[str] = []
    if not hints:
        return hints, notes
    if getattr(module, "batch_first", False) is True:
        notes.append("batch_first=True: the module takes batch-major input (time_major=False)")
    dropout = getattr(module, "dropout", 0)
    if isinstance(dropout, (int, float)) and dropout > 0:
        notes.append(f"dropout={dropout} between layers while training (not part of the weights)")
    return hints, notes


def _from_module(path: str, module: Any, found: list[FoundRNN], prefixes: list[str], how: str) -> list[FoundRNN]:
    """``found`` with what each RNN's own module says (mode, sizes checked, batch_first, dropout)."""
    result = []
    for item, prefix in zip(found, prefixes):
        try:
            sub = module.get_submodule(prefix[:-1]) if prefix else module
        except AttributeError:
            result.append(item)
            continue
        hints, notes = _module_hints(sub)
        where = f" inside a {how} {_class_name(module)}" if prefix else f" ({how})"
        try:
            item = item.with_hints(**hints)
        except ValueError as error:
            raise FileReadError(path, f"the module disagrees with its own weights: {error}") from None
        result.append(item.replace(source=f"PyTorch {_class_name(sub)} module{where}", notes=item.notes + tuple(notes)))
    return result


def read(path: str, kind: str, options: ReadOptions) -> list[FoundRNN]:
    """Every RNN in a PyTorch file (see the module docstring)."""
    import torch

    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(len(LOCAL_HEADER_SIGNATURE))
        handle.seek(0)
        layout = inspect_zip(path, handle) if head == LOCAL_HEADER_SIGNATURE else _inspect_legacy(path, handle, size)
        loaded = _torch_load(path, handle, layout, options.trust_pickle)
    target, entry = _pick(path, loaded, options)
    module = target if isinstance(target, torch.nn.Module) else None
    state = module.state_dict() if module is not None else target
    source = "state_dict" + (f" in checkpoint entry {entry!r}" if entry is not None else "")
    found = rnns_in_state_dict(path, state, options, source, dtype_of=_torch_dtype,
                               read=functools.partial(_arrays, path, state, size), readable=READ_DTYPES)
    if module is not None:
        found = _from_module(path, module, found, list(select_rnns(path, list(state), options.prefix)),
                             "TorchScript" if layout.torchscript else "pickled")
    return found
