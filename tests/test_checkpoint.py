"""Whole-state checkpoints: resuming equals never stopping, bit for bit; what is stored comes back; misuse is refused.

The exactness case: a 2-layer model (dropout on, so the dropout position matters) with an extra
array trained with each optimiser for N steps, saved, restored into freshly built objects (a
different seed and a fresh RNG, which the checkpoint overwrites), and trained M more steps,
against N + M steps that never stopped, on the reference backend in float32 and float64.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from cudnn_rnn import checkpoint
from cudnn_rnn.checkpoint import Checkpoint, CheckpointError, CheckpointManager
from cudnn_rnn.layers import GRU, LSTM, RNN, RecurrentLayer
from cudnn_rnn.optim import SGD, Adam

INPUT, UNITS, LAYERS, BATCH, TIME = 3, 5, 2, 4, 6

#: optimiser name -> how to build it over a list of arrays
OPTIMISERS: dict[str, Callable[[list], Any]] = {
    "sgd": lambda arrays: SGD(arrays, lr=0.05),
    "momentum": lambda arrays: SGD(arrays, lr=0.05, momentum=0.9),
    "nesterov": lambda arrays: SGD(arrays, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda arrays: Adam(arrays, lr=0.02, betas=(0.8, 0.95)),
}

#: layer name -> how to build it (dropout on between the two layers)
LAYERS_BUILT: dict[str, Callable[[str, int], RecurrentLayer]] = {
    "lstm": lambda dtype, seed: LSTM(INPUT, UNITS, LAYERS, dropout=0.4, dtype=dtype, seed=seed),
    "gru_bidirectional": lambda dtype, seed: GRU(INPUT, UNITS, LAYERS, bidirectional=True, dropout=0.4, dtype=dtype,
                                                 seed=seed),
    "rnn_relu": lambda dtype, seed: RNN(INPUT, UNITS, LAYERS, activation="relu", dropout=0.4, dtype=dtype, seed=seed),
}


class Model:
    """A recurrent layer, an output bias and an optimiser over both; one step = forward, backward, update."""

    def __init__(self, layer_kind: str, optimiser: str, dtype: str, seed: int) -> None:
        self.layer = LAYERS_BUILT[layer_kind](dtype, seed)
        width = self.layer.config.num_directions * UNITS
        self.bias = np.random.default_rng(seed).uniform(-0.1, 0.1, width).astype(dtype)
        self.bias_grad = np.zeros_like(self.bias)
        self.optimiser = OPTIMISERS[optimiser]([self.layer.params, self.bias])

    def parts(self) -> dict[str, Any]:
        return dict(layers={"rnn": self.layer}, optimizers={"opt": self.optimiser}, arrays={"bias": self.bias})

    def train(self, rng: np.random.Generator, steps: int) -> list[float]:
        """``steps`` steps on batches drawn from ``rng``; the losses."""
        losses = []
        dtype = self.layer.config.dtype
        for _ in range(steps):
            x = rng.standard_normal((BATCH, TIME, INPUT)).astype(dtype)
            lengths = rng.integers(0, TIME + 1, BATCH)
            targets = rng.standard_normal((BATCH, TIME, self.bias.size)).astype(dtype)
            self.layer.zero_grad()
            y, _, _ = self.layer.forward(x, lengths)
            diff = (y + self.bias) - targets
            diff[np.arange(TIME)[None, :] >= lengths[:, None]] = 0
            losses.append(0.5 * float((diff * diff).sum()))
            self.layer.backward(diff)
            self.bias_grad[...] = diff.sum(axis=(0, 1))
            self.optimiser.step([self.layer.grad, self.bias_grad])
        return losses


def optimiser_arrays(optimiser: Any) -> list[np.ndarray]:
    return [array for name in optimiser.state_lists for array in getattr(optimiser, name)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("optimiser", list(OPTIMISERS))
@pytest.mark.parametrize("layer_kind", list(LAYERS_BUILT))
def test_resuming_equals_never_stopping_bit_for_bit(layer_kind: str, optimiser: str, dtype: str,
                                                    tmp_path: Path) -> None:
    first, more = 3, 4
    whole = Model(layer_kind, optimiser, dtype, seed=7)
    whole_losses = whole.train(np.random.default_rng(1), first + more)

    before = Model(layer_kind, optimiser, dtype, seed=7)
    rng = np.random.default_rng(1)
    losses = before.train(rng, first)
    checkpoint.save(tmp_path / "c.safetensors", **before.parts(), state={"rng": rng.bit_generator.state,
                                                                          "losses": losses})
    del before, rng

    after = Model(layer_kind, optimiser, dtype, seed=99)  # another initialisation and dropout seed
    assert after.layer.params.tobytes() != whole.layer.params.tobytes()
    found = checkpoint.load(tmp_path / "c.safetensors")
    found.restore(**after.parts())
    rng = np.random.default_rng(12345)
    rng.bit_generator.state = found.state["rng"]
    losses = found.state["losses"] + after.train(rng, more)

    assert losses == whole_losses
    assert after.layer.params.tobytes() == whole.layer.params.tobytes()
    assert after.bias.tobytes() == whole.bias.tobytes()
    assert after.layer.step == whole.layer.step == first + more
    assert after.layer.config == whole.layer.config  # the seed came back too
    assert after.optimiser.steps == whole.optimiser.steps
    for mine, theirs in zip(optimiser_arrays(after.optimiser), optimiser_arrays(whole.optimiser)):
        assert mine.tobytes() == theirs.tobytes()


def test_dropout_makes_the_restored_position_matter(tmp_path: Path) -> None:
    """Control: restoring everything but the layer's step changes the result (the test above could fail)."""
    whole = Model("lstm", "sgd", "float64", seed=7)
    whole.train(np.random.default_rng(1), 5)
    before = Model("lstm", "sgd", "float64", seed=7)
    rng = np.random.default_rng(1)
    before.train(rng, 2)
    checkpoint.save(tmp_path / "c.safetensors", **before.parts())
    after = Model("lstm", "sgd", "float64", seed=7)
    checkpoint.load(tmp_path / "c.safetensors").restore(**after.parts())
    after.layer.step = 0  # as if the dropout position were lost
    after.train(rng, 3)
    assert after.layer.params.tobytes() != whole.layer.params.tobytes()


