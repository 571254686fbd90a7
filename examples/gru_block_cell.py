"""TensorFlow's GRUBlockCell and its gradient, checked against finite differences, then trained.

The cell (a reset-*before* GRU with one bias per gate; not cuDNN's GRU)::

    [r_bar, u_bar] = [x, h_prev] @ w_ru + b_ru         w_ru [I+H, 2H], b_ru [2H]
    r, u = sigmoid(r_bar), sigmoid(u_bar)
    c = tanh([x, r * h_prev] @ w_c + b_c)              w_c [I+H, H], b_c [H]
    h = u * h_prev + (1 - u) * c

``cudnn_rnn.gru_block_cell`` is the forward op, ``cudnn_rnn.gru_block_cell_grad`` the
GRUBlockCellGrad op (d_x, d_h_prev, d_c_bar, d_r_bar_u_bar from d_h), and
``cudnn_rnn.gru_block_cell_weight_grads`` the weight and bias gradients TF's python gradient adds.

1. For the scalar loss  L = sum(g * h)  (g fixed and random) every gradient of one cell is
   compared with float64 central finite differences; so are the gradients of the same loss on the
   last state of the cell unrolled over 4 steps (backpropagation through time).
2. The unrolled cell is then trained with plain gradient descent to map a sequence to a target
   state, printing the loss before and after.

Prints each check's max relative error and exits with status 1 if one exceeds 1e-6; writes
check.json into --out (default runs/gru_block_cell).

    python examples/gru_block_cell.py [--quick] [--steps N] [--seed S] [--out DIR]
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

import _common
import cudnn_rnn
from cudnn_rnn.optim import SGD

BATCH, INPUT_SIZE, HIDDEN = 3, 4, 5
UNROLL = 4
TOLERANCE = 1e-6
EPS = 1e-6
WEIGHT_NAMES = ("w_ru", "w_c", "b_ru", "b_c")


def init_weights(rng: np.random.Generator, xp: Any) -> dict[str, Any]:
    """Random float64 weights; b_ru starts at 1.0 as TF's GRUBlockCell wrapper initialises it."""
    fan = INPUT_SIZE + HIDDEN
    return {"w_ru": xp.asarray(rng.uniform(-1, 1, (fan, 2 * HIDDEN)) / np.sqrt(fan)),
            "w_c": xp.asarray(rng.uniform(-1, 1, (fan, HIDDEN)) / np.sqrt(fan)),
            "b_ru": xp.ones(2 * HIDDEN), "b_c": xp.zeros(HIDDEN)}


def unrolled_forward(xs: list, h0: Any, w: dict[str, Any]) -> tuple[Any, list]:
    """Run the cell over xs (each [B, I]); returns the last h and the per-step (h_prev, r, u, c)."""
    h, tape = h0, []
    for x in xs:
        r, u, c, h_next = cudnn_rnn.gru_block_cell(x, h, w["w_ru"], w["w_c"], w["b_ru"], w["b_c"])
        tape.append((h, r, u, c))
        h = h_next
    return h, tape


def unrolled_backward(xs: list, tape: list, w: dict[str, Any], d_h: Any) -> tuple[list, Any, dict[str, Any]]:
    """Backpropagation through time with GRUBlockCellGrad; returns (d_xs, d_h0, weight gradients)."""
    grads = {name: 0 * value for name, value in w.items()}
    d_xs = []
    for x, (h_prev, r, u, c) in zip(reversed(xs), reversed(tape)):
        d_x, d_h, d_c_bar, d_r_bar_u_bar = cudnn_rnn.gru_block_cell_grad(
            x, h_prev, w["w_ru"], w["w_c"], w["b_ru"], w["b_c"], r, u, c, d_h)
        step = cudnn_rnn.gru_block_cell_weight_grads(x, h_prev, r, d_r_bar_u_bar, d_c_bar)
        for name, value in zip(WEIGHT_NAMES, step):
            grads[name] += value
        d_xs.append(d_x)
    return d_xs[::-1], d_h, grads


