"""One data-parallel rank: plan, one all-reduce, the shared decision, commit, run.

A prefill on one rank stalls every rank in the step's collectives, so the ranks
take ONE prefill decision per tick. Each tick every rank plans its pass, sends a
small int vector through one ``all_reduce(SUM)`` and feeds the reduced vector
and the tick number (never a clock) to its copy of ``AlignedGate``; the copies
decide alike because their inputs are equal. Ranks keep calling the collective
while any rank has work, so they also stop on the same tick.

The same vector carries what the runtime needs besides the gate (whether any
rank still has work, what each rank's previous pass did, each rank's load for
the least-loaded router), so a tick costs one collective; ``densegate.impl.dp_gate``
describes every slot. After each pass a rank streams its new tokens and ended
requests (``Collective.publish``).

A collective that fails or times out means a rank is gone. The survivors agree
on who is left (``densegate.impl.dp.membership``), hand the dead ranks'
unended requests over by the router rule (``densegate.impl.dp.readmission``),
and go on over the smaller group with a fresh aligned gate of its size: still
one decision per tick, identical on every survivor. The change takes effect at
the same collective call on every survivor, so their histories stay equal.

Phases run one after another over the same group, and a rank may die in any
of them: collectives are counted over the whole run, so survivors that failed
a phase's last call while others completed it (and went on to the next phase)
still agree on one history; an agreement not yet applied when a phase ends is
applied at the next phase's first call, where the others apply it too. The
group stops after the phase in which an agreement was applied: every request of
that phase has ended on the survivors, and the later phases do not run. The
rank hands each phase's report to ``on_phase`` as the phase ends, so a rank
that dies later has still reported the phases it finished.

This module knows nothing of torch.distributed: a ``Collective`` is anything that
sums int vectors (``densegate.impl.dp.collective`` has the torch one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from densegate.impl.dp.clock import RankClocks
from densegate.impl.dp.collective import (
    Collective,
    CollectiveError,
    PhasedCollective,
    StoreUnavailable,
)
from densegate.impl.dp.config import DPConfig, Phase, make_prompts
from densegate.impl.dp.hooks import NO_HOOKS, RankHooks
from densegate.impl.dp.membership import Agreement
from densegate.impl.dp.readmission import StreamView, hand_over, stream_record
from densegate.impl.dp.recovery import GroupState
from densegate.impl.dp.report import FIGURES, AlignmentStats, RankReport
from densegate.impl.dp.router import Router, fallback_route
from densegate.impl.dp.slots import IDLE, Prev, RuntimeGate, prev_slots
from densegate.impl.dp_gate import (
    ANY_WORK,
    LOADS,
    PREV_DECODE_ONLY,
    PREV_PREFILL,
    PREV_REASONS,
    RANKS,
)
from densegate.impl.engine import Engine
from densegate.impl.gate import Decision, PrefillGate
from densegate.impl.sched.plan import PassPlan
from densegate.impl.sched.request import RequestStatus
from densegate.impl.traces.replay import PassStats, summarize
from densegate.impl.traces.workload import TraceRequest

__all__ = ["run_rank"]

log = logging.getLogger("densegate.dp")


class _RankLoop:
    """The tick loop of one rank over one phase."""

    def __init__(
        self,
        rank: int,
        world: int,
        phase: Phase,
        phase_index: int,
        trace: list[tuple[int, TraceRequest]],
        prompts: list[list[int]],
        config: DPConfig,
        collective: Collective,
        hooks: RankHooks,
        group: GroupState,
        clocks: RankClocks | None = None,
    ) -> None:
        self.rank = rank
        self.members = list(range(world))
        self.phase = phase
        self.index = phase_index
        self.group = group
        self.trace = trace
        self.prompts = prompts
        self.config = config
        self.collective = collective
        self.keep = getattr(collective, "keeps_stream", True)  # False: nobody reads records
        self.engine = Engine(phase.engine)
        self.engine.report_outputs = self.keep  # they only feed the stream records
        self.hooks = hooks.phase(rank, phase_index, phase, self.engine)
        self.clock = None if clocks is None else clocks.phase(rank, phase_index, phase, self.engine)
        self.sched = self.engine.scheduler
        self.gate_config = config.gate_config(phase.engine)
        self.gate = RuntimeGate(self.gate_config, world)
        self.local_gate = PrefillGate(phase.engine.gate_config())
        self.router = Router(config.router, world)
        self.least_loaded = config.router == "least-loaded"
        self.stats = PassStats(phase.engine.dense)
        self.align = AlignmentStats()
        self.kv_high = config.kv_high_watermark * phase.engine.num_blocks
        self.report = RankReport(
            rank,
            world,
            phase.name,
            phase.coordination,
            "on" if phase.engine.gate_enabled else "off",
            phase.engine.runner,
            config.router,
        )
        self.next = 0  # index into trace of the next unrouted arrival
        self.by_id = {str(idx): req for idx, req in trace}
        self.calls = 0  # collectives completed (or adopted) this phase
        self.view = StreamView()  # every dead rank's sealed stream of this phase
        self.collective_s = 0.0

    # -- arrivals -----------------------------------------------------------------------
    def _add(self, rid: str, seen: Sequence[int] = ()) -> None:
        req = self.by_id[rid]
        prompt = self.prompts[int(rid)] + list(seen)
        self.engine.add_request(prompt, req.output_len - len(seen), request_id=rid)

    def _route(self, tick: int, bring_forward: bool) -> None:  # tick: a clock's time, if any
        """Route every arrival due at ``tick`` (and one more if the group is idle)."""
        trace = self.trace
        while self.next < len(trace) and (
            trace[self.next][1].arrival_pass <= tick or bring_forward
        ):
            idx, req = trace[self.next]
            target = self.members[self.router.route(req.prompt_len)]
            self.report.assignment[str(idx)] = target
            if target == self.rank:
                self._add(str(idx))
            self.next += 1
            bring_forward = False

    # -- one pass -----------------------------------------------------------------------
    def _vector(self, plan: PassPlan, prev: Prev) -> list[int]:
        sched = self.sched
        loads = [0] * len(self.members)
        if self.least_loaded:  # tokens still to compute; O(running), not O(queue)
            loads[self.members.index(self.rank)] = sched.queued_tokens + sum(
                r.num_tokens - r.num_computed for r in sched.running
            )
        return self.gate.vector(plan, sched, self.kv_high, prev, loads)

    def _execute(self, plan: PassPlan, decision: Decision, tick: int) -> Prev:
        outputs = self.engine.execute(plan, decision)
        record = stream_record(tick, outputs) if self.keep else None
        if record is not None:
            self.collective.publish(record)
        rec = self.sched.pass_log[-1]
        self.stats.observe(rec)
        return prev_slots(rec.prefill_tokens, rec.decode_seqs, decision.reason)

    # -- the collective, and what a failure of it does -------------------------------------
    def _reduce(self, plan: PassPlan, prev: Prev, tick: int) -> list[int] | None:
        """The tick's all-reduce; after a failure, the survivors' (None: store gone)."""
        group = self.group
        while True:
            agreed = None if group.pending is None else group.apply(self.rank, self.report, tick)
            if agreed is not None:
                self._apply(agreed)
            vec = self._vector(plan, prev)
            t0 = time.perf_counter()
            try:
                self.hooks.before_collective(self.collective, vec)
                total = self.collective.all_reduce_sum(vec, first=self.calls == 0)
            except CollectiveError as e:
                agreed = self._recover(tick, e, time.perf_counter() - t0)
                if agreed is None:
                    return None
                if agreed.adopt is None or agreed.adopt[0] != group.calls + 1:
                    continue  # retry this call over the survivors
                total = agreed.adopt[1]  # the leaders completed it: so did we
            self.collective_s += time.perf_counter() - t0
            self.calls += 1
            group.completed(total)
            return total

    def _recover(self, tick: int, err: Exception, waited_s: float) -> Agreement | None:
        msg = "rank %d: collective failed at tick %d after %.2fs (%s)"
        log.warning(msg, self.rank, tick, waited_s, err)
        try:
            return self.group.recover(self.collective, err, waited_s)
        except StoreUnavailable as e:
            log.warning("rank %d: %s; finishing alone with the local gate", self.rank, e)
            self.report.faults.append({"tick": tick, "error": str(e)[:300], "store_lost": True})
            return None

    def _apply(self, agreed: Agreement) -> None:
        """The new membership, from this call on: hand-over, router, gate (the fault is
        in the report already: ``GroupState.apply``)."""
        rep = self.report
        old = self.members
        for d, raw in sorted(agreed.streams.items()):
            self.view.add(d, raw)
        total = self.group.last_total
        loads = [total[LOADS + old.index(m)] if total else 0 for m in agreed.members]
        costs = {rid: req.prompt_len for rid, req in self.by_id.items()}
        h = hand_over(
            rep.assignment, agreed.dead, agreed.members, self.view, self.config.router, loads, costs
        )
        self.members = list(agreed.members)
        self.router = h.router
        self.gate = RuntimeGate(self.gate_config, len(self.members))
        rep.ended_on_dead.update({rid: [r, s] for rid, (r, s) in h.ended_on_dead.items()})
        for rid, (src, dst) in h.targets.items():
            rep.assignment[rid] = dst
            rep.readmitted[rid] = [src, dst]
            if dst == self.rank:
                seen = self.view.tokens.get(rid, [])
                rep.seen[rid] = list(seen)
                self._add(rid, seen)
        rep.faults[-1].update(readmitted=len(h.targets), ended_on_dead=len(h.ended_on_dead))
        msg = "rank %d: survivors %s re-admit %d request(s) of %s"
        log.warning(msg, self.rank, self.members, len(h.targets), agreed.dead)

    def _alone(self, tick: int) -> None:
        """The store is gone with rank 0: nobody can agree, so finish alone, local gate.

        Rank 0's requests are lost; later arrivals go round-robin over the others."""
        rep = self.report
        survivors = [m for m in self.members if m != 0]
        rep.lost = sorted((rid for rid, r in rep.assignment.items() if r == 0), key=int)
        trace = self.trace
        while True:
            idle = not self.sched.has_work()
            while self.next < len(trace) and (trace[self.next][1].arrival_pass <= tick or idle):
                idx, _ = trace[self.next]
                target = fallback_route(idx, survivors)
                rep.assignment[str(idx)] = target
                if target == self.rank:
                    self._add(str(idx))
                    idle = False
                self.next += 1
            if not self.sched.has_work():
                return
            plan = self.engine.plan()
            decision = self.local_gate.decide_counts(plan.waiting_tokens, plan.decode_seqs)
            rep.local_decisions.append((tick, decision.fire, decision.reason.name))
            self._execute(plan, decision, tick)
            tick += 1

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> RankReport:
        if isinstance(self.collective, PhasedCollective):
            self.collective.begin_phase(self.index)
        t_start = time.perf_counter()
        aligned = self.phase.coordination == "aligned"
        tick = 0
        prev = IDLE
        while True:
            self.hooks.at_tick(tick)
            self._route(tick if self.clock is None else self.clock.now(tick), False)
            while True:
                plan = self.engine.plan()
                total = self._reduce(plan, prev, tick)
                if total is None:
                    self._alone(tick)
                    return self._finish(tick, time.perf_counter() - t_start)
                world = total[RANKS]
                if self.align.ticks < tick:  # the first reduce after tick - 1 reports it
                    self.align.observe(
                        world,
                        total[PREV_PREFILL],
                        total[PREV_DECODE_ONLY],
                        total[PREV_REASONS:LOADS],
                    )
                self.router.observe(total[LOADS : LOADS + world])
                if total[ANY_WORK] or self.next == len(self.trace):
                    break
                # Every rank is idle: bring the next arrival forward and plan this tick
                # again (an idle tick would schedule nothing and measure nothing).
                if self.clock is None:
                    self._route(tick, True)
                else:  # a clock moves to the next arrival, and all then due are routed
                    self._route(self.clock.idle_to(self.trace[self.next][1].arrival_pass), False)
            if not total[ANY_WORK]:
                break
            if aligned:
                decision = self.gate.decide_sum(total, tick)
            else:
                decision = self.local_gate.decide_counts(plan.waiting_tokens, plan.decode_seqs)
            self.report.decisions.append((tick, decision.fire, decision.reason._name_))
            prev = self._execute(plan, decision, tick)
            tick += 1
        return self._finish(tick, time.perf_counter() - t_start)

    def _finish(self, tick: int, wall_s: float) -> RankReport:
        rep = self.report
        engine = self.engine
        for rid, r in rep.assignment.items():
            if r != self.rank:
                continue
            status = engine.request(rid).status
            if status is RequestStatus.FINISHED:
                rep.finished.append(rid)
            elif status is RequestStatus.REJECTED:
                rep.rejected.append(rid)
            else:
                rep.unfinished.append(rid)
        if self.config.keep_outputs:
            rep.outputs = {
                rid: rep.seen.get(rid, []) + list(engine.request(rid).output_token_ids)
                for rid in rep.finished
            }
        self.sched.check_invariants()
        rep.kv_blocks = [self.sched.blocks.num_free, self.sched.config.num_blocks]
        full = summarize(engine, self.stats, wall_s)
        rep.figures = {k: full[k] for k in FIGURES}
        rep.alignment = self.align.as_dict()
        rep.ticks = tick
        rep.wall_s = wall_s
        rep.collective_ms_per_tick = 1e3 * self.collective_s / max(self.calls, 1)
        self.hooks.finish(rep)
        return rep


