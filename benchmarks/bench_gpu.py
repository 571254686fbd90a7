"""Training-step time of cudnn_rnn's cuDNN backend against PyTorch's cuDNN RNNs (same GPU, same process).

One step is a training forward plus the full backprop (input, initial-state and weight gradients)
of the same configuration on both sides: ``cudnn_rnn_v3`` + ``cudnn_rnn_backprop_v3`` on CuPy
arrays, and ``torch.nn.LSTM`` / ``torch.nn.GRU`` forward + ``torch.autograd.backward``. Each
configuration runs in three precisions, the same math on both sides:

    fp32   float32 with true float32 arithmetic (our default, CUDNN_FMA_MATH; torch with
           allow_tf32 off for cuDNN and matmul)
    tf32   float32 with TF32 tensor cores allowed (cudnn_rnn.allow_tf32(True); torch's flags on)
    fp16   float16 data, float32 math on tensor cores (both sides' default for half)

Per configuration and precision it prints our eager ms, our ms replaying the same step as a CUDA
graph (``cudnn_rnn.cuda_graph``: no Python or per-call driver work), torch's ms, the ratio
ours/torch (eager against eager) with its target, and the achieved TFLOP/s by anchors.md section
3.1 (per layer and direction a forward does 2*B*G*H*(I_l + H)*T FLOPs, G = 4 LSTM, 3 GRU; the
backward twice that). Steps are timed with CUDA events after warm-up.

Then cuDNN's persistent algorithms (``algo=``: persist_static, persist_dynamic,
persist_static_small_h) on every configuration and precision: our eager ms per step with each,
beside the standard algorithm's, or "refused" where cuDNN refuses it. A persistent algorithm that
beats the standard one here is what ``_cudnn_settings.AUTO_RULES`` (``algo="auto"``) is made from.

Then the host overhead per call (microseconds per training step on a tiny configuration, where
the GPU waits for the host): ours eager, ours as a graph replay, torch; and what dropout costs a
training step of the small configuration both ways: op calls whose seed2 advances every step
(cudnnSetDropoutDescriptor, cuRAND's state set-up, every step: what the layers did before) against
a layer whose RNG is set up once and restored by two device copies per step; each alone on the GPU
and the host, and whether a re-seed blocks the host.

Targets: ratio <= 1.02 on the large configurations and <= 1.0 on the small one.
Usage: python benchmarks/bench_gpu.py [--steps N] [--json PATH]   (exit 2 without a GPU)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # this folder's _bench_configs, and a checkout without installing

from _bench_configs import Bench  # noqa: E402

from cudnn_rnn import info  # noqa: E402


@dataclass(frozen=True)
class GpuBench(Bench):
    """A configuration with the ratio ours/torch to stay under."""

    target: float = 1.02


BENCHES = (
    GpuBench("lstm", 100, 64, 512, layers=2),
    GpuBench("lstm", 25, 128, 1024),
    GpuBench("gru", 100, 32, 256, layers=2, bidirectional=True),
    GpuBench("lstm", 50, 4, 128, target=1.0),
)
SMALL = BENCHES[-1]
TINY = Bench("lstm", 1, 1, 8)  # for the host overhead
PRECISIONS = ("fp32", "tf32", "fp16")
RESEED_SHARE_LIMIT = 0.05

Step = Callable[[], None]


# ---- the two sides ------------------------------------------------------------------------------
def _use_precision(precision: str) -> str:
    """Set both sides' TF32 switches for ``precision``; returns the dtype name."""
    from cudnn_rnn._cudnn import _settings as _cudnn_settings

    tf32 = precision == "tf32"
    _cudnn_settings.allow_tf32(tf32)
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    except ImportError:
        pass
    return "float16" if precision == "fp16" else "float32"


def _ours(bench: Bench, dtype: str, algo: str = "standard") -> Step:
    """One training forward + backprop through cudnn_rnn on CuPy arrays (on the current stream)."""
    import cupy

    import cudnn_rnn

    rng = cupy.random.RandomState(0)
    lstm = bench.mode == "lstm"
    direction = "bidirectional" if bench.bidirectional else "unidirectional"
    size = cudnn_rnn.cudnn_rnn_params_size(bench.layers, bench.hidden, bench.inputs, rnn_mode=bench.mode,
                                           direction=direction)
    states = (bench.layers * bench.directions, bench.batch, bench.hidden)

    def draw(shape: Any, scale: float = 1.0) -> Any:
        return (scale * rng.standard_normal(shape, dtype=cupy.float32)).astype(dtype)

    x = draw((bench.max_time, bench.batch, bench.inputs))
    h0, c0 = draw(states), (draw(states) if lstm else None)
    params = draw(size, 0.05)
    dy = draw((bench.max_time, bench.batch, bench.directions * bench.hidden))
    dhy, dcy = cupy.ones_like(h0), (cupy.ones_like(c0) if lstm else None)
    attrs = dict(rnn_mode=bench.mode, direction=direction, algo=algo)

    def step() -> None:
        out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, is_training=True, **attrs)
        cudnn_rnn.cudnn_rnn_backprop_v3(x, h0, c0, params, None, out.output, out.output_h, out.output_c, dy, dhy,
                                        dcy, out.reserve_space, out.host_reserved, **attrs)
    return step


