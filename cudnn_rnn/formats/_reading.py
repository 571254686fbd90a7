"""Reading a configuration off a format's tensor names and shapes: what a file's readers ask of its format
(:mod:`._core`, which holds the rest of a format's facts, exports these names too)."""

from __future__ import annotations

import functools
import re
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence, TypeVar

if TYPE_CHECKING:
    from ._core import FormatSpec

__all__ = ["MODE_BY_GATES", "TensorNames", "ParsedName", "name_pattern", "TensorShapes", "ConfigRead", "ShapeReading"]


#: gates per cell -> rnn_mode (one gate: rnn_tanh or rnn_relu, which no shape tells apart)
MODE_BY_GATES: dict[int, str | None] = {4: "lstm", 3: "gru", 1: None}

_Parsed = TypeVar("_Parsed")


# ---- tensor names -------------------------------------------------------------------------------
def name_pattern(template: str, choices: Mapping[str, Sequence[str]] | None = None) -> str:
    """The regular expression of the names ``template`` spells.

    Each ``{placeholder}`` becomes a named group: one of ``choices[placeholder]`` where given,
    else a decimal number (a layer or an index). Match it whole (``re.fullmatch``).
    """
    choices = choices or {}
    parts = []
    for literal, placeholder, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if placeholder is not None:
            spellings = choices.get(placeholder)
            alternatives = r"\d+" if spellings is None else "|".join(map(re.escape, dict.fromkeys(spellings)))
            parts.append(f"(?P<{placeholder}>{alternatives})")
    return "".join(parts)


class ParsedName(NamedTuple):
    """What a tensor name says: its field, layer and direction (0 forward, 1 backward)."""

    field: str
    layer: int
    direction: int


@dataclass(frozen=True)
class TensorNames:
    """A format's tensor names: one template per field, spelling a layer and a direction.

    ``templates[field]`` holds ``{layer}`` (or another number, e.g. canonical's ``{index}``) and
    the placeholder ``direction_key``, spelt ``directions[d]`` for direction d: torch's
    ``"weight_ih_l{layer}{suffix}"`` with suffixes ``("", "_reverse")`` names ``weight_ih_l1_reverse``.
    A template without placeholders names one tensor (gru_block_cell's ``w_ru``).
    """

    templates: Mapping[str, str]
    directions: tuple[str, ...] = ("",)
    direction_key: str = "direction"

    def name(self, field: str, layer: int | str = 0, direction: int = 0, **numbers: int) -> str:
        """The tensor name of ``field`` of ``layer`` and ``direction`` (``numbers`` fill other placeholders)."""
        return self.templates[field].format(layer=layer, **numbers,
                                            **{self.direction_key: self.directions[direction]})

    @functools.cached_property
    def _patterns(self) -> dict[str, re.Pattern[str]]:
        choices = {self.direction_key: self.directions}
        return {field: re.compile(name_pattern(template, choices)) for field, template in self.templates.items()}

    def parse(self, name: str) -> ParsedName | None:
        """The field, layer and direction ``name`` spells, or None when it is not one of these names."""
        for field, pattern in self._patterns.items():
            match = pattern.fullmatch(name)
            if match is not None:
                groups = match.groupdict()
                direction = self.directions.index(groups[self.direction_key]) if self.direction_key in groups else 0
                return ParsedName(field, int(groups.get("layer") or 0), direction)
        return None

    def first(self) -> str:
        """The first field's name in layer 0 (every number 0), direction 0: one every file of the format has."""
        field = next(iter(self.templates))
        numbers = {placeholder: 0 for _, placeholder, _, _ in string.Formatter().parse(self.templates[field])
                   if placeholder is not None and placeholder != self.direction_key}
        return self.name(field, **numbers)

    def signature(self) -> re.Pattern[str]:
        """The pattern of :meth:`first`, which no other format's tensors are named."""
        return re.compile(f"^{re.escape(self.first())}$")


@dataclass(frozen=True)
class TensorShapes:
    """The names and shapes of the tensors that should form one RNN of format ``fmt``, read
    with the messages every format shares (each a ValueError naming the format and the tensor)."""

    fmt: str
    shapes: Mapping[str, tuple[int, ...]]

    def __contains__(self, name: object) -> bool:
        return name in self.shapes

    def fail(self, reason: str) -> ValueError:
        return ValueError(f"the tensors do not form a {self.fmt!r} RNN: {reason}")

    def shape(self, name: str, ndim: int = 2) -> tuple[int, ...]:
        """The shape of tensor ``name``, which must be there, with ``ndim`` axes and no zero size."""
        if name not in self.shapes:
            raise self.fail(f"tensor {name!r} is missing; found {sorted(self.shapes)[:12]}")
        shape = self.shapes[name]
        if len(shape) != ndim or 0 in shape:
            raise self.fail(f"tensor {name!r} must be a non-empty {ndim}-D array; got shape {shape}")
        return shape

    def parse(self, parse: Callable[[str], _Parsed | None], described: str) -> dict[str, _Parsed]:
        """``{name: parse(name)}`` for every tensor; names that ``parse`` refuses are named in the ValueError."""
        parsed = {name: parse(name) for name in self.shapes}
        strangers = [name for name, value in parsed.items() if value is None]
        if strangers:
            raise self.fail(f"unexpected tensor(s) {strangers[:8]} beside {described}")
        return parsed  # type: ignore[return-value]

    def layer_count(self, indices: set[int], what: str) -> int:
        """The number of layers, from the layer indices found, which must run 0, 1, ... without a gap."""
        if not indices:
            raise self.fail(f"no {what} found")
        count = max(indices) + 1
        missing = [i for i in range(min(count, len(indices) + 8)) if i not in indices][:8]  # the first 8 at most
        if missing:
            more = f" and {count - len(indices) - len(missing)} more" if count - len(indices) > len(missing) else ""
            raise self.fail(f"layer(s) {missing}{more} are missing ({what} found for layers {sorted(indices)})")
        return count


