"""cudnn_rnn for JAX: the fused RNN op on ``jax.Array``\\ s, under ``jax.jit``, ``jax.grad`` and ``jax.shard_map``.

::

    import cudnn_rnn, cudnn_rnn.jax
    config = cudnn_rnn.RNNConfig("lstm", num_layers=1, num_units=N, input_size=I)
    params = cudnn_rnn.jax.init_params(config, seed=0)             # jax.Array [params_size]
    y, h, c = cudnn_rnn.jax.cudnn_rnn(x, h0, c0, params, lengths)   # cudnn_rnn.cudnn_rnn_v3's semantics
    jax.grad(loss)(params, ...)                                     # the library's backprop (a custom_vjp)

It runs as ``jax.experimental.buffer_callback`` calls on XLA's own buffers (CPU: the reference
backend; CUDA: cuDNN on XLA's stream). ``import cudnn_rnn`` alone never imports JAX; this needs the
``jax`` extra (and ``cuda12``/``cuda13`` for a GPU).
"""

from ._op import cudnn_rnn, init_params

__all__ = ["cudnn_rnn", "init_params"]
