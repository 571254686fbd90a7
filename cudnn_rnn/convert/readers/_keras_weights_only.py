"""RNN layers of a Keras weights file without a model config, found by their weights' names and shapes.

    kernel [width, G*N] and recurrent_kernel [N, G*N]:   G = 4 LSTM, 3 GRU, 1 SimpleRNN
    bias [2*G*N]: CuDNNLSTM / CuDNNGRU      a GRU's bias [3N]: reset_after=False, else (or none) reset_after=True

    store_weights_only(h5, h5.file)    Keras 3 ``.weights.h5``: <layer>/cell/vars, forward_layer beside backward_layer
    legacy_weights_only(h5, h5.file)   ``save_weights`` ``.h5``: each layer's weights grouped by their parent path

What only a config tells (activations, go_backwards, merge_mode) is Keras's default, noted on each layer.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...formats.keras import CLASS_BY_GATES, CUDNN_ACTIVATIONS, DIRECTION_LAYERS, FIELDS, LAYER_KINDS
from ._hdf5 import H5File
from ._keras_config import RNNLayer
from ._keras_layout import LAYER_GROUPS, WEIGHT_SUFFIX, gate_blocks, legacy_weights, recorded_name, store_unit

__all__ = ["store_weights_only", "legacy_weights_only"]


WEIGHTS_ONLY = "the file holds weights only"


def _weights_only_layer(name: str, directions: list[dict[str, Any]], reason: str = WEIGHTS_ONLY) -> RNNLayer:
    """The layer's class (and a GRU's reset_after) from its shapes: the bias tells CuDNN layers (two biases,
    [2*G*N]) and reset-before GRUs ([3N]) apart."""
    units, columns = directions[0]["recurrent_kernel"].shape
    kind = LAYER_KINDS[CLASS_BY_GATES[columns // units]]
    bias = tuple(directions[0]["bias"].shape) if "bias" in directions[0] else None
    reset_after = bias != (columns,) if kind.rnn_mode == "gru" else None
    if kind.rnn_mode and bias == (2 * columns,):  # Keras 2's CuDNNLSTM / CuDNNGRU
        kind, reset_after = LAYER_KINDS["CuDNN" + kind.class_name], None
    display = f"Bidirectional({kind.class_name})" if len(directions) == 2 else kind.class_name
    layer = RNNLayer(name, display, kind, [{} for _ in directions], {}, weights=directions, reset_after=reset_after,
                   weights_only=True)
    assumed = [f"{key}={value!r}" for key, value in CUDNN_ACTIVATIONS.items()] if kind.rnn_mode else []
    assumed += ["go_backwards=False"] + (["merge_mode='concat'"] if len(directions) == 2 else [])
    layer.notes.append(f"{reason}: {', '.join(assumed)} assumed (Keras's defaults)")
    if kind.class_name == "GRU" and "bias" not in directions[0]:
        layer.notes.append("a GRU without biases does not tell reset_after: Keras's default reset_after=True is "
                           "assumed")
    return layer


#: the first part of a weight's parent path that names a Bidirectional's side ('bi/forward_lstm/lstm_cell')
_SIDE = re.compile(r"(?:^|/)(forward|backward)_")
_OTHER_SIDE = {"forward": "backward", "backward": "forward"}


def creation_order(name: str) -> tuple[str, int]:
    """A sort key that puts Keras's auto-numbered names in the order Keras made them: ``lstm``, ``lstm_1``,
    ``lstm_2``, ..., ``lstm_10`` (HDF5 lists groups by name, which puts ``lstm_10`` before ``lstm_2``)."""
    stem, _, number = name.rpartition("_")
    return (stem, int(number)) if number.isdecimal() else (name, 0)


def store_weights_only(h5: H5File, group: Any, scope: tuple[str, ...] = (), seen: set[Any] | None = None,
                        reason: str = WEIGHTS_ONLY) -> Iterator[RNNLayer]:
    """RNN layers of a Keras 3 store found by their groups alone: <layer>/cell/vars, or forward_layer and
    backward_layer beside each other (Bidirectional); every other group is searched, each once."""
    seen = set() if seen is None else seen
    for key, child in sorted(h5.groups(group).items(), key=lambda item: creation_order(item[0])):
        if child.id in seen or key == "vars":
            continue
        seen.add(child.id)
        label = recorded_name(h5, child) or key
        name = "/".join(scope + (label,))
        sides = [h5.child(child, side) for side in DIRECTION_LAYERS]
        if all(side is not None for side in sides):
            directions = [store_unit(h5, side) for side in sides]
            if all(gate_blocks(direction) in CLASS_BY_GATES for direction in directions):
                yield _weights_only_layer(name, directions, reason)
                continue
        if h5.child(child, "cell") is not None or key.startswith("cu_dnn"):
            direction = store_unit(h5, child)
            if gate_blocks(direction) in CLASS_BY_GATES:
                yield _weights_only_layer(name, [direction], reason)
                continue
        yield from store_weights_only(h5, child, scope if key in LAYER_GROUPS else scope + (label,), seen, reason)


def legacy_weights_only(h5: H5File, root: Any) -> Iterator[RNNLayer]:
    """RNN layers of a legacy save_weights file: each layer group's weights grouped by their parent path
    ('enc/lstm_cell/kernel:0'), forward_/backward_ pairs joined as Bidirectional."""
    names = h5.attribute(root, "layer_names")
    if not isinstance(names, list):
        raise h5.fail("attribute 'layer_names' is not a list of layer names")
    for layer_name in names:
        cells: dict[str, dict[str, Any]] = {}
        for weight_name, dataset in legacy_weights(h5, h5.child(root, layer_name)):
            parent, _, last = weight_name.rpartition("/")
            field_name = WEIGHT_SUFFIX.sub("", last)
            if field_name in FIELDS and isinstance(dataset, h5.h5py.Dataset):
                cells.setdefault(parent, {})[field_name] = dataset
        cells = {parent: weights for parent, weights in cells.items() if gate_blocks(weights) in CLASS_BY_GATES}
        for parent, weights in cells.items():
            side = _SIDE.search(parent)
            partner = None if side is None else parent[:side.start(1)] + _OTHER_SIDE[side[1]] + parent[side.end(1):]
            if side is not None and partner in cells:
                if side[1] == "backward":
                    continue  # read with its forward layer
                directions, stem = [weights, cells[partner]], parent[:side.start()]
            else:
                directions, stem = [weights], parent.rpartition("/")[0] if parent.endswith("_cell") else parent
            label = layer_name if len(cells) == len(directions) else f"{layer_name}/{stem}"
            yield _weights_only_layer(label, directions)
