"""Time and memory of cudnn_rnn's reference backend on the CPU against PyTorch, ONNX Runtime and a GEMM floor.

Everything is measured in one run on one machine, per configuration (time-major, every sequence of
length T, no projection):

training, float32
    one step = a training forward (``is_training=True``, with the configuration's dropout) plus the full
    backprop (input, initial-state and weight gradients): ``cudnn_rnn_v3`` + ``cudnn_rnn_backprop_v3`` on
    NumPy arrays, against ``torch.nn.LSTM`` / ``torch.nn.GRU`` forward + ``torch.autograd.backward``.
inference, float32
    ``cudnn_rnn_v3(..., is_training=False)`` against ONNX Runtime's CPU running the model that
    ``cudnn_rnn.convert.export_onnx`` writes for the same params.
training, float64
    our step again in float64, against its own float64 GEMM floor.
GEMM floor
    only the matrix products a step needs (see :func:`gemm_floor`), run by NumPy's BLAS on
    preallocated operands of the same dtype: a lower bound for any implementation built on them.
README example
    ``python examples/train_char_lm.py --steps 60 --checkpoint-every 0 --out <tmpdir>``, wall-clock, default
    thread settings against OMP_NUM_THREADS=1, quiet and (``--loaded``) under load: see ``_cpu_load.py``.

Threads: every side runs on the same count, which the record names (``environment.threads`` and per row).
With ``--threads N`` that is N for our side (``cudnn_rnn.set_num_threads``), NumPy's BLAS pools (the GEMM
floor), torch (``torch.set_num_threads``) and ONNX Runtime (intra-op threads). Without it our side keeps its
own policy (``cudnn_rnn.cpu``: at most the BLAS pool), and torch and ONNX Runtime get the count set for ours,
else the BLAS pool's size (the cores unless a *_NUM_THREADS variable says otherwise). ONNX Runtime runs one
inter-op thread, sequentially, with all graph optimisations. Idle workers of torch (``OMP_WAIT_POLICY=PASSIVE``)
and of ONNX Runtime sleep rather than spin, so that no side takes the cores from the side timed next.

Both sides agree on the results or the run fails: our output and input gradient against torch's (relative
to their max, <= 1e-3; checked without dropout, whose masks differ), our inference output against ONNX
Runtime's Y (<= 1e-4). The sides of a group (training: ours, torch, floor; inference: ours, ORT, floor;
float64: ours, floor) take turns after the warm-up, and each reports the median of the repeats.

Columns
    ours / torch / ORT / floor ms   median milliseconds of one step (one inference forward)
    ours/torch, ours/ORT, ours/floor  the time ratios
    peak MB          the peak of NumPy allocations (``tracemalloc``) during one float32 training step of ours,
                     beyond the inputs and params already allocated, of which
    reserve          is our reserve_space and
    returned         the outputs and gradients handed back
    cuDNN MB         what cuDNN would keep for backprop: per layer and direction T*B*(G*N + N + P) elements
                     (+ N for GRU), anchors of the reserve space
    x                peak / cuDNN MB
    transient T->2T MB  how much the transient memory of a training step (peak - reserve - returned) grows
                     when T doubles (same B, H; measured at T and 2T): ~0 when temporaries are per chunk of
                     steps or per call of a size that does not scale with T; anything kept per time step, or
                     a [T, B, ...] scratch buffer, shows here
    ratio64, ratio32  ours/floor in float64 and in float32
    cells, ours threads  the cells ours ran (``cudnn_rnn.cpu.cells_in_use()``: fused or numpy) and the count set
                     for ours or "policy" (the record adds ``describe()``'s thread source)
    BLAS, torch, ORT  NumPy's BLAS pools, torch's threads, ONNX Runtime's intra-op threads
    README example   median wall-clock seconds per setting, default/one, spread (max/min of a setting's runs),
                     others busy (cores other processes kept busy in the second before the runs)

Targets (each printed as met / NOT met; every configuration must meet the first five)
    training float32: ours/torch <= 0.8 (torch's idle workers asleep, the same threads on both sides) and
        ours/floor <= 1.25
    inference float32: ours/ORT <= 1.0
    float64: ratio64 <= ratio32 * 1.1 (float64's ratio within 1.1x of float32's)
    memory: peak / cuDNN MB <= 1.3 (peak memory unchanged or lower: compare peak MB with the last record)
    README example, under one competing CPU-bound process (``--loaded``): default <= 1.1 x one thread
    README example, on a quiet machine: default <= 1.05 x the better of default and one thread
A configuration that misses a target is named with what bounds it (``BOUNDS``, recorded as ``bound_*``):
ours/torch >= floor/torch, ours/ORT >= floor/ORT (the floor's products are ours) and peak/cuDNN >= reserve/cuDNN.

Defaults: 5 repeats after 1 warm-up per side, 3 repeats in the float64 group (the slowest), 5 runs of the
README example per setting after 1 warm-up run. The op configurations take 1-4 minutes on 2 cores and the
README example (quiet) about a minute more, so the default run does both; ``--loaded`` adds 1-2 minutes. A
group whose repeats of one side vary by more than 1.3x (max/min) is named after the targets as noisy:
rerun it alone with ``--only`` (or ``--example-only``).

Usage: python benchmarks/bench_cpu.py [--repeats N] [--repeats64 N] [--warmup N] [--quick] [--only TEXT]
                                      [--cells KIND] [--threads N] [--loaded] [--example-only] [--record]
    --repeats N     timed repeats per side, and README example runs per setting
    --quick         three tiny configurations (one with I != H and dropout, one GRU bi): a smoke test, seconds
    --only TEXT     the configurations whose name (as printed) contains TEXT, e.g. --only "GRU bi"
                    (--quick and --only leave out the README example unless --loaded is given)
    --cells KIND    auto, fused or numpy: ``cudnn_rnn.cpu.set_cells(KIND)`` first, and CUDNN_RNN_CELLS=KIND for
                    the README example (default: auto, or CUDNN_RNN_CELLS)
    --threads N     every side on N threads (above); the README example keeps its two settings
    --loaded        the README example also under one competing CPU-bound process
    --example-only  the README example alone (with --loaded also loaded): the quick check of the thread policy
    --record        write benchmarks/results/cpu_<date>[_quick].json (cpu_example_<date>.json with --example-only)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

# The sides take turns on the same cores: idle OpenMP workers (torch's) must sleep, not spin, or they
# would take the cores from the side timed next. Set before torch loads its OpenMP runtime (the README
# example's runs get the variable as the user left it).
USER_OMP_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # this folder's _bench_configs, and a checkout without installing

from _bench_configs import GATES, RESULTS, Bench, write_record  # noqa: E402
from _bench_report import column, median_ms, print_table, text_column  # noqa: E402
from _cpu_load import (configure, describe_line, example_environment,  # noqa: E402
                       example_group, host_environment, ours_path, thread_count)

import cudnn_rnn  # noqa: E402

#: the targets' limits (see TARGETS)
TORCH_TARGET = 0.8
FLOOR_TARGET = 1.25
ORT_TARGET = 1.0
MEMORY_TARGET = 1.3
FLOAT64_SLACK = 1.1

#: the char-LM example's corpus; its vocabulary (distinct characters) is the example LSTM's input size
CHAR_LM_CORPUS = HERE.parent / "examples" / "data" / "almanac.txt"
#: dropout seeds of our training step (the op's seed and seed2 attributes)
DROPOUT_SEEDS = dict(seed=1, seed2=2)


def char_lm_bench() -> Bench:
    """The LSTM of examples/train_char_lm.py ("full" settings): input size = its vocabulary, computed as its
    ``load_corpus()`` does (the distinct characters of the corpus)."""
    vocabulary = "".join(sorted(set(CHAR_LM_CORPUS.read_text(encoding="utf-8"))))
    return Bench("lstm", 64, 32, 128, layers=2, input_size=len(vocabulary), dropout=0.1)


BENCHES = (
    Bench("lstm", 100, 64, 512),
    Bench("lstm", 100, 32, 256, layers=2),
    Bench("gru", 100, 32, 256, layers=2, bidirectional=True),
    char_lm_bench(),
)
QUICK = (
    Bench("lstm", 10, 4, 16),
    Bench("gru", 10, 4, 16, layers=2, bidirectional=True),
    Bench("lstm", 10, 4, 16, layers=2, input_size=7, dropout=0.1),
)


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


def torch_step(bench: Bench, problem: Problem) -> Callable[[], tuple[Any, Any]]:
    """The training step through torch.nn.LSTM / torch.nn.GRU on the CPU (weights loaded from our params,
    the configuration's dropout); returns (y [T, B, D*N], dx [T, B, I]) as tensors."""
    import torch

    module_class = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[bench.mode]
    module = module_class(bench.inputs, bench.hidden, num_layers=bench.layers, bidirectional=bench.bidirectional,
                          dropout=bench.dropout)
    _load_torch_weights(bench, module, problem.params)

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


def gemm_floor(bench: Bench, dtype: type, backward: bool) -> Callable[[], None]:
    """The matrix products of one step, alone: NumPy's BLAS (``np.matmul(..., out=...)``) on preallocated
    operands of ``dtype``. Returns the step; ``backward=False`` runs the forward products only (inference).

    Per layer and direction, with width = I for layer 0 and D*N above, G gates (4 LSTM, 3 GRU),
    N hidden, P = N (no projection); W [G*N, width] and R [G*N, P] C-contiguous, as our params store them,
    g / dg the gate pre-activations and their gradients [T, B, G*N], h the hidden states [T, B, P] (random
    values: only the shapes matter; h[-1] stands for h0):

    ========  ====================  =====  ====================================
    pass      product               count  shapes
    ========  ====================  =====  ====================================
    forward   x @ W.T  (input)      1      [T*B, width] @ [width, G*N]
    forward   h[t-1] @ R.T          T      [B, P] @ [P, G*N]
    backward  dg[t] @ R  (dh)       T      [B, G*N] @ [G*N, P]
    backward  dg @ W  (dx)          1      [T*B, G*N] @ [G*N, width]
    backward  dg.T @ x  (dW)        1      [G*N, T*B] @ [T*B, width]
    backward  dg.T @ h  (dR)        1      [G*N, T*B] @ [T*B, P]
    ========  ====================  =====  ====================================
    """
    t, b, n = bench.max_time, bench.batch, bench.hidden
    gn, p = GATES[bench.mode] * n, n
    rng = np.random.default_rng(1)

    def draw(*shape: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)

    operands = []
    for layer in range(bench.layers):
        width = bench.inputs if layer == 0 else bench.directions * n
        for _ in range(bench.directions):
            o = dict(x=draw(t * b, width), w=draw(gn, width), r=draw(gn, p), h=draw(t, b, p),
                     g=np.empty((t, b, gn), dtype))
            if backward:
                o.update(dg=draw(t, b, gn), dh=np.empty((b, p), dtype), dx=np.empty((t * b, width), dtype),
                         dw=np.empty((gn, width), dtype), dr=np.empty((gn, p), dtype))
            operands.append(o)

    def step() -> None:
        for o in operands:
            np.matmul(o["x"], o["w"].T, out=o["g"].reshape(t * b, gn))
            for s in range(t):
                np.matmul(o["h"][s], o["r"].T, out=o["g"][s])
        if not backward:
            return
        for o in operands:
            for s in range(t):
                np.matmul(o["dg"][s], o["r"], out=o["dh"])
            dg = o["dg"].reshape(t * b, gn)
            np.matmul(dg, o["w"], out=o["dx"])
            np.matmul(dg.T, o["x"], out=o["dw"])
            np.matmul(dg.T, o["h"].reshape(t * b, p), out=o["dr"])

    return step


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


#: target name -> (how it reads, whether a row meets it)
TARGETS: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "train_vs_torch": (f"training float32: ours/torch <= {TORCH_TARGET}", lambda r: r["ratio_torch"] <= TORCH_TARGET),
    "train_vs_floor": (f"training float32: ours/floor <= {FLOOR_TARGET}", lambda r: r["ratio_floor"] <= FLOOR_TARGET),
    "inference_vs_ort": (f"inference float32: ours/ORT <= {ORT_TARGET}", lambda r: r["ratio_ort"] <= ORT_TARGET),
    "memory": (f"memory: peak <= {MEMORY_TARGET} x cuDNN MB", lambda r: r["memory_ratio"] <= MEMORY_TARGET),
    "float64": (f"float64: ratio64 <= ratio32 * {FLOAT64_SLACK}",
                lambda r: r["ratio64"] <= r["ratio32"] * FLOAT64_SLACK),
}


