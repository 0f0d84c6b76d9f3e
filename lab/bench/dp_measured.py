"""The DP policies side by side, measured: real gloo rank processes, a real runner.

The modeled side by side (``densegate.lab.bench.dp_policies``) prices passes with
a profile; this one times them. Every policy is a phase of one
``densegate.impl.dp.launch`` run (the processes ``densegate run --dp N`` starts),
repeated in rounds of alternating order (``densegate.lab.cost.compare``) so a
drift in the machine's speed weighs every policy alike; rounds are pooled and
each policy's tokens/s is also given per round as a ratio to gate-off's in that
round. The peers speak the modeled bench's protocol: ``PhasedPeerCollective``
carries the bench's slots after the runtime's in the rank's one all-reduce a
tick, and ``PeerHooks`` substitutes the peer's decision for the aligned gate's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from densegate.impl.dp.collective import Collective, PhasedCollective
from densegate.impl.dp.config import COORDINATED, DPConfig, Phase
from densegate.impl.dp.hooks import chain
from densegate.impl.dp.report import RankReport
from densegate.impl.engine import EngineConfig
from densegate.impl.figures import fmt
from densegate.impl.traces.workload import TraceRequest
from densegate.impl.validation import check_int
from densegate.lab.baselines.dp_peers import PEERS, PeerPolicy
from densegate.lab.bench.dp_policies import PeerCollective, PeerHooks, goal_words
from densegate.lab.cost.compare import compare_rounds, round_name, round_order, split_round
from densegate.lab.cost.timeline import TimeFigures, dp_figures
from densegate.lab.dp.phases import BASELINE
from densegate.lab.dp.timing import TimingHooks

__all__ = ["PhasedPeerCollective", "format_measured_tables", "measured_rows",
           "run_measured_policies"]  # fmt: skip

_PHASE = {"densegate": COORDINATED, "gate-off": BASELINE}


class PhasedPeerCollective(PeerCollective):
    """``PeerCollective`` over a rank's ``TorchCollective``: phases still begin and end
    on the inner collective, so a phase's first call waits for every rank's model."""

    def begin_phase(self, index: int) -> None:
        if isinstance(self.inner, PhasedCollective):
            self.inner.begin_phase(index)

    def leave(self, calls: int, total: Sequence[int] | None) -> None:
        if isinstance(self.inner, PhasedCollective):
            self.inner.leave(calls, total)


def _wrap(inner: Collective) -> Collective:
    return PhasedPeerCollective(inner)


def run_measured_policies(
    trace: Sequence[TraceRequest],
    engine: EngineConfig,
    dp: int,
    policies: Sequence[str],
    rounds: int = 2,
    seed: int = 0,
    timeout_s: float = 120.0,
) -> dict[str, dict[str, Any]]:
    """Every policy as a phase of ``dp`` real rank processes, ``rounds`` rounds in
    alternating order; per policy the pooled measured figures and the mixed ticks."""
    from densegate.impl.dp.launch import launch

    check_int("run_measured_policies", "dp", dp, 2)
    check_int("run_measured_policies", "rounds", rounds, 1)
    # The runtime's first phase is always the aligned gate's, listed or not.
    base: list[Phase] = [Phase(COORDINATED, "aligned", engine)]
    for name in policies:
        if name == "densegate":
            continue
        if name == "gate-off":
            base.append(Phase(BASELINE, "local", dataclasses.replace(engine, gate_enabled=False)))
        elif name in PEERS:
            base.append(Phase(name, "aligned", engine))
        else:
            raise ValueError(f"run_measured_policies: unknown policy {name!r}")
    phases = tuple(dataclasses.replace(p, name=round_name(p.name, k))
                   for k, p in round_order(base, rounds))  # fmt: skip
    peers: dict[str, Callable[[], PeerPolicy]] = {}
    for p in phases:
        if split_round(p.name)[0] in PEERS:
            peers[p.name] = PEERS[split_round(p.name)[0]]
    config = DPConfig(engine, seed=seed, timeout_s=timeout_s, phases=phases)
    result = launch(trace, config, dp, hooks=chain(TimingHooks(), PeerHooks(peers)), wrap=_wrap)
    if any(code != 0 for code in result.exitcodes):
        raise RuntimeError(f"a measured DP rank failed: exit codes {result.exitcodes}")
    reports: dict[str, list[RankReport]] = {}
    for r in range(dp):
        for rep in result.reports[r]:
            reports.setdefault(rep.phase, []).append(rep)
    figures: dict[str, TimeFigures] = {
        name: dp_figures([x.timing for x in reps]) for name, reps in reports.items()
    }
    pooled = compare_rounds(figures, BASELINE)
    out: dict[str, dict[str, Any]] = {}
    for name in policies:
        phase = _PHASE.get(name, name)
        mine = [reps for n, reps in reports.items() if split_round(n)[0] == phase]
        out[name] = {
            "measured": pooled[phase],
            "mixed_ticks": sum(int(reps[0].alignment.get("mixed_ticks", 0)) for reps in mine),
            "finished_by_round": [sum(len(x.finished) for x in reps) for reps in mine],
            "submitted": len(trace),
        }
    return out


def measured_rows(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy the modeled bench's columns (measured), with tokens/s per round as a
    ratio to gate-off's in the same round; ``finished``: the fewest any round finished."""
    rows = []
    for name, r in runs.items():
        m = r["measured"]
        rows.append({
            "name": name, "tokens_per_s": m["output_tokens_per_s"],
            "ratio_to_gate_off": m["ratio_to_baseline"],
            "ratio_to_gate_off_by_round": list(m["ratio_to_baseline_by_round"].values()),
            "itl_ms_p50": m["itl_ms"]["p50"], "itl_ms_p99": m["itl_ms"]["p99"],
            "ttft_ms_p50": m["ttft_ms"]["p50"], "ttft_ms_p99": m["ttft_ms"]["p99"],
            "ttft_ms_max": m["ttft_ms"]["max"], "mixed_ticks": r["mixed_ticks"],
            "finished": min(r["finished_by_round"], default=0), "submitted": r["submitted"],
            "rounds": m["rounds"],
        })  # fmt: skip
    return rows