def _torch(bench: Bench, dtype: str) -> Step:
    """The same step through torch.nn.LSTM / GRU (cuDNN): gradients of input, states and weights."""
    import torch

    torch.backends.cudnn.benchmark = False
    torch_dtype = {"float32": torch.float32, "float16": torch.float16}[dtype]
    layer_class = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[bench.mode]
    model = layer_class(bench.inputs, bench.hidden, bench.layers, bidirectional=bench.bidirectional)
    model = model.to(device="cuda", dtype=torch_dtype)
    states = (bench.layers * bench.directions, bench.batch, bench.hidden)

    def draw(*shape: int, grad: bool = True) -> Any:
        return torch.randn(*shape, device="cuda", dtype=torch_dtype, requires_grad=grad)

    x, h0, c0 = draw(bench.max_time, bench.batch, bench.inputs), draw(*states), draw(*states)
    dy = draw(bench.max_time, bench.batch, bench.directions * bench.hidden, grad=False)
    ones = torch.ones(states, device="cuda", dtype=torch_dtype)
    tensors = [x, h0, c0, *model.parameters()]

    def step() -> None:
        for tensor in tensors:
            tensor.grad = None
        if bench.mode == "lstm":
            y, (hy, cy) = model(x, (h0, c0))
            torch.autograd.backward([y, hy, cy], [dy, ones, ones])
        else:
            y, hy = model(x, h0)
            torch.autograd.backward([y, hy], [dy, ones])
    return step


# ---- timing ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timer:
    """CUDA events, a synchronisation and elapsed-time function of one framework."""

    events: Callable[[], tuple[Any, Any]]
    synchronize: Callable[[], None]
    elapsed_ms: Callable[[Any, Any], float]


def _cupy_timer() -> Timer:
    import cupy

    return Timer(lambda: (cupy.cuda.Event(), cupy.cuda.Event()), lambda: cupy.cuda.get_current_stream().synchronize(),
                 cupy.cuda.get_elapsed_time)


def _torch_timer() -> Timer:
    import torch

    return Timer(lambda: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)),
                 torch.cuda.synchronize, lambda start, end: start.elapsed_time(end))


def _gpu_ms(step: Step, steps: int, timer: Timer, warmup: int = 3) -> float:
    """Milliseconds per step on the current stream, from events around ``steps`` steps after warm-up."""
    for _ in range(warmup):
        step()
    timer.synchronize()
    start, end = timer.events()
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return timer.elapsed_ms(start, end) / steps


def _host_us(step: Step, synchronize: Callable[[], None], calls: int = 300) -> float:
    """Wall time per call on a tiny configuration (host-bound: the GPU waits for the host)."""
    for _ in range(10):
        step()
    synchronize()
    begin = time.perf_counter()
    for _ in range(calls):
        step()
    synchronize()
    return (time.perf_counter() - begin) / calls * 1e6


def _ours_eager_and_graph(bench: Bench, dtype: str, steps: int) -> tuple[float, float]:
    """Our ms per step, eager and as a replayed CUDA graph, both on one non-default stream."""
    import cupy

    from cudnn_rnn.cuda_graph import capture

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        step = _ours(bench, dtype)
        eager = _gpu_ms(step, steps, _cupy_timer())
        graph = capture(step, stream=stream)
        replayed = _gpu_ms(graph.replay, steps, _cupy_timer())
    del graph
    return eager, replayed


def _algorithm_ms(bench: Bench, dtype: str, steps: int) -> dict[str, float | None]:
    """Our eager ms per step with each persistent algorithm; None where cuDNN refuses it."""
    from cudnn_rnn.config import PERSISTENT_ALGOS
    from cudnn_rnn.errors import CudnnError

    times: dict[str, float | None] = {}
    for algo in PERSISTENT_ALGOS:
        try:
            times[algo] = _gpu_ms(_ours(bench, dtype, algo), steps, _cupy_timer())
        except CudnnError:
            times[algo] = None
    return times


