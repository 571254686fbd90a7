"""Sizes that no params buffer can have are refused at once, before anything walks the layers.

Every public entry that takes sizes (the ops, the params size, the canonical conversions, the
format conversions, params files and layer states) answers with bounded work and bounded memory
however large a size is. Each check runs in one worker process with an address-space limit
(2 GiB above what it holds after its imports), which counts the calls the check makes (of Python
functions, and of C functions from Python) and cuts it past MOST_CALLS, far fewer than the layers,
steps or sequences it is given; a check that does not answer within a hang guard is killed. So a
regression that walks the layers fails instead of hanging or swapping.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from cudnn_rnn import RNNConfig
from cudnn_rnn.convert import expected_shapes
from cudnn_rnn.formats import FORMAT_SPECS, FORMATS

#: the most calls a check may make (the most any makes is about 5,000, reading a params file included): a
#: walk of the 10**6 layers or more, or of the 2**40 steps, that the checks give would call for one each at least
MOST_CALLS = 50_000
#: seconds before a check that has not answered is killed (and fails): a hang guard, each check makes few calls
TIMEOUT_S = 120.0
#: bytes of address space the worker may add to what it holds after its imports
HEADROOM = 2 * 1024**3
#: 10**400 as error messages show it
HUGE_SHOWN = "1.00e+400 (401 digits)"

WORKER = r"""
import json, resource, sys, traceback
from pathlib import Path
import numpy as np
import cudnn_rnn, cudnn_rnn.convert
from cudnn_rnn import RNNConfig
from cudnn_rnn.params_file import parse_layer_state, read_params_file

class TooMuchWork(BaseException):
    pass

def profile(frame, event, arg):
    # counts the calls of Python functions and of C functions from Python, and cuts the check past MOST_CALLS
    if event == "call" or event == "c_call":
        calls[0] += 1
        if calls[0] > MOST_CALLS:
            sys.setprofile(None)
            raise TooMuchWork("more than MOST_CALLS calls")

pages = int(Path("/proc/self/statm").read_text().split()[0])
limit = pages * resource.getpagesize() + HEADROOM
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print(json.dumps({"ready": limit}), flush=True)
for line in sys.stdin:
    namespace = {"np": np, "cudnn_rnn": cudnn_rnn, "convert": cudnn_rnn.convert, "RNNConfig": RNNConfig,
                 "parse_layer_state": parse_layer_state, "read_params_file": read_params_file}
    calls = [0]
    try:
        code = compile(json.loads(line), "<check>", "exec")
        sys.setprofile(profile)
        try:
            exec(code, namespace)
        finally:
            sys.setprofile(None)
        answer = {"value": repr(namespace.get("result"))}
    except BaseException as error:
        answer = {"raised": [cls.__name__ for cls in type(error).__mro__], "message": str(error)[:2000],
                  "trace": traceback.format_exc()[-2000:]}
    answer["calls"] = calls[0]
    print(json.dumps(answer), flush=True)
""".replace("HEADROOM", str(HEADROOM)).replace("MOST_CALLS", str(MOST_CALLS))


@dataclass(frozen=True)
class Outcome:
    """What one check did in the worker: the calls it made, and its ``result``'s repr or the exception it raised."""

    calls: int
    value: str | None = None
    raised: tuple[str, ...] = ()
    message: str = ""
    trace: str = ""


class Worker:
    """A Python process under an address-space limit that runs checks sent to it, one at a time."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.pump: threading.Thread | None = None
        self.lines: queue.Queue[str] = queue.Queue()

    def _start(self) -> subprocess.Popen[str]:
        process = self.process = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        lines, stdout = self.lines, process.stdout
        assert stdout is not None
        def pump() -> None:  # every line the worker writes, then "" when it exits
            for line in stdout:
                lines.put(line)
            lines.put("")

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        ready = self._answer(process, "starting")
        assert "ready" in ready, ready
        return process

    def _answer(self, process: subprocess.Popen[str], code: str) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=TIMEOUT_S)
        except queue.Empty:
            self.stop()
            pytest.fail(f"no answer within {TIMEOUT_S} s (killed) to:\n{code}")
        if not line:
            pytest.fail(f"the worker died (exit status {process.wait()}) running:\n{code}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, code: str) -> Outcome:
        """Run ``code`` (which may set ``result``) and say what it did, failing the test on a timeout or a crash."""
        code = textwrap.dedent(code)
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        process = self.process
        assert process.stdin is not None
        process.stdin.write(json.dumps(code) + "\n")
        process.stdin.flush()
        try:
            answer = self._answer(process, code)
        except BaseException:
            self.stop()
            raise
        return Outcome(answer["calls"], answer.get("value"), tuple(answer.get("raised", ())),
                       answer.get("message", ""), answer.get("trace", ""))

    def stop(self) -> None:
        """Kill the worker and close its pipes (its standard output once the pump has read it to the end)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            assert self.process.stdin is not None and self.process.stdout is not None
            with contextlib.suppress(BrokenPipeError):  # (a check it never read)
                self.process.stdin.close()
            if self.pump is not None:
                self.pump.join()
            self.process.stdout.close()
            self.process = self.pump = None


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    started = Worker()
    yield started
    started.stop()


