"""What a Keras model config says about its RNN layers, and which RNN feeds which.

    layer_of({"class_name": "Bidirectional", "config": {"layer": {"class_name": "GRU", ...}, ...}}, "bi")
        -> RNNLayer(name="bi", display="Bidirectional(GRU)", kind=LAYER_KINDS["GRU"], configs=[forward, backward])
    config_refusal(layer)   why cuDNN cannot compute it (activation="elu", a lone go_backwards layer), or None
    config_notes(layer)     what differs from cuDNN's run without changing the weights (merge_mode, dropout)
    link_feeds(model, entries, layers)   sets feeds_from where one RNN's whole output sequence is another's input

A config is Keras's JSON (``config.json`` of a ``.keras`` archive, the ``model_config`` attribute
of a legacy ``.h5``); Keras's defaults stand for what it leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ...formats.keras import CELL_LAYERS, CUDNN_ACTIVATIONS, LAYER_KINDS, SIMPLE_RNN_MODES, LayerKind
from ._found import one_line

__all__ = ["BIDIRECTIONAL_RESET_BEFORE", "RNNLayer", "layer_of", "config_refusal", "config_notes", "link_feeds",
           "class_of", "name_of", "activation_name", "is_model", "model_entries"]


#: Bidirectional merge_mode -> what Keras returns, against cuDNN's [forward | backward] output
MERGE_MODES: dict[str | None, str] = {
    "concat": "",
    **{mode: f"Keras {does} the two directions' outputs; cuDNN returns them side by side [forward | backward], "
             f"so {do} the two halves of cuDNN's output"
       for mode, does, do in (("sum", "adds", "add"), ("mul", "multiplies", "multiply"),
                              ("ave", "averages", "average"))},
    None: "Keras returns the two directions as separate outputs; cuDNN returns them side by side "
          "[forward | backward], so split cuDNN's output in half",
}


# ---- what an RNN layer is, from its config ---------------------------------------------------------
@dataclass
class RNNLayer:
    """One RNN layer: its config per direction and where its weights are."""

    name: str
    display: str                         # "LSTM", "Bidirectional(GRU)", "RNN(LSTMCell)"
    kind: LayerKind
    configs: list[Mapping[str, Any]]     # per direction (Keras's defaults for what is missing)
    outer: Mapping[str, Any]             # the outermost layer's config (dtype policy, merge_mode)
    merge_mode: str | None = "concat"
    refusal: str | None = None
    returns_sequences: bool = False
    weights: list[dict[str, Any]] = field(default_factory=list)  # per direction: field -> dataset
    reset_after: bool | None = None      # a GRU's, where the file tells
    notes: list[str] = field(default_factory=list)
    feeds_from: str | None = None
    weights_only: bool = False           # no config: everything from the weights' names and shapes


def _config_of(entry: Any) -> dict[str, Any]:
    config = entry.get("config") if isinstance(entry, dict) else None
    return config if isinstance(config, dict) else {}


def class_of(entry: Any) -> str:
    name = entry.get("class_name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) else ""


def name_of(entry: Any) -> str:
    name = _config_of(entry).get("name", entry.get("name") if isinstance(entry, dict) else None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a layer of class {class_of(entry)!r} in the model config has no name")
    return name


def activation_name(value: Any) -> str:
    """An activation's name as Keras serialises it ("tanh", a dict for a registered function, None: linear)."""
    if value is None:
        return "linear"
    if isinstance(value, dict):
        inner = value.get("config")
        name = inner.get("name") if isinstance(inner, dict) else inner
        return name if isinstance(name, str) else str(value.get("registered_name") or value.get("class_name"))
    return str(value)


def is_model(entry: Any) -> bool:
    return isinstance(_config_of(entry).get("layers"), list)


def model_entries(model: Any) -> list[dict[str, Any]]:
    layers = _config_of(model).get("layers")
    if not isinstance(layers, list) or not all(isinstance(entry, dict) for entry in layers):
        raise ValueError(f"the model config of {class_of(model)!r} does not list its layers")
    return layers


