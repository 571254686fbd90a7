"""TensorFlow checkpoints: TF1 CudnnRNN layers and Keras RNN layers, found by name or object graph.

::

    read("train/ckpt-1", "tf_checkpoint", ReadOptions())
    -> [FoundRNN("encoder/cudnn_lstm", "TF1 CudnnLSTM (canonical variables)", "tf_cell", ...),
        FoundRNN("model/layer_with_weights-1", "Keras 2 (tf_keras) Bidirectional(GRU)", "keras", ...)]

**Paths.** Every form is resolved to a checkpoint prefix ``P`` (``P.index`` beside its
``P.data-*`` shards):

===================================================  ============================================
the path                                             the checkpoint read
===================================================  ============================================
``P``, ``P.index``, ``P.data-00000-of-00001``        ``P``
a folder with a ``checkpoint`` state file, or that   its latest checkpoint (it must lie in the
file                                                 folder)
a folder holding exactly one ``*.index``             that one
a SavedModel folder, its ``variables/`` or its       ``variables/variables``, with the variable
``saved_model.pb``                                   names from ``saved_model.pb`` (layer names)
===================================================  ============================================

**TF1 CudnnLSTM / CudnnGRU / CudnnRNNTanh / CudnnRNNRelu** (``tf.compat.v1.train.Saver``). The
opaque buffer ``S/opaque_kernel`` depends on the GPU that wrote it; beside it TF's
``CudnnOpaqueParamsSaveable`` saves the canonical weights under the names of TF's
cuDNN-compatible cells, which our ``tf_cell`` format holds once the scope ``S`` is stripped::

    S/rnn/multi_rnn_cell/cell_{l}/{cell}/{leaf}                                  unidirectional
    S/stack_bidirectional_rnn/cell_{l}/bidirectional_rnn/{fw|bw}/{cell}/{leaf}   bidirectional

{cell} and {leaf} as in :data:`CELL_LEAVES`, as TF 1.15's ``CudnnOpaqueParamsSaveable`` writes them
(public checkpoints such as DeepSpeech's show the same names; TF 2 has no contrib to run them). ``S``
is the layer's variable scope when it was built (default names ``cudnn_lstm``, ``cudnn_gru``,
``cudnn_rnn_tanh``, ``cudnn_rnn_relu``, inside any enclosing scopes: ``encoder/cudnn_lstm``), none
for a layer built outside any scope. No projection is ever saved (``projection/kernel`` is read if
present). A ``basic_rnn_cell`` does not say tanh or relu: ``rnn_mode`` is a question, defaulted from
a scope with the layer's default name. A scope holding only ``S/opaque_kernel`` (a Saver given an
explicit ``var_list``) is found as a bare params buffer (format ``params``): cuDNN's layout, every
size a question.

**Keras layers** (``tf.train.Checkpoint(model=...)``, ``save_weights`` in TF format,
SavedModels): a node of the checkpoint's object graph (:mod:`._tf_object_graph`) whose edge
``cell`` leads to variables ``kernel`` and ``recurrent_kernel`` (and ``bias``) is an RNN layer,
its class told by the gate count of ``recurrent_kernel`` [N, G*N]; a node with ``forward_layer``
and ``backward_layer`` RNN children is a ``Bidirectional``. A SavedModel's variables, and those
of Keras models a ``tf.compat.v1.train.Saver`` saved in graph mode, are named
``{layer}/{lstm_cell|gru_cell|simple_rnn_cell}/{kernel|...}`` instead (``{bidi}/forward_{x}``
and ``{bidi}/backward_{x}`` for a Bidirectional). A GRU with a ``(3N,)`` bias is
``GRU(reset_after=False)``, given in the ``gru_block_cell`` format. An object-based checkpoint
keeps no layer names and no layer settings: RNNs are named by their object path
(``model/layer_with_weights-0``) and Keras's default activations are assumed (noted).

``tf.train.load_checkpoint`` reads in a warm child process (:mod:`._child`): TensorFlow's C++
code aborts the process on some malformed index entries (a negative or overflowing dimension,
more than 254 dimensions), which there ends in a FileReadError naming the checkpoint.
TensorFlow checks each entry's size against its dtype and shape, and the checksums, itself; a
variable is read only when its dtype and rank can be an RNN weight.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..._dtypes import BUILTIN_PARAMS
from ...formats.gru_block_cell import keras_reset_before_to_gru_block_cell
from ...formats.keras import (CELL_SCOPES, CLASS_BY_GATES, CUDNN_ACTIVATIONS, DIRECTION_LAYERS, FIELDS, LAYER_KINDS,
                             RESET_BEFORE_NOTE)
from ...formats.keras import TENSOR_NAMES as KERAS_NAMES
from ...formats.tf_cell import CELL_MODES, GRU_NAMES, STITCHED_NAMES
from ...formats.tf_cell import CELL_NAMES as TF_CELL_NAMES
from ._child import Reader, run_isolated
from ._found import PARAMS_FORMAT, FoundRNN, Question, ReadOptions, one_line, questions_for_all
from ._infer import SINGLE_GATE_QUESTION, infer
from ._tf_object_graph import OBJECT_GRAPH_KEY, OBJECT_KEY_SUFFIX, ObjectGraph, saved_model_names

__all__ = ["read", "locate", "Location", "CELL_LEAVES", "CUDNN_LAYERS"]

STATE_FILE = "checkpoint"
SAVED_MODEL_FILE = "saved_model.pb"

# ---- TF1 CudnnRNN layers: the canonical names of TF's cuDNN-compatible cells --------------------
#: rnn_mode -> the TF1 layer and its default scope name (tf.layers numbers repeats: cudnn_lstm_1)
TF1_LAYERS: dict[str, tuple[str, str]] = {
    "lstm": ("CudnnLSTM", "cudnn_lstm"), "gru": ("CudnnGRU", "cudnn_gru"),
    "rnn_tanh": ("CudnnRNNTanh", "cudnn_rnn_tanh"), "rnn_relu": ("CudnnRNNRelu", "cudnn_rnn_relu")}


def _leaves(names: dict[str, str]) -> tuple[str, ...]:
    return tuple(name.removeprefix("{prefix}/") for name in names.values())


#: cell scope -> the leaves its variables have (tf_cell's names after the cell prefix; a basic RNN has no projection)
CELL_LEAVES: dict[str, tuple[str, ...]] = {TF_CELL_NAMES["lstm"]: _leaves(STITCHED_NAMES),
                                           TF_CELL_NAMES["gru"]: _leaves(GRU_NAMES),
                                           TF_CELL_NAMES["rnn_tanh"]: ("kernel", "bias")}

#: cell scope -> the TF1 layer whose saveable writes it
CUDNN_LAYERS: dict[str, str] = {cell: " or ".join(TF1_LAYERS[mode][0] for mode in modes)
                                for cell, modes in CELL_MODES.items()}

_DEFAULT_SCOPE = re.compile(r"(?:^|/)(?P<name>" + "|".join(name for _, name in TF1_LAYERS.values()) + r")(?:_\d+)?$")
OPAQUE_VARIABLE = "opaque_kernel"

_CUDNN_NAME = re.compile(
    r"^(?:(?P<scope>.+)/)?(?:rnn/multi_rnn_cell|stack_bidirectional_rnn)/cell_\d+/"
    r"(?:bidirectional_rnn/(?:fw|bw)/)?(?P<cell>" + "|".join(CELL_LEAVES) + r")/(?P<leaf>.+)$")

# ---- Keras layers (their classes, cells and weights: convert/_keras.py) -------------------------
_KERAS_NAME = re.compile(r"^(?P<layer>.+)/(?P<cell>" + "|".join(CELL_SCOPES) + r")(?:_\d+)?/(?P<field>"
                         + "|".join(FIELDS) + r")$")
_FORWARD_LAYER = re.compile(r"^(?P<outer>.+)/forward_(?P<inner>[^/]+)$")

#: object-graph edge names that only Keras 3 / only tf_keras (Keras 2) use
_KERAS3_EDGES = frozenset({"_operations", "_functional", "_layers", "_tracked"})
_KERAS2_EDGE = re.compile(r"^layer(?:_with_weights)?-\d+$")
_KERAS2_MARKER = "state_spec"

NOTE_MERGE = "merge_mode='concat' is assumed (cuDNN concatenates the two directions)"


def _settings_note(cls: str) -> str:
    """The settings a checkpoint does not keep, assumed at Keras's defaults (a SimpleRNN's activation is asked)."""
    activations = [f"{key} {value}" for key, value in CUDNN_ACTIVATIONS.items()] if LAYER_KINDS[cls].rnn_mode else []
    assumed = ", ".join(activations + ["go_backwards=False"])
    return f"the checkpoint keeps no layer settings: Keras's defaults are assumed ({assumed})"


# ---- paths --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    """Where a checkpoint is: its prefix, and the SavedModel proto beside it (or None)."""

    prefix: str
    saved_model: str | None = None


def _inside(folder: str, path: str) -> bool:
    folder, path = os.path.realpath(folder), os.path.realpath(path)
    return os.path.commonpath([folder, path]) == folder


def _latest(folder: str) -> str:
    """The latest checkpoint a ``checkpoint`` state file names; it must lie inside ``folder``."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(folder)
    if state is None or not state.model_checkpoint_path:
        raise ValueError(f"the state file {STATE_FILE!r} in the folder names no checkpoint (it is empty or does not "
                         "parse): pass a checkpoint prefix such as FOLDER/ckpt-1")
    named: str = state.model_checkpoint_path
    if _inside(folder, named) and os.path.isfile(named + ".index"):
        return named
    moved = os.path.join(folder, os.path.basename(named))
    if os.path.isfile(moved + ".index"):  # a folder moved after TF wrote absolute paths
        return moved
    where = "outside the folder" if not _inside(folder, named) else "but its .index is missing"
    raise ValueError(f"the state file {STATE_FILE!r} names the checkpoint {named!r}, {where}: pass the checkpoint "
                     "prefix itself (PREFIX, with PREFIX.index beside it)")


