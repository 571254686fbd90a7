"""``cudnn_rnn.jax`` on the CPU: the op through buffer callbacks equals the library's op bit for bit, its gradients are
right (finite differences, and an independent ``jax.lax.scan`` LSTM and GRU), and bad input gets the op's errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.test_util import check_grads

import cudnn_rnn
import cudnn_rnn.jax as cj
from cudnn_rnn.layout import params_layout

#: the errors JAX raises for a failed XLA call: JaxRuntimeError, or ValueError from its fast dispatch path
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)


@pytest.fixture(autouse=True)
def _on_the_cpu() -> Iterator[None]:
    """Every computation on JAX's CPU device, where the reference backend runs (tests/gpu/test_jax_gpu.py: CUDA)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@dataclass(frozen=True)
class Case:
    """One configuration, tiny: T steps, B sequences, I inputs, N units."""

    rnn_mode: str
    direction: str = "unidirectional"
    time_major: bool = True
    num_layers: int = 1
    input_size: int = 3
    num_units: int = 3
    num_proj: int = 0
    input_mode: str = "linear_input"
    dropout: float = 0.0
    seed: int = 0
    lengths: tuple[int, ...] | None = (3, 0, 2)  # unsorted, with an empty sequence
    max_time: int = 3

    @property
    def config(self) -> cudnn_rnn.RNNConfig:
        return cudnn_rnn.RNNConfig(self.rnn_mode, self.num_layers, self.num_units, self.input_size,
                                   input_mode=self.input_mode, direction=self.direction, num_proj=self.num_proj)

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(rnn_mode=self.rnn_mode, input_mode=self.input_mode, direction=self.direction,
                    dropout=self.dropout, seed=self.seed, num_proj=self.num_proj, time_major=self.time_major)

    def arrays(self, dtype: Any = np.float32, seed: int = 0) -> tuple[np.ndarray, ...]:
        """(input, input_h, input_c or None, params, lengths or None) as NumPy arrays."""
        rng = np.random.default_rng(seed)
        config = self.config
        batch = 3 if self.lengths is None else len(self.lengths)
        layers = config.num_pseudo_layers
        seq = (self.max_time, batch) if self.time_major else (batch, self.max_time)
        state = (layers, batch) if self.time_major else (batch, layers)
        x = rng.standard_normal(seq + (self.input_size,)).astype(dtype)
        h = (0.5 * rng.standard_normal(state + (config.state_size,))).astype(dtype)
        c = (0.5 * rng.standard_normal(state + (self.num_units,))).astype(dtype) if config.has_cell else None
        params = (0.5 * rng.standard_normal(cudnn_rnn.cudnn_rnn_params_size(
            self.num_layers, self.num_units, self.input_size, rnn_mode=self.rnn_mode, input_mode=self.input_mode,
            direction=self.direction, num_proj=self.num_proj))).astype(dtype)
        lengths = None if self.lengths is None else np.array(self.lengths, dtype=np.int32)
        return x, h, c, params, lengths


CASES = [
    Case("lstm"),
    Case("lstm", "bidirectional", time_major=False, num_layers=2, num_proj=2, dropout=0.5, seed=7),
    Case("gru", "bidirectional", lengths=None),
    Case("rnn_tanh", time_major=False, input_mode="skip_input"),
    Case("rnn_relu", "bidirectional", num_layers=2, dropout=0.3, seed=1),
]


def _jax(*arrays: np.ndarray | None) -> list[Any]:
    return [None if a is None else jnp.asarray(a) for a in arrays]


def _cotangents(outputs: cudnn_rnn.RNNOutputs, seed: int = 1) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(a.shape).astype(a.dtype) for a in outputs[:3])


def _assert_library_equal(case: Case, dtype: Any, transform: Callable[[Any], Any]) -> None:
    """Forward outputs and the vjp equal cudnn_rnn_v3 and cudnn_rnn_backprop_v3 bit for bit."""
    x, h, c, params, lengths = case.arrays(dtype)
    expected = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, **case.attrs)
    dy, dhy, dcy = _cotangents(expected)
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, params, lengths, *expected[:3], dy, dhy, dcy,
                                            expected.reserve_space, expected.host_reserved, **case.attrs)
    cell = c is not None

    def run(x: Any, h: Any, c: Any, params: Any) -> Any:
        y, hy, cy = cj.cudnn_rnn(x, h, c, params, None if lengths is None else jnp.asarray(lengths), **case.attrs)
        return (y, hy, cy) if cell else (y, hy)

    def vjp(x: Any, h: Any, c: Any, params: Any) -> Any:
        outputs, pullback = jax.vjp(run, x, h, c, params)
        return outputs, pullback((dy, dhy, dcy) if cell else (dy, dhy))

    outputs, (dx, dh, dc, dparams) = transform(vjp)(*_jax(x, h, c, params))
    for name, got, want in [("output", outputs[0], expected.output), ("output_h", outputs[1], expected.output_h),
                            ("input_backprop", dx, grads.input_backprop), ("input_h", dh, grads.input_h_backprop),
                            ("params_backprop", dparams, grads.params_backprop)]:
        assert got.dtype == want.dtype and np.array_equal(np.asarray(got), want), name
    if cell:
        assert np.array_equal(np.asarray(outputs[2]), expected.output_c)
        assert np.array_equal(np.asarray(dc), grads.input_c_backprop)
    else:
        assert dc is None


