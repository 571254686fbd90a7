"""Shared test code: RNN configurations, random inputs, one forward+backward call, tolerances.

Imported by name (``from rnn_testing import ...``); tests/conftest.py puts this folder on the path.

Notation as in the package: L layers, D directions, N units, P = num_proj or N, I input size,
T max time, B batch. States are passed in the layout of the call (time-major [L*D, B, P] or
batch-major [B, L*D, P]).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import signal
import sys
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import numpy as np
import pytest

MODE_NAMES: tuple[str, ...] = ("rnn_relu", "rnn_tanh", "lstm", "gru")

#: relative tolerance (see :func:`relative_error`) per dtype for comparisons with a float64 oracle (bfloat16: with
#: the float32 computation on the same values; 8 significant bits, and backprop reads the activations the reserve
#: rounded to bfloat16)
DTYPE_TOLERANCE: dict[str, float] = {"float64": 1e-10, "float32": 1e-5, "float16": 5e-3, "bfloat16": 2e-2}


SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError inside the block after ``seconds``, so a hang (a blocking open or read included)
    fails the test instead of stalling it."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def load_module(path: Path) -> ModuleType:
    """Import the file ``path`` (a script, a benchmark or an example: not in a package) as a new module, registered
    under the file's stem so that dataclasses and pickles defined there find their module; ``sys.path`` is left as
    it was (benchmarks add their own folder)."""
    name = path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def load_script(name: str) -> ModuleType:
    """Import ``scripts/<name>.py`` (:func:`load_module`)."""
    return load_module(SCRIPTS / f"{name}.py")


def read_refusal(path: Any, error: type[Exception] | None = None, **options: Any) -> str:
    """The message ``read_file(path, **options)`` refuses with (``FileReadError`` unless ``error`` says
    otherwise), asserted to be one line with no escape codes or traceback, naming the file."""
    from cudnn_rnn.convert import read_file
    from cudnn_rnn.convert.readers import FileReadError

    with pytest.raises(error or FileReadError) as caught:
        read_file(path, **options)
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message and "Traceback" not in message, message
    assert str(path) in message, message
    return message


def relative_error(actual: Any, expected: Any) -> float:
    """max |actual - expected| / max |expected| (0 for two empty arrays; absolute when expected is 0)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != expected {expected.shape}")
    if expected.size == 0:
        return 0.0
    scale = float(np.max(np.abs(expected)))
    return float(np.max(np.abs(actual - expected))) / (scale if scale > 0 else 1.0)


def assert_close(actual: Any, expected: Any, tolerance: float, what: str) -> None:
    """Assert relative_error(actual, expected) <= tolerance, naming ``what`` on failure."""
    error = relative_error(actual, expected)
    assert error <= tolerance, f"{what}: relative error {error:.3g} > {tolerance:.1g}"


def stable_seed(*parts: object) -> int:
    """A seed that depends only on ``parts`` (stable across runs, unlike ``hash``)."""
    return zlib.crc32(repr(parts).encode())


# ---- configurations and inputs ----------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One call of the op: the attributes and the sizes of the arrays.

    ``lengths`` is None (every sequence has length T) or a tuple of B ints in [0, T].
    """

    rnn_mode: str = "lstm"
    num_layers: int = 1
    num_units: int = 4
    input_size: int = 3
    direction: str = "unidirectional"
    input_mode: str = "linear_input"
    num_proj: int = 0
    dropout: float = 0.0
    seed: int = 0
    seed2: int = 0
    max_time: int = 4
    batch: int = 3
    lengths: tuple[int, ...] | None = None
    time_major: bool = True
    dtype: str = "float64"
    algo: str = "standard"

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    @property
    def state_size(self) -> int:
        return self.num_proj or self.num_units

    @property
    def is_lstm(self) -> bool:
        return self.rnn_mode == "lstm"

    def attrs(self) -> dict[str, Any]:
        """Keyword attributes shared by cudnn_rnn_v3 and cudnn_rnn_backprop_v3."""
        return dict(rnn_mode=self.rnn_mode, input_mode=self.input_mode, direction=self.direction,
                    dropout=self.dropout, seed=self.seed, seed2=self.seed2, num_proj=self.num_proj,
                    time_major=self.time_major, algo=self.algo)

    def layout_attrs(self) -> dict[str, Any]:
        """Keyword attributes of the params functions."""
        return dict(rnn_mode=self.rnn_mode, input_mode=self.input_mode, direction=self.direction,
                    num_proj=self.num_proj)

    def with_(self, **changes: Any) -> "Case":
        return replace(self, **changes)

    def config(self) -> Any:
        """The package's validated RNNConfig of this case."""
        from cudnn_rnn.config import RNNConfig

        return RNNConfig(self.rnn_mode, self.num_layers, self.num_units, self.input_size,
                         input_mode=self.input_mode, direction=self.direction, num_proj=self.num_proj,
                         dropout=self.dropout, seed=self.seed, seed2=self.seed2, dtype=self.dtype, algo=self.algo)

    # shapes in the layout of the call
    def seq_shape(self, width: int) -> tuple[int, int, int]:
        t, b = self.max_time, self.batch
        return (t, b, width) if self.time_major else (b, t, width)

    def state_shape(self, width: int) -> tuple[int, int, int]:
        k, b = self.num_layers * self.num_directions, self.batch
        return (k, b, width) if self.time_major else (b, k, width)

    def params_size(self) -> int:
        import cudnn_rnn

        return cudnn_rnn.cudnn_rnn_params_size(self.num_layers, self.num_units, self.input_size,
                                               dtype=self.dtype, **self.layout_attrs())


