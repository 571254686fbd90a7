"""A layer's dropout RNG on cuDNN: seeded once per layer and GPU, then advancing from step to step.

Each layer holds a :class:`DropoutRNG` (empty before its first GPU training forward). On cuDNN the network's
dropout state is restored from it (a device copy) before a training forward and kept back in it after; the
first forward on a GPU seeds it from (seed, step) instead. ``state()`` and ``load()`` carry it through the
layer's state dict and checkpoints.

Why: cudnnSetDropoutDescriptor sets up cuRAND's state over the whole buffer (a few MB), which PyTorch does
once per device. Seeding at every step would pay that every step, and a CUDA graph would replay the recorded
seed (the same masks on every replay); with an RNG per layer a step costs two device copies, and a replayed
graph draws new masks, as eager steps do. The reference backend keeps its masks per (seed, step).

The states are cuRAND's, laid out for one GPU model by one cuDNN: ``device`` names both (and the size). A
loaded state is used as it is on the same GPU model and cuDNN (an exact resume); one saved elsewhere is not:
the masks start anew from (seed, step), deterministic but not those of the uninterrupted run (a warning says so).

Every layer holds one, so this module imports nothing of the GPU's side: its GPU methods import ``_streams``
(and with it cuDNN's library) when first called.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._arrays import array_kind, copy_into

if TYPE_CHECKING:
    from ._streams import DeviceBuffers

__all__ = ["DropoutRNG", "checked_state", "device_identity"]


def device_identity(device_id: int, states_size: int, cudnn_version: int) -> str:
    """What a dropout RNG state depends on: GPU ``device_id``'s model, ``cudnnGetVersion()`` and the state's size
    (cudnnDropoutGetStatesSize), e.g. ``"NVIDIA H100 80GB HBM3, cuDNN 92800, 4194304 bytes"``."""
    from ._streams import device_name  # (the GPU side, and cuDNN's library with it, loads at first use)

    return f"{device_name(device_id)}, cuDNN {cudnn_version}, {states_size} bytes"


def checked_state(value: Any, where: str) -> dict[str, Any] | None:
    """``value`` (a layer's state dict's ``"dropout_rng"``) if it is a saved :meth:`DropoutRNG.state` (None, or
    ``{"device": str, "states": uint8 1-D array}``); else ValueError naming ``where``."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"device", "states"}:
        keys = sorted(map(str, value)) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f"{where}: 'dropout_rng' must be None or a dict with keys ['device', 'states']; got {keys}")
    states = value["states"]
    if (not isinstance(value["device"], str) or array_kind(states) is None or states.dtype != np.uint8
            or states.ndim != 1 or states.size == 0):
        raise ValueError(f"{where}: 'dropout_rng' must hold a device name (str) and its states as a non-empty 1-D "
                         f"uint8 array; got {type(value['device']).__name__} and "
                         f"{getattr(states, 'dtype', type(states).__name__)} {getattr(states, 'shape', '')}")
    return value


@dataclass
class _Live:
    """The RNG state on the GPU where the layer runs."""

    device_id: int
    device: str           # device_identity of that GPU
    states: Any           # CuPy uint8 [S] on device_id
    buffers: DeviceBuffers


class DropoutRNG:
    """The dropout RNG of one layer on cuDNN (see the module docstring); empty on NumPy layers."""

    def __init__(self) -> None:
        self._live: _Live | None = None
        self._saved: dict[str, Any] | None = None  # a loaded state, put on the GPU at the next forward

    def state(self) -> dict[str, Any] | None:
        """The state to save: ``{"device": device_identity, "states": the layer's own uint8 array}``, or None.

        None before the first training forward with dropout on a GPU (and on NumPy layers).
        """
        if self._live is not None:
            return {"device": self._live.device, "states": self._live.states}
        return None if self._saved is None else dict(self._saved)

    def load(self, saved: dict[str, Any] | None) -> None:
        """Take a saved :meth:`state` (checked by :func:`checked_state`; used as the module docstring says); None
        forgets the current one."""
        # a copy of its own (the source layer's advances): on the host, or on a GPU without passing the host;
        # made first, since the state may be this layer's own
        copied = None if saved is None else {"device": saved["device"], "states": saved["states"].copy()}
        if self._live is not None:
            self._live.buffers.close()
        self._live, self._saved = None, copied

    def restorable(self, device_id: int, device: str, stream: Any) -> Any:
        """The states to restore before a training forward on ``device_id`` (``device`` its identity), or None.

        None means: seed anew (the first forward on this GPU, or a saved state of another GPU model
        or cuDNN, which is then dropped with a warning). Orders the use on ``stream``.
        """
        live = self._live
        if live is not None and (live.device_id, live.device) != (device_id, device):
            self.load(None)
            live = None
        if live is None and self._saved is not None:
            saved, self._saved = self._saved, None
            if saved["device"] != device:
                warnings.warn(f"the layer's dropout RNG state was saved on {saved['device']:.200}; this is {device}: "
                              "the masks start anew from its seed and step, so they differ from those of the "
                              "uninterrupted run", UserWarning, stacklevel=2)
                return None
            live = self._adopt(device_id, device, saved["states"].shape, stream)
            copy_into(live.states, saved["states"])  # one copy, at the first forward after a load
        if live is None:
            return None
        live.buffers.use(stream, exclusive=True)
        return live.states

    def keep(self, device_id: int, device: str, working: Any, stream: Any) -> None:
        """After a training forward: the advanced state ``working`` (the network's) becomes the layer's."""
        from ._streams import copy

        live = self._live or self._adopt(device_id, device, working.shape, stream)
        live.buffers.use(stream, exclusive=True)
        copy(live.states, working, stream)

    def _adopt(self, device_id: int, device: str, shape: tuple[int, ...], stream: Any) -> _Live:
        """A new state array of ``shape`` on the call's GPU (current), made the layer's own."""
        from ._streams import DeviceBuffers, import_cupy

        states = import_cupy().empty(shape, dtype=np.uint8)
        self._live = _Live(device_id, device, states, DeviceBuffers(device_id, stream, states))
        return self._live

