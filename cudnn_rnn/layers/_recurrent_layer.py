"""The base of the layer classes: :class:`RecurrentLayer` (see :mod:`cudnn_rnn.layers`, which exports it)."""

from __future__ import annotations

import functools
import inspect
import os
import types
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

import numpy as np

from .._arrays import Array, array_module, beside, copy_into, to_host
from .._checks import MAX_COUNT, checked_count, flag, path_argument
from .. import _graph_watch
from ..config import ITEMSIZES, RNNConfig, check_config, dtype_name, numpy_dtype
from ..layout import ParamEntry, params_layout, params_size
from ..ops import DropoutRNG, RNNOutputs, backprop, forward_with_rng
from ._args import ArgumentCheck, size_arguments
from ._initializers import keras_init_params
from ._model_files import model_file_hint

if TYPE_CHECKING:
    from ..formats import Converted

__all__ = ["RecurrentLayer", "constructor_arguments", "SEED2_PERIOD"]

#: (kind, side) of a params entry -> the prefix of its name in :meth:`RecurrentLayer.weights`
_NAME_PREFIX: dict[tuple[str, str], str] = {
    ("matrix", "input"): "W",
    ("matrix", "recurrent"): "R",
    ("matrix", "projection"): "P",
    ("bias", "input"): "bW",
    ("bias", "recurrent"): "bR",
}

#: the step counter (= dropout seed2) stays a non-negative C int
SEED2_PERIOD = 2**31


@functools.lru_cache(maxsize=64)
def _with_seed2(config: RNNConfig, seed2: int) -> RNNConfig:
    """``config.replace(seed2=seed2)``, made once per configuration and seed2 (an inference loop asks for the same one
    at every call)."""
    return config.replace(seed2=seed2)


# ---- the layer --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _SavedForward:
    """What a training forward keeps for its backward."""

    x: Array
    h0: Array
    c0: Array | None
    lengths: Array | None  # None or a NumPy/CuPy int array [B]
    outputs: RNNOutputs
    config: RNNConfig  # the layer's, with the step's seed2
    time_major: bool


def _array_module_named(xp: object) -> types.ModuleType:
    if xp is None:
        return np
    if not isinstance(xp, types.ModuleType) or xp.__name__ not in ("numpy", "cupy"):
        raise TypeError(f"xp must be the numpy or cupy module (or None for numpy); got {xp!r}")
    return xp


def _entry_name(entry: ParamEntry, num_directions: int) -> str:
    layer, reverse = divmod(entry.pseudo_layer, num_directions)
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    prefix = _NAME_PREFIX[entry.kind, entry.side]
    return prefix + suffix if entry.side == "projection" else f"{prefix}_{entry.gate}{suffix}"


def _memory_refusal(cls: type, config: RNNConfig, error: MemoryError) -> str:
    """What the constructor of ``cls`` says when its buffers cannot be allocated (``error``, NumPy's or CuPy's
    refusal): the call (its sizes), the bytes its params buffer and gradient need, and ``error``'s words."""
    elements = params_size(config)
    size = elements * ITEMSIZES[config.dtype]
    name = f"{cls.__module__.partition('.')[0]}.{cls.__qualname__}"  # cudnn_rnn.LSTM for the library's classes
    return (f"{name}({', '.join(constructor_arguments(config))}) needs {size} bytes for its params buffer "
            f"({elements} elements of {config.dtype}) and as many for its gradient, more than could be allocated "
            f"({str(error) or type(error).__name__}); fewer num_layers or num_units, or a narrower dtype, need less")


def constructor_arguments(config: RNNConfig) -> list[str]:
    """``config`` as a layer's constructor arguments for a repr: the sizes, then each other one not at its default."""
    c = config
    optional = {"dropout": c.dropout, "input_mode": c.input_mode, "dtype": c.dtype, "seed": c.seed, "algo": c.algo}
    defaults = inspect.signature(RecurrentLayer).parameters
    return size_arguments(c) + [f"{name}={value!r}" for name, value in optional.items()
                                if value != defaults[name].default]


