"""What a checkpoint of the char-LM example costs: cudnn_rnn.checkpoint against np.savez, and per training step.

The model is ``examples/train_char_lm.py``'s in its full configuration (imported from the example:
``CharModel``, ``SETTINGS["full"]``): an LSTM vocabulary -> 128 units, 2 layers, dropout 0.1, a
dense readout 128 -> vocabulary, Adam over [lstm.params, readout.weight, readout.bias], batches
of 32 x 64 characters, on the NumPy backend. It trains for real (the example's step: batch,
forward, backward, gradient clipping, Adam), so Adam's moments are those of a run.

Each round (``--repeats`` of them, after ``--warmup`` untimed) does, in this order:

1. one training step, timed;
2. every write below once, in a shuffled order, each after an untimed ``os.sync()`` so that none
   pays for another's dirty pages (a training run writes nothing else between two checkpoints):

       checkpoint.save          cudnn_rnn.checkpoint.save: the LSTM as a layer, Adam, the readout's two
                                arrays as ``arrays``, and a state dict (step, a NumPy Generator's
                                bit_generator.state, a list of 400 float losses); atomic and fsync'ed
       CheckpointManager.save   the same through a manager (keep=3): what the example calls
       np.savez                 the same arrays (LSTM params, Adam's two moment lists, the readout's
                                two arrays) to a path: not atomic, no fsync
       np.savez + fsync         np.savez into cudnn_rnn.files.atomic_write: as durable as ours

   and, to show where checkpoint.save's time goes, its parts on the same data:

       gather + JSON            state_dict()s, flattening the tree to named arrays, json.dumps
       encode                   checkpoint._container.encode: the safetensors header and SHA-256
       SHA-256                  hashlib.sha256 over the same bytes alone
       write_bytes              cudnn_rnn.files.write_bytes of encode's chunks (partial file, write,
                                fsync, os.replace, fsync of the folder)
       stages of that write     the same steps timed one by one: write (mkstemp, write, close),
                                fsync of the file, os.replace, fsync of the folder
3. the reads, in a shuffled order: ``checkpoint.load`` alone, ``checkpoint.load`` + ``restore`` into
   the model, ``CheckpointManager.latest`` + ``restore``, and ``np.load`` of the .npz with every
   array copied into the model (the file just written: the page cache serves all of them).

Reported: median and min (ms) over the rounds; ratios to np.savez (or np.load) of the medians;
file sizes; the two fsyncs together, and checkpoint.save less them, as medians over rounds of
the per-round sum and difference (the fsyncs being those of the staged write of the same round).
Per training step: the manager's median save time / (``--interval`` x the median step time), the
share of the run that a checkpoint every ``--interval`` steps costs (the example saves every 50
steps by default, ``--checkpoint-every``).

Targets: checkpoint.save <= 1.3 x np.savez (medians); checkpoint overhead < 2% per step.
The checkpoints go to a new temporary folder under ``--folder`` (default: runs/ in this checkout,
the file system a training run writes to), removed at the end.

Usage: python benchmarks/bench_checkpoint.py [--repeats N] [--warmup N] [--interval K] [--folder DIR]
       [--quick] [--record]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLES = REPO / "examples"
# this folder's _bench_configs, a checkout without installing, and the example (it imports _common by name)
sys.path[:0] = [str(HERE), str(REPO), str(EXAMPLES)]

import train_char_lm as char_lm  # noqa: E402
from _bench_configs import RESULTS, write_record  # noqa: E402

import cudnn_rnn  # noqa: E402
from cudnn_rnn import checkpoint  # noqa: E402
from cudnn_rnn.checkpoint import _container  # noqa: E402
from cudnn_rnn.checkpoint._tree import flatten  # noqa: E402
from cudnn_rnn.files import atomic_write, write_bytes  # noqa: E402
from cudnn_rnn.optim import Adam, clip_grad_norm  # noqa: E402

SAVE_TARGET = 1.3  # checkpoint.save / np.savez, medians
STEP_TARGET = 2.0  # percent of the training time spent saving, at the default interval
DEFAULT_INTERVAL = 50  # the example's --checkpoint-every for the full run
LOSSES = 400  # floats in the state's loss list (the example's full run is 400 steps)
KEEP = 3  # the example keeps the newest 3


# ---- the model and its training step ------------------------------------------------------------
@dataclass
class Run:
    """The example's model, optimiser and data, and the caller state a checkpoint carries."""

    model: Any  # char_lm.CharModel
    optimiser: Adam
    settings: Any  # char_lm.Settings
    train_ids: np.ndarray
    rng: np.random.Generator
    step: int = 0
    losses: list[float] = field(default_factory=list)

    def parts(self) -> dict[str, Any]:
        """What checkpoint.save takes: the layer, the optimiser, the readout arrays and the state dict."""
        return dict(layers={"lstm": self.model.lstm}, optimizers={"adam": self.optimiser},
                    arrays={"readout_weight": self.model.readout.weight, "readout_bias": self.model.readout.bias},
                    state={"step": self.step, "rng": self.rng.bit_generator.state, "losses": self.losses})

    def arrays(self) -> dict[str, np.ndarray]:
        """The same arrays by name, for np.savez (and the targets np.load's arrays are copied into)."""
        named = {"lstm_params": self.model.lstm.params, "readout_weight": self.model.readout.weight,
                 "readout_bias": self.model.readout.bias}
        for kind in ("first_moment", "second_moment"):
            named.update({f"adam_{kind}_{k}": array for k, array in enumerate(getattr(self.optimiser, kind))})
        return named


