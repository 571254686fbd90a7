"""``cudnn_rnn.jax`` on a CUDA device: its buffer callbacks run cuDNN on CuPy views of XLA's buffers, on XLA's
stream, and agrees with the library's op on CuPy arrays, with the reference backend (gradients, loosely),
with itself across lengths under one ``jax.jit``, and with JAX's own RNNs (the benchmark's guards).

JAX must have a CUDA backend (``jax[cuda12]`` or ``jax[cuda13]``) beside CuPy; without one these tests
skip, or fail under ``CUDNN_RNN_REQUIRE_GPU=1``. XLA's preallocation is switched off here, so that CuPy's pool
has room for cuDNN's workspaces (it takes effect if JAX has not started its backends earlier in the process;
the tests are small enough for the quarter of the GPU a preallocating JAX leaves).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

import cudnn_rnn  # noqa: E402
import cudnn_rnn.jax as cj  # noqa: E402
from rnn_testing import load_module  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BENCH_BRIDGES = REPO / "benchmarks" / "bench_bridges.py"


def _cuda_device() -> Any:
    try:
        return jax.devices("cuda")[0]
    except RuntimeError as error:
        if os.environ.get("CUDNN_RNN_REQUIRE_GPU") == "1":
            pytest.fail(f"CUDNN_RNN_REQUIRE_GPU=1, but JAX has no CUDA backend: {error}")
        pytest.skip(f"JAX has no CUDA backend (install jax[cuda12] or jax[cuda13]): {error}")


@pytest.fixture(autouse=True)
def gpu() -> Iterator[Any]:
    """JAX's first CUDA device, the default device of every test here."""
    device = _cuda_device()
    with jax.default_device(device):
        yield device


#: (attributes, num_layers, input_size, num_units, lengths or None); T = 4, B = 3
CASES = [
    (dict(rnn_mode="lstm", direction="bidirectional", num_proj=2, time_major=False), 2, 5, 4, (4, 0, 2)),
    (dict(rnn_mode="gru", time_major=True), 1, 3, 6, None),
    (dict(rnn_mode="rnn_relu", direction="bidirectional", time_major=True), 2, 3, 3, (1, 4, 3)),
    (dict(rnn_mode="rnn_tanh", input_mode="skip_input", time_major=False), 1, 4, 4, (2, 2, 4)),
]
IDS = ["lstm-bi-proj", "gru", "relu-bi", "tanh-skip"]


def _arrays(attrs: dict[str, Any], layers: int, inputs: int, units: int, lengths: tuple[int, ...] | None,
            dtype: Any = np.float32) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    config = cudnn_rnn.RNNConfig(attrs["rnn_mode"], layers, units, inputs, input_mode=attrs.get("input_mode",
                                 "linear_input"), direction=attrs.get("direction", "unidirectional"),
                                 num_proj=attrs.get("num_proj", 0), dtype=np.dtype(dtype).name)
    t, b, k = 4, 3, config.num_pseudo_layers
    major = attrs["time_major"]
    seq, state = ((t, b), (k, b)) if major else ((b, t), (b, k))
    a = {"input": rng.standard_normal(seq + (inputs,)), "input_h": rng.standard_normal(state + (config.state_size,)),
         "input_c": rng.standard_normal(state + (units,)) if config.has_cell else None,
         "params": cj.init_params(config, seed=1)}
    a = {name: None if v is None else np.asarray(v).astype(dtype) for name, v in a.items()}
    a["sequence_lengths"] = None if lengths is None else np.array(lengths, dtype=np.int32)
    out_seq = seq + (config.output_size,)
    a["dy"] = rng.standard_normal(out_seq).astype(dtype)
    return a


