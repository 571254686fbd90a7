"""Nested plain values with arrays inside, to and from one JSON text plus named arrays.

    {"state": {"step": 3, "curve": [0.5, 0.4], "mask": <array>}}
      <->  '{"state":{"step":3,"curve":[0.5,0.4],"mask":{"$array":"state/mask"}}}'  and  {"state/mask": <array>}

A tree is made of None, bool, int, float (NaN and infinities included), str, lists (tuples
come back as lists), dicts with str keys, NumPy or CuPy arrays (they come back as NumPy
arrays; bfloat16 ones are read with ml_dtypes) and NumPy scalars (they come back as Python
numbers). An array's name is its path from the root, keys joined by "/" ("~" written "~0" and
"/" written "~1", as in a JSON pointer), so names never collide. Nothing else is stored: no
pickle, so reading a tree never runs code.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from .._arrays import array_kind, to_host

__all__ = ["ARRAY_KEY", "flatten", "unflatten"]

#: the key of the JSON object that stands for an array
ARRAY_KEY = "$array"


def flatten(tree: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """(a JSON-ready copy of ``tree`` with arrays replaced by references, the arrays by name, on the host)."""
    arrays: dict[str, np.ndarray] = {}
    return _flatten(tree, [], arrays), arrays


def unflatten(value: Any, arrays: dict[str, np.ndarray], used: set[str]) -> Any:
    """The tree that :func:`flatten` made ``value`` from, with each reference replaced by its array.

    Adds every array name it uses to ``used``; raises ValueError for a reference to an array
    that is not there, or used twice.
    """
    if isinstance(value, dict):
        if ARRAY_KEY in value:
            name = value[ARRAY_KEY]
            if len(value) != 1 or not isinstance(name, str) or name not in arrays or name in used:
                raise ValueError(f"bad array reference {json.dumps(value)[:100]} (an array that is missing, "
                                 "or used twice)")
            used.add(name)
            return arrays[name]
        return {key: unflatten(item, arrays, used) for key, item in value.items()}
    if isinstance(value, list):
        return [unflatten(item, arrays, used) for item in value]
    return value


def _flatten(value: Any, path: list[str], arrays: dict[str, np.ndarray]) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, int) and not isinstance(value, bool) and value and math.log10(abs(value)) > 4000:
            raise ValueError(f"{_where(path)}: an integer of more than 4000 digits cannot be stored in a checkpoint")
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return _flatten(value.item(), path, arrays)
    if array_kind(value) is not None:
        host = to_host(value)
        if (host.dtype.kind not in "biuf" or host.dtype.itemsize > 8) and host.dtype.name != "bfloat16":
            raise TypeError(f"{_where(path)}: a {host.dtype} array cannot be stored in a checkpoint; arrays of "
                            "bool, integer, float16/32/64 and bfloat16 can")
        name = "/".join(part.replace("~", "~0").replace("/", "~1") for part in path)
        arrays[name] = host
        return {ARRAY_KEY: name}
    if isinstance(value, (list, tuple)):
        return [_flatten(item, [*path, str(i)], arrays) for i, item in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"{_where(path)}: dict keys must be strings; got {type(key).__name__} {key!r:.40}")
        if ARRAY_KEY in value:
            raise ValueError(f"{_where(path)}: the key {ARRAY_KEY!r} is reserved for arrays in a checkpoint")
        return {key: _flatten(item, [*path, key], arrays) for key, item in value.items()}
    raise TypeError(f"{_where(path)}: a {type(value).__name__} cannot be stored in a checkpoint; use None, bool, "
                    "int, float, str, lists, dicts with str keys, and NumPy or CuPy arrays")


def _where(path: list[str]) -> str:
    return path[0] + "".join(f"[{part!r}]" for part in path[1:]) if path else "the checkpoint"
