"""Read a configuration off the tensor names and shapes of a named format.

    infer(fmt, tensors) -> Inferred(tensors, fields, questions, notes)

Each format's rule (:data:`RULES`) reads the layer count and direction from the names and the
sizes from a few shapes (torch: ``weight_ih_l0`` is [G*N, I], ``weight_hh_l0`` [G*N, P],
``weight_hr_l0`` [P, N]; G gives the mode). The result is then checked against the format's
own expected shapes, so every tensor must fit the configuration read, or a ValueError names
the one that does not. The biases a format lets a file leave out (its spec's ``omitted_biases``:
PyTorch ``bias=False``, Keras ``use_bias=False``, ONNX without ``B``) are added as zeros shaped
as the format's shapes say, noted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ...config import RNNConfig
from .._core import FormatSpec, check_tensors
from .._formats import FORMAT_SPECS
from ._found import CONFIG_FIELDS, Question, common_dtype, questions_for_all

__all__ = ["Inferred", "infer", "RULES", "MODE_BY_GATES", "SINGLE_GATE_QUESTION"]

#: gates per cell -> rnn_mode (one gate: rnn_tanh or rnn_relu, which no shape tells apart)
MODE_BY_GATES: dict[int, str | None] = {4: "lstm", 3: "gru", 1: None}

SINGLE_GATE_QUESTION = ("rnn_tanh", "rnn_relu")


@dataclass
class Inferred:
    """What the names and shapes say: tensors (with zero biases added where the format omits them),
    config fields, questions for what they cannot say, and notes."""

    tensors: dict[str, np.ndarray]
    fields: dict[str, Any]
    questions: dict[str, Question] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _fail(fmt: str, reason: str) -> ValueError:
    return ValueError(f"the tensors do not form a {fmt!r} RNN: {reason}")


def _matrix(fmt: str, tensors: Mapping[str, np.ndarray], name: str, ndim: int = 2) -> tuple[int, ...]:
    if name not in tensors:
        raise _fail(fmt, f"tensor {name!r} is missing; found {sorted(tensors)[:12]}")
    shape = tuple(int(d) for d in np.shape(tensors[name]))
    if len(shape) != ndim or 0 in shape:
        raise _fail(fmt, f"tensor {name!r} must be a non-empty {ndim}-D array; got shape {shape}")
    return shape


def _gates(fmt: str, rows: int, units: int, name: str) -> int:
    gates = rows // units if units and rows % units == 0 else 0
    if gates not in MODE_BY_GATES:
        raise _fail(fmt, f"tensor {name!r} has {rows} gate rows for {units} units: {rows}/{units} is not "
                         "1 (RNN), 3 (GRU) or 4 (LSTM) gates")
    return gates


def _mode_fields(result: Inferred, gates: int, why: str) -> None:
    mode = MODE_BY_GATES[gates]
    if mode is None:
        result.questions["rnn_mode"] = Question(SINGLE_GATE_QUESTION, why)
    else:
        result.fields["rnn_mode"] = mode


def _parse(fmt: str, tensors: Mapping[str, np.ndarray], pattern: re.Pattern[str], expected: str) -> dict[str, re.Match]:
    """Every tensor name matched by ``pattern``; a ValueError lists names that do not belong."""
    parsed = {name: pattern.match(name) for name in tensors}
    strangers = [name for name, match in parsed.items() if match is None]
    if strangers:
        raise _fail(fmt, f"unexpected tensor(s) {strangers[:8]} beside {expected}")
    return parsed  # type: ignore[return-value]


def _layer_indices(fmt: str, indices: set[int], what: str) -> int:
    if not indices:
        raise _fail(fmt, f"no {what} found")
    count = max(indices) + 1
    missing = sorted(set(range(count)) - indices)
    if missing:
        raise _fail(fmt, f"layer(s) {missing} are missing ({what} found for layers {sorted(indices)})")
    return count


# ---- torch: weight_ih_l{l}[_reverse], weight_hh, bias_ih, bias_hh, weight_hr --------------------
_TORCH_KEY = re.compile(r"^(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?$")


def _torch(tensors: dict[str, np.ndarray]) -> Inferred:
    fmt = "torch"
    parsed = _parse(fmt, tensors, _TORCH_KEY, "nn.LSTM/GRU/RNN weights")
    layers = _layer_indices(fmt, {int(m.group(2)) for m in parsed.values() if m.group(1) == "weight_ih"},
                            "weight_ih_l{k}")
    directions = 2 if any(m.group(3) for m in parsed.values()) else 1
    gn, width = _matrix(fmt, tensors, "weight_ih_l0")
    _, state = _matrix(fmt, tensors, "weight_hh_l0")
    projection = "weight_hr_l0" in tensors
    units = _matrix(fmt, tensors, "weight_hr_l0")[1] if projection else state
    gates = _gates(fmt, gn, units, "weight_ih_l0")
    result = Inferred(dict(tensors), {
        "num_layers": layers, "num_units": units, "input_size": width,
        "direction": "bidirectional" if directions == 2 else "unidirectional",
        "num_proj": state if projection else 0, "input_mode": "linear_input"})
    _mode_fields(result, gates, "an nn.RNN state_dict does not say its nonlinearity")
    return result


# ---- keras: layer_{l}/{forward|backward}/{kernel, recurrent_kernel, bias} ------------------------
_KERAS_KEY = re.compile(r"^layer_(\d+)/(forward|backward)/(kernel|recurrent_kernel|bias)$")


def _keras(tensors: dict[str, np.ndarray]) -> Inferred:
    fmt = "keras"
    parsed = _parse(fmt, tensors, _KERAS_KEY, "layer_{l}/{forward|backward}/kernel, ...")
    layers = _layer_indices(fmt, {int(m.group(1)) for m in parsed.values()}, "layer_{l}/forward/kernel")
    directions = 2 if any(m.group(2) == "backward" for m in parsed.values()) else 1
    width, gn = _matrix(fmt, tensors, "layer_0/forward/kernel")
    units, _ = _matrix(fmt, tensors, "layer_0/forward/recurrent_kernel")
    gates = _gates(fmt, gn, units, "layer_0/forward/kernel")
    result = Inferred(dict(tensors), {
        "num_layers": layers, "num_units": units, "input_size": width,
        "direction": "bidirectional" if directions == 2 else "unidirectional", "num_proj": 0,
        "input_mode": "linear_input"})
    _mode_fields(result, gates, "a SimpleRNN's weights do not say its activation")
    bias = tensors.get("layer_0/forward/bias")
    if gates == 3 and bias is not None and np.ndim(bias) == 1:
        raise _fail(fmt, "a GRU bias of shape (3N,) belongs to GRU(reset_after=False), a reset-before GRU that "
                         "cuDNN cannot run; convert it with the 'gru_block_cell' or 'mygrad' format instead")
    return result


# ---- onnx: layer_{l}/W [D, G*N, I], R [D, G*N, N], B [D, 2*G*N] ---------------------------------
_ONNX_KEY = re.compile(r"^layer_(\d+)/(W|R|B)$")


def _onnx(tensors: dict[str, np.ndarray]) -> Inferred:
    fmt = "onnx"
    parsed = _parse(fmt, tensors, _ONNX_KEY, "layer_{l}/W, R, B")
    layers = _layer_indices(fmt, {int(m.group(1)) for m in parsed.values() if m.group(2) == "W"}, "layer_{l}/W")
    directions, gn, width = _matrix(fmt, tensors, "layer_0/W", 3)
    _, _, units = _matrix(fmt, tensors, "layer_0/R", 3)
    gates = _gates(fmt, gn, units, "layer_0/W")
    if directions not in (1, 2):
        raise _fail(fmt, f"tensor 'layer_0/W' has {directions} directions; ONNX has 1 or 2")
    result = Inferred(dict(tensors), {
        "num_layers": layers, "num_units": units, "input_size": width,
        "direction": "bidirectional" if directions == 2 else "unidirectional", "num_proj": 0,
        "input_mode": "linear_input"})
    _mode_fields(result, gates, "an ONNX RNN's weights do not say its activation")
    return result


# ---- tf_cell: rnn/multi_rnn_cell/cell_{l}/{cell}/... or stack_bidirectional_rnn/cell_{l}/... -----
_TF_CELL_KEY = re.compile(
    r"^(?:rnn/multi_rnn_cell/cell_(\d+)|stack_bidirectional_rnn/cell_(\d+)/bidirectional_rnn/(fw|bw))"
    r"/(cudnn_compatible_lstm_cell|cudnn_compatible_gru_cell|basic_rnn_cell)/(.+)$")
_TF_CELL_MODES: dict[str, str | None] = {"cudnn_compatible_lstm_cell": "lstm", "cudnn_compatible_gru_cell": "gru",
                                         "basic_rnn_cell": None}


def _tf_cell(tensors: dict[str, np.ndarray]) -> Inferred:
    fmt = "tf_cell"
    parsed = _parse(fmt, tensors, _TF_CELL_KEY, "TF's cuDNN-compatible cell variables")
    cells = {m.group(4) for m in parsed.values()}
    if len(cells) != 1:
        raise _fail(fmt, f"the variables mix cell types {sorted(cells)}")
    cell = cells.pop()
    bidirectional = any(m.group(3) for m in parsed.values())
    layers = _layer_indices(fmt, {int(m.group(1) or m.group(2)) for m in parsed.values()}, "cell_{l}")
    prefix = ("stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/" if bidirectional
              else "rnn/multi_rnn_cell/cell_0/") + cell
    if cell == "cudnn_compatible_gru_cell":
        width_plus_units, two_units = _matrix(fmt, tensors, f"{prefix}/gates/kernel")
        units = two_units // 2
        width, state, projection = width_plus_units - units, units, 0
    else:
        width_plus_state, gn = _matrix(fmt, tensors, f"{prefix}/kernel")
        if f"{prefix}/projection/kernel" in tensors:
            units, state = _matrix(fmt, tensors, f"{prefix}/projection/kernel")
            projection = state
        else:
            gates = 4 if cell == "cudnn_compatible_lstm_cell" else 1
            units = state = gn // gates
            projection = 0
        width = width_plus_state - state
    if width < 1 or units < 1:
        raise _fail(fmt, f"the shapes of {prefix}/... leave no room for an input (width {width}, units {units})")
    result = Inferred(dict(tensors), {
        "num_layers": layers, "num_units": units, "input_size": width,
        "direction": "bidirectional" if bidirectional else "unidirectional", "num_proj": projection,
        "input_mode": "linear_input"})
    mode = _TF_CELL_MODES[cell]
    if mode is None:
        result.questions["rnn_mode"] = Question(SINGLE_GATE_QUESTION, "a basic_rnn_cell's variables do not say its "
                                                                      "activation")
    else:
        result.fields["rnn_mode"] = mode
    return result


# ---- the reset-before GRUs ------------------------------------------------------------------------
def _gru_block_cell(tensors: dict[str, np.ndarray]) -> Inferred:
    rows, units = _matrix("gru_block_cell", tensors, "w_c")
    return Inferred(dict(tensors), {"rnn_mode": "gru", "num_layers": 1, "num_units": units, "input_size": rows - units,
                                    "direction": "unidirectional", "num_proj": 0, "input_mode": "linear_input"})


def _mygrad(tensors: dict[str, np.ndarray]) -> Inferred:
    width, units = _matrix("mygrad", tensors, "Uz")
    return Inferred(dict(tensors), {"rnn_mode": "gru", "num_layers": 1, "num_units": units, "input_size": width,
                                    "direction": "unidirectional", "num_proj": 0, "input_mode": "linear_input"})


#: format -> its rule; formats without a rule (canonical) need every size given
RULES: dict[str, Callable[[dict[str, np.ndarray]], Inferred]] = {
    "torch": _torch,
    "keras": _keras,
    "onnx": _onnx,
    "tf_cell": _tf_cell,
    "gru_block_cell": _gru_block_cell,
    "mygrad": _mygrad,
}


def infer(fmt: str, tensors: Mapping[str, np.ndarray]) -> Inferred:
    """The configuration the names and shapes of ``fmt``'s ``tensors`` say, checked against them.

    A format without a rule gets a question for every field but dtype.

    Raises:
        ValueError: the names or shapes do not form one RNN of ``fmt`` (naming the tensor).
        TypeError: mixed dtypes (naming the tensor whose dtype differs).
    """
    dtype = common_dtype(tensors, f"format {fmt!r}")
    rule = RULES.get(fmt)
    if rule is None:
        return Inferred(dict(tensors), {"dtype": dtype}, questions_for_all(f"format {fmt!r} does not tell the sizes"))
    result = rule(dict(tensors))
    result.fields["dtype"] = dtype
    trial = {**result.fields, **{name: question.choices[0] for name, question in result.questions.items()
                                 if question.choices}}
    try:
        config = RNNConfig(**{name: trial[name] for name in CONFIG_FIELDS})
    except (TypeError, ValueError) as error:
        raise _fail(fmt, f"the shapes give an invalid configuration: {error}") from None
    spec = FORMAT_SPECS[fmt]
    refusal = spec.refusal(config)
    if refusal:
        raise _fail(fmt, refusal)
    result.notes += _add_omitted_biases(spec, result.tensors, config)
    check_tensors(fmt, result.tensors, spec.shapes(config), config)
    return result


def _add_omitted_biases(spec: FormatSpec, tensors: dict[str, np.ndarray], config: RNNConfig) -> list[str]:
    """Add to ``tensors`` the zero biases that ``spec`` lets a file leave out and this one does,
    shaped as the spec's shapes for ``config`` say; returns the notes saying so."""
    omitted, names = spec.omitted_biases, spec.names
    if omitted is None or names is None:
        return []
    fields = omitted.fields

    def scope(layer: int) -> int | None:  # what has all of the biases or none
        return layer if omitted.per_layer else None

    held = {scope(parsed.layer) for parsed in map(names.parse, tensors) if parsed and parsed.field in fields}
    dtype = next(iter(tensors.values())).dtype
    notes: list[str] = []
    for name, shape in spec.shapes(config).items():
        parsed = names.parse(name)
        if parsed is not None and parsed.field in fields and scope(parsed.layer) not in held:
            tensors[name] = np.zeros(shape, dtype)
            note = omitted.note.format(layer=parsed.layer)
            notes += [] if note in notes else [note]
    return notes
