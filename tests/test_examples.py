"""Every example runs in quick mode and reaches its stated outcome, not just exit code 0."""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn.layers import GRU, LSTM

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_example(name: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run examples/<name>.py --quick on the NumPy backend, with this checkout importable."""
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [sys.executable, str(EXAMPLES / f"{name}.py"), "--quick", "--backend", "numpy", "--out", str(out),
               *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert result.returncode == 0, f"{name} failed with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def run_and_read(name: str, out: Path, summary: str) -> tuple[subprocess.CompletedProcess, list[float], dict]:
    """Run the example, then the numbers of its printed ``summary`` line (a regex) and its metrics.json."""
    result = run_example(name, out)
    printed = re.search(summary, result.stdout, re.M)
    assert printed, result.stdout
    return result, [float(number) for number in printed.groups()], json.loads((out / "metrics.json").read_text())


def assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 5000, f"{path} missing or too small for a plot"
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_char_lm_validation_loss_falls(tmp_path: Path) -> None:
    result, (start, end), metrics = run_and_read("train_char_lm", tmp_path,
                                                 r"^validation loss: ([\d.]+) -> ([\d.]+)$")
    assert abs(start - math.log(metrics["vocab_size"])) < 0.1, "an untrained model guesses about uniformly"
    assert end < start - 0.8, f"validation loss must fall by more than 0.8 nats in quick mode; {start} -> {end}"
    assert metrics["val_loss_end"] == pytest.approx(end, abs=5e-4)
    assert "--- sample before training ---" in result.stdout and "--- sample after training ---" in result.stdout
    assert re.search(r"step 40/40 \[#+\] loss [\d.]+ +val [\d.]+ \(step 40\) +[\d,]+ chars/s", result.stdout)
    lines = re.findall(r"^step +(\d+)/40 .* val ([\d.]+) \(step (\d+)\) .* eta (\S+)$", result.stdout, re.M)
    assert [int(step) for step, _, _, _ in lines] == [1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 40], result.stdout
    # each line's validation loss is the newest (every 10 steps), named with the step it was measured at
    assert [int(measured) for _, _, measured, _ in lines] == [0, 0, 0, 10, 10, 20, 20, 20, 30, 30, 40]
    assert float(lines[-1][1]) == pytest.approx(end, abs=5e-4) and float(lines[0][1]) == pytest.approx(start, abs=5e-4)
    assert [eta for _, _, _, eta in lines][0] == "...", "the first step (compiling) gives no ETA"
    assert all(re.fullmatch(r"\d+s", eta) for _, _, _, eta in lines[1:])
    assert_png(tmp_path / "loss_curve.png")
    # the checkpoint restores the trained model exactly
    assert metrics["val_loss_reloaded"] == metrics["val_loss_end"]
    lstm = LSTM.load(tmp_path / "lstm.npz")
    assert lstm.config.input_size == metrics["vocab_size"] and lstm.step == metrics["steps"]
    readout = np.load(tmp_path / "readout.npz")
    assert readout["weight"].shape == (lstm.config.num_units, metrics["vocab_size"])
    assert len(str(readout["vocab"])) == metrics["vocab_size"]


def test_the_progress_bar_leaves_the_first_step_out_of_its_rate_and_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first step of 100 s (compiling) and then 1 s a step: at step 5 of 10 the ETA is 5 s, not 100 s.

    Before, the ETA was the mean over every step so far, the compile included (1,868 s on the first line).
    """
    sys.path.insert(0, str(EXAMPLES))
    try:
        import _common
    finally:
        sys.path.remove(str(EXAMPLES))
    clock = iter([0.0, 100.0, *(100.0 + step for step in range(1, 10))])  # start, then the end of each step
    monkeypatch.setattr(_common.time, "perf_counter", lambda: next(clock))
    stream = io.StringIO()
    bar = _common.ProgressBar(10, unit="chars", stream=stream)
    for step in range(1, 11):
        bar.update(step, 500, loss=2.0, val=(3.0, 0))
    lines = stream.getvalue().splitlines()  # (not a terminal: a line per tenth of the run, here every step)
    assert lines[0] == "step  1/10 [##----------------------] loss 2.000  val 3.000 (step 0)  5 chars/s  eta ...", \
        lines[0]  # 500 chars in 100 s
    assert [line.rsplit("  ", 2)[1:] for line in lines[1:]] == [["500 chars/s", f"eta {10 - step}s"]
                                                                 for step in range(2, 11)], lines


def test_char_lm_jax_validation_loss_falls(tmp_path: Path) -> None:
    """The same model in JAX (embedding -> cudnn_rnn.jax -> dense, optax) learns as the NumPy example does."""
    result, (start, end), metrics = run_and_read("train_char_lm_jax", tmp_path,
                                                 r"^validation loss: ([\d.]+) -> ([\d.]+)$")
    assert abs(start - math.log(metrics["vocab_size"])) < 0.1, "an untrained model guesses about uniformly"
    assert end < start - 0.8, f"validation loss must fall by more than 0.8 nats in quick mode; {start} -> {end}"
    assert metrics["val_loss_end"] == pytest.approx(end, abs=5e-4)
    assert metrics["val_loss_reloaded"] == metrics["val_loss_end"]
    assert "--- sample before training ---" in result.stdout and "--- sample after training ---" in result.stdout
    assert re.search(r"step 40/40 \[#+\] loss [\d.]+ +val [\d.]+ \(step 40\) +[\d,]+ chars/s", result.stdout)
    assert_png(tmp_path / "loss_curve.png")
    saved = np.load(tmp_path / "model.npz")
    assert saved["lstm"].shape == (cudnn_rnn.cudnn_rnn_params_size(2, 64, 32),)
    assert len(str(saved["vocab"])) == metrics["vocab_size"]


def test_char_lm_torch_validation_loss_falls(tmp_path: Path) -> None:
    """The same model in PyTorch (embedding -> cudnn_rnn.torch.LSTM -> linear, torch.optim) learns as the NumPy one."""
    result, (start, end), metrics = run_and_read("train_char_lm_torch", tmp_path,
                                                 r"^validation loss: ([\d.]+) -> ([\d.]+)$")
    assert abs(start - math.log(metrics["vocab_size"])) < 0.1, "an untrained model guesses about uniformly"
    assert end < start - 0.8, f"validation loss must fall by more than 0.8 nats in quick mode; {start} -> {end}"
    assert metrics["val_loss_reloaded"] == metrics["val_loss_end"] and metrics["device"] == "cpu"
    assert "--- sample before training ---" in result.stdout and "--- sample after training ---" in result.stdout
    assert re.search(r"step 40/40 \[#+\] loss [\d.]+ +val [\d.]+ \(step 40\) +[\d,]+ chars/s", result.stdout)
    assert_png(tmp_path / "loss_curve.png")
    lstm = LSTM.load(tmp_path / "lstm.npz")
    assert lstm.step == metrics["steps"] and lstm.config.num_layers == 2


def test_classifier_beats_chance_and_uses_lengths(tmp_path: Path) -> None:
    _, (accuracy, chance), metrics = run_and_read("classify_variable_length", tmp_path,
                                                  r"^held-out accuracy: ([\d.]+) \(chance ([\d.]+)\)$")
    assert chance == pytest.approx(1 / 3, abs=1e-3)
    assert accuracy >= 0.65, f"held-out accuracy {accuracy} must be at least 0.65 in quick mode (chance {chance})"
    assert accuracy >= metrics["best_possible"] - 0.1, "within 0.1 of the best possible rule"
    assert metrics["accuracy_without_lengths"] < accuracy - 0.03, "the lengths must matter"
    assert set(metrics["accuracy_by_length"]) == {"1-2", "3-6", "7-16"}
    assert_png(tmp_path / "loss_curve.png")
    gru = GRU.load(tmp_path / "gru.npz")
    assert gru.config.num_directions == 2


def test_gru_block_cell_check_passes_and_training_converges(tmp_path: Path) -> None:
    result = run_example("gru_block_cell", tmp_path)
    assert "gradient check: passed" in result.stdout
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["passed"] and report["worst"] <= 1e-6
    assert len(report["errors"]) == 12  # 6 gradients, one cell and unrolled
    assert report["loss_end"] < 0.25 * report["loss_start"]


def test_gru_block_cell_check_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    """The published doc's typo (d_h_prev missing the d_h factor) must be caught: exit status 1."""
    import cudnn_rnn

    monkeypatch.syspath_prepend(str(EXAMPLES))
    import gru_block_cell as example

    true_grad = cudnn_rnn.gru_block_cell_grad

    def doc_typo_grad(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h):
        d_x, d_h_prev, d_c_bar, d_r_bar_u_bar = true_grad(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h)
        return d_x, d_h_prev - d_h * u + u, d_c_bar, d_r_bar_u_bar

    monkeypatch.setattr(cudnn_rnn, "gru_block_cell_grad", doc_typo_grad)
    assert example.main(["--quick", "--steps", "2", "--backend", "numpy", "--out", str(tmp_path)]) == 1
    assert "gradient check: FAILED" in capsys.readouterr().out
