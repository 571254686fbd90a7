"""write_file's table of containers (cudnn_rnn.convert.saving.CONTAINERS), row by row.

The cases come from the table itself, so a new row is tested here without a line more: every row
writes an RNN (LSTM and GRU, float32, float16 and bfloat16) under its own ending, in capitals too;
``read_file`` finds the file to be the row's kind and reads back the same weights, bit for bit in
the row's default format (bfloat16 as float32, exactly), but where :data:`NOT_READ` says the reader
refuses it, naming the dtype. The endings are those of ``cudnn_rnn.files._containers``, the one place that names them.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from convert_testing import random_params, rng_for
from cudnn_rnn import RNNConfig
from cudnn_rnn.files._containers import COMPOUND_ENDINGS, ENDINGS, ONNX
from cudnn_rnn.convert import CONTAINERS, read_file, stack, to_format, write_file
from cudnn_rnn.convert.readers import FILE_KINDS, PARAMS_FORMAT, FileReadError, file_kind
from cudnn_rnn.convert.saving import Container, container_of
from cudnn_rnn.files import extension

#: the RNNs every row writes: a bidirectional 2-layer LSTM and a 1-layer GRU, in three dtypes
CONFIGS = [RNNConfig(mode, layers, 4, 3, direction=direction, dtype=dtype)
           for mode, layers, direction in (("lstm", 2, "bidirectional"), ("gru", 1, "unidirectional"))
           for dtype in ("float32", "float16", "bfloat16")]
#: the opset that takes bfloat16 (ONNX rows; the others take no opset)
BFLOAT16_OPSET = 22
#: what the readers give a dtype as, exactly, where a file cannot hold it as it is (a params file can)
WIDENED = {"bfloat16": "float32"}
#: (ending, dtype) -> why read_file refuses such a file (yet): the test asserts the refusal, naming the dtype
NOT_READ: dict[tuple[str, str], str] = {
    (ONNX, "bfloat16"): "the ONNX reader takes float16, float32 and float64 initializers, not bfloat16"}


def params_of(config: RNNConfig, *seed: object) -> np.ndarray:
    params = random_params(config, rng_for("saving", repr(config), *seed))
    return params.astype(ml_dtypes.bfloat16 if config.dtype == "bfloat16" else config.dtype)


def named_tensors(config: RNNConfig, params: np.ndarray, fmt: str) -> dict[str, np.ndarray]:
    """The weights in ``fmt`` (the params file's: torch), widened to float64 to compare values exactly."""
    converted = to_format("torch" if fmt == PARAMS_FORMAT else fmt, params, config).value
    return {name: np.asarray(value, np.float64) for name, value in converted.items()}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda config: f"{config.rnn_mode}-{config.dtype}")
@pytest.mark.parametrize("container", list(CONTAINERS.values()), ids=lambda container: container.suffix)
@pytest.mark.parametrize("capitals", [False, True], ids=["lower", "upper"])
@pytest.mark.filterwarnings("ignore:export_onnx. the model is:UserWarning")  # (ONNX Runtime's CPU kernels)
def test_every_container_writes_what_read_file_reads_back(tmp_path: Path, container: Container, config: RNNConfig,
                                                          capitals: bool) -> None:
    params = params_of(config, container.suffix)
    path = tmp_path / f"rnn{container.suffix.upper() if capitals else container.suffix}"
    assert container_of(path) is container
    written = write_file(path, (params, config), opset=BFLOAT16_OPSET)
    assert (written.path, written.fmt, written.approximations) == (str(path), container.default, ())
    assert written.what and "\n" not in written.what
    assert sorted(item.name for item in tmp_path.iterdir()) == [path.name]  # whole, no partial file left
    assert file_kind(str(path)).name == container.kind
    if (container.suffix, config.dtype) in NOT_READ:
        with pytest.raises(FileReadError, match=config.dtype.upper()):
            read_file(path)
        return
    found = stack(read_file(path))
    assert found.complete, found.questions
    back = found.to_params().value
    assert found.config.dtype in (config.dtype, WIDENED.get(config.dtype))
    expected = named_tensors(config, params, container.default)
    actual = named_tensors(found.config, back, container.default)
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert np.array_equal(actual[name], value), name


def test_the_table_has_one_row_per_ending_of_the_one_list() -> None:
    assert tuple(CONTAINERS) == ENDINGS
    assert all(suffix == container.suffix for suffix, container in CONTAINERS.items())
    assert COMPOUND_ENDINGS == (".weights.h5",)
    assert all(extension(f"model{suffix}") == suffix for suffix in ENDINGS)
    for container in CONTAINERS.values():
        assert container.kind in FILE_KINDS, container
        assert container.default in container.formats and len(set(container.formats)) == len(container.formats)
        assert container.writes_from in (None, PARAMS_FORMAT)
