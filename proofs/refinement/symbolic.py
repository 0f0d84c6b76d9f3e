"""Symbolic execution of the shipped Python with CrossHair, judged by the spec's own Z3 terms.

CrossHair runs a check function on symbolic ints and bools: every branch the
code takes is a Z3 query, and the function is re-run until every feasible path
has been taken. On each path the check asks one more question, built here from
the spec's transition relation: can the code's result differ from the spec's on
this path? The spec is never re-implemented in Python: its Z3 terms are handed
to CrossHair's solver as they are.

Verdicts: ``proved`` only when CrossHair reports every path explored and none
disagreed; ``refuted`` with concrete inputs, realized from the disagreeing
path's model and replayed concretely by the caller; ``unknown`` for everything
else (a path CrossHair could not finish, a value it had to make concrete, a
call it could not model, the iteration or time cap), with the reason. "Every path
explored" says nothing when no path gets past the precondition, so a check ends
each passing path with ``reached``: the outcome counts those paths and which
configuration classes (chunked or not, gate on or off, ...) their conditions admit,
and the caller fails a check that no path passed or a class no path reached.

While a check runs, ``min`` and ``max`` of symbolic ints are one term, not a branch
per comparison (``densegate.proofs.refinement.branchless``): the same values on
fewer paths.
"""

from __future__ import annotations

import collections
import functools
import inspect
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import z3
from crosshair import statespace
from crosshair.core import realize
from crosshair.core_and_libs import analyze_function
from crosshair.libimpl.builtinslib import SymbolicBool, SymbolicInt
from crosshair.options import AnalysisKind, AnalysisOptionSet
from crosshair.statespace import MessageType, VersionedSolver, context_statespace
from crosshair.tracers import NoTracing as _NoTracing
from crosshair.util import NotDeterministic

from densegate.proofs.refinement.branchless import installed
from densegate.spec.machine import Frame, Machine, Vars

__all__ = [
    "MAX_ITERATIONS",
    "Classes",
    "Outcome",
    "admit",
    "admitted_classes",
    "agrees",
    "explore",
    "fail",
    "guarded",
    "holds",
    "keyword_signature",
    "pinned",
    "reached",
    "sample",
    "term",
]

MAX_ITERATIONS = 2_000
"""Paths CrossHair may try per check; running out is ``unknown``, never a pass."""
CPU_SECONDS = 120.0
"""CrossHair's own per-check cap, in CPU seconds (a safety net: the iteration cap binds first;
the aligned kit's one-tick D10 check of a wrong paced twin, with the busy wait's parameters,
took about 70)."""
PATH_RLIMIT = 50_000_000
"""z3 resource budget of one coverage query (a class against a path or a precondition);
running out counts as not covered, which fails the check, never passes it."""


@dataclass(frozen=True)
class Outcome:
    """One symbolic check: proved, refuted with a witness, or unknown with the reason."""

    status: str  # proved | refuted | unknown
    seconds: float
    paths: int
    witness: dict[str, Any] | None = None
    detail: str = ""
    samples: tuple[dict[str, Any], ...] = ()
    """Inputs of paths that agreed with the spec, one a path where the check takes them
    (``sample``): states to try broken variants on first."""
    passed: int = 0
    """Paths that got past the precondition and every check (``reached``): 0 means the
    precondition admitted nothing, whatever CrossHair says of the paths it explored."""
    covered: frozenset[str] = frozenset()
    """The configuration classes (``explore``'s ``classes``) some such path admits."""


Classes = Mapping[str, Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef]]
"""Configuration classes by name (say, "chunked prefill off"), each a formula over the
check's arguments as z3 terms."""

_WITNESSES: list[tuple[dict[str, Any], str]] = []
_SAMPLES: list[dict[str, Any]] = []
_CLASSES: dict[str, Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef]] = {}
_COVERED: set[str] = set()
_PASSED: list[int] = [0]


def NoTracing() -> Any:
    """Run the enclosed block natively: the bookkeeping below must not be explored."""
    return _NoTracing()  # type: ignore[no-untyped-call]


_HOME = "densegate_refinement_checks"
"""A source-less top-level module the checks are filed under while CrossHair runs: CrossHair
reads option comments from a function's module and every package above it, which fails on
the namespace package an editable install of ``densegate`` makes."""


def term(x: object) -> z3.ExprRef:
    """The Z3 term of a symbolic or concrete int/bool (CrossHair uses z3's main context), or
    a Z3 term itself."""
    with NoTracing():
        if isinstance(x, z3.ExprRef):
            return x
        if isinstance(x, SymbolicInt | SymbolicBool):
            return x.var
        if isinstance(x, bool):
            return z3.BoolVal(x)
        if isinstance(x, int):
            return z3.IntVal(x)
        raise TypeError(f"not an int or bool: {type(x).__name__}")


