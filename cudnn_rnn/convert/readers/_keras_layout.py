"""Where a Keras file keeps each RNN layer's weights.

========================================  ========================================================
file                                      one direction's kernel, recurrent_kernel, bias
========================================  ========================================================
Keras 3 store (``model.weights.h5``)      <layer>/cell/vars/0, 1, 2 (CuDNN layers: <layer>/vars/...);
                                          Bidirectional: <layer>/forward_layer/..., backward_layer/...
legacy ``.h5`` model, ``save_weights``    <layer>/<weight name> in the order of ``weight_names``
                                          ('lstm/lstm_cell/kernel:0'); Bidirectional: forward's, then
                                          backward's
========================================  ========================================================

    store_layers(h5, model_config, h5.file, ())   -> [RNNLayer with .weights = [{field: dataset}] per direction]
    legacy_layers(h5, model_config, weights_root)  the same for a legacy model file
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Mapping, Sequence

from ...formats.keras import DIRECTION_LAYERS, FIELDS
from ._hdf5 import H5File
from ._keras_config import RNNLayer, class_of, is_model, layer_of, link_feeds, model_entries, name_of

__all__ = ["LAYER_GROUPS", "WEIGHT_SUFFIX", "store_layers", "legacy_layers", "store_unit", "recorded_name",
           "legacy_weights", "gate_blocks"]

#: Keras 3 stores a model's layers under "layers" (Keras 2.13's .keras: "_layer_checkpoint_dependencies")
LAYER_GROUPS: tuple[str, ...] = ("layers", "_layer_checkpoint_dependencies")
#: the suffix TensorFlow gives a variable's name ("kernel:0")
WEIGHT_SUFFIX = re.compile(r":\d+$")


# ---- where each layer's weights are ------------------------------------------------------------------
def gate_blocks(weights: Mapping[str, Any]) -> int | None:
    """G where a direction holds a kernel [width, G*N] and a recurrent_kernel [N, G*N] (N > 0), else None."""
    kernel, recurrent = weights.get("kernel"), weights.get("recurrent_kernel")
    if kernel is None or recurrent is None or len(kernel.shape) != 2 or len(recurrent.shape) != 2:
        return None
    units, columns = recurrent.shape
    return columns // units if units > 0 and kernel.shape[1] == columns and columns % units == 0 else None


def _snake_case(name: str) -> str:
    """Keras's name for a layer's weights group when the file does not record the layer's name."""
    name = re.sub(r"\W+", "", name)
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def recorded_name(h5: H5File, group: Any) -> str | None:
    """The layer name Keras 3 records in ``<group>/vars`` (attribute ``name``), if any."""
    variables = h5.child(group, "vars")
    recorded = h5.attribute(variables, "name") if variables is not None else None
    return recorded if isinstance(recorded, str) else None


def store_unit(h5: H5File, group: Any) -> dict[str, Any]:
    """A direction's weights in the Keras 3 store: <layer>/cell/vars/0..2 (CuDNN layers: <layer>/vars/0..2)."""
    variables = h5.child(h5.child(group, "cell"), "vars")
    if variables is None or not len(variables):
        variables = h5.child(group, "vars")
    datasets = [h5.child(variables, str(index)) for index in range(len(FIELDS))]
    return {name: dataset for name, dataset in zip(FIELDS, datasets) if isinstance(dataset, h5.h5py.Dataset)}


def _store_children(h5: H5File, group: Any, entries: Sequence[dict[str, Any]]) -> dict[int, Any]:
    """entry index -> the group holding that layer's weights in a Keras 3 store: the group whose ``vars`` record
    the layer's name, or (tf_keras, early Keras 3: no names recorded) by class, in order: lstm, lstm_1, ..."""
    containers = (h5.child(group, name) for name in LAYER_GROUPS)
    children = h5.groups(next((container for container in containers if container is not None), None))
    by_name = {name: child for child in children.values() if (name := recorded_name(h5, child)) is not None}
    if by_name:
        return {index: by_name.get(name_of(entry)) for index, entry in enumerate(entries)}
    located: dict[int, Any] = {}
    counts: dict[str, int] = {}
    for index, entry in enumerate(entries):
        snake = _snake_case(class_of(entry))
        counts[snake] = count = counts.get(snake, -1) + 1
        located[index] = children.get(snake if count == 0 else f"{snake}_{count}")
    return located


def legacy_weights(h5: H5File, group: Any) -> list[tuple[str, Any]]:
    """(weight name, dataset) of a legacy layer group, in the order of its ``weight_names``."""
    names = h5.attribute(group, "weight_names") if group is not None else None
    if not isinstance(names, list):
        return []
    return [(name, functools.reduce(h5.child, name.split("/"), group)) for name in names]


