"""Running the user guides (``docs/guides/**/*.md``): every code block runs, every name they use exists.

Imported by name (``from docs_testing import ...``); tests/conftest.py puts this folder on ``sys.path``.

A guide is a MyST Markdown page. Each fenced block has one meaning here, and a kind of block not
in this table fails the page, so nothing a page shows goes untested by accident:

================================  ==============================================================
the block                         what :func:`run_page` does with it
================================  ==============================================================
```` ```python ````               executed, in page order, in one namespace per page, with the
                                  current directory a fresh folder of the page's own
```` ```{code-block} python ````  with ``:class: gpu`` (and ``:caption: needs a CUDA GPU``, for
                                  the reader): needs a GPU. Compiled, and every
                                  ``cudnn_rnn`` name it uses must exist; executed in page order
                                  only with ``gpu=True`` (tests/gpu/test_docs_gpu.py)
```` ```{code-block} python ````  with ``:caption: NAME.py``: a script, written to ``NAME.py`` in
                                  the page's folder (for a console block to run), not executed
```` ```console ````              each ``$ COMMAND`` line is run in the page's folder and what it
                                  prints must be the lines below it (see :func:`output_matches`)
```` ```bash ````                 shown, not run (installs, long runs): an example's path and
                                  flags, an extra of ``pip install``, a ``cudnn-rnn`` command
                                  line must exist (:func:`check_bash_block`)
```` ```text ````                 shown as it is (equations, a file's layout): nothing to run
```` ```{params-layout} ````      the site's layout drawing: its options must form a valid
                                  :class:`cudnn_rnn.RNNConfig` whose layout can be built
```` ```{toctree} ````            the table of contents (:func:`toctree_pages`)
================================  ==============================================================

Admonitions use colon fences (``:::{note}``), so every code block is a top-level backtick fence.

A console block's commands are ``$ cudnn-rnn ...`` (run as ``python -m cudnn_rnn ...``); a page
run by another runner may pass its own ``commands`` (the distributed guide runs ``mpiexec``).
Outputs are compared line by line after trailing spaces are stripped, with one wildcard,
``...``: a line that is only ``...`` stands for any number of lines (none included), and
``...`` inside a line for any text on that line. Use it only where the output depends on the
machine.

Which test runs which page is :data:`PAGE_RUNNERS`: one runner per page, and a page missing
from it fails ``tests/test_docs_guides.py``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

REPO = Path(__file__).resolve().parents[2]
GUIDES = REPO / "docs" / "guides"

#: runner -> the test file that runs its pages
RUNNER_TESTS: dict[str, str] = {
    "default": "tests/test_docs_guides.py",
    "oracle": "tests/oracle/test_docs_guides_oracle.py",
    "distributed": "tests/distributed/test_docs_distributed.py",
    "torchrun": "tests/test_torch_ddp.py",
    "jax-devices": "tests/test_jax_bridge.py",
}

#: every page of docs/guides (relative to it) -> the one runner that runs it. The default runner needs
#: only the test extra; "oracle" pages need TensorFlow, Keras, onnxruntime or mygrad; the distributed
#: page launches its script under mpiexec. GPU blocks may sit only on default pages:
#: tests/gpu/test_docs_gpu.py runs those pages again, GPU blocks included.
PAGE_RUNNERS: dict[str, str] = {
    "index.md": "default",
    "ops.md": "default",
    "params-layout.md": "default",
    "converting/index.md": "default",
    "converting/pytorch.md": "default",
    "converting/npz.md": "default",
    "converting/keras.md": "oracle",
    "converting/tensorflow.md": "oracle",
    "converting/onnx.md": "oracle",
    "converting/gru-block-cell.md": "oracle",
    "converting/porting-tf1.md": "oracle",
    "converting/into-your-model.md": "oracle",
    "jax.md": "default",
    "jax-data-parallel.md": "jax-devices",
    "torch.md": "default",
    "training.md": "default",
    "distributed.md": "distributed",
    "torch-ddp.md": "torchrun",
    "checkpoints.md": "default",
    "gpu.md": "default",
    "tensorflow-differences.md": "default",
}

#: a console command's output may take this long (a TensorFlow import included)
COMMAND_TIMEOUT = 240

WILDCARD = "..."

_FENCE = re.compile(r"^(`{3,})(.*)$")
_OPTION = re.compile(r"^:([\w-]+):\s*(.*)$")
_ROLE = re.compile(r"\{(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj)\}`([^`]+)`")
_INLINE_NAME = re.compile(r"`~?(cudnn_rnn(?:\.\w+)+)")
_INLINE_COMMAND = re.compile(r"`cudnn-rnn (\w+)")


# ---- reading a page ------------------------------------------------------------------------------
def shown(page: Path) -> str:
    """How messages name a page: relative to the repository when it lies inside it."""
    return str(page.relative_to(REPO)) if page.is_relative_to(REPO) else str(page)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page.

    Attributes:
        page: the page's path.
        line: the page line (1-based) of the block's first line of content.
        kind: ``python``, ``gpu``, ``script``, ``console``, ``bash``, ``text``, ``params-layout`` or
            ``toctree``.
        options: the directive's ``:name: value`` options.
        text: the content, without the options.
    """

    page: Path
    line: int
    kind: str
    options: Mapping[str, str]
    text: str

    @property
    def where(self) -> str:
        return f"{shown(self.page)}:{self.line}"


