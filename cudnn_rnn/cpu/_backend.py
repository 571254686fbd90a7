"""The reference backend: cuDNN's RNN math written out, on NumPy (or CuPy) arrays.

The interface, and the shapes, of the cuDNN backend (``cudnn_rnn._cudnn._backend``'s module docstring gives them).

Per pseudo-layer, the cell of the mode: the step math, forward and backward, and how it is arranged
to run fast, is ``_cells``; this module runs it over layers, directions and time. Every layer's
input projections are one GEMM per chunk of ``TIME_CHUNK`` steps; only ``R h_{t-1}`` is serial;
backprop's weight gradients are one GEMM per chunk. Variable lengths: each sequence b is processed
for ``t < len[b]``; past its end the state is carried unchanged and the output is 0. Padding (``x``
and ``dy`` at t >= len[b]) is never read: it is replaced by 0 first, so NaN or inf there changes
nothing. The reverse direction sees each sequence reversed within its own span
(:class:`TimeOrder`). Dropout (inverted, probability p) applies to the output of every layer but
the last, with masks drawn from TF's 64-bit seed, so a call is a deterministic function of its
inputs. float16 and bfloat16 data compute in float32: inputs are widened, outputs, gradients and the
reserve space are rounded back to the data's dtype.

The reserve space holds what :class:`ReserveLayout` lists; backward walks the same tables in reverse.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
from numpy.typing import DTypeLike

from .. import _reserve, cpu
from .._arrays import Array, array_module
from ..config import COMPUTE_DTYPES, RNNConfig
from ..layout import ParamsLayout, params_layout
from . import _cells, _parts
from ._dropout import dropout_mask
from ._reserve_layout import ReserveLayout
from ._time_order import TimeOrder
from ._cells import LayerWeights

__all__ = ["forward", "backward", "ReserveLayout"]

_T = TypeVar("_T")


def _compute_dtype(dtype: DTypeLike) -> np.dtype:
    """float16 and bfloat16 compute in float32 (``config.COMPUTE_DTYPES``); the others in themselves."""
    return _computed_in(np.dtype(dtype))


@functools.lru_cache(maxsize=16)
def _computed_in(given: np.dtype) -> np.dtype:
    """The dtype data of dtype ``given`` computes in (looked up once per dtype: every call asks)."""
    wider = COMPUTE_DTYPES.get(given.name)
    return given if wider is None else np.dtype(wider)


#: time steps per chunk: input GEMMs and weight-gradient GEMMs run a chunk at a time, so no
#: [T, B, G*N] temporary beyond the reserve space is ever alive.
TIME_CHUNK = 32
#: at most this many in a wavefront (``_parts``): the layer above waits for the first chunk of the one below
WAVEFRONT_CHUNK = 16
#: at most this many elements of [t, B, G*N] per chunk of backprop (its d(pre-activation) buffer):
#: fewer steps per chunk for large B*G*N, whose weight-gradient GEMMs are efficient with fewer rows
BACKWARD_CHUNK = 1 << 20
#: elements of [s, B, G*N] per block of backward factors: small enough to stay in a core's cache
FACTOR_BLOCK = 1 << 16


def _chunks(max_time: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) of each run of ``size`` steps in [0, max_time) (the last one shorter)."""
    return [(start, min(max_time, start + size)) for start in range(0, max_time, size)]


class _Track:
    """A saved [T, B, F] sequence as the step loop writes it: straight into its reserve slot when the
    dtypes agree and the slot is contiguous (not a part's columns), else into a chunk buffer copied to the
    slot after each chunk (or kept nowhere: inference, or a quantity that is not saved)."""

    def __init__(self, slot: Array | None, chunk: int, batch: int, width: int, dtype: DTypeLike, xp: Any) -> None:
        self.slot = slot
        in_place = slot is not None and slot.dtype == dtype and bool(slot.flags.c_contiguous)
        self.buffer = None if in_place else xp.empty((chunk, batch, width), dtype=dtype)

    def rows(self, start: int, stop: int) -> Array:
        if self.buffer is not None:
            return self.buffer[:stop - start]
        assert self.slot is not None, "a track without a buffer writes into its slot"
        return self.slot[start:stop]

    def flush(self, start: int, stop: int) -> None:
        if self.buffer is not None and self.slot is not None:
            self.slot[start:stop] = self.buffer[:stop - start]


