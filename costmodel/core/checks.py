"""Checks of the values that enter costmodel, one implementation for the Python API and the command line.

Each raises :class:`CostModelError` naming the argument, the value and what would be valid. Booleans are
not numbers here (``True`` is not a batch of one), floats are not counts (1.7 is not a batch), and NaN or
infinity is never a number.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from costmodel.core.errors import CostModelError
from costmodel.core.vocab import MAX_DIM


def bounded_repr(value) -> str:
    """``repr(value)`` cut short inside: a few items of each list or mapping, a few levels deep, so that a value
    built from aliases (a YAML billion laughs: nine lists of nine lists, nine deep) is quoted at once instead of
    being written out whole (reprlib, the standard library's bounded repr)."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 4, 4, 4, 4
    r.maxstring, r.maxother, r.maxlong = 60, 60, 40
    return r.repr(value)


def excerpt(value, limit: int = 40, quote: bool = True) -> str:
    """``value`` as an error quotes what was given: whole up to ``limit`` characters (a string in quotes where
    ``quote``), else its first 20 and its length, so no error repeats a long input."""
    text = value if isinstance(value, str) else bounded_repr(value)
    if len(text) > limit:
        return f"{text[:20]!r}... ({len(text):,} characters)"
    return repr(text) if quote and isinstance(value, str) else text


def _shown(value) -> str:
    text = bounded_repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def count(name: str, value, least: int = 1, most: int = MAX_DIM, optional: bool = False):
    """An integer from ``least`` to ``most`` (``None`` passes when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or not least <= value <= most:
        raise CostModelError(f"{name} must be an integer from {least} to {most}, got {_shown(value)}")
    return int(value)


def number(
    name: str, value, *, least: float = 0.0, inclusive: bool = False, most: float = math.inf, optional: bool = False
):
    """A finite real number above ``least`` (or at least ``least`` when ``inclusive``), at most ``most``."""
    if value is None and optional:
        return None
    ok = (
        not isinstance(value, bool)
        and isinstance(value, Real)
        and math.isfinite(value)
        and (value >= least if inclusive else value > least)
        and value <= most
    )
    if not ok:
        bound = f"at least {least:g}" if inclusive else ("positive" if least == 0 else f"above {least:g}")
        bound += f" and at most {most:g}" if math.isfinite(most) else ""
        raise CostModelError(f"{name} must be a finite number, {bound}, got {_shown(value)}")
    return float(value)


def text(name: str, value, optional: bool = False):
    """A non-empty string."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise CostModelError(f"{name} must be a non-empty string, got {_shown(value)}")
    return value


def flag(name: str, value) -> bool:
    """``True`` or ``False``, nothing that merely converts to one."""
    if not isinstance(value, bool):
        raise CostModelError(f"{name} must be True or False, got {_shown(value)}")
    return value


def instance(name: str, value, kind: type, what: str):
    """``value`` of type ``kind``; ``what`` says how to get one (``a HardwareProfile from load_profile``)."""
    if not isinstance(value, kind):
        raise CostModelError(f"{name} must be {what}, got {type(value).__name__} {_shown(value)}")
    return value


def names(name: str, value) -> tuple[str, ...]:
    """A list or tuple of strings (a single string is refused: it would be read letter by letter)."""
    if (
        isinstance(value, str)
        or not isinstance(value, (list, tuple, set, frozenset))
        or not all(isinstance(v, str) for v in value)
    ):
        raise CostModelError(f"{name} must be a list of names, got {_shown(value)}")
    return tuple(value)


__all__ = ["count", "number", "text", "flag", "instance", "names"]
