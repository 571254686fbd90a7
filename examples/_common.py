"""Plumbing shared by the examples: command-line flags, backend choice, checkpoints and resuming,
a progress bar, a dense softmax readout, and the loss plot. Not part of the cudnn_rnn API.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import types
from pathlib import Path
from typing import Any, Sequence, TextIO

import numpy as np

from cudnn_rnn.checkpoint import Checkpoint, CheckpointManager
from cudnn_rnn.files import atomic_write, write_bytes

Array = Any

#: checkpoints kept in OUT/checkpoints
KEEP_CHECKPOINTS = 3

REPO_ROOT = Path(__file__).resolve().parent.parent


# ---- the char-LM data -------------------------------------------------------------------------
#: the text the char-LM examples learn
CHAR_CORPUS = Path(__file__).resolve().parent / "data" / "almanac.txt"


def load_char_corpus(dtype: Any = np.int32) -> tuple[str, np.ndarray, np.ndarray]:
    """(vocabulary, train ids, validation ids) of :data:`CHAR_CORPUS`: the first 90% trains, the last 10% validates."""
    text = CHAR_CORPUS.read_text(encoding="utf-8")
    vocab = "".join(sorted(set(text)))
    lookup = np.zeros(256, dtype=dtype)
    lookup[np.frombuffer(vocab.encode("ascii"), dtype=np.uint8)] = np.arange(len(vocab))
    ids = lookup[np.frombuffer(text.encode("ascii"), dtype=np.uint8)]
    split = int(0.9 * len(ids))
    return vocab, ids[:split], ids[split:]


def validation_windows(ids: np.ndarray, seq_len: int, count: int) -> np.ndarray:
    """``count`` non-overlapping [count, seq_len + 1] windows spread over the validation text."""
    starts = np.linspace(0, len(ids) - seq_len - 1, count).astype(int)
    return np.stack([ids[i:i + seq_len + 1] for i in starts])


# ---- command line ------------------------------------------------------------------------------
def example_parser(name: str, description: str, default_steps: int, quick_steps: int) -> argparse.ArgumentParser:
    """The flags every example takes: --quick, --steps, --seed, --out, --backend."""
    parser = argparse.ArgumentParser(prog=f"{name}.py", description=description)
    parser.add_argument("--quick", action="store_true",
                        help=f"a small, fast run for tests ({quick_steps} steps unless --steps is given)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"training steps (default {default_steps}, or {quick_steps} with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, the initialisation and dropout")
    parser.add_argument("--out", type=Path, default=Path("runs") / name,
                        help=f"folder for the plot and checkpoint (default runs/{name})")
    parser.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto",
                        help="numpy (reference, CPU), cupy (cuDNN, GPU), or auto: cupy when a GPU works")
    parser.set_defaults(default_steps=default_steps, quick_steps=quick_steps)
    return parser


def add_checkpoint_arguments(parser: argparse.ArgumentParser, default_every: int, quick_every: int) -> None:
    """--checkpoint-every K and --resume: checkpoints in OUT/checkpoints, and continuing from the newest."""
    parser.add_argument("--checkpoint-every", type=int, default=None, metavar="K",
                        help=f"save a checkpoint into OUT/checkpoints every K steps and at the end (default "
                             f"{default_every}, or {quick_every} with --quick; 0: never); the newest "
                             f"{KEEP_CHECKPOINTS} are kept")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest good checkpoint in OUT/checkpoints, exactly where that run "
                             "was (start at step 1 if there is none)")
    parser.set_defaults(default_checkpoint_every=default_every, quick_checkpoint_every=quick_every)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse, fill in the number of steps and the checkpoint interval, and check them."""
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = args.quick_steps if args.quick else args.default_steps
    if args.steps < 1:
        parser.error(f"--steps must be >= 1; got {args.steps}")
    if hasattr(args, "checkpoint_every"):
        if args.checkpoint_every is None:
            args.checkpoint_every = args.quick_checkpoint_every if args.quick else args.default_checkpoint_every
        if args.checkpoint_every < 0:
            parser.error(f"--checkpoint-every must be >= 0; got {args.checkpoint_every}")
    return args