# ---- (1) the library's op, bit for bit ------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.rnn_mode}-{case.direction[:3]}-tm{case.time_major}")
@pytest.mark.parametrize("transform", [lambda f: f, jax.jit], ids=["eager", "jit"])
def test_equals_the_library_op_and_its_backprop(case: Case, transform: Callable[[Any], Any]) -> None:
    _assert_library_equal(case, np.float32, transform)


@pytest.mark.parametrize("case, copies", [
    (Case("lstm", "bidirectional", num_layers=2), 0),  # time-major float32: the backend writes XLA's buffers
    (Case("gru", time_major=False), 4),  # batch-major: the reference backend's output and each state are copied
], ids=["time-major", "batch-major"])
def test_the_op_writes_its_results_into_xlas_buffers(monkeypatch: pytest.MonkeyPatch, case: Case,
                                                     copies: int) -> None:
    """Each callback hands XLA's buffers down (``out``): a result is copied only where the op cannot write it as
    it runs (another layout), and the results are the library's, bit for bit."""
    from cudnn_rnn import ops

    copy, copied = ops._copy_into, []
    monkeypatch.setattr(ops, "_copy_into", lambda destination, source: copied.append(source.shape) or copy(
        destination, source))
    _assert_library_equal(case, np.float32, jax.jit)
    assert len(copied) == copies, copied


def test_a_cpu_backward_reads_the_front_of_a_reserve_sized_for_a_longer_cuda_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With a CUDA backend beside the CPU, the traced reserve is as long as the longer of the two platforms'."""
    from cudnn_rnn import _bridge
    from cudnn_rnn.jax import _op

    cpu_elements = _bridge.Signature.reserve_elements
    asked: list[str] = []

    def longer_on_cuda(sig: _bridge.Signature, platform: str) -> int:
        asked.append(platform)
        return cpu_elements(sig, "cpu") + (512 if platform == "cuda" else 0)

    monkeypatch.setattr(_op, "_has_cuda", lambda: True)
    monkeypatch.setattr(_bridge.Signature, "reserve_elements", longer_on_cuda)
    _assert_library_equal(Case("lstm", "bidirectional", num_layers=2, num_proj=2), np.float32, jax.jit)
    assert "cuda" in asked, "the CUDA size was asked and is the longer"


def test_output_c_is_none_without_a_cell_and_input_c_is_then_ignored() -> None:
    case = Case("gru")
    x, h, _, params, lengths = case.arrays()
    y, hy, cy = cj.cudnn_rnn(*_jax(x, h), jnp.ones((7,)), jnp.asarray(params), jnp.asarray(lengths), rnn_mode="gru")
    assert cy is None
    assert np.array_equal(np.asarray(y), cudnn_rnn.cudnn_rnn_v3(x, h, None, params, lengths, rnn_mode="gru").output)


def test_inference_needs_no_reserve_and_still_differentiates() -> None:
    """is_training=False runs the inference forward; its gradient is a training forward's without dropout."""
    case = Case("lstm", num_layers=2, dropout=0.5, seed=3)
    x, h, c, params, lengths = case.arrays()
    attrs = dict(case.attrs, is_training=False)
    expected = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, **attrs)
    y, _, _ = cj.cudnn_rnn(*_jax(x, h, c, params, lengths), **attrs)
    assert np.array_equal(np.asarray(y), expected.output)
    grad = jax.grad(lambda p: jnp.sum(cj.cudnn_rnn(*_jax(x, h, c), p, jnp.asarray(lengths), **attrs)[0]))
    no_dropout = dict(case.attrs, dropout=0.0)
    train = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, **no_dropout)
    want = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, params, lengths, *train[:3], np.ones_like(train.output), None,
                                           None, train.reserve_space, **no_dropout)
    assert np.array_equal(np.asarray(grad(jnp.asarray(params))), want.params_backprop)


def test_a_traced_seed2_compiles_once_and_draws_each_steps_masks() -> None:
    """seed2 as an integer array: one trace for every step; each step's masks and gradients are the op's."""
    case = Case("gru", "bidirectional", num_layers=2, dropout=0.5, seed=4)
    x, h, _, params, lengths = case.arrays(np.float64)
    attrs = {k: v for k, v in case.attrs.items() if k != "seed2"}
    traces: list[int] = []

    @jax.jit
    def step(p: Any, seed2: Any) -> tuple[Any, Any]:
        traces.append(1)
        return jax.value_and_grad(lambda p: jnp.sum(cj.cudnn_rnn(*_jax(x, h), None, p, jnp.asarray(lengths),
                                                                   seed2=seed2, **attrs)[0]))(p)

    with jax.enable_x64(True):
        outputs = [step(jnp.asarray(params), jnp.asarray(seed2)) for seed2 in (11, 12, 11)]
        for seed2, (value, grad) in zip((11, 12, 11), outputs):
            out = cudnn_rnn.cudnn_rnn_v3(x, h, None, params, lengths, seed2=seed2, **attrs)
            want = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, None, params, lengths, *out[:3], np.ones_like(out.output),
                                                   None, None, out.reserve_space, seed2=seed2, **attrs)
            assert float(value) == pytest.approx(out.output.sum(), rel=1e-12, abs=0)  # XLA sums in its own order
            assert np.array_equal(np.asarray(grad), want.params_backprop)
    assert len(traces) == 1
    assert float(outputs[0][0]) != float(outputs[1][0])  # another seed2, other masks
    for bad, error, message in ((jnp.asarray(1.5), TypeError, r"seed2 must be an int or an integer array of shape "
                                 r"\(\); got an array of dtype float32"),
                                (jnp.asarray([1, 2]), ValueError, r"got shape \(2,\)")):
        with pytest.raises(error, match=message):
            cj.cudnn_rnn(*_jax(x, h), None, jnp.asarray(params, jnp.float32), seed2=bad, **attrs)


