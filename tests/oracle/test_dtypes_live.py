"""The dtype table's names for each type (cudnn_rnn._dtypes) against the live frameworks: torch, ONNX, TensorFlow."""

from __future__ import annotations

import warnings

import pytest

from cudnn_rnn import _dtypes


def test_torch_names_and_storages() -> None:
    torch = pytest.importorskip("torch")
    for dtype in _dtypes.TABLE:
        assert getattr(torch, dtype.torch).itemsize == dtype.itemsize
        if dtype.torch_storage is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # typed storages are deprecated, and still pickled
                assert getattr(torch, dtype.torch_storage).dtype == getattr(torch, dtype.torch)


def test_onnx_element_types() -> None:
    onnx = pytest.importorskip("onnx")
    for dtype in _dtypes.TABLE:
        assert onnx.helper.tensor_dtype_to_np_dtype(dtype.onnx) == _dtypes.numpy_dtype(dtype.name)


def test_tensorflow_data_types() -> None:
    tf = pytest.importorskip("tensorflow")
    for dtype in _dtypes.TABLE:
        assert tf.as_dtype(dtype.tf).name == dtype.name
        assert tf.as_dtype(dtype.tf).size == dtype.itemsize
