"""Bugs injected into AlignedGate make the dp lockstep suite fail.

Each mutant rewrites one spot of ``AlignedGate._rules`` in the real source
(via the AST): flipped or shifted comparisons, a dropped half of a conjunction,
a dropped counter or stall-memory update. None is equivalent to the original
on the inputs the lockstep machine can produce.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types

import pytest
from hypothesis import Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

import densegate.impl.aligned_gate as aligned_module
from tests.dp_lockstep import AlignedLockstep

# No shrink phase: a mutant's run only has to fail, and shrinking a long
# multi-rank run costs seconds per mutant. The failing run is still printed.
_MUTANT_SETTINGS = settings(
    stateful_step_count=20, phases=[Phase.explicit, Phase.reuse, Phase.generate]
)
_NEGATE = {ast.Eq: ast.NotEq, ast.GtE: ast.Lt, ast.Lt: ast.GtE, ast.Gt: ast.LtE}
_SHIFT = {ast.GtE: ast.Gt, ast.Gt: ast.GtE}


class _Mutator(ast.NodeTransformer):
    """Applies ``kind`` to the ``index``-th matching node inside ``_rules``."""

    def __init__(self, kind: str, index: int) -> None:
        self.kind, self.index, self.seen, self.applied = kind, index, -1, False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if node.name == "_rules":
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


def _load(tree: ast.Module, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    sys.modules[name] = mod  # dataclasses look their module up while decorating
    try:
        exec(compile(tree, name, "exec"), mod.__dict__)
    finally:
        del sys.modules[name]
    return mod


def _mutant_module(kind: str, index: int) -> types.ModuleType:
    tree = ast.parse(inspect.getsource(aligned_module))
    m = _Mutator(kind, index)
    tree = ast.fix_missing_locations(m.visit(tree))
    assert m.applied, f"mutation {kind}#{index} found nothing to change"
    return _load(tree, f"aligned_mutant_{kind.replace(':', '_').replace('.', '_')}_{index}")


# _rules compares, in order: fill > last_fill, waiting_ranks == 0, decodes == 0,
# pressured > 0, waiting_ranks == world, fill >= fill_target, stall > 0,
# tick - grew_at >= stall, h + 1 >= budget.
MUTANTS = [
    *[("negate", i) for i in range(9)],
    ("shift", 0),  # fill >= last_fill: a flat fill counts as growth
    ("shift", 1),  # pressured >= 0
    ("shift", 2),  # fill > fill_target
    ("shift", 3),  # stall >= 0: "0 = off" lost
    ("shift", 4),  # tick - grew_at > stall
    ("shift", 5),  # h + 1 > budget
    ("off_by_one", 0),  # tick >= stall
    ("off_by_one", 1),  # h >= budget
    ("keep_right", 0),  # KV valve flag ignored
    ("keep_right", 1),  # dense without every rank waiting
    ("keep_left", 1),  # dense whenever every rank waits
    ("keep_right", 2),  # stall test without the "0 = off" guard
    ("drop_not", 0),  # enabled test inverted
    ("drop_assign:self._grew_at", 0),
    ("drop_assign:self._last_fill", 0),
    ("drop_assign:self._h", 0),  # a fire no longer resets h
    ("drop_increment", 0),  # a hold no longer counts
]


@pytest.mark.parametrize(("kind", "index"), MUTANTS, ids=[f"{k}{i}" for k, i in MUTANTS])
def test_lockstep_catches_injected_bug(kind: str, index: int) -> None:
    mod = _mutant_module(kind, index)
    machine = type("MutantLockstep", (AlignedLockstep,), {"impl": mod})
    with pytest.raises((AssertionError, Flaky)) as info:
        run_state_machine_as_test(machine, settings=_MUTANT_SETTINGS)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "state = MutantLockstep()" in notes and "state.setup(" in notes, notes


def test_unmutated_source_passes_through_the_same_path() -> None:
    """The harness itself must not break the gate: the identity 'mutant' passes."""
    mod = _load(ast.parse(inspect.getsource(aligned_module)), "aligned_identity")
    machine = type("IdentityLockstep", (AlignedLockstep,), {"impl": mod})
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=10))
