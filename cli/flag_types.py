"""Argument types for flags: a bad value is refused while parsing, before any work.

argparse turns the ``ArgumentTypeError`` into ``densegate CMD: argument --flag: ...``,
one line naming the flag and the value. The range checks are
``densegate.impl.validation``'s, so a flag and the config field it sets say the
same thing. Output paths are checked here too, so a run never ends by failing
to write what it computed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from densegate.impl.validation import device_problem, int_problem, number_problem, seconds_problem

__all__ = [
    "count",
    "device",
    "nonnegative_float",
    "output_dir",
    "output_file",
    "positive_float",
    "seconds",
]


def count(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An int flag whose value must be ``>= minimum`` (and ``<= maximum``, when a larger one
    would only run until killed, printing nothing)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an int") from None
        why = int_problem("the value", value, minimum, maximum)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return value

    parse.__name__ = f"int >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
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


def seconds(bounds: tuple[float, float]) -> Callable[[str], float]:
    """A number of seconds within ``bounds`` (``validation.TIMEOUT_S``, ...)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        why = seconds_problem("the value", value, bounds)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return value

    parse.__name__ = f"seconds in [{bounds[0]:g}, {bounds[1]:g}]"
    return parse


def device(text: str) -> str:
    """A torch device the runners run on: cpu, cuda or cuda:N (``tpu`` is refused here)."""
    why = device_problem("the device", text)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def _writable_dir(path: Path) -> str | None:
    """Why files cannot be created in ``path``, or None."""
    if not path.is_dir():
        return f"{str(path)!r} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{str(path)!r} is not writable"
    return None


def output_dir(text: str) -> str:
    """A directory to write into: it exists and is writable, or can be made (its nearest
    existing ancestor is a writable directory). Nothing is created while parsing."""
    path = Path(text)
    if path.exists():
        why = _writable_dir(path)
    else:
        parent = path.absolute().parent
        while not parent.exists():
            parent = parent.parent
        why = _writable_dir(parent)
        if why is not None:
            why = f"{text!r} cannot be created: {why}"
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def output_file(text: str) -> str:
    """A file to write: not a directory, in an existing writable directory."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not writable")
    why = _writable_dir(path.absolute().parent)
    if why is not None:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {why}")
    return text
