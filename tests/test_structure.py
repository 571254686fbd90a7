"""The package's shape: imports run one way, packages meet through their ``__init__``, at most 20 modules
sit side by side at the top, and no module grows past 600 lines (``_lib.py`` aside).

Every import counts, at the top of a module or inside a function (a lazy import is a dependency
too), ``TYPE_CHECKING`` blocks aside (types only), and importing ``a.b.c`` imports the packages
``a`` and ``a.b`` too (their ``__init__`` runs). A module's imports of its own enclosing packages
(``from . import _lib``) are how a package assembles itself and are left out; everything else must
form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cudnn_rnn

PACKAGE = Path(cudnn_rnn.__file__).resolve().parent  # the package under test: the checkout's, or an installed wheel's
MAX_LINES = 600
ALLOWED_LONG = {"_lib.py"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports (resolved to modules of ``known``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - node.level + 1]
                module = ".".join(anchor + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets.add(module)
            targets.update(f"{module}.{alias.name}" for alias in node.names)
    enclosing = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1 + is_package)}
    found: set[str] = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        while target:  # the module and the packages its import runs
            if target != name and target not in enclosing:
                found.add(target)
            target = target.rpartition(".")[0]
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_package_imports_run_one_way() -> None:
    graph = _graph()
    assert len(graph) > 50, f"found {len(graph)} modules under {PACKAGE}"
    cycle = _cycle(graph)
    assert cycle is None, "an import cycle: " + " -> ".join(cycle or [])


def test_the_checker_sees_lazy_imports_and_cycles() -> None:
    graph = _graph()
    # the layers build on the weight formats; the model-file readers build on the layers
    assert "cudnn_rnn.formats" in graph["cudnn_rnn.layers._recurrent_layer"]
    assert "cudnn_rnn.layers" in graph["cudnn_rnn.convert.readers._found"]
    assert "cudnn_rnn.ops" in graph["cudnn_rnn.layers._recurrent_layer"]
    assert "cudnn_rnn.cpu._backend" in graph["cudnn_rnn.ops"]  # imported inside a function
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


#: the page that draws the package's layers (the tests sit beside docs/ in a checkout and in CI's copy of it)
CONTRIBUTING = Path(__file__).resolve().parent.parent / "docs" / "contributing.md"
#: the faces that hand out the backends' own facts (versions, settings, streams), as the page names them
BACKEND_FACES = ("cli", "info", "jax", "torch")


def _drawn_layers(page: str) -> tuple[tuple[str, ...], ...]:
    """The layers of the page's drawing, top first: the indented block after "The package is layered", its
    layers parted by ``->`` and their names by commas."""
    after = page.split("The package is layered", 1)[1].split("\n\n", 1)[1]
    drawing = " ".join(line.strip() for line in after.split("\n\n", 1)[0].splitlines())
    return tuple(tuple(name.strip() for name in layer.split(",")) for layer in drawing.split("->"))


LAYERS = _drawn_layers(CONTRIBUTING.read_text(encoding="utf-8"))


def _layer_of(module: str) -> int:
    name = module.split(".")[1] if "." in module else module
    found = [index for index, names in enumerate(LAYERS) if name in names]
    assert found, f"{module} has no layer in docs/contributing.md's drawing"
    return found[0]


def _crossings(graph: dict[str, set[str]]) -> list[str]:
    """Imports that run up the layers, or that reach a backend from above the ops without being a backend face."""
    backends = LAYERS.index(("cpu", "_cudnn"))
    found = []
    for importer, targets in graph.items():
        for target in targets:
            low, high = _layer_of(importer), _layer_of(target)
            top = importer.split(".")[1] if "." in importer else importer
            if high < low or (high == backends and low < backends - 1 and top not in BACKEND_FACES):
                found.append(f"{importer} -> {target}")
    return sorted(found)


def test_imports_run_down_the_layers_as_the_contributing_page_draws_them() -> None:
    crossings = _crossings(_graph())
    assert not crossings, "imports against the layers docs/contributing.md draws:\n" + "\n".join(crossings)
    tops = {path.stem if path.suffix else path.name for path in PACKAGE.iterdir()
            if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()}
    drawn = {name for layer in LAYERS for name in layer}
    assert drawn == tops | {"cudnn_rnn"}, f"drawn but absent: {sorted(drawn - tops - {'cudnn_rnn'})}; " \
                                           f"absent from the drawing: {sorted(tops - drawn)}"
    page = CONTRIBUTING.read_text(encoding="utf-8")
    assert all(f"`{face}`" in page for face in BACKEND_FACES), BACKEND_FACES
    # the checker sees an import up, and one that skips the ops to reach a backend
    assert _crossings({"cudnn_rnn.config": {"cudnn_rnn.ops"}}) == ["cudnn_rnn.config -> cudnn_rnn.ops"]
    skipping = {"cudnn_rnn.layers._x": {"cudnn_rnn._cudnn._y"}}
    assert _crossings(skipping) == ["cudnn_rnn.layers._x -> cudnn_rnn._cudnn._y"]
    assert _crossings({"cudnn_rnn.ops": {"cudnn_rnn._cudnn._y"}, "cudnn_rnn.info": {"cudnn_rnn.cpu"}}) == []
    drawing = "The package is layered:\n\n    a, b  ->  c\n      ->  d\n\nmore"
    assert _drawn_layers(drawing) == (("a", "b"), ("c",), ("d",))


#: the package's own modules directly under cudnn_rnn/ (its __init__ and __main__ included); the rest sit in packages
MAX_TOP_MODULES = 20


def test_at_most_20_modules_sit_directly_under_the_package() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules directly under cudnn_rnn/: {top}"
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert {"_cudnn", "cpu", "layers", "formats", "convert"} <= packages, packages  # the backends, the layers, ...


#: the op layer's way down to the reference backend, whose package's public face is its CPU settings
BACKEND_INTERFACES = {"cudnn_rnn.cpu._backend"}


def _reaches_in(importer: str, target: str) -> bool:
    """Whether ``importer`` takes ``target``, a private module of a package that ``importer`` is not part of
    (``cudnn_rnn.convert.into`` -> ``cudnn_rnn.convert.readers._zip``). The top package's own private modules
    (``cudnn_rnn._checks``) and private packages (``cudnn_rnn._cudnn``) are everyone's base."""
    parts = target.split(".")
    depth = next((depth for depth in range(1, len(parts)) if parts[depth].startswith("_")), None)
    if depth is None or depth == 1:  # a public module, or the top package's own
        return False
    owner = ".".join(parts[:depth])
    return not (importer == owner or importer.startswith(owner + "."))