def make_run(seed: int = 0) -> Run:
    """The full char-LM configuration on NumPy, as examples/train_char_lm.py builds it."""
    settings = char_lm.SETTINGS["full"]
    vocab, train_ids, _ = char_lm.load_corpus()
    model = char_lm.CharModel(vocab, settings, np, seed)
    optimiser = Adam(model.params, lr=settings.lr)
    # a state list of the full run's length, full-precision floats as a real loss curve has
    losses = np.random.default_rng(seed + 2).uniform(1.5, 4.2, LOSSES).tolist()
    return Run(model, optimiser, settings, train_ids, np.random.default_rng(seed), losses=losses)


def train_step(run: Run) -> float:
    """One training step of the example (single process): batch, forward, backward, clipping, Adam."""
    s, model = run.settings, run.model
    starts = run.rng.integers(0, len(run.train_ids) - s.seq_len - 1, s.batch)
    batch = np.stack([run.train_ids[i:i + s.seq_len + 1] for i in starts])
    model.lstm.zero_grad()
    model.readout.zero_grad()
    loss = model.loss(batch, training=True)
    clip_grad_norm(model.grads, char_lm.MAX_GRAD_NORM)
    run.optimiser.step(model.grads)
    run.step += 1
    return loss


# ---- what is timed ------------------------------------------------------------------------------
def gather(run: Run) -> tuple[dict[str, np.ndarray], str]:
    """checkpoint.save's first part: the contents tree, flattened to named arrays and a JSON text."""
    parts = run.parts()
    contents = {"step": run.step, "layers": {name: layer.state_dict() for name, layer in parts["layers"].items()},
                "optimizers": {name: opt.state_dict() for name, opt in parts["optimizers"].items()},
                "arrays": dict(parts["arrays"]), "state": dict(parts["state"])}
    tree, tensors = flatten(contents)
    return tensors, json.dumps(tree, separators=(",", ":"))


def sha256_alone(chunks: list[Any]) -> str:
    """The SHA-256 of the file's bytes, nothing else (encode hashes them once, too)."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def staged_write(path: Path, chunks: list[Any], stages: dict[str, list[float]]) -> None:
    """files.write_bytes' steps one by one, each stage's milliseconds appended to ``stages``."""
    folder = os.fspath(path.parent)
    start = time.perf_counter()
    descriptor, partial = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".partial")
    with os.fdopen(descriptor, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
        handle.flush()
        wrote = time.perf_counter()
        os.fsync(handle.fileno())
        synced = time.perf_counter()
    os.replace(partial, path)
    renamed = time.perf_counter()
    folder_descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder_descriptor)
    finally:
        os.close(folder_descriptor)
    done = time.perf_counter()
    for name, begin, end in (("write", start, wrote), ("fsync file", wrote, synced), ("os.replace", synced, renamed),
                             ("fsync folder", renamed, done)):
        stages[name].append(1e3 * (end - begin))


def savez_fsync(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez made as durable as a checkpoint: through files.atomic_write (partial file, fsyncs, rename)."""
    with atomic_write(path) as handle:
        np.savez(handle, **arrays)


