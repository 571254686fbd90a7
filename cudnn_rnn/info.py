"""The facts ``cudnn-rnn info`` prints: which backends this machine can run, with cuDNN, CUDA and GPU details.

:func:`collect` gathers them as one JSON-ready dict; :func:`cudnn_backend_problem` says why the
cuDNN backend cannot run here (for scripts that need a GPU). Both work on a machine with no GPU,
no CuPy and no cuDNN: every missing piece is reported with the reason and what to install. The
command itself (its options and text) is ``cudnn_rnn.cli.info``.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any

import numpy as np

from . import cpu
from ._cudnn import _lib, _settings
from ._cudnn._descriptors import Handle
from ._cudnn._streams import device_name
from .errors import CudnnError, CudnnNotAvailableError

__all__ = ["collect", "cudnn_backend_problem", "GPU_EXTRA_HINT"]

#: what to install for the CuPy + cuDNN backend
GPU_EXTRA_HINT = "pip install 'cudnn_rnn[cuda12]' (or [cuda13])"


def _cuda_version(version: int) -> str:
    """CUDA's numbering: 12090 -> "12.9"."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _package_version() -> str:
    try:
        return importlib.metadata.version("cudnn_rnn")
    except importlib.metadata.PackageNotFoundError:
        return "not installed (running from a source tree)"


def _cudnn_facts() -> dict[str, Any]:
    try:
        library = _lib.library()
    except CudnnNotAvailableError as error:
        return {"available": False, "reason": str(error)}
    return {"available": True, "version": _lib.version_string(library.version), "path": library.path,
            "built_for_cuda": _cuda_version(_lib.get_cudart_version())}


def _cupy_facts() -> dict[str, Any]:
    """CuPy's version, the CUDA runtime, and the GPUs; each with the reason when unknown."""
    try:
        import cupy
    except ImportError as error:
        return {"available": False, "reason": f"CuPy is not installed ({error}); {GPU_EXTRA_HINT}"}
    facts: dict[str, Any] = {"available": True, "version": cupy.__version__}
    try:
        facts["cuda_runtime"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
    except Exception as error:  # CuPy raises its own error types for a missing runtime
        facts["cuda_runtime_error"] = f"{type(error).__name__}: {error}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:
        facts["gpus"], facts["gpu_error"] = [], f"{type(error).__name__}: {error}"
        return facts
    facts["gpus"] = [device_name(device) for device in range(count)]
    return facts


def _cudnn_backend_status(cupy_facts: dict[str, Any], cudnn_facts: dict[str, Any]) -> str:
    """"usable", or why not: CuPy, a GPU, cuDNN, and a working cudnnCreate on GPU 0 are all needed."""
    if not cupy_facts["available"]:
        return f"not usable: {cupy_facts['reason']}"
    if not cupy_facts.get("gpus"):
        detail = f" ({cupy_facts['gpu_error']})" if "gpu_error" in cupy_facts else ""
        return "not usable: no CUDA GPU visible" + detail
    if not cudnn_facts["available"]:
        return "not usable: cuDNN 9 could not be loaded (see cuDNN above)"
    import cupy

    try:
        with cupy.cuda.Device(0), Handle(0):
            pass
    except CudnnError as error:
        return f"not usable: {error}"
    return "usable"


def cudnn_backend_problem() -> str | None:
    """Why the CuPy + cuDNN backend cannot run here, if it cannot (for scripts that need a GPU).

    Imports CuPy and loads cuDNN if they are there, and creates a cuDNN handle on GPU 0.

    Returns:
        None when the backend can run; else the reason in words, with what to install where
        something is missing.
    """
    status = _cudnn_backend_status(_cupy_facts(), _cudnn_facts())
    return None if status == "usable" else status.removeprefix("not usable: ")


def collect() -> dict[str, Any]:
    """Every fact ``cudnn-rnn info`` prints, gathered without failing on a machine that lacks any of them.

    Returns:
        A JSON-ready dict, as built below: ``cupy`` and ``cudnn`` hold the reason where either is unavailable,
        ``cuda_driver`` is None without a driver, ``cpu`` is :func:`cudnn_rnn.cpu.describe`'s, and ``backends``
        says each backend's status in words (``"usable"`` or why not).
    """
    cupy_facts, cudnn_facts = _cupy_facts(), _cudnn_facts()
    driver = _lib.cuda_driver_version()
    return {
        "cudnn_rnn": _package_version(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "cupy": cupy_facts,
        "cudnn": cudnn_facts,
        "cuda_driver": _cuda_version(driver) if driver else None,
        "tf32_allowed": _settings.tf32_allowed(),
        "cpu": cpu.describe(),
        "backends": {"numpy (reference)": "usable",
                     "cupy (cuDNN)": _cudnn_backend_status(cupy_facts, cudnn_facts)},
    }
