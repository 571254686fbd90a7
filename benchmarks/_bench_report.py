"""How the benchmark scripts time their sides and print their tables: the sides take turns (so that
machine noise hits all alike) and each table is one line per configuration, its columns right-aligned.

The scripts import it by name (``from _bench_report import ...``) with their own folder on ``sys.path``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

#: a column of a table: its header, and how a row shows in it
Column = tuple[str, Callable[[dict], str]]


#: seconds a side waits, untimed, before its turn where ``settle`` is asked for: OpenBLAS's idle threads spin
#: for about 0.1 s after a call, so without it a side would start with the last side's threads on its cores
SETTLE_S = 0.25


def interleaved_ms(steps: dict[str, Callable[[], Any]], warmup: int, repeats: int,
                   settle: bool = False) -> dict[str, list[float]]:
    """Milliseconds per call of each step, the steps taking turns so that machine noise hits all alike.

    With ``settle`` each turn is ``SETTLE_S`` idle, one untimed call of the step, then the timed one: the
    idle lets the last side's threads stop spinning, and the untimed call takes what a call pays after an
    idle spell (on a virtual machine, memory untouched for a few milliseconds can cost several times more on
    its next touch: a 4 x 128 x 512 product measured 9 us back to back and 1.9 ms after 0.25 s idle), so the
    timed call costs what it costs in a loop, as in training.
    """
    for _ in range(warmup):
        for step in steps.values():
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            if settle:
                time.sleep(SETTLE_S)
                step()
            start = time.perf_counter()
            step()
            times[name].append(1e3 * (time.perf_counter() - start))
    return times


def median_ms(steps: dict[str, Callable[[], Any]], warmup: int, repeats: int, prefix: str,
              settle: bool = False) -> dict[str, Any]:
    """``interleaved_ms`` of ``steps`` as row entries: ``{prefix}{name}_ms`` (median), ``..._times_ms`` (all)
    and ``{prefix}spread``: the largest max/min of a side's times (1 on a quiet machine)."""
    times = interleaved_ms(steps, warmup, repeats, settle)
    row: dict[str, Any] = {f"{prefix}{name}_ms": statistics.median(ms) for name, ms in times.items()}
    row.update({f"{prefix}{name}_times_ms": ms for name, ms in times.items()})
    row[f"{prefix}spread"] = max(max(ms) / min(ms) for ms in times.values())
    return row


def column(header: str, key: str, digits: int = 1, scale: float = 1.0) -> Column:
    """A table column: its header and how a row's ``key`` is shown (times ``scale``, ``digits`` decimals)."""
    return header, lambda row: f"{row[key] * scale:.{digits}f}"


def text_column(header: str, key: str, none: str = "n/a") -> Column:
    """A table column of a row's ``key`` as text (``none`` for None)."""
    return header, lambda row: none if row[key] is None else str(row[key])


def print_table(title: str, columns: list[Column], rows: list[dict[str, Any]]) -> None:
    """One line per row: the configuration's name, then each column right-aligned under its header."""
    width = max(len("configuration"), *(len(row["name"]) for row in rows))
    cells = [[cell(row) for _, cell in columns] for row in rows]
    widths = [max(len(name), 8, *(len(line[i]) for line in cells)) for i, (name, _) in enumerate(columns)]
    header = f"{'configuration':{width}s}" + "".join(f" {name:>{w}s}" for (name, _), w in zip(columns, widths))
    print(f"\n{title}\n{header}\n{'-' * len(header)}")
    for row, line in zip(rows, cells):
        print(f"{row['name']:{width}s}" + "".join(f" {cell:>{w}s}" for cell, w in zip(line, widths)))
