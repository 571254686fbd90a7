"""The user guides that need live frameworks run as written: Keras and TensorFlow files and checkpoints,
ONNX models run by ONNX Runtime, GRUBlockCell and mygrad (tests/support/docs_testing.py runs a page)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras  # noqa: E402, F401  (what the pages import: these tests must not run without them)
import mygrad  # noqa: E402, F401
import onnxruntime  # noqa: E402, F401
import tensorflow  # noqa: E402, F401
import torch  # noqa: E402, F401

from docs_testing import pages_for, run_page  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.sources]  # (sources: see tests/test_docs_guides.py)


@pytest.mark.parametrize("page", pages_for("oracle"))
def test_the_page_runs(page: str, tmp_path: Path) -> None:
    run = run_page(page, tmp_path)
    assert run.counts.get("python", 0) > 0, f"{page} runs no code"
