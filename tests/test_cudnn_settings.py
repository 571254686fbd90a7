"""``_cudnn_settings``: the math type per dtype, the TF32 opt-in (a call, or the environment) and the
RNN descriptor's fields; with libcudnn.so.9 installed, cuDNN accepts those fields for the whole
layout-check grid.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cudnn_rnn._cudnn import _settings as _cudnn_settings, _descriptors, _lib
from cudnn_rnn._cudnn._cache import NetworkKey
from cudnn_rnn._cudnn._layout_check import layout_check_configs
from cudnn_rnn.config import RNNConfig
from cudnn_testing import REPO, needs_library


def test_math_type_per_dtype_and_tf32_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = {dtype: RNNConfig("gru", 1, 4, 3, dtype=dtype) for dtype in ("float16", "float32", "float64", "bfloat16")}
    monkeypatch.setattr(_cudnn_settings, "_tf32", False)
    assert not _cudnn_settings.tf32_allowed()
    default = {dtype: NetworkKey.of(c, True, "standard", 4).math_type for dtype, c in configs.items()}
    assert default == {"float16": _lib.MathType.TENSOR_OP_MATH, "float32": _lib.MathType.FMA_MATH,
                       "float64": _lib.MathType.DEFAULT_MATH, "bfloat16": _lib.MathType.FMA_MATH}
    _cudnn_settings.allow_tf32(True)
    assert _cudnn_settings.tf32_allowed()
    opted = {dtype: NetworkKey.of(c, True, "standard", 4).math_type for dtype, c in configs.items()}
    assert opted == {**default, "float32": _lib.MathType.DEFAULT_MATH, "bfloat16": _lib.MathType.DEFAULT_MATH}
    _cudnn_settings.allow_tf32(False)
    with pytest.raises(TypeError, match="enabled must be a bool; got int 1"):
        _cudnn_settings.allow_tf32(1)  # type: ignore[arg-type]


def test_tf32_environment_default() -> None:
    code = "from cudnn_rnn._cudnn import _settings; print(_settings.tf32_allowed())"
    for value, expected in (("1", "True"), ("0", "False"), ("", "False")):
        env = {**os.environ, "CUDNN_RNN_ALLOW_TF32": value}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO,
                                check=True)
        assert result.stdout.strip() == expected, value


def test_descriptor_fields_of_a_config() -> None:
    config = RNNConfig("lstm", 3, 8, 8, input_mode="skip_input", direction="bidirectional", num_proj=5,
                       dtype="float16")
    fields = _cudnn_settings.rnn_fields(config, "standard", _lib.MathType.TENSOR_OP_MATH, dropout_desc=0)
    assert fields == _lib.RNNDescriptorFields(
        _lib.RNNAlgo.STANDARD, _lib.RNNMode.LSTM, _lib.RNNBiasMode.DOUBLE_BIAS, _lib.DirectionMode.BIDIRECTIONAL,
        _lib.RNNInputMode.SKIP_INPUT, _lib.DataType.HALF, _lib.DataType.FLOAT, _lib.MathType.TENSOR_OP_MATH,
        8, 8, 5, 3, 0, _lib.AuxFlag.PADDED_IO_ENABLED)
    no_projection = _cudnn_settings.rnn_fields(RNNConfig("gru", 1, 6, 2), "standard", _lib.MathType.FMA_MATH, 0)
    assert no_projection.proj_size == no_projection.hidden_size == 6  # projSize = hiddenSize means none


@needs_library
def test_backend_descriptor_settings_are_accepted_for_the_whole_grid() -> None:
    version = _lib.library().version
    for config in layout_check_configs():
        if version < _cudnn_settings.PRECISIONS[config.dtype].min_cudnn:  # bfloat16 before cuDNN 9.13
            continue
        math = _cudnn_settings.PRECISIONS[config.dtype].math_type
        fields = _cudnn_settings.rnn_fields(config, "standard", math, 0)
        with _descriptors.RNNDescriptor(fields) as descriptor:
            assert descriptor.read() == fields, config
