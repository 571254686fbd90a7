"""benchmarks/bench_bridges.py --quick runs to the end: every side agrees with the op bit for bit (the
script fails otherwise), and every CPU configuration's row and targets are printed.

It needs jax and torch (the test extra), which CI installs: no skip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_bridges.py"


def test_quick_run_prints_every_row_and_target() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeats", "1", "--warmup", "0"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "CPU, float32 training step (ms): the bridges against the op" in out
    for name in ("lstm T=6 B=3 H=8 L=1", "gru T=5 B=2 H=8 L=1"):
        assert sum(line.startswith(name) for line in out.splitlines()) == 1, out
        for key in ("jax_ratio", "torch_ratio"):
            assert f"  {name}: {key} " in out, out
    assert "GPU: no CUDA device for JAX here" in out or "GPU, float32 training step" in out
