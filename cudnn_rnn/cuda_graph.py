"""Record a whole training step on the GPU once, then replay it as one CUDA graph::

    def step() -> None:            # forward, backprop and optimiser update on CuPy arrays
        out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, lengths, ...)
        grads = cudnn_rnn.cudnn_rnn_backprop_v3(..., out.reserve_space, out.host_reserved, ...)
        optimiser.step([grads.params_backprop])

    graph = capture(step)          # one eager run (warm-up), then one recorded run
    for batch in batches:
        x[...] = batch             # inputs change in place; the graph reads the same memory
        graph.replay()             # the recorded work, with no Python or per-call driver work

What a step may do: enqueue device work on arrays that outlive it (inputs, params, gradients and
optimiser state updated in place with ``a[...] = ...``), with host ``sequence_lengths`` (NumPy)
equal to the warm-up's. It must not read a result on the host, change the shapes, the lengths
or the dropout seed, or use values that change on the host between steps: a replay repeats the
recorded work exactly (the same dropout masks too, as a fixed seed gives on every call;
``optim.SGD`` is exact; ``optim.Adam`` would repeat the bias correction of the recorded step).
Anything the capture cannot record (a host transfer or wait) raises inside :func:`capture`.

How: the warm-up runs on the capture stream, so the cuDNN backend builds its handle, plans and
dropout state there (a plan's upload is the one host-to-device copy, and it happens now). The
recorded run allocates from a memory pool that belongs to the graph alone, so its temporaries
keep their addresses for every replay and nothing else can be given that memory; the cached
device arrays the step reads (plans, dropout states) are kept with the graph, even after they
leave the backend's caches.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from ._cudnn_streams import import_cupy, keeping_buffers_alive

__all__ = ["CapturedStep", "capture"]


class CapturedStep:
    """A recorded step: :meth:`replay` launches it on :attr:`stream`.

    Made by :func:`capture`. Holds what the graph reads: its private memory pool and the
    backend's cached arrays.

    Args:
        graph: the recorded ``cupy.cuda.Graph``.
        stream: the CuPy stream it was recorded on.
        pool: the memory pool its temporaries live in.
        kept: the cached device arrays it reads, kept alive with it.

    Attributes:
        graph: the recorded ``cupy.cuda.Graph``.
        stream: the CuPy stream the step was recorded on and is replayed on.
    """

    def __init__(self, graph: Any, stream: Any, pool: Any, kept: list[Any]) -> None:
        self.graph = graph
        self.stream = stream
        self._pool = pool
        self._kept = kept

    def replay(self) -> None:
        """Enqueue the recorded step on :attr:`stream` (returns at once; the work runs on the GPU)."""
        self.graph.launch(self.stream)


def capture(step: Callable[[], Any], *, stream: Any = None, warmup: int = 1) -> CapturedStep:
    """Run ``step`` ``warmup`` times, then record one more run of it as a CUDA graph.

    Whatever the step raises while it is recorded (a host transfer or wait, for instance) comes
    out of this call; the capture is ended first, so the stream stays usable.

    Args:
        step: a function that only enqueues device work (see the module docstring).
        stream: a non-default CuPy stream to run, record and replay on (a new non-blocking one
            by default). Work on other streams is not ordered with it: synchronise as usual.
        warmup: eager runs before recording (>= 1): they build the backend's cached objects.

    Returns:
        The :class:`CapturedStep`. The warm-up runs really happen; the recorded run does not
        (replay it to run it).

    Raises:
        ValueError: ``warmup`` is not an int >= 1.
        ~cudnn_rnn.CudnnNotAvailableError: CuPy is not installed.
    """
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
        raise ValueError(f"warmup must be an int >= 1 (the backend builds its caches then); got {warmup!r}")
    cupy = import_cupy()
    stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
    pool = cupy.cuda.MemoryPool()
    with stream:
        for _ in range(warmup):
            step()
        with cupy.cuda.using_allocator(pool.malloc), keeping_buffers_alive() as kept:
            stream.begin_capture()
            try:
                step()
            except BaseException:
                with contextlib.suppress(Exception):  # the recording may be invalid: the step's error matters
                    stream.end_capture()
                raise
            graph = stream.end_capture()
    return CapturedStep(graph, stream, pool, kept)
