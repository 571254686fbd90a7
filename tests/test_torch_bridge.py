"""cudnn_rnn.torch on the CPU: the op and the modules are the library's own, under PyTorch's autograd and compiler.

The oracles: the library's op and layers on the same NumPy values (bit for bit), finite differences
(``torch.autograd.gradcheck``), PyTorch's own ``nn.LSTM``/``nn.GRU`` with the converted weights, and
eager PyTorch for compiled code.
"""

from __future__ import annotations

import copy
import gc
import inspect
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend
from torch._dynamo.utils import counters

import cudnn_rnn
import cudnn_rnn.torch as ct
from cudnn_rnn.torch import _op
from cudnn_rnn import _bridge
from cudnn_rnn.convert import to_format
from rnn_testing import relative_error


@dataclass(frozen=True)
class Call:
    """One tiny call of the op: its attributes and sizes."""

    rnn_mode: str
    layers: int = 1
    inputs: int = 2
    units: int = 3
    direction: str = "unidirectional"
    num_proj: int = 0
    input_mode: str = "linear_input"
    time_major: bool = True
    lengths: tuple[int, ...] | None = None  # None: all T
    max_time: int = 4

    @property
    def batch(self) -> int:
        return 3 if self.lengths is None else len(self.lengths)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(rnn_mode=self.rnn_mode, direction=self.direction, num_proj=self.num_proj,
                    input_mode=self.input_mode, time_major=self.time_major)

    def config(self, dtype: str = "float64") -> cudnn_rnn.RNNConfig:
        return cudnn_rnn.RNNConfig(self.rnn_mode, self.layers, self.units, self.inputs, input_mode=self.input_mode,
                                   direction=self.direction, num_proj=self.num_proj, dtype=dtype)

    def arrays(self, dtype: Any = np.float64, seed: int = 0) -> dict[str, Any]:
        """NumPy inputs: x, h, c (None for non-LSTM), params and lengths (None or int32)."""
        rng = np.random.default_rng(seed)
        config = self.config(np.dtype(dtype).name)
        d, p, t, b = config.num_directions, config.state_size, self.max_time, self.batch
        seq, state = ((t, b), (self.layers * d, b)) if self.time_major else ((b, t), (b, self.layers * d))
        params = _bridge.init_params(config, seed=seed + 1)
        params = (params.astype(np.float64) + rng.uniform(-0.1, 0.1, params.shape)).astype(dtype)
        return dict(x=rng.standard_normal((*seq, self.inputs)).astype(dtype),
                    h=(rng.standard_normal((*state, p)) * 0.5).astype(dtype),
                    c=(rng.standard_normal((*state, self.units)) * 0.5).astype(dtype) if config.has_cell else None,
                    params=params,
                    lengths=None if self.lengths is None else np.array(self.lengths, dtype=np.int32))


def tensor(array: Any, grad: bool = False) -> Any:
    """A tensor of a NumPy array (bfloat16 through int16), or None."""
    if array is None:
        return None
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16).requires_grad_(grad)
    return torch.from_numpy(array.copy()).requires_grad_(grad)


def numpy(value: torch.Tensor) -> np.ndarray:
    value = value.detach()
    if value.dtype == torch.bfloat16:
        return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return value.numpy()


CALLS = {  # every mode, both directions, projection, skip_input, unsorted lengths with zeros, both layouts
    "lstm": Call("lstm", lengths=(4, 0, 2)),
    "lstm_proj_bidi_bm": Call("lstm", 2, num_proj=2, direction="bidirectional", time_major=False, lengths=(3, 4)),
    "gru_bidi_skip": Call("gru", inputs=3, input_mode="skip_input", direction="bidirectional", lengths=(1, 4, 0)),
    "gru_2l_bm": Call("gru", 2, time_major=False),
    "rnn_tanh_bidi_bm": Call("rnn_tanh", 2, direction="bidirectional", time_major=False, lengths=(2, 0, 4)),
    "rnn_relu_skip": Call("rnn_relu", 2, inputs=3, input_mode="skip_input", lengths=(4, 3)),
}


def run_op(call: Call, a: dict[str, Any], grad: bool = False, **extra: Any) -> tuple[list[Any], Any]:
    inputs = [tensor(a["x"], grad), tensor(a["h"], grad), tensor(a["c"], grad), tensor(a["params"], grad)]
    return inputs, ct.cudnn_rnn(*inputs, tensor(a["lengths"]), **call.kwargs, **extra)


# ---- (1) the library's op, bit for bit ---------------------------------------------------------------
@pytest.mark.parametrize("name", CALLS)
def test_forward_and_gradients_are_the_library_ops_bit_for_bit(name: str) -> None:
    call = CALLS[name]
    a = call.arrays()
    inputs, (y, h, c) = run_op(call, a, grad=True)
    expected = cudnn_rnn.cudnn_rnn_v3(a["x"], a["h"], a["c"], a["params"], a["lengths"], **call.kwargs)
    np.testing.assert_array_equal(numpy(y), expected.output)
    np.testing.assert_array_equal(numpy(h), expected.output_h)
    assert (c is None) == (call.rnn_mode != "lstm")
    if c is not None:
        np.testing.assert_array_equal(numpy(c), expected.output_c)
    rng = np.random.default_rng(7)
    dy, dh = rng.standard_normal(y.shape), rng.standard_normal(h.shape)
    dc = None if c is None else rng.standard_normal(c.shape)
    outputs, upstream = [y, h] + ([c] if c is not None else []), [dy, dh] + ([dc] if dc is not None else [])
    torch.autograd.backward(outputs, [torch.from_numpy(g) for g in upstream])
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(a["x"], a["h"], a["c"], a["params"], a["lengths"], expected.output,
                                            expected.output_h, expected.output_c, dy, dh, dc,
                                            expected.reserve_space, **call.kwargs)
    np.testing.assert_array_equal(numpy(inputs[0].grad), grads.input_backprop)
    np.testing.assert_array_equal(numpy(inputs[1].grad), grads.input_h_backprop)
    np.testing.assert_array_equal(numpy(inputs[3].grad), grads.params_backprop)
    if c is not None:
        np.testing.assert_array_equal(numpy(inputs[2].grad), grads.input_c_backprop)


