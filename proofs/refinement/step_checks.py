"""How R5 and R6 judge one shipped step against the spec's: two views, compared entry by entry.

A view maps names to what one side computed: the code's values (symbolic or concrete) on
one side, the spec's Z3 terms on the other; a string is a fact compared natively (which
list the code handed on, whether a snapshot is unchanged). A check runs the code on
CrossHair's symbols and fails the path where any entry can differ; a replay runs it on a
witness's constants, for the trace.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

import z3
from crosshair.libimpl.builtinslib import SymbolicBool

from densegate.proofs.refinement.counted import Counted
from densegate.proofs.refinement.gate import Replay
from densegate.proofs.refinement.symbolic import (
    NoTracing,
    admit,
    fail,
    holds,
    keyword_signature,
    pinned,
    reached,
    sample,
    term,
)

__all__ = ["Pre", "Val", "View", "Views", "build_checks", "replay_views", "snapshot"]

Val = Callable[[object], z3.ExprRef]
"""How a view reads an input: ``term`` on symbols, a constant on a witness's values."""
View = dict[str, object]
Views = Callable[[type, Mapping[str, Any], Val], tuple[View, View]]
"""``(class under check, inputs, val) -> (code's view, spec's view)``."""
Pre = Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef]


def snapshot(*objs: object) -> list[tuple[str, object]]:
    """What a step must not change: every field of each object, by identity, and the length
    of each list among them (a list grown in place keeps its id)."""
    with NoTracing():
        out: list[tuple[str, object]] = []
        for o in objs:
            names = vars(o) if hasattr(o, "__dict__") else getattr(type(o), "__slots__", ())
            for n in names:
                x = getattr(o, n, None)
                out.append((n, id(x)))
                if isinstance(x, Counted):
                    out.append((f"{n} length", id(x.n)))
                elif isinstance(x, list | collections.deque | dict):
                    out.append((f"{n} length", len(x)))
        return out


def _same(code: View, spec: View) -> tuple[dict[str, z3.BoolRef], list[str]]:
    """Each entry of the code's view against the spec's: a formula for a value, and the
    names of the entries (strings, compared natively) that differ."""
    eqs: dict[str, z3.BoolRef] = {}
    off = []
    for k, want in spec.items():
        got = code.get(k)
        if isinstance(want, str) or isinstance(got, str) or got is None:
            if got != want:
                off.append(k)
        else:
            eqs[k] = term(got) == (want if isinstance(want, z3.ExprRef) else term(want))
    return eqs, off


def build_checks(
    views: Mapping[str, Views],
    types: Mapping[str, type],
    precondition: Pre,
    assume: Mapping[str, Pre] | None = None,
) -> dict[str, Callable[..., Callable[..., None]]]:
    """Entry point -> ``build(cls, at=None)``: the check of a class (the shipped one or a
    mutant) on every input ``precondition`` and the entry's own ``assume`` admit."""
    extra = dict(assume or {})

    def check_of(name: str, views_of: Views) -> Callable[..., Callable[..., None]]:
        more = extra.get(name)

        def pre(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
            return precondition(e) if more is None else z3.And(precondition(e), more(e))

        def build(cls: type, at: Mapping[str, Any] | None = None) -> Callable[..., None]:
            def check(**v: Any) -> None:
                assert admit(pre, **v)
                assert at is None or pinned(v, at)
                code, spec = views_of(cls, v, term)
                with NoTracing():
                    eqs, off = _same(code, spec)
                    ok = SymbolicBool(z3.And(*eqs.values()))
                if off:
                    fail(v, "differs from the spec on " + ", ".join(off))
                if not ok:
                    bad = ", ".join(k for k, e in eqs.items() if not holds(e))
                    fail(v, "differs from the spec on " + bad)
                reached(v)
                sample(v)

            check.__signature__ = keyword_signature(types)  # type: ignore[attr-defined]
            return check

        return build

    return {name: check_of(name, v) for name, v in views.items()}


def _value(x: object) -> object:
    if isinstance(x, z3.ExprRef):
        y = z3.simplify(x)
        return z3.is_true(y) if z3.is_bool(y) else y.as_long()
    return x


def _constant(x: object) -> z3.ExprRef:
    return z3.BoolVal(x) if isinstance(x, bool) else z3.IntVal(x)


def replay_views(
    views: Mapping[str, Views], cls: type, via: str, witness: Mapping[str, Any]
) -> Replay:
    """Run ``cls`` on the witness concretely and the spec's terms on its constants."""
    try:
        code, spec = views[via](cls, witness, _constant)
    except AssertionError as e:  # the code raised: ``guarded`` says what
        return Replay(str(e), "no error")
    except Exception as e:
        return Replay(f"raised {type(e).__name__}: {e}", "no error")
    keys = list(spec)
    got = {k: _value(code.get(k)) for k in keys}
    want = {k: _value(spec[k]) for k in keys}
    off = [k for k in keys if got[k] != want[k]]
    show = off or keys
    return Replay(
        ", ".join(f"{k}={got[k]}" for k in show), ", ".join(f"{k}={want[k]}" for k in show)
    )
