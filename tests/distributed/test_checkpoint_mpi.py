"""Checkpoints under mpiexec: rank 0 writes, every rank resumes from what rank 0 read, bit for bit.

* ``jobs/checkpoint_job.py`` under ``mpiexec -n 2``: N steps, save, fresh objects, resume, M steps
  equals N + M steps on every rank; a damaged newest checkpoint is skipped (rank 0 warns) and
  refused on every rank, none left waiting.
* The char-LM example as a 2-process job with dropout on, SIGKILLed (the whole job) twice, once
  at a random moment after its first checkpoints and once inside a checkpoint write, and resumed
  each time: it ends with the weights and loss curve of the 2-process job that was never killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mpi_jobs import JOB_TIMEOUT, REPO, job_environment, mpiexec, read_ranks, run_job
from slow_writes import command as slow_command

from cudnn_rnn.files import PARTIAL_SUFFIX

pytestmark = pytest.mark.distributed


def test_every_rank_resumes_exactly_from_rank_0s_checkpoint(tmp_path: Path) -> None:
    run_job("checkpoint_job.py", 2, tmp_path, 3, 4).check()
    ranks = read_ranks(tmp_path, 2)
    for rank, record in enumerate(ranks):
        assert record["params"].tobytes() == record["whole_params"].tobytes(), f"rank {rank}"
        assert record["bias"].tobytes() == record["whole_bias"].tobytes(), f"rank {rank}"
        assert record["losses"].tolist() == record["whole_losses"].tolist(), f"rank {rank}"
        assert record["seed"] == 5 + rank, "each rank keeps its own dropout seed"
        assert record["step"] == 7 and record["skipped_to"] == 3
        assert "the file is damaged: its SHA-256 checksum does not match" in record["refused"], f"rank {rank}"
        assert "ckpt-000000004.safetensors" in record["refused"]
    assert ranks[0]["wrote"].endswith("ckpt-000000003.safetensors") and ranks[1]["wrote"] is None
    assert (ranks[0]["warned"], ranks[1]["warned"]) == (1, 0), "rank 0 reads, skips and warns"
    assert ranks[0]["params"].tobytes() == ranks[1]["params"].tobytes()
    assert not (tmp_path / "checkpoints" / ".ckpt-000000003.safetensors.partial").exists()


STEPS, EVERY = 40, 4


def example(out: Path, *extra: str, pause: str | None = None) -> list[str]:
    """The 2-process job's command line; with ``pause``, every write slowed to that many seconds per 64 KiB."""
    argv = [str(REPO / "examples" / "train_char_lm.py"), "--quick", "--distributed", "--backend", "numpy", "--steps",
            str(STEPS), "--checkpoint-every", str(EVERY), "--out", str(out), *extra]
    return [mpiexec(), "-n", "2", *(slow_command(pause, *argv) if pause else [sys.executable, *argv])]


def kill_job_when(out: Path, ready, pause: str) -> None:
    """Start the resumed job with its writes slowed by ``pause``, wait until ``ready(checkpoints folder)``, then
    SIGKILL the whole job."""
    job = subprocess.Popen(example(out, "--resume", pause=pause), env=job_environment(), start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    deadline = time.monotonic() + JOB_TIMEOUT
    folder = out / "checkpoints"
    while not (folder.is_dir() and ready(folder)):
        assert job.poll() is None, "the job ended before it could be killed"
        assert time.monotonic() < deadline, "the job never reached the moment to kill it"
        time.sleep(0.002)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=60)


def steps_saved(folder: Path) -> list[int]:
    return sorted(int(path.name[5:14]) for path in folder.glob("ckpt-*.safetensors"))


def test_a_killed_two_process_job_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    reference = run_job(REPO / "examples" / "train_char_lm.py", 2, "--quick", "--distributed", "--backend", "numpy",
                        "--steps", STEPS, "--checkpoint-every", EVERY, "--out", tmp_path / "reference").check()
    assert "distributed: 2 processes" in reference.stdout

    out = tmp_path / "killed"
    slow = "0.01"
    kill_job_when(out, lambda folder: any(step >= 12 for step in steps_saved(folder)), slow)
    first = steps_saved(out / "checkpoints")
    assert first and max(first) < STEPS

    kill_job_when(out, lambda folder: max(steps_saved(folder), default=0) > max(first)
                  and any(path.name.endswith(PARTIAL_SUFFIX) for path in folder.iterdir()), slow)
    second = steps_saved(out / "checkpoints")
    assert max(second) > max(first) and max(second) < STEPS

    resumed = subprocess.run(example(out, "--resume"), env=job_environment(), capture_output=True, text=True,
                             timeout=JOB_TIMEOUT, cwd=REPO)
    assert resumed.returncode == 0, resumed.stderr
    assert f"(step {max(second)})" in resumed.stdout
    want = json.loads((tmp_path / "reference" / "metrics.json").read_text())
    got = json.loads((out / "metrics.json").read_text())
    assert got["train_loss"] == want["train_loss"] and got["val_loss_end"] == want["val_loss_end"]
    with np.load(tmp_path / "reference" / "lstm.npz") as a, np.load(out / "lstm.npz") as b:
        assert a["params"].tobytes() == b["params"].tobytes()
    with np.load(tmp_path / "reference" / "readout.npz") as a, np.load(out / "readout.npz") as b:
        assert a["weight"].tobytes() == b["weight"].tobytes() and a["bias"].tobytes() == b["bias"].tobytes()
