"""GPU tests: they need CuPy and a CUDA device, and skip cleanly (with the reason) otherwise.

Every test module starts with ``pytest.importorskip("cupy")``; this file adds the device check
and the ``gpu`` marker to every test in this folder. CuPy's kernel cache goes to a temporary
folder so that the tests write nothing outside temporary space.

With ``CUDNN_RNN_REQUIRE_GPU=1`` (set by ``scripts/gpu_check.sh``) a missing GPU stops the run
with an error instead: a GPU check on a machine whose GPU is not visible must not pass by skipping.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("CUPY_CACHE_DIR", tempfile.mkdtemp(prefix="cudnn_rnn_cupy_cache_"))

_HERE = Path(__file__).resolve().parent
REQUIRE_GPU_VARIABLE = "CUDNN_RNN_REQUIRE_GPU"


def _gpu_problem() -> str | None:
    try:
        import cupy
    except ImportError as error:
        return f"CuPy is not installed ({error})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CuPy's CUDARuntimeError when there is no driver
        return f"no CUDA device ({type(error).__name__}: {error})"
    return None if count > 0 else "no CUDA device"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problem = _gpu_problem()
    if problem is not None and os.environ.get(REQUIRE_GPU_VARIABLE) == "1":
        raise pytest.UsageError(f"{REQUIRE_GPU_VARIABLE}=1, but the GPU tests cannot run: {problem}")
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.gpu)
            if problem is not None:
                item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {problem}"))
