"""What the GPU checks report when cuDNN refuses something, on the fake GPU (tests/support/fake_gpu.py).

The first GPU run must answer as many questions as it can: a configuration cuDNN refuses is
reported with cuDNN's status and hides none of the others (``check_layout_grid``, the smoke's
``layout`` step, ``scripts/check_layout.py``); a weight query cuDNN refuses is named with its status
rather than read as a missing weight (``_cudnn_weight_space``); the smoke's ``bf16 math`` step
reports every math type cuDNN runs or refuses for bfloat16 and puts the settings table back.
"""

from __future__ import annotations

from typing import Any

import pytest

from cudnn_rnn._cudnn import _settings as _cudnn_settings, _lib
from cudnn_rnn._cudnn._layout_check import check_layout_against_cudnn, check_layout_grid, layout_check_configs
from cudnn_rnn.config import RNNConfig
from cudnn_rnn.errors import CudnnError
from fake_gpu import FakeCudnn
from rnn_testing import load_script

BAD_PARAM = CudnnError("CUDNN_STATUS_BAD_PARAM", 2000, "cudnnGetRNNWeightParams")


def _refusing_half(fake: FakeCudnn, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the fake refuse the weight space of every float16 descriptor."""
    answer = fake.rnn_weight_space_size

    def weight_space_size(handle: int, rnn: int) -> int:
        if fake.rnns[rnn].data_type == _lib.DataType.HALF:
            raise CudnnError("CUDNN_STATUS_NOT_SUPPORTED", 3000, "cudnnGetRNNWeightSpaceSize")
        return answer(handle, rnn)

    monkeypatch.setattr(_lib, "rnn_weight_space_size", weight_space_size)


def test_a_refused_configuration_hides_none_of_the_others(fake_cudnn: FakeCudnn,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _refusing_half(fake_cudnn, monkeypatch)
    fake_cudnn.version = 91200  # no bfloat16 before cuDNN 9.13: those are skipped, with the reason
    configs = layout_check_configs()
    results = check_layout_grid(configs)
    assert [result.config for result in results] == configs
    verdicts = {(result.config.dtype, result.verdict) for result in results}
    assert verdicts == {("float16", "FAILED"), ("float32", "OK"), ("float64", "OK"), ("bfloat16", "SKIPPED")}
    failed = next(result for result in results if result.verdict == "FAILED")
    assert failed.details == ("CudnnError: cudnnGetRNNWeightSpaceSize failed with CUDNN_STATUS_NOT_SUPPORTED "
                              "(3000)",)
    skipped = next(result for result in results if result.verdict == "SKIPPED")
    assert "bfloat16 RNNs need cuDNN >= 9.13.0" in skipped.details[0]


def test_the_smoke_layout_step_reports_the_whole_grid_and_the_open_facts(fake_cudnn: FakeCudnn,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    smoke = load_script("gpu_smoke")
    assert smoke.step_layout().startswith(f"{len(layout_check_configs())} of {len(layout_check_configs())} "
                                          "configurations agree (0 differ, 0 failed; 0 skipped")
    _refusing_half(fake_cudnn, monkeypatch)
    with pytest.raises(AssertionError) as raised:
        smoke.step_layout()
    message = str(raised.value)
    half = sum(config.dtype == "float16" for config in layout_check_configs())
    assert f"({0} differ, {half} failed; 0 skipped for their dtype)" in message
    assert "cuDNN says projection_position = " in message, "the open facts are still answered"
    assert "first failed: RNNConfig(" in message and "CUDNN_STATUS_NOT_SUPPORTED" in message


def test_a_refused_weight_query_shows_as_cudnns_status(fake_cudnn: FakeCudnn, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> tuple[int, int]:
        raise BAD_PARAM

    monkeypatch.setattr(_lib, "rnn_weight_params", refuse)
    config = RNNConfig("gru", 1, 4, 3)
    differences = check_layout_against_cudnn(config)
    queries = config.num_pseudo_layers * 2 * config.num_gates * 2  # every matrix and bias, one query each
    assert differences[0] == (f"cuDNN refused every cudnnGetRNNWeightParams query ({queries}) with "
                              "CUDNN_STATUS_BAD_PARAM (2000)")
    assert ("pseudo-layer 0 input matrix of gate 'r' (linLayerID 0): the layout table has it at offset 0, cuDNN "
            "refused the query with CUDNN_STATUS_BAD_PARAM (2000)") in differences


def test_an_absent_weight_cudnn_refuses_is_still_absent(fake_cudnn: FakeCudnn) -> None:
    fake_cudnn.refuse_absent = True  # skip_input's layer-0 input matrices: a refusal where the table has none
    assert check_layout_against_cudnn(RNNConfig("gru", 2, 4, 4, input_mode="skip_input")) == []


def test_the_smoke_reports_each_bfloat16_math_type_and_restores_the_table(fake_cudnn: FakeCudnn,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    smoke = load_script("gpu_smoke")
    table = _cudnn_settings.PRECISIONS["bfloat16"]
    tried: list[_lib.MathType] = []

    def compare(case: Any, tolerance: float) -> str:  # cuDNN's answer per math type, as the real step gets it
        math_type = _cudnn_settings.current_math_type("bfloat16")
        tried.append(math_type)
        if math_type == _lib.MathType.TENSOR_OP_MATH_ALLOW_CONVERSION:
            raise CudnnError("CUDNN_STATUS_NOT_SUPPORTED", 3000, "cudnnSetRNNDescriptor_v8")
        return f"max relative error 0.01 ({case.dtype})"

    monkeypatch.setattr(smoke, "_compare", compare)
    summary = smoke.step_bfloat16_math()
    assert tried == list(_lib.MathType)
    assert summary.split("; ") == [
        "DEFAULT_MATH ran (max relative error 0.01 (bfloat16))",
        "TENSOR_OP_MATH ran (max relative error 0.01 (bfloat16))",
        "TENSOR_OP_MATH_ALLOW_CONVERSION CudnnError: cudnnSetRNNDescriptor_v8 failed with "
        "CUDNN_STATUS_NOT_SUPPORTED (3000)",
        "FMA_MATH ran (max relative error 0.01 (bfloat16))"]
    assert _cudnn_settings.PRECISIONS["bfloat16"] is table

    monkeypatch.setattr(_cudnn_settings, "PRECISIONS", {**_cudnn_settings.PRECISIONS, "bfloat16": table.__class__(
        **{**table.__dict__, "math_type": _lib.MathType.TENSOR_OP_MATH_ALLOW_CONVERSION})})
    with pytest.raises(AssertionError, match="the table's TENSOR_OP_MATH_ALLOW_CONVERSION did not run"):
        smoke.step_bfloat16_math()

    fake_cudnn.version = 91200
    assert smoke.step_bfloat16_math().startswith("not run: bfloat16 RNNs need cuDNN >= 9.13.0")


@pytest.mark.parametrize("use_graph", [True, False], ids=["graph", "eager"])
def test_the_smoke_graph_step_uploads_its_inputs_on_the_stream_it_trains_on(fake_cudnn: FakeCudnn,
                                                                           use_graph: bool) -> None:
    # CuPy's default stream does not order a non-blocking one: inputs made there could still be in flight
    smoke = load_script("gpu_smoke")
    smoke._trained_params(smoke._mode_case("lstm").with_(dropout=0.3, seed=2), use_graph)
    log = fake_cudnn.gpu.log
    (stream,) = {entry[1] for entry in log if entry[0] == "cudnnRNNForward"}
    uploads = [entry[1] for entry in log if entry[0] == "h2d"]
    assert len(uploads) >= 7 and set(uploads) == {stream}, (stream, uploads)  # x, h0, c0, params, dy... and a plan


def test_on_the_gpu_machines_cudnn_9_19_nothing_of_the_first_call_is_skipped(fake_cudnn: FakeCudnn,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # torch 2.11+cu130 pins nvidia-cudnn-cu13 9.19.0.56: the version gates (bfloat16's, 9.13) must let it all run
    fake_cudnn.version = 91900
    smoke = load_script("gpu_smoke")
    grid = len(layout_check_configs())
    assert smoke.step_layout().startswith(f"{grid} of {grid} configurations agree (0 differ, 0 failed; 0 skipped")
    monkeypatch.setattr(smoke, "_compare", lambda case, tolerance: "max relative error 0.01")
    assert smoke.step_bfloat16_math().count(" ran (") == len(_lib.MathType)
    assert _cudnn_settings.dtype_refusal("bfloat16", 91900, (9, 0)) is None  # the H100's and H200's 9.0