def _run_direction(config: RNNConfig, layer_in: Array, order: TimeOrder, h: Array, c: Array | None,
                   fw: _cells.ForwardWeights, valid: Array | None, invalid: Array | None, saved: dict[str, Array],
                   out: Array, run: _Run, xp: Any, hooks: _parts.ChunkHooks) -> tuple[Array, Array | None]:
    """Run one pseudo-layer over natural-order ``layer_in`` [T, B, width] (``hooks`` around each chunk).

    Per chunk of steps: the input GEMM writes W x straight into the gate rows, the step loop
    (``steps_forward`` of ``run.cells``) adds the biases, turns them into activations and writes h (and c) rows,
    then the chunk's outputs go to their natural positions. Writes this direction's output
    [T, B, P] into ``out`` (0 past each length; ``out`` arrives zeroed) and the saved tensors into
    ``saved``; returns the final (h, c).
    """
    mode, n, p = config.rnn_mode, config.num_units, config.state_size
    max_time, batch = layer_in.shape[0], layer_in.shape[1]
    dtype, chunk = layer_in.dtype, min(max_time, run.time_chunk())
    ws = _cells.Workspace(batch, config.num_gates, n, p, dtype, xp)

    def track(name: str, width: int) -> _Track:
        return _Track(saved.get(name), chunk, batch, width, dtype, xp)

    gates = track("gates", config.num_gates * n)
    rnn = mode in ("rnn_tanh", "rnn_relu")
    hidden = gates if rnn else track("hidden", p)
    cell = track("cell", n) if mode == "lstm" else None
    rec_n = track("rec_n", n) if "rec_n" in saved else None
    h_carry = xp.array(h, dtype=dtype)  # this direction's own copies, updated in place
    c_carry = None if c is None else xp.array(c, dtype=dtype)
    gn, width, cells = config.num_gates * n, layer_in.shape[2], run.cells
    for start, stop in _chunks(max_time, chunk):
        hooks.before(start, stop)
        g_rows, h_rows = gates.rows(start, stop), hidden.rows(start, stop)
        c_rows = None if cell is None else cell.rows(start, stop)
        n_rows = None if rec_n is None else rec_n.rows(start, stop)
        run.threads.for_products((stop - start) * batch * width * gn)
        _input_preactivations(cells, fw, order.gather(layer_in, start, stop), g_rows, n, xp)
        run.threads.for_products(batch * p * gn)
        cells.steps_forward(mode, fw, g_rows, h_carry, c_carry, h_rows, c_rows, n_rows, ws, xp,
                            None if invalid is None else invalid[start:stop])  # past the end: state carried
        order.put_valid(out, start, stop, h_rows, valid, xp)
        hooks.after(start, stop)
        h_carry[...] = h_rows[stop - start - 1]
        if c_rows is not None:
            assert c_carry is not None, "an LSTM direction carries c"
            c_carry[...] = c_rows[stop - start - 1]
        for saved_track in (gates, cell, rec_n) if rnn else (gates, hidden, cell, rec_n):
            if saved_track is not None:
                saved_track.flush(start, stop)
    return h_carry, c_carry


def _layer_weights(layout: ParamsLayout, params: Array, k: int) -> LayerWeights:
    """Views into ``params`` of pseudo-layer k's stacked matrices ([G*N, width]), biases ([G*N]) and projection."""
    return {
        "W": layout.gate_block(params, k, "input"),
        "R": layout.gate_block(params, k, "recurrent"),
        "bW": layout.bias_block(params, k, "input"),
        "bR": layout.bias_block(params, k, "recurrent"),
        "Proj": layout.projection(params, k),
    }