def locate(path: str) -> Location:
    """The checkpoint ``path`` stands for (see the module docstring's table).

    Raises:
        ValueError: no checkpoint there, several, or a state file naming one outside the folder.
    """
    if os.path.basename(path) in (STATE_FILE, SAVED_MODEL_FILE) and os.path.isfile(path):
        path = os.path.dirname(path) or "."
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, SAVED_MODEL_FILE)) and os.path.isdir(os.path.join(path, "variables")):
            prefix = os.path.join(path, "variables", "variables")
        elif os.path.isfile(os.path.join(path, STATE_FILE)):
            prefix = _latest(path)
        else:
            indexes = sorted(glob.glob(os.path.join(glob.escape(path), "*.index")))
            if len(indexes) != 1:
                found = [os.path.basename(name) for name in indexes[:6]]
                raise ValueError(f"the folder holds {len(indexes)} checkpoint indexes {found} and no {STATE_FILE!r} "
                                 "state file: pass one checkpoint prefix (PREFIX, with PREFIX.index beside it)")
            prefix = indexes[0][:-len(".index")]
    else:
        prefix = re.sub(r"(\.index|\.data-\d+-of-\d+)$", "", path)
    if not os.path.isfile(prefix + ".index"):
        raise ValueError(f"the checkpoint index {os.path.basename(prefix) + '.index'!r} is missing: a TensorFlow "
                         "checkpoint is PREFIX.index with its PREFIX.data-* files beside it")
    variables = os.path.dirname(prefix)
    saved_model = os.path.join(os.path.dirname(variables), SAVED_MODEL_FILE)
    in_saved_model = os.path.basename(prefix) == os.path.basename(variables) == "variables"
    return Location(prefix, saved_model if in_saved_model and os.path.isfile(saved_model) else None)


