"""``_reserve``, the one owner of the reserve-space check: the key of a forward call and the header its
reserve starts with, :func:`~cudnn_rnn._reserve.record` after every forward and
:func:`~cudnn_rnn._reserve.check` before every backprop, with every refusal; through the public ops, a
forward's own reserve is checked without reading the device (tests/support/fake_gpu.py), and the reference
backend's reserves are checked the same way.
"""

from __future__ import annotations

import gc
from typing import Any, Callable

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import _reserve
from cudnn_rnn._reserve import (HEADER_BYTES, ForwardKey, check, header, header_elements, header_only, header_view,
                                payload, read_header, record, recorded_fingerprint, write_header)
from cudnn_rnn.config import RNNConfig
from cudnn_testing import DROPPY, device_arrays
from fake_gpu import FakeCudnn
from rnn_testing import random_arrays

CONFIG = RNNConfig("lstm", 2, 5, 3, direction="bidirectional", num_proj=2, dropout=0.5, seed=3, seed2=4,
                   dtype="float64")
LENGTHS = np.array([5, 0, 3], np.int32)


def key_of(backend: str = "reference", config: RNNConfig = CONFIG, max_time: int = 5, batch: int = 3,
           time_major: bool = True, lengths: Any = LENGTHS) -> ForwardKey:
    return ForwardKey(backend, config, max_time, batch, time_major, np.asarray(lengths))


def written(key: ForwardKey, payload_elements: int = 10) -> np.ndarray:
    """A training forward's reserve for ``key``, as the reference backend writes it."""
    reserve = np.empty(header_elements(key.config.dtype) + payload_elements, dtype=key.config.dtype)
    write_header(reserve, key)
    return reserve


# ==== the key of a forward call ===================================================================
def test_the_fingerprint_covers_the_whole_call() -> None:
    base = key_of()
    others = {"backend": key_of("cudnn"), "mode": key_of(config=CONFIG.replace(rnn_mode="gru", num_proj=0)),
              "seed": key_of(config=CONFIG.replace(seed=5)), "seed2": key_of(config=CONFIG.replace(seed2=5)),
              "dropout": key_of(config=CONFIG.replace(dropout=0.25)), "max_time": key_of(max_time=6),
              "batch": key_of(batch=4, lengths=[5, 0, 3, 1]), "layout": key_of(time_major=False),
              "lengths": key_of(lengths=[5, 1, 3])}
    fingerprints = [key.fingerprint for key in others.values()] + [base.fingerprint]
    assert len(set(fingerprints)) == len(fingerprints), "each change is another call"
    assert len(base.fingerprint) == 8
    assert key_of(lengths=LENGTHS.astype(np.int64)).fingerprint == base.fingerprint, "lengths count by value"


def test_the_header_tag_is_what_the_backends_backprop_depends_on() -> None:
    reference, cudnn = key_of(), key_of("cudnn")
    assert reference.header_tag == reference.fingerprint, "the reference backend draws its masks from the seeds"
    assert key_of(config=CONFIG.replace(seed=9)).header_tag != reference.header_tag
    # cuDNN's masks are in the reserve: its header leaves the seeds out, so a plan's header serves every seed
    assert cudnn.header_tag != cudnn.fingerprint
    assert key_of("cudnn", config=CONFIG.replace(seed=9, seed2=1)).header_tag == cudnn.header_tag
    assert key_of("cudnn", config=CONFIG.replace(dropout=0.25)).header_tag != cudnn.header_tag, "dropout acts"
    one_layer = CONFIG.replace(num_layers=1)  # dropout acts between layers only
    assert key_of("cudnn", config=one_layer).header_tag == key_of("cudnn", config=one_layer.replace(dropout=0.0)
                                                                  ).header_tag
    for changed in (key_of("cudnn", lengths=[5, 1, 3]), key_of("cudnn", max_time=6), key_of("cudnn", time_major=False)):
        assert changed.header_tag != cudnn.header_tag


