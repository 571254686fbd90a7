"""The params layout table (cudnn_rnn.layout) against cuDNN's own cudnnGetRNNWeightParams.

One test per configuration of the grid (every mode, 1-3 layers, both directions, linear/skip
input, LSTM projection, each dtype: bfloat16 where this cuDNN and GPU run it); a failure lists each
difference in words. The open questions of ``layout.UNCONFIRMED`` are asked directly as well.
"""

from __future__ import annotations

import pytest

cupy = pytest.importorskip("cupy")

from cudnn_rnn._cudnn import _layout_check as _cudnn_layout_check, _settings as _cudnn_settings, _lib  # noqa: E402
from cudnn_rnn import cudnn_rnn_params_size  # noqa: E402
from cudnn_rnn.config import numpy_dtype  # noqa: E402
from cudnn_rnn.layout import UNCONFIRMED  # noqa: E402

GRID = _cudnn_layout_check.layout_check_configs()


def runnable(dtype: str) -> bool:
    """Whether this cuDNN runs ``dtype`` on GPU 0 (bfloat16 needs cuDNN 9.13 and compute capability 8.0)."""
    return _cudnn_settings.dtype_refusal(dtype, _lib.library().version, _cudnn_settings.compute_capability(0)) is None


@pytest.mark.parametrize("config", GRID, ids=repr)
def test_layout_table_matches_cudnn(config) -> None:
    if not runnable(config.dtype):
        pytest.skip(f"this cuDNN or GPU cannot run {config.dtype}")
    differences = _cudnn_layout_check.check_layout_against_cudnn(config)
    assert differences == [], "\n".join(differences)


@pytest.mark.parametrize("field", ["projection_position", "skip_input_keeps_input_biases"])
def test_unconfirmed_layout_facts(field: str) -> None:
    facts = _cudnn_layout_check.cudnn_layout_facts()
    assert getattr(UNCONFIRMED, field) == getattr(facts, field), (
        f"cuDNN says {field} = {getattr(facts, field)!r} ({facts.verified_on}); set it in layout.UNCONFIRMED")


def test_params_size_is_cudnns_weight_space() -> None:
    from cudnn_rnn._cudnn import _lib

    for config in GRID[::7]:
        if not runnable(config.dtype):
            continue
        with _cudnn_layout_check._standalone_rnn(config) as (handle, rnn):
            size = _lib.rnn_weight_space_size(handle, rnn.pointer)
        itemsize = numpy_dtype(config.dtype).itemsize
        expected = cudnn_rnn_params_size(config.num_layers, config.num_units, config.input_size,
                                         rnn_mode=config.rnn_mode, input_mode=config.input_mode,
                                         direction=config.direction, num_proj=config.num_proj, dtype=config.dtype)
        assert size == expected * itemsize, config
