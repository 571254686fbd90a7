"""The reserve-space check: which training forward a reserve_space belongs to, checked before backprop
without waiting for the device. This module is its one owner::

    key = ForwardKey(backend, config, max_time, batch, time_major, lengths)   one forward call
    buffer(out, xp, dtype, elements)            a backend's forward: the array its training reserve fills
    header(key), write_header(reserve, key), header_only(xp, dtype, key)     the forward writes the header
    host_reserved = record(reserve, key)        ops, after every forward: one way to record
    check(reserve, host_reserved, key)          ops, before every backprop: every refusal
    check_array(reserve, key)                   a bridge's backprop from its own residual: the array alone

A reserve_space is ``[header | payload]``: the payload is the backend's; the header
(:data:`HEADER_BYTES`, keeping the payload aligned for cuDNN) starts with the key's 8-byte
:meth:`ForwardKey.header_tag`, written bit for bit by the backend's forward. :func:`record` keeps the
key's :meth:`ForwardKey.fingerprint` twice more: as ``host_reserved`` (returned to the caller, TF's
output) and in the records (reserve array -> fingerprint, held weakly, by identity).

:func:`check` compares ``host_reserved`` when given, and the records when the reserve_space is the
very array a forward returned; only another array (a copy, a view, an unpickled array) has its header
read, which on CuPy waits for the device. A training step that passes its forward's own reserve_space
never waits. Any mismatch is a ValueError: a reserve of another configuration, shape or layout never
reaches a backend.

The fingerprint covers everything about the call, the seeds included; the header tag is what the
backend's backprop depends on: the fingerprint for the reference backend (its backprop draws the masks
again from the seeds); for cuDNN the seeds left out and the acting dropout kept (its masks are in the
reserve), so that a cached plan holds one header for every seed, written with one device copy.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from numpy.typing import DTypeLike

from ._arrays import Array, array_kind, to_host
from .config import RNNConfig, numpy_dtype

__all__ = ["HEADER_BYTES", "ForwardKey", "header_elements", "header", "header_view", "write_header", "header_only",
           "buffer", "payload", "read_header", "record", "recorded_fingerprint", "check", "check_array"]

HEADER_BYTES = 256
_TAG_BYTES = 8

#: The backends whose backprop reads the dropout masks from the reserve rather than drawing them from the seeds.
_MASKS_IN_RESERVE = frozenset({"cudnn"})

#: id(reserve array) -> (weak reference to it, the fingerprint of the forward that returned it)
_records: dict[int, tuple[weakref.ref[Array], bytes]] = {}


@dataclass(frozen=True, eq=False)
class ForwardKey:
    """One forward call, as far as its reserve is concerned."""

    backend: str          # "reference" or "cudnn": whose reserve it is
    config: RNNConfig
    max_time: int
    batch: int
    time_major: bool
    lengths: np.ndarray   # host [B]

    @functools.cached_property
    def fingerprint(self) -> bytes:
        """8 bytes for everything about the call: attributes with the seeds, shapes, layout, lengths."""
        return self._digest(self.config)

    @property
    def header_tag(self) -> bytes:
        """The 8 bytes the reserve's header starts with: what the backend's backprop depends on."""
        if self.backend not in _MASKS_IN_RESERVE:
            return self.fingerprint
        return self._digest(self.config.replace(seed=0, seed2=0, dropout=self.config.inter_layer_dropout))

    def _digest(self, config: RNNConfig) -> bytes:
        digest = hashlib.blake2b(digest_size=_TAG_BYTES)
        digest.update(_described(config))
        digest.update(repr((self.backend, self.max_time, self.batch, bool(self.time_major))).encode())
        digest.update(np.ascontiguousarray(self.lengths, dtype=np.int64).tobytes())
        return digest.digest()


@functools.lru_cache(maxsize=256)
def _described(config: RNNConfig) -> bytes:
    """``repr(config)`` as bytes, which a fingerprint digests (made once per configuration: every call digests it)."""
    return repr(config).encode()


# ==== the header, written by the forward =====================================================
def header_elements(dtype: DTypeLike) -> int:
    """Number of elements of ``dtype`` the header occupies."""
    return HEADER_BYTES // np.dtype(dtype).itemsize


def header(key: ForwardKey) -> np.ndarray:
    """The whole header of ``key``'s reserve as host bytes: its header tag, then zeros (uint8 [HEADER_BYTES])."""
    values = np.zeros(HEADER_BYTES, dtype=np.uint8)
    values[:_TAG_BYTES] = np.frombuffer(key.header_tag, dtype=np.uint8)
    return values


def header_view(reserve: Array) -> Array:
    """The header of ``reserve`` as uint8 [HEADER_BYTES] (a view): the cuDNN backend copies its plan's into it."""
    return reserve[:header_elements(reserve.dtype)].view(np.uint8)


def write_header(reserve: Array, key: ForwardKey) -> None:
    """Write ``key``'s header into a host ``reserve`` (the reference backend's forward)."""
    header_view(reserve)[...] = header(key)


