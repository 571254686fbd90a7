"""Shared code of the conversion tests against live frameworks (test_convert_*.py).

Imported by name (``from convert_testing import ...``): tests/conftest.py puts this folder on the path.
"""

from __future__ import annotations

import numpy as np

import cudnn_rnn
from cudnn_rnn import RNNConfig
from rnn_testing import stable_seed


def rng_for(*parts: object) -> np.random.Generator:
    """A generator seeded from ``parts`` only, so every case draws its own fixed numbers."""
    return np.random.default_rng(stable_seed(*parts))


def relative_error(actual, expected) -> float:
    """max |actual - expected| / max |expected| in float64 (absolute when expected is all zeros)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = float(np.max(np.abs(expected))) or 1.0
    return float(np.max(np.abs(actual - expected))) / scale


def random_params(config: RNNConfig, rng: np.random.Generator, dtype: str = "float32") -> np.ndarray:
    """A params buffer of ``config``'s size, uniform in [-0.6, 0.6)."""
    size = cudnn_rnn.cudnn_rnn_params_size(config.num_layers, config.num_units, config.input_size,
                                           rnn_mode=config.rnn_mode, direction=config.direction,
                                           input_mode=config.input_mode, num_proj=config.num_proj)
    return rng.uniform(-0.6, 0.6, size).astype(dtype)
