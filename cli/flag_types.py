"""Argument types for numeric flags: a bad value is refused while parsing, before any work.

argparse turns the ``ArgumentTypeError`` into ``densegate CMD: argument --flag: ...``,
one line naming the flag and the value. The range checks are
``densegate.impl.validation``'s, so a flag and the config field it sets say the
same thing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from densegate.impl.validation import int_problem, number_problem

__all__ = ["count", "nonnegative_float", "positive_float"]


def count(minimum: int) -> Callable[[str], int]:
    """An int flag whose value must be ``>= minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an int") from None
        why = int_problem("the value", value, minimum)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return value

    parse.__name__ = f"int >= {minimum}"
    return parse


def _float(text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    why = number_problem("the value", value, minimum=0.0, positive=positive)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (``inf`` and ``nan`` are refused)."""
    return _float(text, positive=True)


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    return _float(text, positive=False)
