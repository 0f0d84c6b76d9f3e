"""The mutation-test harness: build a mutant of a real module, show a lockstep catches it.

Shared by the gate, aligned-gate and scheduler mutation tests so each of them
only lists its mutants. A mutant is loaded from edited source (an AST or text)
as a fresh module; the original module is never touched.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

_NEGATE = {ast.Eq: ast.NotEq, ast.GtE: ast.Lt, ast.Lt: ast.GtE, ast.Gt: ast.LtE}
_SHIFT = {ast.GtE: ast.Gt, ast.Gt: ast.GtE}


class Mutator(ast.NodeTransformer):
    """Applies ``kind`` to the ``index``-th matching node inside the function ``scope``.

    Kinds: ``negate`` / ``shift`` a comparison, ``off_by_one`` (``x + 1 >= y`` ->
    ``x >= y``), ``keep_left`` / ``keep_right`` of an ``and``, ``drop_not``,
    ``drop_assign:<target>``, ``drop_increment``.
    """

    def __init__(self, scope: str, kind: str, index: int) -> None:
        self.scope, self.kind, self.index, self.seen, self.applied = scope, kind, index, -1, False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if node.name == self.scope:
            self.generic_visit(node)
        return node

    def _hit(self) -> bool:
        self.seen += 1
        self.applied |= self.seen == self.index
        return self.seen == self.index

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        table = {"negate": _NEGATE, "shift": _SHIFT}.get(self.kind)
        if table and type(node.ops[0]) in table and self._hit():
            node.ops = [table[type(node.ops[0])]()]
        elif self.kind == "off_by_one" and isinstance(node.left, ast.BinOp) and self._hit():
            node.left = node.left.left  # "self._h + 1 >= budget" -> "self._h >= budget"
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        keep = {"keep_left": 0, "keep_right": -1}.get(self.kind)
        if keep is not None and isinstance(node.op, ast.And) and self._hit():
            return node.values[keep]
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if self.kind == "drop_not" and isinstance(node.op, ast.Not) and self._hit():
            return node.operand
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        target = ast.unparse(node.targets[0])
        if self.kind == f"drop_assign:{target}" and self._hit():
            return ast.Pass()
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        if self.kind == "drop_increment" and self._hit():
            return ast.Pass()
        return node


def mutate(module: types.ModuleType, scope: str, kind: str, index: int) -> ast.Module:
    """``module``'s source with one mutation applied; fails if it found nothing to change."""
    m = Mutator(scope, kind, index)
    tree: ast.Module = ast.fix_missing_locations(m.visit(ast.parse(inspect.getsource(module))))
    assert m.applied, f"mutation {kind}#{index} found nothing to change"
    return tree


def mutant_module(module: types.ModuleType, scope: str, kind: str, index: int) -> types.ModuleType:
    """``module`` with one AST mutation applied, loaded as a fresh module."""
    tag = kind.replace(":", "_").replace(".", "_")
    return load(mutate(module, scope, kind, index), f"{_short(module)}_mutant_{tag}_{index}")


def identity_module(module: types.ModuleType) -> types.ModuleType:
    """``module`` parsed and recompiled unchanged: the mutants' path with no mutation."""
    return load(ast.parse(inspect.getsource(module)), f"{_short(module)}_identity")


def text_mutant(module: types.ModuleType, name: str, old: str, new: str) -> types.ModuleType:
    """``module`` with its one occurrence of ``old`` replaced by ``new``."""
    source = inspect.getsource(module)
    assert source.count(old) == 1, f"{name}: mutation site not unique"
    return load(source.replace(old, new), f"{_short(module)}_mutant_{name}")


def _short(module: types.ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


def load(code: ast.Module | str, name: str) -> types.ModuleType:
    """Executes ``code`` as a fresh module named ``name``."""
    mod = types.ModuleType(name)
    sys.modules[name] = mod  # dataclasses look their module up while decorating
    try:
        exec(compile(code, name, "exec"), mod.__dict__)
    finally:
        del sys.modules[name]
    return mod


def replay_notes(exc: BaseException) -> str:
    """Hypothesis's replayable runs, also from inside an exception group."""
    out = list(getattr(exc, "__notes__", []))
    for sub in getattr(exc, "exceptions", ()):
        out.append(replay_notes(sub))
    return "\n".join(out)


def assert_lockstep_catches(
    lockstep: type[RuleBasedStateMachine],
    impl: types.ModuleType,
    run_settings: settings,
    raises: type[BaseException] | tuple[type[BaseException], ...],
) -> str:
    """``lockstep`` driving ``impl`` fails with ``raises`` and a shrunk, replayable run,
    which it returns (Hypothesis's notes: the steps, then the error)."""
    machine: Any = type("MutantLockstep", (lockstep,), {"impl": impl})
    with pytest.raises(raises) as info:
        run_state_machine_as_test(machine, settings=run_settings)
    notes = replay_notes(info.value)
    assert "state = MutantLockstep()" in notes and "state.setup(" in notes, (
        f"not a shrunk lockstep failure: {info.value!r}\n{notes}"
    )
    return f"{notes}\n{type(info.value).__name__}: {info.value}"


def assert_lockstep_passes(
    lockstep: type[RuleBasedStateMachine], impl: types.ModuleType, run_settings: settings
) -> None:
    """The identity 'mutant' passes: the harness itself does not break the module."""
    machine: Any = type("IdentityLockstep", (lockstep,), {"impl": impl})
    run_state_machine_as_test(machine, settings=run_settings)