def _resident_bytes() -> int:
    """This process's resident set size (Linux: /proc/self/statm's second field, in pages)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("name", ["seed", "seed2"])
def test_a_new_int_seed_every_step_compiles_nothing_new_and_memory_stays_flat(name: str) -> None:
    """Eager jax.grad with dropout and a Python int seed new at every step: the seeds are values of the
    computation, so no step makes a callback (nor an executable) of its own, and the process does not grow
    (keyed by the seeds, each step compiled a forward and a backward and kept them: about 3 MB a step)."""
    from cudnn_rnn.jax import _op

    rng = np.random.default_rng(8)
    x = jnp.asarray(rng.standard_normal((3, 2, 4)), jnp.float32)  # T=3, B=2, I=4
    h = jnp.asarray(0.5 * rng.standard_normal((2, 2, 4)), jnp.float32)  # 2 layers, N=4
    params = jnp.asarray(0.5 * rng.standard_normal(cudnn_rnn.cudnn_rnn_params_size(2, 4, 4)), jnp.float32)
    grad = jax.grad(lambda p, i: jnp.sum(cj.cudnn_rnn(x, h, h, p, dropout=0.5, **{name: i})[0] ** 2))
    grads = [grad(params, i) for i in range(20)]  # the warm-up
    misses, size, resident = _op._callback.cache_info().misses, _op._callback.cache_info().currsize, _resident_bytes()
    for i in range(20, 320):
        grads.append(grad(params, i))
    grown = _resident_bytes() - resident
    info = _op._callback.cache_info()
    assert (info.misses, info.currsize) == (misses, size), f"callbacks made over 300 seeds: {info}"
    assert grown < 60 * 2**20, f"resident set grew by {grown / 2**20:.1f} MB over 300 steps"
    for i in (5, 319):  # each step's own masks: the op's
        x_, h_, p_ = np.asarray(x), np.asarray(h), np.asarray(params)
        out = cudnn_rnn.cudnn_rnn_v3(x_, h_, h_, p_, dropout=0.5, **{name: i})
        want = cudnn_rnn.cudnn_rnn_backprop_v3(x_, h_, h_, p_, None, *out[:3], 2 * out.output, None, None,
                                               out.reserve_space, dropout=0.5, **{name: i})
        assert np.array_equal(np.asarray(grads[i]), want.params_backprop), i
    assert not np.array_equal(np.asarray(grads[5]), np.asarray(grads[6]))


def test_int_traced_and_numpy_seeds_draw_the_same_masks() -> None:
    """(seed, seed2) as Python ints, as traced arrays (either or both, under jax.jit) and in the NumPy op: the
    same outputs and gradients bit for bit; other seeds, other masks."""
    case = Case("lstm", "bidirectional", num_layers=2, dropout=0.5)
    x, h, c, params, lengths = case.arrays()
    attrs = {k: v for k, v in case.attrs.items() if k != "seed"}

    def value_and_grad(seed: Any, seed2: Any, params: Any) -> tuple[Any, Any]:
        def loss(p: Any) -> Any:
            y, hy, cy = cj.cudnn_rnn(*_jax(x, h, c), p, jnp.asarray(lengths), seed=seed, seed2=seed2, **attrs)
            return jnp.sum(y * y) + jnp.sum(hy) + jnp.sum(cy), y
        return jax.value_and_grad(loss, has_aux=True)(params)

    traced_both = jax.jit(value_and_grad)
    traced_seed = jax.jit(value_and_grad, static_argnums=1)
    results = []
    for seed, seed2 in ((3, 11), (-5, 2**31 - 1), (3, 12)):
        out = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, seed=seed, seed2=seed2, **attrs)
        want = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, params, lengths, *out[:3], 2 * out.output,
                                               np.ones_like(out.output_h), np.ones_like(out.output_c),
                                               out.reserve_space, seed=seed, seed2=seed2, **attrs)
        p = jnp.asarray(params)
        for way, ((_, y), grad) in {"ints": value_and_grad(seed, seed2, p),
                                   "traced": traced_both(jnp.asarray(seed), jnp.asarray(seed2), p),
                                   "traced seed": traced_seed(jnp.asarray(seed), seed2, p)}.items():
            assert np.array_equal(np.asarray(y), out.output), (way, seed, seed2)
            assert np.array_equal(np.asarray(grad), want.params_backprop), (way, seed, seed2)
        results.append(out.output)
    assert not np.array_equal(results[0], results[2]) and not np.array_equal(results[0], results[1])


@pytest.mark.parametrize("change", [dict(dropout=0.0), dict(is_training=False), dict(num_layers=1)],
                         ids=["no dropout", "inference", "one layer"])
def test_seeds_that_change_nothing_share_one_callback(change: dict[str, Any]) -> None:
    """Where no dropout acts (dropout 0, inference, one layer) the seeds change nothing: every seed, int or
    traced, runs the one callback, and the outputs are the op's."""
    from cudnn_rnn.jax import _op

    layers = change.get("num_layers", 2)
    case = Case("gru", num_layers=layers, dropout=change.get("dropout", 0.5))
    x, h, _, params, lengths = case.arrays()
    attrs = dict({k: v for k, v in case.attrs.items() if k not in ("seed",)},
                 is_training=change.get("is_training", True))
    want = cudnn_rnn.cudnn_rnn_v3(x, h, None, params, lengths, **attrs).output
    run = jax.jit(lambda seed: cj.cudnn_rnn(*_jax(x, h), None, jnp.asarray(params), jnp.asarray(lengths),
                                            seed=seed, seed2=5, **attrs)[0])
    first = cj.cudnn_rnn(*_jax(x, h), None, *_jax(params, lengths), seed=1, seed2=5, **attrs)[0]
    misses = _op._callback.cache_info().misses
    for seed, seed2 in ((2, 6), (-7, 2**31 - 1)):
        got = cj.cudnn_rnn(*_jax(x, h), None, *_jax(params, lengths), seed=seed, seed2=seed2, **attrs)[0]
        assert np.array_equal(np.asarray(got), want) and np.array_equal(np.asarray(run(jnp.asarray(seed))), want)
    assert np.array_equal(np.asarray(first), want)
    assert _op._callback.cache_info().misses == misses


