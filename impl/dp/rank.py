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
describes every slot.

A collective that fails or times out means a rank is gone. The survivors ask
the ``Collective`` who is still alive (and how far each had routed), report
the requests the router had sent to the dead ranks as lost, route later
arrivals among themselves, and finish what they hold with their local
``PrefillGate``, without further collectives (``_RankLoop._fallback``).

This module knows nothing of torch.distributed: a ``Collective`` is anything
that sums int vectors across ranks (``densegate.impl.dp.collective`` has the
torch one; tests use threads). The config, the vector layout and the reports
live in ``config``, ``densegate.impl.dp_gate`` and ``report``; their names are
importable from here too.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from densegate.impl.cost.timeline import RankTiming
from densegate.impl.dp.collective import Collective, CollectiveError
from densegate.impl.dp.config import COORDINATIONS as COORDINATIONS
from densegate.impl.dp.config import DPConfig, Phase, make_prompts, phases
from densegate.impl.dp.report import FIGURES, AlignmentStats, RankReport
from densegate.impl.dp.router import Router, fallback_route
from densegate.impl.dp_gate import (
    ANY_WORK,
    LOADS,
    PREV_DECODE_ONLY,
    PREV_PREFILL,
    PREV_REASONS,
    REASONS,
    VECTOR_SIZE,
    AlignedGate,
    RankObservation,
    ReducedObservation,
    vector_size,
)
from densegate.impl.engine import Engine
from densegate.impl.gate import Decision, PrefillGate, Reason
from densegate.impl.sched.request import RequestStatus
from densegate.impl.sched.scheduler import PassPlan
from densegate.impl.traces.replay import PassStats, summarize
from densegate.impl.traces.workload import TraceRequest

__all__ = [
    "ANY_WORK",
    "CRASH_EXIT_CODE",
    "LOADS",
    "PREV_DECODE_ONLY",
    "PREV_PREFILL",
    "PREV_REASONS",
    "AlignmentStats",
    "Collective",
    "CollectiveError",
    "DPConfig",
    "Phase",
    "RankReport",
    "make_prompts",
    "phases",
    "run_rank",
    "vector_size",
]

log = logging.getLogger("densegate.dp")

