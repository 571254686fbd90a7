"""The params layout table against cuDNN's own answer, on the current GPU (scripts/check_layout.py runs it).

Each check builds an uncached RNN descriptor on the calling thread's cached handle (:func:`_standalone_rnn`)
and asks cuDNN where every matrix and bias sits (``_weight_space``).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import numpy as np

from ..config import DIRECTIONS, DTYPES, MODES, RNNConfig
from ..layout import PROJECTION_ID, LayoutAssumptions
from . import _lib
from ._cache import thread_context
from ._descriptors import DropoutDescriptor, RNNDescriptor
from ._settings import PRECISIONS, check_dtype_supported, rnn_fields
from ._streams import device_name, device_scope, import_cupy
from ._weight_space import cudnn_weights, layout_differences

__all__ = ["check_layout_against_cudnn", "layout_check_configs", "GridResult", "check_layout_grid",
           "grid_summary", "cudnn_layout_facts"]


@contextlib.contextmanager
def _standalone_rnn(config: RNNConfig) -> Iterator[tuple[int, RNNDescriptor]]:
    """A handle on the current device and an uncached RNN descriptor for ``config``."""
    cupy = import_cupy()
    device_id = cupy.cuda.Device().id
    check_dtype_supported(config.dtype, device_id, "config.dtype")
    handle = thread_context(device_id).handle.bind(cupy.cuda.get_current_stream().ptr)
    math_type = PRECISIONS[config.dtype].math_type
    device = device_scope(device_id)
    with DropoutDescriptor(handle, 0.0, 0, 0, 0, device=device) as dropout, \
            RNNDescriptor(rnn_fields(config, "standard", math_type, dropout.pointer), device=device) as rnn:
        yield handle, rnn


def check_layout_against_cudnn(config: RNNConfig) -> list[str]:
    """Compare the params layout table of ``config`` with cuDNN's own answer, on the current GPU.

    Asks cudnnGetRNNWeightSpaceSize and, for every pseudo-layer and linLayerID (0..2G-1, and 8
    for the LSTM projection), cudnnGetRNNWeightParams for the matrix and the bias; compares
    presence, offset, shape and data type with the layout that
    :func:`cudnn_rnn.cudnn_rnn_params_to_canonical` and the backends use.

    Args:
        config: the configuration to check (its dtype picks cuDNN's data type).

    Returns:
        The differences in words; an empty list when the layout table is right.

    Raises:
        CudnnNotAvailableError: CuPy or cuDNN 9 cannot be loaded.
        CudnnError: a cuDNN call fails (cuDNN refuses the configuration, say).
        TypeError: ``config.dtype`` is bfloat16 and this cuDNN or GPU cannot run it.
    """
    with _standalone_rnn(config) as (handle, rnn):
        return layout_differences(handle, rnn, config)


def layout_check_configs() -> list[RNNConfig]:
    """The layout-check grid: every mode, 1-3 layers, both directions, linear/skip input, projection, each dtype.

    Sizes are odd (N=5, I=3, P=2) so that any alignment padding in cuDNN's weight space shows.
    """
    configs = []
    for mode, layers, direction, input_mode, dtype in itertools.product(
            MODES, (1, 2, 3), DIRECTIONS, ("linear_input", "skip_input"), DTYPES):
        for num_proj in ((0, 2) if MODES[mode].has_cell else (0,)):
            configs.append(RNNConfig(mode, layers, 5, 5 if input_mode == "skip_input" else 3,
                                     input_mode=input_mode, direction=direction, num_proj=num_proj, dtype=dtype))
    return configs


@dataclass(frozen=True)
class GridResult:
    """What cuDNN answered for one configuration of the layout grid."""

    config: RNNConfig
    differences: tuple[str, ...] = ()  # the layout table against cuDNN, in words
    skipped: str = ""                  # why this cuDNN or GPU cannot run the dtype (nothing was asked)
    error: str = ""                    # what the check raised: a cuDNN refusal names its status and function

    @property
    def verdict(self) -> str:
        """``"OK"``, ``"DIFFERS"``, ``"SKIPPED"`` or ``"FAILED"``."""
        if self.error:
            return "FAILED"
        if self.skipped:
            return "SKIPPED"
        return "DIFFERS" if self.differences else "OK"

    @property
    def details(self) -> tuple[str, ...]:
        """What to print under the verdict: the differences, the reason for the skip, or the error."""
        return self.differences + tuple(reason for reason in (self.skipped, self.error) if reason)


def check_layout_grid(configs: Sequence[RNNConfig] | None = None) -> list[GridResult]:
    """:func:`check_layout_against_cudnn` for every configuration (:func:`layout_check_configs` by default), each
    on its own, on the current GPU: one :class:`GridResult` each, in order.

    A configuration that fails (cuDNN refuses it, say) is reported with its error and the others
    are still checked; a dtype this cuDNN or GPU cannot run is skipped, with the reason.
    """
    device_id = import_cupy().cuda.Device().id
    results = []
    for config in layout_check_configs() if configs is None else configs:
        try:
            check_dtype_supported(config.dtype, device_id, "config.dtype")
        except TypeError as refusal:
            results.append(GridResult(config, skipped=str(refusal)))
            continue
        try:
            results.append(GridResult(config, differences=tuple(check_layout_against_cudnn(config))))
        except Exception as error:  # every configuration is asked: one failure must not hide the others
            results.append(GridResult(config, error=f"{type(error).__name__}: {error}"))
    return results


def grid_summary(results: Sequence[GridResult]) -> str:
    """One line for :func:`check_layout_grid`'s results: how many agree, differ, failed and were skipped."""
    counts = collections.Counter(result.verdict for result in results)
    return (f"{counts['OK']} of {len(results) - counts['SKIPPED']} configurations agree ({counts['DIFFERS']} "
            f"differ, {counts['FAILED']} failed; {counts['SKIPPED']} skipped for their dtype)")


def cudnn_layout_facts() -> LayoutAssumptions:
    """cuDNN's answers to the layout questions public sources leave open (see ``layout.UNCONFIRMED``).

    Raises RuntimeError when the projection sits somewhere neither assumption describes.
    """
    cupy = import_cupy()
    lstmp = RNNConfig("lstm", 2, 6, 5, direction="bidirectional", num_proj=3, dtype="float32")
    with _standalone_rnn(lstmp) as (handle, rnn):
        reported = cudnn_weights(handle, rnn, lstmp).reported
    itemsize, g = 4, lstmp.num_gates
    projection = reported[0, PROJECTION_ID, "matrix"][0] // itemsize
    last_recurrent = reported[0, 2 * g - 1, "matrix"][0] // itemsize + lstmp.num_units * lstmp.state_size
    matrices = [(offset // itemsize + int(np.prod(dims))) for (_, lin_id, kind), (offset, _, dims) in reported.items()
                if kind == "matrix" and lin_id != PROJECTION_ID]
    positions: dict[int, Literal["after_pseudo_layer", "after_all_matrices"]] = {
        last_recurrent: "after_pseudo_layer", max(matrices): "after_all_matrices"}
    if projection not in positions:
        raise RuntimeError(f"cuDNN puts pseudo-layer 0's projection at element {projection}: neither right after "
                           f"its recurrent matrices ({last_recurrent}) nor after all matrices ({max(matrices)})")
    skip = RNNConfig("rnn_tanh", 1, 4, 4, input_mode="skip_input", direction="bidirectional", dtype="float32")
    with _standalone_rnn(skip) as (handle, rnn):
        reported = cudnn_weights(handle, rnn, skip).reported
    device = device_name(cupy.cuda.Device().id)
    return LayoutAssumptions(projection_position=positions[projection],
                             skip_input_keeps_input_biases=(0, 0, "bias") in reported,
                             verified_on=f"cuDNN {_lib.version_string(_lib.library().version)} on {device}")
