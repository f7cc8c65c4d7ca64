"""Checks of one config value: ``check(field, value)`` raises ``ValueError`` naming the dotted field.

The vocabulary of the training config's validator (:func:`ssl_geometry.trainer.validate_config`) and of the
objective table's hyper-parameters (:class:`ssl_geometry.objectives.Hyper`), one definition for both: each
constructor returns a check, and a refused value reads ``"<field>: expected <what>, got <value>."``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Collection

__all__ = ["POSITIVE", "UNIT", "boolean", "choice", "fail", "integer", "number", "sequence", "text"]

#: ``check(field, value)``: returns ``None`` or raises ``ValueError`` naming ``field``.
Check = Callable[[str, Any], None]


def fail(field: str, expected: str, value) -> None:
    """Raise ``ValueError("<field>: expected <expected>, got <value!r>.")``."""
    raise ValueError(f"{field}: expected {expected}, got {value!r}.")


def integer(lo: int, *, also: Collection[int] = ()) -> Check:
    """An int ``>= lo`` (or one of ``also``); bools are not ints here."""

    def check(field, v):
        if isinstance(v, bool) or not isinstance(v, int) or (v < lo and v not in also):
            fail(field, f"an integer >= {lo}" + "".join(f" or {a}" for a in also), v)

    return check


def number(lo: float, hi: float = math.inf, *, lo_open: bool = False, hi_open: bool = False) -> Check:
    """A finite number in the interval from ``lo`` to ``hi`` (open ends as given)."""

    def check(field, v):
        ok = (
            not isinstance(v, bool)
            and isinstance(v, (int, float))
            and math.isfinite(v)
            and ((v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi))
        )
        if not ok:
            fail(field, f"a finite number in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}", v)

    return check


def boolean(field: str, v) -> None:
    """``True`` or ``False`` (not 0/1)."""
    if not isinstance(v, bool):
        fail(field, "True or False", v)


def choice(options: Collection) -> Check:
    """One of ``options`` (read when the check runs, so a live collection stays current)."""

    def check(field, v):
        if v not in tuple(options):
            fail(field, f"one of {sorted(options)}", v)

    return check


def sequence(item: Check, length: int | None = None) -> Check:
    """A list or tuple (of ``length`` values when given), each value checked by ``item`` as ``field[i]``."""

    def check(field, v):
        if not isinstance(v, (tuple, list)) or (length is not None and len(v) != length):
            fail(field, f"a list of {length or 'any number of'} values", v)
        for i, x in enumerate(v):
            item(f"{field}[{i}]", x)

    return check


def text(field: str, v) -> None:
    """A string."""
    if not isinstance(v, str):
        fail(field, "a string", v)


#: A finite number > 0.
POSITIVE = number(0, lo_open=True)
#: A finite number in [0, 1].
UNIT = number(0, 1)