def _kind(info: str, options: Mapping[str, str], where: str) -> str:
    info = info.strip()
    if info in ("python", "console", "bash", "text"):
        return info
    directive = re.fullmatch(r"\{([\w-]+)\}\s*(.*)", info)
    if directive and directive[1] in ("params-layout", "toctree"):
        return directive[1]
    if directive and directive[1] == "code-block" and directive[2] == "python":
        classes = options.get("class", "").split()
        if "gpu" in classes:
            return "gpu"
        if re.fullmatch(r"[\w-]+\.py", options.get("caption", "")):
            return "script"
    raise AssertionError(f"{where}: a block ```{info} has no meaning for the guide tests; use ```python, "
                         "```console, ```bash, ```text, a {code-block} python with :class: gpu or :caption: NAME.py, "
                         "{params-layout} or {toctree} (tests/support/docs_testing.py)")


def read_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order (see the module docstring for the kinds)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, info = opening[1], opening[2]
        end = index + 1
        while end < len(lines) and not re.fullmatch(rf"{fence}`*\s*", lines[end]):
            end += 1
        if end == len(lines):
            raise AssertionError(f"{shown(page)}:{index + 1}: the block opened here is never closed")
        body = lines[index + 1:end]
        options: dict[str, str] = {}
        first = 0
        if info.strip().startswith("{"):
            while first < len(body) and _OPTION.match(body[first]):
                match = _OPTION.match(body[first])
                assert match
                options[match[1]] = match[2].strip()
                first += 1
        while first < len(body) and not body[first].strip() and options:
            first += 1
        where = f"{shown(page)}:{index + 1}"
        blocks.append(Block(page, index + 2 + first, _kind(info, options, where), options,
                            "\n".join(body[first:]) + "\n"))
        index = end + 1
    return blocks


def guide_pages() -> list[str]:
    """Every page of docs/guides, relative to it, sorted."""
    return sorted(path.relative_to(GUIDES).as_posix() for path in GUIDES.rglob("*.md"))


def pages_for(runner: str) -> list[str]:
    """The pages :data:`PAGE_RUNNERS` gives ``runner``."""
    assert runner in RUNNER_TESTS, f"unknown runner {runner!r}"
    return [page for page, owner in PAGE_RUNNERS.items() if owner == runner]


def toctree_pages(page: str) -> list[str]:
    """The pages (relative to docs/guides, with ``.md``) that the toctrees of ``page`` list."""
    folder = (GUIDES / page).parent
    listed = []
    for block in read_blocks(GUIDES / page):
        if block.kind == "toctree":
            for entry in block.text.split():
                listed.append((folder / f"{entry}.md").relative_to(GUIDES).as_posix())
    return listed


