"""cudnn_rnn.torch on CUDA tensors: the library's cuDNN op on CuPy views of PyTorch's memory, on its stream.

The oracles: the library's op on CuPy arrays of the same values (cuDNN both times), the reference
backend on the CPU (loosely), eager PyTorch for compiled code, and the same module on the CPU.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any, Iterator

import ml_dtypes
import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")

import cudnn_rnn  # noqa: E402
import cudnn_rnn.torch as ct  # noqa: E402
from cudnn_rnn import _bridge  # noqa: E402
from rnn_testing import relative_error  # noqa: E402


@pytest.fixture(autouse=True)
def cuda() -> None:
    """PyTorch must see the GPU that CuPy sees (tests/gpu/conftest.py skips without one)."""
    if not torch.cuda.is_available():
        message = f"PyTorch {torch.__version__} sees no CUDA device (a CPU-only build?)"
        if os.environ.get("CUDNN_RNN_REQUIRE_GPU") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(autouse=True)
def true_float32() -> Iterator[None]:
    """PyTorch's CUDA float32 as ours computes it, without TF32: its cuDNN allows TF32 by default, and a compiled
    model's products follow its matmul flag; both are put back afterwards."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def arrays(rnn_mode: str, time_major: bool, dtype: Any = np.float64, proj: int = 0,
           bidirectional: bool = False) -> dict[str, Any]:
    """NumPy inputs of a 2-layer call: B 3, T 5, I 3, N 4, lengths [5, 0, 2]."""
    rng = np.random.default_rng(3)
    config = cudnn_rnn.RNNConfig(rnn_mode, 2, 4, 3, num_proj=proj, dtype=np.dtype(dtype).name,
                                 direction="bidirectional" if bidirectional else "unidirectional")
    d, p = config.num_directions, config.state_size
    seq, state = ((5, 3), (2 * d, 3)) if time_major else ((3, 5), (3, 2 * d))
    return dict(x=rng.standard_normal((*seq, 3)).astype(dtype),
                h=(0.5 * rng.standard_normal((*state, p))).astype(dtype),
                c=(0.5 * rng.standard_normal((*state, 4))).astype(dtype) if config.has_cell else None,
                params=_bridge.init_params(config, seed=2), lengths=np.array([5, 0, 2], np.int32),
                kwargs=dict(rnn_mode=rnn_mode, time_major=time_major, num_proj=proj, direction=config.direction))


def to_cuda(value: Any, grad: bool = False) -> Any:
    if value is None:
        return None
    if value.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(value.view(np.int16)).cuda().view(torch.bfloat16).requires_grad_(grad)
    return torch.from_numpy(value).cuda().requires_grad_(grad)


