"""cudnn_rnn: cuDNN's fused RNNs for CuPy with TensorFlow CudnnRNNV3 semantics, and the same math on NumPy.

The array type picks the backend: NumPy arrays run the reference backend on the CPU, CuPy
arrays run cuDNN. The ops are TensorFlow's (:func:`cudnn_rnn.cudnn_rnn_v3`,
:func:`cudnn_rnn.cudnn_rnn_backprop_v3`, the params-buffer functions); the layer classes
(:class:`cudnn_rnn.LSTM`, :class:`cudnn_rnn.GRU`, :class:`cudnn_rnn.RNN`) train with them.
The user guides (``docs/guides/``) give a tour.
"""

from ._cudnn_cache import clear_caches
from ._cudnn_layout_check import check_layout_against_cudnn
from ._cudnn_settings import allow_tf32, tf32_allowed
from .config import RNNConfig
from .cpu import get_num_threads, set_num_threads
from .errors import CheckpointError, CudnnError, CudnnNotAvailableError
from .gru_block import gru_block_cell, gru_block_cell_grad, gru_block_cell_weight_grads
from .layers import GRU, LSTM, RNN
from .layout import cudnn_rnn_canonical_to_params, cudnn_rnn_params_size, cudnn_rnn_params_to_canonical
from .ops import RNNGradients, RNNOutputs, cudnn_rnn_backprop_v3, cudnn_rnn_v3

from . import checkpoint, convert, cpu, distributed, files, optim  # noqa: E402  (subpackages of the public API)

from ._version import __version__ as __version__

__all__ = [
    "LSTM",
    "GRU",
    "RNN",
    "checkpoint",
    "convert",
    "cpu",
    "distributed",
    "files",
    "optim",
    "RNNConfig",
    "RNNOutputs",
    "RNNGradients",
    "CudnnError",
    "CudnnNotAvailableError",
    "CheckpointError",
    "cudnn_rnn_params_size",
    "cudnn_rnn_v3",
    "cudnn_rnn_backprop_v3",
    "cudnn_rnn_params_to_canonical",
    "cudnn_rnn_canonical_to_params",
    "gru_block_cell",
    "gru_block_cell_grad",
    "gru_block_cell_weight_grads",
    "allow_tf32",
    "tf32_allowed",
    "clear_caches",
    "set_num_threads",
    "get_num_threads",
    "check_layout_against_cudnn",
]
