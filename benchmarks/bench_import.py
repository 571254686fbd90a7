"""``import cudnn_rnn`` of the working tree against the package at another git revision, on top of NumPy's import.

Each import runs in a fresh interpreter that imports NumPy first, then the package, and reports both
times and how many of the package's modules loaded; the two sides take turns. Reported per side: the
median of the repeats of the time the package adds to NumPy's import, NumPy's own import for scale,
and the ratio working tree / REV (the layout's target: at most a third of the time before it).

Usage: python benchmarks/bench_import.py REV [--repeats N] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from datetime import datetime, timezone
from io import BytesIO
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]  # this folder's _bench_configs, and a checkout without installing

from _bench_configs import RESULTS, write_record  # noqa: E402

#: the working tree's target: the package's time on top of NumPy at most this fraction of REV's
TARGET_RATIO = 1 / 3

#: what a fresh interpreter runs and prints: seconds of NumPy's import, then of the package's (the one under
#: ROOT, whatever else is installed), and how many of the package's modules loaded
CHILD = """
import importlib.util, json, sys, time
start = time.perf_counter(); import numpy; middle = time.perf_counter()
spec = importlib.util.spec_from_file_location("cudnn_rnn", sys.argv[1] + "/cudnn_rnn/__init__.py")
package = importlib.util.module_from_spec(spec); sys.modules["cudnn_rnn"] = package; spec.loader.exec_module(package)
end = time.perf_counter()
print(json.dumps({"numpy": middle - start, "package": end - middle, "file": package.__file__,
                  "modules": sum(name == "cudnn_rnn" or name.startswith("cudnn_rnn.") for name in sys.modules)}))
"""


def package_at(revision: str, into: Path) -> Path:
    """The ``cudnn_rnn`` sources of ``revision``, unpacked under ``into``; returns the folder to put on the path."""
    archive = subprocess.run(["git", "archive", "--format=tar", revision, "cudnn_rnn"], cwd=REPO,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12: refuse members outside ``into``
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
    return into


def one_import(root: Path) -> dict[str, Any]:
    """One fresh interpreter importing the package found first under ``root``."""
    result = subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, check=True)
    measured = json.loads(result.stdout)
    if not Path(measured["file"]).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"imported {measured['file']}, not the package under {root}")
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="a git revision to compare against, e.g. a commit or tag")
    parser.add_argument("--repeats", type=int, default=15, help="fresh interpreters per side")
    parser.add_argument("--record", action="store_true", help=f"write a JSON record to {RESULTS}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        roots = {"rev": package_at(args.revision, Path(folder)), "now": REPO}
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in roots}
        for _ in range(args.repeats):
            for side, root in roots.items():  # the sides take turns: machine noise hits both alike
                runs[side].append(one_import(root))
    labels = {"rev": args.revision, "now": "working tree"}
    sides = [{"name": labels[side], "package_ms": 1e3 * statistics.median(run["package"] for run in measured),
              "numpy_ms": 1e3 * statistics.median(run["numpy"] for run in measured),
              "modules": measured[0]["modules"]} for side, measured in runs.items()]
    ratio = sides[1]["package_ms"] / sides[0]["package_ms"]
    print(f"import cudnn_rnn on top of NumPy's import, median of {args.repeats} fresh interpreters per side")
    print(f"{'side':24s} {'package ms':>11s} {'numpy ms':>9s} {'modules':>8s}")
    for row in sides:
        print(f"{row['name'][:24]:24s} {row['package_ms']:11.1f} {row['numpy_ms']:9.1f} {row['modules']:8d}")
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(f"working tree / {args.revision[:24]}: {ratio:.2f} ({verdict} the target <= {TARGET_RATIO:.2f})")
    if args.record:
        environment = dict(machine=platform.machine(), processor=platform.processor() or platform.platform(),
                           cores=os.cpu_count(), load_average=os.getloadavg(), python=platform.python_version())
        write_record("import", dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                    environment=environment, revision=args.revision, repeats=args.repeats,
                                    sides=sides, ratio=ratio, target=dict(ratio=round(TARGET_RATIO, 2)),
                                    target_met=ratio <= TARGET_RATIO), quick=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
