"""Guarded-command machines over Z3 terms: the one form every densegate spec takes.

A machine is written once, as a list of commands ``guard -> (outputs, next
state)`` over symbolic parameters, state and an observation. The prover reads it
as a transition relation; the agreement tests evaluate it on concrete values.
Because it is a relation, a gap between guards is a deadlock and an overlap is
nondeterminism, and both are proof obligations rather than accidents of an
if/else chain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import z3

__all__ = ["Command", "Frame", "Machine", "Sort", "Vars", "compile_term", "evaluate"]

Vars = dict[str, z3.ExprRef]
"""Named Z3 terms: one frame's parameters, state, observation or outputs."""

Sort = Callable[[str], z3.ExprRef]


@dataclass(frozen=True)
class Command:
    """One guarded command: when ``guard`` holds, emit ``out`` and move to ``next``."""

    name: str
    guard: z3.BoolRef
    out: Mapping[str, z3.ExprRef]
    next: Mapping[str, z3.ExprRef]


@dataclass(frozen=True)
class Frame:
    """The variables of one pass of a trace: state before, observation, outputs."""

    state: Vars
    obs: Vars
    out: Vars


class Machine:
    """Base of every spec machine. Subclasses declare variable sorts and commands.

    ``param_sorts``/``state_sorts``/``obs_sorts``/``out_sorts`` map a name to a
    constructor such as ``z3.Int``; fresh constants are tagged so a trace can
    hold many frames.
    """

    name: str = "machine"
    param_sorts: ClassVar[Mapping[str, Sort]] = {}
    state_sorts: ClassVar[Mapping[str, Sort]] = {}
    obs_sorts: ClassVar[Mapping[str, Sort]] = {}
    out_sorts: ClassVar[Mapping[str, Sort]] = {}

    # -- what a subclass writes -------------------------------------------------
    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.BoolVal(True)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        raise NotImplementedError

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.BoolVal(True)

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        raise NotImplementedError

    # -- derived ----------------------------------------------------------------
    @staticmethod
    def fresh(sorts: Mapping[str, Sort], tag: str) -> Vars:
        return {k: mk(f"{k}@{tag}") for k, mk in sorts.items()}

    def params(self, tag: str = "") -> Vars:
        return self.fresh(self.param_sorts, tag or "p")

    def frame(self, tag: str) -> Frame:
        return Frame(
            self.fresh(self.state_sorts, tag),
            self.fresh(self.obs_sorts, tag),
            self.fresh(self.out_sorts, tag),
        )

    def state(self, tag: str) -> Vars:
        return self.fresh(self.state_sorts, tag)

    def relation(self, p: Vars, f: Frame, nxt: Vars) -> z3.BoolRef:
        """T(p, s, o, out, s'): some enabled command produced ``out`` and ``nxt``."""
        alts = []
        for c in self.commands(p, f.state, f.obs):
            eqs = [f.out[k] == v for k, v in c.out.items()]
            eqs += [nxt[k] == v for k, v in c.next.items()]
            alts.append(z3.And(c.guard, *eqs))
        return z3.Or(*alts)

    @cached_property
    def _symbolic(self) -> tuple[Vars, Vars, Vars, Sequence[Command]]:
        p, s, o = self.params("ev"), self.state("ev"), self.fresh(self.obs_sorts, "ev")
        return p, s, o, self.commands(p, s, o)


_NARY: dict[int, Callable[[list[Any]], Any]] = {
    z3.Z3_OP_AND: all,
    z3.Z3_OP_OR: any,
    z3.Z3_OP_ADD: sum,
    z3.Z3_OP_DISTINCT: lambda a: len(set(a)) == len(a),
}
_BINARY: dict[int, Callable[[Any, Any], Any]] = {
    z3.Z3_OP_EQ: lambda a, b: a == b,
    z3.Z3_OP_LE: lambda a, b: a <= b,
    z3.Z3_OP_LT: lambda a, b: a < b,
    z3.Z3_OP_GE: lambda a, b: a >= b,
    z3.Z3_OP_GT: lambda a, b: a > b,
    z3.Z3_OP_SUB: lambda a, b: a - b,
    z3.Z3_OP_IMPLIES: lambda a, b: (not a) or b,
    z3.Z3_OP_IDIV: lambda a, b: a // b,
    z3.Z3_OP_MOD: lambda a, b: a % b,
}

