"""cudnn_rnn for PyTorch: the op as a differentiable custom operator, the layers as ``nn.Module`` classes::

    from cudnn_rnn.torch import cudnn_rnn, LSTM, GRU, RNN
    y, h, c = cudnn_rnn(x, h0, c0, params, lengths, rnn_mode="lstm")   # cudnn_rnn.cudnn_rnn_v3 on tensors
    lstm = LSTM(input_size=16, num_units=64, num_layers=2, dropout=0.1)  # one nn.Parameter, ``params``
    y, h, c = lstm(x, lengths)                                          # x [B, T, I]; autograd, torch.compile
    ours = LSTM.from_torch(torch.nn.LSTM(16, 64))                      # its weights; time_major = not batch_first

CPU tensors run the reference backend, CUDA tensors cuDNN, on views of their memory; gradients are
this library's backprop. ``import cudnn_rnn`` never imports torch: import ``cudnn_rnn.torch``.
"""

from ._op import cudnn_rnn
from .modules import GRU, LSTM, RNN

__all__ = ["cudnn_rnn", "LSTM", "GRU", "RNN"]
