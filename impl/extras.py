"""Which extra brings which optional package, and the one error a missing one gives.

``pip install .`` (in a checkout: densegate is not on the package index) is the runtime
alone; everything else comes with an extra (``pip install '.[prove]'``). Code that needs
an optional package says so through ``require``, so a user sees which extra to install,
not an ImportError from deep inside a module.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

__all__ = ["EXTRA_OF", "MissingExtra", "extra_for", "require"]

EXTRA_OF: dict[str, str] = {
    "z3": "prove",
    "crosshair": "prove",
    "hypothesis": "testing",
    "torch": "torch",
    "safetensors": "hf",
    "tokenizers": "text",
    "numpy": "bench",
    "matplotlib": "bench",
    "rich": "cli",
    "vllm": "vllm",
    "sglang": "sglang",
}
"""Top-level module -> the extra that installs it (``pyproject.toml``'s optional dependencies)."""


def extra_for(module: str) -> str | None:
    """The extra that installs ``module`` (a dotted name is judged by its top level)."""
    return EXTRA_OF.get(module.partition(".")[0])


class MissingExtra(ModuleNotFoundError):
    """An optional package is absent: names what needs it and the extra that brings it."""

    def __init__(self, what: str, module: str, extra: str) -> None:
        self.what = what
        self.extra = extra
        super().__init__(
            f"{what} needs the '{extra}' extra ({module} is not installed): in a densegate "
            f"checkout, pip install '.[{extra}]' (densegate is not on the package index)",
            name=module,
        )


def require(module: str, what: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` for ``what``, or raise ``MissingExtra`` naming the extra to install."""
    try:
        return import_module(module)
    except ModuleNotFoundError as e:
        missing = e.name or module
        chosen = extra or extra_for(missing)
        if chosen is None:
            raise
        raise MissingExtra(what, missing, chosen) from None
