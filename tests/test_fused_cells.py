"""The fused cells (numba) against the NumPy cells: the same forward and backprop to float rounding.

Every mode, direction, projection, padding (ragged, length 0, batch-major), dropout and input mode,
in float32 (1e-6 of each result's largest magnitude) and float64 (1e-12); float16 and bfloat16
compute in float32 through the same kernels. The compiled functions come from numba's disk cache in
a second process, which compiles nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn import cpu

TOLERANCE = {np.float32: 1e-6, np.float64: 1e-12}

CASES = [
    # (mode, direction, num_proj, lengths, num_layers, dropout, input_mode, time_major)
    ("lstm", "unidirectional", 0, None, 1, 0.0, "linear_input", True),
    ("lstm", "bidirectional", 0, [6, 3, 0, 5], 2, 0.0, "linear_input", True),
    ("lstm", "unidirectional", 3, [6, 3, 0, 5], 2, 0.0, "linear_input", False),
    ("lstm", "bidirectional", 3, None, 2, 0.4, "linear_input", True),
    ("lstm", "unidirectional", 0, [1, 6, 2, 6], 2, 0.4, "skip_input", False),
    ("gru", "unidirectional", 0, None, 1, 0.0, "linear_input", True),
    ("gru", "bidirectional", 0, [6, 3, 0, 5], 2, 0.4, "linear_input", False),
    ("gru", "unidirectional", 0, [6, 1, 4, 0], 1, 0.0, "skip_input", True),
    ("rnn_tanh", "unidirectional", 0, [6, 3, 0, 5], 2, 0.0, "linear_input", True),
    ("rnn_tanh", "bidirectional", 0, None, 2, 0.4, "skip_input", False),
    ("rnn_relu", "unidirectional", 0, None, 1, 0.0, "linear_input", True),
    ("rnn_relu", "bidirectional", 0, [6, 3, 0, 5], 2, 0.0, "linear_input", False),
]


@pytest.fixture
def cells() -> Iterator[None]:
    yield
    cpu.set_cells("auto")


def run_op(case: tuple, dtype: type, kind: str) -> list[np.ndarray]:
    """Forward (training) and backprop of one case on the chosen cells; every result that is not empty."""
    mode, direction, num_proj, lengths, layers, dropout, input_mode, time_major = case
    cpu.set_cells(kind)
    steps, batch, inputs, units = 6, 4, 5 if input_mode == "linear_input" else 4, 4
    rng = np.random.default_rng(7)
    config = dict(rnn_mode=mode, direction=direction, num_proj=num_proj, dropout=dropout, input_mode=input_mode,
                  seed=3, seed2=4)
    directions = 2 if direction == "bidirectional" else 1
    state = num_proj or units
    size = int(cudnn_rnn.cudnn_rnn_params_size(layers, units, inputs, rnn_mode=mode, direction=direction,
                                               num_proj=num_proj, input_mode=input_mode))

    def draw(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    x = draw(*((steps, batch, inputs) if time_major else (batch, steps, inputs)))
    def states(width: int) -> np.ndarray:
        return draw(*((layers * directions, batch, width) if time_major else (batch, layers * directions, width)))

    h = states(state)
    c = states(units) if mode == "lstm" else None
    params = draw(size, scale=0.6)
    lengths = None if lengths is None else np.asarray(lengths, dtype=np.int32)
    outputs = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, time_major=time_major, **config)
    dy = draw(*outputs.output.shape)
    dh = draw(*h.shape)
    dc = None if c is None else draw(*c.shape)
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, params, lengths, outputs.output, outputs.output_h,
                                            outputs.output_c, dy, dh, dc, outputs.reserve_space,
                                            time_major=time_major, **config)
    inference = cudnn_rnn.cudnn_rnn_v3(x, h, c, params, lengths, time_major=time_major, is_training=False, **config)
    results = [outputs.output, outputs.output_h, outputs.output_c, *grads, inference.output, inference.output_h]
    return [np.asarray(r, dtype=np.float64) for r in results if r is not None and r.size]


def largest_difference(mine: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """max over results of max|a - b| / max|b|."""
    assert len(mine) == len(reference)
    return max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)) for a, b in zip(mine, reference))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, case[:4])) + f"-L{case[4]}-p{case[5]}-{case[6]}"
                                             + ("-tm" if case[7] else "-bm") for case in CASES])
def test_fused_cells_agree_with_the_numpy_cells(case: tuple, dtype: type, cells: None) -> None:
    reference = run_op(case, dtype, "numpy")
    fused = run_op(case, dtype, "fused")
    assert cpu.cells_in_use() == "fused"
    difference = largest_difference(fused, reference)
    assert difference <= TOLERANCE[dtype], difference
    assert difference > 0 or case[0] == "rnn_relu"  # two computations, not one path run twice


@pytest.fixture
def four_workers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every call of the compiled cells on four cores, however small: a batch of 4 in four parts of one sequence,
    or two parts of two, each running a bidirectional network's two directions at once or a two-layer
    unidirectional stack's layers as a wavefront."""
    from cudnn_rnn.cpu import _parts

    monkeypatch.setattr(_parts, "PART_GRAIN", 0)
    cudnn_rnn.set_num_threads(4)
    yield
    cudnn_rnn.set_num_threads(None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, case[:4])) + f"-L{case[4]}-p{case[5]}-{case[6]}"
                                             + ("-tm" if case[7] else "-bm") for case in CASES])