# ---- checkpoints -------------------------------------------------------------------------------
class Checkpoints:
    """An example's checkpoints: OUT/checkpoints, one every K steps and one at the end, the newest kept.

    ``parts`` are what :func:`cudnn_rnn.checkpoint.save` takes besides the state (layers,
    optimizers, arrays); ``run`` identifies the run (model sizes, seed, ...): a checkpoint of
    another run is refused rather than silently mixed in.
    """

    def __init__(self, args: argparse.Namespace, run: dict[str, Any], comm: Any = None, **parts: Any) -> None:
        self.manager = CheckpointManager(args.out / "checkpoints", keep=KEEP_CHECKPOINTS, comm=comm)
        self.every, self.last_step, self.run, self.parts = args.checkpoint_every, args.steps, run, parts

    def resume(self) -> Checkpoint | None:
        """Restore the newest good checkpoint into the parts (None, and nothing changed, if there is none).

        Every layer keeps its own dropout seed (under mpiexec each process draws its own masks);
        single-process, that is the seed the checkpoint was written with.
        """
        found = self.manager.latest()
        if found is None:
            print(f"resume: no checkpoint in {self.manager.directory}; starting at step 1")
            return None
        saved_run = found.state.get("run")
        if saved_run != self.run:
            raise SystemExit(f"resume: {found.path} is a checkpoint of another run ({saved_run}); this run is "
                             f"{self.run}: use another --out, or the settings it was made with")
        found.restore(**self.parts, keep_seeds=True)
        print(f"resumed from {found.path} (step {found.step})")
        return found

    def after_step(self, step: int, state: dict[str, Any]) -> None:
        """Save the checkpoint of ``step`` when it is due (every K steps, and the last step)."""
        if self.every and (step % self.every == 0 or step == self.last_step):
            self.manager.save(step, **self.parts, state={"run": self.run, **state})


# ---- backend -----------------------------------------------------------------------------------
def select_backend(choice: str = "auto") -> types.ModuleType:
    """The array module to run on: numpy, or cupy when it imports, sees a GPU and cuDNN runs.

    ``"cupy"`` insists (and raises when the GPU path fails); ``"auto"`` falls back to numpy.
    """
    if choice == "numpy":
        return np
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        _smoke_test(cupy)
        return cupy
    except Exception as error:  # ImportError, CUDA/cuDNN missing: all mean "no GPU path here"
        if choice == "cupy":
            raise
        print(f"[backend] using NumPy (reference backend on the CPU): no working CuPy + cuDNN ({error})")
        return np


def _smoke_test(cupy: types.ModuleType) -> None:
    """One tiny GRU forward on the GPU, so a missing cuDNN shows up before training starts."""
    import cudnn_rnn

    size = cudnn_rnn.cudnn_rnn_params_size(1, 2, 2, rnn_mode="gru")
    cudnn_rnn.cudnn_rnn_v3(cupy.zeros((1, 1, 2), np.float32), cupy.zeros((1, 1, 2), np.float32), None,
                           cupy.zeros(size, np.float32), rnn_mode="gru", is_training=False)


def describe_backend(xp: types.ModuleType) -> str:
    if xp is np:
        from cudnn_rnn import cpu

        return f"NumPy reference backend (CPU; {cpu.cells_in_use()} cells)"
    device = xp.cuda.Device()
    name = xp.cuda.runtime.getDeviceProperties(device.id)["name"]
    return f"CuPy + cuDNN on GPU {device.id} ({name.decode() if isinstance(name, bytes) else name})"


def array_module_of(array: Array) -> types.ModuleType:
    """numpy or cupy, whichever ``array`` belongs to."""
    if isinstance(array, np.ndarray):
        return np
    import cupy

    return cupy


