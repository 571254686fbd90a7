"""read_file's entry point, NumPy only: the readers it imports, and the options each file kind takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY_FRAMEWORKS = ("h5py", "torch", "onnx", "tensorflow")
REPO = Path(__file__).resolve().parents[1]


def test_importing_convert_imports_no_framework() -> None:
    """Every reader module is imported with cudnn_rnn.convert; each imports its framework only to read a file."""
    script = ("import sys, cudnn_rnn.convert, cudnn_rnn.convert.readers; "
              f"print(' '.join(name for name in {HEAVY_FRAMEWORKS!r} if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"importing cudnn_rnn.convert imported {result.stdout.strip()}"
