"""Optimisers over flat parameter buffers, and gradient clipping by global norm.

A recurrent layer keeps all its weights in one 1-D ``params`` buffer with a same-shaped
``grad`` buffer, so an optimiser is a few element-wise lines per buffer. The lists given
here may mix that buffer with any other arrays (a dense readout's matrix and bias, say):
every array is updated in place, NumPy or CuPy alike.

Each class's docstring gives its update rule (``g`` the gradient, ``p`` the parameter, ``t`` the
1-based step count): PyTorch's ``torch.optim.SGD`` (dampening 0, no weight decay) and
``torch.optim.Adam`` (no weight decay, no amsgrad). Optimiser state is kept in at least
float32: each step computes in float32 and rounds float16 and bfloat16 parameters once.

``state_dict()`` returns everything a step depends on (the state lists are the optimiser's own
arrays, one per parameter array), and ``load_state_dict`` checks and restores it in place,
hyperparameters included (as PyTorch does)::

    SGD:   {"kind": "SGD", "steps": t, "lr": ..., "momentum": ..., "nesterov": ..., "velocity": [v...]}
    Adam:  {"kind": "Adam", "steps": t, "lr": ..., "betas": [b1, b2], "eps": ...,
            "first_moment": [m...], "second_moment": [s...]}
"""

from __future__ import annotations

import math
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
from numpy.typing import DTypeLike

from ._arrays import Array, array_module, beside, checked_kind, copy_into
from ._checks import checked_count, flag, real_in_range
from .config import DTYPES

__all__ = ["SGD", "Adam", "clip_grad_norm"]


def _positive_float(name: str, value: object) -> float:
    return real_in_range(name, value, 0.0)


def _unit_interval(name: str, value: object) -> float:
    """A float in [0, 1)."""
    return real_in_range(name, value, 0.0, 1.0, low_closed=True)


def _betas(name: str, value: object) -> tuple[float, float]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise TypeError(f"{name} must be a pair (b1, b2); got {value!r}")
    return (_unit_interval(f"{name}[0]", value[0]), _unit_interval(f"{name}[1]", value[1]))


def _array_list(name: str, arrays: Sequence[Array], *, updated: bool = False) -> list[Array]:
    """Check a list of floating NumPy/CuPy arrays (writable ones where ``updated`` in place) and return it as a list."""
    if isinstance(arrays, (str, bytes)) or not isinstance(arrays, Sequence):
        raise TypeError(f"{name} must be a list of arrays; got {type(arrays).__name__}")
    arrays = list(arrays)
    for i, array in enumerate(arrays):
        kind = checked_kind(f"{name}[{i}]", array)
        if array.dtype.kind != "f" and array.dtype.name not in DTYPES:  # (bfloat16 is of NumPy kind "V")
            raise TypeError(f"{name}[{i}] must have a floating dtype; got {array.dtype}")
        if updated and kind == "numpy" and not array.flags.writeable:
            raise ValueError(f"{name}[{i}] is read-only (a broadcast array, or a view of read-only memory), but it "
                             "is updated in place; pass a writable array (np.array(...) copies one)")
    return arrays


def _state_dtype(dtype: DTypeLike) -> np.dtype:
    """float16 and bfloat16 parameters keep float32 optimiser state; wider types keep their own."""
    return np.result_type(dtype, np.float32)


