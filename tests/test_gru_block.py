"""gru_block_cell / gru_block_cell_grad / gru_block_cell_weight_grads (TF's GRUBlockCell, reset before matmul).

Three oracles: TensorFlow's kernels (golden files from scripts/make_golden_gru_block.py, float32),
float64 central finite differences of the forward, and the published doc's formulas, which are
wrong in known places (the equations cudnn_rnn/gru_block.py states are the kernel's) and must NOT be what we compute.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import cudnn_rnn
from rnn_testing import assert_close, stable_seed

GOLDEN = Path(__file__).parent / "golden" / "gru_block"
FILES = sorted(GOLDEN.glob("*.npz"))
INPUTS = ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")
EPS = 1e-6


def draw(shape: tuple[int, int, int], rng: np.random.Generator, dtype: type = np.float64) -> dict[str, np.ndarray]:
    b, i, h = shape
    shapes = dict(x=(b, i), h_prev=(b, h), w_ru=(i + h, 2 * h), w_c=(i + h, h), b_ru=(2 * h,), b_c=(h,),
                  d_h=(b, h))
    return {name: rng.uniform(-1.0, 1.0, s).astype(dtype) for name, s in shapes.items()}


def all_gradients(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Forward, GRUBlockCellGrad and the weight gradients, by name."""
    inputs = [a[name] for name in INPUTS]
    r, u, c, h = cudnn_rnn.gru_block_cell(*inputs)
    d_x, d_h_prev, d_c_bar, d_r_bar_u_bar = cudnn_rnn.gru_block_cell_grad(*inputs, r, u, c, a["d_h"])
    d_w_ru, d_w_c, d_b_ru, d_b_c = cudnn_rnn.gru_block_cell_weight_grads(a["x"], a["h_prev"], r, d_r_bar_u_bar,
                                                                         d_c_bar)
    return dict(r=r, u=u, c=c, h=h, d_x=d_x, d_h_prev=d_h_prev, d_c_bar=d_c_bar, d_r_bar_u_bar=d_r_bar_u_bar,
                d_w_ru=d_w_ru, d_w_c=d_w_c, d_b_ru=d_b_ru, d_b_c=d_b_c)


def numeric_gradient(a: dict[str, np.ndarray], name: str) -> np.ndarray:
    """d sum(d_h * h) / d a[name] by float64 central differences, entry by entry."""
    def loss(value: np.ndarray) -> float:
        h = cudnn_rnn.gru_block_cell(*[value if n == name else a[n] for n in INPUTS])[3]
        return float(np.sum(a["d_h"] * h))

    value = a[name]
    grad = np.empty(value.shape)
    for index in np.ndindex(value.shape):
        step = np.zeros(value.shape)
        step[index] = EPS
        grad[index] = (loss(value + step) - loss(value - step)) / (2 * EPS)
    return grad


# ---- TensorFlow golden -----------------------------------------------------------------------------
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_tensorflow_kernels(path: Path, dtype: type) -> None:
    with np.load(path, allow_pickle=False) as archive:
        record = dict(archive)
    ours = all_gradients({name: record[name].astype(dtype) for name in INPUTS + ("d_h",)})
    for name, value in ours.items():
        assert value.dtype == dtype, f"{name} dtype {value.dtype}"
        assert value.shape == record[name].shape, f"{name} shape {value.shape} != TF {record[name].shape}"
        assert_close(value, record[name], 2e-6, name)


def test_golden_files_cover_unit_sizes() -> None:
    shapes = [tuple(int(part[1:]) for part in path.stem.split("_")) for path in FILES]
    assert any(b == 1 for b, _, _ in shapes) and any(i == 1 for _, i, _ in shapes)
    assert any(b > 1 and i > 1 and h > 1 for b, i, h in shapes)


# ---- finite differences ---------------------------------------------------------------------------
GRADIENT_OF = {"x": "d_x", "h_prev": "d_h_prev", "w_ru": "d_w_ru", "w_c": "d_w_c", "b_ru": "d_b_ru", "b_c": "d_b_c"}


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 2, 4), (2, 4, 3)])
def test_gradients_match_finite_differences(shape: tuple[int, int, int]) -> None:
    a = draw(shape, np.random.default_rng(stable_seed("gru-block-fd", shape)))
    ours = all_gradients(a)
    for name, grad_name in GRADIENT_OF.items():
        assert_close(ours[grad_name], numeric_gradient(a, name), 1e-8, grad_name)


@pytest.mark.parametrize("shape", [(3, 2, 4), (2, 1, 1)])
def test_pre_activation_gradients_match_finite_differences(shape: tuple[int, int, int]) -> None:
    """d_c_bar[b] and d_r_bar_u_bar[b] are d loss / d (pre-activations of row b): run row b alone,
    where those pre-activations move one for one with b_c and b_ru."""
    a = draw(shape, np.random.default_rng(stable_seed("gru-block-pre", shape)))
    ours = all_gradients(a)
    for row in range(shape[0]):
        alone = {name: (value[row:row + 1] if name in ("x", "h_prev", "d_h") else value) for name, value in a.items()}
        assert_close(ours["d_c_bar"][row], numeric_gradient(alone, "b_c"), 1e-8, f"d_c_bar[{row}]")
        assert_close(ours["d_r_bar_u_bar"][row], numeric_gradient(alone, "b_ru"), 1e-8, f"d_r_bar_u_bar[{row}]")