def _legacy_directions(h5: H5File, layer: RNNLayer, items: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Split a legacy layer's weights into directions (Bidirectional: forward's, then backward's, as Keras
    loads them) and name each by its last component (kernel, recurrent_kernel, bias)."""
    count = len(layer.configs)
    if not items or len(items) % count:
        return [{} for _ in range(count)]
    half = len(items) // count
    directions = []
    for start in range(0, len(items), half):
        weights = {}
        for name, dataset in items[start:start + half]:
            field_name = WEIGHT_SUFFIX.sub("", name.rsplit("/", 1)[-1])
            if dataset is None:
                raise h5.fail(f"layer {layer.name!r} lists weight {name!r}, which is not stored")
            if field_name not in FIELDS or field_name in weights or not isinstance(dataset, h5.h5py.Dataset):
                raise h5.fail(f"weight {name!r} of layer {layer.name!r} is not a kernel, recurrent_kernel or bias "
                              "of an RNN")
            weights[field_name] = dataset
        directions.append(weights)
    return directions


def _belongs(weight_name: str, layer_name: str, scopes: Sequence[str]) -> bool:
    """Whether a nested model's weight ('lstm/lstm_cell/kernel:0', Keras 3: 'inner/lstm/lstm_cell/kernel')
    is layer ``layer_name``'s: its name, after any of the enclosing models' names."""
    for part in weight_name.split("/")[:-1]:
        if part == layer_name:
            return True
        if part not in scopes:
            return False
    return False


# ---- the RNN layers of a model config, with their weights -----------------------------------------------
NestedLayers = Callable[[int, str, dict[str, Any]], list[RNNLayer]]
LayerWeights = Callable[[int, str, RNNLayer], list[dict[str, Any]] | None]


def _walk(h5: H5File, model: dict[str, Any], entries: Sequence[dict[str, Any]], scope: tuple[str, ...],
          listed_in: str, nested: NestedLayers, weights_of: LayerWeights) -> list[RNNLayer]:
    """The RNN layers of one model config, in config order, feeds linked.

    A nested model's layers are ``nested(index, name, entry)``; an RNN layer's weights per direction are
    ``weights_of(index, name, layer)``, None when the file stores none of them (refused: the config
    named by ``listed_in`` lists a layer that was never built).
    """
    found, by_name = [], {}
    for index, entry in enumerate(entries):
        name = name_of(entry)
        if is_model(entry):
            found += nested(index, name, entry)
            continue
        layer = layer_of(entry, "/".join(scope + (name,)))
        if layer is None:
            continue
        weights = weights_of(index, name, layer)
        if weights is None:
            raise h5.fail(f"{listed_in} lists layer {layer.name!r} ({layer.display}) but no weights of it are "
                          "stored; re-save the model after building it")
        layer.weights = weights
        found.append(layer)
        by_name[name] = layer
    link_feeds(model, entries, by_name)
    return found


def store_layers(h5: H5File, model: dict[str, Any], group: Any, scope: tuple[str, ...]) -> list[RNNLayer]:
    """The RNN layers of a model config, with their weights in a Keras 3 store."""
    entries = model_entries(model)
    located = _store_children(h5, group, entries) if group is not None else {}

    def nested(index: int, name: str, entry: dict[str, Any]) -> list[RNNLayer]:
        return store_layers(h5, entry, located.get(index), scope + (name,))

    def weights_of(index: int, name: str, layer: RNNLayer) -> list[dict[str, Any]] | None:
        where = located.get(index)
        if where is None:
            return None
        sides = [h5.child(where, side) for side in DIRECTION_LAYERS] if len(layer.configs) == 2 else [where]
        return [store_unit(h5, side) for side in sides]

    return _walk(h5, model, entries, scope, "the config", nested, weights_of)


def legacy_layers(h5: H5File, model: dict[str, Any], root: Any, scopes: tuple[str, ...],
                  items: Sequence[tuple[str, Any]] | None = None) -> list[RNNLayer]:
    """The RNN layers of a legacy model config; weights in root/<top-level layer>/<weight name>.

    ``scopes``: the names of the top-level model and the nested ones around ``model``; ``items``: the
    weights of the enclosing nested model (None at the top level).
    """
    def weights_named(name: str, of_model: bool) -> list[tuple[str, Any]]:
        if items is None:
            return legacy_weights(h5, h5.child(root, name))
        # a nested model's weights, named from the innermost model that holds them
        return list(items) if of_model else [item for item in items if _belongs(item[0], name, scopes)]

    def nested(index: int, name: str, entry: dict[str, Any]) -> list[RNNLayer]:
        return legacy_layers(h5, entry, root, scopes + (name,), weights_named(name, True))

    def weights_of(index: int, name: str, layer: RNNLayer) -> list[dict[str, Any]] | None:
        mine = weights_named(name, False)
        return _legacy_directions(h5, layer, mine) if mine else None

    return _walk(h5, model, model_entries(model), scopes[1:], "the model config", nested, weights_of)