def _input_preactivations(cells: ModuleType, fw: _cells.ForwardWeights, x: Array, out: Array, num_units: int,
                          xp: Any) -> None:
    """``out`` [t, B, G*N] <- W x_t for steps x [t, B, width] (``input_product`` of the ``cells``), in their order
    and scaling (their ``forward_weights``; their ``steps_forward`` adds the biases). Under skip_input, x itself
    stands in place of W x for every gate."""
    t, b, n = x.shape[0], x.shape[1], num_units
    if fw.W is None:
        for gate, scale in enumerate(fw.input_scale):
            xp.multiply(x, scale, out=out[:, :, gate * n:(gate + 1) * n])
    else:
        cells.input_product(fw, x.reshape(t * b, x.shape[2]), out.reshape(t * b, out.shape[2]), xp)


def _masks(lengths: np.ndarray, max_time: int, xp: Any) -> tuple[Array | None, Array | None]:
    """[T, B, 1] boolean masks of the steps inside each sequence and of those past its end, or None when all
    are full."""
    if bool(np.all(lengths == max_time)):
        return None, None
    valid = xp.asarray((np.arange(max_time)[:, None] < lengths[None, :])[:, :, None])
    return valid, ~valid


def _to_time_major(a: Array, time_major: bool) -> Array:
    return a if time_major else a.transpose(1, 0, 2)


def _without_padding(values: Array, valid: Array | None, xp: Any) -> Array:
    """``values`` [T, B, F] with every padded step (t >= len[b]) set to 0, NaN and inf included.

    Padding is never read: a select, not a multiply (0 * NaN is NaN).
    """
    return values if valid is None else xp.where(valid, values, xp.zeros((), dtype=values.dtype))


def _prepare(config: RNNConfig, x: Array, params: Array, lengths: np.ndarray, time_major: bool
             ) -> tuple[Any, np.dtype, np.dtype, ParamsLayout, Array, Array, int, int, Array | None]:
    """What forward and backward both start from: (xp, io dtype, compute dtype, layout, params in the
    compute dtype, x as time-major [T, B, I] in the compute dtype with its padding zeroed, T, B, the
    [T, B, 1] valid mask or None)."""
    xp = array_module(x=x)
    dtype = _compute_dtype(x.dtype)
    seq = _to_time_major(x, time_major).astype(dtype, copy=False)
    max_time, batch = seq.shape[0], seq.shape[1]
    valid, _ = _masks(lengths, max_time, xp)
    return (xp, x.dtype, dtype, params_layout(config), params.astype(dtype, copy=False),
            _without_padding(seq, valid, xp), max_time, batch, valid)


@dataclass
class _Run:
    """How one call runs: the cells (``_cells``, or ``_fused_cells`` on NumPy, see ``cpu``), its BLAS threads,
    and its schedule (``_parts``: set by ``parts``)."""

    cells: ModuleType
    threads: cpu.BlasThreads
    schedule: _parts.Schedule = _parts.Schedule([], False)
    made: dict[tuple[str, int], Any] = field(default_factory=dict)
    _locks: dict[tuple[str, int], threading.Lock] = field(default_factory=dict)
    _making: threading.Lock = field(default_factory=threading.Lock)

    def once(self, key: tuple[str, int], make: Callable[[], _T]) -> _T:
        """``make()`` once per call for ``key`` (a pseudo-layer's forward weights, its backprop's R), shared by
        the parts that ask for it: the first makes it (packing its matrices), the others wait for it (and make it
        again if that failed)."""
        with self._making:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self.made:
                self.made[key] = make()
            return self.made[key]  # type: ignore[no-any-return]

    def parts(self, work: Callable[[slice], None], config: RNNConfig, max_time: int, batch: int,
              passes: int = 1) -> None:
        """``work(columns)`` over the batch of a call of ``passes`` forwards' work (backprop: 2): the compiled cells
        run it as their schedule says (``_parts``), each thread with a single-threaded BLAS; the NumPy cells (the
        reference) run it whole, their products on the threads the policy gives each."""
        if self.cells is _cells:
            self.schedule = _parts.Schedule([slice(0, batch)], False)
        else:
            self.schedule = _parts.schedule(batch, config.num_directions, config.num_layers, self.threads.workers(),
                                            passes * _parts.multiply_adds(config, max_time, batch))
            self.threads.pin(1)
            self.threads.leave = 1  # an idle BLAS thread spins: left at more, it would take a core from the next call
        _parts.run_parts(work, self.schedule.parts)

    def time_chunk(self) -> int:
        """Steps per chunk: ``TIME_CHUNK``, at most ``WAVEFRONT_CHUNK`` in a wavefront."""
        return min(TIME_CHUNK, WAVEFRONT_CHUNK) if self.schedule.layers_together else TIME_CHUNK

    def directions(self, work: Callable[[int], None], directions: int) -> None:
        """``work(direction)`` for each direction of a layer: at once where the schedule says so."""
        if self.schedule.directions_together:
            _parts.run_all([functools.partial(work, direction) for direction in range(directions)])
        else:
            for direction in range(directions):
                work(direction)


