"""PyTorch's own RNN modules into cudnn_rnn.torch's: ``LSTM.from_torch(nn.LSTM(...))`` and its kin, and what a
module says when given what belongs to an ``nn.LSTM`` (its state_dict, its time-major input and states).

The oracle is PyTorch itself: ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` run on the same input, padded sequences
through ``pack_padded_sequence``.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import pytest
import torch

import cudnn_rnn
import cudnn_rnn.torch as ct
from signatures import source_signature

#: (PyTorch's class and arguments, ours)
KINDS: dict[str, tuple[Any, dict[str, Any], Any]] = {
    "lstm": (torch.nn.LSTM, {}, ct.LSTM),
    "lstm_proj": (torch.nn.LSTM, {"proj_size": 2}, ct.LSTM),
    "gru": (torch.nn.GRU, {}, ct.GRU),
    "rnn_tanh": (torch.nn.RNN, {}, ct.RNN),
    "rnn_relu": (torch.nn.RNN, {"nonlinearity": "relu"}, ct.RNN),
}


def _theirs(kind: str, batch_first: bool, **extra: Any) -> torch.nn.Module:
    torch.manual_seed(3)
    cls, options, _ = KINDS[kind]
    return cls(3, 4, 2, bidirectional=True, batch_first=batch_first, dtype=torch.float64, **options, **extra)


def _their_states(kind: str, batch: int) -> tuple[torch.Tensor, ...]:
    """nn.LSTM-style initial states, [L*D, B, H] (H = proj_size for h under a projection)."""
    generator = torch.Generator().manual_seed(5)
    width = 2 if kind == "lstm_proj" else 4
    h0 = torch.randn(4, batch, width, dtype=torch.float64, generator=generator)
    c0 = torch.randn(4, batch, 4, dtype=torch.float64, generator=generator)
    return (h0, c0) if KINDS[kind][0] is torch.nn.LSTM else (h0,)


@pytest.mark.parametrize("batch_first", [False, True], ids=["time_major", "batch_first"])
@pytest.mark.parametrize("kind", KINDS)
def test_from_torch_computes_what_the_pytorch_module_computes(kind: str, batch_first: bool) -> None:
    theirs = _theirs(kind, batch_first)
    ours = KINDS[kind][2].from_torch(theirs)
    assert ours.time_major is not batch_first and ours.params.dtype == torch.float64
    assert ours.config.num_proj == (2 if kind == "lstm_proj" else 0) and ours.config.num_directions == 2
    assert ours.config.rnn_mode == {"lstm_proj": "lstm"}.get(kind, kind)
    batch, steps = 3, 5
    x = torch.randn((batch, steps, 3) if batch_first else (steps, batch, 3), dtype=torch.float64)
    states = _their_states(kind, batch)
    lengths = torch.tensor([5, 2, 4])

    x_theirs, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    packed = torch.nn.utils.rnn.pack_padded_sequence(x_theirs, lengths, batch_first=batch_first, enforce_sorted=False)
    out, final = theirs(packed, states if len(states) == 2 else states[0])
    y_theirs, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=batch_first, total_length=steps)
    h_theirs, c_theirs = final if isinstance(final, tuple) else (final, None)
    ours_states = [s.transpose(0, 1) if batch_first else s for s in states]  # ours follow x's layout
    y, h, c = ours(x_ours, lengths, *ours_states)  # the module's own layout: no time_major passed

    torch.testing.assert_close(y, y_theirs, rtol=0, atol=1e-12)
    torch.testing.assert_close(h.transpose(0, 1) if batch_first else h, h_theirs, rtol=0, atol=1e-12)
    if c_theirs is None:
        assert c is None
    else:
        assert c is not None
        torch.testing.assert_close(c.transpose(0, 1) if batch_first else c, c_theirs, rtol=0, atol=1e-12)
    weights = torch.linspace(-1, 1, y.shape[-1], dtype=torch.float64)
    (y * weights).sum().backward()
    (y_theirs * weights).sum().backward()
    assert x_ours.grad is not None and x_theirs.grad is not None
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, rtol=0, atol=1e-12)


def test_from_torch_keeps_the_modules_dtype_mode_and_copies_its_weights() -> None:
    theirs = torch.nn.GRU(3, 4, dropout=0.0).eval()
    ours = ct.GRU.from_torch(theirs, seed=7)
    assert not ours.training and ours.params.dtype == torch.float32 and ours.params.device.type == "cpu"
    assert ours.config == cudnn_rnn.RNNConfig("gru", 1, 4, 3, seed=7)
    with torch.no_grad():
        theirs.weight_ih_l0.add_(1.0)  # a copy: the PyTorch module's later changes are not ours
    assert not torch.equal(ct.GRU.from_torch(theirs).params, ours.params)
    half = ct.LSTM.from_torch(torch.nn.LSTM(3, 4, 2, dropout=0.25, dtype=torch.bfloat16))
    assert half.params.dtype == torch.bfloat16 and half.training and half.config.dropout == 0.25
    assert "time_major=True" in repr(half)


def test_from_torch_of_a_module_without_biases_is_the_same_function() -> None:
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(3, 4, bias=False, batch_first=True)
    ours = ct.LSTM.from_torch(theirs)
    x = torch.randn(2, 6, 3)
    torch.testing.assert_close(ours(x)[0], theirs(x)[0], rtol=0, atol=1e-6)
    _, biases = cudnn_rnn.cudnn_rnn_params_to_canonical(1, 4, 3, ours.params.detach().numpy())
    assert not any(b.any() for b in biases)


@pytest.mark.parametrize("module, cls, error, message", [
    (torch.nn.RNN(2, 3), ct.LSTM, ValueError,
     r"^module is a torch.nn.RNN \(nonlinearity='tanh'\); LSTM.from_torch takes a torch.nn.LSTM: use "
     r"cudnn_rnn.torch.RNN.from_torch\(module\)$"),
    (torch.nn.LSTM(2, 3), ct.GRU, ValueError,
     r"^module is a torch.nn.LSTM; GRU.from_torch takes a torch.nn.GRU: use cudnn_rnn.torch.LSTM.from_torch"),
    (torch.nn.GRU(2, 3), ct.RNN, ValueError, r"^module is a torch.nn.GRU; RNN.from_torch takes a torch.nn.RNN"),
    (torch.nn.Linear(2, 3), ct.LSTM, TypeError, r"^module must be a torch.nn.LSTM, nn.GRU or nn.RNN; got Linear$"),
    (torch.nn.LSTMCell(2, 3), ct.LSTM, TypeError, r"got LSTMCell$"),
    (torch.nn.LSTM(2, 3, device="meta"), ct.LSTM, TypeError,
     r"^module's weights are torch.float32 on meta; from_torch takes one of \('float16', 'float32', 'float64', "
     r"'bfloat16'\) on the CPU or a CUDA GPU$"),
    (torch.nn.LSTM(2, 3, dtype=torch.complex64), ct.LSTM, TypeError,
     r"^module's weights are torch.complex64 on cpu; from_torch takes one of"),
    (torch.nn.LSTM(2, 3, 2, dropout=1.0), ct.LSTM, ValueError, r"dropout must be .*\[0, 1\); got 1.0"),
], ids=["rnn_into_lstm", "lstm_into_gru", "gru_into_rnn", "linear", "cell", "meta", "complex", "dropout_1"])
def test_from_torch_refuses_what_cannot_map(module: torch.nn.Module, cls: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        cls.from_torch(module)


def test_the_modules_layout_is_the_default_of_forward_and_outlives_a_copy() -> None:
    module = ct.LSTM(3, 4, seed=1).eval()
    x = torch.randn(5, 2, 3)  # [T, B, I]
    module.time_major = True
    y, h, c = module(x)
    assert y.shape == (5, 2, 4) and h.shape == (1, 2, 4)
    assert torch.equal(y, module(x, time_major=True)[0])
    y_batch_major, _, _ = module(x.transpose(0, 1).contiguous(), time_major=False)  # a call may still say
    torch.testing.assert_close(y_batch_major.transpose(0, 1), y, rtol=0, atol=0)
    assert copy.deepcopy(module).time_major and set(module.state_dict()) == {"params", "step"}
    assert not ct.LSTM(3, 4).time_major and "time_major" not in repr(ct.LSTM(3, 4))


# ---- what belongs to an nn.LSTM, given to ours ------------------------------------------------------------
def test_load_state_dict_of_an_nn_lstm_says_what_to_call_and_that_route_works() -> None:
    torch.manual_seed(2)
    theirs = torch.nn.LSTM(3, 4, 2)
    ours = ct.LSTM(3, 4, 2)
    before = ours.params.detach().clone()
    state_dict = theirs.state_dict()
    with pytest.raises(ValueError, match=r"^state_dict holds the weights of a PyTorch nn.LSTM \(weight_ih_l0, "
                                         r"weight_hh_l0, \.\.\.\), not this module's params and step: .*"
                                         r"cudnn_rnn.torch.LSTM.from_torch\(that_module\), or convert them into "
                                         r"params: .*cudnn_rnn.convert.from_format\('torch'"):
        ours.load_state_dict(state_dict)
    assert torch.equal(ours.params, before)  # nothing loaded
    with pytest.raises(ValueError, match=r"not this module's rnn.params and rnn.step"):  # inside a parent module
        torch.nn.ModuleDict({"rnn": ours}).load_state_dict({f"rnn.{k}": v for k, v in state_dict.items()})
    module = ours  # the converting route, as the message spells it
    module.params.data.copy_(torch.from_numpy(cudnn_rnn.convert.from_format(
        'torch', {name: tensor.numpy() for name, tensor in state_dict.items()}, module.config).value))
    x = torch.randn(6, 2, 3)
    torch.testing.assert_close(ours.eval()(x, time_major=True)[0], theirs(x)[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(ct.LSTM.from_torch(theirs).params, ours.params, rtol=0, atol=0)


def test_time_major_input_with_nn_lstm_states_is_named_and_the_advice_works() -> None:
    torch.manual_seed(4)
    theirs = torch.nn.LSTM(3, 4, 2, bidirectional=True)  # batch_first=False: x [T, B, I]
    ours = ct.LSTM(3, 4, 2, bidirectional=True)
    ours.load_state_dict(ct.LSTM.from_torch(theirs).state_dict())
    x, (h0, c0) = torch.randn(5, 2, 3), _states_like(theirs, 2)
    with pytest.raises(ValueError) as caught:
        ours(x, None, h0, c0)  # ours is batch-major: x would be 5 sequences of 2 steps
    assert str(caught.value) == (
        "h0 must be [B, L*D, P] = (5, 4, 4) (batch-major: time_major=False) for this layer (input_size=3, "
        "num_units=4, num_layers=2, bidirectional=True: L*D = 4, P = 4) and a batch of 5; got (4, 2, 4): x (5, 2, 3) "
        "looks time-major, [T, B, I] with B = 2, and h0 fits that layout, [L*D, B, P]: pass time_major=True, or make "
        "both batch-major (x.transpose(0, 1) and h0.transpose(0, 1))")
    y_theirs, (h_theirs, c_theirs) = theirs(x, (h0, c0))
    y, h, c = ours(x, None, h0, c0, time_major=True)
    torch.testing.assert_close(y, y_theirs, rtol=0, atol=1e-6)
    torch.testing.assert_close(h, h_theirs, rtol=0, atol=1e-6)
    y2, h2, _ = ours(x.transpose(0, 1), None, h0.transpose(0, 1), c0.transpose(0, 1))
    torch.testing.assert_close(y2.transpose(0, 1), y_theirs, rtol=0, atol=1e-6)
    torch.testing.assert_close(h2.transpose(0, 1), h_theirs, rtol=0, atol=1e-6)


def _states_like(module: torch.nn.LSTM, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    layers = module.num_layers * (2 if module.bidirectional else 1)
    return torch.randn(layers, batch, module.hidden_size), torch.randn(layers, batch, module.hidden_size)


@pytest.mark.parametrize("cls", [ct.LSTM, ct.GRU, ct.RNN])
def test_each_modules_signature_is_the_one_its_source_states_its_layers_less_xp(cls: Any) -> None:
    assert inspect.signature(cls) == source_signature(cls.__init__)
    theirs = inspect.signature(cls.layer_class)
    assert list(inspect.signature(cls).parameters.values()) == [p for p in theirs.parameters.values() if p.name != "xp"]
