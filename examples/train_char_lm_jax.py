"""Train a character-level language model in JAX with cudnn_rnn.jax's LSTM and optax.

The model embeds one character at a time and predicts the next::

    ids [B, T] --embedding(V -> E)--> x [B, T, E] --LSTM(E -> N, 2 layers, cudnn_rnn.jax)--> y [B, T, N]
        --dense(N -> V)--> logits [B, T, V];   loss = mean cross-entropy of the next character (nats)

Every weight is a leaf of one pytree (the LSTM's is its flat params buffer, from
``cudnn_rnn.jax.init_params``); ``jax.jit(jax.value_and_grad(...))`` differentiates through the op, and
optax (Adam after clipping the global norm) updates the tree. It trains on the first 90% of
examples/data/almanac.txt, as examples/train_char_lm.py does, reports the loss on the last 10% before
and after, prints text sampled before and after training, and writes into --out (default
runs/train_char_lm_jax):

    loss_curve.png       training and validation loss
    model.npz            every weight of the model and the vocabulary
    metrics.json         the numbers printed at the end

Dropout between the LSTM's layers takes new masks every step, as the layers' do: the step number goes
to the op as ``seed2``, a traced integer, so that one compilation serves every step.

``--backend numpy`` runs on JAX's CPU device (the op's reference backend, anywhere: well under a
minute with --quick on 2 CPU cores); ``--backend cupy`` on JAX's CUDA device (cuDNN; needs
jax[cuda12] or jax[cuda13] and CuPy); ``auto`` takes the GPU when both work.

    python examples/train_char_lm_jax.py            # the full run
    python examples/train_char_lm_jax.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave GPU memory for CuPy's pool (cuDNN)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import _common  # noqa: E402
import cudnn_rnn  # noqa: E402
import cudnn_rnn.jax  # noqa: E402

CORPUS = _common.CHAR_CORPUS
PROMPT = "The river "
MAX_GRAD_NORM = 5.0


@dataclass(frozen=True)
class Settings:
    """Model and run sizes."""

    embedding: int
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
    "full": Settings(embedding=32, num_units=128, num_layers=2, dropout=0.1, seq_len=64, batch=32, lr=4e-3,
                     eval_every=50, val_sequences=64, sample_chars=300),
    "quick": Settings(embedding=32, num_units=64, num_layers=2, dropout=0.1, seq_len=32, batch=16, lr=1e-2,
                      eval_every=10, val_sequences=24, sample_chars=80),
}

Params = dict[str, Any]


def lstm_config(s: Settings) -> cudnn_rnn.RNNConfig:
    """The LSTM's configuration: embedding -> num_units, num_layers, dropout between layers, float32."""
    return cudnn_rnn.RNNConfig("lstm", s.num_layers, s.num_units, s.embedding, dropout=s.dropout)


def init_model(vocab_size: int, s: Settings, seed: int) -> Params:
    """Embedding N(0, 0.1), the LSTM as cudnn_rnn.LSTM starts (seed), a Glorot-uniform dense with zero bias."""
    rng = np.random.default_rng(seed + 1)
    limit = math.sqrt(6.0 / (s.num_units + vocab_size))
    return {"embedding": jnp.asarray(rng.normal(0.0, 0.1, (vocab_size, s.embedding)).astype(np.float32)),
            "lstm": cudnn_rnn.jax.init_params(lstm_config(s), seed=seed),
            "dense_w": jnp.asarray(rng.uniform(-limit, limit, (s.num_units, vocab_size)).astype(np.float32)),
            "dense_b": jnp.zeros(vocab_size, jnp.float32)}


def run_lstm(params: Params, ids: Any, h: Any, c: Any, s: Settings, *, training: bool,
             step: Any = 0) -> tuple[Any, Any, Any]:
    """logits [B, T, V] and the final states [B, L, N] of ids [B, T] from states h, c [B, L, N].

    In training, dropout between the layers draws its masks from (seed 0, seed2 ``step``).
    """
    x = params["embedding"][ids]
    y, h, c = cudnn_rnn.jax.cudnn_rnn(x, h, c, params["lstm"], rnn_mode="lstm", time_major=False,
                                      is_training=training, dropout=s.dropout, seed2=step)
    return y @ params["dense_w"] + params["dense_b"], h, c


def loss_fn(params: Params, batch: Any, s: Settings, training: bool, step: Any = 0) -> Any:
    """Mean next-character cross-entropy of batch [B, T+1] (zero initial states)."""
    zeros = jnp.zeros((batch.shape[0], s.num_layers, s.num_units), jnp.float32)
    logits, _, _ = run_lstm(params, batch[:, :-1], zeros, zeros, s, training=training, step=step)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


def sample(params: Params, vocab: str, s: Settings, length: int, rng: np.random.Generator,
           temperature: float = 0.7) -> str:
    """Continue PROMPT by ``length`` characters, drawing each from softmax(logits / temperature)."""
    index = {ch: i for i, ch in enumerate(vocab)}
    step = jax.jit(lambda p, ids, h, c: run_lstm(p, ids, h, c, s, training=False))
    zeros = jnp.zeros((1, s.num_layers, s.num_units), jnp.float32)
    logits, h, c = step(params, jnp.asarray([[index[ch] for ch in PROMPT]]), zeros, zeros)
    out = []
    for _ in range(length):
        scaled = np.asarray(logits[0, -1], dtype=np.float64) / temperature
        probs = np.exp(scaled - scaled.max())
        nxt = int(rng.choice(len(vocab), p=probs / probs.sum()))
        out.append(vocab[nxt])
        logits, h, c = step(params, jnp.asarray([[nxt]]), h, c)
    return PROMPT + "".join(out)


