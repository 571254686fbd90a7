"""Checkpoints on a real GPU: written from CuPy arrays they load onto NumPy and the other way, bit for bit,
and a run resumed on the GPU from a checkpoint ends exactly where the uninterrupted run ends.

The model is a 2-layer bidirectional LSTM with dropout, a dense readout (w_out, b_out) and Adam over
all three, trained on data drawn per step from that step's own seed, so two runs see the same inputs.
cuDNN with the same inputs and the same dropout seeds is deterministic, so equality is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from cudnn_rnn import LSTM, checkpoint  # noqa: E402
from cudnn_rnn.optim import Adam  # noqa: E402

INPUT, UNITS, LAYERS, BATCH, TIME, OUT = 5, 8, 2, 4, 6, 3
LENGTHS = [6, 2, 0, 5]
DTYPES = ["float32", "float64"]


@dataclass
class Model:
    """An LSTM with a dense readout on its last outputs, and Adam over [params, w_out, b_out]."""

    layer: LSTM
    w_out: Any
    b_out: Any
    adam: Adam

    @property
    def xp(self) -> Any:
        return self.layer.xp

    def groups(self) -> dict[str, Any]:
        """The keyword arguments of ``checkpoint.save`` and ``Checkpoint.restore``."""
        return {"layers": {"lstm": self.layer}, "optimizers": {"adam": self.adam},
                "arrays": {"w_out": self.w_out, "b_out": self.b_out}}

    def arrays(self) -> dict[str, Any]:
        """Every array a restore writes, by name."""
        found = {"params": self.layer.params, "w_out": self.w_out, "b_out": self.b_out}
        for name in ("first_moment", "second_moment"):
            found.update({f"{name}[{i}]": a for i, a in enumerate(getattr(self.adam, name))})
        return found


def build(xp: Any, dtype: str, seed: int) -> Model:
    """A fresh model on ``xp`` (numpy or cupy)."""
    layer = LSTM(INPUT, UNITS, LAYERS, bidirectional=True, dropout=0.3, dtype=dtype, xp=xp, seed=seed)
    rng = np.random.default_rng(seed + 100)
    w_out = xp.asarray((0.3 * rng.standard_normal((2 * UNITS, OUT))).astype(dtype))
    b_out = xp.zeros(OUT, dtype=dtype)
    return Model(layer, w_out, b_out, Adam([layer.params, w_out, b_out], lr=0.01))


def train(model: Model, steps: range) -> None:
    """A training step per number in ``steps`` (squared error of a readout of y); step k's data come from seed k."""
    xp, layer, dtype = model.xp, model.layer, model.layer.config.dtype
    for k in steps:
        rng = np.random.default_rng(1000 + k)
        x = xp.asarray(rng.standard_normal((BATCH, TIME, INPUT)).astype(dtype))
        target = xp.asarray(rng.standard_normal((BATCH, TIME, OUT)).astype(dtype))
        y, _, _ = layer(x, LENGTHS)
        error = (y @ model.w_out + model.b_out - target) / (BATCH * TIME)
        layer.backward(error @ model.w_out.T)
        g_w = xp.einsum("btp,bto->po", y, error)
        g_b = error.sum(axis=(0, 1))
        model.adam.step([layer.grad, g_w, g_b])
        layer.zero_grad()


def bits(array: Any) -> tuple[str, tuple[int, ...], bytes]:
    """(dtype, shape, bytes) of a NumPy or CuPy array, for bit-for-bit comparison."""
    host = cupy.asnumpy(array) if isinstance(array, cupy.ndarray) else np.asarray(array)
    return host.dtype.str, host.shape, host.tobytes()


def snapshot(model: Model) -> dict[str, Any]:
    """Everything a restore sets, on the host."""
    values: dict[str, Any] = {name: bits(a) for name, a in model.arrays().items()}
    values.update(config=model.layer.config, layer_step=model.layer.step,
                  adam=(model.adam.steps, model.adam.lr, model.adam.betas, model.adam.eps))
    return values