def run_rank(
    rank: int,
    world_size: int,
    trace: Sequence[TraceRequest],
    config: DPConfig,
    collective: Collective,
    *,
    hooks: RankHooks = NO_HOOKS,
    on_phase: Callable[[list[RankReport]], None] | None = None,
    clocks: RankClocks | None = None,
) -> list[RankReport]:
    """Run every phase of ``config`` on this rank; stops after a phase where a rank died.

    Every rank must be given the same trace and config. Prompts come from the
    first phase's vocabulary for every phase, so phases differ only in how they
    decide. ``hooks`` (``densegate.impl.dp.hooks``) are the lab's way in.
    ``on_phase`` gets the reports so far as each phase ends (``rank_main`` writes
    them), so what a rank finished outlives it. ``clocks`` (default: the tick) say
    when an arrival is due (``densegate.impl.dp.clock``). Raises ``Excluded`` if the
    survivors agreed this rank is gone.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world_size {world_size}")
    ordered = sorted(enumerate(trace), key=lambda p: p[1].arrival_pass)
    # Request ids are positions in arrival order, as run_trace numbers them.
    indexed = [(i, req) for i, (_, req) in enumerate(ordered)]
    reports: list[RankReport] = []
    prompts: list[list[int]] | None = None
    group = GroupState()
    phases = config.run_phases
    for k, phase in enumerate(phases):
        loop = _RankLoop(
            rank, world_size, phase, k, indexed, [], config, collective, hooks, group, clocks
        )
        if prompts is None:
            prompts = make_prompts(trace, config.seed, loop.engine.vocab_size or 32000)
        loop.prompts = prompts
        report = loop.run()
        reports.append(report)
        stop = bool(report.faults) or k == len(phases) - 1
        if stop:
            group.close(report)
        if on_phase is not None:
            on_phase(list(reports))
        if stop:
            break
    if isinstance(collective, PhasedCollective):
        collective.leave(group.calls, group.last_total)
    return reports
