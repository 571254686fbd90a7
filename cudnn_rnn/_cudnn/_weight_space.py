"""Where cuDNN puts each matrix and bias of an RNN descriptor's weight space, against the layout table.

What it asks and compares: :func:`cudnn_rnn.check_layout_against_cudnn`. cuDNN answers an absent entry with a
NULL address; where it refuses a query instead, its status is named wherever the table has that entry, so a
systematic refusal shows as itself rather than as missing weights. Every new network of the backend runs
this once (``_cache``), so that a params layout that disagrees with cuDNN fails loudly instead of computing
garbage.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..config import RNNConfig, numpy_dtype
from ..errors import CudnnError
from ..layout import PROJECTION_ID, ParamEntry, params_layout
from . import _lib
from ._descriptors import RNNDescriptor, TensorDescriptor
from ._lib import DataType
from ._settings import PRECISIONS
from ._streams import import_cupy

__all__ = ["Reported", "WeightSpace", "cudnn_weights", "layout_differences"]

Reported = tuple[int, DataType, tuple[int, ...]]  # (byte offset, data type, dims)
_Key = tuple[int, int, str]  # (pseudo-layer, linLayerID, kind)


@dataclass(frozen=True)
class WeightSpace:
    """What cuDNN answers about one RNN descriptor's weight space."""

    size: int                      # cudnnGetRNNWeightSpaceSize, bytes
    reported: dict[_Key, Reported]  # every entry cuDNN gave an address
    refused: dict[_Key, str]        # every query cuDNN refused: its status, e.g. "CUDNN_STATUS_BAD_PARAM (2000)"


def cudnn_weights(handle: int, rnn: RNNDescriptor, config: RNNConfig) -> WeightSpace:
    """Ask cuDNN: weight-space bytes and, per (pseudo-layer, linLayerID, kind), what it reports or why it refused."""
    cupy = import_cupy()
    size = _lib.rnn_weight_space_size(handle, rnn.pointer)
    scratch = cupy.empty(max(size, 1), dtype=cupy.uint8)  # cuDNN only computes addresses inside it
    base = scratch.data.ptr
    lin_ids = list(range(2 * config.num_gates)) + ([PROJECTION_ID] if config.num_proj else [])
    reported: dict[_Key, Reported] = {}
    refused: dict[_Key, str] = {}
    with TensorDescriptor(None) as matrix, TensorDescriptor(None) as bias:
        for pseudo_layer, lin_id in itertools.product(range(config.num_pseudo_layers), lin_ids):
            for kind, desc in (("matrix", matrix), ("bias", bias)):
                if lin_id == PROJECTION_ID and kind == "bias":
                    continue  # the projection has no bias
                asked = (desc.pointer, 0) if kind == "matrix" else (0, desc.pointer)
                try:
                    addresses = _lib.rnn_weight_params(handle, rnn.pointer, pseudo_layer, size, base, lin_id, *asked)
                except CudnnError as error:
                    refused[pseudo_layer, lin_id, kind] = f"{error.status_name} ({error.status})"
                    continue
                address = addresses[0 if kind == "matrix" else 1]
                if address:
                    data_type, dims, _ = desc.read()
                    reported[pseudo_layer, lin_id, kind] = (address - base, data_type, dims)
    return WeightSpace(size, reported, refused)


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def layout_differences(handle: int, rnn: RNNDescriptor, config: RNNConfig) -> list[str]:
    """How ``layout.params_layout(config)`` differs from what cuDNN reports for ``rnn``, in words."""
    layout = params_layout(config)
    itemsize = numpy_dtype(config.dtype).itemsize
    data_type = PRECISIONS[config.dtype].data_type
    space = cudnn_weights(handle, rnn, config)
    size, reported = space.size, space.reported
    differences = []
    if space.refused and not reported:
        statuses = sorted(set(space.refused.values()))
        differences.append(f"cuDNN refused every cudnnGetRNNWeightParams query ({len(space.refused)}) with "
                           + ", ".join(statuses))
    if size != layout.size * itemsize:
        differences.append(f"weight space: cuDNN has {size} bytes ({size / itemsize:g} elements), "
                           f"the layout table {layout.size} elements")
    ours: dict[_Key, ParamEntry] = {(e.pseudo_layer, e.lin_layer_id, e.kind): e for e in layout.weights + layout.biases}
    for key in sorted(set(ours) | set(reported)):
        entry = ours.get(key)
        if entry is None:  # then cuDNN reported it
            offset, _, dims = reported[key]
            differences.append(f"pseudo-layer {key[0]} {key[2]} with linLayerID {key[1]}: cuDNN has it at offset "
                               f"{offset / itemsize:g} with dims {dims}, the layout table has none")
            continue
        name, found = entry.describe(), reported.get(key)
        if found is None:
            answer = (f"cuDNN refused the query with {space.refused[key]}" if key in space.refused
                      else "cuDNN has none")
            differences.append(f"{name}: the layout table has it at offset {entry.offset}, {answer}")
            continue
        offset, found_type, dims = found
        if offset != entry.offset * itemsize:
            differences.append(f"{name}: offset {entry.offset} in the layout table, {offset / itemsize:g} in cuDNN")
        if _squeezed(dims) != _squeezed(entry.shape):
            differences.append(f"{name}: shape {entry.shape} in the layout table, dims {dims} in cuDNN")
        if found_type != data_type:
            differences.append(f"{name}: cuDNN describes it as {found_type.name}, expected {data_type.name}")
    return differences
