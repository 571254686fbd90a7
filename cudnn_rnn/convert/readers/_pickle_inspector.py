"""Pickles read without running them: what they hold, with stand-ins for every class they name.

    inspected = inspect_pickle(path, stream, end, "data.pkl")       the pickle from ``stream``'s position
    inspected.root      the top object: dicts, lists, numbers as they are; an object of a class or
                        function the pickle names is a Pickled stand-in (its module, name, args, state)
    inspected.names     ["collections.OrderedDict", "torch._utils._rebuild_tensor_v2", ...]
    inspected.records   the persistent ids (torch's storage records), only recorded

Before anything is built, the opcodes are walked (:func:`pickletools.genops`): every counted
argument must be present, memo indices and frames bounded by the pickle's size, since a C
unpickler allocates what they declare. Nothing is imported, called or allocated beyond the file.
"""

from __future__ import annotations

import pickle
import pickletools
from dataclasses import dataclass, field
from typing import Any

from ._found import FileReadError, one_line

__all__ = ["inspect_pickle", "Pickled"]


#: the names one pickle may refer to (classes, functions) before it is refused as absurd
MAX_PICKLED_NAMES = 4096


class Pickled:
    """Stands for an object of a class or function that a pickle names; nothing of it is imported or run.

    Subclasses made by :class:`_Inspector` carry the ``module`` and ``name`` the pickle gave.
    """

    module = ""
    name = ""
    args: tuple[Any, ...]
    state: Any
    items: list[Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> "Pickled":
        self = object.__new__(cls)
        self.args, self.state, self.items = args, None, []
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "Pickled":
        return type(self)(*args)

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items.append((key, value))

    def append(self, value: Any) -> None:
        self.items.append(value)

    def extend(self, values: Any) -> None:
        self.items.extend(values)

    def add(self, value: Any) -> None:
        self.items.append(value)


@dataclass
class InspectedPickle:
    """What one pickle holds: its top object (stand-ins for anything it names), the names, the
    persistent ids (torch's storage records)."""

    root: Any
    names: list[str] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)


class _Inspector(pickle.Unpickler):
    """Reads a pickle's structure: every class or function it names becomes a :class:`Pickled`
    stand-in (never imported), every persistent id is only recorded."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream, encoding="utf-8")
        self.classes: dict[tuple[str, str], type] = {}
        self.records: list[Any] = []

    def find_class(self, module: str, name: str) -> type:
        key = (str(module), str(name))
        if key not in self.classes:
            if len(self.classes) >= MAX_PICKLED_NAMES:
                raise pickle.UnpicklingError(f"more than {MAX_PICKLED_NAMES} classes and functions named")
            self.classes[key] = type("Pickled", (Pickled,), {"module": key[0], "name": key[1]})
        return self.classes[key]

    def persistent_load(self, pid: Any) -> Any:
        self.records.append(pid)
        return pid


def _check_opcodes(path: str, stream: Any, end: int, what: str) -> None:
    """Walk one pickle's opcodes, nothing built, checking what the module docstring says."""
    for ops, (opcode, arg, position) in enumerate(pickletools.genops(stream), 1):
        if opcode.name in ("PUT", "BINPUT", "LONG_BINPUT") and isinstance(arg, int) and arg > 2 * ops + 1024:
            raise FileReadError(path, f"{what}: memo index {arg} at byte {position} is out of all proportion: "
                                      "the file is corrupt")
        if opcode.name == "FRAME" and isinstance(arg, int) and arg > end - (position or 0):
            raise FileReadError(path, f"{what}: a frame of {arg} bytes at byte {position} runs past the end of the "
                                      "file: the file is truncated or corrupt")


def inspect_pickle(path: str, stream: Any, end: int, what: str) -> InspectedPickle:
    """One pickle from ``stream`` (at its start) read by :class:`_Inspector`, after :func:`_check_opcodes`."""
    start = stream.tell()
    try:
        _check_opcodes(path, stream, end, what)
        stream.seek(start)
        inspector = _Inspector(stream)
        root = inspector.load()
    except FileReadError:
        raise
    except Exception as error:  # malformed pickle data of any kind is the file's fault
        raise FileReadError(path, f"{what} is not a readable pickle ({type(error).__name__}: {one_line(error, 160)}): "
                                  "the file is truncated or corrupt") from None
    names = [f"{module}.{name}" for module, name in inspector.classes]
    return InspectedPickle(root, names, inspector.records)