CRASH_EXIT_CODE = 17
"""Exit status of a rank killed by the ``DPConfig.crash`` test hook."""


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
        on_crash: Callable[[str], None],
    ) -> None:
        self.rank = rank
        self.world = world
        self.phase = phase
        self.phase_index = phase_index
        self.trace = trace
        self.prompts = prompts
        self.config = config
        self.collective = collective
        self.on_crash = on_crash
        self.engine = Engine(phase.engine)
        self.timing = RankTiming(self.engine)  # its passes' work and times, for the report
        self.sched = self.engine.scheduler
        self.gate = AlignedGate(config.gate_config(phase.engine), world)
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
        self.added: set[str] = set()
        self.collective_s = 0.0
        self.collective_calls = 0

    # -- arrivals -----------------------------------------------------------------------
    def _add(self, idx: int, req: TraceRequest) -> None:
        self.engine.add_request(self.prompts[idx], req.output_len, request_id=str(idx))
        self.added.add(str(idx))

    def _route(self, tick: int, bring_forward: bool) -> None:
        """Route every arrival due at ``tick`` (and one more if the group is idle)."""
        trace = self.trace
        while self.next < len(trace) and (
            trace[self.next][1].arrival_pass <= tick or bring_forward
        ):
            idx, req = trace[self.next]
            target = self.router.route(req.prompt_len)
            self.report.assignment[str(idx)] = target
            if target == self.rank:
                self._add(idx, req)
            self.next += 1
            bring_forward = False

    # -- one pass -----------------------------------------------------------------------
    def _vector(self, plan: PassPlan, prev: tuple[bool, bool, Reason | None]) -> list[int]:
        sched = self.sched
        used = sched.config.num_blocks - sched.blocks.num_free
        obs = RankObservation(
            plan.waiting_tokens, plan.decode_seqs, used >= self.kv_high, bool(plan.partials)
        )
        vec = self.gate.contribution(obs)
        prefilled, decode_only, reason = prev
        vec += [int(sched.has_work()), int(prefilled), int(decode_only)]
        vec += [int(prefilled and reason is r) for r in REASONS]
        loads = [0] * self.world
        if self.least_loaded:  # tokens still to compute; O(running), not O(queue)
            loads[self.rank] = sched.queued_tokens + sum(
                r.num_tokens - r.num_computed for r in sched.running
            )
        return vec + loads

    def _execute(self, plan: PassPlan, decision: Decision) -> tuple[bool, bool, Reason]:
        self.engine.execute(plan, decision)
        rec = self.sched.pass_log[-1]
        self.stats.observe(rec)
        prefilled = rec.prefill_tokens > 0
        return prefilled, rec.decode_seqs > 0 and not prefilled, decision.reason

    def _local_decision(self, plan: PassPlan) -> Decision:
        return self.local_gate.decide_counts(plan.waiting_tokens, plan.decode_seqs)

    def _maybe_crash(self, tick: int) -> None:
        crash = self.config.crash
        if crash is not None and self.phase_index == 0 and crash == (self.rank, tick):
            self.on_crash(self.config.crash_mode)

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> RankReport:
        t_start = time.perf_counter()
        world = self.world
        aligned = self.phase.coordination == "aligned"
        tick = 0
        prev: tuple[bool, bool, Reason | None] = (False, False, None)
        done = False
        while not done:
            self._maybe_crash(tick)
            self._route(tick, False)
            while True:
                plan = self.engine.plan()
                vec = self._vector(plan, prev)
                t0 = time.perf_counter()
                try:
                    total = self.collective.all_reduce_sum(vec, first=self.collective_calls == 0)
                except CollectiveError as e:
                    self._fallback(tick, e, time.perf_counter() - t0)
                    return self._finish(tick, time.perf_counter() - t_start)
                self.collective_s += time.perf_counter() - t0
                self.collective_calls += 1
                if self.align.ticks < tick:  # the first reduce after tick - 1 reports it
                    self.align.observe(
                        world,
                        total[PREV_PREFILL],
                        total[PREV_DECODE_ONLY],
                        total[PREV_REASONS:LOADS],
                    )
                self.router.observe(total[LOADS : LOADS + world])
                if total[ANY_WORK]:
                    break
                if self.next == len(self.trace):
                    done = True
                    break
                # Every rank is idle: bring the next arrival forward and plan this tick
                # again (an idle tick would schedule nothing and measure nothing).
                self._route(tick, True)
            if done:
                break
            if aligned:
                reduced = ReducedObservation.from_sum(total[:VECTOR_SIZE], world)
                decision = self.gate.decide(reduced, tick)
            else:
                decision = self._local_decision(plan)
            self.report.decisions.append((tick, decision.fire, decision.reason.name))
            prev = self._execute(plan, decision)
            tick += 1
        return self._finish(tick, time.perf_counter() - t_start)

    def _fallback(self, tick: int, err: Exception, waited_s: float) -> None:
        """The group is broken: agree on the survivors, then finish alone with the local gate.

        A rank that dies inside a collective may let some survivors complete that
        tick while others fail it, so survivors can disagree by one tick on which
        arrivals the shared router already placed. They publish how far they
        routed; arrivals past the smallest such point are routed again with
        ``fallback_route``, and a rank withdraws (aborts, still WAITING) any it
        had taken that now belong to another survivor.
        """
        log.warning(
            "rank %d: collective failed at tick %d after %.2fs (%s); falling back to the "
            "local gate",
            self.rank,
            tick,
            waited_s,
            err,
        )
        t0 = time.perf_counter()
        routed = dict(self.collective.survivors(self.next))
        routed[self.rank] = self.next
        survivors = sorted(routed)
        boundary = min(routed.values())
        dead = sorted(set(range(self.world)) - set(survivors))
        assignment = self.report.assignment
        withdrawn = []
        for pos in range(boundary, self.next):
            idx = self.trace[pos][0]
            rid = str(idx)
            if assignment.pop(rid) != self.rank or fallback_route(idx, survivors) == self.rank:
                continue
            if self.engine.request(rid).status is RequestStatus.WAITING:
                self.engine.abort(rid)
                self.added.discard(rid)
                withdrawn.append(rid)
            else:  # cannot happen (no pass ran since it was routed); keep it rather than lose it
                assignment[rid] = self.rank
        self.next = boundary
        lost = sorted((rid for rid, r in assignment.items() if r in dead), key=int)
        log.warning(
            "rank %d: survivors %s, dead %s; %d request(s) lost with the dead: %s",
            self.rank,
            survivors,
            dead,
            len(lost),
            lost,
        )
        failure: dict[str, Any] = {
            "tick": tick,
            "error": str(err)[:300],
            "detected_after_s": waited_s,
            "liveness_s": time.perf_counter() - t0,
            "survivors": survivors,
            "dead_ranks": dead,
            "lost_requests": lost,
            "rerouted_from": boundary,
            "withdrawn": withdrawn,
        }
        self.report.failure = failure
        trace = self.trace
        while True:
            idle = not self.sched.has_work()
            while self.next < len(trace) and (trace[self.next][1].arrival_pass <= tick or idle):
                idx, req = trace[self.next]
                target = fallback_route(idx, survivors)
                assignment[str(idx)] = target
                if target == self.rank:
                    if str(idx) not in self.added:
                        self._add(idx, req)
                    idle = False
                self.next += 1
            if not self.sched.has_work():
                break
            plan = self.engine.plan()
            decision = self._local_decision(plan)
            self.report.local_decisions.append((tick, decision.fire, decision.reason.name))
            self._execute(plan, decision)
            tick += 1
        failure["ticks_alone"] = len(self.report.local_decisions)
        failure["finished_alone_s"] = time.perf_counter() - t0

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
            rep.outputs = {rid: list(engine.request(rid).output_token_ids) for rid in rep.finished}
        full = summarize(engine, self.stats, wall_s)
        rep.figures = {k: full[k] for k in FIGURES}
        rep.timing = self.timing.report()
        rep.alignment = self.align.as_dict()
        rep.ticks = tick
        rep.wall_s = wall_s
        calls = max(self.collective_calls, 1)
        rep.collective_ms_per_tick = 1e3 * self.collective_s / calls
        return rep


