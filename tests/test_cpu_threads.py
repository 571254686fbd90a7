"""The NumPy backend's BLAS threads: the policy, the user's overrides, and a loaded machine.

The thread counts are read back from the BLAS library itself (threadpoolctl's ``threadpool_info``)
while a call's plan is active, in this process or in a child started with the environment under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import cudnn_rnn
from cudnn_rnn import _host, cpu


def blas_threads() -> list[int]:
    """The thread counts of the BLAS libraries the backend controls (those loaded with NumPy, before any other)."""
    controlled = {pool.filepath for pool in cpu._pools()}
    return [pool["num_threads"] for pool in threadpool_info() if pool["filepath"] in controlled]


@pytest.fixture
def policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The policy alone: no thread variable of the user's, no override."""
    for name in _host.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(cpu._state, "user_variable", raising=False)  # read again, from the environment above
    cudnn_rnn.set_num_threads(None)
    yield
    cudnn_rnn.set_num_threads(None)


def test_small_products_run_on_one_thread_and_large_ones_on_the_free_cores(policy: None) -> None:
    found = blas_threads()
    with cpu.blas_threads() as plan:
        plan.for_products(cpu.GRAIN - 1)
        assert blas_threads() == [1] * len(found)
        plan.for_products(cpu.GRAIN)
        large = blas_threads()
    assert large == [plan.budget] * len(found) and 1 <= plan.budget <= _host.host_cores()
    assert blas_threads() == large  # left at the free cores (all of the pool's on a quiet machine)


@pytest.fixture
def numpy_cells() -> Iterator[None]:
    cpu.set_cells("numpy")
    yield
    cpu.set_cells("auto")


def training_step(units: int, batch: int) -> None:
    """A forward (training) and backprop of a one-layer LSTM, T = 40."""
    size = int(cudnn_rnn.cudnn_rnn_params_size(1, units, units))
    x = np.ones((40, batch, units), np.float32)
    h = np.zeros((1, batch, units), np.float32)
    out = cudnn_rnn.cudnn_rnn_v3(x, h, h, np.full(size, 0.01, np.float32), None)
    cudnn_rnn.cudnn_rnn_backprop_v3(x, h, h, np.full(size, 0.01, np.float32), None, out.output, out.output_h,
                                    out.output_c, out.output, out.output_h, out.output_c, out.reserve_space)


