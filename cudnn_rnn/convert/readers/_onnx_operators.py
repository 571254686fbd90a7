"""The operators an ONNX graph is folded through (:data:`OPERATORS`): each computes a node's output 0.

::

    OPERATORS[node.op_type](OperatorCall(node, values, depth))  -> Value     values: the graph (a Folding)
    call.input(0)            the node's input 0, folded by the graph (an array, a Sequence or Dims)
    call.ints("axes", 1)     the attribute axes, or (newer opsets) the constant int input 1; None when neither
    call.malformed(why)      MalformedGraph("node 'name' (Op): why")

=========  =========================================================================================
operator   on a constant / an RNN output (Sequence) / a shape vector (Dims)
=========  =========================================================================================
Identity   the input, whatever it is
Dropout    the input, when its training input is absent or a constant false
Constant   the ``value`` tensor, or ``value_float(s)`` / ``value_int(s)``
Cast       to float16/32/64 or int32/64 / not followed / unchanged when cast to ints
Transpose  transposed / its axes permuted / not followed
Squeeze    squeezed / axes of size 1 dropped / a length-1 vector to a scalar
Unsqueeze  unsqueezed / axes of size 1 inserted / a scalar to a length-1 vector
Concat     concatenated / the directions of one RNN, each picked by a Slice, joined in order / joined
Slice      sliced / whole axes kept, or one direction picked / sliced
Reshape    reshaped / its atoms regrouped into the target's dimensions (binding T or B) / a
           length-1 vector to or from a scalar
Shape      its shape / Dims of its axes / its length
Gather     axis 0 of a shape vector (a small int constant or Dims) at constant indices
Mul        shape vectors, elementwise; a length-1 one broadcasts
=========  =========================================================================================

Anything else raises :class:`~._onnx_values.NotFolded`. Every new array an operator returns is
charged to the graph's budget; Cast and Concat ask first (:meth:`Folding.afford`), before they
allocate theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

import numpy as np

from ..._dtypes import names as dtype_names
from ._onnx_values import DIRECTIONS, Dim, Dims, MalformedGraph, NotFolded, Sequence, Value

__all__ = ["OPERATORS", "OperatorCall", "Folding", "OPEN_END", "MAX_SHAPE_VECTOR"]

#: a Slice end at or beyond this reaches the end of an axis whose size is not known
OPEN_END = 2**31 - 1

#: integer arrays longer than this are not shape vectors (Gather and Mul fold only those)
MAX_SHAPE_VECTOR = 64

_TENSOR = 4  # AttributeProto.TENSOR: a Constant's value


class Folding(Protocol):
    """What an operator asks of the graph being folded (:class:`._onnx_graph.GraphValues`)."""

    decode: Callable[[Any, str], np.ndarray]  # a TensorProto (a Constant's value) -> its array

    def value(self, name: str, depth: int = 0) -> Value:
        """The value of the graph's name ``name``, ``depth`` nodes down a chain."""

    def afford(self, nbytes: int, node: Any) -> None:
        """Refuse to allocate ``nbytes`` more for ``node`` when that would pass the budget."""


