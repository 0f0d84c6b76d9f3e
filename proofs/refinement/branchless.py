"""``min`` and ``max`` of symbolic ints as one Z3 term, so CrossHair does not fork on them.

CrossHair runs the builtin ``min(a, b, c)`` as Python does: by comparing, and
each comparison of symbolic ints is a branch, so ``n = min(left, cap, budget)``
splits one path into three. Most of R3's paths were such splits (389 paths for
two requests; 67 with the patch), and no check reads which argument won, only
the value. While a check is explored, ``installed`` routes the builtins through
``symbolic_min``/``symbolic_max``: the same value, as ``If`` terms, on one path.

Taken as given, as ``Counted`` is: that the chain of ``If(x < m, x, m)`` is the
least of the values (``tests/test_refinement_branchless.py`` proves it with Z3
and refutes a wrong chain). Anything but two or more plain or symbolic ints
(keywords, one iterable, bools, floats) goes to the builtin unchanged. The
patch goes into CrossHair's own patch table (``core._PATCH_REGISTRATIONS``, an
internal: its public ``register_patch`` cannot be undone), safe under the exact
pin of crosshair-tool; an upgrade must recheck it, and the tests would fail.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import z3
from crosshair import core
from crosshair.libimpl.builtinslib import SymbolicInt
from crosshair.tracers import NoTracing

__all__ = ["installed", "max_term", "min_term", "symbolic_max", "symbolic_min"]

_MIN, _MAX = builtins.min, builtins.max


def _ints(args: tuple[Any, ...]) -> bool:
    return len(args) >= 2 and all(type(a) is int or isinstance(a, SymbolicInt) for a in args)


def min_term(terms: list[z3.ArithRef]) -> z3.ArithRef:
    """The first least of ``terms``, as one ``If`` chain."""
    best = terms[0]
    for t in terms[1:]:
        best = z3.If(t < best, t, best)
    return best


def max_term(terms: list[z3.ArithRef]) -> z3.ArithRef:
    """The first greatest of ``terms``, as one ``If`` chain."""
    best = terms[0]
    for t in terms[1:]:
        best = z3.If(t > best, t, best)
    return best


def _chain(args: tuple[Any, ...], fold: Callable[[list[z3.ArithRef]], z3.ArithRef]) -> Any:
    return SymbolicInt(fold([a.var if isinstance(a, SymbolicInt) else z3.IntVal(a) for a in args]))


def symbolic_min(*args: Any, **kwargs: Any) -> Any:
    """``min`` with no branch when its arguments are ints and one is symbolic."""
    with NoTracing():  # type: ignore[no-untyped-call]
        if not kwargs and _ints(args) and any(isinstance(a, SymbolicInt) for a in args):
            return _chain(args, min_term)
    return _MIN(*args, **kwargs)


def symbolic_max(*args: Any, **kwargs: Any) -> Any:
    """``max`` with no branch when its arguments are ints and one is symbolic."""
    with NoTracing():  # type: ignore[no-untyped-call]
        if not kwargs and _ints(args) and any(isinstance(a, SymbolicInt) for a in args):
            return _chain(args, max_term)
    return _MAX(*args, **kwargs)


@contextmanager
def installed() -> Iterator[None]:
    """CrossHair calls ``symbolic_min``/``symbolic_max`` for the builtins inside the block
    (its patch table is read each time it starts tracing a path)."""
    table = core._PATCH_REGISTRATIONS
    saved = {f: table.get(f) for f in (_MIN, _MAX)}
    table[_MIN], table[_MAX] = symbolic_min, symbolic_max
    try:
        yield
    finally:
        for f, old in saved.items():
            if old is None:
                table.pop(f, None)
            else:
                table[f] = old
