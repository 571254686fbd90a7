"""``cudnn-rnn convert`` with .npz files (NumPy only): conversions, what it prints, every refusal.

Each refusal must exit with status 2, print one ``error:`` line (no traceback), and leave the
input file untouched. The .pt and .onnx paths are exercised in tests/oracle/.
"""

from __future__ import annotations

import errno
import os
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import RNNConfig
from cudnn_rnn.cli import main as cudnn_rnn_main
from cudnn_rnn.convert import from_format, to_format
from cudnn_rnn.cli.convert import EXAMPLES, main
from cudnn_rnn.params_file import read_params_file

LSTM = RNNConfig("lstm", 2, 3, 2, direction="bidirectional")
LSTM_ARGS = ["--rnn-mode", "lstm", "--num-layers", "2", "--num-units", "3", "--input-size", "2",
             "--direction", "bidirectional"]


def params_for(config: RNNConfig, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    size = cudnn_rnn.cudnn_rnn_params_size(config.num_layers, config.num_units, config.input_size,
                                           rnn_mode=config.rnn_mode, direction=config.direction,
                                           num_proj=config.num_proj, input_mode=config.input_mode)
    return np.random.default_rng(seed).uniform(-1, 1, size).astype(dtype)


def save(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    with open(path, "wb") as handle:
        np.savez(handle, **tensors)
    return path


def load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def refused(capsys: pytest.CaptureFixture, argv: list[str], *, match: str) -> None:
    """Run argv, expect exit status 2 and one error line containing ``match``."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("cudnn-rnn convert: error: "), captured.err
    assert "Traceback" not in captured.err
    assert match in captured.err, captured.err


def test_torch_npz_to_params_and_back(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    params = params_for(LSTM)
    torch_file = save(tmp_path / "torch.npz", to_format("torch", params, LSTM).value)
    assert main(["--from", "torch", "--to", "params", *LSTM_ARGS, str(torch_file), str(tmp_path / "p.npz")]) == 0
    out = capsys.readouterr().out
    assert "converted torch.npz (torch tensors in an .npz archive, format torch) -> params (rnn_mode='lstm', " \
           "num_layers=2, num_units=3, input_size=2, direction='bidirectional', dtype=float32)" in out
    assert f"read 16 tensor(s) from {torch_file}; wrote a params file" in out
    assert "exact: the result computes the same function" in out
    written = read_params_file(tmp_path / "p.npz")
    assert written.params.tobytes() == params.tobytes() and written.config == LSTM and written.step == 0
    assert cudnn_rnn.LSTM.load(tmp_path / "p.npz").params.tobytes() == params.tobytes()
    assert main(["--from", "params", "--to", "torch", *LSTM_ARGS,
                 str(tmp_path / "p.npz"), str(tmp_path / "t.npz")]) == 0
    again = load(tmp_path / "t.npz")
    original = load(torch_file)
    assert list(again) == list(original)
    assert all(again[k].tobytes() == v.tobytes() for k, v in original.items())


def test_format_to_format_matches_the_library(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = RNNConfig("gru", 1, 4, 3)
    keras = to_format("keras", params_for(config, 1), config).value
    save(tmp_path / "k.npz", keras)
    argv = ["--from", "keras", "--to", "tf_cell", "--rnn-mode", "gru", "--num-layers", "1", "--num-units", "4",
            "--input-size", "3", str(tmp_path / "k.npz"), str(tmp_path / "tf.npz")]
    assert main(argv) == 0
    expected = to_format("tf_cell", from_format("keras", keras, config).value, config).value
    written = load(tmp_path / "tf.npz")
    assert list(written) == list(expected) and all(np.array_equal(written[k], v) for k, v in expected.items())
    assert "wrote 6 tensor(s)" in capsys.readouterr().out


def test_approximations_are_refused_then_printed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = RNNConfig("gru", 1, 4, 3)
    save(tmp_path / "p.npz", {"params": params_for(config, 2)})
    argv = ["--from", "params", "--to", "mygrad", "--rnn-mode", "gru", "--num-layers", "1", "--num-units", "4",
            "--input-size", "3", str(tmp_path / "p.npz"), str(tmp_path / "m.npz")]
    refused(capsys, argv, match="Pass --allow-approximation to accept this.")
    assert not (tmp_path / "m.npz").exists()
    assert main(argv + ["--allow-approximation"]) == 0
    out = capsys.readouterr().out
    assert "approximated (the result computes a different function):" in out
    assert "  - cuDNN's GRU applies the reset gate after" in out and "bR_n" in out
    assert sorted(load(tmp_path / "m.npz")) == sorted(["Uz", "Wz", "bz", "Ur", "Wr", "br", "Uh", "Wh", "bh"])


def test_help_shows_the_examples_through_the_dispatcher(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cudnn_rnn_main(["convert", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "--allow-approximation" in out
    for purpose, lines in EXAMPLES:
        assert f"# {purpose}" in out
        assert " \\\n      ".join(lines) in out


def _example_argv(index: int) -> list[str]:
    return shlex.split(" ".join(EXAMPLES[index][1]))[2:]  # drop "cudnn-rnn convert"


#: the examples that convert named tensors between .npz files (the others run in tests/oracle)
NPZ_EXAMPLES = [index for index in range(len(EXAMPLES)) if "--from" in _example_argv(index)
                and all(path.endswith(".npz") for path in _example_argv(index)[-2:])]


def test_there_are_npz_examples() -> None:
    assert len(NPZ_EXAMPLES) >= 2


@pytest.mark.parametrize("index", NPZ_EXAMPLES)
def test_help_examples_run(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch, index: int) -> None:
    argv = _example_argv(index)
    config = RNNConfig("gru", 1, 8, 4)
    source_format, source_file = argv[argv.index("--from") + 1], argv[-2]
    source = to_format(source_format, params_for(config, index), config, allow_approximation=True).value
    monkeypatch.chdir(tmp_path)
    save(tmp_path / source_file, source)
    assert cudnn_rnn_main(["convert", *argv]) == 0
    assert (tmp_path / argv[-1]).is_file()
    capsys.readouterr()


# ---- refusals ------------------------------------------------------------------------------
@pytest.fixture
def torch_file(tmp_path: Path) -> Path:
    return save(tmp_path / "torch.npz", to_format("torch", params_for(LSTM), LSTM).value)


def convert_argv(source: Path, target: Path, *extra: str, fmt: str = "torch", to: str = "params") -> list[str]:
    return ["--from", fmt, "--to", to, *LSTM_ARGS, *extra, str(source), str(target)]


def test_output_that_exists_needs_force(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "p.npz"
    target.write_bytes(b"keep me")
    refused(capsys, convert_argv(torch_file, target), match=f"output {str(target)!r} already exists; pass --force")
    assert target.read_bytes() == b"keep me"
    assert main(convert_argv(torch_file, target, "--force")) == 0
    assert sorted(load(target)) == ["config", "format", "params", "step"]


@pytest.mark.parametrize("link", ["same", "symlink", "hardlink"])
def test_never_writes_over_its_input(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture,
                                     link: str) -> None:
    before = torch_file.read_bytes()
    target = torch_file if link == "same" else tmp_path / "alias.npz"
    if link == "symlink":
        target.symlink_to(torch_file)
    elif link == "hardlink":
        os.link(torch_file, target)
    refused(capsys, convert_argv(torch_file, target, "--force", to="torch"),
            match="is the input file (the same path, or a link to it)")
    assert torch_file.read_bytes() == before


def test_a_wrong_layer_count_is_refused(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture) -> None:
    argv = convert_argv(torch_file, tmp_path / "p.npz")
    argv[argv.index("--num-layers") + 1] = "3"
    refused(capsys, argv, match="--num-layers 3 disagrees with the file: torch.npz (torch tensors in an .npz "
                                "archive) has num_layers=2; drop the flag or pick another RNN")
    assert not (tmp_path / "p.npz").exists()


def test_a_file_of_another_format_is_refused(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture) -> None:
    refused(capsys, convert_argv(torch_file, tmp_path / "p.npz", fmt="keras"),
            match="the tensors do not form a 'keras' RNN: unexpected tensor(s) ['weight_ih_l0'")


def test_unreadable_and_missing_inputs_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip archive")
    refused(capsys, convert_argv(garbage, tmp_path / "p.npz"),
            match=f"cannot read {str(garbage)!r}: not a model file of a known kind (a NumPy .npz archive, ")
    refused(capsys, convert_argv(tmp_path / "absent.npz", tmp_path / "p.npz"),
            match=f"cannot read {str(tmp_path / 'absent.npz')!r}: no such file")


def test_params_file_needs_exactly_the_params_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = save(tmp_path / "p.npz", {"weights": params_for(LSTM)})
    refused(capsys, convert_argv(source, tmp_path / "t.npz", fmt="params", to="torch"),
            match="a params buffer is one array named 'params'; the archive holds ['weights']")
    source = save(tmp_path / "q.npz", {"params": params_for(LSTM)[:-1]})
    refused(capsys, convert_argv(source, tmp_path / "t.npz", fmt="params", to="torch"), match="params must be 1-D with")


@pytest.mark.parametrize("name, match", [
    ("out.txt", "OUT 'OUT' must end in one of ('.npz', '.pt', '.pth', '.safetensors', '.keras', '.weights.h5', "
                "'.onnx'); got '.txt'"),
    ("out.onnx", "OUT 'OUT' is an ONNX model, which holds the onnx format, not --to params: name OUT ending in .npz "
                 "or .pt or .pth or .safetensors, or drop --to"),
    ("out.keras", "OUT 'OUT' is a Keras 3 model, which holds the keras format, not --to params"),
    ("out.weights.h5", "OUT 'OUT' is a Keras 3 weights file, which holds the keras format, not --to params"),
])
def test_output_file_types(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture, name: str,
                           match: str) -> None:
    refused(capsys, convert_argv(torch_file, tmp_path / name), match=match.replace("'OUT'", repr(str(tmp_path / name))))


@pytest.mark.parametrize("name, to, note", [
    ("out.safetensors", "keras", "holds the keras format's tensor names; torch's nn.LSTM.load_state_dict loads "
                                 "--to torch"),
    ("out.safetensors", "torch", None),
    ("out.npz", "torch", None),  # an .npz holds named tensors of any format, for np.load
    ("out.npz", "params", None),
])
def test_a_format_its_container_s_framework_does_not_load_is_said_in_one_line(
        tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture, name: str, to: str, note: str | None) -> None:
    """Written, and said on the output: which format OUT holds, and which --to the framework that loads such a
    file takes (nothing said where OUT holds that format)."""
    assert main(convert_argv(torch_file, tmp_path / name, to=to)) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "format's tensor names" in line]
    assert notes == ([f"note: {tmp_path / name} {note}"] if note else []), out


def test_a_model_file_holds_its_own_format(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "m.onnx").write_bytes(b"\x08\x07")
    refused(capsys, convert_argv(tmp_path / "m.onnx", tmp_path / "p.npz"),
            match="this is an ONNX model, which holds the onnx format, not 'torch': leave the format out")
    (tmp_path / "e.onnx").write_bytes(b"")
    refused(capsys, convert_argv(tmp_path / "e.onnx", tmp_path / "p.npz"), match="the file is empty")


def test_an_invalid_configuration_is_refused(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture) -> None:
    refused(capsys, convert_argv(torch_file, tmp_path / "p.npz", "--num-proj", "5"),
            match="--num-proj 5 disagrees with the file: torch.npz (torch tensors in an .npz archive) has num_proj=0")
    bare = save(tmp_path / "bare.npz", {"params": params_for(LSTM)})
    refused(capsys, ["--from", "params", "--to", "torch", "--rnn-mode", "gru", "--num-layers", "1", "--num-units", "3",
                     "--input-size", "2", "--num-proj", "1", str(bare), str(tmp_path / "t.npz")],
            match="invalid configuration: num_proj > 0 needs rnn_mode='lstm'")


def test_a_projection_to_keras_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = RNNConfig("lstm", 1, 3, 2, num_proj=2)
    source = save(tmp_path / "p.npz", {"params": params_for(config)})
    refused(capsys, ["--from", "params", "--to", "keras", "--rnn-mode", "lstm", "--num-layers", "1", "--num-units", "3",
                     "--input-size", "2", "--num-proj", "2", "--allow-approximation",
                     str(source), str(tmp_path / "k.npz")],
            match="format 'keras' cannot hold an LSTM projection (num_proj=2)")


def test_argument_errors_exit_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--from", "torch", "--to", "pytorch", *LSTM_ARGS, "a.npz", "b.npz"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'pytorch'" in capsys.readouterr().err


def test_runs_as_a_module(tmp_path: Path, torch_file: Path) -> None:
    import subprocess

    result = subprocess.run([sys.executable, "-m", "cudnn_rnn", "convert", *convert_argv(torch_file, torch_file)],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 2 and result.stderr.startswith("cudnn-rnn convert: error: ")
    assert "Traceback" not in result.stderr


def test_the_library_s_arguments_are_reported_as_flags(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = RNNConfig("rnn_relu", 1, 3, 2)
    tensors = to_format("torch", params_for(config), config).value
    two = save(tmp_path / "two.npz", {f"{rnn}.{name}": value for rnn in ("a", "b") for name, value in tensors.items()})
    refused(capsys, ["--rnn-mode", "rnn_relu", str(two), str(tmp_path / "p.npz")],
            match="pick one with --name NAME, or stack consecutive layers with --name FIRST --name SECOND or --stack")
    refused(capsys, [str(save(tmp_path / "x.npz", {"a": np.zeros(2)})), str(tmp_path / "p.npz")],
            match="(it holds ['a']): pass --from FORMAT")
    refused(capsys, [str(save(tmp_path / "rnn.npz", tensors)), str(tmp_path / "p.npz")],
            match="does not say its nonlinearity: pass --rnn-mode rnn_tanh or --rnn-mode rnn_relu")
    refused(capsys, ["--rnn-mode", "lstm", str(tmp_path / "rnn.npz"), str(tmp_path / "p.npz")],
            match="--rnn-mode lstm is not possible for rnn.npz")
    refused(capsys, ["--key", "model", str(tmp_path / "rnn.npz"), str(tmp_path / "p.npz")],
            match="--key applies to PyTorch checkpoint dicts (the entry holding the state_dict), not to a NumPy .npz "
                  "archive; ")


# ---- an OUT that cannot be written ------------------------------------------------------------
def test_an_out_in_a_missing_folder_is_refused(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The message names OUT as typed and the folder that is missing; nothing is made."""
    monkeypatch.chdir(tmp_path)
    refused(capsys, convert_argv(torch_file, Path("missing/p.npz")),
            match="cannot write OUT 'missing/p.npz': its folder 'missing' does not exist")
    refused(capsys, convert_argv(torch_file, tmp_path / "a" / "b" / "p.npz", "--force"),
            match=f"cannot write OUT {str(tmp_path / 'a' / 'b' / 'p.npz')!r}: its folder "
                  f"{str(tmp_path / 'a' / 'b')!r} does not exist")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["torch.npz"]


def test_an_out_whose_folder_is_a_file_is_refused(tmp_path: Path, torch_file: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    """file.txt/p.npz: the folder's path names a regular file (NotADirectoryError when written)."""
    (tmp_path / "file.txt").write_bytes(b"keep me")
    out = tmp_path / "file.txt" / "p.npz"
    refused(capsys, convert_argv(torch_file, out),
            match=f"cannot write OUT {str(out)!r}: its folder {str(tmp_path / 'file.txt')!r} is a file, not a folder")
    assert (tmp_path / "file.txt").read_bytes() == b"keep me"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file.txt", "torch.npz"]


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_an_out_that_is_a_folder_is_refused(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture,
                                            force: bool) -> None:
    """A folder named like an output file: refused (--force or not), the folder and its files untouched."""
    folder = tmp_path / "p.npz"
    folder.mkdir()
    (folder / "inside.txt").write_bytes(b"keep me")
    refused(capsys, convert_argv(torch_file, folder, *(["--force"] if force else [])),
            match=f"cannot write OUT {str(folder)!r}: it is a folder; give a file name")
    assert [path.name for path in folder.iterdir()] == ["inside.txt"]
    assert (folder / "inside.txt").read_bytes() == b"keep me"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["p.npz", "torch.npz"]


def test_a_full_disk_while_writing_is_refused(tmp_path: Path, torch_file: Path, capsys: pytest.CaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """No space left when the written file is flushed to the disk: one line, the old OUT kept, no partial file."""
    target = tmp_path / "p.npz"
    target.write_bytes(b"keep me")

    def disk_full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    refused(capsys, convert_argv(torch_file, target, "--force"),
            match=f"cannot write OUT {str(target)!r}: no space left on device")
    assert target.read_bytes() == b"keep me"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["p.npz", "torch.npz"]


def test_a_write_past_the_file_size_limit_is_refused(tmp_path: Path, torch_file: Path) -> None:
    """A real failing write: the command run with a 1 KiB file size limit (EFBIG mid-write), as a module."""
    import subprocess

    target = tmp_path / "p.npz"
    target.write_bytes(b"keep me")
    repo = Path(cudnn_rnn.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    # the limit is set by the child itself (a preexec_fn would fork this process, whose threads may include JAX's)
    limited = ("import resource, runpy; resource.setrlimit(resource.RLIMIT_FSIZE, (1024, "
               "resource.getrlimit(resource.RLIMIT_FSIZE)[1])); runpy.run_module('cudnn_rnn', run_name='__main__')")
    command = [sys.executable, "-c", limited, "convert", *convert_argv(torch_file, target, "--force")]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    too_large = os.strerror(errno.EFBIG)  # "File too large"
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"cudnn-rnn convert: error: cannot write OUT {str(target)!r}: " \
                            f"{too_large[:1].lower()}{too_large[1:]}\n"
    assert result.stdout == ""
    assert target.read_bytes() == b"keep me"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["p.npz", "torch.npz"]
