"""A rank's scheduler load driven through SGLang's real per-pass delayer protocol.

``RankLoad`` holds one DP rank's requests (waiting, one chunked, running) and
plays one pass the way SGLang 0.5.23's ``Scheduler.get_new_batch_prefill``
drives its delayer (``sglang/srt/managers/scheduler.py``, ``schedule_policy.py``):
a ``PrefillDelayerSinglePassExecutor`` per pass; a chunk continuation asks it
and runs whatever it says (``add_chunked_req``); the first admissible waiting
request asks it and is admitted only if allowed (``add_one_req``); ``finalize``
asks with ``local_prefillable=False`` if nobody asked, so every rank joins the
pass's collective; the prefill batch size it returns feeds a real
``RecentPrefillBatchSizeTracker``. Admission is FCFS under the pass's token
budget, the chunk size (one chunked request per pass), request slots and, with
``kv_tokens``, free KV (SGLang's ``PrefillAdder`` admits while a request's prompt and
reserved output fit ``rem_total_tokens``; here the whole output is reserved, so
nothing is retracted); every running request decodes one token a pass. No model:
passes are the unit, and each pass's work (``PassResult.work``) is what the cost
model prices.

The executor and tracker classes are passed in, so this module imports no SGLang
and the same load runs under SGLang's own delayer and densegate's replacement.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench.step_price import pass_work
from densegate.lab.cost.model import PassWork


@dataclass(frozen=True, slots=True)
class Limits:
    """One rank's budgets (SGLang's flags of the same names)."""

    max_prefill_tokens: int = 2176
    chunked_prefill_size: int = 2048
    max_running_requests: int = 128
    kv_tokens: int | None = None
    """The KV pool's size in tokens; None: unbounded."""


@dataclass(slots=True)
class _Req:
    prompt: int
    output: int
    prefilled: int = 0
    decoded: int = 0
    at: int = 0
    """Arrival time (the caller's clock) for priced figures."""
    passes: list[int] = field(default_factory=list)
    """The passes its tokens came out in."""


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one rank's pass did."""

    allowed: bool
    """The delayer's answer (rank-local copy of the shared decision)."""
    prefill_tokens: int
    prefill_reqs: int
    decode_seqs: int
    """Requests that decoded this pass (0 on an extend pass)."""
    chunk_continued: bool
    work: PassWork | None = None
    """The pass's work for the cost model; None when the rank ran nothing."""