# ---- measuring --------------------------------------------------------------------------------
def training_memory(step: Callable[[], tuple]) -> dict[str, int]:
    """Bytes of one training step of ours (NumPy included, via tracemalloc): ``peak`` allocated while it runs
    and its results live, of which ``reserve`` (the reserve_space) and ``returned`` (the other outputs and
    gradients handed back); ``transient`` = peak - reserve - returned."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out, grads = step()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    reserve = out.reserve_space.nbytes
    returned = sum(a.nbytes for a in (*out, *grads)) - reserve
    return dict(peak=peak, reserve=reserve, returned=returned, transient=peak - reserve - returned)


def measure(bench: Bench, warmup: int, repeats: int, repeats64: int, threads: int, folder: Path) -> dict[str, Any]:
    """Every number of one configuration, as one record row (times in ms, memory in bytes); the float64 group
    is timed ``repeats64`` times."""
    problem = make_problem(bench)
    ours, theirs = ours_step(bench, problem), torch_step(bench, problem)
    plain = replace(bench, dropout=0.0)  # the dropout masks of the two sides differ: compare without dropout
    checked = (ours, theirs) if plain == bench else (ours_step(plain, problem), torch_step(plain, problem))
    torch_difference = check_same_results(checked[0](), checked[1]())
    row: dict[str, Any] = dict(config=asdict(bench), name=bench.name())
    row.update(median_ms({"ours": ours, "torch": theirs, "floor": gemm_floor(bench, np.float32, backward=True)},
                         warmup, repeats, "train_"))

    inference, runtime = ours_inference(bench, problem), ort_inference(bench, problem, threads, folder)
    ort_difference = check_same_output(inference(), runtime())
    row.update(median_ms({"ours": inference, "ort": runtime, "floor": gemm_floor(bench, np.float32, backward=False)},
                         warmup, repeats, "infer_"))

    steps64 = {"ours": ours_step(bench, make_problem(bench, np.float64)),
               "floor": gemm_floor(bench, np.float64, backward=True)}
    row.update(median_ms(steps64, warmup, repeats64, "float64_"))

    memory = training_memory(ours)
    doubled = replace(bench, max_time=2 * bench.max_time)
    memory_2t = training_memory(ours_step(doubled, make_problem(doubled)))
    estimate = bench.activation_bytes()
    row.update(peak_bytes=memory["peak"], reserve_bytes=memory["reserve"], returned_bytes=memory["returned"],
               activation_bytes=estimate, memory_ratio=memory["peak"] / estimate,
               transient_bytes=memory["transient"], transient_bytes_2t=memory_2t["transient"],
               transient_growth_2t_bytes=memory_2t["transient"] - memory["transient"],
               torch_max_relative_difference=torch_difference, ort_max_relative_difference=ort_difference)
    row.update(ratio_torch=row["train_ours_ms"] / row["train_torch_ms"],
               ratio_floor=row["train_ours_ms"] / row["train_floor_ms"],
               ratio_ort=row["infer_ours_ms"] / row["infer_ort_ms"],
               infer_ratio_floor=row["infer_ours_ms"] / row["infer_floor_ms"],
               ratio64=row["float64_ours_ms"] / row["float64_floor_ms"])
    row["ratio32"] = row["ratio_floor"]
    import torch

    row.update(ours_path(), torch_threads=torch.get_num_threads(), ort_intra_op_threads=threads)
    row["targets_met"] = {name: bool(met(row)) for name, (_, met) in TARGETS.items()}
    return row


# ---- reporting --------------------------------------------------------------------------------
MB = 1 / 2**20
#: a group whose side's times vary by more (max/min over the repeats) is reported as noisy
NOISY = 1.3
TABLES: dict[str, list[tuple[str, Callable[[dict], str]]]] = {
    "training, float32 (forward + backward)": [
        column("ours ms", "train_ours_ms"), column("torch ms", "train_torch_ms"),
        column("floor ms", "train_floor_ms"), column("ours/torch", "ratio_torch", 2),
        column("ours/floor", "ratio_floor", 2), column("peak MB", "peak_bytes", scale=MB),
        column("reserve", "reserve_bytes", scale=MB), column("returned", "returned_bytes", scale=MB),
        column("cuDNN MB", "activation_bytes", scale=MB), column("x", "memory_ratio", 2),
        column("transient T->2T MB", "transient_growth_2t_bytes", 2, MB)],
    "inference, float32 (forward, is_training=False)": [
        column("ours ms", "infer_ours_ms"), column("ORT ms", "infer_ort_ms"), column("floor ms", "infer_floor_ms"),
        column("ours/ORT", "ratio_ort", 2), column("ours/floor", "infer_ratio_floor", 2)],
    "training, float64 (forward + backward)": [
        column("ours64 ms", "float64_ours_ms"), column("floor64 ms", "float64_floor_ms"),
        column("ratio64", "ratio64", 2), column("ratio32", "ratio32", 2)],
    "threads and path (the cells ours ran; each side's threads)": [
        text_column("cells", "cells"), text_column("ours threads", "ours_threads", "policy"),
        text_column("BLAS", "numpy_blas_threads"), text_column("torch", "torch_threads"),
        text_column("ORT", "ort_intra_op_threads")],
}


#: target -> (what bounds ours from below, how it reads): the measured reason a target can be out of reach.
#: Our step runs the floor's products and more, so ours/torch >= floor/torch and ours/ORT >= floor/ORT; our
#: reserve alone (what backprop needs kept) is part of our peak.
BOUNDS: dict[str, tuple[str, Callable[[dict[str, Any]], float]]] = {
    "train_vs_torch": ("its GEMM floor alone / torch", lambda r: r["train_floor_ms"] / r["train_torch_ms"]),
    "inference_vs_ort": ("its GEMM floor alone / ORT", lambda r: r["infer_floor_ms"] / r["infer_ort_ms"]),
    "memory": ("its reserve alone / cuDNN MB", lambda r: r["reserve_bytes"] / r["activation_bytes"]),
}


def print_targets(rows: list[dict[str, Any]]) -> dict[str, bool]:
    """One line per target: met / NOT met over all configurations, naming those that miss it, each with
    its bound from ``BOUNDS`` (recorded per row as ``bound_<target>``) where there is one."""
    print("\ntargets")
    summary = {}
    for name, (text, _) in TARGETS.items():
        missed = []
        for row in rows:
            if row["targets_met"][name]:
                continue
            if name in BOUNDS:
                label, bound = BOUNDS[name]
                row[f"bound_{name}"] = bound(row)
                missed.append(f"{row['name']} ({label} {row[f'bound_{name}']:.2f})")
            else:
                missed.append(row["name"])
        summary[name] = not missed
        print(f"  {text}: " + (f"NOT met (missed by {'; '.join(missed)})" if missed else "met"))
    return summary


def print_noise(rows: list[dict[str, Any]]) -> None:
    """Warn of the groups whose times varied by more than NOISY (max/min of a side's repeats): their ratios
    are less reliable (a shared machine, CPU throttling); rerun them with ``--only``."""
    noisy = [f"{row['name']} {group[:-1]} {row[f'{group}spread']:.1f}x" for row in rows
             for group in ("train_", "infer_", "float64_") if row[f"{group}spread"] > NOISY]
    if noisy:
        print(f"\nnoisy timings (a side's repeats varied by more than {NOISY}x): " + "; ".join(noisy))


def run_configurations(benches: tuple[Bench, ...], warmup: int, repeats: int, repeats64: int,
                       requested: int | None) -> dict[str, Any]:
    """Measure and print ``benches``; the record's entries of the op configurations."""
    import onnxruntime
    import torch

    threads, why = thread_count(requested)
    torch.set_num_threads(threads)
    if torch.get_num_threads() != threads:
        raise RuntimeError(f"torch runs {torch.get_num_threads()} threads, not the {threads} asked for")
    path = ours_path()
    environment = dict(threads=threads, threads_from=why, torch_threads=threads, ort_intra_op_threads=threads,
                       ort_inter_op_threads=1, ours_threads=path["ours_threads"], thread_source=path["thread_source"],
                       torch=torch.__version__, onnxruntime=onnxruntime.__version__)
    print(f"threads: torch {threads}, ONNX Runtime intra-op {threads} and inter-op 1 ({why}); ours: "
          f"{path['thread_source']}")
    print(f"median of {repeats} repeats ({repeats64} in float64) after {warmup} warm-up, per side\n"
          "floor = the step's GEMMs alone (NumPy); peak MB = our peak allocation in a float32 training step beyond\n"
          "the inputs, of which reserve = our reserve_space and returned = the outputs and gradients handed back;\n"
          "cuDNN MB = what cuDNN would keep; x = peak / cuDNN MB; transient T->2T MB = growth of (peak - reserve -\n"
          "returned) from T to 2T steps (~0: no temporaries that scale with T); ratio64/32 = ours/floor", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for bench in benches:
            start = time.perf_counter()
            rows.append(measure(bench, warmup, repeats, repeats64, threads, Path(folder)))
            print(f"measured {bench.name()} in {time.perf_counter() - start:.0f} s (cells {rows[-1]['cells']})",
                  file=sys.stderr, flush=True)
    for title, columns in TABLES.items():
        print_table(title, columns, rows)
    summary = print_targets(rows)
    print_noise(rows)
    return dict(environment=environment, warmup=warmup, repeats=repeats, repeats64=repeats64,
                targets=dict(ratio_torch=TORCH_TARGET, ratio_floor=FLOOR_TARGET, ratio_ort=ORT_TARGET,
                             memory_ratio=MEMORY_TARGET, float64_slack=FLOAT64_SLACK),
                targets_met=summary, results=rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed repeats per side (median reported), and README example runs per setting")
    parser.add_argument("--repeats64", type=int, default=None,
                        help="timed repeats per side of the float64 group (default: --repeats, at most 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per side first")
    parser.add_argument("--quick", action="store_true", help="tiny configurations (a smoke test, seconds)")
    parser.add_argument("--only", metavar="TEXT", default="", help="only the configurations whose name contains TEXT")
    parser.add_argument("--cells", choices=cudnn_rnn.cpu.CELL_KINDS, default=None,
                        help="our cells (cudnn_rnn.cpu.set_cells; default: auto, or CUDNN_RNN_CELLS)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="every side on N threads (default: ours to its policy, torch and ORT on NumPy's BLAS "
                             "pool, the cores unless a *_NUM_THREADS variable says otherwise)")
    parser.add_argument("--loaded", action="store_true",
                        help="the README example also under one competing CPU-bound process")
    parser.add_argument("--example-only", action="store_true",
                        help="the README example alone (quiet; with --loaded also loaded), not the op configurations")
    parser.add_argument("--record", action="store_true", help=f"write a JSON record to {RESULTS}")
    args = parser.parse_args(argv)
    repeats64 = min(args.repeats, 3) if args.repeats64 is None else args.repeats64
    if min(args.repeats, repeats64) < 1 or args.warmup < 0:
        parser.error(f"--repeats and --repeats64 must be >= 1 and --warmup >= 0; got {args.repeats}, {repeats64} "
                     f"and {args.warmup}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1; got {args.threads}")
    benches = () if args.example_only else tuple(
        bench for bench in (QUICK if args.quick else BENCHES) if args.only in bench.name())
    if not benches and not args.example_only:
        parser.error(f"no configuration's name contains {args.only!r}")
    example = args.example_only or args.loaded or not (args.quick or args.only)
    try:
        configure(args.cells, args.threads)
        described = cudnn_rnn.cpu.describe()
    except (ImportError, ValueError) as error:  # fused cells without numba; a bad CUDNN_RNN_* variable
        parser.error(str(error))
    environment = host_environment(cells=args.cells, threads=args.threads)
    print(f"{environment['cores']} cores; load average {environment['load_average']:.2f}; NumPy BLAS: "
          f"{environment['numpy_blas_threads']}\n{describe_line(described)}", flush=True)
    record: dict[str, Any] = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  environment=environment, loaded=args.loaded, cpu=described)
    targets_met: dict[str, bool | None] = {}
    if benches:
        measured = run_configurations(benches, args.warmup, args.repeats, repeats64, args.threads)
        record["environment"].update(measured.pop("environment"))
        targets_met.update(measured["targets_met"])
        record.update(measured)
    if example:
        environment = example_environment(USER_OMP_WAIT_POLICY, args.cells)
        record["example"] = example_group(environment, args.repeats, min(args.warmup, 1), args.loaded)
        targets_met.update(record["example"]["targets_met"])
    record["targets_met"] = targets_met
    if args.record:
        write_record("cpu_example" if args.example_only else "cpu", record, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
