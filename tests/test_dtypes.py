"""The one dtype table (cudnn_rnn._dtypes) against the frameworks and formats whose names it records."""

from __future__ import annotations

import numpy as np
import pytest

from cudnn_rnn import _dtypes, config
from cudnn_rnn._cudnn._lib import DataType


def test_every_params_type_has_every_name() -> None:
    for dtype in _dtypes.TABLE:
        if dtype.params:
            assert None not in (dtype.safetensors, dtype.torch, dtype.torch_storage, dtype.onnx, dtype.tf, dtype.cudnn)
    assert config.DTYPES == ("float16", "float32", "float64", "bfloat16")
    assert config.BUILTIN_DTYPES == ("float16", "float32", "float64")
    assert config.COMPUTE_DTYPES == {"float16": "float32", "bfloat16": "float32"}
    assert config.ITEMSIZES == {name: config.numpy_dtype(name).itemsize for name in config.DTYPES}


def test_item_sizes_and_names_are_numpy_s() -> None:
    for dtype in _dtypes.TABLE:
        assert _dtypes.numpy_dtype(dtype.name).itemsize == dtype.itemsize
        assert _dtypes.numpy_dtype(dtype.name).name == dtype.name
    for field in ("safetensors", "torch", "torch_storage", "onnx", "tf", "cudnn", "nccl"):
        values = [getattr(dtype, field) for dtype in _dtypes.TABLE if getattr(dtype, field) is not None]
        assert len(values) == len(set(values)), field  # each name stands for one type


def test_lookup_and_names() -> None:
    assert _dtypes.lookup("safetensors", "BF16") is _dtypes.BY_NAME["bfloat16"]
    assert _dtypes.lookup("onnx", 8) is None  # ONNX strings
    assert _dtypes.names("torch_storage")["HalfStorage"] == "float16"
    with pytest.raises(ValueError, match="field must be one of"):
        _dtypes.names("nonsense")


def test_cudnn_numbers_are_cudnn_data_types() -> None:
    cudnn_names = {"HALF": "float16", "FLOAT": "float32", "DOUBLE": "float64", "BFLOAT16": "bfloat16",
                   "BOOLEAN": "bool", "UINT8": "uint8", "INT8": "int8", "INT32": "int32", "INT64": "int64"}
    for dtype in _dtypes.TABLE:
        if dtype.cudnn is not None:
            assert cudnn_names[DataType(dtype.cudnn).name] == dtype.name


def test_bits_round_trip_exactly() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1.0, -2.5, 3.140625, np.inf], ml_dtypes.bfloat16)
    bits = _dtypes.as_bits(values)
    assert bits.dtype == np.int16 and bits.shape == values.shape
    assert np.array_equal(_dtypes.from_bits(bits, "bfloat16"), values)
    assert np.array_equal(_dtypes.widen_bfloat16(bits), values.astype(np.float32))
    plain = np.ones(3, np.float32)
    assert _dtypes.as_bits(plain) is plain and _dtypes.from_bits(plain, "float32") is plain