def header_only(xp: Any, dtype: DTypeLike, key: ForwardKey) -> Array:
    """A reserve that is only ``key``'s header (a training forward with T == 0 or B == 0)."""
    return xp.asarray(header(key)).view(dtype)


def buffer(out: Mapping[str, Array] | None, xp: Any, dtype: DTypeLike, payload_elements: int) -> Array:
    """A training reserve of a header and ``payload_elements``: the caller's ``out["reserve_space"]`` where it is
    that long or longer (its front is the reserve, and it is returned whole), else a new array."""
    elements = header_elements(dtype) + payload_elements
    given = None if out is None else out.get("reserve_space")
    return given if given is not None and given.shape[0] >= elements else xp.empty(elements, dtype=dtype)


def payload(reserve: Array) -> Array:
    """The backend's part of ``reserve`` (everything after the header)."""
    return reserve[header_elements(reserve.dtype):]


def read_header(reserve: Array) -> bytes:
    """The tag stored in ``reserve``'s header (on CuPy a device-to-host copy: it waits for the device)."""
    return to_host(header_view(reserve)[:_TAG_BYTES]).tobytes()


# ==== record and check =======================================================================
def record(reserve: Array, key: ForwardKey) -> np.ndarray:
    """After a forward: remember its ``reserve`` (this very array object) as ``key``'s; returns host_reserved.

    host_reserved is the fingerprint as int8 [8]. An inference forward's reserve is empty and is
    not remembered: backprop refuses it for being empty.
    """
    fingerprint = key.fingerprint
    if reserve.size:
        address = id(reserve)

        def forget(ref: weakref.ref[Array]) -> None:  # runs as the array dies, before its id can be reused
            if _records.get(address, (None,))[0] is ref:
                _records.pop(address, None)

        _records[address] = (weakref.ref(reserve, forget), fingerprint)
    return np.array(np.frombuffer(fingerprint, dtype=np.int8))  # a writable copy of its own


def recorded_fingerprint(reserve: Array) -> bytes | None:
    """The fingerprint :func:`record` kept for this very array, or None."""
    entry = _records.get(id(reserve))
    return entry[1] if entry is not None and entry[0]() is reserve else None


def check(reserve: Array, host_reserved: Any, key: ForwardKey) -> None:
    """Before backprop: raise unless ``reserve`` (and ``host_reserved``, when given) come from the forward ``key``.

    TypeError for a reserve_space that is not an array of the input's dtype or a host_reserved
    that is not an array; ValueError for one that is not 1-D, is empty (an inference forward's),
    is shorter than a header, or belongs to another call. ``host_reserved`` None or empty is not
    checked; when the header is read: the module docstring.
    """
    check_array(reserve, key)
    if host_reserved is not None:
        if array_kind(host_reserved) is None:
            raise TypeError("host_reserved must be None or the forward's int8 array; "
                            f"got {type(host_reserved).__name__}")
        # its shape first: a huge (broadcast) array is refused before any copy
        fits = host_reserved.dtype == np.int8 and tuple(host_reserved.shape) == (len(key.fingerprint),)
        if host_reserved.size and not (fits and to_host(host_reserved).tobytes() == key.fingerprint):
            raise ValueError("host_reserved does not belong to this forward call (expected the int8 fingerprint "
                             f"of {len(key.fingerprint)} bytes returned by cudnn_rnn_v3); got dtype "
                             f"{host_reserved.dtype}, shape {tuple(host_reserved.shape)}")
    known = recorded_fingerprint(reserve)
    matches = known == key.fingerprint if known is not None else read_header(reserve) == key.header_tag
    if not matches:
        raise ValueError("reserve_space was made by a different forward call (configuration, attributes, shapes, "
                         "layout or sequence_lengths differ); pass the reserve_space of the matching cudnn_rnn_v3 call")


def check_array(reserve: Array, key: ForwardKey) -> None:
    """Raise unless ``reserve`` could be a training reserve of ``key``'s call: a 1-D array of its dtype, a header long.

    Reads nothing from the array. :func:`check` starts with it; a framework bridge whose reserve is
    its own forward's residual in the same graph relies on it alone (``ops.backprop(..., from_residual=True)``).
    """
    if reserve is None:
        raise TypeError("reserve_space must be the forward's reserve_space array; got None")
    if reserve.ndim != 1:
        raise ValueError(f"reserve_space must be a 1-D array; got shape {tuple(reserve.shape)} ({reserve.ndim}-D)")
    dtype = numpy_dtype(key.config.dtype)
    if reserve.dtype != dtype:
        raise TypeError(f"reserve_space must have the dtype of input ({dtype}); got {reserve.dtype}")
    if reserve.shape[0] == 0:
        raise ValueError("reserve_space is empty: the forward ran with is_training=False, which keeps nothing "
                         "for backprop; run the forward with is_training=True")
    if reserve.shape[0] < header_elements(reserve.dtype):
        raise ValueError(f"reserve_space has {reserve.shape[0]} elements, fewer than any forward call "
                         "writes; pass the reserve_space returned by cudnn_rnn_v3")