def refused(worker: Worker, code: str, *fragments: str, error: str = "ValueError") -> str:
    """Run ``code`` and check that it raised ``error`` (or a subclass) in at most MOST_CALLS calls, with every
    fragment in the message."""
    outcome = worker.run(code)
    assert error in outcome.raised, f"expected {error}; got {outcome}"
    assert 0 < outcome.calls <= MOST_CALLS, f"{outcome.calls} calls: {outcome.message}"
    for fragment in fragments:
        assert fragment in outcome.message, f"{fragment!r} not in {outcome.message!r}"
    return outcome.message


def answered(worker: Worker, code: str) -> str:
    """Run ``code`` and return the repr of the ``result`` it set, checking it answered in at most MOST_CALLS calls."""
    outcome = worker.run(code)
    assert not outcome.raised, outcome.trace
    assert 0 < outcome.calls <= MOST_CALLS, f"{outcome.calls} calls"
    assert outcome.value is not None
    return outcome.value


# ---- the params size -------------------------------------------------------------------------------------
def test_the_params_size_of_a_million_layers_is_answered_at_once(worker: Worker) -> None:
    # LSTM, N = P = 2, I = 1: layer 0 holds 4*2*(1+2) + 16 = 40 elements, each layer above 4*2*(2+2) + 16 = 48
    assert answered(worker, "result = cudnn_rnn.cudnn_rnn_params_size(10**6, 2, 1)") == str(40 + 48 * (10**6 - 1))


def test_the_largest_buffer_an_array_holds_is_sized_and_one_more_unit_is_refused(worker: Worker) -> None:
    # one rnn_tanh layer, N = I = n: 2n^2 + 2n elements; the largest n whose float32 buffer an array holds
    n = 2**30 - 1
    assert (2 * n * n + 2 * n) * 4 <= 2**63 - 1 < (2 * (n + 1) ** 2 + 2 * (n + 1)) * 4
    assert answered(worker, f"result = cudnn_rnn.cudnn_rnn_params_size(1, {n}, {n}, rnn_mode='rnn_tanh')") == \
        str(2 * n * n + 2 * n)
    refused(worker, f"cudnn_rnn.cudnn_rnn_params_size(1, {n + 1}, {n + 1}, rnn_mode='rnn_tanh')",
            f"num_units={n + 1}", f"{2 * (n + 1) ** 2 + 2 * (n + 1)} elements", "more than an array can hold")
    refused(worker, f"cudnn_rnn.cudnn_rnn_params_size(1, {n}, {n}, rnn_mode='rnn_tanh', dtype='float64')",
            "bytes of float64")


SIZE_CALLS = {
    "cudnn_rnn_params_size": "cudnn_rnn.cudnn_rnn_params_size({num_layers}, {num_units}, {input_size}, "
                             "num_proj={num_proj})",
    "cudnn_rnn_params_to_canonical": "cudnn_rnn.cudnn_rnn_params_to_canonical({num_layers}, {num_units}, {input_size}, "
                                     "np.zeros(3, np.float32), num_proj={num_proj})",
    "cudnn_rnn_canonical_to_params": "cudnn_rnn.cudnn_rnn_canonical_to_params({num_layers}, {num_units}, {input_size}, "
                                     "[np.zeros((4, 1))], [np.zeros(4)], num_proj={num_proj})",
    "RNNConfig": "RNNConfig('lstm', {num_layers}, {num_units}, {input_size}, num_proj={num_proj})",
}


@pytest.mark.parametrize("argument", ["num_layers", "num_units", "input_size", "num_proj"])
@pytest.mark.parametrize("entry", sorted(SIZE_CALLS))
def test_a_size_of_10_to_the_400_is_refused_naming_it(worker: Worker, entry: str, argument: str) -> None:
    sizes = dict(num_layers=2, num_units=4, input_size=3, num_proj=0)
    sizes[argument] = 10**400
    refused(worker, SIZE_CALLS[entry].format(**sizes), f"{argument} must be <= 2147483647", f"got {HUGE_SHOWN}")


