"""``_cudnn_layout_check`` and ``_cudnn_weight_space``: the layout-check grid, and the layout table against
what a fake cuDNN reports (tests/support/fake_gpu.py): agreement, and a disagreement that is loud, also when a new
network meets it. On a GPU, tests/gpu/test_layout_cudnn.py asks the real cuDNN.
"""

from __future__ import annotations

import itertools

import pytest

from cudnn_rnn._cudnn import _cache as _cudnn_cache
from cudnn_rnn._cudnn._layout_check import check_layout_against_cudnn, cudnn_layout_facts, layout_check_configs
from cudnn_rnn.config import RNNConfig
from cudnn_testing import LSTMP, backend_forward, backend_inputs
from fake_gpu import FakeCudnn, install


def test_layout_grid_covers_every_case() -> None:
    grid = layout_check_configs()
    assert len(grid) == len(set(grid))
    seen = {(c.rnn_mode, c.num_layers, c.direction, c.input_mode, bool(c.num_proj), c.dtype) for c in grid}
    expected = {(m, n, d, i, p, t) for m, n, d, i, p, t in itertools.product(
        ("rnn_relu", "rnn_tanh", "lstm", "gru"), (1, 2, 3), ("unidirectional", "bidirectional"),
        ("linear_input", "skip_input"), (False, True), ("float16", "float32", "float64", "bfloat16"))
        if m == "lstm" or not p}
    assert seen == expected


def test_fake_layout_disagreement_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudnn_rnn.layout import LayoutAssumptions

    fake = install(monkeypatch, LayoutAssumptions(projection_position="after_all_matrices",
                                                  skip_input_keeps_input_biases=False))
    differences = check_layout_against_cudnn(LSTMP)
    projection = "pseudo-layer 0 projection matrix (linLayerID 8): offset 100 in the layout table, 440 in cuDNN"
    assert projection in differences
    skip = RNNConfig("gru", 1, 4, 4, input_mode="skip_input")
    assert any(line.startswith("pseudo-layer 0 input bias of gate 'r' (linLayerID 0): the layout table has it at")
               and line.endswith("cuDNN has none") for line in check_layout_against_cudnn(skip))
    assert any(line.startswith("weight space:") for line in check_layout_against_cudnn(skip))
    a = backend_inputs(LSTMP, 4, 3)
    with pytest.raises(RuntimeError, match="the params layout table disagrees with cuDNN") as raised:
        backend_forward(LSTMP, a, [4, 4, 4])
    assert "projection matrix" in str(raised.value) and "scripts/check_layout.py" in str(raised.value)
    facts = cudnn_layout_facts()
    assert (facts.projection_position, facts.skip_input_keeps_input_biases) == ("after_all_matrices", False)
    assert facts.verified_on == "cuDNN 9.28.0 on Fake GPU"
    _cudnn_cache.clear_caches()
    assert fake.open == {}  # nothing half-built was kept


def test_fake_layout_agreement(fake_cudnn: FakeCudnn) -> None:
    from cudnn_rnn.layout import UNCONFIRMED

    for config in layout_check_configs()[::5]:
        assert check_layout_against_cudnn(config) == [], config
    fake_cudnn.refuse_absent = True  # should cuDNN refuse, rather than answer NULL, for skip_input's absent weights
    skip = RNNConfig("gru", 2, 4, 4, input_mode="skip_input", direction="bidirectional")
    assert check_layout_against_cudnn(skip) == []
    facts = cudnn_layout_facts()
    assert (facts.projection_position, facts.skip_input_keeps_input_biases) == (
        UNCONFIRMED.projection_position, UNCONFIRMED.skip_input_keeps_input_biases)
