"""``_cudnn``, the backend's forward and backward, on tests/support/fake_gpu.py: the arguments of each cuDNN
call, length-0 rows and padding, batch-major data and inference, the reserve's header and payload, and
the backend's refusals. The arithmetic is cuDNN's and is checked in tests/gpu; devices, streams and host
transfers through the public ops are in tests/test_cudnn_fake_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from cudnn_rnn._cudnn import _backend as _cudnn, _lib
from cudnn_rnn import _reserve
from cudnn_rnn.config import RNNConfig
from cudnn_testing import LSTMP, backend_forward, backend_inputs
from fake_gpu import FakeCudnn, to_device


def test_fake_forward_arguments_and_length_zero_rows(fake_cudnn: FakeCudnn) -> None:
    a = backend_inputs(LSTMP, 4, 3)
    x_before = np.array(a["x"])
    y, hy, cy, reserve = backend_forward(LSTMP, a, [3, 0, 2])
    seen = fake_cudnn.seen
    assert seen["mode"] == _lib.ForwardMode.TRAINING
    np.testing.assert_array_equal(seen["lengths"], [3, 1, 2])  # length 0 runs as 1 ...
    np.testing.assert_array_equal(seen["x"][0, 1], 0.0)  # ... on a zeroed input
    for row, length in enumerate((3, 0, 2)):
        np.testing.assert_array_equal(seen["x"][:length, row], x_before[:length, row])
        np.testing.assert_array_equal(seen["x"][length:, row], 0.0)  # padding reaches cuDNN as zeros
    np.testing.assert_array_equal(np.array(a["x"]), x_before)  # the caller's x is untouched
    assert seen["weight_size"] == a["params"].nbytes and seen["work_size"] == FakeCudnn.WORKSPACE
    header = _reserve.header_elements(np.float64)
    assert reserve.shape == (header + FakeCudnn.RESERVE // 8,) and seen["reserve_size"] == FakeCudnn.RESERVE
    assert seen["reserve"] == reserve.data.ptr + _reserve.HEADER_BYTES
    key = _reserve.ForwardKey("cudnn", LSTMP, 4, 3, True, np.array([3, 0, 2]))
    assert _reserve.read_header(reserve) == key.header_tag
    y, hy, cy = (np.array(v) for v in (y, hy, cy))
    assert y.shape == (4, 3, 4) and not y[:, 1].any() and (y[:, [0, 2]] == 1).all()
    np.testing.assert_array_equal(hy[:, 1], np.array(a["h0"])[:, 1])
    np.testing.assert_array_equal(cy[:, 1], np.array(a["c0"])[:, 1])
    assert (hy[:, [0, 2]] == 2).all() and (cy[:, [0, 2]] == 3).all()
    data = [call[1] for call in fake_cudnn.calls if call[0] == "data"]
    assert [(d.layout, d.max_seq_length, d.batch_size, d.vector_size, d.seq_lengths) for d in data] == [
        (_lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, 4, 3, 3, (3, 1, 2)),
        (_lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, 4, 3, 4, (3, 1, 2))]
    assert sorted(dims for _, dims, _ in fake_cudnn.tensors.values() if dims[0] == 4) == [(4, 3, 2), (4, 3, 5)]
    assert ("set_dropout", 0.5, FakeCudnn.DROPOUT_STATES, LSTMP.seed64) in fake_cudnn.calls


def test_fake_batch_major_and_inference(fake_cudnn: FakeCudnn) -> None:
    config = RNNConfig("gru", 1, 4, 3, dtype="float64")
    a = backend_inputs(config, 5, 2, time_major=False)
    y, hy, cy, reserve = backend_forward(config, a, [0, 5], training=False, time_major=False)
    assert fake_cudnn.seen["mode"] == _lib.ForwardMode.INFERENCE and fake_cudnn.seen["reserve_size"] == 0
    assert reserve.shape == (0,) and cy is None
    y = np.array(y)
    assert not y[0].any() and (y[1] == 1).all()
    np.testing.assert_array_equal(fake_cudnn.seen["x"][0, 0], 0.0)
    np.testing.assert_array_equal(np.array(hy)[:, 0], np.array(a["h0"])[:, 0])
    data = [call[1] for call in fake_cudnn.calls if call[0] == "data"]
    assert {d.layout for d in data} == {_lib.RNNDataLayout.BATCH_MAJOR_UNPACKED}


def test_fake_backward_arguments_and_length_zero_rows(fake_cudnn: FakeCudnn, monkeypatch: pytest.MonkeyPatch) -> None:
    a = backend_inputs(LSTMP, 4, 3)
    lengths = np.array([3, 0, 2], np.int32)
    y, _, _, reserve = backend_forward(LSTMP, a, lengths)
    upstream = {name: np.array(a[name]) for name in ("dy", "dhy", "dcy")}
    dx, dh0, dc0, dparams = (np.array(v) for v in _cudnn.backward(
        LSTMP, a["x"], a["h0"], a["c0"], a["params"], lengths, y, a["dy"], a["dhy"], a["dcy"], reserve,
        time_major=True))
    seen = fake_cudnn.seen
    for name in ("dy", "dhy", "dcy"):
        np.testing.assert_array_equal(np.array(a[name]), upstream[name])  # the caller's gradients are untouched
        assert not seen[name][:, 1].any(), f"{name} of the length-0 row reaches cuDNN as zeros"
    np.testing.assert_array_equal(seen["dhy"][:, [0, 2]], upstream["dhy"][:, [0, 2]])
    for row, length in enumerate(lengths):
        np.testing.assert_array_equal(seen["dy"][:length, row], upstream["dy"][:length, row])
        assert not seen["dy"][length:, row].any() and not seen["weights_x"][length:, row].any()  # padding: zeros
    assert not dx[:, 1].any() and (dx[:, [0, 2]] == 7).all()
    np.testing.assert_array_equal(dh0[:, 1], upstream["dhy"][:, 1])
    np.testing.assert_array_equal(dc0[:, 1], upstream["dcy"][:, 1])
    assert (dh0[:, [0, 2]] == 8).all() and (dc0[:, [0, 2]] == 9).all()
    assert (dparams == 1).all()  # ADD into a zeroed buffer
    payload = reserve.data.ptr + _reserve.HEADER_BYTES
    assert seen["backward_reserve"] != payload  # a copy: the reserve stays valid for another backprop
    monkeypatch.setattr(_cudnn, "RESERVE_SURVIVES_BACKWARD", True)
    _cudnn.backward(LSTMP, a["x"], a["h0"], a["c0"], a["params"], lengths, y, a["dy"], a["dhy"], a["dcy"], reserve,
                    time_major=True)
    assert seen["backward_reserve"] == payload
    with pytest.raises(ValueError, match=r"reserve_space must hold 4096 bytes after its header for this call; got 8"):
        _cudnn.backward(LSTMP, a["x"], a["h0"], a["c0"], a["params"], lengths, y, a["dy"], a["dhy"], a["dcy"],
                        reserve[:_reserve.header_elements(np.float64) + 1], time_major=True)


def test_fake_refusals(fake_cudnn: FakeCudnn) -> None:
    a = backend_inputs(LSTMP, 4, 3)
    with pytest.raises(ValueError, match=r"params must have 640 elements for this configuration .*; got 639"):
        _cudnn.forward(LSTMP, a["x"], a["h0"], a["c0"], a["params"][:-1], np.full(3, 4, np.int32),
                       is_training=True, time_major=True)
    elsewhere = to_device(np.array(a["c0"]), 1)
    with pytest.raises(ValueError, match="all arrays of one call must be on one GPU; got x on device 0, h0 on "
                                         "device 0, c0 on device 1, params on device 0"):
        _cudnn.forward(LSTMP, a["x"], a["h0"], elsewhere, a["params"], np.full(3, 4, np.int32),
                       is_training=True, time_major=True)


def test_fake_non_contiguous_inputs_are_copied(fake_cudnn: FakeCudnn) -> None:
    config = RNNConfig("rnn_tanh", 1, 4, 3, dtype="float64")
    a = backend_inputs(config, 4, 3)
    strided = to_device(np.repeat(np.array(a["x"]), 2, axis=2))[:, :, ::2]
    assert not strided.flags.c_contiguous
    _cudnn.forward(config, strided, a["h0"], None, a["params"], np.full(3, 4, np.int32), is_training=False,
                   time_major=True)
    np.testing.assert_array_equal(fake_cudnn.seen["x"], np.array(a["x"]))