def test_keep_seeds_keeps_each_layers_own_seed(tmp_path: Path) -> None:
    saved = LSTM(INPUT, UNITS, LAYERS, dropout=0.2, seed=3)
    saved.step = 11
    checkpoint.save(tmp_path / "c.safetensors", layers={"lstm": saved})
    other = LSTM(INPUT, UNITS, LAYERS, dropout=0.2, seed=4)
    checkpoint.load(tmp_path / "c.safetensors").restore(layers={"lstm": other}, keep_seeds=True)
    assert other.config.seed == 4 and other.step == 11 and np.array_equal(other.params, saved.params)


def test_a_new_layer_from_a_checkpoint(tmp_path: Path) -> None:
    saved = GRU(INPUT, UNITS, bidirectional=True, dtype="float64", seed=5)
    saved.step = 3
    checkpoint.save(tmp_path / "c.safetensors", layers={"gru": saved})
    built = checkpoint.load(tmp_path / "c.safetensors").layer("gru")
    assert type(built) is GRU and built.config == saved.config and built.step == 3
    assert built.params.tobytes() == saved.params.tobytes() and built.params.flags.writeable
    with pytest.raises(KeyError, match="holds no layer 'lstm'; it holds \\['gru'\\]"):
        checkpoint.load(tmp_path / "c.safetensors").layer("lstm")


def test_one_state_makes_one_file_byte_for_byte(tmp_path: Path) -> None:
    # the safetensors package writes __metadata__ in a hash map's order, which changes from call to call
    layer = LSTM(INPUT, UNITS, seed=2)
    optimiser = Adam([layer.params], lr=0.01)
    files = [tmp_path / f"c{i}.safetensors" for i in range(6)]
    for path in files:
        checkpoint.save(path, layers={"lstm": layer}, optimizers={"adam": optimiser}, state={"epoch": 4}, step=7)
    assert len({path.read_bytes() for path in files}) == 1
    assert checkpoint.load(files[0]).state == {"epoch": 4}


