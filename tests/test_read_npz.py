"""The .npz reader, NumPy only: a format's named tensors with the configuration read off their shapes, a bare
params buffer, and hostile .npz archives. (read_file's dispatch, stacking and choosing are in test_read_file.py;
FoundRNN in test_found.py; params files in test_params_file.py.)"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import InexactConversionError, from_format, read_file, to_format
from cudnn_rnn.formats import FORMATS
from cudnn_rnn.convert.readers import FileReadError
from cudnn_rnn.layout import params_layout

from reading_testing import CONFIGS, fields_of, random_params, savez


# ---- named formats in an .npz: the configuration read off the shapes ------------------------------
@pytest.mark.parametrize("fmt", ["torch", "keras", "onnx", "tf_cell", "gru_block_cell", "mygrad"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_format_tells_its_configuration(tmp_path: Path, fmt: str, name: str) -> None:
    config = CONFIGS[name]
    if fmt in ("gru_block_cell", "mygrad"):
        config = RNNConfig("gru", 1, config.num_units, config.input_size, dtype=config.dtype)
    if fmt in ("keras", "onnx") and config.num_proj:
        config = config.replace(num_proj=0)
    params = random_params(config)
    allow = fmt in ("gru_block_cell", "mygrad")
    tensors = to_format(fmt, params, config, allow_approximation=allow).value
    found = read_file(savez(tmp_path / "w.npz", **tensors))
    assert len(found) == 1 and found[0].fmt == fmt and found[0].name == "w.npz"
    rnn = found[0]
    if config.num_gates == 1 and fmt in ("torch", "keras", "onnx", "tf_cell"):
        assert set(rnn.questions) == {"rnn_mode"} and rnn.questions["rnn_mode"].choices == ("rnn_tanh", "rnn_relu")
        assert "needs: " in rnn.conversion() and "rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'" in rnn.conversion()
        rnn = rnn.with_hints(rnn_mode=config.rnn_mode)
    assert dict(rnn.fields) == fields_of(config)
    assert rnn.config == config
    expected = from_format(fmt, tensors, config, allow_approximation=allow).value
    assert rnn.to_params(allow_approximation=allow).value.tobytes() == expected.tobytes()
    assert rnn.conversion() == ("exact" if not allow else rnn.conversion())


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_is_recognised_by_its_names(tmp_path: Path, fmt: str) -> None:
    config = RNNConfig("gru", 1, 3, 2)
    tensors = to_format(fmt, random_params(config), config, allow_approximation=True).value
    assert read_file(savez(tmp_path / "w.npz", **tensors))[0].fmt == fmt


def test_a_reset_before_gru_converts_only_approximately(tmp_path: Path) -> None:
    config = RNNConfig("gru", 1, 3, 2)
    tensors = to_format("mygrad", random_params(config), config, allow_approximation=True).value
    rnn = read_file(savez(tmp_path / "m.npz", **tensors))[0]
    assert rnn.conversion().startswith("approximate: format 'mygrad' is a reset-before GRU")
    with pytest.raises(InexactConversionError):
        rnn.to_params()


def test_missing_biases_are_zeros(tmp_path: Path) -> None:
    config = RNNConfig("lstm", 2, 3, 2, direction="bidirectional")
    tensors = {k: v for k, v in to_format("torch", random_params(config), config).value.items() if "bias" not in k}
    rnn = read_file(savez(tmp_path / "nobias.npz", **tensors))[0]
    assert rnn.notes == ("the state_dict has no biases (bias=False): zero biases are used, the same function",)
    params = rnn.to_params().value
    for entry in params_layout(config).biases:
        assert not params_layout(config).view(params, entry).any()


def test_biases_are_omitted_per_layer_only_where_the_format_allows_it(tmp_path: Path) -> None:
    config = RNNConfig("gru", 2, 3, 2, direction="bidirectional")
    onnx = to_format("onnx", random_params(config), config).value
    rnn = read_file(savez(tmp_path / "onnx.npz", **{k: v for k, v in onnx.items() if k != "layer_1/B"}))[0]
    assert rnn.notes == ("layer 1 has no B: zero biases are used, the same function",)
    assert np.array_equal(rnn.tensors["layer_0/B"], onnx["layer_0/B"]) and not rnn.tensors["layer_1/B"].any()
    torch = to_format("torch", random_params(config), config).value
    with pytest.raises(FileReadError, match=r"missing \['bias_ih_l1'\]"):
        read_file(savez(tmp_path / "torch.npz", **{k: v for k, v in torch.items() if k != "bias_ih_l1"}))


def test_names_or_shapes_that_do_not_fit_are_named(tmp_path: Path) -> None:
    config = RNNConfig("lstm", 2, 3, 2)
    tensors = to_format("torch", random_params(config), config).value
    broken = dict(tensors, weight_hh_l1=tensors["weight_hh_l1"][:, :2])
    with pytest.raises(FileReadError, match=r"format 'torch' tensor 'weight_hh_l1' must have shape \(12, 3\) .*"
                                            r"got \(12, 2\)"):
        read_file(savez(tmp_path / "a.npz", **broken))
    gap = {k: v for k, v in tensors.items() if not k.endswith("_l0")} | {"weight_ih_l0": tensors["weight_ih_l0"]}
    with pytest.raises(FileReadError, match="tensor 'weight_hh_l0' is missing"):
        read_file(savez(tmp_path / "b.npz", **gap))
    extra = dict(tensors, weight_ih_l3=tensors["weight_ih_l1"])
    with pytest.raises(FileReadError, match=r"layer\(s\) \[2\] are missing"):
        read_file(savez(tmp_path / "c.npz", **extra))
    odd = dict(tensors, weight_ih_l0=tensors["weight_ih_l0"][:10])
    with pytest.raises(FileReadError, match=r"tensor 'weight_ih_l0' has 10 gate rows for 3 units"):
        read_file(savez(tmp_path / "d.npz", **odd))


def test_mixed_dtypes_name_the_odd_tensor(tmp_path: Path) -> None:
    config = RNNConfig("gru", 1, 3, 2)
    tensors = to_format("torch", random_params(config), config).value
    tensors["bias_hh_l0"] = tensors["bias_hh_l0"].astype(np.float64)
    with pytest.raises(TypeError, match="tensor 'bias_hh_l0' is float64 while the others are float32"):
        read_file(savez(tmp_path / "m.npz", **tensors))


def test_a_keras_reset_before_bias_points_at_the_right_format(tmp_path: Path) -> None:
    config = RNNConfig("gru", 1, 3, 2)
    tensors = to_format("keras", random_params(config), config).value
    tensors["layer_0/forward/bias"] = tensors["layer_0/forward/bias"][0]
    with pytest.raises(FileReadError, match="GRU.reset_after=False.*'gru_block_cell' or 'mygrad' format"):
        read_file(savez(tmp_path / "k.npz", **tensors))


def test_unknown_names_ask_for_the_format(tmp_path: Path) -> None:
    with pytest.raises(FileReadError, match=r"neither a params buffer nor the tensors of a known format \(it holds "
                                            r"\['a', 'b'\]\): pass fmt=FORMAT"):
        read_file(savez(tmp_path / "x.npz", a=np.zeros(2), b=np.zeros(3)))


# ---- bare buffers (params files: test_params_file.py) -------------------------------------------
def test_a_bare_buffer_asks_for_every_size(tmp_path: Path) -> None:
    config = CONFIGS["gru_L3"]
    params = random_params(config)
    rnn = read_file(savez(tmp_path / "p.npz", params=params))[0]
    assert rnn.describe() == ("rnn_mode=?, num_layers=?, num_units=?, input_size=?, direction=unidirectional?, "
                              "num_proj=0?, input_mode=linear_input?, dtype=float32")
    with pytest.raises(ValueError, match=r"a bare params buffer does not say its configuration: pass "
                                         r"rnn_mode=RNN_MODE, num_layers=NUM_LAYERS, num_units=NUM_UNITS, "
                                         r"input_size=INPUT_SIZE$"):
        _ = rnn.config  # evaluated for the ValueError it raises
    answered = rnn.with_hints(rnn_mode="gru", num_layers=3, num_units=4, input_size=6)
    assert answered.config == config and answered.to_params().value.tobytes() == params.tobytes()
    wrong = rnn.with_hints(rnn_mode="gru", num_layers=2, num_units=4, input_size=6)
    with pytest.raises(ValueError, match="params must be 1-D with"):
        wrong.to_params()


# ---- hostile .npz archives ------------------------------------------------------------------------
def npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def test_an_absurd_declared_shape_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "absurd.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("weight_ih_l0.npy", npy_header((2**40, 2**20)) + bytes(16))
    with pytest.raises(FileReadError, match=r"tensor 'weight_ih_l0' declares shape \(1099511627776, 1048576\) "
                                            r"\(4611686018427387904 bytes\) but the file stores only 16 bytes"):
        read_file(path)


def test_a_decompression_bomb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.npz"
    size = 4 * 2**20  # 16 MiB of zeros deflate to about 16 KiB: within the ratio, so declare more than that
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("params.npy", npy_header((size * 64,)) + bytes(4 * size))
    with pytest.raises(FileReadError, match="tensor 'params' declares shape"):
        read_file(path)


def test_object_arrays_are_never_unpickled(tmp_path: Path) -> None:
    path = tmp_path / "objects.npz"
    with open(path, "wb") as handle:
        np.savez(handle, params=np.array([{"a": 1}], dtype=object))
    with pytest.raises(FileReadError, match="member 'params' holds Python objects .a pickle., which are never loaded"):
        read_file(path)


def test_a_truncated_archive_is_refused(tmp_path: Path) -> None:
    config = RNNConfig("lstm", 1, 8, 8)
    whole = savez(tmp_path / "whole.npz", **to_format("torch", random_params(config), config).value).read_bytes()
    for cut in (len(whole) // 3, len(whole) - 30):
        path = tmp_path / f"cut{cut}.npz"
        path.write_bytes(whole[:cut])
        with pytest.raises(FileReadError) as error:
            read_file(path)
        assert "\n" not in str(error.value)


