"""What the cuDNN backend asks of cuDNN: the precision per dtype (TF32 opt-in) and the RNN descriptor's fields::

    PRECISIONS[dtype]           data type, math precision, math type (by default / with TF32 allowed)
    allow_tf32(True)            or CUDNN_RNN_ALLOW_TF32=1 in the environment; tf32_allowed()
    current_math_type(dtype)    the math type a call uses now
    rnn_fields(config, math_type, dropout_desc) -> _lib.RNNDescriptorFields
    DATA_LAYOUTS[time_major]    the RNN data layout of x and y

cuDNN settings: ALGO_STANDARD, DOUBLE_BIAS, PADDED_IO_ENABLED with SEQ_MAJOR_UNPACKED or
BATCH_MAJOR_UNPACKED data and a zero paddingFill, projSize = hiddenSize without projection.
float16 computes in float32 with tensor-op math; float32 uses true float32 (CUDNN_FMA_MATH)
unless TF32 is allowed (:func:`allow_tf32`, or ``CUDNN_RNN_ALLOW_TF32=1`` in the environment);
float64 uses double.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import _lib
from ._lib import (AuxFlag, DataType, DirectionMode, MathType, RNNAlgo, RNNBiasMode, RNNDataLayout, RNNInputMode,
                   RNNMode)
from .config import RNNConfig

__all__ = ["allow_tf32", "tf32_allowed", "TF32_ENV", "current_math_type", "PRECISIONS", "DATA_LAYOUTS", "rnn_fields"]


@dataclass(frozen=True)
class _Precision:
    data_type: DataType
    math_prec: DataType
    math_type: MathType        # the default
    tf32_math_type: MathType   # when TF32 is allowed


PRECISIONS: dict[str, _Precision] = {
    "float16": _Precision(DataType.HALF, DataType.FLOAT, MathType.TENSOR_OP_MATH, MathType.TENSOR_OP_MATH),
    "float32": _Precision(DataType.FLOAT, DataType.FLOAT, MathType.FMA_MATH, MathType.DEFAULT_MATH),
    "float64": _Precision(DataType.DOUBLE, DataType.DOUBLE, MathType.DEFAULT_MATH, MathType.DEFAULT_MATH),
}
_DIRECTION_MODES = {"unidirectional": DirectionMode.UNIDIRECTIONAL, "bidirectional": DirectionMode.BIDIRECTIONAL}
_INPUT_MODES = {"linear_input": RNNInputMode.LINEAR_INPUT, "skip_input": RNNInputMode.SKIP_INPUT}
DATA_LAYOUTS = {True: RNNDataLayout.SEQ_MAJOR_UNPACKED, False: RNNDataLayout.BATCH_MAJOR_UNPACKED}

TF32_ENV = "CUDNN_RNN_ALLOW_TF32"
_tf32 = os.environ.get(TF32_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def allow_tf32(enabled: bool = True) -> None:
    """Let float32 RNNs use TF32 tensor cores (CUDNN_DEFAULT_MATH) instead of true float32 (CUDNN_FMA_MATH).

    Off by default, so float32 results stay comparable with the reference backend (about 1e-5
    relative); TF32 is faster on Ampere and later but keeps only 10 mantissa bits in the GEMMs.
    The default can also be set with ``CUDNN_RNN_ALLOW_TF32=1``. Applies to calls made after it.

    Args:
        enabled: True to allow TF32, False to return to true float32.

    Raises:
        TypeError: ``enabled`` is not a bool.
    """
    global _tf32
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool; got {type(enabled).__name__} {enabled!r}")
    _tf32 = enabled


def tf32_allowed() -> bool:
    """Whether float32 RNNs may use TF32 (see :func:`allow_tf32`).

    Returns:
        The current setting: from ``CUDNN_RNN_ALLOW_TF32`` at import, then from the last
        :func:`allow_tf32` call.
    """
    return _tf32


def current_math_type(dtype: str) -> MathType:
    """The math type a call of ``dtype`` uses now: the default, or the TF32 one while TF32 is allowed."""
    precision = PRECISIONS[dtype]
    return precision.tf32_math_type if _tf32 else precision.math_type


def rnn_fields(config: RNNConfig, math_type: MathType, dropout_desc: int) -> _lib.RNNDescriptorFields:
    """The RNN descriptor of ``config`` (see the module docstring for the settings)."""
    precision = PRECISIONS[config.dtype]
    return _lib.RNNDescriptorFields(
        algo=RNNAlgo.STANDARD, cell_mode=RNNMode(config.mode.cudnn_mode), bias_mode=RNNBiasMode.DOUBLE_BIAS,
        dir_mode=_DIRECTION_MODES[config.direction], input_mode=_INPUT_MODES[config.input_mode],
        data_type=precision.data_type, math_prec=precision.math_prec, math_type=math_type,
        input_size=config.input_size, hidden_size=config.num_units, proj_size=config.state_size,
        num_layers=config.num_layers, dropout_desc=dropout_desc, aux_flags=AuxFlag.PADDED_IO_ENABLED)