def test_dropout_uses_the_seeds_as_the_library_op_does() -> None:
    call = Call("gru", 2)
    a = call.arrays()
    _, (y, _, _) = run_op(call, a, dropout=0.5, seed=3, seed2=11)
    expected = cudnn_rnn.cudnn_rnn_v3(a["x"], a["h"], None, a["params"], dropout=0.5, seed=3, seed2=11,
                                      **call.kwargs)
    np.testing.assert_array_equal(numpy(y), expected.output)
    _, (other, _, _) = run_op(call, a, dropout=0.5, seed=3, seed2=12)
    assert not torch.equal(y, other)


# ---- (2) finite differences ------------------------------------------------------------------------
@pytest.mark.parametrize("name", CALLS)
def test_gradcheck(name: str) -> None:
    call = CALLS[name]
    a = call.arrays()
    inputs = [tensor(v, True) for v in (a["x"], a["h"], a["c"], a["params"]) if v is not None]
    lengths = tensor(a["lengths"])

    def function(*values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, h, *rest = values
        c, params = (rest[0], rest[1]) if call.rnn_mode == "lstm" else (None, rest[0])
        y, hy, cy = ct.cudnn_rnn(x, h, c, params, lengths, **call.kwargs)
        return (y, hy) if cy is None else (y, hy, cy)

    assert torch.autograd.gradcheck(function, tuple(inputs), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("used", ["output", "output_h", "output_c"])
def test_a_loss_of_one_output_alone(used: str) -> None:
    """The outputs the loss leaves unused reach the backprop as None (zeros), never as zero tensors."""
    rng = np.random.default_rng(3)
    x, h, c = (torch.from_numpy(rng.standard_normal(shape)).requires_grad_() for shape in
               ((4, 2, 3), (1, 2, 5), (1, 2, 5)))
    params = torch.from_numpy(cudnn_rnn.LSTM(3, 5, dtype="float64").params).requires_grad_()
    index = ("output", "output_h", "output_c").index(used)

    def loss(*values: torch.Tensor) -> torch.Tensor:
        return torch.tanh(ct.cudnn_rnn(*values)[index]).sum()

    assert torch.autograd.gradcheck(loss, (x, h, c, params), atol=1e-6, rtol=1e-5)


SECOND_ORDER = r"cudnn_rnn.torch: second-order differentiation \(a gradient of the gradient\) is not supported"
FORWARD_MODE = r"cudnn_rnn.torch: forward-mode differentiation \(.*\) is not supported"


def test_second_order_and_backward_of_inference_are_refused() -> None:
    call = Call("lstm")
    a = call.arrays()
    inputs, (y, _, _) = run_op(call, a, grad=True)
    (dx,) = torch.autograd.grad(y.square().sum(), inputs[0], create_graph=True)
    with pytest.raises(NotImplementedError, match=SECOND_ORDER):
        dx.sum().backward()
    x, h, c, params = (tensor(a[k]) for k in ("x", "h", "c", "params"))
    with pytest.raises(NotImplementedError, match=SECOND_ORDER):
        torch.func.grad(lambda p: torch.func.grad(lambda q: ct.cudnn_rnn(x, h, c, q)[0].square().sum())(p).sum())(
            params)
    _, (y, _, _) = run_op(call, a, grad=True, is_training=False)
    with pytest.raises(RuntimeError, match="needs a forward run with is_training=True"):
        y.sum().backward()


@pytest.mark.parametrize("name", ["lstm", "gru_bidi_skip"])
def test_torch_func_grad_and_jacrev_are_autograds_gradients(name: str) -> None:
    call = CALLS[name]  # float64, with lengths
    a = call.arrays()
    x, h, c, params, lengths = (tensor(a[k]) for k in ("x", "h", "c", "params", "lengths"))

    def outputs(x: torch.Tensor, h: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        y, hy, _ = ct.cudnn_rnn(x, h, c, params, lengths, **call.kwargs)
        return torch.cat([y.reshape(-1), hy.reshape(-1)])

    def loss(x: torch.Tensor, h: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        return outputs(x, h, params).tanh().sum()

    inputs = [v.clone().requires_grad_() for v in (x, h, params)]
    want = torch.autograd.grad(loss(*inputs), inputs)
    got = torch.func.grad(loss, argnums=(0, 1, 2))(x, h, params)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    jacobian = torch.func.jacrev(outputs, argnums=(0, 1, 2))(x, h, params)
    y = outputs(*inputs)
    rows = [torch.autograd.grad(y[i], inputs, retain_graph=True) for i in range(y.numel())]
    for k, block in enumerate(jacobian):
        assert torch.equal(block, torch.stack([row[k] for row in rows]))


def test_forward_mode_differentiation_is_refused_with_one_error() -> None:
    call = Call("gru", lengths=(4, 0, 2))
    a = call.arrays()
    x, h, params, lengths = (tensor(a[k]) for k in ("x", "h", "params", "lengths"))

    def loss(params: torch.Tensor) -> torch.Tensor:
        return ct.cudnn_rnn(x, h, None, params, lengths, rnn_mode="gru")[0].square().sum()

    for transform in (lambda: torch.func.jvp(loss, (params,), (torch.ones_like(params),)),
                      lambda: torch.func.jacfwd(loss)(params), lambda: torch.func.hessian(loss)(params)):
        with pytest.raises(NotImplementedError, match=FORWARD_MODE):
            transform()
    import torch.autograd.forward_ad as forward_ad

    with forward_ad.dual_level(), pytest.raises(NotImplementedError, match=FORWARD_MODE):
        loss(forward_ad.make_dual(params, torch.ones_like(params)))


def test_vmap_is_the_op_on_each_slice() -> None:
    call = Call("lstm", lengths=(4, 0, 2))
    a = call.arrays()
    h, c, params, lengths = (tensor(a[k]) for k in ("h", "c", "params", "lengths"))
    xs = torch.stack([tensor(call.arrays(seed=seed)["x"]) for seed in range(3)])

    def output(x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        return ct.cudnn_rnn(x, h, c, params, lengths)[0]

    assert torch.equal(torch.func.vmap(output, in_dims=(0, None))(xs, params),
                       torch.stack([output(x, params) for x in xs]))
    per_sample = torch.func.vmap(torch.func.grad(lambda x, p: output(x, p).square().sum(), argnums=1),
                                 in_dims=(0, None))(xs, params)
    for x, grad in zip(xs, per_sample):
        assert torch.equal(grad, torch.func.grad(lambda p, x=x: output(x, p).square().sum())(params))


def test_a_compiled_call_of_the_function_is_eager_forward_and_backward() -> None:
    call = CALLS["lstm_proj_bidi_bm"]
    a = call.arrays()
    lengths = tensor(a["lengths"])

    def loss(x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        y, hy, cy = ct.cudnn_rnn(x, h, c, params, lengths, **call.kwargs)
        return y.square().sum() + hy.sum() + cy.sum()

    compiled = torch.compile(loss, fullgraph=True)
    eager_inputs = [tensor(a[k], True) for k in ("x", "h", "c", "params")]
    compiled_inputs = [tensor(a[k], True) for k in ("x", "h", "c", "params")]
    want, got = loss(*eager_inputs), compiled(*compiled_inputs)
    torch.testing.assert_close(got, want)
    for ours, theirs in zip(torch.autograd.grad(got, compiled_inputs), torch.autograd.grad(want, eager_inputs)):
        torch.testing.assert_close(ours, theirs)


# ---- (3) PyTorch's own RNNs --------------------------------------------------------------------------
@pytest.mark.parametrize("rnn_mode, proj", [("lstm", 0), ("lstm", 2), ("gru", 0)])
def test_pytorch_rnns_with_the_converted_weights_agree(rnn_mode: str, proj: int) -> None:
    call = Call(rnn_mode, 2, inputs=3, units=4, direction="bidirectional", num_proj=proj, time_major=False)
    a = call.arrays(seed=5)
    config = call.config()
    theirs_class = torch.nn.LSTM if rnn_mode == "lstm" else torch.nn.GRU
    options = {"proj_size": proj} if rnn_mode == "lstm" else {}
    theirs = theirs_class(3, 4, 2, bidirectional=True, batch_first=True, dtype=torch.float64, **options)
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in to_format("torch", a["params"], config).value.items()})

    inputs, (y, h, c) = run_op(call, a, grad=True)
    x2 = tensor(a["x"], True)
    states = tuple(tensor(s.transpose(1, 0, 2), True) for s in (a["h"], a["c"]) if s is not None)
    y2, hc2 = theirs(x2, states if rnn_mode == "lstm" else states[0])
    h2, c2 = hc2 if rnn_mode == "lstm" else (hc2, None)
    assert relative_error(numpy(y), numpy(y2)) < 1e-12
    assert relative_error(numpy(h), numpy(h2).transpose(1, 0, 2)) < 1e-12
    if c is not None:
        assert relative_error(numpy(c), numpy(c2).transpose(1, 0, 2)) < 1e-12
    loss = (y * torch.linspace(-1, 1, y.shape[-1], dtype=torch.float64)).sum() + h.square().sum()
    loss2 = (y2 * torch.linspace(-1, 1, y.shape[-1], dtype=torch.float64)).sum() + h2.transpose(0, 1).square().sum()
    loss.backward()
    loss2.backward()
    assert relative_error(numpy(inputs[0].grad), numpy(x2.grad)) < 1e-10
    converted = to_format("torch", numpy(inputs[3].grad), config).value
    for name, weight in theirs.named_parameters():
        assert relative_error(converted[name], numpy(weight.grad)) < 1e-10, name


# ---- (4) torch.compile and the operators' own checks ------------------------------------------------
class Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(11, 3)
        self.rnn = ct.LSTM(3, 4, 2, dropout=0.4, seed=2)
        self.out = torch.nn.Linear(4, 5)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        y, _, _ = self.rnn(self.embed(ids), lengths)
        return self.out(y)


def test_a_compiled_model_is_eager_pytorch_forward_and_backward() -> None:
    torch.manual_seed(0)
    eager = Tagger()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, fullgraph=True)
    for max_time in (5, 5, 7):  # dropout masks move on every step; a new T traces again
        ids, lengths = torch.randint(0, 11, (3, max_time)), torch.tensor([max_time, 0, 2])
        got, want = compiled(ids, lengths), eager(ids, lengths)
        assert torch.equal(got, want)
        got.square().sum().backward()
        want.square().sum().backward()
    assert int(compiled_model.rnn.step) == int(eager.rnn.step) == 3
    for (name, ours), theirs in zip(compiled_model.named_parameters(), eager.parameters()):
        assert ours.grad is not None and theirs.grad is not None
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6, msg=name)  # inductor's sums


def _compile_runs(model: torch.nn.Module, backend: Any, shapes: list[tuple[int, int]], mark_dynamic: bool = False,
                  **options: Any) -> list[torch.Tensor]:
    """``model`` compiled by ``backend`` (a counter) on each (B, T) of ``shapes``: its outputs, each backpropagated;
    with ``mark_dynamic``, B and T marked dynamic from the first call."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend, **options)
    outputs = []
    for batch, max_time in shapes:
        ids, lengths = torch.randint(0, 11, (batch, max_time)), torch.randint(0, max_time + 1, (batch,))
        if mark_dynamic:
            torch._dynamo.mark_dynamic(ids, (0, 1))
            torch._dynamo.mark_dynamic(lengths, 0)
        out = compiled(ids, lengths)
        out.square().sum().backward()
        outputs.append(out)
    return outputs


#: B and T clear of the model's own sizes (3, 4, 5, 11), which a dynamic size equal to one would share
NEW_SHAPES = [(6, 7), (7, 9), (2, 13), (6, 7), (9, 2)]


def test_a_new_batch_and_length_compile_once_and_never_break_the_graph() -> None:
    # the reserve's length is T * B * per_step + header on the CPU: an unbacked size (any length) made Dynamo break
    # the graph at the op once T and B were dynamic, and compile some thirty frames more over the next shapes
    torch.manual_seed(0)
    counter = CompileCounter()
    model = Tagger()
    _compile_runs(model, counter, [(5, 6)] + NEW_SHAPES)  # torch.compile's defaults: not fullgraph, dynamic=None
    assert dict(counters["graph_break"]) == {}
    assert counter.frame_count == 2  # the first shape, then one graph dynamic in B and T for every later shape
    assert counters["frames"]["total"] == 2 and counters["stats"]["unique_graphs"] == 2
    assert int(model.rnn.step) == 1 + len(NEW_SHAPES)  # the step advanced without a recompile


def test_sizes_marked_dynamic_compile_one_graph_forward_and_backward() -> None:
    torch.manual_seed(0)
    eager = Tagger()
    compiled_model = copy.deepcopy(eager)
    counter = CompileCounterWithBackend("aot_eager")  # AOTAutograd traces the backward too
    torch.manual_seed(1)
    got = _compile_runs(compiled_model, counter, NEW_SHAPES, mark_dynamic=True, fullgraph=True)
    torch.manual_seed(1)
    want = [eager(ids, lengths) for ids, lengths in
            ((torch.randint(0, 11, (b, t)), torch.randint(0, t + 1, (b,))) for b, t in NEW_SHAPES)]
    for ours, theirs in zip(got, want):
        torch.testing.assert_close(ours, theirs)
        theirs.square().sum().backward()
    assert counter.frame_count == 1 and counters["stats"]["unique_graphs"] == 1
    for (name, ours_param), theirs_param in zip(compiled_model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(ours_param.grad, theirs_param.grad, msg=name)


@pytest.mark.parametrize("name", CALLS)
def test_the_fake_kernels_cpu_reserve_is_the_kernels_for_every_length_and_batch(name: str) -> None:
    call = CALLS[name]
    config = call.config("float32")
    attrs = dict(rnn_mode=call.rnn_mode, input_mode=call.input_mode, direction=call.direction, num_proj=call.num_proj,
                 time_major=call.time_major)

    def signature(max_time: int, batch: int) -> Any:
        seq = (max_time, batch) if call.time_major else (batch, max_time)
        state = (config.num_pseudo_layers, batch) if call.time_major else (batch, config.num_pseudo_layers)
        return _bridge.signature((*seq, call.inputs), (*state, config.state_size),
                                 (*state, call.units) if config.has_cell else None,
                                 (cudnn_rnn.cudnn_rnn_params_size(**_size_arguments(config)),), "float32", None, None,
                                 is_training=True, **attrs)

    traced = signature(3, 2)  # the sizes a trace saw first
    for max_time, batch in [(0, 0), (0, 3), (5, 0), (1, 1), (4, 3), (7, 5), (1000, 1)]:
        assert traced.cpu_reserve_elements(max_time, batch) == signature(max_time, batch).reserve_elements("cpu")
    a = call.arrays(dtype=np.float32)
    _, _, _, reserve = torch.ops.cudnn_rnn.rnn_forward(
        tensor(a["x"]), tensor(a["h"]), tensor(a["c"]), tensor(a["params"]), tensor(a["lengths"]), None,
        call.rnn_mode, call.input_mode, call.direction, 0.0, 0, 0, call.num_proj, True, call.time_major, "standard", 0)
    assert reserve.numel() == traced.cpu_reserve_elements(call.max_time, call.batch)


def _size_arguments(config: cudnn_rnn.RNNConfig) -> dict[str, Any]:
    return dict(num_layers=config.num_layers, num_units=config.num_units, input_size=config.input_size,
                rnn_mode=config.rnn_mode, input_mode=config.input_mode, direction=config.direction,
                num_proj=config.num_proj)


def test_the_ops_stay_out_of_cuda_graphs_and_reduce_overhead_still_runs() -> None:
    # both allocate from CuPy's pool, which a CUDA graph of PyTorch's cannot own
    for op in (torch.ops.cudnn_rnn.rnn_forward.default, torch.ops.cudnn_rnn.rnn_backward.default):
        assert torch.Tag.cudagraph_unsafe in op.tags, op
    torch.manual_seed(0)
    eager = Tagger()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, mode="reduce-overhead")
    for _ in range(3):
        ids, lengths = torch.randint(0, 11, (3, 5)), torch.tensor([5, 0, 2])
        got, want = compiled(ids, lengths), eager(ids, lengths)
        assert torch.equal(got, want)
        got.square().sum().backward()
        want.square().sum().backward()
    for (name, ours), theirs in zip(compiled_model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_opcheck_passes_for_both_operators() -> None:
    call = Call("lstm", 2, direction="bidirectional", lengths=(4, 0, 2))
    a = call.arrays()
    # the operators themselves have no autograd formula: autograd reaches them through ct.cudnn_rnn's Function
    x, h, c, params, lengths = (tensor(a[k]) for k in ("x", "h", "c", "params", "lengths"))
    attributes = ["lstm", "linear_input", "bidirectional", 0.5, 1, 2, 0]
    forward_args = (x, h, c, params, lengths, None, *attributes, True, True, "standard", 0)
    torch.library.opcheck(torch.ops.cudnn_rnn.rnn_forward.default, forward_args)
    y, hy, cy, reserve = torch.ops.cudnn_rnn.rnn_forward(*forward_args)
    backward_args = (x, h, c, params, lengths, None, y, hy, cy, torch.ones_like(y), None, torch.ones_like(cy),
                     reserve, *attributes, True, "standard")
    torch.library.opcheck(torch.ops.cudnn_rnn.rnn_backward.default, backward_args)


@pytest.mark.parametrize("step, error, message", [
    (torch.tensor([1, 2]), TypeError, "step must be a 0-d integer tensor; got a 1-d torch.int64 tensor"),
    (torch.tensor(float("nan")), TypeError, "step must be a 0-d integer tensor; got a 0-d torch.float32 tensor"),
    (torch.tensor(1.7), TypeError, "step must be a 0-d integer tensor; got a 0-d torch.float32 tensor"),
    (torch.tensor(2**31), ValueError, r"^step must be in \[0, 2\*\*31 - 1\], a non-negative C int as seed2 \(a "
                                      r"negative seed2 would hide seed\); got 2147483648$"),
    (torch.tensor(-3), ValueError, r"^step must be in \[0, 2\*\*31 - 1\], .*; got -3$"),
    (torch.tensor(-(2**31), dtype=torch.int32), ValueError,
     r"^step must be in \[0, 2\*\*31 - 1\], .*; got -2147483648$")])
def test_the_forward_operator_refuses_a_bad_step(step: torch.Tensor, error: type, message: str) -> None:
    call = Call("gru")
    a = call.arrays()
    args = [tensor(a["x"]), tensor(a["h"]), None, tensor(a["params"]), None]
    attributes = ["gru", "linear_input", "unidirectional", 0.5, 1, 2, 0, True, True, "standard", 0]
    with pytest.raises(error, match=message):
        torch.ops.cudnn_rnn.rnn_forward(*args, step, *attributes)
    y, _, _, _ = torch.ops.cudnn_rnn.rnn_forward(*args, torch.tensor(5, dtype=torch.int32), *attributes)
    expected = cudnn_rnn.cudnn_rnn_v3(a["x"], a["h"], None, a["params"], rnn_mode="gru", dropout=0.5, seed=1,
                                      seed2=5)
    np.testing.assert_array_equal(numpy(y), expected.output)  # seed2 is the step's value


@pytest.mark.parametrize("step", [2**31 + 5, 2**63 - 2])
def test_a_modules_step_reaches_the_op_modulo_2_31(step: int) -> None:
    # the op refuses a negative step: a module hands it its counter modulo 2**31, in [0, 2**31)
    module = ct.GRU(2, 3, 2, dropout=0.5, seed=1, dtype="float64")
    module.load_state_dict({"params": module.params.detach(), "step": torch.tensor(step)})
    x = np.random.default_rng(0).standard_normal((2, 4, 2))
    y, _, _ = module(torch.from_numpy(x))
    expected = cudnn_rnn.cudnn_rnn_v3(x, np.zeros((2, 2, 3)), None, numpy(module.params), rnn_mode="gru",
                                      dropout=0.5, seed=1, seed2=step % 2**31, time_major=False)
    np.testing.assert_array_equal(numpy(y), expected.output)
    assert int(module.step) == step + 1


# ---- (5) float16 and bfloat16 -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_half_precisions_are_the_library_ops(dtype: Any) -> None:
    call = CALLS["lstm_proj_bidi_bm"]
    a = call.arrays(dtype=dtype)
    inputs, (y, h, c) = run_op(call, a, grad=True)
    assert y.dtype == (torch.float16 if dtype is np.float16 else torch.bfloat16)
    expected = cudnn_rnn.cudnn_rnn_v3(a["x"], a["h"], a["c"], a["params"], a["lengths"], **call.kwargs)
    for got, want in zip((y, h, c), expected):
        assert numpy(got).dtype == want.dtype
        np.testing.assert_array_equal(numpy(got).view(np.int16), want.view(np.int16))
    dy = np.ones(y.shape, dtype=dtype)
    y.backward(tensor(dy))
    grads = cudnn_rnn.cudnn_rnn_backprop_v3(a["x"], a["h"], a["c"], a["params"], a["lengths"], *expected[:3], dy,
                                            None, None, expected.reserve_space, **call.kwargs)
    np.testing.assert_array_equal(numpy(inputs[3].grad).view(np.int16), grads.params_backprop.view(np.int16))


# ---- (6) the modules ----------------------------------------------------------------------------------
MODULES = {  # module class, library class, constructor arguments
    "lstm": (ct.LSTM, cudnn_rnn.LSTM, dict(input_size=3, num_units=4, num_layers=2, bidirectional=True,
                                           num_proj=2, dropout=0.5, seed=4)),
    "lstm_no_forget_bias": (ct.LSTM, cudnn_rnn.LSTM, dict(input_size=2, num_units=3, unit_forget_bias=False,
                                                          seed=9)),
    "gru": (ct.GRU, cudnn_rnn.GRU, dict(input_size=3, num_units=3, num_layers=2, dropout=0.3, seed=5,
                                        dtype="float64")),
    "rnn_relu": (ct.RNN, cudnn_rnn.RNN, dict(input_size=3, num_units=3, num_layers=3, activation="relu",
                                             input_mode="skip_input", dropout=0.25, seed=6)),
}


@pytest.mark.parametrize("name", MODULES)
def test_a_module_starts_as_the_library_layer_and_trains_as_it(name: str) -> None:
    module_class, layer_class, arguments = MODULES[name]
    module, layer = module_class(**arguments), layer_class(**arguments)
    assert module.config == layer.config and [n for n, _ in module.named_parameters()] == ["params"]
    np.testing.assert_array_equal(numpy(module.params), layer.params)
    x = np.random.default_rng(1).standard_normal((2, 4, arguments["input_size"])).astype(layer.params.dtype)
    outputs = []
    for _ in range(2):  # the same masks as the layer's at every step, and new ones each step
        y, h, c = module(torch.from_numpy(x), [4, 1])
        want = layer.forward(x, [4, 1])
        np.testing.assert_array_equal(numpy(y), want[0])
        np.testing.assert_array_equal(numpy(h), want[1])
        assert (c is None) == (want[2] is None)
        outputs.append(y)
    assert int(module.step) == layer.step == 2
    if module.config.inter_layer_dropout:
        assert not torch.equal(outputs[0], outputs[1])
    module.eval()  # no dropout, no step
    y, _, _ = module(torch.from_numpy(x))
    np.testing.assert_array_equal(numpy(y), layer.forward(x, training=False)[0])
    assert int(module.step) == 2


def test_an_eval_forward_that_needs_a_gradient_has_one_without_dropout() -> None:
    module = ct.GRU(2, 3, 2, dropout=0.5, dtype="float64", seed=1).eval()
    x = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    y, _, _ = module(x)
    y.sum().backward()
    plain = cudnn_rnn.GRU.from_params(numpy(module.params), module.config.replace(dropout=0.0))
    want, _, _ = plain.forward(x.detach().numpy())
    dx, _, _ = plain.backward(np.ones(want.shape))
    np.testing.assert_array_equal(numpy(y), want)
    np.testing.assert_array_equal(numpy(x.grad), dx)
    np.testing.assert_array_equal(numpy(module.params.grad), plain.grad)
    assert int(module.step) == 0


def test_from_layer_and_to_layer_round_trip_params_config_and_step() -> None:
    layer = cudnn_rnn.RNN(2, 3, 2, activation="relu", bidirectional=True, dropout=0.2, seed=8)
    layer.forward(np.ones((1, 2, 2), np.float32))
    module = ct.RNN.from_layer(layer)
    assert isinstance(module, ct.RNN) and module.activation == "relu" and int(module.step) == 1
    np.testing.assert_array_equal(numpy(module.params), layer.params)
    assert not np.shares_memory(numpy(module.params), layer.params)
    back = module.to_layer()
    assert type(back) is cudnn_rnn.RNN and back.config == layer.config and back.step == 1
    np.testing.assert_array_equal(back.params, layer.params)
    assert isinstance(ct.LSTM.from_layer(cudnn_rnn.LSTM(2, 3)), ct.LSTM)
    with pytest.raises(ValueError, match=r"layer is a RNN \(rnn_mode='rnn_relu'\); GRU.from_layer cannot hold it"):
        ct.GRU.from_layer(layer)
    with pytest.raises(TypeError, match="layer must be a cudnn_rnn layer"):
        ct.GRU.from_layer(module)  # type: ignore[arg-type]


def test_a_module_draws_its_masks_from_its_own_dropout_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    # on cuDNN the masks come from the RNG the kernel is given (tests/test_dropout_rng.py: one set-up, advancing)
    seen: list[Any] = []
    forward = _bridge.forward

    def spy(*args: Any, dropout_rng: Any = None, **kwargs: Any) -> Any:
        seen.append(dropout_rng)
        return forward(*args, dropout_rng=dropout_rng, **kwargs)

    monkeypatch.setattr(_bridge, "forward", spy)
    module = ct.GRU(2, 3, 2, dropout=0.5)
    twin = copy.deepcopy(module)
    x = torch.randn(2, 4, 2)
    module(x), module(x), twin(x)
    ct.cudnn_rnn(x.transpose(0, 1).contiguous(), torch.zeros(2, 2, 3), None, module.params.detach(), rnn_mode="gru")
    own, again, twins, op_call = seen
    assert own is again is not None and twins is not None and twins is not own and op_call is None
    key = module._dropout.key
    assert _op._dropout_rngs[key] is own
    del module
    gc.collect()
    assert key not in _op._dropout_rngs, "forgotten with its module"


def test_from_layer_takes_the_layers_dropout_rng_state() -> None:
    layer = cudnn_rnn.LSTM(2, 3, 2, dropout=0.5)
    saved = {"device": "Some GPU, cuDNN 92800, 4 bytes", "states": np.arange(4, dtype=np.uint8)}
    layer._dropout_rng.load(saved)  # as a layer trained on cuDNN holds it
    module = ct.LSTM.from_layer(layer)
    state = module._dropout.rng.state()
    assert state is not None and state["device"] == saved["device"]
    np.testing.assert_array_equal(state["states"], saved["states"])
    copied = copy.deepcopy(module)._dropout.rng.state()
    assert copied is not None and copied["states"] is not state["states"]
    np.testing.assert_array_equal(copied["states"], saved["states"])


def test_state_dict_restores_params_and_step() -> None:
    module = ct.LSTM(2, 3, 2, dropout=0.5, seed=1)
    x = torch.randn(2, 3, 2)
    for _ in range(3):
        module(x)
    state = module.state_dict()
    assert set(state) == {"params", "step"} and int(state["step"]) == 3
    fresh = ct.LSTM(2, 3, 2, dropout=0.5, seed=1)
    fresh.load_state_dict(state)
    assert int(fresh.step) == 3 and torch.equal(fresh.params, module.params)
    assert torch.equal(fresh(x)[0], module(x)[0])  # the same next masks (seed2 = 3)


def test_load_state_dict_refuses_a_bad_step_and_the_counter_never_wraps() -> None:
    module = ct.GRU(2, 3, 2, dropout=0.5)
    params = module.params.detach().clone()
    for step, error, message in [
            (torch.tensor(-1), ValueError, r"^step must be a non-negative integer < 2\*\*63; got -1$"),  # as a layer
            (torch.tensor(3.0), TypeError, r"^step must be a 0-d integer tensor; got a 0-d torch.float32 tensor$"),
            (torch.tensor([3]), TypeError, r"^step must be a 0-d integer tensor; got a 1-d torch.int64 tensor$")]:
        with pytest.raises(error, match=message):
            module.load_state_dict({"params": params + 1, "step": step})
        assert torch.equal(module.params, params) and int(module.step) == 0  # refused before anything loads
    with pytest.raises(ValueError, match=r"^rnn.step must be a non-negative integer < 2\*\*63; got -2$"):
        torch.nn.ModuleDict({"rnn": module}).load_state_dict({"rnn.params": params, "rnn.step": torch.tensor(-2)})
    module.load_state_dict({"params": params, "step": torch.tensor(7, dtype=torch.int32)})
    assert module.step.dtype == torch.int64 and int(module.step) == 7
    module.load_state_dict({"params": params, "step": torch.tensor(2**63 - 1)})
    x = torch.randn(2, 3, 2)
    module.eval()(x)  # no step taken
    with pytest.raises(RuntimeError, match=r"step must stay a non-negative integer < 2\*\*63"):
        module.train()(x)
    assert int(module.step) == 2**63 - 1  # not wrapped to -2**63
    assert module.to_layer().step == 2**63 - 1


def test_each_module_has_its_layers_constructor_through_one_base() -> None:
    for module_class, layer_class in ((ct.LSTM, cudnn_rnn.LSTM), (ct.GRU, cudnn_rnn.GRU), (ct.RNN, cudnn_rnn.RNN)):
        assert module_class.layer_class is layer_class
        theirs = [p for p in inspect.signature(layer_class).parameters.values() if p.name != "xp"]
        assert list(inspect.signature(module_class).parameters.values()) == theirs
        with pytest.raises(TypeError, match="unexpected keyword argument 'xp'"):
            module_class(2, 3, xp=np)
    assert ct.LSTM(2, 3, num_proj=2, dtype=torch.float64).config == cudnn_rnn.LSTM(2, 3, num_proj=2,
                                                                                   dtype="float64").config
    relu = ct.RNN(2, 3, activation="relu", bidirectional=True)
    assert relu.activation == "relu"
    assert repr(relu) == "RNN(input_size=2, num_units=3, num_layers=1, bidirectional=True, activation='relu')"


def test_double_changes_the_dtype_of_params_and_config() -> None:
    module = ct.GRU(2, 3)
    initial = module.params.detach().clone()
    module.double()
    assert module.params.dtype == torch.float64 and module.config.dtype == "float64"
    assert module.config == cudnn_rnn.GRU(2, 3, dtype="float64").config
    assert torch.equal(module.params.detach(), initial.double())
    layer = module.to_layer()
    assert layer.config.dtype == "float64" and layer.params.dtype == np.float64
    x = np.random.default_rng(0).standard_normal((2, 3, 2))
    y, h, c = module(torch.from_numpy(x))
    assert c is None and y.dtype == torch.float64
    np.testing.assert_array_equal(numpy(y), layer.forward(x)[0])
    with pytest.raises(TypeError, match=r"x has dtype torch.float32 but this module's dtype is float64"):
        module(torch.zeros(2, 3, 2))


def test_the_step_counter_stays_in_host_memory_when_the_module_moves() -> None:
    module = ct.LSTM(2, 3, dropout=0.5)
    module.to("meta")  # a device of its own: params go, the counter stays readable without a wait
    assert module.params.device.type == "meta" and module.step.device.type == "cpu"
    module.to(torch.float64)
    assert module.step.dtype == torch.int64 and "step" in module.state_dict()


# ---- (7) bad input --------------------------------------------------------------------------------------
def refusal(function: Any, *args: Any, **kwargs: Any) -> tuple[type, str]:
    with pytest.raises((TypeError, ValueError)) as error:
        function(*args, **kwargs)
    return type(error.value), str(error.value)


@pytest.mark.parametrize("change", ["rank", "h_dtype", "params_size", "rnn_mode", "lengths_values", "lengths_dtype",
                                    "is_training", "input_dtype", "h_batch", "dropout", "missing_c", "missing_x",
                                    "missing_x_and_params", "mode_and_dtype", "params_rank_and_dtype"])
def test_bad_calls_get_the_library_ops_errors(change: str) -> None:
    call = Call("lstm", lengths=(4, 0, 2))
    a = dict(call.arrays())
    kwargs: dict[str, Any] = dict(call.kwargs)
    if change == "rank":
        a["x"] = a["x"][0]
    elif change == "h_dtype":
        a["h"] = a["h"].astype(np.float32)
    elif change == "params_size":
        a["params"] = a["params"][:-1]
    elif change == "rnn_mode":
        kwargs["rnn_mode"] = "lstm2"
    elif change == "lengths_values":
        a["lengths"] = np.array([5, 0, 2], np.int32)
    elif change == "lengths_dtype":
        a["lengths"] = np.array([4.0, 0, 2], np.float32)
    elif change == "is_training":
        kwargs["is_training"] = 1
    elif change == "input_dtype":
        a = {k: None if v is None else v.astype(np.int64) for k, v in a.items()}
    elif change == "h_batch":
        a["h"] = a["h"][:, :2]
    elif change == "dropout":
        kwargs["dropout"] = 1.0
    elif change == "missing_c":
        a["c"] = None
    elif change == "missing_x":
        a["x"] = None
    elif change == "missing_x_and_params":
        a["x"] = a["params"] = None
    elif change == "mode_and_dtype":  # two mistakes: the op names the first it checks
        kwargs["direction"], a["h"] = "both", a["h"].astype(np.float32)
    elif change == "params_rank_and_dtype":
        a["params"] = a["params"][None].astype(np.float32)
    args = (a["x"], a["h"], a["c"], a["params"], a["lengths"])
    expected = refusal(cudnn_rnn.cudnn_rnn_v3, *args, **kwargs)
    assert refusal(ct.cudnn_rnn, *(tensor(v) for v in args), **kwargs) == expected


def test_every_call_is_checked_by_the_shape_signature_with_missing_tensors_as_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, ...]] = []
    signature = _bridge.signature

    def spy(*shapes: Any, **kwargs: Any) -> Any:
        seen.append(shapes[:4])
        return signature(*shapes, **kwargs)

    monkeypatch.setattr(_bridge, "signature", spy)
    a = Call("lstm").arrays()
    x, h, c, params = (tensor(a[k]) for k in ("x", "h", "c", "params"))
    for _ in range(2):
        ct.cudnn_rnn(x, h, c, params)
    assert seen == [(tuple(x.shape), tuple(h.shape), tuple(c.shape), tuple(params.shape))] * 2  # every call, no cache
    with pytest.raises(TypeError):
        ct.cudnn_rnn(x, h, None, params)
    assert seen[-1] == (tuple(x.shape), tuple(h.shape), None, tuple(params.shape))  # no stand-in, no run of the op


def test_tensors_must_be_tensors_on_one_device() -> None:
    call = Call("gru")
    a = call.arrays()
    with pytest.raises(TypeError, match="params must be a torch.Tensor; got ndarray"):
        ct.cudnn_rnn(tensor(a["x"]), tensor(a["h"]), None, a["params"], rnn_mode="gru")
    with pytest.raises(TypeError, match="sequence_lengths must be a torch.Tensor or None; got list"):
        ct.cudnn_rnn(tensor(a["x"]), tensor(a["h"]), None, tensor(a["params"]), [4, 4, 4], rnn_mode="gru")
    with pytest.raises(TypeError, match="runs on CPU and CUDA tensors; got input on meta"):
        ct.cudnn_rnn(tensor(a["x"]).to("meta"), tensor(a["h"]), None, tensor(a["params"]), rnn_mode="gru")


def test_bad_module_calls_get_the_library_layers_errors() -> None:
    module, layer = ct.GRU(3, 4, 2, bidirectional=True), cudnn_rnn.GRU(3, 4, 2, bidirectional=True)
    bad_calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((np.zeros((2, 5, 2), np.float32),), {}),                                   # the input size
        ((np.zeros((2, 5, 3), np.float32), [5, 6]), {}),                           # a length past T
        ((np.zeros((2, 5, 3), np.float32), [5]), {}),                              # one length too few
        ((np.zeros((2, 5, 3), np.float32), None, np.zeros((4, 2, 4), np.float32)), {}),  # h0 in the other layout
        ((np.zeros((5, 2, 3), np.float32), None, np.zeros((4, 2, 4), np.float32)), {}),  # x and h0 time-major
        ((np.zeros((2, 5, 3), np.float32), None, None, np.zeros((2, 4, 4), np.float32)), {}),  # c0 for a GRU
        ((np.zeros((2, 5, 3), np.float32),), {"time_major": "no"}),
    ]
    for args, kwargs in bad_calls:
        expected_type, expected = refusal(layer.forward, *args, **kwargs)
        got_type, got = refusal(module, *(tensor(v) if isinstance(v, np.ndarray) else v for v in args), **kwargs)
        assert got_type is expected_type and got == expected.replace(".transpose(1, 0, 2)", ".transpose(0, 1)"), got
    _, message = refusal(module, torch.zeros(5, 2, 3), None, torch.zeros(4, 2, 4))  # in PyTorch's own spelling
    assert message.endswith("pass time_major=True, or make both batch-major (x.transpose(0, 1) and h0.transpose(0, 1))")
    with pytest.raises(TypeError, match=r"lengths must be a list of ints or an int32/int64 tensor; got a tensor of "
                                        r"dtype torch.float32"):
        module(torch.zeros(2, 5, 3), torch.tensor([5.0, 1.0]))
    for arguments in (dict(seed=2**40), dict(num_layers=0), dict(dtype="int8"), dict(bidirectional=1)):
        assert refusal(ct.GRU, 3, 4, **arguments) == refusal(cudnn_rnn.GRU, 3, 4, **arguments)
    assert refusal(ct.RNN, 3, 4, activation="gelu") == refusal(cudnn_rnn.RNN, 3, 4, activation="gelu")


# ---- (8) and (9): the package's shape, and training ------------------------------------------------------
def test_importing_cudnn_rnn_does_not_import_torch() -> None:
    code = "import sys, cudnn_rnn; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_an_optimiser_step_trains_the_params() -> None:
    torch.manual_seed(0)
    rnn, readout = ct.LSTM(2, 8, seed=0), torch.nn.Linear(8, 1)
    optimiser = torch.optim.Adam([*rnn.parameters(), *readout.parameters()], lr=0.05)
    x = torch.randn(16, 6, 2)
    target = x.sum(dim=2, keepdim=True).cumsum(dim=1) / 4
    before = rnn.params.detach().clone()
    losses = []
    for _ in range(40):
        optimiser.zero_grad()
        y, _, _ = rnn(x)
        loss = (readout(y) - target).square().mean()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert not torch.equal(rnn.params, before)
    assert losses[-1] < losses[0] / 4
