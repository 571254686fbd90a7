"""The first check on a GPU machine: does the cuDNN backend work at all? Seconds, not minutes.

Each step prints PASS or FAIL (with the error's last lines) and its time, and the run goes on
after a failure, so one run shows everything that is wrong:

  environment   the GPU, driver, CUDA runtime, cuDNN, CuPy, NVRTC, mpi4py and ml_dtypes versions;
                a cuDNN handle
  modes         per mode, one training forward and backprop on CuPy against the float64 reference
                backend (2 layers, bidirectional, batch-major, unsorted lengths with 0 and padding;
                LSTM with projection), then float32 (FMA math) and float16 once each
  bf16 math     which math types cuDNN runs bfloat16 with (each against the reference; the
                settings table's must run), or why this cuDNN or GPU runs no bfloat16
  padding       NaN and inf in the padded positions of x and dy change nothing
  reserve       a second backprop on the same reserve gives the same gradients
  graph         a training step recorded as a CUDA graph replays like eager steps
  layout        the params layout table against cuDNN over layout_check_configs(), each
                configuration on its own (one error hides no other), and cuDNN's answers to
                layout.UNCONFIRMED

Exit status: 0 when every step passed, 1 otherwise, 2 without a usable GPU.
Usage: python3 scripts/gpu_smoke.py
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "support")]  # a checkout without installing; rnn_testing

from cudnn_rnn import info  # noqa: E402
from rnn_testing import Case, forward_backward, random_arrays, relative_error  # noqa: E402

RESULTS = ("y", "hy", "cy", "dx", "dh0", "dc0", "dparams")
TOLERANCE = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-2, "bfloat16": 5e-2}
LENGTHS = (6, 0, 3, 6, 1)


def _on_gpu(a: Any) -> Any:
    import cupy

    return a.with_(**{name: cupy.asarray(getattr(a, name)) for name in ("x", "h0", "c0", "params", "dy", "dhy", "dcy")
                      if getattr(a, name) is not None})


def _host(results: dict[str, Any]) -> dict[str, np.ndarray]:
    import cupy

    return {name: cupy.asnumpy(value) for name, value in results.items()}


def _compare(case: Case, tolerance: float) -> str:
    a = random_arrays(case, np.random.default_rng(7))
    expected = forward_backward(case.with_(dtype="float64"), a.with_(
        **{name: getattr(a, name).astype(np.float64) for name in ("x", "h0", "c0", "params", "dy", "dhy", "dcy")
           if getattr(a, name) is not None}))
    got = _host(forward_backward(case, _on_gpu(a)))
    errors = {name: relative_error(got[name], expected[name]) for name in RESULTS}
    worst = max(errors, key=errors.get)
    if errors[worst] > tolerance:
        raise AssertionError(f"{worst}: relative error {errors[worst]:.3g} > {tolerance:g}; all: "
                             + ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))
    return f"max relative error {errors[worst]:.2g} ({worst})"


def _version(module: str, attribute: str = "__version__") -> str:
    """A module's version, or why there is none (for the record: what persist_dynamic, MPI and bf16 run on)."""
    import importlib

    try:
        value = getattr(importlib.import_module(module), attribute)
        return str(value() if callable(value) else value)
    except Exception as error:  # a missing package is an answer too
        return f"none ({type(error).__name__}: {error})"


def step_environment() -> str:
    facts = info.collect()
    cupy_facts, cudnn_facts = facts["cupy"], facts["cudnn"]
    return (f"GPU {', '.join(cupy_facts.get('gpus', [])) or 'none'}; driver CUDA {facts['cuda_driver']}; "
            f"runtime CUDA {cupy_facts.get('cuda_runtime')}; CuPy {cupy_facts.get('version')}; "
            f"cuDNN {cudnn_facts.get('version')} ({cudnn_facts.get('path')}); "
            f"NVRTC {_version('cupy.cuda.nvrtc', 'getVersion')}; mpi4py {_version('mpi4py')}; "
            f"ml_dtypes {_version('ml_dtypes')}; backend: {facts['backends']['cupy (cuDNN)']}")