def test_the_callers_state_comes_back(tmp_path: Path) -> None:
    rng = np.random.default_rng(2**40)
    rng.standard_normal(3)
    state = {
        "step": 12, "epoch": 0, "cursor": 2**70, "name": "r\u00e9sum\u00e9 \u2713", "none": None, "flag": True,
        "losses": [0.1, 1e-310, -0.0, math.inf, -math.inf], "nested": {"a": [1, [2, {"b": "c"}]]},
        "pair": (1, 2), "scalars": [np.float32(0.5), np.int64(-3), np.bool_(True)],
        "rng": rng.bit_generator.state,
        "arrays": {"f16": np.arange(5, dtype=np.float16), "i8": np.array([[-1, 2]], np.int8), "b": np.array([True]),
                   "scalar": np.array(2.5), "empty": np.zeros((0, 3)), "u64": np.array([2**64 - 1], np.uint64),
                   "strided": np.arange(12.0).reshape(3, 4)[:, ::2]},
        "key/with~slashes": np.ones(2),
    }
    checkpoint.save(tmp_path / "c.safetensors", state=state)
    back = checkpoint.load(tmp_path / "c.safetensors").state
    assert back["losses"][:3] == [0.1, 1e-310, -0.0] and math.copysign(1, back["losses"][2]) == -1
    assert back["losses"][3:] == [math.inf, -math.inf]
    assert back["pair"] == [1, 2] and back["scalars"] == [0.5, -3, True]
    for key in ("step", "epoch", "cursor", "name", "none", "flag", "nested", "rng"):
        assert back[key] == state[key], key
    for key, array in state["arrays"].items():
        assert back["arrays"][key].dtype == array.dtype and np.array_equal(back["arrays"][key], array), key
    assert np.array_equal(back["key/with~slashes"], np.ones(2))
    again = np.random.default_rng(0)
    again.bit_generator.state = back["rng"]
    assert np.array_equal(again.standard_normal(4), rng.standard_normal(4))
    nan = {"x": math.nan}
    checkpoint.save(tmp_path / "nan.safetensors", state=nan)
    assert math.isnan(checkpoint.load(tmp_path / "nan.safetensors").state["x"])


@pytest.mark.parametrize("value, error, message", [
    ({1, 2}, TypeError, r"state\['bad'\]: a set cannot be stored"),
    ({3: "x"}, TypeError, r"state\['bad'\]: dict keys must be strings"),
    ({"$array": "x"}, ValueError, r"the key '\$array' is reserved"),
    (np.array(["text"]), TypeError, "a <U4 array cannot be stored"),
    (np.array([1 + 2j]), TypeError, "a complex128 array cannot be stored"),
    ([object()], TypeError, r"state\['bad'\]\['0'\]: a object cannot be stored"),
    (10**5000, ValueError, "more than 4000 digits"),
], ids=["set", "int key", "reserved key", "str array", "complex array", "object", "huge int"])
def test_what_cannot_be_stored_is_refused_by_its_place(value: Any, error: type, message: str, tmp_path: Path) -> None:
    with pytest.raises(error, match=message):
        checkpoint.save(tmp_path / "c.safetensors", state={"bad": value})
    assert not list(tmp_path.iterdir()), "a refused save writes nothing"


def test_save_refuses_objects_of_the_wrong_kind(tmp_path: Path) -> None:
    layer = LSTM(INPUT, UNITS)
    with pytest.raises(TypeError, match=r"layers\['x'\] must be a cudnn_rnn layer"):
        checkpoint.save(tmp_path / "c", layers={"x": layer.params})
    with pytest.raises(TypeError, match=r"optimizers\['x'\] must be a cudnn_rnn.optim optimiser"):
        checkpoint.save(tmp_path / "c", optimizers={"x": layer})
    with pytest.raises(TypeError, match=r"arrays\['x'\] must be a numpy.ndarray"):
        checkpoint.save(tmp_path / "c", arrays={"x": [1.0]})
    with pytest.raises(TypeError, match="layers must be a dict with str keys"):
        checkpoint.save(tmp_path / "c", layers=[layer])
    with pytest.raises(ValueError, match="step must be a non-negative integer"):
        checkpoint.save(tmp_path / "c", step=-1)


def saved_model(tmp_path: Path, dtype: str = "float32") -> tuple[Path, Model]:
    model = Model("lstm", "adam", dtype, seed=1)
    model.train(np.random.default_rng(0), 1)
    path = tmp_path / f"{dtype}.safetensors"
    checkpoint.save(path, **model.parts())
    return path, model


