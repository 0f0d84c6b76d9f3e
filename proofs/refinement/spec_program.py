"""A spec machine's own terms, compiled once and stepped on constants: R4's evaluator.

``densegate.spec.machine.evaluate`` compiles a machine to a ``Program`` (its terms'
DAG as a straight-line program) through z3's Python objects, which costs about a
sixth of a second for the 12-slot scheduler, and then interprets it, about a
millisecond a pass; R4 needs four such machines and a budget of one second, the
lockstep thousands of passes. ``compiled`` builds the very same ``Program`` nodes (a
test compares them node for node) by walking the DAG with z3's C API on raw
pointers, several times faster; ``as_python`` turns the nodes into one Python
function, a line per node calling that node's own ``Program`` operator on its
arguments, in the same order (about five times faster a pass); ``Stepper`` runs one
pass as ``evaluate`` does, with the machine's parameter and observation constraints
evaluated beside it. Nothing of the spec is restated: the terms are the machine's,
the operators ``Program``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from densegate.spec.machine import _CONST, _NARY, _OP, _VAR, Machine, Program

__all__ = ["Step", "Stepper", "as_python", "compiled"]

_APP, _NUMERAL = z3.Z3_APP_AST, z3.Z3_NUMERAL_AST


def compiled(roots: Sequence[z3.ExprRef]) -> Program:
    """``Program(roots)``, node for node, walked through the C API (no Python term objects)."""
    ctx = roots[0].ctx.ref()
    ast_id, kind_of = z3.Z3_get_ast_id, z3.Z3_get_ast_kind
    nargs, arg, decl_of, decl_kind = (
        z3.Z3_get_app_num_args, z3.Z3_get_app_arg, z3.Z3_get_app_decl, z3.Z3_get_decl_kind,
    )  # fmt: skip
    nodes: list[tuple[int, Any, tuple[int, ...]]] = []
    index: dict[int, int] = {}

    def name(decl: Any) -> str:
        return str(z3.Z3_get_symbol_string(ctx, z3.Z3_get_decl_name(ctx, decl)))

    for root in roots:
        top = root.as_ast()
        # (term, its id, its arguments' ids once expanded)
        stack: list[tuple[Any, int, list[int] | None]] = [(top, ast_id(ctx, top), None)]
        while stack:
            a, key, kids = stack.pop()
            if key in index:
                continue
            kind = kind_of(ctx, a)
            if kind == _NUMERAL:
                node: tuple[int, Any, tuple[int, ...]] = (
                    _CONST,
                    int(z3.Z3_get_numeral_string(ctx, a)),
                    (),
                )
            elif kind != _APP:
                raise ValueError(f"compiled: unsupported term kind {kind}")
            else:
                if kids is None:
                    subs = [arg(ctx, a, i) for i in range(nargs(ctx, a))]
                    kids = [ast_id(ctx, k) for k in subs]
                    if kids:
                        stack.append((a, key, kids))
                        stack.extend((k, i, None) for k, i in zip(subs, kids, strict=True))
                        continue
                decl = decl_of(ctx, a)
                op = decl_kind(ctx, decl)
                args = tuple(index[k] for k in kids)
                if op in (z3.Z3_OP_TRUE, z3.Z3_OP_FALSE):
                    node = (_CONST, op == z3.Z3_OP_TRUE, ())
                elif op == z3.Z3_OP_UNINTERPRETED and not args:
                    node = (_VAR, name(decl), ())
                elif op == z3.Z3_OP_DT_CONSTRUCTOR and not args:
                    node = (_CONST, name(decl), ())
                elif op in _NARY:
                    node = (_OP, _NARY[op], args)
                else:
                    raise ValueError(f"compiled: unsupported operator {name(decl)}")
            index[key] = len(nodes)
            nodes.append(node)
    program: Program = object.__new__(Program)
    program.nodes = nodes
    program.roots = [index[ast_id(ctx, r.as_ast())] for r in roots]
    return program


def as_python(program: Program) -> Callable[[Mapping[str, Any]], list[Any]]:
    """``program.run`` as one generated function: node ``i`` is the line ``v<i> = ...``,
    a constant, ``env[name]``, or the node's operator applied to the list of its
    arguments' values, exactly as ``Program.run`` computes it."""
    scope: dict[str, Any] = {}
    lines = ["def run(env):"]
    for i, (tag, payload, args) in enumerate(program.nodes):
        if tag == _CONST:
            scope[f"c{i}"] = payload
            lines.append(f"    v{i} = c{i}")
        elif tag == _VAR:
            lines.append(f"    v{i} = env[{payload!r}]")
        else:
            op = f"op{id(payload)}"
            scope[op] = payload
            lines.append(f"    v{i} = {op}([{', '.join(f'v{a}' for a in args)}])")
    lines.append(f"    return [{', '.join(f'v{r}' for r in program.roots)}]")
    exec(compile("\n".join(lines), "<spec program>", "exec"), scope)
    run: Callable[[Mapping[str, Any]], list[Any]] = scope["run"]
    return run


@dataclass(frozen=True)
class Step:
    """One pass on constants: the command taken, its outputs and next state, and whether
    the parameters and the observation are ones the machine admits."""

    command: str
    out: dict[str, Any]
    next: dict[str, Any]
    params_ok: bool
    obs_ok: bool


class Stepper:
    """``machine`` compiled once; ``step`` is ``evaluate`` plus ``param_ok`` and ``obs_ok``."""

    def __init__(self, machine: Machine) -> None:
        p, s = machine.params("st"), machine.state("st")
        o = machine.fresh(machine.obs_sorts, "st")
        cmds = machine.commands(p, s, o)
        roots: list[z3.ExprRef] = [machine.param_ok(p), machine.obs_ok(p, s, o)]
        roots += [c.guard for c in cmds]
        for c in cmds:
            roots += [*c.out.values(), *c.next.values()]
        self.machine = machine
        self._keys = {k: v.decl().name() for g in (p, s, o) for k, v in g.items()}
        self._names = [c.name for c in cmds]
        self._shape = [(list(c.out), list(c.next)) for c in cmds]
        self._run = as_python(compiled(roots))

    def step(
        self, params: Mapping[str, Any], state: Mapping[str, Any], obs: Mapping[str, Any]
    ) -> Step:
        """Raises ``ValueError`` unless exactly one command is enabled (the relation is the
        spec: a gap or an overlap is its error, never a default)."""
        env = {self._keys[k]: v for m in (params, state, obs) for k, v in m.items()}
        vals = self._run(env)
        n = len(self._names)
        guards = vals[2 : 2 + n]
        enabled = [i for i in range(n) if guards[i]]
        if len(enabled) != 1:
            names = [self._names[i] for i in enabled]
            raise ValueError(f"{self.machine.name}: {len(enabled)} commands enabled {names}")
        (i,) = enabled
        pos = 2 + n + sum(len(o) + len(x) for o, x in self._shape[:i])
        outs, nexts = self._shape[i]
        out = dict(zip(outs, vals[pos : pos + len(outs)], strict=True))
        pos += len(outs)
        nxt = dict(zip(nexts, vals[pos : pos + len(nexts)], strict=True))
        return Step(self._names[i], out, nxt, bool(vals[0]), bool(vals[1]))
