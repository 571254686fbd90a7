"""RNNConfig: validation messages, auto_select resolution, derived sizes, TF seed semantics."""

from __future__ import annotations

import math

from decimal import Decimal
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from cudnn_rnn.config import (DTYPES, ITEMSIZES, MAX_ARRAY_BYTES, MODES, RNNConfig, dtype_name, numpy_dtype, shown,
                              tf_seed64)


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


HUGE = 10**400


@pytest.mark.parametrize("dropout", [HUGE, -HUGE, float("inf"), -float("inf"), float("nan"), np.float64("nan"),
                                     np.float32("inf"), Fraction(HUGE, 3), Fraction(-HUGE, 7), 1, np.int64(5)],
                         ids=["1e400", "-1e400", "inf", "-inf", "nan", "np-nan", "np-inf", "huge-fraction",
                              "huge-negative-fraction", "1", "np-5"])
def test_dropout_out_of_range_or_not_finite_is_a_value_error_naming_it(dropout: object) -> None:
    with pytest.raises(ValueError, match=r"^dropout must be a finite float in \[0, 1\); got ") as info:
        RNNConfig("lstm", 1, 4, 3, dropout=dropout)
    assert len(str(info.value)) < 120, "huge numbers are shown by their digit count"


@pytest.mark.parametrize("dropout", [True, np.bool_(False), Decimal("0.5"), "0.5", None, 0.5j])
def test_dropout_that_is_not_a_real_number_is_a_type_error_naming_it(dropout: object) -> None:
    with pytest.raises(TypeError, match=r"^dropout must be a finite float in \[0, 1\); got "):
        RNNConfig("lstm", 1, 4, 3, dropout=dropout)


@pytest.mark.parametrize("dropout, stored", [(Fraction(1, 4), 0.25), (np.float16(0.5), 0.5), (0, 0.0),
                                             (np.int64(0), 0.0), (np.float32(0.125), 0.125)])
def test_dropout_of_any_real_type_in_range_is_stored_as_a_float(dropout: object, stored: float) -> None:
    value = RNNConfig("lstm", 1, 4, 3, dropout=dropout).dropout
    assert type(value) is float and value == stored


@pytest.mark.parametrize("field, value, shown_as", [
    ("seed", HUGE, "<= 2147483647 (a C int, as cuDNN and TensorFlow take it); got 1.00e+400 (401 digits)"),
    ("seed2", -(10**5000), ">= -2147483648; got -~1.00e+5000 (about 5001 digits)"),
    ("num_proj", HUGE, "<= 2147483647 (a C int, as cuDNN and TensorFlow take it); got 1.00e+400 (401 digits)"),
    ("num_layers", -HUGE, ">= 1; got -1.00e+400 (401 digits)"),
    ("input_size", Fraction(HUGE, 1), "integer; got Fraction Fraction(1.00e+400 (401 digits), 1)"),
], ids=["seed", "seed2", "num_proj", "num_layers", "input_size"])
def test_huge_numbers_are_named_with_their_digit_count(field: str, value: object, shown_as: str) -> None:
    fields: dict[str, object] = {"rnn_mode": "lstm", "num_layers": 1, "num_units": 4, "input_size": 3, field: value}
    with pytest.raises((ValueError, TypeError)) as info:
        RNNConfig(**fields)
    assert field in str(info.value) and shown_as in str(info.value), str(info.value)


def test_itemsizes_are_the_dtypes_own() -> None:
    assert set(ITEMSIZES) == set(DTYPES)
    assert all(ITEMSIZES[name] == numpy_dtype(name).itemsize for name in DTYPES)
    assert MAX_ARRAY_BYTES == np.iinfo(np.intp).max


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_params_buffer_of_more_bytes_than_an_array_holds_is_refused(dtype: str) -> None:
    # one rnn_tanh layer with N = I = n holds 2n^2 + 2n elements: the largest n whose buffer an array holds
    n = math.isqrt(MAX_ARRAY_BYTES // (2 * ITEMSIZES[dtype]))
    while (2 * n * n + 2 * n) * ITEMSIZES[dtype] > MAX_ARRAY_BYTES:
        n -= 1
    assert RNNConfig("rnn_tanh", 1, n, n, dtype=dtype).num_units == n
    elements = 2 * (n + 1) ** 2 + 2 * (n + 1)
    with pytest.raises(ValueError) as info:
        RNNConfig("rnn_tanh", 1, n + 1, n + 1, dtype=dtype)
    assert str(info.value) == (f"num_layers=1, num_units={n + 1}, input_size={n + 1} give a params buffer of at least "
                               f"{elements} elements ({elements * ITEMSIZES[dtype]} bytes of {dtype}), more than an "
                               f"array can hold (at most {MAX_ARRAY_BYTES} bytes)")


@pytest.mark.parametrize("field", ["num_layers", "num_units", "input_size", "num_proj"])
def test_a_size_beyond_a_c_int_is_refused_without_multiplying(field: str) -> None:
    sizes = {"num_layers": 2, "num_units": 3, "input_size": 3, field: 10**100_000}
    with pytest.raises(ValueError, match=rf"^{field} must be <= 2147483647 \(a C int, as cuDNN and TensorFlow take "
                                         rf"it\); got ~1\.00e\+100000 \(about 100001 digits\)$"):
        RNNConfig("lstm", **sizes)
    sizes[field] = 2**31
    with pytest.raises(ValueError, match=rf"^{field} must be <= 2147483647 .*; got 2147483648$"):
        RNNConfig("lstm", **sizes)


def test_shown_keeps_numbers_short() -> None:
    assert shown(10**30 - 1) == "9" * 30
    assert shown(10**30) == "1.00e+30 (31 digits)"
    assert shown(-123456 * 10**40) == "-1.23e+45 (46 digits)"
    assert shown(7 * 10**20_000) == "~7.00e+20000 (about 20001 digits)"
    assert shown(np.int64(5)) == "5" and shown(True) == "True" and shown(0.5) == "0.5"
    assert shown("x" * 200).endswith("...") and len(shown("x" * 200)) == 80