def select_device(choice: str) -> Any:
    """JAX's CPU device for ``numpy``; its CUDA device for ``cupy`` (or ``auto`` when one works)."""
    cpu = jax.devices("cpu")[0]
    if choice == "numpy":
        return cpu
    try:
        import cupy  # noqa: F401  (the op's CUDA target runs cuDNN through CuPy)

        return jax.devices("cuda")[0]
    except (ImportError, RuntimeError) as error:
        if choice == "cupy":
            raise SystemExit(f"--backend cupy needs JAX's CUDA backend and CuPy: {error}") from None
        print(f"[backend] using JAX's CPU device (reference backend): no CUDA device with CuPy ({error})")
        return cpu


def show_sample(title: str, text: str) -> None:
    print(f"--- {title} ---\n{text}\n" + "-" * (len(title) + 8))


def main(argv: list[str] | None = None) -> int:
    parser = _common.example_parser("train_char_lm_jax", __doc__.splitlines()[0], default_steps=400, quick_steps=40)
    args = _common.parse_args(parser, argv)
    s = SETTINGS["quick" if args.quick else "full"]
    device = select_device(args.backend)
    with jax.default_device(device):
        return train(args, s, device)


def train(args: argparse.Namespace, s: Settings, device: Any) -> int:
    rng = np.random.default_rng(args.seed)
    vocab, train_ids, val_ids = _common.load_char_corpus()
    val_batch = jnp.asarray(_common.validation_windows(val_ids, s.seq_len, s.val_sequences))
    params = init_model(len(vocab), s, args.seed)
    optimiser = optax.chain(optax.clip_by_global_norm(MAX_GRAD_NORM), optax.adam(s.lr))
    opt_state = optimiser.init(params)
    print(f"corpus: {CORPUS.name}, {len(train_ids):,} training and {len(val_ids):,} validation characters, "
          f"vocabulary {len(vocab)}")
    print(f"model: embedding {len(vocab)} -> {s.embedding}, cudnn_rnn.jax LSTM {s.embedding} -> {s.num_units} "
          f"({s.num_layers} layers), dense {s.num_units} -> {len(vocab)}")
    kind = "reference backend" if device.platform == "cpu" else "cuDNN"
    print(f"backend: JAX on {device.platform.upper()} device {device.id} (cudnn_rnn's {kind})")

    @jax.jit
    def train_step(params: Params, opt_state: Any, batch: Any, step: Any) -> tuple[Params, Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, s, True, step)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    evaluate = jax.jit(lambda params, batch: loss_fn(params, batch, s, False))

    show_sample("sample before training", sample(params, vocab, s, s.sample_chars, np.random.default_rng(args.seed)))
    val_start = float(evaluate(params, val_batch))
    print(f"step 0: validation loss {val_start:.3f} (uniform guessing: {math.log(len(vocab)):.3f})")
    train_curve: tuple[list[int], list[float]] = ([], [])
    val_curve: tuple[list[int], list[float]] = ([0], [val_start])
    bar = _common.ProgressBar(args.steps, unit="chars")
    running = None
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        starts = rng.integers(0, len(train_ids) - s.seq_len - 1, s.batch)
        batch = jnp.asarray(np.stack([train_ids[i:i + s.seq_len + 1] for i in starts]))
        params, opt_state, loss_value = train_step(params, opt_state, batch, jnp.asarray(step, jnp.int32))
        loss = float(loss_value)
        running = loss if running is None else 0.9 * running + 0.1 * loss
        train_curve[0].append(step)
        train_curve[1].append(loss)
        if step % s.eval_every == 0 or step == args.steps:
            val_curve[0].append(step)
            val_curve[1].append(float(evaluate(params, val_batch)))
        bar.update(step, s.batch * s.seq_len, loss=running, val=(val_curve[1][-1], val_curve[0][-1]))
    chars_per_second = bar.close()
    seconds = time.perf_counter() - started
    val_end = val_curve[1][-1]

    show_sample("sample after training", sample(params, vocab, s, s.sample_chars, np.random.default_rng(args.seed)))
    args.out.mkdir(parents=True, exist_ok=True)
    plot = _common.save_loss_plot(args.out / "loss_curve.png",
                                  {"training batch": train_curve, "validation": val_curve},
                                  f"char-level LSTM (cudnn_rnn.jax) on {CORPUS.name}")
    model_path = args.out / "model.npz"
    _common.write_npz(model_path, vocab=np.array(vocab), **{name: np.asarray(value) for name, value in params.items()})
    with np.load(model_path) as saved:
        reloaded = {name: jnp.asarray(saved[name]) for name in params}
    val_reloaded = float(evaluate(reloaded, val_batch))

    metrics = dict(val_loss_start=val_start, val_loss_end=val_end, val_loss_reloaded=val_reloaded,
                   steps=args.steps, seconds=seconds, chars_per_second=chars_per_second,
                   backend="numpy" if device.platform == "cpu" else "cupy", vocab_size=len(vocab),
                   settings=asdict(s), train_loss=train_curve[1])
    _common.write_json(args.out / "metrics.json", metrics)
    print(f"trained {args.steps} steps in {seconds:.1f}s ({chars_per_second:,.0f} chars/s)")
    print(f"validation loss: {val_start:.3f} -> {val_end:.3f}")
    print(f"model reloaded from {model_path}: validation loss {val_reloaded:.3f}")
    print(f"wrote {plot}, {model_path}, {args.out / 'metrics.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