class _Optimizer:
    """Shared plumbing: the parameter list, shape checks of the gradients, the step count, the state dict."""

    #: hyperparameter -> its check (the constructor's), the keys of the state dict besides these tables
    hyperparameters: ClassVar[dict[str, Callable[[str, Any], Any]]] = {}
    #: the per-parameter state lists (one array per parameter array, the state dtype)
    state_lists: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params_list: Sequence[Array], **hyperparameters: Any) -> None:
        """Check ``params_list`` then ``hyperparameters`` (by :attr:`hyperparameters`, in its order) and keep them."""
        self.params_list: list[Array] = _array_list("params_list", params_list, updated=True)
        if not self.params_list:
            raise ValueError("params_list must hold at least one array; got an empty list")
        values = {name: check(name, hyperparameters[name]) for name, check in self.hyperparameters.items()}
        self._check_together(values, "")
        for name, value in values.items():
            setattr(self, name, value)
        self.steps: int = 0

    def _zeros_like_params(self) -> list[Array]:
        """Zero state arrays, each beside its parameter (on its GPU for CuPy)."""
        zeros = []
        for p in self.params_list:
            with beside(p):
                zeros.append(array_module(p=p).zeros(p.shape, dtype=_state_dtype(p.dtype)))
        return zeros

    def step(self, grads_list: Sequence[Array]) -> None:
        """Update every array of ``params_list`` in place from the matching gradient.

        Args:
            grads_list: one gradient per array of ``params_list``, shaped like it, of its kind
                (NumPy or CuPy) and on its device; any floating dtype.

        Raises:
            TypeError: ``grads_list`` is not a list of floating arrays, or mixes array kinds with
                the parameters.
            ValueError: a different number of gradients, or a gradient of another shape.
        """
        grads = _array_list("grads_list", grads_list)
        if len(grads) != len(self.params_list):
            raise ValueError(f"grads_list must have one gradient per parameter array ({len(self.params_list)}); "
                             f"got {len(grads)}")
        for i, (p, g) in enumerate(zip(self.params_list, grads)):
            if tuple(g.shape) != tuple(p.shape):
                raise ValueError(f"grads_list[{i}] must have the shape of params_list[{i}], {tuple(p.shape)}; "
                                 f"got {tuple(g.shape)}")
            array_module(**{f"params_list[{i}]": p, f"grads_list[{i}]": g})
        self.steps += 1
        for i, (p, g) in enumerate(zip(self.params_list, grads)):
            with beside(p):  # the update's temporaries live on p's GPU, whichever is current
                p[...] = self._updated(i, p.astype(_state_dtype(p.dtype)), g.astype(_state_dtype(p.dtype)))

    def _updated(self, i: int, p: Array, g: Array) -> Array:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        values = "".join(f", {name}={getattr(self, name)}" for name in self.hyperparameters)
        return f"{type(self).__name__}({len(self.params_list)} arrays{values})"

    # -- state dict ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a step depends on (the module docstring gives the keys): plain values (tuples as lists) and
        the state lists (the optimiser's own arrays, not copies)."""
        state: dict[str, Any] = {"kind": type(self).__name__, "steps": self.steps}
        for name in self.hyperparameters:
            value = getattr(self, name)
            state[name] = list(value) if isinstance(value, tuple) else value
        state.update({name: list(getattr(self, name)) for name in self.state_lists})
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state dict into this optimiser, in place, hyperparameters included.

        Args:
            state: a ``state_dict()`` of an optimiser of this kind (its arrays NumPy or CuPy).

        Raises:
            ValueError: another kind of optimiser, missing or unexpected keys, a step count that is
                not an integer in [0, 2**63), a hyperparameter its constructor would refuse (out of
                range, NaN, infinite or too large for a float), or state lists whose number or shapes
                do not match ``params_list`` (each named).
            TypeError: a hyperparameter of the wrong type, or state arrays that are not arrays or
                not of the state dtype.
        """
        self.state_loader(state)()

    def state_loader(self, state: dict[str, Any], where: str = "state_dict") -> Callable[[], None]:
        """Check ``state`` as ``load_state_dict`` does, with its errors (``where`` names the source in their
        messages), and return the function that loads it: nothing changes until it runs, so several objects
        can be checked before any is changed."""
        values = self.checked_state(state, where)
        lists = {name: self._checked_list(state[name], where, name, self._list_in_use(name, values))
                 for name in self.state_lists}
        steps = state["steps"]

        def load() -> None:
            for name, value in values.items():
                setattr(self, name, value)
            for name, arrays in lists.items():
                mine = getattr(self, name)
                if len(mine) != len(arrays):  # state a changed hyperparameter brings in or leaves out
                    mine[:] = self._zeros_like_params() if arrays else []
                for target, source in zip(mine, arrays):
                    copy_into(target, source)
            self.steps = int(steps)

        return load

    @classmethod
    def checked_state(cls, state: Any, where: str = "state_dict") -> dict[str, Any]:
        """The hyperparameters of ``state`` by name, after checking everything that needs no parameters to compare
        with: kind, keys, step count, each hyperparameter (as the constructor checks it) and that each state list
        is a list of arrays (empty when the hyperparameters use none). ``where`` names the source in the errors,
        which are ``load_state_dict``'s (a state list that is not a list, or should be empty: ValueError).
        """
        kind = cls.__name__
        expected = {"kind", "steps", *cls.hyperparameters, *cls.state_lists}
        if isinstance(state, dict) and "kind" in state and state["kind"] != kind:
            raise ValueError(f"{where} is the state of a {str(state['kind'])[:40]!r} optimiser; this one is {kind!r}")
        if not isinstance(state, dict) or set(state) != expected:
            keys = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{where}: an {kind} state dict has the keys {sorted(expected)}; got {keys}")
        checked_count(f"{where}['steps']", state["steps"])
        values = {name: check(f"{where}[{name!r}]", state[name]) for name, check in cls.hyperparameters.items()}
        cls._check_together(values, where)
        for name in cls.state_lists:
            arrays = state[name]
            if isinstance(arrays, (str, bytes)) or not isinstance(arrays, Sequence):
                raise ValueError(f"{where}[{name!r}] must be a list of arrays; got {type(arrays).__name__}")
            if arrays and not cls._list_in_use(name, values):
                raise ValueError(f"{where}[{name!r}] must be empty under these hyperparameters; got {len(arrays)} "
                                 "arrays")
            for i, array in enumerate(arrays):
                checked_kind(f"{where}[{name!r}][{i}]", array)
        return values

    @classmethod
    def _check_together(cls, values: dict[str, Any], where: str) -> None:
        """Refuse hyperparameters that are valid alone but not together (none by default)."""

    @classmethod
    def _list_in_use(cls, name: str, values: dict[str, Any]) -> bool:
        """Whether the state list ``name`` holds arrays under hyperparameters ``values`` (else it is empty)."""
        return True

    def _checked_list(self, arrays: Sequence[Array], where: str, name: str, in_use: bool) -> list[Array]:
        """A state list that :meth:`checked_state` passed (empty unless ``in_use``), against ``params_list``."""
        if in_use and len(arrays) != len(self.params_list):
            raise ValueError(f"{where}[{name!r}] must be a list of {len(self.params_list)} arrays (one per parameter "
                             f"array); got {len(arrays)}")
        for i, (array, p) in enumerate(zip(arrays, self.params_list)):
            what = f"{where}[{name!r}][{i}]"
            if tuple(array.shape) != tuple(p.shape):
                raise ValueError(f"{what} must have the shape of params_list[{i}], {tuple(p.shape)}; "
                                 f"got {tuple(array.shape)}")
            if array.dtype != _state_dtype(p.dtype):
                raise TypeError(f"{what} must be {_state_dtype(p.dtype)} (the state dtype of a {p.dtype} "
                                f"parameter); got {array.dtype}")
        return list(arrays)


class SGD(_Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum.

    One step, per array (v starts at zero)::

        v <- momentum * v + g
        p <- p - lr * (g + momentum * v)   if nesterov else   p <- p - lr * v

    Methods (shared with :class:`Adam`): ``step(grads_list)``, ``state_dict()`` and ``load_state_dict(state)``.

    Args:
        params_list: arrays updated in place (e.g. ``[layer.params, w_out, b_out]``).
        lr: learning rate, > 0.
        momentum: in [0, 1); 0 is plain SGD.
        nesterov: use Nesterov momentum (needs momentum > 0).

    Raises:
        TypeError: ``params_list`` is not a list of floating NumPy or CuPy arrays, or a
            hyperparameter has the wrong type (a number that is not real, or a bool, where a float goes).
        ValueError: an empty or read-only ``params_list``, a hyperparameter out of range (NaN,
            infinite or too large for a float included), or nesterov without momentum.
    """

    hyperparameters = {"lr": _positive_float, "momentum": _unit_interval, "nesterov": flag}
    state_lists = ("velocity",)
    lr: float
    momentum: float
    nesterov: bool

    def __init__(self, params_list: Sequence[Array], lr: float, momentum: float = 0.0,
                 nesterov: bool = False) -> None:
        super().__init__(params_list, lr=lr, momentum=momentum, nesterov=nesterov)
        self.velocity: list[Array] = self._zeros_like_params() if self.momentum else []

    @classmethod
    def _check_together(cls, values: dict[str, Any], where: str) -> None:
        if values["nesterov"] and values["momentum"] == 0.0:
            prefix = f"{where}: " if where else ""
            raise ValueError(f"{prefix}nesterov=True needs momentum > 0; got momentum=0.0")

    @classmethod
    def _list_in_use(cls, name: str, values: dict[str, Any]) -> bool:
        return bool(values["momentum"] > 0.0)

    def _updated(self, i: int, p: Array, g: Array) -> Array:
        if not self.momentum:
            return p - self.lr * g
        v = self.velocity[i]
        v[...] = self.momentum * v + g
        direction = g + self.momentum * v if self.nesterov else v
        return p - self.lr * direction


class Adam(_Optimizer):
    """Adam (Kingma & Ba), in PyTorch's formulation.

    One step, per array, at step count t = 1, 2, ...::

        m <- b1 * m + (1 - b1) * g;   s <- b2 * s + (1 - b2) * g**2
        p <- p - lr * (m / (1 - b1**t)) / (sqrt(s / (1 - b2**t)) + eps)

    Methods, and the errors of the arguments (nesterov aside), as :class:`SGD`'s.

    Args:
        params_list: arrays updated in place.
        lr: learning rate, > 0.
        betas: (b1, b2), each in [0, 1): decay rates of the first and second moments.
        eps: > 0, added to the square root of the bias-corrected second moment.
    """

    hyperparameters = {"lr": _positive_float, "betas": _betas, "eps": _positive_float}
    state_lists = ("first_moment", "second_moment")
    lr: float
    betas: tuple[float, float]
    eps: float

    def __init__(self, params_list: Sequence[Array], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        super().__init__(params_list, lr=lr, betas=betas, eps=eps)
        self.first_moment: list[Array] = self._zeros_like_params()
        self.second_moment: list[Array] = self._zeros_like_params()

    def _updated(self, i: int, p: Array, g: Array) -> Array:
        b1, b2 = self.betas
        m, s = self.first_moment[i], self.second_moment[i]
        m[...] = b1 * m + (1.0 - b1) * g
        s[...] = b2 * s + (1.0 - b2) * g * g
        xp = array_module(p=p)
        m_hat = m / (1.0 - b1 ** self.steps)
        s_hat = s / (1.0 - b2 ** self.steps)
        return p - self.lr * m_hat / (xp.sqrt(s_hat) + self.eps)


def clip_grad_norm(grads_list: Sequence[Array], max_norm: float) -> float:
    """Scale all gradients in place so that their global L2 norm is at most ``max_norm``.

    ``total_norm = sqrt(sum over arrays of sum(g**2))`` (accumulated in at least float32). If
    ``total_norm > max_norm`` every gradient is multiplied by ``max_norm / total_norm``; otherwise (and
    when the norm is not finite, left for the caller to notice) nothing changes.

    Args:
        grads_list: the gradients (NumPy or CuPy floating arrays, any shapes), scaled in place.
        max_norm: the largest global norm left unscaled, > 0.

    Returns:
        total_norm before clipping, as a Python float.

    Raises:
        TypeError: ``grads_list`` is not a list of floating arrays, or ``max_norm`` is not a real
            number (or is a bool).
        ValueError: ``max_norm`` is not finite and > 0 (NaN, infinite or too large for a float), or
            a read-only array in ``grads_list``.
    """
    grads = _array_list("grads_list", grads_list, updated=True)
    max_norm = _positive_float("max_norm", max_norm)
    total_sq = 0.0
    for g in grads:
        with beside(g):
            wide = g.astype(_state_dtype(g.dtype))
            total_sq += float((wide * wide).sum())
    total_norm = math.sqrt(total_sq)
    if math.isfinite(total_norm) and total_norm > max_norm:
        scale = max_norm / total_norm
        for g in grads:
            with beside(g):
                g *= scale
    return total_norm
