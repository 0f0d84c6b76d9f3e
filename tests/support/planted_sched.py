"""Three planted Scheduler bugs that the old checks passed: twins of the shipped code there.

A reviewer planted each as one edit of the shipped source, and each went through
``densegate prove`` (R3: 2 requests, block size 2) and the suite (the lockstep at
up to 6 slots, block sizes 1, 2, 4), because at those sizes it behaves exactly as
the shipped Scheduler does:

- ``victim_sixth_when_wide``: KV exhaustion preempts ``running[5]`` once more than 6
  run, not the newest (8 requests: preempts out of order);
- ``admission_scans_six``: admission looks at the first 6 waiting requests only (8
  requests: the 7th's first token a pass late);
- ``blocks_by_shift``: blocks counted by a shift, ``(tokens + size - 1) >> log2(size)``,
  a ceil-div only at powers of two (block size 5: too many blocks).

Each is the shipped method's source with that one snippet replaced, built by
``CodeMutant`` (the refinement obligations' own device: a mutant whose snippet is gone
from the source is an error), so it is a real edit of what users run; ``module``
hands one to the lockstep as its ``impl``. ``PLANTED`` says where each is the shipped
Scheduler (``tests/test_planted_sched.py`` asserts it) and which widened lockstep
refutes it. R4 refutes the same three edits inside ``densegate prove``.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

from densegate.impl.sched.batch import NullRunner
from densegate.impl.sched.block_manager import BlockManager
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.request import Request
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.refinement.scheduler_traces import Make
from densegate.proofs.refinement.scheduler_wide import scheduler_of
from tests.support.scheduler_lockstep import (
    BLOCK_SIZES,
    NARROW_BLOCK_SIZES,
    REGIMES,
    WIDE,
    WIDE_SLOTS,
    config_of,
    setup_of,
)

__all__ = ["PLANTED", "Planted", "module", "pass_log"]


@dataclass(frozen=True)
class Planted:
    """A twin: the edit, where it is the shipped Scheduler, and the lockstep that refutes it."""

    mutant: CodeMutant
    same_in: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...]
    """(lockstep regimes, block sizes) where it runs exactly as the shipped Scheduler: the
    old checks' sizes (narrow regimes, block sizes 1, 2, 4) first, then its own wider ones."""
    caught_in: tuple[str, tuple[int, ...]]
    """The widened lockstep (regime, block sizes) that refutes it."""
    witness: tuple[dict[str, Any], list[tuple[int, int]]]
    """A run (setup, moves for ``pass_log``) on which it does otherwise than the shipped
    Scheduler: 8 requests, or block size 5."""

    @property
    def name(self) -> str:
        return self.mutant.name


_OLD = (REGIMES, NARROW_BLOCK_SIZES)


def _burst(bs: int, lens: list[tuple[int, int]], passes: int, **cfg: Any) -> Any:
    """Every request arriving at pass 0, nothing aborted, then ``passes - 1`` quiet passes."""
    gate = {"cap": cfg["T"], "chunked": False, "B": cfg["T"], "K": 1, "enabled": True}
    return setup_of(gate | cfg, bs, lens, WIDE_SLOTS), [(len(lens), 99)] + [(0, 99)] * (passes - 1)


# 8 one-token prompts, 3 tokens each, every KV block taken at pass 0: pass 1's decodes
# preempt with 8 running; 8 admitted at once; one 4-token prompt at block size 5.
_PREEMPTS = _burst(1, [(1, 3)] * 8, 2, S=8, T=8, N=8, L=6)
_ADMITS = _burst(2, [(1, 3)] * 8, 1, S=8, T=8, N=8, L=6)
_FIVE = _burst(5, [(4, 1)], 1, S=1, T=5, N=1, L=5)
_SHIFT = "(num_tokens + self.block_size - 1) >> (self.block_size.bit_length() - 1)"
PLANTED: tuple[Planted, ...] = (
    Planted(
        CodeMutant("victim_sixth_when_wide",
                   "with more than 6 running, KV exhaustion preempts running[5], not the newest",
                   Scheduler, "_walk_turn", "victim = running[-1]",
                   "victim = running[5] if len(running) > 6 else running[-1]"),
        (_OLD, (REGIMES, BLOCK_SIZES)),
        (WIDE, (1,)),
        _PREEMPTS,
    ),
    Planted(
        CodeMutant("admission_scans_six", "admission scans only the first 6 waiting requests",
                   Scheduler, "_plan_prefill", "scan(self._admit_step, begin, self.waiting)",
                   "scan(self._admit_step, begin, list(self.waiting)[:6])"),
        (_OLD, (REGIMES, BLOCK_SIZES)),
        (WIDE, (2,)),
        _ADMITS,
    ),
    Planted(
        CodeMutant("blocks_by_shift",
                   "blocks counted by a shift, (tokens + size - 1) >> log2(size): right only "
                   "at powers of two", BlockManager, "blocks_for",
                   "return -(-num_tokens // self.block_size)", f"return {_SHIFT}"),
        (_OLD, ((WIDE,), (1, 2, 4, 16))),
        ("any", (5,)),
        _FIVE,
    ),
)  # fmt: skip


def module(twin: Planted) -> types.ModuleType:
    """The lockstep's ``impl`` for ``twin``: its Scheduler, the shipped config."""
    mod = types.ModuleType(f"planted_{twin.name}")
    mod.Scheduler = scheduler_of(twin.mutant)  # type: ignore[attr-defined]
    mod.SchedulerConfig = SchedulerConfig  # type: ignore[attr-defined]
    return mod


def pass_log(make: Make, setup: dict[str, Any], moves: list[tuple[int, int]]) -> list[Any]:
    """Everything a Scheduler made by ``make`` shows on a run: per pass its record, the
    order of its running list and queue, and every request's status, computed tokens,
    outputs and block count. ``moves``: per pass, how many requests arrive (at least
    one when nothing runs) and which slot is aborted (if it is live)."""
    sched = make(config_of(setup))
    runner = NullRunner(7)
    lens = setup["lens"]
    reqs: list[Request] = []
    out: list[Any] = []
    for arrive, abort in moves:
        if abort < len(reqs) and not reqs[abort].status.ended:
            sched.abort(reqs[abort])
        for _ in range(arrive if sched.has_work() else max(arrive, 1)):
            if len(reqs) == len(lens):
                break
            P, M = lens[len(reqs)]
            reqs.append(Request(str(len(reqs)), len(reqs), list(range(P)), M, 0, 0.0))
            sched.add(reqs[-1])
        batch = sched.schedule()
        sched.update(batch, runner.execute(batch), 0.0)
        state = [(r.status, r.num_computed, len(r.output_token_ids), len(r.block_table))
                 for r in reqs]  # fmt: skip
        order = ([r.seq_id for r in sched.running], [r.seq_id for r in sched.waiting])
        out.append((sched.pass_log[-1], sched.gate.hold_passes, sched.blocks.num_free))
        out.append((order, state))
    return out
