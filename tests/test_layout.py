"""The params layout: sizes, offsets, canonical order, exact round trips and named errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudnn_rnn import cudnn_rnn_canonical_to_params, cudnn_rnn_params_size, cudnn_rnn_params_to_canonical
from cudnn_rnn.config import RNNConfig
from cudnn_rnn.layout import (
    PROJECTION_ID,
    UNCONFIRMED,
    LayoutAssumptions,
    ParamEntry,
    entry_counts,
    params_layout,
    params_size,
)


def expected_size(mode: str, layers: int, units: int, inputs: int, dirs: int, proj: int, skip: bool) -> int:
    """Closed form: per pseudo-layer G*N*(width + P) + 2*G*N (+ P*N projection)."""
    g = {"lstm": 4, "gru": 3, "rnn_relu": 1, "rnn_tanh": 1}[mode]
    p = proj or units
    total = 0
    for layer in range(layers):
        width = 0 if (layer == 0 and skip) else (inputs if layer == 0 else dirs * p)
        total += dirs * (g * units * (width + p) + 2 * g * units + (p * units if proj else 0))
    return total


configs = st.builds(
    lambda mode, layers, units, inputs, bi, proj, skip: dict(
        rnn_mode=mode, num_layers=layers, num_units=units, input_size=units if skip else inputs,
        direction="bidirectional" if bi else "unidirectional",
        num_proj=(proj % units) if mode == "lstm" else 0, input_mode="skip_input" if skip else "linear_input"),
    st.sampled_from(["lstm", "gru", "rnn_relu", "rnn_tanh"]), st.integers(1, 3), st.integers(1, 6),
    st.integers(1, 6), st.booleans(), st.integers(0, 5), st.booleans())


@settings(max_examples=150, deadline=None)
@given(configs)
def test_size_matches_closed_form(kw: dict) -> None:
    size = cudnn_rnn_params_size(kw["num_layers"], kw["num_units"], kw["input_size"], rnn_mode=kw["rnn_mode"],
                                 input_mode=kw["input_mode"], direction=kw["direction"], num_proj=kw["num_proj"])
    dirs = 2 if kw["direction"] == "bidirectional" else 1
    assert size == expected_size(kw["rnn_mode"], kw["num_layers"], kw["num_units"], kw["input_size"], dirs,
                                 kw["num_proj"], kw["input_mode"] == "skip_input")


@settings(max_examples=150, deadline=None)
@given(configs, st.sampled_from([np.float16, np.float32, np.float64]))
def test_entries_tile_the_buffer_and_round_trip_exactly(kw: dict, dtype: type) -> None:
    layers, units, inputs = kw.pop("num_layers"), kw.pop("num_units"), kw.pop("input_size")
    config = RNNConfig(kw["rnn_mode"], layers, units, inputs, input_mode=kw["input_mode"],
                       direction=kw["direction"], num_proj=kw["num_proj"])
    layout = params_layout(config)
    spans = sorted((e.offset, e.stop) for e in layout.weights + layout.biases)
    assert spans[0][0] == 0 and spans[-1][1] == layout.size
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "entries overlap or leave gaps"
    params = np.random.default_rng(0).standard_normal(layout.size).astype(dtype)
    weights, biases = cudnn_rnn_params_to_canonical(layers, units, inputs, params, **kw)
    assert len(weights) == len(layout.weights) and len(biases) == len(layout.biases)
    back = cudnn_rnn_canonical_to_params(layers, units, inputs, weights, biases, **kw)
    assert back.dtype == dtype and np.array_equal(back, params)
    weights2, biases2 = cudnn_rnn_params_to_canonical(layers, units, inputs, back, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(weights + biases, weights2 + biases2))


def test_matrices_first_then_biases_in_linlayer_order() -> None:
    config = RNNConfig("gru", 2, 3, 2, direction="bidirectional")
    layout = params_layout(config)
    matrix_offsets = [e.offset for e in layout.weights]
    assert matrix_offsets == sorted(matrix_offsets)
    assert max(e.stop for e in layout.weights) == min(e.offset for e in layout.biases)
    assert [(e.pseudo_layer, e.lin_layer_id) for e in layout.weights[:6]] == [(0, i) for i in range(6)]
    assert [e.shape for e in layout.weights[:6]] == [(3, 2)] * 3 + [(3, 3)] * 3
    assert [e.shape for e in layout.weights if e.pseudo_layer == 2][:3] == [(3, 6)] * 3  # D*N input above layer 0
    assert [e.gate for e in layout.biases[:6]] == ["r", "u", "n", "r", "u", "n"]


def test_canonical_order_and_shapes_with_projection() -> None:
    weights, biases = cudnn_rnn_params_to_canonical(
        2, 6, 4, np.zeros(cudnn_rnn_params_size(2, 6, 4, num_proj=2, direction="bidirectional")),
        num_proj=2, direction="bidirectional")
    per_layer = [(6, 4)] * 4 + [(6, 2)] * 4 + [(2, 6)]
    assert [w.shape for w in weights[:9]] == per_layer
    assert [w.shape for w in weights[18:27]] == [(6, 4)] * 4 + [(6, 2)] * 4 + [(2, 6)]  # D*P = 4 above layer 0
    assert len(weights) == 4 * 9 and len(biases) == 4 * 8 and all(b.shape == (6,) for b in biases)


def test_skip_input_drops_layer0_input_matrices_only() -> None:
    config = RNNConfig("lstm", 2, 4, 4, input_mode="skip_input", direction="bidirectional")
    layout = params_layout(config)
    ids = {(e.pseudo_layer, e.lin_layer_id) for e in layout.weights}
    assert not any((k, i) in ids for k in (0, 1) for i in range(4))
    assert all((k, i) in ids for k in (0, 1) for i in range(4, 8)) and all((2, i) in ids for i in range(8))
    assert layout.gate_block(np.zeros(layout.size), 0, "input") is None
    assert len(layout.biases) == 4 * 8 if UNCONFIRMED.skip_input_keeps_input_biases else 4 * 8 - 2 * 4


def test_unconfirmed_facts_are_data() -> None:
    """Both answers to the open layout questions produce consistent layouts (settled on a GPU)."""
    config = RNNConfig("lstm", 2, 4, 4, num_proj=2, input_mode="skip_input")
    for facts in (LayoutAssumptions("after_pseudo_layer", True), LayoutAssumptions("after_all_matrices", False)):
        layout = params_layout(config, facts)
        spans = sorted((e.offset, e.stop) for e in layout.weights + layout.biases)
        assert spans[-1][1] == layout.size and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    after_all = params_layout(config, LayoutAssumptions("after_all_matrices", True))
    projections = [e for e in after_all.weights if e.lin_layer_id == PROJECTION_ID]
    recurrent = [e for e in after_all.weights if e.lin_layer_id != PROJECTION_ID]
    assert min(p.offset for p in projections) >= max(r.stop for r in recurrent)


def test_views_write_through() -> None:
    config = RNNConfig("lstm", 1, 2, 3)
    layout = params_layout(config)
    params = np.zeros(layout.size)
    layout.gate_block(params, 0, "recurrent")[...] = 1.0
    assert params.sum() == 4 * 2 * 2


@pytest.mark.parametrize("mutate, error, words", [
    (lambda w, b: (w[:-1], b), ValueError, ["weights", "8 entries", "got 7"]),
    (lambda w, b: (w, b + [b[0]]), ValueError, ["biases", "8 entries", "got 9"]),
    (lambda w, b: (w[:5] + [np.zeros((3, 2))] + w[6:], b), ValueError,
     ["weights[5]", "recurrent matrix of gate 'f'", "must have shape (3, 3); got (3, 2)"]),
    (lambda w, b: (w, b[:1] + [np.zeros(4)] + b[2:]), ValueError, ["biases[1]", "input bias", "(3,)", "(4,)"]),
    (lambda w, b: (w, b[:1] + [b[1].astype(np.float32)] + b[2:]), TypeError, ["dtype", "float32", "float64"]),
    (lambda w, b: (w, b[:1] + [list(b[1])] + b[2:]), TypeError, ["biases[1]", "list"]),
])
def test_canonical_to_params_names_the_offending_entry(mutate, error: type, words: list[str]) -> None:
    weights, biases = cudnn_rnn_params_to_canonical(1, 3, 2, np.zeros(cudnn_rnn_params_size(1, 3, 2)))
    weights, biases = mutate(weights, biases)
    with pytest.raises(error) as info:
        cudnn_rnn_canonical_to_params(1, 3, 2, weights, biases)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_params_to_canonical_rejects_wrong_size_and_kind() -> None:
    with pytest.raises(ValueError, match=r"1-D with 128 elements.*\(111,\)"):
        cudnn_rnn_params_to_canonical(1, 4, 2, np.zeros(111))
    with pytest.raises(TypeError, match="params must be a numpy.ndarray or cupy.ndarray; got list"):
        cudnn_rnn_params_to_canonical(1, 4, 2, [0.0] * 128)
    with pytest.raises(TypeError, match="params.dtype"):
        cudnn_rnn_params_to_canonical(1, 4, 2, np.zeros(128, dtype=np.int64))


@settings(max_examples=150, deadline=None)
@given(configs, st.booleans())
def test_params_size_is_the_walked_layouts_size(kw: dict, keeps_biases: bool) -> None:
    config = RNNConfig(kw["rnn_mode"], kw["num_layers"], kw["num_units"], kw["input_size"],
                       input_mode=kw["input_mode"], direction=kw["direction"], num_proj=kw["num_proj"])
    facts = LayoutAssumptions(skip_input_keeps_input_biases=keeps_biases)
    assert params_size(config, facts) == params_layout(config, facts).size


def test_params_size_does_not_walk_the_layers() -> None:
    """A configuration read from a file may claim any number of layers: its size comes at once."""
    config = RNNConfig("lstm", 10**9, 4, 3)
    assert params_size(config) == 4 * 4 * (3 + (10**9 - 1) * 4) + 10**9 * (4 * 4 * 4 + 2 * 4 * 4)


GRID = [RNNConfig(mode, layers, units, units if skip else inputs, direction=direction, num_proj=proj,
                  input_mode="skip_input" if skip else "linear_input")
        for mode in ("lstm", "gru", "rnn_relu", "rnn_tanh")
        for direction in ("unidirectional", "bidirectional")
        for skip in (False, True)
        for proj in ((0, 2) if mode == "lstm" else (0,))
        for layers, units, inputs in ((1, 3, 5), (2, 4, 1), (3, 5, 5))]
FACTS = [LayoutAssumptions(position, keeps) for position in ("after_pseudo_layer", "after_all_matrices")
         for keeps in (True, False)]


@pytest.mark.parametrize("facts", FACTS, ids=lambda f: f"{f.projection_position}-{f.skip_input_keeps_input_biases}")
def test_closed_forms_equal_the_walked_layout_over_a_grid(facts: LayoutAssumptions) -> None:
    for config in GRID:
        layout = params_layout(config, facts)
        assert params_size(config, facts) == layout.size, config
        assert entry_counts(config, facts) == (len(layout.weights), len(layout.biases)), config
    for config in GRID:
        assert cudnn_rnn_params_size(config.num_layers, config.num_units, config.input_size,
                                     rnn_mode=config.rnn_mode, input_mode=config.input_mode,
                                     direction=config.direction, num_proj=config.num_proj) == \
            params_layout(config).size, config


def test_entry_sizes_are_exact_python_ints_at_any_size() -> None:
    entry = ParamEntry("matrix", 0, 0, "input", "i", (10**10, 10**10), 10**19)
    assert entry.size == 10**20 and type(entry.size) is int and entry.stop == 10**19 + 10**20


@pytest.mark.parametrize("facts", FACTS, ids=lambda f: f"{f.projection_position}-{f.skip_input_keeps_input_biases}")
def test_stacked_views_hold_each_pseudo_layers_entries(facts: LayoutAssumptions) -> None:
    for config in GRID:
        layout = params_layout(config, facts)
        params = np.arange(layout.size, dtype=np.float64)
        g, d = config.num_gates, config.num_directions
        assert layout.runs() == ((range(0, d),) + ((range(d, config.num_pseudo_layers),) if config.num_layers > 1
                                                    else ()))
        for run in layout.runs():
            for entry in layout.weights + layout.biases:
                if entry.pseudo_layer in run:
                    stacked = layout.stack(params, run, entry.lin_layer_id, entry.kind)
                    assert np.shares_memory(stacked, params)
                    np.testing.assert_array_equal(stacked[entry.pseudo_layer - run.start], layout.view(params, entry))
            for side, first in (("input", 0), ("recurrent", g)):
                for kind, block in (("matrix", layout.gate_block), ("bias", layout.bias_block)):
                    stacked = layout.stack(params, run, first, kind, count=g)
                    for k in run:
                        expected = block(params, k, side)
                        assert (stacked is None) == (expected is None), (config, side, kind)
                        if stacked is not None:
                            np.testing.assert_array_equal(stacked[k - run.start], expected)
        if config.num_layers > 1:
            with pytest.raises(ValueError, match="inside one of"):
                layout.stack(params, range(0, d + 1), g, count=g)


def test_a_million_layer_layout_is_looked_up_without_listing_its_entries() -> None:
    """Where an entry sits is arithmetic on two per-pseudo-layer patterns: nothing is made per layer."""
    config = RNNConfig("lstm", 10**6, 4, 3, direction="bidirectional", num_proj=2)
    layout = params_layout(config)
    last = layout.entry(2 * 10**6 - 1, 7, "bias")
    assert last is not None and last.stop == layout.size == params_size(config)
    first_bias, last_matrix = layout.entry(0, 0, "bias"), layout.entry(2 * 10**6 - 1, PROJECTION_ID)
    assert first_bias is not None and last_matrix is not None and first_bias.offset == last_matrix.stop
    assert layout.entry(2 * 10**6, 0) is None
    assert "weights" not in vars(layout) and "biases" not in vars(layout)


@given(configs)
@settings(max_examples=40, deadline=None)
def test_gate_and_bias_blocks_are_the_stacked_entries_of_each_pseudo_layer(kw: dict) -> None:
    """gate_block / bias_block (read off spans worked out once per layout) are the views ``stack`` gives, entry for
    entry, on every pseudo-layer: the same elements of the buffer, written through."""
    config = RNNConfig(kw["rnn_mode"], kw["num_layers"], kw["num_units"], kw["input_size"],
                       input_mode=kw["input_mode"], direction=kw["direction"], num_proj=kw["num_proj"])
    layout = params_layout(config)
    params = np.arange(layout.size, dtype=np.float64)
    g = config.num_gates
    for k in range(config.num_pseudo_layers):
        for side, first in (("input", 0), ("recurrent", g)):
            for kind, block in (("matrix", layout.gate_block), ("bias", layout.bias_block)):
                for _ in range(2):  # the second time from the span kept
                    got = block(params, k, side)
                    stacked = layout.stack(params, range(k, k + 1), first, kind, g)
                    if stacked is None:
                        assert got is None
                    else:
                        np.testing.assert_array_equal(got, stacked[0])
                        assert np.shares_memory(got, params)
    with pytest.raises(ValueError, match="pseudo_layers must be consecutive"):
        layout.gate_block(params, config.num_pseudo_layers, "input")