def test_the_batch_run_in_parts_agrees_with_the_numpy_cells(case: tuple, dtype: type, cells: None,
                                                            four_workers: None) -> None:
    """Each part's columns of every result, and the weight gradients summed over the parts, as the whole."""
    from cudnn_rnn.cpu import _parts

    seen: list[_parts.Schedule] = []
    schedule = _parts.schedule

    def recording(*args: int) -> _parts.Schedule:
        seen.append(schedule(*args))
        return seen[-1]

    reference = run_op(case, dtype, "numpy")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_parts, "schedule", recording)
        fused = run_op(case, dtype, "fused")
    bidirectional, stacked = case[1] == "bidirectional", case[4] > 1 and case[1] == "unidirectional"
    expected = _parts.batch_parts(4, 2 if bidirectional or stacked else 4)
    assert seen and all(s.parts == expected and s.directions_together == bidirectional
                        and s.layers_together == stacked for s in seen)
    assert largest_difference(fused, reference) <= TOLERANCE[dtype]


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_a_deep_wavefront_over_many_chunks_agrees_with_the_numpy_cells(mode: str, cells: None, four_workers: None,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Three layers as a wavefront (chunks of 2 of 6 steps forward, of 1 in backprop), ragged, with dropout."""
    from cudnn_rnn.cpu import _backend

    monkeypatch.setattr(_backend, "TIME_CHUNK", 2)
    monkeypatch.setattr(_backend, "BACKWARD_CHUNK", 1)
    case = (mode, "unidirectional", 0, [6, 3, 0, 5], 3, 0.4, "linear_input", True)
    for dtype in (np.float32, np.float64):
        reference = run_op(case, dtype, "numpy")
        fused = run_op(case, dtype, "fused")
        assert largest_difference(fused, reference) <= TOLERANCE[dtype]


def test_a_failing_layer_ends_the_wavefront_with_its_own_error() -> None:
    """The layers waiting on a failed one stop waiting (no hang), and run_all raises the failure itself."""
    from cudnn_rnn.cpu import _parts

    wave = _parts.Wavefront(3, 0)

    def layer(index: int) -> None:
        if index == 1:
            raise ZeroDivisionError("layer 1")
        if index:
            wave.wait(index - 1, lambda reached: reached >= 10)  # never published: only the failure ends it
        wave.publish(index, 10)

    with pytest.raises(ZeroDivisionError, match="layer 1"):
        _parts.run_all([wave.job(lambda index=index: layer(index)) for index in range(3)])
    assert wave.failed


def test_a_stack_splits_its_batch_from_part_rows_a_part_and_runs_as_a_wavefront_below() -> None:
    from cudnn_rnn.cpu._parts import PART_GRAIN, PART_ROWS, Schedule, batch_parts, schedule

    large = PART_GRAIN
    for batch in (2 * PART_ROWS, 32, 64):
        assert schedule(batch, 1, 2, 2, large) == Schedule(batch_parts(batch, 2), False, False), batch
    for batch in (1, PART_ROWS, 2 * PART_ROWS - 1):
        assert schedule(batch, 1, 2, 2, large) == Schedule([slice(0, batch)], False, True), batch
    assert schedule(4 * PART_ROWS - 1, 1, 2, 4, large) == Schedule(batch_parts(4 * PART_ROWS - 1, 2), False, True)
    assert schedule(32, 2, 2, 2, large) == Schedule([slice(0, 32)], True, False)  # the directions, from the start
    assert schedule(32, 1, 2, 2, large - 1) == Schedule([slice(0, 32)], False, False)  # too small for threads


def test_parts_run_on_their_own_threads_and_raise_what_a_part_raised() -> None:
    import threading

    from cudnn_rnn.cpu import _parts

    assert _parts.batch_parts(7, 3) == [slice(0, 3), slice(3, 5), slice(5, 7)]
    assert _parts.batch_parts(2, 2) == [slice(0, 1), slice(1, 2)]
    assert _parts.part_count(batch=1, workers=8, multiply_adds=1 << 30) == 1
    assert _parts.part_count(batch=64, workers=2, multiply_adds=_parts.PART_GRAIN - 1) == 1
    assert _parts.part_count(batch=64, workers=2, multiply_adds=_parts.PART_GRAIN) == 2
    threads: dict[int, int] = {}
    together = threading.Barrier(4, timeout=60)  # passed only when all four parts run at the same time

    def work(part: slice) -> None:
        threads[part.start] = threading.get_ident()
        together.wait()
        if part.start == 2:
            raise ValueError("part 2")

    def workers() -> set[int]:
        return {t.ident for t in threading.enumerate() if t.name == "cudnn_rnn worker" and t.ident is not None}

    with pytest.raises(ValueError, match="part 2"):
        _parts.run_parts(work, _parts.batch_parts(4, 4))
    assert sorted(threads) == [0, 1, 2, 3] and len(set(threads.values())) == 4
    assert threads[0] == threading.get_ident() and set(threads.values()) - {threads[0]} <= workers()
    before = workers()
    for _ in range(20):  # the workers are kept and reused: calls make no more threads than ran at once
        threads.clear()
        with pytest.raises(ValueError, match="part 2"):
            _parts.run_parts(work, _parts.batch_parts(4, 4))
        assert len(set(threads.values())) == 4
    assert workers() == before and len(before) >= 3


def _run_two_jobs_then_exit() -> None:
    from cudnn_rnn.cpu import _parts

    ran: list[int] = []
    _parts.run_all([lambda: ran.append(0), lambda: ran.append(1)])
    os._exit(0 if sorted(ran) == [0, 1] else 3)


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # JAX's, where the suite imported it: the child
@pytest.mark.filterwarnings("ignore:This process:DeprecationWarning")  # and Python's: touches neither's threads
def test_a_forked_child_runs_parts_on_workers_of_its_own() -> None:
    """The parent's idle workers are not in the child: it makes its own instead of waiting on them forever."""
    import multiprocessing

    from cudnn_rnn.cpu import _parts

    _parts.run_all([lambda: None, lambda: None])  # an idle worker in the parent
    child = multiprocessing.get_context("fork").Process(target=_run_two_jobs_then_exit)
    child.start()
    child.join(timeout=120)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_run_the_fused_float32_kernels(dtype: str, cells: None) -> None:
    if dtype == "bfloat16":
        import ml_dtypes

        numpy_dtype = ml_dtypes.bfloat16
    else:
        numpy_dtype = np.float16
    case = CASES[1]
    reference = run_op(case, numpy_dtype, "numpy")
    fused = run_op(case, numpy_dtype, "fused")
    # both compute in float32 and round once to the half type: at most a rounding step apart
    import ml_dtypes

    step = float(ml_dtypes.finfo(numpy_dtype).eps)
    assert largest_difference(fused, reference) <= 2 * step


def test_non_finite_values_propagate_as_in_the_numpy_cells(cells: None) -> None:
    """inf and NaN in the inputs give the same inf, NaN and limits on both paths (exp's saturation)."""
    results = {}
    for kind in ("numpy", "fused"):
        cpu.set_cells(kind)
        params = np.full(int(cudnn_rnn.cudnn_rnn_params_size(1, 3, 2)), 40.0, dtype=np.float32)
        x = np.array([[[1.0, -1.0]], [[np.inf, 0.0]], [[-np.inf, 0.0]], [[np.nan, 0.0]]], dtype=np.float32)
        h = np.zeros((1, 1, 3), dtype=np.float32)
        outputs = cudnn_rnn.cudnn_rnn_v3(x, h, h, params, None)
        results[kind] = outputs.output
    np.testing.assert_array_equal(np.isnan(results["fused"]), np.isnan(results["numpy"]))
    np.testing.assert_allclose(results["fused"], results["numpy"], rtol=1e-6, atol=0)


def test_the_exponential_is_within_two_units_in_the_last_place() -> None:
    """The kernels' exp: within 2 units in the last place of float64's exp in float32; within 3 of NumPy's
    float64 exp (itself within 1 of the exact value) in float64; inf, 0 and NaN where they belong."""
    from numba import njit

    from cudnn_rnn.cpu._fused_cells import _exp

    @njit
    def exp_all(values: np.ndarray, out: np.ndarray) -> None:
        for index in range(values.shape[0]):
            out[index] = _exp(values[index])

    for dtype, low, high, ulps in ((np.float32, -87.3, 88.7, 2), (np.float64, -708.3, 709.7, 3)):  # normal results
        values = np.concatenate([np.linspace(low, high, 200_001), np.linspace(-2, 2, 100_001)]).astype(dtype)
        out = np.empty_like(values)
        exp_all(values, out)
        exact = np.exp(values.astype(np.float64)) if dtype == np.float32 else np.exp(values)
        error = np.abs(out.astype(np.float64) - exact) / np.spacing(exact.astype(dtype)).astype(np.float64)
        assert float(error.max()) <= ulps, (dtype, float(error.max()))
    for dtype in (np.float32, np.float64):
        specials = np.array([np.inf, -np.inf, np.nan, 1e4, -1e4, 89.0, 710.0, -104.0, -746.0], dtype=dtype)
        out = np.empty_like(specials)
        exp_all(specials, out)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(out, np.exp(specials))  # inf, 0, NaN and the underflow to 0 exactly


def test_the_layers_train_the_same_on_both_paths(cells: None) -> None:
    """Three Adam steps of a two-layer LSTM with dropout: the same params on both paths."""
    finals = {}
    for kind in ("numpy", "fused"):
        cpu.set_cells(kind)
        layer = cudnn_rnn.LSTM(input_size=3, num_units=5, num_layers=2, dropout=0.3, seed=1)
        optimiser = cudnn_rnn.optim.Adam([layer.params], lr=1e-2)
        x = np.random.default_rng(0).standard_normal((2, 7, 3)).astype(np.float32)
        for _ in range(3):
            y, _, _ = layer.forward(x, lengths=[7, 4])
            layer.zero_grad()
            layer.backward(np.ones_like(y))
            optimiser.step([layer.grad])
        finals[kind] = layer.params.copy()
    np.testing.assert_allclose(finals["fused"], finals["numpy"], rtol=0, atol=1e-6)


CACHE_PROBE = """
import json, sys
import numpy as np
import cudnn_rnn
from cudnn_rnn import cpu
from cudnn_rnn.cpu import _fused_cells
cpu.set_cells("fused")
for mode in ("lstm", "gru", "rnn_tanh"):
    size = int(cudnn_rnn.cudnn_rnn_params_size(1, 3, 2, rnn_mode=mode))
    x = np.ones((4, 2, 2), np.float32)
    h = np.zeros((1, 2, 3), np.float32)
    c = h if mode == "lstm" else None
    lengths = np.array([4, 2], np.int32)
    out = cudnn_rnn.cudnn_rnn_v3(x, h, c, np.full(size, 0.1, np.float32), lengths, rnn_mode=mode)
    cudnn_rnn.cudnn_rnn_backprop_v3(x, h, c, np.full(size, 0.1, np.float32), lengths, out.output, out.output_h,
                                    out.output_c, out.output, out.output_h, out.output_c, out.reserve_space,
                                    rnn_mode=mode)
stats = [kernel.stats for kernel in _fused_cells.KERNELS]
print(json.dumps({"hits": sum(sum(s.cache_hits.values()) for s in stats),
                  "misses": sum(sum(s.cache_misses.values()) for s in stats)}))
"""


def test_a_second_process_compiles_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CACHE_PROBE], env=env, capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["misses"] > 0  # compiled and written to the cache ...
    assert second["misses"] == 0 and second["hits"] > 0  # ... and only read the second time