def npz_into(path: Path, targets: dict[str, np.ndarray]) -> None:
    """np.load the .npz and copy every array into the model's own (what restore does for ours)."""
    with np.load(path) as saved:
        for name, target in targets.items():
            np.copyto(target, saved[name])


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return 1e3 * (time.perf_counter() - start)


#: each write's file in the temporary folder (``manager`` is the CheckpointManager's folder)
FILE_NAMES: dict[str, str] = {"ours": "checkpoint.safetensors", "npz": "arrays.npz", "npz_fsync": "arrays_fsync.npz",
                              "parts": "parts.safetensors", "staged": "staged.safetensors", "manager": "managed"}

#: kind of write -> its path
Files = dict[str, Path]


def files_in(folder: Path) -> Files:
    return {kind: folder / name for kind, name in FILE_NAMES.items()}


def write_calls(run: Run, files: Files, manager: checkpoint.CheckpointManager, step: int,
                stages: dict[str, list[float]]) -> dict[str, Callable[[], Any]]:
    """The writes of one round, by name (the parts of checkpoint.save work on this round's state)."""
    tensors, text = gather(run)
    chunks = _container.encode(tensors, text)
    return {
        "checkpoint.save": lambda: checkpoint.save(files["ours"], **run.parts()),
        "CheckpointManager.save": lambda: manager.save(step, **run.parts()),
        "np.savez": lambda: np.savez(files["npz"], **run.arrays()),
        "np.savez + fsync": lambda: savez_fsync(files["npz_fsync"], run.arrays()),
        "gather + JSON": lambda: gather(run),
        "encode": lambda: _container.encode(tensors, text),
        "SHA-256": lambda: sha256_alone(chunks),
        "write_bytes": lambda: write_bytes(files["parts"], chunks),
        "staged write": lambda: staged_write(files["staged"], chunks, stages),
    }


def read_calls(run: Run, files: Files, manager: checkpoint.CheckpointManager) -> dict[str, Callable[[], Any]]:
    """The reads of one round, by name; the restores copy into the model (the same values it holds)."""
    model = {name: part for name, part in run.parts().items() if name != "state"}
    targets = run.arrays()
    return {
        "checkpoint.load": lambda: checkpoint.load(files["ours"]),
        "checkpoint.load + restore": lambda: checkpoint.load(files["ours"]).restore(**model),
        "CheckpointManager.latest + restore": lambda: manager.latest().restore(**model),
        "np.load + copy": lambda: npz_into(files["npz"], targets),
    }


def measure(run: Run, files: Files, rounds: int, warmup: int, interval: int) -> dict[str, list[float]]:
    """Milliseconds of every timed call, one entry per round (the order of writes and reads shuffled each round)."""
    manager = checkpoint.CheckpointManager(files["manager"], keep=KEEP)
    times: dict[str, list[float]] = {}
    order = random.Random(0)
    for round_number in range(warmup + rounds):
        measured: dict[str, float] = {"training step": timed(lambda: train_step(run))}
        stages: dict[str, list[float]] = {"write": [], "fsync file": [], "os.replace": [], "fsync folder": []}
        writes = write_calls(run, files, manager, interval * (round_number + 1), stages)
        for name in order.sample(list(writes), len(writes)):
            os.sync()  # untimed: no write pays for the dirty pages of the one before
            measured[name] = timed(writes[name])
        measured.update({name: values[0] for name, values in stages.items()})
        reads = read_calls(run, files, manager)
        for name in order.sample(list(reads), len(reads)):
            measured[name] = timed(reads[name])
        if round_number >= warmup:
            for name, value in measured.items():
                times.setdefault(name, []).append(value)
    check_same_contents(run, files)
    return times