def _host_overheads() -> dict[str, float]:
    import cupy

    from cudnn_rnn.cuda_graph import capture

    _use_precision("fp32")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        step = _ours(TINY, "float32")
        graph = capture(step, stream=stream)
        overheads = {"ours": _host_us(step, stream.synchronize),
                     "ours_graph": _host_us(graph.replay, stream.synchronize)}
    try:
        import torch

        if torch.cuda.is_available():
            overheads["torch"] = _host_us(_torch(TINY, "float32"), torch.cuda.synchronize)
    except ImportError:
        pass
    return overheads


# ---- dropout: re-seeding every step against a layer's advancing RNG -----------------------------------
def _dropout_step_costs(small_step_ms: float, calls: int = 50) -> dict[str, Any]:
    """A training step with dropout of the small configuration, two ways, and what each way adds alone.

    ``reseeding``: op calls whose seed2 advances every step, as the layers used to run: every step
    re-runs cudnnSetDropoutDescriptor (cuRAND's state set-up over the whole state). ``layer``: an
    LSTM layer, whose dropout RNG is set up once and restored (two device copies of the state) every
    step. Alone: a re-seed (``_DropoutState.rewind`` with a new seed) and a layer's restore and keep.
    Also whether a re-seed blocks the host while the GPU is busy.
    """
    import cupy

    import cudnn_rnn
    from cudnn_rnn._cudnn import _cache as _cudnn_cache
    from cudnn_rnn._cudnn._dropout_rng import DropoutRNG

    _use_precision("fp32")
    hidden, inputs, layers = SMALL.hidden, SMALL.inputs, 2
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        layer = cudnn_rnn.LSTM(inputs, hidden, layers, dropout=0.1, seed=1, xp=cupy)
        x = cupy.zeros((SMALL.max_time, SMALL.batch, inputs), dtype=cupy.float32)
        states = cupy.zeros((layers, SMALL.batch, hidden), dtype=cupy.float32)
        seeds = iter(range(1 << 20, 1 << 22))

        def reseeding_step() -> None:  # one op step with a new seed2, as the layers used to run
            attrs = {"dropout": 0.1, "seed": 1, "seed2": next(seeds)}
            out = cudnn_rnn.cudnn_rnn_v3(x, states, states, layer.params, **attrs)
            grads = cudnn_rnn.cudnn_rnn_backprop_v3(x, states, states, layer.params, None, out.output, out.output_h,
                                                    out.output_c, out.output, None, None, out.reserve_space,
                                                    out.host_reserved, **attrs)
            layer.grad += grads.params_backprop

        def layer_step() -> None:
            y, _, _ = layer(x, time_major=True)
            layer.backward(y)

        step_ms = {"reseeding": _gpu_ms(reseeding_step, calls, _cupy_timer()),
                   "layer": _gpu_ms(layer_step, calls, _cupy_timer())}
        context = _cudnn_cache.thread_context(cupy.cuda.Device().id)
        network = context.networks.values()[-1]  # the training network both steps used
        handle = context.handle.bind(stream.ptr)
        rng = DropoutRNG()

        def reseeded() -> None:
            network.dropout.rewind(handle, stream, next(seeds))

        def restored() -> None:
            network.dropout.restore(handle, stream, rng, 1)
            network.dropout.keep(stream, rng)

        alone = {name: _gpu_ms(step, calls, _cupy_timer()) for name, step in
                 (("reseed", reseeded), ("restore and keep", restored))}
        host = {name: _host_us(step, stream.synchronize, calls) / 1e3 for name, step in
                (("reseed", reseeded), ("restore and keep", restored))}
        big = cupy.ones((4096, 4096), dtype=cupy.float32)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(10):
            big = big @ big * (1.0 / 4096)
        end.record()
        begin = time.perf_counter()
        reseeded()  # enqueued behind about 10 large matmuls
        returned_ms = (time.perf_counter() - begin) * 1e3
        end.synchronize()
        queued_ms = cupy.cuda.get_elapsed_time(start, end)
    share = alone["reseed"] / small_step_ms
    saved = 1.0 - step_ms["layer"] / step_ms["reseeding"]
    return {"states_bytes": int(network.dropout.working.nbytes), "step_ms": step_ms, "gpu_ms": alone,
            "host_ms": host, "reseed_returned_ms_with_gpu_busy": returned_ms, "gpu_busy_ms": queued_ms,
            "reseed_blocks_host": returned_ms > 0.5 * queued_ms, "share_of_small_step": share,
            "small_step_ms": small_step_ms, "layer_step_saves": saved,
            "verdict": (f"a layer's step with its own RNG takes {100 * saved:.1f}% less than re-seeding every step"
                        + ("" if share <= RESEED_SHARE_LIMIT else f" (a re-seed is {100 * share:.0f}% of a step)"))}