# ---- what a reader found, before its values are read --------------------------------------------
@dataclass
class _Candidate:
    """One RNN found by its variables' names or places: the checkpoint keys of its tensors."""

    name: str
    source: str
    fmt: str                                   # "tf_cell", "keras" or "params"
    keys: dict[str, str]                       # tensor name in fmt -> checkpoint key
    notes: list[str] = field(default_factory=list)
    mode_default: str | None = None            # a default for rnn_mode where the file leaves it open


def _cudnn_candidates(names: dict[str, str]) -> list[_Candidate]:
    """TF1 CudnnRNN layers: each scope holding cuDNN-compatible cell variables (names -> keys)."""
    groups: dict[str | None, dict[str, str]] = {}
    cells: dict[str | None, str] = {}
    for name, key in names.items():
        match = _CUDNN_NAME.match(name)
        if match is None or match.group("leaf") not in CELL_LEAVES[match.group("cell")]:
            continue
        scope = match.group("scope")
        groups.setdefault(scope, {})[name[len(scope) + 1:] if scope else name] = key
        cells.setdefault(scope, match.group("cell"))
    labels = {scope: scope or min(tensors).split("/")[0] for scope, tensors in groups.items()}
    result = []
    for scope in sorted(groups, key=labels.__getitem__):  # the index's (alphabetical) order
        tensors, label = groups[scope], labels[scope]
        candidate = _Candidate(label, f"TF1 {CUDNN_LAYERS[cells[scope]]} (canonical variables)", "tf_cell", tensors)
        opaque = f"{scope}/{OPAQUE_VARIABLE}" if scope else OPAQUE_VARIABLE
        if opaque in names:
            candidate.notes.append(f"the opaque buffer {opaque!r} is not read (its layout belongs to the GPU that "
                                   "wrote it); the canonical variables beside it hold the same weights")
        default = _scope_mode(scope)
        if cells[scope] == "basic_rnn_cell" and default in ("rnn_tanh", "rnn_relu"):
            candidate.mode_default = default
            candidate.notes.append(f"rnn_mode={default} is assumed from the scope name {scope!r} (the layer's default "
                                   "name); the variables do not say tanh or relu")
        result.append(candidate)
    return result + _opaque_candidates(names, set(groups))


