"""Helpers of the cuDNN binding's host tests: the installed library, and cases on the fake GPU.

* :data:`LIBRARY` is libcudnn.so.9 when installed (the nvidia-cudnn wheel loads without a
  driver), else None; :data:`needs_library` skips a test without it.
* On tests/support/fake_gpu.py (the ``fake_cudnn`` fixture of tests/conftest.py): :data:`LSTMP` with
  :func:`backend_inputs` and :func:`backend_forward` drive ``_cudnn.forward`` directly;
  :data:`DROPPY` with :func:`device_arrays` and :func:`train_step` drive the public ops.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn._cudnn import _backend as _cudnn, _lib
from cudnn_rnn.config import RNNConfig
from cudnn_rnn.errors import CudnnNotAvailableError
from cudnn_rnn.layout import params_layout
from cudnn_rnn.optim import SGD
from fake_gpu import to_device
from rnn_testing import Arrays, Case, random_arrays, stable_seed

REPO = Path(__file__).resolve().parents[2]


def _library_or_none() -> _lib.Library | None:
    try:
        return _lib.library()
    except CudnnNotAvailableError:
        return None


LIBRARY = _library_or_none()
needs_library = pytest.mark.skipif(LIBRARY is None,
                                   reason="libcudnn.so.9 is not installed (pip install nvidia-cudnn-cu12)")


# ==== the backend's interface, on the fake device ===============================================
LSTMP = RNNConfig("lstm", 2, 5, 3, direction="bidirectional", num_proj=2, dropout=0.5, seed=7, seed2=1,
                  dtype="float64")


def backend_inputs(config: RNNConfig, max_time: int, batch: int, time_major: bool = True, device: int = 0
                   ) -> dict[str, Any]:
    """Random x, h0, c0, params, y, dy, dhy, dcy on fake ``device``, time-major states as ops.py hands them."""
    rng = np.random.default_rng(0)
    seq = (max_time, batch) if time_major else (batch, max_time)
    states = (config.num_pseudo_layers, batch)

    def draw(*shape: int) -> Any:
        return to_device(rng.uniform(-1, 1, shape), device)

    return dict(x=draw(*seq, config.input_size), h0=draw(*states, config.state_size),
                c0=draw(*states, config.num_units) if config.has_cell else None,
                params=draw(params_layout(config).size), y=draw(*seq, config.output_size),
                dy=draw(*seq, config.output_size), dhy=draw(*states, config.state_size),
                dcy=draw(*states, config.num_units) if config.has_cell else None)


def backend_forward(config: RNNConfig, a: dict, lengths: Any, training: bool = True, time_major: bool = True
                    ) -> tuple:
    """``_cudnn.forward`` on :func:`backend_inputs`."""
    return _cudnn.forward(config, a["x"], a["h0"], a["c0"], a["params"], np.asarray(lengths, np.int32),
                          is_training=training, time_major=time_major)


# ==== the public ops, on the fake device =========================================================
DROPPY = Case("lstm", num_layers=2, num_units=5, input_size=3, direction="bidirectional", num_proj=2, max_time=5,
              batch=3, lengths=(5, 0, 3), dropout=0.5, seed=3, seed2=4, time_major=False)


def on_device(a: Arrays, device: int) -> Arrays:
    """``a`` as fake device arrays on ``device`` (lengths stay on the host)."""
    return Arrays(**{f.name: value if value is None or f.name == "lengths" else to_device(value, device)
                     for f in fields(Arrays) for value in [getattr(a, f.name)]})


def device_arrays(case: Case, device: int = 0) -> Arrays:
    """The case's random arrays (a fixed draw per case) on fake ``device``."""
    return on_device(random_arrays(case, np.random.default_rng(stable_seed(case))), device)


def train_step(case: Case, a: Arrays, *, pass_host_reserved: bool = True, optimiser: SGD | None = None,
               **overrides: Any) -> dict[str, Any]:
    """Forward, backprop (and an optimiser update of a.params) through the public ops."""
    attrs = {**case.attrs(), **overrides}
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, is_training=True, **attrs)
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(
        a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h, out.output_c, a.dy, a.dhy, a.dcy,
        out.reserve_space, out.host_reserved if pass_host_reserved else None, **attrs)
    if optimiser is not None:
        optimiser.step([grads.params_backprop])
    return {**out._asdict(), **grads._asdict()}