Env = Mapping[str, Any]


def compile_term(term: z3.ExprRef) -> Callable[[Env], Any]:
    """Turn a quantifier-free Z3 term into a Python closure over concrete values.

    The agreement tests evaluate the spec thousands of times; walking Z3's AST
    once and then running plain Python keeps a pass in microseconds. Variables
    are looked up by their Z3 name; enum constants evaluate to their names.
    """
    kind = term.decl().kind() if z3.is_app(term) else None
    kids = [compile_term(k) for k in term.children()]
    if z3.is_true(term) or z3.is_false(term):
        b = z3.is_true(term)
        return lambda env: b
    if z3.is_int_value(term):
        n = term.as_long()
        return lambda env: n
    if kind == z3.Z3_OP_UNINTERPRETED and not kids:
        key = term.decl().name()
        return lambda env: env[key]
    if kind == z3.Z3_OP_DT_CONSTRUCTOR and not kids:
        name = term.decl().name()
        return lambda env: name
    if kind == z3.Z3_OP_NOT:
        (a,) = kids
        return lambda env: not a(env)
    if kind == z3.Z3_OP_UMINUS:
        (a,) = kids
        return lambda env: -a(env)
    if kind == z3.Z3_OP_ITE:
        c, t, e = kids
        return lambda env: t(env) if c(env) else e(env)
    if kind == z3.Z3_OP_MUL:

        def mul(env: Env) -> Any:
            r = 1
            for k in kids:
                r *= k(env)
            return r

        return mul
    if kind in _NARY:
        f = _NARY[kind]
        return lambda env: f([k(env) for k in kids])
    if kind in _BINARY and len(kids) == 2:
        g = _BINARY[kind]
        a, b = kids
        return lambda env: g(a(env), b(env))
    raise ValueError(f"compile_term: unsupported operator in {term}")


@dataclass(frozen=True)
class _Compiled:
    names: tuple[str, ...]
    guards: tuple[Callable[[Env], Any], ...]
    outs: tuple[dict[str, Callable[[Env], Any]], ...]
    nexts: tuple[dict[str, Callable[[Env], Any]], ...]
    keys: dict[str, str]


def _compile(machine: Machine) -> _Compiled:
    p, s, o, cmds = machine._symbolic
    keys = {}
    for group in (p, s, o):
        keys.update({k: v.decl().name() for k, v in group.items()})
    return _Compiled(
        tuple(c.name for c in cmds),
        tuple(compile_term(c.guard) for c in cmds),
        tuple({k: compile_term(v) for k, v in c.out.items()} for c in cmds),
        tuple({k: compile_term(v) for k, v in c.next.items()} for c in cmds),
        keys,
    )


_CACHE: dict[int, tuple[Machine, _Compiled]] = {}


def evaluate(
    machine: Machine,
    params: Mapping[str, Any],
    state: Mapping[str, Any],
    obs: Mapping[str, Any],
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Run one step of ``machine`` on concrete values: (command, outputs, next state).

    Raises ``ValueError`` when no command or more than one is enabled: the
    relation, not an if/else chain, is the spec.
    """
    hit = _CACHE.get(id(machine))
    if hit is None or hit[0] is not machine:
        hit = _CACHE[id(machine)] = (machine, _compile(machine))
    comp = hit[1]
    env = {comp.keys[k]: v for m in (params, state, obs) for k, v in m.items()}
    enabled = [i for i, g in enumerate(comp.guards) if g(env)]
    if len(enabled) != 1:
        names = [comp.names[i] for i in enabled]
        raise ValueError(f"{machine.name}: {len(enabled)} commands enabled {names} at {obs}")
    (i,) = enabled
    out = {k: f(env) for k, f in comp.outs[i].items()}
    nxt = {k: f(env) for k, f in comp.nexts[i].items()}
    return comp.names[i], out, nxt
