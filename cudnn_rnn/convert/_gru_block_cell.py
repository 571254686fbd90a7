"""``gru_block_cell`` and ``mygrad``: two layouts of one reset-*before* GRU.

TF's ``GRUBlockCell`` (and ``tf.compat.v1.nn.rnn_cell.GRUCell``) and mygrad's
``mygrad.nnet.layers.gru`` compute, for x [B, I] and h [B, N]::

    r = sigmoid(x U_r + h W_r + b_r)          u = sigmoid(x U_u + h W_u + b_u)
    c = tanh(x U_c + (r * h) W_c + b_c)       h' = u * h + (1 - u) * c

stored as::

    gru_block_cell:  w_ru [I+N, 2N] = [[U_r, U_u], [W_r, W_u]]  (rows x then h, columns [r | u])
                     w_c  [I+N, N]  = [[U_c], [W_c]]
                     b_ru [2N] = [b_r, b_u];  b_c [N]
    mygrad:          Uz, Ur, Uh [I, N];  Wz, Wr, Wh [N, N];  bz, br, bh [N]   (z = u, h = c)

so the two convert into each other exactly (:func:`gru_block_cell_to_mygrad`,
:func:`mygrad_to_gru_block_cell`). Both hold one unidirectional layer.

cuDNN's GRU is a different function: its candidate is ``tanh(W_n x + bW_n + r * (R_n h + bR_n))``,
the reset applied *after* the recurrent matmul, with a recurrent bias inside it. So a
conversion between cuDNN and either layout is never exact, and needs allow_approximation:

* cuDNN -> reset-before: W and R of r and u move exactly, their two biases become one sum
  (exact); the candidate gets U_c = W_n^T, W_c = R_n^T and ``b_c = bW_n + bR_n``. The result
  equals cuDNN's GRU exactly where r == 1, and differs elsewhere: ``R_n (r * h)`` vs
  ``r * (R_n h)``, and ``bR_n`` vs ``r * bR_n``.
* reset-before -> cuDNN: the same matrices; each single bias goes to bW with bR = 0 (so bR_n
  = 0 and the bias placement is exact); only the reset placement differs, again agreeing
  exactly where r == 1.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .._arrays import Array
from ..config import RNNConfig
from ._core import (
    CellWeights,
    FormatSpec,
    Notes,
    ShapeReading,
    TensorNames,
    check_tensors,
    reorder_gates,
    with_explicit_skip_input,
)

#: mygrad tensor -> (gru_block_cell tensor, its rows ("x", "h" or None for a bias), its column gate)
MYGRAD_FROM_BLOCK: dict[str, tuple[str, str | None, str]] = {
    "Uz": ("w_ru", "x", "u"), "Wz": ("w_ru", "h", "u"), "bz": ("b_ru", None, "u"),
    "Ur": ("w_ru", "x", "r"), "Wr": ("w_ru", "h", "r"), "br": ("b_ru", None, "r"),
    "Uh": ("w_c", "x", "c"), "Wh": ("w_c", "h", "c"), "bh": ("b_c", None, "c"),
}

#: gru_block_cell tensor -> its column blocks, in order
BLOCK_COLUMNS: dict[str, tuple[str, ...]] = {"w_ru": ("r", "u"), "w_c": ("c",), "b_ru": ("r", "u"), "b_c": ("c",)}

#: each format's name for the candidate's single bias
CANDIDATE_BIAS: dict[str, str] = {"gru_block_cell": "b_c", "mygrad": "bh"}

#: format -> its tensor names (one tensor each)
NAMES: dict[str, TensorNames] = {
    "gru_block_cell": TensorNames({name: name for name in BLOCK_COLUMNS}),
    "mygrad": TensorNames({name: name for name in MYGRAD_FROM_BLOCK}),
}


def refusal_for(fmt: str):
    def refusal(config: RNNConfig) -> str | None:
        if config.rnn_mode == "gru" and config.num_layers == 1 and config.num_directions == 1:
            return None
        return (f"format {fmt!r} holds a single unidirectional GRU layer; got rnn_mode={config.rnn_mode!r}, "
                f"num_layers={config.num_layers}, direction={config.direction!r}")
    return refusal


def block_shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    i, n = config.input_size, config.num_units
    return {"w_ru": (i + n, 2 * n), "w_c": (i + n, n), "b_ru": (2 * n,), "b_c": (n,)}


def mygrad_shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    i, n = config.input_size, config.num_units
    rows = {"x": i, "h": n}
    return {name: ((rows[part], n) if part else (n,)) for name, (_, part, _) in MYGRAD_FROM_BLOCK.items()}


# ---- the exact pair ----------------------------------------------------------------------------
#: format -> (the tensor whose length is N, the tensor whose row count is I (+ N for gru_block_cell))
SIZE_PROBES: dict[str, tuple[str, str]] = {"gru_block_cell": ("b_c", "w_c"), "mygrad": ("bh", "Uh")}


def _implied_config(tensors: Mapping[str, Array], fmt: str) -> RNNConfig:
    """The single-layer GRU configuration that the tensors' shapes imply."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a mapping of name -> array for format {fmt!r}; got {type(tensors).__name__}")
    bias, matrix = SIZE_PROBES[fmt]
    for name in (bias, matrix):
        if getattr(tensors.get(name), "ndim", 0) < 1:
            raise ValueError(f"format {fmt!r} tensors need an array {name!r} (expected names "
                             f"{list(NAMES[fmt].templates)}); got {type(tensors.get(name)).__name__}")
    n = int(tensors[bias].shape[0])
    i = int(tensors[matrix].shape[0]) - (n if fmt == "gru_block_cell" else 0)
    if n < 1 or i < 1:
        raise ValueError(f"format {fmt!r} tensor shapes imply num_units={n}, input_size={i}; both must be >= 1")
    return RNNConfig("gru", 1, n, i)


