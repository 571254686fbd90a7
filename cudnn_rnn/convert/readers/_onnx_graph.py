"""What an ONNX graph computes, as far as reading its RNNs needs, evaluated by onnx's ``ReferenceEvaluator``.

::

    graph = Graph(path, model.graph, decode, opset, budget)
    graph.fold(["onnx::LSTM_375", "/Slice_output_0"])   -> {name: array, or the exception saying why not}
    graph.probe("/Reshape_output_0", {"/LSTM_output_0": y})   -> what that name computes from y, or None

A name is traced back to initializers and ``Constant`` nodes (decoded by the reader's checked
``decode``) and evaluated node by node, each output charged to a byte budget (views of an input
cost nothing). A graph of :data:`BOUNDED_OPS` alone, which say their output's size before they
run, is evaluated here; any other operator (MatMul, Range, ...) makes :meth:`Graph.fold` evaluate
in a disposable child process (:func:`._child.run_isolated`: bounded time and memory, a crash a
FileReadError), once per file.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ..._dtypes import TABLE
from ._child import Reader, run_isolated
from ._found import FileReadError, one_line

__all__ = ["Graph", "NotFolded", "MalformedGraph", "evaluate", "ONNX_DOMAINS", "int_attribute"]

#: the longest chain of nodes followed back from one value, and the most nodes computing it
MAX_DEPTH, MAX_NODES = 64, 256

#: the domain names of the ONNX operators (a node's ``domain``, an ``opset_import`` entry's)
ONNX_DOMAINS = ("", "ai.onnx")

#: onnx's evaluator in a child process, as its refusals name it
EVALUATOR = Reader("onnx's reference evaluator", "ONNX model")

#: operators whose output is not a function of their inputs: never folded
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})

_GRAPH_ATTRIBUTES = (5, 10)  # AttributeProto.GRAPH, GRAPHS: a Loop, If or Scan body
_TENSOR, _SPARSE_TENSOR = 4, 11

#: ONNX element type -> itemsize, for Cast and ConstantOfShape (the numeric types a Cast in this process may make)
_ITEMSIZES: dict[int, int] = {dtype.onnx: dtype.itemsize for dtype in TABLE if dtype.onnx is not None}


class NotFolded(Exception):
    """The value is computed at run time, or by an operator that is not folded."""


class MalformedGraph(ValueError):
    """A graph that no plain export holds: a cycle, a chain too deep, a node that fails, folding past the budget."""


def _prod(dims: Iterable[int]) -> int:
    return math.prod(max(int(d), 0) for d in dims)


def _broadcast(*shapes: Iterable[int]) -> int:
    """The elements of the broadcast of ``shapes`` (an upper bound where they do not broadcast)."""
    listed = [list(shape)[::-1] for shape in shapes]
    return _prod(max((shape[i] for shape in listed if i < len(shape)), default=1)
                 for i in range(max(map(len, listed), default=0)))


def _moved(node: Any, inputs: list[np.ndarray]) -> int:
    return sum(value.nbytes for value in inputs) + 64


def int_attribute(node: Any, name: str) -> int:
    """The integer of ``node``'s attribute ``name``; 0 when it has none."""
    return next((attribute.i for attribute in node.attribute if attribute.name == name), 0)


def _cast(node: Any, inputs: list[np.ndarray]) -> int:
    return inputs[0].size * _ITEMSIZES.get(int_attribute(node, "to"), 8) + 64 if inputs else 64


def _elementwise(node: Any, inputs: list[np.ndarray]) -> int:
    return _broadcast(*(value.shape for value in inputs)) * max((value.itemsize for value in inputs), default=8) + 64


def _gather(node: Any, inputs: list[np.ndarray]) -> int:
    return inputs[0].nbytes * max(inputs[1].size, 1) + 64 if len(inputs) == 2 else 64


def _constant_of_shape(node: Any, inputs: list[np.ndarray]) -> int:
    value = next((attribute.t for attribute in node.attribute if attribute.name == "value"), None)
    itemsize = _ITEMSIZES.get(value.data_type, 8) if value is not None else 4
    return _prod(inputs[0].reshape(-1).tolist()) * itemsize + 64 if inputs else 64


def _expand(node: Any, inputs: list[np.ndarray]) -> int:
    return _broadcast(inputs[0].shape, inputs[1].reshape(-1).tolist()) * inputs[0].itemsize + 64


