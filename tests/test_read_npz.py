"""Reading model files, NumPy only: what every reader shares (FoundRNN, file kinds by content,
questions and overrides, stacking), the .npz reader, and hostile .npz archives."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import FORMATS, InexactConversionError, from_format, read_file, stack, to_format
from cudnn_rnn.convert.readers import FILE_KINDS, FileReadError, FoundRNN, Question, choose, file_kind
from cudnn_rnn.convert.readers._found import MAX_COMPRESSION_RATIO, check_declared_size, one_line
from cudnn_rnn.layout import params_layout

from rnn_testing import relative_error


def random_params(config: RNNConfig, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, params_layout(config).size).astype(config.dtype)


def savez(path: Path, **arrays: np.ndarray) -> Path:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    return path


CONFIGS = {
    "lstm_bi_proj": RNNConfig("lstm", 2, 5, 3, direction="bidirectional", num_proj=2),
    "gru_L3": RNNConfig("gru", 3, 4, 6),
    "relu_bi": RNNConfig("rnn_relu", 1, 3, 2, direction="bidirectional", dtype="float64"),
    "tanh_f16": RNNConfig("rnn_tanh", 2, 3, 3, dtype="float16"),
}


def fields_of(config: RNNConfig) -> dict:
    return {name: getattr(config, name) for name in ("rnn_mode", "num_layers", "num_units", "input_size",
                                                     "direction", "num_proj", "input_mode", "dtype")}


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


# ---- overrides, choosing, stacking ---------------------------------------------------------------
def found_layer(config: RNNConfig, name: str, seed: int = 0) -> FoundRNN:
    tensors = to_format("torch", random_params(config, seed), config).value
    return FoundRNN(name, "test layer", "torch", tensors, fields_of(config))


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


def test_stack_chains_consecutive_layers_into_one_network() -> None:
    first = RNNConfig("lstm", 1, 4, 3, direction="bidirectional")
    second = RNNConfig("lstm", 2, 4, 8, direction="bidirectional")
    a, b = found_layer(first, "a", 1), found_layer(second, "b", 2)
    stacked = stack([a, b])
    assert stacked.name == "a+b" and stacked.fmt == "torch"
    whole = RNNConfig("lstm", 3, 4, 3, direction="bidirectional")
    assert stacked.config == whole
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    h0 = rng.standard_normal((6, 2, 4)).astype(np.float32)
    c0 = rng.standard_normal((6, 2, 4)).astype(np.float32)
    lengths = np.array([5, 3], np.int32)
    kwargs = dict(direction="bidirectional", is_training=False)
    y1 = cudnn_rnn.cudnn_rnn_v3(x, h0[:2], c0[:2], a.to_params().value, lengths, **kwargs)
    y2 = cudnn_rnn.cudnn_rnn_v3(y1.output, h0[2:], c0[2:], b.to_params().value, lengths, **kwargs)
    whole_out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, stacked.to_params().value, lengths, **kwargs)
    assert relative_error(whole_out.output, y2.output) <= 1e-6
    assert relative_error(whole_out.output_h, np.concatenate([y1.output_h, y2.output_h])) <= 1e-6


def test_stack_refuses_layers_that_do_not_chain() -> None:
    a = found_layer(RNNConfig("lstm", 1, 4, 3), "a")
    with pytest.raises(ValueError, match="cannot stack b on a: its input size is 5, a outputs 4 features per step"):
        stack([a, found_layer(RNNConfig("lstm", 1, 4, 5), "b")])
    with pytest.raises(ValueError, match="cannot stack g on a: rnn_mode is 'gru', the first layer's is 'lstm'"):
        stack([a, found_layer(RNNConfig("gru", 1, 4, 4), "g")])


def test_choose_needs_a_name_when_a_file_holds_several() -> None:
    a, b = found_layer(RNNConfig("gru", 1, 4, 3), "a"), found_layer(RNNConfig("gru", 1, 4, 4), "b")
    assert choose([a]) is a and choose([a, b], ["b"]) is b
    with pytest.raises(ValueError, match=r"the file holds 2 RNNs: a \(test layer\); b \(test layer\); pick one with "
                                         r"names=\[NAME\], or stack consecutive layers with names=\[FIRST, SECOND\] "
                                         r"or stack_all=True"):
        choose([a, b])
    with pytest.raises(ValueError, match="no RNN named 'c' in the file; it holds: a"):
        choose([a, b], ["c"])
    assert choose([a, b], stack_all=True).config.num_layers == 2


def test_hints_answer_the_questions_of_layers_before_they_are_stacked() -> None:
    a, b = found_layer(RNNConfig("rnn_relu", 1, 4, 3), "a"), found_layer(RNNConfig("rnn_relu", 1, 4, 4), "b")
    ask = {"rnn_mode": Question(("rnn_tanh", "rnn_relu"), "test")}
    a, b = (item.replace(fields={k: v for k, v in item.fields.items() if k != "rnn_mode"}, questions=ask)
            for item in (a, b))
    with pytest.raises(ValueError, match="pass rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'"):
        choose([a, b], stack_all=True)
    stacked = choose([a, b], stack_all=True, hints={"rnn_mode": "rnn_relu", "num_layers": None})
    assert stacked.config == RNNConfig("rnn_relu", 2, 4, 3)
    assert choose([a, b], ["a", "b"], hints={"rnn_mode": "rnn_relu", "num_layers": 2}).config.num_layers == 2
    with pytest.raises(ValueError, match="num_layers=1 disagrees with the file: a\\+b"):
        choose([a, b], stack_all=True, hints={"rnn_mode": "rnn_relu", "num_layers": 1})
    assert choose([a], hints={"rnn_mode": "rnn_tanh"}).config.rnn_mode == "rnn_tanh"


# ---- file kinds come from the content -------------------------------------------------------------
def test_kinds_are_read_from_the_content_not_the_name(tmp_path: Path) -> None:
    config = RNNConfig("gru", 1, 3, 2)
    renamed = savez(tmp_path / "weights.bin", **to_format("torch", random_params(config), config).value)
    assert file_kind(str(renamed)) is FILE_KINDS["npz"]
    assert read_file(renamed)[0].config == config
    hdf5 = tmp_path / "model.npz"
    hdf5.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    assert file_kind(str(hdf5)) is FILE_KINDS["hdf5"]
    keras = tmp_path / "model_keras.npz"
    with zipfile.ZipFile(keras, "w") as archive:
        archive.writestr("config.json", "{}")
        archive.writestr("model.weights.h5", b"")
    assert file_kind(str(keras)) is FILE_KINDS["keras"]
    torch_zip = tmp_path / "t.npz"
    with zipfile.ZipFile(torch_zip, "w") as archive:
        archive.writestr("archive/data.pkl", b"")
    assert file_kind(str(torch_zip)) is FILE_KINDS["torch"]
    (tmp_path / "p.npz").write_bytes(b"\x80\x04K\x01.")
    assert file_kind(str(tmp_path / "p.npz")) is FILE_KINDS["torch"]
    (tmp_path / "ckpt-3.index").write_bytes(b"x")
    assert file_kind(str(tmp_path / "ckpt-3")) is FILE_KINDS["tf_checkpoint"]
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    assert file_kind(str(tmp_path / "checkpoint")) is FILE_KINDS["tf_checkpoint"]
    saved_model = tmp_path / "saved"
    (saved_model / "variables").mkdir(parents=True)
    (saved_model / "saved_model.pb").write_bytes(b"\x08\x01")  # starts like an ONNX model
    assert file_kind(str(saved_model / "saved_model.pb")) is FILE_KINDS["tf_checkpoint"]
    (tmp_path / "lone.pb").write_bytes(b"\x08\x01")
    assert file_kind(str(tmp_path / "lone.pb")) is FILE_KINDS["onnx"]


@pytest.mark.parametrize("content, match", [
    (b"", "the file is empty"),
    (b"\x1b[31mhello\x1b[0m", "not a model file of a known kind"),
])
def test_unknown_files_are_refused_in_one_line(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "file.dat"
    path.write_bytes(content)
    with pytest.raises(FileReadError, match=match) as error:
        read_file(path)
    assert "\n" not in str(error.value) and "\x1b" not in str(error.value)


def test_other_zip_archives_say_what_they_hold(tmp_path: Path) -> None:
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hi")
    with pytest.raises(FileReadError, match=r"neither a .keras model, a torch.save file nor an .npz archive; it holds "
                                            r"\['readme.txt'\]"):
        read_file(path)


def test_read_file_checks_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="path must be a str or os.PathLike; got int"):
        read_file(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="trust_pickle must be a bool; got str 'yes'"):
        read_file(tmp_path / "x.npz", trust_pickle="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fmt must be None, 'params' or one of"):
        read_file(tmp_path / "x.npz", fmt="pytorch")
    with pytest.raises(FileReadError, match="no such file"):
        read_file(tmp_path / "absent.npz")


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


def test_check_declared_size_and_one_line() -> None:
    assert check_declared_size("f", "t", (2, 3), 4, 24, False) == 24
    assert check_declared_size("f", "t", (1000,), 4, 4000 // MAX_COMPRESSION_RATIO + 1, True) == 4000
    with pytest.raises(FileReadError, match=r"tensor 't' declares an invalid shape \(-1, 3\)"):
        check_declared_size("f", "t", (-1, 3), 4, 100, False)
    assert one_line("a\n  b\x1b[1;31m c\x07") == "a b c"
    assert one_line("x" * 500, 20) == "x" * 17 + "..."
