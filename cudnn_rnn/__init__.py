"""cudnn_rnn: cuDNN's fused RNNs for CuPy with TensorFlow CudnnRNNV3 semantics, and the same math on NumPy.

The array type picks the backend: NumPy arrays run the reference backend on the CPU, CuPy
arrays run cuDNN. The ops are TensorFlow's (:func:`cudnn_rnn.cudnn_rnn_v3`,
:func:`cudnn_rnn.cudnn_rnn_backprop_v3`, the params-buffer functions); the layer classes
(:class:`cudnn_rnn.LSTM`, :class:`cudnn_rnn.GRU`, :class:`cudnn_rnn.RNN`) train with them.
The user guides (``docs/guides/``) give a tour.

``import cudnn_rnn`` loads the ops, the layers and what they stand on. The other modules and the cuDNN
settings load on first use (``_LAZY``): ``cudnn_rnn.convert`` or ``from cudnn_rnn import convert``
imports ``cudnn_rnn.convert`` then. The framework bridges load only by their own import
(``import cudnn_rnn.torch``, ``import cudnn_rnn.jax``), as the frameworks they need may be missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import RNNConfig
from .errors import CheckpointError, CudnnError, CudnnNotAvailableError
from .gru_block import gru_block_cell, gru_block_cell_grad, gru_block_cell_weight_grads
from .layers import GRU, LSTM, RNN, HeldRNN, read_model_files_with
from .layout import cudnn_rnn_canonical_to_params, cudnn_rnn_params_size, cudnn_rnn_params_to_canonical
from .ops import RNNGradients, RNNOutputs, cudnn_rnn_backprop_v3, cudnn_rnn_v3

#: the package's version: the one place it is written (pyproject.toml reads it from here when building)
__version__ = "0.1.0"


def _rnns_in(path: str) -> list[HeldRNN]:
    """The RNNs of the model file ``path`` as :func:`cudnn_rnn.convert.read_file` finds them: what a layer's
    ``load`` names when it is given a model file (convert sits above the layers, so it is handed to them)."""
    from .convert import read_file

    return [(found.source, found.fields.get("rnn_mode"), found.describe()) for found in read_file(path)]


read_model_files_with(_rnns_in)


#: the names that load on first use -> the module that defines each (a subpackage is its own module)
_LAZY: dict[str, str] = {
    "checkpoint": "cudnn_rnn.checkpoint",
    "convert": "cudnn_rnn.convert",
    "cpu": "cudnn_rnn.cpu",
    "cuda_graph": "cudnn_rnn.cuda_graph",
    "distributed": "cudnn_rnn.distributed",
    "files": "cudnn_rnn.files",
    "formats": "cudnn_rnn.formats",
    "info": "cudnn_rnn.info",
    "optim": "cudnn_rnn.optim",
    "params_file": "cudnn_rnn.params_file",
    "allow_tf32": "cudnn_rnn._cudnn._settings",
    "tf32_allowed": "cudnn_rnn._cudnn._settings",
    "clear_caches": "cudnn_rnn._cudnn._cache",
    "check_layout_against_cudnn": "cudnn_rnn._cudnn._layout_check",
    "set_num_threads": "cudnn_rnn.cpu",
    "get_num_threads": "cudnn_rnn.cpu",
}

if TYPE_CHECKING:  # what type checkers see of _LAZY (tests/test_import.py checks that both agree)
    from . import checkpoint, convert, cpu, distributed, files, optim
    from . import cuda_graph as cuda_graph, formats as formats, info as info, params_file as params_file
    from ._cudnn._cache import clear_caches
    from ._cudnn._layout_check import check_layout_against_cudnn
    from ._cudnn._settings import allow_tf32, tf32_allowed
    from .cpu import get_num_threads, set_num_threads
else:
    def __getattr__(name: str) -> Any:
        """A name of ``_LAZY``, imported now (and kept: later uses find it here)."""
        if name not in _LAZY:
            raise AttributeError(f"module 'cudnn_rnn' has no attribute {name!r}")
        module = importlib.import_module(_LAZY[name])
        value = module if _LAZY[name] == f"{__name__}.{name}" else getattr(module, name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})


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