def test_bad_seeds_are_refused_naming_the_argument() -> None:
    """A traced seed or seed2 must be an integer array of shape (); an int seed outside a C int gets the op's
    error while tracing, a traced one (64-bit) when the call runs."""
    case = Case("lstm", num_layers=2, dropout=0.5)
    x, h, c, params, lengths = case.arrays()
    attrs = {k: v for k, v in case.attrs.items() if k != "seed"}
    arrays = _jax(x, h, c, params, lengths)
    for name in ("seed", "seed2"):
        for bad, error, message in ((jnp.asarray(1.5), TypeError, rf"^{name} must be an int or an integer array of "
                                     r"shape \(\); got an array of dtype float32$"),
                                    (jnp.asarray([1, 2]), ValueError, rf"^{name} must be an int or an integer array "
                                     r"of shape \(\); got shape \(2,\)$"),
                                    (jnp.asarray(True), TypeError, r"got an array of dtype bool$")):
            with pytest.raises(error, match=message):
                cj.cudnn_rnn(*arrays, **{name: bad}, **attrs)
        with pytest.raises(ValueError) as expected:
            cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, **{name: 2**31}, **attrs)
        with pytest.raises(ValueError) as caught:
            jax.eval_shape(lambda a, name=name: cj.cudnn_rnn(*a, **{name: 2**31}, **attrs), arrays)
        assert str(caught.value) == str(expected.value) and name in str(expected.value)
        with jax.enable_x64(True):
            with pytest.raises(RUNTIME_ERRORS) as caught:
                jax.jit(lambda s, name=name: cj.cudnn_rnn(*arrays, **{name: s}, **attrs)[0])(
                    jnp.asarray(2**31, jnp.int64)).block_until_ready()
        assert str(caught.value).rstrip().endswith(f"ValueError: {expected.value}")


# ---- (2) finite differences in float64 ---------------------------------------------------------------
GRAD_CASES = [
    Case("lstm", time_major=True),
    Case("lstm", "bidirectional", time_major=False, num_proj=2),
    Case("gru", "bidirectional", time_major=True),
    Case("gru", time_major=False, input_mode="skip_input"),
    Case("rnn_tanh", "bidirectional", time_major=False, input_mode="skip_input"),
    Case("rnn_relu", time_major=True, num_layers=2),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: f"{c.rnn_mode}-{c.direction[:3]}-tm{c.time_major}")
def test_gradients_match_finite_differences_in_float64(case: Case) -> None:
    with jax.enable_x64(True):
        x, h, c, params, lengths = case.arrays(np.float64, seed=2)
        rng = np.random.default_rng(3)
        shapes = [o.shape for o in cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, **case.attrs)[:3]]
        weights = [jnp.asarray(rng.standard_normal(shape)) for shape in shapes]

        def loss(*args: Any) -> Any:
            x, h, params, *cell = args
            outputs = cj.cudnn_rnn(x, h, cell[0] if cell else None, params, jnp.asarray(lengths), **case.attrs)
            return sum(jnp.sum(w * o) for w, o in zip(weights, outputs) if o is not None and o.size)

        inputs = _jax(x, h, params) + ([] if c is None else _jax(c))
        assert all(a.dtype == jnp.float64 for a in inputs)
        check_grads(loss, tuple(inputs), order=1, modes=["rev"], atol=1e-6, rtol=1e-6)


# ---- (3) an independent oracle: the cells written with jax.lax.scan ------------------------------------
def _cell(config: cudnn_rnn.RNNConfig, W: Any, R: Any, bW: Any, bR: Any) -> Callable[..., Any]:
    """One step of one direction: LSTM (gates i, f, g, o) c' = s(f) c + s(i) tanh(g), h' = s(o) tanh(c');
    GRU (gates r, u, n) n = tanh(W_n x + bW_n + r * (R_n h + bR_n)), h' = (1 - u) n + u h. Rows past their
    sequence's length keep their state and output 0."""
    n = config.num_units

    def step(carry: tuple[Any, Any], inputs: tuple[Any, Any]) -> tuple[tuple[Any, Any], Any]:
        h, c = carry
        xt, keep = inputs
        wx, rh = xt @ W.T + bW, h @ R.T + bR
        if config.rnn_mode == "lstm":
            i, f, g, o = jnp.split(wx + rh, 4, axis=-1)
            c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
        else:
            r = jax.nn.sigmoid(wx[:, :n] + rh[:, :n])
            u = jax.nn.sigmoid(wx[:, n:2 * n] + rh[:, n:2 * n])
            candidate = jnp.tanh(wx[:, 2 * n:] + r * rh[:, 2 * n:])
            h_new, c_new = (1 - u) * candidate + u * h, c
        keep = keep[:, None]
        return (jnp.where(keep, h_new, h), jnp.where(keep, c_new, c)), jnp.where(keep, h_new, 0.0)

    return step


