"""The reference backend at another git revision against the working tree: one training step each.

Loads the reference backend (and its ``_cells``, ``_reserve`` where that revision has them) as it was at REV,
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

from cudnn_rnn.cpu import _backend as _reference  # noqa: E402

#: what ops.py calls in the backend module
ENTRY_POINTS = ("forward", "backward")


#: where the reference backend has lived (module, file), newest first: a revision has one of them
BACKEND_PLACES = (("cudnn_rnn.cpu._backend", "cudnn_rnn/cpu/_backend.py"),
                  ("cudnn_rnn._reference", "cudnn_rnn/_reference.py"))

#: the backend's sibling modules taken from the revision too (where it has them), each where it has lived: its
#: cell math, and its reserve header (the working tree's ops still record and check each reserve by identity)
SIBLING_PLACES = (("cudnn_rnn.cpu._cells", "cudnn_rnn/cpu/_cells.py"), ("cudnn_rnn._cells", "cudnn_rnn/_cells.py"),
                  ("cudnn_rnn._reserve", "cudnn_rnn/_reserve.py"))


def backend_at(revision: str) -> types.ModuleType:
    """The reference backend as it was at ``revision``, as a module of the package (its imports of
    ``config``, ``layout`` ... resolve to the working tree's; :data:`SIBLING_PLACES` to the revision's)."""

    def source(path: str) -> str | None:
        result = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=HERE.parent, capture_output=True, text=True)
        return result.stdout if result.returncode == 0 else None

    found = [(module, text) for module, path in BACKEND_PLACES if (text := source(path)) is not None]
    if not found:
        raise SystemExit(f"no reference backend ({' or '.join(path for _, path in BACKEND_PLACES)}) at {revision!r}")
    tag = f"at_{abs(hash(revision))}"
    siblings = {module: text for module, path in SIBLING_PLACES if (text := source(path)) is not None}
    for module, text in siblings.items():  # each under its own name, imported by the revision's modules
        _load(f"{module}_{tag}", _with_siblings(text, module, set(siblings), tag))
    backend, text = found[0]
    return _load(f"{backend}_{tag}", _with_siblings(text, backend, set(siblings), tag))


def _with_siblings(text: str, module: str, siblings: set[str], tag: str) -> str:
    """``text`` (of ``module``) with its relative imports of a sibling (``from . import a``, ``from .a import x``)
    taking the revision's copy of it."""

    def sibling(dots: str, name: str) -> bool:
        return f"{module.rsplit('.', len(dots))[0]}.{name}" in siblings

    def rewrite_names(match: re.Match[str]) -> str:
        names = [name.strip() for name in match[2].split(",")]
        return f"from {match[1]} import " + ", ".join(
            f"{name}_{tag} as {name}" if sibling(match[1], name) else name for name in names)

    def rewrite_module(match: re.Match[str]) -> str:
        return f"from {match[1]}{match[2]}_{tag} import" if sibling(match[1], match[2]) else match[0]

    text = re.sub(r"^from (\.+) import ([\w, ]+)$", rewrite_names, text, flags=re.M)
    return re.sub(r"^from (\.+)(\w+) import", rewrite_module, text, flags=re.M)


def _load(name: str, text: str) -> types.ModuleType:
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = name.rpartition(".")[0]
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
