"""The named formats (:data:`FORMAT_SPECS`, one spec per format) and the conversions, which walk that table
(see :mod:`cudnn_rnn.convert` for the formats)."""

from __future__ import annotations

import re
from typing import Callable, Iterable, Mapping

from .._arrays import Array
from ..config import RNNConfig, check_config
from . import canonical, gru_block_cell, keras, mygrad, onnx, tf_cell, torch
from ._core import (
    Converted,
    FormatSpec,
    Notes,
    cells_from_params,
    check_params,
    check_tensors,
    describe,
    params_from_cells,
    without_explicit_skip_input,
)
from .mygrad import gru_block_cell_to_mygrad, mygrad_to_gru_block_cell

__all__ = ["FORMATS", "FORMAT_SPECS", "PREFIXED_TORCH_NAME", "guess_format", "expected_shapes", "to_format",
           "from_format", "convert_between"]


FORMAT_SPECS: dict[str, FormatSpec] = {spec.name: spec for spec in (
    canonical.SPEC, torch.SPEC, keras.SPEC, tf_cell.SPEC, onnx.SPEC, gru_block_cell.SPEC, mygrad.SPEC)}

FORMATS: tuple[str, ...] = tuple(FORMAT_SPECS)

#: format -> its spec's signature, a name that only its tensors have (how named tensors of no stated format are
#: recognised, as in an .npz); the formats whose names tell their configuration are tried first
GUESSES: dict[str, re.Pattern[str]] = {
    spec.name: spec.signature for spec in sorted(FORMAT_SPECS.values(), key=lambda spec: spec.reading is None)
    if spec.signature is not None}

#: a torch name under a parent module's prefix ("encoder.rnn.weight_ih_l0"): a parent module's state_dict
PREFIXED_TORCH_NAME = re.compile(rf".\.{re.escape(torch.TENSOR_NAMES.first())}$")


def guess_format(names: Iterable[str]) -> str | None:
    """The first format of :data:`GUESSES` whose signature one of ``names`` carries; None where none does."""
    names = list(names)
    return next((fmt for fmt, pattern in GUESSES.items() if any(pattern.search(name) for name in names)), None)


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


def _tensor_shapes(spec: FormatSpec, tensors: object, config: RNNConfig) -> dict[str, tuple[int, ...]]:
    """``spec.shapes(config)``, after refusing (at no cost) fewer tensors than ``config`` has layers.

    Every format names one tensor or more per layer, so a huge ``num_layers`` with a few tensors is
    refused before anything walks the layers. Not a mapping: ``{}``, which ``check_tensors`` refuses.
    """
    if not isinstance(tensors, Mapping):
        return {}
    if len(tensors) < config.num_layers:
        raise ValueError(f"format {spec.name!r} tensors do not match the configuration ({describe(config)}): "
                         f"expected at least {config.num_layers} tensors (one or more per layer); got {len(tensors)}")
    return spec.shapes(config)


def expected_shapes(fmt: str, config: RNNConfig) -> dict[str, tuple[int, ...]]:
    """The names and shapes of format ``fmt``'s tensors for ``config``.

    Returns:
        ``{tensor name: shape}``, in the format's order: what :func:`to_format` returns and
        :func:`from_format` takes (e.g. torch's ``weight_ih_l0`` ``(G*N, I)``).

    Raises:
        ValueError: ``fmt`` is not one of :data:`FORMATS`, or the format cannot hold ``config``.
        TypeError: ``config`` is not an :class:`~cudnn_rnn.RNNConfig`.
    """
    config = check_config(config)
    return _spec(fmt, config).shapes(config)


