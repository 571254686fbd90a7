"""``mygrad``: the weights of ``mygrad.nnet.layers.gru``, a reset-*before* GRU.

mygrad's gru computes TF's ``GRUBlockCell`` function (:mod:`.gru_block_cell`, whose docstring
has the equations), its weights in nine tensors (:data:`MYGRAD_FROM_BLOCK`; z = u, h = c), so it
and ``gru_block_cell`` convert into each other exactly (:func:`gru_block_cell_to_mygrad`,
:func:`mygrad_to_gru_block_cell`). It holds one unidirectional layer, and converts to and from
cuDNN's GRU through ``gru_block_cell``, approximately in the same ways.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .._arrays import Array
from ..config import RNNConfig
from . import gru_block_cell as block
from ._core import CellWeights, FormatSpec, Notes, check_tensors, reorder_gates
from ._reading import ShapeReading, TensorNames

#: mygrad tensor -> (gru_block_cell tensor, its rows ("x", "h" or None for a bias), its column gate)
MYGRAD_FROM_BLOCK: dict[str, tuple[str, str | None, str]] = {
    "Uz": ("w_ru", "x", "u"), "Wz": ("w_ru", "h", "u"), "bz": ("b_ru", None, "u"),
    "Ur": ("w_ru", "x", "r"), "Wr": ("w_ru", "h", "r"), "br": ("b_ru", None, "r"),
    "Uh": ("w_c", "x", "c"), "Wh": ("w_c", "h", "c"), "bh": ("b_c", None, "c"),
}

TENSOR_NAMES = TensorNames({name: name for name in MYGRAD_FROM_BLOCK})

#: the candidate's single bias
CANDIDATE_BIAS = "bh"


def shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    i, n = config.input_size, config.num_units
    rows = {"x": i, "h": n}
    return {name: ((rows[part], n) if part else (n,)) for name, (_, part, _) in MYGRAD_FROM_BLOCK.items()}


# ---- the exact pair ----------------------------------------------------------------------------
#: format -> (its tensor names, the tensor whose length is N, the tensor whose row count is I (+ N for gru_block_cell))
SIZE_PROBES: dict[str, tuple[TensorNames, str, str]] = {"gru_block_cell": (block.TENSOR_NAMES, "b_c", "w_c"),
                                                        "mygrad": (TENSOR_NAMES, "bh", "Uh")}


def _implied_config(tensors: Mapping[str, Array], fmt: str) -> RNNConfig:
    """The single-layer GRU configuration that the tensors' shapes imply."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a mapping of name -> array for format {fmt!r}; got {type(tensors).__name__}")
    names, bias, matrix = SIZE_PROBES[fmt]
    for name in (bias, matrix):
        if getattr(tensors.get(name), "ndim", 0) < 1:
            raise ValueError(f"format {fmt!r} tensors need an array {name!r} (expected names "
                             f"{list(names.templates)}); got {type(tensors.get(name)).__name__}")
    n = int(tensors[bias].shape[0])
    i = int(tensors[matrix].shape[0]) - (n if fmt == "gru_block_cell" else 0)
    if n < 1 or i < 1:
        raise ValueError(f"format {fmt!r} tensor shapes imply num_units={n}, input_size={i}; both must be >= 1")
    return RNNConfig("gru", 1, n, i)


def gru_block_cell_to_mygrad(tensors: Mapping[str, Array]) -> dict[str, Array]:
    """TF GRUBlockCell weights (w_ru, w_c, b_ru, b_c) -> mygrad's gru weights (Uz, Wz, bz, ...): exact.

    Args:
        tensors: the ``gru_block_cell`` format of one GRU layer: ``w_ru`` [I+N, 2N], ``w_c``
            [I+N, N], ``b_ru`` [2N], ``b_c`` [N] (NumPy or CuPy, one float dtype); I and N are
            read off the shapes.

    Returns:
        The ``mygrad`` format: ``Uz``, ``Ur``, ``Uh`` [I, N]; ``Wz``, ``Wr``, ``Wh`` [N, N];
        ``bz``, ``br``, ``bh`` [N]; fresh contiguous arrays of the tensors' kind and dtype.

    Raises:
        ValueError: a tensor is missing, or the names and shapes do not form one GRU layer.
        TypeError: ``tensors`` is not a mapping, or holds non-arrays, mixed array kinds or dtypes.
    """
    config = _implied_config(tensors, "gru_block_cell")
    xp, _ = check_tensors("gru_block_cell", tensors, block.shapes(config), config)
    rows = {"x": slice(0, config.input_size), "h": slice(config.input_size, None), None: slice(None)}
    result = {}
    for name, (source, part, gate) in MYGRAD_FROM_BLOCK.items():
        column = reorder_gates(tensors[source], block.BLOCK_COLUMNS[source], (gate,), xp, axis=-1)
        result[name] = xp.ascontiguousarray(column[rows[part]])
    return result


def mygrad_to_gru_block_cell(tensors: Mapping[str, Array]) -> dict[str, Array]:
    """mygrad's gru weights (Uz, Wz, bz, ...) -> TF GRUBlockCell weights (w_ru, w_c, b_ru, b_c): exact.

    The way back of :func:`gru_block_cell_to_mygrad`: it takes what that function returns, returns
    what it takes, and raises as it does.
    """
    config = _implied_config(tensors, "mygrad")
    xp, _ = check_tensors("mygrad", tensors, shapes(config), config)
    pieces: dict[str, dict[tuple[str | None, str], Array]] = {name: {} for name in block.BLOCK_COLUMNS}
    for name, (target, part, gate) in MYGRAD_FROM_BLOCK.items():
        pieces[target][part, gate] = tensors[name]
    result = {}
    for target, gates in block.BLOCK_COLUMNS.items():
        parts = ("x", "h") if target.startswith("w") else (None,)
        columns = [xp.concatenate([pieces[target][part, gate] for part in parts], axis=0) for gate in gates]
        result[target] = xp.ascontiguousarray(xp.concatenate(columns, axis=-1))
    return result


# ---- cuDNN <-> mygrad (never exact), through gru_block_cell ------------------------------------
def encode(cells: Sequence[CellWeights], config: RNNConfig, notes: Notes, xp: Any) -> dict[str, Array]:
    return gru_block_cell_to_mygrad(block.encode(cells, config, notes, xp, fmt="mygrad",
                                                 candidate_bias=CANDIDATE_BIAS))


def decode(tensors: Mapping[str, Array], config: RNNConfig, notes: Notes, xp: Any) -> tuple[CellWeights, ...]:
    return block.decode(mygrad_to_gru_block_cell(tensors), config, notes, xp, fmt="mygrad")


refusal = block.refusal_for("mygrad")

SPEC = FormatSpec("mygrad", "mygrad's gru: Uz, Wz, bz, Ur, ... (reset-before GRU: approximate)", shapes, encode,
                  decode, refusal=refusal, names=TENSOR_NAMES,
                  reading=ShapeReading(sizes={"input_size": ("Uz", 0), "num_units": ("Uz", 1)}, mode="gru"))
