"""R6's broken variants: the shipped Scheduler with one edit each to one request's step, each
biting from the 7th request on (seq id >= 6) or with more than 6 running, out of R3's reach
(2 requests) by construction; ``victim_sixth_when_wide`` is R4's twin of that name."""

from __future__ import annotations

from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement.mutate import CodeMutant

__all__ = ["R6_MUTANTS"]

_LATE = "(r.seq_id >= 6)"
R6_MUTANTS: tuple[CodeMutant, ...] = tuple(
    CodeMutant(name, description, Scheduler, method, old, new)
    for name, description, method, old, new in (
        ("late_turn_reads_small_blocks", "from the 7th request its blocks read one position short",
         "_turn", "len(r.block_table) *", f"(len(r.block_table) - {_LATE}) *"),
        ("late_decode_takes_two", "from the 7th request a growing decode takes too many",
         "_take_block", "r.num_tokens)", f"r.num_tokens + {_LATE} * self.blocks.block_size)"),
        ("late_turn_owes", "from the 7th request a decode is taken for an owed prefill",
         "_walk_turn", "if not dec:", f"if not dec or {_LATE}:"),
        ("victim_sixth_when_wide", "with more than 6 running the victim is the 6th, not the newest",
         "_walk_turn", "victim = running[-1]",
         "victim = running[5] if len(running) > 6 else running[-1]"),
        ("late_preempt_keeps_kv", "from the 7th request a preemption keeps its KV count",
         "_preempt", "r.num_computed = 0", f"r.num_computed = r.num_computed * {_LATE}"),
        ("late_admission_short", "from the 7th request an admission reserves for one token less",
         "_admit_chunk", "r.block_table, r.num_tokens)", f"r.block_table, r.num_tokens - {_LATE})"),
        ("late_chunk_samples_early", "from the 7th request a chunk one short of the end samples",
         "_prefill_chunk", "stop == r.num_tokens", f"stop >= r.num_tokens - {_LATE}"),
        ("late_decode_skips", "from the 7th request a decode counts two tokens computed",
         "_decode_chunk", "r.num_computed = pos + 1", f"r.num_computed = pos + 1 + {_LATE}"),
        ("late_finish_early", "from the 7th request it finishes one token before its length",
         "_sample", "len(r.output_token_ids) >= r.max_tokens",
         f"len(r.output_token_ids) >= r.max_tokens - {_LATE}"),
        ("late_abort_keeps_blocks", "from the 7th request an abort keeps its blocks",
         "abort", "self.blocks.free(req.block_table)",
         "self.blocks.free(req.block_table) if req.seq_id < 6 else None"),
        ("late_undo_one_short", "from the 7th request undo leaves one token computed",
         "_undo_chunk", "r.num_computed = c.start", "r.num_computed = c.start + (c.seq_id >= 6)"),
    )
)  # fmt: skip
"""Broken variants R6 must refute, one per step."""
