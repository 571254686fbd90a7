"""How the compiled backend keeps the cores busy: a call's schedule, and the threads that run it.

    plan = schedule(batch=32, directions=1, layers=2, workers=2, multiply_adds=1 << 30)
    # Schedule(parts=[slice(0, 16), slice(16, 32)], directions_together=False, layers_together=False)
    schedule(batch=8, directions=1, layers=2, workers=2, multiply_adds=1 << 30)
    # Schedule(parts=[slice(0, 8)], directions_together=False, layers_together=True)
    run_parts(work, plan.parts)                  # work(columns) for each part, one thread per part

Three kinds of work never wait on each other step by step, and each thread runs them with a
single-threaded BLAS (no thread hand-off per step):

- **directions**: a bidirectional layer's two directions read the same input and write their own halves of
  the output (in backprop, each its own input gradient, added after);
- **layers, as a wavefront**: in a unidirectional stack, layer l+1 runs a chunk of steps once layer l has
  written it (:class:`Wavefront`; backprop runs from the last chunk down), as cuDNN overlaps layers;
- **parts of the batch**: the sequences never meet, so each column range of x, h0, c0, y, hy, cy, the
  reserve and the gradients is a whole call of its own, but for the weight gradients, summed over the
  batch: each part's go to a buffer of its own, added once at the end.

A unidirectional stack splits its batch over the cores when each part keeps at least ``PART_ROWS``
sequences: the packed recurrent product (``_gemm``) runs a part of 8 rows at the rate of the whole batch, and
parts never wait on each other, where a wavefront's layer above waits for the first chunk. A smaller batch
runs its layers as a wavefront; a bidirectional network runs its two directions at once (the same work on
each core, from the first step), its batch split over any cores left (:func:`schedule`). The compiled cells
and BLAS release the GIL, so the threads run in parallel; they are kept between calls, asleep (a forked
child makes its own).
"""

from __future__ import annotations

import contextvars
import functools
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import RNNConfig

__all__ = ["PART_GRAIN", "PART_ROWS", "Schedule", "schedule", "multiply_adds", "part_count", "batch_parts", "Aborted",
           "Wavefront", "ChunkHooks", "run_layers", "run_parts", "run_all"]

#: the multiply-adds of a call below which it runs as one part: starting a thread (tens of microseconds)
#: costs more than a second core gives to a call this small (a decode step, T = B = 1, is one)
PART_GRAIN = 1 << 22
#: the fewest sequences per part for which a unidirectional stack splits its batch rather than run as a
#: wavefront: one tile of rows of the packed recurrent product (``_gemm.TILE``'s rows with AVX-512)
PART_ROWS = 8


@dataclass(frozen=True)
class Schedule:
    """How a call runs: ``parts`` of the batch at once, and in each, a bidirectional layer's two directions at
    once (``directions_together``) or one after the other, and a unidirectional stack's layers as a wavefront
    (``layers_together``: layer l+1 on a chunk of steps while layer l is on the next) or one after the other."""

    parts: list[slice]
    directions_together: bool
    layers_together: bool = False


