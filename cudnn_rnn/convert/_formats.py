"""The named formats and the conversions between them and the params buffer.

``to_format(fmt, params, config)`` and ``from_format(fmt, tensors, config)`` walk the table
:data:`FORMAT_SPECS` (one :class:`~cudnn_rnn.convert._core.FormatSpec` per format);
:func:`convert_between` goes from one format to another through the params buffer, or
directly where an exact shortcut exists. See :mod:`cudnn_rnn.convert` for the formats.
"""

from __future__ import annotations

from typing import Callable, Mapping

from .._arrays import Array
from ..config import RNNConfig
from . import _canonical, _gru_block_cell, _keras, _mygrad, _onnx, _tf_cell, _torch
from ._core import (
    Converted,
    FormatSpec,
    Notes,
    cells_from_params,
    check_config,
    check_params,
    check_tensors,
    params_from_cells,
    without_explicit_skip_input,
)
from ._mygrad import gru_block_cell_to_mygrad, mygrad_to_gru_block_cell

__all__ = ["FORMATS", "FORMAT_SPECS", "DIRECT_CONVERSIONS", "expected_shapes", "to_format", "from_format",
           "convert_between"]


#: format name -> its spec (names, shapes, both directions), in the order formats are listed
FORMAT_SPECS: dict[str, FormatSpec] = {spec.name: spec for spec in (
    _canonical.FORMAT, _torch.FORMAT, _keras.FORMAT, _tf_cell.FORMAT, _onnx.FORMAT,
    _gru_block_cell.FORMAT, _mygrad.FORMAT)}

FORMATS: tuple[str, ...] = tuple(FORMAT_SPECS)

#: (source, target) -> an exact conversion between two formats that are not cuDNN layouts
DIRECT_CONVERSIONS: dict[tuple[str, str], Callable[[Mapping[str, Array]], dict[str, Array]]] = {
    ("gru_block_cell", "mygrad"): gru_block_cell_to_mygrad,
    ("mygrad", "gru_block_cell"): mygrad_to_gru_block_cell,
}


def _spec(fmt: object, config: RNNConfig, argument: str = "fmt") -> FormatSpec:
    """The spec of ``fmt``, refusing configurations the format cannot hold."""
    if not isinstance(fmt, str) or fmt not in FORMAT_SPECS:
        raise ValueError(f"{argument} must be one of {FORMATS}; got {fmt!r}")
    spec = FORMAT_SPECS[fmt]
    refusal = spec.refusal(config)
    if refusal:
        raise ValueError(refusal)
    return spec


def expected_shapes(fmt: str, config: RNNConfig) -> dict[str, tuple[int, ...]]:
    """``{tensor name: shape}`` that format ``fmt`` uses for ``config``, in the format's order."""
    config = check_config(config)
    return _spec(fmt, config).shapes(config)


def to_format(fmt: str, params: Array, config: RNNConfig, *, allow_approximation: bool = False) -> Converted:
    """Unpack a params buffer into format ``fmt``'s named tensors.

    Args:
        fmt: one of :data:`FORMATS`.
        params: 1-D array (NumPy or CuPy) of ``cudnn_rnn_params_size(...)`` elements.
        config: the configuration ``params`` belongs to.
        allow_approximation: accept a conversion that changes the function (reported).

    Returns:
        ``Converted(value={name: array}, approximations)``; arrays are fresh, of params' kind
        and dtype, shaped as :func:`expected_shapes` says.

    Raises:
        InexactConversionError: the result would compute a different function.
        ValueError: the format cannot hold ``config`` at all; bad params.
        TypeError: params is not a float array; config is not an RNNConfig.
    """
    config = check_config(config)
    spec = _spec(fmt, config)
    xp = check_params(params, config)
    notes = Notes(allow_approximation)
    value = spec.encode(cells_from_params(params, config, xp), config, notes, xp)
    return Converted(value, tuple(notes.approximations))


def from_format(fmt: str, tensors: Mapping[str, Array], config: RNNConfig, *,
                allow_approximation: bool = False) -> Converted:
    """Pack format ``fmt``'s named tensors into a params buffer of ``config``.

    Args:
        fmt: one of :data:`FORMATS`.
        tensors: ``{name: array}`` with exactly the names and shapes of
            :func:`expected_shapes` (NumPy or CuPy, one float dtype).
        config: the target configuration.
        allow_approximation: accept a conversion that changes the function (reported).

    Returns:
        ``Converted(value=params, approximations)``: a fresh 1-D array of the tensors' dtype.

    Raises:
        InexactConversionError: the result would compute a different function.
        ValueError: missing or unexpected names (e.g. another layer count), wrong shapes, or
            a configuration the format cannot hold.
        TypeError: non-array values, mixed array kinds or dtypes.
    """
    config = check_config(config)
    spec = _spec(fmt, config)
    xp, dtype = check_tensors(fmt, tensors, spec.shapes(config), config)
    notes = Notes(allow_approximation)
    cells = without_explicit_skip_input(spec.decode(tensors, config, notes, xp), config, notes, xp)
    return Converted(params_from_cells(cells, config, notes, xp, dtype), tuple(notes.approximations))


def convert_between(src: str, dst: str, tensors: Mapping[str, Array], config: RNNConfig, *,
                    allow_approximation: bool = False) -> Converted:
    """Convert format ``src``'s tensors straight into format ``dst``'s.

    gru_block_cell <-> mygrad convert directly (exact); every other pair goes through the
    params buffer, and its approximations are those of both steps. ``src == dst`` checks the
    tensors and returns copies.
    """
    config = check_config(config)
    source, target = _spec(src, config, "src"), _spec(dst, config, "dst")
    if src == dst or (src, dst) in DIRECT_CONVERSIONS:
        xp, _ = check_tensors(src, tensors, source.shapes(config), config)
        direct = DIRECT_CONVERSIONS.get((src, dst))
        if direct is not None:
            return Converted(direct(tensors))
        return Converted({name: xp.array(value) for name, value in tensors.items()})
    first = from_format(source.name, tensors, config, allow_approximation=allow_approximation)
    second = to_format(target.name, first.value, config, allow_approximation=allow_approximation)
    return Converted(second.value, first.approximations + second.approximations)



