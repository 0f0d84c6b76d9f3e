"""The two helpers every report shares: a percentile and how a figure is printed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["fmt", "percentile"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in [0, 100]); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    if not values:
        return None
    xs = sorted(values)
    rank = (len(xs) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def fmt(x: Any, digits: int = 3) -> str:
    """A figure for a table: ``-`` for missing or NaN, ``digits`` significant digits
    below 1000 and whole numbers above, ``key value, ...`` for a dict."""
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.{digits}g}"
    if isinstance(x, dict):
        return ", ".join(f"{k} {fmt(v, digits)}" for k, v in x.items()) or "-"
    return str(x)
