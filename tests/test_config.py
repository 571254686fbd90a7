"""RNNConfig: validation messages, auto_select resolution, derived sizes, TF seed semantics."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from cudnn_rnn.config import MODES, RNNConfig, dtype_name, tf_seed64


def test_derived_sizes_for_bidirectional_projected_lstm() -> None:
    config = RNNConfig("lstm", 3, 8, 5, direction="bidirectional", num_proj=3)
    assert (config.num_gates, config.num_directions, config.num_pseudo_layers) == (4, 2, 6)
    assert (config.state_size, config.output_size) == (3, 6)
    assert [config.layer_input_size(layer) for layer in range(3)] == [5, 6, 6]
    assert config.has_cell and not RNNConfig("gru", 1, 4, 4).has_cell


@pytest.mark.parametrize("input_size, expected", [(7, "skip_input"), (6, "linear_input")])
def test_auto_select_compares_input_size_with_num_units(input_size: int, expected: str) -> None:
    assert RNNConfig("gru", 1, 7, input_size, input_mode="auto_select").input_mode == expected


def test_auto_select_uses_num_units_not_num_proj_under_projection() -> None:
    # TF's params ops compare with num_units; its forward kernel's comparison with num_proj is not mirrored.
    assert RNNConfig("lstm", 1, 8, 4, input_mode="auto_select", num_proj=4).input_mode == "linear_input"
    assert RNNConfig("lstm", 1, 8, 8, input_mode="auto_select", num_proj=4).input_mode == "skip_input"


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(rnn_mode="lstmp"), ValueError, ["rnn_mode", "'lstmp'", "'gru'"]),
    (dict(direction="both"), ValueError, ["direction", "'both'", "bidirectional"]),
    (dict(input_mode="skip"), ValueError, ["input_mode", "'skip'"]),
    (dict(num_layers=0), ValueError, ["num_layers", ">= 1", "0"]),
    (dict(num_units=-2), ValueError, ["num_units", "-2"]),
    (dict(input_size=2.0), TypeError, ["input_size", "integer", "float"]),
    (dict(num_layers=True), TypeError, ["num_layers", "bool"]),
    (dict(num_proj=2, rnn_mode="gru"), ValueError, ["num_proj", "lstm", "gru"]),
    (dict(num_proj=4), ValueError, ["num_proj", "< num_units=4", "4"]),
    (dict(num_proj=9), ValueError, ["num_proj", "9"]),
    (dict(input_mode="skip_input", input_size=3), ValueError, ["skip_input", "input_size=3", "num_units=4"]),
    (dict(dropout=1.0), ValueError, ["dropout", "[0, 1)", "1.0"]),
    (dict(dropout=-0.1), ValueError, ["dropout", "-0.1"]),
    (dict(dropout=float("nan")), ValueError, ["dropout", "nan"]),
    (dict(dropout="0.5"), TypeError, ["dropout", "str"]),
    (dict(seed=2**31), ValueError, ["seed", str(2**31)]),
    (dict(dtype="int32"), TypeError, ["dtype", "int32", "float32"]),
])
def test_invalid_configurations_are_named(kwargs: dict, error: type, words: list[str]) -> None:
    fields = dict(rnn_mode="lstm", num_layers=1, num_units=4, input_size=4)
    fields.update(kwargs)
    with pytest.raises(error) as info:
        RNNConfig(**fields)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("spelling, name", [
    ("bfloat16", "bfloat16"), (ml_dtypes.bfloat16, "bfloat16"), (np.dtype(ml_dtypes.bfloat16), "bfloat16"),
    ("float16", "float16"), (np.float16, "float16"), (np.dtype("float32"), "float32"), ("float64", "float64"),
])
def test_every_spelling_of_a_dtype_is_stored_as_its_name(spelling: object, name: str) -> None:
    assert dtype_name(spelling) == name
    config = RNNConfig("lstm", 1, 4, 3, dtype=spelling)
    assert config.dtype == name and config == RNNConfig("lstm", 1, 4, 3, dtype=name)


@pytest.mark.parametrize("spelling", [ml_dtypes.float8_e4m3fn, "float8_e5m2", np.int16, "bfloat", np.dtype("V2")])
def test_other_narrow_types_are_refused_by_name(spelling: object) -> None:
    with pytest.raises(TypeError, match=r"^dtype must be one of \('float16', 'float32', 'float64', 'bfloat16'\); "):
        RNNConfig("lstm", 1, 4, 3, dtype=spelling)


def test_config_is_hashable_and_equal_by_value() -> None:
    a = RNNConfig("gru", 2, 4, 3, dtype=np.float64)
    b = RNNConfig("gru", 2, 4, 3, dtype="float64")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a.replace(dropout=0.5) != a and a.replace(dropout=0.5).dropout == 0.5


def test_modes_table_lists_gates_in_cudnn_order() -> None:
    assert MODES["lstm"].gates == ("i", "f", "g", "o")
    assert MODES["gru"].gates == ("r", "u", "n")
    assert [MODES[m].cudnn_mode for m in ("rnn_relu", "rnn_tanh", "lstm", "gru")] == [0, 1, 2, 3]


@pytest.mark.parametrize("seed, seed2, expected", [
    (0, 0, 0),
    (1, 2, (1 << 32) | 2),
    (7, -3, 0xFFFFFFFF_FFFFFFFD),  # a negative seed2 is sign-extended and hides seed
    (8, -3, 0xFFFFFFFF_FFFFFFFD),
    (-1, 5, 0xFFFFFFFF_00000005),
])
def test_tf_seed64(seed: int, seed2: int, expected: int) -> None:
    assert tf_seed64(seed, seed2) == expected
