"""``cudnn-rnn info`` (``cudnn_rnn/cli/info.py``) on a machine without a GPU, CuPy or cuDNN."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn._cudnn import _lib
from cudnn_rnn.cli import info
from cudnn_testing import LIBRARY, REPO


def test_info_text_without_gpu(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # as on a machine without CuPy
    assert info.run(argparse.Namespace(json=False)) == 0
    out = capsys.readouterr().out
    assert re.search(r"^NumPy +" + re.escape(np.__version__) + "$", out, re.M)
    assert re.search(r"^CuPy +not installed; pip install 'cudnn_rnn\[cuda12\]'", out, re.M)
    assert re.search(r"^ +numpy \(reference\) +usable$", out, re.M)
    assert re.search(r"^ +cupy \(cuDNN\) +not usable: CuPy is not installed", out, re.M)
    if LIBRARY is not None:
        assert re.search(r"^cuDNN +9\.\d+\.\d+ \(.*libcudnn\.so\.9; built for CUDA \d+\.\d+\)$", out, re.M)


def test_info_json_without_cudnn(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                 tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setenv("CUDNN_RNN_LIBRARY", str(tmp_path / "missing" / "libcudnn.so.9"))
    monkeypatch.setattr(_lib, "_loaded", None)
    assert info.main(["--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["cudnn"]["available"] is False
    assert "missing/libcudnn.so.9 (from $CUDNN_RNN_LIBRARY)" in facts["cudnn"]["reason"]
    assert facts["backends"]["numpy (reference)"] == "usable"
    assert facts["backends"]["cupy (cuDNN)"].startswith("not usable")
    assert facts["cupy"]["available"] is False


def test_info_command_exits_zero_in_a_fresh_process(tmp_path: Path) -> None:
    env = {**os.environ, "CUDNN_RNN_LIBRARY": str(tmp_path / "absent.so")}
    result = subprocess.run([sys.executable, "-m", "cudnn_rnn", "info"], env=env, capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "cuDNN         not available" in result.stdout
    assert "absent.so (from $CUDNN_RNN_LIBRARY)" in result.stdout
    assert "numpy (reference)   usable" in result.stdout