#: a constructor argument -> what it is, for the Args of each layer class's docstring (:func:`_constructor_doc`)
_ARGUMENTS: dict[str, str] = {
    "input_size": "I, the width of each input step.",
    "num_units": "N, the width of each cell's state.",
    "num_layers": "L, the number of stacked layers.",
    "rnn_mode": '``"lstm"``, ``"gru"``, ``"rnn_tanh"`` or ``"rnn_relu"``.',
    "activation": '``"tanh"`` (rnn_mode ``"rnn_tanh"``) or ``"relu"`` (``"rnn_relu"``).',
    "bidirectional": "D = 2 if True.",
    "num_proj": "P < N to project an LSTM's emitted state (0: none).",
    "dropout": "in [0, 1), on the outputs of every layer but the last, while training.",
    "input_mode": '``"linear_input"``, ``"skip_input"`` (needs I == N) or ``"auto_select"``.',
    "dtype": '``"float16"``, ``"float32"``, ``"float64"`` or ``"bfloat16"`` (or that NumPy dtype;\n'
             "bfloat16 is ``ml_dtypes.bfloat16`` and computes in float32).",
    "xp": "numpy (the default; reference backend) or cupy (cuDNN).",
    "seed": "initialisation and dropout seed (a C int).",
    "unit_forget_bias": "put 1.0 in an LSTM's forget-gate recurrent bias bR_f (bW_f stays 0).",
    "algo": "cuDNN's algorithm (``\"standard\"``, the persistent ones or ``\"auto\"``; see\n"
            ":data:`cudnn_rnn.config.ALGOS`); the same math whichever runs.",
}

#: the Raises of every layer class's docstring
_RAISES = """
    Raises:
        TypeError: a flag that is not a bool, a size that is not an integer, an unsupported dtype, or an
            ``xp`` that is not numpy or cupy.
        ValueError: an unknown mode string (or ``activation``), a size that is not positive or above a C
            int, a params buffer no array can hold, or an impossible combination (see
            :class:`cudnn_rnn.RNNConfig`).
        MemoryError: a params buffer (or its gradient) that an array can hold but this machine cannot
            allocate; the message names the sizes (``num_layers``, ...) and the bytes needed (a buffer
            too big is refused at once, before any layer is initialised).
    """


def _constructor_doc(cls: type) -> str:
    """``cls``'s docstring followed by the Args of its own constructor (from :data:`_ARGUMENTS`) and the Raises
    that every layer constructor shares."""
    names = list(inspect.signature(cls).parameters)
    args = [f"        {name}: " + _ARGUMENTS[name].replace("\n", "\n            ") for name in names]
    return (cls.__doc__ or "").rstrip() + "\n\n    Args:\n" + "\n".join(args) + "\n" + _RAISES


