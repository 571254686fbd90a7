"""Data-parallel gradients through ``cudnn_rnn.jax`` over 2 host devices, against one device on the whole batch.

Run as its own process (XLA_FLAGS must give JAX 2 CPU devices before it starts)::

    XLA_FLAGS=--xla_force_host_platform_device_count=2 python tests/support/jax_data_parallel_job.py

For LSTM and GRU (float64, variable lengths) it prints one line per way, ``<mode> <way> <max abs difference>``:
``shard_map`` (check_vma on, the loss psum-ed) and ``jit`` (inputs sharded over the batch axis), each compared
with the gradients (params, input), the loss and the op's outputs of one device on the whole batch.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import cudnn_rnn
import cudnn_rnn.jax as cj

jax.config.update("jax_enable_x64", True)
BATCH, STEPS, INPUTS, N = 4, 5, 3, 4


def run(params: Any, x: Any, lengths: Any, mode: str) -> tuple[Any, ...]:
    """The op's outputs, batch-major: (output, output_h[, output_c])."""
    h0 = jnp.zeros((x.shape[0], 2, N), x.dtype)
    y, h, c = cj.cudnn_rnn(x, h0, h0 if mode == "lstm" else None, params, lengths, rnn_mode=mode,
                           direction="bidirectional", time_major=False)
    return (y, h) if c is None else (y, h, c)


def loss(params: Any, x: Any, lengths: Any, mode: str) -> Any:
    """The batch's summed squared outputs: a sum over sequences, so shards' losses add up."""
    y, h, *_ = run(params, x, lengths, mode)
    return jnp.sum(y**2) + jnp.sum(h**3)


def main() -> None:
    assert len(jax.devices()) == 2, jax.devices()
    mesh = jax.make_mesh((2,), ("batch",), axis_types=(jax.sharding.AxisType.Explicit,))
    rng = np.random.default_rng(0)
    for mode in ("lstm", "gru"):
        config = cudnn_rnn.RNNConfig(mode, 1, N, INPUTS, direction="bidirectional", dtype="float64")
        params = cj.init_params(config, seed=3)
        x = jnp.asarray(rng.standard_normal((BATCH, STEPS, INPUTS)))
        lengths = jnp.asarray([5, 2, 0, 4], dtype=jnp.int32)
        grad = jax.grad(loss, argnums=(0, 1))
        want = grad(params, x, lengths, mode)

        def local(params: Any, x: Any, lengths: Any, mode: str = mode) -> Any:
            return jax.lax.psum(loss(params, x, lengths, mode), "batch")

        sharded = jax.shard_map(local, mesh=mesh, in_specs=(P(), P("batch"), P("batch")), out_specs=P())
        batch = NamedSharding(mesh, P("batch"))
        xs, ls = jax.device_put(x, batch), jax.device_put(lengths, batch)
        with jax.set_mesh(mesh):
            ways = {"shard_map": jax.jit(jax.grad(sharded, argnums=(0, 1)))(params, xs, ls),
                    "jit": jax.jit(grad, static_argnums=3)(params, xs, ls, mode)}
            values = {"shard_map": jax.jit(sharded)(params, xs, ls), "jit": jax.jit(loss, static_argnums=3)(
                params, xs, ls, mode)}
            outputs = {"shard_map": jax.jit(jax.shard_map(functools.partial(run, mode=mode), mesh=mesh, in_specs=(
                P(), P("batch"), P("batch")), out_specs=P("batch")))(params, xs, ls),
                       "jit": jax.jit(run, static_argnums=3)(params, xs, ls, mode)}
        one = run(params, x, lengths, mode)
        for way, got in ways.items():
            pairs = [*zip(got, want), *zip(outputs[way], one)]
            assert len(pairs) == len(want) + len(one)
            difference = max(float(np.max(np.abs(np.asarray(g) - np.asarray(w)))) for g, w in pairs)
            difference = max(difference, abs(float(values[way]) - float(loss(params, x, lengths, mode))))
            print(mode, way, difference, flush=True)


if __name__ == "__main__":
    main()
