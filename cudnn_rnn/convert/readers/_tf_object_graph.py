"""The object graph of an object-based TensorFlow checkpoint, and a SavedModel's variable names on it.

::

    graph = ObjectGraph.parse(serialized)   # the value of OBJECT_GRAPH_KEY in the checkpoint
    graph.children[node]                     {edge name: child node}
    graph.variables[node]                    the checkpoint key of a variable node's value
    graph.paths[node]                        "model/layer_with_weights-0/cell" (its first path from the root)
    saved_model_names(pb_path, graph, shapes)  {SavedModel variable name: checkpoint key}

``tf.train.Checkpoint`` (also Keras's ``save_weights`` in TF format, and SavedModels) saves a
``TrackableObjectGraph`` proto under :data:`OBJECT_GRAPH_KEY`: one node per tracked object, its
children by edge name, and for a variable node the key its value is saved under
(``{path}/.ATTRIBUTES/VARIABLE_VALUE``). A SavedModel's own object graph numbers its nodes as the
checkpoint's does and gives each variable its graph name (``lstm/lstm_cell/kernel``).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass

from ._found import one_line

__all__ = ["OBJECT_GRAPH_KEY", "OBJECT_KEY_SUFFIX", "ObjectGraph", "saved_model_names"]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VARIABLE_ATTRIBUTE = "VARIABLE_VALUE"
OBJECT_KEY_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


@dataclass
class ObjectGraph:
    """Children per node (edge name -> node), the variable key of variable nodes, and each node's
    first path from the root (breadth first, children in stored order)."""

    children: list[dict[str, int]]
    variables: dict[int, str]
    paths: dict[int, str]

    @classmethod
    def parse(cls, serialized: bytes) -> "ObjectGraph":
        """The graph of a serialized ``TrackableObjectGraph`` (ValueError when it does not parse or links a
        node that does not exist)."""
        from google.protobuf.message import DecodeError
        from tensorflow.core.protobuf import trackable_object_graph_pb2

        try:
            graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(serialized)
        except DecodeError:
            raise ValueError(f"the checkpoint's object graph ({OBJECT_GRAPH_KEY}) does not parse: the checkpoint is "
                             "corrupt") from None
        count = len(graph.nodes)
        children, variables = [], {}
        for node_id, node in enumerate(graph.nodes):
            edges: dict[str, int] = {}
            for child in node.children:
                if not 0 <= child.node_id < count:
                    raise ValueError(f"the checkpoint's object graph links node {node_id} to node {child.node_id}, "
                                     f"which does not exist (it has {count}): the checkpoint is corrupt")
                edges.setdefault(child.local_name, child.node_id)
            children.append(edges)
            for attribute in node.attributes:
                if attribute.name == VARIABLE_ATTRIBUTE:
                    variables[node_id] = attribute.checkpoint_key
        paths = {0: ""} if count else {}
        queue = deque(paths)
        while queue:
            node_id = queue.popleft()
            for edge, child in children[node_id].items():
                if child not in paths:
                    paths[child] = f"{paths[node_id]}/{edge}" if paths[node_id] else edge
                    queue.append(child)
        return cls(children, variables, paths)

    def parents(self) -> dict[int, list[tuple[str, int]]]:
        """Each node's parents: node -> [(edge name, parent node), ...]."""
        result: dict[int, list[tuple[str, int]]] = {}
        for node_id, edges in enumerate(self.children):
            for edge, child in edges.items():
                result.setdefault(child, []).append((edge, node_id))
        return result


def saved_model_names(saved_model: str, graph: ObjectGraph, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """SavedModel variable name -> checkpoint key, from the ``saved_model.pb`` at ``saved_model``
    (the SavedModel's object graph numbers its nodes as the checkpoint's does); empty when the two
    graphs do not line up."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2

    try:
        with open(saved_model, "rb") as handle:
            model = saved_model_pb2.SavedModel.FromString(handle.read())
    except (OSError, DecodeError) as error:
        raise ValueError(f"the SavedModel's {os.path.basename(saved_model)} cannot be read ({one_line(error, 120)}): "
                         "the model is corrupt; pass its variables/variables prefix to read the weights without layer "
                         "names") from None
    if not model.meta_graphs:
        return {}
    nodes = model.meta_graphs[0].object_graph_def.nodes
    if len(nodes) != len(graph.children):
        return {}
    names: dict[str, str] = {}
    for node_id, key in sorted(graph.variables.items()):
        node = nodes[node_id]
        if node.WhichOneof("kind") != "variable":
            return {}
        declared = tuple(int(d.size) for d in node.variable.shape.dim)
        if key in shapes and declared != shapes[key]:
            return {}
        names.setdefault(node.variable.name, key)
    return names
