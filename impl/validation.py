"""One check for config and input fields, so every bad value is named the same way.

Configs and inputs are validated where they are built, never deep inside a
pass: the error names the owner, the field and the value it got.
"""

from __future__ import annotations

import json
import math
import operator
from fractions import Fraction
from typing import Any, TypeGuard

__all__ = [
    "DEVICES",
    "MAX_JSON_DEPTH",
    "MAX_RETRIES",
    "MAX_SIZE",
    "STARTUP_TIMEOUT_S",
    "TIMEOUT_S",
    "bool_problem",
    "check_bool",
    "check_choice",
    "check_device",
    "check_fraction",
    "check_instance",
    "check_int",
    "check_nonnegative_float",
    "check_optional_int",
    "check_positive_float",
    "check_seconds",
    "device_problem",
    "exact_fraction",
    "fit_problem",
    "index_int",
    "int_problem",
    "is_int",
    "json_value",
    "number_problem",
    "seconds_problem",
    "shown",
]

MAX_SIZE = 1 << 24
"""The most a scheduler size may be (tokens, blocks, sequences: 16,777,216): past any model's
context or any device's KV cache, and still a list Python can allocate at once (4e9 blocks
is a ``MemoryError``, 1e23 an ``OverflowError``)."""

MAX_RETRIES = 1000
"""The most failed passes in a row a request may survive (``runner_retries``): more is a
runner that never recovers, retried for ever."""

TIMEOUT_S = (1.0, 86_400.0)
"""A DP collective's timeout, seconds (``--dp-timeout``): below 1 s a healthy rank's pass
(a busy core, a torch pass on 16 ranks) can outlast it and healthy ranks exclude each
other; above a day it is no timeout (and 1e20 overflows the store's own)."""

STARTUP_TIMEOUT_S = (10.0, 86_400.0)
"""How long ranks may take to meet and to build an engine, seconds (``--dp-startup-timeout``):
the store and torch's rendezvous need seconds of their own, so a floor of 10 s is one the
rendezvous really applies."""

MAX_JSON_DEPTH = 64
"""The deepest nesting a JSON input (a trace, a profile, a ``config.json``) may have: theirs is
3 or 4; a deeper one is refused by name instead of a ``RecursionError``."""


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (``True`` is an int to Python, never to a config)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(
    owner: str, field: str, value: object, minimum: int | None = None, maximum: int | None = None
) -> None:
    """Raise ``ValueError`` unless ``value`` is an int (not a bool) in ``[minimum, maximum]``."""
    why = int_problem(f"{owner}.{field}", value, minimum, maximum)
    if why is not None:
        raise ValueError(why)


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error line stays one short line."""
    try:
        text = repr(value)
    except RecursionError:  # a structure nested past the interpreter's limit
        text = f"<a deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def seconds_problem(label: str, value: object, bounds: tuple[float, float]) -> str | None:
    """Why ``value`` is not a number of seconds in ``bounds`` (``TIMEOUT_S``, ...), or None."""
    why = number_problem(label, value)
    if why is not None:
        return why
    low, high = bounds
    if not low <= value <= high:  # type: ignore[operator]
        return f"{label} must be in [{low:g}, {high:g}] seconds, got {value!r}"
    return None


def check_seconds(owner: str, field: str, value: object, bounds: tuple[float, float]) -> None:
    """Raise ``ValueError`` unless ``value`` is a number of seconds in ``bounds``."""
    why = seconds_problem(f"{owner}.{field}", value, bounds)
    if why is not None:
        raise ValueError(why)


def json_value(text: str | bytes, label: str) -> Any:
    """``text`` parsed as JSON, at most ``MAX_JSON_DEPTH`` deep; else ``ValueError`` naming
    ``label`` (a ``json.JSONDecodeError`` passes through, for callers that word it)."""
    try:
        value = json.loads(text)
    except RecursionError:
        value = None
        depth = MAX_JSON_DEPTH + 1
    else:
        depth = _depth(value)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{label}: nested deeper than {MAX_JSON_DEPTH} levels: refused")
    return value


def _depth(value: object) -> int:
    """How deep ``value``'s lists and objects nest, counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            deepest = max(deepest, d)
            if d <= MAX_JSON_DEPTH:
                todo.extend((x, d + 1) for x in v)
    return deepest


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


