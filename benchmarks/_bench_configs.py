"""What the benchmarks share: the configuration of one benchmark (bench_cpu.py, bench_gpu.py) and
how a run's JSON record is written under ``benchmarks/results/`` (every benchmark).

The scripts import it by name (``from _bench_configs import ...``) with their own folder on ``sys.path``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudnn_rnn.files import write_bytes

#: where the committed records of benchmark runs live
RESULTS = Path(__file__).resolve().parent / "results"


def write_record(kind: str, record: dict[str, Any], quick: bool, folder: Path = RESULTS) -> Path:
    """Write ``record`` (with its ISO ``date``) as ``{folder}/{kind}_{YYYYMMDDTHHMMSS}[_quick].json`` (``folder``:
    ``results/`` unless given)."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = record["date"].replace(":", "").replace("-", "")[:15]
    path = folder / f"{kind}_{stamp}{'_quick' if quick else ''}.json"
    write_bytes(path, (json.dumps(record, indent=2) + "\n").encode())  # whole or not at all
    checkout, resolved = RESULTS.parent.parent, path.resolve()
    print(f"recorded {resolved.relative_to(checkout) if resolved.is_relative_to(checkout) else path}")
    return path

#: gates per cell: G in the FLOP count and in the activations cuDNN keeps
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


@dataclass(frozen=True)
class Bench:
    """One configuration: float32, every sequence of length T, I = H unless ``input_size`` is given,
    ``dropout`` between layers in training (0: none)."""

    mode: str
    max_time: int
    batch: int
    hidden: int
    layers: int = 1
    bidirectional: bool = False
    input_size: int = 0
    dropout: float = 0.0

    @property
    def inputs(self) -> int:
        return self.input_size or self.hidden

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    def name(self) -> str:
        mode = self.mode.upper() + (" bi" if self.bidirectional else "")
        sizes = f"I=H={self.hidden}" if self.inputs == self.hidden else f"I={self.inputs} H={self.hidden}"
        dropout = f" dropout={self.dropout:g}" if self.dropout else ""
        return f"{mode} T={self.max_time} B={self.batch} {sizes} L={self.layers}{dropout}"

    def flops(self) -> float:
        """Forward + backward FLOPs (forward x 3), anchors.md section 3.1."""
        forward = 0.0
        for layer in range(self.layers):
            width = self.inputs if layer == 0 else self.directions * self.hidden
            forward += (self.directions * 2 * self.batch * GATES[self.mode] * self.hidden * (width + self.hidden)
                        * self.max_time)
        return 3 * forward

    def activation_bytes(self, itemsize: int = 4) -> int:
        """What cuDNN would keep for backprop: per layer and direction T*B*(G*N + N + P) (+ N for GRU)."""
        n = p = self.hidden
        per_step = GATES[self.mode] * n + n + p + (n if self.mode == "gru" else 0)
        return self.layers * self.directions * self.max_time * self.batch * per_step * itemsize
