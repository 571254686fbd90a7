"""Classify variable-length sequences with a bidirectional GRU, using sequence lengths.

Synthetic task (3 classes): a sequence of length 1..16 is drawn for class c; each step carries a
symbol, which is c with probability 0.6 and each other symbol with probability 0.2, plus two
channels of noise. The label is c, so the best possible rule is "the most frequent symbol", and
short sequences (length 1 and 2 are always present) are genuinely ambiguous. Positions past a
sequence's length hold random garbage, which only the lengths tell the model to ignore::

    x [B, T, 5] (batch-major), lengths [B] --bidirectional GRU(5 -> 32)--> h [B, 2, 32]
    features = h.reshape(B, 64) (the forward state after each sequence's own last step and the
               reverse state after step 0) --dense--> logits [B, 3] --> cross-entropy

Prints "held-out accuracy: X (chance Y)", compared with the best possible rule and with the same
model run without lengths; writes loss_curve.png, gru.npz, metrics.json and checkpoints/ (the whole
training state every 100 steps, 20 with --quick, and at the end) into --out (default
runs/classify_variable_length). A killed run continues exactly where it stopped with --resume.

    python examples/classify_variable_length.py [--quick] [--steps N] [--seed S] [--out DIR]
                                                [--checkpoint-every K] [--resume]
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np

import _common
from cudnn_rnn.layers import GRU
from cudnn_rnn.optim import Adam, clip_grad_norm

NUM_CLASSES = 3
NOISE_CHANNELS = 2
INPUT_SIZE = NUM_CLASSES + NOISE_CHANNELS
MAX_LEN = 16
P_OWN_SYMBOL = 0.6
NUM_UNITS = 32
BATCH = 64
LR = 1e-2
TRAIN_SIZE = 4096
TEST_SIZE = 1200
#: length buckets reported separately
BUCKETS: tuple[tuple[int, int], ...] = ((1, 2), (3, 6), (7, MAX_LEN))


@dataclass(frozen=True)
class Dataset:
    """x [B, MAX_LEN, INPUT_SIZE] float32, lengths [B] int32, labels [B] int64, symbols [B, MAX_LEN]."""

    x: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    symbols: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: np.ndarray) -> "Dataset":
        return Dataset(self.x[index], self.lengths[index], self.labels[index], self.symbols[index])


def make_dataset(size: int, rng: np.random.Generator) -> Dataset:
    """``size`` sequences; lengths uniform in [1, MAX_LEN], and the first two have lengths 1 and 2."""
    labels = rng.integers(0, NUM_CLASSES, size)
    lengths = rng.integers(1, MAX_LEN + 1, size).astype(np.int32)
    lengths[:2] = (1, 2)
    own = rng.random((size, MAX_LEN)) < P_OWN_SYMBOL
    other = (labels[:, None] + rng.integers(1, NUM_CLASSES, (size, MAX_LEN))) % NUM_CLASSES
    symbols = np.where(own, labels[:, None], other)
    padding = np.arange(MAX_LEN)[None, :] >= lengths[:, None]
    symbols[padding] = rng.integers(0, NUM_CLASSES, int(padding.sum()))  # garbage past the end
    x = np.concatenate([np.eye(NUM_CLASSES)[symbols], rng.normal(0, 1, (size, MAX_LEN, NOISE_CHANNELS))], axis=2)
    return Dataset(x.astype(np.float32), lengths, labels, symbols)


def best_possible_accuracy(data: Dataset, rng: np.random.Generator) -> float:
    """Accuracy of the Bayes rule for this generator: the most frequent valid symbol (ties at random)."""
    valid = np.arange(MAX_LEN)[None, :] < data.lengths[:, None]
    counts = np.stack([((data.symbols == k) & valid).sum(axis=1) for k in range(NUM_CLASSES)], axis=1)
    scores = counts + rng.random(counts.shape) * 0.5  # random tie-break
    return float((scores.argmax(axis=1) == data.labels).mean())


class Classifier:
    """Bidirectional GRU over the sequence, dense softmax readout over both final states."""

    def __init__(self, xp, seed: int) -> None:
        self.xp = xp
        self.gru = GRU(INPUT_SIZE, NUM_UNITS, bidirectional=True, xp=xp, seed=seed)
        self.readout = _common.Dense(2 * NUM_UNITS, NUM_CLASSES, xp, "float32", np.random.default_rng(seed + 1))

    @property
    def params(self) -> list:
        return [self.gru.params, *self.readout.params]

    @property
    def grads(self) -> list:
        return [self.gru.grad, *self.readout.grads]

    def logits(self, data: Dataset, training: bool, use_lengths: bool = True):
        x = self.xp.asarray(data.x)
        _, h, _ = self.gru.forward(x, data.lengths if use_lengths else None, training=training)
        return self.readout.forward(h.reshape(len(data), 2 * NUM_UNITS))

    def train_step(self, batch: Dataset) -> float:
        self.gru.zero_grad()
        self.readout.zero_grad()
        logits = self.logits(batch, training=True)
        loss, d_logits = _common.softmax_cross_entropy(logits, self.xp.asarray(batch.labels))
        d_h = self.readout.backward(d_logits).reshape(len(batch), 2, NUM_UNITS)
        self.gru.backward(None, d_h)
        return loss

    def accuracy(self, data: Dataset, use_lengths: bool = True) -> np.ndarray:
        """Per-sequence correctness (bool [B]) with inference-mode forwards."""
        predicted = _common.to_host(self.logits(data, training=False, use_lengths=use_lengths).argmax(axis=1))
        return predicted == data.labels


def main(argv: list[str] | None = None) -> int:
    parser = _common.example_parser("classify_variable_length", __doc__.splitlines()[0], default_steps=400,
                                    quick_steps=80)
    _common.add_checkpoint_arguments(parser, default_every=100, quick_every=20)
    args = _common.parse_args(parser, argv)
    xp = _common.select_backend(args.backend)
    rng = np.random.default_rng(args.seed)
    train, test = make_dataset(TRAIN_SIZE, rng), make_dataset(TEST_SIZE, rng)
    model = Classifier(xp, args.seed)
    print(f"data: {len(train)} training and {len(test)} held-out sequences, lengths 1..{MAX_LEN}, "
          f"{NUM_CLASSES} classes")
    print(f"model: {model.gru!r} + dense {2 * NUM_UNITS} -> {NUM_CLASSES}")
    print(f"backend: {_common.describe_backend(xp)}")

    optimiser = Adam(model.params, lr=LR)
    checkpoints = _common.Checkpoints(args, dict(seed=args.seed, units=NUM_UNITS, batch=BATCH, lr=LR),
                                      layers={"gru": model.gru}, optimizers={"adam": optimiser},
                                      arrays={"readout/weight": model.readout.weight,
                                              "readout/bias": model.readout.bias})
    resumed = checkpoints.resume() if args.resume else None
    progress = dict(step=0, curve=[[], []], running=None, seconds=0.0)
    if resumed is not None:
        rng.bit_generator.state = resumed.state["rng"]
        progress = resumed.state["progress"]
    curve, running = progress["curve"], progress["running"]
    bar = _common.ProgressBar(args.steps, unit="seqs", first=progress["step"] + 1)
    started = time.perf_counter() - progress["seconds"]
    for step in range(progress["step"] + 1, args.steps + 1):
        batch = train.take(rng.integers(0, len(train), BATCH))
        loss = model.train_step(batch)
        clip_grad_norm(model.grads, 5.0)
        optimiser.step(model.grads)
        running = loss if running is None else 0.9 * running + 0.1 * loss
        curve[0].append(step)
        curve[1].append(loss)
        bar.update(step, BATCH, loss=running)
        progress = dict(step=step, curve=curve, running=running, seconds=time.perf_counter() - started)
        checkpoints.after_step(step, dict(progress=progress, rng=rng.bit_generator.state))
    bar.close()
    seconds = time.perf_counter() - started

    correct = model.accuracy(test)
    accuracy = float(correct.mean())
    without_lengths = float(model.accuracy(test, use_lengths=False).mean())
    best = best_possible_accuracy(test, np.random.default_rng(args.seed))
    chance = 1.0 / NUM_CLASSES
    by_bucket = {f"{lo}-{hi}": float(correct[(test.lengths >= lo) & (test.lengths <= hi)].mean())
                 for lo, hi in BUCKETS}

    args.out.mkdir(parents=True, exist_ok=True)
    plot = _common.save_loss_plot(args.out / "loss_curve.png", {"training batch": curve},
                                  "bidirectional GRU, variable-length classification")
    model.gru.save(args.out / "gru.npz")
    metrics = dict(accuracy=accuracy, chance=chance, best_possible=best, accuracy_without_lengths=without_lengths,
                   accuracy_by_length=by_bucket, steps=args.steps, seconds=seconds,
                   backend="numpy" if xp is np else "cupy")
    _common.write_json(args.out / "metrics.json", metrics)

    print(f"trained {args.steps} steps in {seconds:.1f}s")
    print("held-out accuracy by length: " + ", ".join(f"{k}: {v:.3f}" for k, v in by_bucket.items()))
    print(f"best possible accuracy (most frequent symbol): {best:.3f}")
    print(f"the same model ignoring sequence lengths: {without_lengths:.3f}")
    print(f"held-out accuracy: {accuracy:.3f} (chance {chance:.3f})")
    print(f"wrote {plot}, {args.out / 'gru.npz'}, {args.out / 'metrics.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