class RecurrentLayer:
    """A multi-layer cuDNN RNN with its own params buffer; the base of LSTM, GRU and RNN.

    The subclasses' constructors are the way in: each takes the arguments that serve its modes and
    builds the layer through this one, which takes ``rnn_mode`` itself.

    Attributes:
        config: the ``RNNConfig`` (``seed`` is the layer's seed).
        params: 1-D [params_size] buffer in cuDNN's layout, ``config.dtype``, on ``xp``.
        grad: same shape; ``backward`` ADDS into it, ``zero_grad`` clears it.
        xp: the array module (numpy -> reference backend, cupy -> cuDNN).
        step: number of training forwards so far; on NumPy it is the dropout seed2 of the
            next one, so masks change every step and a run is reproducible from ``seed`` alone.
            On cuDNN the masks come from the layer's own RNG state, set up from (``seed``,
            ``step``) at the first training forward on the GPU and advancing from step to step
            (saved by :meth:`state_dict`).
    """

    #: the modes this class can hold (``load`` and ``from_params`` check them)
    modes: ClassVar[tuple[str, ...]] = ()
    #: rnn_mode -> the class that holds it: each class that names its own ``modes`` registers them (first wins)
    _classes: ClassVar[dict[str, type["RecurrentLayer"]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for mode in cls.__dict__.get("modes", ()):
            RecurrentLayer._classes.setdefault(mode, cls)
        if "__init__" in cls.__dict__:
            cls.__doc__ = _constructor_doc(cls)

    def __init__(self, input_size: int, num_units: int, num_layers: int = 1, *, rnn_mode: str,
                 bidirectional: bool = False, num_proj: int = 0, dropout: float = 0.0,
                 input_mode: str = "linear_input", dtype: object = "float32", xp: types.ModuleType | None = None,
                 seed: int = 0, unit_forget_bias: bool = False, algo: str = "standard") -> None:
        direction = "bidirectional" if flag("bidirectional", bidirectional) else "unidirectional"
        forget_bias = flag("unit_forget_bias", unit_forget_bias)
        config = RNNConfig(rnn_mode, num_layers, num_units, input_size, input_mode=input_mode, direction=direction,
                           num_proj=num_proj, dropout=dropout, seed=seed, seed2=0, dtype=dtype_name(dtype), algo=algo)
        module = _array_module_named(xp)
        try:  # a host gradient first: a build that cannot hold both buffers is refused before any draw
            grad = np.zeros(params_size(config), numpy_dtype(config.dtype)) if module is np else None
            host = keras_init_params(config, seed=config.seed, unit_forget_bias=forget_bias)
            self._attach(config, module, host, step=0, grad=grad)
        except MemoryError as error:
            raise MemoryError(_memory_refusal(type(self), config, error)) from None

    def _attach(self, config: RNNConfig, xp: types.ModuleType, params: Array, step: int,
                grad: Array | None = None) -> None:
        self.config = config
        self.xp = xp
        self.params: Array = xp.asarray(params)
        self.grad: Array = grad
        if grad is None:
            with beside(self.params):  # CuPy makes new arrays on the current GPU: the gradient goes beside the params
                # zeros, not zeros_like: NumPy's zeros are the system's zeroed pages, taken up as backward writes them
                self.grad = xp.zeros(self.params.shape, dtype=self.params.dtype)
        self.step = step
        self._layout = params_layout(config)
        self._saved: _SavedForward | None = None
        self._dropout_rng = DropoutRNG()  # cuDNN's masks: seeded at the first GPU training forward, then advancing

    # -- per-matrix views ------------------------------------------------------------------------
    def named_views(self, buffer: Array) -> dict[str, Array]:
        """Views of every matrix and bias inside ``buffer`` (``params``, ``grad`` or alike), by name.

        Names: ``W_<gate>_l<layer>[_reverse]`` [N, width] input matrices, ``R_<gate>_l...`` [N, P]
        recurrent matrices, ``P_l...`` [P, N] projection, ``bW_<gate>_l...`` / ``bR_<gate>_l...``
        [N] biases; gates in cuDNN order (lstm i, f, g, o; gru r, u, n; rnn h).

        Args:
            buffer: [params_size]: a buffer in this layer's layout.

        Returns:
            The views by name, in buffer order; writes through a view change the buffer.
        """
        d = self.config.num_directions
        layout = self._layout
        return {_entry_name(e, d): layout.view(buffer, e) for e in layout.weights + layout.biases}

    def weights(self) -> dict[str, Array]:
        """:meth:`named_views` of ``params``."""
        return self.named_views(self.params)

    def grads(self) -> dict[str, Array]:
        """:meth:`named_views` of ``grad``."""
        return self.named_views(self.grad)

    # -- forward / backward ----------------------------------------------------------------------
    def forward(self, x: Array, lengths: Array | Sequence[int] | None = None, h0: Array | None = None,
                c0: Array | None = None, *, time_major: bool = False,
                training: bool = True) -> tuple[Array, Array, Array | None]:
        """Run the RNN over a batch of sequences, shaped as the table of :mod:`cudnn_rnn.layers` says.

        Args:
            x: the input sequences, of the layer's dtype and array module.
            lengths: None (every sequence has length T), or [B] ints in [0, T] (a list or an
                int32/int64 array); outputs past a sequence's length are 0.
            h0: initial hidden states; None means zeros.
            c0: initial cell states (LSTM only); None means zeros.
            time_major: the layout of x, y and the states.
            training: apply dropout (its masks as ``step`` says) and keep what :meth:`backward`
                needs, then ``step`` += 1. With False, no dropout, nothing kept, ``step`` unchanged.

        Returns:
            (y, h, c): the output sequence and each sequence's final states (c None for GRU/RNN).

        Raises:
            TypeError: ``x``, ``h0`` or ``c0`` is not an array of this layer's array module and
                dtype; ``lengths`` is neither a list of ints nor an int32/int64 array; ``time_major``
                or ``training`` is not True or False.
            ValueError: ``x`` is not 3-D or has another feature count than ``input_size``; ``c0``
                given to a GRU or RNN; ``h0``/``c0`` of another shape (the other layout's named);
                ``lengths`` not one value in [0, T] per sequence; a training forward at ``step``
                2**63 - 1 (the step after it would not fit a saved file). Each message is in the layer's
                terms (``input_size``, ``num_units``, ``num_layers``, ``bidirectional``, ``dtype``).
        """
        config = self.config
        time_major, training = flag("time_major", time_major), flag("training", training)
        if training and self.step >= MAX_COUNT:  # the step after it could be neither saved nor loaded
            raise ValueError(f"step must stay a non-negative integer < 2**63: a training forward at step "
                             f"{self.step} is refused (set step to a smaller count, e.g. step % 2**31, "
                             f"the dropout seed2 it stands for)")
        check = ArgumentCheck(config, self.xp)
        batch, max_time = check.inputs(x, h0, c0, time_major)
        caller_lengths = lengths
        lengths = check.lengths(lengths, batch, max_time)
        state = (config.num_pseudo_layers, batch) if time_major else (batch, config.num_pseudo_layers)
        with beside(self.params):  # default states on the params' GPU, whichever is current
            if h0 is None:
                h0 = self.xp.zeros((*state, config.state_size), dtype=x.dtype)
            if config.has_cell and c0 is None:
                c0 = self.xp.zeros((*state, config.num_units), dtype=x.dtype)
        if lengths is not caller_lengths:  # a list became an array; an array goes to the op as it is
            _graph_watch.saw_call(caller_lengths, x)  # a CUDA graph being recorded watches the caller's list
        call_config = _with_seed2(config, self.step % SEED2_PERIOD)
        outputs = forward_with_rng(call_config, x, h0, c0, self.params, lengths, time_major=time_major,
                                   is_training=training, dropout_rng=self._dropout_rng)
        if training:
            self._saved = _SavedForward(x, h0, c0, lengths, outputs, call_config, time_major)
            self.step += 1
        else:
            self._saved = None
        return outputs.output, outputs.output_h, (outputs.output_c if config.has_cell else None)

    __call__ = forward

    def backward(self, dy: Array | None, dh: Array | None = None,
                 dc: Array | None = None) -> tuple[Array, Array, Array | None]:
        """Backpropagate through the last training forward.

        Side effect: ``grad += d loss / d params`` (accumulates across calls until
        :meth:`zero_grad`). The forward's saved arrays are released, so each training
        forward supports one backward.

        Args:
            dy: d loss / d y, shaped like y (None means zeros; rows past a length are ignored).
            dh: d loss / d h (final hidden states), shaped like h; None means zeros.
            dc: d loss / d c (LSTM final cell states); None means zeros. Must be None for GRU/RNN.

        Returns:
            (dx, dh0, dc0 or None): gradients of the loss with respect to x, h0 and c0, shaped
            like them.

        Raises:
            RuntimeError: no training forward since the last backward.
            ValueError: ``dc`` given to a GRU or RNN, or a gradient shaped unlike its output (y, h
                or c of the last training forward).
            TypeError: a gradient that is not an array of this layer's array module and dtype.
        """
        saved = self._saved
        if saved is None:
            raise RuntimeError("backward needs a preceding forward(..., training=True) "
                               "(each forward supports one backward)")
        out = saved.outputs
        ArgumentCheck(self.config, self.xp).gradients(dy, dh, dc, out.output, out.output_h, out.output_c)
        grads = backprop(saved.config, saved.x, saved.h0, saved.c0, self.params, saved.lengths, out.output,
                         out.output_h, out.output_c, dy, dh, dc, out.reserve_space, out.host_reserved,
                         time_major=saved.time_major, params_grad=self.grad)  # grad += d loss / d params, in place
        self._saved = None
        return grads.input_backprop, grads.input_h_backprop, (grads.input_c_backprop if self.config.has_cell else None)

    def zero_grad(self) -> None:
        """Set ``grad`` to zero (in place)."""
        with beside(self.grad):
            self.grad[...] = 0

    # -- persistence and export -------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write params, configuration and step counter to ``path``, exactly that path, as a params file
        (:mod:`cudnn_rnn.params_file`, which says how it is written); :meth:`load` restores an equal layer."""
        from ..files.params_file import write_params_file  # (params_file, formats: loaded where a method needs them)

        write_params_file(path, self.params, self.config, self.step)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, xp: types.ModuleType | None = None) -> "RecurrentLayer":
        """Read a layer written by :meth:`save` onto ``xp`` (numpy by default, or cupy).

        ``RecurrentLayer.load`` returns whichever class was saved; ``LSTM.load`` (etc.) also
        checks that the file holds that kind of layer.

        Args:
            path: a file written by :meth:`save` (or a converted model, see
                :mod:`cudnn_rnn.params_file`).
            xp: the array module of the new layer: numpy (None, the default) or cupy.

        Raises:
            ValueError: not a whole layer file (for a model file :func:`cudnn_rnn.convert.read_file`
                reads, the message says how to load the RNN it holds), another layer kind, or params
                not matching the config.
            TypeError: ``path`` is not a str or os.PathLike, or ``xp`` is not numpy or cupy.
            OSError: the file cannot be read (FileNotFoundError for a missing one).
        """
        from ..files.params_file import read_params_file

        path = path_argument("path", path, layer=True)
        try:
            saved = read_params_file(path)
        except ValueError:
            classes = {mode: layer_cls.__name__ for mode, layer_cls in RecurrentLayer._classes.items()}
            hint = model_file_hint(path, None if cls is RecurrentLayer else cls.__name__, classes)
            if hint:  # (what a params file's reader missed in it says nothing of use here)
                raise ValueError(f"{path!r} is not a cudnn_rnn params file (a saved layer or a converted "
                                 f"model){hint}") from None
            raise
        return cls._from_saved(saved.config, saved.params, saved.step, xp, repr(path), "load")

    @classmethod
    def from_params(cls, params: Array, config: RNNConfig, *, xp: types.ModuleType | None = None,
                    step: int = 0) -> "RecurrentLayer":
        """A new layer of ``config`` holding a copy of the params buffer ``params``.

        The way in for weights that come from elsewhere: a converted file
        (:meth:`cudnn_rnn.convert.FoundRNN.to_layer` calls this), :func:`cudnn_rnn.convert.from_format`,
        or another layer's ``params``. ``RecurrentLayer.from_params`` builds the class ``config``
        names; ``LSTM.from_params`` (etc.) also checks that ``config`` is of that kind.

        Args:
            params: 1-D [params_size(config)] array of ``config.dtype`` (NumPy or CuPy), in
                cuDNN's layout (:mod:`cudnn_rnn.layout`). It is copied, never kept.
            config: the :class:`~cudnn_rnn.config.RNNConfig` the buffer belongs to (its
                ``dropout`` and ``seed`` become the layer's).
            xp: the layer's array module (numpy or cupy); by default that of ``params``.
            step: the training step counter to start from (the next dropout seed2).

        Raises:
            TypeError: ``config`` is not an RNNConfig, ``params`` not an array, ``xp`` not numpy/cupy.
            ValueError: ``params`` has another size or dtype than ``config`` needs; ``config`` is of
                another mode than ``cls`` holds; ``step`` is not a non-negative int.
        """
        config = check_config(config)
        own = array_module(params=params)  # a TypeError for anything but an array
        module = own if xp is None else _array_module_named(xp)
        ArgumentCheck(config, module).params(params)
        step = checked_count("step", step)
        with beside(params):  # a CuPy copy stays on the params' GPU
            copy = params.copy() if module is own else to_host(params)  # crossing kinds copies anyway
        return cls._from_saved(config, copy, step, module, "config", "from_params")

    def state_dict(self) -> dict[str, Any]:
        """Everything that makes this layer what it is, for :mod:`cudnn_rnn.checkpoint`.

        Returns:
            A dict of the configuration's fields, the step counter, the params buffer and the
            dropout RNG state of a layer trained on cuDNN::

                {"config": {"rnn_mode": ..., ..., "seed": ..., "dtype": ...},   # RNNConfig's fields
                 "step": int,                                                  # the dropout stream's position
                 "params": params,                                             # this layer's own buffer, not a copy
                 "dropout_rng": None or {"device": str, "states": uint8 [S]}}  # cuDNN's RNG state (see below)

            ``dropout_rng`` is None on NumPy and before the first training forward with dropout on
            a GPU. Otherwise it holds cuRAND's state (the layer's own device array) and the GPU
            model and cuDNN it was drawn on: a layer that loads it there resumes the same masks;
            elsewhere its masks start anew from (seed, step), with a warning.
        """
        from ..files.params_file import config_fields

        return {"config": config_fields(self.config), "step": self.step, "params": self.params,
                "dropout_rng": self._dropout_rng.state()}

    def load_state_dict(self, state: dict[str, Any], *, keep_seed: bool = False) -> None:
        """Take the params (copied into this layer's buffer, in place), step and seed of ``state``.

        The layer keeps its own ``algo`` (how cuDNN computes, not what): a state saved with
        another algorithm loads.

        Args:
            state: what :meth:`state_dict` returns (its params NumPy or CuPy, on any device).
            keep_seed: keep this layer's own dropout seed instead of the saved one (data-parallel
                ranks that each draw their own dropout masks).

        Raises:
            ValueError: ``state`` is malformed, or its configuration differs from this layer's in
                anything but the seed and the algorithm (each differing field is named).
            TypeError: ``state``'s params is not a NumPy or CuPy array.
        """
        self.state_loader(state, keep_seed=keep_seed)()

    def state_loader(self, state: dict[str, Any], *, keep_seed: bool = False,
                     where: str = "state_dict") -> Callable[[], None]:
        """Check ``state`` as :meth:`load_state_dict` does and return the function that loads it.

        Nothing changes until the returned function runs, so several objects can be checked
        before any is changed. ``state``, ``keep_seed`` and the errors are those of
        :meth:`load_state_dict`; ``where`` names the source in error messages.

        Returns:
            A function of no arguments that loads ``state`` into this layer.
        """
        from ..files.params_file import CONFIG_FIELDS, parse_layer_state

        saved = parse_layer_state(state, where)
        seed = self.config.seed if keep_seed else saved.config.seed
        # cuDNN's RNG state is the run's own: a layer that keeps its seed draws its own masks, and NumPy has none
        rng_state = None if keep_seed or self.xp is np else state.get("dropout_rng")
        config = replace(saved.config, algo=self.config.algo, seed=seed)
        differing = [f"{name}={getattr(saved.config, name)!r} there, {getattr(self.config, name)!r} here"
                     for name in CONFIG_FIELDS if name not in ("seed", "algo")
                     and getattr(saved.config, name) != getattr(self.config, name)]
        if differing:
            raise ValueError(f"{where} holds a layer of another configuration than this {type(self).__name__}: "
                             + "; ".join(differing))

        def load() -> None:
            copy_into(self.params, saved.params)
            self.config, self.step, self._saved = config, saved.step, None
            self._dropout_rng.load(rng_state)

        return load

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], *, xp: types.ModuleType | None = None) -> "RecurrentLayer":
        """A new layer (of the class its configuration names) holding a copy of ``state`` on ``xp``: ``state`` as
        :meth:`load_state_dict` takes and refuses it (another kind of layer than ``cls``'s, too), ``xp`` as for
        :meth:`load`."""
        from ..files.params_file import parse_layer_state

        saved = parse_layer_state(state, "state_dict")
        params = np.array(to_host(saved.params))  # a copy of its own, whatever the state's array was
        layer = cls._from_saved(saved.config, params, saved.step, xp, "state_dict", "from_state_dict")
        if layer.xp is not np:
            layer._dropout_rng.load(state.get("dropout_rng"))
        return layer

    @classmethod
    def _from_saved(cls, config: RNNConfig, params: Array, step: int, xp: types.ModuleType | None,
                    where: str, method: str) -> "RecurrentLayer":
        """A layer of the class ``config`` names, holding ``params`` (taken, not copied) on ``xp``;
        ``where`` and ``method`` name the source and the caller in the refusal of another class."""
        module = _array_module_named(xp)
        layer_cls = RecurrentLayer._classes[config.rnn_mode]
        if cls is not RecurrentLayer and not issubclass(layer_cls, cls):
            raise ValueError(f"{where} holds a {layer_cls.__name__} (rnn_mode={config.rnn_mode!r}); "
                             f"{cls.__name__}.{method} cannot read it (use RecurrentLayer.{method})")
        layer = object.__new__(layer_cls)
        layer._attach(config, module, params, step)
        return layer

    def export(self, fmt: str, allow_approximation: bool = False) -> Converted:
        """:func:`cudnn_rnn.convert.to_format` of this layer's params and configuration: the weights in format
        ``fmt``, with that function's ``allow_approximation``, result and errors."""
        from ..formats import to_format

        return to_format(fmt, self.params, self.config, allow_approximation=allow_approximation)

    # -- description -----------------------------------------------------------------------------
    def _extra_repr(self) -> list[str]:
        return constructor_arguments(self.config)

    def __repr__(self) -> str:
        details = ", ".join(self._extra_repr())
        return (f"{type(self).__name__}({details}) <{self.params.size} params on {self.xp.__name__}, "
                f"step {self.step}>")


RecurrentLayer.__doc__ = _constructor_doc(RecurrentLayer)
