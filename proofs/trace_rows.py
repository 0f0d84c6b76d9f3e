"""A counterexample as a person reads it: the model of a bounded run, pass by pass.

Values come from z3's model (completed, so a variable the run never constrains
still reads as a value); the last row names the commands enabled there, so a
state with none or several (a P7-style bug) shows in the trace.
"""

from __future__ import annotations

from typing import Any

import z3

from densegate.proofs.obligation import Obligation
from densegate.proofs.results import Trace
from densegate.spec.machine import Frame, Machine, Vars

__all__ = ["GUARDS", "model_trace", "model_value"]

GUARDS = "guards true"
"""Trace column: the commands enabled at the last pass (0 or 2+ is a P7-style bug)."""


def model_value(model: z3.ModelRef, term: z3.ExprRef) -> Any:
    """``term`` in ``model`` as a Python bool or int (anything else as z3 prints it)."""
    v = model.eval(term, model_completion=True)
    if z3.is_true(v):
        return True
    if z3.is_false(v):
        return False
    if z3.is_int_value(v):
        return v.as_long()
    return str(v)


def model_trace(
    model: z3.ModelRef,
    machine: Machine,
    p: Vars,
    frames: list[Frame],
    last: Frame,
    k: int,
    ob: Obligation,
) -> Trace:
    """Passes ``0..k`` of ``frames`` under ``model`` (``last``: the frame after pass ``k``),
    as ``ob``'s report shows them."""
    rows = []
    for i in range(k + 1):
        f = frames[i]
        nxt = frames[i + 1].state if i < k else last.state
        row: dict[str, Any] = {"pass": i}
        row.update({n: model_value(model, v) for n, v in f.obs.items()})
        row.update({n: model_value(model, v) for n, v in f.state.items()})
        final_without_step = i == k and not ob.needs_step
        for n, v in f.out.items():
            row[n] = None if final_without_step else model_value(model, v)
        if not final_without_step:
            row.update({f"next_{n}": model_value(model, v) for n, v in nxt.items()})
        if i == k:
            cmds = machine.commands(p, f.state, f.obs)
            row[GUARDS] = [c.name for c in cmds if z3.is_true(model.eval(c.guard, True))]
        rows.append(row)
    params = {n: model_value(model, v) for n, v in p.items()}
    return Trace(params, rows, ob.statement, [machine.display_row(r) for r in rows])
