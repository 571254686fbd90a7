"""``_descriptors``: the bounded LRU cache and the one-owner resources (on fake resources), and, when
libcudnn.so.9 is installed, set-then-get round trips of the RNN, RNN-data and tensor descriptors through
cuDNN's getters (handle-free calls only: cudnnCreate needs a driver), among them every RNN descriptor the
backend builds for the layout grid, the bfloat16 math types and the persistent algorithms.
"""

from __future__ import annotations

import gc
import itertools

import pytest

from cudnn_rnn._cudnn import _descriptors, _lib
from cudnn_rnn._cudnn._descriptors import LRUCache, Resource, live_counts
from cudnn_rnn._cudnn._layout_check import layout_check_configs
from cudnn_rnn._cudnn._settings import PRECISIONS, rnn_fields
from cudnn_rnn.config import RNNConfig
from cudnn_rnn.errors import CudnnError
from cudnn_testing import needs_library


# ==== resources and caches (fake resources) ===================================================
class FakeResource:
    def __init__(self, name: str, closed: list[str]) -> None:
        self.name, self._closed = name, closed

    def close(self) -> None:
        self._closed.append(self.name)


def test_lru_cache_is_bounded_and_evicts_least_recently_used() -> None:
    closed: list[str] = []
    cache: LRUCache[str, FakeResource] = LRUCache(3)
    made = {key: cache.get(key, lambda k=key: FakeResource(k, closed)) for key in "abc"}
    assert cache.get("a", lambda: pytest.fail("a hit must not create")) is made["a"]  # a is now the newest
    cache.get("d", lambda: FakeResource("d", closed))
    assert closed == ["b"] and cache.keys() == ["c", "a", "d"]
    cache.get("e", lambda: FakeResource("e", closed))
    assert closed == ["b", "c"] and len(cache) == 3 and "c" not in cache
    assert (cache.hits, cache.misses, cache.evictions) == (1, 5, 2)
    cache.clear()
    assert closed == ["b", "c", "a", "d", "e"] and len(cache) == 0


def test_lru_cache_stores_nothing_when_creation_fails() -> None:
    cache: LRUCache[int, FakeResource] = LRUCache(2)

    def fail() -> FakeResource:
        raise RuntimeError("creation failed")

    with pytest.raises(RuntimeError, match="creation failed"):
        cache.get(1, fail)
    assert len(cache) == 0 and cache.misses == 1
    with pytest.raises(ValueError, match="maxsize must be >= 1; got 0"):
        LRUCache(0)


def test_lru_cache_with_a_custom_close() -> None:
    freed: list[int] = []
    cache: LRUCache[int, int] = LRUCache(1, close=freed.append)
    for key in range(4):
        cache.get(key, lambda k=key: k * 10)
    assert freed == [0, 10, 20] and cache.values() == [30]


class FakeDescriptor(Resource):
    __slots__ = ()

    def __init__(self, pointer: int, destroyed: list[int]) -> None:
        super().__init__(pointer, destroyed.append)


def test_resource_close_is_idempotent_and_counted() -> None:
    destroyed: list[int] = []
    before = live_counts().get("FakeDescriptor", 0)
    descriptor = FakeDescriptor(1234, destroyed)
    assert descriptor.pointer == 1234 and not descriptor.closed
    assert live_counts()["FakeDescriptor"] == before + 1
    descriptor.close()
    descriptor.close()
    assert destroyed == [1234] and descriptor.closed
    assert live_counts().get("FakeDescriptor", 0) == before
    with pytest.raises(RuntimeError, match="FakeDescriptor is closed"):
        _ = descriptor.pointer


def test_resource_context_manager_and_garbage_collection_backstop() -> None:
    destroyed: list[int] = []
    with FakeDescriptor(1, destroyed) as descriptor:
        assert descriptor.pointer == 1
    assert destroyed == [1]
    FakeDescriptor(2, destroyed)  # dropped at once: the finalizer frees it
    gc.collect()
    assert destroyed == [1, 2]
    assert not hasattr(FakeDescriptor, "__del__")


