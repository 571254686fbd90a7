"""The reference backend at another git revision against the working tree: one training step each.

Loads ``cudnn_rnn/_reference.py`` (and ``_cells.py``, ``_reserve.py`` where that revision has them) as it was at REV,
beside the working tree's, and times ``cudnn_rnn_v3`` + ``cudnn_rnn_backprop_v3`` through each in
turns in one process (the bench_cpu configurations, time-major, with their dropout). Both must agree on the
output, input and weight gradients (relative to their max: 1e-5 in float32, 1e-12 in float64).
Reports the fastest of the repeats, wall time, and the ratio working tree / REV, and the peak
memory of a step of each (``bench_cpu.training_memory``: NumPy allocations beyond the inputs).

Usage: python benchmarks/bench_reference_revisions.py REV [--dtype float32|float64] [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # this folder's _bench_configs, and a checkout without installing

import bench_cpu  # noqa: E402
from _bench_configs import Bench  # noqa: E402
from _bench_report import interleaved_ms  # noqa: E402

from cudnn_rnn import _reference  # noqa: E402

#: what ops.py calls in the backend module
ENTRY_POINTS = ("forward", "backward")


#: the reference backend's sibling modules taken from the revision too (where it has them): its cell
#: math, and its reserve header (the working tree's ops still record and check each reserve by identity)
REVISION_SIBLINGS = ("_cells", "_reserve")


def backend_at(revision: str) -> types.ModuleType:
    """``cudnn_rnn._reference`` as it was at ``revision``, as a module of the package (its imports of
    ``config``, ``layout`` ... resolve to the working tree's; :data:`REVISION_SIBLINGS` to the revision's)."""

    def source(path: str) -> str | None:
        result = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=HERE.parent, capture_output=True, text=True)
        return result.stdout if result.returncode == 0 else None

    reference = source("cudnn_rnn/_reference.py")
    if reference is None:
        raise SystemExit(f"no cudnn_rnn/_reference.py at {revision!r}")
    tag = f"at_{abs(hash(revision))}"
    siblings = {name: text for name in REVISION_SIBLINGS if (text := source(f"cudnn_rnn/{name}.py")) is not None}
    for name, text in siblings.items():  # each under its own name, imported by the revision's modules
        _load(f"cudnn_rnn.{name}_{tag}", _with_siblings(text, siblings, tag), "cudnn_rnn")
    return _load(f"cudnn_rnn._reference_{tag}", _with_siblings(reference, siblings, tag), "cudnn_rnn")


def _with_siblings(text: str, siblings: dict[str, str], tag: str) -> str:
    """``text`` with its ``from . import a, b`` lines taking the revision's own copy of each sibling."""

    def rewrite(match: re.Match[str]) -> str:
        names = [name.strip() for name in match[1].split(",")]
        return "from . import " + ", ".join(f"{name}_{tag} as {name}" if name in siblings else name for name in names)

    return re.sub(r"^from \. import ([\w, ]+)$", rewrite, text, flags=re.M)


def _load(name: str, text: str, package: str) -> types.ModuleType:
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    sys.modules[name] = module
    exec(compile(text, f"<{name}>", "exec"), module.__dict__)
    return module


def step_through(backend: types.ModuleType, step: Callable[[], Any]) -> Callable[[], Any]:
    """``step`` with ops dispatching to ``backend`` instead of the working tree's reference backend."""

    def run() -> Any:
        saved = {name: getattr(_reference, name) for name in ENTRY_POINTS}
        try:
            for name in ENTRY_POINTS:
                setattr(_reference, name, getattr(backend, name))
            return step()
        finally:
            for name, value in saved.items():
                setattr(_reference, name, value)

    return run


#: what both revisions must agree on, as ``results_of`` lists it
RESULTS = ("output", "input_backprop", "params_backprop")


def results_of(outcome: tuple) -> list[np.ndarray]:
    out, grads = outcome
    return [out.output, grads.input_backprop, grads.params_backprop]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="a git revision, e.g. a commit or tag")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per side (fastest reported)")
    parser.add_argument("--quick", action="store_true", help="bench_cpu's tiny configurations")
    args = parser.parse_args(argv)
    dtype = np.dtype(args.dtype).type
    tolerance = 1e-5 if dtype is np.float32 else 1e-12
    old = backend_at(args.revision)
    benches: tuple[Bench, ...] = bench_cpu.QUICK if args.quick else bench_cpu.BENCHES
    print(f"{args.dtype}, fastest of {args.repeats} wall-clock repeats, the sides taking turns")
    print(f"{'configuration':44s} {args.revision[:12] + ' ms':>15s} {'now ms':>9s} {'now/rev':>8s} "
          f"{'rev peak MB':>12s} {'now peak MB':>12s}")
    for bench in benches:
        problem = bench_cpu.make_problem(bench, dtype)
        current = bench_cpu.ours_step(bench, problem)
        sides = {"rev": step_through(old, current), "now": current}
        for name, mine, other in zip(RESULTS, results_of(sides["now"]()), results_of(sides["rev"]())):
            bench_cpu.relative_difference(f"{bench.name()}: {name}", mine, other, tolerance, args.revision)
        best = {name: min(times) for name, times in interleaved_ms(sides, 0, args.repeats).items()}
        peak = {name: bench_cpu.training_memory(side)["peak"] / 2**20 for name, side in sides.items()}
        print(f"{bench.name():44s} {best['rev']:15.1f} {best['now']:9.1f} {best['now'] / best['rev']:8.2f} "
              f"{peak['rev']:12.1f} {peak['now']:12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