def test_packages_meet_through_their_init() -> None:
    """A module outside a package takes the package's names from its ``__init__`` (or its public modules), never
    from its private modules; the op's way down to the reference backend aside."""
    reaching = sorted(f"{importer} -> {target}" for importer, targets in _graph().items() for target in targets
                      if _reaches_in(importer, target) and target not in BACKEND_INTERFACES)
    assert not reaching, "imports that reach into another package's private modules:\n" + "\n".join(reaching)
    assert _reaches_in("cudnn_rnn.convert.saving", "cudnn_rnn.formats._core")
    assert _reaches_in("cudnn_rnn.convert.into", "cudnn_rnn.convert.readers._zip")  # a sibling's private module
    assert not _reaches_in("cudnn_rnn.convert.readers._keras_file", "cudnn_rnn.convert.readers._zip")
    assert not _reaches_in("cudnn_rnn.ops", "cudnn_rnn._cudnn._settings")  # a private package
    assert not _reaches_in("cudnn_rnn.formats._core", "cudnn_rnn._checks")  # the package's own base


@pytest.mark.parametrize("path", [path for path in sorted(PACKAGE.rglob("*.py")) if path.name not in ALLOWED_LONG],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_600_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines; split it by what its parts do"


#: the modules that may import ctypes: the one C boundary (cuDNN)
CTYPES_MODULES = {"cudnn_rnn._cudnn._lib"}


def _imports_ctypes(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "ctypes" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ctypes":
            return True
    return False


def test_only_the_c_boundaries_import_ctypes() -> None:
    importers = {name for name, path in _modules().items() if _imports_ctypes(path)}
    outside = sorted(importers - CTYPES_MODULES)
    assert not outside, f"ctypes imported outside the C boundaries: {outside}"
    assert "cudnn_rnn._cudnn._lib" in importers


#: the framework bridges: thin adapters on JAX's and PyTorch's own extension points
BRIDGES = ("_bridge.py", "jax", "torch")
# under 1,050: the torch modules' from_torch (nn.LSTM -> module, its facts in formats.torch) and the JAX seeds as
# operands came in at about 1,045; passing one validated config down the op path is what will bring them down
MAX_BRIDGE_LINES = 1049
MAX_JAX_LINES = 295  # cudnn_rnn.jax: a custom_vjp over two buffer callbacks, the seeds as operands


def test_the_bridges_stay_small() -> None:
    files = [path for name in BRIDGES for path in ([PACKAGE / name] if name.endswith(".py")
                                                   else sorted((PACKAGE / name).glob("*.py")))]
    lines = {str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines()) for path in files}
    assert sum(lines.values()) <= MAX_BRIDGE_LINES, f"the bridges have {sum(lines.values())} lines: {lines}"
    jax_lines = sum(count for name, count in lines.items() if name.startswith("jax/"))
    assert jax_lines <= MAX_JAX_LINES, f"cudnn_rnn/jax has {jax_lines} lines: {lines}"
