"""Write cuDNN RNN weights as a Keras 3 model file that ``keras.saving.load_model`` loads as it is.

    export_keras(params, config, "model.keras")        the model: a Keras 3 archive
    export_keras(params, config, "model.weights.h5")   its weights alone, as ``model.save_weights`` writes them

The model is a Functional model with no custom objects (it loads with ``safe_mode=True``): an
``InputLayer`` (x ``[B, T, I]``), then one layer per cuDNN layer of the class :data:`MODE_LAYERS`
names, each ``return_sequences=True`` (inside ``Bidirectional(merge_mode="concat")`` for both
directions); its output is the last layer's sequence, y ``[B, T, D*N]``. Layers are named as a
fresh Keras session names them (:func:`_layers`); the weights store holds the ``keras`` format's
tensors in the config's dtype. It computes what :func:`cudnn_rnn.cudnn_rnn_v3` computes
(inference, zero initial state); with ``mask=`` ``[B, T]`` (True at t < length) every valid step
is cuDNN's, and past a sequence's end a unidirectional layer repeats its last output (Keras's
``zero_output_for_mask=False``) where cuDNN writes zeros. Needs h5py, not Keras.

Not through Keras's own saving API (``set_weights``, ``model.save``): with Keras 3.15.1 both write the
same weights store byte for byte and the same config.json (Keras adds ``shared_object_id``), but Keras
takes 50-90 ms a file (this writer 3-6 ms) after 2.4 s of imports, names the layers after what the
session built before (``lstm_1``), and cannot build a bfloat16 model with the default ``Orthogonal``
initializer. Keras is the oracle that checks these files (``tests/oracle/test_export_keras_live.py``).
"""

from __future__ import annotations

import datetime
import io
import json
import os
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._arrays import Array, to_host
from ..config import MODES, RNNConfig, check_config
from ..files import (KERAS, KERAS_DTYPE_ATTRIBUTE, KERAS_MARKED_DTYPES, KERAS_VERSION, KERAS_WEIGHTS, extension,
                     write_bytes, write_through_path)
from ..formats import to_format
from ..formats import keras as keras_format
from .readers import CONFIG_MEMBER, METADATA_MEMBER, WEIGHTS_MEMBER

__all__ = ["export_keras", "write_keras", "KERAS_VERSION", "ARCHIVE_MEMBERS"]

#: Keras's format of metadata.json's date_saved
DATE_FORMAT = "%Y-%m-%d@%H:%M:%S"

#: path ending -> what is written there
ENDINGS: dict[str, str] = {KERAS: "the model (a Keras 3 archive)", KERAS_WEIGHTS: "its weights alone"}

#: the members of a .keras archive, in the order Keras writes them
ARCHIVE_MEMBERS: tuple[str, ...] = (METADATA_MEMBER, CONFIG_MEMBER, WEIGHTS_MEMBER)

MODEL_NAME, INPUT_NAME = "functional", "input_layer"
BIDIRECTIONAL = "bidirectional"


#: rnn_mode -> its Keras layer class (of ``formats.keras.LAYER_KINDS``, the one of its gate count)
MODE_LAYERS: dict[str, keras_format.LayerKind] = {
    mode: keras_format.LAYER_KINDS[keras_format.CLASS_BY_GATES[spec.num_gates]] for mode, spec in MODES.items()}

#: rnn_mode -> its layer's ``activation``: a SimpleRNN's is its mode's; LSTM and GRU compute cuDNN's
ACTIVATIONS: dict[str, str] = {mode: {rnn: name for name, rnn in keras_format.SIMPLE_RNN_MODES.items()}.get(
    mode, keras_format.CUDNN_ACTIVATIONS["activation"]) for mode in MODES}

_HEAD = ("name", "trainable", "dtype", "return_sequences", "return_state", "go_backwards", "stateful", "unroll",
         "zero_output_for_mask", "units", "activation")