def schedule(batch: int, directions: int, layers: int, workers: int, multiply_adds: int) -> Schedule:
    """The schedule of a call with ``workers`` cores free: a bidirectional network's directions on two of
    them; a unidirectional stack's batch in parts of at least ``PART_ROWS`` sequences, or where the batch is
    smaller than that on every core, its layers on up to ``layers`` of them; the batch split over the rest
    (``part_count``)."""
    large = workers >= 2 and multiply_adds >= PART_GRAIN
    directions_together = large and directions == 2
    layers_together = large and directions == 1 and layers >= 2 and batch < PART_ROWS * workers
    per_part = 2 if directions_together else min(layers, workers) if layers_together else 1
    return Schedule(batch_parts(batch, part_count(batch, max(1, workers // per_part), multiply_adds)),
                    directions_together, layers_together)


def multiply_adds(config: RNNConfig, max_time: int, batch: int) -> int:
    """The multiply-adds of one forward: per pseudo-layer T*B*G*N*(width + P), plus T*B*N*P of a projection."""
    gn, p = config.num_gates * config.num_units, config.state_size
    total = 0
    for layer in range(config.num_layers):
        width = config.output_size if layer else (0 if config.input_mode == "skip_input" else config.input_size)
        total += config.num_directions * max_time * batch * (gn * (width + p) + config.num_proj * config.num_units)
    return total


def part_count(batch: int, workers: int, multiply_adds: int) -> int:
    """The parts a call of ``multiply_adds`` over ``batch`` sequences runs as, with ``workers`` cores free::

        1                       if multiply_adds < PART_GRAIN
        min(workers, batch)     otherwise
    """
    if multiply_adds < PART_GRAIN:
        return 1
    return max(1, min(workers, batch))


def batch_parts(batch: int, parts: int) -> list[slice]:
    """``parts`` contiguous column ranges covering [0, batch), their sizes within one of each other."""
    size, extra = divmod(batch, parts)
    bounds = [index * size + min(index, extra) for index in range(parts + 1)]  # the first ``extra`` one longer
    return [slice(start, stop) for start, stop in zip(bounds[:-1], bounds[1:])]


class Aborted(Exception):
    """Raised in a job that waited on another job which failed (``run_all`` raises that one's error)."""


class Wavefront:
    """How far each layer of a wavefront has come: ``reached[layer]`` is a time position, which the layer
    after it waits on (``wait``) before it reads the steps that position covers. A failed layer
    (``fail``) ends every wait with :class:`Aborted`."""

    def __init__(self, layers: int, start: int) -> None:
        self.reached = [start] * layers
        self.failed = False
        self._changed = threading.Condition()

    def publish(self, layer: int, position: int) -> None:
        with self._changed:
            self.reached[layer] = position
            self._changed.notify_all()

    def wait(self, layer: int, ready: Callable[[int], bool]) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self.failed or ready(self.reached[layer]))
            if self.failed:
                raise Aborted(f"layer {layer} failed")

    def fail(self) -> None:
        with self._changed:
            self.failed = True
            self._changed.notify_all()

    def job(self, work: Callable[[], None]) -> Callable[[], None]:
        """``work`` as a job of ``run_all`` that, if it fails, ends the other layers' waits."""
        def guarded() -> None:
            try:
                work()
            except BaseException:
                self.fail()
                raise
        return guarded


@dataclass(frozen=True)
class ChunkHooks:
    """What a layer's loop calls around each chunk of steps [start, stop): ``before`` it reads its input
    there, ``after`` it has written its output there (no-ops: the layers run one after the other)."""

    before: Callable[[int, int], None] = lambda start, stop: None
    after: Callable[[int, int], None] = lambda start, stop: None


def run_layers(layers: int, max_time: int, down: bool, together: bool, first_input: Any,
               new_output: Callable[[int], Any], run_layer: Callable[[int, Any, Any, ChunkHooks], None],
               finish_rows: Callable[[int, Any, int, int], None]) -> None:
    """``run_layer(layer, its input, its output, hooks)`` for every layer, from layer 0 up, or from the top one
    ``down`` (backprop: a layer's input is the gradient of its output, its output the gradient of its input);
    the first reads ``first_input``, each next one the output of the one before, made by ``new_output(layer)``.
    ``finish_rows(layer, output, start, stop)`` runs on each layer's output rows once written. ``together``: as
    a wavefront (:class:`Wavefront`), a layer reading a chunk of steps once the one before has written it;
    else one after the other, each output made when its layer starts."""
    sequence = range(layers - 1, -1, -1) if down else range(layers)
    if not together:
        layer_in = first_input
        for layer in sequence:
            layer_out = new_output(layer)
            run_layer(layer, layer_in, layer_out, ChunkHooks())
            finish_rows(layer, layer_out, 0, max_time)
            layer_in = layer_out
        return
    outs = [new_output(layer) for layer in range(layers)]
    wave = Wavefront(layers, max_time if down else 0)
    step = 1 if down else -1  # from the layer before in ``sequence``

    def layer_job(layer: int) -> None:
        source = layer + step
        first = not 0 <= source < layers

        def before(start: int, stop: int) -> None:
            if not first:
                wave.wait(source, (lambda reached: reached <= start) if down else (lambda reached: reached >= stop))

        def after(start: int, stop: int) -> None:
            finish_rows(layer, outs[layer], start, stop)
            wave.publish(layer, start if down else stop)

        run_layer(layer, first_input if first else outs[source], outs[layer], ChunkHooks(before, after))

    run_all([wave.job(functools.partial(layer_job, layer)) for layer in range(layers)])


def run_parts(work: Callable[[slice], None], parts: Sequence[slice]) -> None:
    """Run ``work(part)`` for every part at once (``run_all``)."""
    run_all([functools.partial(work, part) for part in parts])


class _Worker:
    """A thread kept for ``run_all``'s jobs: it runs what ``start`` hands it, then waits, idle, for the next
    (a call's parts start in microseconds, not the tens a new thread takes, and on cores that ran them last)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="cudnn_rnn worker", daemon=True).start()

    def start(self, job: Callable[[], None]) -> threading.Event:
        """Run ``job`` (which raises nothing) on this worker; the event is set when it has ended."""
        done = threading.Event()
        self._jobs.put((job, done))
        return done

    def _serve(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                job()
            finally:
                _idle.append(self)  # free before the caller resumes, so its next call can reuse it
                done.set()


#: the workers waiting for a job (list.append and list.pop are atomic); as many as ever ran at once, all asleep
_idle: list[_Worker] = []
os.register_at_fork(after_in_child=_idle.clear)  # a forked child has none of its parent's threads


def _worker() -> _Worker:
    try:
        return _idle.pop()
    except IndexError:
        return _Worker()


def run_all(jobs: Sequence[Callable[[], None]]) -> None:
    """Run every job at once: the first on the calling thread, each other on a worker thread (kept between
    calls: no more are made than ever ran at once), all in a copy of the caller's context (NumPy's error state
    is per context). The first error raised by any job is raised here, after every job has ended."""
    if len(jobs) == 1:
        jobs[0]()
        return
    errors: list[BaseException] = []

    def guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as error:  # raised again on the calling thread below
            errors.append(error)

    running = [_worker().start(functools.partial(contextvars.copy_context().run, guarded, job)) for job in jobs[1:]]
    guarded(jobs[0])
    for done in running:
        done.wait()
    if errors:
        raise next((error for error in errors if not isinstance(error, Aborted)), errors[0])