def test_forward_equations() -> None:
    """r, u from [x, h_prev] @ w_ru + b_ru (columns [r | u]); c from [x, h_prev * r] @ w_c + b_c."""
    a = draw((3, 2, 4), np.random.default_rng(stable_seed("gru-block-forward")))
    r, u, c, h = cudnn_rnn.gru_block_cell(*[a[n] for n in INPUTS])
    ru = 1 / (1 + np.exp(-(np.concatenate([a["x"], a["h_prev"]], 1) @ a["w_ru"] + a["b_ru"])))
    np.testing.assert_allclose(r, ru[:, :4], rtol=1e-13)
    np.testing.assert_allclose(u, ru[:, 4:], rtol=1e-13)
    np.testing.assert_allclose(c, np.tanh(np.concatenate([a["x"], a["h_prev"] * r], 1) @ a["w_c"] + a["b_c"]),
                               rtol=1e-13)
    np.testing.assert_allclose(h, u * a["h_prev"] + (1 - u) * c, rtol=1e-13, atol=1e-15)


# ---- the published doc's errors are not reproduced -----------------------------------------------------
def _differs(ours: np.ndarray, wrong: np.ndarray, what: str) -> None:
    assert ours.shape != wrong.shape or not np.allclose(ours, wrong, rtol=1e-3, atol=1e-6), (
        f"{what} equals the published doc's wrong formula")


def _doc_typos(a: dict[str, np.ndarray], g: dict[str, np.ndarray]) -> dict[str, Callable[[], np.ndarray]]:
    """The published formulas (api_def_GRUBlockCellGrad.pbtxt) where they are wrong."""
    i, h = a["x"].shape[1], a["h_prev"].shape[1]
    d_r_bar, d_u_bar = g["d_r_bar_u_bar"][:, :h], g["d_r_bar_u_bar"][:, h:]
    w_r_x, w_r_h = a["w_ru"][:i, :h], a["w_ru"][i:, :h]
    d_hr = g["d_c_bar"] @ a["w_c"][i:].T
    return {
        # 1: d_x_component_1 = d_r_bar w_r_x^T + d_u_bar w_r_x^T (second term should use w_u_x)
        "d_x": lambda: d_r_bar @ w_r_x.T + d_u_bar @ w_r_x.T + g["d_c_bar"] @ a["w_c"][:i].T,
        # 2 and 3: w_r_h_prev twice, and "+ u" instead of "+ d_h * u"
        "d_h_prev": lambda: d_r_bar @ w_r_h.T + d_u_bar @ w_r_h.T + d_hr * g["r"] + g["u"],
        # 4: (h - c) instead of (h_prev - c)
        "d_r_bar_u_bar": lambda: np.concatenate(
            [d_r_bar, a["d_h"] * (g["h"] - g["c"]) * g["u"] * (1 - g["u"])], 1),
        # 5: d_w_ru and d_w_c swapped
        "d_w_ru": lambda: np.concatenate([a["x"], a["h_prev"] * g["r"]], 1).T @ g["d_c_bar"],
        "d_w_c": lambda: np.concatenate([a["x"], a["h_prev"]], 1).T @ g["d_r_bar_u_bar"],
    }


@pytest.mark.parametrize("shape", [(2, 3, 3), (4, 2, 2)])
def test_published_doc_errors_are_not_reproduced(shape: tuple[int, int, int]) -> None:
    """Every formula the doc gets wrong differs from ours, and ours matches finite differences."""
    a = draw(shape, np.random.default_rng(stable_seed("gru-block-doc", shape)))
    g = all_gradients(a)
    for name, wrong in _doc_typos(a, g).items():
        _differs(g[name], wrong(), name)
    for name, grad_name in GRADIENT_OF.items():
        assert_close(g[grad_name], numeric_gradient(a, name), 1e-8, grad_name)


def test_d_h_prev_carries_d_h_times_u() -> None:
    """With zero weights nothing flows through the matmuls, so d_h_prev = d_h * u exactly (not u)."""
    a = draw((3, 2, 4), np.random.default_rng(stable_seed("gru-block-dhu")))
    a["w_ru"][...] = 0
    a["w_c"][...] = 0
    g = all_gradients(a)
    np.testing.assert_array_equal(g["d_x"], 0)
    np.testing.assert_allclose(g["d_h_prev"], a["d_h"] * g["u"], rtol=1e-15)
    _differs(g["d_h_prev"], g["u"], "d_h_prev")


def test_weight_gradients_have_their_own_shapes() -> None:
    """A swap of d_w_ru and d_w_c would not even have the right shapes when H > 0."""
    b, i, h = 2, 3, 4
    g = all_gradients(draw((b, i, h), np.random.default_rng(0)))
    assert g["d_w_ru"].shape == (i + h, 2 * h) and g["d_w_c"].shape == (i + h, h)
    assert g["d_b_ru"].shape == (2 * h,) and g["d_b_c"].shape == (h,)
    assert g["d_r_bar_u_bar"].shape == (b, 2 * h) and g["d_c_bar"].shape == (b, h)