def _mode_case(mode: str, dtype: str = "float64") -> Case:
    return Case(mode, num_layers=2, num_units=6, input_size=4, direction="bidirectional",
                num_proj=3 if mode == "lstm" else 0, max_time=6, batch=len(LENGTHS), lengths=LENGTHS,
                time_major=False, dtype=dtype)


def step_mode(mode: str) -> Callable[[], str]:
    return lambda: _compare(_mode_case(mode), TOLERANCE["float64"])


def step_precision(dtype: str) -> Callable[[], str]:
    return lambda: _compare(_mode_case("lstm", dtype).with_(time_major=True), TOLERANCE[dtype])


def step_padding() -> str:
    case = _mode_case("gru")
    a = random_arrays(case, np.random.default_rng(8))
    x, dy = a.x.copy(), a.dy.copy()
    for row, length in enumerate(case.lengths):
        x[row, length:], dy[row, length:] = np.nan, np.inf
    clean = _host(forward_backward(case, _on_gpu(a.with_(x=np.where(np.isnan(x), 0, x),
                                                         dy=np.where(np.isinf(dy), 0, dy)))))
    noisy = _host(forward_backward(case, _on_gpu(a.with_(x=x, dy=dy))))
    differing = [name for name in RESULTS if not np.array_equal(clean[name], noisy[name])]
    if differing:
        raise AssertionError(f"NaN/inf padding changed {differing}")
    return "bit for bit"


def step_reserve() -> str:
    import cudnn_rnn

    case = _mode_case("lstm").with_(dropout=0.3, seed=1)
    a = _on_gpu(random_arrays(case, np.random.default_rng(9)))
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **case.attrs())

    def grads() -> list[np.ndarray]:
        return [g.get() for g in cudnn_rnn.cudnn_rnn_backprop_v3(
            a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h, out.output_c, a.dy, a.dhy, a.dcy,
            out.reserve_space, out.host_reserved, **case.attrs())]

    first, second = grads(), grads()
    if not all(np.array_equal(g1, g2) for g1, g2 in zip(first, second, strict=True)):
        raise AssertionError("a second backprop on the same reserve gave other gradients")
    return "same gradients twice"


def _trained_params(case: Case, use_graph: bool) -> np.ndarray:
    """params after 3 SGD steps on 0.5 * |y|^2: eager, or a capture (its warm-up is step 1) and 2 replays."""
    import cupy

    import cudnn_rnn
    from cudnn_rnn.cuda_graph import capture
    from cudnn_rnn.optim import SGD

    def train() -> None:
        out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **case.attrs())
        grads = cudnn_rnn.cudnn_rnn_backprop_v3(
            a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h, out.output_c, out.output, None, None,
            out.reserve_space, out.host_reserved, **case.attrs())
        optimiser.step([grads.params_backprop])

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # the inputs and the optimiser's state too: made in order on the stream that trains on them
        a = _on_gpu(random_arrays(case, np.random.default_rng(10)))
        optimiser = SGD([a.params], lr=0.05, momentum=0.9)
        if use_graph:
            graph = capture(train, stream=stream)
            for _ in range(2):
                graph.replay()
        else:
            for _ in range(3):
                train()
    stream.synchronize()
    return a.params.get()


def step_graph() -> str:
    case = _mode_case("lstm").with_(dropout=0.3, seed=2)
    error = relative_error(_trained_params(case, True), _trained_params(case, False))
    if error > 1e-12:
        raise AssertionError(f"params after 3 graph steps differ from 3 eager steps: relative error {error:.3g}")
    return f"3 steps: relative difference {error:.2g}"