def _scan_rnn(config: cudnn_rnn.RNNConfig, params: Any, x: Any, h0: Any, c0: Any, lengths: Any) -> tuple[Any, ...]:
    """One layer of LSTM or GRU, time-major, either direction, ragged lengths, with ``jax.lax.scan``: the
    reverse direction reads each sequence's own steps backwards. Returns (output, h_n, c_n)."""
    layout = params_layout(config)
    steps, batch = x.shape[:2]
    time = jnp.arange(steps)[:, None]
    valid = time < lengths[None, :]  # [T, B]
    columns = jnp.arange(batch)[None, :]
    outputs, finals_h, finals_c = [], [], []
    for k in range(config.num_directions):
        step = _cell(config, layout.gate_block(params, k, "input"), layout.gate_block(params, k, "recurrent"),
                     layout.bias_block(params, k, "input"), layout.bias_block(params, k, "recurrent"))
        order = jnp.where(valid, lengths[None, :] - 1 - time, time) if k else jnp.broadcast_to(time, valid.shape)
        (h, c), ys = jax.lax.scan(step, (h0[k], c0[k]), (x[order, columns], valid))
        outputs.append(ys[order, columns])  # the reversal is its own inverse
        finals_h.append(h)
        finals_c.append(c)
    return jnp.concatenate(outputs, axis=-1), jnp.stack(finals_h), jnp.stack(finals_c)


@pytest.mark.parametrize("rnn_mode, direction", [("lstm", "unidirectional"), ("gru", "bidirectional")])
def test_equals_a_scan_written_from_the_equations(rnn_mode: str, direction: str) -> None:
    case = Case(rnn_mode, direction, lengths=(2, 0, 3))
    with jax.enable_x64(True):
        x, h, c, params, lengths = case.arrays(np.float64, seed=4)
        c = np.zeros_like(h) if c is None else c
        config = case.config
        weights = jnp.asarray(np.random.default_rng(5).standard_normal((3, 3, config.output_size)))

        def ours(x: Any, h: Any, c: Any, params: Any) -> Any:
            y, hy, cy = cj.cudnn_rnn(x, h, c, params, jnp.asarray(lengths), **case.attrs)
            return jnp.sum(weights * y) + jnp.sum(hy ** 2) + (0.0 if cy is None else jnp.sum(jnp.sin(cy)))

        def oracle(x: Any, h: Any, c: Any, params: Any) -> Any:
            y, hy, cy = _scan_rnn(config, params, x, h, c, jnp.asarray(lengths))
            return jnp.sum(weights * y) + jnp.sum(hy ** 2) + (jnp.sum(jnp.sin(cy)) if config.has_cell else 0.0)

        arrays = _jax(x, h, c, params)
        y, hy, _ = cj.cudnn_rnn(*arrays[:2], arrays[2] if config.has_cell else None, arrays[3],
                                jnp.asarray(lengths), **case.attrs)
        y_oracle, hy_oracle, _ = _scan_rnn(config, arrays[3], *arrays[:3], jnp.asarray(lengths))
        np.testing.assert_allclose(np.asarray(y), np.asarray(y_oracle), rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(hy), np.asarray(hy_oracle), rtol=0, atol=1e-12)
        argnums = (0, 1, 2, 3) if config.has_cell else (0, 1, 3)
        value, grads = jax.value_and_grad(ours, argnums)(*arrays)
        value_oracle, grads_oracle = jax.value_and_grad(oracle, argnums)(*arrays)
        assert abs(float(value) - float(value_oracle)) < 1e-10
        for got, want in zip(grads, grads_oracle):
            assert float(jnp.abs(want).max()) > 0
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-10)


# ---- (4) jit with other lengths, and inside a model ------------------------------------------------------------
def test_a_jitted_call_runs_again_with_other_lengths() -> None:
    case = Case("lstm", "bidirectional", time_major=False)
    x, h, c, params, _ = case.arrays()
    traces = []

    @jax.jit
    def run(x: Any, lengths: Any) -> Any:
        traces.append(lengths.shape)
        return cj.cudnn_rnn(x, *_jax(h, c, params), lengths, **case.attrs)

    for lengths in ([3, 0, 2], [1, 3, 3], [0, 0, 1]):
        lengths = np.array(lengths, dtype=np.int32)
        got = run(jnp.asarray(x), jnp.asarray(lengths))
        want = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, **case.attrs)
        assert all(np.array_equal(np.asarray(g), w) for g, w in zip(got, want[:3])), lengths
    assert len(traces) == 1  # one compilation served every call: nothing of the first lengths was frozen into it


