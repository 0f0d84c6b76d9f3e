"""R5's broken variants: the shipped Scheduler (or its blocks) with one edit each, out of
R3's reach by construction (one pass of 2 requests at block size 2): each bites from the 7th
request, past 6 decodes or 6 calls, or at a block size that is not a power of two."""

from __future__ import annotations

from typing import Any

from densegate.impl.sched.block_manager import BlockManager
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement.mutate import CodeMutant

__all__ = ["R5_MUTANTS"]


def _m(name: str, description: str, method: str, old: str, new: str, **focus: Any) -> CodeMutant:
    cls = BlockManager if method == "blocks_for" else Scheduler
    return CodeMutant(name, description, cls, method, old, new, focus)


_BUDGET = "cfg.max_num_batched_tokens - len(decodes)"
_SHIFT = "(num_tokens + self.block_size - 1) >> (self.block_size.bit_length() - 1)"
R5_MUTANTS: tuple[CodeMutant, ...] = (
    _m("admission_scans_six", "admission scans only the first 6 waiting requests",
       "_plan_prefill", "scan(self._admit_step, begin, self.waiting)",
       "scan(self._admit_step, begin, list(self.waiting)[:6])"),
    _m("budget_short_when_wide", "with more than 6 decodes the owed chunks get one token less",
       "_plan_prefill", _BUDGET, f"{_BUDGET} - (len(decodes) > 6)"),
    _m("late_chunk_over_cap", "the 7th request on gets a chunk one token over the cap",
       "_owed_step", "self._cap)", "self._cap + (r.seq_id >= 6))"),
    _m("late_admission_reserves_nothing", "the 7th request on is admitted without blocks",
       "_admit_step", "self.blocks.blocks_for(total)",
       "(self.blocks.blocks_for(total) if r.seq_id < 6 else 0)"),
    _m("admission_counts_calls", "the admission step counts its calls and refuses the 7th",
       "_admit_step", "total = r.num_tokens",
       "self._calls = getattr(self, '_calls', 0) + 1; "
       "total = r.num_tokens if self._calls <= 6 else 1 << 40"),
    _m("blocks_by_shift", "blocks counted by a shift: right only at powers of two",
       "blocks_for", "return -(-num_tokens // self.block_size)", f"return {_SHIFT}",
       **{"step 3 (block size 5)": {"P": 5, "g": 0}}),
)  # fmt: skip
"""Broken variants R5 must refute, each with the check that sees it."""
