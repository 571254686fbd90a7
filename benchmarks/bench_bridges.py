"""What the framework bridges (cudnn_rnn.jax, cudnn_rnn.torch) cost over the op, and the JAX GPU targets.

Every side is measured in one run on one machine, the sides taking turns after the warm-up; each row
reports the median of the repeats.

CPU (the reference backend runs underneath every side), float32, one training step = a training
forward plus the full backprop with the cotangent dy of the output:

direct
    ``cudnn_rnn_v3(..., is_training=True)`` + ``cudnn_rnn_backprop_v3`` on NumPy arrays.
jax
    ``jax.jit`` of ``jax.vjp`` of ``cudnn_rnn.jax.cudnn_rnn`` (forward and backward in one compiled
    function, through buffer callbacks), applied to dy, results blocked on.
torch
    ``cudnn_rnn.torch.cudnn_rnn`` forward then ``torch.autograd.grad`` with dy (the custom operators).

GPU (only where JAX has a CUDA device), float32 in true float32 on every side (the peers at
``precision="highest"``: JAX's own default is TF32), batch-major, every sequence of length T, a training
step = ``jax.jit(jax.value_and_grad)`` of sum(y * dy) over (x, params):

ours vs scan
    ``cudnn_rnn.jax.cudnn_rnn`` GRU against a ``jax.lax.scan`` GRU with cuDNN's equations.
ours vs jax.experimental.rnn
    ``cudnn_rnn.jax.cudnn_rnn`` LSTM against ``jax.experimental.rnn.lstm`` (cuDNN underneath too).

The sides agree or the run fails: on CPU every side's outputs and gradients equal the direct op's
bit for bit; on the GPU ours equals the scan GRU and jax.experimental.rnn's LSTM (same weights) to
1e-3 relative to the largest value.

Targets (printed as met / NOT met)
    CPU: jax/direct <= 1.05 and torch/direct <= 1.05
    GPU: scan/ours >= 5 for the GRU at T=100 B=32 H=256; ours/jax.experimental <= 1.0 for the LSTM
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_configs import RESULTS, write_record  # noqa: E402
from _bench_report import column, median_ms, print_table, text_column  # noqa: E402

import cudnn_rnn  # noqa: E402


@dataclass(frozen=True)
class Config:
    """One configuration: float32, I = H, one layer unless ``layers`` says otherwise."""

    mode: str
    max_time: int
    batch: int
    hidden: int
    layers: int = 1

    @property
    def name(self) -> str:
        return f"{self.mode} T={self.max_time} B={self.batch} H={self.hidden} L={self.layers}"

    def rnn_config(self) -> cudnn_rnn.RNNConfig:
        return cudnn_rnn.RNNConfig(self.mode, self.layers, self.hidden, self.hidden)


CPU_CONFIGS = [Config("lstm", 50, 16, 128), Config("gru", 50, 16, 128), Config("lstm", 20, 8, 64, layers=2)]
CPU_QUICK = [Config("lstm", 6, 3, 8), Config("gru", 5, 2, 8)]
GPU_CONFIGS = [Config("gru", 100, 32, 256), Config("lstm", 100, 32, 256)]
GPU_QUICK = [Config("gru", 10, 4, 32), Config("lstm", 10, 4, 32)]
#: the peers' precision on the GPU: true float32, as ours computes float32 by default (cudnn_rnn.allow_tf32)
PEER_PRECISION = "highest"
#: (key, limit, how the ratio must compare with it): the targets of the module docstring
CPU_TARGETS = [("jax_ratio", 1.05, "<="), ("torch_ratio", 1.05, "<=")]
GPU_TARGETS = {"gru": ("speedup_vs_scan", 5.0, ">="), "lstm": ("ratio_vs_experimental", 1.0, "<=")}


def _inputs(config: Config, seed: int = 0) -> dict[str, np.ndarray]:
    """Time-major float32 arrays of one call: x, h, c (LSTM), params, dy."""
    rng = np.random.default_rng(seed)
    t, b, n, layers = config.max_time, config.batch, config.hidden, config.layers
    arrays = {"x": rng.standard_normal((t, b, n)), "h": rng.standard_normal((layers, b, n)),
              "dy": rng.standard_normal((t, b, n))}
    if config.mode == "lstm":
        arrays["c"] = rng.standard_normal((layers, b, n))
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    arrays["params"] = cudnn_rnn.LSTM(n, n, layers, seed=seed).params if config.mode == "lstm" else \
        cudnn_rnn.GRU(n, n, layers, seed=seed).params
    return arrays


# ==== CPU: the bridges against the op ===========================================================
def direct_step(config: Config, a: dict[str, np.ndarray]) -> Callable[[], tuple[Any, ...]]:
    def step() -> tuple[Any, ...]:
        out = cudnn_rnn.cudnn_rnn_v3(a["x"], a["h"], a.get("c"), a["params"], rnn_mode=config.mode)
        grads = cudnn_rnn.cudnn_rnn_backprop_v3(a["x"], a["h"], a.get("c"), a["params"], None, out.output,
                                                out.output_h, out.output_c, a["dy"], None, None, out.reserve_space,
                                                out.host_reserved, rnn_mode=config.mode)
        return out.output, grads.input_backprop, grads.params_backprop
    return step


def jax_step(config: Config, a: dict[str, np.ndarray]) -> Callable[[], tuple[Any, ...]]:
    import jax

    import cudnn_rnn.jax as cj

    cell = "c" in a

    def run(x: Any, h: Any, c: Any, params: Any, dy: Any) -> tuple[Any, ...]:
        def output(x: Any, params: Any) -> Any:
            return cj.cudnn_rnn(x, h, c if cell else None, params, rnn_mode=config.mode)[0]
        y, vjp = jax.vjp(output, x, params)
        dx, dparams = vjp(dy)
        return y, dx, dparams

    compiled = jax.jit(run)
    cpu = jax.devices("cpu")[0]
    args = [jax.device_put(a.get(k, np.zeros(1, np.float32)), cpu) for k in ("x", "h", "c", "params", "dy")]

    def step() -> tuple[Any, ...]:
        return tuple(np.asarray(v) for v in jax.block_until_ready(compiled(*args)))
    return step


def torch_step(config: Config, a: dict[str, np.ndarray]) -> Callable[[], tuple[Any, ...]]:
    import torch

    import cudnn_rnn.torch as ct

    x = torch.from_numpy(a["x"]).requires_grad_()
    params = torch.from_numpy(a["params"]).requires_grad_()
    h, dy = torch.from_numpy(a["h"]), torch.from_numpy(a["dy"])
    c = torch.from_numpy(a["c"]) if "c" in a else None

    def step() -> tuple[Any, ...]:
        y = ct.cudnn_rnn(x, h, c, params, rnn_mode=config.mode)[0]
        dx, dparams = torch.autograd.grad(y, (x, params), dy)
        return y.detach().numpy(), dx.numpy(), dparams.numpy()
    return step


def cpu_row(config: Config, warmup: int, repeats: int) -> dict[str, Any]:
    a = _inputs(config)
    steps = {"direct": direct_step(config, a), "jax": jax_step(config, a), "torch": torch_step(config, a)}
    expected = steps["direct"]()
    for side in ("jax", "torch"):
        for name, got, want in zip(("output", "input gradient", "params gradient"), steps[side](), expected):
            if not np.array_equal(got, want):
                raise SystemExit(f"{config.name}: the {side} bridge's {name} differs from the op's")
    row: dict[str, Any] = {"name": config.name, **median_ms(steps, warmup, repeats, prefix="")}
    row["jax_ratio"] = row["jax_ms"] / row["direct_ms"]
    row["torch_ratio"] = row["torch_ms"] / row["direct_ms"]
    return row


# ==== GPU: the JAX bridge against JAX's own RNNs ================================================
def scan_gru(x: Any, h: Any, params: Any, hidden: int) -> Any:
    """A batch-major one-layer GRU by ``jax.lax.scan`` with cuDNN's equations (the params in cuDNN's layout).

    Its products run at ``PEER_PRECISION``, true float32 as ours (JAX's float32 dots default to TF32 on GPUs
    that have it).
    """
    import jax
    import jax.numpy as jnp

    n, inputs = hidden, x.shape[2]
    w = params[:3 * n * inputs].reshape(3 * n, inputs)  # W_r, W_z, W_n stacked
    r = params[3 * n * inputs:3 * n * (inputs + n)].reshape(3 * n, n)
    bw, br = params[3 * n * (inputs + n):3 * n * (inputs + n + 1)], params[3 * n * (inputs + n + 1):]

    def cell(h: Any, x_t: Any) -> tuple[Any, Any]:
        gx = jnp.matmul(x_t, w.T, precision=PEER_PRECISION) + bw
        gh = jnp.matmul(h, r.T, precision=PEER_PRECISION) + br
        reset = jax.nn.sigmoid(gx[:, :n] + gh[:, :n])
        update = jax.nn.sigmoid(gx[:, n:2 * n] + gh[:, n:2 * n])
        new = jnp.tanh(gx[:, 2 * n:] + reset * gh[:, 2 * n:])
        h = (1 - update) * new + update * h
        return h, h

    _, ys = jax.lax.scan(cell, h, jnp.swapaxes(x, 0, 1))
    return jnp.swapaxes(ys, 0, 1)


def gpu_row(config: Config, warmup: int, repeats: int) -> dict[str, Any]:
    import jax
    import jax.experimental.rnn as jrnn
    import jax.numpy as jnp

    import cudnn_rnn.jax as cj
    from cudnn_rnn.formats import from_format

    gpu = jax.devices("cuda")[0]
    a = _inputs(config)
    n, b, t = config.hidden, config.batch, config.max_time
    x = jax.device_put(np.swapaxes(a["x"], 0, 1), gpu)  # batch-major
    dy = jax.device_put(np.swapaxes(a["dy"], 0, 1), gpu)
    h = jax.device_put(a["h"][:, :, :], gpu)  # [L, B, H]
    ours_h = jnp.swapaxes(h, 0, 1)  # [B, L, H]: ours with time_major=False
    if config.mode == "gru":
        params = jax.device_put(a["params"], gpu)

        def theirs(x: Any, p: Any) -> Any:
            return scan_gru(x, h[0], p, n)
        their_params = params
    else:
        c = jax.device_put(a["c"], gpu)
        their_params = jrnn.init_lstm_weight(jax.random.PRNGKey(0), n, n, 1, False)
        w_ih, w_hh, b_ih, b_hh = jrnn.unpack_lstm_weights(their_params, n, n, 1, False)
        torch_named = {"weight_ih_l0": np.asarray(w_ih[0]), "weight_hh_l0": np.asarray(w_hh[0]),
                       "bias_ih_l0": np.asarray(b_ih[0]), "bias_hh_l0": np.asarray(b_hh[0])}
        params = jax.device_put(from_format("torch", torch_named, config.rnn_config()).value, gpu)
        lengths = jnp.full((b,), t, dtype=jnp.int32)

        def theirs(x: Any, p: Any) -> Any:  # at PEER_PRECISION: cuDNN without TF32 (JAX allows it by default)
            return jrnn.lstm(x, h, c, p, lengths, n, n, 1, 0.0, False, precision=PEER_PRECISION)[0]

    def ours(x: Any, p: Any) -> Any:
        c_ours = jnp.swapaxes(c, 0, 1) if config.mode == "lstm" else None
        return cj.cudnn_rnn(x, ours_h, c_ours, p, rnn_mode=config.mode, time_major=False)[0]

    def training(forward: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        return jax.jit(jax.value_and_grad(lambda x, p: jnp.sum(forward(x, p) * dy), argnums=(0, 1)))

    ours_step, their_step = training(ours), training(theirs)
    y_ours, y_theirs = np.asarray(jax.jit(ours)(x, params)), np.asarray(jax.jit(theirs)(x, their_params))
    error = np.max(np.abs(y_ours - y_theirs)) / max(np.max(np.abs(y_theirs)), 1e-30)
    if not error <= 1e-3:
        raise SystemExit(f"{config.name}: ours and JAX's {config.mode} differ by {error:.2e} (relative)")
    steps = {"ours": lambda: jax.block_until_ready(ours_step(x, params)),
             "theirs": lambda: jax.block_until_ready(their_step(x, their_params))}
    row: dict[str, Any] = {"name": config.name, "peer": "lax.scan GRU" if config.mode == "gru" else
                           "jax.experimental.rnn.lstm", **median_ms(steps, warmup, repeats, prefix="")}
    row["speedup_vs_scan" if config.mode == "gru" else "ratio_vs_experimental"] = (
        row["theirs_ms"] / row["ours_ms"] if config.mode == "gru" else row["ours_ms"] / row["theirs_ms"])
    return row


def _is_met(value: float, limit: float, relation: str) -> bool:
    return value <= limit if relation == "<=" else value >= limit


def _met(value: float, limit: float, relation: str) -> str:
    return f"{'met' if _is_met(value, limit, relation) else 'NOT met'} ({value:.3f} {relation} {limit})"


def environment() -> dict[str, Any]:
    """The machine and the versions every side ran with."""
    import jax
    import torch

    return {"machine": platform.machine(), "cores": os.cpu_count(), "processor": platform.processor() or None,
            "python": platform.python_version(), "numpy": np.__version__, "jax": jax.__version__,
            "torch": torch.__version__, "cudnn_rnn": cudnn_rnn.__version__}


def _has_cuda() -> bool:
    import jax

    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per side first")
    parser.add_argument("--quick", action="store_true", help="tiny configurations (a smoke test, seconds)")
    parser.add_argument("--record", action="store_true", help=f"write a JSON record to {RESULTS}")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # PyTorch's idle threads sleep, off the op's cores
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # GPU memory left for CuPy's pool (cuDNN)
    record: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "quick": args.quick, "repeats": args.repeats, "warmup": args.warmup,
                              "environment": environment()}
    rows = [cpu_row(c, args.warmup, args.repeats) for c in (CPU_QUICK if args.quick else CPU_CONFIGS)]
    print_table("CPU, float32 training step (ms): the bridges against the op", [
        column("direct", "direct_ms", 2), column("jax", "jax_ms", 2), column("torch", "torch_ms", 2),
        column("jax/direct", "jax_ratio", 3), column("torch/direct", "torch_ratio", 3),
        column("spread", "spread", 2)], rows)
    record["bridges_cpu"] = rows
    targets_met: dict[str, bool] = {}
    print("\ntargets")
    for row in rows:
        for key, limit, relation in CPU_TARGETS:
            print(f"  {row['name']}: {key} {_met(row[key], limit, relation)}")
            targets_met[f"{row['name']}: {key}"] = _is_met(row[key], limit, relation)
    if _has_cuda():
        gpu_rows = [gpu_row(c, args.warmup, args.repeats) for c in (GPU_QUICK if args.quick else GPU_CONFIGS)]
        print_table("GPU, float32 training step (ms): cudnn_rnn.jax against JAX's own", [
            text_column("peer", "peer"), column("ours", "ours_ms", 3), column("peer", "theirs_ms", 3)], gpu_rows)
        for row, config in zip(gpu_rows, GPU_QUICK if args.quick else GPU_CONFIGS):
            key, limit, relation = GPU_TARGETS[config.mode]
            print(f"  {row['name']}: {key} {_met(row[key], limit, relation)}")
            targets_met[f"{row['name']}: {key}"] = _is_met(row[key], limit, relation)
        record["bridges_gpu"] = gpu_rows
    else:
        print("\nGPU: no CUDA device for JAX here; the GPU table needs one")
    record["targets"] = {f"CPU {key}": f"{relation} {limit}" for key, limit, relation in CPU_TARGETS}
    record["targets"].update({f"GPU {mode} {key}": f"{relation} {limit}" for mode, (key, limit, relation)
                              in GPU_TARGETS.items()})
    record["targets_met"] = targets_met
    if args.record:
        write_record("bridges", record, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
