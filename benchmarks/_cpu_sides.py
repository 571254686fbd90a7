"""The sides bench_cpu.py times against each other: the problem they share (inputs, params, upstream gradients),
our training step and inference forward, torch's (``torch.nn.LSTM`` / ``torch.nn.GRU`` with our weights), ONNX
Runtime running the model ``export_onnx`` writes, and the checks that the sides compute the same thing.

bench_cpu.py imports it by name (``from _cpu_sides import ...``) with this folder and the checkout on ``sys.path``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from _bench_configs import GATES, Bench

import cudnn_rnn

#: dropout seeds of our training step (the op's seed and seed2 attributes)
DROPOUT_SEEDS = dict(seed=1, seed2=2)


# ---- the problem ------------------------------------------------------------------------------
@dataclass
class Problem:
    """Inputs, params and upstream gradients shared by every side (time-major).

    x [T, B, I], h0 / c0 [L*D, B, N] (c0 LSTM only), params 1-D (``cudnn_rnn_params_size``),
    dy [T, B, D*N], dhy / dcy [L*D, B, N].
    """

    x: np.ndarray
    h0: np.ndarray
    c0: np.ndarray | None
    params: np.ndarray
    dy: np.ndarray
    dhy: np.ndarray
    dcy: np.ndarray | None


def make_problem(bench: Bench, dtype: type = np.float32, seed: int = 0) -> Problem:
    """Uniform(-1, 1) inputs (params scaled by 1/sqrt(N)), drawn in float32 and cast to ``dtype``, so the
    float64 problem holds the float32 problem's numbers."""
    rng = np.random.default_rng(seed)
    t, b, n, k = bench.max_time, bench.batch, bench.hidden, bench.layers * bench.directions

    def draw(*shape: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, shape).astype(np.float32).astype(dtype)

    size = cudnn_rnn.cudnn_rnn_params_size(bench.layers, n, bench.inputs, rnn_mode=bench.mode,
                                           direction=_direction(bench))
    lstm = bench.mode == "lstm"
    return Problem(x=draw(t, b, bench.inputs), h0=draw(k, b, n), c0=draw(k, b, n) if lstm else None,
                   params=draw(size) * dtype(1 / np.sqrt(n)), dy=draw(t, b, bench.directions * n),
                   dhy=draw(k, b, n), dcy=draw(k, b, n) if lstm else None)


def _direction(bench: Bench) -> str:
    return "bidirectional" if bench.bidirectional else "unidirectional"


def _attributes(bench: Bench, training: bool) -> dict[str, Any]:
    """The op attributes of ``bench``: dropout (and its seeds) in training only."""
    attributes: dict[str, Any] = dict(rnn_mode=bench.mode, direction=_direction(bench))
    if training and bench.dropout:
        attributes.update(dropout=bench.dropout, **DROPOUT_SEEDS)
    return attributes


# ---- the sides --------------------------------------------------------------------------------
def ours_step(bench: Bench, problem: Problem) -> Callable[[], tuple]:
    """One training forward + backprop of the reference backend; returns (RNNOutputs, RNNGradients)."""
    attrs, p = _attributes(bench, training=True), problem

    def step() -> tuple:
        out = cudnn_rnn.cudnn_rnn_v3(p.x, p.h0, p.c0, p.params, is_training=True, **attrs)
        grads = cudnn_rnn.cudnn_rnn_backprop_v3(p.x, p.h0, p.c0, p.params, None, out.output, out.output_h,
                                                out.output_c, p.dy, p.dhy, p.dcy, out.reserve_space,
                                                out.host_reserved, **attrs)
        return out, grads

    return step


def ours_inference(bench: Bench, problem: Problem) -> Callable[[], np.ndarray]:
    """One inference forward of the reference backend (no dropout); returns output [T, B, D*N]."""
    attrs, p = _attributes(bench, training=False), problem
    return lambda: cudnn_rnn.cudnn_rnn_v3(p.x, p.h0, p.c0, p.params, is_training=False, **attrs).output


def torch_module(bench: Bench, params: np.ndarray) -> Any:
    """torch.nn.LSTM / torch.nn.GRU of ``bench`` on the CPU (the configuration's dropout), weights loaded from our
    ``params``."""
    import torch

    module_class = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[bench.mode]
    module = module_class(bench.inputs, bench.hidden, num_layers=bench.layers, bidirectional=bench.bidirectional,
                          dropout=bench.dropout)
    _load_torch_weights(bench, module, params)
    return module