def check_same_contents(run: Run, files: Files) -> None:
    """Both files of the last round hold the model's arrays exactly, and ours the state."""
    found = checkpoint.load(files["ours"])
    saved = {"lstm_params": found.layers["lstm"]["params"], "readout_weight": found.arrays["readout_weight"],
             "readout_bias": found.arrays["readout_bias"]}
    for kind in ("first_moment", "second_moment"):
        saved.update({f"adam_{kind}_{k}": a for k, a in enumerate(found.optimizers["adam"][kind])})
    with np.load(files["npz"]) as npz:
        for name, array in run.arrays().items():
            if not (np.array_equal(saved[name], array) and np.array_equal(npz[name], array)):
                raise AssertionError(f"{name}: a saved copy differs from the model's array")
    if found.state["step"] != run.step or found.state["losses"] != run.losses:
        raise AssertionError("the checkpoint's state differs from the run's")
    if found.optimizers["adam"]["steps"] < 1:
        raise AssertionError("Adam has not stepped: its moments would be zeros")


# ---- report ------------------------------------------------------------------------------------
def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(values), "min_ms": min(values)}


def paired_median(times: dict[str, list[float]], plus: list[str], minus: list[str]) -> float:
    """The median over rounds of sum(plus) - sum(minus) in the same round."""
    return statistics.median(sum(times[n][i] for n in plus) - sum(times[n][i] for n in minus)
                             for i in range(len(times[plus[0]])))


def filesystem(path: Path) -> dict[str, str]:
    """The mount (device, mount point, type) that ``path`` lies on, from /proc/mounts (Linux)."""
    best, longest = {"device": "?", "mount_point": "?", "type": "?"}, -1
    real = os.path.realpath(path)
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount_point, kind = line.split()[:3]
            inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) > longest:
                best, longest = {"device": device, "mount_point": mount_point, "type": kind}, len(mount_point)
    return best