def _scope_mode(scope: str | None) -> str | None:
    """The rnn_mode a scope's last part says when it is a TF1 layer's default name, else None."""
    match = _DEFAULT_SCOPE.search(scope or "")
    return None if match is None else next(mode for mode, (_, name) in TF1_LAYERS.items()
                                           if name == match.group("name"))


def _opaque_candidates(names: dict[str, str], scopes: set[str | None]) -> list[_Candidate]:
    """Opaque buffers saved without their canonical variables (a Saver given an explicit var_list)."""
    result = []
    for name in sorted(names):
        scope = name[:-len(OPAQUE_VARIABLE) - 1] if name.endswith("/" + OPAQUE_VARIABLE) else None
        if (scope is None and name != OPAQUE_VARIABLE) or scope in scopes:
            continue
        mode = _scope_mode(scope)
        notes = ["only the opaque buffer was saved: it is cuDNN's params buffer as laid out on the GPU that wrote it, "
                 "and the checkpoint does not say its sizes"]
        if mode:
            notes.append(f"rnn_mode={mode} is assumed from the scope name {scope!r} (the layer's default name)")
        layer = TF1_LAYERS[mode][0] if mode else "CudnnRNN"
        result.append(_Candidate(scope or name, f"TF1 {layer} opaque buffer (no canonical variables)", PARAMS_FORMAT,
                                 {"params": names[name]}, notes, mode))
    return result


def _keras_candidate(name: str, version: str, cls: str, forward: dict[str, str], backward: dict[str, str] | None,
                     notes: list[str], origin: str = "") -> _Candidate:
    """One Keras layer of fields ``forward`` (field -> checkpoint key), or a Bidirectional of it and ``backward``."""
    keys = {KERAS_NAMES.name(field, 0, 0): key for field, key in forward.items()}
    keys.update({KERAS_NAMES.name(field, 0, 1): key for field, key in (backward or {}).items()})
    layer, merge = (cls, []) if backward is None else (f"Bidirectional({cls})", [NOTE_MERGE])
    return _Candidate(name, f"{version} {layer}{origin}", "keras", keys, merge + notes + [_settings_note(cls)])