def int_problem(
    label: str, value: object, minimum: int | None = None, maximum: int | None = None
) -> str | None:
    """Why ``value`` is not an int (not a bool) in ``[minimum, maximum]``, or None.

    It reads ``"<label> must be ..., got <value>"``: for a field whose label is not
    ``owner.field`` (a JSON key, a trace entry, a vLLM config key) or whose error is
    not a plain ``ValueError`` (a checkpoint's).
    """
    if not is_int(value):
        return f"{label} must be an int, got {value!r}"
    if minimum is not None and value < minimum:
        return f"{label} must be >= {minimum}, got {value}"
    if maximum is not None and value > maximum:
        return f"{label} must be <= {maximum}, got {value}"
    return None


def number_problem(
    label: str, value: object, *, minimum: float | None = None, positive: bool = False
) -> str | None:
    """Why ``value`` is not a finite int or float (not a bool) ``>= minimum`` (``> 0`` if
    ``positive``), or None; worded as ``int_problem``'s."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{label} must be a number, got {value!r}"
    if not math.isfinite(value):
        return f"{label} must be finite, got {value!r}"
    if positive and value <= 0:
        return f"{label} must be > 0, got {value!r}"
    if minimum is not None and value < minimum:
        return f"{label} must be >= {minimum}, got {value!r}"
    return None


def bool_problem(label: str, value: object) -> str | None:
    """Why ``value`` is not a bool (``1`` and ``"yes"`` are not), or None."""
    if not isinstance(value, bool):
        return f"{label} must be a bool, got {value!r}"
    return None


def check_bool(owner: str, field: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a bool."""
    why = bool_problem(f"{owner}.{field}", value)
    if why is not None:
        raise ValueError(why)


def check_optional_int(
    owner: str, field: str, value: object, minimum: int | None = None, maximum: int | None = None
) -> None:
    """Raise ``ValueError`` unless ``value`` is None or an int (not a bool) in range."""
    if value is not None:
        check_int(owner, field, value, minimum, maximum)


def index_int(label: str, value: object) -> int:
    """``value`` as an int if ``operator.index`` takes it (numpy and torch ints too) and it
    is no bool; else ``ValueError`` naming ``label``: an all-reduced slot arrives so."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise ValueError(f"{label} must be an int, got {value!r}")


def exact_fraction(owner: str, field: str, value: object) -> Fraction:
    """``value`` (an int, a float or a ``Fraction``, not a bool) in ``(0, 1]`` as an exact
    ``Fraction``, a float read as the decimal a person wrote; else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise ValueError(f"{owner}.{field} must be a number, got {value!r}")
    if not 0 < value <= 1:
        raise ValueError(f"{owner}.{field} must be in (0, 1], got {value!r}")
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


def fit_problem(label: str, prompt_len: int, output_len: int, max_model_len: int) -> str | None:
    """Why a request of ``prompt_len`` prompt and ``output_len`` output tokens can never fit
    ``max_model_len``, or None: checked before its prompt is built, which for an absurd
    length would not fit in memory either."""
    if prompt_len + output_len > max_model_len:
        return (
            f"{label}: prompt_len + output_len must be <= max_model_len ({max_model_len}), "
            f"got {prompt_len} + {output_len}"
        )
    return None


DEVICES = ("cpu", "cuda", "cuda:N")
"""The torch devices the runners run on (``cuda:N``: the N-th GPU)."""


def device_problem(label: str, value: object) -> str | None:
    """Why ``value`` is not one of ``DEVICES`` (``"tpu"``, ``"cuda:x"``, ``""`` are not), or
    None: checked where a config or flag is read, before torch sees it."""
    if isinstance(value, str):
        kind, sep, index = value.partition(":")
        if value == "cpu" or (kind == "cuda" and (not sep or index.isdigit())):
            return None
    return f"{label} must be cpu, cuda or cuda:N, got {value!r}"


def check_device(owner: str, field: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a device ``device_problem`` accepts."""
    why = device_problem(f"{owner}.{field}", value)
    if why is not None:
        raise ValueError(why)
