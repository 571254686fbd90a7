"""Checkpoints across array kinds and devices, on the recording fake of CuPy (tests/support/fake_gpu.py).

A checkpoint written from GPU arrays loads onto NumPy and the other way round, bit for bit:

* save copies every CuPy array to the host once (counted as d2h) and the loaded checkpoint holds
  NumPy arrays only;
* ``Checkpoint.restore`` copies into the existing arrays in place: a layer's params, an
  optimiser's moments and velocities, extra arrays; GPU arrays stay on their own device (GPU 1
  while GPU 0 is current), each copy counted as one h2d transfer, NumPy targets with none;
* ``Checkpoint.layer(name, xp=cupy)`` builds the layer on the current GPU;
* a checkpoint of another dtype or configuration is refused with a ValueError or TypeError that
  names the field, before anything is copied: every object is left as it was, with no transfer;
* a run saved after N steps and resumed into fresh objects for M steps ends where N + M
  uninterrupted steps end.

The fake is installed under a real module object named ``cupy`` (the layers accept only the
numpy or cupy module as ``xp``), so layers live on the fake GPU the way they live on a real one.
"""

from __future__ import annotations

import contextlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager

import numpy as np
import pytest

from cudnn_rnn import GRU, LSTM, checkpoint
from cudnn_rnn._arrays import to_host
from cudnn_rnn.layers import RecurrentLayer
from cudnn_rnn.optim import SGD, Adam
from fake_gpu import FakeCudnn, FakeDevice, ndarray, to_device

INPUT, UNITS, LAYERS, BATCH, TIME = 3, 4, 2, 3, 4
LENGTHS = [4, 2, 3]
#: arrays a restore of a whole Model copies: params, Adam's 2 x 2 moments, SGD's velocity, w_out, b_out
RESTORED_ARRAYS = 8

#: where a model's arrays live: NumPy, or the fake GPU 0 or 1
PLACES = ("numpy", "gpu0", "gpu1")


@pytest.fixture
def fake(fake_cudnn: FakeCudnn, fake_cupy: types.ModuleType) -> FakeCudnn:
    """The fake CuPy and cuDNN, with ``sys.modules["cupy"]`` a module (so ``LSTM(..., xp=cupy)`` accepts it)."""
    return fake_cudnn


def cupy() -> types.ModuleType:
    return sys.modules["cupy"]


def device_of_place(where: str) -> int | None:
    return None if where == "numpy" else int(where[-1])


def on(where: str) -> ContextManager[Any]:
    """The fake GPU of ``where`` made current (nothing for NumPy)."""
    device = device_of_place(where)
    return contextlib.nullcontext() if device is None else FakeDevice(device)


def place(value: np.ndarray, where: str) -> Any:
    """Host data as an array of ``where`` (set up by the test: not counted as a transfer)."""
    device = device_of_place(where)
    return value if device is None else to_device(value, device)


@dataclass
class Model:
    """A layer, a dense readout (w_out, b_out), Adam over [params, w_out] and SGD with momentum over [b_out]."""

    where: str
    layer: RecurrentLayer
    w_out: Any
    b_out: Any
    adam: Adam
    sgd: SGD

    def groups(self) -> dict[str, Any]:
        """The keyword arguments of ``checkpoint.save`` and ``Checkpoint.restore``."""
        return {"layers": {"lstm": self.layer}, "optimizers": {"adam": self.adam, "sgd": self.sgd},
                "arrays": {"w_out": self.w_out, "b_out": self.b_out}}

    def arrays(self) -> dict[str, Any]:
        """Every array a restore writes, by name."""
        found = {"params": self.layer.params, "w_out": self.w_out, "b_out": self.b_out}
        for name in ("first_moment", "second_moment"):
            found.update({f"adam.{name}[{i}]": a for i, a in enumerate(getattr(self.adam, name))})
        found.update({f"sgd.velocity[{i}]": a for i, a in enumerate(self.sgd.velocity)})
        return found


def build(where: str, *, dtype: str = "float32", seed: int = 0, momentum: float = 0.9,
          layer_class: type[RecurrentLayer] = LSTM, **layer_options: Any) -> Model:
    """A fresh model on ``where`` (created with its device current, as a training script would)."""
    options: dict[str, Any] = {"num_layers": LAYERS, "dropout": 0.25, "num_units": UNITS, **layer_options}
    units = options["num_units"]
    rng = np.random.default_rng(seed + 100)
    with on(where):
        layer = layer_class(INPUT, xp=np if where == "numpy" else cupy(), dtype=dtype, seed=seed, **options)
        w_out = place(rng.standard_normal((units, 2)).astype(dtype), where)
        b_out = place(rng.standard_normal(2).astype(dtype), where)
        adam = Adam([layer.params, w_out], lr=0.01, betas=(0.8, 0.99))
        sgd = SGD([b_out], lr=0.05, momentum=momentum)
    return Model(where, layer, w_out, b_out, adam, sgd)


