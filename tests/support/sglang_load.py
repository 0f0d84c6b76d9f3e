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
budget, the chunk size (one chunked request per pass) and request slots; every
running request decodes one token a pass. No model, no KV pool: passes are the unit.

The executor and tracker classes are passed in, so this module imports no SGLang
and the same load runs under SGLang's own delayer and densegate's replacement.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.traces.workload import TraceRequest


@dataclass(frozen=True, slots=True)
class Limits:
    """One rank's budgets (SGLang's flags of the same names)."""

    max_prefill_tokens: int = 2176
    chunked_prefill_size: int = 2048
    max_running_requests: int = 128


@dataclass(slots=True)
class _Req:
    prompt: int
    output: int
    prefilled: int = 0
    decoded: int = 0


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

    def add(self, req: TraceRequest) -> None:
        self.arrivals.setdefault(req.arrival_pass, []).append(req)
        self.submitted += 1

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked or self.arrivals)

    def _arrive(self, t: int) -> None:
        for req in self.arrivals.pop(t, []):
            self.waiting.append(_Req(req.prompt_len, max(1, req.output_len)))

    def observation(self) -> tuple[int, int, bool]:
        """(admissible prefill tokens, decoding requests, chunk mid-flight) before the pass."""
        lim = self.limits
        budget, chunk = lim.max_prefill_tokens, lim.chunked_prefill_size
        tokens = 0
        if self.chunked is not None:
            n = min(self.chunked.prompt - self.chunked.prefilled, chunk, budget)
            tokens, budget, chunk = n, budget - n, chunk - n
        slots = lim.max_running_requests - len(self.running)
        for i, r in enumerate(self.waiting):
            if i >= slots or budget <= 0 or chunk <= 0:
                break
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
        room = bool(self.waiting) and slots > 0 and budget > 0 and chunk > 0
        if room and executor.negotiate_should_allow_prefill(local_prefillable=True, **ask):
            while self.waiting and slots > 0 and budget > 0 and chunk > 0:  # add_one_req
                r = self.waiting.popleft()
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
        self._run(batch)
        return PassResult(allowed, sum(n for _, n in batch), len(batch), decodes, continued)

    def _run(self, batch: list[tuple[_Req, int]]) -> None:
        """An extend pass (prefill batch) or a decode pass: without mixed chunks, not both."""
        still = [] if not batch else self.running
        for r in self.running if not batch else ():
            r.decoded += 1
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
            if r.decoded >= r.output:
                self.finished += 1
            else:
                self.running.append(r)
