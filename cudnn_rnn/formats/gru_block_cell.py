"""``gru_block_cell``: the weights of TF's ``GRUBlockCell``, a reset-*before* GRU.

TF's ``GRUBlockCell`` (and ``tf.compat.v1.nn.rnn_cell.GRUCell``) computes the function that
:mod:`cudnn_rnn.gru_block` spells out, from ``w_ru`` = [[U_r, U_u], [W_r, W_u]] and ``w_c`` =
[[U_c], [W_c]] (rows x then h: U acts on x [B, I], W on h [B, N]), ``b_ru`` = [b_r, b_u] and
``b_c``. It holds one unidirectional layer. mygrad's gru is the same function in other tensors
(:mod:`.mygrad`, converting exactly to and from this format), and so is Keras's
``GRU(reset_after=False)``, whose weights the readers of Keras files and TensorFlow checkpoints
give in this format (:func:`keras_reset_before_to_gru_block_cell`, exact).

cuDNN's GRU is a different function: its candidate is ``tanh(W_n x + bW_n + r * (R_n h + bR_n))``,
the reset applied *after* the recurrent matmul, with a recurrent bias inside it. So a
conversion between cuDNN and a reset-before GRU is never exact, and needs allow_approximation:

* cuDNN -> reset-before: W and R of r and u move exactly, their two biases become one sum
  (exact); the candidate gets U_c = W_n^T, W_c = R_n^T and ``b_c = bW_n + bR_n``. The result
  equals cuDNN's GRU exactly where r == 1, and differs elsewhere: ``R_n (r * h)`` vs
  ``r * (R_n h)``, and ``bR_n`` vs ``r * bR_n``.
* reset-before -> cuDNN: the same matrices; each single bias goes to bW with bR = 0 (so bR_n
  = 0 and the bias placement is exact); only the reset placement differs, again agreeing
  exactly where r == 1.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .._arrays import Array
from ..config import RNNConfig
from ._core import (
    CellWeights,
    FormatSpec,
    Notes,
    reorder_gates,
    with_explicit_skip_input,
)
from ._reading import ShapeReading, TensorNames
from .keras import GATE_ORDERS as KERAS_GATE_ORDERS

#: gru_block_cell tensor -> its column blocks, in order
BLOCK_COLUMNS: dict[str, tuple[str, ...]] = {"w_ru": ("r", "u"), "w_c": ("c",), "b_ru": ("r", "u"), "b_c": ("c",)}

TENSOR_NAMES = TensorNames({name: name for name in BLOCK_COLUMNS})

#: the candidate's single bias
CANDIDATE_BIAS = "b_c"


def refusal_for(fmt: str) -> Callable[[RNNConfig], str | None]:
    """The refusal of a reset-before GRU format ``fmt``: anything but a single unidirectional GRU layer."""
    def refusal(config: RNNConfig) -> str | None:
        if config.rnn_mode == "gru" and config.num_layers == 1 and config.num_directions == 1:
            return None
        return (f"format {fmt!r} holds a single unidirectional GRU layer; got rnn_mode={config.rnn_mode!r}, "
                f"num_layers={config.num_layers}, direction={config.direction!r}")
    return refusal


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    i, n = config.input_size, config.num_units
    return {"w_ru": (i + n, 2 * n), "w_c": (i + n, n), "b_ru": (2 * n,), "b_c": (n,)}


# ---- cuDNN <-> reset-before (never exact) -------------------------------------------------------
def _reset_placement(fmt: str, towards: str) -> str:
    """The approximation of a conversion between cuDNN's GRU and reset-before format ``fmt``."""
    if towards == "reset_before":
        return (f"cuDNN's GRU applies the reset gate after the candidate's recurrent matmul, r * (R_n h + bR_n); "
                f"format {fmt!r} is a reset-before GRU, R_n (r * h): the two agree only where r == 1.")
    return (f"format {fmt!r} is a reset-before GRU, R_n (r * h); cuDNN's GRU applies the reset gate after the "
            f"recurrent matmul, r * (R_n h + bR_n) with bR_n = 0 here: the two agree only where r == 1.")


