"""Building a layer costs its params buffer and little more, however many layers it has.

A layer (and a ``cudnn_rnn.torch`` module) of L layers holds one params buffer and a gradient of the same
size; its initialiser draws a batch of pseudo-layers at a time, and the params layout is arithmetic, not a
table of L*D entries. Each check builds in a fresh Python process (``python -c``) under an address-space
limit (RLIMIT_AS, sized from Linux's /proc/self/statm) of what that process holds after its imports plus
the params buffer plus the allowance (4 times the buffer, at most 150 MB), and reports the build's
tracemalloc peak, the growth of its resident memory and its work: the calls (of Python functions, and of C
functions from Python) that each layer adds to a build, from builds of FEW_LAYERS and MORE_LAYERS layers.
A build that cannot fit is refused at once, before any per-layer work, with a MemoryError that names the
sizes and the bytes needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from cudnn_rnn import cudnn_rnn_params_size

#: the layers of the issue's model, cudnn_rnn.LSTM(3, 4, LAYERS): 64 MB of float32 params
LAYERS = 100_000
#: what the initialiser's temporaries and the gradient may add to the buffer: 4 times it, at most this
MOST_EXTRA = 150 * 10**6
#: the builds whose calls give what one layer adds: (calls of MORE_LAYERS - calls of FEW_LAYERS) / 2000
FEW_LAYERS, MORE_LAYERS = 1_000, 3_000
#: the most calls a layer may add to a build: about 1 (its draws); a layout entry per matrix per layer cost 186
CALLS_PER_LAYER = 8
#: the most calls a refused build may make (about 1,100): far fewer than the 10**6 layers it refuses, which
#: any per-layer work before the refusal would call for one at least each
REFUSAL_CALLS = 20_000

CHILD = r"""
import gc, json, resource, sys, tracemalloc
from pathlib import Path
kind, layers, extra, counted, most = json.loads(sys.argv[1])
import cudnn_rnn
build = cudnn_rnn.LSTM
if kind == "torch":
    import cudnn_rnn.torch
    build = cudnn_rnn.torch.LSTM

def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

class TooMany(BaseException):
    pass

def calls_of(layers, most):
    # the calls that build(3, 4, layers) makes (Python functions, C functions from Python), cut past `most`
    count = [0]
    def profile(frame, event, arg):
        if event == "call" or event == "c_call":
            count[0] += 1
            if count[0] > most:
                sys.setprofile(None)
                raise TooMany
    sys.setprofile(profile)
    try:
        build(3, 4, layers)
    except (MemoryError, TooMany):
        pass
    finally:
        sys.setprofile(None)
    return count[0]

pages = int(Path("/proc/self/statm").read_text().split()[0])
limit = pages * resource.getpagesize() + extra
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
report = {"limit": limit}
try:
    before = rss()
    model = build(3, 4, layers)
    report["rss_growth"] = rss() - before
    del model
    gc.collect()
    tracemalloc.start()
    model = build(3, 4, layers)
    report["peak"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del model
    gc.collect()
    few, more = (calls_of(count, float("inf")) for count in counted)
    report["calls_per_layer"] = (more - few) / (counted[1] - counted[0])
except MemoryError as error:
    report["raised"] = type(error).__name__
    report["message"] = str(error)
    report["calls"] = calls_of(layers, most)  # the same refusal again, its calls counted
print(json.dumps(report))
"""


@dataclass(frozen=True)
class Build:
    """What a child process reported of building ``LSTM(3, 4, layers)``: its tracemalloc peak and resident growth
    in bytes and the calls a layer adds to a build, or the MemoryError it raised and the calls that took."""

    limit: int
    peak: int = 0
    rss_growth: int = 0
    calls_per_layer: float = 0.0
    raised: str = ""
    message: str = ""
    calls: int = 0

    def __str__(self) -> str:
        if self.raised:
            return f"{self.raised} after {self.calls} calls: {self.message!r}"
        return (f"tracemalloc peak {self.peak / 1e6:.1f} MB, resident growth {self.rss_growth / 1e6:.1f} MB, "
                f"{self.calls_per_layer:.2f} calls per layer")


def build_in_child(kind: str, layers: int, extra: int) -> Build:
    """Build ``cudnn_rnn.LSTM(3, 4, layers)`` (``kind="layer"``) or ``cudnn_rnn.torch.LSTM`` (``"torch"``) in a
    fresh process whose address space may grow ``extra`` bytes past what its imports took."""
    arguments = json.dumps([kind, layers, extra, [FEW_LAYERS, MORE_LAYERS], REFUSAL_CALLS])
    done = subprocess.run([sys.executable, "-c", CHILD, arguments], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return Build(**report)


#: the layer, and the PyTorch module (torch is in the test extra)
KINDS = ["layer", "torch"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_hundred_thousand_layers_build_in_their_buffer_and_allowance(kind: str) -> None:
    params = cudnn_rnn_params_size(LAYERS, 4, 3) * 4
    allowed = params + min(4 * params, MOST_EXTRA)
    built = build_in_child(kind, LAYERS, allowed)
    print(f"{kind} LSTM(3, 4, {LAYERS}), {params / 1e6:.1f} MB of params under {allowed / 1e6:.0f} MB more "
          f"address space: {built}")
    assert not built.raised, f"refused under {allowed} bytes more address space: {built}"
    assert built.peak <= allowed, f"tracemalloc peak {built.peak} > {allowed} ({built.peak / params:.1f} x params)"
    assert 0 < built.calls_per_layer <= CALLS_PER_LAYER, str(built)


@pytest.mark.parametrize("kind", KINDS)
def test_a_build_that_cannot_fit_names_num_layers_and_the_bytes_at_once(kind: str) -> None:
    layers = 10**6  # 640 MB of float32 params, under 300 MB more address space
    params = cudnn_rnn_params_size(layers, 4, 3) * 4
    built = build_in_child(kind, layers, 300 * 10**6)
    assert built.raised == "MemoryError", str(built)
    assert 0 < built.calls <= REFUSAL_CALLS, str(built)
    for words in (f"cudnn_rnn.LSTM(input_size=3, num_units=4, num_layers={layers})",
                  f"needs {params} bytes for its params buffer", "as many for its gradient"):
        assert words in built.message, f"{words!r} not in {built.message!r}"
