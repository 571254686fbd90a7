"""README.md stays true and short: its two commands are CI's, its ten-line example runs, its links and names exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docs_testing import check_prose_names, ci_command_lines, fenced_blocks, markdown_section, pyproject_extras

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")

#: the newcomer's two commands, exactly as the README must give them
EXAMPLE_COMMAND = 'pip install -e ".[examples,fast]" && python examples/train_char_lm.py'
TEST_COMMAND = 'pip install -e ".[test,oracle,cudnn-lib]" && python -m pytest -q tests'


def test_the_two_commands_are_exactly_these() -> None:
    assert fenced_blocks(markdown_section(README, "Two commands"), "bash") == [EXAMPLE_COMMAND, TEST_COMMAND]


def test_ci_runs_the_readme_commands() -> None:
    """.ci/run runs both commands as written, give or take pip's -q (quiet) flag."""
    ci_lines = ci_command_lines()
    assert any("python -m pytest -q tests" in line for line in ci_lines)
    assert EXAMPLE_COMMAND in ci_lines, ".ci/run must run README command 1"
    assert TEST_COMMAND in ci_lines, ".ci/run must run README command 2"


def test_the_commands_refer_to_things_that_exist() -> None:
    extras = pyproject_extras()
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
    blocks = fenced_blocks(README, "python")
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


def test_every_cudnn_rnn_name_and_subcommand_mentioned_exists() -> None:
    check_prose_names(REPO / "README.md")  # quoted API names and `cudnn-rnn` subcommands (the example runs above)
    assert re.search(r"`cudnn-rnn (\w+)", README), "the README names the command line"
