"""A checkpoint is a safetensors file: the ``safetensors`` package reads its arrays and metadata as they were saved.

And the other way round, a safetensors file that is not a checkpoint (written by that package,
with no checkpoint metadata) is refused with a CheckpointError that says what it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn import checkpoint
from cudnn_rnn.checkpoint import CheckpointError
from cudnn_rnn.layers import GRU
from cudnn_rnn.optim import Adam

safetensors_numpy = pytest.importorskip("safetensors.numpy")
safetensors = pytest.importorskip("safetensors")


def test_the_safetensors_package_reads_a_checkpoint(tmp_path: Path) -> None:
    layer = GRU(3, 4, 2, bidirectional=True, dtype="float64", seed=1)
    adam = Adam([layer.params])
    adam.step([np.full_like(layer.params, 0.5)])
    extra = np.arange(6, dtype=np.int32).reshape(2, 3)
    path = tmp_path / "c.safetensors"
    checkpoint.save(path, layers={"gru": layer}, optimizers={"adam": adam}, arrays={"extra": extra},
                    state={"mask": np.array([True, False]), "step": 1})
    arrays = safetensors_numpy.load_file(str(path))
    assert sorted(arrays) == ["arrays/extra", "layers/gru/params", "optimizers/adam/first_moment/0",
                              "optimizers/adam/second_moment/0", "state/mask"]
    assert arrays["layers/gru/params"].tobytes() == layer.params.tobytes()
    assert arrays["optimizers/adam/second_moment/0"].tobytes() == adam.second_moment[0].tobytes()
    assert arrays["arrays/extra"].dtype == np.int32 and np.array_equal(arrays["arrays/extra"], extra)
    assert arrays["state/mask"].dtype == np.bool_ and arrays["state/mask"].tolist() == [True, False]
    with safetensors.safe_open(str(path), framework="numpy") as opened:
        metadata = opened.metadata()
    assert metadata["format"] == "cudnn_rnn.checkpoint" and metadata["version"] == "1"
    contents = json.loads(metadata["contents"])
    assert contents["layers"]["gru"]["config"]["direction"] == "bidirectional"
    assert contents["state"]["step"] == 1


def test_a_plain_safetensors_file_is_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "plain.safetensors"
    safetensors_numpy.save_file({"w": np.ones((2, 2), np.float32)}, str(path), metadata={"who": "someone"})
    with pytest.raises(CheckpointError, match="a safetensors file, but not a cudnn_rnn checkpoint"):
        checkpoint.load(path)
