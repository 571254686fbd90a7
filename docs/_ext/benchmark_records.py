"""The ``benchmark-records`` directive: every record in ``benchmarks/results/``, as tables and plots.

In a MyST page::

    ```{benchmark-records}
    ```

At build time it reads every file under ``benchmarks/results/`` (sub-folders included) and renders:

* a summary table of the records: file (downloadable), kind, date, machine, command;
* per JSON record, newest first within its kind, the measured numbers as tables and one plot
  (matplotlib with the Agg canvas, written into the build as a PNG);
* the GPU records, or a sentence saying that none exists yet;
* the Markdown notes beside the records, their text included.

What a JSON record is comes from its content (:data:`KINDS`, first match wins), so a new record of
a known kind appears without editing any page, and a record of an unknown kind still appears
with its top-level numbers. The formats are those the scripts write: ``benchmarks/bench_cpu.py``,
``bench_checkpoint.py`` and ``bench_distributed.py`` through ``_bench_configs.write_record``
(``{kind}_{date}.json``), ``benchmarks/bench_gpu.py --json bench.json`` (no date in the file: it is
taken from the ``record.md`` that ``scripts/gpu_record.py`` writes beside it, or from the file
name), and ``scripts/gpu_record.py``'s ``record.md`` (``# GPU check, stage ...``). The records do not
hold the command line that made them; the command shown is the script with the settings the record
holds (repeats, warm-up, ...), which redoes the run. A record that does hold a ``command`` shows it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from docutils import nodes
from docutils.statemachine import StringList
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

#: the folder of the committed records
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
#: its path as the page writes it
RESULTS_SHOWN = "benchmarks/results"

Row = dict[str, Any]
#: (header, the keys a row may hold the value under (first found wins), format of the value)
Column = tuple[str, tuple[str, ...], Callable[[Any], str]]


# ---- formats -------------------------------------------------------------------------------------
def fixed(digits: int) -> Callable[[Any], str]:
    return lambda value: f"{value:.{digits}f}"


def megabytes(value: Any) -> str:
    return f"{value / 2**20:.1f}"


def count(value: Any) -> str:
    return f"{value:,}"


def text(value: Any) -> str:
    return str(value)


def yes_no(value: Any) -> str:
    return "not measured" if value is None else "met" if value else "not met"


# ---- one record ----------------------------------------------------------------------------------
@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Record:
    """One file under ``benchmarks/results/`` and what the page says about it."""

    path: Path
    root: Path = RESULTS  # the folder of records it was found in
    data: Any = None  # the parsed JSON (None for a Markdown note)
    note: str = ""  # the Markdown text (empty for JSON)
    kind: Kind | None = None
    date: str = "not recorded"
    machine: str = "not recorded"
    command: str = "not recorded"
    sort_key: str = ""
    tables: list[Table] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.relative_to(self.root).as_posix()

    @property
    def anchor(self) -> str:
        return str(nodes.make_id(f"record-{self.name}"))


def table_of(title: str, columns: list[Column], rows: list[Row]) -> Table | None:
    """The columns some row has a value for (the first column, the row's name, always); None if no value."""
    def value(row: Row, keys: tuple[str, ...]) -> Any:
        return next((row[key] for key in keys if row.get(key) is not None), None)

    kept = [column for i, column in enumerate(columns)
            if i == 0 or any(value(row, column[1]) is not None for row in rows)]
    if len(kept) < 2:
        return None
    body = []
    for row in rows:
        cells = []
        for _, keys, shown in kept:
            found = value(row, keys)
            cells.append("" if found is None else shown(found))
        body.append(cells)
    return Table(title, [header for header, _, _ in kept], body)


def facts_table(title: str, facts: list[tuple[str, Any, Callable[[Any], str]]]) -> Table:
    return Table(title, ["quantity", "value"], [[name, shown(value)] for name, value, shown in facts
                                                if value is not None])


# ---- the kinds of JSON record ----------------------------------------------------------------------
def environment_machine(data: dict[str, Any]) -> str:
    environment = data.get("environment", {})
    parts = [str(environment[key]) for key in ("machine",) if key in environment]
    if "cores" in environment:
        parts.append(f"{environment['cores']} cores")
    if "processor" in environment:
        parts.append(str(environment["processor"]))
    return ", ".join(parts) or "not recorded"


def recording_command(script: str, record: Record, pairs: list[tuple[str, Any]]) -> str:
    """The command line that wrote ``record`` with ``script --record``: each (flag, value) whose value the
    record holds, and ``--quick`` for a ``*_quick`` record."""
    flags = "".join(f" {flag} {value}" for flag, value in pairs if value is not None)
    return f"python benchmarks/{script} --record{flags}" + (" --quick" if record.path.stem.endswith("_quick") else "")


CPU_TRAINING: list[Column] = [
    ("configuration", ("name",), text),
    ("ours ms", ("train_ours_ms", "ours_ms"), fixed(1)),
    ("torch ms", ("train_torch_ms", "torch_ms"), fixed(1)),
    ("floor ms", ("train_floor_ms",), fixed(1)),
    ("limit ms", ("train_limit_ms",), fixed(1)),
    ("ours/torch", ("ratio_torch", "ratio"), fixed(2)),
    ("ours/floor", ("ratio_floor",), fixed(2)),
    ("ours/limit", ("ratio_limit",), fixed(2)),
    ("peak MB", ("peak_bytes",), megabytes),
    ("reserve MB", ("reserve_bytes",), megabytes),
    ("returned MB", ("returned_bytes",), megabytes),
    ("cuDNN MB", ("activation_bytes",), megabytes),
    ("peak/cuDNN", ("memory_ratio",), fixed(2)),
]
CPU_INFERENCE: list[Column] = [
    ("configuration", ("name",), text),
    ("ours ms", ("infer_ours_ms",), fixed(1)),
    ("ORT ms", ("infer_ort_ms",), fixed(1)),
    ("floor ms", ("infer_floor_ms",), fixed(1)),
    ("limit ms", ("infer_limit_ms",), fixed(1)),
    ("ours/ORT", ("ratio_ort",), fixed(2)),
    ("ours/limit", ("infer_ratio_limit",), fixed(2)),
]
CPU_DECODE: list[Column] = [
    ("configuration", ("name",), text),
    ("ours ms", ("decode_ours_ms",), fixed(3)),
    ("torch ms", ("decode_torch_ms",), fixed(3)),
    ("ORT ms", ("decode_ort_ms",), fixed(3)),
    ("ours/torch", ("decode_ratio_torch",), fixed(2)),
    ("ours/ORT", ("decode_ratio_ort",), fixed(2)),
    ("repeats", ("repeats",), text),
]
CPU_FLOAT64: list[Column] = [
    ("configuration", ("name",), text),
    ("ours64 ms", ("float64_ours_ms",), fixed(1)),
    ("floor64 ms", ("float64_floor_ms",), fixed(1)),
    ("ratio64", ("ratio64",), fixed(2)),
    ("ratio32", ("ratio32",), fixed(2)),
]


CPU_PATH: list[Column] = [
    ("configuration", ("name",), text),
    ("cells", ("cells",), text),
    ("our threads", ("thread_source",), text),
    ("BLAS", ("numpy_blas_threads",), text),
    ("torch threads", ("torch_threads",), text),
    ("ORT threads", ("ort_intra_op_threads",), text),
]
CPU_BOUNDS: list[Column] = [
    ("configuration", ("name",), text),
    ("floor/torch (training)", ("bound_train_vs_torch",), fixed(2)),
    ("floor/ORT (inference)", ("bound_inference_vs_ort",), fixed(2)),
    ("floor/limit (training)", ("bound_train_vs_limit",), fixed(2)),
    ("floor/limit (inference)", ("bound_inference_vs_limit",), fixed(2)),
    ("reserve/cuDNN MB", ("bound_memory",), fixed(2)),
]
CPU_EXAMPLE: list[Column] = [
    ("machine", ("name",), text),
    ("default s", ("default_s",), fixed(2)),
    ("OMP_NUM_THREADS=1 s", ("one_thread_s",), fixed(2)),
    ("default/one", ("ratio",), fixed(2)),
    ("others busy", ("others_busy",), fixed(2)),
]


def cpu_tables(data: dict[str, Any]) -> list[Table | None]:
    rows = data.get("results", [])
    example = data.get("example") or {}
    phases = [dict(phase, name="loaded (1 competing process)" if name == "loaded" else name)
              for name, phase in example.get("phases", {}).items()]
    example_title = f"README example ({example.get('command', 'the example')}), wall-clock"
    decode = [data["decode"]] if data.get("decode") else []
    limit = data.get("limit") or {}
    return [table_of("float32 training step (forward + full backprop); limit = its multiply-adds at the machine's "
                     "sgemm rate", CPU_TRAINING, rows),
            table_of("float32 inference against ONNX Runtime", CPU_INFERENCE, rows),
            table_of("float64 training step against its own GEMM floor", CPU_FLOAT64, rows),
            table_of("decode step (one token, batch of one): float32 inference against PyTorch and ONNX Runtime",
                     CPU_DECODE, decode) if decode else None,
            facts_table(f"the machine's limit: float32 sgemm {limit.get('m')} x {limit.get('k')} x {limit.get('n')}", [
                ("GFLOP/s", limit.get("gflops"), fixed(1)), ("median ms", limit.get("median_ms"), fixed(1)),
                ("threads", limit.get("threads"), text), ("repeats", limit.get("repeats"), text)]) if limit else None,
            table_of("threads and path of each figure", CPU_PATH, rows + decode),
            table_of("what bounds a missed target: ours runs the floor's products and keeps the reserve, so ours/torch "
                     ">= floor/torch, ours/ORT >= floor/ORT, ours/limit >= floor/limit and peak/cuDNN >= "
                     "reserve/cuDNN", CPU_BOUNDS, rows),
            table_of(example_title, CPU_EXAMPLE, phases) if phases else None,
            targets_table(data.get("targets", {}), data.get("targets_met", {}))]


def target_limit(value: Any) -> str:
    """A target's limit as a record holds it: a number, or a dict that says how it ``reads``."""
    return str(value.get("reads", value)) if isinstance(value, dict) else f"{value}"


def targets_table(targets: dict[str, Any], met: Any) -> Table | None:
    """A row per target (its limit, and its outcome where ``met`` has one under its name), then the outcomes of
    other names."""
    if not targets:
        return None
    outcomes = met if isinstance(met, dict) else {}
    rows = [[name, target_limit(limit), yes_no(outcomes[name]) if name in outcomes else ""]
            for name, limit in targets.items()]
    rows += [[name, "", yes_no(value)] for name, value in outcomes.items() if name not in targets]
    if isinstance(met, bool):
        rows.append(["all targets", "", yes_no(met)])
    return Table("targets", ["target", "limit", "outcome"], rows)


def cpu_plot(data: dict[str, Any], figure: Figure) -> None:
    rows = data["results"]
    sides = [(label, keys) for label, keys in (("ours", ("train_ours_ms", "ours_ms")),
                                               ("PyTorch", ("train_torch_ms", "torch_ms")),
                                               ("GEMM floor", ("train_floor_ms",)),
                                               ("machine limit", ("train_limit_ms",)))
             if any(key in row for row in rows for key in keys)]
    if not sides:  # a record of the decode step alone
        figure.text(0.5, 0.5, "no training step in this record", ha="center")
        return
    grouped_bars(figure, [row["name"] for row in rows],
                 {label: [next((row[k] for k in keys if k in row), 0.0) for row in rows] for label, keys in sides},
                 "ms per float32 training step (lower is better)")


def cpu_command(record: Record) -> str:
    data = record.data
    return recording_command("bench_cpu.py", record, [
        ("--repeats", data.get("repeats")), ("--repeats64", data.get("repeats64")), ("--warmup", data.get("warmup")),
        ("--decode-repeats", data.get("decode_repeats"))])


CHECKPOINT_OPERATIONS: list[Column] = [
    ("operation", ("operation",), text),
    ("median ms", ("median_ms",), fixed(2)),
    ("min ms", ("min_ms",), fixed(2)),
    ("file MB", ("bytes",), megabytes),
]


def checkpoint_tables(data: dict[str, Any]) -> list[Table | None]:
    sizes = data.get("sizes_bytes", {})
    rows = [dict(operation=name, bytes=sizes.get(name), **stats) for name, stats in data["stats"].items()]
    summary = facts_table("summary", [
        ("checkpoint.save / np.savez (medians)", data.get("save_ratio"), fixed(2)),
        ("the same without the two fsyncs", data.get("save_ratio_without_fsyncs"), fixed(2)),
        ("checkpoint.save / (np.savez + fsync)", data.get("save_ratio_to_savez_fsync"), fixed(2)),
        ("the two fsyncs, median ms", data.get("fsyncs_median_ms"), fixed(2)),
        ("checkpoint every interval steps: % of the training time", data.get("step_overhead_percent"), fixed(2)),
        ("interval (training steps between two checkpoints)", data.get("interval"), text),
    ])
    met = {name.removesuffix("_target_met"): value for name, value in data.items() if name.endswith("_target_met")}
    return [table_of("median and minimum time per operation", CHECKPOINT_OPERATIONS, rows), summary,
            targets_table(data.get("targets", {}), met)]


def checkpoint_plot(data: dict[str, Any], figure: Figure) -> None:
    names = list(data["stats"])
    axes = figure.subplots()
    axes.barh(range(len(names)), [data["stats"][name]["median_ms"] for name in names], color="#4c72b0")
    axes.set_yticks(range(len(names)), names, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("median ms")
    axes.set_title("checkpoint operations of the char-LM model", fontsize=10)


def checkpoint_command(record: Record) -> str:
    data = record.data
    return recording_command("bench_checkpoint.py", record, [
        ("--repeats", data.get("repeats")), ("--warmup", data.get("warmup")), ("--interval", data.get("interval"))])


ALLREDUCE: list[Column] = [
    ("N", ("num_units",), text),
    ("elements", ("elements",), count),
    ("MB", ("bytes",), fixed(2)),
    ("mpi µs", ("mpi",), fixed(1)),
    ("mpi+mean µs", ("mpi+mean",), fixed(1)),
    ("fused µs", ("fused",), fixed(1)),
    ("packed µs", ("packed",), fixed(1)),
    ("fused / mpi+mean", ("fused_over_mpi_mean",), fixed(3)),
    ("packed / mpi+mean", ("packed_over_mpi_mean",), fixed(3)),
    ("fused / mpi", ("fused_over_mpi",), fixed(3)),
]
SCALING: list[Column] = [
    ("run", ("run",), text),
    ("processes", ("processes",), text),
    ("BLAS threads", ("blas_threads",), text),
    ("steps", ("steps",), text),
    ("ms per step", ("ms_per_step",), fixed(1)),
    ("speed-up", ("speed_up",), fixed(2)),
    ("validation loss at the end", ("val_loss_end",), fixed(3)),
]


def distributed_tables(data: dict[str, Any]) -> list[Table | None]:
    rows = [dict(row, **row.get("median_us", {}), bytes=row["bytes"] / 2**20) for row in data["allreduce"]]
    scaling = data.get("scaling", [])
    base = scaling[0]["ms_per_step"] if scaling else None
    scaling_rows = [dict(row, speed_up=base / row["ms_per_step"]) for row in scaling]
    return [table_of("all-reduce of the char-LM's float32 gradients (median µs, slowest rank)", ALLREDUCE, rows),
            table_of("train_char_lm.py step time", SCALING, scaling_rows),
            targets_table(data.get("target", {}), data.get("target_met"))]


def distributed_plot(data: dict[str, Any], figure: Figure) -> None:
    rows = data["allreduce"]
    axes = figure.subplots()
    megabytes_sent = [row["bytes"] / 2**20 for row in rows]
    for label in rows[0]["median_us"]:
        axes.plot(megabytes_sent, [row["median_us"][label] for row in rows], marker="o", label=label)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("gradients, MB (float32)")
    axes.set_ylabel("median µs")
    axes.set_title("all-reduce, 2 processes", fontsize=10)
    axes.legend(fontsize=8)


def distributed_command(record: Record) -> str:
    data = record.data
    scaling = data.get("scaling") or [{}]
    return recording_command("bench_distributed.py", record, [
        ("--repeats", data.get("repeats")), ("--warmup", data.get("warmup")), ("--steps", scaling[0].get("steps")),
        ("--runs", len(scaling[0]["seconds"]) if "seconds" in scaling[0] else None)])


BRIDGES_CPU: list[Column] = [
    ("configuration", ("name",), text),
    ("direct ms", ("direct_ms",), fixed(2)),
    ("jax ms", ("jax_ms",), fixed(2)),
    ("torch ms", ("torch_ms",), fixed(2)),
    ("jax/direct", ("jax_ratio",), fixed(3)),
    ("torch/direct", ("torch_ratio",), fixed(3)),
    ("spread", ("spread",), fixed(2)),
]
BRIDGES_GPU: list[Column] = [
    ("configuration", ("name",), text),
    ("peer", ("peer",), text),
    ("ours ms", ("ours_ms",), fixed(3)),
    ("peer ms", ("theirs_ms",), fixed(3)),
    ("peer/ours", ("speedup_vs_scan",), fixed(2)),
    ("ours/peer", ("ratio_vs_experimental",), fixed(3)),
]


def bridges_tables(data: dict[str, Any]) -> list[Table | None]:
    return [table_of("CPU, float32 training step: the bridges against the op (median ms)", BRIDGES_CPU,
                     data.get("bridges_cpu", [])),
            table_of("GPU, float32 training step: cudnn_rnn.jax against JAX's own RNNs (median ms)", BRIDGES_GPU,
                     data.get("bridges_gpu", [])),
            targets_table(data.get("targets", {}), data.get("targets_met"))]


def bridges_plot(data: dict[str, Any], figure: Figure) -> None:
    rows = data["bridges_cpu"]
    grouped_bars(figure, [row["name"] for row in rows],
                 {side: [row[f"{side}_ms"] for row in rows] for side in ("direct", "jax", "torch")},
                 "ms per float32 training step on the CPU (lower is better)")


def bridges_command(record: Record) -> str:
    data = record.data
    return recording_command("bench_bridges.py", record, [("--repeats", data.get("repeats")),
                                                          ("--warmup", data.get("warmup"))])


GPU_BENCHES: list[Column] = [
    ("configuration", ("name",), text),
    ("precision", ("precision",), text),
    ("ours ms", ("ours_ms",), fixed(3)),
    ("graph ms", ("graph_ms",), fixed(3)),
    ("torch ms", ("torch_ms",), fixed(3)),
    ("ours/torch", ("ratio",), fixed(3)),
    ("target", ("target",), text),
    ("verdict", ("verdict",), text),
    ("TFLOP/s ours", ("ours_tflops",), fixed(2)),
    ("TFLOP/s torch", ("torch_tflops",), fixed(2)),
]


def gpu_tables(data: dict[str, Any]) -> list[Table | None]:
    overhead = data.get("host_overhead_us", {})
    reseed = data.get("dropout_reseed", {})
    return [table_of("training step against PyTorch's cuDNN RNNs", GPU_BENCHES, data["benches"]),
            facts_table("host overhead per training step (µs)", [(name, value, fixed(0))
                                                                   for name, value in overhead.items()]),
            facts_table("dropout: re-seeding every step, or a layer's own RNG", [
                ("a re-seed's share of the small configuration's step", reseed.get("share_of_small_step"),
                 lambda value: f"{100 * value:.1f}%"),
                ("a layer's step saves", reseed.get("layer_step_saves"), lambda value: f"{100 * value:.1f}%"),
                ("verdict", reseed.get("verdict"), text)])]


def gpu_plot(data: dict[str, Any], figure: Figure) -> None:
    rows = data["benches"]
    grouped_bars(figure, [f"{row['name']} {row['precision']}" for row in rows],
                 {"ours": [row["ours_ms"] for row in rows], "ours, CUDA graph": [row["graph_ms"] for row in rows],
                  "PyTorch": [row["torch_ms"] for row in rows]}, "ms per training step (lower is better)")


def gpu_command(record: Record) -> str:
    return f"python benchmarks/bench_gpu.py --steps {record.data.get('steps', 20)} --json {record.path.name}"


def other_tables(data: Any) -> list[Table | None]:
    if not isinstance(data, dict):
        return []
    return [facts_table("numbers in the record", [(name, value, text) for name, value in data.items()
                                                   if isinstance(value, (int, float)) and not isinstance(value, bool)])]


@dataclass(frozen=True)
class Kind:
    """A kind of JSON record: how to know it, its script, and how to show it."""

    title: str
    about: str
    detect: Callable[[Any], bool]
    command: Callable[[Record], str]
    tables: Callable[[Any], list[Table | None]]
    plot: Callable[[Any, Figure], None] | None
    gpu: bool = False


def has(*keys: str) -> Callable[[Any], bool]:
    return lambda data: isinstance(data, dict) and all(key in data for key in keys)



IMPORT_SIDES: list[Column] = [
    ("package", ("name",), text),
    ("import ms", ("package_ms",), fixed(1)),
    ("NumPy's ms", ("numpy_ms",), fixed(1)),
    ("modules", ("modules",), count),
]


def import_tables(data: dict[str, Any]) -> list[Table | None]:
    return [table_of(f"import cudnn_rnn on top of NumPy's import (median of {data['repeats']} fresh interpreters)",
                     IMPORT_SIDES, data["sides"]),
            facts_table("working tree / revision", [("ratio", data["ratio"], fixed(2))]),
            targets_table(data.get("target", {}), data.get("target_met"))]


def import_command(record: Record) -> str:
    return f"python benchmarks/bench_import.py {record.data['revision']} --repeats {record.data['repeats']} --record"

#: every kind of JSON record, in the order of the page; the first whose ``detect`` accepts a record takes it
KINDS: dict[str, Kind] = {
    "cpu": Kind("CPU: the reference backend against PyTorch, ONNX Runtime and the GEMM floor",
                "`benchmarks/bench_cpu.py`: a float32 training step against PyTorch's CPU LSTM/GRU, the GEMM "
                "floor (the same matrix products alone) and the machine's limit (those products' multiply-adds at "
                "the rate of one 2048 x 2048 x 2048 sgemm), inference against ONNX Runtime running the model "
                "`export_onnx` writes and against the limit, a decode step (one token, batch of one) against "
                "PyTorch and ONNX Runtime, float64 against its own floor, and the peak memory of a step against the "
                "activations cuDNN keeps.",
                has("results", "environment"), cpu_command, cpu_tables, cpu_plot),
    "checkpoint": Kind("Checkpoints: cudnn_rnn.checkpoint against np.savez",
                       "`benchmarks/bench_checkpoint.py`: a checkpoint of the char-LM example's whole training state "
                       "against `np.savez` of the same arrays, its parts (gather, encode, SHA-256, write, fsyncs), "
                       "loading, and its share of the training time.",
                       has("stats", "sizes_bytes"), checkpoint_command, checkpoint_tables, checkpoint_plot),
    "distributed": Kind("Data-parallel training: the all-reduce and the step time",
                        "`benchmarks/bench_distributed.py`: averaging the example's gradients over two processes "
                        "against MPI's own `Allreduce`, and the example's step time on one and two processes.",
                        has("allreduce"), distributed_command, distributed_tables, distributed_plot),
    "bridges": Kind("The JAX and PyTorch bridges against the op",
                    "`benchmarks/bench_bridges.py`: a float32 training step through `cudnn_rnn.jax` (jit of vjp, "
                    "through buffer callbacks) and `cudnn_rnn.torch` (the custom operators under autograd) against the "
                    "op called directly on NumPy arrays, the same backend underneath; on a GPU, the JAX GRU "
                    "against a `lax.scan` GRU and the JAX LSTM against `jax.experimental.rnn.lstm`.",
                    has("bridges_cpu"), bridges_command, bridges_tables, bridges_plot),
    "import": Kind("import cudnn_rnn: the working tree against a revision",
                   "`benchmarks/bench_import.py`: the time `import cudnn_rnn` adds to NumPy's import, and how many "
                   "of the package's modules it loads, in fresh interpreters, against the package at a git revision.",
                   has("sides", "ratio"), import_command, import_tables, None),
    "gpu": Kind("GPU: the cuDNN backend against PyTorch's cuDNN RNNs",
                "`benchmarks/bench_gpu.py` (stage `bench` of `scripts/gpu_check.sh`): a training step against "
                "PyTorch's cuDNN LSTM/GRU in three precisions, eager and as a CUDA graph, the host overhead per "
                "call and the cost of re-seeding dropout.",
                has("benches", "device"), gpu_command, gpu_tables, gpu_plot, gpu=True),
}
OTHER = Kind("Other records", "Records of a kind this page does not know yet: their top-level numbers.",
             lambda data: True, lambda record: "not recorded", other_tables, None)


# ---- reading the folder ----------------------------------------------------------------------------
def stamp_date(name: str) -> str | None:
    """``cpu_20261124T205246.json`` -> ``2026-11-24 20:52 UTC``; a bare ``20261124`` -> ``2026-11-24``."""
    match = re.search(r"(\d{8})(?:T(\d{4})\d*)?", name)
    if not match:
        return None
    day = f"{match[1][:4]}-{match[1][4:6]}-{match[1][6:]}"
    return f"{day} {match[2][:2]}:{match[2][2:]} UTC" if match[2] else day


def iso_date(value: str) -> str:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    return moment.strftime("%Y-%m-%d %H:%M") + (" UTC" if moment.utcoffset() is not None else "")


def note_field(note: str, *labels: str) -> str | None:
    """The value of a ``- label: value`` or ``**Label:** value`` line of a Markdown record."""
    for label in labels:
        match = re.search(rf"^(?:- {label}:|\*\*{label}:\*\*)\s*(.+)$", note, re.M | re.I)
        if match:
            return match[1].strip()
    return None


def note_title(note: str, path: Path) -> str:
    match = re.search(r"^# (.+)$", note, re.M)
    return match[1].strip() if match else path.name


def is_gpu_note(note: str) -> bool:
    return note.startswith("# GPU check")


def read_records(folder: Path | None = None) -> list[Record]:
    """Every record and note under ``folder``, in file-name order, with kind, date, machine and command."""
    folder = RESULTS if folder is None else folder
    records = []
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            kind = next((kind for kind in KINDS.values() if kind.detect(data)), OTHER)
            record = Record(path, folder, data=data, kind=kind)
            sibling = path.with_name("record.md")
            sibling_note = sibling.read_text() if sibling.exists() else ""
            date = data.get("date") if isinstance(data, dict) else None
            record.date = (iso_date(date) if isinstance(date, str) else note_field(sibling_note, "date")
                           or stamp_date(record.name) or record.date)
            record.machine = (str(data["device"]) if isinstance(data, dict) and "device" in data
                              else environment_machine(data) if isinstance(data, dict) else record.machine)
            recorded = data.get("command") if isinstance(data, dict) else None
            record.command = (recorded if isinstance(recorded, str) else
                              (note_field(sibling_note, "command") or "").strip("`").split("`")[0]
                              or kind.command(record))
            record.tables = [table for table in kind.tables(data) if table is not None]
        elif path.suffix == ".md":
            note = path.read_text()
            record = Record(path, folder, note=note)
            record.date = note_field(note, "date") or stamp_date(record.name) or stamp_date(note_title(note, path)) \
                or record.date
            match = re.search(r"\d{4}-\d{2}-\d{2}", note_title(note, path))
            if record.date == "not recorded" and match:
                record.date = match[0]
            record.machine = note_field(note, "GPU", "machine") or record.machine
            command = note_field(note, "command")
            record.command = command.strip("`").split("`")[0] if command else "see the note"
        else:
            continue
        record.sort_key = record.date
        records.append(record)
    return records


# ---- rendering -------------------------------------------------------------------------------------
def grouped_bars(figure: Figure, groups: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    axes = figure.subplots()
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        axes.bar([g + i * width for g in range(len(groups))], values, width, label=label)
    axes.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], groups, fontsize=7,
                    rotation=15 if len(groups) <= 5 else 35, ha="right")
    axes.set_ylabel(ylabel, fontsize=9)
    axes.legend(fontsize=8)


def write_plot(record: Record, folder: Path) -> Path | None:
    """The record's plot as a PNG in ``folder`` (None when its kind draws none)."""
    assert record.kind is not None
    if record.kind.plot is None:
        return None
    figure = Figure(figsize=(8, 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    record.kind.plot(record.data, figure)
    figure.suptitle(f"{record.name} ({record.date})", fontsize=9)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", record.name) + ".png")
    figure.savefig(path, format="png", metadata={"Software": None})
    return path


def cell(value: str) -> str:
    return value.replace("|", "\\|")


def markdown_table(table: Table) -> list[str]:
    lines = [f"**{table.title}**", "", "| " + " | ".join(cell(h) for h in table.headers) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(table.headers))) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in table.rows]
    return lines + [""]


def demoted(note: str) -> list[str]:
    """A note's Markdown without its title, its headings made rubrics (they must not become page sections)."""
    lines: list[str] = []
    fence = ""
    for line in note.splitlines():
        stripped = line.lstrip()
        if fence:
            fence = "" if stripped.startswith(fence) else fence
        elif stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif re.match(r"#{1,6} ", line):
            if not lines and line.startswith("# "):
                continue  # the title: the page's own heading says it
            lines += ["```{rubric} " + line.lstrip("#").strip(), "```"]
            continue
        lines.append(line)
    return lines


class BenchmarkRecords(SphinxDirective):
    """``benchmark-records``: the summary, the tables and plots of every record, the GPU records, the notes."""

    has_content = False

    def download(self, record: Record) -> str:
        relative = os.path.relpath(record.path, Path(self.env.srcdir) / Path(self.env.docname).parent)
        return f"{{download}}`{record.name} <{Path(relative).as_posix()}>`"

    def run(self) -> list[nodes.Node]:
        records = read_records()
        self.env.note_reread()  # read again at every build, so that a new record appears (it takes a second)
        plots = Path(self.env.doctreedir) / "benchmark_plots"
        page_dir = Path(self.env.srcdir) / Path(self.env.docname).parent
        lines: list[str] = []
        lines += self.summary(records)
        measured = [record for record in records if record.kind is not None]
        for kind in [*KINDS.values(), OTHER]:
            of_kind = sorted((record for record in measured if record.kind is kind),
                             key=lambda record: record.sort_key, reverse=True)
            if kind.gpu:
                lines += self.gpu_section(kind, of_kind, [r for r in records if is_gpu_note(r.note)], plots, page_dir)
                continue
            if not of_kind:
                continue
            lines += [f"## {kind.title}", "", kind.about, ""]
            for record in of_kind:
                lines += self.record_section(record, plots, page_dir)
        notes = sorted((record for record in records if record.note and not is_gpu_note(record.note)),
                       key=lambda record: record.sort_key, reverse=True)
        if notes:
            lines += ["## Notes", "", "Write-ups committed beside the records, as they were written.", ""]
            for note in notes:
                lines += self.note_section(note)
        holder = nodes.container()
        self.state.nested_parse(StringList(lines, source=str(RESULTS)), 0, holder, match_titles=True)
        return list(holder.children)

    def summary(self, records: list[Record]) -> list[str]:
        lines = ["## Records", "", f"Every file in `{RESULTS_SHOWN}/`, newest first; the command re-runs the "
                 "benchmark with the record's settings.", "",
                 "| record | kind | date | machine | command |", "|---|---|---|---|---|"]
        for record in sorted(records, key=lambda record: record.sort_key, reverse=True):
            kind = ([key for key, value in KINDS.items() if value is record.kind] or
                    ["gpu check" if is_gpu_note(record.note) else "note" if record.note else "other"])[0]
            lines.append(f"| {self.download(record)} | {{ref}}`{kind} <{record.anchor}>` | {record.date} | "
                         f"{cell(record.machine)} | `{cell(record.command)}` |")
        return lines + [""]

    def record_section(self, record: Record, plots: Path, page_dir: Path) -> list[str]:
        lines = [f"({record.anchor})=", f"### {record.name}", "",
                 f"- file: {self.download(record)}", f"- date: {record.date}", f"- machine: {record.machine}",
                 f"- command: `{record.command}`", ""]
        for table in record.tables:
            lines += markdown_table(table)
        plot = write_plot(record, plots)
        if plot is not None:
            relative = Path(os.path.relpath(plot, page_dir)).as_posix()
            lines += [f"```{{image}} {relative}", ":class: benchmark-plot",
                      f":alt: plot of {record.name}", "```", ""]
        return lines

    def gpu_section(self, kind: Kind, records: list[Record], notes: list[Record], plots: Path,
                    page_dir: Path) -> list[str]:
        lines = [f"## {kind.title}", "", kind.about, ""]
        if not records and not notes:
            lines += ["**No GPU record exists yet**: the cuDNN backend has not been run on a GPU, so no number on "
                      "this page comes from one. `bash scripts/gpu_check.sh bench` on a GPU machine writes "
                      "`bench.json` (this script's results) and `record.md` (date, commit, GPU, driver, CUDA, cuDNN "
                      f"and CuPy versions, the command); committed under `{RESULTS_SHOWN}/`, they appear here, "
                      "with the other stages' records (`smoke`, `tests`, `long`, `sanitizer`, `layout`).", ""]
            return lines
        for record in records:
            lines += self.record_section(record, plots, page_dir)
        for note in sorted(notes, key=lambda record: record.sort_key, reverse=True):
            lines += self.note_section(note)
        return lines

    def note_section(self, record: Record) -> list[str]:
        return [f"({record.anchor})=", f"### {note_title(record.note, record.path)}", "",
                f"{self.download(record)}, {record.date}", "", *demoted(record.note), ""]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("benchmark-records", BenchmarkRecords)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
