"""The DP policies side by side: densegate, gate-off and the peers
(``densegate.lab.baselines.dp_peers``) through the real rank loops, modeled.

Every policy is one phase of one ``run_rank`` run over the in-process collective
of ``densegate.lab.bench.dp_runs``: densegate is the aligned phase, gate-off the
uncoordinated phase with the gate off, and each peer an aligned phase whose
decision the bench substitutes. ``PeerCollective`` appends the bench's slots
(``full_ranks``, ``low_usage_ranks``, ``no_decode_ranks``, ``batch_full_ranks``) to the
runtime's vector, so a tick still costs one all-reduce; ``PeerHooks`` feeds the reduced
vector, the tick and this rank's ``LocalView`` to the rank's peer copy and hands its
decision to the engine in place of the aligned gate's, recording it in the report. A
per-rank peer (vLLM's cadence) may decide differently on each rank. The runtime is
untouched; so in a peer phase the runtime's per-reason mixed-tick counts
(``mixed_by_reason``) still name the aligned gate's reasons, and only the totals
(``mixed_ticks``, counted from the reduced vector) are the peer's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.dp.collective import Collective
from densegate.impl.dp.config import COORDINATED, DPConfig, Phase
from densegate.impl.dp.hooks import chain
from densegate.impl.dp.report import RankReport
from densegate.impl.dp_gate import DECODE_SEQS, FILLED_RANKS, WAITING_RANKS, WAITING_TOKENS
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.figures import fmt, percentile
from densegate.impl.gate import Decision, Reason
from densegate.impl.sched.plan import PassPlan
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.baselines.dp_peers import (
    ALIASES,
    PEERS,
    VARIANTS,
    LocalView,
    PeerPolicy,
    PeerView,
)
from densegate.lab.bench.dp_bound import bound_words
from densegate.lab.bench.dp_clock import ModeledClocks, figures, floors
from densegate.lab.bench.dp_runs import run_rank_threads
from densegate.lab.cost.model import PassModel
from densegate.lab.cost.timeline import dp_figures
from densegate.lab.dp.phases import BASELINE
from densegate.lab.dp.timing import TimingHooks

__all__ = ["CLOCKS", "DP_POLICIES", "TOKENS_SLACK", "PeerCollective", "PeerHooks", "bar_peers",
           "bars", "format_policy_tables", "goal", "goal_words", "policy_rows",
           "run_dp_policies"]  # fmt: skip

DP_POLICIES = ("densegate", "gate-off", *PEERS)
"""``--policies`` names with ``--dp``, in table order."""
_PHASE = {"densegate": COORDINATED, "gate-off": BASELINE}
_FIRE, _HOLD = Decision(True, Reason.DENSE), Decision(False, Reason.HOLD)  # a peer's verdicts
TOKENS_SLACK = 0.995
"""Issue 31's goal: densegate's tokens/s at least this times the best peer's."""
_EXTRA = 4  # full_ranks, low_usage_ranks, no_decode_ranks, batch_full_ranks
CLOCKS = ("seconds", "ticks")
"""The bench's clocks: arrivals in modeled seconds (the CLI's default) or in ticks."""


def _arrival(r: TraceRequest) -> int:
    return r.arrival_pass


class PeerCollective:
    """An in-process collective that carries the bench's slots after the runtime's."""

    def __init__(self, inner: Collective) -> None:
        self.inner = inner
        self.extra = [0] * _EXTRA
        self.reduced_extra = [0] * _EXTRA
        self.reduced: list[int] = []

    @property
    def keeps_stream(self) -> bool:
        """The inner collective's: whether anyone reads the ranks' stream records."""
        return bool(getattr(self.inner, "keeps_stream", True))

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        total = self.inner.all_reduce_sum([*vector, *self.extra], first=first)
        self.reduced = total[: len(vector)]
        self.reduced_extra = total[len(vector) :]
        return self.reduced

    def publish(self, record: bytes) -> None:
        self.inner.publish(record)

    def recover(self, calls: int, total: Sequence[int] | None) -> Any:
        return self.inner.recover(calls, total)


