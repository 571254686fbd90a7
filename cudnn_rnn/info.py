"""``cudnn-rnn info``: which backends this machine can run, with cuDNN, CUDA and GPU details.

It works, and exits 0, on a machine with no GPU, no CuPy and no cuDNN: every missing piece is
reported with the reason and what to install. ``--json`` prints the same facts as one object.
Also runnable as ``python -m cudnn_rnn.info``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from typing import Any

import numpy as np

from . import _cudnn_settings, _lib
from ._descriptors import Handle
from .errors import CudnnError, CudnnNotAvailableError

__all__ = ["add_arguments", "run", "collect", "cudnn_backend_problem", "main"]

_GPU_EXTRA_HINT = "pip install 'cudnn_rnn[cuda12]' (or [cuda13])"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cudnn-rnn info``."""
    parser.add_argument("--json", action="store_true", help="print the facts as one JSON object")


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
        return {"available": False, "reason": f"CuPy is not installed ({error}); {_GPU_EXTRA_HINT}"}
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
    names = []
    for device in range(count):
        name = cupy.cuda.runtime.getDeviceProperties(device)["name"]
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    facts["gpus"] = names
    return facts


def _cudnn_backend_status(cupy_facts: dict[str, Any], cudnn_facts: dict[str, Any]) -> str:
    """"usable", or why not: CuPy, a GPU, cuDNN, and a working cudnnCreate on GPU 0 are all needed."""
    if not cupy_facts["available"]:
        return "not usable: " + cupy_facts["reason"]
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
    """None when the CuPy + cuDNN backend can run here, else why not (for scripts that need a GPU)."""
    status = _cudnn_backend_status(_cupy_facts(), _cudnn_facts())
    return None if status == "usable" else status.removeprefix("not usable: ")


def collect() -> dict[str, Any]:
    """Every fact ``cudnn-rnn info`` prints."""
    cupy_facts, cudnn_facts = _cupy_facts(), _cudnn_facts()
    driver = _lib.cuda_driver_version()
    return {
        "cudnn_rnn": _package_version(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "cupy": cupy_facts,
        "cudnn": cudnn_facts,
        "cuda_driver": _cuda_version(driver) if driver else None,
        "tf32_allowed": _cudnn_settings.tf32_allowed(),
        "backends": {"numpy (reference)": "usable",
                     "cupy (cuDNN)": _cudnn_backend_status(cupy_facts, cudnn_facts)},
    }


def _text(facts: dict[str, Any]) -> str:
    cupy_facts, cudnn_facts = facts["cupy"], facts["cudnn"]
    if cudnn_facts["available"]:
        cudnn = f"{cudnn_facts['version']} ({cudnn_facts['path']}; built for CUDA {cudnn_facts['built_for_cuda']})"
    else:
        cudnn = "not available\n" + "\n".join("    " + line for line in cudnn_facts["reason"].splitlines())
    if cupy_facts["available"]:
        cupy = cupy_facts["version"]
        runtime = cupy_facts.get("cuda_runtime") or f"unknown ({cupy_facts.get('cuda_runtime_error')})"
        gpus = ", ".join(f"{i}: {name}" for i, name in enumerate(cupy_facts["gpus"])) or \
            f"none ({cupy_facts.get('gpu_error', 'no device')})"
    else:
        cupy, runtime, gpus = f"not installed; {_GPU_EXTRA_HINT}", "unknown (needs CuPy)", "unknown (needs CuPy)"
    driver = facts["cuda_driver"] or "none (libcuda.so.1 not found: no NVIDIA driver)"
    float32 = ("TF32 tensor cores allowed" if facts["tf32_allowed"] else
               f"true float32 (FMA); TF32 off (allow_tf32(True) or {_cudnn_settings.TF32_ENV}=1 to allow)")
    rows = [("cudnn_rnn", facts["cudnn_rnn"]), ("Python", facts["python"]), ("NumPy", facts["numpy"]),
            ("CuPy", cupy), ("cuDNN", cudnn), ("CUDA runtime", runtime), ("CUDA driver", driver),
            ("GPUs", gpus), ("float32 math", float32)]
    lines = [f"{name:<14}{value}" for name, value in rows]
    lines.append("Backends")
    lines += [f"  {name:<20}{status}" for name, status in facts["backends"].items()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the facts (text, or JSON with ``--json``); always 0."""
    facts = collect()
    print(json.dumps(facts, indent=2) if getattr(args, "json", False) else _text(facts))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m cudnn_rnn.info [--json]``."""
    parser = argparse.ArgumentParser(prog="cudnn-rnn info", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