_INITIALIZERS = ("kernel_initializer", "recurrent_initializer", "bias_initializer")
_TAIL = ("kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer",
         "kernel_constraint", "recurrent_constraint", "bias_constraint", "dropout", "recurrent_dropout")

#: each RNN class's config keys, in the order Keras 3 writes them
CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "LSTM": (*_HEAD, "recurrent_activation", "use_bias", *_INITIALIZERS, "unit_forget_bias", *_TAIL, "seed"),
    "GRU": (*_HEAD, "recurrent_activation", "use_bias", *_INITIALIZERS, *_TAIL, "reset_after", "seed"),
    "SimpleRNN": (*_HEAD, "use_bias", *_INITIALIZERS, *_TAIL),
}

#: the value of every config key that is the same in each layer (Keras's defaults, return_sequences aside)
CONFIG_VALUES: dict[str, Any] = {
    "trainable": True, "return_sequences": True, "return_state": False, "stateful": False, "unroll": False,
    **keras_format.CUDNN_ACTIVATIONS, "use_bias": True, "unit_forget_bias": True,
    **{key: None for key in _TAIL[:-2]}, "dropout": 0.0, "recurrent_dropout": 0.0, "reset_after": True,
    "seed": None,
}

#: initializer class -> its config, as Keras serialises it
INITIALIZERS: dict[str, dict[str, Any]] = {
    "GlorotUniform": {"seed": None, "input_axes": None, "output_axes": None},
    "Orthogonal": {"seed": None, "gain": 1.0},
    "Zeros": {},
}
#: each weight's initializer (Keras's defaults); load_model runs them before it loads the weights
DEFAULT_INITIALIZERS: dict[str, str] = {"kernel_initializer": "GlorotUniform",
                                        "recurrent_initializer": "Orthogonal", "bias_initializer": "Zeros"}
#: dtype -> initializers that differ: TensorFlow's QR, which Orthogonal runs, has no bfloat16 kernel
DTYPE_INITIALIZERS: dict[str, dict[str, str]] = {"bfloat16": {"recurrent_initializer": "GlorotUniform"}}


def _ending(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"path must be a str or os.PathLike[str]; got {type(path).__name__}")
    ending = extension(os.path.basename(text))
    if ending in ENDINGS:
        return ending
    choices = ", ".join(f"{ending!r} ({what})" for ending, what in ENDINGS.items())
    raise ValueError(f"path must end in {choices}; got {text!r}")


def export_keras(params: Array, config: RNNConfig, path: str | os.PathLike[str]) -> None:
    """Write ``params`` of ``config`` as a Keras 3 model file (see the module docstring).

    Args:
        params: the ``[params_size]`` params buffer (NumPy or CuPy) of ``config``, of dtype
            ``config.dtype`` (float16, float32, float64 or bfloat16).
        config: the configuration (dropout and seeds are ignored: the model is inference).
        path: ``*.keras`` for the model, ``*.weights.h5`` for its weights alone; written atomically.

    Raises:
        ValueError: a projection (num_proj > 0), params of the wrong shape, or a path with
            another ending.
        TypeError: ``params`` is not a NumPy or CuPy float array, its dtype is not
            ``config.dtype``, ``config`` is not an :class:`~cudnn_rnn.RNNConfig`, or ``path`` is
            not a str or path.
        ImportError: the h5py package is missing.
    """
    config = check_config(config)
    write_keras(params, config, path, weights_only=_ending(path) == KERAS_WEIGHTS)