@contextlib.contextmanager
def _running(x: Array) -> Iterator[_Run]:
    """A call on ``x``'s arrays. NaN and inf in the inputs propagate to the results silently, as on cuDNN."""
    with np.errstate(over="ignore", invalid="ignore"):
        if array_module(x=x) is not np:
            yield _Run(_cells, cpu.BlasThreads([], None, 1))
            return
        cells = cpu.cells_module()  # first: the compiled cells load the BLAS they call, whose pool the plan sets
        with cpu.blas_threads() as threads:
            yield _Run(cells, threads)


def _buffer(out: dict[str, Array] | None, name: str, shape: tuple[int, ...], dtype: Any, xp: Any, zero: bool) -> Array:
    """``out[name]`` (zeroed if ``zero``) given in the shape and the (compute) dtype it runs in, else a new array."""
    given = (out or {}).get(name)
    if given is None or tuple(given.shape) != shape or given.dtype != dtype:
        return (xp.zeros if zero else xp.empty)(shape, dtype=dtype)
    if zero:
        given[...] = 0
    return given


def forward(config: RNNConfig, x: Array, h0: Array, c0: Array | None, params: Array, lengths: np.ndarray,
            *, is_training: bool, time_major: bool, out: dict[str, Array] | None = None
            ) -> tuple[Array, Array, Array | None, Array]:
    """Run the network (the backend interface, ``out`` too: ``cudnn_rnn._cudnn._backend``'s module docstring)."""
    with _running(x) as run:
        return _forward(config, x, h0, c0, params, lengths, is_training, time_major, run, out or {})