def unchanged(model: Model) -> Callable[[], bool]:
    """A check that nothing of ``model`` changed since this call."""
    before = [model.layer.params.copy(), model.bias.copy(), *[a.copy() for a in optimiser_arrays(model.optimiser)]]
    steps = (model.layer.step, model.optimiser.steps, model.layer.config)
    after = lambda: [model.layer.params, model.bias, *optimiser_arrays(model.optimiser)]  # noqa: E731
    return lambda: (all(np.array_equal(a, b) for a, b in zip(before, after()))
                    and steps == (model.layer.step, model.optimiser.steps, model.layer.config))


def test_another_configuration_is_refused_naming_each_field_and_nothing_changes(tmp_path: Path) -> None:
    path, _ = saved_model(tmp_path)
    other = Model("lstm", "adam", "float32", seed=1)
    other.layer = LSTM(INPUT, UNITS + 1, LAYERS, dropout=0.5, seed=1)
    check = unchanged(other)
    with pytest.raises(ValueError, match=r"layers\['rnn'\] holds a layer of another configuration than this LSTM: "
                                         r"num_units=5 there, 6 here; dropout=0.4 there, 0.5 here"):
        checkpoint.load(path).restore(**other.parts())
    assert check()


def test_another_dtype_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    path, _ = saved_model(tmp_path, "float64")
    other = Model("lstm", "adam", "float32", seed=1)
    check = unchanged(other)
    with pytest.raises(ValueError, match="dtype='float64' there, 'float32' here"):
        checkpoint.load(path).restore(**other.parts())
    with pytest.raises(TypeError, match=r"\['first_moment'\]\[0\] must be float32 .* got float64"):
        checkpoint.load(path).restore(optimizers=other.parts()["optimizers"])
    with pytest.raises(TypeError, match=r"arrays\['bias'\] is float64; the array given is float32"):
        checkpoint.load(path).restore(arrays={"bias": other.bias})
    assert check()


def test_other_names_kinds_and_shapes_are_refused(tmp_path: Path) -> None:
    path, model = saved_model(tmp_path)
    found = checkpoint.load(path)
    with pytest.raises(ValueError, match=r"holds layers \['rnn'\]; restore was given \['encoder'\]"):
        found.restore(layers={"encoder": model.layer})
    with pytest.raises(ValueError, match=r"holds optimizers \['opt'\]; restore was given \[\]"):
        found.restore(optimizers={})
    with pytest.raises(ValueError, match="is the state of a 'Adam' optimiser; this one is 'SGD'"):
        found.restore(optimizers={"opt": SGD([model.layer.params, model.bias], lr=0.1)})
    with pytest.raises(ValueError, match=r"\['first_moment'\] must be a list of 1 arrays"):
        found.restore(optimizers={"opt": Adam([model.layer.params])})
    with pytest.raises(ValueError, match=r"arrays\['bias'\] has shape \(5,\); the array given has \(6,\)"):
        found.restore(arrays={"bias": np.zeros(6, np.float32)})
    with pytest.raises(TypeError, match=r"layers\['rnn'\] must be a cudnn_rnn layer"):
        found.restore(layers={"rnn": model.layer.params})


def test_optimiser_state_dicts_round_trip_and_are_checked() -> None:
    params = [np.ones(3), np.ones((2, 2), np.float16)]
    sgd = SGD(params, lr=0.1, momentum=0.5)
    sgd.step([np.full(3, 2.0), np.ones((2, 2), np.float16)])
    state = sgd.state_dict()
    assert state["kind"] == "SGD" and state["steps"] == 1 and state["velocity"][1].dtype == np.float32
    plain = SGD([np.ones(3), np.ones((2, 2), np.float16)], lr=0.3)  # momentum 0: no velocity yet
    plain.load_state_dict(state)
    assert (plain.lr, plain.momentum, plain.nesterov, plain.steps) == (0.1, 0.5, False, 1)
    assert all(np.array_equal(a, b) for a, b in zip(plain.velocity, sgd.velocity))
    assert plain.velocity[0] is not sgd.velocity[0]
    back = SGD([np.ones(3), np.ones((2, 2), np.float16)], lr=0.3, momentum=0.9)
    back.load_state_dict(SGD([np.ones(3), np.ones((2, 2), np.float16)], lr=0.2).state_dict())
    assert back.momentum == 0.0 and back.velocity == []
    with pytest.raises(ValueError, match="nesterov=True needs momentum > 0"):
        plain.load_state_dict(dict(state, momentum=0.0, nesterov=True, velocity=[]))
    with pytest.raises(ValueError, match=r"state_dict\['lr'\] must be a finite float > 0"):
        plain.load_state_dict(dict(state, lr=-1.0))
    with pytest.raises(ValueError, match=r"has the keys \['kind', 'lr', 'momentum', 'nesterov', 'steps', 'velocity'\]"):
        plain.load_state_dict({"kind": "SGD"})
    with pytest.raises(ValueError, match=r"\['steps'\] must be a non-negative integer"):
        plain.load_state_dict(dict(state, steps=-2))
    adam = Adam([np.ones(2)])
    adam.load_state_dict(dict(adam.state_dict(), betas=[0.5, 0.6], steps=4))
    assert adam.betas == (0.5, 0.6) and adam.steps == 4