@dataclass
class OperatorCall:
    """One operator applied to one node: the node's attributes, and its inputs folded on demand."""

    node: Any
    values: Folding
    depth: int
    attributes: dict[str, Any] = field(init=False)
    seen: list[Value] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        from onnx import helper

        self.attributes = {attribute.name: attribute for attribute in self.node.attribute}
        self._helper = helper

    def malformed(self, reason: str) -> MalformedGraph:
        return MalformedGraph(f"node {self.node.name!r} ({self.node.op_type}): {reason}")

    def optional(self, index: int) -> Value | None:
        if index >= len(self.node.input) or not self.node.input[index]:
            return None
        value = self.values.value(self.node.input[index], self.depth + 1)
        self.seen.append(value)
        return value

    def input(self, index: int) -> Value:
        value = self.optional(index)
        if value is None:
            raise self.malformed(f"input {index} is missing")
        return value

    def inputs(self) -> list[Value]:
        values = [self.values.value(name, self.depth + 1) for name in self.node.input if name]
        self.seen.extend(values)
        return values

    def attribute(self, name: str, default: Any = None) -> Any:
        if name not in self.attributes:
            return default
        return self._helper.get_attribute_value(self.attributes[name])

    def ints(self, attribute: str, index: int | None = None) -> list[int] | None:
        """An int-list attribute, or (when absent) the constant int input ``index``; None when neither."""
        if attribute in self.attributes:
            value = self.attribute(attribute)
            values = value if isinstance(value, (list, tuple)) else [value]
            if not all(isinstance(v, int) for v in values):
                raise self.malformed(f"attribute {attribute} must hold ints; got {values!r}")
            return [int(v) for v in values]
        if index is None:
            return None
        value = self.optional(index)
        if value is None:
            return None
        if not isinstance(value, np.ndarray):
            raise NotFolded(f"the {attribute} of node {self.node.name!r} are computed at run time")
        if value.dtype.kind not in "iu" or value.ndim > 1:
            raise self.malformed(f"its {attribute} must be a 0-D or 1-D int tensor; got {value.dtype} {value.shape}")
        return [int(v) for v in value.reshape(-1)]

    def axis(self, axis: int, rank: int) -> int:
        if not -rank <= axis < rank:
            raise self.malformed(f"axis {axis} is out of range for rank {rank}")
        return axis % rank


# ---- operators: each takes an OperatorCall and returns a Value -------------------------------------
def _identity(call: OperatorCall) -> Value:
    return call.input(0)


def _dropout(call: OperatorCall) -> Value:
    training = call.optional(2)
    if training is not None and (not isinstance(training, np.ndarray) or bool(np.any(training))):
        raise NotFolded(f"Dropout node {call.node.name!r} may run in training mode")
    return call.input(0)


def _constant(call: OperatorCall) -> Value:
    if "value" in call.attributes:
        if call.attributes["value"].type != _TENSOR:
            raise call.malformed("attribute value is not a tensor")
        return call.values.decode(call.attribute("value"), f"the value of Constant node {call.node.name!r}")
    for name, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                        ("value_ints", np.int64)):
        if name in call.attributes:
            return np.array(call.attribute(name), dtype=dtype)
    raise NotFolded(f"Constant node {call.node.name!r} holds neither a dense tensor nor numbers")


#: ONNX element type (TensorProto.DataType) -> NumPy dtype, for Cast
_CAST_TYPES: dict[int, type] = {code: np.dtype(name).type for code, name in dtype_names("onnx").items()
                                if name in ("float16", "float32", "float64", "int32", "int64")}


def _cast(call: OperatorCall) -> Value:
    target = _CAST_TYPES.get(call.attribute("to"))
    value = call.input(0)
    if target is None:
        raise NotFolded(f"Cast node {call.node.name!r} casts to element type {call.attribute('to')}, not followed here")
    if isinstance(value, Dims) and np.dtype(target).kind == "i":
        return value
    if not isinstance(value, np.ndarray):
        raise NotFolded(f"Cast node {call.node.name!r} casts an RNN output")
    call.values.afford(value.size * np.dtype(target).itemsize, call.node)
    return value.astype(target)


def _transpose(call: OperatorCall) -> Value:
    value = call.input(0)
    if isinstance(value, Dims):
        raise NotFolded(f"Transpose node {call.node.name!r} of a shape vector")
    rank = len(value.axes) if isinstance(value, Sequence) else value.ndim
    perm = call.ints("perm") or list(range(rank))[::-1]
    if sorted(perm) != list(range(rank)):
        raise call.malformed(f"perm {perm} is not a permutation of the {rank} axes")
    if isinstance(value, Sequence):
        return replace(value, axes=tuple(value.axes[axis] for axis in perm))
    return np.transpose(value, perm)