def layer_of(entry: dict[str, Any], name: str) -> RNNLayer | None:
    """The RNN an entry of a model config is, or None when it is no RNN layer."""
    class_name, config = class_of(entry), _config_of(entry)
    if class_name == "Bidirectional":
        forward_entry, backward_entry = config.get("layer"), config.get("backward_layer")
        forward = layer_of(forward_entry, name) if isinstance(forward_entry, dict) else None
        if forward is None:
            return None
        backward = layer_of(backward_entry, name) if isinstance(backward_entry, dict) else None
        backward_config = (backward.configs[0] if backward is not None else
                           {**forward.configs[0], "go_backwards": not forward.configs[0].get("go_backwards", False)})
        layer = RNNLayer(name, f"Bidirectional({forward.display})", forward.kind, [forward.configs[0], backward_config],
                       config, config.get("merge_mode", "concat"), forward.refusal, forward.returns_sequences,
                       reset_after=forward.reset_after)
        if isinstance(backward_entry, dict) and backward is None:
            layer.refusal = layer.refusal or (f"its backward layer is a {class_of(backward_entry)!r}, not an RNN "
                                              "read here")
        elif backward is not None and backward.display != forward.display:
            layer.refusal = layer.refusal or (f"its backward layer is a {backward.display}, its forward layer a "
                                              f"{forward.display}; cuDNN's two directions are one kind of RNN")
        layer.refusal = layer.refusal or _bidirectional_refusal(layer)
        return layer
    kind: LayerKind | None
    merged: dict[str, Any]
    if class_name == "RNN":
        cell = config.get("cell")
        cell_class = class_of(cell)
        if cell_class not in CELL_LAYERS:
            if cell_class == "StackedRNNCells" or isinstance(cell, list):
                return RNNLayer(name, "RNN(StackedRNNCells)", LAYER_KINDS["LSTM"], [config], config,
                              refusal="an RNN over StackedRNNCells is not read here; give each cell its own RNN "
                                      "layer (return_sequences=True), which reads and stacks")
            return None
        merged = {**_config_of(cell), **{key: config[key] for key in ("go_backwards", "return_sequences", "stateful")
                                          if key in config}}
        kind, display = LAYER_KINDS[CELL_LAYERS[cell_class]], f"RNN({cell_class})"
    else:
        kind, display, merged = LAYER_KINDS.get(class_name), class_name, config
        if kind is None:
            return None
    reset_after = bool(merged.get("reset_after", True)) if kind.rnn_mode == "gru" and not kind.cudnn_layout else None
    return RNNLayer(name, display, kind, [merged], config,
                    returns_sequences=bool(config.get("return_sequences", False)), reset_after=reset_after)


def _bidirectional_refusal(layer: RNNLayer) -> str | None:
    forward, backward = layer.configs
    if forward.get("go_backwards", False) or not backward.get("go_backwards", True):
        return ("its forward layer reads backwards (go_backwards=True): cuDNN's first direction reads forwards; "
                "wrap a go_backwards=False layer instead")
    if layer.merge_mode not in MERGE_MODES:
        return f"merge_mode={layer.merge_mode!r} is not one of Keras's {sorted(map(str, MERGE_MODES))}"
    for key in ("units", "activation", "recurrent_activation", "use_bias", "reset_after"):
        if key in forward and forward.get(key) != backward.get(key):
            return (f"its forward and backward layers differ in {key} ({forward.get(key)!r} and "
                    f"{backward.get(key)!r}); cuDNN's two directions share one configuration")
    return None


def config_refusal(layer: RNNLayer) -> str | None:
    """Why cuDNN cannot compute what the config says (activations, a lone backwards layer, ...)."""
    config = layer.configs[0]
    if layer.kind.rnn_mode is None:
        activation = activation_name(config.get("activation", "tanh"))
        if activation not in SIMPLE_RNN_MODES:
            return (f"activation={activation!r}: cuDNN's simple RNN computes tanh or relu only; keep this layer "
                    "in Keras, or retrain it with activation='tanh' or 'relu'")
    elif not layer.kind.cudnn_layout:
        for key, wanted in CUDNN_ACTIVATIONS.items():
            activation = activation_name(config.get(key, wanted))
            if activation != wanted:
                return (f"{key}={activation!r}: cuDNN's {layer.kind.rnn_mode.upper()} computes {wanted} there; keep "
                        f"this layer in Keras, or retrain it with {key}={wanted!r}")
    if len(layer.configs) == 1 and config.get("go_backwards", False):
        return ("go_backwards=True: cuDNN reads a sequence backwards only as the second direction of a "
                "bidirectional RNN; keep this layer in Keras, or wrap it in Bidirectional")
    return None