def train(model: Model, steps: range) -> None:
    """A training step per number in ``steps``; step k's data come from seed k alone, so runs compare."""
    layer, dtype, where = model.layer, model.layer.config.dtype, model.where
    with on(where):
        for k in steps:
            rng = np.random.default_rng(1000 + k)
            y, _, _ = layer(place(rng.standard_normal((BATCH, TIME, INPUT)).astype(dtype), where), LENGTHS)
            layer.backward(place(rng.standard_normal(y.shape).astype(dtype), where))
            layer.grad += place((0.1 * rng.standard_normal(layer.grad.shape)).astype(dtype), where)
            model.adam.step([layer.grad, place(rng.standard_normal(model.w_out.shape).astype(dtype), where)])
            model.sgd.step([place(rng.standard_normal(model.b_out.shape).astype(dtype), where)])
            layer.zero_grad()


def snapshot(model: Model) -> dict[str, Any]:
    """Everything a restore sets, on the host: arrays as (dtype, shape, bytes), so equality is bit for bit."""
    values: dict[str, Any] = {name: (a.dtype.str, tuple(a.shape), to_host(a).tobytes())
                              for name, a in model.arrays().items()}
    adam, sgd = model.adam, model.sgd
    values.update(config=model.layer.config, layer_step=model.layer.step,
                  adam=(adam.steps, adam.lr, adam.betas, adam.eps),
                  sgd=(sgd.steps, sgd.lr, sgd.momentum, sgd.nesterov, len(sgd.velocity)))
    return values


def placement(model: Model) -> dict[str, tuple[str, int | None]]:
    """Each array's (kind, fake device)."""
    return {name: (type(a).__module__.split(".")[0], getattr(a, "device_id", None))
            for name, a in model.arrays().items()}


def expected_placement(model: Model) -> dict[str, tuple[str, int | None]]:
    device = device_of_place(model.where)
    return {name: ("numpy", None) if device is None else ("cupy", device) for name in model.arrays()}


def saved(fake: FakeCudnn, model: Model, path: Path) -> checkpoint.Checkpoint:
    """Save ``model`` to ``path`` (checking its device-to-host copies) and load it back."""
    with fake.gpu.counting() as made:
        checkpoint.save(path, **model.groups(), state={"cursor": 17})
    rng = model.layer.state_dict()["dropout_rng"]  # a GPU layer's dropout RNG state, after a training forward
    expected = {} if model.where == "numpy" else {"d2h": len(model.arrays()) + (rng is not None)}
    assert made == expected, "each GPU array comes to the host once"
    return checkpoint.load(path)


# ==== round trips ===============================================================================
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("source, target", [("gpu1", "numpy"), ("numpy", "gpu1"), ("gpu0", "gpu1"),
                                            ("gpu1", "gpu0"), ("numpy", "numpy")])
def test_restore_is_bit_for_bit_between_numpy_and_gpus(fake: FakeCudnn, tmp_path: Path, source: str, target: str,
                                                       dtype: str) -> None:
    trained = build(source, dtype=dtype, seed=1)
    train(trained, range(3))
    found = saved(fake, trained, tmp_path / "run.ckpt")
    held = [found.layers["lstm"]["params"], *found.optimizers["adam"]["first_moment"],
            *found.optimizers["sgd"]["velocity"], *found.arrays.values()]
    assert all(type(array) is np.ndarray for array in held), "a loaded checkpoint holds host arrays only"
    assert found.state == {"cursor": 17}

    fresh = build(target, dtype=dtype, seed=2)
    before = fresh.arrays()
    assert snapshot(fresh) != snapshot(trained)
    with fake.gpu.counting() as made:
        found.restore(**fresh.groups())
    assert fake.gpu.current_device == 0, "the caller's device is current again"
    assert made == ({"h2d": RESTORED_ARRAYS} if target != "numpy" else {}), "one host-to-device copy per array"
    assert snapshot(fresh) == snapshot(trained), "values, steps, seed and hyperparameters restored bit for bit"
    assert fresh.layer.config.seed == 1, "the saved dropout seed is restored"
    assert placement(fresh) == expected_placement(fresh), "each array stays where it was made"
    assert all(fresh.arrays()[name] is array for name, array in before.items()), "restored in place"


@pytest.mark.parametrize("where", ["numpy", "gpu1"])
def test_restore_into_fresh_objects_resumes_the_run_exactly(fake: FakeCudnn, tmp_path: Path, where: str) -> None:
    uninterrupted = build(where, seed=3)
    train(uninterrupted, range(5))

    first = build(where, seed=3)
    train(first, range(2))
    found = saved(fake, first, tmp_path / "run.ckpt")
    resumed = build(where, seed=9)
    found.restore(**resumed.groups())
    train(resumed, range(2, 5))
    assert snapshot(resumed) == snapshot(uninterrupted)
    assert resumed.layer.step == 5 and resumed.adam.steps == 5


