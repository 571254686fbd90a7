"""Read a configuration off the tensor names and shapes of a named format.

    infer(fmt, tensors) -> Inferred(tensors, fields, questions, notes)

Each format's spec says how (its ``reading``, see :class:`~cudnn_rnn.formats._reading.ShapeReading`):
the layer count and direction come from the names, the sizes from a few shapes (torch:
``weight_ih_l0`` is [G*N, I], ``weight_hh_l0`` [G*N, P], ``weight_hr_l0`` [P, N]; G gives the
mode). The result is then checked against the format's own expected shapes, so every tensor
must fit the configuration read, or a ValueError names the one that does not. The biases a
format lets a file leave out (its spec's ``omitted_biases``: PyTorch ``bias=False``, Keras
``use_bias=False``, ONNX without ``B``) are added as zeros shaped as the format's shapes say, noted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ...config import RNNConfig
from ...formats import FORMAT_SPECS, FormatSpec, TensorShapes, check_tensors
from ._found import CONFIG_FIELDS, Question, common_dtype, questions_for_all

__all__ = ["infer", "SINGLE_GATE_QUESTION"]

SINGLE_GATE_QUESTION = ("rnn_tanh", "rnn_relu")


@dataclass
class Inferred:
    """What the names and shapes say: tensors (with zero biases added where the format omits them),
    config fields, questions for what they cannot say, and notes."""

    tensors: dict[str, np.ndarray]
    fields: dict[str, Any]
    questions: dict[str, Question] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def infer(fmt: str, tensors: Mapping[str, np.ndarray], where: str | None = None) -> Inferred:
    """The configuration the names and shapes of ``fmt``'s ``tensors`` say, checked against them.

    A format without a reading gets a question for every field but dtype. ``where`` (the RNN, in
    the file's terms) opens a ValueError's message: ``"{where}: ..."``.

    Raises:
        ValueError: the names or shapes do not form one RNN of ``fmt`` (naming the tensor).
        TypeError: mixed dtypes (naming the tensor whose dtype differs).
    """
    try:
        return _infer(fmt, tensors)
    except ValueError as error:
        if where is None:
            raise
        raise ValueError(f"{where}: {error}") from None


def _infer(fmt: str, tensors: Mapping[str, np.ndarray]) -> Inferred:
    dtype = common_dtype(tensors, f"format {fmt!r}")
    spec = FORMAT_SPECS.get(fmt)
    if spec is None or spec.reading is None:
        return Inferred(dict(tensors), {"dtype": dtype}, questions_for_all(f"format {fmt!r} does not tell the sizes"))
    shapes = TensorShapes(fmt, {name: tuple(int(d) for d in np.shape(value)) for name, value in tensors.items()})
    read = spec.reading(spec, shapes)
    result = Inferred(dict(tensors), {**read.fields, "dtype": dtype})
    if read.mode_question is not None:
        result.questions["rnn_mode"] = Question(SINGLE_GATE_QUESTION, read.mode_question)
    trial = {**result.fields, **{name: question.choices[0] for name, question in result.questions.items()
                                 if question.choices}}
    try:
        config = RNNConfig(**{name: trial[name] for name in CONFIG_FIELDS})
    except (TypeError, ValueError) as error:
        raise shapes.fail(f"the shapes give an invalid configuration: {error}") from None
    refusal = spec.refusal(config)
    if refusal:
        raise shapes.fail(refusal)
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
