"""Time and memory of cudnn_rnn's reference backend on the CPU against PyTorch, ONNX Runtime, a GEMM floor and the
machine's limit.

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
    only the matrix products a step needs (see ``_cpu_floor.py``), run by NumPy's BLAS on
    preallocated operands of the same dtype: a lower bound for any implementation built on them.
machine limit
    one float32 sgemm [2048, 2048] @ [2048, 2048] (``np.matmul`` with ``out=``, preallocated operands, NumPy's
    BLAS on the sides' thread count), median of 5 repeats after 1 warm-up, timed first: its GFLOP/s (the record's
    ``limit``). A configuration's limit ms = 2 * multiply-adds / (GFLOP/s * 1e6), the multiply-adds of the GEMM
    floor's products (forward + backward in training, the forward in inference): all its work as fast as one GEMM.
decode step, float32
    LSTM T=1 B=1 I=H=256 L=2, inference only: ``cudnn_rnn_v3(..., is_training=False)`` against
    ``torch.nn.LSTM`` forward under ``torch.inference_mode()`` and against ONNX Runtime, median of
    ``--decode-repeats`` (1000) after a tenth as many warm-up runs per side (one call is ~0.1 ms).
README example
    ``python examples/train_char_lm.py --steps 60 --checkpoint-every 0 --out <tmpdir>``, wall-clock, default
    thread settings against OMP_NUM_THREADS=1, quiet and (``--loaded``) under load: see ``_cpu_load.py``.

Threads: every side runs on the same count, which the record names (``environment.threads`` and per row).
With ``--threads N`` that is N for our side (``cudnn_rnn.set_num_threads``), NumPy's BLAS pools (the GEMM
floor), torch (``torch.set_num_threads``) and ONNX Runtime (intra-op threads). Without it our side keeps its
own policy (``cudnn_rnn.cpu``: at most the BLAS pool), and torch and ONNX Runtime get the count set for ours,
else the BLAS pool's size (the cores unless a *_NUM_THREADS variable says otherwise). ONNX Runtime runs one
inter-op thread, sequentially, with all graph optimisations. Idle workers of torch (``OMP_WAIT_POLICY=PASSIVE``)
and of ONNX Runtime sleep rather than spin, and each side of a configuration waits ``_bench_report.SETTLE_S``
(untimed) before its turn, past the time OpenBLAS's idle threads spin, so that no side takes the cores from the
side timed next, then runs once untimed (what a call pays after an idle spell, which is large on a virtual
machine) before its timed call: each time is what the call costs in a loop.

Both sides agree on the results or the run fails: our output and input gradient against torch's (relative
to their max, <= 1e-3; checked without dropout, whose masks differ), our inference output against ONNX
Runtime's Y (<= 1e-4), our decode output against torch's and ONNX Runtime's (<= 1e-4). The sides of a group
(training: ours, torch, floor; inference: ours, ORT, floor; float64: ours, floor; decode: ours, torch, ORT) take
turns after the warm-up, and each reports the median of the repeats.

Columns
    ours / torch / ORT / floor ms   median milliseconds of one step (one inference forward)
    limit ms         the step's multiply-adds at the machine's sgemm rate (computed, not timed)
    ours/torch, ours/ORT, ours/floor, ours/limit  the time ratios (training and inference each)
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
    decode step      ours / torch / ORT ms of one decode step, ours/torch, ours/ORT, the cells and threads
    README example   median wall-clock seconds per setting, default/one, spread (max/min of a setting's runs),
                     others busy (cores other processes kept busy in the second before the runs)

Targets (each printed as met / NOT met, or not measured where no configuration it bounds ran; ``TARGETS``)
    training float32: ours/torch <= 0.85 on every configuration, except LSTM T=100 B=64 I=H=512 L=1: <= 0.95
        (torch's idle workers asleep, the same threads on both sides)
    inference float32: ours/ORT <= 0.9 on every configuration
    training float32: ours/limit <= 1.35 on LSTM T=100 B=64 I=H=512 L=1 and LSTM T=100 B=32 I=H=256 L=2 (the
        two large LSTMs); the other configurations' ours/limit is reported only
    inference float32: ours/limit <= 1.35 on the same two; the others reported only
    decode step: ours/torch <= 0.7
    memory: peak / cuDNN MB <= 1.3 on every configuration (peak memory unchanged or lower: compare peak MB with
        the last record)
    README example, under one competing CPU-bound process (``--loaded``): default <= 1.1 x one thread
    README example, on a quiet machine: default <= 1.05 x the better of default and one thread
A configuration that misses a target is named with what bounds it (recorded as ``bound_<target>``): ours/torch
>= floor/torch, ours/ORT >= floor/ORT, ours/limit >= floor/limit (the floor's products are ours) and peak/cuDNN
>= reserve/cuDNN.

Configurations (``BENCHES``): LSTM T=100 B=64 I=H=512 L=1, LSTM T=100 B=32 I=H=256 L=2, GRU bi T=100 B=32
I=H=256 L=2, the char-LM example's LSTM, a tagger (LSTM bi T=50 B=4 I=100 H=128 L=1) and a deep GRU (T=100 B=32
I=H=256 L=4); the decode step (``DECODE``) is a row of its own (the record's ``decode``).

Defaults: 5 repeats after 1 warm-up per side, 3 repeats in the float64 group (the slowest), 1000 repeats of the
decode step, 5 runs of the README example per setting after 1 warm-up run. The op configurations take 2-5
minutes on 2 cores and the README example (quiet) about a minute more, so the default run does both;
``--loaded`` adds 1-2 minutes. A group whose repeats of one side vary by more than 1.3x (max/min) is named after
the targets as noisy: rerun it alone with ``--only`` (or ``--example-only``).

Usage: python benchmarks/bench_cpu.py [--repeats N] [--repeats64 N] [--warmup N] [--decode-repeats N] [--quick]
                                      [--only TEXT[,TEXT...]] [--cells KIND] [--threads N] [--loaded]
                                      [--example-only] [--record] [--results DIR]
    --repeats N     timed repeats per side, and README example runs per setting
    --decode-repeats N  timed repeats per side of the decode step (warm-up: a tenth as many; none with --warmup 0)
    --quick         three tiny configurations (one with I != H and dropout, one GRU bi) and the decode step: a
                    smoke test, seconds
    --only TEXT[,TEXT...]  the configurations whose name (as printed) contains one of the TEXTs, e.g.
                    --only "GRU bi" or --only "L=4,decode" (the decode step's name starts with "decode step");
                    --quick and --only leave out the README example unless --loaded is given
    --cells KIND    auto, fused or numpy: ``cudnn_rnn.cpu.set_cells(KIND)`` first, and CUDNN_RNN_CELLS=KIND for
                    the README example (default: auto, or CUDNN_RNN_CELLS)
    --threads N     every side on N threads (above); the README example keeps its two settings
    --loaded        the README example also under one competing CPU-bound process
    --example-only  the README example alone (with --loaded also loaded): the quick check of the thread policy
    --record        write benchmarks/results/cpu_<date>[_quick].json (cpu_example_<date>.json with --example-only)
    --results DIR   the folder --record writes to instead of benchmarks/results/

The record: ``environment``, ``cpu``, the settings, ``limit`` (the sgemm: ``median_ms``, ``gflops``, ...),
``targets`` (``reads``, ``ratio``, ``limit``, ``limits`` each), ``targets_met`` (None: not measured), ``results``
(a row per configuration: the columns' figures, ``*_multiply_adds``, ``*_limit_ms``, ``targets_met``, ``bound_*``),
``decode`` (the decode step's row) and ``example`` (``_cpu_load.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
from dataclasses import asdict, replace
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

from _bench_configs import RESULTS, Bench, write_record  # noqa: E402
from _bench_report import median_ms, print_table  # noqa: E402
from _cpu_floor import gemm_floor, limit_ms, machine_limit, multiply_adds  # noqa: E402
from _cpu_load import (configure, describe_line, example_environment,  # noqa: E402
                       example_group, host_environment, ours_path, thread_count)
from _cpu_report import (DECODE_TABLE, TABLES, Target, print_noise, print_targets,  # noqa: E402
                         row_verdicts, targets_record)
from _cpu_sides import (check_same_output, check_same_results, make_problem, ort_inference,  # noqa: E402
                        ours_inference, ours_step, relative_difference, torch_inference, torch_step)

import cudnn_rnn  # noqa: E402

#: the char-LM example's corpus; its vocabulary (distinct characters) is the example LSTM's input size
CHAR_LM_CORPUS = HERE.parent / "examples" / "data" / "almanac.txt"


def char_lm_bench() -> Bench:
    """The LSTM of examples/train_char_lm.py ("full" settings): input size = its vocabulary, computed as its
    ``load_corpus()`` does (the distinct characters of the corpus)."""
    vocabulary = "".join(sorted(set(CHAR_LM_CORPUS.read_text(encoding="utf-8"))))
    return Bench("lstm", 64, 32, 128, layers=2, input_size=len(vocabulary), dropout=0.1)


#: the two large LSTMs, which the limit targets bound
LSTM_512, LSTM_256 = Bench("lstm", 100, 64, 512), Bench("lstm", 100, 32, 256, layers=2)
BENCHES = (
    LSTM_512,
    LSTM_256,
    Bench("gru", 100, 32, 256, layers=2, bidirectional=True),
    char_lm_bench(),
    Bench("lstm", 50, 4, 128, bidirectional=True, input_size=100),  # a tagger: a small batch
    Bench("gru", 100, 32, 256, layers=4),  # a deep GRU
)
QUICK = (
    Bench("lstm", 10, 4, 16),
    Bench("gru", 10, 4, 16, layers=2, bidirectional=True),
    Bench("lstm", 10, 4, 16, layers=2, input_size=7, dropout=0.1),
)
#: one step of a decoder: one token of a batch of one
DECODE = Bench("lstm", 1, 1, 256, layers=2)
DECODE_NAME = f"decode step {DECODE.name()}"
#: target name -> what it bounds (see _cpu_report.py): the module docstring's Targets
TARGETS: dict[str, Target] = {
    "train_vs_torch": Target("training float32: ours/torch", "ratio_torch", 0.85, {LSTM_512.name(): 0.95},
                             ("its GEMM floor alone / torch", "train_floor_ms", "train_torch_ms")),
    "inference_vs_ort": Target("inference float32: ours/ORT", "ratio_ort", 0.9, {},
                               ("its GEMM floor alone / ORT", "infer_floor_ms", "infer_ort_ms")),
    "train_vs_limit": Target("training float32: ours/limit", "ratio_limit", None,
                             {LSTM_512.name(): 1.35, LSTM_256.name(): 1.35},
                             ("its GEMM floor alone / limit", "train_floor_ms", "train_limit_ms")),
    "inference_vs_limit": Target("inference float32: ours/limit", "infer_ratio_limit", None,
                                 {LSTM_512.name(): 1.35, LSTM_256.name(): 1.35},
                                 ("its GEMM floor alone / limit", "infer_floor_ms", "infer_limit_ms")),
    "decode_vs_torch": Target("decode step: ours/torch", "decode_ratio_torch", 0.7),
    "memory": Target("memory: peak / cuDNN MB", "memory_ratio", 1.3, {},
                     ("its reserve alone / cuDNN MB", "reserve_bytes", "activation_bytes")),
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


def measure(bench: Bench, warmup: int, repeats: int, repeats64: int, threads: int, gflops: float,
            folder: Path) -> dict[str, Any]:
    """Every number of one configuration, as one record row (times in ms, memory in bytes); the float64 group
    is timed ``repeats64`` times; the limits at ``gflops`` (the machine limit's GFLOP/s)."""
    problem = make_problem(bench)
    ours, theirs = ours_step(bench, problem), torch_step(bench, problem)
    plain = replace(bench, dropout=0.0)  # the dropout masks of the two sides differ: compare without dropout
    checked = (ours, theirs) if plain == bench else (ours_step(plain, problem), torch_step(plain, problem))
    torch_difference = check_same_results(checked[0](), checked[1]())
    row: dict[str, Any] = dict(config=asdict(bench), name=bench.name())
    floor32 = gemm_floor(bench, np.float32, backward=True, threads=threads)
    row.update(median_ms({"ours": ours, "torch": theirs, "floor": floor32},
                         warmup, repeats, "train_", settle=True))

    inference, runtime = ours_inference(bench, problem), ort_inference(bench, problem, threads, folder)
    ort_difference = check_same_output(inference(), runtime())
    forward32 = gemm_floor(bench, np.float32, backward=False, threads=threads)
    row.update(median_ms({"ours": inference, "ort": runtime, "floor": forward32},
                         warmup, repeats, "infer_", settle=True))

    steps64 = {"ours": ours_step(bench, make_problem(bench, np.float64)),
               "floor": gemm_floor(bench, np.float64, backward=True, threads=threads)}
    row.update(median_ms(steps64, warmup, repeats64, "float64_", settle=True))

    memory = training_memory(ours)
    doubled = replace(bench, max_time=2 * bench.max_time)
    memory_2t = training_memory(ours_step(doubled, make_problem(doubled)))
    estimate = bench.activation_bytes()
    row.update(peak_bytes=memory["peak"], reserve_bytes=memory["reserve"], returned_bytes=memory["returned"],
               activation_bytes=estimate, memory_ratio=memory["peak"] / estimate,
               transient_bytes=memory["transient"], transient_bytes_2t=memory_2t["transient"],
               transient_growth_2t_bytes=memory_2t["transient"] - memory["transient"],
               torch_max_relative_difference=torch_difference, ort_max_relative_difference=ort_difference)
    for group, backward in (("train", True), ("infer", False)):
        row[f"{group}_multiply_adds"] = multiply_adds(bench, backward)
        row[f"{group}_limit_ms"] = limit_ms(row[f"{group}_multiply_adds"], gflops)
    row.update(ratio_torch=row["train_ours_ms"] / row["train_torch_ms"],
               ratio_floor=row["train_ours_ms"] / row["train_floor_ms"],
               ratio_limit=row["train_ours_ms"] / row["train_limit_ms"],
               ratio_ort=row["infer_ours_ms"] / row["infer_ort_ms"],
               infer_ratio_floor=row["infer_ours_ms"] / row["infer_floor_ms"],
               infer_ratio_limit=row["infer_ours_ms"] / row["infer_limit_ms"],
               ratio64=row["float64_ours_ms"] / row["float64_floor_ms"])
    row["ratio32"] = row["ratio_floor"]
    import torch

    row.update(ours_path(), torch_threads=torch.get_num_threads(), ort_intra_op_threads=threads)
    row["targets_met"] = row_verdicts(TARGETS, row)
    return row


def measure_decode(bench: Bench, warmup: int, repeats: int, threads: int, folder: Path) -> dict[str, Any]:
    """The decode step's row: one inference forward of ours, torch (inference mode) and ONNX Runtime, taking
    turns, ``decode_{side}_ms`` (median of ``repeats``; the raw times are not kept), ``decode_spread``, the
    ratios ours/torch and ours/ORT, the outputs' differences, the cells and threads."""
    problem = make_problem(bench)
    sides = {"ours": ours_inference(bench, problem), "torch": torch_inference(bench, problem),
             "ort": ort_inference(bench, problem, threads, folder)}
    output = sides["ours"]()
    torch_difference = relative_difference("decode output", output, sides["torch"]().numpy(), 1e-4, "torch")
    ort_difference = check_same_output(output, sides["ort"]())
    timed = median_ms(sides, warmup, repeats, "decode_")
    row: dict[str, Any] = dict(config=asdict(bench), name=DECODE_NAME, warmup=warmup, repeats=repeats,
                               **{key: value for key, value in timed.items() if not key.endswith("_times_ms")})
    import torch

    row.update(decode_ratio_torch=row["decode_ours_ms"] / row["decode_torch_ms"],
               decode_ratio_ort=row["decode_ours_ms"] / row["decode_ort_ms"],
               torch_max_relative_difference=torch_difference, ort_max_relative_difference=ort_difference,
               **ours_path(), torch_threads=torch.get_num_threads(), ort_intra_op_threads=threads)
    row["targets_met"] = row_verdicts(TARGETS, row)
    return row


def run_configurations(benches: tuple[Bench, ...], decode: bool, warmup: int, repeats: int, repeats64: int,
                       decode_repeats: int, requested: int | None) -> dict[str, Any]:
    """Measure and print the machine's limit, ``benches`` and (with ``decode``) the decode step; the record's
    entries of the op configurations."""
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
    limit = machine_limit(threads)
    print(f"machine limit: float32 sgemm {limit['m']} x {limit['k']} x {limit['n']} on {threads} threads, "
          f"{limit['gflops']:.1f} GFLOP/s (median {limit['median_ms']:.1f} ms of {limit['repeats']} after "
          f"{limit['warmup']} warm-up)")
    print(f"median of {repeats} repeats ({repeats64} in float64) after {warmup} warm-up, per side\n"
          "floor = the step's GEMMs alone (NumPy); limit = the step's multiply-adds at the sgemm's rate; peak MB =\n"
          "our peak allocation in a float32 training step beyond the inputs, of which reserve = our reserve_space and\n"
          "returned = the outputs and gradients handed back; cuDNN MB = what cuDNN would keep; x = peak / cuDNN MB;\n"
          "transient T->2T MB = growth of (peak - reserve - returned) from T to 2T steps (~0: no temporaries that\n"
          "scale with T); ratio64/32 = ours/floor" + (f"; decode step: median of {decode_repeats} repeats" if decode
                                                      else ""), flush=True)
    rows, decoded = [], []
    with tempfile.TemporaryDirectory() as folder:
        for bench in benches:
            start = time.perf_counter()
            rows.append(measure(bench, warmup, repeats, repeats64, threads, limit["gflops"], Path(folder)))
            print(f"measured {bench.name()} in {time.perf_counter() - start:.0f} s (cells {rows[-1]['cells']})",
                  file=sys.stderr, flush=True)
        if decode:
            start = time.perf_counter()
            decoded.append(measure_decode(DECODE, decode_repeats // 10 if warmup else 0, decode_repeats, threads,
                                          Path(folder)))
            print(f"measured the {DECODE_NAME} in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    for title, columns in TABLES.items() if rows else ():
        print_table(title, columns, rows)
    if decoded:
        print_table(*DECODE_TABLE, decoded)
    summary = print_targets(TARGETS, rows + decoded)
    print_noise(rows)
    return dict(environment=environment, warmup=warmup, repeats=repeats, repeats64=repeats64,
                decode_repeats=decode_repeats if decode else None, limit=limit, targets=targets_record(TARGETS),
                targets_met=summary, results=rows, **({"decode": decoded[0]} if decoded else {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed repeats per side (median reported), and README example runs per setting")
    parser.add_argument("--repeats64", type=int, default=None,
                        help="timed repeats per side of the float64 group (default: --repeats, at most 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per side first")
    parser.add_argument("--decode-repeats", type=int, default=1000, metavar="N",
                        help="timed repeats per side of the decode step (warm-up: a tenth as many; none with "
                             "--warmup 0)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny configurations and the decode step (a smoke test, seconds)")
    parser.add_argument("--only", metavar="TEXT[,TEXT...]", default="",
                        help="only the configurations whose name contains one of the TEXTs (the decode step's name "
                             "starts with 'decode step')")
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
    parser.add_argument("--results", type=Path, default=RESULTS, metavar="DIR",
                        help="the folder --record writes to (default: benchmarks/results)")
    args = parser.parse_args(argv)
    repeats64 = min(args.repeats, 3) if args.repeats64 is None else args.repeats64
    if min(args.repeats, repeats64, args.decode_repeats) < 1 or args.warmup < 0:
        parser.error(f"--repeats, --repeats64 and --decode-repeats must be >= 1 and --warmup >= 0; got {args.repeats}, "
                     f"{repeats64}, {args.decode_repeats} and {args.warmup}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1; got {args.threads}")
    texts = args.only.split(",")
    benches = () if args.example_only else tuple(
        bench for bench in (QUICK if args.quick else BENCHES) if any(text in bench.name() for text in texts))
    decode = not args.example_only and any(text in DECODE_NAME for text in texts)
    if not (benches or decode or args.example_only):
        parser.error(f"no configuration's name contains one of {texts}")
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
    if benches or decode:
        measured = run_configurations(benches, decode, args.warmup, args.repeats, repeats64, args.decode_repeats,
                                      args.threads)
        record["environment"].update(measured.pop("environment"))
        targets_met.update(measured["targets_met"])
        record.update(measured)
    if example:
        environment = example_environment(USER_OMP_WAIT_POLICY, args.cells)
        record["example"] = example_group(environment, args.repeats, min(args.warmup, 1), args.loaded)
        targets_met.update(record["example"]["targets_met"])
    record["targets_met"] = targets_met
    if args.record:
        write_record("cpu_example" if args.example_only else "cpu", record, args.quick, args.results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