def kinds(model: Model) -> set[type]:
    return {type(a) for a in model.arrays().values()}


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_gpu_checkpoint_restores_onto_numpy_bit_for_bit(tmp_path: Path, dtype: str) -> None:
    gpu = build(cupy, dtype, seed=1)
    train(gpu, range(3))
    assert gpu.layer.step == 3 and gpu.adam.steps == 3
    checkpoint.save(tmp_path / "gpu.ckpt", **gpu.groups(), state={"step": 3})
    found = checkpoint.load(tmp_path / "gpu.ckpt")

    layer = found.layer("lstm", xp=np)
    assert type(layer.params) is np.ndarray and layer.config == gpu.layer.config and layer.step == 3
    assert bits(layer.params) == bits(gpu.layer.params)

    host = build(np, dtype, seed=2)
    found.restore(**host.groups())
    assert snapshot(host) == snapshot(gpu)
    assert kinds(host) == {np.ndarray}


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_numpy_checkpoint_restores_onto_the_gpu_bit_for_bit(tmp_path: Path, dtype: str) -> None:
    host = build(np, dtype, seed=1)
    train(host, range(2))  # the reference backend
    checkpoint.save(tmp_path / "host.ckpt", **host.groups())
    found = checkpoint.load(tmp_path / "host.ckpt")

    layer = found.layer("lstm", xp=cupy)
    assert type(layer.params) is cupy.ndarray and layer.config == host.layer.config and layer.step == 2
    assert bits(layer.params) == bits(host.layer.params)

    gpu = build(cupy, dtype, seed=2)
    before = gpu.arrays()
    found.restore(**gpu.groups())
    assert snapshot(gpu) == snapshot(host)
    assert kinds(gpu) == {cupy.ndarray}
    assert all(gpu.arrays()[name] is array for name, array in before.items()), "restored in place"
    train(gpu, range(2, 3))  # and it trains on, on cuDNN
    assert gpu.layer.step == 3 and np.isfinite(cupy.asnumpy(gpu.layer.params)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_resuming_on_the_gpu_equals_the_uninterrupted_run(tmp_path: Path, dtype: str) -> None:
    uninterrupted = build(cupy, dtype, seed=3)
    train(uninterrupted, range(6))

    first = build(cupy, dtype, seed=3)
    train(first, range(3))
    checkpoint.save(tmp_path / "run.ckpt", **first.groups())
    del first
    resumed = build(cupy, dtype, seed=7)  # fresh objects, another seed: the checkpoint brings the run's back
    checkpoint.load(tmp_path / "run.ckpt").restore(**resumed.groups())
    assert resumed.layer.config.seed == 3
    train(resumed, range(3, 6))
    assert snapshot(resumed) == snapshot(uninterrupted)


def test_another_dtype_is_refused_before_any_gpu_array_changes(tmp_path: Path) -> None:
    wide = build(cupy, "float64", seed=1)
    train(wide, range(1))
    checkpoint.save(tmp_path / "wide.ckpt", **wide.groups())
    found = checkpoint.load(tmp_path / "wide.ckpt")
    model = build(cupy, "float32", seed=2)
    before = snapshot(model)
    with pytest.raises(ValueError, match="dtype='float64' there, 'float32' here"):
        found.restore(**model.groups())
    with pytest.raises(TypeError, match=r"\['first_moment'\]\[0\] must be float32 .*got float64"):
        found.restore(optimizers=model.groups()["optimizers"])
    with pytest.raises(TypeError, match=r"arrays\['w_out'\] is float64; the array given is float32"):
        found.restore(arrays={"w_out": model.w_out, "b_out": model.b_out})
    assert snapshot(model) == before


def test_restore_into_gpu_1_while_gpu_0_is_current(tmp_path: Path) -> None:
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    source = build(cupy, "float32", seed=1)
    train(source, range(2))
    checkpoint.save(tmp_path / "run.ckpt", **source.groups())
    found = checkpoint.load(tmp_path / "run.ckpt")
    with cupy.cuda.Device(1):
        model = build(cupy, "float32", seed=2)
        layer = found.layer("lstm", xp=cupy)
    assert cupy.cuda.Device().id == 0
    found.restore(**model.groups())
    assert cupy.cuda.Device().id == 0
    assert {a.device.id for a in model.arrays().values()} == {1} and layer.params.device.id == 1
    assert snapshot(model) == snapshot(source)