def report(times: dict[str, list[float]], files: Files, interval: int) -> dict[str, Any]:
    """Print the table; return the numbers for the record."""
    stats = {name: summary(values) for name, values in times.items()}
    sizes = {"checkpoint.save": files["ours"].stat().st_size, "np.savez": files["npz"].stat().st_size,
             "np.savez + fsync": files["npz_fsync"].stat().st_size}
    sizes["CheckpointManager.save"] = sizes["checkpoint.save"]
    savez = stats["np.savez"]["median_ms"]
    npload = stats["np.load + copy"]["median_ms"]

    def line(label: str, name: str | None = None, base: float | None = None, value: float | None = None) -> None:
        median = stats[name]["median_ms"] if name else value
        minimum = f"{stats[name]['min_ms']:8.2f}" if name else " " * 8
        ratio = f"{median / base:7.2f}x" if base else " " * 8
        size = f"{sizes[name] / 1024:9.1f}" if name in sizes else " " * 9
        print(f"{label:44s} {median:9.2f} {minimum} {ratio} {size}")

    header = f"{'':44s} {'median ms':>9s} {'min ms':>8s} {'ratio':>8s} {'file KiB':>9s}"
    rounds = len(times["training step"])
    print(f"\n{rounds} rounds; ratio = median / median of np.savez (writes) or np.load + copy (reads)\n")
    print(header)
    print("-" * len(header))
    print("write")
    for name in ("checkpoint.save", "CheckpointManager.save", "np.savez", "np.savez + fsync"):
        line("  " + name, name, savez)
    print("where checkpoint.save's time goes")
    line("  gather + JSON (state_dicts, flatten)", "gather + JSON", savez)
    line("  encode (header + SHA-256)", "encode", savez)
    line("    of which SHA-256 alone", "SHA-256", savez)
    line("  files.write_bytes (write + fsyncs + rename)", "write_bytes", savez)
    for stage in ("write", "fsync file", "os.replace", "fsync folder"):
        line(f"    {stage}", stage, savez)
    fsyncs = paired_median(times, ["fsync file", "fsync folder"], [])
    line("  fsync file + fsync folder", None, savez, fsyncs)
    without = paired_median(times, ["checkpoint.save"], ["fsync file", "fsync folder"])
    line("  checkpoint.save less those (same round)", None, savez, without)
    print("read")
    for name in ("checkpoint.load", "checkpoint.load + restore", "CheckpointManager.latest + restore",
                 "np.load + copy"):
        line("  " + name, name, npload)
    step_ms = stats["training step"]["median_ms"]
    save_ms = stats["CheckpointManager.save"]["median_ms"]
    overhead = 100 * save_ms / (interval * step_ms)
    print("training")
    line("  training step (full char-LM, NumPy)", "training step")
    print(f"  a CheckpointManager.save every {interval} steps: {save_ms:.2f} / ({interval} x {step_ms:.1f}) ms "
          f"= {overhead:.3f}% of the training time")
    save_ratio = stats["checkpoint.save"]["median_ms"] / savez
    save_ok, step_ok = save_ratio <= SAVE_TARGET, overhead < STEP_TARGET
    durable = stats["np.savez + fsync"]["median_ms"] / savez
    print(f"\ncheckpoint.save <= {SAVE_TARGET}x np.savez: {'met' if save_ok else 'NOT met'} ({save_ratio:.2f}x; "
          f"less its fsyncs {without / savez:.2f}x; against np.savez + fsync {save_ratio / durable:.2f}x)\n"
          f"checkpoint overhead < {STEP_TARGET}% per step, one every {interval} steps: "
          f"{'met' if step_ok else 'NOT met'} ({overhead:.3f}%)")
    return dict(stats=stats, sizes_bytes=sizes, save_ratio=save_ratio, save_ratio_without_fsyncs=without / savez,
                save_ratio_to_savez_fsync=save_ratio / durable,
                fsyncs_median_ms=fsyncs, save_without_fsyncs_median_ms=without, step_overhead_percent=overhead,
                save_target_met=save_ok, step_target_met=step_ok, times_ms=times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 30, 5 with --quick)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--interval", type=int, default=DEFAULT_INTERVAL,
                        help=f"training steps between two checkpoints (default {DEFAULT_INTERVAL}, the example's)")
    parser.add_argument("--folder", type=Path, default=REPO / "runs",
                        help="where the temporary folder of checkpoints is made (default: runs/ in this checkout)")
    parser.add_argument("--quick", action="store_true", help="few rounds (a smoke test)")
    parser.add_argument("--record", action="store_true", help=f"write a JSON record to {RESULTS}")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (5 if args.quick else 30)
    if repeats < 1 or args.warmup < 0 or args.interval < 1:
        parser.error(f"--repeats and --interval must be >= 1 and --warmup >= 0; got {repeats}, {args.interval} "
                     f"and {args.warmup}")
    made_parent = not args.folder.exists()
    args.folder.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="bench_checkpoint-", dir=args.folder))
    mount = filesystem(folder)
    run = make_run()
    s = run.settings
    environment = dict(machine=platform.machine(), processor=platform.processor() or platform.platform(),
                       cores=os.cpu_count(), load_average=os.getloadavg(), numpy=np.__version__,
                       cudnn_rnn=cudnn_rnn.__version__, python=platform.python_version(), filesystem=mount)
    print(f"char-LM full: {run.model.lstm!r} + dense {s.num_units} -> {len(run.model.vocab)}, Adam, batch "
          f"{s.batch} x {s.seq_len}; NumPy {np.__version__}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"checkpoints in {folder} ({mount['type']} on {mount['device']}); each write after an untimed os.sync()")
    try:
        times = measure(run, files_in(folder), repeats, args.warmup, args.interval)
        results = report(times, files_in(folder), args.interval)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if made_parent:
            with contextlib.suppress(OSError):
                args.folder.rmdir()  # only if this run made it and it is empty again
    if args.record:
        record = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"), environment=environment,
                      model=dict(settings=asdict(s), vocab=len(run.model.vocab), lstm=repr(run.model.lstm),
                                 adam_steps=run.optimiser.steps, losses_in_state=LOSSES),
                      repeats=repeats, warmup=args.warmup, interval=args.interval, keep=KEEP,
                      targets=dict(save_ratio=SAVE_TARGET, step_overhead_percent=STEP_TARGET), **results)
        write_record("checkpoint", record, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
