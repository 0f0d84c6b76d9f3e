"""One check for config and input fields, so every bad value is named the same way.

Configs and inputs are validated where they are built, never deep inside a
pass: the error names the owner, the field and the value it got.
"""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = [
    "check_choice",
    "check_fraction",
    "check_instance",
    "check_int",
    "check_nonnegative_float",
    "check_positive_float",
    "is_int",
]


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (``True`` is an int to Python, never to a config)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(owner: str, field: str, value: object, minimum: int | None = None) -> None:
    """Raise ``ValueError`` unless ``value`` is an int (not a bool) ``>= minimum``."""
    if not is_int(value):
        raise ValueError(f"{owner}.{field} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}.{field} must be >= {minimum}, got {value}")


def check_positive_float(owner: str, field: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite number > 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{owner}.{field} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}.{field} must be finite and > 0, got {value}")


def check_nonnegative_float(owner: str, field: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite number >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{owner}.{field} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{owner}.{field} must be finite and >= 0, got {value}")


def check_fraction(owner: str, field: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a number in ``(0, 1]`` (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{owner}.{field} must be a number, got {value!r}")
    if not 0 < value <= 1:
        raise ValueError(f"{owner}.{field} must be in (0, 1], got {value}")


def check_choice(owner: str, field: str, value: object, choices: tuple[object, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{owner}.{field} must be one of {choices}, got {value!r}")


def check_instance(owner: str, field: str, value: object, kind: type) -> None:
    """Raise ``TypeError`` unless ``value`` is a ``kind``."""
    if not isinstance(value, kind):
        raise TypeError(f"{owner}.{field} must be a {kind.__name__}, got {value!r}")
