"""What ``import cudnn_rnn`` costs and gives: the modules it loads, and every documented name after it.

The package imports the ops, the layers and what they stand on; every other module loads on first
use through ``cudnn_rnn._LAZY`` (a module ``__getattr__``). Each check runs in a fresh interpreter, so
that nothing a test imported before hides what the import itself loads. How long the import takes is
a benchmark (``benchmarks/bench_import.py``), not a test.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import cudnn_rnn
from docs_testing import documented_names

PACKAGE = Path(cudnn_rnn.__file__).resolve().parent  # the package under test: the checkout's, or the wheel's
REPO = Path(__file__).resolve().parents[1]

#: at most this many of the package's modules load with ``import cudnn_rnn``
MAX_IMPORTED = 20
#: what must not load with it: the subpackages a training step does not use, and cuDNN's library
NOT_IMPORTED = ("cudnn_rnn.convert", "cudnn_rnn.checkpoint", "cudnn_rnn.distributed", "cudnn_rnn.formats",
                "cudnn_rnn.params_file", "cudnn_rnn.files", "cudnn_rnn._cudnn._lib", "cudnn_rnn._cudnn._backend",
                "cudnn_rnn.cpu._backend")
#: the bridges load by their own import only (their frameworks may be missing)
BRIDGES = ("cudnn_rnn.jax", "cudnn_rnn.torch")


def _fresh(code: str) -> object:
    """What ``code`` (run in a new interpreter) prints as JSON on its last line."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_import_loads_a_few_modules_of_the_package_and_nothing_but_numpy_besides() -> None:
    loaded = _fresh("import sys, json, numpy\nbefore = set(sys.modules)\nimport cudnn_rnn\n"
                    "print(json.dumps(sorted(set(sys.modules) - before)))")
    assert isinstance(loaded, list)
    ours = [name for name in loaded if name == "cudnn_rnn" or name.startswith("cudnn_rnn.")]
    assert len(ours) <= MAX_IMPORTED, f"import cudnn_rnn loads {len(ours)} of the package's modules: {ours}"
    assert not set(NOT_IMPORTED) & set(ours), sorted(set(NOT_IMPORTED) & set(ours))
    others = {name.split(".")[0] for name in loaded} - {"cudnn_rnn", "numpy"} - set(sys.stdlib_module_names)
    assert not {name for name in others if not name.startswith("_")}, f"import cudnn_rnn loads {sorted(others)}"


def test_a_lazy_name_loads_its_module_at_first_use_and_is_kept() -> None:
    result = _fresh("import sys, json, cudnn_rnn\n"
                    "before = 'cudnn_rnn.convert' in sys.modules\n"
                    "first = cudnn_rnn.convert.read_file\n"
                    "from cudnn_rnn import checkpoint, set_num_threads\n"
                    "print(json.dumps([before, 'cudnn_rnn.convert' in sys.modules,"
                    " first is cudnn_rnn.convert.read_file, checkpoint.__name__,"
                    " set_num_threads is cudnn_rnn.cpu.set_num_threads,"
                    " 'set_num_threads' in vars(cudnn_rnn), 'allow_tf32' in dir(cudnn_rnn)]))")
    assert result == [False, True, True, "cudnn_rnn.checkpoint", True, True, True]


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="module 'cudnn_rnn' has no attribute 'LTSM'"):
        cudnn_rnn.LTSM  # noqa: B018  (the attribute access is the test)
    assert not hasattr(cudnn_rnn, "_lib")


def test_type_checkers_see_every_lazy_name() -> None:
    """The ``if TYPE_CHECKING:`` imports of ``cudnn_rnn/__init__.py`` bind exactly ``_LAZY``'s names, each from
    the module ``_LAZY`` loads it from."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    [block] = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            assert alias.asname in (None, alias.name), ast.unparse(node)
            seen[alias.name] = "cudnn_rnn" + (f".{node.module}" if node.module else f".{alias.name}")
    assert seen == cudnn_rnn._LAZY


def test_every_name_in_all_resolves() -> None:
    public = ["cudnn_rnn", *(f"cudnn_rnn.{name}" for name in ("layers", "config", "layout", "ops", "optim", "cpu",
                                                              "formats", "convert", "checkpoint", "distributed",
                                                              "files", "params_file", "info", "cuda_graph",
                                                              "gru_block"))]
    missing = _fresh("import importlib, json\n"
                     f"print(json.dumps([f'{{module}}.{{name}}' for module in {public!r} "
                     "for name in importlib.import_module(module).__all__ "
                     "if not hasattr(importlib.import_module(module), name)]))")
    assert missing == []


def _documented_names() -> list[str]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return sorted({name for page in pages for name in documented_names(page.read_text(encoding="utf-8"))})


def test_every_documented_name_resolves_after_a_plain_import() -> None:
    """``import cudnn_rnn`` (and each bridge's own import) and attribute access alone reach every
    ``cudnn_rnn`` name the README and the docs site mention: no other import is needed."""
    names = _documented_names()
    assert len(names) > 80 and "cudnn_rnn.convert.read_file" in names, names
    code = f"""
import importlib, json
import cudnn_rnn
unresolved = []
for dotted in {names!r}:
    parts = dotted.split(".")
    bridge = next((b for b in {BRIDGES!r} if dotted == b or dotted.startswith(b + ".")), None)
    target = importlib.import_module(bridge) if bridge else cudnn_rnn
    for part in parts[len(bridge.split(".")) if bridge else 1:]:
        if not hasattr(target, part):
            unresolved.append(dotted)
            break
        target = getattr(target, part)
print(json.dumps(unresolved))
"""
    assert _fresh(code) == []