def torch_step(bench: Bench, problem: Problem) -> Callable[[], tuple[Any, Any]]:
    """The training step through :func:`torch_module`; returns (y [T, B, D*N], dx [T, B, I]) as tensors."""
    import torch

    module = torch_module(bench, problem.params)

    def leaf(array: np.ndarray) -> Any:
        return torch.from_numpy(array).requires_grad_(True)

    x, h0 = leaf(problem.x), leaf(problem.h0)
    states = (h0, leaf(problem.c0)) if bench.mode == "lstm" else h0
    upstream = [torch.from_numpy(a) for a in (problem.dy, problem.dhy, problem.dcy) if a is not None]

    def step() -> tuple[Any, Any]:
        for tensor in [x, h0, *module.parameters()] + ([states[1]] if bench.mode == "lstm" else []):
            tensor.grad = None
        y, final = module(x, states)
        outputs = [y, *(final if bench.mode == "lstm" else (final,))]
        torch.autograd.backward(outputs, upstream)
        return y, x.grad

    return step


def torch_inference(bench: Bench, problem: Problem) -> Callable[[], Any]:
    """One forward of :func:`torch_module` (eval mode) under ``torch.inference_mode()``; returns y [T, B, D*N]
    as a tensor."""
    import torch

    module = torch_module(bench, problem.params).eval()
    x, h0 = torch.from_numpy(problem.x), torch.from_numpy(problem.h0)
    states = (h0, torch.from_numpy(problem.c0)) if bench.mode == "lstm" else h0

    def forward() -> Any:
        with torch.inference_mode():
            return module(x, states)[0]

    return forward


def _load_torch_weights(bench: Bench, module: Any, params: np.ndarray) -> None:
    """torch's weight_ih/hh and bias_ih/hh of each pseudo-layer = our canonical gates stacked."""
    import torch

    weights, biases = cudnn_rnn.cudnn_rnn_params_to_canonical(bench.layers, bench.hidden, bench.inputs, params,
                                                              rnn_mode=bench.mode, direction=_direction(bench))
    g = GATES[bench.mode]
    suffixes = [f"_l{layer}{'_reverse' if d else ''}" for layer in range(bench.layers)
                for d in range(bench.directions)]
    with torch.no_grad():
        for k, suffix in enumerate(suffixes):
            w, b = weights[2 * g * k:2 * g * (k + 1)], biases[2 * g * k:2 * g * (k + 1)]
            for name, parts in (("weight_ih", w[:g]), ("weight_hh", w[g:]), ("bias_ih", b[:g]), ("bias_hh", b[g:])):
                getattr(module, name + suffix).copy_(torch.from_numpy(np.concatenate(parts)))


def ort_inference(bench: Bench, problem: Problem, threads: int, folder: Path) -> Callable[[], list[np.ndarray]]:
    """ONNX Runtime's CPU running ``export_onnx``'s model of our params (written to ``folder``); returns
    [Y [T, B, D*N], Y_h [L*D, B, N], (Y_c)]. ``threads`` intra-op threads, one inter-op thread, sequential
    execution, every graph optimisation."""
    import onnxruntime as ort

    from cudnn_rnn.config import RNNConfig
    from cudnn_rnn.convert import export_onnx

    config = RNNConfig(bench.mode, bench.layers, bench.hidden, bench.inputs, direction=_direction(bench),
                       dtype=problem.params.dtype.name)
    path = folder / "model.onnx"
    export_onnx(problem.params, config, path, time_major=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # ORT's idle workers spin by default, which would take the cores from the side timed next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    p = problem
    feed = {"X": p.x, "sequence_lens": np.full(bench.batch, bench.max_time, np.int32), "initial_h": p.h0}
    if p.c0 is not None:
        feed["initial_c"] = p.c0
    return lambda: session.run(None, feed)


# ---- checking ---------------------------------------------------------------------------------
def relative_difference(name: str, mine: np.ndarray, other: np.ndarray, tolerance: float, side: str) -> float:
    """max |mine - other| / max |other|; AssertionError (naming ``side``) above ``tolerance``."""
    difference = float(np.max(np.abs(mine - other)) / np.max(np.abs(other)))
    if not difference <= tolerance:
        raise AssertionError(f"{name} differs from {side}'s by {difference:.2g} (relative to its max; "
                             f"tolerance {tolerance:g})")
    return difference


def check_same_results(ours: tuple, theirs: tuple[Any, Any]) -> float:
    """Ours and torch's training step compute the same thing: output and input gradient agree to 1e-3."""
    (out, grads), (y, dx) = ours, theirs
    return max(relative_difference(name, mine, other.detach().numpy(), 1e-3, "torch")
               for name, mine, other in (("output", out.output, y), ("input_backprop", grads.input_backprop, dx)))


def check_same_output(ours: np.ndarray, theirs: list[np.ndarray]) -> float:
    """Our inference output and ONNX Runtime's Y agree to 1e-4."""
    return relative_difference("inference output", ours, theirs[0], 1e-4, "ONNX Runtime")
