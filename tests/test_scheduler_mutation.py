"""Bugs injected into the real Scheduler make the scheduler lockstep fail.

Each mutant edits one spot of ``impl/sched/scheduler.py``'s source or of the per-request
steps it folds (``impl/sched/steps.py``); the lockstep against the spec machine must catch
it (with a shrunk, replayable run).
"""

from __future__ import annotations

import types

import pytest
from hypothesis import settings

import densegate.impl.sched.scheduler as sched_module
import densegate.impl.sched.steps as steps_module
from tests.support.mutation import assert_lockstep_catches, assert_lockstep_passes, text_mutant
from tests.support.scheduler_lockstep import SchedulerLockstep

# (name, original text, replacement): each a plausible scheduler bug.
_BREAK = "return acc._replace(stopped=True), 0"
_FREE = "        self.blocks.free(r.block_table)\n"
_FINISH = f"{_FREE}        r.status = RequestStatus.FINISHED"
_BUDGET = "max_num_batched_tokens - len(decodes)"
# A preempted request comes back with output tokens to recompute: its blocks must
# hold prompt + output, not the prompt alone.
_RESERVE = "r.num_tokens\n        self.blocks.allocate(r.block_table, r.num_tokens)"
_PROMPT = "len(r.prompt_token_ids)"
MUTANTS = [
    ("preempt_oldest", "victim = running[-1]", "victim = running[0]"),
    ("uncapped_observation", "min(planned, self._dense)", "planned"),
    ("skip_blocked_head", _BREAK, "return acc, 0"),
    ("budget_ignores_decodes", _BUDGET, "max_num_batched_tokens"),
    ("chunk_cap_ignored", "n = min(left, cap, budget) if", "n = min(left, budget) if"),
    ("slots_ignored", "acc.slots <= 0 or ", ""),
    ("decode_not_advanced", "r.num_computed = pos + 1", "r.num_computed = pos"),
    ("finish_keeps_blocks", _FINISH, _FINISH.replace(_FREE, "")),
    ("prompt_only_reservation", _RESERVE, _RESERVE.replace("r.num_tokens)", f"{_PROMPT})")),
    ("prompt_only_fit", "blocks_for(total)", f"blocks_for({_PROMPT})"),
]
_STEPS = frozenset({"skip_blocked_head", "chunk_cap_ignored", "slots_ignored"})
"""The mutants whose spot is in the steps module."""


def _mutant(name: str, old: str, new: str) -> types.ModuleType:
    """The scheduler module with the edit, in its own source or in the steps it imports."""
    if name not in _STEPS:
        return text_mutant(sched_module, name, old, new)
    steps = text_mutant(steps_module, name, old, new)
    mod = text_mutant(sched_module, f"{name}_user", "class Scheduler:", "class Scheduler:")
    for k in steps_module.__all__:
        setattr(mod, k, getattr(steps, k))
    return mod


@pytest.mark.parametrize(("name", "old", "new"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_lockstep_catches_scheduler_bug(name: str, old: str, new: str) -> None:
    mod = _mutant(name, old, new)
    # Any failure (several distinct ones come as an exception group); its notes are checked.
    assert_lockstep_catches(
        SchedulerLockstep, mod, settings(stateful_step_count=40), raises=Exception
    )


def test_unmutated_source_passes() -> None:
    mod = text_mutant(sched_module, "identity", "class Scheduler:", "class Scheduler:")
    assert_lockstep_passes(
        SchedulerLockstep, mod, settings(stateful_step_count=10, max_examples=20)
    )