def _keras_name_candidates(names: dict[str, str], origin: str) -> list[_Candidate]:
    """Keras layers by variable names ``{layer}/{lstm_cell|...}/{kernel|...}`` (SavedModels), in
    the order of the names; ``{bidi}/forward_{x}`` with ``{bidi}/backward_{x}`` is a Bidirectional."""
    layers: dict[str, dict[str, str]] = {}
    classes: dict[str, str] = {}
    for name, key in names.items():
        match = _KERAS_NAME.match(name)
        if match is not None:
            layers.setdefault(match.group("layer"), {}).setdefault(match.group("field"), key)
            classes[match.group("layer")] = CELL_SCOPES[match.group("cell")]
    wrappers: dict[str, tuple[str, str, str | None]] = {}   # each direction's layer -> (wrapper, forward, backward)
    for layer in layers:
        match = _FORWARD_LAYER.match(layer)
        partner = None if match is None else f"{match.group('outer')}/backward_{match.group('inner')}"
        if match is not None and partner in layers and classes[partner] == classes[layer]:
            wrappers[layer] = wrappers[partner] = (match.group("outer"), layer, partner)
    result, done = [], set()
    for layer in layers:
        found = wrappers.get(layer, (layer, layer, None))
        if found not in done:
            done.add(found)
            name, forward, backward = found
            result.append(_keras_candidate(name, "Keras", classes[layer], layers[forward],
                                           None if backward is None else layers[backward], [], f" ({origin})"))
    return result


def _keras_version(graph: ObjectGraph, layer: int, path: str) -> str:
    edges = path.split("/")
    if _KERAS3_EDGES.intersection(edges):
        return "Keras 3"
    if any(_KERAS2_EDGE.match(edge) for edge in edges) or _KERAS2_MARKER in graph.children[layer]:
        return "Keras 2 (tf_keras)"
    return "Keras"


