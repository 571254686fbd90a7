"""What an ONNX graph computes, as far as reading its RNNs needs: constants, and where RNN outputs go.

::

    values = GraphValues(graph.node, initializer_array, decode_tensor, graph_inputs, budget,
                         rnn_outputs={"/LSTM_output_0": Sequence.of_rnn("/LSTM", 2, 64, batch_major=False)})
    values.value("onnx::LSTM_375")      -> np.ndarray   an initializer, a Constant, or a folded chain
    values.value("/Reshape_output_0")   -> Sequence     axes (("T",), ("B",), ("D", "N")): [T, B, D*N]

A name's value (an array, a :class:`~._onnx_values.Sequence` or :class:`~._onnx_values.Dims`;
see :mod:`._onnx_values`) is an initializer, an RNN output given, or the output 0 of the node
producing it, computed by its operator (:data:`._onnx_operators.OPERATORS`) from its inputs'
values, followed back on demand and remembered. A value computed any other way, or from a graph
input, raises :class:`~._onnx_values.NotFolded` (the caller decides whether that is an error); a
malformed node raises :class:`~._onnx_values.MalformedGraph` (a ValueError) naming it. Folding
never allocates more than ``budget`` bytes in all (a file cannot make it grow without bound:
a chain of Concats doubling a tensor stops there), and a chain deeper than
:data:`MAX_DEPTH` nodes or a cycle is refused.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ._found import FileReadError
from ._onnx_operators import OPERATORS, OperatorCall
from ._onnx_values import MalformedGraph, NotFolded, Sequence, Value

__all__ = ["GraphValues", "MAX_DEPTH"]

#: the longest chain of nodes followed back from one value
MAX_DEPTH = 64


class _InProgress:
    """The memo's mark on a name whose value is being computed (met again: a cycle)."""


_IN_PROGRESS = _InProgress()


class GraphValues:
    """Values of one graph's names, computed on demand and remembered.

    Args:
        nodes: the graph's nodes (``onnx.NodeProto``).
        constants: name -> array of an initializer (decoded on demand), or None if not one.
        decode: turns a ``TensorProto`` (a Constant's value) into an array.
        graph_inputs: the names the graph takes at run time.
        budget: the most bytes folding may allocate in all.
        rnn_outputs: the Y output name of each RNN node -> its :class:`Sequence`.
    """

    def __init__(self, nodes: Iterable[Any], constants: Callable[[str], np.ndarray | None],
                 decode: Callable[[Any, str], np.ndarray], graph_inputs: Iterable[str], budget: int,
                 rnn_outputs: Mapping[str, Sequence] | None = None) -> None:
        self._producers: dict[str, tuple[Any, int]] = {}
        for node in nodes:
            for index, output in enumerate(node.output):
                if output:
                    self._producers.setdefault(output, (node, index))
        self._constants = constants
        self.decode = decode
        self._graph_inputs = set(graph_inputs)
        self._budget = budget
        self._spent = 0
        self._rnn_outputs = dict(rnn_outputs or {})
        self._memo: dict[str, Value | Exception | _InProgress] = {}

    def value(self, name: str, depth: int = 0) -> Value:
        """The value of ``name``.

        Raises:
            NotFolded: it is computed at run time (the message says how).
            ValueError: a malformed node, a cycle, a chain too deep, or the budget exceeded.
        """
        known = self._memo.get(name)
        if isinstance(known, _InProgress):
            raise MalformedGraph(f"the graph has a cycle through {name!r}")
        if isinstance(known, Exception):
            raise known
        if known is not None:
            return known
        if depth > MAX_DEPTH:
            raise MalformedGraph(f"{name!r} is computed by a chain of more than {MAX_DEPTH} nodes, which is not "
                                 "followed")
        self._memo[name] = _IN_PROGRESS
        try:
            result = self._compute(name, depth)
        except (NotFolded, MalformedGraph) as error:
            self._memo[name] = error
            raise
        except BaseException:
            del self._memo[name]
            raise
        self._memo[name] = result
        return result

    def _compute(self, name: str, depth: int) -> Value:
        constant = self._constants(name)
        if constant is not None:
            return constant
        if name in self._rnn_outputs:
            return self._rnn_outputs[name]
        if name not in self._producers:
            raise NotFolded("a graph input" if name in self._graph_inputs else "produced by no node")
        node, index = self._producers[name]
        operator = OPERATORS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if operator is None or index != 0:
            raise NotFolded(f"computed by a {node.op_type} node {node.name!r}, which is not followed here")
        call = OperatorCall(node, self, depth)
        try:
            result = operator(call)
        except (NotFolded, MalformedGraph, FileReadError):
            raise
        except (ValueError, TypeError, IndexError, ArithmeticError) as error:
            raise call.malformed(f"{type(error).__name__}: {error}") from None
        if isinstance(result, np.ndarray) and not any(
                isinstance(seen, np.ndarray) and np.may_share_memory(result, seen) for seen in call.seen):
            self.afford(result.nbytes, node)  # a new array (views of the inputs cost nothing)
            self._spent += result.nbytes
        return result

    def afford(self, nbytes: int, node: Any) -> None:
        if self._spent + int(nbytes) > self._budget:
            raise MalformedGraph(f"folding node {node.name!r} ({node.op_type}) would take more than {self._budget} "
                                 "bytes, far more than the file stores: the graph is not a plain export")
