"""Helpers of the Keras reader's tests (tests/test_read_keras.py and tests/oracle/test_read_keras_live.py):
run what a file holds and compare with the outputs Keras recorded beside it."""

from __future__ import annotations

import numpy as np

import cudnn_rnn
from cudnn_rnn.convert.readers import FoundRNN
from rnn_testing import relative_error

__all__ = ["TOLERANCE", "MERGES", "rnn_arrays", "run_like_keras", "run_reset_before"]

TOLERANCE = {"float32": 1e-5, "float64": 1e-10}

#: merge_mode -> how Keras combines cuDNN's [forward | backward] halves
MERGES = {"concat": lambda y: y, None: lambda y: y,
          "sum": lambda y: np.add(*np.split(y, 2, axis=-1)),
          "ave": lambda y: np.add(*np.split(y, 2, axis=-1)) / 2,
          "mul": lambda y: np.multiply(*np.split(y, 2, axis=-1))}


def rnn_arrays(arrays: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    return {key[len(name) + 1:]: value for key, value in arrays.items() if key.startswith(name + "/")}


def run_like_keras(found: FoundRNN, arrays: dict[str, np.ndarray], lengths: np.ndarray,
                   merge_mode: str | None) -> None:
    """Run ``found`` through cudnn_rnn_v3 on the layer's recorded input; assert Keras's outputs and states."""
    config = found.config
    params = found.to_params().value
    x = arrays["x"]
    zeros = np.zeros((x.shape[0], config.num_pseudo_layers, config.num_units), x.dtype)
    h0 = arrays.get("h0", zeros)
    c0 = arrays.get("c0", zeros) if config.has_cell else None
    out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, lengths, rnn_mode=config.rnn_mode, direction=config.direction,
                                 is_training=False, time_major=False)
    tolerance = TOLERANCE[str(x.dtype)]
    if "output" in arrays:
        assert relative_error(MERGES[merge_mode](out.output), arrays["output"]) <= tolerance, f"{found.name}: output"
    if "h" in arrays:
        assert relative_error(out.output_h, arrays["h"]) <= tolerance, f"{found.name}: h"
    if "c" in arrays:
        assert relative_error(out.output_c, arrays["c"]) <= tolerance, f"{found.name}: c"


def run_reset_before(found: FoundRNN, arrays: dict[str, np.ndarray], lengths: np.ndarray) -> None:
    """A reset-before GRU stepped with cudnn_rnn.gru_block_cell, each sequence stopping at its length."""
    w = found.tensors
    x = arrays["x"]
    h = np.zeros((x.shape[0], found.fields["num_units"]), x.dtype)
    outputs = []
    for t in range(x.shape[1]):
        step = cudnn_rnn.gru_block_cell(x[:, t], h, w["w_ru"], w["w_c"], w["b_ru"], w["b_c"])[3]
        valid = (t < lengths)[:, None]
        h = np.where(valid, step, h)
        outputs.append(np.where(valid, step, 0))
    assert relative_error(np.stack(outputs, 1), arrays["output"]) <= TOLERANCE[str(x.dtype)], found.name
    assert relative_error(h[:, None], arrays["h"]) <= TOLERANCE[str(x.dtype)], found.name
