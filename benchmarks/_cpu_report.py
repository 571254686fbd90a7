"""How bench_cpu.py reports a run: the columns of its tables, its targets and their verdicts, what bounds a missed
target, and the groups whose timings were noisy.

bench_cpu.py imports it by name (``from _cpu_report import ...``) with this folder on ``sys.path``.

A target bounds one ratio of a row (a configuration's, or the decode step's): ``row[ratio] <= limit``, or
``<= limits[name]`` for the configuration of that name; with ``limit`` None only the configurations of
``limits`` are bound, the others reported only. A row without that ratio (the decode step's for a training
target) is not bound by it. Over a run a target is met when every row it bounds meets it, NOT met when one
misses it (each such row named with its bound, where the target has one: a ratio of the row's own figures
that its ratio cannot go below), and not measured (None) when no row it bounds was run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from _bench_report import Column, column, text_column

MB = 1 / 2**20
#: a group whose side's times vary by more (max/min over the repeats) is reported as noisy
NOISY = 1.3


@dataclass(frozen=True)
class Target:
    """``reads`` (how the ratio reads, e.g. "training float32: ours/torch"), the row's key of the ratio, its limit
    on every configuration (None: on those of ``limits`` only), the configurations' own limits by name, and
    ``bound``: (how it reads, numerator key, denominator key) of the ratio that bounds the row's from below."""

    reads: str
    ratio: str
    limit: float | None
    limits: Mapping[str, float] = field(default_factory=dict)
    bound: tuple[str, str, str] | None = None


def limit_of(target: Target, name: str) -> float | None:
    """The limit ``target`` sets the configuration ``name`` (None: reported only)."""
    return target.limits.get(name, target.limit)


def verdict(target: Target, row: dict[str, Any]) -> bool | None:
    """Whether ``row`` meets ``target``; None where the target does not bound it."""
    limit = limit_of(target, row["name"])
    if limit is None or row.get(target.ratio) is None:
        return None
    return bool(row[target.ratio] <= limit)


def describe(target: Target) -> str:
    """The target as printed: "training float32: ours/torch <= 0.85 (LSTM ...: <= 0.95)", or for a target of
    named configurations only "... <= 1.35 on A, B (the others reported only)"."""
    if target.limit is not None:
        others = "; ".join(f"{name}: <= {limit:g}" for name, limit in target.limits.items())
        return f"{target.reads} <= {target.limit:g}" + (f" ({others})" if others else "")
    named: dict[float, list[str]] = {}
    for name, limit in target.limits.items():
        named.setdefault(limit, []).append(name)
    bounds = "; ".join(f"<= {limit:g} on {', '.join(names)}" for limit, names in named.items())
    return f"{target.reads} {bounds} (the others reported only)"


def row_verdicts(targets: Mapping[str, Target], row: dict[str, Any]) -> dict[str, bool]:
    """A row's ``targets_met``: the verdict of each target that bounds it."""
    verdicts = {name: verdict(target, row) for name, target in targets.items()}
    return {name: met for name, met in verdicts.items() if met is not None}


def targets_record(targets: Mapping[str, Target]) -> dict[str, dict[str, Any]]:
    """The record's ``targets``: per target ``reads`` (as printed), ``ratio``, ``limit`` and ``limits``."""
    return {name: dict(reads=describe(target), ratio=target.ratio, limit=target.limit, limits=dict(target.limits))
            for name, target in targets.items()}


def print_targets(targets: Mapping[str, Target], rows: list[dict[str, Any]]) -> dict[str, bool | None]:
    """One line per target: met / NOT met over the rows it bounds, naming those that miss it, each with its
    bound (recorded in the row as ``bound_<target>``) where the target has one; "not measured" (None) when it
    bounds none of ``rows``. Returns the record's ``targets_met``."""
    print("\ntargets")
    summary: dict[str, bool | None] = {}
    for name, target in targets.items():
        bound_rows = [row for row in rows if verdict(target, row) is not None]
        missed = []
        for row in bound_rows:
            if verdict(target, row):
                continue
            if target.bound is None:
                missed.append(row["name"])
                continue
            label, numerator, denominator = target.bound
            row[f"bound_{name}"] = row[numerator] / row[denominator]
            missed.append(f"{row['name']} ({label} {row[f'bound_{name}']:.2f})")
        summary[name] = not missed if bound_rows else None
        outcome = ("not measured (none of its configurations ran)" if not bound_rows else
                   f"NOT met (missed by {'; '.join(missed)})" if missed else "met")
        print(f"  {describe(target)}: {outcome}")
    return summary


def print_noise(rows: list[dict[str, Any]]) -> None:
    """Warn of the groups whose times varied by more than NOISY (max/min of a side's repeats): their ratios
    are less reliable (a shared machine, CPU throttling); rerun them with ``--only``."""
    noisy = [f"{row['name']} {group[:-1]} {row[f'{group}spread']:.1f}x" for row in rows
             for group in ("train_", "infer_", "float64_") if row[f"{group}spread"] > NOISY]
    if noisy:
        print(f"\nnoisy timings (a side's repeats varied by more than {NOISY}x): " + "; ".join(noisy))


#: the tables of the configurations: title -> columns
TABLES: dict[str, list[Column]] = {
    "training, float32 (forward + backward)": [
        column("ours ms", "train_ours_ms"), column("torch ms", "train_torch_ms"),
        column("floor ms", "train_floor_ms"), column("limit ms", "train_limit_ms"),
        column("ours/torch", "ratio_torch", 2), column("ours/floor", "ratio_floor", 2),
        column("ours/limit", "ratio_limit", 2), column("peak MB", "peak_bytes", scale=MB),
        column("reserve", "reserve_bytes", scale=MB), column("returned", "returned_bytes", scale=MB),
        column("cuDNN MB", "activation_bytes", scale=MB), column("x", "memory_ratio", 2),
        column("transient T->2T MB", "transient_growth_2t_bytes", 2, MB)],
    "inference, float32 (forward, is_training=False)": [
        column("ours ms", "infer_ours_ms"), column("ORT ms", "infer_ort_ms"), column("floor ms", "infer_floor_ms"),
        column("limit ms", "infer_limit_ms"), column("ours/ORT", "ratio_ort", 2),
        column("ours/floor", "infer_ratio_floor", 2), column("ours/limit", "infer_ratio_limit", 2)],
    "training, float64 (forward + backward)": [
        column("ours64 ms", "float64_ours_ms"), column("floor64 ms", "float64_floor_ms"),
        column("ratio64", "ratio64", 2), column("ratio32", "ratio32", 2)],
    "threads and path (the cells ours ran; each side's threads)": [
        text_column("cells", "cells"), text_column("ours threads", "ours_threads", "policy"),
        text_column("BLAS", "numpy_blas_threads"), text_column("torch", "torch_threads"),
        text_column("ORT", "ort_intra_op_threads")],
}
#: the decode step's table: its title and columns
DECODE_TABLE: tuple[str, list[Column]] = (
    "decode step, float32 (one inference forward of one token)", [
        column("ours ms", "decode_ours_ms", 3), column("torch ms", "decode_torch_ms", 3),
        column("ORT ms", "decode_ort_ms", 3), column("ours/torch", "decode_ratio_torch", 2),
        column("ours/ORT", "decode_ratio_ort", 2), text_column("cells", "cells"),
        text_column("ours threads", "ours_threads", "policy"), text_column("torch", "torch_threads")])