def host(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if value.dtype == torch.bfloat16 \
            else value.numpy()
    return cupy.asnumpy(value)


@pytest.mark.parametrize("rnn_mode, time_major, proj, bidirectional",
                         [("lstm", False, 2, True), ("gru", True, 0, False), ("rnn_tanh", False, 0, True)])
def test_cuda_tensors_run_the_library_op_on_cupy(rnn_mode: str, time_major: bool, proj: int,
                                                 bidirectional: bool) -> None:
    a = arrays(rnn_mode, time_major, proj=proj, bidirectional=bidirectional)
    kwargs = a["kwargs"]
    params = a["params"].astype(np.float64)
    inputs = [to_cuda(a["x"], True), to_cuda(a["h"], True), to_cuda(a["c"], True), to_cuda(params, True)]
    lengths = torch.from_numpy(a["lengths"])  # on the host: no wait
    y, h, c = ct.cudnn_rnn(*inputs, lengths, **kwargs)
    assert y.is_cuda and h.is_cuda and (c is None) == (rnn_mode != "lstm")
    gpu = [None if v is None else cupy.asarray(v) for v in (a["x"], a["h"], a["c"], params)]
    expected = cudnn_rnn.cudnn_rnn_v3(*gpu, a["lengths"], **kwargs)
    np.testing.assert_array_equal(host(y), host(expected.output))
    np.testing.assert_array_equal(host(h), host(expected.output_h))
    dy = cupy.asarray(np.random.default_rng(4).standard_normal(y.shape))
    y.backward(torch.from_dlpack(dy))
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(*gpu, a["lengths"], *expected[:3], dy, None, None,
                                            expected.reserve_space, **kwargs)
    assert relative_error(host(inputs[0].grad), host(grads.input_backprop)) <= 1e-12
    assert relative_error(host(inputs[3].grad), host(grads.params_backprop)) <= 1e-12

    # the reference backend on the CPU, loosely: another implementation of the same math
    cpu = [None if v is None else torch.from_numpy(v).requires_grad_() for v in (a["x"], a["h"], a["c"], params)]
    y_cpu, _, _ = ct.cudnn_rnn(*cpu, lengths, **kwargs)
    y_cpu.backward(torch.from_numpy(host(dy)))
    assert relative_error(host(y), host(y_cpu)) <= 1e-10
    assert relative_error(host(inputs[3].grad), host(cpu[3].grad)) <= 1e-8


def test_torch_func_grad_on_cuda_is_autograds_and_forward_mode_is_refused() -> None:
    a = arrays("gru", True)
    x, h, params = (to_cuda(v) for v in (a["x"], a["h"], a["params"].astype(np.float64)))
    lengths = torch.from_numpy(a["lengths"])

    def loss(params: Any) -> Any:
        return ct.cudnn_rnn(x, h, None, params, lengths, **a["kwargs"])[0].square().sum()

    leaf = params.clone().requires_grad_()
    (want,) = torch.autograd.grad(loss(leaf), leaf)
    assert relative_error(host(torch.func.grad(loss)(params)), host(want)) <= 1e-12
    with pytest.raises(NotImplementedError, match="forward-mode differentiation"):
        torch.func.jvp(loss, (params,), (torch.ones_like(params),))


def test_the_op_runs_on_pytorchs_current_stream() -> None:
    a = arrays("lstm", True)
    args = [to_cuda(v) for v in (a["x"], a["h"], a["c"], a["params"].astype(np.float64))]
    want, _, _ = ct.cudnn_rnn(*args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x = args[0] * 1.0  # made on the side stream: the op must see it finished
        got, _, _ = ct.cudnn_rnn(x, *args[1:])
        got = got * 1.0
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, want)


def test_half_precisions_match_the_library_op_or_are_refused_alike() -> None:
    for dtype in (np.float16, ml_dtypes.bfloat16):
        a = arrays("gru", False, dtype=dtype)
        params = a["params"].astype(dtype)
        try:
            expected = cudnn_rnn.cudnn_rnn_v3(cupy.asarray(a["x"]), cupy.asarray(a["h"]), None, cupy.asarray(params),
                                              a["lengths"], **a["kwargs"])
        except TypeError as error:  # bfloat16 where cuDNN or the GPU is too old
            with pytest.raises(TypeError, match=re.escape(str(error)[:40])):
                ct.cudnn_rnn(to_cuda(a["x"]), to_cuda(a["h"]), None, to_cuda(params),
                             torch.from_numpy(a["lengths"]), **a["kwargs"])
            continue
        y, h, _ = ct.cudnn_rnn(to_cuda(a["x"]), to_cuda(a["h"]), None, to_cuda(params),
                               torch.from_numpy(a["lengths"]), **a["kwargs"])
        np.testing.assert_array_equal(host(y).view(np.int16), host(expected.output).view(np.int16))
        np.testing.assert_array_equal(host(h).view(np.int16), host(expected.output_h).view(np.int16))


def test_the_module_on_cuda_computes_what_it_computes_on_the_cpu() -> None:
    cpu = ct.LSTM(3, 4, 2, bidirectional=True, dtype="float64", seed=1)
    gpu = copy.deepcopy(cpu).to("cuda")
    assert gpu.params.is_cuda and not gpu.step.is_cuda and gpu.config == cpu.config  # step: read without a wait
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    y_cpu, _, _ = cpu(x, [5, 2])
    y_gpu, _, _ = gpu(x.cuda(), [5, 2])
    y_cpu.sum().backward()
    y_gpu.sum().backward()
    assert relative_error(host(y_gpu), host(y_cpu)) <= 1e-10
    assert relative_error(host(gpu.params.grad), host(cpu.params.grad)) <= 1e-8
    layer = gpu.to_layer()
    assert isinstance(layer.params, cupy.ndarray) and layer.step == 1
    back = ct.LSTM.from_layer(layer)
    assert back.params.is_cuda and torch.equal(back.params, gpu.params)
    with pytest.raises(TypeError, match="x is on cpu but this module's params are on cuda:0"):
        gpu(x)


def test_dropout_on_cuda_changes_per_step_and_repeats_from_the_seed() -> None:
    first, second = (ct.GRU(3, 8, 3, dropout=0.5, seed=7).cuda() for _ in range(2))
    x = torch.randn(4, 6, 3, device="cuda")
    steps = [first(x)[0] for _ in range(2)]
    assert not torch.equal(steps[0], steps[1])
    assert torch.equal(second(x)[0], steps[0]) and int(second.step) == 1


def test_a_modules_dropout_masks_are_a_layers_and_to_layer_carries_its_rng() -> None:
    # both seed their own RNG from (seed, step) once on this GPU and let it advance: the same masks, step by step
    module = ct.LSTM(3, 8, 3, dropout=0.5, seed=7).cuda()
    layer = cudnn_rnn.LSTM(3, 8, 3, dropout=0.5, seed=7, xp=cupy)
    x = np.random.default_rng(0).standard_normal((4, 6, 3)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(host(module(torch.from_numpy(x).cuda())[0]), host(layer(cupy.asarray(x))[0]))
    carried = module.to_layer()
    assert carried.state_dict()["dropout_rng"] is not None
    np.testing.assert_array_equal(host(carried(cupy.asarray(x))[0]), host(module(torch.from_numpy(x).cuda())[0]))


@pytest.mark.long  # inductor compiles CUDA kernels: tens of seconds, the 'long' stage of scripts/gpu_check.sh
def test_a_compiled_model_on_cuda_is_eager_pytorch() -> None:
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()).cuda()
    rnn = ct.GRU(3, 4, 2, seed=1).cuda()

    def model(x: Any, rnn: Any = rnn) -> Any:
        y, _, _ = rnn(eager(x))
        return y.square().sum()

    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(2, 5, 3, device="cuda")
    got = compiled(x)
    (got_grad,) = torch.autograd.grad(got, rnn.params)
    want = model(x)
    (want_grad,) = torch.autograd.grad(want, rnn.params)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("max_time, batch", [(0, 2), (3, 0)])
def test_empty_sequences_and_batches_on_cuda(max_time: int, batch: int) -> None:
    module = ct.LSTM(2, 3, dtype="float64").cuda()
    x = torch.zeros(batch, max_time, 2, dtype=torch.float64, device="cuda", requires_grad=True)
    h0 = torch.ones(batch, 1, 3, dtype=torch.float64, device="cuda", requires_grad=True)
    y, h, c = module(x, None, h0)
    assert y.shape == (batch, max_time, 3) and torch.equal(h, h0)
    (y.sum() + h.sum()).backward()
    assert torch.equal(h0.grad, torch.ones_like(h0)) and not module.params.grad.any()