# ==== the header a forward writes =================================================================
def test_the_header_is_the_tag_then_zeros_in_the_reserves_own_dtype() -> None:
    for dtype in (np.float16, np.float32, np.float64):
        assert header_elements(dtype) * np.dtype(dtype).itemsize == HEADER_BYTES
    key = key_of()
    assert header(key).dtype == np.uint8 and header(key).shape == (HEADER_BYTES,)
    assert header(key)[:8].tobytes() == key.header_tag and not header(key)[8:].any()
    reserve = written(key)
    assert header_view(reserve).shape == (HEADER_BYTES,) and np.shares_memory(header_view(reserve), reserve)
    np.testing.assert_array_equal(header_view(reserve), header(key))
    assert read_header(reserve) == key.header_tag
    assert payload(reserve).shape == (10,) and np.shares_memory(payload(reserve), reserve)
    only = header_only(np, np.float64, key)
    assert only.dtype == np.float64 and only.shape == (header_elements(np.float64),)
    assert read_header(only) == key.header_tag and payload(only).size == 0


# ==== record ======================================================================================
def test_record_returns_host_reserved_and_remembers_this_very_array() -> None:
    key = key_of()
    reserve = written(key)
    host_reserved = record(reserve, key)
    assert host_reserved.dtype == np.int8 and host_reserved.shape == (8,)
    assert host_reserved.tobytes() == key.fingerprint
    assert recorded_fingerprint(reserve) == key.fingerprint
    assert recorded_fingerprint(reserve.copy()) is None and recorded_fingerprint(reserve[:]) is None
    inference = np.empty(0, dtype=np.float64)
    assert record(inference, key).tobytes() == key.fingerprint
    assert recorded_fingerprint(inference) is None, "an inference forward's empty reserve is not remembered"
    address = id(reserve)
    del reserve
    gc.collect()
    assert address not in _reserve._records, "the records forget a reserve with the array"


# ==== check =======================================================================================
def test_check_takes_the_forwards_own_reserve_without_reading_its_header(monkeypatch: pytest.MonkeyPatch) -> None:
    key = key_of()
    reserve = written(key)
    host_reserved = record(reserve, key)

    def no_read(reserve: Any) -> bytes:
        raise AssertionError("the header of a recorded reserve was read")

    monkeypatch.setattr(_reserve, "read_header", no_read)
    for given in (host_reserved, None, np.empty(0, dtype=np.int8)):  # None or empty: host_reserved is not checked
        check(reserve, given, key)


def test_check_takes_a_copy_by_its_header() -> None:
    key = key_of()
    reserve = written(key)
    host_reserved = record(reserve, key)
    check(reserve.copy(), host_reserved, key)
    check(reserve.copy(), None, key)
    cudnn = key_of("cudnn")
    check(written(cudnn).copy(), None, key_of("cudnn", config=CONFIG.replace(seed=9)))  # cuDNN's masks: in the reserve


def another_host_reserved() -> np.ndarray:
    other = key_of(max_time=6)
    return record(written(other), other)


Change = Callable[[np.ndarray, np.ndarray, ForwardKey], tuple[Any, Any, ForwardKey]]

