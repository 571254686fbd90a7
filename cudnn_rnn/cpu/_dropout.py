"""Inter-layer dropout of the reference backend: TF's seed gives the masks, each drawn once per training step.

    mask = dropout_mask(config, layer, (T, B, D*P), np.float32, np)   # 0 or 1/(1-p), [T, B, D*P]

A mask is a function of (TF's 64-bit seed, p, layer, shape) alone, so the backprop of a training step
applies the mask its forward applied; the last ``KEPT_MASKS`` draws are kept (one byte per element),
so the backprop finds its forward's instead of drawing it again.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .._arrays import Array
from ..config import RNNConfig

__all__ = ["dropout_mask", "KEPT_MASKS"]


def dropout_mask(config: RNNConfig, layer: int, shape: tuple[int, ...], dtype: DTypeLike, xp: Any) -> Array:
    """The inverted-dropout mask applied to layer ``layer``'s output (0 or 1/(1-p)).

    Drawn from NumPy's PCG64 seeded with (TF's 64-bit seed, layer), so equal (seed, seed2)
    give equal masks on every call. Not the same masks as cuDNN's.
    """
    keep = _kept(config.seed64, config.dropout, layer, shape)
    return xp.asarray(keep.astype(dtype) / np.asarray(1.0 - config.dropout, dtype=dtype))


#: the most draws of dropout masks kept (a mask is kept as one byte per element of a layer's output)
KEPT_MASKS = 8
_kept_masks: dict[tuple[int, float, int, tuple[int, ...]], np.ndarray] = {}
_kept_lock = threading.Lock()


def _kept(seed64: int, dropout: float, layer: int, shape: tuple[int, ...]) -> np.ndarray:
    """Which elements of layer ``layer``'s output dropout keeps (boolean, read-only), drawn once per
    (seed, p, layer, shape) among the last ``KEPT_MASKS`` draws."""
    key = (seed64, dropout, layer, shape)
    with _kept_lock:
        keep = _kept_masks.pop(key, None)
    if keep is None:
        keep = np.random.default_rng([seed64, layer]).random(shape, dtype=np.float64) >= dropout
        keep.flags.writeable = False
    with _kept_lock:
        while len(_kept_masks) >= KEPT_MASKS:
            del _kept_masks[next(iter(_kept_masks))]
        _kept_masks[key] = keep  # the newest last
    return keep
