"""FoundRNN: from what a file holds to a trainable layer in one call (``to_layer``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import InexactConversionError, read_file, to_format
from cudnn_rnn.convert.readers import FileReadError, Question
from cudnn_rnn.convert.readers._found import MAX_COMPRESSION_RATIO, check_declared_size, one_line
from cudnn_rnn.layers import GRU, LSTM, RNN, RecurrentLayer
from reading_testing import found_layer


@pytest.mark.parametrize("make", [
    lambda: LSTM(3, 4, 2, bidirectional=True, num_proj=2, seed=1),
    lambda: GRU(2, 5, seed=2),
    lambda: RNN(3, 3, 2, activation="relu", seed=3),
], ids=["lstm_proj_bidi", "gru", "rnn_relu"])
def test_to_layer_holds_the_files_weights(make, tmp_path: Path) -> None:
    source = make()
    np.savez(tmp_path / "weights.npz", **source.export("torch").value)  # a state_dict's names
    [found] = read_file(tmp_path / "weights.npz")
    if "rnn_mode" in found.questions:  # an nn.RNN state_dict does not say relu or tanh
        found = found.with_hints(rnn_mode=source.config.rnn_mode)
    layer = found.to_layer()
    assert type(layer) is type(source) and layer.xp is np
    assert layer.config == found.config and layer.step == 0
    assert layer.params.tobytes() == source.params.tobytes()
    x = np.random.default_rng(0).standard_normal((2, 3, source.config.input_size)).astype(np.float32)
    np.testing.assert_array_equal(layer.forward(x)[0], source.forward(x)[0])


def test_to_layer_refuses_an_approximation_unless_allowed(tmp_path: Path) -> None:
    block = GRU(3, 4, seed=5)
    np.savez(tmp_path / "block.npz", **to_format("gru_block_cell", block.params, block.config,
                                                 allow_approximation=True).value)
    [found] = read_file(tmp_path / "block.npz")
    with pytest.raises(InexactConversionError, match="allow_approximation=True"):
        found.to_layer()
    layer = found.to_layer(allow_approximation=True)
    assert isinstance(layer, GRU) and layer.config.num_units == 4
    np.testing.assert_array_equal(layer.params, found.to_params(allow_approximation=True).value)


def test_to_layer_asks_for_what_the_file_cannot_tell(tmp_path: Path) -> None:
    np.savez(tmp_path / "bare.npz", params=LSTM(2, 3).params)
    [found] = read_file(tmp_path / "bare.npz")
    with pytest.raises(ValueError, match="rnn_mode"):
        found.to_layer()
    layer = found.with_hints(rnn_mode="lstm", num_layers=1, num_units=3, input_size=2).to_layer()
    assert isinstance(layer, RecurrentLayer) and isinstance(layer, LSTM)


# ---- hints and the checks every reader shares --------------------------------------------------------
def test_overrides_are_checked_against_the_file() -> None:
    rnn = found_layer(RNNConfig("lstm", 1, 4, 3), "lstm")
    assert rnn.with_hints(num_units=4, rnn_mode="lstm", direction=None).config == rnn.config
    with pytest.raises(ValueError, match=r"num_units=5 disagrees with the file: lstm \(test layer\) has "
                                         r"num_units=4; drop the argument or pick another RNN"):
        rnn.with_hints(num_units=5)
    with pytest.raises(TypeError, match=r"hints must be among"):
        rnn.with_hints(dropout=0.5)
    asked = rnn.replace(fields={k: v for k, v in rnn.fields.items() if k != "rnn_mode"},
                        questions={"rnn_mode": Question(("lstm",), "test")})
    with pytest.raises(ValueError, match=r"rnn_mode='gru' is not possible for lstm \(test layer\); it can be lstm"):
        asked.with_hints(rnn_mode="gru")




def test_check_declared_size_and_one_line() -> None:
    assert check_declared_size("f", "t", (2, 3), 4, 24, False) == 24
    assert check_declared_size("f", "t", (1000,), 4, 4000 // MAX_COMPRESSION_RATIO + 1, True) == 4000
    with pytest.raises(FileReadError, match=r"tensor 't' declares an invalid shape \(-1, 3\)"):
        check_declared_size("f", "t", (-1, 3), 4, 100, False)
    assert one_line("a\n  b\x1b[1;31m c\x07") == "a b c"
    assert one_line("x" * 500, 20) == "x" * 17 + "..."
