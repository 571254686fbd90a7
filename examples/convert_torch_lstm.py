"""Convert a PyTorch LSTM to cuDNN params and to an ONNX model, and show that all three agree.

A 2-layer bidirectional ``torch.nn.LSTM`` is converted with ``cudnn_rnn.convert``:

    state_dict --from_format("torch")--> params --export_onnx--> lstm.onnx

then the same ragged batch runs through PyTorch (packed sequences), ``cudnn_rnn_v3`` (the
NumPy reference backend, or cuDNN with CuPy arrays) and onnxruntime. The script prints the
largest relative difference of each output against PyTorch and exits with status 1 if any
exceeds 1e-5.

Run:  python examples/convert_torch_lstm.py [--out DIR]     (needs torch, onnx, onnxruntime)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime
import torch

import cudnn_rnn
from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import export_onnx, from_format

INPUT_SIZE, NUM_UNITS, NUM_LAYERS = 8, 16, 2
TOLERANCE = 1e-5


def relative_difference(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected|."""
    return float(np.max(np.abs(actual - expected)) / max(float(np.max(np.abs(expected))), 1e-30))


def run_torch(lstm: torch.nn.LSTM, x: np.ndarray, h0: np.ndarray, c0: np.ndarray,
              lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.from_numpy(lengths.astype(np.int64)),
                                                     enforce_sorted=False)
    with torch.no_grad():
        out, (h, c) = lstm(packed, (torch.from_numpy(h0), torch.from_numpy(c0)))
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
    return y.numpy(), h.numpy(), c.numpy()


def argument_parser() -> argparse.ArgumentParser:
    """``--out DIR`` (as every example takes it; ``--keep DIR``, its former name, still works)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", "--keep", type=Path, dest="out", metavar="DIR",
                        help="write params.npz and lstm.onnx into this folder (default: a temporary one)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(INPUT_SIZE, NUM_UNITS, num_layers=NUM_LAYERS, bidirectional=True).eval()
    config = RNNConfig("lstm", NUM_LAYERS, NUM_UNITS, INPUT_SIZE, direction="bidirectional")

    # 1. PyTorch state_dict -> cuDNN params (exact: PyTorch keeps cuDNN's gate order and both biases)
    state_dict = {name: value.detach().numpy() for name, value in lstm.state_dict().items()}
    converted = from_format("torch", state_dict, config)
    params = converted.value
    print(f"torch state_dict ({len(state_dict)} tensors) -> params ({params.size} elements), "
          f"{'exact' if converted.exact else converted.approximations}")

    with tempfile.TemporaryDirectory() as scratch:
        return compare(lstm, config, params, args.out or Path(scratch))


def compare(lstm: torch.nn.LSTM, config: RNNConfig, params: np.ndarray, folder: Path) -> int:
    """Export the ONNX model into ``folder``, run all three on one batch, report; 0 when they agree."""
    # 2. params -> a runnable ONNX model
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "params.npz", params=params)
    export_onnx(params, config, folder / "lstm.onnx")
    print(f"wrote {folder / 'lstm.onnx'}")

    # 3. one ragged batch through all three
    rng = np.random.default_rng(0)
    lengths = np.array([7, 3, 5, 1], dtype=np.int32)
    x = rng.standard_normal((7, 4, INPUT_SIZE)).astype(np.float32)  # [T, B, I]
    h0 = rng.standard_normal((2 * NUM_LAYERS, 4, NUM_UNITS)).astype(np.float32)
    c0 = rng.standard_normal((2 * NUM_LAYERS, 4, NUM_UNITS)).astype(np.float32)

    expected = run_torch(lstm, x, h0, c0, lengths)
    ours = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, lengths, rnn_mode="lstm", direction="bidirectional",
                                  is_training=False)
    session = onnxruntime.InferenceSession(str(folder / "lstm.onnx"), providers=["CPUExecutionProvider"])
    onnx_outputs = session.run(None, {"X": x, "sequence_lens": lengths, "initial_h": h0, "initial_c": c0})

    worst = 0.0
    print(f"\n{'output':10} {'cudnn_rnn_v3 vs torch':>22} {'onnxruntime vs torch':>22}")
    for name, reference, mine, theirs in zip(("output", "output_h", "output_c"), expected, ours[:3], onnx_outputs):
        ours_difference, onnx_difference = relative_difference(mine, reference), relative_difference(theirs, reference)
        worst = max(worst, ours_difference, onnx_difference)
        print(f"{name:10} {ours_difference:22.2e} {onnx_difference:22.2e}")
    agree = worst <= TOLERANCE
    print(f"\n{'all outputs agree' if agree else 'MISMATCH'}: largest relative difference {worst:.2e} "
          f"({'<=' if agree else '>'} {TOLERANCE:.0e})")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
