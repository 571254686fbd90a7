"""Record a whole training step on the GPU once, then replay it as one CUDA graph::

    def step() -> None:            # forward, backprop and optimiser update on CuPy arrays
        out = cudnn_rnn.cudnn_rnn_v3(x, h0, c0, params, lengths, ...)
        grads = cudnn_rnn.cudnn_rnn_backprop_v3(..., out.reserve_space, out.host_reserved, ...)
        optimiser.step([grads.params_backprop])

    graph = capture(step)          # one eager run (warm-up), then one recorded run
    for batch in batches:
        x[...] = batch             # inputs change in place; the graph reads the same memory
        graph.replay()             # the recorded work, with no Python or per-call driver work

    graph = capture(step, on_new_lengths="recapture", max_graphs=8)
    lengths[...] = other_lengths   # in place: the graph watches the array the step passes
    graph.replay()                 # new lengths: the step runs eagerly now, and is recorded for them

Lengths and shapes. cuDNN takes the sequence lengths from host memory when a call is enqueued, so a
graph freezes the lengths, and the shapes, of the run it recorded. That run watches what each op call on
CuPy arrays was given: the ``sequence_lengths`` object as passed (a NumPy array, or the list given to a
layer) and the ``input`` array. Every :meth:`CapturedStep.replay` first checks on the host, with no device
work and no wait, that they still hold the recorded lengths and shapes. If not, it raises ValueError
(``on_new_lengths="raise"``, the default), or (``"recapture"``) runs the step eagerly as this replay's work
and records one more graph for the new lengths, which later replays with those lengths launch; the
``max_graphs`` most recently used graphs are kept (one dropped goes with its memory pool). The watch sees
changes made in place (``lengths[...] = ...``), not a lengths array built anew on every call or a name
rebound to another array: the graph replays what it recorded. CuPy ``sequence_lengths`` are refused while
recording (they are read back to the host).

What a step may do: enqueue device work on arrays that outlive it (inputs, params, gradients and
optimiser state updated in place with ``a[...] = ...``), with host ``sequence_lengths`` (NumPy).
It must not read a result on the host, replace its arrays, change an op call's dropout seed, or
use other values that change on the host between steps: a replay repeats the recorded work
exactly (``optim.SGD`` is exact; ``optim.Adam`` would repeat the bias correction of the recorded
step). Dropout: an op call with fixed seeds draws the same masks on every replay, as it does on
every call; a layer's training forward draws from the layer's own RNG state on the GPU, which
every replay advances as every eager step does (the layer's ``step`` counter, a host value,
stays where the recording left it). Anything the capture cannot record (a host transfer or wait)
raises inside :func:`capture` (or inside the replay that records, with ``"recapture"``).

How: the warm-up runs on the capture stream, so the cuDNN backend builds its handle, plans and
dropout state there (a plan's upload is the one host-to-device copy, and it happens now). The
recorded run allocates from a memory pool that belongs to the graph alone, so its temporaries
keep their addresses for every replay and nothing else can be given that memory; the cached
device arrays the step reads (plans, dropout states) are kept with the graph, even after they
leave the backend's caches. A graph dropped from a :class:`CapturedStep` releases both.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Literal

from . import _graph_watch
from ._cudnn._streams import import_cupy, keeping_buffers_alive

__all__ = ["ON_NEW_LENGTHS", "CapturedStep", "capture"]

#: What :meth:`CapturedStep.replay` does when the watched lengths or shapes differ from every kept graph's
ON_NEW_LENGTHS: dict[str, str] = {
    "raise": "raise ValueError, naming the recorded and the current values",
    "recapture": "run the step eagerly (this replay's work), then record a graph for the new lengths",
}


@dataclass
class _Recorded:
    """One graph with what it reads (its memory pool, the backend's cached arrays) and what it froze."""

    graph: Any
    pool: Any
    kept: list[Any]
    frozen: _graph_watch.Frozen


class CapturedStep:
    """A recorded step: :meth:`replay` launches its graph on :attr:`stream`; made by :func:`capture`, not directly.

    Attributes:
        step: the recorded function (run again, eagerly, when ``"recapture"`` meets new lengths).
        stream: the CuPy stream the step was recorded on and is replayed on.
        on_new_lengths: ``"raise"`` or ``"recapture"`` (see :data:`ON_NEW_LENGTHS`).
        max_graphs: the most graphs kept with ``"recapture"``.
    """

    def __init__(self, step: Callable[[], Any], stream: Any, *, on_new_lengths: Literal["raise", "recapture"],
                 max_graphs: int) -> None:
        self.step = step
        self.stream = stream
        self.on_new_lengths = on_new_lengths
        self.max_graphs = max_graphs
        self._graphs: list[_Recorded] = []  # least recently used first

    @property
    def graph(self) -> Any:
        """The ``cupy.cuda.Graph`` launched last (before any replay, the one :func:`capture` recorded)."""
        return self._graphs[-1].graph

    def replay(self) -> None:
        """Enqueue the recorded step on :attr:`stream` (returns at once; the work runs on the GPU), after checking
        the watched lengths and shapes as the module docstring's "Lengths and shapes" says.

        Raises:
            ValueError: (``"raise"``) ``sequence_lengths`` or an input shape differ from the
                recorded ones; the message gives both.
            Exception: (``"recapture"``) whatever the eager run or the recording raises; the
                graphs kept before stay as they were.
        """
        graphs = self._graphs
        change = graphs[-1].frozen.change()
        if change is not None:
            found = next((g for g in reversed(graphs[:-1]) if g.frozen.change() is None), None)
            if found is None:
                if self.on_new_lengths == "raise":
                    raise ValueError(
                        f"cannot replay this CUDA graph: {change}. A graph freezes the sequence_lengths and "
                        "shapes it was recorded with (cuDNN takes the lengths from host memory): put them back, "
                        "capture the step again for the new ones, or capture it with "
                        "on_new_lengths='recapture' to record a graph for each lengths pattern")
                with self.stream:
                    self.step()  # this replay's work
                    self._record()
                return
            graphs.remove(found)
            graphs.append(found)
        graphs[-1].graph.launch(self.stream)

    def _record(self) -> None:
        """Record one run of the step (not run) on :attr:`stream` (the current stream), into a memory pool of its
        own, as the most recently used graph."""
        cupy = import_cupy()
        pool = cupy.cuda.MemoryPool()
        with (cupy.cuda.using_allocator(pool.malloc), keeping_buffers_alive() as kept,
              _graph_watch.recording() as frozen):
            self.stream.begin_capture()
            try:
                self.step()
            except BaseException:
                with contextlib.suppress(Exception):  # the recording may be invalid: the step's error matters
                    self.stream.end_capture()
                raise
            graph = self.stream.end_capture()
        self._graphs.append(_Recorded(graph, pool, kept, frozen))
        del self._graphs[:-self.max_graphs]  # the least recently used: their pools and kept arrays go too


def _check_count(name: str, value: object, why: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1 ({why}); got {value!r}")


def capture(step: Callable[[], Any], *, stream: Any = None, warmup: int = 1,
            on_new_lengths: Literal["raise", "recapture"] = "raise", max_graphs: int = 8) -> CapturedStep:
    """Run ``step`` ``warmup`` times, then record one more run of it as a CUDA graph.

    Whatever the step raises while it is recorded (a host transfer or wait, CuPy
    ``sequence_lengths``, for instance) comes out of this call; the capture is ended first, so
    the stream stays usable.

    Args:
        step: a function that only enqueues device work (see the module docstring).
        stream: a non-default CuPy stream to run, record and replay on (a new non-blocking one
            by default). Work on other streams is not ordered with it: synchronise as usual.
        warmup: eager runs before recording (>= 1): they build the backend's cached objects.
        on_new_lengths: what a replay does when the step's ``sequence_lengths`` (or input
            shapes) no longer hold what a graph was recorded with: a key of :data:`ON_NEW_LENGTHS`.
        max_graphs: with ``"recapture"``, the most graphs kept (each with its own memory pool),
            the least recently used dropped first.

    Returns:
        The :class:`CapturedStep`. The warm-up runs really happen (they update the step's
        arrays, as eager calls do); the recorded run does not (replay it to run it).

    Raises:
        ValueError: ``warmup`` or ``max_graphs`` is not an int >= 1, or ``on_new_lengths`` is
            not a key of :data:`ON_NEW_LENGTHS`.
        TypeError: the recorded run passes CuPy ``sequence_lengths``.
        ~cudnn_rnn.CudnnNotAvailableError: CuPy is not installed.
    """
    _check_count("warmup", warmup, "the backend builds its caches then")
    _check_count("max_graphs", max_graphs, "the graphs kept with on_new_lengths='recapture'")
    if not isinstance(on_new_lengths, str) or on_new_lengths not in ON_NEW_LENGTHS:
        raise ValueError(f"on_new_lengths must be one of {', '.join(map(repr, ON_NEW_LENGTHS))}; "
                         f"got {on_new_lengths!r}")
    cupy = import_cupy()
    stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
    captured = CapturedStep(step, stream, on_new_lengths=on_new_lengths, max_graphs=max_graphs)
    with stream:
        for _ in range(warmup):
            step()
        captured._record()
    return captured
