"""Train a character-level LSTM language model with cudnn_rnn.

The model reads one character at a time (one-hot, V = vocabulary size) and predicts the next::

    x [B, T, V] --LSTM(V -> N, 2 layers, dropout)--> y [B, T, N] --dense--> logits [B*T, V]
    loss = mean cross-entropy of the next character (nats)

It trains on the first 90% of examples/data/almanac.txt with Adam and gradient clipping over
the LSTM's one flat params buffer plus the readout's two arrays, reports the loss on the last
10% before and after, prints text sampled from the model before and after training, and
writes into --out (default runs/train_char_lm):

    loss_curve.png       training and validation loss
    lstm.npz             the LSTM (cudnn_rnn.layers.LSTM.save: params + configuration)
    readout.npz          the dense readout and the vocabulary
    metrics.json         the numbers printed at the end
    checkpoints/         the whole training state every 50 steps (10 with --quick) and at the end,
                         the newest 3 kept (cudnn_rnn.checkpoint)

A run that was killed continues exactly where its newest checkpoint left it, and ends with the
same weights and losses, bit for bit, as a run that was never interrupted::

    python examples/train_char_lm.py --resume     # the same command, plus --resume

Runs on the NumPy reference backend anywhere (well under 2 minutes on 2 CPU cores), and on
CuPy + cuDNN when a GPU is present.

    python examples/train_char_lm.py            # the full run
    python examples/train_char_lm.py --quick    # a few seconds

Data-parallel (``--distributed``, see :mod:`cudnn_rnn.distributed`): every process draws the
same global batch, trains on its shard of it, and the gradients are averaged before the
optimiser step, so every process takes the step one process would take on the whole batch.
Rank 0 alone prints and writes files. With ``--dropout 0`` the loss curve is the
single-process one (dropout masks are drawn per process, so with dropout the runs differ by
chance, not in distribution)::

    mpiexec -n 2 python examples/train_char_lm.py --distributed

Under mpiexec rank 0 writes the checkpoints and, with --resume, reads the newest and sends it
to every process; each process keeps its own dropout seed, so a resumed job ends where an
uninterrupted job with the same number of processes ends.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import time
import types
from dataclasses import asdict, dataclass, replace

import numpy as np

import _common
from cudnn_rnn import distributed
from cudnn_rnn.layers import LSTM
from cudnn_rnn.optim import Adam, clip_grad_norm

CORPUS = _common.CHAR_CORPUS


@dataclass(frozen=True)
class Settings:
    """Model and run sizes."""

    num_units: int
    num_layers: int
    dropout: float
    seq_len: int
    batch: int
    lr: float
    eval_every: int
    val_sequences: int
    sample_chars: int


SETTINGS: dict[str, Settings] = {
    "full": Settings(num_units=128, num_layers=2, dropout=0.1, seq_len=64, batch=32, lr=4e-3, eval_every=50,
                     val_sequences=64, sample_chars=300),
    "quick": Settings(num_units=64, num_layers=2, dropout=0.1, seq_len=32, batch=16, lr=1e-2, eval_every=10,
                      val_sequences=24, sample_chars=80),
}

PROMPT = "The river "
MAX_GRAD_NORM = 5.0


class CharModel:
    """LSTM plus a dense softmax readout over the vocabulary."""

    def __init__(self, vocab: str, s: Settings, xp: types.ModuleType, seed: int) -> None:
        self.vocab, self.xp = vocab, xp
        self.index = {ch: i for i, ch in enumerate(vocab)}
        self.lstm = LSTM(len(vocab), s.num_units, s.num_layers, dropout=s.dropout, xp=xp, seed=seed)
        self.readout = _common.Dense(s.num_units, len(vocab), xp, "float32", np.random.default_rng(seed + 1))
        self.one_hot = xp.eye(len(vocab), dtype=np.float32)

    @property
    def params(self) -> list:
        return [self.lstm.params, *self.readout.params]

    @property
    def grads(self) -> list:
        return [self.lstm.grad, *self.readout.grads]

    def fuse_grads(self) -> None:
        """Keep every gradient in one buffer, so that averaging them over processes copies nothing."""
        self.lstm.grad, self.readout.grads[0], self.readout.grads[1] = distributed.fuse_arrays(self.grads)

    def loss(self, ids: np.ndarray, training: bool) -> float:
        """Mean next-character loss of ids [B, T+1]; with training, also fills the gradients."""
        xp = self.xp
        inputs, targets = xp.asarray(ids[:, :-1]), xp.asarray(ids[:, 1:])
        y, _, _ = self.lstm.forward(self.one_hot[inputs], training=training)
        b, t, n = y.shape
        logits = self.readout.forward(y.reshape(b * t, n))
        loss, d_logits = _common.softmax_cross_entropy(logits, targets.reshape(-1))
        if training:
            dy = self.readout.backward(d_logits).reshape(b, t, n)
            self.lstm.backward(dy)
        return loss

    def sample(self, prompt: str, length: int, rng: np.random.Generator, temperature: float = 0.7) -> str:
        """Continue ``prompt`` by ``length`` characters, drawing each from softmax(logits / temperature)."""
        xp = self.xp
        ids = xp.asarray([[self.index[ch] for ch in prompt]])
        y, h, c = self.lstm.forward(self.one_hot[ids], training=False)
        out = []
        for _ in range(length):
            logits = _common.to_host(self.readout.forward(y[:, -1])[0]).astype(np.float64) / temperature
            probs = np.exp(logits - logits.max())
            nxt = int(rng.choice(len(self.vocab), p=probs / probs.sum()))
            out.append(self.vocab[nxt])
            y, h, c = self.lstm.forward(self.one_hot[xp.asarray([[nxt]])], None, h, c, training=False)
        return prompt + "".join(out)


def show_sample(title: str, text: str) -> None:
    print(f"--- {title} ---\n{text}\n" + "-" * (len(title) + 8))


def main(argv: list[str] | None = None) -> int:
    parser = _common.example_parser("train_char_lm", __doc__.splitlines()[0], default_steps=400, quick_steps=40)
    _common.add_checkpoint_arguments(parser, default_every=50, quick_every=10)
    parser.add_argument("--distributed", action="store_true",
                        help="data-parallel over the processes mpiexec started (one process without mpiexec)")
    parser.add_argument("--dropout", type=float, default=None,
                        help="inter-layer dropout of the LSTM (default 0.1)")
    args = _common.parse_args(parser, argv)
    s = SETTINGS["quick" if args.quick else "full"]
    if args.dropout is not None:
        s = replace(s, dropout=args.dropout)
    comm = distributed.init() if args.distributed else distributed.Communicator()  # size 1: does nothing
    if s.batch % comm.size:
        parser.error(f"--distributed: the global batch of {s.batch} sequences must split evenly over "
                     f"{comm.size} processes; start a number of processes that divides {s.batch}")
    if comm.rank == 0:
        return train(args, s, comm)
    with contextlib.redirect_stdout(io.StringIO()):  # rank 0 alone prints and writes files
        return train(args, s, comm)


def train(args: argparse.Namespace, s: Settings, comm: distributed.Communicator) -> int:
    """Train, report and save (rank 0); every process takes the same steps on its shard of each batch."""
    lead = comm.rank == 0
    xp = _common.select_backend(args.backend)
    rng = np.random.default_rng(args.seed)  # the same global batches on every process

    vocab, train_ids, val_ids = _common.load_char_corpus()
    val_batch = _common.validation_windows(val_ids, s.seq_len, s.val_sequences)
    model = CharModel(vocab, s, xp, args.seed + comm.rank)  # the rank picks the dropout masks ...
    comm.broadcast(model.params)                            # ... and rank 0 the initial weights
    if args.distributed:
        model.fuse_grads()  # one buffer: the all-reduce below copies nothing
    print(f"corpus: {CORPUS.name}, {len(train_ids):,} training and {len(val_ids):,} validation characters, "
          f"vocabulary {len(vocab)}")
    print(f"model: {model.lstm!r} + dense {s.num_units} -> {len(vocab)}")
    print(f"backend: {_common.describe_backend(xp)}")
    if args.distributed:
        processes = f"{comm.size} process{'es' if comm.size > 1 else ''}"
        print(f"distributed: {processes} ({comm.backend}), each training on {s.batch // comm.size} "
              f"of every {s.batch} sequences")
    optimiser = Adam(model.params, lr=s.lr)
    run = dict(asdict(s), seed=args.seed, vocab_size=len(vocab))
    checkpoints = _common.Checkpoints(args, run, comm, layers={"lstm": model.lstm}, optimizers={"adam": optimiser},
                                      arrays={"readout/weight": model.readout.weight,
                                              "readout/bias": model.readout.bias})
    resumed = checkpoints.resume() if args.resume else None
    if resumed is None:
        if lead:
            show_sample("sample before training", model.sample(PROMPT, s.sample_chars,
                                                               np.random.default_rng(args.seed)))
        val_start = model.loss(val_batch, training=False) if lead else math.nan
        print(f"step 0: validation loss {val_start:.3f} (uniform guessing: {math.log(len(vocab)):.3f})")
        progress = dict(step=0, train_curve=[[], []], val_curve=[[0], [val_start]], running=None, seconds=0.0)
    else:
        rng.bit_generator.state = resumed.state["rng"]
        progress = resumed.state["progress"]
        val_start = progress["val_curve"][1][0]
        if resumed.state["processes"] != comm.size:
            print(f"note: the checkpoint was written by {resumed.state['processes']} process(es); continuing with "
                  f"{comm.size}, which trains on but not bit for bit as the original job would have")
    train_curve, val_curve = progress["train_curve"], progress["val_curve"]
    bar = _common.ProgressBar(args.steps, unit="chars", first=progress["step"] + 1)
    running = progress["running"]
    started = time.perf_counter() - progress["seconds"]
    for step in range(progress["step"] + 1, args.steps + 1):
        starts = rng.integers(0, len(train_ids) - s.seq_len - 1, s.batch)
        batch = np.stack([train_ids[i:i + s.seq_len + 1] for i in starts])
        model.lstm.zero_grad()
        model.readout.zero_grad()
        loss = model.loss(comm.shard(batch), training=True)
        comm.allreduce_mean(model.grads)  # the mean over shards = the gradient of the global batch
        loss = mean_over_processes(comm, loss)
        clip_grad_norm(model.grads, MAX_GRAD_NORM)
        optimiser.step(model.grads)
        running = loss if running is None else 0.9 * running + 0.1 * loss
        train_curve[0].append(step)
        train_curve[1].append(loss)
        if lead and (step % s.eval_every == 0 or step == args.steps):
            val_curve[0].append(step)
            val_curve[1].append(model.loss(val_batch, training=False))
        bar.update(step, s.batch * s.seq_len, loss=running, val=(val_curve[1][-1], val_curve[0][-1]))
        progress = dict(step=step, train_curve=train_curve, val_curve=val_curve, running=running,
                        seconds=time.perf_counter() - started)
        checkpoints.after_step(step, dict(progress=progress, rng=rng.bit_generator.state, processes=comm.size))
    chars_per_second = bar.close()
    seconds = time.perf_counter() - started
    if not lead:
        comm.close()
        return 0
    val_end = val_curve[1][-1]

    show_sample("sample after training", model.sample(PROMPT, s.sample_chars, np.random.default_rng(args.seed)))
    args.out.mkdir(parents=True, exist_ok=True)
    plot = _common.save_loss_plot(args.out / "loss_curve.png",
                                  {"training batch": train_curve, "validation": val_curve},
                                  f"char-level LSTM on {CORPUS.name}")
    model.lstm.save(args.out / "lstm.npz")
    _common.write_npz(args.out / "readout.npz", weight=model.readout.weight, bias=model.readout.bias,
                      vocab=np.array(vocab))
    reloaded = LSTM.load(args.out / "lstm.npz", xp=xp)
    model.lstm = reloaded
    val_reloaded = model.loss(val_batch, training=False)

    metrics = dict(val_loss_start=val_start, val_loss_end=val_end, val_loss_reloaded=val_reloaded,
                   steps=args.steps, seconds=seconds, chars_per_second=chars_per_second,
                   backend="numpy" if xp is np else "cupy", vocab_size=len(vocab), processes=comm.size,
                   dropout=s.dropout, train_loss=train_curve[1])
    _common.write_json(args.out / "metrics.json", metrics)
    print(f"trained {args.steps} steps in {seconds:.1f}s ({chars_per_second:,.0f} chars/s)")
    print(f"validation loss: {val_start:.3f} -> {val_end:.3f}")
    print(f"checkpoint reloaded from {args.out / 'lstm.npz'}: validation loss {val_reloaded:.3f}")
    print(f"wrote {plot}, {args.out / 'lstm.npz'}, {args.out / 'readout.npz'}, {args.out / 'metrics.json'}")
    comm.close()
    return 0


def mean_over_processes(comm: distributed.Communicator, value: float) -> float:
    """The mean of ``value`` over the processes (each rank's shard loss -> the global batch's loss)."""
    if comm.size == 1:
        return value
    box = np.array([value])
    comm.allreduce_mean([box])
    return float(box[0])


if __name__ == "__main__":
    sys.exit(main())
