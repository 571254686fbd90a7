"""Keras files, read with h5py alone (no TensorFlow, no Keras).

    read("model.keras", "keras", ReadOptions()) -> [FoundRNN("encoder", "Keras 3 LSTM", "keras", ...), ...]

================================  ==============================  =============================================
file                              configuration from              weights from
================================  ==============================  =============================================
``.keras`` (Keras 3, tf_keras)    ``config.json``                 ``model.weights.h5``: layers/<layer>/cell/vars
Keras 3 ``.weights.h5``           the weights' names and shapes   the same groups
legacy ``.h5`` model (Keras 2/3)  the ``model_config`` attribute  model_weights/<layer>/<weight name>
legacy ``save_weights`` ``.h5``   the weights' names and shapes   <layer>/<weight name>
================================  ==============================  =============================================

Every ``LSTM``, ``GRU``, ``SimpleRNN``, ``RNN(LSTMCell | GRUCell | SimpleRNNCell)``, Keras 2
``CuDNNLSTM`` / ``CuDNNGRU`` and ``Bidirectional`` around any of them is found, also inside
nested models, in the format that holds its weights exactly: ``keras`` (exact), ``gru_block_cell``
for a GRU(reset_after=False) (a reset-before GRU: approximate in cuDNN), ``torch`` for the CuDNN
layers. Their kernel and recurrent_kernel hold, per gate block (Keras order: LSTM i,f,c,o, GRU
z,r,h), cuDNN's own ``[N, width]`` matrix reshaped row-major to ``[width, N]`` (a reshape, not a
transpose); their bias ``[2*G*N]`` is cuDNN's input biases, then its recurrent biases, each in
Keras gate order: both biases map one to one.

What cuDNN cannot compute is refused by name (:attr:`FoundRNN.refusal`, :mod:`._keras_config`);
``feeds_from`` names the RNN whose full output sequence is the input, from the model's graph.
Nothing is written to disk: an archive's ``.h5`` member is read in memory once the archive's
members are checked (:mod:`._zip`), and every read runs in a child process (:mod:`._child`).
"""

from __future__ import annotations

import functools
import json
import zipfile
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..._arrays import Array
from ...config import BUILTIN_DTYPES, MODES
from ...formats import reorder_gates
from ...formats.gru_block_cell import keras_reset_before_to_gru_block_cell
from ...formats.keras import DIRECTION_NAMES, FIELDS, RESET_BEFORE_NOTE, SIMPLE_RNN_MODES, TWO_BIAS_MODES
from ...formats.keras import GATE_ORDERS as KERAS_GATE_ORDERS
from ...formats.keras import TENSOR_NAMES as KERAS_NAMES
from ...formats.torch import TENSOR_NAMES as TORCH_NAMES
from ._found import BFLOAT16_NOTE, FileReadError, FoundRNN, ReadOptions, one_line
from ._hdf5 import H5File, h5py_errors, open_h5
from ._child import run_isolated
from ._infer import infer
from ._keras_config import (BIDIRECTIONAL_RESET_BEFORE, RNNLayer, activation_name, class_of, config_notes,
                            config_refusal, is_model, name_of)
from ._keras_layout import LAYER_GROUPS, gate_blocks, legacy_layers, store_layers
from ._keras_weights_only import legacy_weights_only, store_weights_only
from ._zip import READ_ERRORS, checked_members, read_member

__all__ = ["read", "locate", "MAX_MEMBER_BYTES", "WEIGHTS_MEMBER"]


#: what an archive member may take in memory (a larger model.weights.h5: extract it, read the file)
MAX_MEMBER_BYTES = 2 << 30
MAX_JSON_BYTES = 64 << 20

WEIGHTS_MEMBER, CONFIG_MEMBER, METADATA_MEMBER = "model.weights.h5", "config.json", "metadata.json"