def random_case(rng: np.random.Generator, **fixed: Any) -> Case:
    """A random small configuration; keyword arguments fix fields (other fields stay consistent)."""
    mode = fixed.pop("rnn_mode", None) or str(rng.choice(MODE_NAMES))
    num_units = fixed.pop("num_units", None) or int(rng.integers(2, 6))
    num_proj = fixed.pop("num_proj", None)
    if num_proj is None:
        num_proj = int(rng.integers(1, num_units)) if mode == "lstm" and rng.random() < 0.4 else 0
    max_time = fixed.pop("max_time", None) or int(rng.integers(1, 6))
    batch = fixed.pop("batch", None) or int(rng.integers(1, 5))
    lengths = fixed.pop("lengths", "random")
    if lengths == "random":
        lengths = None if rng.random() < 0.25 else tuple(int(v) for v in rng.integers(1, max_time + 1, batch))
    case = Case(rnn_mode=mode, num_units=num_units, num_proj=num_proj, max_time=max_time, batch=batch,
                lengths=lengths,
                num_layers=int(rng.integers(1, 3)),
                input_size=int(rng.integers(1, 6)),
                direction=str(rng.choice(["unidirectional", "bidirectional"])),
                time_major=bool(rng.random() < 0.5))
    return case.with_(**fixed)


@dataclass
class Arrays:
    """Inputs of one call (in the call's layout) plus upstream gradients for its backprop."""

    x: np.ndarray
    h0: np.ndarray
    c0: np.ndarray | None
    params: np.ndarray
    lengths: np.ndarray | None
    dy: np.ndarray
    dhy: np.ndarray
    dcy: np.ndarray | None

    def with_(self, **changes: Any) -> "Arrays":
        return replace(self, **changes)


def random_arrays(case: Case, rng: np.random.Generator, scale: float = 0.5) -> Arrays:
    """Random inputs, params (uniform in [-scale, scale]) and upstream gradients for ``case``."""
    dtype = np.dtype(case.dtype)

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)

    out_width = case.num_directions * case.state_size
    lstm = case.is_lstm
    lengths = None if case.lengths is None else np.asarray(case.lengths, dtype=np.int32)
    return Arrays(
        x=draw(case.seq_shape(case.input_size)),
        h0=draw(case.state_shape(case.state_size)),
        c0=draw(case.state_shape(case.num_units)) if lstm else None,
        params=(scale * draw((case.params_size(),))).astype(dtype),
        lengths=lengths,
        dy=draw(case.seq_shape(out_width)),
        dhy=draw(case.state_shape(case.state_size)),
        dcy=draw(case.state_shape(case.num_units)) if lstm else None,
    )


def forward(case: Case, a: Arrays, *, is_training: bool = True, **overrides: Any) -> Any:
    """cudnn_rnn_v3 on ``a`` with ``case``'s attributes."""
    import cudnn_rnn

    attrs = case.attrs()
    attrs.update(overrides)
    return cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, is_training=is_training, **attrs)


def forward_backward(case: Case, a: Arrays, **overrides: Any) -> dict[str, np.ndarray]:
    """One training forward and its backprop; a dict of every output and gradient.

    Keys: y, hy, cy (forward) and dx, dh0, dc0, dparams (backprop with a.dy, a.dhy, a.dcy).
    """
    import cudnn_rnn

    attrs = case.attrs()
    attrs.update(overrides)
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, is_training=True, **attrs)
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(
        a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h, out.output_c,
        a.dy, a.dhy, a.dcy, out.reserve_space, out.host_reserved, **attrs)
    return dict(y=out.output, hy=out.output_h, cy=out.output_c, dx=grads.input_backprop,
                dh0=grads.input_h_backprop, dc0=grads.input_c_backprop, dparams=grads.params_backprop)


# ---- golden / oracle records (see scripts/make_golden.py) --------------------------------------------
#: outputs and gradients a record holds, each compared with the reference backend's
RECORD_RESULTS: tuple[str, ...] = ("y", "hy", "cy", "dx", "dh0", "dc0", "dparams")


def record_case(record: Any) -> tuple[Case, Arrays]:
    """The Case and Arrays of a record written by scripts/make_golden.py (a dict or an NpzFile)."""
    record = dict(record)
    meta = json.loads(np.asarray(record["meta"]).item())
    lengths = meta.pop("lengths")
    case = Case(**meta, lengths=None if lengths is None else tuple(lengths))
    arrays = Arrays(x=record["x"], h0=record["h0"], c0=record.get("c0"), params=record["params"],
                    lengths=record.get("lengths"), dy=record["dy"], dhy=record["dhy"], dcy=record.get("dcy"))
    return case, arrays


def check_against_record(ours: dict[str, np.ndarray], record: Any, tolerance: float) -> None:
    """Compare every output and gradient of :func:`forward_backward` with a record's oracle values.

    Also compares the params gradient entry by entry in canonical form (``dw{i}``, ``db{i}``), and
    checks that non-LSTM ``cy`` / ``dc0`` are empty arrays of shape (0,).
    """
    import cudnn_rnn

    record = dict(record)
    case, _ = record_case(record)
    for name in RECORD_RESULTS:
        if name in record:
            assert ours[name].dtype == np.dtype(case.dtype), f"{name} dtype {ours[name].dtype} != {case.dtype}"
            assert_close(ours[name], record[name], tolerance, name)
        else:
            assert ours[name].shape == (0,), f"{name} of a non-LSTM mode must have shape (0,); got {ours[name].shape}"
    weights, biases = cudnn_rnn.cudnn_rnn_params_to_canonical(
        case.num_layers, case.num_units, case.input_size, ours["dparams"], **case.layout_attrs())
    for prefix, arrays in (("dw", weights), ("db", biases)):
        for i, array in enumerate(arrays):
            assert_close(array, record[f"{prefix}{i}"], tolerance, f"params gradient {prefix}{i}")
