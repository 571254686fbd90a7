"""Killing the training example at random moments, many of them inside a checkpoint write, loses nothing.

One uninterrupted run of ``examples/train_char_lm.py`` (dropout on, a checkpoint every few steps)
is the reference. Then the same run is started with ``--resume`` and SIGKILLed, again and again:
half of the kills at a uniformly random moment (start-up, training, a write, the final files),
half while a checkpoint is being written (the writes are slowed by ``tests/support/slow_writes.py``
so that the kill lands inside one). After every kill:

* every checkpoint file under its final name loads and verifies (no torn file, ever);
* the newest good checkpoint is never older than the newest one seen before (nothing lost),
  and as many good checkpoints remain as the manager keeps;

and the run that finally completes ends with the reference's weights, loss curve and validation
loss, bit for bit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from slow_writes import command as slow_command

from cudnn_rnn import LSTM, checkpoint
from cudnn_rnn.checkpoint import EXTENSION, CheckpointManager
from cudnn_rnn.files import PARTIAL_SUFFIX

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "train_char_lm.py"
STEPS, EVERY, KEEP = 240, 4, 3
KILLS = 16
#: seconds per 64 KiB chunk of a write while killing: a checkpoint (~850 KB) then takes ~0.15 s
PAUSE = "0.01"
#: the longest a single attempt may take before the test calls it hung
ATTEMPT_TIMEOUT = 120.0


def command(out: Path, steps: int = STEPS, pause: str | None = None) -> list[str]:
    """The example's command line; with ``pause``, its writes slowed to that many seconds per 64 KiB."""
    argv = [str(EXAMPLE), "--quick", "--backend", "numpy", "--steps", str(steps), "--checkpoint-every", str(EVERY),
            "--out", str(out)]
    return slow_command(pause, *argv) if pause else [sys.executable, *argv]


def environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def partial_files(out: Path) -> list[Path]:
    return [path for path in out.rglob("*") if PARTIAL_SUFFIX in path.name]


def wait_for_write(process: subprocess.Popen, out: Path, nth: int, deadline: float) -> None:
    """Return while the ``nth`` checkpoint write since now is under way (or when the process ends)."""
    seen: set[str] = set()
    folder = out / "checkpoints"
    while time.monotonic() < deadline and process.poll() is None:
        if folder.is_dir():
            writing = {path.name for path in folder.iterdir() if path.name.endswith(PARTIAL_SUFFIX)}
            seen |= writing
            if len(seen) >= nth and writing:
                return
        time.sleep(0.002)


def good_checkpoints(out: Path) -> list[int]:
    """The steps of the checkpoint files under their final names; each must load and verify."""
    folder = out / "checkpoints"
    steps = []
    for path in sorted(folder.glob(f"*{EXTENSION}")) if folder.is_dir() else []:
        loaded = checkpoint.load(path)  # raises CheckpointError for a torn or damaged file
        steps.append(loaded.step)
    return steps


def test_killed_runs_resume_to_the_uninterrupted_result(tmp_path: Path) -> None:
    reference = subprocess.run(command(tmp_path / "reference"), env=environment(), capture_output=True, text=True,
                               timeout=300, cwd=REPO)
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "killed"
    rng = np.random.default_rng(2026)
    kills = inside_writes = 0
    ever_good: set[int] = set()
    newest = -1
    while kills < KILLS:
        process = subprocess.Popen([*command(out, pause=PAUSE), "--resume"], env=environment(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
        deadline = time.monotonic() + ATTEMPT_TIMEOUT
        if kills % 2:
            wait_for_write(process, out, nth=int(rng.integers(1, 4)), deadline=deadline)
            time.sleep(rng.uniform(0.0, 0.12))
        else:
            time.sleep(rng.uniform(0.3, 3.0))
        if process.poll() is not None:  # it finished first: start again from the same state
            assert process.returncode == 0, process.stderr.read().decode()
            process.stderr.close()
            break
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        process.stderr.close()
        kills += 1
        inside_writes += bool(partial_files(out))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a damaged checkpoint here would be a torn write
            steps = good_checkpoints(out)
            latest = CheckpointManager(out / "checkpoints", keep=KEEP).latest()
        found = -1 if latest is None else latest.step
        assert found >= newest, f"kill {kills}: the newest good checkpoint went back from step {newest} to {found}"
        assert len(steps) >= min(KEEP, len(ever_good)), f"kill {kills}: good checkpoints were lost: {steps}"
        ever_good |= set(steps)
        newest = found

    final = subprocess.run([*command(out), "--resume"], env=environment(), capture_output=True, text=True,
                           timeout=300, cwd=REPO)
    assert final.returncode == 0, final.stderr
    print(f"\n{kills} kills, {inside_writes} inside a write; checkpoints seen: {sorted(ever_good)}")
    assert kills == KILLS and inside_writes >= KILLS // 4, (kills, inside_writes)
    assert not partial_files(out), "the last run's saves remove what killed writes left"

    expected = json.loads((tmp_path / "reference" / "metrics.json").read_text())
    got = json.loads((out / "metrics.json").read_text())
    assert got["train_loss"] == expected["train_loss"]
    assert got["val_loss_end"] == expected["val_loss_end"] and got["val_loss_start"] == expected["val_loss_start"]
    for name in ("lstm.npz", "readout.npz"):
        with np.load(tmp_path / "reference" / name) as want, np.load(out / name) as have:
            assert sorted(want.files) == sorted(have.files)
            for key in want.files:
                assert want[key].tobytes() == have[key].tobytes(), f"{name}: {key}"


def test_a_run_killed_while_saving_its_model_leaves_nothing_once_run_again(tmp_path: Path) -> None:
    """SIGKILL while lstm.npz is written: the old lstm.npz stays whole beside the partial file, which the next
    run's save of lstm.npz removes."""
    out = tmp_path / "run"
    first = subprocess.run(command(out, steps=8), env=environment(), capture_output=True, text=True, timeout=300,
                           cwd=REPO)
    assert first.returncode == 0, first.stderr
    before = (out / "lstm.npz").read_bytes()
    trained = LSTM.load(out / "lstm.npz").params.tobytes()

    process = subprocess.Popen([*command(out, steps=8, pause="0.05"), "--resume"], env=environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    deadline = time.monotonic() + ATTEMPT_TIMEOUT
    writing: list[Path] = []
    while not writing and time.monotonic() < deadline and process.poll() is None:
        writing = [path for path in partial_files(out) if path.name.startswith(".lstm.npz.")]
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert writing, f"no write of lstm.npz was seen (exit {process.returncode}: {process.stderr.read().decode()})"
    process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    assert [path.name for path in partial_files(out)] == [writing[0].name]
    assert (out / "lstm.npz").read_bytes() == before

    again = subprocess.run([*command(out, steps=8), "--resume"], env=environment(), capture_output=True, text=True,
                           timeout=300, cwd=REPO)
    assert again.returncode == 0, again.stderr
    assert not partial_files(out)
    assert LSTM.load(out / "lstm.npz").params.tobytes() == trained
