"""Resolve a Python reference made through another import path of a documented object.

The API pages document each object once, under the name users import it by (``cudnn_rnn.LSTM``,
``cudnn_rnn.convert.FoundRNN``). Type hints rendered by autodoc, though, name an object by where it
is defined (``cudnn_rnn.layers.LSTM``, ``cudnn_rnn.convert.readers._found.FoundRNN``), and a
docstring may name it through any module that exports it. When such a reference finds no target,
this extension imports the name it gives and, if that is the very object documented under another
name (a class, function, method, property or module; never a constant, whose identity means
nothing), links to that documentation. A type alias of ``typing.Any`` (``Array``, which a type hint
shows by name where autodoc cannot evaluate it) is shown unlinked, as ``Any`` itself is. A name that
imports nothing, or an object documented nowhere, stays a broken reference, which the nitpicky
build reports.
"""

from __future__ import annotations

import functools
import importlib
import types
import weakref
from typing import Any, cast

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.domains.python import PythonDomain
from sphinx.environment import BuildEnvironment

#: the package whose names are aliased
PACKAGE = "cudnn_rnn"

#: kinds of objects whose identity says "the same thing" (constants are left out: ``8`` is not PROJECTION_ID)
IDENTIFIABLE = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, property,
                functools.cached_property)

_MISSING = object()


def import_name(dotted: str) -> Any:
    """The object a dotted name gives (the longest importable module, then attributes), or ``_MISSING``."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            try:
                value = inspect_attribute(value, attribute)
            except AttributeError:
                return _MISSING
        return value
    return _MISSING


def inspect_attribute(owner: Any, name: str) -> Any:
    """``owner.name`` as defined (a property or classmethod itself, not what calling it gives)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
    return getattr(owner, name)


def identity(value: Any) -> int | None:
    """A key equal for every path to one function, class, module or property; None for anything else."""
    value = getattr(value, "__func__", value)  # classmethod and staticmethod wrappers
    return id(value) if isinstance(value, IDENTIFIABLE) else None


#: per build (application): identity -> documented name, made at the first missing reference
_DOCUMENTED: weakref.WeakKeyDictionary[Sphinx, dict[int, str]] = weakref.WeakKeyDictionary()


def documented_names(app: Sphinx, env: BuildEnvironment) -> dict[int, str]:
    """identity -> the name under which the Python domain documents that object (computed once per build)."""
    cache = _DOCUMENTED.get(app)
    if cache is None:
        cache = {}
        for name in sorted(cast(PythonDomain, env.get_domain("py")).objects):
            if name.split(".")[0] == PACKAGE:
                key = identity(import_name(name))
                if key is not None:
                    cache.setdefault(key, name)
        _DOCUMENTED[app] = cache
    return cache


def resolve_alias(app: Sphinx, env: BuildEnvironment, node: pending_xref,
                  contnode: nodes.TextElement) -> nodes.Element | None:
    """The ``missing-reference`` handler: link an alias of a documented object to its documentation."""
    if node.get("refdomain") != "py":
        return None
    documented = documented_names(app, env)
    for target in candidates(node):
        value = import_name(target)
        if value is Any:  # a type alias of Any (``Array``): shown by its name, with nothing to link, as Any is
            return contnode
        key = identity(value)
        name = documented.get(key) if key is not None else None
        if name is not None and name != target:
            return env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder, node["reftype"], name, node,
                                                    contnode)
    return None


def candidates(node: pending_xref) -> list[str]:
    """The full names a reference may mean: itself when it names the package, else as seen from where it is
    written (``CheckpointError`` in the docstring of ``cudnn_rnn.checkpoint`` is
    ``cudnn_rnn.checkpoint.CheckpointError``)."""
    target = node.get("reftarget", "").lstrip(".~")
    if target.split(".")[0] == PACKAGE:
        return [target]
    module, klass = node.get("py:module"), node.get("py:class")
    if not module or module.split(".")[0] != PACKAGE:
        return []
    return ([f"{module}.{klass}.{target}"] if klass else []) + [f"{module}.{target}"]


def forget(app: Sphinx, *args: Any) -> None:
    """Documented names change when sources are read again."""
    _DOCUMENTED.pop(app, None)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("missing-reference", resolve_alias)
    app.connect("env-updated", forget)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