def format_measured_tables(by_workload: Sequence[dict[str, Any]], dp: int, runner: str) -> str:
    """One markdown table per workload: policies as rows, measured figures."""
    rounds = max((x["rounds"] for w in by_workload for x in w["policies"]), default=0)
    lines = [
        f"DP policies side by side at dp={dp} (measured: {dp} gloo rank processes, runner "
        f"{runner}, {rounds} round(s) in alternating order, pooled; mixed ticks summed over "
        "the rounds)"
    ]
    head = ("| policy | tokens/s | ÷ gate-off (pooled; per round) | ITL ms p50 / p99 "
            "| TTFT ms p50 / p99 / max | mixed ticks |")  # fmt: skip
    for w in by_workload:
        lines += ["", f"### {w['name']} (measured, dp={dp}, {w['requests']} requests)", "",
                  head, "|---|" + "---:|" * 5]  # fmt: skip
        for x in w["policies"]:
            per = ", ".join(fmt(v) for v in x["ratio_to_gate_off_by_round"])
            lines.append(
                f"| {x['name']} | {fmt(x['tokens_per_s'])} | {fmt(x['ratio_to_gate_off'])}; "
                f"{per} | {fmt(x['itl_ms_p50'])} / {fmt(x['itl_ms_p99'])} | "
                f"{fmt(x['ttft_ms_p50'])} / {fmt(x['ttft_ms_p99'])} / {fmt(x['ttft_ms_max'])} "
                f"| {x['mixed_ticks']} |"
            )
        met = w.get("goal")
        if met is not None:
            lines += ["", f"densegate against the peers, measured: {goal_words(met)}"]
    return "\n".join(lines)