# ---- the ops ---------------------------------------------------------------------------------------------
OP_CALLS = {
    "cudnn_rnn_v3": "cudnn_rnn.cudnn_rnn_v3(x, h, h, params, {attrs})",
    "cudnn_rnn_backprop_v3": "cudnn_rnn.cudnn_rnn_backprop_v3(x, h, h, params, None, x, h, h, None, None, None, "
                             "np.zeros(1, np.float32), {attrs})",
}


@pytest.mark.parametrize("op", sorted(OP_CALLS))
def test_an_op_with_a_million_broadcast_layers_refuses_small_params_at_once(worker: Worker, op: str) -> None:
    # input_h and input_c of shape (10**6, 1, 1) cost nothing (np.broadcast_to): L = 10**6, N = P = I = 1
    refused(worker, f"""
        x = np.zeros((1, 1, 1), np.float32)
        h = np.broadcast_to(np.zeros((1, 1, 1), np.float32), (10**6, 1, 1))
        params = np.zeros(16, np.float32)
        {OP_CALLS[op].format(attrs="")}
        """, "params must have 16000000 elements", "got 16")


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("axis", ["steps", "sequences"])
@pytest.mark.parametrize("op", sorted(OP_CALLS))
def test_an_op_with_more_steps_or_sequences_than_a_c_int_refuses_them_at_once(worker: Worker, op: str, axis: str,
                                                                              time_major: bool) -> None:
    # a broadcast input of 2**40 steps (or sequences) costs nothing; cuDNN's T, B and lengths are C ints
    big = {"steps": (2**40, 1), "sequences": (1, 2**40)}[axis]
    t, b = big
    x_shape = (t, b, 1) if time_major else (b, t, 1)
    h_shape = (1, b, 1) if time_major else (b, 1, 1)
    index = (0 if time_major else 1) if axis == "steps" else (1 if time_major else 0)
    refused(worker, f"""
        x = np.broadcast_to(np.zeros((1, 1, 1), np.float32), {x_shape})
        h = np.broadcast_to(np.zeros((1, 1, 1), np.float32), {h_shape})
        params = np.zeros(cudnn_rnn.cudnn_rnn_params_size(1, 1, 1), np.float32)
        {OP_CALLS[op].format(attrs=f"time_major={time_major}")}
        """, f"input has {2**40} {axis}", f"input.shape[{index}]", "at most 2147483647")


def test_a_layer_refuses_more_steps_than_a_c_int_at_once(worker: Worker) -> None:
    refused(worker, """
        x = np.broadcast_to(np.zeros((1, 1, 3), np.float32), (1, 2**40, 3))
        cudnn_rnn.GRU(3, 2)(x)
        """, f"x has {2**40} steps (T = x.shape[1]); a sequence has at most 2147483647")


@pytest.mark.parametrize("attribute", ["num_proj", "dropout", "seed", "seed2"])
@pytest.mark.parametrize("rnn_mode", ["lstm", "gru"])
@pytest.mark.parametrize("op", sorted(OP_CALLS))
def test_an_op_attribute_of_10_to_the_400_is_refused_naming_it(worker: Worker, op: str, rnn_mode: str,
                                                                attribute: str) -> None:
    message = refused(worker, f"""
        x = np.zeros((1, 1, 1), np.float32)
        h = np.zeros((1, 1, 4), np.float32)
        params = np.zeros(cudnn_rnn.cudnn_rnn_params_size(1, 4, 1, rnn_mode={rnn_mode!r}), np.float32)
        {OP_CALLS[op].format(attrs=f"rnn_mode={rnn_mode!r}, {attribute}=10**400")}
        """, HUGE_SHOWN)
    assert f"{attribute}=" in message or message.startswith(f"{attribute} "), message


# ---- the canonical and format conversions ----------------------------------------------------------------
def test_canonical_conversions_compare_counts_before_walking_the_layers(worker: Worker) -> None:
    refused(worker, "cudnn_rnn.cudnn_rnn_params_to_canonical(10**6, 2, 1, np.zeros(3, np.float32))",
            "params must be 1-D with 47999992 elements", "got shape (3,)")
    refused(worker, "cudnn_rnn.cudnn_rnn_canonical_to_params(10**6, 2, 1, [np.zeros((8, 1))] * 3, [])",
            "weights must have 8000000 entries", "got 3")
    refused(worker, "cudnn_rnn.cudnn_rnn_canonical_to_params(2 * 10**9, 2, 1, [], [])",
            "weights must have 16000000000 entries", "got 0")


