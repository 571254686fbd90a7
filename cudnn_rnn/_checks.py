"""The checks of single arguments that every module shares, and how messages show a value.

Each refuses with the argument's name, what it must be and what it got, shown short however large
(``10**400`` reads ``1.00e+400 (401 digits)``), and never with anything but ``TypeError`` or
``ValueError`` (no ``OverflowError``)::

    flag("training", value)                    -> bool        True, False or a NumPy bool
    choice("rnn_mode", value, MODES)           -> str         one of the names (keys) given
    one_of("rnn_mode", value, MODES)           -> str         the same, a ValueError for a value of any type
    real_in_range("lr", value, 0.0)            -> float       finite, low < value (< high)
    checked_count("step", value)               -> int         in [0, MAX_COUNT], a file's int64
    path_argument("path", value)               -> str         a str or an os.PathLike, as a str
    path_argument("path", value, layer=True)   -> str         the same, in a layer's words (no bytes path)
    first_outside(lengths, T)                  -> int | None  the index of the first length outside [0, T]
    shown(value)                               -> str         for messages
"""

from __future__ import annotations

import math
import numbers
import os
from fractions import Fraction
from typing import Mapping

import numpy as np

__all__ = ["MAX_COUNT", "flag", "choice", "one_of", "real_in_range", "checked_count", "path_argument", "first_outside",
           "shown"]

#: the largest count (a step counter) a layer, an optimiser or a file holds: an int64
MAX_COUNT = 2**63 - 1

#: integers of more digits are shown in messages as their leading digits and digit count
_SHOWN_DIGITS = 30
#: integers of more bits are shown with their digit count estimated (``str`` of them is slow or refused)
_EXACT_DIGITS_BITS = 12_000


def shown(value: object) -> str:
    """``value`` as error messages show it: short, and never failing however large.

    Integers of more than 30 digits read as their leading digits and digit count, e.g.
    ``1.00e+400 (401 digits)``; other values as their ``repr``, cut at 80 characters.
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        number = int(value)
        magnitude, sign = abs(number), "-" if number < 0 else ""
        if magnitude < 10**_SHOWN_DIGITS:
            return str(number)
        if magnitude.bit_length() <= _EXACT_DIGITS_BITS:
            digits = str(magnitude)
            return f"{sign}{digits[0]}.{digits[1:3]}e+{len(digits) - 1} ({len(digits)} digits)"
        shift = magnitude.bit_length() - 64
        exponent = math.log10(magnitude >> shift) + shift * math.log10(2)
        return f"{sign}~{10 ** (exponent % 1):.2f}e+{int(exponent)} (about {int(exponent) + 1} digits)"
    if isinstance(value, Fraction):
        return f"Fraction({shown(value.numerator)}, {shown(value.denominator)})"
    try:
        text = repr(value)
    except Exception:  # a repr that fails (an int beyond str's digit limit inside) still names the type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else f"{text[:77]}..."


def flag(name: str, value: object) -> bool:
    """``value`` as a bool when it is one (Python or NumPy), else a TypeError naming the argument ``name``
    (``"no"``, 0 and None are not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool; got {type(value).__name__} {shown(value)}")
    return bool(value)


def choice(name: str, value: object, allowed: tuple[str, ...] | Mapping[str, object]) -> str:
    """``value`` when it is one of ``allowed`` (names, or a table's keys); else TypeError (not a str) or ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {tuple(allowed)}; got {type(value).__name__} {value!r}")
    return one_of(name, value, allowed)


def one_of(name: str, value: object, allowed: tuple[str, ...] | Mapping[str, object]) -> str:
    """``value`` when it is one of ``allowed`` (names, or a table's keys); else a ValueError, whatever its type."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}; got {value!r}")
    return value


def real_in_range(name: str, value: object, low: float, high: float = math.inf, *, low_closed: bool = False) -> float:
    """``value`` (any real number but a bool: Python or NumPy ints and floats, Fractions) as a Python float,
    finite and in the range (``low < value < high``; ``low <= value`` if ``low_closed``; ``high`` infinite for
    none).

    Raises:
        TypeError: not a real number, or a bool.
        ValueError: NaN, infinite, too large for a float, or out of range; the message names
            ``name``, the range and the value.
    """
    expected = (f"in {'[' if low_closed else '('}{low:g}, {high:g})" if high < math.inf
                else f"{'>=' if low_closed else '>'} {low:g}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a finite float {expected}; got {type(value).__name__} {shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer (or fraction) beyond any float: outside every finite range
        number = math.inf
    inside = (low <= number if low_closed else low < number) and number < high
    if not (inside and math.isfinite(number)):
        raise ValueError(f"{name} must be a finite float {expected}; got {shown(value)}")
    return number


def checked_count(name: str, value: object) -> int:
    """``value`` (a step count) as a Python int in [0, :data:`MAX_COUNT`], else a ValueError naming ``name`` and
    the value: not an integer (Python or NumPy; a bool is not one), negative, or larger."""
    kind = f"{type(value).__name__} "
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        number = int(value)
        if 0 <= number <= MAX_COUNT:
            return number
        kind = ""
    raise ValueError(f"{name} must be a non-negative integer < 2**63; got {kind}{shown(value)}")


def path_argument(argument: str, path: object, *, layer: bool = False) -> str:
    """``path`` as a str; a TypeError naming ``argument`` for anything but a str or an os.PathLike.

    ``layer``: in a layer's words (its ``load``): the message says "path" and shows the value, and an
    os.PathLike of bytes is refused too.
    """
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if layer and not isinstance(text, str):
        raise TypeError(f"{argument} must be a str or os.PathLike path; got {type(path).__name__} {path!r}")
    if text is None:
        raise TypeError(f"{argument} must be a str or os.PathLike; got {type(path).__name__}")
    return text


def first_outside(lengths: np.ndarray, max_time: int) -> int | None:
    """The index of the first of ``lengths`` (a host int array) outside [0, ``max_time``], or None where all are in
    it (found from their minimum and maximum: the search for the index runs only for a refusal)."""
    if not lengths.size or (int(lengths.min()) >= 0 and int(lengths.max()) <= max_time):
        return None
    return int(np.flatnonzero((lengths < 0) | (lengths > max_time))[0])
