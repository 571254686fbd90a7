"""``cudnn-rnn info``: which backends this machine can run, with cuDNN, CUDA and GPU details.

``cudnn-rnn info [--json]`` (or ``python -m cudnn_rnn info``) prints the facts
:func:`cudnn_rnn.info.collect` gathers. It works, and exits 0, on a machine with no GPU, no CuPy
and no cuDNN: every missing piece is reported with the reason and what to install. ``--json``
prints the same facts as one object.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from .._cudnn import _settings
from ..info import GPU_EXTRA_HINT, collect

__all__ = ["add_arguments", "run", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``cudnn-rnn info`` (``--json``) to ``parser``, the ``info`` subparser."""
    parser.add_argument("--json", action="store_true", help="print the facts as one JSON object")


def _cells_text(cpu_facts: dict[str, Any]) -> str:
    if cpu_facts["cells"] == "fused":
        return f"fused (numba {cpu_facts['numba']})"
    if cpu_facts["numba"].startswith("not available"):
        return f"{cpu_facts['cells']} (numba {cpu_facts['numba']}; pip install 'cudnn_rnn[fast]' for the fused cells)"
    return f"{cpu_facts['cells']} (as chosen: cells={cpu_facts['cells_setting']!r})"


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
        cupy, runtime, gpus = f"not installed; {GPU_EXTRA_HINT}", "unknown (needs CuPy)", "unknown (needs CuPy)"
    driver = facts["cuda_driver"] or "none (libcuda.so.1 not found: no NVIDIA driver)"
    float32 = ("TF32 tensor cores allowed" if facts["tf32_allowed"] else
               f"true float32 (FMA); TF32 off (allow_tf32(True) or {_settings.TF32_ENV}=1 to allow)")
    pools = ", ".join(f"{pool['library']} {pool['threads']} thread(s)" for pool in facts["cpu"]["blas"])
    rows = [("cudnn_rnn", facts["cudnn_rnn"]), ("Python", facts["python"]), ("NumPy", facts["numpy"]),
            ("CuPy", cupy), ("cuDNN", cudnn), ("CUDA runtime", runtime), ("CUDA driver", driver),
            ("GPUs", gpus), ("float32 math", float32), ("CPU cells", _cells_text(facts["cpu"])),
            ("CPU threads", f"{facts['cpu']['threads']}; BLAS: {pools or 'not visible'}")]
    lines = [f"{name:<14}{value}" for name, value in rows]
    lines.append("Backends")
    lines += [f"  {name:<20}{status}" for name, status in facts["backends"].items()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the facts :func:`cudnn_rnn.info.collect` gathers (text, or one JSON object with ``args.json``); 0,
    always: a missing piece is a fact to report, not an error."""
    facts = collect()
    print(json.dumps(facts, indent=2) if getattr(args, "json", False) else _text(facts))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``cudnn-rnn info`` alone: ``main(["--json"])`` runs ``cudnn-rnn info --json`` (``argv``: ``sys.argv[1:]``
    when None); returns its exit status."""
    from . import main as cudnn_rnn_main

    return cudnn_rnn_main(["info", *(sys.argv[1:] if argv is None else argv)])