def holds(formula: z3.BoolRef) -> bool:
    """A formula over the path's symbols, as a value CrossHair branches on (one query)."""
    with NoTracing():
        return SymbolicBool(formula)  # type: ignore[return-value]


def admit(build: Callable[[dict[str, z3.ExprRef]], z3.BoolRef], **values: object) -> bool:
    """The check's precondition, built from the symbols' terms in one formula (one branch)."""
    with NoTracing():
        env = {k: term(v) for k, v in values.items()}
        return SymbolicBool(build(env))  # type: ignore[return-value]


def agrees(
    machine: Machine,
    reason: Callable[[str], z3.ExprRef],
    params: Mapping[str, object],
    state: Mapping[str, object],
    obs: Mapping[str, object],
    fire: object,
    why: str,
    nxt: Mapping[str, object],
    more: Mapping[str, object] | None = None,
) -> bool:
    """Whether the code's (fire, reason, ``more`` outputs, next state) is the step the
    spec's relation allows.

    Observation entries the machine declares but ``obs`` leaves out are 0 (the
    aligned gate's local view, which its commands never read). The relation is built
    once per machine over fresh variables and each path's terms substituted in
    (rebuilding it on every path cost a quarter of a check's time).
    """
    with NoTracing():
        rel, p, f, n = _relation(machine)
        out = {
            "fire": term(fire),
            "reason": reason(why),
            **{k: term(v) for k, v in (more or {}).items()},
        }
        if set(out) != set(f.out) or set(nxt) != set(n):
            raise ValueError(f"{machine.name}: outputs {sorted(out)} or next {sorted(nxt)} "
                             "are not the machine's")  # fmt: skip
        pairs = [(p[k], term(v)) for k, v in params.items()]
        pairs += [(f.state[k], term(v)) for k, v in state.items()]
        pairs += [(f.obs[k], term(obs[k]) if k in obs else z3.IntVal(0)) for k in f.obs]
        pairs += [(f.out[k], v) for k, v in out.items()]
        pairs += [(n[k], term(v)) for k, v in nxt.items()]
        return SymbolicBool(z3.substitute(rel, *pairs))  # type: ignore[return-value]


@functools.cache
def _relation(machine: Machine) -> tuple[z3.BoolRef, Vars, Frame, Vars]:
    """``machine.relation`` over fresh variables, once per machine and process."""
    p, f, n = machine.params("rel"), machine.frame("rel"), machine.state("rel-next")
    return machine.relation(p, f, n), p, f, n


def pinned(values: Mapping[str, object], at: Mapping[str, object]) -> bool:
    """Whether the inputs are exactly ``at`` (as a check's leading assert: only that state)."""
    with NoTracing():
        return SymbolicBool(z3.And([term(values[k]) == term(x) for k, x in at.items()]))  # type: ignore[return-value]


def sample(values: Mapping[str, object]) -> None:
    """Record inputs this path admits, read from a model of its condition without making
    anything concrete (the search is unchanged); a path with no model on hand is skipped."""
    with NoTracing():
        space = context_statespace()
        known = getattr(space, "_known_model", None)
        model = known() if known is not None else None
        if model is None and space.solver.check() == z3.sat:
            model = space.solver.model()
        if model is None:
            return
        got = {k: model.eval(term(v), model_completion=True) for k, v in values.items()}
        read = {k: z3.is_true(x) if z3.is_bool(x) else x.as_long() for k, x in got.items()}
        _SAMPLES.append(read)


def reached(values: Mapping[str, object]) -> None:
    """The end of a path that passed every check: count it, and note each configuration
    class its path condition admits (a fresh solver, so CrossHair's own is untouched)."""
    with NoTracing():
        _PASSED[0] += 1
        todo = [name for name in _CLASSES if name not in _COVERED]
        if not todo:
            return
        env = {k: term(v) for k, v in values.items()}
        path = context_statespace().solver.assertions()
        for name in todo:
            s = z3.Solver()
            s.set("rlimit", PATH_RLIMIT)
            s.add(*path, _CLASSES[name](env))
            if s.check() == z3.sat:
                _COVERED.add(name)


def admitted_classes(
    check: Callable[..., None], pre: Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef],
    classes: Classes,
) -> tuple[bool, dict[str, bool]]:  # fmt: skip
    """Whether ``pre`` has a model over ``check``'s arguments, and each class with it (z3 on
    the precondition's own formula, fresh symbols, no path explored)."""
    env: dict[str, z3.ExprRef] = {}
    for name, param in inspect.signature(check).parameters.items():
        env[name] = z3.Bool(name) if param.annotation in (bool, "bool") else z3.Int(name)

    def sat(*extra: z3.BoolRef) -> bool:
        s = z3.Solver()
        s.set("rlimit", PATH_RLIMIT)
        s.add(pre(env), *extra)
        return bool(s.check() == z3.sat)

    return sat(), {name: sat(cls(env)) for name, cls in classes.items()}


