"""A call's batch split into independent parts, run at once on the cores: how the compiled backend uses them.

    parts = batch_parts(batch=32, workers=2)     # [slice(0, 16), slice(16, 32)]
    run_parts(work, parts)                       # work(slice) for each, one thread per part

The sequences of a batch never meet in an RNN: each column b of x, h0, c0, y, hy, cy, the reserve and the
gradients depends on column b alone, but for the weight gradients, which are sums over the batch. So a
call runs as ``len(parts)`` copies of itself on column ranges of every array, each on its own thread with a
single-threaded BLAS, none waiting for another (no step-by-step hand-off, no barrier): each part's
weight gradients go to its own buffer, added once at the end. The compiled cells and BLAS release the
GIL, so the parts run in parallel. How many parts a call gets is :func:`part_count`'s rule.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["PART_GRAIN", "Schedule", "schedule", "part_count", "batch_parts", "run_parts", "run_all"]

#: the multiply-adds of a call below which it runs as one part: starting a thread (tens of microseconds)
#: costs more than a second core gives to a call this small (a decode step, T = B = 1, is one)
PART_GRAIN = 1 << 22


@dataclass(frozen=True)
class Schedule:
    """How a call runs: ``parts`` of the batch at once, and in each, a bidirectional layer's two directions at
    once (``directions_together``) or one after the other."""

    parts: list[slice]
    directions_together: bool


def schedule(batch: int, directions: int, workers: int, multiply_adds: int) -> Schedule:
    """The schedule of a call with ``workers`` cores free: a bidirectional network's directions on two of
    them (each keeps the whole batch in its products, where BLAS is most efficient), the batch split over
    the rest (``part_count``)."""
    together = directions == 2 and workers >= 2 and multiply_adds >= PART_GRAIN
    per_part = 2 if together else 1
    return Schedule(batch_parts(batch, part_count(batch, max(1, workers // per_part), multiply_adds)), together)


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
    bounds = [0]
    for index in range(parts):
        bounds.append(bounds[-1] + size + (1 if index < extra else 0))
    return [slice(start, stop) for start, stop in zip(bounds[:-1], bounds[1:])]


def run_parts(work: Callable[[slice], None], parts: Sequence[slice]) -> None:
    """Run ``work(part)`` for every part at once (``run_all``)."""
    run_all([functools.partial(work, part) for part in parts])


def run_all(jobs: Sequence[Callable[[], None]]) -> None:
    """Run every job at once: the first on the calling thread, each other on a thread of its own, all in a
    copy of the caller's context (NumPy's error state is per context). The first error raised by any job is
    raised here, after every job has ended."""
    if len(jobs) == 1:
        jobs[0]()
        return
    errors: list[BaseException] = []

    def guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as error:  # raised again on the calling thread below
            errors.append(error)

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(guarded, job),
                                name=f"cudnn_rnn part {index}", daemon=True)
               for index, job in enumerate(jobs[1:], start=1)]
    for thread in threads:
        thread.start()
    guarded(jobs[0])
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