def _vjp(a: dict[str, Any], attrs: dict[str, Any], device: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """output, output_h and the gradients of sum(output * dy) for input, input_h, params, on ``device``."""
    put = {name: None if v is None else jax.device_put(v, device) for name, v in a.items()}

    def output(x: Any, h: Any, params: Any) -> Any:
        y, hy, _ = cj.cudnn_rnn(x, h, put["input_c"], params, put["sequence_lengths"], **attrs)
        return y, hy

    @jax.jit
    def run(x: Any, h: Any, params: Any, dy: Any) -> Any:
        (y, hy), pullback = jax.vjp(output, x * 1.0, h, params)  # x * 1.0: an XLA op queued just before ours
        return (y, hy), pullback((dy, jnp.zeros_like(hy)))

    (y, hy), grads = run(put["input"], put["input_h"], put["params"], put["dy"])
    return [np.asarray(y), np.asarray(hy)], [np.asarray(g) for g in grads]


def _close(got: np.ndarray, want: np.ndarray, tolerance: float, what: str) -> None:
    scale = max(float(np.max(np.abs(want))), 1e-30)
    error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / scale
    assert error <= tolerance, f"{what}: relative error {error:.3g} > {tolerance:g}"


@pytest.mark.parametrize("attrs, layers, inputs, units, lengths", CASES, ids=IDS)
def test_equals_the_cuda_op_on_cupy_arrays(gpu: Any, attrs: dict[str, Any], layers: int, inputs: int, units: int,
                                          lengths: tuple[int, ...] | None) -> None:
    a = _arrays(attrs, layers, inputs, units, lengths)
    (y, hy), (dx, dh, dparams) = _vjp(a, attrs, gpu)
    on_gpu = {name: None if v is None or name == "sequence_lengths" else cupy.asarray(v) for name, v in a.items()}
    out = cudnn_rnn.cudnn_rnn_v3(on_gpu["input"], on_gpu["input_h"], on_gpu["input_c"], on_gpu["params"],
                                 a["sequence_lengths"], **attrs)
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(on_gpu["input"], on_gpu["input_h"], on_gpu["input_c"], on_gpu["params"],
                                            a["sequence_lengths"], out.output, out.output_h, out.output_c,
                                            on_gpu["dy"], None, None, out.reserve_space, out.host_reserved, **attrs)
    for what, got, want in [("output", y, out.output), ("output_h", hy, out.output_h),
                            ("input_backprop", dx, grads.input_backprop), ("input_h_backprop", dh,
                                                                            grads.input_h_backprop),
                            ("params_backprop", dparams, grads.params_backprop)]:
        _close(got, cupy.asnumpy(want), 1e-5, what)


@pytest.mark.parametrize("attrs, layers, inputs, units, lengths", CASES, ids=IDS)
def test_gradients_agree_with_the_reference_backend(gpu: Any, attrs: dict[str, Any], layers: int, inputs: int,
                                                   units: int, lengths: tuple[int, ...] | None) -> None:
    a = _arrays(attrs, layers, inputs, units, lengths)
    outputs, grads = _vjp(a, attrs, gpu)
    outputs_cpu, grads_cpu = _vjp(a, attrs, jax.devices("cpu")[0])  # the reference backend, same program
    for what, got, want in zip(("output", "output_h", "input", "input_h", "params"), outputs + grads,
                               outputs_cpu + grads_cpu):
        _close(got, want, 1e-3, what)


def test_a_jitted_call_runs_again_with_other_lengths(gpu: Any) -> None:
    attrs = dict(rnn_mode="lstm", direction="bidirectional", time_major=False)
    a = _arrays(attrs, 1, 3, 5, None)
    put = {name: None if v is None else jax.device_put(v, gpu) for name, v in a.items()}
    traces = []

    @jax.jit
    def run(lengths: Any) -> Any:
        traces.append(1)
        return cj.cudnn_rnn(put["input"], put["input_h"], put["input_c"], put["params"], lengths, **attrs)

    for lengths in ([4, 0, 2], [1, 4, 4], [3, 3, 0]):
        lengths_array = np.array(lengths, dtype=np.int32)
        got = run(jax.device_put(lengths_array, gpu))
        want = cudnn_rnn.cudnn_rnn_v3(cupy.asarray(a["input"]), cupy.asarray(a["input_h"]), cupy.asarray(a["input_c"]),
                                      cupy.asarray(a["params"]), lengths_array, **attrs)
        for what, g, w in zip(("output", "output_h", "output_c"), got, want[:3]):
            _close(np.asarray(g), cupy.asnumpy(w), 1e-5, f"{what} with lengths {lengths}")
        assert not np.asarray(got[0])[np.arange(4)[None, :] >= lengths_array[:, None]].any()
    assert len(traces) == 1


def test_a_value_refused_on_the_gpu_carries_the_ops_message(gpu: Any) -> None:
    attrs = dict(rnn_mode="gru", time_major=True)
    a = _arrays(attrs, 1, 3, 4, None)
    run = jax.jit(lambda lengths: cj.cudnn_rnn(jnp.asarray(a["input"]), jnp.asarray(a["input_h"]), None,
                                               jnp.asarray(a["params"]), lengths, **attrs)[0])
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError),
                       match=r"ValueError: sequence_lengths values must be in \[0, 4\] \(the max time\); "
                             r"got sequence_lengths\[1\] = 9"):
        run(jnp.asarray([4, 9, 1], dtype=jnp.int32)).block_until_ready()
    assert np.isfinite(np.asarray(run(jnp.asarray([4, 2, 1], dtype=jnp.int32)))).all()  # the call runs on


# ---- the benchmark's correctness guards -----------------------------------------------------------------
def _bench_bridges() -> ModuleType:
    """benchmarks/bench_bridges.py as a module."""
    return sys.modules.get("bench_bridges") or load_module(BENCH_BRIDGES)


@pytest.mark.parametrize("mode", ["gru", "lstm"])
def test_the_benchmarks_peers_compute_what_ours_computes(gpu: Any, mode: str) -> None:
    """What bench_bridges.py guards before timing: ours equals a lax.scan GRU and jax.experimental.rnn's LSTM."""
    bench = _bench_bridges()
    config = next(c for c in bench.GPU_QUICK if c.mode == mode)
    row = bench.gpu_row(config, warmup=0, repeats=1)  # raises SystemExit when the outputs differ by > 1e-3
    assert row["ours_ms"] > 0 and row["theirs_ms"] > 0
    if mode == "gru":  # and the gradients too, which the benchmark times but does not compare
        a = bench._inputs(config)
        x = jax.device_put(np.swapaxes(a["x"], 0, 1), gpu)
        h, params = jax.device_put(a["h"], gpu), jax.device_put(a["params"], gpu)
        dy = jax.device_put(np.swapaxes(a["dy"], 0, 1), gpu)

        def ours(x: Any, p: Any) -> Any:
            return jnp.sum(dy * cj.cudnn_rnn(x, jnp.swapaxes(h, 0, 1), None, p, rnn_mode="gru", time_major=False)[0])

        def scan(x: Any, p: Any) -> Any:
            return jnp.sum(dy * bench.scan_gru(x, h[0], p, config.hidden))

        got = jax.jit(jax.grad(ours, argnums=(0, 1)))(x, params)
        want = jax.jit(jax.grad(scan, argnums=(0, 1)))(x, params)
        for what, g, w in zip(("input", "params"), got, want):
            _close(np.asarray(g), np.asarray(w), 1e-3, what)