# ---- names ---------------------------------------------------------------------------------------
def resolve(dotted: str) -> object:
    """The object ``dotted`` names (``cudnn_rnn.convert.FoundRNN.to_layer``), importing submodules as needed.

    Raises:
        AssertionError: nothing of that name exists.
    """
    parts = dotted.split(".")
    target: object = importlib.import_module(parts[0])
    for depth, part in enumerate(parts[1:], start=1):
        if hasattr(target, part):
            target = getattr(target, part)
            continue
        try:
            target = importlib.import_module(".".join(parts[:depth + 1]))
        except ImportError:
            raise AssertionError(f"{dotted} does not exist ({'.'.join(parts[:depth])} has no {part!r})") from None
    return target


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the cudnn_rnn name it is bound to by the imports in ``tree``."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "cudnn_rnn":
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases["cudnn_rnn"] = "cudnn_rnn"
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "cudnn_rnn":
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def cudnn_rnn_names(code: str, context: Sequence[str] = ()) -> set[str]:
    """The ``cudnn_rnn`` names ``code`` uses: what it imports, and every attribute chain on a name
    bound to a ``cudnn_rnn`` module or object by its imports or those of the ``context`` blocks."""
    tree = ast.parse(code)
    aliases: dict[str, str] = {}
    for earlier in context:
        aliases.update(_aliases(ast.parse(earlier)))
    own = _aliases(tree)
    aliases.update(own)
    names = set(own.values())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)):
            chain = _dotted(node)
            if chain and chain[0] in aliases:
                names.add(".".join([aliases[chain[0]], *chain[1:]]))
    return names


def documented_names(text: str) -> list[str]:
    """The ``cudnn_rnn`` names Markdown ``text`` cross-references (``{func}`cudnn_rnn.x```) or quotes
    (```cudnn_rnn.x```), sorted, each once."""
    names = set(_INLINE_NAME.findall(text))
    for target in _ROLE.findall(text):
        target = re.sub(r"^.*<(.+)>$", r"\1", target).lstrip("~")
        if target.startswith("cudnn_rnn"):
            names.add(target)
    return sorted(names)


def check_prose_names(page: Path) -> list[str]:
    """Resolve every ``cudnn_rnn`` name the page's text cross-references or quotes, and every
    ``cudnn-rnn`` subcommand it names; returns the names checked.

    Raises:
        AssertionError: a name or a subcommand does not exist.
    """
    from cudnn_rnn.cli import SUBCOMMANDS

    text = page.read_text(encoding="utf-8")
    checked = documented_names(text)
    for dotted in checked:
        try:
            resolve(dotted)
        except AssertionError as error:
            raise AssertionError(f"{shown(page)} names {dotted}: {error}") from None
    for command in _INLINE_COMMAND.findall(text):
        assert command in SUBCOMMANDS, f"{shown(page)} names `cudnn-rnn {command}`, which does not exist"
        importlib.import_module(SUBCOMMANDS[command][0])
    return checked


# ---- console blocks --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """One ``$ COMMAND`` of a console block and the lines it must print."""

    line: int
    argv: tuple[str, ...]
    expected: tuple[str, ...]


def read_console(block: Block) -> list[Command]:
    """The commands of a console block: ``$ `` lines (a trailing backslash continues one), each
    followed by its output lines."""
    commands: list[Command] = []
    lines = block.text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            raise AssertionError(f"{block.where}: console line {index + 1} is neither a '$ ' command nor "
                                 f"the output of one: {line!r}")
        start = index
        command = line[2:]
        while command.endswith("\\"):
            index += 1
            command = command[:-1] + lines[index].strip()
        index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index].rstrip())
            index += 1
        while output and not output[-1]:
            output.pop()
        commands.append(Command(block.line + start, tuple(shlex.split(command, comments=True)), tuple(output)))
    return commands


