"""``tf_cell``: the variables of TF's cuDNN-compatible cells, named as TF's CudnnRNN saveables name them.

Each layer's and direction's variables lie under a prefix (TF's ``CudnnOpaqueParamsSaveable``:
:data:`PREFIXES`, naming the cell of :data:`CELL_NAMES`). An LSTM or basic RNN cell
(``CudnnCompatibleLSTMCell`` is ``LSTMBlockCell`` with forget_bias=0, no peepholes, no cell clip:
the stored bias is the whole bias) stores :data:`STITCHED_NAMES`: one kernel, [W | R] transposed
(rows x then h), columns in TF's gate order (:data:`GATE_ORDERS`, TF's ICFO), the
bias bW + bR, and an LSTM's projection transposed, as TF's ``LSTMCell(num_proj)`` names it. A GRU
(``CudnnCompatibleGRUCell``, the same function as cuDNN's GRU) stores :data:`GRU_NAMES`: a gates
kernel of r and u, stitched likewise, with their summed bias, and the candidate's W_n and R_n
transposed, each with its own bias (bR_n is kept apart: it sits inside r * (...)).

Exactness is as :mod:`cudnn_rnn.convert` says; on the way back each summed bias is split half and
half into bW and bR (:data:`BIAS_SPLIT`), as TF's ``CudnnParamsFormatConverter`` does. Note that
TF's stock ``LSTMCell``/``LSTMBlockCell`` default to forget_bias=1.0, added at run time; weights
from such a cell need 1.0 added to the f block of the bias first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from .._arrays import Array
from ..config import MODES, RNNConfig
from ._core import (
    CellWeights,
    FormatSpec,
    Notes,
    gate_order,
    pseudo_layers,
    reorder_gates,
    with_explicit_skip_input,
)
from ._reading import ConfigRead, TensorShapes, name_pattern

#: rnn_mode -> TF's gate order, in cuDNN gate names (LSTM: TF's i, c(=j), f, o)
GATE_ORDERS: dict[str, tuple[str, ...]] = {"lstm": ("i", "g", "f", "o"), "gru": ("r", "u", "n")}

#: the fraction of a summed bias that goes to each of bW and bR on the way back (TF's choice)
BIAS_SPLIT = 0.5

#: rnn_mode -> TF's cell (variable scope) name
CELL_NAMES: dict[str, str] = {
    "lstm": "cudnn_compatible_lstm_cell",
    "gru": "cudnn_compatible_gru_cell",
    "rnn_tanh": "basic_rnn_cell",
    "rnn_relu": "basic_rnn_cell",
}

PREFIXES: dict[int, tuple[str, ...]] = {  # num_directions -> prefix pattern per direction
    1: ("rnn/multi_rnn_cell/cell_{layer}/{cell}",),
    2: ("stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/fw/{cell}",
        "stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/bw/{cell}"),
}

#: cell name -> the rnn_modes it holds (basic_rnn_cell: rnn_tanh and rnn_relu, which no shape tells apart)
CELL_MODES: dict[str, tuple[str, ...]] = {
    cell: tuple(mode for mode, name in CELL_NAMES.items() if name == cell) for cell in CELL_NAMES.values()}


def _prefix(config: RNNConfig, layer: int, direction: int) -> str:
    return PREFIXES[config.num_directions][direction].format(layer=layer, cell=CELL_NAMES[config.rnn_mode])


def _split_sum(bias: Array) -> tuple[Array, Array]:
    half = bias * bias.dtype.type(BIAS_SPLIT)
    return half, half.copy()


def _stitched_kernel(cell: CellWeights, src: Sequence[str], dst: Sequence[str], xp: Any) -> Array:
    """[width + P, len(dst)*N]: [W | R] with its gate blocks reordered from ``src`` to ``dst``, transposed."""
    return xp.ascontiguousarray(reorder_gates(xp.concatenate([cell.input, cell.recurrent], axis=1), src, dst, xp).T)


# ---- LSTM and basic RNN cells: one stitched kernel, one summed bias ----------------------------
STITCHED_NAMES: dict[str, str] = {
    "kernel": "{prefix}/kernel",
    "bias": "{prefix}/bias",
    "projection": "{prefix}/projection/kernel",
}


def _stitched_shapes(config: RNNConfig, layer: int, prefix: str) -> dict[str, tuple[int, ...]]:
    gn, p = config.num_gates * config.num_units, config.state_size
    sizes = {"kernel": (config.layer_input_size(layer) + p, gn), "bias": (gn,)}
    if config.num_proj:
        sizes["projection"] = (config.num_units, p)
    return {STITCHED_NAMES[key].format(prefix=prefix): shape for key, shape in sizes.items()}


def _stitched_encode(cell: CellWeights, config: RNNConfig, prefix: str, xp: Any) -> dict[str, Array]:
    cudnn, tf = config.mode.gates, gate_order(GATE_ORDERS, config)
    values = {"kernel": _stitched_kernel(cell, cudnn, tf, xp),
              "bias": reorder_gates(cell.input_bias + cell.recurrent_bias, cudnn, tf, xp)}
    if cell.projection is not None:
        values["projection"] = xp.ascontiguousarray(cell.projection.T)
    return {STITCHED_NAMES[key].format(prefix=prefix): value for key, value in values.items()}


def _stitched_decode(tensors: Mapping[str, Array], config: RNNConfig, layer: int, prefix: str,
                     xp: Any) -> CellWeights:
    cudnn, tf = config.mode.gates, gate_order(GATE_ORDERS, config)
    width = config.layer_input_size(layer)
    names = {key: name.format(prefix=prefix) for key, name in STITCHED_NAMES.items()}
    stitched = reorder_gates(tensors[names["kernel"]].T, tf, cudnn, xp)  # [G*N, width + P]
    input_bias, recurrent_bias = _split_sum(reorder_gates(tensors[names["bias"]], tf, cudnn, xp))
    projection = tensors.get(names["projection"])
    return CellWeights(
        input=xp.ascontiguousarray(stitched[:, :width]),
        recurrent=xp.ascontiguousarray(stitched[:, width:]),
        input_bias=input_bias,
        recurrent_bias=recurrent_bias,
        projection=None if projection is None else xp.ascontiguousarray(projection.T),
    )


# ---- GRU: gates kernel [r|u] with summed bias, candidate kernels with both biases --------------
GRU_NAMES: dict[str, str] = {
    "gates_kernel": "{prefix}/gates/kernel",
    "gates_bias": "{prefix}/gates/bias",
    "input_kernel": "{prefix}/candidate/input_projection/kernel",
    "input_bias": "{prefix}/candidate/input_projection/bias",
    "hidden_kernel": "{prefix}/candidate/hidden_projection/kernel",
    "hidden_bias": "{prefix}/candidate/hidden_projection/bias",
}


def _gru_shapes(config: RNNConfig, layer: int, prefix: str) -> dict[str, tuple[int, ...]]:
    n, width = config.num_units, config.layer_input_size(layer)
    sizes = {"gates_kernel": (width + n, 2 * n), "gates_bias": (2 * n,), "input_kernel": (width, n),
             "input_bias": (n,), "hidden_kernel": (n, n), "hidden_bias": (n,)}
    return {GRU_NAMES[key].format(prefix=prefix): shape for key, shape in sizes.items()}


def _gru_encode(cell: CellWeights, config: RNNConfig, prefix: str, xp: Any) -> dict[str, Array]:
    gates, ru, n = config.mode.gates, ("r", "u"), ("n",)
    values = {
        "gates_kernel": _stitched_kernel(cell, gates, ru, xp),
        "gates_bias": reorder_gates(cell.input_bias + cell.recurrent_bias, gates, ru, xp),
        "input_kernel": xp.ascontiguousarray(reorder_gates(cell.input, gates, n, xp).T),
        "input_bias": reorder_gates(cell.input_bias, gates, n, xp),
        "hidden_kernel": xp.ascontiguousarray(reorder_gates(cell.recurrent, gates, n, xp).T),
        "hidden_bias": reorder_gates(cell.recurrent_bias, gates, n, xp),
    }
    return {GRU_NAMES[key].format(prefix=prefix): value for key, value in values.items()}


def _gru_decode(tensors: Mapping[str, Array], config: RNNConfig, layer: int, prefix: str, xp: Any) -> CellWeights:
    t = {key: tensors[name.format(prefix=prefix)] for key, name in GRU_NAMES.items()}
    width = config.layer_input_size(layer)
    gates_kernel = t["gates_kernel"].T  # [2N, width + N], rows r then u
    ru_input_bias, ru_recurrent_bias = _split_sum(t["gates_bias"])
    return CellWeights(
        input=xp.concatenate([gates_kernel[:, :width], t["input_kernel"].T], axis=0),
        recurrent=xp.concatenate([gates_kernel[:, width:], t["hidden_kernel"].T], axis=0),
        input_bias=xp.concatenate([ru_input_bias, t["input_bias"]]),
        recurrent_bias=xp.concatenate([ru_recurrent_bias, t["hidden_bias"]]),
    )


@dataclass(frozen=True)
class _CellKind:
    shapes: Callable[[RNNConfig, int, str], dict[str, tuple[int, ...]]]
    encode: Callable[[CellWeights, RNNConfig, str, Any], dict[str, Array]]
    decode: Callable[[Mapping[str, Array], RNNConfig, int, str, Any], CellWeights]


_STITCHED = _CellKind(_stitched_shapes, _stitched_encode, _stitched_decode)
#: rnn_mode -> how its cell stores the weights
CELL_KINDS: dict[str, _CellKind] = {
    "lstm": _STITCHED, "rnn_tanh": _STITCHED, "rnn_relu": _STITCHED,
    "gru": _CellKind(_gru_shapes, _gru_encode, _gru_decode),
}


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    kind = CELL_KINDS[config.rnn_mode]
    result: dict[str, tuple[int, ...]] = {}
    for _, layer, direction in pseudo_layers(config):
        result.update(kind.shapes(config, layer, _prefix(config, layer, direction)))
    return result


def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    cells = with_explicit_skip_input(cells, config, xp)
    kind = CELL_KINDS[config.rnn_mode]
    result: dict[str, Array] = {}
    for k, layer, direction in pseudo_layers(config):
        result.update(kind.encode(cells[k], config, _prefix(config, layer, direction), xp))
    return result


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    kind = CELL_KINDS[config.rnn_mode]
    return tuple(kind.decode(tensors, config, layer, _prefix(config, layer, direction), xp)
                 for _, layer, direction in pseudo_layers(config))


# ---- names back to layers, directions and cells -------------------------------------------------
class _Scoped(NamedTuple):
    layer: int
    num_directions: int
    cell: str


#: (the names under each prefix of PREFIXES, the prefixes' num_directions)
_SCOPES: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(name_pattern(prefix, {"cell": tuple(CELL_MODES)}) + "/.+"), num_directions)
    for num_directions, prefixes in PREFIXES.items() for prefix in prefixes)


#: any name in layer 0's scope, whatever its cell (how tf_cell variables are recognised; reading them
#: then names a cell that is not one of CELL_NAMES)
RECOGNISED = re.compile("^(?:" + "|".join(re.escape(prefixes[0].partition("{layer}")[0] + "0/")
                                          for prefixes in PREFIXES.values()) + ")")



def _scoped(name: str) -> _Scoped | None:
    for pattern, num_directions in _SCOPES:
        match = pattern.fullmatch(name)
        if match is not None:
            return _Scoped(int(match["layer"]), num_directions, match["cell"])
    return None


def read_config(spec: FormatSpec, tensors: TensorShapes) -> ConfigRead:
    """The configuration that the variables' scopes (layers, directions, cell) and kernel shapes tell."""
    parsed = tensors.parse(_scoped, "TF's cuDNN-compatible cell variables").values()
    cells = {scoped.cell for scoped in parsed}
    if len(cells) != 1:
        raise tensors.fail(f"the variables mix cell types {sorted(cells)}")
    cell = cells.pop()
    num_directions = max(scoped.num_directions for scoped in parsed)
    layers = tensors.layer_count({scoped.layer for scoped in parsed}, "cell_{l}")
    prefix = PREFIXES[num_directions][0].format(layer=0, cell=cell)
    modes = CELL_MODES[cell]
    if modes == ("gru",):
        stitched_rows, two_units = tensors.shape(GRU_NAMES["gates_kernel"].format(prefix=prefix))  # [I + N, 2N]
        units = state = two_units // 2
        projection = 0
    else:
        stitched_rows, gn = tensors.shape(STITCHED_NAMES["kernel"].format(prefix=prefix))  # [I + P, G*N]
        projection_kernel = STITCHED_NAMES["projection"].format(prefix=prefix)
        if projection_kernel in tensors:
            units, state = tensors.shape(projection_kernel)
            projection = state
        else:
            units = state = gn // MODES[modes[0]].num_gates
            projection = 0
    width = stitched_rows - state
    if width < 1 or units < 1:
        raise tensors.fail(f"the shapes of {prefix}/... leave no room for an input (width {width}, units {units})")
    fields: dict[str, Any] = {
        "num_layers": layers, "num_units": units, "input_size": width,
        "direction": "bidirectional" if num_directions == 2 else "unidirectional", "num_proj": projection,
        "input_mode": "linear_input"}
    if len(modes) == 1:
        fields["rnn_mode"] = modes[0]
        return ConfigRead(fields)
    return ConfigRead(fields, f"a {cell}'s variables do not say its activation")


#: the names depend on the cell scopes (no TensorNames): RECOGNISED tells a file, read_config reads it
SPEC = FormatSpec(
    "tf_cell", "TF CudnnCompatibleLSTMCell / GRUCell variables: .../cell_{l}/.../kernel, ...", shapes, encode, decode,
    reading=read_config, signature=RECOGNISED)