def _forward(config: RNNConfig, x: Array, h0: Array, c0: Array | None, params: Array, lengths: np.ndarray,
             is_training: bool, time_major: bool, run: _Run, out: dict[str, Array]) -> tuple[Array, ...]:
    xp, io_dtype, dtype, layout, params_c, seq, max_time, batch, _ = _prepare(config, x, params, lengths, time_major)
    d, p = config.num_directions, config.state_size
    if is_training:
        reserve_layout = ReserveLayout.build(config, max_time, batch)
        reserve = _reserve.buffer(out, xp, io_dtype, reserve_layout.size)
        _reserve.write_header(reserve, _reserve.ForwardKey("reference", config, max_time, batch, time_major, lengths))
        saved_all = reserve_layout.views(_reserve.payload(reserve)[:reserve_layout.size])
    else:
        reserve = xp.empty(0, dtype=io_dtype)
        saved_all = None
    masks = _dropout_masks(config, is_training, (max_time, batch, config.output_size), dtype, xp)
    y = _buffer(out, "output", (max_time, batch, config.output_size), dtype, xp, True)  # time-major as it runs
    hy = _buffer(out, "output_h", (config.num_pseudo_layers, batch, p), dtype, xp, False)
    cy = _buffer(out, "output_c", tuple(c0.shape), dtype, xp, False) if c0 is not None else None

    def forward_part(columns: slice) -> None:
        """The whole network over the sequences ``columns`` of the batch."""
        part_lengths = lengths[columns]
        valid, invalid = _masks(part_lengths, max_time, xp)
        def layer_forward(layer: int, layer_in: Array, out: Array, hooks: _parts.ChunkHooks) -> None:
            """Both directions of ``layer`` (as the schedule says: at once, or one after the other)."""
            def direction_forward(direction: int) -> None:
                k = layer * d + direction
                fw = run.once(("forward", k), lambda: run.cells.forward_weights(
                    config.rnn_mode, config.num_units, _layer_weights(layout, params_c, k), xp, rows=max_time * batch))
                h_last, c_last = _run_direction(
                    config, layer_in, TimeOrder(direction == 1, part_lengths, max_time, xp), h0[k, columns],
                    None if c0 is None else c0[k, columns], fw, valid, invalid,
                    _slots_for(saved_all, k, columns), out[:, :, direction * p:(direction + 1) * p], run, xp, hooks)
                hy[k, columns] = h_last
                if cy is not None:
                    cy[k, columns] = c_last

            run.directions(direction_forward, d)

        def finish_rows(layer: int, out: Array, start: int, stop: int) -> None:
            """Layer ``layer``'s output at [start, stop) becomes the next layer's input: dropout, then saved."""
            if layer < config.num_layers - 1:
                if masks is not None:
                    out[start:stop] *= masks[layer][start:stop, columns]
                if saved_all is not None:
                    saved_all["output", layer][start:stop, columns] = out[start:stop]

        def output(layer: int) -> Array:
            return y[:, columns] if layer == config.num_layers - 1 else xp.zeros((max_time, width, d * p), dtype=dtype)

        width = columns.stop - columns.start
        _parts.run_layers(config.num_layers, max_time, False, run.schedule.layers_together, seq[:, columns], output,
                          layer_forward, finish_rows)

    run.parts(forward_part, config, max_time, batch)
    y = _to_time_major(y, time_major)
    y = xp.ascontiguousarray(y.astype(io_dtype, copy=False))
    return y, hy.astype(io_dtype, copy=False), None if cy is None else cy.astype(io_dtype, copy=False), reserve


def _dropout_masks(config: RNNConfig, is_training: bool, shape: tuple[int, ...], dtype: DTypeLike,
                   xp: Any) -> list[Array] | None:
    """The masks of layers 0 .. L-2 (each ``shape``), or None where a call applies none."""
    if not (is_training and config.inter_layer_dropout):
        return None
    return [dropout_mask(config, layer, shape, dtype, xp) for layer in range(config.num_layers - 1)]


def _slots_for(saved_all: dict[tuple[str, int], Array] | None, k: int, columns: slice) -> dict[str, Array]:
    """The reserve views of pseudo-layer k for the sequences ``columns`` (empty in inference: nothing is saved)."""
    if saved_all is None:
        return {}
    return {name: view[:, columns] for (name, kk), view in saved_all.items() if kk == k and name != "output"}


def backward(config: RNNConfig, x: Array, h0: Array, c0: Array | None, params: Array, lengths: np.ndarray,
             y: Array, dy: Array, dhy: Array, dcy: Array | None, reserve: Array, *, time_major: bool,
             out: dict[str, Array] | None = None, params_grad: Array | None = None
             ) -> tuple[Array, Array, Array | None, Array]:
    """Backprop through the network by the forward's saved tensors in ``reserve`` (dparams added into params_grad)."""
    with _running(x) as run:
        return _backward(config, x, h0, c0, params, lengths, dy, dhy, dcy, reserve, time_major, run, out, params_grad)


