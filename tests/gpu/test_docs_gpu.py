"""The user guides' GPU blocks run on a GPU: each page that holds some runs again, whole, GPU blocks
included (elsewhere tests/test_docs_guides.py only compiles them and checks the names they use)."""

from __future__ import annotations

from pathlib import Path

import pytest

cupy = pytest.importorskip("cupy")

from docs_testing import GUIDES, guide_pages, read_blocks, run_page  # noqa: E402

GPU_PAGES = [page for page in guide_pages() if any(block.kind == "gpu" for block in read_blocks(GUIDES / page))]


def test_the_gpu_guide_has_gpu_blocks() -> None:
    assert "gpu.md" in GPU_PAGES


@pytest.mark.parametrize("page", GPU_PAGES)
def test_the_page_runs_with_its_gpu_blocks(page: str, tmp_path: Path) -> None:
    run = run_page(page, tmp_path, gpu=True)
    assert run.counts["gpu"] > 0
