"""README.md stays true and short: its two commands are CI's, its ten-line example runs, its links and names exist,
and its figures are those of the records it names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from docs_testing import check_prose_names, ci_command_lines, fenced_blocks, markdown_section, pyproject_extras

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")

#: the newcomer's two commands, exactly as the README must give them
EXAMPLE_COMMAND = 'pip install -e ".[examples,fast]" && python examples/train_char_lm.py'
TEST_COMMAND = ('pip install -e ".[test,oracle]" && pip install --no-deps "nvidia-cudnn-cu12>=9.0" '
                '&& python -m pytest -q tests')


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


def no_deps_requirements(text: str) -> list[str]:
    """What ``pip install [-q] --no-deps "..."`` installs in ``text``, each time it does."""
    return re.findall(r'pip install (?:-q )*--no-deps "([^"]+)"', text)


def test_cudnn_comes_alone_as_the_cudnn_lib_extra_names_it() -> None:
    """The test command installs the cudnn-lib extra's cuDNN wheel without its dependencies (cuBLAS and NVRTC, which
    only a GPU needs; the host-side binding tests load libcudnn alone), and so does every install of .ci/run."""
    wanted = pyproject_extras()["cudnn-lib"]
    assert no_deps_requirements(TEST_COMMAND) == wanted == ["nvidia-cudnn-cu12>=9.0"]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert no_deps_requirements(ci) == wanted * 2, ".ci/run installs cuDNN alone for the checkout's run and the wheel's"
    installed = [extra for line in ci.splitlines() if "pip install" in line
                 for group in re.findall(r"\[([\w,-]+)\]", line) for extra in group.split(",")]
    assert "test" in installed and "cudnn-lib" not in installed, "the cudnn-lib extra brings cuBLAS and NVRTC"


def requirement_names(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """The distributions ``extra`` names, with those of the package's own extras it includes (``cudnn_rnn[docs]``)."""
    names: set[str] = set()
    for requirement in extras[extra]:
        name = re.match(r"[\w.-]+(?:\[([\w,-]+)\])?", requirement)
        assert name is not None, requirement
        if name[0].startswith("cudnn_rnn["):
            for included in (name[1] or "").split(","):
                names |= requirement_names(included, extras)
        else:
            names.add(name[0].lower().replace("_", "-"))
    return names


def test_the_test_install_brings_one_tensorflow() -> None:
    """tf_keras requires the ``tensorflow`` distribution; tensorflow-cpu beside it would be a second copy of the same
    package (572 MB more to fetch, and the two overwrite each other's files)."""
    extras = pyproject_extras()
    installed = set().union(*(requirement_names(extra, extras) for extra in re.findall(r'"\.\[([\w,-]+)\]"',
                                                                                       TEST_COMMAND)[0].split(",")))
    assert {"tf-keras", "tensorflow"} <= installed
    assert [name for name in installed if name.startswith("tensorflow")] == ["tensorflow"], sorted(installed)


def test_the_example_figure_is_the_named_records() -> None:
    """The example's time is the one the CPU benchmark record it names holds, for as many steps on as many cores
    (benchmarks/bench_cpu.py's ``example``: the median of the quiet runs with the default threads), and the whole
    run's steps are the example's default."""
    found = re.search(r"On (\w+) (\w+) cores, (\d+) of\s+the run's (\d+) steps take ([\d.]+) s .*?"
                      r"\[`(cpu_\w+\.json)`\]\((benchmarks/results/cpu_\w+\.json)\)", README, re.S)
    assert found, "the README gives the example's time with the record it comes from"
    cores, machine, steps, total, seconds, name, path = found.groups()
    assert Path(path).name == name
    record = json.loads((REPO / path).read_text(encoding="utf-8"))
    example = record["example"]
    assert f"--steps {steps} " in example["command"] + " "
    assert f"{example['phases']['quiet']['default_s']:.1f}" == seconds
    environment = record["environment"]
    assert {"two": 2}.get(cores, cores) == environment["cores"] and machine == environment["machine"], environment
    script = (REPO / "examples" / "train_char_lm.py").read_text(encoding="utf-8")
    assert re.search(rf"\bdefault_steps={total}\b", script), f"the example's default run is not {total} steps"


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