def _keras_graph_candidates(graph: ObjectGraph, shapes: dict[str, tuple[int, ...]]) -> list[_Candidate]:
    """Keras RNN layers in an object graph: nodes whose ``cell`` has kernel and recurrent_kernel."""
    parents = graph.parents()
    layers: dict[int, tuple[dict[str, str], str]] = {}   # layer node -> (field -> key, class)
    for cell, edges in enumerate(graph.children):
        fields = {name: graph.variables[edges[name]] for name in FIELDS
                  if name in edges and edges[name] in graph.variables}
        if "kernel" not in fields or "recurrent_kernel" not in fields:
            continue
        kernel, recurrent = shapes.get(fields["kernel"], ()), shapes.get(fields["recurrent_kernel"], ())
        if len(kernel) != 2 or len(recurrent) != 2 or not recurrent[0] or recurrent[1] % recurrent[0]:
            continue
        cls = CLASS_BY_GATES.get(recurrent[1] // recurrent[0])
        if cls is None:
            continue
        for edge, layer in parents.get(cell, []):
            if edge == "cell" and layer in graph.paths:
                layers.setdefault(layer, (fields, cls))
    wrappers: dict[int, tuple[int, int]] = {}            # Bidirectional node -> (forward, backward) layer nodes
    forward_edge, backward_edge = DIRECTION_LAYERS
    for layer in layers:
        for edge, wrapper in parents.get(layer, []):
            if edge == forward_edge and wrapper in graph.paths:
                backward = graph.children[wrapper].get(backward_edge)
                if backward in layers and layers[backward][1] == layers[layer][1]:
                    wrappers[wrapper] = (layer, backward)
    paired = {layer for pair in wrappers.values() for layer in pair}
    result = []
    for node in sorted([layer for layer in layers if layer not in paired] + list(wrappers)):  # breadth-first ids
        path = graph.paths[node] or "root"
        forward, backward = wrappers.get(node, (node, None))
        fields, cls = layers[forward]
        result.append(_keras_candidate(path, _keras_version(graph, forward, path), cls, fields,
                                       None if backward is None else layers[backward][0],
                                       [f"the checkpoint keeps no layer names: this is the object at {path!r} of the "
                                        "saved model"]))
    return result


# ---- reading: TensorFlow's reader in a child process --------------------------------------------
#: TensorFlow's reader, as the refusals of its child process name it (TensorFlow imported before the read's bounds)
TENSORFLOW = Reader("TensorFlow's checkpoint reader", "TensorFlow checkpoint", ("tensorflow",), warm=True)


@dataclass(frozen=True)
class _Contents:
    """What the child read: every variable's shape, the RNNs found, and their tensors by checkpoint key."""

    shapes: dict[str, tuple[int, ...]]
    candidates: list[_Candidate]
    values: dict[str, np.ndarray]


def _read_contents(location: Location) -> _Contents:
    """In the child: TensorFlow opens the checkpoint and lists its variables; the RNNs are found (by name or
    object graph) and their tensors read, each checked to be a 1-D or 2-D float array first."""
    import tensorflow as tf

    errors = (tf.errors.OpError, IndexError, RuntimeError, ValueError, TypeError)
    try:
        reader = tf.train.load_checkpoint(location.prefix)
        shapes = {key: tuple(int(d) for d in shape) for key, shape in reader.get_variable_to_shape_map().items()}
        dtypes = {key: dtype.name for key, dtype in reader.get_variable_to_dtype_map().items()}
    except errors as error:
        raise ValueError(f"TensorFlow cannot open the checkpoint ({type(error).__name__}: {one_line(error, 200)}): "
                         "it is truncated or corrupt") from None
    if shapes and not glob.glob(glob.escape(location.prefix) + ".data-*"):
        raise ValueError(f"the checkpoint's data files {os.path.basename(location.prefix) + '.data-*'!r} are missing: "
                         "copy every .data-* file of the checkpoint beside its .index")

    def value(key: str) -> Any:
        try:
            return reader.get_tensor(key)
        except errors as error:
            raise ValueError(f"TensorFlow cannot read variable {key!r} ({type(error).__name__}: "
                             f"{one_line(error, 200)}): the checkpoint is truncated or corrupt") from None

    contents = _Contents(shapes, _candidates(location, shapes, dtypes, value), {})
    for candidate in contents.candidates:
        for key in candidate.keys.values():
            if key not in shapes:
                raise ValueError(f"{candidate.name}: variable {key!r} is listed but not stored in the checkpoint")
            if dtypes[key] not in BUILTIN_PARAMS or not 1 <= len(shapes[key]) <= 2:
                raise ValueError(f"{candidate.name}: variable {key!r} is {dtypes[key]} of shape {shapes[key]}; RNN "
                                 f"weights are 1-D or 2-D arrays of {', '.join(BUILTIN_PARAMS)}")
            contents.values[key] = np.asarray(value(key))
    return contents


def _candidates(location: Location, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str],
                value: Callable[[str], Any]) -> list[_Candidate]:
    """The RNNs of a checkpoint, by their variables' names, or by the object graph (read with ``value``)."""
    if OBJECT_GRAPH_KEY not in shapes:
        names = {key: key for key in shapes}
        return _cudnn_candidates(names) + _keras_name_candidates(names, "name-based checkpoint")
    if dtypes[OBJECT_GRAPH_KEY] != "string" or shapes[OBJECT_GRAPH_KEY]:
        raise ValueError(f"the checkpoint's object graph ({OBJECT_GRAPH_KEY}) is {dtypes[OBJECT_GRAPH_KEY]} of shape "
                         f"{shapes[OBJECT_GRAPH_KEY]}, not a string scalar: the checkpoint is corrupt")
    serialized = value(OBJECT_GRAPH_KEY)
    graph = ObjectGraph.parse(serialized.item() if isinstance(serialized, np.ndarray) else bytes(serialized))
    candidates: list[_Candidate] = []
    if location.saved_model:
        names = saved_model_names(location.saved_model, graph, shapes)
        candidates += _cudnn_candidates(names) + _keras_name_candidates(names, "SavedModel")
    used = {key for candidate in candidates for key in candidate.keys.values()}
    return candidates + [candidate for candidate in _keras_graph_candidates(graph, shapes)
                         if not used.intersection(candidate.keys.values())]


def _found(contents: _Contents, candidate: _Candidate) -> FoundRNN:
    """The candidate's tensors, as the RNN they make."""
    tensors = {name: contents.values[key] for name, key in candidate.keys.items()}
    if candidate.fmt == PARAMS_FORMAT:
        return _opaque_found(candidate, tensors["params"])
    special = _reset_before_gru(candidate, tensors) if candidate.fmt == "keras" else None
    if special is not None:
        return special
    inferred = infer(candidate.fmt, tensors, f"{candidate.name} ({candidate.source})")
    notes = list(candidate.notes)
    if candidate.fmt == "keras" and inferred.fields.get("rnn_mode") == "gru" and not any(
            name.endswith("/bias") for name in candidate.keys):
        notes.append("the GRU has no bias, so the checkpoint does not tell reset_after: reset_after=True (Keras's "
                     "default) is assumed")
    questions = dict(inferred.questions)
    if candidate.mode_default and "rnn_mode" in questions:
        questions["rnn_mode"] = Question(SINGLE_GATE_QUESTION, questions["rnn_mode"].reason, candidate.mode_default)
    return FoundRNN(candidate.name, candidate.source, candidate.fmt, inferred.tensors, inferred.fields, questions,
                    tuple(notes + inferred.notes))