@dataclass(frozen=True)
class ConfigRead:
    """What a format's tensor names and shapes say: RNNConfig fields, and why rnn_mode is a
    question (rnn_tanh or rnn_relu) when the shapes cannot tell it, else None."""

    fields: dict[str, Any]
    mode_question: str | None = None


@dataclass(frozen=True)
class ShapeReading:
    """How a format whose tensors are alike in every layer tells its configuration.

    The layers are counted and the directions told (any backward name: 2) by the names, and
    the sizes read off layer 0's tensors (its first direction): ``sizes[size] = (field, axis)``,
    in order. Sizes: ``gate_rows`` G*N, ``num_units`` N, ``state_size`` P (the recurrent
    input: num_proj or N), ``input_size`` I, ``stitched_rows`` I + P (input and recurrent
    matrices stacked), ``num_directions`` D. N is P and P is N where only one is read, I is
    ``stitched_rows`` - P where not read, and G = gate_rows / N gives the mode.

    Attributes:
        sizes: size -> (field, axis), as above.
        ndim: the number of axes of the tensors the sizes are read off.
        described: what the names are, for the message naming tensors that do not belong;
            None for one layer's fixed names (the shape check names a stranger).
        layers_from: the field whose layer indices count the layers; None: every name's.
        projection: the field of the LSTM projection, read where present (num_proj = P);
            without it num_proj = 0.
        mode: the one rnn_mode the format holds; None: G tells it.
        mode_question: why one gate (rnn_tanh or rnn_relu) is a question.
        refuse: ``refuse(tensors, fields)`` -> why the tensors, read as ``fields``, are not
            this format's after all, or None.
    """

    sizes: Mapping[str, tuple[str, int]]
    ndim: int = 2
    described: str | None = None
    layers_from: str | None = None
    projection: str | None = None
    mode: str | None = None
    mode_question: str = ""
    refuse: Callable[[TensorShapes, Mapping[str, Any]], str | None] | None = None

    def __call__(self, spec: FormatSpec, tensors: TensorShapes) -> ConfigRead:
        """Read ``tensors`` as format ``spec``'s (the one reading all such formats share)."""
        names = spec.names
        assert names is not None, f"format {spec.name!r} reads its shapes by its names"
        layers, directions = 1, 1
        if self.described is not None:
            parsed = tensors.parse(names.parse, self.described).values()
            counted = self.layers_from or next(iter(names.templates))
            layers = tensors.layer_count({p.layer for p in parsed if self.layers_from in (None, p.field)},
                                         names.name(counted, "{l}"))
            directions = 2 if any(p.direction for p in parsed) else 1
        projected = self.projection is not None and names.name(self.projection) in tensors
        read = {size: tensors.shape(names.name(field), self.ndim)[axis] for size, (field, axis) in self.sizes.items()
                if field != self.projection or projected}
        units = read.get("num_units", read.get("state_size"))
        assert units is not None, f"format {spec.name!r} reads num_units or state_size"
        state = read.get("state_size", units)
        mode = self.mode or MODE_BY_GATES[self._gates(tensors, read["gate_rows"], units,
                                                      names.name(self.sizes["gate_rows"][0]))]
        fields: dict[str, Any] = {"rnn_mode": mode} if self.mode else {}  # a format's one mode comes first
        fields.update(num_layers=layers, num_units=units,
                      input_size=read["input_size"] if "input_size" in read else read["stitched_rows"] - state,
                      direction="bidirectional" if read.get("num_directions", directions) == 2 else "unidirectional",
                      num_proj=state if projected else 0, input_mode="linear_input")
        if mode is not None:
            fields["rnn_mode"] = mode
        refusal = self.refuse(tensors, fields) if self.refuse else None
        if refusal:
            raise tensors.fail(refusal)
        return ConfigRead(fields, None if mode else self.mode_question)

    @staticmethod
    def _gates(tensors: TensorShapes, rows: int, units: int, name: str) -> int:
        gates = rows // units if units and rows % units == 0 else 0
        if gates not in MODE_BY_GATES:
            raise tensors.fail(f"tensor {name!r} has {rows} gate rows for {units} units: {rows}/{units} is not "
                               "1 (RNN), 3 (GRU) or 4 (LSTM) gates")
        return gates