@pytest.mark.parametrize("kind", ["numpy", "fused"])
def test_inference_keeps_nothing_for_backprop(kind: str, cells: None) -> None:
    """is_training=False: an empty reserve, and at its peak no more than the outputs, a layer's output and
    one chunk of steps (no [T, B, G*N] activations), on both cells; training keeps them all."""
    import tracemalloc

    from cudnn_rnn.cpu import _backend as _reference

    cpu.set_cells(kind)
    steps, batch, units, layers = 400, 8, 32, 2
    size = int(cudnn_rnn.cudnn_rnn_params_size(layers, units, units))
    x = np.ones((steps, batch, units), np.float32)
    h = np.zeros((layers, batch, units), np.float32)
    params = np.full(size, 0.01, np.float32)
    peaks = {}
    for training in (False, True):
        cudnn_rnn.cudnn_rnn_v3(x, h, h, params, None, is_training=training)  # compiled, warm
        tracemalloc.start()
        outputs = cudnn_rnn.cudnn_rnn_v3(x, h, h, params, None, is_training=training)
        peaks[training] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if not training:
            assert outputs.reserve_space.size == 0
    output_bytes = steps * batch * units * 4
    chunk_bytes = _reference.TIME_CHUNK * batch * 4 * units * 4
    assert peaks[False] <= 3 * output_bytes + 4 * chunk_bytes, peaks
    assert peaks[True] >= peaks[False] + steps * batch * 5 * units * 4 * layers  # gates and c of every step