def _tile(node: Any, inputs: list[np.ndarray]) -> int:
    return _prod(inputs[1].reshape(-1).tolist()) * inputs[0].nbytes + 64


#: operator -> the most bytes its outputs take, from its inputs (a graph of these alone is evaluated in this process)
BOUNDED_OPS: dict[str, Callable[[Any, list[np.ndarray]], int]] = {
    **dict.fromkeys(("Identity", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Slice", "Reshape", "Flatten",
                     "Split", "Shape", "Size"), _moved),
    "Dropout": lambda node, inputs: 2 * _moved(node, inputs),
    "Cast": _cast,
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Neg", "Equal", "Where"), _elementwise),
    "Gather": _gather,
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Tile": _tile,
}


def _run(node: Any, inputs: list[str], arrays: list[np.ndarray], opset: int) -> list[Any]:
    """The outputs of ``node`` alone (a graph of one node, at ``opset``) in ``ReferenceEvaluator``."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    alone = onnx.GraphProto(name="node", node=[node], input=[onnx.ValueInfoProto(name=n) for n in
                                                             dict.fromkeys(inputs)],
                            output=[onnx.ValueInfoProto(name=n) for n in node.output if n])
    return list(ReferenceEvaluator(alone, opsets={"": opset}).run(None, dict(zip(inputs, arrays))))


def evaluate(graph_bytes: bytes, feeds: Mapping[str, np.ndarray], wanted: tuple[str, ...], opset: int,
             budget: int) -> dict[str, np.ndarray | str]:
    """The ``wanted`` names computed by the nodes of a serialized GraphProto (in order) from ``feeds``.

    Each node runs alone in ``ReferenceEvaluator``; a node of :data:`BOUNDED_OPS` is first checked to
    fit in what is left of ``budget`` bytes, and every new output is charged to it.

    Returns:
        name -> its array, or why it is not computed ("node 'x' (Reshape): ValueError: ...").
    """
    import onnx

    graph = onnx.GraphProto()
    graph.ParseFromString(graph_bytes)
    values: dict[str, np.ndarray] = dict(feeds)
    failed: dict[str, str] = {}
    spent, stop = 0, None
    for node in graph.node:
        where = f"node {node.name!r} ({node.op_type})"
        over = f"folding {where} would take more than {budget} bytes, far more than the file stores"
        inputs, bound = [name for name in node.input if name], BOUNDED_OPS.get(node.op_type)
        arrays = [values[name] for name in inputs if name in values]
        reason = next((failed.get(name, f"{where}: input {name!r} is not computed") for name in inputs
                       if name not in values), None)
        training = node.input[2] if node.op_type == "Dropout" and len(node.input) > 2 else ""
        if reason is None and training and np.any(values[training]):
            reason = f"{where}: it runs in training mode, dropping at random"
        try:
            if reason is None and bound is not None and spent + bound(node, arrays) > budget:
                stop = over
                break
            outputs = _run(node, inputs, arrays, opset) if reason is None else []
        except MemoryError:
            stop = f"folding {where} ran out of memory: it would take far more than the file stores"
            break
        except Exception as error:  # noqa: BLE001 - the evaluator's failure on a node no valid graph holds
            reason = f"{where}: {type(error).__name__}: {one_line(error, 200)}"
        if reason is not None:
            failed.update(dict.fromkeys(node.output, reason))
            continue
        for name, output in zip([name for name in node.output if name], outputs):
            if not isinstance(output, (np.ndarray, np.generic)):
                failed[name] = f"{where}: output {name!r} is not a tensor"
                continue
            values[name] = output = np.asarray(output)
            if not any(np.may_share_memory(output, array) for array in arrays):
                spent += output.nbytes
        if spent > budget:
            stop = over
            break
    return {name: values[name] if name in values else failed.get(name) or (
        f"{stop}: the graph is not a plain export" if stop else f"{name!r} is not an output of its node")
        for name in wanted}


@dataclass(frozen=True)
class Traced:
    """The nodes computing a name, in an order that computes it, and the leaves they start from."""

    nodes: tuple[Any, ...]
    constants: tuple[str, ...]
    sources: tuple[str, ...]

    @property
    def bounded(self) -> bool:
        """Whether every node says its output's size before it runs (:data:`BOUNDED_OPS`)."""
        return all(node.op_type in BOUNDED_OPS and (node.op_type != "Cast" or int_attribute(node, "to") in _ITEMSIZES)
                   for node in self.nodes)


