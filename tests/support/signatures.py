"""A constructor's signature as its source text states it, for comparison with what ``inspect.signature`` shows."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Callable


def source_signature(function: Callable[..., object]) -> inspect.Signature:
    """The signature of ``function`` (a method: ``self`` left out) parsed from its source text by ``ast``: each
    parameter's name, kind, default (a literal) and annotation (its text, as ``from __future__ import
    annotations`` keeps it)."""
    definition = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    assert isinstance(definition, ast.FunctionDef), definition
    args = definition.args
    assert not (args.posonlyargs or args.vararg or args.kwarg), f"{function.__qualname__} takes *args or **kwargs"

    def parameter(arg: ast.arg, kind: inspect._ParameterKind, default: ast.expr | None) -> inspect.Parameter:
        assert arg.annotation is not None, f"{function.__qualname__}: {arg.arg} has no annotation"
        value = inspect.Parameter.empty if default is None else ast.literal_eval(default)
        return inspect.Parameter(arg.arg, kind, default=value, annotation=ast.unparse(arg.annotation))

    positional = args.args[1:]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    parameters = [parameter(arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default)
                  for arg, default in zip(positional, defaults)]
    parameters += [parameter(arg, inspect.Parameter.KEYWORD_ONLY, default)
                   for arg, default in zip(args.kwonlyargs, args.kw_defaults)]
    returns = inspect.Signature.empty if definition.returns is None else ast.unparse(definition.returns)
    return inspect.Signature(parameters, return_annotation=returns)
