"""The documentation site builds without a warning, and what it generates from the code is true.

The site is built once per session (``python -m sphinx -W -n --keep-going``: every warning an
error, every cross-reference resolved) into a temporary folder; the other tests read the HTML it
wrote, so each can fail on its own: an undocumented public name, a command-line option missing from
the CLI page, a params figure that disagrees with :func:`cudnn_rnn.layout.params_layout`, a record
missing from the benchmarks page, a path in the contributing page's layout that does not exist, a
getting-started example that no longer runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from docutils.nodes import make_id

import cudnn_rnn
from cudnn_rnn import cli
from cudnn_rnn.layers import RecurrentLayer
from cudnn_rnn.layout import params_layout

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(DOCS / "_ext"))

import benchmark_records  # noqa: E402  (the site's extensions, from docs/_ext)
import params_layout_figure  # noqa: E402
from docs_testing import ci_command_lines, fenced_blocks, markdown_section  # noqa: E402

#: checks of the repository's sources, alike from the checkout and the wheel: CI runs them once (see .ci/run)
pytestmark = pytest.mark.sources

#: the public modules: each has a page under docs/api/, and every name of its ``__all__`` an entry
PUBLIC_MODULES = ("cudnn_rnn", "cudnn_rnn.layers", "cudnn_rnn.config", "cudnn_rnn.layout", "cudnn_rnn.formats",
                  "cudnn_rnn.convert",
                  "cudnn_rnn.optim", "cudnn_rnn.cpu", "cudnn_rnn.distributed", "cudnn_rnn.cuda_graph",
                  "cudnn_rnn.checkpoint", "cudnn_rnn.files", "cudnn_rnn.params_file", "cudnn_rnn.info",
                  "cudnn_rnn.jax", "cudnn_rnn.torch")


# ---- reading the built HTML ----------------------------------------------------------------------------
class Page(HTMLParser):
    """One built page: every ``id``, the text (whitespace collapsed), and each table's rows by class."""

    def __init__(self, path: Path) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.images: list[str] = []
        self.tables: list[tuple[str, list[list[str]]]] = []
        self._text: list[str] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self.feed(path.read_text(encoding="utf-8"))
        self.text = " ".join(" ".join(self._text).split())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.append(str(values["id"]))
            self._text.append(f" [#{values['id']}] ")  # where each anchor sits in the text
        if tag == "img" and values.get("src"):
            self.images.append(str(values["src"]))
        if tag == "table":
            self.tables.append((values.get("class") or "", []))
        elif tag == "tr" and self.tables:
            self._row = []
            self.tables[-1][1].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        self._text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def section(self, anchor: str) -> str:
        """The text from the anchor ``anchor`` to the next section anchor of the same kind of page."""
        start = self.text.index(f"[#{anchor}]")
        following = re.search(r"\[#(record-|cudnn-rnn-)", self.text[start + len(anchor) + 3:])
        return self.text[start:start + len(anchor) + 3 + following.start()] if following else self.text[start:]


@dataclass
class Site:
    html: Path
    returncode: int
    output: str

    def page(self, name: str) -> Page:
        return Page(self.html / name)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "-n", "--keep-going", "-d", str(out / "doctrees"),
         str(DOCS), str(out / "html")],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, MPLBACKEND="Agg"))
    return Site(out / "html", result.returncode, result.stdout + result.stderr)


