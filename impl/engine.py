"""The engine: requests in, tokens out, one scheduler pass per ``step()``.

Inadmissible requests are not errors but outcomes: they end REJECTED with a
reason that the next ``step()`` reports, so a caller can account for every
request it submitted. Malformed arguments (wrong types) raise at once. A pass
whose runner raises, or returns other than one token per sampled chunk, is
undone and raises ``PassFailed`` (``densegate.impl.sched.failures``): its
requests run again or end ABORTED, per ``EngineConfig.runner_retries``.

Threads: ``add_request`` and ``abort`` may be called from any thread, and from
inside a pass (the runner's ``execute``, a gate policy); they are queued and taken
at the pass boundary (``densegate.impl.inbox``). ``step``, ``plan``, ``execute``
and ``generate`` run passes: one thread at a time, never from inside a pass
(``EngineBusy``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from densegate.impl.engine_config import EngineConfig
from densegate.impl.gate import Decision, GatePolicy
from densegate.impl.inbox import EngineBusy, Inbox, runs_passes
from densegate.impl.outputs import RequestMetrics, RequestOutput, metrics_of, output_of
from densegate.impl.runners.hf_config import checkpoint_dir
from densegate.impl.runners.tokenizer import TextCodec
from densegate.impl.sched.admission import checked_request, rejection
from densegate.impl.sched.batch import NullRunner, Runner
from densegate.impl.sched.failures import PassFailed, Strikes, checked_tokens
from densegate.impl.sched.plan import PassPlan
from densegate.impl.sched.request import Request, RequestStatus, stop_set
from densegate.impl.sched.scheduler import Scheduler
from densegate.impl.validation import check_instance

__all__ = ["Engine", "EngineBusy", "EngineConfig", "RequestMetrics", "RequestOutput"]

_Prompt = TypeVar("_Prompt", str, list[int])  # generate(): text in, text out; ids in, ids out


class Engine:
    """Owns a scheduler and a runner; ``step()`` runs one pass."""

    def __init__(
        self,
        config: EngineConfig | None = None,
        runner: Runner | None = None,
        gate: GatePolicy | None = None,
        scheduler: type[Scheduler] = Scheduler,
    ) -> None:
        self.config = config if config is not None else EngineConfig()
        if not isinstance(self.config, EngineConfig):
            raise TypeError(f"Engine needs an EngineConfig, got {type(self.config).__name__}")
        self.scheduler = scheduler(self.config, gate)
        self.runner: Runner = runner if runner is not None else self._make_runner()
        model_cfg = getattr(self.runner, "config", None)
        self.vocab_size: int | None = getattr(model_cfg, "vocab_size", None)
        self.eos_token_ids = frozenset[int](getattr(model_cfg, "eos_token_ids", ()))
        self.tokenizer = TextCodec(checkpoint_dir(self.config.model))
        self._unreported: list[Request] = []
        self._live = 0
        self._open: PassPlan | None = None  # from plan(), not executed yet
        self._deferred: list[Request] = []  # aborted while _open runs them
        self._held: list[RequestOutput] = []  # others' outputs seen inside generate()
        self._inbox = Inbox(self._take)  # what any thread adds or aborts, taken between passes
        self._requests = self._inbox.requests
        self._strikes = Strikes(self.config.runner_retries)
        self.report_outputs = True  # False: execute() reports none of the requests its pass ran
        self.scheduler_seconds = 0.0
        self.runner_seconds = 0.0

    def _make_runner(self) -> Runner:
        if self.config.runner == "null":
            return NullRunner()
        from densegate.impl.runners.torch_runner import runner_for

        c = self.config
        return runner_for(c.layout, c.model, c.device, c.dtype, c.num_threads, c.check_weights)

    # -- requests ---------------------------------------------------------------------
    def rejection(self, prompt_token_ids: Sequence[int], max_tokens: int) -> str | None:
        """Why a request could never be served, or None if it is admissible."""
        return rejection(self.config, self.vocab_size, prompt_token_ids, max_tokens)

    def add_request(
        self,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        request_id: str | None = None,
        *,
        stop_token_ids: Sequence[int] = (),
        ignore_eos: bool = False,
    ) -> str:
        """Queue a request; an inadmissible one ends REJECTED, reported by the next step.

        An automatic id is ``str(n)`` for the next arrival number ``n`` no caller's
        id took; a caller's id already in use (ended or not) raises ``ValueError``.
        Any thread may call it, a pass too: the scheduler takes it at the pass boundary.
        """
        prompt = checked_request(prompt_token_ids, max_tokens)
        if request_id is not None and not isinstance(request_id, str):
            raise ValueError(f"request_id must be a str, got {request_id!r}")
        stops = stop_set(stop_token_ids, () if ignore_eos else self.eos_token_ids, self.vocab_size)
        reason = self.rejection(prompt, max_tokens)
        return self._inbox.add(request_id, prompt, max_tokens, stops, reason)

    def abort(self, request_id: str) -> bool:
        """End a request; False if it had ended (or its abort was taken) already.

        Any thread may call it, a pass too: it is taken at the pass boundary, so True
        means it ends ABORTED unless the pass in flight finishes it. Between ``plan()``
        and ``execute()``, a request the open plan runs is not ended at once: the pass
        runs as planned and decided (the gate's count and data-parallel agreement stay
        true), then it ends ABORTED, reported with that pass's outputs, unless the pass
        finished it. A new ``plan()`` ends it first. Any other request ends at once.
        Unknown ids: ``KeyError``.
        """
        return self._inbox.abort(request_id)

    def _take(self, abort: bool, req: Request) -> None:
        """Apply a queued ``add_request`` or ``abort``; the engine is held."""
        if not abort:
            req.arrival_pass = self.scheduler.pass_index
            if req.status is RequestStatus.REJECTED:
                req.finish_pass = req.arrival_pass
                self._unreported.append(req)
            else:
                self.scheduler.add(req)
                self._live += 1
            return
        p = self._open
        runs = () if p is None else (*p.decodes, *(r for r, _ in (*p.partials, *p.admits)))
        if any(r is req for r in runs):
            self._deferred.append(req)
            return
        if not req.status.ended:  # a pass since the call may have finished it
            self.scheduler.abort(req)
            self._strikes.forget(req)
            self._live -= 1
            self._unreported.append(req)
        self._inbox.settled([req])

    def _apply_deferred(self) -> list[Request]:
        """End the deferred aborts no pass has finished; returns those it ended."""
        if not self._deferred:  # the usual pass
            return []
        ended = [r for r in self._deferred if not r.status.ended]
        for r in ended:
            self.scheduler.abort(r)
            self._strikes.forget(r)
        self._live -= len(ended)
        self._inbox.settled(self._deferred)
        self._deferred.clear()
        return ended

    def has_unfinished(self) -> bool:
        """True while a request runs, waits or has outputs the next step reports."""
        return self._live > 0 or bool(self._unreported or self._held or len(self._inbox))

    def request(self, request_id: str) -> Request:
        return self._requests[request_id]

    # -- passes -----------------------------------------------------------------------
    @runs_passes
    def step(self) -> list[RequestOutput]:
        """One scheduler pass; outputs for every request that got a token or ended.

        An open plan (``plan()`` without ``execute``) is dropped: this pass plans anew.
        """
        return self._step()

    def _step(self) -> list[RequestOutput]:
        self._inbox.drain()
        self._unreported += self._apply_deferred()
        if not self.scheduler.has_work():
            self._open = None
            return self._drain_unreported()
        plan = self._plan()
        t0 = time.perf_counter()
        decision = self.scheduler.decide(plan)
        self.scheduler_seconds += time.perf_counter() - t0
        return self._execute(plan, decision)

    @runs_passes
    def plan(self) -> PassPlan:
        """The next pass, planned but not committed: for callers that decide it
        themselves (data-parallel ranks agree on one decision; see ``execute``).

        It replaces any plan not executed yet, ending that one's deferred aborts first.
        """
        return self._plan()

    def _plan(self) -> PassPlan:
        self._unreported += self._apply_deferred()
        t0 = time.perf_counter()
        plan = self._open = self.scheduler.plan()
        self.scheduler_seconds += time.perf_counter() - t0
        return plan

    @runs_passes
    def execute(self, plan: PassPlan, decision: Decision) -> list[RequestOutput]:
        """Commit ``plan`` under ``decision``, run it, and report as ``step`` does.

        ``plan`` must be the last ``plan()``'s, not executed yet; any other raises
        ``ValueError`` and changes nothing. Deferred aborts apply after the pass.

        A failed pass is undone and raises ``PassFailed`` (``densegate.impl.sched.failures``);
        its outputs (aborts included) are reported by the next ``step``/``execute``.
        """
        check_instance("Engine.execute", "plan", plan, PassPlan)
        check_instance("Engine.execute", "decision", decision, Decision)
        return self._execute(plan, decision)

    def _execute(self, plan: PassPlan, decision: Decision) -> list[RequestOutput]:
        if plan is not self._open:
            raise ValueError(f"plan for pass {plan.index} is not the open plan(); plan again")
        t0 = time.perf_counter()
        batch = self.scheduler.commit(plan, decision)
        self._open = None
        outputs = self._drain_unreported()
        t1 = time.perf_counter()
        try:
            tokens: list[int] = []
            if batch.prefills or batch.decodes:
                tokens = checked_tokens(batch, self.runner.execute(batch), self.vocab_size)
        except BaseException as e:  # Ctrl-C too: no request is left with nothing to run
            self.runner_seconds += time.perf_counter() - t1
            failure = self._failed(batch, e, outputs)
            if failure is None:
                raise
            raise failure from e
        t2 = time.perf_counter()
        self._strikes.succeeded(batch)
        got = self.scheduler.update(batch, tokens, t2)
        aborted = self._apply_deferred()
        self._inbox.drain()  # the pass boundary: what was added or aborted during the pass
        if self._unreported and self.report_outputs:  # one output each, as deferred aborts
            aborted += self._unreported
            self._unreported = []
        self._live -= [r.status for r in got].count(RequestStatus.FINISHED)
        if self.report_outputs:
            outputs += [output_of(r, [r.output_token_ids[-1]]) for r in got]
            outputs += [output_of(r, []) for r in aborted if not any(g is r for g in got)]
        t3 = time.perf_counter()
        self.scheduler_seconds += (t1 - t0) + (t3 - t2)
        self.runner_seconds += t2 - t1
        return outputs

    def _failed(
        self, batch: Any, error: BaseException, outputs: list[RequestOutput]
    ) -> PassFailed | None:
        """Undo ``batch``, end what the policy and deferred aborts end, keep the outputs for
        the next step; the ``PassFailed`` to raise (none for a ``BaseException``)."""
        aborted, retrying = self._strikes.failed(self.scheduler, batch, error)
        ended = aborted + [r for r in self._apply_deferred() if not any(a is r for a in aborted)]
        self._live -= len(aborted)
        self._held = outputs + [output_of(r, []) for r in ended] + self._held
        if not isinstance(error, Exception):
            return None
        again = [r.request_id for r in retrying if not r.status.ended]  # not aborted since
        return PassFailed(batch.index, error, [r.request_id for r in aborted], again)

    def _drain_unreported(self) -> list[RequestOutput]:
        outputs, self._held = self._held + [output_of(r, []) for r in self._unreported], []
        self._unreported.clear()
        return outputs

    @runs_passes
    def generate(
        self, prompts: Sequence[_Prompt], max_tokens: int | Sequence[int], **stops: Any
    ) -> list[_Prompt]:
        """Run ``prompts`` to completion; outputs in prompt order: token ids, or text for
        text prompts (the checkpoint's tokenizer). ``stops``: ``add_request``'s keywords.

        Every prompt is checked first: one that could never be served raises
        ``ValueError`` naming its index before any work starts. Outputs of other
        requests that pass while it runs are kept for the next ``step``/``execute``.
        A failed pass (``PassFailed``) is run again as ``runner_retries`` allows; a prompt
        that ends otherwise than FINISHED raises ``RuntimeError``, chained to the failure.
        """
        return self._generate(prompts, max_tokens, stops)  # refused inside a pass, at once

    def _generate(
        self, prompts: Sequence[_Prompt], max_tokens: int | Sequence[int], stops: dict[str, Any]
    ) -> list[_Prompt]:
        each = max_tokens if isinstance(max_tokens, Sequence) else None
        limits: list[int] = [max_tokens] * len(prompts) if each is None else list(each)  # type: ignore[list-item]
        if len(limits) != len(prompts):
            raise ValueError(f"max_tokens has {len(limits)} entries for {len(prompts)} prompts")
        text, ids_in = self.tokenizer.encode_all(prompts)
        checked = [checked_request(p, m) for p, m in zip(ids_in, limits, strict=True)]
        for i, (p, m) in enumerate(zip(checked, limits, strict=True)):
            reason = self.rejection(p, m)
            if reason is not None:
                raise ValueError(f"prompt {i} cannot be served: {reason}")
        ids = [self.add_request(p, m, **stops) for p, m in zip(checked, limits, strict=True)]
        reqs = [self._requests[i] for i in ids]
        pending = set(ids)
        failure: PassFailed | None = None
        while pending:
            try:
                step = self._step()
            except PassFailed as e:  # its requests run again or ended: the policy bounds it
                failure = e
                continue
            for out in step:
                if out.request_id not in pending:
                    self._held.append(out)
                elif out.finished:
                    pending.discard(out.request_id)
        for r in reqs:
            if r.status is not RequestStatus.FINISHED:
                why = f"request {r.request_id!r} ended {r.status.name}: {r.finish_reason}"
                raise RuntimeError(why) from failure
        outs = [list(r.output_token_ids) for r in reqs]
        return cast(list[_Prompt], [self.tokenizer.decode(o) for o in outs] if text else outs)

    # -- metrics ----------------------------------------------------------------------
    def metrics(self, request_id: str) -> RequestMetrics:
        return metrics_of(self._requests[request_id])

    def all_metrics(self) -> list[RequestMetrics]:
        return [metrics_of(r) for r in self._inbox.snapshot()]  # another thread may add one
