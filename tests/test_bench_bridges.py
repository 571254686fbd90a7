"""benchmarks/bench_bridges.py --quick runs to the end: every side agrees with the op bit for bit (the
script fails otherwise), and every CPU configuration's row and targets are printed. Its GPU peers compute
float32 as ours does, without TF32 (their comparison and timing run on a GPU: tests/gpu/test_jax_gpu.py).

It needs jax and torch (the test extra), which CI installs: no skip.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.experimental.rnn as jax_rnn
import jax.numpy as jnp
import numpy as np

from rnn_testing import load_module

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


def test_the_gpu_peers_compute_in_true_float32() -> None:
    # JAX's float32 products default to TF32 on GPUs that have it, and so does its cuDNN LSTM unless asked:
    # against ours (true float32) that is 2-8e-4 relative, near the comparison's 1e-3
    bench = load_module(SCRIPT)
    config = bench.GPU_QUICK[0]
    a = bench._inputs(config)
    x = jnp.swapaxes(a["x"], 0, 1)

    def loss(x: jax.Array, params: jax.Array) -> jax.Array:
        return jnp.sum(bench.scan_gru(x, a["h"][0], params, config.hidden) * np.swapaxes(a["dy"], 0, 1))

    for traced in (jax.make_jaxpr(loss)(x, a["params"]),  # the forward, and the backward the benchmark times too
                   jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, a["params"])):
        text = str(traced)
        products = text.count("dot_general")
        assert products >= 2 and text.count("precision=(Precision.HIGHEST, Precision.HIGHEST)") == products, text
    assert jax_rnn._lstm_cudnn_allow_tf32(None), "JAX's LSTM allows TF32 by default (jax 0.8-0.11)"
    assert not jax_rnn._lstm_cudnn_allow_tf32(bench.PEER_PRECISION)
    assert re.search(r"jrnn\.lstm\([^)]*precision=PEER_PRECISION\)", SCRIPT.read_text()), "the LSTM peer asks for it"