BIDIRECTIONAL_RESET_BEFORE = ("a bidirectional GRU(reset_after=False) is two reset-before GRUs, which cuDNN cannot "
                              "run and the 'gru_block_cell' format holds one direction at a time")


def _policy(config: Mapping[str, Any]) -> str | None:
    """The layer's dtype policy name ("float32", "mixed_float16"), where its config has one."""
    dtype = config.get("dtype")
    if isinstance(dtype, dict):
        inner = dtype.get("config")
        dtype = inner.get("name") if isinstance(inner, dict) else None
    return dtype if isinstance(dtype, str) else None


def config_notes(layer: RNNLayer) -> list[str]:
    config, notes = layer.configs[0], []
    policy = _policy(layer.outer) or _policy(config)
    if policy and policy.startswith("mixed_"):
        notes.append(f"dtype policy {policy!r}: Keras runs this layer in {one_line(policy[len('mixed_'):], 40)} from "
                     "float32 weights; the weights are read as stored")
    if MERGE_MODES.get(layer.merge_mode) and len(layer.configs) == 2:
        notes.append(f"merge_mode={layer.merge_mode!r}: {MERGE_MODES[layer.merge_mode]}")
    if config.get("stateful", False):
        notes.append("stateful=True: Keras carries each batch's final state into the next; pass it as the initial "
                     "state yourself")
    dropouts = [f"{key}={config[key]}" for key in ("dropout", "recurrent_dropout")
                if isinstance(config.get(key), (int, float)) and config[key]]
    if dropouts:
        notes.append(f"{' and '.join(dropouts)} act only in Keras training; cuDNN's dropout applies between "
                     "stacked layers only")
    return notes


# ---- the model graph: which RNN's output sequence feeds which ----------------------------------------
def _producer(entry: dict[str, Any]) -> tuple[str, int] | None:
    """(layer name, output index) of the tensor an entry of a Functional config is called on, if one call."""
    nodes = entry.get("inbound_nodes")
    if not isinstance(nodes, list) or len(nodes) != 1:
        return None
    node = nodes[0]
    if isinstance(node, dict):  # Keras 3: {"args": [tensor, ...], "kwargs": {...}}
        args = node.get("args")
        first = args[0] if isinstance(args, list) and args else None
        history = _config_of(first).get("keras_history") if isinstance(first, dict) else None
        if isinstance(history, list) and len(history) == 3:
            return str(history[0]), history[2]
    elif isinstance(node, list) and node and isinstance(node[0], list) and len(node[0]) >= 3:
        return str(node[0][0]), node[0][2]  # Keras 2: [[layer, node index, tensor index, kwargs], ...]
    return None


def link_feeds(model: dict[str, Any], entries: Sequence[dict[str, Any]], layers: dict[str, RNNLayer]) -> None:
    """Set ``feeds_from`` where an RNN's input is another RNN's whole output sequence, nothing between."""
    sequential = class_of(model) == "Sequential"
    previous = None
    for entry in entries:
        if class_of(entry) == "InputLayer":
            continue
        name = name_of(entry)
        source = (previous, 0) if sequential else _producer(entry)
        previous = name
        consumer = layers.get(name)
        if consumer is None or source is None or source[0] is None:
            continue
        producer = layers.get(source[0])
        if (producer is not None and source[1] == 0 and producer.returns_sequences
                and (producer.merge_mode == "concat" if len(producer.configs) == 2
                     else not producer.configs[0].get("go_backwards", False))):
            consumer.feeds_from = producer.name