def test_value_and_grad_of_a_model_around_the_op() -> None:
    """Embedding -> LSTM (batch-major) -> dense -> cross-entropy over the valid steps; the oracle model agrees."""
    vocab, units, batch, steps = 5, 3, 3, 4
    config = cudnn_rnn.RNNConfig("lstm", 1, units, 2, dtype="float64")
    with jax.enable_x64(True):
        rng = np.random.default_rng(6)
        tokens = jnp.asarray(rng.integers(0, vocab, (batch, steps + 1)))
        lengths = jnp.asarray([4, 2, 3], dtype=jnp.int32)
        model = {"embedding": jnp.asarray(rng.standard_normal((vocab, 2))), "rnn": cj.init_params(config, seed=1),
                 "dense": jnp.asarray(rng.standard_normal((units, vocab)))}
        zeros = jnp.zeros((batch, 1, units))

        def loss(model: dict[str, Any], rnn: Callable[..., Any]) -> Any:
            x = model["embedding"][tokens[:, :-1]]  # [B, T, 2]
            y = rnn(x, model["rnn"])  # [B, T, N]
            logits = y @ model["dense"]
            log_p = jax.nn.log_softmax(logits)
            picked = jnp.take_along_axis(log_p, tokens[:, 1:, None], axis=-1)[..., 0]
            valid = jnp.arange(steps)[None, :] < lengths[:, None]
            return -jnp.sum(jnp.where(valid, picked, 0.0)) / jnp.sum(valid)

        def ours(x: Any, params: Any) -> Any:
            return cj.cudnn_rnn(x, zeros, zeros, params, lengths, time_major=False)[0]

        def oracle(x: Any, params: Any) -> Any:
            time_major = jnp.swapaxes(x, 0, 1)
            state = jnp.zeros((1, batch, units))
            return jnp.swapaxes(_scan_rnn(config, params, time_major, state, state, lengths)[0], 0, 1)

        value, grads = jax.jit(jax.value_and_grad(loss), static_argnums=1)(model, ours)
        value_oracle, grads_oracle = jax.value_and_grad(loss)(model, oracle)
        assert abs(float(value) - float(value_oracle)) < 1e-10 and float(value) > 0
        for name in model:
            assert grads[name].shape == model[name].shape and float(jnp.abs(grads[name]).max()) > 0, name
            np.testing.assert_allclose(np.asarray(grads[name]), np.asarray(grads_oracle[name]), rtol=0, atol=1e-10)


def test_vmap_maps_the_op_over_a_leading_axis() -> None:
    case = Case("gru", lengths=None)
    x, h, _, params, _ = case.arrays()
    xs = np.stack([x, 2 * x])
    got = jax.vmap(lambda x: cj.cudnn_rnn(x, *_jax(h), None, jnp.asarray(params), rnn_mode="gru")[0])(xs)
    for i in range(2):
        assert np.array_equal(np.asarray(got[i]), cudnn_rnn.cudnn_rnn_v3(xs[i], h, None, params,
                                                                         rnn_mode="gru").output)


# ---- (5) half precisions ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", [Case("lstm", time_major=False, num_proj=2), Case("gru", "bidirectional")],
                         ids=["lstm", "gru"])
def test_half_precisions_equal_the_library_op(case: Case, dtype: Any) -> None:
    assert np.dtype(jnp.bfloat16) == np.dtype(ml_dtypes.bfloat16)
    _assert_library_equal(case, dtype, jax.jit)


# ---- (6) bad input --------------------------------------------------------------------------------------
def _library_error(case: Case, **changes: Any) -> BaseException:
    x, h, c, params, lengths = case.arrays()
    arrays = dict(input=x, input_h=h, input_c=c, params=params, sequence_lengths=lengths)
    arrays.update({k: v for k, v in changes.items() if k in arrays})
    attrs = dict(case.attrs, **{k: v for k, v in changes.items() if k not in arrays})
    with pytest.raises((TypeError, ValueError)) as caught:
        cudnn_rnn.cudnn_rnn_v3(**arrays, **attrs)
    return caught.value


@pytest.mark.parametrize("change", [
    dict(params=np.zeros(5, np.float32)),
    dict(input_h=np.zeros((2, 3, 3), np.float32)),
    dict(params=np.zeros(96, np.float16)),
    dict(sequence_lengths=np.zeros(3, np.float32)),
    dict(rnn_mode="lsmt"),
    dict(dropout=1.5),
    dict(input_h=np.zeros((2, 3, 3), np.float16)),  # two mistakes: the op names the first it checks, the dtype
    dict(rnn_mode="lsmt", input=np.zeros((3, 3, 3), np.int32)),
], ids=["params size", "input_h shape", "params dtype", "lengths dtype", "rnn_mode", "dropout",
        "input_h dtype and shape", "mode and input dtype"])
def test_bad_input_is_refused_while_tracing_with_the_ops_message(change: dict[str, Any]) -> None:
    case = Case("lstm")
    expected = _library_error(case, **change)
    x, h, c, params, lengths = case.arrays()
    arrays = dict(input=x, input_h=h, input_c=c, params=params, sequence_lengths=lengths)
    arrays.update({k: v for k, v in change.items() if k in arrays})
    attrs = dict(case.attrs, **{k: v for k, v in change.items() if k not in arrays})
    specs = {name: jax.ShapeDtypeStruct(a.shape, a.dtype) for name, a in arrays.items()}
    with pytest.raises(type(expected)) as caught:
        jax.eval_shape(lambda a: cj.cudnn_rnn(**a, **attrs), specs)  # shapes alone: nothing runs
    assert str(caught.value) == str(expected)