# ---- the report ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per measurement (default 20)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    problem = info.cudnn_backend_problem()
    if problem is not None:
        print(f"bench_gpu.py needs a CUDA GPU with CuPy and cuDNN 9; here: {problem}", file=sys.stderr)
        return 2
    import cupy

    from cudnn_rnn._cudnn import _settings as _cudnn_settings, _lib

    try:
        import torch
        torch_ok = torch.cuda.is_available()
        torch_note = (f"torch {torch.__version__} with its cuDNN {torch.backends.cudnn.version()}" if torch_ok
                      else "torch has no CUDA: torch columns skipped")
    except ImportError:
        torch_ok, torch_note = False, "torch not installed: torch columns skipped"
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    device = device.decode() if isinstance(device, bytes) else str(device)
    ours_cudnn = _lib.version_string(_lib.library().version)
    print(f"GPU {device}; ours: cuDNN {ours_cudnn}, CuPy {cupy.__version__}; {torch_note}; "
          f"{args.steps} timed steps per measurement\n")
    header = (f"{'configuration':<36}{'prec':>5}{'ours ms':>9}{'graph ms':>10}{'torch ms':>10}{'ours/torch':>12}"
              f"{'TFLOP/s':>9}{'torch':>7}  target")
    print(header)
    results = []
    tf32_before = _cudnn_settings.tf32_allowed()
    try:
        for bench in BENCHES:
            for precision in PRECISIONS:
                dtype = _use_precision(precision)
                ours, graph = _ours_eager_and_graph(bench, dtype, args.steps)
                theirs = _gpu_ms(_torch(bench, dtype), args.steps, _torch_timer()) if torch_ok else float("nan")
                ratio = ours / theirs
                verdict = "n/a" if not torch_ok else ("met" if ratio <= bench.target else "MISSED")
                gflop = bench.flops() / 1e9
                print(f"{bench.name():<36}{precision:>5}{ours:>9.3f}{graph:>10.3f}{theirs:>10.3f}{ratio:>12.3f}"
                      f"{gflop / ours:>9.2f}{gflop / theirs:>7.2f}  <= {bench.target} {verdict}", flush=True)
                results.append({**asdict(bench), "name": bench.name(), "precision": precision, "ours_ms": ours,
                                "graph_ms": graph, "torch_ms": theirs, "ratio": ratio, "verdict": verdict,
                                "ours_tflops": gflop / ours, "torch_tflops": gflop / theirs,
                                "algo_ms": _algorithm_ms(bench, dtype, args.steps)})
        small_fp32 = next(r["ours_ms"] for r in results if r["name"] == SMALL.name() and r["precision"] == "fp32")
        overheads = _host_overheads()
        reseed = _dropout_step_costs(small_fp32)
    finally:
        _cudnn_settings.allow_tf32(tf32_before)
    print("\ncuDNN's algorithms, our eager ms per step ('refused' where cuDNN refuses one):")
    names = ("standard",) + tuple(results[0]["algo_ms"])
    print(f"{'configuration':<36}{'prec':>5}" + "".join(f"{name:>24}" for name in names) + "  fastest")
    for r in results:
        times = {"standard": r["ours_ms"], **r["algo_ms"]}
        fastest = min((t, name) for name, t in times.items() if t is not None)[1]
        print(f"{r['name']:<36}{r['precision']:>5}"
              + "".join(f"{'refused' if t is None else format(t, '.3f'):>24}" for t in times.values())
              + f"  {fastest}")
    print(f"\nhost overhead per training step ({TINY.name()}, fp32): "
          + ", ".join(f"{name} {value:.0f} us" for name, value in overheads.items()))
    print(f"dropout ({reseed['states_bytes']} bytes of RNG state), small configuration's fp32 training step: "
          f"re-seeding every step {reseed['step_ms']['reseeding']:.3f} ms, a layer's own RNG "
          f"{reseed['step_ms']['layer']:.3f} ms; alone on the GPU: a re-seed {reseed['gpu_ms']['reseed']:.3f} ms, "
          f"a layer's restore and keep {reseed['gpu_ms']['restore and keep']:.3f} ms; a re-seed blocks the host: "
          f"{reseed['reseed_blocks_host']} (returned after {reseed['reseed_returned_ms_with_gpu_busy']:.2f} ms with "
          f"{reseed['gpu_busy_ms']:.1f} ms queued): {reseed['verdict']}")
    if args.json:
        record = {"device": device, "ours_cudnn": ours_cudnn, "cupy": cupy.__version__, "torch": torch_note,
                  "steps": args.steps, "benches": results, "host_overhead_us": overheads, "dropout_reseed": reseed}
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