def test_the_site_builds_without_a_warning(site: Site) -> None:
    problems = [line for line in site.output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert site.returncode == 0 and not problems, "\n".join(problems) or site.output[-3000:]


# ---- the API reference ---------------------------------------------------------------------------------
def test_every_public_name_has_its_entry_in_the_api_reference(site: Site) -> None:
    """Each name of each public module's ``__all__`` is documented under that name, or (re-exported) under
    the same name in another public module, where it is the very same object."""
    ids = {anchor for page in (site.html / "api").glob("*.html") for anchor in Page(page).ids}
    modules = {name: importlib.import_module(name) for name in PUBLIC_MODULES}
    missing = []
    for module_name, module in modules.items():
        for name in module.__all__:
            value = getattr(module, name)
            homes = [f"{module_name}.{name}", f"module-{module_name}.{name}"]
            homes += [f"{other}.{name}" for other, home in modules.items()
                      if other != module_name and getattr(home, name, None) is value]
            if not ids.intersection(homes):
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public names without an entry in docs/api/: {missing}"


# ---- the command line ------------------------------------------------------------------------------------
def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def test_the_cli_page_shows_every_subcommand_and_option_of_the_real_parser(site: Site) -> None:
    page = site.page("cli.html")
    parsers = subcommand_parsers()
    assert [name for name, _, _ in cli.COMMANDS] == list(parsers)
    for name, sub in parsers.items():
        assert f"cudnn-rnn-{name}" in page.ids, f"no section for cudnn-rnn {name}"
        text = page.section(f"cudnn-rnn-{name}")
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings or [str(action.metavar or action.dest)]:
                assert option in text, f"cudnn-rnn {name}: {option} is not on the page"
                assert make_id(f"cmdoption-cudnn-rnn-{name}-{option}") in page.ids, f"{name} {option}: no anchor"
            if action.help:
                words = " ".join(action.help.split("%(")[0].split())[:60]
                assert words in text, f"cudnn-rnn {name} {action.option_strings}: help {words!r} is not on the page"
            for choice in action.choices or ():
                assert str(choice) in text, f"cudnn-rnn {name}: choice {choice} is not on the page"


# ---- the params-buffer figure ----------------------------------------------------------------------------
def figures_in_sources() -> list[tuple[str, dict[str, Any]]]:
    """(page, options) of every ``params-layout`` directive of the site's Markdown pages, in page order."""
    found = []
    for source in sorted(DOCS.rglob("*.md")):
        if "_build" in source.parts:
            continue
        for block in re.findall(r"^```\{params-layout\}\n(.*?)^```", source.read_text(encoding="utf-8"), re.M | re.S):
            options = dict(re.findall(r"^:([\w-]+):\s*(.*?)\s*$", block, re.M))
            parsed = params_layout_figure.parse_options(options)
            found.append((source.relative_to(DOCS).with_suffix(".html").as_posix(), parsed))
    return found


def test_the_params_figures_tables_are_params_layouts(site: Site) -> None:
    figures = figures_in_sources()
    assert "api/layout.html" in [page for page, _ in figures]
    for page_name in sorted({page for page, _ in figures}):
        tables = [rows for classes, rows in site.page(page_name).tables if "params-layout-table" in classes]
        options_of_page = [options for page, options in figures if page == page_name]
        assert len(tables) == len(options_of_page), f"{page_name}: {len(tables)} params-layout tables"
        for options, table in zip(options_of_page, tables):
            check_params_table(page_name, params_layout_figure.config_from_options(options), table[1:])


def check_params_table(page_name: str, config: Any, rows: list[list[str]]) -> None:
    """The table's rows (name, shape, offset, size, linLayerID, entry) are params_layout's entries in buffer
    order, and each name is the layer's own view at that offset, of that shape."""
    layout = params_layout(config)
    entries = sorted(layout.weights + layout.biases, key=lambda entry: entry.offset)
    assert [(int(offset), int(size), int(lin_id)) for _, _, offset, size, lin_id, _ in rows] == \
        [(entry.offset, entry.size, entry.lin_layer_id) for entry in entries], page_name
    assert [shape for _, shape, *_ in rows] == ["\u00d7".join(map(str, entry.shape)) for entry in entries], page_name
    assert sum(int(size) for _, _, _, size, _, _ in rows) == layout.size
    layer = RecurrentLayer.from_params(np.zeros(layout.size, np.float64), config.replace(dtype="float64"))
    views = layer.weights()
    assert len(views) == len(rows)
    for name, shape, offset, *_ in rows:
        view = views[name]
        assert (view.ctypes.data - layer.params.ctypes.data) // view.itemsize == int(offset), (page_name, name)
        assert "\u00d7".join(map(str, view.shape)) == shape, (page_name, name)


# ---- the benchmarks page -----------------------------------------------------------------------------------
def numbers_in(value: Any) -> list[float]:
    """Every number of a record, lists of raw timings left out."""
    if isinstance(value, dict):
        return [number for item in value.values() for number in numbers_in(item)]
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return [number for item in value for number in numbers_in(item)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    return []


def shown_forms(number: float) -> set[str]:
    forms = {f"{number:.1f}", f"{number:.2f}", f"{number:.3f}"}
    if number == int(number):
        forms |= {f"{int(number)}", f"{int(number):,}"}
    return forms


def test_the_benchmarks_page_shows_every_record(site: Site) -> None:
    page = site.page("benchmarks.html")
    records = sorted(path for path in RESULTS.rglob("*") if path.suffix in (".json", ".md"))
    assert records, "benchmarks/results/ holds no record"
    read = benchmark_records.read_records()
    kinds = {record.name: record.kind for record in read}
    for path in records:
        name = path.relative_to(RESULTS).as_posix()
        anchor = make_id(f"record-{name}")
        assert anchor in page.ids, f"{name} has no section on the benchmarks page"
        text = page.section(anchor)
        if path.suffix == ".json":
            numbers = numbers_in(json.loads(path.read_text(encoding="utf-8")))
            shown = [number for number in numbers if shown_forms(number) & set(re.findall(r"[\d.,]+", text))]
            assert len(shown) >= min(3, len(numbers)), f"{name}: its numbers are not on the page"
            plot = re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".png"
            if kinds[name] is not None and kinds[name].plot is not None:  # (a record of an unknown kind has none)
                assert any(src.endswith(plot) for src in page.images), f"{name}: no plot on the page"
                assert (site.html / "_images" / plot).is_file(), f"{name}: its plot is not in the build"
        else:
            decimals = re.findall(r"\d+\.\d+", path.read_text(encoding="utf-8"))
            assert not decimals or any(number in text for number in decimals), f"{name}: its numbers are not shown"
    gpu = [r for r in read if (r.kind is not None and r.kind.gpu) or benchmark_records.is_gpu_note(r.note)]
    assert ("No GPU record exists yet" in page.text) == (not gpu)


def test_a_gpu_record_of_bench_gpu_and_gpu_record_is_read(tmp_path: Path) -> None:
    """benchmarks/bench_gpu.py's JSON (as its main() writes it) beside scripts/gpu_record.py's record.md."""
    stage = tmp_path / "gpu_20270101" / "bench"
    stage.mkdir(parents=True)
    bench = {"mode": "lstm", "max_time": 100, "batch": 64, "hidden": 512, "layers": 2, "bidirectional": False,
             "input_size": 0, "dropout": 0.0, "target": 1.02}
    row = {**bench, "name": "LSTM T=100 B=64 I=H=512 L=2", "precision": "fp32", "ours_ms": 4.321, "graph_ms": 4.1,
           "torch_ms": 4.5, "ratio": 0.9602, "verdict": "met", "ours_tflops": 9.87, "torch_tflops": 9.5}
    record = {"device": "NVIDIA H100 80GB HBM3", "ours_cudnn": "9.28.1", "cupy": "14.2.0", "torch": "torch 2.13.0",
              "steps": 20, "benches": [row], "host_overhead_us": {"ours eager": 80.0, "torch": 70.0},
              "dropout_reseed": {"share_of_small_step": 0.02, "verdict": "re-seeding every step is affordable"}}
    (stage / "bench.json").write_text(json.dumps(record))
    (stage / "record.md").write_text("# GPU check, stage `bench`: passed (exit 0)\n\n- date: 2027-01-01 10:00 UTC\n"
                                     "- command: `python3 benchmarks/bench_gpu.py --json x/bench.json` (limit 540 s)\n"
                                     "- GPU: NVIDIA H100 80GB HBM3\n")
    found = {record.name: record for record in benchmark_records.read_records(tmp_path)}
    read = found["gpu_20270101/bench/bench.json"]
    assert read.kind is benchmark_records.KINDS["gpu"]
    assert (read.date, read.machine) == ("2027-01-01 10:00 UTC", "NVIDIA H100 80GB HBM3")
    assert read.command == "python3 benchmarks/bench_gpu.py --json x/bench.json"
    assert ["LSTM T=100 B=64 I=H=512 L=2", "fp32", "4.321"] == read.tables[0].rows[0][:3]
    assert benchmark_records.is_gpu_note(found["gpu_20270101/bench/record.md"].note)
    assert benchmark_records.write_plot(read, tmp_path / "plots") is not None


# ---- the contributing page's layout ------------------------------------------------------------------------
PATH_TOKEN = re.compile(r"(?<![\w<>./-])([\w][\w.-]*(?:/[\w.-]+)*(?:\.(?:py|md|sh|json|css)|/))(?=[,;:)\s]|$)")


def test_every_path_in_the_contributing_layout_exists() -> None:
    """Unindented lines name a top-level path; a two-space line a path under it (and the rest of that line lies
    under that path when it is a folder); deeper lines continue the line above. The package's files are looked
    for in the package under test (the checkout, or the installed wheel in CI)."""
    page = (DOCS / "contributing.md").read_text(encoding="utf-8")
    block = re.search(r"## Project layout\n.*?```text\n(.*?)```", page, re.S)
    assert block, "contributing.md has no layout tree"
    package = Path(cudnn_rnn.__file__).resolve().parent
    top = base = REPO
    checked = 0
    for line in block[1].splitlines():
        indent = len(line) - len(line.lstrip())
        first, _, rest = line.strip().partition(" ")
        if indent == 0:
            top = base = package if first == "cudnn_rnn/" else REPO / first
            assert top.exists(), f"the layout lists {first}, which does not exist"
            checked += 1
        elif indent == 2:
            path = top / first
            assert path.exists(), f"the layout lists {first} under {top.name}/, which is missing"
            base = path if path.is_dir() else top
            checked += 1
        else:
            rest = line
        for token in PATH_TOKEN.findall(rest):
            assert (base / token).exists(), f"the layout names {token} under {base.name}/, which is missing"
            checked += 1
    assert checked > 40


# ---- getting started ------------------------------------------------------------------------------------------
GETTING_STARTED = (DOCS / "getting-started.md").read_text(encoding="utf-8")


def test_the_getting_started_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = fenced_blocks(GETTING_STARTED, "python")
    assert blocks
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"getting-started.md python block {i}", "exec"), namespace)


def test_the_two_commands_are_cis() -> None:
    ci_lines = ci_command_lines()
    commands = fenced_blocks(markdown_section(GETTING_STARTED, "Two commands"), "bash")
    assert len(commands) == 2 and all(command in ci_lines for command in commands), commands


def test_the_info_example_has_the_lines_cudnn_rnn_info_prints() -> None:
    example = fenced_blocks(markdown_section(GETTING_STARTED, "What `cudnn-rnn info` tells"), "text")[0]
    printed = subprocess.run([sys.executable, "-m", "cudnn_rnn", "info"], capture_output=True, text=True,
                             timeout=120, check=True).stdout

    def labels(text: str) -> list[str]:  # (a reason is indented by 4 under its line)
        return [re.split(r"\s{2,}", line.strip())[0] for line in text.splitlines()
                if line.strip() and len(line) - len(line.lstrip()) < 4]

    assert labels(example) == labels(printed)
