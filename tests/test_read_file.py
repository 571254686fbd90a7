"""read_file's entry point, NumPy only: the readers it imports, and the options each file kind takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import read_file, to_format
from cudnn_rnn.convert.readers import FILE_KINDS, OPTION_USES, file_kind
from cudnn_rnn.layout import params_layout
from rnn_testing import read_refusal

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
        path = tmp_path / "parent.npz"
        np.savez(path, **{f"rnn.{name}": value for name, value in to_format("torch", params, config).value.items()})
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
    fmt = FILE_KINDS[kind].formats[0] if kind != "tf_checkpoint" else read_file(path)[0].fmt
    assert all(found.fmt == fmt for found in read_file(path, fmt=fmt))
