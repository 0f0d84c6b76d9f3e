"""An engine's release as numbers, for the version range an integration supports.

Each integration wraps engine internals that change between releases, so it
checks the installed engine's version at load. ``packaging`` would do this, but
the runtime takes no third-party package.
"""

from __future__ import annotations

__all__ = ["release"]


def release(version: str) -> tuple[int, ...]:
    """``"0.32.1rc1+cpu"`` -> ``(0, 32, 1)``: the leading digits of each dotted part,
    up to the first part without any (local ``+`` suffixes dropped)."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)
