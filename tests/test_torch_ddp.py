"""cudnn_rnn.torch under a real two-process ``DistributedDataParallel`` (gloo, CPU), and the PyTorch DDP guide.

Two processes of tests/support/torch_ddp_job.py join one gloo group through a TCPStore this process
opens on 127.0.0.1 (on a port the system picks), and train each case's model with SGD, each on its half
of fixed global batches with variable lengths. After every step, each rank's gradient of every parameter
(the module's ``params``, the head's) and every parameter must be those of one process stepping on the
whole batch here (float64), both ranks must hold the same bits, and the ``step`` buffer must count the
same steps on both. A rank that dies stops the others at once and fails the test with its standard
error; nothing waits longer than :data:`RANK_TIMEOUT`.

docs/guides/torch-ddp.md runs here as well (the ``torchrun`` runner of tests/support/docs_testing.py):
its script, written to train.py, under ``torchrun`` with one and with two processes.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

torch = pytest.importorskip("torch")

from docs_testing import COMMAND_TIMEOUT, REPO, command_environment, pages_for, run_page  # noqa: E402
from torch_ddp_job import CASES, LEARNING_RATE, STEPS, Model, global_batch, loss_of, record, shard  # noqa: E402

JOB = REPO / "tests" / "support" / "torch_ddp_job.py"
WORLD = 2
#: seconds both ranks together may take before they count as hung (a few seconds of work, mostly imports)
RANK_TIMEOUT = 120

#: pytest-timeout's mark where it is installed: a second guard around the launcher's own deadline
_second_guard: Callable[[Callable[..., Any]], Callable[..., Any]] = (
    pytest.mark.timeout(RANK_TIMEOUT + 60) if importlib.util.find_spec("pytest_timeout") is not None
    else (lambda function: function))


def rank_environment() -> dict[str, str]:
    """This checkout importable, one OpenMP thread per process (the ranks share the cores), gloo on the
    loopback interface (the processes talk over 127.0.0.1 only), and Python's stack of a rank killed by a
    signal (an abort in a framework's teardown names where it happened), unless the caller chose otherwise."""
    env = command_environment()
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a rank that dies of a signal prints its Python stack on stderr
    loopback = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    if loopback:
        env.setdefault("GLOO_SOCKET_IFNAME", loopback[0])
    return env


def run_ranks(folder: Path, *flags: str, world: int = WORLD, timeout: float = RANK_TIMEOUT) -> float:
    """Run ``world`` ranks of the job and wait for all of them; returns the seconds they took.

    Fails the test, with every rank's standard error (the failed rank's first), as soon as one rank exits
    with a non-zero status or the deadline passes; the ranks still running are killed first.
    """
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # the system picks a free port
    logs = [(folder / f"rank{rank}.out", folder / f"rank{rank}.err") for rank in range(world)]
    processes: list[subprocess.Popen[bytes]] = []
    started = time.perf_counter()
    try:
        for rank, (out, err) in enumerate(logs):
            with open(out, "wb") as stdout, open(err, "wb") as stderr:
                processes.append(subprocess.Popen(
                    [sys.executable, str(JOB), str(rank), str(world), str(store.port), str(folder), *flags],
                    stdout=stdout, stderr=stderr, cwd=REPO, env=rank_environment()))
        while True:
            codes = [process.poll() for process in processes]
            failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                first = failed[0]
                reason, order = f"rank {first} exited with status {codes[first]}", [first]
                break
            if all(code == 0 for code in codes):
                return time.perf_counter() - started
            if time.perf_counter() - started > timeout:
                reason, order = f"the ranks did not finish within {timeout} s (hung)", []
                break
            time.sleep(0.05)
    finally:
        for process in processes:  # only the ones still running: the others are gone already
            if process.poll() is None:
                process.kill()
            process.wait()
        del store
    order += [rank for rank in range(world) if rank not in order]
    report = [f"--- rank {rank} (exit status {processes[rank].returncode}) standard error\n"
              f"{logs[rank][1].read_text(errors='replace')}"
              f"--- rank {rank} standard output\n{logs[rank][0].read_text(errors='replace')}" for rank in order]
    pytest.fail(f"{reason}; the others were stopped\n" + "\n".join(report), pytrace=False)


def one_process(case: str) -> list[dict[str, Any]]:
    """What the ranks must see, computed here without DDP: the records after the start and each step.

    ``lstm``: one model stepping on each whole global batch. ``gru-dropout``: one replica per rank (its own
    dropout seed, rank 0's weights), whose gradients on its shard are averaged, as DDP averages them.
    """
    replicas = [Model(case, rank) for rank in range(WORLD if case == "gru-dropout" else 1)]
    main = replicas[0]
    optimiser = torch.optim.SGD(main.parameters(), lr=LEARNING_RATE)
    records = [record(main)]
    for step in range(STEPS):
        for replica in replicas[1:]:
            replica.load_state_dict(main.state_dict())  # rank 0's weights and step
        batch = global_batch(step)
        shards = [shard(batch, rank, len(replicas)) for rank in range(len(replicas))]
        grads: dict[str, Any] = {}
        for replica, share in zip(replicas, shards):
            replica.zero_grad()
            loss_of(replica, *share).backward()
            for name, p in replica.named_parameters():
                grads[name] = grads.get(name, 0) + p.grad / len(replicas)
        for name, p in main.named_parameters():
            p.grad = grads[name]
        optimiser.step()
        records.append(record(main))
    return records


def assert_close(got: Any, want: Any, what: str) -> None:
    """Equal to float64 rounding: the ranks sum each gradient in another order than one process."""
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14, msg=lambda message: f"{what}: {message}")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, list[dict[str, Any]]]]:
    """What each of the two ranks saw: case -> the records after wrapping and after each step."""
    folder = tmp_path_factory.mktemp("ddp")
    run_ranks(folder)
    return [torch.load(folder / f"rank{rank}.pt", weights_only=True) for rank in range(WORLD)]


