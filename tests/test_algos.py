"""cuDNN's RNN algorithms (``algo``), on the host.

* validation shared by both backends: the names, persistent algorithms without projection and
  on batches whose sequences all have one length of at least 1 (named in the refusal with
  ``sequence_lengths``); on the fake GPU a batch-major call that names one runs time-major;
* the reference backend computes the same numbers whatever ``algo`` says, and a reserve of one
  algorithm is refused by a backprop that names another;
* the layers carry ``algo`` through forward, backward, repr, state dicts and params files, and
  loading a state keeps the layer's own algorithm;
* on the fake GPU (tests/support/fake_gpu.py): the RNN descriptor gets the algorithm named,
  ``persist_dynamic`` is built for each batch size it runs, ``"auto"`` follows
  ``_cudnn_settings.AUTO_RULES`` (standard while it is empty), falls back to the standard
  algorithm where cuDNN refuses a persistent one and remembers it, and a refusal of an
  algorithm named explicitly is raised naming it.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn._cudnn import _cache as _cudnn_cache, _settings as _cudnn_settings, _lib
from cudnn_rnn import ops
from cudnn_rnn._cudnn._settings import AutoRule, choose_algo
from cudnn_rnn.config import ALGOS, PERSISTENT_ALGOS, RNNConfig
from cudnn_rnn.errors import CudnnError
from cudnn_rnn.layers import GRU, LSTM, RNN, RecurrentLayer
from cudnn_rnn.layout import params_size
from cudnn_testing import device_arrays, train_step
from fake_gpu import FakeCudnn
from rnn_testing import Case, forward_backward, random_arrays, stable_seed

EQUAL = Case("gru", num_units=6, input_size=3, max_time=5, batch=4, lengths=(4, 4, 4, 4))


# ==== the configuration ==========================================================================
def test_algo_is_a_validated_field_that_leaves_the_layout_alone() -> None:
    base = RNNConfig("lstm", 2, 8, 3)
    assert base.algo == "standard"
    for algo in ALGOS:
        config = base.replace(algo=algo)
        assert config.algo == algo and config.replace(seed=3).algo == algo
        assert config.layout_key == base.layout_key and params_size(config) == params_size(base)
        assert config != base or algo == "standard", "algo is part of the configuration's identity"
    with pytest.raises(ValueError, match=r"algo must be one of \('standard', .*'auto'\); got 'fastest'"):
        RNNConfig("lstm", 1, 4, 3, algo="fastest")
    with pytest.raises(TypeError, match="algo must be a string, .*; got int 1"):
        RNNConfig("lstm", 1, 4, 3, algo=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("algo", PERSISTENT_ALGOS)
def test_persistent_algorithms_refuse_projection(algo: str) -> None:
    with pytest.raises(ValueError, match=rf"num_proj > 0 needs algo='standard' or 'auto' .*got algo='{algo}', "
                                         r"num_proj=2"):
        RNNConfig("lstm", 1, 4, 3, num_proj=2, algo=algo)
    for allowed in ("standard", "auto"):
        assert RNNConfig("lstm", 1, 4, 3, num_proj=2, algo=allowed).algo == allowed
    with pytest.raises(ValueError, match="num_proj > 0 needs algo="):
        LSTM(3, 4, num_proj=2, algo=algo)


# ==== the ops on the reference backend ============================================================
def test_every_algorithm_computes_the_same_numbers_on_the_reference_backend() -> None:
    a = random_arrays(EQUAL, np.random.default_rng(stable_seed(EQUAL)))
    standard = forward_backward(EQUAL, a)
    for algo in ALGOS:
        ours = forward_backward(EQUAL.with_(algo=algo), a)
        for name, value in standard.items():
            np.testing.assert_array_equal(ours[name], value, err_msg=f"{algo}: {name}")


RAGGED = {"mixed": ((5, 1, 3, 2), "from 1 to 5"), "a length 0": ((4, 0, 4, 4), "from 0 to 4"),
          "all of length 0": ((0, 0, 0, 0), "from 0 to 0")}


@pytest.mark.parametrize("algo", PERSISTENT_ALGOS)
@pytest.mark.parametrize("lengths, span", RAGGED.values(), ids=list(RAGGED))
@pytest.mark.parametrize("backend", ["reference", "cudnn"])
def test_persistent_algorithms_run_only_batches_of_one_length(request: pytest.FixtureRequest, backend: str,
                                                              algo: str, lengths: tuple[int, ...], span: str) -> None:
    case = EQUAL.with_(lengths=lengths)
    a = random_arrays(case, np.random.default_rng(1))
    if backend == "cudnn":
        request.getfixturevalue("fake_cudnn")
        a = device_arrays(case)
    with pytest.raises(ValueError, match=rf"algo='{algo}' runs only batches whose sequences all have one length "
                                         rf"of at least 1 .*got sequence_lengths {span}: use algo='standard' "
                                         r"or 'auto'"):
        train_step(case.with_(algo=algo), a)
    for other in ("standard", "auto"):  # they run any lengths
        train_step(case.with_(algo=other), a)


def test_running_a_batch_major_call_time_major_computes_the_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    # The rewrite the cuDNN backend gets for a persistent algorithm, run on the reference backend's real
    # math: x and dy transposed in, y and dx transposed back, the states and the reserve check untouched.
    case = Case("lstm", num_layers=2, num_units=5, input_size=3, direction="bidirectional", max_time=5, batch=3,
                lengths=(5, 2, 4), dropout=0.3, seed=2, time_major=False)
    a = random_arrays(case, np.random.default_rng(4))
    as_called = forward_backward(case, a)
    monkeypatch.setattr(ops._ValidatedCall, "run_time_major", property(lambda call: True))
    rewritten = forward_backward(case, a)
    for name, value in as_called.items():
        np.testing.assert_array_equal(rewritten[name], value, err_msg=name)


@pytest.mark.parametrize("algo", ("persist_static", "persist_dynamic"))
def test_a_batch_major_call_naming_a_persistent_algorithm_runs_time_major_on_cudnn(fake_cudnn: FakeCudnn,
                                                                                    algo: str) -> None:
    case = EQUAL.with_(time_major=False, lengths=(5,) * 4, algo=algo)  # unpadded: cuDNN sees x and dy whole
    a = device_arrays(case)
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **case.attrs())
    layouts = {call[1].layout for call in fake_cudnn.calls if call[0] == "data"}
    assert layouts == {_lib.RNNDataLayout.SEQ_MAJOR_UNPACKED}, "cuDNN sees time-major data"
    np.testing.assert_array_equal(fake_cudnn.seen["x"], np.asarray(a.x.view(np.ndarray)).transpose(1, 0, 2))
    assert out.output.shape == (case.batch, case.max_time, case.num_units), "y comes back batch-major"
    for reserve in (out.reserve_space, out.reserve_space.copy()):  # the copy is checked by its header
        grads = cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                                out.output_c, a.dy, a.dhy, a.dcy, reserve, None, **case.attrs())
        np.testing.assert_array_equal(fake_cudnn.seen["dy"], np.asarray(a.dy.view(np.ndarray)).transpose(1, 0, 2))
        assert grads.input_backprop.shape == a.x.shape and grads.input_backprop.flags.c_contiguous
    standard = case.with_(algo="auto")  # auto leaves batch-major data as it is: the standard algorithm
    fake_cudnn.calls.clear()
    train_step(standard, a)
    assert {call[1].layout for call in fake_cudnn.calls if call[0] == "data"} == {
        _lib.RNNDataLayout.BATCH_MAJOR_UNPACKED}


def test_a_reserve_is_refused_by_a_backprop_of_another_algorithm() -> None:
    a = random_arrays(EQUAL, np.random.default_rng(2))
    out = cudnn_rnn.cudnn_rnn_v3(a.x, a.h0, a.c0, a.params, a.lengths, **EQUAL.with_(algo="persist_static").attrs())
    for host_reserved in (out.host_reserved, None):
        with pytest.raises(ValueError, match="reserve"):
            cudnn_rnn.cudnn_rnn_backprop_v3(a.x, a.h0, a.c0, a.params, a.lengths, out.output, out.output_h,
                                            out.output_c, a.dy, a.dhy, a.dcy, out.reserve_space, host_reserved,
                                            **EQUAL.attrs())


# ==== the layers ==================================================================================
@pytest.mark.parametrize("make", [lambda algo: LSTM(3, 6, algo=algo), lambda algo: GRU(3, 6, algo=algo),
                                  lambda algo: RNN(3, 6, activation="relu", algo=algo)])
def test_layers_carry_the_algorithm(make, tmp_path) -> None:  # type: ignore[no-untyped-def]
    layer = make("persist_dynamic")
    assert layer.config.algo == "persist_dynamic" and "algo='persist_dynamic'" in repr(layer)
    assert "algo" not in repr(make("standard"))
    x = np.random.default_rng(3).standard_normal((2, 5, 3)).astype(np.float32)
    y, _, _ = layer.forward(x, training=True)
    layer.backward(np.ones_like(y))
    assert np.abs(layer.grad).sum() > 0

    state = layer.state_dict()
    assert state["config"]["algo"] == "persist_dynamic"
    other = make("auto")
    other.load_state_dict(state)
    assert other.config.algo == "auto", "a layer keeps its own algorithm"
    np.testing.assert_array_equal(other.params, layer.params)
    assert other.step == layer.step

    layer.save(tmp_path / "layer.npz")
    loaded = RecurrentLayer.load(tmp_path / "layer.npz")
    assert loaded.config == layer.config and loaded.config.algo == "persist_dynamic"


def test_layers_refuse_an_unknown_algorithm() -> None:
    with pytest.raises(ValueError, match="algo must be one of"):
        GRU(3, 4, algo="persistent")


# ==== auto's rules ===============================================================================
SMALL = AutoRule("persist_static_small_h", ("lstm", "gru"), ("float16", "float32"), max_num_units=192,
                 max_num_layers=2, max_batch=64, batch_multiple=8)


@pytest.mark.parametrize("config, batch, equal, expected", [
    (RNNConfig("gru", 1, 128, 3, dtype="float16", algo="auto"), 8, True, "persist_static_small_h"),
    (RNNConfig("gru", 1, 128, 3, dtype="float16", algo="auto"), 8, False, "standard"),   # mixed lengths or a 0
    (RNNConfig("gru", 1, 128, 3, dtype="float16", algo="auto"), 12, True, "standard"),   # batch % 8
    (RNNConfig("gru", 1, 128, 3, dtype="float16", algo="auto"), 72, True, "standard"),   # batch > 64
    (RNNConfig("gru", 1, 256, 3, dtype="float16", algo="auto"), 8, True, "standard"),    # hidden > 192
    (RNNConfig("gru", 3, 128, 3, dtype="float16", algo="auto"), 8, True, "standard"),    # 3 layers
    (RNNConfig("gru", 1, 128, 3, dtype="float64", algo="auto"), 8, True, "standard"),    # dtype
    (RNNConfig("rnn_tanh", 1, 128, 3, dtype="float16", algo="auto"), 8, True, "standard"),  # mode
    (RNNConfig("lstm", 1, 128, 3, num_proj=64, dtype="float16", algo="auto"), 8, True, "standard"),  # projection
    (RNNConfig("gru", 1, 128, 3, dtype="float16", algo="persist_static"), 12, False, "persist_static"),  # named
    (RNNConfig("gru", 1, 128, 3, dtype="float16"), 8, True, "standard"),
])
def test_auto_takes_the_first_matching_rule_it_can_run(monkeypatch: pytest.MonkeyPatch, config: RNNConfig,
                                                       batch: int, equal: bool, expected: str) -> None:
    monkeypatch.setattr(_cudnn_settings, "AUTO_RULES", (SMALL,))
    assert choose_algo(config, batch, equal, True) == expected
    batch_major = "standard" if config.algo == "auto" else config.algo  # auto leaves batch-major data alone
    assert choose_algo(config, batch, equal, False) == batch_major


def test_auto_means_standard_until_a_gpu_run_measured_a_rule() -> None:
    assert _cudnn_settings.AUTO_RULES == ()
    assert choose_algo(RNNConfig("gru", 1, 128, 3, dtype="float16", algo="auto"), 8, True, True) == "standard"
    assert set(_cudnn_settings.CUDNN_ALGOS) == set(ALGOS) - {"auto"}


# ==== on the fake GPU =============================================================================
def descriptor_algos(fake_cudnn: FakeCudnn) -> list[_lib.RNNAlgo]:
    """The algorithm of every RNN descriptor the backend set, in order."""
    return [fields.algo for fields in fake_cudnn.rnns.values()]


@pytest.mark.parametrize("algo, expected", [("standard", _lib.RNNAlgo.STANDARD),
                                            ("persist_static", _lib.RNNAlgo.PERSIST_STATIC),
                                            ("persist_static_small_h", _lib.RNNAlgo.PERSIST_STATIC_SMALL_H),
                                            ("auto", _lib.RNNAlgo.STANDARD)])
def test_the_descriptor_runs_the_algorithm_named(fake_cudnn: FakeCudnn, algo: str, expected: _lib.RNNAlgo) -> None:
    case = EQUAL.with_(algo=algo)
    train_step(case, device_arrays(case))
    assert descriptor_algos(fake_cudnn) == [expected]
    assert not [call for call in fake_cudnn.calls if call[0] == "build_dynamic"]


def test_persist_dynamic_is_built_for_each_batch_size(fake_cudnn: FakeCudnn) -> None:
    case = EQUAL.with_(algo="persist_dynamic")
    for batch in (4, 4, 2, 4):
        sized = case.with_(batch=batch, lengths=case.lengths[:batch])
        train_step(sized, device_arrays(sized))
    builds = [call for call in fake_cudnn.calls if call[0] == "build_dynamic"]
    assert [batch for _, _, batch in builds] == [4, 2], "one network per batch size, built once"
    assert descriptor_algos(fake_cudnn) == [_lib.RNNAlgo.PERSIST_DYNAMIC] * 2
    assert {rnn for _, rnn, _ in builds} == set(fake_cudnn.rnns)


def test_auto_falls_back_to_standard_where_cudnn_refuses_and_remembers(fake_cudnn: FakeCudnn,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    rule = AutoRule("persist_static", ("gru",), ("float64",), max_num_units=64, max_num_layers=1, max_batch=8)
    monkeypatch.setattr(_cudnn_settings, "AUTO_RULES", (rule,))
    case = EQUAL.with_(algo="auto")
    a = device_arrays(case)
    accepted = train_step(case, a)
    assert descriptor_algos(fake_cudnn) == [_lib.RNNAlgo.PERSIST_STATIC], "auto ran the rule's algorithm"
    _cudnn_cache.clear_caches()

    fake_cudnn.refused_algos.add(_lib.RNNAlgo.PERSIST_STATIC)
    fake_cudnn.rnns.clear()
    refused = train_step(case, a)
    assert descriptor_algos(fake_cudnn) == [_lib.RNNAlgo.PERSIST_STATIC, _lib.RNNAlgo.STANDARD]
    for name, value in accepted.items():
        if name not in ("reserve_space", "host_reserved"):  # the fake leaves the reserve's payload unwritten
            np.testing.assert_array_equal(np.asarray(refused[name]), np.asarray(value), err_msg=name)
    train_step(case, a)
    assert len(fake_cudnn.rnns) == 2, "the refusal is remembered: no second persistent attempt"
    (refused_key,) = _cudnn_cache.thread_context(0).refused
    assert refused_key.algo == "persist_static"


def test_a_refusal_of_a_named_algorithm_is_raised_naming_it(fake_cudnn: FakeCudnn) -> None:
    fake_cudnn.refused_algos.add(_lib.RNNAlgo.PERSIST_STATIC)
    case = EQUAL.with_(algo="persist_static")
    with pytest.raises(CudnnError, match=r"cudnnGetRNNTempSpaceSizes failed with CUDNN_STATUS_NOT_SUPPORTED "
                                         r"\(3000\): \[cuDNN refused algo='persist_static' for this call; "
                                         r"algo='standard' runs every configuration\]") as caught:
        train_step(case, device_arrays(case))
    assert caught.value.status == 3000 and caught.value.function == "cudnnGetRNNTempSpaceSizes"
    assert not _cudnn_cache.thread_context(0).refused, "only auto's refusals are remembered"


def test_a_non_contiguous_output_backprop_reaches_cudnn_contiguous(fake_cudnn: FakeCudnn) -> None:
    # cuDNN's GRU backward fails for a hidden size that is not a multiple of 4 when dy is a strided
    # slice (pytorch issue 54307): dy is made contiguous before cuDNN sees it.
    case = EQUAL.with_(num_units=6, time_major=True)
    a = device_arrays(case)
    wide = np.repeat(np.asarray(a.dy.view(np.ndarray)), 2, axis=2)
    from fake_gpu import to_device

    strided = to_device(wide, 0)[:, :, ::2]
    assert not strided.flags.c_contiguous
    train_step(case, a.with_(dy=strided))
    seen = fake_cudnn.seen["dy"]
    valid = np.arange(case.max_time)[:, None] < np.asarray(case.lengths)[None, :]
    np.testing.assert_array_equal(seen[valid], np.asarray(a.dy.view(np.ndarray))[valid])