def _backward(config: RNNConfig, x: Array, h0: Array, c0: Array | None, params: Array, lengths: np.ndarray,
              dy: Array, dhy: Array, dcy: Array | None, reserve: Array, time_major: bool, run: _Run,
              out: dict[str, Array] | None, params_grad: Array | None) -> tuple[Array, Array, Array | None, Array]:
    xp, io_dtype, dtype, layout, params_c, x_tm, max_time, batch, valid = _prepare(config, x, params, lengths,
                                                                                   time_major)
    d, p, n = config.num_directions, config.state_size, config.num_units
    reserve_layout = ReserveLayout.build(config, max_time, batch)
    stored = _reserve.payload(reserve)
    if stored.shape[0] < reserve_layout.size:
        needed = reserve_layout.size + _reserve.header_elements(io_dtype)
        raise ValueError(f"reserve_space must have at least {needed} elements for this call; got {reserve.shape[0]}")
    # a longer one (a framework's, sized for several platforms: cudnn_rnn.jax) holds this backend's at its front
    stored = stored[:reserve_layout.size]
    saved_all = {key: view.astype(dtype, copy=False) for key, view in reserve_layout.views(stored).items()}

    dh0 = _buffer(out, "input_h_backprop", (config.num_pseudo_layers, batch, p), dtype, xp, False)
    dc0 = _buffer(out, "input_c_backprop", (*dh0.shape[:2], n), dtype, xp, False) if config.has_cell else None
    dx = _buffer(out, "input_backprop", x_tm.shape, dtype, xp, True)  # time-major: layer 0's, written by the parts
    d_output = _without_padding(_to_time_major(dy, time_major).astype(dtype, copy=False), valid, xp)
    masks = _dropout_masks(config, True, (max_time, batch, config.output_size), dtype, xp)
    part_grads: dict[int, Array] = {}  # each part's weight gradients (sums over its sequences), by first column

    def backward_part(columns: slice) -> None:
        """Backprop through the whole network over the sequences ``columns`` of the batch."""
        part_lengths = lengths[columns]
        _, invalid = _masks(part_lengths, max_time, xp)
        grads = part_grads[columns.start] = xp.zeros(layout.size, dtype=dtype)
        def layer_backward(layer: int, d_out: Array, d_in: Array, hooks: _parts.ChunkHooks) -> None:
            """Both directions of ``layer``; at once, the reverse one adds into a ``d_in`` of its own, added after."""
            layer_in = x_tm[:, columns] if layer == 0 else saved_all["output", layer - 1][:, columns]  # dropout applied
            d_in_reverse = xp.zeros(layer_in.shape, dtype=dtype) if run.schedule.directions_together else d_in

            def direction_backward(direction: int) -> None:
                k = layer * d + direction
                weights = _layer_weights(layout, params_c, k)
                recurrent = run.once(("backward", k), lambda: run.cells.backward_recurrent(
                    weights["R"], max_time * batch, xp))
                dh, dc = _backprop_direction(
                    config, layer_in, TimeOrder(direction == 1, part_lengths, max_time, xp),
                    weights, recurrent, _layer_weights(layout, grads, k),
                    _slots_for(saved_all, k, columns), d_out[:, :, direction * p:(direction + 1) * p],
                    dhy[k, columns], None if dcy is None else dcy[k, columns], h0[k, columns].astype(dtype, copy=False),
                    None if c0 is None else c0[k, columns].astype(dtype, copy=False), invalid,
                    d_in_reverse if direction else d_in, direction == 0, run, xp, hooks)
                dh0[k, columns] = dh
                if dc0 is not None:
                    dc0[k, columns] = dc

            run.directions(direction_backward, d)
            if d_in_reverse is not d_in:
                d_in += d_in_reverse

        def finish_rows(layer: int, d_in: Array, start: int, stop: int) -> None:
            """Layer ``layer``'s input gradient at [start, stop) becomes the layer below's: through dropout."""
            if layer > 0 and masks is not None:
                d_in[start:stop] *= masks[layer - 1][start:stop, columns]

        def input_gradient(layer: int) -> Array:
            shape = (max_time, columns.stop - columns.start, config.output_size)
            return dx[:, columns] if layer == 0 else xp.zeros(shape, dtype=dtype)

        _parts.run_layers(config.num_layers, max_time, True, run.schedule.layers_together, d_output[:, columns],
                          input_gradient, layer_backward, finish_rows)

    run.parts(backward_part, config, max_time, batch, passes=2)
    dparams, *others = part_grads.values()
    for other in others:
        dparams += other
    dx = xp.ascontiguousarray(_to_time_major(dx, time_major).astype(io_dtype, copy=False))
    dc0_out = None if dc0 is None else dc0.astype(io_dtype, copy=False)
    dparams = dparams.astype(io_dtype, copy=False)  # added into params_grad so: rounded to the data's dtype first
    dparams = dparams if params_grad is None else xp.add(params_grad, dparams, out=params_grad)
    return dx, dh0.astype(io_dtype, copy=False), dc0_out, dparams