def _exit_now(mode: str) -> None:
    """The crash hook's default: die without cleanup, like a killed process."""
    if mode == "hang":
        while True:
            time.sleep(3600)
    os._exit(CRASH_EXIT_CODE)


def run_rank(
    rank: int,
    world_size: int,
    trace: Sequence[TraceRequest],
    config: DPConfig,
    collective: Collective,
    *,
    on_crash: Callable[[str], None] = _exit_now,
) -> list[RankReport]:
    """Run every phase of ``config`` on this rank; stops after a phase whose group broke.

    Every rank must be given the same trace and config. Prompts come from the
    coordinated phase's vocabulary for every phase, so phases differ only in
    how they decide.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world_size {world_size}")
    ordered = sorted(enumerate(trace), key=lambda p: p[1].arrival_pass)
    # Request ids are positions in arrival order, as run_trace numbers them.
    indexed = [(i, req) for i, (_, req) in enumerate(ordered)]
    reports: list[RankReport] = []
    prompts: list[list[int]] | None = None
    for k, phase in enumerate(phases(config)):
        loop = _RankLoop(rank, world_size, phase, k, indexed, [], config, collective, on_crash)
        if prompts is None:
            prompts = make_prompts(trace, config.seed, loop.engine.vocab_size or 32000)
        loop.prompts = prompts
        report = loop.run()
        reports.append(report)
        if report.failure is not None:
            break
    return reports
