"""Helpers of the readers' tests that work on NumPy alone: random params, configurations of every mode,
.npz archives written by NumPy, and FoundRNN layers made by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import to_format
from cudnn_rnn.convert.readers import FoundRNN
from cudnn_rnn.layout import params_layout

__all__ = ["random_params", "savez", "CONFIGS", "fields_of", "found_layer"]


def random_params(config: RNNConfig, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, params_layout(config).size).astype(config.dtype)


def savez(path: Path, **arrays: np.ndarray) -> Path:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    return path


CONFIGS = {
    "lstm_bi_proj": RNNConfig("lstm", 2, 5, 3, direction="bidirectional", num_proj=2),
    "gru_L3": RNNConfig("gru", 3, 4, 6),
    "relu_bi": RNNConfig("rnn_relu", 1, 3, 2, direction="bidirectional", dtype="float64"),
    "tanh_f16": RNNConfig("rnn_tanh", 2, 3, 3, dtype="float16"),
}


def fields_of(config: RNNConfig) -> dict:
    return {name: getattr(config, name) for name in ("rnn_mode", "num_layers", "num_units", "input_size",
                                                     "direction", "num_proj", "input_mode", "dtype")}


def found_layer(config: RNNConfig, name: str, seed: int = 0) -> FoundRNN:
    tensors = to_format("torch", random_params(config, seed), config).value
    return FoundRNN(name, "test layer", "torch", tensors, fields_of(config))