def _row_slices(config: RNNConfig) -> dict[str | None, slice]:
    return {"x": slice(0, config.input_size), "h": slice(config.input_size, None), None: slice(None)}


def gru_block_cell_to_mygrad(tensors: Mapping[str, Array]) -> dict[str, Array]:
    """TF GRUBlockCell weights (w_ru, w_c, b_ru, b_c) -> mygrad's gru weights (Uz, Wz, bz, ...): exact."""
    config = _implied_config(tensors, "gru_block_cell")
    xp, _ = check_tensors("gru_block_cell", tensors, block_shapes(config), config)
    rows = _row_slices(config)
    result = {}
    for name, (source, part, gate) in MYGRAD_FROM_BLOCK.items():
        column = reorder_gates(tensors[source], BLOCK_COLUMNS[source], (gate,), xp, axis=-1)
        result[name] = xp.ascontiguousarray(column[rows[part]])
    return result


def mygrad_to_gru_block_cell(tensors: Mapping[str, Array]) -> dict[str, Array]:
    """mygrad's gru weights (Uz, Wz, bz, ...) -> TF GRUBlockCell weights (w_ru, w_c, b_ru, b_c): exact."""
    config = _implied_config(tensors, "mygrad")
    xp, _ = check_tensors("mygrad", tensors, mygrad_shapes(config), config)
    pieces: dict[str, dict[tuple[str | None, str], Array]] = {name: {} for name in BLOCK_COLUMNS}
    for name, (target, part, gate) in MYGRAD_FROM_BLOCK.items():
        pieces[target][part, gate] = tensors[name]
    result = {}
    for target, gates in BLOCK_COLUMNS.items():
        parts = ("x", "h") if target.startswith("w") else (None,)
        columns = [xp.concatenate([pieces[target][part, gate] for part in parts], axis=0) for gate in gates]
        result[target] = xp.ascontiguousarray(xp.concatenate(columns, axis=-1))
    return result


