"""Bugs injected into PrefillGate make the lockstep suite fail with a shrunk run.

Each mutant rewrites one spot of ``decide_counts`` in the real source (via the
AST), so the suite is shown to catch flipped comparisons, boundary shifts and
dropped counter updates in the code that actually ships. None of these mutants
is equivalent to the original on non-negative inputs.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types

import pytest
from hypothesis import settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

import densegate.impl.gate as gate_module
from tests.gate_lockstep import GateLockstep

_NEGATE = {ast.Eq: ast.NotEq, ast.GtE: ast.Lt, ast.Lt: ast.GtE, ast.Gt: ast.LtE}
_SHIFT = {ast.GtE: ast.Gt, ast.Gt: ast.GtE}


class _Mutator(ast.NodeTransformer):
    """Applies ``kind`` to the ``index``-th matching node inside decide_counts."""

    def __init__(self, kind: str, index: int) -> None:
        self.kind, self.index, self.seen, self.applied = kind, index, -1, False
        self.inside = False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if node.name != "decide_counts":
            return node
        self.inside = True
        self.generic_visit(node)
        self.inside = False
        return node

    def _hit(self) -> bool:
        self.seen += 1
        if self.seen == self.index:
            self.applied = True
            return True
        return False

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        table = {"negate": _NEGATE, "shift": _SHIFT}.get(self.kind)
        if table and type(node.ops[0]) in table and self._hit():
            node.ops = [table[type(node.ops[0])]()]
        elif self.kind == "off_by_one" and isinstance(node.left, ast.BinOp) and self._hit():
            node.left = node.left.left  # "self._h + 1 >= budget" -> "self._h >= budget"
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if self.kind == "drop_not" and isinstance(node.op, ast.Not) and self._hit():
            return node.operand
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST | None:
        target = ast.unparse(node.targets[0])
        if self.kind == "drop_reset" and self.inside and target == "self._h" and self._hit():
            return ast.Pass()
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | None:
        if self.kind == "drop_increment" and self.inside and self._hit():
            return ast.Pass()
        return node


def _mutant_module(kind: str, index: int) -> types.ModuleType:
    tree = ast.parse(inspect.getsource(gate_module))
    m = _Mutator(kind, index)
    tree = ast.fix_missing_locations(m.visit(tree))
    assert m.applied, f"mutation {kind}#{index} found nothing to change"
    return _load(tree, f"gate_mutant_{kind}_{index}")


def _load(tree: ast.Module, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    sys.modules[name] = mod  # dataclasses look their module up while decorating
    try:
        exec(compile(tree, name, "exec"), mod.__dict__)
    finally:
        del sys.modules[name]
    return mod


# decide_counts compares: w == 0, d == 0, w >= dense, h + 1 >= budget.
MUTANTS = [
    ("negate", 0),  # w != 0
    ("negate", 1),  # d != 0
    ("negate", 2),  # w < dense
    ("negate", 3),  # h + 1 < budget
    ("shift", 0),  # w > dense
    ("shift", 1),  # h + 1 > budget
    ("off_by_one", 0),  # h >= budget
    ("drop_not", 0),  # enabled test inverted
    ("drop_reset", 0),  # a fire no longer resets h
    ("drop_increment", 0),  # a hold no longer counts
]


@pytest.mark.parametrize(("kind", "index"), MUTANTS, ids=[f"{k}{i}" for k, i in MUTANTS])
def test_lockstep_catches_injected_bug(kind: str, index: int) -> None:
    mod = _mutant_module(kind, index)
    machine = type("MutantLockstep", (GateLockstep,), {"impl": mod})
    with pytest.raises((AssertionError, Flaky)) as info:
        run_state_machine_as_test(machine, settings=settings(stateful_step_count=30))
    # Hypothesis attaches the shrunk, replayable run as notes on the failure.
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "state = MutantLockstep()" in notes and "state.setup(" in notes, notes


def test_unmutated_source_passes_through_the_same_path() -> None:
    """The mutation harness itself must not break the gate: the identity 'mutant' passes."""
    mod = _load(ast.parse(inspect.getsource(gate_module)), "gate_identity")
    machine = type("IdentityLockstep", (GateLockstep,), {"impl": mod})
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=10))