class _Parameter(inspect.Parameter):
    """A parameter CrossHair's per-path deep copy of the arguments shares, not copies: it
    is immutable, and copying each (through its ``__reduce__``, traced) costs about a
    seventh of a many-argument check's time."""

    __slots__ = ()

    def __deepcopy__(self, memo: dict[int, object]) -> _Parameter:
        return self


def keyword_signature(annotations: Mapping[str, type]) -> inspect.Signature:
    """A check's signature: keyword-only arguments of the given types, returning None."""
    kind = inspect.Parameter.KEYWORD_ONLY
    params = [_Parameter(n, kind, annotation=t) for n, t in annotations.items()]
    return inspect.Signature(params, return_annotation=None)


def fail(values: Mapping[str, object], detail: str) -> None:
    """Record this path's inputs, made concrete from its model, and fail the check."""
    witness = {k: realize(v) for k, v in values.items()}
    with NoTracing():
        _WITNESSES.append((witness, detail))
    raise AssertionError(detail)


def guarded(call: Callable[[], Any], values: Mapping[str, object]) -> Any:
    """Run the code under check; an exception it raises on admitted inputs is a refutation."""
    try:
        return call()
    except NotDeterministic:
        raise
    except Exception as e:
        fail(values, f"raised {type(e).__name__}: {e}")


def _incremental_solver() -> VersionedSolver:
    """z3's own incremental solver, configured as CrossHair configures its default (which
    re-runs the ``smt`` tactic on every assertion at every query, over half a check's
    solver time): the same sat/unsat answers, and an unknown is still an unknown."""
    ctx = z3.main_ctx()
    solver = VersionedSolver(z3.Z3_mk_solver(ctx.ref()), ctx)
    solver.set("mbqi", True)
    solver.set("random-seed", 42)
    solver.set("smt.random-seed", 42)
    return solver


def explore(
    check: Callable[..., None],
    *,
    max_iterations: int = MAX_ITERATIONS,
    incremental: bool = False,
    classes: Classes | None = None,
) -> Outcome:
    """Run CrossHair over every path of ``check`` (asserts mode: leading asserts are the
    precondition) and translate its verdict; only "confirmed over all paths" proves.
    ``incremental``: each path's queries go to one incremental z3 solver. ``classes``:
    the configuration classes whose coverage the outcome reports (``reached``)."""
    stats: collections.Counter[str] = collections.Counter()
    options = AnalysisOptionSet(
        analysis_kind=[AnalysisKind.asserts],
        report_all=True,
        max_iterations=max_iterations,
        per_condition_timeout=CPU_SECONDS,
        stats=stats,
    )
    _WITNESSES.clear()
    _SAMPLES.clear()
    _CLASSES.clear()
    _CLASSES.update(classes or {})
    _COVERED.clear()
    _PASSED[0] = 0
    sys.modules.setdefault(_HOME, types.ModuleType(_HOME))
    check.__module__ = _HOME
    default_solver = statespace.make_default_solver
    if incremental:
        statespace.make_default_solver = _incremental_solver
    t0 = time.perf_counter()
    try:
        with installed():
            messages = [m for c in analyze_function(check, options) for m in c.analyze()]
    finally:
        statespace.make_default_solver = default_solver
    seconds = time.perf_counter() - t0
    paths = stats["num_paths"]
    kinds = {m.state for m in messages}
    seen = (tuple(_SAMPLES), _PASSED[0], frozenset(_COVERED))
    if kinds == {MessageType.CONFIRMED}:
        detail = f"every path explored ({paths})"
        return Outcome("proved", seconds, paths, None, detail, *seen)
    bad = [m for m in messages if m.state in (MessageType.POST_FAIL, MessageType.EXEC_ERR)]
    if bad and _WITNESSES:
        witness, detail = _WITNESSES[-1]
        return Outcome("refuted", seconds, paths, witness, detail, *seen)
    if not messages:
        why = "CrossHair found no check to run"
    elif MessageType.CANNOT_CONFIRM in kinds:
        why = (
            f"not every path explored ({paths} tried, cap {max_iterations} paths or "
            f"{CPU_SECONDS:.0f} CPU s; a value CrossHair had to make concrete or a call it "
            "cannot model keeps paths open)"
        )
    else:
        why = "; ".join(f"{m.state.name}: {m.message}" for m in messages)
    return Outcome("unknown", seconds, paths, None, why, *seen)
