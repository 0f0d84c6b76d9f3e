"""An engine's release as numbers, and loading what needs the engine only once it is checked.

Each integration wraps engine internals that change between releases, so it
checks the installed engine's version before any module that imports the engine
loads. ``packaging`` would parse versions, but the runtime takes no third-party
package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

from densegate.impl.extras import require

__all__ = ["engine_attribute", "release"]


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


def engine_attribute(
    package: str,
    name: str,
    lazy: Mapping[str, str],
    engine: str,
    check_version: Callable[[str], None],
) -> Any:
    """``package.name`` from the module ``lazy`` names for it, loaded only after ``engine``
    is imported (``MissingExtra`` naming its extra if absent) and its version checked."""
    module = lazy.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    check_version(require(engine, f"{package}.{name}").__version__)
    return getattr(import_module(module), name)