def finite_difference(loss: Callable[[], float], array: Any) -> np.ndarray:
    """d loss / d array by central differences, perturbing ``array`` in place."""
    grad = np.zeros(array.shape)
    for index in np.ndindex(*array.shape):
        saved = float(array[index])
        array[index] = saved + EPS
        up = loss()
        array[index] = saved - EPS
        down = loss()
        array[index] = saved
        grad[index] = (up - down) / (2 * EPS)
    return grad


def relative_error(analytic: Any, numeric: np.ndarray) -> float:
    analytic = _common.to_host(analytic)
    return float(np.abs(analytic - numeric).max() / max(np.abs(numeric).max(), 1e-12))


def gradient_checks(xp: Any, rng: np.random.Generator) -> dict[str, float]:
    """Max relative error of every analytic gradient against finite differences."""
    w = init_weights(rng, xp)
    xs = [xp.asarray(rng.normal(size=(BATCH, INPUT_SIZE))) for _ in range(UNROLL)]
    h0 = xp.asarray(rng.normal(size=(BATCH, HIDDEN)))
    g = xp.asarray(rng.normal(size=(BATCH, HIDDEN)))
    errors: dict[str, float] = {}

    for label, steps in (("one cell", xs[:1]), (f"unrolled over {UNROLL} steps", xs)):
        def loss(steps: list[Any] = steps) -> float:
            return float((g * unrolled_forward(steps, h0, w)[0]).sum())

        _, tape = unrolled_forward(steps, h0, w)
        d_xs, d_h0, d_w = unrolled_backward(steps, tape, w, g)
        targets = {"x" if len(steps) == 1 else "x[0]": (d_xs[0], steps[0]), "h_prev" if len(steps) == 1
                   else "h0": (d_h0, h0), **{name: (d_w[name], w[name]) for name in WEIGHT_NAMES}}
        for name, (analytic, array) in targets.items():
            errors[f"{label}: d_{name}"] = relative_error(analytic, finite_difference(loss, array))
    return errors


def train(xp: Any, rng: np.random.Generator, steps: int) -> list[float]:
    """Fit the unrolled cell's last state to a fixed target state; returns the loss per step."""
    w = init_weights(rng, xp)
    xs = [xp.asarray(rng.normal(size=(32, INPUT_SIZE))) for _ in range(UNROLL)]
    mixing = rng.normal(size=(INPUT_SIZE, HIDDEN))
    target = xp.asarray(np.tanh(sum(_common.to_host(x) for x in xs) @ mixing / UNROLL))
    h0 = xp.zeros((32, HIDDEN))
    optimiser = SGD([w[name] for name in WEIGHT_NAMES], lr=0.5, momentum=0.9)
    losses = []
    for _ in range(steps):
        h, tape = unrolled_forward(xs, h0, w)
        diff = h - target
        losses.append(float(0.5 * (diff * diff).sum() / len(diff)))
        _, _, grads = unrolled_backward(xs, tape, w, diff / len(diff))
        optimiser.step([grads[name] for name in WEIGHT_NAMES])
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = _common.example_parser("gru_block_cell", __doc__.splitlines()[0], default_steps=300, quick_steps=60)
    args = _common.parse_args(parser, argv)
    xp = _common.select_backend(args.backend)
    rng = np.random.default_rng(args.seed)
    print(f"backend: {_common.describe_backend(xp)}; float64, B={BATCH}, I={INPUT_SIZE}, H={HIDDEN}")

    errors = gradient_checks(xp, rng)
    print(f"gradient check against central finite differences (eps {EPS:g}), max relative error:")
    for name, error in errors.items():
        print(f"  {name:<36} {error:.2e}  {'ok' if error <= TOLERANCE else 'FAILED'}")
    worst = max(errors.values())
    passed = worst <= TOLERANCE
    print(f"gradient check: {'passed' if passed else 'FAILED'} (worst {worst:.2e}, tolerance {TOLERANCE:g})")

    losses = train(xp, rng, args.steps)
    print(f"training the unrolled cell ({args.steps} steps of SGD with momentum): "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")

    args.out.mkdir(parents=True, exist_ok=True)
    report = dict(errors=errors, worst=worst, tolerance=TOLERANCE, passed=passed, loss_start=losses[0],
                  loss_end=losses[-1], steps=args.steps)
    _common.write_json(args.out / "check.json", report)
    print(f"wrote {args.out / 'check.json'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
