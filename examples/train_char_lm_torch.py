"""Train a character-level LSTM language model in PyTorch, with cudnn_rnn.torch.LSTM as its recurrent layer.

The model of examples/train_char_lm.py, written as a ``torch.nn.Module`` and trained with
``torch.optim``::

    ids [B, T] --Embedding(V -> E)--> [B, T, E] --cudnn_rnn.torch.LSTM(E -> N, 2 layers, dropout)--> [B, T, N]
        --Linear(N -> V)--> logits [B, T, V]
    loss = mean cross-entropy of the next character (nats)

The LSTM is cudnn_rnn's (its one ``params`` buffer is an ``nn.Parameter``; autograd runs the
library's backprop); everything else is PyTorch's. It trains on the first 90% of
examples/data/almanac.txt with Adam and gradient clipping, reports the loss on the last 10% before
and after, prints text sampled from the model before and after training, and writes into --out
(default runs/train_char_lm_torch):

    loss_curve.png       training and validation loss
    model.pt             the model's state_dict (the LSTM's params and step counter included)
    lstm.npz             the LSTM as a cudnn_rnn.LSTM params file (module.to_layer().save)
    metrics.json         the numbers printed at the end

Runs on the CPU (the NumPy reference backend, in a few seconds with --quick) and on a CUDA GPU
(cuDNN through CuPy) when PyTorch and CuPy both see one.

    python examples/train_char_lm_torch.py            # the full run
    python examples/train_char_lm_torch.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

# PyTorch's idle OpenMP threads sleep rather than spin on the cores the RNN's matrix products use
# (three times faster on a 2-core machine); set before torch is imported, and a user's choice wins
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

import _common
import cudnn_rnn.torch as ct
from cudnn_rnn.layers import LSTM

CORPUS = _common.CHAR_CORPUS


@dataclass(frozen=True)
class Settings:
    """Model and run sizes."""

    embed: int
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
    "full": Settings(embed=32, num_units=128, num_layers=2, dropout=0.1, seq_len=64, batch=32, lr=4e-3, eval_every=50,
                     val_sequences=64, sample_chars=300),
    "quick": Settings(embed=32, num_units=64, num_layers=2, dropout=0.1, seq_len=32, batch=16, lr=1e-2, eval_every=10,
                      val_sequences=24, sample_chars=80),
}

PROMPT = "The river "
MAX_GRAD_NORM = 5.0


class CharModel(torch.nn.Module):
    """Embedding, cudnn_rnn's LSTM and a linear readout over the vocabulary."""

    def __init__(self, vocab_size: int, s: Settings, seed: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, s.embed)
        self.lstm = ct.LSTM(s.embed, s.num_units, s.num_layers, dropout=s.dropout, seed=seed)
        self.readout = torch.nn.Linear(s.num_units, vocab_size)

    def forward(self, ids: torch.Tensor, h0: torch.Tensor | None = None,
                c0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """ids [B, T] -> (logits [B, T, V], h [B, L, N], c [B, L, N])."""
        y, h, c = self.lstm(self.embed(ids), None, h0, c0)
        return self.readout(y), h, c

    def loss(self, ids: torch.Tensor) -> torch.Tensor:
        """Mean next-character loss of ids [B, T+1]."""
        logits, _, _ = self(ids[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))

    @torch.no_grad()
    def sample(self, vocab: str, prompt: str, length: int, rng: np.random.Generator,
               temperature: float = 0.7) -> str:
        """Continue ``prompt`` by ``length`` characters, drawing each from softmax(logits / temperature)."""
        training = self.training
        self.eval()
        device = self.readout.weight.device
        index = {ch: i for i, ch in enumerate(vocab)}
        logits, h, c = self(torch.tensor([[index[ch] for ch in prompt]], device=device))
        out = []
        for _ in range(length):
            scores = logits[0, -1].double().cpu().numpy() / temperature
            probs = np.exp(scores - scores.max())
            nxt = int(rng.choice(len(vocab), p=probs / probs.sum()))
            out.append(vocab[nxt])
            logits, h, c = self(torch.tensor([[nxt]], device=device), h, c)
        self.train(training)
        return prompt + "".join(out)


def select_device(choice: str) -> torch.device:
    """The CPU for ``numpy``; CUDA for ``cupy`` (insisting) or ``auto`` (when PyTorch and CuPy + cuDNN work)."""
    if choice == "numpy":
        return torch.device("cpu")
    if torch.cuda.is_available():
        if _common.select_backend(choice) is not np:
            return torch.device("cuda")
    elif choice == "cupy":
        raise SystemExit("--backend cupy: PyTorch sees no CUDA device")
    else:
        print("[backend] using the CPU (reference backend): PyTorch sees no CUDA device")
    return torch.device("cpu")


def show_sample(title: str, text: str) -> None:
    print(f"--- {title} ---\n{text}\n" + "-" * (len(title) + 8))


def main(argv: list[str] | None = None) -> int:
    parser = _common.example_parser("train_char_lm_torch", __doc__.splitlines()[0], default_steps=400,
                                    quick_steps=40)
    parser.add_argument("--dropout", type=float, default=None, help="inter-layer dropout of the LSTM (default 0.1)")
    args = _common.parse_args(parser, argv)
    s = SETTINGS["quick" if args.quick else "full"]
    if args.dropout is not None:
        s = Settings(**{**asdict(s), "dropout": args.dropout})
    return train(args, s)


def train(args: argparse.Namespace, s: Settings) -> int:
    device = select_device(args.backend)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    vocab, train_ids, val_ids = _common.load_char_corpus(np.int64)
    val_batch = torch.from_numpy(_common.validation_windows(val_ids, s.seq_len, s.val_sequences)).to(device)
    model = CharModel(len(vocab), s, args.seed).to(device)
    print(f"corpus: {CORPUS.name}, {len(train_ids):,} training and {len(val_ids):,} validation characters, "
          f"vocabulary {len(vocab)}")
    print(f"model: embedding {len(vocab)} -> {s.embed}, cudnn_rnn.torch.{model.lstm}, linear {s.num_units} -> "
          f"{len(vocab)}")
    print(f"device: {device} ({'cuDNN through CuPy' if device.type == 'cuda' else 'NumPy reference backend'})")
    optimiser = torch.optim.Adam(model.parameters(), lr=s.lr)

    def validation_loss() -> float:
        model.eval()
        with torch.no_grad():
            value = float(model.loss(val_batch))
        model.train()
        return value

    show_sample("sample before training", model.sample(vocab, PROMPT, s.sample_chars, np.random.default_rng(args.seed)))
    val_start = validation_loss()
    print(f"step 0: validation loss {val_start:.3f} (uniform guessing: {math.log(len(vocab)):.3f})")
    train_curve: list[list[float]] = [[], []]
    val_curve: list[list[float]] = [[0], [val_start]]
    bar = _common.ProgressBar(args.steps, unit="chars")
    running = None
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        starts = rng.integers(0, len(train_ids) - s.seq_len - 1, s.batch)
        batch = torch.from_numpy(np.stack([train_ids[i:i + s.seq_len + 1] for i in starts])).to(device)
        optimiser.zero_grad()
        loss_tensor = model.loss(batch)
        loss_tensor.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimiser.step()
        loss = float(loss_tensor.detach())
        running = loss if running is None else 0.9 * running + 0.1 * loss
        train_curve[0].append(step)
        train_curve[1].append(loss)
        if step % s.eval_every == 0 or step == args.steps:
            val_curve[0].append(step)
            val_curve[1].append(validation_loss())
        bar.update(step, s.batch * s.seq_len, loss=running, val=(val_curve[1][-1], val_curve[0][-1]))
    chars_per_second = bar.close()
    seconds = time.perf_counter() - started
    val_end = val_curve[1][-1]

    show_sample("sample after training", model.sample(vocab, PROMPT, s.sample_chars, np.random.default_rng(args.seed)))
    args.out.mkdir(parents=True, exist_ok=True)
    plot = _common.save_loss_plot(args.out / "loss_curve.png",
                                  {"training batch": train_curve, "validation": val_curve},
                                  f"char-level LSTM (PyTorch + cudnn_rnn) on {CORPUS.name}")
    torch.save(model.state_dict(), args.out / "model.pt")
    model.lstm.to_layer().save(args.out / "lstm.npz")
    reloaded = CharModel(len(vocab), s, args.seed + 1).to(device)  # another initialisation, then the saved state
    reloaded.load_state_dict(torch.load(args.out / "model.pt", map_location=device))
    model = reloaded
    val_reloaded = validation_loss()
    assert int(model.lstm.step) == args.steps and LSTM.load(args.out / "lstm.npz").step == args.steps

    metrics = dict(val_loss_start=val_start, val_loss_end=val_end, val_loss_reloaded=val_reloaded, steps=args.steps,
                   seconds=seconds, chars_per_second=chars_per_second, device=device.type, vocab_size=len(vocab),
                   dropout=s.dropout, train_loss=train_curve[1])
    _common.write_json(args.out / "metrics.json", metrics)
    print(f"trained {args.steps} steps in {seconds:.1f}s ({chars_per_second:,.0f} chars/s)")
    print(f"validation loss: {val_start:.3f} -> {val_end:.3f}")
    print(f"checkpoint reloaded from {args.out / 'model.pt'}: validation loss {val_reloaded:.3f}")
    print(f"wrote {plot}, {args.out / 'model.pt'}, {args.out / 'lstm.npz'}, {args.out / 'metrics.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