# ---- cuDNN <-> reset-before (never exact) -------------------------------------------------------
def _reset_placement(fmt: str, towards: str) -> str:
    if towards == "reset_before":
        return (f"cuDNN's GRU applies the reset gate after the candidate's recurrent matmul, r * (R_n h + bR_n); "
                f"format {fmt!r} is a reset-before GRU, R_n (r * h): the two agree only where r == 1.")
    return (f"format {fmt!r} is a reset-before GRU, R_n (r * h); cuDNN's GRU applies the reset gate after the "
            f"recurrent matmul, r * (R_n h + bR_n) with bR_n = 0 here: the two agree only where r == 1.")


def _block_encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any,
                  fmt: str = "gru_block_cell") -> dict[str, Array]:
    notes.approximate(_reset_placement(fmt, "reset_before"))
    (cell,) = with_explicit_skip_input(cells, config, xp)
    gates, n = config.mode.gates, config.num_units
    if bool(xp.any(cell.recurrent_bias[2 * n:] != 0)):
        notes.approximate(
            f"the candidate's recurrent bias bR_n, scaled by r in cuDNN's GRU, was added unscaled to "
            f"{CANDIDATE_BIAS[fmt]} = bW_n + bR_n: exact only where r == 1.")
    stitched = xp.concatenate([cell.input, cell.recurrent], axis=1)  # [3N, I + N], rows r, u, n
    bias = cell.input_bias + cell.recurrent_bias
    return {
        "w_ru": xp.ascontiguousarray(reorder_gates(stitched, gates, ("r", "u"), xp).T),
        "w_c": xp.ascontiguousarray(reorder_gates(stitched, gates, ("n",), xp).T),
        "b_ru": reorder_gates(bias, gates, ("r", "u"), xp),
        "b_c": reorder_gates(bias, gates, ("n",), xp),
    }


def _block_decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any,
                  fmt: str = "gru_block_cell") -> tuple[CellWeights, ...]:
    notes.approximate(_reset_placement(fmt, "reset_after"))
    i = config.input_size
    stitched = xp.concatenate([tensors["w_ru"].T, tensors["w_c"].T], axis=0)  # [3N, I + N], rows r, u, n
    bias = xp.concatenate([tensors["b_ru"], tensors["b_c"]])
    return (CellWeights(input=xp.ascontiguousarray(stitched[:, :i]), recurrent=xp.ascontiguousarray(stitched[:, i:]),
                        input_bias=bias, recurrent_bias=xp.zeros_like(bias)),)


def _mygrad_encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    return gru_block_cell_to_mygrad(_block_encode(cells, config, notes, xp, fmt="mygrad"))


def _mygrad_decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    return _block_decode(mygrad_to_gru_block_cell(tensors), config, notes, xp, fmt="mygrad")


GRU_BLOCK_CELL = FormatSpec(
    name="gru_block_cell",
    summary="TF GRUBlockCell: w_ru, w_c, b_ru, b_c (reset-before GRU: approximate)",
    refusal=refusal_for("gru_block_cell"),
    shapes=block_shapes,
    encode=_block_encode,
    decode=_block_decode,
    names=NAMES["gru_block_cell"],
    signature=NAMES["gru_block_cell"].signature(),
    reading=ShapeReading(sizes={"stitched_rows": ("w_c", 0), "num_units": ("w_c", 1)}, mode="gru"),
)

MYGRAD = FormatSpec(
    name="mygrad",
    summary="mygrad's gru: Uz, Wz, bz, Ur, ... (reset-before GRU: approximate)",
    refusal=refusal_for("mygrad"),
    shapes=mygrad_shapes,
    encode=_mygrad_encode,
    decode=_mygrad_decode,
    names=NAMES["mygrad"],
    signature=NAMES["mygrad"].signature(),
    reading=ShapeReading(sizes={"input_size": ("Uz", 0), "num_units": ("Uz", 1)}, mode="gru"),
)
