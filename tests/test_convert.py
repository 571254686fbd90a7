"""cudnn_rnn.convert with NumPy only: layouts from the published facts, round trips, refusals.

* Gate orders and bias rules are checked on a params buffer whose every element is its own
  index, against each format's published layout (PyTorch's nn.LSTM/GRU/RNN weight docs, Keras's
  layers, ONNX's LSTM/GRU/RNN operators, TF's CudnnRNN canonical order), written out by hand here.
* Round trips are property-based over random configurations: format -> params -> format is
  bit-exact for every format; params -> format -> params is bit-exact where the format keeps
  both biases, and otherwise computes the same function (checked with the reference op).
* Every refusal is checked for its message.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes  # noqa: F401  (registers NumPy's "bfloat16")
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cudnn_rnn
import cudnn_rnn.layout
from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import (
    Converted,
    InexactConversionError,
    expected_shapes,
    export_onnx,
    from_format,
    gru_block_cell_to_mygrad,
    mygrad_to_gru_block_cell,
    to_format,
)
from cudnn_rnn.formats import FORMAT_SPECS, FORMATS, convert_between
from cudnn_rnn.layout import LayoutAssumptions

MODE_NAMES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
#: formats whose params -> format -> params round trip is bit-exact, per mode (the others sum biases)
KEEPS_BOTH_BIASES = {"canonical": MODE_NAMES, "torch": MODE_NAMES, "onnx": MODE_NAMES, "keras": ("gru",)}
RESET_BEFORE = ("gru_block_cell", "mygrad")


def params_size(config: RNNConfig) -> int:
    return cudnn_rnn.cudnn_rnn_params_size(config.num_layers, config.num_units, config.input_size,
                                           rnn_mode=config.rnn_mode, input_mode=config.input_mode,
                                           direction=config.direction, num_proj=config.num_proj)


def random_values(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Values in +-[0.1, 1): no zeros, no subnormals, so halving and summing stay exact."""
    return (rng.uniform(0.1, 1.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(dtype)


def can_hold(fmt: str, config: RNNConfig) -> bool:
    return FORMAT_SPECS[fmt].refusal(config) is None


def allow(fmt: str) -> bool:
    return fmt in RESET_BEFORE


@st.composite
def configs(draw, modes: tuple[str, ...] = MODE_NAMES) -> RNNConfig:
    mode = draw(st.sampled_from(modes))
    units = draw(st.integers(1, 5))
    skip = draw(st.booleans()) and draw(st.booleans())  # a quarter of the cases
    input_size = units if skip else draw(st.integers(1, 5))
    proj = draw(st.integers(0, units - 1)) if mode == "lstm" and units > 1 else 0
    return RNNConfig(mode, draw(st.integers(1, 3)), units, input_size,
                     input_mode="skip_input" if skip else "linear_input",
                     direction=draw(st.sampled_from(("unidirectional", "bidirectional"))), num_proj=proj)


# ---- the published layouts, on a buffer of distinct values --------------------------------------
def indexed_params(config: RNNConfig) -> np.ndarray:
    return np.arange(params_size(config), dtype=np.float64)


def cudnn_blocks(config: RNNConfig, params: np.ndarray, k: int, side: str) -> dict[str, np.ndarray]:
    """Gate name -> that gate's matrix ([N, width]) or bias of pseudo-layer k, straight from the layout."""
    layout = cudnn_rnn.layout.params_layout(config)
    kind = "bias" if side.endswith("bias") else "matrix"
    first = 0 if side.startswith("input") else config.num_gates
    return {gate: layout.view(params, layout.entry(k, first + index, kind))
            for index, gate in enumerate(config.mode.gates)}


def test_torch_layout_is_cudnn_order_with_reverse_suffix() -> None:
    config = RNNConfig("lstm", 2, 3, 2, direction="bidirectional", num_proj=2)
    params = indexed_params(config)
    torch = to_format("torch", params, config).value
    w = cudnn_blocks(config, params, 3, "input")  # layer 1, reverse
    assert np.array_equal(torch["weight_ih_l1_reverse"], np.concatenate([w["i"], w["f"], w["g"], w["o"]]))
    b = cudnn_blocks(config, params, 2, "recurrent_bias")
    assert np.array_equal(torch["bias_hh_l1"], np.concatenate([b["i"], b["f"], b["g"], b["o"]]))
    layout = cudnn_rnn.layout.params_layout(config)
    assert np.array_equal(torch["weight_hr_l0_reverse"], layout.projection(params, 1))
    assert torch["weight_hh_l0"].shape == (12, 2) and torch["weight_ih_l1"].shape == (12, 4)


def test_keras_lstm_kernel_is_transposed_ifco_and_bias_is_the_sum() -> None:
    config = RNNConfig("lstm", 1, 2, 3)
    params = indexed_params(config)
    keras = to_format("keras", params, config).value
    w, r = cudnn_blocks(config, params, 0, "input"), cudnn_blocks(config, params, 0, "recurrent")
    bw, br = cudnn_blocks(config, params, 0, "input_bias"), cudnn_blocks(config, params, 0, "recurrent_bias")
    assert np.array_equal(keras["layer_0/forward/kernel"], np.concatenate([w[g].T for g in "ifgo"], axis=1))
    assert np.array_equal(keras["layer_0/forward/recurrent_kernel"], np.concatenate([r[g].T for g in "ifgo"], axis=1))
    assert np.array_equal(keras["layer_0/forward/bias"], np.concatenate([bw[g] + br[g] for g in "ifgo"]))


def test_keras_gru_is_zrh_with_two_bias_rows() -> None:
    config = RNNConfig("gru", 1, 2, 3, direction="bidirectional")
    params = indexed_params(config)
    keras = to_format("keras", params, config).value
    w = cudnn_blocks(config, params, 1, "input")
    bw, br = cudnn_blocks(config, params, 1, "input_bias"), cudnn_blocks(config, params, 1, "recurrent_bias")
    assert np.array_equal(keras["layer_0/backward/kernel"], np.concatenate([w["u"].T, w["r"].T, w["n"].T], axis=1))
    assert np.array_equal(keras["layer_0/backward/bias"],
                          np.stack([np.concatenate([bw[g] for g in "urn"]), np.concatenate([br[g] for g in "urn"])]))


def test_onnx_lstm_is_iofc_with_wb_then_rb() -> None:
    config = RNNConfig("lstm", 1, 2, 3, direction="bidirectional")
    params = indexed_params(config)
    onnx = to_format("onnx", params, config).value
    for k in (0, 1):
        w, r = cudnn_blocks(config, params, k, "input"), cudnn_blocks(config, params, k, "recurrent")
        bw, br = cudnn_blocks(config, params, k, "input_bias"), cudnn_blocks(config, params, k, "recurrent_bias")
        assert np.array_equal(onnx["layer_0/W"][k], np.concatenate([w[g] for g in "iofg"]))
        assert np.array_equal(onnx["layer_0/R"][k], np.concatenate([r[g] for g in "iofg"]))
        assert np.array_equal(onnx["layer_0/B"][k], np.concatenate([bw[g] for g in "iofg"] + [br[g] for g in "iofg"]))


def test_tf_cell_lstm_kernel_stacks_x_and_h_rows_in_icfo_columns() -> None:
    config = RNNConfig("lstm", 1, 2, 3, num_proj=1)
    params = indexed_params(config)
    tf = to_format("tf_cell", params, config).value
    prefix = "rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell"
    w, r = cudnn_blocks(config, params, 0, "input"), cudnn_blocks(config, params, 0, "recurrent")
    bw, br = cudnn_blocks(config, params, 0, "input_bias"), cudnn_blocks(config, params, 0, "recurrent_bias")
    expected = np.concatenate([np.concatenate([w[g], r[g]], axis=1) for g in "igfo"]).T
    assert np.array_equal(tf[f"{prefix}/kernel"], expected)
    assert np.array_equal(tf[f"{prefix}/bias"], np.concatenate([bw[g] + br[g] for g in "igfo"]))
    assert np.array_equal(tf[f"{prefix}/projection/kernel"],
                          cudnn_rnn.layout.params_layout(config).projection(params, 0).T)


def test_tf_cell_gru_keeps_the_candidate_biases_apart() -> None:
    config = RNNConfig("gru", 2, 2, 3, direction="bidirectional")
    params = indexed_params(config)
    tf = to_format("tf_cell", params, config).value
    prefix = "stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_gru_cell"
    w, r = cudnn_blocks(config, params, 3, "input"), cudnn_blocks(config, params, 3, "recurrent")
    bw, br = cudnn_blocks(config, params, 3, "input_bias"), cudnn_blocks(config, params, 3, "recurrent_bias")
    assert np.array_equal(tf[f"{prefix}/gates/kernel"],
                          np.concatenate([np.concatenate([w[g], r[g]], axis=1) for g in "ru"]).T)
    assert np.array_equal(tf[f"{prefix}/gates/bias"], np.concatenate([bw[g] + br[g] for g in "ru"]))
    assert np.array_equal(tf[f"{prefix}/candidate/input_projection/kernel"], w["n"].T)
    assert np.array_equal(tf[f"{prefix}/candidate/input_projection/bias"], bw["n"])
    assert np.array_equal(tf[f"{prefix}/candidate/hidden_projection/kernel"], r["n"].T)
    assert np.array_equal(tf[f"{prefix}/candidate/hidden_projection/bias"], br["n"])


def test_tf_cell_splits_a_summed_bias_half_and_half() -> None:
    config = RNNConfig("rnn_tanh", 1, 2, 1)
    tensors = {"rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel": np.ones((3, 2)),
               "rnn/multi_rnn_cell/cell_0/basic_rnn_cell/bias": np.array([3.0, -5.0])}
    params = from_format("tf_cell", tensors, config).value
    assert np.array_equal(cudnn_blocks(config, params, 0, "input_bias")["h"], [1.5, -2.5])
    assert np.array_equal(cudnn_blocks(config, params, 0, "recurrent_bias")["h"], [1.5, -2.5])


def test_keras_single_bias_goes_to_the_recurrent_slot() -> None:
    config = RNNConfig("lstm", 1, 1, 1)
    tensors = {"layer_0/forward/kernel": np.ones((1, 4)), "layer_0/forward/recurrent_kernel": np.ones((1, 4)),
               "layer_0/forward/bias": np.array([1.0, 2.0, 3.0, 4.0])}
    params = from_format("keras", tensors, config).value
    assert np.array_equal(np.concatenate(list(cudnn_blocks(config, params, 0, "recurrent_bias").values())),
                          [1, 2, 3, 4])
    assert not np.any(np.concatenate(list(cudnn_blocks(config, params, 0, "input_bias").values())))


def test_gru_block_cell_and_mygrad_layouts() -> None:
    config = RNNConfig("gru", 1, 2, 3)
    params = indexed_params(config)
    block = to_format("gru_block_cell", params, config, allow_approximation=True).value
    mygrad = to_format("mygrad", params, config, allow_approximation=True).value
    w, r = cudnn_blocks(config, params, 0, "input"), cudnn_blocks(config, params, 0, "recurrent")
    bw, br = cudnn_blocks(config, params, 0, "input_bias"), cudnn_blocks(config, params, 0, "recurrent_bias")
    assert np.array_equal(block["w_ru"], np.block([[w["r"].T, w["u"].T], [r["r"].T, r["u"].T]]))
    assert np.array_equal(block["w_c"], np.concatenate([w["n"].T, r["n"].T]))
    assert np.array_equal(block["b_ru"], np.concatenate([bw["r"] + br["r"], bw["u"] + br["u"]]))
    assert np.array_equal(block["b_c"], bw["n"] + br["n"])
    expected_mygrad = {"Uz": w["u"].T, "Wz": r["u"].T, "bz": bw["u"] + br["u"], "Ur": w["r"].T, "Wr": r["r"].T,
                       "br": bw["r"] + br["r"], "Uh": w["n"].T, "Wh": r["n"].T, "bh": bw["n"] + br["n"]}
    assert list(mygrad) == list(expected_mygrad)
    for name, value in expected_mygrad.items():
        assert np.array_equal(mygrad[name], value), name


def test_canonical_matches_params_to_canonical() -> None:
    config = RNNConfig("lstm", 2, 3, 2, direction="bidirectional", num_proj=1)
    params = indexed_params(config)
    weights, biases = cudnn_rnn.cudnn_rnn_params_to_canonical(2, 3, 2, params, direction="bidirectional", num_proj=1)
    canonical = to_format("canonical", params, config).value
    assert list(canonical) == ([f"weights/{i}" for i in range(len(weights))]
                               + [f"biases/{i}" for i in range(len(biases))])
    assert all(np.array_equal(canonical[f"weights/{i}"], w) for i, w in enumerate(weights))
    assert all(np.array_equal(canonical[f"biases/{i}"], b) for i, b in enumerate(biases))


@pytest.mark.parametrize("fmt", [fmt for fmt in FORMATS if FORMAT_SPECS[fmt].names is not None])
@pytest.mark.parametrize("config", [RNNConfig("lstm", 2, 3, 2, direction="bidirectional", num_proj=1),
                                    RNNConfig("rnn_tanh", 3, 2, 4), RNNConfig("gru", 1, 3, 2)])
def test_every_tensor_name_parses_back_to_its_field_layer_and_direction(fmt: str, config: RNNConfig) -> None:
    names = FORMAT_SPECS[fmt].names
    if not can_hold(fmt, config):
        return
    for name in expected_shapes(fmt, config):
        parsed = names.parse(name)
        assert parsed is not None and parsed.field in names.templates, name
        if "{index}" not in names.templates[parsed.field]:
            assert names.name(*parsed) == name
        assert names.parse(name + "x") is None and names.parse("x" + name) is None


# ---- round trips ---------------------------------------------------------------------------------
ROUND_TRIP_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@ROUND_TRIP_SETTINGS
@given(config=configs(), fmt=st.sampled_from(FORMATS),
       dtype=st.sampled_from(("float16", "float32", "float64", "bfloat16")), seed=st.integers(0, 2**32 - 1))
def test_format_to_params_to_format_is_bit_exact(config: RNNConfig, fmt: str, dtype: str, seed: int) -> None:
    if fmt in RESET_BEFORE:
        config = RNNConfig("gru", 1, config.num_units, config.input_size, input_mode=config.input_mode)
    if not can_hold(fmt, config):
        config = config.replace(num_proj=0)
    rng = np.random.default_rng(seed)
    shapes = expected_shapes(fmt, config)
    tensors = {name: random_values(shape, dtype, rng) for name, shape in shapes.items()}
    if config.skip_input and fmt != "canonical":  # layer 0's input matrices must be identities to be held
        tensors = to_format(fmt, from_format(fmt, tensors, config, allow_approximation=True).value, config,
                            allow_approximation=allow(fmt)).value
    params = from_format(fmt, tensors, config, allow_approximation=allow(fmt))
    assert params.value.dtype == np.dtype(dtype) and params.value.shape == (params_size(config),)
    again = to_format(fmt, params.value, config, allow_approximation=allow(fmt)).value
    assert list(again) == list(shapes)
    for name, value in tensors.items():
        assert again[name].dtype == value.dtype and again[name].tobytes() == value.tobytes(), name


@ROUND_TRIP_SETTINGS
@given(config=configs(), fmt=st.sampled_from(FORMATS[:5]), dtype=st.sampled_from(("float32", "float64")),
       seed=st.integers(0, 2**32 - 1))
def test_params_to_format_to_params(config: RNNConfig, fmt: str, dtype: str, seed: int) -> None:
    if not can_hold(fmt, config):
        config = config.replace(num_proj=0)
    params = random_values((params_size(config),), dtype, np.random.default_rng(seed))
    there = to_format(fmt, params, config)
    assert there.approximations == ()
    back = from_format(fmt, there.value, config)
    assert back.approximations == ()
    if config.rnn_mode in KEEPS_BOTH_BIASES.get(fmt, ()):
        assert back.value.tobytes() == params.tobytes()
        return
    # the bias sums are what the math sees: matrices bit-exact, sums equal to rounding
    layout = cudnn_rnn.layout.params_layout(config)
    for entry in layout.weights:
        assert np.array_equal(layout.view(back.value, entry), layout.view(params, entry)), entry.describe()
    for k in range(config.num_pseudo_layers):
        def total(p: np.ndarray, k: int = k) -> np.ndarray:
            return layout.bias_block(p, k, "input") + layout.bias_block(p, k, "recurrent")
        np.testing.assert_allclose(total(back.value), total(params), rtol=1e-6 if dtype == "float32" else 1e-15)


def run_reference(config: RNNConfig, params: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    t, b, k = 4, 3, config.num_pseudo_layers
    x = rng.uniform(-1, 1, (t, b, config.input_size))
    h0 = rng.uniform(-1, 1, (k, b, config.state_size))
    c0 = rng.uniform(-1, 1, (k, b, config.num_units)) if config.has_cell else None
    out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, np.array([4, 1, 3], np.int32), rnn_mode=config.rnn_mode,
                                 input_mode=config.input_mode, direction=config.direction,
                                 num_proj=config.num_proj, is_training=False)
    return out.output, out.output_h, out.output_c


@settings(max_examples=25, deadline=None)
@given(config=configs(), fmt=st.sampled_from(("keras", "tf_cell")), seed=st.integers(0, 2**32 - 1))
def test_summed_bias_round_trip_computes_the_same_function(config: RNNConfig, fmt: str, seed: int) -> None:
    if not can_hold(fmt, config):
        config = config.replace(num_proj=0)
    rng = np.random.default_rng(seed)
    params = random_values((params_size(config),), "float64", rng)
    back = from_format(fmt, to_format(fmt, params, config).value, config).value
    state = rng.bit_generator.state
    expected = run_reference(config, params, rng)
    rng.bit_generator.state = state
    for name, ours, theirs in zip(("output", "output_h", "output_c"), run_reference(config, back, rng), expected):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12, err_msg=name)


@settings(max_examples=40, deadline=None)
@given(src=st.sampled_from(FORMATS), dst=st.sampled_from(FORMATS), seed=st.integers(0, 2**32 - 1))
def test_convert_between_any_pair_agrees_with_the_route_through_params(src: str, dst: str, seed: int) -> None:
    config = RNNConfig("gru", 1, 3, 2)
    rng = np.random.default_rng(seed)
    tensors = {name: random_values(shape, "float64", rng) for name, shape in expected_shapes(src, config).items()}
    approximate = src in RESET_BEFORE or dst in RESET_BEFORE
    result = convert_between(src, dst, tensors, config, allow_approximation=approximate)
    if src == dst or {src, dst} == set(RESET_BEFORE):
        assert result.approximations == ()
        if src == dst:
            assert all(result.value[k].tobytes() == v.tobytes() and result.value[k] is not v
                       for k, v in tensors.items())
        return
    params = from_format(src, tensors, config, allow_approximation=approximate)
    expected = to_format(dst, params.value, config, allow_approximation=approximate)
    assert result.approximations == params.approximations + expected.approximations
    assert all(np.array_equal(result.value[k], v) for k, v in expected.value.items())


def test_gru_block_cell_mygrad_pair_is_bit_exact_both_ways() -> None:
    rng = np.random.default_rng(3)
    block = {"w_ru": random_values((7, 8), "float32", rng), "w_c": random_values((7, 4), "float32", rng),
             "b_ru": random_values((8,), "float32", rng), "b_c": random_values((4,), "float32", rng)}
    mygrad = gru_block_cell_to_mygrad(block)
    assert {k: v.shape for k, v in mygrad.items()} == {
        "Uz": (3, 4), "Wz": (4, 4), "bz": (4,), "Ur": (3, 4), "Wr": (4, 4), "br": (4,), "Uh": (3, 4), "Wh": (4, 4),
        "bh": (4,)}
    assert np.array_equal(mygrad["Uz"], block["w_ru"][:3, 4:]) and np.array_equal(mygrad["Wr"], block["w_ru"][3:, :4])
    back = mygrad_to_gru_block_cell(mygrad)
    assert all(back[k].tobytes() == v.tobytes() for k, v in block.items())


# ---- exactness ------------------------------------------------------------------------------------
def gru_params(rng: np.random.Generator, config: RNNConfig) -> np.ndarray:
    return random_values((params_size(config),), "float64", rng)


@pytest.mark.parametrize("fmt", RESET_BEFORE)
def test_cudnn_gru_to_a_reset_before_gru_is_refused_then_reported(fmt: str) -> None:
    config = RNNConfig("gru", 1, 3, 2)
    params = gru_params(np.random.default_rng(1), config)
    with pytest.raises(InexactConversionError, match=r"reset-before GRU.*agree only where r == 1.*allow_approximation"):
        to_format(fmt, params, config)
    converted = to_format(fmt, params, config, allow_approximation=True)
    assert isinstance(converted, Converted) and not converted.exact
    assert len(converted.approximations) == 2
    assert "reset gate after" in converted.approximations[0]
    assert "bR_n" in converted.approximations[1]
    assert ("b_c" if fmt == "gru_block_cell" else "bh") in converted.approximations[1]


def test_a_zero_candidate_recurrent_bias_is_not_reported_as_changed() -> None:
    config = RNNConfig("gru", 1, 3, 2)
    params = gru_params(np.random.default_rng(2), config)
    cudnn_rnn.layout.params_layout(config).bias_block(params, 0, "recurrent")[6:] = 0.0  # bR_n
    assert len(to_format("gru_block_cell", params, config, allow_approximation=True).approximations) == 1


@pytest.mark.parametrize("fmt", RESET_BEFORE)
def test_a_reset_before_gru_to_cudnn_is_refused_then_reported(fmt: str) -> None:
    config = RNNConfig("gru", 1, 3, 2)
    tensors = {k: np.ones(s) for k, s in expected_shapes(fmt, config).items()}
    with pytest.raises(InexactConversionError, match=f"format '{fmt}' is a reset-before GRU"):
        from_format(fmt, tensors, config)
    converted = from_format(fmt, tensors, config, allow_approximation=True)
    assert len(converted.approximations) == 1
    with pytest.raises(InexactConversionError):
        convert_between(fmt, "torch", tensors, config)


@pytest.mark.parametrize("fmt", ["keras", "onnx"])
def test_a_projection_is_refused_even_with_approximation(fmt: str) -> None:
    config = RNNConfig("lstm", 1, 4, 2, num_proj=2)
    params = np.zeros(params_size(config))
    for allow_approximation in (False, True):
        with pytest.raises(ValueError, match=rf"format '{fmt}' cannot hold an LSTM projection \(num_proj=2\)"):
            to_format(fmt, params, config, allow_approximation=allow_approximation)
    with pytest.raises(ValueError, match="cannot hold an LSTM projection"):
        from_format(fmt, {}, config)


@pytest.mark.parametrize("fmt", RESET_BEFORE)
@pytest.mark.parametrize("config", [RNNConfig("lstm", 1, 2, 2), RNNConfig("gru", 2, 2, 2),
                                    RNNConfig("gru", 1, 2, 2, direction="bidirectional")])
def test_reset_before_formats_hold_only_one_unidirectional_gru_layer(fmt: str, config: RNNConfig) -> None:
    with pytest.raises(ValueError, match=rf"format '{fmt}' holds a single unidirectional GRU layer; got "
                                         rf"rnn_mode='{config.rnn_mode}', num_layers={config.num_layers}"):
        to_format(fmt, np.zeros(params_size(config)), config, allow_approximation=True)


def test_skip_input_writes_identities_and_needs_them_back() -> None:
    config = RNNConfig("lstm", 1, 2, 2, input_mode="skip_input")
    params = random_values((params_size(config),), "float64", np.random.default_rng(5))
    torch = to_format("torch", params, config).value
    assert np.array_equal(torch["weight_ih_l0"], np.concatenate([np.eye(2)] * 4))
    assert from_format("torch", torch, config).value.tobytes() == params.tobytes()
    torch["weight_ih_l0"] = torch["weight_ih_l0"] * 2
    with pytest.raises(InexactConversionError, match="pseudo-layer 0's input matrices were dropped: they are not "
                                                     "identities, and input_mode='skip_input' adds x directly"):
        from_format("torch", torch, config)
    converted = from_format("torch", torch, config, allow_approximation=True)
    assert converted.value.tobytes() == params.tobytes() and len(converted.approximations) == 1


@pytest.mark.parametrize("keeps_input_biases", [True, False])
@pytest.mark.parametrize("projection_position", ["after_pseudo_layer", "after_all_matrices"])
def test_round_trips_follow_the_layout_table(monkeypatch, keeps_input_biases: bool, projection_position: str) -> None:
    """The unconfirmed layout facts are data: conversions follow whichever values they hold."""
    facts = LayoutAssumptions(projection_position=projection_position, skip_input_keeps_input_biases=keeps_input_biases)
    monkeypatch.setattr(cudnn_rnn.layout, "UNCONFIRMED", facts)
    rng = np.random.default_rng(9)
    for config in (RNNConfig("lstm", 2, 3, 3, input_mode="skip_input", direction="bidirectional", num_proj=2),
                   RNNConfig("gru", 2, 3, 3, input_mode="skip_input")):
        params = random_values((params_size(config),), "float64", rng)
        torch = to_format("torch", params, config).value
        assert from_format("torch", torch, config).value.tobytes() == params.tobytes()
        if config.rnn_mode == "lstm":
            assert np.array_equal(torch["weight_hr_l1_reverse"],
                                  cudnn_rnn.layout.params_layout(config).projection(params, 3))
    if not keeps_input_biases:  # an input bias with no slot: folded where exact, refused where not
        config = RNNConfig("gru", 1, 2, 2, input_mode="skip_input")
        torch = to_format("torch", random_values((params_size(config),), "float64", rng), config).value
        torch["bias_ih_l0"] = np.array([1.0, 2.0, 3.0, 4.0, 0.0, 0.0])
        folded = from_format("torch", torch, config).value
        assert np.array_equal(from_format("torch", torch, config).value[-6:-2], torch["bias_hh_l0"][:4] + [1, 2, 3, 4])
        assert folded.shape == (params_size(config),)
        torch["bias_ih_l0"][4] = 5.0
        with pytest.raises(InexactConversionError, match="input bias of gate 'n' was dropped"):
            from_format("torch", torch, config)


# ---- refusals ---------------------------------------------------------------------------------
CONFIG = RNNConfig("lstm", 2, 3, 2, direction="bidirectional")


def torch_tensors() -> dict[str, np.ndarray]:
    return to_format("torch", np.zeros(params_size(CONFIG), np.float32), CONFIG).value


def test_unknown_format_is_refused_with_the_list() -> None:
    with pytest.raises(ValueError, match=r"fmt must be one of \('canonical', 'torch'.*got 'pytorch'"):
        to_format("pytorch", np.zeros(params_size(CONFIG)), CONFIG)
    with pytest.raises(ValueError, match=r"dst must be one of .*got 'tf'"):
        convert_between("torch", "tf", torch_tensors(), CONFIG)


def test_config_must_be_an_rnn_config() -> None:
    with pytest.raises(TypeError, match="config must be a cudnn_rnn.RNNConfig; got dict"):
        to_format("torch", np.zeros(3), {"rnn_mode": "lstm"})


def test_params_of_the_wrong_size_or_kind_are_refused() -> None:
    size = params_size(CONFIG)
    with pytest.raises(ValueError, match=rf"params must be 1-D with {size} elements .*num_layers=2.*"
                                         rf"got shape \({size + 1},\)"):
        to_format("torch", np.zeros(size + 1), CONFIG)
    with pytest.raises(ValueError, match=r"got shape \(1, \d+\)"):
        to_format("torch", np.zeros((1, size)), CONFIG)
    with pytest.raises(TypeError, match="params.dtype must be one of"):
        to_format("torch", np.zeros(size, dtype=np.int32), CONFIG)
    with pytest.raises(TypeError, match="params must be a numpy.ndarray or cupy.ndarray; got list"):
        to_format("torch", [0.0] * size, CONFIG)


def test_missing_tensors_are_named() -> None:
    tensors = torch_tensors()
    del tensors["bias_hh_l1_reverse"]
    with pytest.raises(ValueError, match=r"format 'torch' tensors do not match the configuration \(rnn_mode='lstm', "
                                         r"num_layers=2.*missing \['bias_hh_l1_reverse'\]; expected exactly"):
        from_format("torch", tensors, CONFIG)


def test_a_wrong_layer_count_shows_as_unexpected_tensors() -> None:
    three_layers = to_format("torch", np.zeros(params_size(CONFIG.replace(num_layers=3))), CONFIG.replace(num_layers=3))
    with pytest.raises(ValueError, match=r"num_layers=2.*unexpected \['weight_ih_l2', "):
        from_format("torch", three_layers.value, CONFIG)
    one_layer = to_format("keras", np.zeros(params_size(CONFIG.replace(num_layers=1))), CONFIG.replace(num_layers=1))
    with pytest.raises(ValueError, match=r"missing \['layer_1/forward/kernel'"):
        from_format("keras", one_layer.value, CONFIG)


def test_a_wrong_direction_count_shows_as_missing_tensors() -> None:
    uni = CONFIG.replace(direction="unidirectional")
    with pytest.raises(ValueError, match=r"missing \['weight_ih_l0_reverse'"):
        from_format("torch", to_format("torch", np.zeros(params_size(uni)), uni).value, CONFIG)


def test_wrong_shapes_are_named_with_expected_and_actual() -> None:
    tensors = torch_tensors()
    tensors["weight_ih_l1"] = np.zeros((12, 5), np.float32)
    with pytest.raises(ValueError, match=r"tensor 'weight_ih_l1' must have shape \(12, 6\) for this configuration "
                                         r".*got \(12, 5\)"):
        from_format("torch", tensors, CONFIG)
    tensors = to_format("onnx", np.zeros(params_size(CONFIG)), CONFIG).value
    tensors["layer_0/W"] = tensors["layer_0/W"][:1]
    with pytest.raises(ValueError, match=r"'layer_0/W' must have shape \(2, 12, 2\).*got \(1, 12, 2\)"):
        from_format("onnx", tensors, CONFIG)


@pytest.mark.parametrize("value", [1, 0, "yes", None, 1.0])
def test_allow_approximation_takes_only_a_bool(value: object) -> None:
    tensors = torch_tensors()
    with pytest.raises(TypeError, match=rf"allow_approximation must be a bool; got "
                                        rf"{type(value).__name__} "):
        from_format("torch", tensors, CONFIG, allow_approximation=value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="allow_approximation must be a bool"):
        to_format("torch", np.zeros(params_size(CONFIG), np.float32), CONFIG,
                  allow_approximation=value)  # type: ignore[arg-type]


def test_mixed_dtypes_and_non_arrays_are_type_errors() -> None:
    tensors = torch_tensors()
    tensors["bias_ih_l0"] = tensors["bias_ih_l0"].astype(np.float64)
    with pytest.raises(TypeError, match=r"format 'torch' tensors must share one dtype; tensor 'bias_ih_l0' is float64 "
                                        r"while the others are float32"):
        from_format("torch", tensors, CONFIG)
    tensors = torch_tensors()
    tensors["bias_ih_l0"] = tensors["bias_ih_l0"].tolist()
    with pytest.raises(TypeError, match=r"tensors\['bias_ih_l0'\] must be a numpy.ndarray or cupy.ndarray; got list"):
        from_format("torch", tensors, CONFIG)
    with pytest.raises(TypeError, match="tensors must be a mapping of name -> array for format 'torch'; got list"):
        from_format("torch", list(torch_tensors().values()), CONFIG)
    int_tensors = {k: v.astype(np.int64) for k, v in torch_tensors().items()}
    with pytest.raises(TypeError, match="format 'torch' tensors' dtype must be one of"):
        from_format("torch", int_tensors, CONFIG)


def test_direct_pair_refuses_bad_tensors() -> None:
    with pytest.raises(ValueError, match=r"format 'mygrad' tensors need an array 'bh' \(expected names \['Uz'"):
        mygrad_to_gru_block_cell({"Uz": np.zeros((2, 2))})
    block = {"w_ru": np.zeros((5, 4)), "w_c": np.zeros((5, 2)), "b_ru": np.zeros(4), "b_c": np.zeros(2)}
    block["w_ru"] = np.zeros((5, 6))
    with pytest.raises(ValueError, match=r"tensor 'w_ru' must have shape \(5, 4\).*got \(5, 6\)"):
        gru_block_cell_to_mygrad(block)
    with pytest.raises(ValueError, match="imply num_units=2, input_size=0"):
        gru_block_cell_to_mygrad({"w_ru": np.zeros((2, 4)), "w_c": np.zeros((2, 2)), "b_ru": np.zeros(4),
                                  "b_c": np.zeros(2)})
    config = RNNConfig("gru", 1, 2, 4)  # convert_between checks the tensors against the configuration
    with pytest.raises(ValueError, match=r"'w_ru' must have shape \(6, 4\)"):
        convert_between("gru_block_cell", "mygrad", {**block, "w_ru": np.zeros((5, 4))}, config)


def test_export_onnx_refuses_a_projection_before_needing_onnx(tmp_path) -> None:
    config = RNNConfig("lstm", 1, 4, 2, num_proj=2)
    with pytest.raises(ValueError, match=r"export_onnx: format 'onnx' cannot hold an LSTM projection"):
        export_onnx(np.zeros(params_size(config), np.float32), config, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_results_are_fresh_arrays_of_the_params_dtype() -> None:
    params = np.zeros(params_size(CONFIG), np.float32)
    for fmt in ("canonical", "torch", "keras", "tf_cell", "onnx"):
        value = to_format(fmt, params, CONFIG).value
        assert {v.dtype for v in value.values()} == {np.dtype(np.float32)}
        assert not any(np.shares_memory(v, params) for v in value.values()), fmt
        assert {k: v.shape for k, v in value.items()} == expected_shapes(fmt, CONFIG)


# ---- golden records of the real frameworks (scripts/make_convert_golden.py) ---------------------------
GOLDEN = sorted((Path(__file__).parent / "golden" / "convert").glob("*.npz"))
GOLDEN_TOLERANCE = {"float32": 1e-5, "float64": 1e-10}


def load_golden(path: Path) -> tuple[dict, dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    with np.load(path) as data:
        groups: dict[str, dict[str, np.ndarray]] = {"weights": {}, "input": {}, "expected": {}}
        for name in data.files:
            if name != "meta":
                group, key = name.split("/", 1)
                groups[group][key] = data[name]
        return json.loads(str(data["meta"])), groups["weights"], groups["input"], groups["expected"]


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    return float(np.max(np.abs(actual - expected)) / max(float(np.max(np.abs(expected))), 1e-30))


def test_golden_records_exist() -> None:
    assert {p.stem for p in GOLDEN} >= {"torch_lstm_L2_bi_proj", "keras_gru_bi", "tf_cell_lstm", "onnx_gru_bi",
                                        "mygrad_gru"}


@pytest.mark.parametrize("path", [p for p in GOLDEN if not p.stem.startswith("mygrad")], ids=lambda p: p.stem)
def test_framework_weights_run_like_the_framework(path: Path) -> None:
    meta, weights, inputs, expected = load_golden(path)
    config = RNNConfig(meta["rnn_mode"], meta["num_layers"], meta["num_units"], meta["input_size"],
                       direction=meta["direction"], num_proj=meta["num_proj"])
    converted = from_format(meta["format"], weights, config)
    assert converted.approximations == ()
    params = converted.value
    out = cudnn_rnn.cudnn_rnn_v3(inputs["x"], inputs["h0"], inputs.get("c0"), params, inputs["lengths"],
                                 rnn_mode=config.rnn_mode, direction=config.direction, num_proj=config.num_proj,
                                 is_training=False, time_major=meta["time_major"])
    tolerance = GOLDEN_TOLERANCE[str(params.dtype)]
    for name, ours in (("output", out.output), ("output_h", out.output_h), ("output_c", out.output_c)):
        if name in expected:
            assert relative_error(ours, expected[name]) <= tolerance, f"{path.stem}: {name}"
    # and the framework's own tensors come back bit for bit
    again = to_format(meta["format"], params, config).value
    assert all(again[k].tobytes() == v.tobytes() for k, v in weights.items())


def test_mygrad_weights_step_like_mygrad_through_our_gru_block_cell() -> None:
    meta, weights, inputs, expected = load_golden(Path(__file__).parent / "golden" / "convert" / "mygrad_gru.npz")
    block = mygrad_to_gru_block_cell(weights)
    h = inputs["h0"][0]
    for t in range(inputs["x"].shape[0]):
        h = cudnn_rnn.gru_block_cell(inputs["x"][t], h, block["w_ru"], block["w_c"], block["b_ru"], block["b_c"])[3]
        assert relative_error(h, expected["output"][t]) <= 1e-12
    config = RNNConfig("gru", 1, meta["num_units"], meta["input_size"])
    with pytest.raises(InexactConversionError, match="reset-before"):
        from_format("mygrad", weights, config)