@pytest.mark.parametrize("fmt", FORMATS)
def test_formats_refuse_a_huge_layer_count_with_small_tensors_at_once(worker: Worker, fmt: str) -> None:
    # 2e9 layers of one unit: a buffer of 3.2e10 elements could exist, but not these few tensors
    setup = f"""
        config = RNNConfig('gru' if {fmt!r} in ('gru_block_cell', 'mygrad') else 'lstm', 2 * 10**9, 1, 1)
        tensors = {{name: np.zeros(shape, np.float32)
                   for name, shape in convert.expected_shapes({fmt!r}, config.replace(num_layers=1)).items()}}
        """
    refused(worker, setup + f"convert.to_format({fmt!r}, np.zeros(16, np.float32), config)")
    refused(worker, setup + f"convert.from_format({fmt!r}, tensors, config)")
    refused(worker, setup + f"cudnn_rnn.formats.convert_between({fmt!r}, {fmt!r}, tensors, config)")
    other = "torch" if fmt != "torch" else "canonical"
    refused(worker, setup + f"cudnn_rnn.formats.convert_between({fmt!r}, {other!r}, tensors, config)")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_names_a_tensor_or_more_per_layer(fmt: str) -> None:
    """What lets from_format refuse fewer tensors than layers before computing the names."""
    for layers in (1, 2, 3):
        for mode in ("lstm", "gru", "rnn_tanh"):
            for direction in ("unidirectional", "bidirectional"):
                for proj in (0, 2) if mode == "lstm" else (0,):
                    config = RNNConfig(mode, layers, 4, 3, direction=direction, num_proj=proj)
                    if FORMAT_SPECS[fmt].refusal(config) is None:
                        assert len(expected_shapes(fmt, config)) >= layers


def test_a_file_naming_a_layer_far_beyond_the_others_is_refused_at_once(worker: Worker, tmp_path: Path) -> None:
    config = RNNConfig("lstm", 1, 3, 2)
    path = tmp_path / "torch.npz"
    tensors: dict[str, Any] = {name: np.zeros(shape, np.float32)
                               for name, shape in expected_shapes("torch", config).items()}
    np.savez(path, **tensors, weight_ih_l1000000000000=tensors["weight_ih_l0"])
    refused(worker, f"convert.read_file({str(path)!r})", "layer(s) [1, 2, 3, 4, 5, 6, 7, 8] and 999999999991 more "
            "are missing")


# ---- params files and layer states -----------------------------------------------------------------------
def _params_file(path: Path, **fields: Any) -> Path:
    config = {"rnn_mode": "lstm", "num_layers": 1, "num_units": 1, "input_size": 1} | fields
    np.savez(path, params=np.zeros(16, np.float32), config=np.array(json.dumps(config)),
             step=np.array(0, np.int64), format=np.array(1, np.int64))
    return path


@pytest.mark.parametrize("fields, fragments", [
    ({"num_layers": 2**31 - 1, "num_units": 2**31 - 1, "input_size": 2**31 - 1},
     ("num_layers=2147483647, num_units=2147483647", "more than an array can hold")),
    ({"num_layers": 10**18}, ("num_layers must be <= 2147483647", "got 1000000000000000000")),
    ({"num_layers": 10**400}, ("num_layers must be <= 2147483647", f"got {HUGE_SHOWN}")),
    ({"num_units": 10**400}, ("num_units must be <= 2147483647", f"got {HUGE_SHOWN}")),
    ({"num_layers": 2 * 10**9}, ("must be [32000000000] float32",)),
    ({"dropout": 10**400}, (f"dropout must be a finite float in [0, 1); got {HUGE_SHOWN}",)),
], ids=["c-int-sizes", "1e18-layers", "1e400-layers", "1e400-units", "2e9-layers", "1e400-dropout"])
def test_a_params_file_with_impossible_sizes_is_refused_at_once(worker: Worker, tmp_path: Path,
                                                                 fields: dict[str, int], fragments: tuple[str]) -> None:
    path = str(_params_file(tmp_path / "model.npz", **fields))
    refused(worker, f"read_params_file({path!r})", *fragments)
    refused(worker, f"convert.read_file({path!r})", *fragments)
    refused(worker, f"cudnn_rnn.LSTM.load({path!r})", *fragments)
    state = {"config": {"rnn_mode": "lstm", "num_layers": 1, "num_units": 1, "input_size": 1} | fields, "step": 0}
    refused(worker, f"parse_layer_state(dict({state!r}, params=np.zeros(16, np.float32)), 'layers[0]')", *fragments)


def test_an_initial_buffer_too_big_for_memory_fails_before_the_layout(worker: Worker) -> None:
    # 10**9 layers: 1.6e10 float64 elements (128 GB) cannot be allocated under the limit
    refused(worker, "from cudnn_rnn.layers import keras_init_params\n"
                    "keras_init_params(RNNConfig('lstm', 10**9, 1, 1))", error="MemoryError")