class Graph:
    """One model's graph: its nodes, its constants (decoded on demand, checked) and what they fold to.

    Args:
        path: the model file (for the child process's refusals).
        graph: the ``onnx.GraphProto``.
        decode: the reader's checked ``TensorProto`` -> array (raising FileReadError).
        opset: the model's ONNX opset.
        budget: the most bytes one evaluation may allocate.
    """

    def __init__(self, path: str, graph: Any, decode: Callable[[Any, str], np.ndarray], opset: int,
                 budget: int) -> None:
        self.path, self.decode, self.opset, self.budget = path, decode, opset, budget
        self.producers: dict[str, Any] = {}
        for node in graph.node:
            for output in node.output:
                if output:
                    self.producers.setdefault(output, node)
        self.initializers = {tensor.name: tensor for tensor in graph.initializer}
        self.sparse = {sparse.values.name for sparse in graph.sparse_initializer}
        self.graph_inputs = {value.name for value in graph.input} - set(self.initializers)
        self._decoded: dict[str, np.ndarray] = {}
        self._copies: dict[int, Any] = {}

    def _leaf(self, name: str) -> Any | None:
        """The initializer or Constant node that holds ``name``'s value, if one does."""
        if name in self.initializers:
            return self.initializers[name]
        node = self.producers.get(name)
        return node if node is not None and node.op_type == "Constant" and node.domain in ONNX_DOMAINS else None

    def constant(self, name: str) -> np.ndarray:
        """The array of an initializer or Constant node (see :meth:`_leaf`), decoded once."""
        if name not in self._decoded:
            if name in self.initializers:
                self._decoded[name] = self.decode(self.initializers[name], f"initializer {name!r}")
            else:
                self._decoded[name] = _constant_value(self._leaf(name), self.decode)
        return self._decoded[name]

    def trace(self, name: str, sources: Iterable[str] = ()) -> Traced:
        """The nodes computing ``name`` from constants (and the ``sources``, names given at evaluation).

        Raises:
            NotFolded: it depends on a graph input, a name no node produces, a sparse initializer, or a node
                of another domain, holding a subgraph (Loop, If, Scan) or random (the message says which).
            MalformedGraph: a cycle, a chain deeper than MAX_DEPTH, or more than MAX_NODES nodes.
        """
        given, done, pending, seen = set(sources), set(), set(), set()
        order: list[Any] = []
        leaves: list[str] = []

        def visit(value: str, depth: int) -> None:
            if value in done:
                return
            if value in pending:
                raise MalformedGraph(f"the graph has a cycle through {value!r}")
            if depth > MAX_DEPTH:
                raise MalformedGraph(f"{name!r} is computed by a chain of more than {MAX_DEPTH} nodes, which is not "
                                     "followed")
            deep = depth > 0
            if value in self.sparse:
                raise NotFolded(f"computed from a sparse initializer {value!r}, which is not read" if deep else
                                "a sparse initializer, which is not read")
            if value in given or self._leaf(value) is not None:
                leaves.append(value)
            elif value in self.graph_inputs or value not in self.producers:
                what = "a graph input" if value in self.graph_inputs else "produced by no node"
                raise NotFolded(f"computed from {value!r}, which is {what}" if deep else what)
            else:
                node = self.producers[value]
                _check_foldable(node)
                pending.add(value)
                for argument in node.input:
                    if argument:
                        visit(argument, depth + 1)
                pending.discard(value)
                if id(node) not in seen:
                    seen.add(id(node))
                    order.append(node)
                    if len(order) > MAX_NODES:
                        raise MalformedGraph(f"{name!r} is computed by more than {MAX_NODES} nodes, which are not "
                                             "followed")
            done.add(value)

        visit(name, 0)
        return Traced(tuple(order), tuple(v for v in leaves if v not in given), tuple(v for v in leaves if v in given))

    def fold(self, names: Iterable[str]) -> dict[str, np.ndarray | Exception]:
        """The value of each of ``names`` computed from the file's constants, or why there is none.

        The names' nodes are evaluated together, in this process when all are of BOUNDED_OPS, else in
        one child process; earlier names are computed first where the budget does not reach.

        Returns:
            name -> its array, or NotFolded / MalformedGraph / FileReadError saying why not.
        """
        result: dict[str, np.ndarray | Exception] = {}
        planned: list[tuple[str, Traced]] = []
        for name in dict.fromkeys(names):
            try:
                traced = self.trace(name)
                for leaf in traced.constants:
                    self.constant(leaf)
                for node in traced.nodes:
                    self._copy(node)
            except (NotFolded, MalformedGraph, FileReadError) as error:
                result[name] = error
                continue
            if traced.nodes:
                planned.append((name, traced))
            else:
                result[name] = self.constant(name)
        if planned:
            nodes = [node for _, traced in planned for node in traced.nodes]
            leaves = {leaf for _, traced in planned for leaf in traced.constants}
            wanted = tuple(name for name, _ in planned)
            work = functools.partial(evaluate, self._serialized(nodes), {leaf: self.constant(leaf) for leaf in leaves},
                                     wanted, self.opset, self.budget)
            bounded = all(traced.bounded for _, traced in planned)
            values = work() if bounded else run_isolated(self.path, work, reader=EVALUATOR)
            result.update({name: value if isinstance(value, np.ndarray) else MalformedGraph(value)
                           for name, value in values.items()})
        return result

    def probe(self, name: str, feeds: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """What ``name`` computes from ``feeds`` (some of the graph's names) and constants, evaluated here;
        None when it depends on anything else, on nodes not of BOUNDED_OPS, or fails."""
        try:
            traced = self.trace(name, feeds)
            constants = {leaf: self.constant(leaf) for leaf in traced.constants}
            graph = self._serialized(traced.nodes)
        except (NotFolded, MalformedGraph, FileReadError):
            return None
        if not traced.bounded or not traced.sources:
            return None
        used = {source: feeds[source] for source in traced.sources}
        value = evaluate(graph, {**constants, **used}, (name,), self.opset, self.budget)[name]
        return value if isinstance(value, np.ndarray) else None

    def _copy(self, node: Any) -> Any:
        """The node as the evaluator gets it: its tensor attributes decoded here (checked: the evaluator reads no
        external data) and the ONNX domain written as ``""``."""
        if id(node) not in self._copies:
            import onnx
            from onnx import numpy_helper

            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.domain = ""
            for attribute in copy.attribute:
                if attribute.type == _TENSOR:
                    value = self.decode(attribute.t, f"attribute {attribute.name} of node {node.name!r}")
                    attribute.t.CopyFrom(numpy_helper.from_array(value))
            self._copies[id(node)] = copy
        return self._copies[id(node)]

    def _serialized(self, nodes: Iterable[Any]) -> bytes:
        """The nodes (each once, in order) as a serialized GraphProto of their :meth:`_copy`."""
        import onnx

        graph = onnx.GraphProto()
        graph.node.extend(self._copy(node) for node in {id(node): node for node in nodes}.values())
        return bytes(graph.SerializeToString())


def _check_foldable(node: Any) -> None:
    """NotFolded when ``node`` is of another domain, holds a subgraph, or is random."""
    if node.domain not in ONNX_DOMAINS:
        raise NotFolded(f"computed by a {node.op_type} node {node.name!r} of domain {one_line(node.domain, 40)!r}, "
                        "which is not followed here")
    if node.op_type in RANDOM_OPS or any(attribute.type in _GRAPH_ATTRIBUTES + (_SPARSE_TENSOR,)
                                         for attribute in node.attribute):
        raise NotFolded(f"computed by a {node.op_type} node {node.name!r}, which is not followed here")


#: a Constant node's attribute holding numbers -> the dtype of its value
_CONSTANT_NUMBERS: dict[str, type] = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                                      "value_ints": np.int64}


def _constant_value(node: Any, decode: Callable[[Any, str], np.ndarray]) -> np.ndarray:
    """The value of a Constant node: its dense tensor, or its numbers."""
    from onnx import helper

    for attribute in node.attribute:
        if attribute.name == "value" and attribute.type == _TENSOR:
            return decode(attribute.t, f"the value of Constant node {node.name!r}")
        if attribute.name in _CONSTANT_NUMBERS:
            return np.array(helper.get_attribute_value(attribute), _CONSTANT_NUMBERS[attribute.name])
    raise NotFolded(f"a Constant node {node.name!r} holding neither a dense tensor nor numbers, which is not read")
