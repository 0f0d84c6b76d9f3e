"""Bugs injected into the real Scheduler make the scheduler lockstep fail.

Each mutant edits one spot of ``impl/scheduler.py``'s source; the lockstep
against the spec machine must catch it (with a shrunk, replayable run).
"""

from __future__ import annotations

import inspect
import sys
import types

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

import densegate.impl.scheduler as sched_module
from tests.scheduler_lockstep import SchedulerLockstep

SOURCE = inspect.getsource(sched_module)

# (name, original text, replacement): each a plausible scheduler bug.
_BREAK = "if need > free:\n                    break"
_FREE = "        self.blocks.free(r.block_table)\n"
_FINISH = f"{_FREE}        r.status = RequestStatus.FINISHED"
_BUDGET = "max_num_batched_tokens - len(decodes)"
MUTANTS = [
    ("preempt_oldest", "victim = running[-1]", "victim = running[0]"),
    ("uncapped_observation", "min(planned, self._dense)", "planned"),
    ("skip_blocked_head", _BREAK, _BREAK.replace("break", "continue")),
    ("budget_ignores_decodes", _BUDGET, "max_num_batched_tokens"),
    ("chunk_cap_ignored", "n = min(left, cap, budget)", "n = min(left, budget)"),
    ("slots_ignored", "if slots == 0 or budget == 0:", "if budget == 0:"),
    ("decode_not_advanced", "r.num_computed = pos + 1", "r.num_computed = pos"),
    ("finish_keeps_blocks", _FINISH, _FINISH.replace(_FREE, "")),
]


def _module(name: str, old: str, new: str) -> types.ModuleType:
    assert SOURCE.count(old) == 1, f"{name}: mutation site not unique"
    mod = types.ModuleType(f"sched_mutant_{name}")
    sys.modules[mod.__name__] = mod
    try:
        exec(compile(SOURCE.replace(old, new), mod.__name__, "exec"), mod.__dict__)
    finally:
        del sys.modules[mod.__name__]
    return mod


@pytest.mark.parametrize(("name", "old", "new"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_lockstep_catches_scheduler_bug(name: str, old: str, new: str) -> None:
    machine = type(
        "MutantSchedulerLockstep", (SchedulerLockstep,), {"impl": _module(name, old, new)}
    )
    with pytest.raises(Exception) as info:  # any failure; what kind is checked below
        run_state_machine_as_test(machine, settings=settings(stateful_step_count=40))
    notes = _notes(info.value)
    assert "state.setup(" in notes, f"not a shrunk lockstep failure: {info.value!r}"


def _notes(exc: BaseException) -> str:
    """Hypothesis's replayable runs, also from inside an exception group."""
    out = list(getattr(exc, "__notes__", []))
    for sub in getattr(exc, "exceptions", ()):
        out.append(_notes(sub))
    return "\n".join(out)


def test_unmutated_source_passes() -> None:
    mod = _module("identity", "class Scheduler:", "class Scheduler:")
    machine = type("IdentityLockstep", (SchedulerLockstep,), {"impl": mod})
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=10, max_examples=20))
