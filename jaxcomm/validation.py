"""Config validation in one place: every experiment config checks its fields with these.

Each check raises ``ValueError("<field> must be <allowed>, got <value>")`` at
construction, before any data is read or anything compiles; :func:`named_fields` makes a config refuse a
field it does not have, naming the closest one.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def named_fields(cls: type) -> type:
    """A config dataclass whose constructor refuses an unknown field by name, with the closest field and the
    list (a bare dataclass says only "unexpected keyword argument"). Put it above ``@dataclass``."""
    init, names = cls.__init__, [f.name for f in dataclasses.fields(cls) if f.init]

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        for key in kwargs:
            if key not in names:
                raise TypeError(f"{cls.__name__} has no field {key!r}{did_you_mean(key, names) or '.'} "
                                f"Its fields: {', '.join(names)}")
        init(self, *args, **kwargs)

    cls.__init__ = checked
    return cls


def did_you_mean(key: str, names: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the name of ``names`` closest to a mistyped ``key``, or "" if none is close."""
    close = difflib.get_close_matches(key, list(names), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def takes_keyword(fn: Callable, name: str) -> bool:
    """Whether ``fn`` can be called with the keyword argument ``name`` (a parameter of that name, or
    ``**kwargs``); False for a callable whose signature cannot be read (a builtin)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any((p.name == name and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
               or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def require(ok: bool, field: str, allowed: str, value: Any) -> None:
    """Raises ``ValueError`` naming ``field``, what is allowed and ``value`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{field} must be {allowed}, got {value!r}")


def is_int(value: Any) -> bool:
    """An integer and not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number and not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def integer(field: str, value: Any, *, low: int | None = None, high: int | None = None) -> None:
    """An integer in ``[low, high]`` (either bound optional)."""
    allowed = "an integer" + (f" >= {low}" if low is not None and high is None else "") + (
        f" in [{low}, {high}]" if low is not None and high is not None else "") + (
        f" <= {high}" if low is None and high is not None else "")
    require(is_int(value) and (low is None or value >= low) and (high is None or value <= high), field, allowed, value)


def positive(field: str, value: Any) -> None:
    """A real number > 0 (learning rates, temperatures)."""
    require(is_real(value) and value > 0, field, "a number > 0", value)


def probability(field: str, value: Any, *, below_one: bool = False) -> None:
    """A probability in [0, 1] (or [0, 1) with ``below_one``)."""
    ok = is_real(value) and 0.0 <= value and (value < 1.0 if below_one else value <= 1.0)
    require(ok, field, "a probability in [0, 1)" if below_one else "a probability in [0, 1]", value)


def one_of(field: str, value: Any, choices: Sequence[Any]) -> None:
    """One of ``choices``."""
    require(value in tuple(choices), field, f"one of {tuple(choices)}", value)


def widths(field: str, value: Any) -> None:
    """A non-empty tuple of layer widths >= 1."""
    require(isinstance(value, tuple) and len(value) >= 1 and all(is_int(w) and w >= 1 for w in value), field,
            "a non-empty tuple of integers >= 1", value)


def scalar(text: str) -> int | float | str:
    """``text`` as an int, else a float, else the string itself (command-line values without a declared type)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