def step_layout() -> str:
    from cudnn_rnn._cudnn import _layout_check as _cudnn_layout_check
    from cudnn_rnn.layout import UNCONFIRMED

    results = _cudnn_layout_check.check_layout_grid()  # each configuration on its own: one error hides nothing
    summary = _cudnn_layout_check.grid_summary(results)
    problems = [f"first {verdict.lower()}: {result.config!r}: {list(result.details[:3])}"
                for verdict in ("DIFFERS", "FAILED")
                for result in [next((r for r in results if r.verdict == verdict), None)] if result is not None]
    try:
        facts = _cudnn_layout_check.cudnn_layout_facts()
    except Exception as error:  # the grid's answers still get reported
        problems.append(f"layout.UNCONFIRMED not answered: {type(error).__name__}: {error}")
    else:
        answers = {field: (getattr(facts, field), getattr(UNCONFIRMED, field))
                   for field in ("projection_position", "skip_input_keeps_input_biases")}
        summary += "; cuDNN says " + ", ".join(f"{field} = {cudnn!r}" for field, (cudnn, _) in answers.items())
        unsettled = {field: pair for field, pair in answers.items() if pair[0] != pair[1]}
        if unsettled:
            problems.append(f"layout.UNCONFIRMED differs (cuDNN, table): {unsettled}")
    if problems:
        raise AssertionError("; ".join([summary, *problems]))
    return summary


def step_bfloat16_math() -> str:
    """Which math types cuDNN runs bfloat16 RNNs with on this GPU; the one the settings table names must run."""
    import dataclasses

    from cudnn_rnn._cudnn import _settings as _cudnn_settings
    from cudnn_rnn._cudnn._lib import MathType, library

    refusal = _cudnn_settings.dtype_refusal("bfloat16", library().version, _cudnn_settings.compute_capability(0))
    if refusal is not None:
        return f"not run: {refusal}"
    table = _cudnn_settings.PRECISIONS["bfloat16"]
    case = _mode_case("lstm", "bfloat16").with_(time_major=True)
    answers, failed = [], []
    try:
        for math_type in MathType:  # each math type builds networks of its own (it is part of their key)
            _cudnn_settings.PRECISIONS["bfloat16"] = dataclasses.replace(table, math_type=math_type,
                                                                         tf32_math_type=math_type)
            try:
                answers.append(f"{math_type.name} ran ({_compare(case, TOLERANCE['bfloat16'])})")
            except Exception as error:  # a refusal or a wrong answer: reported, and the next type is tried
                answers.append(f"{math_type.name} {type(error).__name__}: {str(error)[:160]}")
                failed.append(math_type)
    finally:
        _cudnn_settings.PRECISIONS["bfloat16"] = table
    summary = "; ".join(answers)
    if table.math_type in failed:
        raise AssertionError(f"the table's {table.math_type.name} did not run: {summary}")
    return summary


def main() -> int:
    problem = info.cudnn_backend_problem()
    if problem is not None:
        print(f"gpu_smoke.py needs a CUDA GPU with CuPy and cuDNN 9; here: {problem}", file=sys.stderr)
        return 2
    steps: list[tuple[str, Callable[[], str]]] = [("environment", step_environment)]
    steps += [(f"mode {mode}", step_mode(mode)) for mode in ("rnn_relu", "rnn_tanh", "lstm", "gru")]
    steps += [(f"lstm {dtype}", step_precision(dtype)) for dtype in ("float32", "float16")]
    steps += [("bf16 math", step_bfloat16_math)]
    steps += [("padding", step_padding), ("reserve", step_reserve), ("graph", step_graph), ("layout", step_layout)]
    failed = 0
    for name, step in steps:
        begin = time.perf_counter()
        try:
            detail, verdict = step(), "PASS"
        except Exception as error:  # every step runs; each failure is reported with its cause
            failed += 1
            lines = traceback.format_exception(error)
            detail, verdict = "".join(lines[-6:]).rstrip().replace("\n", "\n        "), "FAIL"
        print(f"{verdict} {name:<14} {time.perf_counter() - begin:7.2f} s  {detail}", flush=True)
    print(f"\n{len(steps) - failed} of {len(steps)} smoke steps passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