def test_missing_arrays_get_the_ops_type_errors() -> None:
    x, h, c, params, _ = Case("lstm").arrays()
    with pytest.raises(TypeError, match=r"^input_c must be an array for rnn_mode='lstm'; got None$"):
        cj.cudnn_rnn(*_jax(x, h), None, jnp.asarray(params))
    with pytest.raises(TypeError, match=r"^input, params must be an array; got None$"):
        cj.cudnn_rnn(None, jnp.asarray(h), jnp.asarray(c), None)
    with pytest.raises(TypeError, match=r"^sequence_lengths must be None or an int32 or int64 array of shape "
                                        r"\[batch\]; got list$"):
        cj.cudnn_rnn(*_jax(x, h, c, params), [3, 0, 2])
    with pytest.raises(TypeError, match=r"^params must be a jax.Array or numpy.ndarray; got list$"):
        cj.cudnn_rnn(*_jax(x, h, c), [0.0])


@pytest.mark.parametrize("lengths, algo", [([3, 4, 1], "standard"), ([3, 1, 3], "persist_static")],
                         ids=["lengths above T", "persistent with ragged lengths"])
def test_values_refused_at_run_time_carry_the_ops_message(lengths: list[int], algo: str) -> None:
    case = Case("gru")
    x, h, _, params, _ = case.arrays()
    lengths_array = np.array(lengths, dtype=np.int32)
    with pytest.raises(ValueError) as expected:
        cudnn_rnn.cudnn_rnn_v3(x, h, None, params, lengths_array, rnn_mode="gru", algo=algo)
    run = jax.jit(lambda lengths: cj.cudnn_rnn(*_jax(x, h), None, jnp.asarray(params), lengths, rnn_mode="gru",
                                               algo=algo)[0])
    for _ in range(2):  # the first call compiles, the second takes JAX's fast path: both report the op's message
        with pytest.raises(RUNTIME_ERRORS) as caught:
            run(jnp.asarray(lengths_array)).block_until_ready()
        assert str(caught.value).rstrip().endswith(f"ValueError: {expected.value}")  # after the callback's traceback
    assert run(jnp.asarray([3, 3, 3], dtype=jnp.int32)).shape == (3, 3, 3)  # and the target works on afterwards


def test_import_cudnn_rnn_does_not_import_jax() -> None:
    code = ("import sys, cudnn_rnn\nassert 'jax' not in sys.modules, 'jax imported'\n"
            "import cudnn_rnn.jax\nassert 'jax' in sys.modules\nprint('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


_XLA_THREADS = """
import json, os, threading
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp
import cudnn_rnn, cudnn_rnn.jax as cj
from cudnn_rnn import _bridge
from cudnn_rnn._cudnn import _cache as _cudnn_cache
forward, calls = _bridge.forward, []

def watched(*args, **kwargs):  # the contexts the cuDNN backend would use on this thread
    calls.append((threading.get_ident(), id(_cudnn_cache._contexts()), type(threading.current_thread()).__name__))
    return forward(*args, **kwargs)

_bridge.forward = watched
h = jnp.zeros((1, 2, 5))
params = jnp.zeros(cudnn_rnn.cudnn_rnn_params_size(1, 5, 4, rnn_mode="gru"))
run = jax.pmap(lambda x: cj.cudnn_rnn(x, h, None, params, rnn_mode="gru")[0])  # one XLA thread per device
for step in range(3):
    run(jnp.ones((2, 3, 2, 4)) * step).block_until_ready()
print(json.dumps({"calls": calls, "main": threading.get_ident()}))
"""


def test_xla_threads_keep_their_cudnn_contexts_from_call_to_call() -> None:
    # each call from a thread Python did not start comes with a fresh Python thread state: a threading.local
    # would be empty at every call, and the cuDNN backend would build and destroy a handle every time
    result = subprocess.run([sys.executable, "-c", _XLA_THREADS], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    by_thread: dict[int, set[int]] = {}
    for ident, contexts, kind in found["calls"]:
        assert ident != found["main"] and kind == "_DummyThread", "calls from XLA's own threads"
        by_thread.setdefault(ident, set()).add(contexts)
    assert len(found["calls"]) == 6 and all(len(ids) == 1 for ids in by_thread.values()), found


# ---- (8) init_params -------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, seed", [
    (lambda seed: cudnn_rnn.LSTM(3, 4, 2, bidirectional=True, num_proj=2, seed=seed), 5),
    (lambda seed: cudnn_rnn.GRU(3, 4, seed=seed), 6),
    (lambda seed: cudnn_rnn.RNN(4, 4, activation="relu", input_mode="skip_input", seed=seed), 7),
], ids=["LSTM", "GRU", "RNN"])
def test_init_params_is_the_layers_initial_buffer(make: Callable[[int], Any], seed: int) -> None:
    layer = make(seed)
    params = cj.init_params(layer.config, seed=seed)
    assert isinstance(params, jax.Array) and params.dtype == jnp.float32
    assert np.array_equal(np.asarray(params), layer.params)
    assert not np.array_equal(np.asarray(cj.init_params(layer.config, seed=seed + 1)), layer.params)