@dataclass
class RankLoad:
    """One rank: arrivals by pass, FCFS admission, one chunked prefill at most."""

    limits: Limits
    arrivals: dict[int, list[TraceRequest]] = field(default_factory=dict)
    waiting: deque[_Req] = field(default_factory=deque)
    running: list[_Req] = field(default_factory=list)
    chunked: _Req | None = None
    submitted: int = 0
    finished: int = 0
    max_prefill_bs: int = 0
    served: list[_Req] = field(default_factory=list)
    """Every request that arrived, in order (their token passes: TTFT and ITL)."""
    arrived_at: list[int] = field(default_factory=list)
    """The pass each of ``served`` arrived at."""
    _t: int = 0

    def add(self, req: TraceRequest) -> None:
        self.arrivals.setdefault(req.arrival_pass, []).append(req)
        self.submitted += 1

    def arrive(self, prompt_len: int, output_len: int, at: int, t: int) -> None:
        """A request reaches this rank before pass ``t`` (a caller-clocked router); it
        arrived at ``at`` on the caller's clock."""
        self.submitted += 1
        self._t = t
        self._admit(_Req(prompt_len, max(1, output_len), at=at))

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked or self.arrivals)

    def _admit(self, r: _Req) -> None:
        self.waiting.append(r)
        self.served.append(r)
        self.arrived_at.append(self._t)

    def _arrive(self, t: int) -> None:
        self._t = t
        for req in self.arrivals.pop(t, []):
            self._admit(_Req(req.prompt_len, max(1, req.output_len)))

    def _kv_left(self) -> int | None:
        """Free KV tokens net of what running requests reserve (None: unbounded)."""
        pool = self.limits.kv_tokens
        if pool is None:
            return None
        held = sum(r.prompt + r.output for r in self.running)
        if self.chunked is not None:
            held += self.chunked.prompt + self.chunked.output
        return pool - held

    def token_usage(self) -> float:
        """The KV pool's used share, as SGLang's scheduler passes it to the delayer
        (0.5 without a pool: under any watermark, as this load always passed)."""
        pool = self.limits.kv_tokens
        if pool is None:
            return 0.5
        used = sum(r.prompt + r.decoded for r in self.running)
        if self.chunked is not None:
            used += self.chunked.prefilled
        return min(1.0, used / pool)

    def observation(self) -> tuple[int, int, bool]:
        """(admissible prefill tokens, decoding requests, chunk mid-flight) before the pass."""
        lim = self.limits
        budget, chunk = lim.max_prefill_tokens, lim.chunked_prefill_size
        tokens = 0
        if self.chunked is not None:
            n = min(self.chunked.prompt - self.chunked.prefilled, chunk, budget)
            tokens, budget, chunk = n, budget - n, chunk - n
        slots = lim.max_running_requests - len(self.running)
        kv = self._kv_left()
        for i, r in enumerate(self.waiting):
            if i >= slots or budget <= 0 or chunk <= 0 or not self._fits(r, kv):
                break
            kv = None if kv is None else kv - r.prompt - r.output
            n = min(r.prompt, chunk, budget)
            tokens, budget, chunk = tokens + n, budget - n, chunk - n
            if n < r.prompt:
                break
        return tokens, len(self.running), self.chunked is not None

    def step(self, t: int, executor: Any, tracker: Any, before: Any = None) -> PassResult:
        """Pass ``t``: arrivals, the delayer protocol, admission, one decode step."""
        self._arrive(t)
        if before is not None:
            before(self)  # the plugin's hook: observe before the pass builds its batch
        lim = self.limits
        bs = len(self.running)
        ask = {
            "running_batch": bs,
            "max_prefill_bs": self.max_prefill_bs,
            "max_running_requests": lim.max_running_requests,
            "waiting_queue_len": len(self.waiting),
        }
        budget, chunk = lim.max_prefill_tokens, lim.chunked_prefill_size
        batch: list[tuple[_Req, int]] = []
        continued = False
        if self.chunked is not None:  # add_chunked_req: prefills whatever the verdict
            executor.negotiate_should_allow_prefill(local_prefillable=True, **ask)
            r = self.chunked
            n = min(r.prompt - r.prefilled, chunk, budget)
            batch.append((r, n))
            budget, chunk, continued = budget - n, chunk - n, True
        slots = lim.max_running_requests - bs - len(batch)
        kv = self._kv_left()
        room = bool(self.waiting) and slots > 0 and budget > 0 and chunk > 0
        room = room and self._fits(self.waiting[0], kv)
        if room and executor.negotiate_should_allow_prefill(local_prefillable=True, **ask):
            while self.waiting and slots > 0 and budget > 0 and chunk > 0:  # add_one_req
                if not self._fits(self.waiting[0], kv):
                    break  # the adder stops at the first request the pool cannot hold
                r = self.waiting.popleft()
                kv = None if kv is None else kv - r.prompt - r.output
                n = min(r.prompt, chunk, budget)
                batch.append((r, n))
                budget, chunk, slots = budget - n, chunk - n, slots - 1
                if n < r.prompt:
                    break  # one chunked request per pass
        observed = executor.finalize(actual_prefill_bs=len(batch))
        if observed > 0:
            self.max_prefill_bs = tracker.observe_attempt(observed)
        # The pass's verdict, asked again: the executor answers from its one negotiation.
        allowed = bool(executor.negotiate_should_allow_prefill(local_prefillable=False, **ask))
        decodes = 0 if batch else len(self.running)
        work = None
        if batch:
            work = pass_work([(r.prefilled, n) for r, n in batch], [])
        elif self.running:
            work = pass_work([], [r.prompt + r.decoded - 1 for r in self.running])
        self._run(batch)
        tokens = sum(n for _, n in batch)
        return PassResult(allowed, tokens, len(batch), decodes, continued, work)

    @staticmethod
    def _fits(r: _Req, kv: int | None) -> bool:
        return kv is None or r.prompt + r.output <= kv

    def _run(self, batch: list[tuple[_Req, int]]) -> None:
        """An extend pass (prefill batch) or a decode pass: without mixed chunks, not both."""
        still = [] if not batch else self.running
        for r in self.running if not batch else ():
            r.decoded += 1
            r.passes.append(self._t)
            if r.decoded >= r.output:
                self.finished += 1
            else:
                still.append(r)
        self.running = still
        self.chunked = None
        for r, n in batch:
            r.prefilled += n
            if r.prefilled < r.prompt:
                self.chunked = r
                continue
            r.decoded = 1  # the extend pass samples the first output token
            r.passes.append(self._t)
            if r.decoded >= r.output:
                self.finished += 1
            else:
                self.running.append(r)
