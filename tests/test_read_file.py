"""read_file's entry point, NumPy only: the readers it imports, the options each file kind takes, file kinds
read from the content, and stacking and choosing the RNNs a file holds."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import read_file, stack, to_format
from cudnn_rnn.files import _safetensors
from cudnn_rnn.files import write_bytes
from cudnn_rnn.convert.readers import FILE_KINDS, OPTION_USES, FileReadError, Question, choose, file_kind
from cudnn_rnn.layout import params_layout
from reading_testing import found_layer, random_params, savez
from rnn_testing import read_refusal, relative_error

HEAVY_FRAMEWORKS = ("h5py", "torch", "onnx", "tensorflow")
REPO = Path(__file__).resolve().parents[1]


def test_importing_convert_imports_no_framework() -> None:
    """Every reader module is imported with cudnn_rnn.convert; each imports its framework only to read a file."""
    script = ("import sys, cudnn_rnn.convert, cudnn_rnn.convert.readers; "
              f"print(' '.join(name for name in {HEAVY_FRAMEWORKS!r} if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"importing cudnn_rnn.convert imported {result.stdout.strip()}"


# ---- options each kind of file takes -------------------------------------------------------------
GOLDEN = REPO / "tests" / "golden" / "files"

#: kind -> a file of that kind, and the options of read_file it takes (besides fmt)
KINDS: dict[str, tuple[Path | None, tuple[str, ...]]] = {
    "npz": (None, ("prefix",)),  # None: written by the test
    "keras": (GOLDEN / "keras" / "keras3_functional.keras", ()),
    "hdf5": (GOLDEN / "keras" / "keras2_model.h5", ()),
    "torch": (GOLDEN / "torch" / "checkpoint.pt", ("key", "prefix", "trust_pickle")),
    "safetensors": (None, ("prefix",)),
    "onnx": (GOLDEN / "onnx" / "torch_lstm_L2_bi_opset14.onnx", ()),
    "tf_checkpoint": (GOLDEN / "tf_checkpoint" / "tf1_cudnn_lstm", ()),
}

#: the value each option is given in these tests
OPTION_VALUES: dict[str, object] = {"key": "model", "prefix": "rnn.", "trust_pickle": True}


def file_of_kind(kind: str, tmp_path: Path) -> Path:
    path = KINDS[kind][0]
    if path is None:
        config = RNNConfig("lstm", 1, 3, 2)
        params = np.zeros(params_layout(config).size, np.float32)
        tensors = {f"rnn.{name}": value for name, value in to_format("torch", params, config).value.items()}
        path = tmp_path / f"parent.{kind}"
        if kind == "safetensors":
            write_bytes(path, _safetensors.encode(tensors))
        else:
            np.savez(path, **tensors)
    return path


def test_the_kinds_declare_the_options_tested_here() -> None:
    assert set(KINDS) == set(FILE_KINDS)
    assert {kind: FILE_KINDS[kind].options for kind in KINDS} == {kind: options for kind, (_, options) in KINDS.items()}
    assert set(OPTION_VALUES) == set(OPTION_USES)


@pytest.mark.parametrize("kind, option", [(kind, option) for kind, (_, takes) in KINDS.items()
                                          for option in OPTION_VALUES if option not in takes])
def test_an_option_a_kind_does_not_take_is_refused(tmp_path: Path, kind: str, option: str) -> None:
    path = file_of_kind(kind, tmp_path)
    assert file_kind(str(path)) is FILE_KINDS[kind]
    message = read_refusal(path, **{option: OPTION_VALUES[option]})
    description = FILE_KINDS[kind].description
    assert f"{option}= applies to {OPTION_USES[option]}, not to {description}; " in message, message
    if option == "trust_pickle":
        assert message.endswith("nothing in it is unpickled: leave trust_pickle= out")
    else:
        assert message.endswith(f"{FILE_KINDS[kind].naming}: pick one by its name with names=[NAME] (the names are "
                                "listed by cudnn-rnn inspect)")


def test_onnx_refuses_key_and_prefix() -> None:
    """The ONNX reader ignored key= and prefix=; read_file refuses them like every kind that does not take them."""
    path = GOLDEN / "onnx" / "torch_lstm_L2_bi_opset14.onnx"
    assert read_refusal(path, key="model").endswith(
        "key= applies to PyTorch checkpoint dicts (the entry holding the state_dict), not to an ONNX model; an ONNX "
        "model names its RNNs by node: pick one by its name with names=[NAME] (the names are listed by cudnn-rnn "
        "inspect)")
    assert "prefix= applies to PyTorch state_dicts" in read_refusal(path, prefix="rnn.")


def test_the_options_a_kind_takes_are_read(tmp_path: Path) -> None:
    [found] = read_file(file_of_kind("npz", tmp_path), prefix="rnn.")
    assert found.name == "rnn" and found.config == RNNConfig("lstm", 1, 3, 2)
    pytest.importorskip("torch")
    assert [found.name for found in read_file(GOLDEN / "torch" / "checkpoint.pt", key="model")] == ["rnn"]
    assert [found.name for found in read_file(GOLDEN / "torch" / "parent_two_rnns.pt", prefix="decoder")] == ["decoder"]
    assert [found.fmt for found in read_file(GOLDEN / "torch" / "whole_lstm.pt", trust_pickle=True)] == ["torch"]


@pytest.mark.parametrize("kind, module", [("keras", "h5py"), ("hdf5", "h5py"), ("onnx", "onnx"),
                                          ("tf_checkpoint", "tensorflow")])
def test_every_kind_takes_the_format_it_holds(kind: str, module: str) -> None:
    pytest.importorskip(module)
    path = KINDS[kind][0]
    assert path is not None
    fmt = FILE_KINDS[kind].formats[0]  # tf_checkpoint's first, tf_cell, is what its golden file holds
    assert all(found.fmt == fmt for found in read_file(path, fmt=fmt))


# ---- choosing and stacking ----------------------------------------------------------------------
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