def _squeeze(call: OperatorCall) -> Value:
    value = call.input(0)
    axes = call.ints("axes", 1)
    if isinstance(value, Dims):
        if value.scalar or len(value.dims) != 1 or axes not in (None, [0], [-1]):
            raise call.malformed("squeezes a shape vector that is not of length 1")
        return Dims(value.dims, scalar=True)
    if isinstance(value, Sequence):
        rank = len(value.axes)
        chosen = {call.axis(a, rank) for a in axes} if axes is not None else {
            i for i, atoms in enumerate(value.axes) if not atoms}
        if any(value.axes[i] for i in chosen):
            raise call.malformed(f"squeezes axes {sorted(chosen)} of an RNN output that are not of size 1")
        return replace(value, axes=tuple(atoms for i, atoms in enumerate(value.axes) if i not in chosen))
    if axes is None:
        return np.squeeze(value)
    squeezed = tuple(sorted({call.axis(a, value.ndim) for a in axes}))
    if any(value.shape[i] != 1 for i in squeezed):
        raise call.malformed(f"squeezes axes {list(squeezed)} of a tensor of shape {value.shape}")
    return np.squeeze(value, axis=squeezed)


def _unsqueeze(call: OperatorCall) -> Value:
    value = call.input(0)
    axes = call.ints("axes", 1)
    if axes is None:
        raise call.malformed("no axes")
    if isinstance(value, Dims):
        if not value.scalar or axes not in ([0], [-1]):
            raise call.malformed("unsqueezes a shape vector")
        return Dims(value.dims)
    rank = (len(value.axes) if isinstance(value, Sequence) else value.ndim) + len(axes)
    chosen = sorted({call.axis(a, rank) for a in axes})
    if len(chosen) != len(axes):
        raise call.malformed(f"repeated axes {axes}")
    if isinstance(value, Sequence):
        axes_out, rest = [], iter(value.axes)
        for i in range(rank):
            axes_out.append(() if i in chosen else next(rest))
        return replace(value, axes=tuple(axes_out))
    return np.expand_dims(value, tuple(chosen))


def _dims_of(value: Value, call: OperatorCall) -> Dims:
    """A shape vector from Dims or a constant int vector (scalars stay scalars)."""
    if isinstance(value, Dims):
        return value
    if (isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim <= 1
            and value.size <= MAX_SHAPE_VECTOR):
        return Dims(tuple((int(v), ()) for v in value.reshape(-1)), scalar=value.ndim == 0)
    raise NotFolded(f"node {call.node.name!r} ({call.node.op_type}) mixes an RNN output or a large tensor into "
                    "a shape computation")


def _concat(call: OperatorCall) -> Value:
    parts = call.inputs()
    if not parts:
        raise call.malformed("no inputs")
    axis = call.attribute("axis")
    if not isinstance(axis, int):
        raise call.malformed("attribute axis is missing")
    arrays = [part for part in parts if isinstance(part, np.ndarray)]
    if len(arrays) == len(parts):
        call.values.afford(sum(array.nbytes for array in arrays), call.node)
        return np.concatenate(arrays, axis=call.axis(axis, arrays[0].ndim))
    sequences = [part for part in parts if isinstance(part, Sequence)]
    if len(sequences) == len(parts):
        return _concat_directions(call, sequences, axis)
    dims = [_dims_of(part, call) for part in parts]
    if any(d.scalar for d in dims):
        raise call.malformed("concatenates scalars")
    return Dims(tuple(entry for d in dims for entry in d.dims))


def _concat_directions(call: OperatorCall, parts: list[Sequence], axis: int) -> Sequence:
    """The two directions of one RNN output, each picked by a Slice, joined again along ``axis``."""
    first = parts[0]
    if len(parts) == 1:
        return first
    axis = call.axis(axis, len(first.axes))
    same = all(p.source == first.source and p.axes == first.axes for p in parts)
    if not same or [p.picked for p in parts] != list(range(first.sizes.get(DIRECTIONS, 1))):
        raise NotFolded(f"Concat node {call.node.name!r} joins RNN outputs other than the directions of one, in order")
    axes = list(first.axes)
    axes[axis] = (DIRECTIONS, *axes[axis])
    return replace(first, axes=tuple(axes), picked=None)