#: name -> (what changes between the forward and the backprop, the error, its message)
REFUSALS: dict[str, tuple[Change, type[Exception], str]] = {
    "reserve None": (lambda r, h, k: (None, h, k), TypeError,
                     "reserve_space must be the forward's reserve_space array; got None"),
    "reserve 2-D": (lambda r, h, k: (r.reshape(2, -1), h, k), ValueError,
                    r"reserve_space must be a 1-D array; got shape \(2, 21\) \(2-D\)"),
    "reserve of another dtype": (lambda r, h, k: (np.zeros(r.shape, np.float32), h, k), TypeError,
                                 r"reserve_space must have the dtype of input \(float64\); got float32"),
    "reserve of an inference forward": (lambda r, h, k: (np.empty(0), h, k), ValueError,
                                        "reserve_space is empty: the forward ran with is_training=False"),
    "reserve shorter than a header": (lambda r, h, k: (r[:header_elements(np.float64) - 1], h, k), ValueError,
                                      "reserve_space has 31 elements, fewer than any forward call writes"),
    "reserve not from a forward": (lambda r, h, k: (np.zeros_like(r), h, k), ValueError,
                                   "reserve_space was made by a different forward call"),
    "host_reserved a list": (lambda r, h, k: (r, h.tolist(), k), TypeError,
                             "host_reserved must be None or the forward's int8 array; got list"),
    "host_reserved int32": (lambda r, h, k: (r, h.astype(np.int32), k), ValueError,
                            "host_reserved does not belong to this forward call"),
    "host_reserved 2-D": (lambda r, h, k: (r, h.reshape(2, 4), k), ValueError,
                          "host_reserved does not belong to this forward call"),
    "host_reserved of another call": (lambda r, h, k: (r, another_host_reserved(), k), ValueError,
                                      "host_reserved does not belong to this forward call"),
}
#: the forward's key -> the backprop's: each is another call
OTHER_CALLS: dict[str, ForwardKey] = {
    "another configuration": key_of(config=CONFIG.replace(direction="unidirectional")),
    "another dropout": key_of(config=CONFIG.replace(dropout=0.25)),
    "another seed": key_of(config=CONFIG.replace(seed2=5)),
    "other lengths": key_of(lengths=[5, 1, 3]),
    "another max_time": key_of(max_time=6),
    "another batch": key_of(batch=4, lengths=[5, 0, 3, 1]),
    "another layout": key_of(time_major=False),
    "another backend": key_of("cudnn"),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_check_refuses(name: str) -> None:
    change, error, message = REFUSALS[name]
    key = key_of()
    reserve = written(key, payload_elements=10)  # 32 + 10 elements
    host_reserved = record(reserve, key)
    reserve, host_reserved, key = change(reserve, host_reserved, key)
    with pytest.raises(error, match=message):
        check(reserve, host_reserved, key)


@pytest.mark.parametrize("how", ["the forward's own array", "a copy"])
@pytest.mark.parametrize("name", OTHER_CALLS)
def test_check_refuses_a_reserve_of_another_call(name: str, how: str) -> None:
    key = key_of()
    reserve = written(key)
    record(reserve, key)
    given = reserve if how == "the forward's own array" else reserve.copy()
    with pytest.raises(ValueError, match="reserve_space was made by a different forward call"):
        check(given, None, OTHER_CALLS[name])


# ==== through the public ops ======================================================================
def test_a_reserve_from_another_call_is_refused_without_a_device_read(fake_cudnn: FakeCudnn) -> None:
    a = device_arrays(DROPPY)
    attrs = DROPPY.attrs()
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **attrs)
    other = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, np.array([5, 5, 1], np.int32), **attrs)

    def backprop(reserve: Any, host_reserved: Any = None, **changes: Any) -> Any:
        return cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                               out.output_c, a.dy, a.dhy, a.dcy, reserve, host_reserved,
                                               **{**attrs, **changes})

    message = "reserve_space was made by a different forward call"
    with fake_cudnn.gpu.counting() as made:
        with pytest.raises(ValueError, match=message):
            backprop(other.reserve_space)  # lengths differ
        with pytest.raises(ValueError, match=message):
            backprop(out.reserve_space, seed2=5)  # another seed: another call
        with pytest.raises(ValueError, match="host_reserved does not belong to this forward call"):
            backprop(out.reserve_space, other.host_reserved)
        backprop(out.reserve_space)
    assert made == {}, "checked on the host"
    with fake_cudnn.gpu.counting() as made:
        backprop(out.reserve_space.copy())  # not an array a forward returned: its header is read back
        with pytest.raises(ValueError, match=message):
            backprop(other.reserve_space.copy())
    assert made == {"d2h": 2}


def test_reference_reserves_are_checked_the_same_way() -> None:
    case = DROPPY.with_(dtype="float64")
    a = random_arrays(case, np.random.default_rng(1))
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **case.attrs())
    assert _reserve.recorded_fingerprint(out.reserve_space) == out.host_reserved.tobytes()
    copy = out.reserve_space.copy()
    longer = np.concatenate([copy, np.full(7, np.nan)])  # the backend reads the front it needs, as cuDNN does
    assert _reserve.recorded_fingerprint(copy) is None

    outputs = (out.output, out.output_h, out.output_c)

    def backprop(reserve: np.ndarray) -> Any:
        return cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, *outputs, a.dy, a.dhy, a.dcy,
                                               reserve, None, **case.attrs())

    grads = [backprop(reserve) for reserve in (out.reserve_space, copy, longer)]
    for first, *others in zip(*grads):
        for other in others:
            np.testing.assert_array_equal(first, other)
    with pytest.raises(ValueError, match=rf"reserve_space must have at least {copy.size} elements for this call; "
                                         rf"got {copy.size - 1}"):
        backprop(copy[:-1])
    with pytest.raises(ValueError, match="reserve_space was made by a different forward call"):
        cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                        out.output_c, a.dy, a.dhy, a.dcy, copy, None, **{**case.attrs(), "seed": 4})
    key = id(out.reserve_space)
    del out, grads
    gc.collect()
    assert key not in _reserve._records, "the records forget a reserve with the array"