def to_host(array: Array) -> np.ndarray:
    """A NumPy copy of a NumPy or CuPy array."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


# ---- progress bar ------------------------------------------------------------------------------
class ProgressBar:
    """A one-line progress bar: ``step 40/200 [#####-----] loss 2.31  val 2.40 (step 40)  5,120 chars/s  eta 12s``.

    A value given as ``(value, step)`` is shown with the step it was measured at (a validation loss
    measured every K steps). The rate and the ETA leave out the first step this process runs, which
    pays for compiling (numba on the CPU, cuDNN plans on the GPU): its line says ``eta ...``. On a
    terminal the bar redraws in place; otherwise (logs, tests) it prints a line about every tenth of
    the run.
    """

    def __init__(self, total: int, unit: str, width: int = 24, stream: TextIO | None = None, first: int = 1) -> None:
        self.total, self.unit, self.width = total, unit, width
        self.stream = stream or sys.stdout
        self.interactive = self.stream.isatty()
        self.start = time.perf_counter()
        self.count = 0
        self.first = first  # the first step this process runs (a resumed run starts later)
        self._after_first: tuple[float, int] | None = None  # (time, count) when the first step ended
        self._next_line = 0

    def update(self, step: int, items: int, **values: float | tuple[float, int]) -> None:
        """Record that ``step`` (1-based) finished after ``items`` more units (chars, sequences)."""
        self.count += items
        now = time.perf_counter()
        if self._after_first is None:
            self._after_first = (now, self.count)
        if not self.interactive and step < self._next_line and step != self.total:
            return
        self._next_line = step + max(1, self.total // 10)
        filled = round(self.width * step / self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        shown = "  ".join(f"{name} {value[0]:.3f} (step {value[1]})" if isinstance(value, tuple)
                          else f"{name} {value:.3f}" for name, value in values.items())
        since, counted = self._after_first
        if step > self.first:  # the steps after the first: their own rate
            seconds = max(now - since, 1e-9)
            rate, eta = (self.count - counted) / seconds, f"{seconds / (step - self.first) * (self.total - step):.0f}s"
        else:
            rate, eta = self.count / max(now - self.start, 1e-9), "..."
        line = (f"step {step:>{len(str(self.total))}}/{self.total} [{bar}] {shown}  "
                f"{rate:,.0f} {self.unit}/s  eta {eta}")
        self.stream.write(("\r" + line) if self.interactive else line + "\n")
        self.stream.flush()

    def close(self) -> float:
        """End the bar; returns the throughput in units per second."""
        if self.interactive:
            self.stream.write("\n")
        return self.count / max(time.perf_counter() - self.start, 1e-9)


# ---- a dense softmax readout -----------------------------------------------------------------
class Dense:
    """``logits = x @ weight + bias`` with weight [in, out] (Glorot-uniform) and bias [out] (zero).

    ``params`` and ``grads`` are lists ready for the optimisers; :meth:`backward` ADDS into grads.
    """

    def __init__(self, in_features: int, out_features: int, xp: types.ModuleType, dtype: object,
                 rng: np.random.Generator) -> None:
        limit = math.sqrt(6.0 / (in_features + out_features))
        self.weight = xp.asarray(rng.uniform(-limit, limit, (in_features, out_features)).astype(dtype))
        self.bias = xp.zeros(out_features, dtype=dtype)
        self.params = [self.weight, self.bias]
        self.grads = [xp.zeros_like(self.weight), xp.zeros_like(self.bias)]
        self._x: Array | None = None

    def forward(self, x: Array) -> Array:
        """x [M, in] -> logits [M, out]; keeps x for backward."""
        self._x = x
        return x @ self.weight + self.bias

    def backward(self, d_logits: Array) -> Array:
        """d_logits [M, out] -> dx [M, in]; grads += (x^T d_logits, sum_M d_logits)."""
        self.grads[0] += self._x.T @ d_logits
        self.grads[1] += d_logits.sum(axis=0)
        return d_logits @ self.weight.T

    def zero_grad(self) -> None:
        for grad in self.grads:
            grad[...] = 0


def softmax_cross_entropy(logits: Array, targets: Array, weights: Array | None = None) -> tuple[float, Array]:
    """Mean cross-entropy of integer ``targets`` [M] under ``logits`` [M, C], and d loss / d logits.

    ``weights`` [M] (0 or 1) leaves rows out (padding); the mean is over the rows kept.
    loss = -sum_m w_m log softmax(logits_m)[t_m] / sum_m w_m.
    """
    xp = array_module_of(logits)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_z = xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    log_probs = shifted - log_z
    rows = xp.arange(logits.shape[0])
    w = xp.ones(logits.shape[0], dtype=logits.dtype) if weights is None else weights.astype(logits.dtype)
    total = float(w.sum())
    loss = -float((log_probs[rows, targets] * w).sum()) / total
    d_logits = xp.exp(log_probs)
    d_logits[rows, targets] -= 1.0
    d_logits *= (w / total)[:, None]
    return loss, d_logits


# ---- plots -------------------------------------------------------------------------------------
def write_json(path: Path, values: dict[str, Any]) -> None:
    """``values`` as indented JSON at ``path``, written atomically."""
    write_bytes(path, (json.dumps(values, indent=2) + "\n").encode())


def write_npz(path: Path, **arrays: Array) -> None:
    """``np.savez`` of ``arrays`` (NumPy or CuPy) at ``path``, written atomically."""
    with atomic_write(path) as handle:
        np.savez(handle, **{name: to_host(array) for name, array in arrays.items()})


def save_loss_plot(path: Path, curves: dict[str, tuple[Sequence[float], Sequence[float]]], title: str,
                   ylabel: str = "loss (nats)") -> Path:
    """Plot each curve ``name -> (steps, values)`` into a PNG at ``path`` (matplotlib, Agg backend; atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
    for name, (steps, values) in curves.items():
        axes.plot(steps, values, label=name, marker="o" if len(steps) < 30 else None)
    axes.set_xlabel("training step")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as handle:
        figure.savefig(handle, format="png")
    plt.close(figure)
    return path