def _slice_arguments(call: OperatorCall, rank: int) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, from the attributes (opset < 10) or the inputs."""
    starts, ends = call.ints("starts", 1), call.ints("ends", 2)
    if starts is None or ends is None or len(starts) != len(ends):
        raise call.malformed("starts and ends must be given, of one length")
    axes = call.ints("axes", 3) or list(range(len(starts)))
    steps = call.ints("steps", 4) if "starts" not in call.attributes else None
    steps = steps or [1] * len(starts)
    if not len(axes) == len(steps) == len(starts) or 0 in steps:
        raise call.malformed("axes and steps must match starts, with no step 0")
    return [(call.axis(a, rank), s, e, step) for a, s, e, step in zip(axes, starts, ends, steps)]


def _slice(call: OperatorCall) -> Value:
    value = call.input(0)
    if isinstance(value, Dims):
        if value.scalar:
            raise call.malformed("slices a scalar")
        ((_, start, end, step),) = _slice_arguments(call, 1)
        return Dims(value.dims[slice(start, end, step)])
    if isinstance(value, Sequence):
        return _slice_sequence(call, value)
    index = [slice(None)] * value.ndim
    for axis, start, end, step in _slice_arguments(call, value.ndim):
        index[axis] = slice(start, end, step)
    return value[tuple(index)]


def _slice_sequence(call: OperatorCall, value: Sequence) -> Sequence:
    axes, picked = list(value.axes), value.picked
    for axis, start, end, step in _slice_arguments(call, len(axes)):
        size = value.size(axes[axis])
        if size is None:
            if step == 1 and start == 0 and end >= OPEN_END:
                continue
            raise NotFolded(f"Slice node {call.node.name!r} cuts the time or batch axis of an RNN output")
        kept = range(*slice(start, end, step).indices(size))
        if len(kept) == size and step == 1:
            continue
        if axes[axis] == (DIRECTIONS,) and len(kept) == 1 and picked is None:
            axes[axis], picked = (), kept[0]
            continue
        raise NotFolded(f"Slice node {call.node.name!r} cuts the features of an RNN output")
    return replace(value, axes=tuple(axes), picked=picked)


def _reshape(call: OperatorCall) -> Value:
    value = call.input(0)
    allow_zero = bool(call.attribute("allowzero", 0))
    shape = call.ints("shape")  # the attribute (opset < 5), else None: the shape is input 1
    target = Dims(tuple((v, ()) for v in shape)) if shape is not None else _dims_of(call.input(1), call)
    if isinstance(value, Sequence):
        return _regroup(call, value, target.dims, allow_zero)
    if isinstance(value, Dims):
        if len(target.dims) > 1 or len(value.dims) != 1:
            raise NotFolded(f"Reshape node {call.node.name!r} reshapes a shape vector")
        return Dims(value.dims, scalar=not target.dims)
    if any(unknown for _, unknown in target.dims):
        raise NotFolded(f"Reshape node {call.node.name!r} reshapes a constant to a shape computed at run time")
    shape = [factor for factor, _ in target.dims]
    for i, factor in enumerate(shape):
        if factor == 0 and not allow_zero:
            if i >= value.ndim:
                raise call.malformed(f"shape {shape} copies dimension {i} of a {value.ndim}-D tensor")
            shape[i] = value.shape[i]
    if shape.count(-1) > 1 or any(factor < -1 for factor in shape):
        raise call.malformed(f"invalid shape {shape}")
    try:
        return np.reshape(value, shape)
    except ValueError:
        raise call.malformed(f"cannot reshape a tensor of shape {value.shape} to {shape}") from None


def _take(atoms: list[str], dim: Dim, sizes: dict[str, int]) -> int | None:
    """How many of ``atoms`` (from the front) make up ``dim``, binding an atom of unknown size to
    the rest of a plain number where needed; None if they cannot."""
    factor, unknown = dim
    needed, product, count = list(unknown), 1, 0
    while needed or product != factor:
        if count == len(atoms) or product > factor:
            return None
        atom = atoms[count]
        count += 1
        if atom in needed:
            needed.remove(atom)
        elif atom in sizes:
            product *= sizes[atom]
        elif not needed and factor % product == 0 and factor // product > 1:
            sizes[atom] = factor // product
            product = factor
        else:
            return None
    return count


def _regroup(call: OperatorCall, value: Sequence, target: tuple[Dim, ...], allow_zero: bool) -> Sequence:
    """A Reshape of an RNN output: the atoms, in order, regrouped into the target's dimensions."""
    failed = NotFolded(f"Reshape node {call.node.name!r} regroups an RNN output in a way not followed here")
    copies = [i for i, (factor, unknown) in enumerate(target) if factor == 0 and not unknown]
    if (allow_zero and copies) or any(factor < -1 or (factor == -1 and unknown) for factor, unknown in target):
        raise failed
    inferred = [i for i, (factor, _) in enumerate(target) if factor == -1]
    if len(inferred) > 1:
        raise call.malformed("more than one -1 in the shape")
    atoms = [atom for axis in value.axes for atom in axis]
    bounds = np.cumsum([0] + [len(axis) for axis in value.axes]).tolist()
    sizes = dict(value.sizes)
    split = inferred[0] if inferred else len(target)
    out: list[tuple[str, ...] | None] = [None] * len(target)
    front = 0
    for i in range(split):
        if i in copies:
            if i >= len(value.axes) or bounds[i] != front:
                raise failed
            out[i], front = value.axes[i], bounds[i + 1]
            continue
        count = _take(atoms[front:], target[i], sizes)
        if count is None:
            raise failed
        out[i], front = tuple(atoms[front:front + count]), front + count
    back = len(atoms)
    for i in range(len(target) - 1, split, -1):
        if i in copies:
            if i >= len(value.axes) or bounds[i + 1] != back:
                raise failed
            out[i], back = value.axes[i], bounds[i]
            continue
        count = _take(atoms[front:back][::-1], target[i], sizes)
        if count is None:
            raise failed
        out[i], back = tuple(atoms[back - count:back]), back - count
    if inferred:
        out[split] = tuple(atoms[front:back])
    elif front != back:
        raise failed
    return replace(value, axes=tuple(axis for axis in out if axis is not None), sizes=sizes)