def test_adopt_destroys_the_object_when_its_setup_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, int]] = []
    monkeypatch.setattr(_lib, "create", lambda kind: calls.append(("create", kind, 77)) or 77)
    monkeypatch.setattr(_lib, "destroy", lambda kind, pointer: calls.append(("destroy", kind, pointer)))

    def bad_setup(pointer: int) -> None:
        raise CudnnError("CUDNN_STATUS_BAD_PARAM", 2000, "cudnnSetTensorNdDescriptor")

    before = live_counts()
    with pytest.raises(CudnnError):
        Resource._adopt("TensorDescriptor", bad_setup)
    assert calls == [("create", "TensorDescriptor", 77), ("destroy", "TensorDescriptor", 77)]
    assert live_counts() == before


def test_packed_strides() -> None:
    assert _descriptors.packed_strides((4, 3, 5)) == (15, 5, 1)
    assert _descriptors.packed_strides((2, 0, 3)) == (3, 3, 1)


# ==== against the installed cuDNN: handle-free round trips =======================================
def _rnn_field_grid() -> list[_lib.RNNDescriptorFields]:
    precisions = [(_lib.DataType.HALF, _lib.DataType.FLOAT, _lib.MathType.TENSOR_OP_MATH),
                  (_lib.DataType.HALF, _lib.DataType.HALF, _lib.MathType.DEFAULT_MATH),
                  (_lib.DataType.FLOAT, _lib.DataType.FLOAT, _lib.MathType.FMA_MATH),
                  (_lib.DataType.FLOAT, _lib.DataType.FLOAT, _lib.MathType.DEFAULT_MATH),
                  (_lib.DataType.DOUBLE, _lib.DataType.DOUBLE, _lib.MathType.DEFAULT_MATH)]
    grid = []
    for mode, direction, input_mode, (data, prec, math), bias in itertools.product(
            _lib.RNNMode, _lib.DirectionMode, _lib.RNNInputMode, precisions,
            (_lib.RNNBiasMode.DOUBLE_BIAS, _lib.RNNBiasMode.SINGLE_INP_BIAS)):
        hidden = 9
        projection = 5 if mode == _lib.RNNMode.LSTM and input_mode == _lib.RNNInputMode.LINEAR_INPUT else hidden
        input_size = hidden if input_mode == _lib.RNNInputMode.SKIP_INPUT else 7
        grid.append(_lib.RNNDescriptorFields(_lib.RNNAlgo.STANDARD, mode, bias, direction, input_mode, data, prec,
                                             math, input_size, hidden, projection, 3, 0,
                                             int(direction) & _lib.AuxFlag.PADDED_IO_ENABLED))
    return grid


@needs_library
def test_rnn_descriptor_round_trip() -> None:
    for fields in _rnn_field_grid():
        with _descriptors.RNNDescriptor(fields) as descriptor:
            assert descriptor.read() == fields


def _descriptors_the_backend_builds(dropout: int) -> list[_lib.RNNDescriptorFields]:
    """The RNN descriptors the backend asks for, with the dropout descriptor ``dropout``: each layout-grid
    configuration with its dtype's math types (by default and with TF32 allowed; bfloat16 with every math type,
    which a GPU run chooses from) and the persistent algorithms where PyTorch runs them
    (tests/gpu/test_algos_gpu.py's MUST_RUN)."""
    fields = []
    for config in layout_check_configs():
        math_types = (set(_lib.MathType) if config.dtype == "bfloat16" else
                      {PRECISIONS[config.dtype].math_type, PRECISIONS[config.dtype].tf32_math_type})
        fields += [rnn_fields(config, "standard", math_type, dropout) for math_type in sorted(math_types)]
    for algo, config in (("persist_static", RNNConfig("lstm", 1, 128, 128, dtype="float16")),
                         ("persist_static_small_h", RNNConfig("lstm", 1, 64, 32, dtype="float32")),
                         ("persist_static_small_h", RNNConfig("gru", 1, 64, 32, dtype="float16"))):
        fields.append(rnn_fields(config, algo, PRECISIONS[config.dtype].math_type, dropout))
    return fields


