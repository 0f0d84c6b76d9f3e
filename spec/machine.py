"""Guarded-command machines over Z3 terms: the one form every densegate spec takes.

A machine is written once, as a list of commands ``guard -> (outputs, next
state)`` over symbolic parameters, state and an observation. The prover reads it
as a transition relation; the agreement tests evaluate it on concrete values.
Because it is a relation, a gap between guards is a deadlock and an overlap is
nondeterminism, and both are proof obligations rather than accidents of an
if/else chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import z3

__all__ = ["Command", "Frame", "Machine", "Program", "Sort", "Vars", "evaluate"]

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

    ``param_sorts``/``state_sorts``/``obs_sorts``/``out_sorts`` (set by the
    subclass's ``__init__``) map a name to a constructor such as ``z3.Int``;
    fresh constants are tagged so a trace can hold many frames.
    """

    name: str = "machine"
    param_sorts: Mapping[str, Sort]
    state_sorts: Mapping[str, Sort]
    obs_sorts: Mapping[str, Sort]
    out_sorts: Mapping[str, Sort]

    # -- what a subclass writes -------------------------------------------------
    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.BoolVal(True)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        raise NotImplementedError

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.BoolVal(True)

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        raise NotImplementedError

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """How a trace row of this machine is best printed (default: as is)."""
        return row

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
    z3.Z3_OP_MUL: math.prod,
    z3.Z3_OP_DISTINCT: lambda a: len(set(a)) == len(a),
    z3.Z3_OP_NOT: lambda a: not a[0],
    z3.Z3_OP_UMINUS: lambda a: -a[0],
    z3.Z3_OP_ITE: lambda a: a[1] if a[0] else a[2],
    z3.Z3_OP_EQ: lambda a: a[0] == a[1],
    z3.Z3_OP_LE: lambda a: a[0] <= a[1],
    z3.Z3_OP_LT: lambda a: a[0] < a[1],
    z3.Z3_OP_GE: lambda a: a[0] >= a[1],
    z3.Z3_OP_GT: lambda a: a[0] > a[1],
    z3.Z3_OP_SUB: lambda a: a[0] - sum(a[1:]),
    z3.Z3_OP_IMPLIES: lambda a: (not a[0]) or a[1],
    z3.Z3_OP_IDIV: lambda a: a[0] // a[1],
    z3.Z3_OP_MOD: lambda a: a[0] % a[1],
}

Env = Mapping[str, Any]
_CONST, _VAR, _OP = 0, 1, 2


class Program:
    """Quantifier-free Z3 terms compiled to a straight-line program over their DAG.

    The agreement tests evaluate the spec on concrete values thousands of
    times; the scheduler's terms share subterms heavily, so each node is
    computed once per evaluation, in topological order. Variables are read
    from the environment by their Z3 name; enum constants evaluate to their
    names. Divisors in specs are positive constants, where Z3's ``div`` and
    Python's ``//`` agree.
    """

    def __init__(self, roots: Sequence[z3.ExprRef]) -> None:
        self.nodes: list[tuple[int, Any, tuple[int, ...]]] = []
        index: dict[int, int] = {}
        for root in roots:
            stack: list[tuple[z3.ExprRef, bool]] = [(root, False)]
            while stack:
                term, expanded = stack.pop()
                key = term.get_id()
                if key in index:
                    continue
                kids = term.children()
                if not expanded and kids:
                    stack.append((term, True))
                    stack.extend((k, False) for k in kids if k.get_id() not in index)
                    continue
                index[key] = len(self.nodes)
                self.nodes.append(self._node(term, tuple(index[k.get_id()] for k in kids)))
        self.roots = [index[r.get_id()] for r in roots]

    @staticmethod
    def _node(term: z3.ExprRef, args: tuple[int, ...]) -> tuple[int, Any, tuple[int, ...]]:
        if z3.is_true(term) or z3.is_false(term):
            return (_CONST, z3.is_true(term), ())
        if z3.is_int_value(term):
            return (_CONST, term.as_long(), ())
        kind = term.decl().kind()
        if kind == z3.Z3_OP_UNINTERPRETED and not args:
            return (_VAR, term.decl().name(), ())
        if kind == z3.Z3_OP_DT_CONSTRUCTOR and not args:
            return (_CONST, term.decl().name(), ())
        if kind in _NARY:
            return (_OP, _NARY[kind], args)
        raise ValueError(f"Program: unsupported operator {term.decl()} in {term}")

    def run(self, env: Env) -> list[Any]:
        vals: list[Any] = [None] * len(self.nodes)
        for i, (tag, payload, args) in enumerate(self.nodes):
            if tag == _CONST:
                vals[i] = payload
            elif tag == _VAR:
                vals[i] = env[payload]
            else:
                vals[i] = payload([vals[a] for a in args])
        return [vals[r] for r in self.roots]


@dataclass(frozen=True)
class _Compiled:
    names: tuple[str, ...]
    program: Program
    outs: tuple[tuple[str, ...], ...]
    nexts: tuple[tuple[str, ...], ...]
    keys: dict[str, str]


def _compile(machine: Machine) -> _Compiled:
    p, s, o, cmds = machine._symbolic
    keys = {}
    for group in (p, s, o):
        keys.update({k: v.decl().name() for k, v in group.items()})
    roots: list[z3.ExprRef] = [c.guard for c in cmds]
    for c in cmds:
        roots += list(c.out.values()) + list(c.next.values())
    return _Compiled(
        tuple(c.name for c in cmds),
        Program(roots),
        tuple(tuple(c.out) for c in cmds),
        tuple(tuple(c.next) for c in cmds),
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
    vals = comp.program.run(env)
    n = len(comp.names)
    enabled = [i for i in range(n) if vals[i]]
    if len(enabled) != 1:
        names = [comp.names[i] for i in enabled]
        raise ValueError(f"{machine.name}: {len(enabled)} commands enabled {names} at {obs}")
    (i,) = enabled
    pos = n + sum(len(comp.outs[j]) + len(comp.nexts[j]) for j in range(i))
    out = dict(zip(comp.outs[i], vals[pos : pos + len(comp.outs[i])], strict=True))
    pos += len(comp.outs[i])
    nxt = dict(zip(comp.nexts[i], vals[pos : pos + len(comp.nexts[i])], strict=True))
    return comp.names[i], out, nxt