def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any, fmt: str = "gru_block_cell",
           candidate_bias: str = CANDIDATE_BIAS) -> dict[str, Array]:
    """cuDNN cells -> this format's tensors; ``fmt`` and ``candidate_bias`` name, in the notes, the format
    converted to (mygrad converts through this one)."""
    notes.approximate(_reset_placement(fmt, "reset_before"))
    (cell,) = with_explicit_skip_input(cells, config, xp)
    gates, n = config.mode.gates, config.num_units
    if bool(xp.any(cell.recurrent_bias[2 * n:] != 0)):
        notes.approximate(
            f"the candidate's recurrent bias bR_n, scaled by r in cuDNN's GRU, was added unscaled to "
            f"{candidate_bias} = bW_n + bR_n: exact only where r == 1.")
    stitched = xp.concatenate([cell.input, cell.recurrent], axis=1).T  # [I + N, 3N], columns r, u, n
    return _tensors(stitched, cell.input_bias + cell.recurrent_bias, gates, xp)


def _tensors(stitched: Array, bias: Array, order: Sequence[str], xp: Any) -> dict[str, Array]:
    """This format's tensors of a kernel [I + N, 3N] (rows x then h) and a bias [3N], gate blocks in ``order``."""
    return {"w_ru": xp.ascontiguousarray(reorder_gates(stitched, order, ("r", "u"), xp, axis=1)),
            "w_c": xp.ascontiguousarray(reorder_gates(stitched, order, ("n",), xp, axis=1)),
            "b_ru": reorder_gates(bias, order, ("r", "u"), xp), "b_c": reorder_gates(bias, order, ("n",), xp)}


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any,
           fmt: str = "gru_block_cell") -> tuple[CellWeights, ...]:
    """This format's tensors -> cuDNN cells; ``fmt`` names, in the notes, the format converted from."""
    notes.approximate(_reset_placement(fmt, "reset_after"))
    i = config.input_size
    stitched = xp.concatenate([tensors["w_ru"].T, tensors["w_c"].T], axis=0)  # [3N, I + N], rows r, u, n
    bias = xp.concatenate([tensors["b_ru"], tensors["b_c"]])
    return (CellWeights(input=xp.ascontiguousarray(stitched[:, :i]), recurrent=xp.ascontiguousarray(stitched[:, i:]),
                        input_bias=bias, recurrent_bias=xp.zeros_like(bias)),)


# ---- Keras GRU(reset_after=False) -> gru_block_cell (exact) --------------------------------------
def keras_reset_before_to_gru_block_cell(kernel: Array, recurrent_kernel: Array, bias: Array | None,
                                         xp: Any) -> dict[str, Array]:
    """The weights of a Keras ``GRU(reset_after=False)`` in this format: exact, the same function.

    ``kernel`` [I, 3N], ``recurrent_kernel`` [N, 3N] and ``bias`` [3N] (None for use_bias=False:
    zeros) hold their gate blocks in Keras's order z, r, h (cuDNN's u, r, n:
    :data:`.keras.GATE_ORDERS`); stacked rows x then h, they are w_ru's and w_c's columns.
    """
    if bias is None:
        bias = xp.zeros(kernel.shape[1], kernel.dtype)
    return _tensors(xp.concatenate([kernel, recurrent_kernel], axis=0), bias, KERAS_GATE_ORDERS["gru"], xp)


refusal = refusal_for("gru_block_cell")

SPEC = FormatSpec("gru_block_cell", "TF GRUBlockCell: w_ru, w_c, b_ru, b_c (reset-before GRU: approximate)", shapes,
                  encode, decode, refusal=refusal, names=TENSOR_NAMES,
                  reading=ShapeReading(sizes={"stitched_rows": ("w_c", 0), "num_units": ("w_c", 1)}, mode="gru"))