# ---- data-parallel, differentiability limits, checks before narrowing -------------------------------
def test_data_parallel_gradients_over_two_devices_equal_one_devices() -> None:
    """shard_map (check_vma on) and jit on batch-sharded inputs, in a process whose JAX has 2 host devices."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(repo / "tests" / "support" / "jax_data_parallel_job.py")], env=env,
                          cwd=repo, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [line.split() for line in done.stdout.splitlines()]
    assert [(mode, way) for mode, way, _ in rows] == [("lstm", "shard_map"), ("lstm", "jit"), ("gru", "shard_map"),
                                                      ("gru", "jit")]
    assert all(float(difference) < 1e-12 for *_, difference in rows), rows


def test_host_lengths_are_checked_before_jax_narrows_them() -> None:
    """With 64-bit types off, int64 lengths would be narrowed to int32: 2**32 + 2 would run as 2."""
    case = Case("gru")
    x, h, _, params, _ = case.arrays()
    lengths = np.array([2**32 + 2, 1, 0], dtype=np.int64)
    with pytest.raises(ValueError) as expected:
        cudnn_rnn.cudnn_rnn_v3(x, h, None, params, lengths, rnn_mode="gru")
    assert not jax.config.jax_enable_x64
    with pytest.raises(ValueError) as caught:
        cj.cudnn_rnn(*_jax(x, h), None, jnp.asarray(params), lengths, rnn_mode="gru")
    assert str(caught.value) == str(expected.value)


def test_numpy_float64_arrays_run_as_jax_makes_them_with_x64_off() -> None:
    """With 64-bit types off, NumPy float64 arrays run as the float32 arrays jnp.asarray makes of them (the call is
    traced for those, its reserve sized for float32), int64 lengths as int32."""
    assert not jax.config.jax_enable_x64
    case = Case("lstm", "bidirectional", num_proj=2)
    x, h, c, params, lengths = case.arrays(np.float64)
    got = cj.cudnn_rnn(x, h, c, params, lengths.astype(np.int64), **case.attrs)
    want = cj.cudnn_rnn(*_jax(x, h, c, params, lengths), **case.attrs)
    for a, b in zip(got, want):
        assert a.dtype == jnp.float32 and np.array_equal(np.asarray(a), np.asarray(b))


def test_second_order_and_forward_mode_raise_clear_errors() -> None:
    case = Case("lstm")
    x, h, c, params, _ = case.arrays()

    def loss(params: Any) -> Any:
        y, _, _ = cj.cudnn_rnn(*_jax(x, h, c), params, rnn_mode="lstm")
        return jnp.sum(y**2)

    p = jnp.asarray(params)
    assert np.all(np.isfinite(np.asarray(jax.grad(loss)(p))))
    with pytest.raises(NotImplementedError, match=r"^cudnn_rnn.jax: second-order differentiation"):
        jax.grad(lambda p: jnp.sum(jax.grad(loss)(p)))(p)
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.jvp(loss, (p,), (jnp.ones_like(p),))
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.jacfwd(loss)(p)
    value, linear = jax.linearize(loss, p)  # linearize itself runs the forward and returns its value
    assert float(value) == float(loss(p))
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        linear(jnp.ones_like(p))  # only the linear function raises, when called
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.jit(lambda p, t: jax.linearize(loss, p)[1](t))(p, jnp.ones_like(p))  # under jit: while tracing
    with pytest.raises(NotImplementedError, match=r"^cudnn_rnn.jax: second-order differentiation"):
        jax.hessian(loss)(p)
    with pytest.raises(NotImplementedError, match=r"^cudnn_rnn.jax: second-order differentiation"):
        jax.jacfwd(jax.grad(loss))(p)


def test_huge_traced_shape_gets_the_op_message() -> None:
    config = cudnn_rnn.RNNConfig("gru", 1, 4, 3)
    specs = [jax.ShapeDtypeStruct(shape, jnp.float32) for shape in ((2**40, 2**30, 3), (1, 2**30, 4),
                                                                    (params_layout(config).size,))]
    with pytest.raises(ValueError, match=r"^input has 1099511627776 steps \(T = input.shape\[0\]\); cuDNN takes at "
                                         r"most 2147483647 \(a C int\)"):
        jax.eval_shape(lambda x, h, p: cj.cudnn_rnn(x, h, None, p, rnn_mode="gru"), *specs)


@pytest.mark.parametrize("seed", [True, 2**40, 10**400, "1", None, 1.0],
                         ids=["True", "2**40", "10**400", "str", "None", "float"])
def test_init_params_refuses_what_a_layer_refuses(seed: Any) -> None:
    config = cudnn_rnn.RNNConfig("lstm", 1, 3, 2)
    with pytest.raises((TypeError, ValueError)) as layer_error:
        cudnn_rnn.LSTM(2, 3, seed=seed)
    with pytest.raises(layer_error.type) as bridge_error:
        cj.init_params(config, seed)
    assert str(bridge_error.value) == str(layer_error.value)


# ---- the data-parallel guide -----------------------------------------------------------------------------
def _run_with_jax_devices(argv: list[str], folder: Path) -> tuple[int, str, str]:
    """``[XLA_FLAGS=...] python SCRIPT`` as the page writes it, with this Python, in the page's folder."""
    from docs_testing import COMMAND_TIMEOUT

    settings = dict(word.split("=", 1) for word in argv if "=" in word and argv.index(word) < argv.index("python"))
    command = [sys.executable, *argv[argv.index("python") + 1:]]
    env = {name: value for name, value in os.environ.items() if name != "XLA_FLAGS"}  # the page's own, or none
    env.update(JAX_PLATFORMS="cpu", **settings)
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    return done.returncode, done.stdout, done.stderr


def test_the_data_parallel_page_runs(tmp_path: Path) -> None:
    from docs_testing import pages_for, run_page

    for page in pages_for("jax-devices"):
        run = run_page(page, tmp_path, commands=_run_with_jax_devices)
        assert run.counts.get("script") and run.counts.get("console"), f"{page} launches no script"
