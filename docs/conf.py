"""Sphinx configuration: build with ``sphinx-build -W -n --keep-going docs docs/_build/html``."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

import cudnn_rnn  # noqa: E402

project = "cudnn_rnn"
author = "The cudnn_rnn developers"
copyright = "2026, the cudnn_rnn developers"
release = cudnn_rnn.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"cudnn_rnn {release}"
copybutton_prompt_text = r"\$ |>>> "
copybutton_prompt_is_regexp = True
