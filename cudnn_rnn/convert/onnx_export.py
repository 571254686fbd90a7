"""Write a runnable ONNX model that computes what :func:`cudnn_rnn.cudnn_rnn_v3` computes.

The graph mirrors the op's signature (inference, no dropout)::

    inputs   X              [T, B, I]      ([B, T, I] with time_major=False)
             sequence_lens  int32 [B]      each in [0, T]
             initial_h      [L*D, B, N]    ([B, L*D, N] with time_major=False)  } with_initial_state=True
             initial_c      [L*D, B, N]    (LSTM)                                } (else zeros)
    outputs  Y              [T, B, D*N]    ([B, T, D*N]), zero past each sequence's length
             Y_h            [L*D, B, N]    ([B, L*D, N]), state after each sequence's last step
                                           (the initial state for a sequence of length 0)
             Y_c            [L*D, B, N]    (LSTM)

One ``LSTM`` / ``GRU`` (``linear_before_reset=1``) / ``RNN`` node per layer, ``direction``
"bidirectional" where the configuration is, whose weights are the initializers
``layer_{l}/W``, ``layer_{l}/R``, ``layer_{l}/B`` of the ``onnx`` format. Between layers the
node's Y [T, D, B, N] is transposed to [T, B, D, N] and reshaped to [T, B, D*N], the next
layer's input. LSTM projection (num_proj) cannot be expressed by ONNX's LSTM node and is
refused.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from .._arrays import Array, to_host
from ..config import RNNConfig, check_config
from ..files import write_bytes
from ..formats import describe, to_format
from ..formats import onnx as onnx_format

if TYPE_CHECKING:  # onnx is imported only when a model is written
    import onnx

__all__ = ["export_onnx", "DEFAULT_OPSET"]

#: the opset written unless asked otherwise (ONNX Runtime has run it since 1.12)
DEFAULT_OPSET = 17
#: the oldest opset whose Slice takes its bounds as inputs, which the graph uses
MIN_OPSET = 10

DIRECTIONS: dict[int, str] = {1: "forward", 2: "bidirectional"}

#: params dtype -> the oldest opset whose LSTM, GRU and RNN take it (the others run from MIN_OPSET)
DTYPE_MIN_OPSET: dict[str, int] = {"bfloat16": 22}

#: the dtypes ONNX Runtime's CPU LSTM, GRU and RNN kernels take (a model of another one is written, with a warning)
ORT_CPU_DTYPES: tuple[str, ...] = ("float16", "float32")


def export_onnx(params: Array, config: RNNConfig, path: str | os.PathLike[str], *, time_major: bool = True,
                opset: int = DEFAULT_OPSET, with_initial_state: bool = True) -> Any:
    """Write ``params`` of ``config`` as a runnable ONNX model to ``path``.

    Args:
        params: the ``[params_size]`` params buffer (NumPy or CuPy) of ``config``; its dtype is
            the model's.
        config: the configuration (dropout and seeds are ignored: the model is inference).
        path: where to write the ``.onnx`` file (written atomically).
        time_major: the layout of X, Y and the states, as in :func:`cudnn_rnn.cudnn_rnn_v3`:
            X ``[T, B, I]`` and Y ``[T, B, D*N]`` when True, ``[B, T, I]`` and ``[B, T, D*N]``
            when False.
        opset: the ONNX opset to write, from ``MIN_OPSET`` (10) to the newest the installed
            onnx knows; bfloat16 params need 22 or newer.
        with_initial_state: whether the graph takes initial_h (and initial_c) ``[L*D, B, N]``;
            else they are zeros.

    Returns:
        The ``onnx.ModelProto`` written (already checked with ``onnx.checker``).

    Warns:
        UserWarning: params are float64 or bfloat16 (ONNX Runtime's CPU RNN kernels do not run them).

    Raises:
        ValueError: a projection (num_proj > 0), params of the wrong shape, or an opset out of
            range (bfloat16 params need opset >= 22).
        TypeError: ``params`` is not a NumPy or CuPy float array, or ``config`` is not an
            :class:`~cudnn_rnn.RNNConfig`.
        ImportError: the onnx package is missing.
    """
    try:
        import onnx as onnx_module
        from onnx import helper, numpy_helper
    except ImportError as error:  # pragma: no cover - exercised only where onnx is absent
        raise ImportError("export_onnx needs the 'onnx' package: pip install onnx") from error

    config = check_config(config)
    refusal = onnx_format.refusal(config)
    if refusal:
        raise ValueError(f"export_onnx: {refusal}")
    if (isinstance(opset, bool) or not isinstance(opset, int)
            or not MIN_OPSET <= opset <= onnx_module.defs.onnx_opset_version()):
        raise ValueError(f"opset must be an int in [{MIN_OPSET}, {onnx_module.defs.onnx_opset_version()}]; "
                         f"got {opset!r}")
    weights = {name: to_host(value) for name, value in to_format("onnx", params, config).value.items()}
    dtype = np.dtype(params.dtype).name
    if opset < DTYPE_MIN_OPSET.get(dtype, MIN_OPSET):
        raise ValueError(f"export_onnx: {dtype} params need opset >= {DTYPE_MIN_OPSET[dtype]} (the first whose LSTM, "
                         f"GRU and RNN take {dtype}); got opset={opset}")
    if dtype not in ORT_CPU_DTYPES:
        warnings.warn(f"export_onnx: the model is {dtype}, but ONNX Runtime's CPU LSTM, GRU and RNN kernels take only "
                      "float32 (and float16); convert params to float32 first to run it there",
                      UserWarning, stacklevel=2)
    graph, constants = _graph(config, time_major, with_initial_state,
                              helper.np_dtype_to_tensor_dtype(np.dtype(params.dtype)))
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in {**weights, **constants}.items())
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="cudnn_rnn",
                              ir_version=helper.find_min_ir_version_for(opsets),  # readable by older runtimes
                              doc_string=f"cudnn_rnn_v3 inference: {describe(config)}, time_major={time_major}")
    onnx_module.checker.check_model(model)
    write_bytes(path, model.SerializeToString())  # atomically: a kill leaves no torn model
    return model


def _graph(config: RNNConfig, time_major: bool, with_initial_state: bool,
           elem_type: int) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The graph (its initializers aside), and the small int64 initializers its nodes take besides the weights."""
    from onnx import TensorProto, helper

    nodes: list[onnx.NodeProto] = []
    constants: dict[str, np.ndarray] = {}
    d, n = config.num_directions, config.num_units

    def constant(name: str, values: list[int], dtype: type = np.int64) -> str:
        constants[name] = np.asarray(values, dtype=dtype)
        return name

    def node(op: str, inputs: list[str], outputs: list[str], **attributes: Any) -> None:
        nodes.append(helper.make_node(op, inputs, outputs, name=outputs[0], **attributes))

    def value_info(name: str, first: int | str, width: int) -> onnx.ValueInfoProto:
        """A [first, B, width] input or output ([B, first, width] batch-major)."""
        shape = [first, "B", width] if time_major else ["B", first, width]
        return helper.make_tensor_value_info(name, elem_type, shape)

    def to_time_major(name: str) -> str:
        """Transpose a batch-major [B, T or L*D, F] input to [T or L*D, B, F] (no-op when time-major)."""
        if time_major:
            return name
        node("Transpose", [name], [f"{name}_time_major"], perm=[1, 0, 2])
        return f"{name}_time_major"

    def to_caller_layout(name: str, output: str) -> None:
        node("Identity" if time_major else "Transpose", [name], [output], **({} if time_major else {"perm": [1, 0, 2]}))

    states = ["initial_h", "initial_c"] if config.has_cell else ["initial_h"]
    inputs = [value_info("X", "T", config.input_size),
              helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, ["B"])]
    if with_initial_state:
        inputs += [value_info(s, config.num_pseudo_layers, n) for s in states]
    op, attributes = onnx_format.node_attributes(config)
    layer_input = to_time_major("X")
    state_inputs = {s: to_time_major(s) for s in states} if with_initial_state else {}
    final: dict[str, list[str]] = {s: [] for s in ("Y_h", "Y_c")[:len(states)]}
    for layer in range(config.num_layers):
        node_states = []
        for state in states:
            if not state_inputs:
                node_states.append("")
                continue
            sliced = f"layer_{layer}/{state}"
            node("Slice", [state_inputs[state], constant(f"layer_{layer}/state_start", [layer * d]),
                           constant(f"layer_{layer}/state_end", [(layer + 1) * d]), constant("state_axis", [0])],
                 [sliced])
            node_states.append(sliced)
        node_outputs = [f"layer_{layer}/Y"] + [f"layer_{layer}/{out}" for out in final]
        weights = [onnx_format.key(layer, field) for field in ("W", "R", "B")]
        node(op, [layer_input, *weights, "sequence_lens", *node_states], node_outputs,
             direction=DIRECTIONS[d], hidden_size=n, **attributes)
        for out, name in zip(final, node_outputs[1:]):
            final[out].append(name)
        node("Transpose", [node_outputs[0]], [f"layer_{layer}/Y_tbdn"], perm=[0, 2, 1, 3])
        node("Reshape", [f"layer_{layer}/Y_tbdn", constant("sequence_shape", [0, 0, d * n])], [f"layer_{layer}/output"])
        layer_input = f"layer_{layer}/output"
    to_caller_layout(layer_input, "Y")
    outputs = [value_info("Y", "T", d * n)]
    if state_inputs:  # ONNX Runtime zeroes the final state of a length-0 sequence; cudnn_rnn_v3 keeps it
        node("Equal", ["sequence_lens", constant("zero_length", [0], np.int32)], ["is_empty"])
        node("Reshape", ["is_empty", constant("state_mask_shape", [1, -1, 1])], ["is_empty_state"])
    for (out, names), state in zip(final.items(), states):
        node("Concat", names, [f"{out}_all_layers"], axis=0)
        if state_inputs:
            node("Where", ["is_empty_state", state_inputs[state], f"{out}_all_layers"], [f"{out}_time_major"])
        else:
            node("Identity", [f"{out}_all_layers"], [f"{out}_time_major"])
        to_caller_layout(f"{out}_time_major", out)
        outputs.append(value_info(out, config.num_pseudo_layers, n))
    return helper.make_graph(nodes, "cudnn_rnn_v3", inputs, outputs), constants