def _shape(call: OperatorCall) -> Value:
    value = call.input(0)
    start, end = call.attribute("start", 0), call.attribute("end")
    if isinstance(value, Sequence):
        return Dims(tuple(value.dim(axis) for axis in value.axes)[slice(start, end)])
    if isinstance(value, Dims):
        return np.array([] if value.scalar else [len(value.dims)], np.int64)[slice(start, end)]
    return np.array(value.shape, np.int64)[slice(start, end)]


def _gather(call: OperatorCall) -> Value:
    data, indices = call.input(0), call.input(1)
    if call.attribute("axis", 0) != 0 or not isinstance(indices, np.ndarray) or indices.dtype.kind not in "iu" \
            or indices.ndim > 1 or indices.size > MAX_SHAPE_VECTOR:
        raise NotFolded(f"Gather node {call.node.name!r} is not a pick from a shape vector")
    dims = _dims_of(data, call)
    if dims.scalar:
        raise call.malformed("gathers from a scalar")
    picked = tuple(dims.dims[call.axis(int(i), len(dims.dims))] for i in indices.reshape(-1))
    result = Dims(picked, scalar=indices.ndim == 0)
    if isinstance(data, np.ndarray):
        return np.array([factor for factor, _ in picked], data.dtype).reshape(indices.shape)
    return result


def _mul(call: OperatorCall) -> Value:
    a, b = _dims_of(call.input(0), call), _dims_of(call.input(1), call)
    if len(a.dims) != len(b.dims) and 1 not in (len(a.dims), len(b.dims)):
        raise call.malformed("multiplies shape vectors of different lengths")
    length = max(len(a.dims), len(b.dims))
    left = a.dims * length if len(a.dims) == 1 else a.dims  # a length-1 vector broadcasts
    right = b.dims * length if len(b.dims) == 1 else b.dims
    product = tuple((x[0] * y[0], tuple(sorted(x[1] + y[1]))) for x, y in zip(left, right))
    result = Dims(product, scalar=a.scalar and b.scalar)
    if isinstance(call.input(0), np.ndarray) and isinstance(call.input(1), np.ndarray):
        return np.array([factor for factor, _ in product], np.int64).reshape(() if result.scalar else (-1,))
    return result


#: op_type -> how its output 0 is computed from its inputs (anything else is not folded)
OPERATORS: dict[str, Callable[[OperatorCall], Value]] = {
    "Identity": _identity,
    "Dropout": _dropout,
    "Constant": _constant,
    "Cast": _cast,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Slice": _slice,
    "Reshape": _reshape,
    "Shape": _shape,
    "Gather": _gather,
    "Mul": _mul,
}