def test_layer_state_dicts_round_trip() -> None:
    layer = LSTM(INPUT, UNITS, num_proj=3, dtype="float64", seed=2)
    layer.step = 9
    state = layer.state_dict()
    assert state["params"] is layer.params and state["step"] == 9 and state["config"]["num_proj"] == 3
    other = LSTM(INPUT, UNITS, num_proj=3, dtype="float64", seed=5)
    other.load_state_dict(state)
    assert other.config == layer.config and other.step == 9 and np.array_equal(other.params, layer.params)
    assert other.params is not layer.params
    built = RecurrentLayer.from_state_dict(state)
    assert type(built) is LSTM and built.params is not layer.params and built.config == layer.config
    with pytest.raises(ValueError, match="holds a LSTM"):
        GRU.from_state_dict(state)
    with pytest.raises(ValueError, match="a layer's state must be a dict with keys"):
        other.load_state_dict({"params": layer.params})
    with pytest.raises(ValueError, match="must be \\[.*\\] float64 for its configuration"):
        other.load_state_dict(dict(state, params=layer.params[:-1]))


def test_the_manager_keeps_the_newest_and_resumes_from_the_newest(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "run", keep=2)
    assert manager.latest() is None and manager.steps() == []
    for step in (5, 10, 15):
        assert manager.save(step, state={"at": step}) == manager.path_for(step)
    assert manager.steps() == [10, 15]
    assert manager.path_for(10).name == "ckpt-000000010.safetensors"
    latest = manager.latest()
    assert latest is not None and latest.step == 15 and latest.state == {"at": 15}
    # a resumed run that saves an earlier step leaves the later file alone until it replaces it
    manager.save(12, state={"at": 12})
    assert manager.steps() == [10, 12, 15]
    manager.save(15, state={"again": True})
    assert manager.steps() == [12, 15] and manager.latest().state == {"again": True}


class _RotatedWhileListed(CheckpointManager):
    """A reader whose listings are each followed, before it reads, by ``writer``'s save of the next of ``saves``."""

    def __init__(self, directory: Path, writer: CheckpointManager, saves: list[int]) -> None:
        super().__init__(directory)
        self.writer, self.saves = writer, list(saves)

    def steps(self) -> list[int]:
        listed = super().steps()
        if self.saves:
            step = self.saves.pop(0)
            self.writer.save(step, state={"at": step})
        return listed


def test_latest_finds_the_newest_whole_checkpoint_while_another_manager_rotates(tmp_path: Path) -> None:
    """Each listing goes stale before it is read (keep=1 removes every file it holds): latest() lists again.

    Before, it warned that the rotated files were "damaged" and returned None, and a resuming run
    would have started from scratch.
    """
    writer = CheckpointManager(tmp_path, keep=1)
    writer.save(1, state={"at": 1})
    reader = _RotatedWhileListed(tmp_path, writer, saves=[2, 3, 4])  # keep=1: each removes every listed file
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file rotation removed is not a damaged one
        latest = reader.latest()
    assert latest is not None and (latest.step, latest.state) == (4, {"at": 4})
    assert reader.saves == [] and writer.steps() == [4]


