"""The user guides (docs/guides) stay true: every code block runs as shown, every name they mention exists,
and every page is run by exactly one runner.

This file runs the pages that need only the test extra; tests/oracle/test_docs_guides_oracle.py,
tests/distributed/test_docs_distributed.py and tests/gpu/test_docs_gpu.py run the others
(tests/support/docs_testing.py says how each kind of block is run, and which runner owns which page).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docs_testing import (
    GUIDES,
    PAGE_RUNNERS,
    REPO,
    RUNNER_TESTS,
    Block,
    check_bash_block,
    check_gpu_block,
    check_params_layout_block,
    check_prose_names,
    guide_pages,
    output_matches,
    pages_for,
    read_blocks,
    read_console,
    run_page,
    toctree_pages,
)

#: checks of the repository's sources, alike from the checkout and the wheel: CI runs them once (see .ci/run)
pytestmark = pytest.mark.sources


# ---- which page runs where --------------------------------------------------------------------------
def test_every_page_is_claimed_by_exactly_one_runner() -> None:
    """A page of docs/guides that no runner runs (a new page, say) fails here: add it to PAGE_RUNNERS."""
    assert sorted(PAGE_RUNNERS) == guide_pages(), "docs_testing.PAGE_RUNNERS must list every page of docs/guides"
    assert set(PAGE_RUNNERS.values()) <= set(RUNNER_TESTS)
    for runner, test_file in RUNNER_TESTS.items():
        source = (REPO / test_file).read_text(encoding="utf-8")
        assert f'pages_for("{runner}")' in source, f"{test_file} must run pages_for({runner!r})"


def test_gpu_blocks_sit_on_default_pages() -> None:
    """tests/gpu/test_docs_gpu.py reruns the pages that hold GPU blocks, so they need only the test extra."""
    for page in guide_pages():
        if any(block.kind == "gpu" for block in read_blocks(GUIDES / page)):
            assert PAGE_RUNNERS[page] == "default", f"{page} has GPU blocks but is run by {PAGE_RUNNERS[page]}"


def test_the_tables_of_contents_reach_every_page() -> None:
    reached, queue = {"index.md"}, ["index.md"]
    while queue:
        for page in toctree_pages(queue.pop()):
            assert (GUIDES / page).is_file(), f"a toctree lists {page}, which does not exist"
            if page not in reached:
                reached.add(page)
                queue.append(page)
    assert sorted(reached) == guide_pages()


@pytest.mark.parametrize("page", [page for page in guide_pages() if not page.endswith("index.md")])
def test_a_page_starts_with_what_the_reader_will_have(page: str) -> None:
    text = (GUIDES / page).read_text(encoding="utf-8")
    opening = " ".join(re.split(r"^(?:## |```)", text, maxsplit=1, flags=re.M)[0].split())
    assert "By the end of this page you will" in opening, f"{page}: say first what the reader will have at the end"


@pytest.mark.parametrize("page", guide_pages())
def test_the_names_in_the_text_exist(page: str) -> None:
    check_prose_names(GUIDES / page)


# ---- the pages --------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", pages_for("default"))
def test_the_page_runs(page: str, tmp_path: Path) -> None:
    run = run_page(page, tmp_path)
    if page != "index.md":
        assert run.counts.get("python", 0) + run.counts.get("gpu", 0) > 0, f"{page} runs no code"


# ---- the machinery: what must fail does ---------------------------------------------------------------
def write_page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


def test_a_failing_block_fails_the_page_at_its_line(tmp_path: Path) -> None:
    page = write_page(tmp_path, "# A page\n\n```python\nx = 1\n```\n\nText.\n\n```python\nassert x == 2\n```\n")
    with pytest.raises(AssertionError, match=r"page\.md:10: the Python block failed: AssertionError"):
        run_page(page, tmp_path)


def test_a_block_that_leaves_a_file_open_fails_the_page_at_its_line(tmp_path: Path) -> None:
    """``open(name).read()`` leaves the file to the garbage collector (a ResourceWarning): the page fails there."""
    (tmp_path / "f").write_text("x", encoding="utf-8")
    page = write_page(tmp_path, "```python\nwith open('f') as handle:\n    closed = handle.read()\n```\n\n"
                                "```python\nleft_open = open('f').read()\n```\n")
    with pytest.raises(AssertionError, match=r"page\.md:7: the Python block left a resource open: unclosed file"):
        run_page(page, tmp_path)


def test_blocks_share_one_namespace_and_run_in_a_folder_of_their_own(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    page = write_page(tmp_path, "```python\nimport os\nhere = os.getcwd()\n```\n\n"
                                "```python\nopen('f', 'w').close()\n```\n")
    run = run_page(page, folder)
    assert run.namespace["here"] == str(folder) and (folder / "f").is_file()


def test_an_unknown_kind_of_block_fails(tmp_path: Path) -> None:
    page = write_page(tmp_path, "```pycon\n>>> 1\n```\n")
    with pytest.raises(AssertionError, match="has no meaning for the guide tests"):
        read_blocks(page)


def test_directive_options_are_read(tmp_path: Path) -> None:
    page = write_page(tmp_path, "```{code-block} python\n:class: gpu\n\nimport cupy\n```\n"
                                "```{code-block} python\n:caption: job.py\n\nprint(1)\n```\n")
    gpu, script = read_blocks(page)
    assert (gpu.kind, gpu.line, gpu.text) == ("gpu", 4, "import cupy\n")
    assert (script.kind, script.options["caption"], script.text) == ("script", "job.py", "print(1)\n")


def test_a_gpu_block_naming_something_that_does_not_exist_fails(tmp_path: Path) -> None:
    block = Block(tmp_path / "page.md", 3, "gpu", {}, "from cudnn_rnn.cuda_graph import capture\n"
                                                     "graph = cudnn_rnn.cuda_graph.record(step)\n")
    with pytest.raises(AssertionError, match=r"cudnn_rnn\.cuda_graph\.record does not exist"):
        check_gpu_block(block, ["import cudnn_rnn"])
    check_gpu_block(Block(tmp_path / "page.md", 3, "gpu", {}, "graph = capture(step)\n"),
                    ["from cudnn_rnn.cuda_graph import capture"])


def test_a_params_layout_block_is_read_by_the_directives_own_options(tmp_path: Path) -> None:
    def block(options: dict[str, str]) -> Block:
        return Block(tmp_path / "page.md", 3, "params-layout", options, "")

    check_params_layout_block(block({"rnn-mode": "gru", "num-units": "5", "num-proj": "0"}))
    for options, message in [({"num-unit": "5"}, "no option"), ({"num-units": "five"}, "invalid literal for int"),
                             ({"num-units": "0"}, "positive"), ({"rnn-mode": "lstm", "num-proj": "9"}, "num_proj")]:
        with pytest.raises(AssertionError, match=message):
            check_params_layout_block(block(options))


def test_a_stale_name_in_the_text_fails(tmp_path: Path) -> None:
    page = write_page(tmp_path, "See {func}`cudnn_rnn.cudnn_rnn_v4` and `cudnn_rnn.layout.params_layout`.\n")
    with pytest.raises(AssertionError, match=r"cudnn_rnn\.cudnn_rnn_v4"):
        check_prose_names(page)
    page = write_page(tmp_path, "Run `cudnn-rnn export FILE`.\n")
    with pytest.raises(AssertionError, match="cudnn-rnn export"):
        check_prose_names(page)


def test_a_console_block_must_print_what_the_page_shows(tmp_path: Path) -> None:
    page = write_page(tmp_path, "```console\n$ cudnn-rnn inspect a.npz   # a comment\nline one\n"
                                "$ cudnn-rnn convert --rnn-mode gru \\\n    a.npz b.npz\nline two\n```\n")
    [block] = read_blocks(page)
    first, second = read_console(block)
    assert first.argv == ("cudnn-rnn", "inspect", "a.npz") and first.expected == ("line one",)
    assert second.argv == ("cudnn-rnn", "convert", "--rnn-mode", "gru", "a.npz", "b.npz")
    assert second.line == 4

    printed = {"inspect": (0, "line one  \n\n", ""), "convert": (2, "", "line 2\n")}
    with pytest.raises(AssertionError, match=r"page\.md:4: `cudnn-rnn convert .*` \(exit status 2\) printed\nline 2"):
        run_page(page, tmp_path, commands=lambda argv, folder: printed[argv[1]])


def test_the_wildcard() -> None:
    assert output_matches(["a", "...", "d"], "a\nb\nc\nd\n")
    assert output_matches(["a", "...", "b"], "a\nb")
    assert output_matches(["version ...", "ok"], "version 1.2.3\nok\n")
    assert not output_matches(["version ...", "ok"], "version 1.2.3\nnot ok\n")
    assert not output_matches(["a", "b"], "a\nb\nc\n")
    assert not output_matches(["a.b"], "axb")


def test_a_bash_block_naming_a_stale_example_or_flag_fails(tmp_path: Path) -> None:
    def block(text: str) -> Block:
        return Block(tmp_path / "page.md", 1, "bash", {}, text)

    check_bash_block(block('pip install "cudnn_rnn[cuda12]"\npython examples/train_char_lm.py --quick --resume\n'))
    with pytest.raises(AssertionError, match="takes no --fast"):
        check_bash_block(block("python examples/train_char_lm.py --fast\n"))
    with pytest.raises(AssertionError, match="does not exist"):
        check_bash_block(block("python examples/train_word_lm.py\n"))
    with pytest.raises(AssertionError, match="extra 'cuda11'"):
        check_bash_block(block('pip install "cudnn_rnn[cuda11]"\n'))
    with pytest.raises(AssertionError, match="not a valid cudnn-rnn command line"):
        check_bash_block(block("cudnn-rnn convert --to pickle a.pt b.npz\n"))