def test_saved_state_arrays_come_back_on_the_host(fake: FakeCudnn, tmp_path: Path) -> None:
    mask = to_device(np.array([True, False, True]), 1)
    counts = to_device(np.arange(4, dtype=np.int64), 1)
    checkpoint.save(tmp_path / "state.ckpt", arrays={"counts": counts}, state={"mask": mask, "epoch": 2})
    found = checkpoint.load(tmp_path / "state.ckpt")
    assert type(found.state["mask"]) is np.ndarray and found.state["mask"].tolist() == [True, False, True]
    assert type(found.arrays["counts"]) is np.ndarray and found.arrays["counts"].dtype == np.int64
    target = to_device(np.zeros(4, np.int64), 1)
    with fake.gpu.counting() as made:
        found.restore(arrays={"counts": target})
    assert made == {"h2d": 1} and type(target) is ndarray and target.device_id == 1
    assert to_host(target).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("where", PLACES)
def test_checkpoint_layer_builds_on_either_module(fake: FakeCudnn, tmp_path: Path, where: str) -> None:
    trained = build("gpu1" if where == "numpy" else "numpy", dtype="float64", seed=4)
    train(trained, range(2))
    found = saved(fake, trained, tmp_path / "run.ckpt")
    with on(where), fake.gpu.counting() as made:
        layer = found.layer("lstm", xp=np if where == "numpy" else cupy())
    assert type(layer) is LSTM and layer.config == trained.layer.config and layer.step == 2
    assert to_host(layer.params).tobytes() == to_host(trained.layer.params).tobytes()
    if where == "numpy":
        assert not made and type(layer.params) is np.ndarray and type(layer.grad) is np.ndarray
        layer.params[...] = 0
        assert np.any(found.layers["lstm"]["params"] != 0), "the new layer owns a copy"
    else:
        assert made == {"h2d": 1}, "one host-to-device copy of the params"
        assert {(type(a), a.device_id) for a in (layer.params, layer.grad)} == {(ndarray, int(where[-1]))}
    assert layer.xp is (np if where == "numpy" else cupy())
    with pytest.raises(KeyError, match="holds no layer 'gru'"):
        found.layer("gru")


def test_state_dicts_move_between_gpus_without_the_host(fake: FakeCudnn) -> None:
    source, target = build("gpu1", seed=5), build("gpu0", seed=6)
    train(source, range(2))
    with fake.gpu.counting() as made:
        target.layer.load_state_dict(source.layer.state_dict())
        target.adam.load_state_dict(source.adam.state_dict())
        target.sgd.load_state_dict(source.sgd.state_dict())
    assert not made, "device-to-device copies: no host transfer"
    assert placement(target) == {**expected_placement(target), "w_out": ("cupy", 0), "b_out": ("cupy", 0)}
    expected = {**snapshot(source), "w_out": snapshot(target)["w_out"], "b_out": snapshot(target)["b_out"]}
    assert snapshot(target) == expected


def test_restore_keep_seeds_keeps_each_layers_own_seed(fake: FakeCudnn, tmp_path: Path) -> None:
    trained = build("gpu1", seed=1)
    found = saved(fake, trained, tmp_path / "run.ckpt")
    fresh = build("numpy", seed=8)
    found.restore(layers={"lstm": fresh.layer}, keep_seeds=True)
    assert fresh.layer.config.seed == 8
    assert to_host(fresh.layer.params).tobytes() == to_host(trained.layer.params).tobytes()


def test_velocity_a_restore_brings_in_lands_beside_its_parameter(fake: FakeCudnn, tmp_path: Path) -> None:
    trained = build("numpy", momentum=0.9)
    train(trained, range(1))
    found = saved(fake, trained, tmp_path / "run.ckpt")
    fresh = build("gpu1", momentum=0.0)
    assert fresh.sgd.velocity == [] and fake.gpu.current_device == 0
    found.restore(**fresh.groups())
    assert snapshot(fresh) == snapshot(trained)
    assert fresh.sgd.velocity[0].device_id == 1  # fails: the velocity is made on device 0


def test_a_restore_can_drop_state_the_checkpoint_does_not_hold(fake: FakeCudnn, tmp_path: Path) -> None:
    trained = build("gpu1", momentum=0.0)
    train(trained, range(1))
    found = saved(fake, trained, tmp_path / "run.ckpt")
    fresh = build("gpu1", momentum=0.5)
    found.restore(**fresh.groups())
    assert fresh.sgd.momentum == 0.0 and fresh.sgd.velocity == []
    assert snapshot(fresh) == snapshot(trained)


