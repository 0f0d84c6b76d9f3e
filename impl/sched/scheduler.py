"""The scheduler: decode first, then (if the gate fires) prefill, over paged KV blocks.

A pass is planned in full before the gate is asked, so the gate sees exactly
what the pass would run if it fired (flaw 3 in docs/ARCHITECTURE.md) and exactly the
sequences that decode (flaw 2):

1. every decoding request gets a slot; when KV is exhausted the most recently
   admitted running request is preempted by recompute to the queue's front;
2. partial prefills (chunked, already admitted) get their next chunk;
3. unless something was preempted, waiting requests are admitted FCFS within
   the token budget, free sequence slots and free KV blocks, the last one
   chunked when chunked prefill is on.

The gate decides whether steps 2-3 run at all (a HOLD pass is decode-only, so on a
GPU it can replay a CUDA graph) and how much of them (a capped FIRE); planning
costs O(running + admitted), never O(queue length).

Because admission is FCFS from the head and preemption takes the newest
admission, every running request arrived before every waiting one; the spec
(``densegate.spec.scheduler``) relies on that and the lockstep test checks it.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from densegate.impl.gate import Decision, GateInput, GatePolicy, PrefillGate, Reason
from densegate.impl.sched.batch import ScheduledBatch, SeqChunk
from densegate.impl.sched.block_manager import BlockManager
from densegate.impl.sched.cap import capped_prefill
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.plan import PassPlan, PassRecord, check_current
from densegate.impl.sched.request import FINISH_LENGTH, FINISH_STOP, Request, RequestStatus
from densegate.impl.sched.steps import (
    AdmitTotals,
    PartialTotals,
    admit_next,
    owed_chunk,
    scan,
)

__all__ = ["Scheduler"]


@dataclass
class _Counters:
    passes: int = 0
    preemptions: int = 0
    finished: int = 0
    aborted: int = 0
    failed_passes: int = 0
    """Passes whose runner raised or returned a malformed result (``undo``)."""
    reasons: collections.Counter[Reason] = field(default_factory=collections.Counter)


class Scheduler:
    """Plans passes, asks the gate, commits; see the module docstring for the order."""

    def __init__(self, config: SchedulerConfig, gate: GatePolicy | None = None) -> None:
        if not isinstance(config, SchedulerConfig):
            raise TypeError(f"Scheduler needs a SchedulerConfig, got {type(config).__name__}")
        self.config = config
        self.blocks = BlockManager(config.num_blocks, config.block_size)
        self.gate: GatePolicy = gate if gate is not None else PrefillGate(config.gate_config())
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.pass_log: collections.deque[PassRecord] = collections.deque(
            maxlen=config.pass_log_size
        )
        self.counters = _Counters()
        self._by_seq: dict[int, Request] = {}
        self._pass = 0
        self._dense = config.dense
        self._cap = config.chunk_cap
        self._chunked = config.enable_chunked_prefill
        self._queued_tokens = 0
        self._aborted: list[Request] = []
        """Requests aborted since the last commit: a plan that runs one is stale."""
        self._preempted = 0
        """Preemptions since the last commit: a second ``plan()`` finds none, the first's count."""

    # -- queue management -------------------------------------------------------------
    def add(self, req: Request) -> None:
        if req.status is not RequestStatus.WAITING:
            raise ValueError(f"request {req.request_id!r} is {req.status.name}, not WAITING")
        self._by_seq[req.seq_id] = req
        self.waiting.append(req)
        self._queued_tokens += req.num_tokens
        self._mark_head()

    def abort(self, req: Request, reason: str = "aborted") -> None:
        """End ``req`` now, freeing its blocks; a no-op for ended requests."""
        if req.status is RequestStatus.WAITING:
            self.waiting.remove(req)
            self._queued_tokens -= req.num_tokens
            self._mark_head()
        elif req.status is RequestStatus.RUNNING:
            self.running.remove(req)
            self.blocks.free(req.block_table)
        else:
            return
        req.status = RequestStatus.ABORTED
        req.finish_reason = reason
        req.finish_pass = self._pass
        self._by_seq.pop(req.seq_id, None)
        self.counters.aborted += 1
        self._aborted.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def pass_index(self) -> int:
        """Index the next pass will get."""
        return self._pass

    # -- one pass ---------------------------------------------------------------------
    def plan(self) -> PassPlan:
        """Steps 1-3 of the module docstring; only step 1 (decode slots) mutates state."""
        self._aborted.clear()  # a request aborted before planning is in no plan
        decodes, preempted, owed = self._plan_decodes()
        return self._plan_prefill(decodes, preempted, owed)

    def _plan_decodes(self) -> tuple[list[Request], list[Request], list[Request]]:
        """Step 1: a KV slot for every decode; returns (decodes, preempted, owed).

        ``owed`` lists the running requests still prefilling, in running order. One
        walk over the running list, a turn (``_walk_turn``) per request in order.
        """
        running = self.running
        decodes: list[Request] = []
        preempted: list[Request] = []
        owed: list[Request] = []
        turn = self._walk_turn
        i = 0
        while i < len(running):
            i = turn(running, i, decodes, preempted, owed)
        # Preemption takes running[-1], always at or after i: every request in
        # owed is still running, in running-list order.
        return decodes, preempted, owed

    def _walk_turn(
        self,
        running: list[Request],
        i: int,
        decodes: list[Request],
        preempted: list[Request],
        owed: list[Request],
    ) -> int:
        """Step 1 for ``running[i]``: owed if it does not decode, else a decode, first
        preempting the newest running request (``running[-1]``, maybe itself) while its
        decode needs a block and none is free; returns the next turn's index."""
        r = running[i]
        dec, grow = self._turn(r)
        if not dec:
            owed.append(r)
            return i + 1
        if grow:
            while self.blocks.num_free == 0:
                victim = running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is r:
                    return i  # r preempted itself: it was the last one
            self._take_block(r)
        decodes.append(r)
        return i + 1

    def _plan_prefill(
        self, decodes: list[Request], preempted: list[Request], owed: list[Request]
    ) -> PassPlan:
        """Steps 2-3 from what decodes left: owed chunks, then FCFS admission, each a
        ``scan`` of one step per request (``densegate.impl.sched.steps``)."""
        cfg = self.config
        start = PartialTotals(cfg.max_num_batched_tokens - len(decodes), 0)
        owing, partials = scan(self._owed_step, start, owed)
        slots = cfg.max_num_seqs - len(self.running)
        begin = AdmitTotals(
            slots, owing.budget, self.blocks.num_free, owing.run, len(preempted) > 0
        )
        admitted, admits = scan(self._admit_step, begin, self.waiting)
        planned = admitted.planned
        return PassPlan(
            self._pass, decodes, partials, admits, preempted, planned, min(planned, self._dense)
        )

    def _owed_step(self, acc: PartialTotals, r: Request) -> tuple[PartialTotals, int]:
        """Step 2 for one running request that does not decode: its next chunk."""
        return owed_chunk(acc, r.num_tokens - r.num_computed, self._cap)

    def _admit_step(self, acc: AdmitTotals, r: Request) -> tuple[AdmitTotals, int]:
        """Step 3 for one waiting request: admitted (whole blocks reserved) if it fits."""
        total = r.num_tokens
        return admit_next(acc, total, self.blocks.blocks_for(total), self._chunked, self._cap)

    def commit(self, plan: PassPlan, decision: Decision) -> ScheduledBatch:
        """Run the plan's prefill part only if ``decision`` fires; record the pass.

        A stale plan (another pass's, one running a request aborted since, or admitting
        other than the queue's head) raises ``ValueError`` before anything changes."""
        check_current(plan, self._pass, self._aborted, self.waiting)
        batch = ScheduledBatch(self._pass)
        prefill_tokens = 0
        if decision.fire:
            kept = capped_prefill(plan.partials, plan.admits, decision.cap, self._chunked)
            for r, n in kept[0]:
                batch.prefills.append(self._prefill_chunk(r, n))
                prefill_tokens += n
            for r, n in kept[1]:
                batch.prefills.append(self._admit_chunk(r, n))
                prefill_tokens += n
            self._mark_head(self._pass + 1)
        decoded = batch.decodes
        for r in plan.decodes:
            decoded.append(self._decode_chunk(r))
        self.counters.passes += 1
        self.counters.preemptions += self._preempted
        self.counters.reasons[decision.reason] += 1
        self.pass_log.append(self._record(plan, decision, prefill_tokens, len(batch.prefills)))
        self._pass += 1
        self._preempted = 0
        self._aborted.clear()
        return batch

    def undo(self, batch: ScheduledBatch) -> None:
        """Take back the runner's part of the pass just committed, which failed: each chunk is
        owed again (``num_computed`` back to its start). The rest stands: decision, index,
        preemptions, admissions, blocks (``densegate.impl.sched.failures``); the log marks it."""
        if batch.index != self._pass - 1:
            raise ValueError(
                f"undo of pass {batch.index}: the last committed pass is {self._pass - 1}"
            )
        for c in (*batch.prefills, *batch.decodes):
            self._undo_chunk(c)
        self.counters.failed_passes += 1
        log = self.pass_log
        if log and log[-1].index == batch.index:
            log[-1] = dataclasses.replace(log[-1], failed=True)

    def _record(
        self, plan: PassPlan, decision: Decision, prefill_tokens: int, prefill_seqs: int
    ) -> PassRecord:
        """The pass as ``pass_log`` keeps it; a baseline may record more."""
        return PassRecord(
            self._pass,
            decision.fire,
            decision.reason,
            prefill_tokens,
            prefill_seqs,
            len(plan.decodes),
            self._preempted,
            len(self.waiting),
            len(self.running),
            self.blocks.num_free,
            plan.waiting_tokens,
        )

    def observe(self, plan: PassPlan) -> GateInput:
        """The gate's honest observation of ``plan``: admissible tokens, decoding sequences."""
        return GateInput(plan.waiting_tokens, len(plan.decodes))

    def decide(self, plan: PassPlan) -> Decision:
        """Ask this scheduler's gate about ``plan``; a baseline may override what it shows."""
        return self.gate.decide(self.observe(plan))

    def schedule(self) -> ScheduledBatch:
        """Plan, ask the gate, commit: one pass."""
        plan = self.plan()
        return self.commit(plan, self.decide(plan))

    @property
    def queued_tokens(self) -> int:
        """Tokens of every waiting request (prompt + generated), kept in O(1)."""
        return self._queued_tokens

    def update(self, batch: ScheduledBatch, tokens: Iterable[int], now: float) -> list[Request]:
        """Append the sampled tokens; return the requests that got one, in batch order."""
        got: list[Request] = []
        finished = False
        it = iter(tokens)
        for chunks in (batch.prefills, batch.decodes):
            for c in chunks:
                if not c.sample:
                    continue
                tok = next(it, None)
                if tok is None:
                    raise ValueError(f"runner returned too few tokens for pass {batch.index}")
                r = self._by_seq[c.seq_id]
                finished = self._sample(r, tok, batch.index, now) or finished
                got.append(r)
        if next(it, None) is not None:
            raise ValueError(f"runner returned too many tokens for pass {batch.index}")
        if finished:  # one sweep, not a list.remove per finished request
            self.running[:] = [r for r in self.running if r.status is RequestStatus.RUNNING]
        return got

    # -- one request's part of a pass (each proved against the spec's step: R6) ------
    def _turn(self, r: Request) -> tuple[bool, bool]:
        """Step 1's reading of a running request: (it decodes: a token sampled and every token
        but that one computed; its decode needs a block: its blocks cannot hold the token)."""
        out = len(r.output_token_ids)
        total = len(r.prompt_token_ids) + out
        dec = out > 0 and r.num_computed == total - 1
        return dec, dec and len(r.block_table) * self.blocks.block_size < total

    def _take_block(self, r: Request) -> None:
        """Step 1: the block a decode that crosses into a new one takes."""
        self.blocks.allocate(r.block_table, r.num_tokens)

    def _admit_chunk(self, r: Request, n: int) -> SeqChunk:
        """Commit an admission: the queue's head runs, its blocks reserved, first chunk ``n``."""
        self.waiting.popleft()  # r: check_current saw the admits head the queue
        r.status = RequestStatus.RUNNING
        self._queued_tokens -= r.num_tokens
        self.blocks.allocate(r.block_table, r.num_tokens)
        self.running.append(r)
        return self._prefill_chunk(r, n)

    def _decode_chunk(self, r: Request) -> SeqChunk:
        """Commit a decode: it feeds its last token (``output_token_ids[-1]``)."""
        pos = r.num_computed
        r.num_computed = pos + 1
        return SeqChunk(r.seq_id, (r.output_token_ids[-1],), pos, r.block_table, False, True)

    def _sample(self, r: Request, tok: int, index: int, now: float) -> bool:
        """One sampled token for ``r``; whether it finished (a stop token, or its length)."""
        r.output_token_ids.append(tok)
        r.token_times.append(now)
        if r.first_token_pass is None:
            r.first_token_pass = index
            r.first_token_time = now
        if tok in r.stop_token_ids:
            self._finish(r, index, now, FINISH_STOP)
            return True
        if len(r.output_token_ids) >= r.max_tokens:
            self._finish(r, index, now, FINISH_LENGTH)
            return True
        return False

    def _undo_chunk(self, c: SeqChunk) -> None:
        """Take back one chunk of a failed pass: its request owes it again."""
        r = self._by_seq.get(c.seq_id)
        if r is not None and r.status is RequestStatus.RUNNING:
            r.num_computed = c.start

    def _prefill_chunk(self, r: Request, n: int) -> SeqChunk:
        start = r.num_computed
        stop = start + n
        r.num_computed = stop
        return SeqChunk(
            r.seq_id, r.tokens(start, stop), start, r.block_table, True, stop == r.num_tokens
        )

    def _preempt(self, r: Request) -> None:
        self._preempted += 1
        self.running.remove(r)
        self.blocks.free(r.block_table)
        r.status = RequestStatus.WAITING
        r.num_computed = 0
        r.num_preemptions += 1
        if self.waiting:
            self.waiting[0].head_pass = None  # displaced: its headship ends
        r.head_pass = None
        self.waiting.appendleft(r)
        self._queued_tokens += r.num_tokens
        self._mark_head()

    def _mark_head(self, at: int | None = None) -> None:
        """Stamp the head of the queue with the first pass it can be admitted in."""
        if self.waiting and self.waiting[0].head_pass is None:
            self.waiting[0].head_pass = self._pass if at is None else at

    def _finish(self, r: Request, index: int, now: float, reason: str) -> None:
        """End ``r`` for ``reason`` (stop or length); ``update`` drops it from the running
        list in one sweep."""
        self.blocks.free(r.block_table)
        r.status = RequestStatus.FINISHED
        r.finish_reason = reason
        r.finish_pass = index
        r.finish_time = now
        self._by_seq.pop(r.seq_id, None)
        self.counters.finished += 1

    def check_invariants(self) -> None:
        """Raise if KV blocks leak or the arrival order the spec relies on is broken."""
        self.blocks.check_conservation(r.block_table for r in self.running)
        if len(self.running) > self.config.max_num_seqs:
            raise AssertionError(f"{len(self.running)} running > max_num_seqs")
        order = [r.seq_id for r in self.running] + [r.seq_id for r in self.waiting]
        if order != sorted(order):
            raise AssertionError(f"running + waiting not in arrival order: {order}")