def to_format(fmt: str, params: Array, config: RNNConfig, *, allow_approximation: bool = False) -> Converted:
    """Unpack a params buffer into format ``fmt``'s named tensors.

    Args:
        fmt: one of :data:`FORMATS`.
        params: ``[params_size]`` array (NumPy or CuPy, float16/32/64 or bfloat16), ``params_size`` being
            :func:`cudnn_rnn.cudnn_rnn_params_size` of ``config``.
        config: the configuration ``params`` belongs to.
        allow_approximation: accept a conversion that changes the function (reported).

    Returns:
        ``Converted(value={name: array}, approximations)``; arrays are fresh, of params' kind
        and dtype, shaped as :func:`expected_shapes` says.

    Raises:
        InexactConversionError: the result would compute a different function (and
            ``allow_approximation`` is False).
        ValueError: ``fmt`` is not a format name, the format cannot hold ``config`` at all, or
            ``params`` has the wrong shape (checked against the closed-form size before any
            per-layer work).
        TypeError: ``params`` is not a NumPy or CuPy float array, ``config`` is not an
            :class:`~cudnn_rnn.RNNConfig`, or ``allow_approximation`` is not a bool.
    """
    config = check_config(config)
    spec = _spec(fmt, config)
    xp = check_params(params, config)
    notes = Notes(allow_approximation)
    value = spec.encode(cells_from_params(params, config, xp), config, notes, xp)
    return Converted(value, tuple(notes.approximations))


def from_format(fmt: str, tensors: Mapping[str, Array], config: RNNConfig, *,
                allow_approximation: bool = False) -> Converted:
    """Pack format ``fmt``'s named tensors into a params buffer of ``config``: the way back of
    :func:`to_format`, whose ``fmt``, ``config`` and ``allow_approximation`` it takes.

    Args:
        tensors: ``{name: array}`` with exactly the names and shapes of
            :func:`expected_shapes` (NumPy or CuPy, one float dtype).

    Returns:
        ``Converted(value=params, approximations)``: a fresh ``[params_size]`` array of the
        tensors' kind and dtype.

    Raises:
        InexactConversionError: as :func:`to_format` raises it.
        ValueError: ``fmt`` is not a format name, names are missing or unexpected (e.g.
            another layer count; fewer tensors than ``config`` has layers are refused before
            any per-layer work), shapes are wrong, or the format cannot hold ``config``.
        TypeError: ``tensors`` is not a mapping, holds non-arrays, mixed array kinds or
            dtypes, or ``config`` is not an :class:`~cudnn_rnn.RNNConfig`.
    """
    config = check_config(config)
    spec = _spec(fmt, config)
    xp, dtype = check_tensors(fmt, tensors, _tensor_shapes(spec, tensors, config), config)
    notes = Notes(allow_approximation)
    cells = without_explicit_skip_input(spec.decode(tensors, config, notes, xp), config, notes, xp)
    return Converted(params_from_cells(cells, config, notes, xp, dtype), tuple(notes.approximations))


def convert_between(src: str, dst: str, tensors: Mapping[str, Array], config: RNNConfig, *,
                    allow_approximation: bool = False) -> Converted:
    """Convert format ``src``'s tensors straight into format ``dst``'s.

    gru_block_cell <-> mygrad convert directly (exact); every other pair goes through the
    params buffer, :func:`from_format` of ``src`` then :func:`to_format` of ``dst``: the
    arguments, result and errors are theirs, and the approximations those of both steps.
    ``src == dst`` checks the tensors and returns copies.
    """
    config = check_config(config)
    source, target = _spec(src, config, "src"), _spec(dst, config, "dst")
    if src == dst or (src, dst) in DIRECT_CONVERSIONS:
        xp, _ = check_tensors(src, tensors, _tensor_shapes(source, tensors, config), config)
        direct = DIRECT_CONVERSIONS.get((src, dst))
        if direct is not None:
            return Converted(direct(tensors))
        return Converted({name: xp.array(value) for name, value in tensors.items()})
    first = from_format(source.name, tensors, config, allow_approximation=allow_approximation)
    second = to_format(target.name, first.value, config, allow_approximation=allow_approximation)
    return Converted(second.value, first.approximations + second.approximations)
