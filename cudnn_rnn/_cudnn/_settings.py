"""What the cuDNN backend asks of cuDNN: the precision per dtype (:data:`PRECISIONS`; TF32 opt-in,
:func:`allow_tf32`), the algorithm a call runs (:func:`choose_algo`) and the RNN descriptor's fields
(:func:`rnn_fields`).

cuDNN settings: the call's algorithm (standard by default), DOUBLE_BIAS, PADDED_IO_ENABLED with SEQ_MAJOR_UNPACKED or
BATCH_MAJOR_UNPACKED data (:data:`DATA_LAYOUTS`) and a zero paddingFill, projSize = hiddenSize without projection.
A dtype this cuDNN or GPU cannot run is refused before any cuDNN object is made (:func:`check_dtype_supported`;
PyTorch gates bfloat16 the same way).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from .._checks import flag
from .._dtypes import BY_NAME
from ..config import RNNConfig
from . import _lib
from ._lib import AuxFlag, DataType, DirectionMode, MathType, RNNAlgo, RNNBiasMode, RNNDataLayout, RNNInputMode, RNNMode
from ._streams import import_cupy

__all__ = ["allow_tf32", "tf32_allowed", "TF32_ENV", "current_math_type", "PRECISIONS", "DATA_LAYOUTS", "rnn_fields",
           "CUDNN_ALGOS", "AutoRule", "AUTO_RULES", "choose_algo", "dtype_refusal", "compute_capability",
           "check_dtype_supported"]


@dataclass(frozen=True)
class _Precision:
    dtype: str                 # the data's dtype; its cuDNN data type and math precision (the type it computes
    math_type: MathType        # in) come from the dtype table. The math type by default,
    tf32_math_type: MathType   # and when TF32 is allowed
    min_cudnn: int = 0         # the cudnnGetVersion() the dtype needs
    min_compute_capability: tuple[int, int] = (0, 0)   # the GPU's (major, minor) it needs

    @property
    def data_type(self) -> DataType:
        return _cudnn_type(self.dtype)

    @property
    def math_prec(self) -> DataType:
        return _cudnn_type(BY_NAME[self.dtype].compute)


def _cudnn_type(dtype: str) -> DataType:
    code = BY_NAME[dtype].cudnn
    if code is None:  # pragma: no cover - every params dtype has one (tests/test_dtypes.py)
        raise TypeError(f"cuDNN has no data type for {dtype}")
    return DataType(code)


#: dtype -> how cuDNN computes it: float16 and bfloat16 in float32 (float16 with tensor-op math), float32 in true
#: float32 (CUDNN_FMA_MATH) unless TF32 is allowed, float64 in double
PRECISIONS: dict[str, _Precision] = {precision.dtype: precision for precision in (
    _Precision("float16", MathType.TENSOR_OP_MATH, MathType.TENSOR_OP_MATH),
    _Precision("float32", MathType.FMA_MATH, MathType.DEFAULT_MATH),
    _Precision("float64", MathType.DEFAULT_MATH, MathType.DEFAULT_MATH),
    # cuDNN refuses a BFLOAT16 math precision; PyTorch promotes bfloat16 (and half) to FLOAT as well, and sets
    # tensor-op math for half only: bfloat16 gets FMA math, or the default math (tensor cores) with TF32 allowed
    _Precision("bfloat16", MathType.FMA_MATH, MathType.DEFAULT_MATH, min_cudnn=91300, min_compute_capability=(8, 0)),
)}

#: (device, dtype) -> why cuDNN cannot run RNNs of that dtype on that GPU, "" when it can (see check_dtype_supported)
_dtype_refusals: dict[tuple[int, str], str] = {}


def dtype_refusal(dtype: str, cudnn_version: int, compute_capability: tuple[int, int]) -> str | None:
    """Why cuDNN ``cudnn_version`` (``cudnnGetVersion()``, e.g. 91300) cannot run RNNs of ``dtype`` on a GPU of
    ``compute_capability`` ((major, minor)): what the dtype needs and what there is, in words; None when it can."""
    precision = PRECISIONS[dtype]
    if cudnn_version >= precision.min_cudnn and compute_capability >= precision.min_compute_capability:
        return None
    need, have = precision.min_compute_capability, compute_capability
    return (f"{dtype} RNNs need cuDNN >= {_lib.version_string(precision.min_cudnn)} and a GPU of compute capability "
            f">= {need[0]}.{need[1]}; this is cuDNN {_lib.version_string(cudnn_version)} on a GPU of compute "
            f"capability {have[0]}.{have[1]}")


def compute_capability(device_id: int) -> tuple[int, int]:
    """The (major, minor) compute capability of GPU ``device_id`` (CUDA's device properties, through CuPy)."""
    properties = import_cupy().cuda.runtime.getDeviceProperties(device_id)
    return int(properties["major"]), int(properties["minor"])


def check_dtype_supported(dtype: str, device_id: int, what: str = "input.dtype") -> None:
    """Refuse (TypeError, naming ``what``) a dtype that this cuDNN or GPU ``device_id`` cannot run, before any cuDNN
    object is made.

    Asks the loaded cuDNN's version and the GPU's compute capability once per (GPU, dtype), and
    only for dtypes that need either (:data:`PRECISIONS`).
    """
    key = (device_id, dtype)
    refusal = _dtype_refusals.get(key)
    if refusal is None:
        precision = PRECISIONS[dtype]
        refusal = ""
        if precision.min_cudnn or precision.min_compute_capability > (0, 0):
            refusal = dtype_refusal(dtype, _lib.library().version, compute_capability(device_id)) or ""
        _dtype_refusals[key] = refusal
    if refusal:
        raise TypeError(f"{what} is {dtype}, which the cuDNN backend cannot run on GPU {device_id}: {refusal}. "
                        "Use float16 or float32 there, or NumPy arrays (the reference backend)")


DATA_LAYOUTS = {True: RNNDataLayout.SEQ_MAJOR_UNPACKED, False: RNNDataLayout.BATCH_MAJOR_UNPACKED}

#: algorithm name (config.ALGOS but "auto") -> cudnnRNNAlgo_t
CUDNN_ALGOS: dict[str, RNNAlgo] = {algo.name.lower(): algo for algo in RNNAlgo}

@dataclass(frozen=True)
class AutoRule:
    """One case in which the GPU benchmark measured a persistent algorithm faster than the standard one.

    A call matches when its mode and dtype are listed, ``num_units <= max_num_units``,
    ``num_layers <= max_num_layers``, ``batch <= max_batch`` and ``batch % batch_multiple == 0``
    (persistent kernels are slow unless the batch is a multiple of 8 on most GPUs).
    """

    algo: Literal["persist_static", "persist_dynamic", "persist_static_small_h"]
    rnn_modes: tuple[str, ...]
    dtypes: tuple[str, ...]
    max_num_units: int
    max_num_layers: int
    max_batch: int
    batch_multiple: int = 1

    def matches(self, config: RNNConfig, batch: int) -> bool:
        return (config.rnn_mode in self.rnn_modes and config.dtype in self.dtypes
                and config.num_units <= self.max_num_units and config.num_layers <= self.max_num_layers
                and batch <= self.max_batch and batch % self.batch_multiple == 0)


#: What ``algo="auto"`` picks, first match wins; "standard" when none matches. Each rule must come
#: from a GPU record under benchmarks/results/ in which the algorithm ran forward and backprop
#: faster than the standard one; no GPU run has measured one yet, so "auto" means "standard".
AUTO_RULES: tuple[AutoRule, ...] = ()


def choose_algo(config: RNNConfig, batch: int, uniform_lengths: bool, time_major: bool) -> str:
    """The algorithm (a key of :data:`CUDNN_ALGOS`) a call of ``config`` on ``batch`` sequences runs.

    ``config.algo`` unless it is ``"auto"``; then the first of :data:`AUTO_RULES` that the call matches, where a
    persistent algorithm can run it (:data:`cudnn_rnn.config.PERSISTENT_ALGOS`: without projection, time-major,
    and ``uniform_lengths``, every length the same and >= 1; pytorch PR 73211 met NOT_SUPPORTED with mixed
    lengths); else ``"standard"``.
    """
    if config.algo != "auto":
        return config.algo
    if config.num_proj or not uniform_lengths or not time_major:
        return "standard"
    for rule in AUTO_RULES:
        if rule.matches(config, batch):
            return rule.algo
    return "standard"


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
    _tf32 = flag("enabled", enabled)


def tf32_allowed() -> bool:
    """Whether float32 RNNs may use TF32: from ``CUDNN_RNN_ALLOW_TF32`` at import, then from the last
    :func:`allow_tf32` call."""
    return _tf32


def current_math_type(dtype: str) -> MathType:
    """The math type a call of ``dtype`` uses now: the default, or the TF32 one while TF32 is allowed."""
    precision = PRECISIONS[dtype]
    return precision.tf32_math_type if _tf32 else precision.math_type


def rnn_fields(config: RNNConfig, algo: str, math_type: MathType, dropout_desc: int) -> _lib.RNNDescriptorFields:
    """The RNN descriptor of ``config`` run with ``algo`` (a key of :data:`CUDNN_ALGOS`; see the module docstring)."""
    precision = PRECISIONS[config.dtype]
    return _lib.RNNDescriptorFields(
        algo=CUDNN_ALGOS[algo], cell_mode=RNNMode(config.mode.cudnn_mode), bias_mode=RNNBiasMode.DOUBLE_BIAS,
        dir_mode=DirectionMode[config.direction.upper()], input_mode=RNNInputMode[config.input_mode.upper()],
        data_type=precision.data_type, math_prec=precision.math_prec, math_type=math_type,
        input_size=config.input_size, hidden_size=config.num_units, proj_size=config.state_size,
        num_layers=config.num_layers, dropout_desc=dropout_desc, aux_flags=AuxFlag.PADDED_IO_ENABLED)
