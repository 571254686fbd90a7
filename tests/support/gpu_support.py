"""GPU-test helpers on top of tests/support/rnn_testing.py.

:func:`random_gpu_case` draws what the cuDNN backend must handle (every mode, 1-3 layers, both
directions, projection, skip_input, both layouts, unsorted lengths with 0 and T); :func:`on_gpu`
moves a case's arrays to the GPU (lengths stay on the host, as TF keeps them); :func:`run` is
rnn_testing's forward+backward with every result brought back to the host, so one call drives
either backend: NumPy arrays run the reference, CuPy arrays run cuDNN.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

import cupy
import numpy as np

from rnn_testing import DTYPE_TOLERANCE, MODE_NAMES, Arrays, Case, forward_backward, relative_error

RESULTS = ("y", "hy", "cy", "dx", "dh0", "dc0", "dparams")
#: cuDNN against the float64 reference; float16 is loose (cuDNN keeps h in half between steps)
TOLERANCE = {**DTYPE_TOLERANCE, "float16": 2e-2}


def random_gpu_case(rng: np.random.Generator, dtype: str) -> Case:
    """A small random case of ``dtype`` covering every feature the cuDNN backend must handle."""
    mode = str(rng.choice(MODE_NAMES))
    units = int(rng.integers(1, 7))
    skip = rng.random() < 0.25
    max_time, batch = int(rng.integers(1, 7)), int(rng.integers(1, 6))
    lengths = None if rng.random() < 0.2 else tuple(int(n) for n in rng.integers(0, max_time + 1, batch))
    return Case(rnn_mode=mode, num_layers=int(rng.integers(1, 4)), num_units=units,
                input_size=units if skip else int(rng.integers(1, 7)),
                direction=str(rng.choice(["unidirectional", "bidirectional"])),
                input_mode="skip_input" if skip else "linear_input",
                num_proj=int(rng.integers(1, units)) if mode == "lstm" and units > 1 and rng.random() < 0.4 else 0,
                max_time=max_time, batch=batch, lengths=lengths, time_major=bool(rng.random() < 0.5), dtype=dtype)


def _map(a: Arrays, convert: Any) -> Arrays:
    return Arrays(**{f.name: (value if value is None or f.name == "lengths" else convert(value))
                     for f in fields(Arrays) for value in [getattr(a, f.name)]})


def on_gpu(a: Arrays) -> Arrays:
    """The same arrays as CuPy arrays (lengths stay NumPy)."""
    return _map(a, cupy.asarray)


def as_float64(a: Arrays) -> Arrays:
    """The same values in float64, for the float64 reference."""
    return _map(a, lambda value: value.astype(np.float64))


def host(value: Any) -> np.ndarray:
    return cupy.asnumpy(value) if isinstance(value, cupy.ndarray) else np.asarray(value)


def run(case: Case, a: Arrays, **overrides: Any) -> dict[str, np.ndarray]:
    """One training forward and its backprop through the public ops; every result on the host."""
    return {name: host(value) for name, value in forward_backward(case, a, **overrides).items()}


def assert_results_close(ours: dict[str, np.ndarray], expected: dict[str, np.ndarray], tolerance: float,
                         case: Case) -> None:
    for name in RESULTS:
        error = relative_error(ours[name], expected[name])
        assert error <= tolerance, f"{name}: relative error {error:.3g} > {tolerance:g} for {asdict(case)}"