class _PeerPhase:
    """One rank's peer over one phase: its slots in, its local view kept, its decision out."""

    def __init__(self, name: str, policy: PeerPolicy, engine: Engine) -> None:
        self.name = name
        self.policy = policy
        self.engine = engine
        self.dense = engine.config.dense
        self.tick = 0
        self.collective: PeerCollective | None = None
        self.decisions: list[tuple[int, bool, str]] = []
        self.left_waiting = False
        inner = engine.execute
        engine.execute = self._execute  # type: ignore[method-assign]
        self._inner: Callable[[PassPlan, Decision], Any] = inner

    def at_tick(self, tick: int) -> None:
        self.tick = tick

    def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
        if not isinstance(collective, PeerCollective):
            raise TypeError("a peer phase needs the bench's PeerCollective")
        self.collective = collective
        sched = self.engine.scheduler
        total = sched.config.num_blocks
        low = total - sched.blocks.num_free < self.policy.low_watermark * total
        decodes = vector[DECODE_SEQS]
        collective.extra = [
            int(vector[WAITING_TOKENS] >= self.dense),
            int(low and vector[WAITING_RANKS] > 0),
            int(decodes == 0),
            int(decodes >= sched.config.max_num_seqs),
        ]

    def _execute(self, plan: PassPlan, decision: Decision) -> Any:
        c = self.collective
        assert c is not None, "execute before any collective"
        ranks, waiting, tokens, decodes, kv, partial = c.reduced[:FILLED_RANKS]  # peers: 6 slots
        full, low, no_decode, batch_full = c.reduced_extra
        view = PeerView(ranks, waiting, tokens, decodes, kv, partial, full, low, self.dense,
                        no_decode, batch_full)  # fmt: skip
        sched = self.engine.scheduler
        local = LocalView(plan.waiting_tokens, plan.decode_seqs, len(sched.running),
                          sched.config.max_num_seqs, self.left_waiting)  # fmt: skip
        fire, reason = self.policy.decide(view, self.tick, local)
        self.decisions.append((self.tick, fire, reason))
        if fire and not plan.preempted:  # a release: does it leave requests waiting?
            self.left_waiting = len(sched.waiting) > len(plan.admits)
        return self._inner(plan, _FIRE if fire else _HOLD)

    def finish(self, report: RankReport) -> None:
        report.decisions = list(self.decisions)
        del self.engine.execute  # the engine's own again: no cycle keeps the phase alive


class _Quiet:
    def at_tick(self, tick: int) -> None:
        pass

    def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
        if isinstance(collective, PeerCollective):
            collective.extra = [0] * _EXTRA

    def finish(self, report: RankReport) -> None:
        pass


@dataclass(frozen=True)
class PeerHooks:
    """Rank hooks that run a fresh copy of the peer on each phase named for one."""

    peers: dict[str, Callable[[], PeerPolicy]] = field(default_factory=dict)

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> Any:
        make = self.peers.get(phase.name)
        return _Quiet() if make is None else _PeerPhase(phase.name, make(), engine)