# ---- from a layer to a FoundRNN ---------------------------------------------------------------------------
def _format(layer: RNNLayer) -> str:
    """The format that holds the layer's weights exactly: ``torch``, ``gru_block_cell`` or ``keras``."""
    if layer.kind.cudnn_layout:
        return "torch"
    if layer.kind.rnn_mode == "gru" and layer.reset_after is False and len(layer.configs) == 1:
        return "gru_block_cell"
    return "keras"


def _keras_tensors(layer: RNNLayer, arrays: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """LSTM, GRU(reset_after=True), SimpleRNN: the ``keras`` format, zero biases where use_bias=False."""
    tensors = {}
    for direction, weights in enumerate(arrays):
        kernel = weights["kernel"]
        bias = weights.get("bias")
        if bias is None:
            columns = kernel.shape[1]
            bias = np.zeros((2, columns) if layer.kind.rnn_mode in TWO_BIAS_MODES else (columns,), kernel.dtype)
        for name, value in (("kernel", kernel), ("bias", bias), ("recurrent_kernel", weights["recurrent_kernel"])):
            tensors[KERAS_NAMES.name(name, 0, direction)] = value
    return tensors


def _cudnn_tensors(layer: RNNLayer, arrays: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """CuDNNLSTM / CuDNNGRU: the ``torch`` format (cuDNN's gate order, both biases), see the module docstring."""
    mode = layer.kind.rnn_mode
    assert mode is not None, f"{layer.kind.class_name} names its mode"
    keras, cudnn = KERAS_GATE_ORDERS[mode], MODES[mode].gates
    tensors = {}

    def matrices(stacked: np.ndarray, units: int) -> Array:  # [width, G*N] -> [G*N, width], blocks reshaped
        blocks = np.split(stacked, len(keras), axis=1)
        return reorder_gates(np.concatenate([block.reshape(units, -1) for block in blocks]), keras, cudnn, np)

    for direction, weights in enumerate(arrays):
        units = weights["recurrent_kernel"].shape[0]
        if weights["bias"].shape != (2 * len(keras) * units,):
            raise ValueError(f"layer {layer.name!r} ({layer.display}): its bias has shape {weights['bias'].shape}; a "
                             f"{layer.kind.class_name} of {units} units keeps {2 * len(keras) * units} biases")
        input_bias, recurrent_bias = np.split(weights["bias"], 2)
        for name, value in (("input", matrices(weights["kernel"], units)),
                            ("recurrent", matrices(weights["recurrent_kernel"], units)),
                            ("input_bias", reorder_gates(input_bias, keras, cudnn, np)),
                            ("recurrent_bias", reorder_gates(recurrent_bias, keras, cudnn, np))):
            tensors[TORCH_NAMES.name(name, 0, direction)] = value
    return tensors


def _shape_fields(layer: RNNLayer) -> dict[str, Any]:
    """What the dataset shapes and the config tell without reading any data (for refused layers)."""
    weights = layer.weights[0] if layer.weights else {}
    fields: dict[str, Any] = {"num_layers": 1, "direction": "bidirectional" if len(layer.configs) == 2
                              else "unidirectional", "num_proj": 0, "input_mode": "linear_input"}
    if layer.kind.rnn_mode:
        fields["rnn_mode"] = layer.kind.rnn_mode
    recurrent, kernel = weights.get("recurrent_kernel"), weights.get("kernel")
    if recurrent is not None and kernel is not None and len(recurrent.shape) == 2 and len(kernel.shape) == 2:
        fields.update(num_units=int(recurrent.shape[0]), input_size=int(kernel.shape[0]))
        if kernel.dtype.name in BUILTIN_DTYPES:
            fields["dtype"] = kernel.dtype.name
    return fields


def _check_weights(h5: H5File, layer: RNNLayer) -> None:
    """Every direction holds the kernel and recurrent_kernel of the layer's G (and a CuDNN layer its bias),
    before any data is read."""
    gates, needed = layer.kind.gates, FIELDS if layer.kind.cudnn_layout else FIELDS[:2]
    for side, weights in zip(DIRECTION_NAMES, layer.weights):
        which = f"the {side} layer of " if len(layer.weights) == 2 else ""
        missing = [name for name in needed if name not in weights]
        if missing:
            raise h5.fail(f"{which}layer {layer.name!r} ({layer.display}) has no {missing[0]} stored")
        if gate_blocks(weights) != gates:
            raise h5.fail(f"{which}layer {layer.name!r} ({layer.display}) has a kernel of shape "
                          f"{tuple(weights['kernel'].shape)} and a recurrent_kernel of shape "
                          f"{tuple(weights['recurrent_kernel'].shape)}; a {layer.kind.class_name} needs "
                          f"[width, {gates}*N] and [N, {gates}*N]")


def _config_refusal(layer: RNNLayer) -> str | None:
    """Why cuDNN cannot compute the layer, from what its config (and its class) says; None when it can."""
    refusal = layer.refusal or (None if layer.weights_only else config_refusal(layer))
    if layer.reset_after is False and len(layer.configs) == 2:
        refusal = refusal or BIDIRECTIONAL_RESET_BEFORE
    return refusal


def _read_layer(h5: H5File, layer: RNNLayer, version: str) -> tuple[Any, ...]:
    """The FoundRNN arguments of a layer (a FoundRNN's read-only mappings do not pickle back from the child): its
    tensors in the format that holds them exactly, or only what its shapes tell when it is refused."""
    source = f"Keras {version} {layer.display}" + (" (weights only)" if layer.weights_only else "")
    config = layer.configs[0]
    refusal = _config_refusal(layer)
    if not layer.weights_only:
        layer.notes += config_notes(layer)
    if not refusal:
        _check_weights(h5, layer)
        stored = {h5.dtype(dataset) for weights in layer.weights for dataset in weights.values()}
        odd = sorted(stored - set(BUILTIN_DTYPES) - {"bfloat16"})
        if odd:
            refusal = (f"its weights are {odd[0]!r}; cuDNN params are one of {BUILTIN_DTYPES} or bfloat16 "
                       "(read as float32): cast the model's weights first")
        elif "bfloat16" in stored:
            layer.notes.append(BFLOAT16_NOTE)
    fmt, fields, questions = "keras", _shape_fields(layer), {}
    tensors: dict[str, np.ndarray] = {}
    if not refusal:
        units = config.get("units")
        if units is not None and units != layer.weights[0]["recurrent_kernel"].shape[0]:
            raise h5.fail(f"layer {layer.name!r} ({layer.display}): its config says units={units!r} but its "
                          f"recurrent_kernel has shape {tuple(layer.weights[0]['recurrent_kernel'].shape)}")
        arrays = [{name: h5.array(dataset) for name, dataset in weights.items()} for weights in layer.weights]
        fmt = _format(layer)
        if fmt == "gru_block_cell":
            (gru,) = arrays
            tensors = keras_reset_before_to_gru_block_cell(gru["kernel"], gru["recurrent_kernel"], gru.get("bias"), np)
            layer.notes.append(RESET_BEFORE_NOTE)
        elif fmt == "torch":
            tensors = _cudnn_tensors(layer, arrays)
            layer.notes.append(f"a {layer.kind.class_name} keeps cuDNN's own matrices and both biases: read exactly, "
                               "in the 'torch' format")
        else:
            tensors = _keras_tensors(layer, arrays)
        if any("bias" not in weights for weights in arrays):
            layer.notes.append("use_bias=False: zero biases are used, the same function")
        inferred = infer(fmt, tensors, f"layer {layer.name!r} ({source})")
        tensors, fields, questions = inferred.tensors, inferred.fields, inferred.questions
        if layer.kind.rnn_mode is None and not layer.weights_only:
            fields["rnn_mode"] = SIMPLE_RNN_MODES[activation_name(config.get("activation", "tanh"))]
            questions.pop("rnn_mode", None)
        layer.notes += inferred.notes
    return (one_line(layer.name, 200), source, fmt, tensors, fields, questions, tuple(dict.fromkeys(layer.notes)),
            refusal, one_line(layer.feeds_from, 200) if layer.feeds_from else None)


# ---- the files ------------------------------------------------------------------------------------------------
def _major(version: Any) -> str:
    text = str(version or "")
    return text.split(".", 1)[0] if text[:1].isdigit() else "3"


def _member(path: str, archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], name: str,
            limit: int) -> bytes:
    """The bytes of member ``name`` (:func:`~._zip.read_member`), or a FileReadError saying what the archive holds."""
    if name not in members:
        raise FileReadError(path, f"the archive has no {name!r}; it holds {sorted(members)[:8]}")
    return read_member(path, archive, members[name], limit)


def _json(path: str, text: bytes, what: str) -> Any:
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FileReadError(path, f"{what} is not JSON ({type(error).__name__}: {one_line(error, 120)})") from None


#: what is done with each layer a walk of the file finds: read its weights, or say where they lie
_Visit = Callable[[H5File, RNNLayer, str], Any]


def _read_archive(path: str, member_limit: int, visit: _Visit = _read_layer) -> list[Any]:
    """``visit`` of each layer of a ``.keras`` archive (in the child process); ``member_limit``: MAX_MEMBER_BYTES."""
    import h5py

    try:
        with zipfile.ZipFile(path) as archive:
            members = checked_members(path, archive)
            config = _json(path, _member(path, archive, members, CONFIG_MEMBER, MAX_JSON_BYTES), CONFIG_MEMBER)
            metadata = (_json(path, _member(path, archive, members, METADATA_MEMBER, MAX_JSON_BYTES), METADATA_MEMBER)
                        if METADATA_MEMBER in members else {})
            if WEIGHTS_MEMBER not in members:
                raise FileReadError(path, f"the archive holds no {WEIGHTS_MEMBER!r} (it holds {sorted(members)[:8]}); "
                                          "sharded weights are not read: re-save with a single weights file")
            data = _member(path, archive, members, WEIGHTS_MEMBER, member_limit)
    except READ_ERRORS as error:
        raise FileReadError(path, f"a damaged .keras archive ({type(error).__name__}: {one_line(error, 160)})") \
            from None
    version = _major(metadata.get("keras_version") if isinstance(metadata, dict) else None)
    h5 = open_h5(h5py, path, data, WEIGHTS_MEMBER)
    with h5.file, h5py_errors(path, h5.where):
        if not isinstance(config, dict):
            raise h5.fail(f"{CONFIG_MEMBER} is not a Keras model config (it holds a {type(config).__name__})")
        if not is_model(config):  # a subclassed model: its config does not list the layers
            reason = f"the config of the {class_of(config) or 'saved'} model does not list its layers"
            layers = list(store_weights_only(h5, h5.file, reason=reason))
        else:
            layers = _with_config(h5, lambda: store_layers(h5, config, h5.file, ()), CONFIG_MEMBER)
        return [visit(h5, layer, version) for layer in layers]


def _with_config(h5: H5File, walk: Callable[[], list[RNNLayer]], what: str) -> list[RNNLayer]:
    """Run a walk over a model config, turning a malformed config's errors into one message."""
    try:
        return walk()
    except FileReadError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as error:
        raise h5.fail(f"{what} is not a Keras model config this reader understands "
                      f"({type(error).__name__}: {one_line(error, 160)})") from None


def _read_hdf5(path: str, visit: _Visit = _read_layer) -> list[Any]:
    """``visit`` of each layer of a legacy ``.h5`` model, or of a weights file (in the child process)."""
    import h5py

    h5 = open_h5(h5py, path)
    with h5.file, h5py_errors(path, h5.where):
        root = h5.file
        version = _major(h5.attribute(root, "keras_version"))
        model_config = h5.attribute(root, "model_config")
        if model_config is not None:
            config = _json(path, str(model_config).encode(), "the model_config attribute")
            weights_root = h5.child(root, "model_weights")
            if weights_root is None:
                raise h5.fail("a Keras model file without its 'model_weights' group (saved with include_weights off?)")
            version = _major(h5.attribute(weights_root, "keras_version") or version)
            if not isinstance(config, dict) or not is_model(config):
                raise h5.fail("the model_config attribute is not a Keras Sequential or Functional model config")
            layers = _with_config(h5, lambda: legacy_layers(h5, config, weights_root, (name_of(config),)),
                                  "the model_config attribute")
        elif "layer_names" in root.attrs:
            layers = list(legacy_weights_only(h5, root))
        elif any(name in root for name in (*LAYER_GROUPS, "vars")):
            layers = list(store_weights_only(h5, root))
            version = "3"
        else:
            raise h5.fail(f"an HDF5 file that is neither a Keras model nor a Keras weights file (it holds "
                          f"{sorted(root)[:8]})")
        return [visit(h5, layer, version) for layer in layers]


def read(path: str, kind: str, options: ReadOptions) -> list[FoundRNN]:
    """Every RNN layer of a Keras file (see the module docstring), in the model's order."""
    import h5py  # noqa: F401 - here, so that a missing h5py is reported as such

    return [FoundRNN(*found) for found in run_isolated(path, _walk(path, kind, _read_layer))]


def _walk(path: str, kind: str, visit: _Visit) -> Callable[[], list[Any]]:
    """The walk of the file's layers that the child process runs (pickled, with the member limit in force here)."""
    return (functools.partial(_read_archive, path, MAX_MEMBER_BYTES, visit) if kind == "keras"
            else functools.partial(_read_hdf5, path, visit))


# ---- where the weights lie ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StoredDataset:
    """Where an HDF5 file keeps one weight: its dataset, and (for contiguous data) its byte offset in the file."""

    dataset: str
    offset: int | None
    shape: tuple[int, ...]
    dtype: str
    byteorder: str


@dataclass(frozen=True)
class LayerPlaces:
    """Where a Keras layer's weights lie, keyed by the ``keras`` format's tensor names of a one-layer network
    (``layer_0/forward/kernel``, ...); empty for a layer whose stored weights are not that format's as they are
    (a reset-before GRU, a CuDNN layer, a refused layer: ``why`` says which)."""

    name: str
    display: str
    places: dict[str, StoredDataset]
    why: str | None = None


def _places(h5: H5File, layer: RNNLayer, version: str) -> LayerPlaces:
    """Where ``layer``'s weights lie (in the child process)."""
    name = one_line(layer.name, 200)
    refusal = _config_refusal(layer)
    if refusal or _format(layer) != "keras":
        why = refusal or f"a {layer.display} keeps its weights in another layout than LSTM, GRU(reset_after=True) " \
                         "and SimpleRNN"
        return LayerPlaces(name, layer.display, {}, why)
    places = {}
    for direction, weights in enumerate(layer.weights):
        for field_name, dataset in weights.items():
            marked = h5.dtype(dataset)
            plain = (dataset.chunks is None and not dataset.external  # (HDF5 compresses chunked data only)
                     and (marked == dataset.dtype.name or h5.marked_bfloat16(dataset)))
            offset = dataset.id.get_offset() if plain else None
            order = dataset.dtype.byteorder
            places[KERAS_NAMES.name(field_name, 0, direction)] = StoredDataset(
                str(dataset.name), None if offset is None else int(offset), tuple(int(d) for d in dataset.shape),
                marked, ">" if order == ">" else "<")
    return LayerPlaces(name, layer.display, places)


def locate(path: str, kind: str) -> list[LayerPlaces]:
    """Where each RNN layer of a Keras file keeps its weights, in the model's order (offsets in the HDF5 file:
    for a ``.keras`` archive, in its ``model.weights.h5`` member)."""
    import h5py  # noqa: F401 - here, so that a missing h5py is reported as such

    return list(run_isolated(path, _walk(path, kind, _places)))
