"""cuDNN's persistent RNN algorithms against the reference backend, on a real GPU.

Each algorithm either computes what the float64 reference computes (to the dtype's tolerance)
or is refused by cuDNN with a ``CudnnError`` naming it; the cases cuDNN is known to run (the
ones PyTorch sends to the persistent kernels) must run, batch-major too (run time-major inside).
Ragged lengths never reach a persistent kernel: naming one is a ValueError, and ``"auto"`` runs
them with the standard algorithm. ``-s`` prints which algorithm ran where, for the GPU record.
``persist_dynamic`` builds its kernels with NVRTC (seconds each): those tests are marked long.
"""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from cudnn_rnn.config import PERSISTENT_ALGOS  # noqa: E402
from cudnn_rnn.errors import CudnnError  # noqa: E402
from gpu_support import TOLERANCE, as_float64, assert_results_close, on_gpu, run  # noqa: E402
from rnn_testing import Case, random_arrays, stable_seed  # noqa: E402

#: cases cuDNN runs with the persistent algorithm named (PyTorch's own choices: static for half,
#: one unidirectional layer, hidden and input multiples of 128; small-h for hidden <= 128)
MUST_RUN = [
    ("persist_static", Case("lstm", num_units=128, input_size=128, max_time=6, batch=8, dtype="float16")),
    ("persist_static_small_h", Case("lstm", num_units=64, input_size=32, max_time=6, batch=8, dtype="float32")),
    ("persist_static_small_h", Case("gru", num_units=64, input_size=32, max_time=6, batch=8, dtype="float16")),
]


def _compare(case: Case) -> None:
    a = random_arrays(case, np.random.default_rng(stable_seed(case)))
    expected = run(case.with_(dtype="float64", algo="standard"), as_float64(a))
    assert_results_close(run(case, on_gpu(a)), expected, TOLERANCE[case.dtype], case)


@pytest.mark.parametrize("algo, case", MUST_RUN,
                         ids=[f"{algo}-{case.rnn_mode}-{case.dtype}" for algo, case in MUST_RUN])
def test_the_persistent_algorithms_run_where_pytorch_uses_them(algo: str, case: Case) -> None:
    _compare(case.with_(algo=algo))


def _algos() -> list[object]:
    """Every algorithm but the standard one; persist_dynamic's compile with NVRTC: marked long."""
    return [pytest.param(algo, marks=pytest.mark.long) if algo == "persist_dynamic" else algo
            for algo in PERSISTENT_ALGOS + ("auto",)]


@pytest.mark.parametrize("algo, case", MUST_RUN,
                         ids=[f"{algo}-{case.rnn_mode}-{case.dtype}" for algo, case in MUST_RUN])
def test_a_batch_major_call_runs_the_persistent_algorithm_time_major(algo: str, case: Case) -> None:
    _compare(case.with_(algo=algo, time_major=False))


@pytest.mark.parametrize("algo", _algos())
def test_ragged_lengths_never_reach_a_persistent_kernel(algo: str) -> None:
    case = Case("gru", num_units=64, input_size=32, max_time=6, batch=8, lengths=(6, 6, 2, 6, 0, 6, 5, 6),
                dtype="float32", algo=algo)
    if algo == "auto":  # runs them, with the standard algorithm
        _compare(case)
        return
    a = on_gpu(random_arrays(case, np.random.default_rng(5)))
    with pytest.raises(ValueError, match=rf"algo='{algo}' runs only batches .*sequence_lengths from 0 to 6"):
        run(case, a)


@pytest.mark.parametrize("algo", _algos())
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_algorithm_matches_the_reference_or_is_refused_by_name(algo: str, dtype: str) -> None:
    ran, refused = [], []
    for mode in ("rnn_tanh", "lstm", "gru"):
        for layers, direction in ((1, "unidirectional"), (2, "bidirectional")):
            case = Case(mode, num_layers=layers, num_units=64, input_size=32, direction=direction, max_time=5,
                        batch=8, lengths=(5,) * 8, dtype=dtype, algo=algo)
            try:
                _compare(case)
                ran.append((mode, layers, direction))
            except CudnnError as error:
                assert algo != "auto", f"auto must always run: {error}"
                assert f"algo={algo!r}" in str(error), str(error)
                refused.append((mode, layers, direction, error.status_name))
    print(f"\n{algo} {dtype}: ran {ran}; refused {refused}")