def test_latest_skips_a_damaged_file_once_however_often_it_lists_again(tmp_path: Path) -> None:
    """A damaged newest file is named in one warning while rotation makes latest() list the folder three times."""
    writer = CheckpointManager(tmp_path, keep=1)
    writer.save(1, state={"at": 1})
    writer.path_for(9).write_bytes(b"not a checkpoint")  # a later step than the writer's: rotation leaves it
    reader = _RotatedWhileListed(tmp_path, writer, saves=[2, 3])
    with pytest.warns(checkpoint.CheckpointWarning, match="ckpt-000000009") as caught:
        latest = reader.latest()
    assert latest is not None and (latest.step, latest.state) == (3, {"at": 3})
    assert [str(w.message).count("skipping a damaged checkpoint") for w in caught] == [1]


_SAVE_AND_ROTATE = """
import sys
from cudnn_rnn.checkpoint import CheckpointManager
manager = CheckpointManager(sys.argv[1], keep=int(sys.argv[2]))
print("ready", flush=True)
for step in range(1, int(sys.argv[3]) + 1):
    manager.save(step, state={"at": step})
"""


@pytest.mark.parametrize("keep", [1, 3])
def test_latest_never_misses_while_another_process_saves_and_rotates(tmp_path: Path, keep: int) -> None:
    """A real writer process saves 400 checkpoints at ``keep``; every latest() polled meanwhile finds one."""
    manager = CheckpointManager(tmp_path, keep=keep)
    manager.save(0, state={"at": 0})
    writer = subprocess.Popen([sys.executable, "-c", _SAVE_AND_ROTATE, str(tmp_path), str(keep), "400"],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    polls, seen = 0, []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        while writer.poll() is None or polls == 0:
            latest = manager.latest()
            assert latest is not None, f"latest() found nothing after {polls} polls while a checkpoint existed"
            assert latest.state == {"at": latest.step}
            seen.append(latest.step)
            polls += 1
    assert writer.wait(timeout=300) == 0
    assert seen == sorted(seen), "a later poll must never find an older checkpoint"
    assert manager.latest().step == 400 and len(manager.steps()) == keep


def test_the_manager_refuses_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep must be an integer >= 1"):
        CheckpointManager(tmp_path, keep=0)
    with pytest.raises(ValueError, match="prefix must be letters"):
        CheckpointManager(tmp_path, prefix="../x")
    with pytest.raises(ValueError, match="step must be a non-negative integer"):
        CheckpointManager(tmp_path).save(-1)


def test_a_missing_file_and_a_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        checkpoint.load(tmp_path / "nothing.safetensors")
    with pytest.raises(CheckpointError, match="is a folder"):
        checkpoint.load(tmp_path)


def test_numbers_out_of_range_are_refused_on_save_and_restore(tmp_path: Path) -> None:
    """10**400 where a count goes: save writes nothing, and a checkpoint holding it restores nothing, the field named.

    Before, such a step was written (a file that load could not use) and restored into the layer.
    """
    path = tmp_path / "c.safetensors"
    layer = LSTM(INPUT, UNITS)
    adam = Adam([layer.params])
    layer.step = 10**400
    with pytest.raises(ValueError, match=r"layers\['rnn'\]: 'step' must be a non-negative integer < 2\*\*63; got "
                                         r".*401 digits"):
        checkpoint.save(path, layers={"rnn": layer})
    layer.step = 3
    adam.lr = 10**400
    with pytest.raises(ValueError, match=r"optimizers\['opt'\]\['lr'\] must be a finite float > 0; got .*401 digits"):
        checkpoint.save(path, optimizers={"opt": adam})
    with pytest.raises(ValueError, match=r"step must be a non-negative integer < 2\*\*63; got .*401 digits"):
        checkpoint.save(path, step=10**400)
    with pytest.raises(ValueError, match=r"step must be a non-negative integer < 2\*\*63; got .*401 digits"):
        CheckpointManager(tmp_path).save(10**400)
    assert not list(tmp_path.iterdir()), "a refused save writes nothing"

    adam.lr = 0.5
    checkpoint.save(path, layers={"rnn": layer}, optimizers={"opt": adam})
    saved = checkpoint.load(path)
    bad_layer = {"rnn": dict(saved.layers["rnn"], step=10**400)}
    bad = Checkpoint(saved.path, saved.step, bad_layer, saved.optimizers, saved.arrays, saved.state)
    target = LSTM(INPUT, UNITS)
    for call in (lambda: bad.restore(layers={"rnn": target}), lambda: bad.layer("rnn")):
        with pytest.raises(ValueError, match=r"layers\['rnn'\]: 'step' must be a non-negative integer < 2\*\*63"):
            call()
    assert target.step == 0