# ==== refusals: checked before anything is copied ===============================================
def refused(fake: FakeCudnn, found: checkpoint.Checkpoint, model: Model, error: type[Exception], match: str,
            **groups: Any) -> None:
    """``found.restore(**groups)`` raises ``error`` matching ``match`` and changes nothing in ``model``."""
    before, identities = snapshot(model), model.arrays()
    with fake.gpu.counting() as made, pytest.raises(error, match=match):
        found.restore(**groups)
    assert not made, "no copy was made"
    assert snapshot(model) == before
    assert model.arrays() == identities and all(model.arrays()[n] is a for n, a in identities.items())


@pytest.mark.parametrize("source, target", [("gpu1", "numpy"), ("numpy", "gpu1"), ("gpu1", "gpu0")])
def test_another_dtype_is_refused_naming_it(fake: FakeCudnn, tmp_path: Path, source: str, target: str) -> None:
    trained = build(source, dtype="float64", seed=1)
    train(trained, range(2))
    found = saved(fake, trained, tmp_path / "wide.ckpt")
    model = build(target, dtype="float32", seed=2)
    groups = model.groups()
    layer_message = r"layers\['lstm'\] holds a layer of another configuration than this LSTM: dtype='float64' " \
                    r"there, 'float32' here"
    refused(fake, found, model, ValueError, layer_message, **groups)
    refused(fake, found, model, ValueError, layer_message, layers=groups["layers"])
    refused(fake, found, model, TypeError, r"optimizers\['adam'\]\['first_moment'\]\[0\] must be float32 .*got "
                                           r"float64", optimizers=groups["optimizers"])
    refused(fake, found, model, TypeError, r"arrays\['(w|b)_out'\] is float64; the array given is float32",
            arrays=groups["arrays"])


@pytest.mark.parametrize("options, message", [
    ({"num_units": 5}, "num_units=4 there, 5 here"),
    ({"num_layers": 1, "dropout": 0.0}, "num_layers=2 there, 1 here; dropout=0.25 there, 0.0 here"),
    ({"bidirectional": True}, "direction='unidirectional' there, 'bidirectional' here"),
    ({"num_proj": 2}, "num_proj=0 there, 2 here"),
    ({"layer_class": GRU}, "rnn_mode='lstm' there, 'gru' here"),
])
@pytest.mark.parametrize("source, target", [("gpu1", "numpy"), ("numpy", "gpu1")])
def test_another_configuration_is_refused_naming_each_field(fake: FakeCudnn, tmp_path: Path, source: str,
                                                            target: str, options: dict[str, Any],
                                                            message: str) -> None:
    trained = build(source, seed=1)
    found = saved(fake, trained, tmp_path / "run.ckpt")
    model = build(target, seed=1, **options)
    refused(fake, found, model, ValueError, "another configuration than this (LSTM|GRU): " + message,
            layers={"lstm": model.layer})
    if "num_units" in options:  # the readout and the moments have other shapes too
        refused(fake, found, model, ValueError, r"arrays\['w_out'\] has shape \(4, 2\); the array given has \(5, 2\)",
                arrays=model.groups()["arrays"])
        refused(fake, found, model, ValueError, r"\['first_moment'\]\[0\] must have the shape of params_list\[0\]",
                optimizers=model.groups()["optimizers"])


@pytest.mark.parametrize("target", ["numpy", "gpu1"])
def test_a_late_refusal_leaves_the_objects_checked_before_it_unchanged(fake: FakeCudnn, tmp_path: Path,
                                                                       target: str) -> None:
    trained = build("gpu0" if target == "numpy" else "numpy", seed=1)
    train(trained, range(2))
    found = saved(fake, trained, tmp_path / "run.ckpt")
    model = build(target, seed=2)  # layer and optimisers match; one extra array does not
    wide = place(np.zeros(2, np.float64), target)
    refused(fake, found, model, TypeError, r"arrays\['b_out'\] is float32; the array given is float64",
            **{**model.groups(), "arrays": {"w_out": model.w_out, "b_out": wide}})
    assert not np.any(to_host(wide))
    swapped = {"adam": model.sgd, "sgd": model.adam}
    refused(fake, found, model, ValueError, r"optimizers\['adam'\].*(state of a 'Adam' optimiser; this one is 'SGD'"
                                            r"|an SGD state dict has the keys)",
            layers=model.groups()["layers"], optimizers=swapped)
    refused(fake, found, model, ValueError, r"holds layers \['lstm'\]; restore was given \['encoder'\]",
            layers={"encoder": model.layer}, optimizers=model.groups()["optimizers"])
    found.restore(**model.groups())  # the same objects, given rightly, take it whole
    assert snapshot(model) == snapshot(trained)