def test_a_call_of_the_backend_sets_threads_per_product_and_leaves_them_at_the_budget(
        policy: None, numpy_cells: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NumPy cells, a char-LM-sized training step: the per-step products (B*P*G*N = 32*128*512 >= GRAIN)
    and the chunk products get the budget, a tiny configuration's products one thread; the pools end at the
    budget."""
    chosen: list[tuple[int, int]] = []
    budgets: list[int] = []
    original = cpu.BlasThreads.for_products

    def recording(self: cpu.BlasThreads, multiply_adds: int) -> None:
        original(self, multiply_adds)
        chosen.append((multiply_adds, max(blas_threads())))
        budgets.append(self.budget)

    monkeypatch.setattr(cpu.BlasThreads, "for_products", recording)
    for units, batch in ((4, 2), (128, 32)):
        chosen.clear()
        training_step(units, batch)
        assert chosen, "the backend asks for threads"
        for (multiply_adds, threads), budget in zip(chosen, budgets[-len(chosen):]):
            assert threads == (1 if multiply_adds < cpu.GRAIN else budget)
        if units == 4:
            assert {threads for _, threads in chosen} == {1}
        assert set(blas_threads()) == {budgets[-1]}  # where the last call left them


@pytest.mark.parametrize("threads", [None, 1, 3])
def test_the_compiled_cells_run_the_batch_in_parts_on_one_blas_thread_each(
        threads: int | None, policy: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts: min(cores the call may use, B) for a call of PART_GRAIN multiply-adds or more, one below; every
    BLAS pool (NumPy's and the compiled code's) at one thread while they run, and after the call."""
    from cudnn_rnn.cpu import _parts

    cpu.set_cells("fused")
    cudnn_rnn.set_num_threads(threads)
    seen: list[tuple[int, int, list[int]]] = []
    workers: list[int] = []
    run_parts, pin = _parts.run_parts, cpu.BlasThreads.pin

    def recording(work: object, parts: list[slice]) -> None:
        seen.append((len(parts), parts[-1].stop, blas_threads()))
        run_parts(work, parts)  # type: ignore[arg-type]

    def pinning(self: cpu.BlasThreads, count: int) -> None:
        workers.append(self.workers())
        pin(self, count)

    monkeypatch.setattr(_parts, "run_parts", recording)
    monkeypatch.setattr(cpu.BlasThreads, "pin", pinning)
    try:
        assert len(cpu._pools()) >= 2  # NumPy's BLAS and the one the compiled cells call
        for units, batch in ((4, 2), (128, 32)):
            seen.clear()
            workers.clear()
            training_step(units, batch)
            assert len(seen) == 2 and len(workers) == 2  # forward, backprop
            for (count, covered, pools), free in zip(seen, workers):
                small = units == 4  # 40*2*16*8 multiply-adds < PART_GRAIN
                assert count == (1 if small else min(free, batch)) and covered == batch
                assert set(pools) == {1}
            assert set(blas_threads()) == {1}  # left at one: an idle thread of a larger pool would spin
    finally:
        cudnn_rnn.set_num_threads(None)
        cpu.set_cells("auto")


def test_set_num_threads_fixes_every_product(policy: None) -> None:
    cudnn_rnn.set_num_threads(2)
    assert cudnn_rnn.get_num_threads() == 2
    with cpu.blas_threads() as plan:
        plan.for_products(1)
        assert set(blas_threads()) == {2}
        plan.for_products(10 * cpu.GRAIN)
        assert set(blas_threads()) == {2}
    cudnn_rnn.set_num_threads(None)
    assert cudnn_rnn.get_num_threads() is None
    assert "policy" in cpu.describe()["threads"]


@pytest.mark.parametrize("value, error", [(0, ValueError), (-1, ValueError), (cpu.MAX_THREADS + 1, ValueError),
                                          (10**400, ValueError), (True, TypeError), (2.0, TypeError),
                                          ("2", TypeError)])
def test_set_num_threads_refuses_what_is_not_a_thread_count(value: object, error: type) -> None:
    with pytest.raises(error, match="num_threads"):
        cudnn_rnn.set_num_threads(value)  # type: ignore[arg-type]


CHILD = """
import json, sys
import numpy as np
from threadpoolctl import threadpool_info
import cudnn_rnn
from cudnn_rnn import cpu

def blas():
    return [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]

found = blas()
with cpu.blas_threads() as plan:
    plan.for_products(1)
    small = blas()
    plan.for_products(10 * cpu.GRAIN)
    large = blas()
print(json.dumps(dict(found=found, small=small, large=large, after=blas(), describe=cpu.describe())))
"""


def child(**environment: str) -> dict:
    env = {name: value for name, value in os.environ.items()
           if name not in _host.THREAD_VARIABLES and not name.startswith("CUDNN_RNN_")}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    facts: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return facts


def test_a_thread_count_the_user_set_is_kept() -> None:
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        facts = child(**{name: "2"})
        assert facts["found"] == facts["small"] == facts["large"] == facts["after"] == [2], (name, facts)
        assert name in facts["describe"]["threads"]


def test_the_environment_variable_sets_the_count_and_wins_over_omp() -> None:
    facts = child(CUDNN_RNN_NUM_THREADS="1", OMP_NUM_THREADS="2")
    assert facts["found"] == [2]
    assert facts["small"] == facts["large"] == facts["after"] == [1]  # between calls too
    assert "CUDNN_RNN_NUM_THREADS" in facts["describe"]["threads"]


def test_a_bad_environment_variable_is_named() -> None:
    env = dict(os.environ, CUDNN_RNN_NUM_THREADS="many")
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "CUDNN_RNN_NUM_THREADS must be an integer in [1, 4096]; got 'many'" in done.stderr


def test_another_busy_process_takes_a_core_from_the_budget(policy: None) -> None:
    """With one process spinning beside it, the load reading counts about one busy core; a large product
    gets at most the cores that are left (one on a 2-core machine), and the pools stay there between
    calls, so that the program's own products keep off the busy core too."""
    cores = _host.host_cores()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        with cpu.blas_threads():
            pass  # a reading of the load
        time.sleep(cpu.LOAD_INTERVAL + 0.5)
        with cpu.blas_threads() as plan:  # the next reading covers the busy second
            plan.for_products(cpu.GRAIN)
            during = blas_threads()
        after = blas_threads()
        others = cpu._load().others
    finally:
        busy.kill()
        busy.wait()
    assert 0.6 <= others <= cores + 0.1, others
    assert plan.budget <= max(1, cores - 1)
    assert set(during) == set(after) == {plan.budget}


def test_describe_says_what_the_next_call_uses(policy: None) -> None:
    facts = cpu.describe()
    assert facts["cells"] == cpu.cells_in_use() == "fused"  # numba is installed with the test extras
    assert facts["cores"] == _host.host_cores()
    assert [pool["threads"] for pool in facts["blas"]] == blas_threads()
    json.dumps(facts)


def test_cells_are_chosen_by_name_or_by_the_environment() -> None:
    try:
        cpu.set_cells("numpy")
        assert cpu.cells_in_use() == "numpy"
        with pytest.raises(ValueError, match="cells must be one of auto, fused, numpy; got 'fast'"):
            cpu.set_cells("fast")
    finally:
        cpu.set_cells("auto")
    script = "from cudnn_rnn import cpu; print(cpu.cells_in_use())"
    env = dict(os.environ, CUDNN_RNN_CELLS="numpy")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "numpy", done.stderr


def test_without_numba_auto_runs_the_numpy_cells_and_fused_says_what_to_install() -> None:
    script = """
import sys
sys.modules["numba"] = None  # numba missing
import numpy as np, cudnn_rnn
from cudnn_rnn import cpu
assert "numba" not in sys.modules or sys.modules["numba"] is None
print(cpu.cells_in_use())
out = cudnn_rnn.cudnn_rnn_v3(np.ones((2, 1, 2), np.float32), np.zeros((1, 1, 3), np.float32),
                             np.zeros((1, 1, 3), np.float32), np.full(cudnn_rnn.cudnn_rnn_params_size(1, 3, 2), 0.1,
                             np.float32), None)
print(out.output.shape)
try:
    cpu.set_cells("fused")
except ImportError as error:
    print(error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "numpy" and lines[1] == "(2, 1, 3)"
    assert "pip install 'cudnn_rnn[fast]'" in lines[2]


def test_importing_the_package_imports_neither_numba_nor_threadpoolctl() -> None:
    script = "import sys, cudnn_rnn; print(sorted(m for m in ('numba', 'threadpoolctl') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_call_from_a_thread_that_lives_on_does_not_freeze_the_pools(policy: None) -> None:
    """The first call made on a worker thread that stays alive (as a JAX callback on XLA's thread is), then
    calls from this thread: the parts still see every pool at one thread, and the pools end at the budget."""
    from concurrent.futures import ThreadPoolExecutor

    from cudnn_rnn.cpu import _parts

    cpu.set_cells("fused")
    seen: list[list[int]] = []
    run_parts = _parts.run_parts

    def recording(work: object, parts: list[slice]) -> None:
        seen.append(blas_threads())
        run_parts(work, parts)  # type: ignore[arg-type]

    try:
        with ThreadPoolExecutor(1) as worker:
            worker.submit(training_step, 128, 32).result()  # the worker lives on until the with ends
            _parts.run_parts = recording  # type: ignore[assignment]
            try:
                with cpu.blas_threads() as plan:
                    plan.pin(2)
                    assert set(blas_threads()) == {2}  # set from this thread, with the worker still alive
                training_step(128, 32)
            finally:
                _parts.run_parts = run_parts  # type: ignore[assignment]
        assert seen and all(set(pools) == {1} for pools in seen)
    finally:
        cpu.set_cells("auto")
