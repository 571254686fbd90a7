"""README.md stays true and short: its two commands are CI's, its ten-line example runs, its links and names exist."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")

#: the newcomer's two commands, exactly as the README must give them
EXAMPLE_COMMAND = 'pip install -e ".[examples]" && python examples/train_char_lm.py'
TEST_COMMAND = 'pip install -e ".[test,oracle,cudnn-lib]" && python -m pytest -q tests'


def section(title: str) -> str:
    """The text of the README's ``## title`` section (up to the next ``## `` heading)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match[1]


def code_blocks(text: str, language: str) -> list[str]:
    return [block.strip() for block in re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)]


def test_the_two_commands_are_exactly_these() -> None:
    assert code_blocks(section("Two commands"), "bash") == [EXAMPLE_COMMAND, TEST_COMMAND]


def test_ci_runs_the_readme_commands() -> None:
    """.ci/run runs both commands as written, give or take pip's -q (quiet) flag."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest -q tests" in ci
    ci_lines = [re.sub(r"\bpip install((?: -q)+) ", "pip install ", line.strip()) for line in ci.splitlines()]
    assert EXAMPLE_COMMAND in ci_lines, ".ci/run must run README command 1"
    assert TEST_COMMAND in ci_lines, ".ci/run must run README command 2"


def test_the_commands_refer_to_things_that_exist() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    named = re.findall(r'"\.\[([\w,-]+)\]"', EXAMPLE_COMMAND + TEST_COMMAND)
    for group in named:
        for extra in group.split(","):
            assert extra in extras, f"README installs extra {extra!r}, which pyproject.toml does not define"
    assert any(dep.startswith("matplotlib") for dep in extras["examples"]), "the example saves a matplotlib plot"
    assert (REPO / "examples" / "train_char_lm.py").is_file() and (REPO / "tests").is_dir()
    gpu_extras = re.findall(r'pip install "cudnn_rnn\[(\w+)\]"', README) + re.findall(r"or `\[(\w+)\]`", README)
    assert gpu_extras, "the README says how to install for the GPU"
    for extra in gpu_extras:
        assert extra in extras, f"README's GPU install names extra {extra!r}, missing from pyproject.toml"


def test_the_ten_line_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = code_blocks(README, "python")
    assert len(blocks) == 1 and len(blocks[0].splitlines()) <= 10, "one example of at most ten lines"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], "README.md's example", "exec"), namespace)
    assert namespace["y"].shape == (3, 5, 32)  # type: ignore[attr-defined]


def test_every_link_leads_to_a_file_of_the_repository() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10, "the README links into the documentation"
    for link in local:
        assert (REPO / link).is_file(), f"README.md links to {link}, which does not exist"


def test_it_stays_short() -> None:
    """The manual is docs/; the README says what this is, the two commands, an example and where to read on."""
    assert len(README) < 6000, f"README.md has grown to {len(README)} characters: move the detail into docs/"


def test_every_cudnn_rnn_name_mentioned_exists() -> None:
    for dotted in sorted(set(re.findall(r"`cudnn_rnn\.([A-Za-z_][\w.]*)", README))):
        parts = dotted.split(".")
        target: object = importlib.import_module("cudnn_rnn")
        for depth, part in enumerate(parts):
            try:
                target = getattr(target, part)
            except AttributeError:
                target = importlib.import_module("cudnn_rnn." + ".".join(parts[:depth + 1]))
        assert target is not None, dotted


def test_every_cli_subcommand_mentioned_exists() -> None:
    from cudnn_rnn.cli import SUBCOMMANDS

    mentioned = set(re.findall(r"`cudnn-rnn (\w+)", README))
    assert mentioned, "the README tours the command line"
    for name in mentioned:
        assert name in SUBCOMMANDS, f"README mentions `cudnn-rnn {name}`, which cli.py does not define"
        importlib.import_module(SUBCOMMANDS[name][0])