def _backprop_direction(config: RNNConfig, layer_in: Array, order: TimeOrder, weights: LayerWeights,
                        recurrent: Array, grads: LayerWeights, saved: dict[str, Array], d_out: Array, dh: Array,
                        dc: Array | None, h_init: Array, c_init: Array | None, invalid: Array | None, d_in: Array,
                        first_writer: bool, run: _Run, xp: Any, hooks: _parts.ChunkHooks) -> tuple[Array, Array | None]:
    """Backprop through one pseudo-layer, a chunk of steps at a time, latest chunk first.

    ``layer_in`` [T, B, width] and ``d_out`` [T, B, P] are in natural order; the saved tensors
    in processing order. Per block of a chunk, ``factors`` (of ``run.cells``) computes what depends only
    on the saved activations, then the serial steps (``steps_backward``) turn the chunk's
    ``dg`` and ``dr`` [t, B, G*N] into d(pre-activation) and d(R h + bR); then one GEMM each
    adds the chunk's share of the input, recurrent and bias gradients into ``grads`` (views of
    params_backprop) and of the input gradient into ``d_in`` (written, not added, by the
    ``first_writer``). Returns d input_h and d input_c of this pseudo-layer.
    """
    mode, n, p = config.rnn_mode, config.num_units, config.state_size
    gn = config.num_gates * n
    max_time, batch, width = layer_in.shape
    dtype, chunk = layer_in.dtype, max(1, min(max_time, run.time_chunk(), BACKWARD_CHUNK // (batch * gn)))
    block = max(1, min(chunk, FACTOR_BLOCK // (batch * gn)))
    gates, c_seq, rec_n = saved["gates"], saved.get("cell"), saved.get("rec_n")
    # the carried h: saved, or for RNN the activations, or for an LSTM recomputed (``unprojected``)
    h_seq = saved["hidden"] if "hidden" in saved else None if mode == "lstm" else gates
    projecting = weights["Proj"] is not None
    dg_buffer = xp.empty((chunk, batch, gn), dtype=dtype)
    dr_buffer = xp.empty_like(dg_buffer) if mode == "gru" else dg_buffer
    per_block = {name: xp.empty((block, batch, n), dtype=dtype) for name in ("k", "carry", "previous")}
    unprojected = xp.empty((chunk, batch, n), dtype=dtype) if projecting or h_seq is None else None
    d_projected = xp.empty((chunk, batch, p), dtype=dtype) if projecting else None
    ws = _cells.Workspace(batch, config.num_gates, n, p, dtype, xp)
    dh, dc = xp.array(dh, dtype=dtype), None if dc is None else xp.array(dc, dtype=dtype)

    def previous(sequence: Array, initial: Array, a: int, b: int) -> Array:
        """sequence[a-1 .. b-2]: the values of the step before each of a .. b-1 (``initial`` before 0)."""
        if a > 0:
            return sequence[a - 1:b - 1]
        rows = per_block["previous"][:b - a]  # LSTM c or GRU h: N wide either way
        rows[0] = initial
        rows[1:] = sequence[:b - a - 1]
        return rows

    for start, stop in reversed(_chunks(max_time, chunk)):
        hooks.before(start, stop)
        steps = stop - start
        dg, dr = dg_buffer[:steps], dr_buffer[:steps]
        dy = order.gather(d_out, start, stop)
        run.threads.for_products(batch * gn * p)
        for a, b in reversed(_chunks(stop - start, block)):
            a, b = a + start, b + start
            rows = slice(a - start, b - start)
            factors = _cells.Factors(dg=dg[rows], dr=dr[rows],
                                     k=per_block["k"][:b - a] if mode == "lstm" else None,
                                     carry=per_block["carry"][:b - a] if mode in ("lstm", "gru") else None,
                                     unprojected=None if unprojected is None else unprojected[rows])
            run.cells.factors(mode, n, gates[a:b], None if c_seq is None else c_seq[a:b],
                           None if c_seq is None else previous(c_seq, c_init, a, b),
                           None if rec_n is None else rec_n[a:b],
                           previous(h_seq, h_init, a, b) if mode == "gru" else None,
                           factors, None if invalid is None else invalid[a:b], xp)
            run.cells.steps_backward(mode, n, factors, recurrent, weights["Proj"], dh, dy[rows], dc,
                                     None if d_projected is None else d_projected[rows],
                                     None if invalid is None else invalid[a:b], ws, xp)
        first = stop == max_time  # the first chunk backprop sees writes the weight gradients, later ones add
        run.threads.for_products(steps * batch * gn * max(width, p))
        flat_dg, flat_dr = dg.reshape(steps * batch, gn), dr.reshape(steps * batch, gn)
        if grads["W"] is not None:
            inputs = order.gather(layer_in, start, stop).reshape(steps * batch, width)
            _add_products(run.cells, grads["W"], [(flat_dg.T, inputs)], first, xp)
            if first_writer and order.natural and d_in.flags.c_contiguous:
                xp.matmul(flat_dg, weights["W"], out=d_in[start:stop].reshape(steps * batch, width))
            elif first_writer and order.natural:  # a part's columns of the input gradient
                d_in[start:stop] = (flat_dg @ weights["W"]).reshape(steps, batch, width)
            else:
                order.scatter_add(d_in, start, stop, (flat_dg @ weights["W"]).reshape(steps, batch, width))
        else:  # skip_input: x fed every gate directly
            order.scatter_add(d_in, start, stop, dg.reshape(steps, batch, config.num_gates, n).sum(axis=2))
        if grads["bW"] is not None:
            grads["bW"] += flat_dg.sum(axis=0)
        grads["bR"] += flat_dr.sum(axis=0)
        if h_seq is not None:
            skip = 1 if start == 0 else 0  # step 0 saw h_init, the others h_seq[t - 1]
            products = [(flat_dr[skip * batch:].T, h_seq[start + skip - 1:stop - 1].reshape((steps - skip) * batch, p))]
            if skip:
                products.append((dr[0].T, h_init))
        else:  # the chunk's h_t are o*tanh(c) (computed with the factors); before it, h_init or one more row
            assert c_seq is not None and unprojected is not None, "an LSTM without saved h has c and unprojected"
            h_before = h_init if start == 0 else _cells.lstm_hidden(gates[start - 1], c_seq[start - 1], ws.n2, xp)
            products = [(flat_dr[batch:].T, unprojected[:steps - 1].reshape((steps - 1) * batch, n)),
                        (dr[0].T, h_before)]
        _add_products(run.cells, grads["R"], products, first, xp)
        if projecting:
            assert d_projected is not None and unprojected is not None, "a projecting LSTM has both"
            _add_products(run.cells, grads["Proj"], [(d_projected[:steps].reshape(steps * batch, p).T,
                                                      unprojected[:steps].reshape(steps * batch, n))], first, xp)
        hooks.after(start, stop)
    return dh, dc


def _add_products(cells: ModuleType, target: Array, products: list[tuple[Array, Array]], overwrite: bool,
                  xp: Any) -> None:
    """target (+)= sum of a @ b over ``products``; with ``overwrite`` the first product is written in
    place (``target`` holds zeros then, so an empty list leaves it right too), the others added by the cells'
    ``add_product``."""
    for left, right in products:
        if left.shape[1] == 0:
            continue
        if overwrite:
            xp.matmul(left, right, out=target)
            overwrite = False
        else:
            cells.add_product(target, left, right, xp)