def write_keras(params: Array, config: RNNConfig, path: str | os.PathLike[str], *, weights_only: bool) -> None:
    """:func:`export_keras` to ``path`` whatever its name: the weights file if ``weights_only``, else the model."""
    refusal = keras_format.refusal(config)
    if refusal:
        raise ValueError(f"export_keras: {refusal}")
    tensors = to_format("keras", params, config).value  # (which checks params against config)
    if np.dtype(params.dtype).name != config.dtype:
        raise TypeError(f"params.dtype must be config.dtype ({config.dtype}); got {np.dtype(params.dtype).name}")
    try:
        import h5py
    except ImportError as error:  # pragma: no cover - exercised only where h5py is absent
        raise ImportError("export_keras needs the 'h5py' package: pip install cudnn_rnn[convert]") from error
    weights = {name: np.ascontiguousarray(to_host(value)) for name, value in tensors.items()}
    layers = _layers(config)
    if weights_only:  # through a path, as save_weights writes it: libhdf5 lays out a file on disk
        write_through_path(path, lambda temporary: _weights_store(h5py, temporary, layers, weights))
        return
    buffer = io.BytesIO()  # in memory, as Keras writes the member of an archive
    _weights_store(h5py, buffer, layers, weights)
    store = buffer.getvalue()
    metadata = {"keras_version": KERAS_VERSION, "date_saved": datetime.datetime.now().strftime(DATE_FORMAT)}
    write_bytes(path, _archive(json.dumps(metadata), json.dumps(_model_config(config)), store))


def _archive(metadata: str, config: str, store: bytes) -> bytes:
    """The .keras zip, written with the calls Keras makes (so the same member order, dates and modes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        with archive.open(METADATA_MEMBER, "w") as member:
            member.write(metadata.encode())
        with archive.open(CONFIG_MEMBER, "w") as member:
            member.write(config.encode())
        archive.writestr(WEIGHTS_MEMBER, store)
    return buffer.getvalue()


# ---- the layers and their names ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Layer:
    """One cuDNN layer as a Keras layer: its name, its RNN's name, its input width."""

    index: int
    name: str         # the model's layer (lstm_1, or bidirectional_1)
    rnn_name: str     # the RNN layer's own name (lstm_1: the layer itself, or the one a Bidirectional wraps)
    width: int
    kind: keras_format.LayerKind
    directions: int
    mode: str


def _numbered(stem: str, index: int) -> str:
    return stem if index == 0 else f"{stem}_{index}"


def _layers(config: RNNConfig) -> list[_Layer]:
    kind, d = MODE_LAYERS[config.rnn_mode], config.num_directions
    result = []
    for layer in range(config.num_layers):
        rnn_name = _numbered(str(kind.cell_scope).removesuffix("_cell"), layer)  # Keras: its class, snake case
        name = _numbered(BIDIRECTIONAL, layer) if d == 2 else rnn_name
        result.append(_Layer(layer, name, rnn_name, config.layer_input_size(layer), kind, d, config.rnn_mode))
    return result


# ---- model.weights.h5 ---------------------------------------------------------------------------------
def _weights_store(h5py: Any, target: str | io.BytesIO, layers: list[_Layer], weights: dict[str, np.ndarray]) -> None:
    """Write the HDF5 weights store to ``target``, groups made in the order Keras makes them (see the module
    docstring), with the same h5py calls: the bytes are those Keras writes."""
    with h5py.File(target, "w") as file:
        _vars(file, "", MODEL_NAME)
        _vars(file, f"layers/{INPUT_NAME}", INPUT_NAME)
        for layer in layers:
            where = f"layers/{layer.name}"
            _vars(file, where, layer.name)
            if layer.directions == 1:
                _cell(file, where, layer, 0, weights)
                continue
            for direction in (1, 0):  # Keras walks a layer's attributes by name: backward_layer first
                side = keras_format.DIRECTION_NAMES[direction]
                _vars(file, f"{where}/{keras_format.DIRECTION_LAYERS[direction]}", f"{side}_{layer.rnn_name}")
                _cell(file, f"{where}/{keras_format.DIRECTION_LAYERS[direction]}", layer, direction, weights)


def _vars(file: Any, where: str, name: str) -> Any:
    group = file.create_group(f"{where}/vars" if where else "vars")
    group.attrs["name"] = name
    return group


