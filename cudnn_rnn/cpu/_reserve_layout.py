"""The reference backend's reserve space: what a training forward keeps for backprop, as a table of slots.

    layout = ReserveLayout.build(config, max_time=T, batch=B)
    layout.size                      # elements of the payload (after ``_reserve``'s header)
    saved = layout.views(payload)    # {("gates", k): [T, B, G*N], ("cell", k): [T, B, N], ..., ("output", l): ...}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._arrays import Array
from ..config import RNNConfig

__all__ = ["ReserveLayout"]


@dataclass(frozen=True)
class ReserveLayout:
    """Shapes and offsets of the reference backend's saved tensors.

    Slots per pseudo-layer k (in processing order, i.e. reversed within each span for reverse
    directions): ``gates`` [T, B, G*N] (activations, in ``_cells.FORWARD_ORDER``), ``cell`` [T, B, N]
    (LSTM carried c), ``rec_n`` [T, B, N] (GRU R_n h + bR_n), ``hidden`` [T, B, P] (carried h; GRU, and
    LSTM with a projection: an LSTM's h = o*tanh(c) is recomputed from ``gates`` and ``cell`` instead).
    Per layer l < L-1: ``output`` [T, B, D*P] (that layer's output, dropout applied: the next layer's input).
    """

    slots: tuple[tuple[tuple[str, int], tuple[int, ...], int], ...]
    size: int

    @staticmethod
    def build(config: RNNConfig, max_time: int, batch: int) -> "ReserveLayout":
        t, b = max_time, batch
        n, p, gn = config.num_units, config.state_size, config.num_gates * config.num_units
        per_layer: list[tuple[str, tuple[int, ...]]] = [("gates", (t, b, gn))]
        if config.rnn_mode == "lstm":
            per_layer.append(("cell", (t, b, n)))
        if config.rnn_mode == "gru":
            per_layer.append(("rec_n", (t, b, n)))
        if config.rnn_mode == "gru" or config.num_proj:
            per_layer.append(("hidden", (t, b, p)))
        named = [((name, k), shape) for k in range(config.num_pseudo_layers) for name, shape in per_layer]
        named += [(("output", layer), (t, b, config.output_size)) for layer in range(config.num_layers - 1)]
        slots, offset = [], 0
        for key, shape in named:
            slots.append((key, shape, offset))
            offset += int(np.prod(shape))
        return ReserveLayout(tuple(slots), offset)

    def views(self, flat: Array) -> dict[tuple[str, int], Array]:
        return {key: flat[off:off + int(np.prod(shape))].reshape(shape) for key, shape, off in self.slots}