@needs_library
def test_every_descriptor_the_backend_builds_is_accepted_and_read_back() -> None:
    dropout = _lib.create("DropoutDescriptor")  # created, not set: setting one needs a handle, and so a GPU
    try:
        built = _descriptors_the_backend_builds(dropout)
        # 60 configurations a dtype: float32 with FMA and TF32 math, float16 and float64 with one, bfloat16 with each
        assert len(built) == 60 * (2 + 1 + 1 + len(_lib.MathType)) + 3
        for fields in built:
            with _descriptors.RNNDescriptor(fields) as descriptor:
                assert descriptor.read() == fields
    finally:
        _lib.destroy("DropoutDescriptor", dropout)


@needs_library
def test_rnn_descriptor_errors_carry_status_and_function() -> None:
    fields = _rnn_field_grid()[0]
    before = live_counts()
    bad = _lib.RNNDescriptorFields(**{**fields.__dict__, "cell_mode": _lib.RNNMode.LSTM,
                                      "hidden_size": 4, "proj_size": 6})  # projSize > hiddenSize
    with pytest.raises(CudnnError) as raised:
        _descriptors.RNNDescriptor(bad)
    assert (raised.value.status_name, raised.value.status) == ("CUDNN_STATUS_NOT_SUPPORTED", 3000)
    assert raised.value.function == "cudnnSetRNNDescriptor_v8"
    assert live_counts() == before  # the half-built descriptor was destroyed


@needs_library
def test_tensor_descriptor_round_trip() -> None:
    for data_type, dims, strides in ((_lib.DataType.FLOAT, (6, 4, 5), None),
                                     (_lib.DataType.DOUBLE, (2, 3, 7), (100, 30, 1)),
                                     (_lib.DataType.HALF, (1, 1, 3), None)):
        with _descriptors.TensorDescriptor(data_type, dims, strides) as descriptor:
            assert descriptor.read() == (data_type, dims, strides or _descriptors.packed_strides(dims))


@needs_library
def test_rnn_data_descriptor_round_trip() -> None:
    for data_type, layout, fill in itertools.product(
            (_lib.DataType.HALF, _lib.DataType.FLOAT, _lib.DataType.DOUBLE),
            (_lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, _lib.RNNDataLayout.BATCH_MAJOR_UNPACKED), (0.0, -1.5)):
        fields = _lib.RNNDataFields(data_type, layout, 6, 4, 5, (6, 0, 2, 3), fill)
        with _descriptors.RNNDataDescriptor(fields) as descriptor:
            assert descriptor.read() == fields


@needs_library
def test_rnn_data_descriptor_refuses_a_length_above_max_time() -> None:
    fields = _lib.RNNDataFields(_lib.DataType.FLOAT, _lib.RNNDataLayout.SEQ_MAJOR_UNPACKED, 3, 2, 4, (4, 1))
    with pytest.raises(CudnnError) as raised:
        _descriptors.RNNDataDescriptor(fields)
    assert raised.value.status == 2000 and raised.value.function == "cudnnSetRNNDataDescriptor"
    assert "maxSeqLength" in raised.value.detail  # cuDNN's own text, through cudnnGetLastErrorString


@needs_library
@pytest.mark.skipif(_lib.cuda_driver_version() is not None, reason="a CUDA driver is present")
def test_handle_creation_without_a_driver_is_a_clear_error() -> None:
    with pytest.raises(CudnnError) as raised:
        _descriptors.Handle(0)
    assert raised.value.status_name == "CUDNN_STATUS_NOT_INITIALIZED" and raised.value.function == "cudnnCreate"