def _cell(file: Any, where: str, layer: _Layer, direction: int, weights: dict[str, np.ndarray]) -> None:
    """A direction's kernel, recurrent_kernel and bias as ``<where>/cell/vars/0, 1, 2``."""
    group = _vars(file, f"{where}/cell", str(layer.kind.cell_scope))
    for index, field in enumerate(keras_format.FIELDS):
        value = weights[keras_format.TENSOR_NAMES.name(field, layer.index, direction)]
        if value.dtype.name in KERAS_MARKED_DTYPES:
            dataset = group.create_dataset(str(index), data=value)
            dataset.attrs[KERAS_DTYPE_ATTRIBUTE] = value.dtype.name
        else:
            group[str(index)] = value


# ---- config.json ------------------------------------------------------------------------------------
def _policy(dtype: str) -> dict[str, Any]:
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": dtype}, "registered_name": None}


def _rnn_config(layer: _Layer, name: str, units: int, dtype: str, backwards: bool) -> dict[str, Any]:
    """An RNN layer's config; Bidirectional sets zero_output_for_mask in the layers it wraps."""
    initializers = {**DEFAULT_INITIALIZERS, **DTYPE_INITIALIZERS.get(dtype, {})}
    own: dict[str, Any] = {"name": name, "dtype": _policy(dtype), "go_backwards": backwards,
                           "zero_output_for_mask": layer.directions == 2, "units": units,
                           "activation": ACTIVATIONS[layer.mode],
                           **{key: {"module": "keras.initializers", "class_name": value,
                                    "config": dict(INITIALIZERS[value]), "registered_name": None}
                              for key, value in initializers.items()}}
    values = {**CONFIG_VALUES, **own}
    return {key: values[key] for key in CONFIG_KEYS[layer.kind.class_name]}


def _entry(class_name: str, config: dict[str, Any], width: int) -> dict[str, Any]:
    return {"module": "keras.layers", "class_name": class_name, "config": config, "registered_name": None,
            "build_config": {"input_shape": [None, None, width]}}


def _layer_entry(layer: _Layer, units: int, dtype: str, producer: str) -> dict[str, Any]:
    def rnn(name: str, backwards: bool) -> dict[str, Any]:
        return _entry(layer.kind.class_name, _rnn_config(layer, name, units, dtype, backwards), layer.width)

    if layer.directions == 1:  # (the keyword arguments Keras records for the layer's call in the model's graph)
        entry, kwargs = rnn(layer.name, False), {"training": False, "mask": None}
    else:
        entry, kwargs = _entry("Bidirectional", {
            "name": layer.name, "trainable": True, "dtype": _policy(dtype), "merge_mode": "concat",
            "layer": rnn(f"forward_{layer.rnn_name}", False),
            "backward_layer": rnn(f"backward_{layer.rnn_name}", True)}, layer.width), {"mask": None}
    entry["name"] = layer.name
    entry["inbound_nodes"] = [{"args": [{"class_name": "__keras_tensor__", "config": {
        "shape": [None, None, layer.width], "dtype": dtype, "keras_history": [producer, 0, 0]}}], "kwargs": kwargs}]
    return entry


def _model_config(config: RNNConfig) -> dict[str, Any]:
    """The Functional model's config (``config.json``), keys in Keras's order, layers named as the module
    docstring says: what ``keras.saving.serialize_keras_object`` gives for that model."""
    dtype = config.dtype
    entries: list[dict[str, Any]] = [{
        "module": "keras.layers", "class_name": "InputLayer",
        "config": {"batch_shape": [None, None, config.input_size], "dtype": dtype, "sparse": False, "ragged": False,
                   "name": INPUT_NAME, "optional": False},
        "registered_name": None, "name": INPUT_NAME, "inbound_nodes": []}]
    producer = INPUT_NAME
    for layer in _layers(config):
        entries.append(_layer_entry(layer, config.num_units, dtype, producer))
        producer = layer.name
    return {"module": "keras.src.models.functional", "class_name": "Functional",
            "config": {"name": MODEL_NAME, "trainable": True, "layers": entries,
                       "input_layers": [INPUT_NAME, 0, 0], "output_layers": [producer, 0, 0]},
            "registered_name": "Functional", "build_config": {"input_shape": None}, "compile_config": {}}