@_second_guard
@pytest.mark.parametrize("case", CASES)
def test_each_ddp_step_is_the_one_process_step(case: str, ranks: list[dict[str, list[dict[str, Any]]]]) -> None:
    expected = one_process(case)
    for rank, seen in enumerate(ranks):
        records = seen[case]
        assert len(records) == STEPS + 1
        for step, (got, want) in enumerate(zip(records, expected)):
            where = f"{case}, rank {rank}, after step {step}" if step else f"{case}, rank {rank}, after wrapping"
            assert sorted(got["grads"]) == sorted(want["grads"]) == ([] if step == 0 else
                                                                      ["head.bias", "head.weight", "rnn.params"])
            for name in want["grads"]:
                assert_close(got["grads"][name], want["grads"][name], f"{where}: the gradient of {name}")
            for name in want["params"]:
                assert_close(got["params"][name], want["params"][name], f"{where}: {name}")
                # every rank holds the same bits: rank 0's start, the same averaged gradients
                assert torch.equal(got["params"][name], ranks[0][case][step]["params"][name]), where
            # the training forwards count alike on both ranks (rank 1 of gru-dropout started at 5: DDP took rank 0's)
            assert got["step"] == want["step"] == step, where
    moved = (expected[-1]["params"]["rnn.params"] - expected[0]["params"]["rnn.params"]).abs().max()
    assert moved > 1e-3, "the steps must move the weights"


def test_the_ranks_start_from_rank_0s_weights(ranks: list[dict[str, list[dict[str, Any]]]]) -> None:
    """gru-dropout's ranks build their modules with different seeds; DDP's wrapping makes them rank 0's."""
    assert not torch.equal(Model("gru-dropout", 0).rnn.params, Model("gru-dropout", 1).rnn.params)
    for name, value in ranks[1]["gru-dropout"][0]["params"].items():
        assert torch.equal(value, ranks[0]["gru-dropout"][0]["params"][name]), name


@_second_guard
def test_a_rank_that_dies_stops_the_other_and_its_error_is_reported(tmp_path: Path) -> None:
    """Rank 1 raises once the group is up; rank 0 would wait for it in DDP's first collective for a minute, then
    exit with an error of its own: it must be stopped instead, so it ends by the launcher's SIGKILL."""
    with pytest.raises(pytest.fail.Exception) as failure:
        run_ranks(tmp_path, "--die")
    message = str(failure.value)
    assert message.startswith("rank 1 exited with status 1; the others were stopped"), message
    assert "RuntimeError: rank 1 fails on purpose" in message
    assert message.index("--- rank 1 ") < message.index("--- rank 0 "), "the failed rank's error comes first"
    assert f"--- rank 0 (exit status {-signal.SIGKILL}) standard error" in message, \
        "rank 0 must be stopped, not waited for"


# ---- the guide ----------------------------------------------------------------------------------------------
def launch(argv: Sequence[str], folder: Path) -> tuple[int, str, str]:
    """``torchrun ARGS`` as the page writes it, as ``python -m torch.distributed.run ARGS`` with this Python, in
    the page's folder. The launcher and its workers run in a session of their own, killed together if they
    outlive the deadline."""
    assert argv and argv[0] == "torchrun", f"the page's console blocks run `torchrun ...`; got {' '.join(argv)!r}"
    command = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder,
                               env=rank_environment(), start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(argv)} did not finish within {COMMAND_TIMEOUT} s (hung)\n{stdout}\n{stderr}")
    return process.returncode, stdout, stderr


@pytest.mark.parametrize("page", pages_for("torchrun"))
def test_the_page_runs(page: str, tmp_path: Path) -> None:
    run = run_page(page, tmp_path, commands=launch)
    assert run.counts.get("script") and run.counts.get("console"), f"{page} launches no script"
