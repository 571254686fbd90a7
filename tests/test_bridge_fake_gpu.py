"""The bridges' shared core on the cuDNN backend, on tests/support/fake_gpu.py: the reserve's length that a
framework sizes while tracing is the length cuDNN's forward returns, asked without reading from or waiting
for the device, and the residual backward of a framework's own buffer never waits either.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import _bridge, ops
from cudnn_testing import DROPPY, device_arrays
from fake_gpu import FakeCudnn, to_device


@pytest.mark.parametrize("changes", [{}, {"time_major": True, "rnn_mode": "gru", "num_proj": 0},
                                     {"algo": "persist_static", "lengths": None, "num_proj": 0}],
                         ids=["lstm-projection-batch-major", "gru-time-major", "persistent-runs-time-major"])
def test_the_traced_reserve_length_is_cudnns(fake_cudnn: FakeCudnn, changes: dict[str, object]) -> None:
    case = DROPPY.with_(**changes)
    a = device_arrays(case)
    sig = _bridge.signature(a.x.shape, a.h0.shape, None if a.c0 is None else a.c0.shape, a.params.shape,
                            a.x.dtype, None if a.lengths is None else (case.batch,), np.int32, **case.attrs())
    with fake_cudnn.gpu.counting() as traced:
        elements = sig.reserve_elements("cuda")
    assert "d2h" not in traced and "wait" not in traced, traced
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, is_training=True, **case.attrs())
    assert elements == out.reserve_space.shape[0]


@pytest.mark.parametrize("longer", [0, 100], ids=["as-long", "longer"])  # longer: sized for another platform too
def test_a_residual_backward_on_a_framework_buffer_never_waits(fake_cudnn: FakeCudnn, longer: int) -> None:
    a = device_arrays(DROPPY)
    config, time_major = DROPPY.config(), DROPPY.time_major
    out = _bridge.forward(config, a.x, a.h0, a.c0, a.params, a.lengths, time_major=time_major, is_training=True)
    framework_buffer = to_device(np.zeros(out.reserve_space.shape[0] + longer, out.reserve_space.dtype))
    ops._copy_into(framework_buffer, out.reserve_space)
    with fake_cudnn.gpu.counting() as backward:
        grads = _bridge.backward(config, a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                 out.output_c, a.dy, a.dhy, a.dcy, framework_buffer, time_major=time_major)
    assert backward == {}, "no read, upload or wait"
    expected = cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                               out.output_c, a.dy, a.dhy, a.dcy, out.reserve_space,
                                               **DROPPY.attrs())
    for got, want in zip(grads, expected):
        np.testing.assert_array_equal(got.view(np.ndarray), want.view(np.ndarray))