def _opaque_found(candidate: _Candidate, params: np.ndarray) -> FoundRNN:
    """A bare params buffer: every size is a question; rnn_mode defaults from a default scope name."""
    if params.ndim != 1:
        raise ValueError(f"{candidate.name}: the opaque buffer {candidate.keys['params']!r} must be 1-D; got shape "
                         f"{params.shape}")
    reason = "a TF1 opaque buffer does not say its configuration"
    questions = questions_for_all(reason)
    questions["rnn_mode"] = Question(tuple(TF1_LAYERS), reason, candidate.mode_default)
    return FoundRNN(candidate.name, candidate.source, PARAMS_FORMAT, {"params": params}, {"dtype": str(params.dtype)},
                    questions, tuple(candidate.notes))


# ---- Keras GRU(reset_after=False): a reset-before GRU -------------------------------------------
def _reset_before_gru(candidate: _Candidate, tensors: dict[str, np.ndarray]) -> FoundRNN | None:
    """A Keras GRU with a (3N,) bias, in the ``gru_block_cell`` format (refused when bidirectional); else None."""
    kernel, recurrent = tensors[KERAS_NAMES.name("kernel")], tensors[KERAS_NAMES.name("recurrent_kernel")]
    bias = tensors.get(KERAS_NAMES.name("bias"))
    units = recurrent.shape[0]
    if recurrent.shape[1] != LAYER_KINDS["GRU"].gates * units or bias is None or bias.ndim != 1:
        return None
    fields = {"rnn_mode": "gru", "num_layers": 1, "num_units": int(units), "input_size": int(kernel.shape[0]),
              "num_proj": 0, "input_mode": "linear_input", "dtype": str(kernel.dtype)}
    source = candidate.source.replace("GRU", "GRU(reset_after=False)", 1)
    if KERAS_NAMES.name("kernel", 0, 1) in tensors:
        return FoundRNN(candidate.name, source, "keras", tensors, {**fields, "direction": "bidirectional"},
                        notes=tuple(candidate.notes), refusal=(
                            "Bidirectional(GRU(reset_after=False)) is a reset-before GRU in both directions, which "
                            "cuDNN cannot run and the 'gru_block_cell' format holds one direction only: rebuild it "
                            "with reset_after=True, or run each direction with cudnn_rnn.gru_block_cell"))
    inferred = infer("gru_block_cell", keras_reset_before_to_gru_block_cell(kernel, recurrent, bias, np),
                     f"{candidate.name} ({candidate.source})")
    return FoundRNN(candidate.name, source, "gru_block_cell", inferred.tensors, inferred.fields, inferred.questions,
                    tuple(candidate.notes) + (RESET_BEFORE_NOTE,))


# ---- the reader --------------------------------------------------------------------------------
def _holdings(shapes: dict[str, tuple[int, ...]]) -> str:
    names = sorted(key.removesuffix(OBJECT_KEY_SUFFIX) for key in shapes if key != OBJECT_GRAPH_KEY)
    if not names:
        return "it holds no variables"
    shown = ", ".join(f"{name} {list(shapes.get(name, shapes.get(name + OBJECT_KEY_SUFFIX, ())))}"
                      for name in names[:5])
    return f"it holds {len(names)} variable(s): {shown}{', ...' if len(names) > 5 else ''}"


def read(path: str, kind: str, options: ReadOptions) -> list[FoundRNN]:
    """Every RNN in the TensorFlow checkpoint at ``path`` (see the module docstring)."""
    if importlib.util.find_spec("tensorflow") is None:  # read_file says which package to install
        raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
    location = locate(path)
    contents = run_isolated(location.prefix, functools.partial(_read_contents, location), reader=TENSORFLOW)
    if not contents.candidates:
        raise ValueError("this TensorFlow checkpoint holds no LSTM, GRU or simple RNN (looked for TF1 CudnnRNN "
                         f"canonical variables and Keras RNN layers); {_holdings(contents.shapes)}")
    return [_found(contents, candidate) for candidate in contents.candidates]
