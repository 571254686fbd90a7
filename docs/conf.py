"""Sphinx configuration of the cudnn_rnn documentation site.

Build (no network needed; every warning is an error, every cross-reference must resolve)::

    sphinx-build -q -W -n --keep-going docs docs/_build/html

Local extensions live in ``docs/_ext``: ``params-layout`` (the params buffer drawn from
:func:`cudnn_rnn.layout.params_layout`), ``cli-reference`` (the ``cudnn-rnn`` command from its argparse
parser), ``benchmark-records`` (the records in ``benchmarks/results/`` as tables and plots) and
``api_aliases`` (references to a documented object through another of its import paths).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent)]  # the local extensions, and the package of this checkout

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
    "api_aliases",
    "params_layout_figure",
    "cli_reference",
    "benchmark_records",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# ---- API reference --------------------------------------------------------------------------------
# The framework bridges' pages import JAX and PyTorch; a docs-only install (the docs extra) has neither, so they
# are stood in for there, and the real ones are documented wherever they are installed (the test suite's build).
autodoc_mock_imports = [name for name in ("jax", "torch") if importlib.util.find_spec(name) is None]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "mixed"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False  # the return type stays in the Returns section, beside its shapes

# ---- nitpicky mode: every reference must resolve --------------------------------------------------
# No intersphinx (the build machines have no network), so names of other packages that appear in
# signatures and type hints cannot be linked. They are listed here, by package, and nothing else:
# a broken reference to one of cudnn_rnn's own names is a bug in its docstring, never ignored.
_EXTERNAL_NAMES: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy.ndarray", "numpy.dtype", "numpy.generic", "numpy.floating", "numpy.integer",
              "numpy.random.Generator", "numpy.random._generator.Generator",  # (where Generator is defined)
              "numpy.typing.NDArray", "numpy.typing.ArrayLike", "numpy.typing.DTypeLike"),
    "the standard library": ("os.PathLike", "pathlib.Path", "types.ModuleType", "argparse.ArgumentParser",
                             "argparse.Namespace", "collections.abc.Callable", "collections.abc.Iterable",
                             "collections.abc.Iterator", "collections.abc.Mapping", "collections.abc.Sequence"),
    "PyTorch": ("torch.Tensor", "torch.nn.Module", "torch.nn.parameter.Parameter", "torch.dtype", "torch.device"),
    "JAX": ("jax.Array",),
}
nitpick_ignore = [(role, name) for names in _EXTERNAL_NAMES.values() for name in names
                  for role in ("py:class", "py:obj", "py:data")]

# ---- pages ----------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"cudnn_rnn {release}"
html_static_path = ["_static"]
html_css_files = ["site.css"]
copybutton_prompt_text = r"\$ |>>> "
copybutton_prompt_is_regexp = True
