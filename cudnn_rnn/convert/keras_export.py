"""Write cuDNN RNN weights as a Keras 3 model file that ``keras.saving.load_model`` loads as it is.

    export_keras(params, config, "model.keras")        the model: a Keras 3 archive
    export_keras(params, config, "model.weights.h5")   its weights alone, as ``model.save_weights`` writes them

The model is a Functional model, batch-major as Keras is, with no custom objects (it loads with
``safe_mode=True``)::

    input_layer      InputLayer  batch_shape [None, None, I]                         x  [B, T, I]
    one layer per cuDNN layer l, each return_sequences=True, fed by the one below:
        unidirectional   LSTM | GRU(reset_after=True) | SimpleRNN(activation=...)
        bidirectional    Bidirectional(merge_mode="concat") around one of them
    output           the last layer's sequence                                       y  [B, T, D*N]

=========  =============================  ===========================================
rnn_mode   Keras layer                    auto names (layer l of its class: ``_l``)
=========  =============================  ===========================================
lstm       ``LSTM``                       lstm, lstm_1, ...
gru        ``GRU(reset_after=True)``      gru, gru_1, ...
rnn_tanh   ``SimpleRNN("tanh")``          simple_rnn, simple_rnn_1, ...
rnn_relu   ``SimpleRNN("relu")``          simple_rnn, simple_rnn_1, ...
=========  =============================  ===========================================

A bidirectional network names its layers bidirectional, bidirectional_1, ..., and the two
layers inside ``forward_<rnn>`` and ``backward_<rnn>`` (``<rnn>`` the RNN's auto name above):
the names a fresh Keras session gives, so the config and the weights agree.

The files, exactly as Keras 3 writes them (``KERAS_VERSION``):

=====================  ==============================================================================
``.keras`` member      holds (zip members in this order, all ``ZIP_STORED``)
=====================  ==============================================================================
``metadata.json``      ``{"keras_version": KERAS_VERSION, "date_saved": "2025-01-31@12:00:00"}``
``config.json``        the Functional model's config, every layer's keys as Keras writes them
``model.weights.h5``   the weights store below (a ``.weights.h5`` file is this alone)
=====================  ==============================================================================

==================================================================  ===========================================
HDF5 path (each ``vars`` group carries an attribute ``name``)       holds
==================================================================  ===========================================
``vars``                                                            nothing; name "functional"
``layers/input_layer/vars``                                         nothing; name "input_layer"
``layers/<layer>/vars``                                             nothing; name ``<layer>``
``layers/<layer>/cell/vars/0``, ``1``, ``2``                        kernel [width, G*N], recurrent_kernel
                                                                    [N, G*N], bias (LSTM [4N], SimpleRNN [N]:
                                                                    bW + bR; GRU [2, 3N]: rows bW, bR); name
                                                                    ``lstm_cell``, ``gru_cell`` or
                                                                    ``simple_rnn_cell``
``layers/<bidirectional>/{forward|backward}_layer/vars``            nothing; name ``{forward|backward}_<rnn>``
``layers/<bidirectional>/{forward|backward}_layer/cell/vars/0..2``  that direction's weights, as above
==================================================================  ===========================================

The weights are those of the ``keras`` format (``cudnn_rnn.formats._keras``: gates in Keras's
order, matrices transposed); width is I for layer 0 and D*N above. Every array has the config's
dtype; bfloat16 is stored as Keras stores it, as 2-byte opaque data with the attribute
``dtype="bfloat16"``. Since ``load_model`` runs each layer's initializers before it loads the
weights, and TensorFlow's QR (Keras's ``Orthogonal``) has no bfloat16 kernel, a bfloat16 model's
recurrent initializer is ``GlorotUniform`` (``DTYPE_INITIALIZERS``); the weights are the same.

Exactness: the model computes what :func:`cudnn_rnn.cudnn_rnn_v3` computes (inference, zero
initial state); LSTM and SimpleRNN keep only the bias sum bW + bR, which is all the math sees.
Sequences of different lengths: call the model with ``mask=`` ``[B, T]`` (True at t < length) and
every valid step is cuDNN's; past a sequence's end a unidirectional layer repeats its last output
(Keras's ``zero_output_for_mask=False``) where cuDNN writes zeros (a Bidirectional writes zeros).
A projection (num_proj > 0) cannot be held by a Keras layer and is refused; skip_input layers get
identity kernels (the ``keras`` format). Needs h5py (``pip install cudnn_rnn[convert]``); Keras
itself is not needed to write the files.

Why not Keras's own saving API (build the model, ``set_weights``, ``model.save``)? Measured with
Keras 3.15.1 on TensorFlow 2.21 (CPU), LSTM and GRU of 2-3 layers of 64 units, bidirectional and
not, float32 and bfloat16: the files of both load with ``load_model`` and compute the same outputs,
with the same weights store byte for byte and the same config.json (Keras adds
``shared_object_id``). This writer takes 3-6 ms a file (22 ms the first); Keras's 50-90 ms
(130-300 ms the first), after importing Keras and TensorFlow (2.4 s). Keras's API also needs them
installed, names the layers after what the session built before (``lstm_1``, ``functional_1``:
the weights store's paths change, unless the user's session is cleared), and cannot build a
bfloat16 model with the default ``Orthogonal`` initializer (TensorFlow has no bfloat16 QR). So the
files are written here, and Keras is the oracle that checks them (``KERAS_VERSION``,
``tests/oracle/test_export_keras_live.py``).
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
from .._containers import KERAS, KERAS_DTYPE_ATTRIBUTE, KERAS_MARKED_DTYPES, KERAS_VERSION, KERAS_WEIGHTS
from ..config import RNNConfig
from ..files import extension, write_bytes, write_through_path
from ..formats import _keras
from ..formats._core import check_config, check_params
from ..formats._table import to_format
from .readers._keras_file import CONFIG_MEMBER, METADATA_MEMBER, WEIGHTS_MEMBER

__all__ = ["export_keras", "write_keras", "KERAS_VERSION", "ENDINGS", "ARCHIVE_MEMBERS", "MODE_LAYERS"]

#: Keras's format of metadata.json's date_saved
DATE_FORMAT = "%Y-%m-%d@%H:%M:%S"

#: path ending -> what is written there
ENDINGS: dict[str, str] = {KERAS: "the model (a Keras 3 archive)", KERAS_WEIGHTS: "its weights alone"}

#: the members of a .keras archive, in the order Keras writes them
ARCHIVE_MEMBERS: tuple[str, ...] = (METADATA_MEMBER, CONFIG_MEMBER, WEIGHTS_MEMBER)

MODEL_NAME, INPUT_NAME = "functional", "input_layer"
BIDIRECTIONAL = "bidirectional"


@dataclass(frozen=True)
class KerasLayer:
    """The Keras layer of one cuDNN mode.

    Attributes:
        class_name: Keras's class.
        auto_name: the name Keras gives its first instance (the next ones: ``_1``, ``_2``, ...), and the
            group of a model's weights store that holds it.
        cell_name: the name of its cell, recorded in the ``cell/vars`` group.
        activation: its ``activation``.
    """

    class_name: str
    auto_name: str
    cell_name: str
    activation: str = "tanh"


#: rnn_mode -> its Keras layer
MODE_LAYERS: dict[str, KerasLayer] = {
    "lstm": KerasLayer("LSTM", "lstm", "lstm_cell"),
    "gru": KerasLayer("GRU", "gru", "gru_cell"),
    "rnn_tanh": KerasLayer("SimpleRNN", "simple_rnn", "simple_rnn_cell", "tanh"),
    "rnn_relu": KerasLayer("SimpleRNN", "simple_rnn", "simple_rnn_cell", "relu"),
}

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
    "recurrent_activation": "sigmoid", "use_bias": True, "unit_forget_bias": True,
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

#: layer class -> the keyword arguments Keras records for its call in the model's graph
CALL_KWARGS: dict[str, dict[str, Any]] = {
    "Bidirectional": {"mask": None},
    **{layer.class_name: {"training": False, "mask": None} for layer in MODE_LAYERS.values()},
}


def _import_h5py() -> Any:  # h5py has no type information
    try:
        import h5py
    except ImportError as error:  # pragma: no cover - exercised only where h5py is absent
        raise ImportError("export_keras needs the 'h5py' package: pip install cudnn_rnn[convert]") from error
    return h5py


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
        path: ``*.keras`` for the model (``metadata.json``, ``config.json``, ``model.weights.h5``),
            ``*.weights.h5`` for its weights alone (what ``model.save_weights`` writes); written
            atomically. The model takes x ``[B, T, input_size]`` and returns y ``[B, T, D*num_units]``.

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
    """:func:`export_keras`, the file's kind given rather than read from the path's ending (``write_file``'s
    ``.keras`` and ``.weights.h5`` rows, which have looked the ending up themselves).

    Args:
        params: as for :func:`export_keras`.
        config: as for :func:`export_keras`.
        path: the file to write, whatever its name.
        weights_only: write the weights file (``model.save_weights``'s); else the ``.keras`` model.

    Raises:
        As :func:`export_keras`, a path's ending aside.
    """
    config = check_config(config)
    refusal = _keras.refusal(config)
    if refusal:
        raise ValueError(f"export_keras: {refusal}")
    check_params(params, config)
    if np.dtype(params.dtype).name != config.dtype:
        raise TypeError(f"params.dtype must be config.dtype ({config.dtype}); got {np.dtype(params.dtype).name}")
    h5py = _import_h5py()
    weights = {name: np.ascontiguousarray(to_host(value))
               for name, value in to_format("keras", params, config).value.items()}
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
    kind: KerasLayer
    directions: int


def _numbered(stem: str, index: int) -> str:
    return stem if index == 0 else f"{stem}_{index}"


def _layers(config: RNNConfig) -> list[_Layer]:
    kind, d = MODE_LAYERS[config.rnn_mode], config.num_directions
    result = []
    for layer in range(config.num_layers):
        rnn_name = _numbered(kind.auto_name, layer)
        name = _numbered(BIDIRECTIONAL, layer) if d == 2 else rnn_name
        result.append(_Layer(layer, name, rnn_name, config.layer_input_size(layer), kind, d))
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
                side = _keras.DIRECTION_NAMES[direction]
                _vars(file, f"{where}/{_keras.DIRECTION_LAYERS[direction]}", f"{side}_{layer.rnn_name}")
                _cell(file, f"{where}/{_keras.DIRECTION_LAYERS[direction]}", layer, direction, weights)


def _vars(file: Any, where: str, name: str) -> Any:
    group = file.create_group(f"{where}/vars" if where else "vars")
    group.attrs["name"] = name
    return group


def _cell(file: Any, where: str, layer: _Layer, direction: int, weights: dict[str, np.ndarray]) -> None:
    """A direction's kernel, recurrent_kernel and bias as ``<where>/cell/vars/0, 1, 2``."""
    group = _vars(file, f"{where}/cell", layer.kind.cell_name)
    for index, field in enumerate(_keras.FIELDS):
        value = weights[_keras.TENSOR_NAMES.name(field, layer.index, direction)]
        if value.dtype.name in KERAS_MARKED_DTYPES:
            dataset = group.create_dataset(str(index), data=value)
            dataset.attrs[KERAS_DTYPE_ATTRIBUTE] = value.dtype.name
        else:
            group[str(index)] = value


# ---- config.json ------------------------------------------------------------------------------------
def _policy(dtype: str) -> dict[str, Any]:
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": dtype}, "registered_name": None}


def _initializer(class_name: str) -> dict[str, Any]:
    return {"module": "keras.initializers", "class_name": class_name, "config": dict(INITIALIZERS[class_name]),
            "registered_name": None}


def _rnn_config(layer: _Layer, name: str, units: int, dtype: str, backwards: bool) -> dict[str, Any]:
    """An RNN layer's config; Bidirectional sets zero_output_for_mask in the layers it wraps."""
    initializers = {**DEFAULT_INITIALIZERS, **DTYPE_INITIALIZERS.get(dtype, {})}
    own: dict[str, Any] = {"name": name, "dtype": _policy(dtype), "go_backwards": backwards,
                           "zero_output_for_mask": layer.directions == 2, "units": units,
                           "activation": layer.kind.activation,
                           **{key: _initializer(value) for key, value in initializers.items()}}
    values = {**CONFIG_VALUES, **own}
    return {key: values[key] for key in CONFIG_KEYS[layer.kind.class_name]}


def _entry(class_name: str, config: dict[str, Any], width: int) -> dict[str, Any]:
    return {"module": "keras.layers", "class_name": class_name, "config": config, "registered_name": None,
            "build_config": {"input_shape": [None, None, width]}}


def _tensor(width: int, dtype: str, producer: str) -> dict[str, Any]:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None, None, width], "dtype": dtype, "keras_history": [producer, 0, 0]}}


def _layer_entry(layer: _Layer, units: int, dtype: str, producer: str) -> dict[str, Any]:
    def rnn(name: str, backwards: bool) -> dict[str, Any]:
        return _entry(layer.kind.class_name, _rnn_config(layer, name, units, dtype, backwards), layer.width)

    if layer.directions == 1:
        entry, class_name = rnn(layer.name, False), layer.kind.class_name
    else:
        class_name = "Bidirectional"
        entry = _entry(class_name, {"name": layer.name, "trainable": True, "dtype": _policy(dtype),
                                    "merge_mode": "concat", "layer": rnn(f"forward_{layer.rnn_name}", False),
                                    "backward_layer": rnn(f"backward_{layer.rnn_name}", True)}, layer.width)
    entry["name"] = layer.name
    entry["inbound_nodes"] = [{"args": [_tensor(layer.width, dtype, producer)],
                               "kwargs": dict(CALL_KWARGS[class_name])}]
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
