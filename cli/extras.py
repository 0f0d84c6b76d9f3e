"""Which extra a subcommand asks for when it meets a missing optional package.

``densegate.impl.extras.EXTRA_OF`` says which extra installs each optional
package; a subcommand may need a package through a bigger extra (``conform``
needs z3 through ``testing``, which brings ``prove`` too) or bring it with its
own (``prove`` prints with rich, which ``[prove]`` installs; so does
``[bench]``). ``main`` turns the ``ModuleNotFoundError`` into the one line
``missing_extra_line`` gives, never a traceback.
"""

from __future__ import annotations

from densegate.impl.extras import MissingExtra, extra_for

__all__ = ["COMMAND_EXTRAS", "missing_extra_line"]

COMMAND_EXTRAS: dict[str, dict[str, str]] = {
    "prove": {"rich": "prove"},
    "bench": {"rich": "bench"},
    "conform": {"z3": "testing", "crosshair": "testing", "hypothesis": "testing"},
}
"""subcommand -> {top-level module: extra} where it differs from ``EXTRA_OF``."""


def missing_extra_line(command: str, error: ModuleNotFoundError) -> str | None:
    """The one line naming the extra that brings ``error``'s module, or None when that
    module is no optional package (a bug, which must not be dressed up as an install)."""
    module = (error.name or "").partition(".")[0]
    if not module:
        return None
    extra = COMMAND_EXTRAS.get(command, {}).get(module)
    if extra is None and isinstance(error, MissingExtra):
        extra = error.extra
    extra = extra or extra_for(module)
    if extra is None:
        return None
    return str(MissingExtra(f"densegate {command}", module, extra))
