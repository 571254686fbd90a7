"""A short forward/backward script for compute-sanitizer (run by test_sanitizer.py, not by pytest).

Covers both layouts, length-0 rows, projection, skip_input, dropout and a non-default stream.
Prints "sanitizer case done" at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cupy
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "support")]  # gpu_support and rnn_testing

from gpu_support import on_gpu, run  # noqa: E402
from rnn_testing import Case, random_arrays  # noqa: E402

CASES = [
    Case("lstm", num_layers=2, direction="bidirectional", num_proj=2, lengths=(4, 0, 2), dropout=0.3, seed=2),
    Case("gru", num_layers=2, input_size=4, input_mode="skip_input", time_major=False, lengths=(1, 4, 3)),
    Case("rnn_relu", num_layers=1, dtype="float32"),
    Case("rnn_tanh", num_layers=3, direction="bidirectional", dtype="float16", lengths=(3, 3, 0)),
]

if __name__ == "__main__":
    with cupy.cuda.Stream(non_blocking=True):
        for index, case in enumerate(CASES):
            run(case, on_gpu(random_arrays(case, np.random.default_rng(index))))
    cupy.cuda.Device().synchronize()
    print("sanitizer case done")