def run_dp_policies(
    trace: Sequence[TraceRequest],
    engine: EngineConfig,
    dp: int,
    model: PassModel,
    policies: Sequence[str],
    seed: int = 0,
    timeout_s: float = 120.0,
    peers: dict[str, Callable[[], PeerPolicy]] | None = None,
    align_ticks: int | None = None,
    pace_tokens: int | None = None,
    clock: str = "ticks",
    surge_tokens: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Every policy as one phase over ``dp`` ranks: reports and modeled figures
    (densegate's aligned gate with ``engine``'s K, this ``align_ticks``, ``pace_tokens`` and
    ``surge_tokens``). ``clock`` "seconds": arrivals (``arrival_pass``) are modeled
    microseconds (``densegate.lab.bench.dp_clock``); "ticks": they are ticks."""
    if dp < 2:
        raise ValueError(f"dp must be >= 2, got {dp}")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    null = dataclasses.replace(engine, runner="null", model=None)
    makers = dict(PEERS) if peers is None else dict(peers)
    phases = [Phase(COORDINATED, "aligned", null)]
    if "gate-off" in policies:
        phases.append(Phase(BASELINE, "local", dataclasses.replace(null, gate_enabled=False)))
    phases += [Phase(p, "aligned", null) for p in policies if p in makers]
    config = DPConfig(
        engine, seed=seed, timeout_s=timeout_s, phases=tuple(phases), align_ticks=align_ticks,
        pace_tokens=pace_tokens, surge_tokens=surge_tokens,
    )  # fmt: skip
    hooks = chain(TimingHooks(), PeerHooks({p: makers[p] for p in policies if p in makers}))
    clocks = ModeledClocks(model) if clock == "seconds" else None
    results = run_rank_threads(dp, trace, config, hooks, PeerCollective, clocks=clocks)
    ordered = sorted(trace, key=_arrival)
    arrival_us = {str(i): r.arrival_pass for i, r in enumerate(ordered)}
    prompt_len = {str(i): r.prompt_len for i, r in enumerate(ordered)}
    out: dict[str, dict[str, Any]] = {}
    for name in policies:
        phase = _PHASE.get(name, name)
        reps = [next(x for x in results[r] if x.phase == phase) for r in range(dp)]
        timings = [x.timing for x in reps]
        modeled = (
            dp_figures(timings, model)
            if clocks is None
            else figures(clocks.by_name(phase), timings, arrival_us)
        )
        floor: dict[str, float | None] = {}
        if clocks is not None:
            got = floors(clocks.by_name(phase), timings, prompt_len, model)
            share = got.pop("gaps_in_prefill_ticks")[0]
            floor = {k: percentile(v, 99) for k, v in got.items()} | {
                "gaps_in_prefill_ticks": share
            }
        out[name] = {
            "reports": reps,
            "floors_p99": floor,
            "modeled": modeled.summary(),
            "mixed_ticks": int(reps[0].alignment.get("mixed_ticks", 0)),
            "finished": sum(len(x.finished) for x in reps),
        }
    return out


_COLUMNS = ("tokens_per_s", "itl_ms_p50", "itl_ms_p99", "ttft_ms_p50", "ttft_ms_p99",
            "ttft_ms_max", "mixed_ticks")  # fmt: skip
_HIGHER = {"tokens_per_s"}


def policy_rows(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy the columns, with ratios to gate-off and to the best peer per column
    (the best over the engines' own rules present: ``VARIANTS`` are not the bar)."""
    rows = []
    for name, r in runs.items():
        m = r["modeled"]
        rows.append({
            "name": name, "tokens_per_s": m["output_tokens_per_s"],
            "itl_ms_p50": m["itl_ms"]["p50"], "itl_ms_p99": m["itl_ms"]["p99"],
            "ttft_ms_p50": m["ttft_ms"]["p50"], "ttft_ms_p99": m["ttft_ms"]["p99"],
            "ttft_ms_max": m["ttft_ms"]["max"], "mixed_ticks": r["mixed_ticks"],
            "finished": r["finished"],
            "decisions": sum(len(x.decisions) + len(x.local_decisions) for x in r["reports"]),
            "ticks": max((x.ticks for x in r["reports"]), default=0),
        })  # fmt: skip
        f = r.get("floors_p99") or {}
        x = rows[-1]
        x |= {"itl_floor_ms_p99": f.get("itl_ms"), "ttft_floor_ms_p99": f.get("ttft_ms"),
              "itl_p99_to_floor": _div(x["itl_ms_p99"], f.get("itl_ms")),
              "ttft_p99_to_floor": _div(x["ttft_ms_p99"], f.get("ttft_ms")),
              "gaps_in_prefill_ticks": f.get("gaps_in_prefill_ticks")}  # fmt: skip
    off = next((x for x in rows if x["name"] == "gate-off"), None)
    peers = [x for x in rows if _is_bar(x["name"])]
    for x in rows:
        x["ratio_to_gate_off"] = {c: _div(x[c], off[c]) if off else None for c in _COLUMNS}
        best: dict[str, float | None] = {}
        for c in _COLUMNS:
            vals = [p[c] for p in peers if p[c] is not None]
            pick = (max if c in _HIGHER else min)(vals) if vals else None
            best[c] = _div(x[c], pick)
        x["ratio_to_best_peer"] = best
    return rows


def _pct(share: float | None) -> str:
    return "" if share is None else f"{100 * share:.1f}%"


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def bars(rows: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """The best engine rule's figure per goal column (``VARIANTS`` and ``ALIASES`` are not
    the bar): the highest tokens/s, the lowest ITL p99 and TTFT p99; None without a peer."""
    peers = [x for x in rows if _is_bar(x["name"])]
    if not peers:
        return None
    return {"tokens_per_s": max(p["tokens_per_s"] for p in peers),
            "itl_ms_p99": min(p["itl_ms_p99"] for p in peers),
            "ttft_ms_p99": min(p["ttft_ms_p99"] for p in peers)}  # fmt: skip


def goal(rows: Sequence[dict[str, Any]]) -> dict[str, bool] | None:
    """Issue 31's goal for densegate against ``bars``: tokens/s at least ``TOKENS_SLACK`` x
    the best peer's, ITL p99 and TTFT p99 at most the best peer's."""
    ours = next((x for x in rows if x["name"] == "densegate"), None)
    best = bars(rows)
    if ours is None or best is None:
        return None
    return {
        "tokens_per_s": ours["tokens_per_s"] >= TOKENS_SLACK * best["tokens_per_s"],
        "itl_ms_p99": ours["itl_ms_p99"] <= best["itl_ms_p99"],
        "ttft_ms_p99": ours["ttft_ms_p99"] <= best["ttft_ms_p99"],
    }


def _is_bar(name: str) -> bool:
    return name in PEERS and name not in VARIANTS and name not in ALIASES


def bar_peers() -> list[str]:
    """The engines' own rules, in table order: the peers the goal is judged against."""
    return [n for n in PEERS if _is_bar(n)]


def goal_words(met: dict[str, bool]) -> str:
    """``goal``'s verdict in words: each part met or NOT met."""
    return ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in met.items())


def format_policy_tables(
    by_workload: Sequence[dict[str, Any]], dp: int, profile: Sequence[str],
    load: str = "1 = each workload as defined", clock: str = "seconds",
) -> str:  # fmt: skip
    """One markdown table per workload: policies as rows, ratios beside the figures."""
    arrivals = ("arrivals in modeled seconds, idle time to the next arrival" if clock ==
                "seconds" else "arrivals in ticks, idle time skipped")  # fmt: skip
    lines = [
        f"DP policies side by side at dp={dp} (modeled, {clock} clock: a tick is the slowest "
        f"rank's pass plus the collective, each pass priced by the profile below; {arrivals}; "
        "ratios: to gate-off, to the best peer on that column (the engines' own rules, not "
        f"the variants) and to the physical floor; load: {load})"
    ]
    lines += [f"  {x}" for x in profile]
    head = (
        "| policy | tokens/s | ITL ms p50 / p99 | TTFT ms p50 / p99 / max | mixed ticks "
        "| tokens/s ÷ gate-off / best peer | ITL p99 ÷ best peer | TTFT p99 ÷ best peer "
        "| ITL / TTFT p99 ÷ floor | gaps in prefill ticks |"
    )
    for w in by_workload:
        lines += ["", f"### {w['name']} (modeled, dp={dp}, {w['requests']} requests, "
                  f"load {fmt(w['load'])})", "", head, "|---|" + "---:|" * 9]  # fmt: skip
        for x in w["policies"]:
            g, b = x["ratio_to_gate_off"], x["ratio_to_best_peer"]
            lines.append(
                f"| {x['name']} | {fmt(x['tokens_per_s'])} | {fmt(x['itl_ms_p50'])} / "
                f"{fmt(x['itl_ms_p99'])} | {fmt(x['ttft_ms_p50'])} / {fmt(x['ttft_ms_p99'])} / "
                f"{fmt(x['ttft_ms_max'])} | {x['mixed_ticks']} | {fmt(g['tokens_per_s'])} / "
                f"{fmt(b['tokens_per_s'])} | {fmt(b['itl_ms_p99'])} | {fmt(b['ttft_ms_p99'])} | "
                f"{fmt(x.get('itl_p99_to_floor'))} / {fmt(x.get('ttft_p99_to_floor'))} | "
                f"{_pct(x.get('gaps_in_prefill_ticks'))} |"
            )
        met = w.get("goal")
        if met is not None:
            lines += ["", f"densegate against the best peer (tokens/s >= {TOKENS_SLACK}x, ITL "
                      f"p99 <= 1x, TTFT p99 <= 1x): {goal_words(met)}"]  # fmt: skip
            if "bound" in w:
                lines.append(f"the best peers' bars together: {bound_words(w['bound'])}")
    if any(w.get("goal") is not None for w in by_workload):
        from densegate.lab.bench.dp_verdict import format_verdicts

        lines += ["", "### Verdict (densegate against the best engine rule per column)", ""]
        lines += format_verdicts(by_workload, bar_peers())
    return "\n".join(lines)
