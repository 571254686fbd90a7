"""Compare the params layout table with cuDNN itself, on this GPU, over the layout-check grid.

For every configuration of ``cudnn_rnn._cudnn._layout_check.layout_check_configs()`` (every mode, 1-3 layers,
both directions, linear/skip input, LSTM projection, each dtype) it asks
cudnnGetRNNWeightSpaceSize and cudnnGetRNNWeightParams and prints OK, the differences, SKIPPED
(a dtype this cuDNN or GPU cannot run) or FAILED with the error; one failing configuration hides
none of the others. Then it
prints cuDNN's answers to the questions public sources leave open (``layout.UNCONFIRMED``) next
to the values the table assumes, so a disagreement says exactly what to change there.

Exit status: 0 when everything agrees, 1 on any difference, 2 without a usable GPU.
Usage: python scripts/check_layout.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from cudnn_rnn import info  # noqa: E402


def main() -> int:
    problem = info.cudnn_backend_problem()
    if problem is not None:
        print(f"check_layout.py needs a CUDA GPU with CuPy and cuDNN 9; here: {problem}", file=sys.stderr)
        return 2
    from cudnn_rnn._cudnn import _layout_check as _cudnn_layout_check
    from cudnn_rnn.layout import UNCONFIRMED

    results = _cudnn_layout_check.check_layout_grid()
    for result in results:
        print(f"{result.verdict:<8}{result.config!r}")
        for line in result.details:
            print("    " + line)
    print(f"\ncuDNN and the layout table: {_cudnn_layout_check.grid_summary(results)}.")
    try:
        facts = _cudnn_layout_check.cudnn_layout_facts()
    except Exception as error:  # the grid is printed already; say why the open questions got no answer
        print(f"cuDNN's answers to layout.UNCONFIRMED: not asked: {type(error).__name__}: {error}")
        return 1
    print(f"cuDNN's answers ({facts.verified_on}):")
    settled = True
    for field in ("projection_position", "skip_input_keeps_input_biases"):
        ours, theirs = getattr(UNCONFIRMED, field), getattr(facts, field)
        settled &= ours == theirs
        print(f"  {field}: cuDNN {theirs!r}; layout.UNCONFIRMED {ours!r}" + ("" if ours == theirs else "  <- change"))
    agree = all(result.verdict in ("OK", "SKIPPED") for result in results)
    return 0 if agree and settled else 1


if __name__ == "__main__":
    sys.exit(main())