def output_matches(expected: Sequence[str], actual: str) -> bool:
    """Whether ``actual`` (trailing spaces and blank lines stripped) is ``expected``, with the wildcard:
    a line ``...`` matches any number of lines, ``...`` inside a line any text on it."""
    pattern = ""
    for line in expected:
        if line.strip() == WILDCARD:
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += "[^\n]*".join(re.escape(part) for part in line.split(WILDCARD)) + r"\n"
    lines = [line.rstrip() for line in actual.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    text = "".join(line + "\n" for line in lines)
    return re.fullmatch(pattern, text) is not None


#: runs one console command in a folder: (argv, folder) -> (exit status, stdout, stderr)
CommandRunner = Callable[[Sequence[str], Path], tuple[int, str, str]]


def command_environment() -> dict[str, str]:
    """This checkout importable, TensorFlow's start-up logging off, no plot window."""
    env = dict(os.environ, MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_cudnn_rnn(argv: Sequence[str], folder: Path) -> tuple[int, str, str]:
    """``cudnn-rnn ARGS`` as ``python -m cudnn_rnn ARGS`` in ``folder``; any other command fails."""
    assert argv and argv[0] == "cudnn-rnn", (f"console blocks of this page may only run `cudnn-rnn ...`; "
                                             f"got {shlex.join(argv)!r}")
    result = subprocess.run([sys.executable, "-m", "cudnn_rnn", *argv[1:]], capture_output=True, text=True,
                            cwd=folder, env=command_environment(), timeout=COMMAND_TIMEOUT)
    return result.returncode, result.stdout, result.stderr


def check_console_block(block: Block, folder: Path, commands: CommandRunner) -> None:
    """Run each command of the block in ``folder`` and compare what it prints with the page.

    A command that succeeds is compared by its standard output; one that fails by its standard
    output and error together, so a page that shows an error shows the message, and a page that
    shows a success fails when the command does.
    """
    for command in read_console(block):
        status, stdout, stderr = commands(command.argv, folder)
        printed = stdout if status == 0 else stdout + stderr
        if not output_matches(command.expected, printed):
            raise AssertionError(
                f"{shown(block.page)}:{command.line}: `{shlex.join(command.argv)}` (exit status {status}) "
                f"printed\n{printed}\n--- but the page shows\n" + "\n".join(command.expected)
                + (f"\n--- standard error\n{stderr}" if status == 0 and stderr else ""))


# ---- other blocks ------------------------------------------------------------------------------------
def pyproject_extras() -> dict[str, list[str]]:
    """pyproject.toml's extras: name -> requirements."""
    import tomllib  # Python 3.11+, as the tests of README.md

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return extras


def check_bash_block(block: Block) -> None:
    """A bash block is shown, not run; what it names must exist: ``examples/X.py`` and each
    ``--flag`` given to it, each extra of a ``pip install "cudnn_rnn[...]"`` or ``".[...]"``,
    and each ``cudnn-rnn`` command line must parse."""
    from cudnn_rnn.cli import build_parser

    extras = pyproject_extras()
    text = re.sub(r"\\\n\s*", " ", block.text)
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        for group in re.findall(r"(?:cudnn_rnn|\.)\[([\w,-]+)\]", " ".join(words)):
            for extra in group.split(","):
                assert extra in extras, f"{block.where}: pip installs extra {extra!r}, which pyproject.toml lacks"
        for index, word in enumerate(words):
            if word.startswith("examples/") and word.endswith(".py"):
                example = REPO / word
                assert example.is_file(), f"{block.where}: {word} does not exist"
                source = example.read_text(encoding="utf-8")
                if re.search(r"^(from|import) _common\b", source, re.M):  # the options the examples share
                    source += (REPO / "examples" / "_common.py").read_text(encoding="utf-8")
                for flag in (w.split("=")[0] for w in words[index + 1:] if w.startswith("--")):
                    assert f'"{flag}"' in source, f"{block.where}: {word} takes no {flag}"
        if words and words[0] == "cudnn-rnn":
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    build_parser().parse_args(words[1:])
            except SystemExit:
                raise AssertionError(f"{block.where}: `{shlex.join(words)}` is not a valid cudnn-rnn command "
                                     "line") from None


def check_params_layout_block(block: Block) -> None:
    """The options of a params-layout directive, read by the directive's own option table, form a
    configuration whose layout can be built."""
    extensions = str(REPO / "docs" / "_ext")  # imported here, not with this module: GPU machines have no Sphinx
    if extensions not in sys.path:
        sys.path.append(extensions)
    import params_layout_figure
    from cudnn_rnn.layout import params_layout

    try:
        config = params_layout_figure.config_from_options(params_layout_figure.parse_options(block.options))
    except (TypeError, ValueError) as error:
        raise AssertionError(f"{block.where}: params-layout options are not a valid configuration: {error}") from None
    assert params_layout(config).size > 0


def check_gpu_block(block: Block, context: Sequence[str]) -> None:
    """A GPU block compiles, and each ``cudnn_rnn`` name it uses exists (``context``: the page's
    earlier Python blocks, whose imports it may rely on)."""
    compile(block.text, block.where, "exec")
    for name in sorted(cudnn_rnn_names(block.text, context)):
        try:
            resolve(name)
        except AssertionError as error:
            raise AssertionError(f"{block.where}: the GPU block uses {name}: {error}") from None


# ---- plain Markdown (README.md, getting-started.md) ---------------------------------------------------
def markdown_section(text: str, title: str) -> str:
    """The text of ``text``'s ``## title`` section (up to the next ``## `` heading)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no '## {title}' section"
    return match[1]


def fenced_blocks(text: str, language: str) -> list[str]:
    """The stripped bodies of ``text``'s fenced blocks of ``language`` (```` ```python ````, ...)."""
    return [block.strip() for block in re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)]


def ci_command_lines() -> list[str]:
    """The lines of ``.ci/run``, stripped, with pip's ``-q`` flags left out (a page shows the commands
    without them)."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    return [re.sub(r"\bpip install((?: -q)+) ", "pip install ", line.strip()) for line in ci.splitlines()]


# ---- running a page ------------------------------------------------------------------------------------
@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


@contextlib.contextmanager
def _page_module(page: Path) -> Iterator[types.ModuleType]:
    """A module to run the page's blocks in, registered while they run (so classes the page
    defines can be pickled and dataclasses can find their module)."""
    stem = page.relative_to(GUIDES).with_suffix("").as_posix() if page.is_relative_to(GUIDES) else page.stem
    name = "guide_" + re.sub(r"\W", "_", stem)
    module = types.ModuleType(name)
    module.__file__ = str(page)
    sys.modules[name] = module
    try:
        yield module
    finally:
        sys.modules.pop(name, None)


def _execute(block: Block, module: types.ModuleType) -> None:
    """Run ``block`` in the page's namespace; a file (or socket) it drops unclosed fails it, as a failed assert does
    (``open(name).read()``: the file object's last reference goes at once, and it warns then)."""
    code = compile("\n" * (block.line - 1) + block.text, str(block.page), "exec")  # tracebacks give page lines
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        try:
            exec(code, module.__dict__)
        except Exception as error:
            raise AssertionError(f"{block.where}: the Python block failed: {type(error).__name__}: {error}") from error
    for warning in caught:
        if issubclass(warning.category, ResourceWarning):
            raise AssertionError(f"{block.where}: the Python block left a resource open: {warning.message} (use "
                                 "`with open(...)` or Path.read_bytes())")
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


@dataclass
class PageRun:
    """What :func:`run_page` did: the blocks of each kind it ran or checked."""

    counts: dict[str, int] = field(default_factory=dict)
    namespace: dict[str, object] = field(default_factory=dict)


def run_page(page: str | Path, folder: Path, *, gpu: bool = False,
             commands: CommandRunner = run_cudnn_rnn) -> PageRun:
    """Run every block of a guide in order, in ``folder`` (see the module docstring).

    Args:
        page: the page, relative to docs/guides or a path.
        folder: an empty folder: the current directory of its blocks and commands.
        gpu: execute the GPU blocks too (else they are compiled and their names checked).
        commands: runs the console blocks' commands.

    Raises:
        AssertionError: a block failed, naming the page and line.
    """
    path = page if isinstance(page, Path) else GUIDES / page
    run = PageRun()
    python_so_far: list[str] = []
    with _page_module(path) as module, _inside(folder):
        for block in read_blocks(path):
            run.counts[block.kind] = run.counts.get(block.kind, 0) + 1
            if block.kind == "python" or (block.kind == "gpu" and gpu):
                _execute(block, module)
            elif block.kind == "gpu":
                check_gpu_block(block, python_so_far)
            elif block.kind == "script":
                (folder / block.options["caption"]).write_text(block.text, encoding="utf-8")
            elif block.kind == "console":
                check_console_block(block, folder, commands)
            elif block.kind == "bash":
                check_bash_block(block)
            elif block.kind == "params-layout":
                check_params_layout_block(block)
            if block.kind in ("python", "gpu"):
                python_so_far.append(block.text)
        run.namespace = dict(module.__dict__)
    return run
