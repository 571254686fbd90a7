"""Building a layer costs its params buffer and little more, however many layers it has.

A layer (and a ``cudnn_rnn.torch`` module) of L layers holds one params buffer and a gradient of the same
size; its initialiser draws a batch of pseudo-layers at a time, and the params layout is arithmetic, not a
table of L*D entries. Each check builds in a fresh Python process (``python -c``) under an address-space
limit (RLIMIT_AS, sized from Linux's /proc/self/statm) of what that process holds after its imports plus
the params buffer plus the allowance (4 times the buffer, at most 150 MB), and reports the build's
seconds, its tracemalloc peak and the growth of its resident memory. A build that cannot fit is refused
at once with a MemoryError that names the sizes and the bytes needed.
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
#: the most seconds its build may take (about 0.5 s on a 2-core machine)
BUILD_S = 3.0
#: what the initialiser's temporaries and the gradient may add to the buffer: 4 times it, at most this
MOST_EXTRA = 150 * 10**6
#: seconds a refusal may take
REFUSAL_S = 1.0

CHILD = r"""
import gc, json, resource, sys, time, tracemalloc
kind, layers, extra = json.loads(sys.argv[1])
import cudnn_rnn
build = cudnn_rnn.LSTM
if kind == "torch":
    import cudnn_rnn.torch
    build = cudnn_rnn.torch.LSTM

def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

pages = int(open("/proc/self/statm").read().split()[0])
limit = pages * resource.getpagesize() + extra
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
report = {"limit": limit}
try:
    before = rss()
    start = time.perf_counter()
    model = build(3, 4, layers)
    report["seconds"] = time.perf_counter() - start
    report["rss_growth"] = rss() - before
    del model
    gc.collect()
    tracemalloc.start()
    model = build(3, 4, layers)
    report["peak"] = tracemalloc.get_traced_memory()[1]
except MemoryError as error:
    report.setdefault("seconds", time.perf_counter() - start)
    report["raised"] = type(error).__name__
    report["message"] = str(error)
print(json.dumps(report))
"""


@dataclass(frozen=True)
class Build:
    """What a child process reported of building ``LSTM(3, 4, layers)``: its seconds, tracemalloc peak and
    resident growth in bytes, or the MemoryError it raised."""

    limit: int
    seconds: float
    peak: int = 0
    rss_growth: int = 0
    raised: str = ""
    message: str = ""

    def __str__(self) -> str:
        if self.raised:
            return f"{self.raised} after {self.seconds:.2f} s: {self.message!r}"
        return (f"built in {self.seconds:.2f} s, tracemalloc peak {self.peak / 1e6:.1f} MB, resident growth "
                f"{self.rss_growth / 1e6:.1f} MB")


def build_in_child(kind: str, layers: int, extra: int) -> Build:
    """Build ``cudnn_rnn.LSTM(3, 4, layers)`` (``kind="layer"``) or ``cudnn_rnn.torch.LSTM`` (``"torch"``) in a
    fresh process whose address space may grow ``extra`` bytes past what its imports took."""
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps([kind, layers, extra])], capture_output=True,
                          text=True, timeout=300)
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
    assert built.seconds < BUILD_S, str(built)
    assert built.peak <= allowed, f"tracemalloc peak {built.peak} > {allowed} ({built.peak / params:.1f} x params)"


@pytest.mark.parametrize("kind", KINDS)
def test_a_build_that_cannot_fit_names_num_layers_and_the_bytes_at_once(kind: str) -> None:
    layers = 10**6  # 640 MB of float32 params, under 300 MB more address space
    params = cudnn_rnn_params_size(layers, 4, 3) * 4
    built = build_in_child(kind, layers, 300 * 10**6)
    assert built.raised == "MemoryError", str(built)
    assert built.seconds < REFUSAL_S, str(built)
    for words in (f"cudnn_rnn.LSTM(input_size=3, num_units=4, num_layers={layers})",
                  f"needs {params} bytes for its params buffer", "as many for its gradient"):
        assert words in built.message, f"{words!r} not in {built.message!r}"
