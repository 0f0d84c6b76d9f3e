#!/usr/bin/env python3
"""SGLang's real ``PrefillDelayer`` and densegate's replacement, side by side, on the same loads.

Each scenario gives every DP rank a sequence of arrivals; each rank is a
``RankLoad`` (``tests/support/sglang_load.py``) that plays SGLang 0.5.23's
per-pass protocol through SGLang's real ``PrefillDelayerSinglePassExecutor``
(the executor per pass, the chunk continuation and the first admissible
request asking it, ``finalize`` joining for a rank nobody asked on). Ranks run
as threads in lockstep; the only thing that differs between the two policies
is the delayer behind the executor:

- ``sglang``: SGLang's own ``PrefillDelayer``, built with ``PrefillDelayer.__new__``
  and its fields set as its constructor would, its ``_gather_info`` replaced by an
  in-process gather of the ranks' real contributions (as SGLang's own CPU test
  of the delayer does); defaults: no low watermark, no queue trigger;
- ``densegate``: ``DenseGatePrefillDelayer`` with its defaults (``dense_tokens`` =
  the chunk size, target fill 1, valves off), its all-gather likewise replaced
  by an in-process sum, fed the pass observation its scheduler hook records.

Both get K = ``--prefill-delayer-max-delay-passes`` (SGLang's default, 30).
Scenarios: the failures of SGLang's public threads, rebuilt from their
descriptions (``lopsided``: one rank always prefillable, another never, cf.
#29898 and #32880; ``all-stuck``: every rank prefillable with a batch that never
grows, #29898; ``chunked``: chunked-prefill continuations on one rank, #32389 and
#35017; ``oscillating``: a load around the threshold, #35241), and densegate's bench
workloads at dp = 2, 4, 8. Per scenario and policy: the longest run of held
passes, the share of passes held, mixed passes (a rank prefills while another
only decodes), passes where ranks' verdicts differed, requests finished of
submitted. Passes are the unit: no model runs, no clock is read.

Run from the repository root in a venv with SGLang (``.ci/sglang_venv DIR``):
``python benchmarks/sglang_side_by_side.py`` (``--json`` for the figures as JSON,
``--requests N`` to shrink the bench workloads).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from densegate.impl.traces.workload import TraceRequest  # noqa: E402
from densegate.lab.bench.workloads import WORKLOADS  # noqa: E402
from tests.support.sglang_load import Limits, PassResult, RankLoad  # noqa: E402

K = 30
"""SGLang's default ``--prefill-delayer-max-delay-passes``."""
LIMITS = Limits()
MAX_PASSES = 60_000
"""A run that has not drained by then stops (and shows unfinished requests)."""
POLICIES = ("sglang", "densegate")
BARRIER_TIMEOUT_S = 120
"""A rank that misses a pass's gather fails the run (BrokenBarrierError), never hangs it."""


@dataclass(frozen=True)
class Scenario:
    name: str
    dp: int
    ranks: list[list[TraceRequest]]
    """Each rank's arrivals."""


def _issue_scenarios() -> list[Scenario]:
    short = [TraceRequest(t, 64, 64) for t in range(300)]
    long_decodes = [TraceRequest(0, 32, 400) for _ in range(64)]
    lopsided = Scenario("lopsided", 2, [long_decodes[:8] + short, long_decodes])
    # Every rank near --max-running-requests with long decodes, a trickle that never fills.
    full = [TraceRequest(0, 32, 600) for _ in range(LIMITS.max_running_requests - 2)]
    trickle = [TraceRequest(2 * t, 48, 8) for t in range(200)]
    stuck = Scenario("all-stuck", 2, [full + trickle, full + trickle])
    longs = [TraceRequest(10 * t, 6000, 32) for t in range(40)]
    shorts = [TraceRequest(t, 96, 48) for t in range(0, 400, 2)]
    chunked = Scenario("chunked", 2, [longs + shorts[:20], shorts])
    osc = []
    for r in range(2):
        reqs = [TraceRequest(0, 32, 200) for _ in range(16)]
        for burst in range(60):  # bursts alternating just under and just over one pass's room
            tokens = LIMITS.chunked_prefill_size + (-256 if (burst + r) % 2 else 256)
            reqs += [TraceRequest(8 * burst, tokens // 8, 24) for _ in range(8)]
        osc.append(reqs)
    return [lopsided, stuck, chunked, Scenario("oscillating", 2, osc)]


def _bench_scenarios(requests: int | None) -> list[Scenario]:
    out = []
    for name, workload in WORKLOADS.items():
        trace = workload.trace(0, requests)
        for dp in (2, 4, 8):
            ranks: list[list[TraceRequest]] = [[] for _ in range(dp)]
            for i, req in enumerate(sorted(trace, key=lambda r: r.arrival_pass)):
                ranks[i % dp].append(req)
            out.append(Scenario(name, dp, ranks))
    return out


class _Exchange:
    """The in-process collective: every rank posts its row, all read every row."""

    def __init__(self, dp: int) -> None:
        self.rows: list[list[list[int]]] = [[[] for _ in range(dp)] for _ in range(2)]
        self.barrier = threading.Barrier(dp, timeout=BARRIER_TIMEOUT_S)
        self.calls = [0] * dp

    def gather(self, rank: int, row: list[int]) -> list[list[int]]:
        buf = self.rows[self.calls[rank] % 2]  # two buffers: a fast rank cannot overwrite
        self.calls[rank] += 1
        buf[rank] = row
        self.barrier.wait()
        return [list(r) for r in buf]


def _sglang_delayer(dp: int, rank: int, ex: _Exchange) -> Any:
    import torch
    from sglang.srt.managers.prefill_delayer import PrefillDelayer

    d = PrefillDelayer.__new__(PrefillDelayer)
    fields = {  # what PrefillDelayer.__init__ sets, with SGLang's defaults
        "_max_delay_passes": K,
        "_token_usage_low_watermark": None,
        "_debug_log_enabled": False,
        "_queue_min_ratio": None,
        "_max_delay_ms": 5000.0,
        "_queue_trigger_enabled": False,
        "_prefill_max_requests": None,
        "num_dp_ranks": dp,
        "attn_dp_enabled": True,
        "_metrics_collector": None,
        "_curr_state": None,
        "skip_first_delayer": True,
    }
    for k, v in fields.items():
        setattr(d, k, v)

    def gather_info(**info: Any) -> Any:
        row = [int(info["local_prefillable"]), int(info["local_token_watermark_force_allow"])]
        row += [int(info[k]) for k in ("running_batch", "max_prefill_bs", "waiting_queue_len")]
        row.append(int(info["queue_timeout_expired"]))
        return torch.tensor(ex.gather(rank, row), dtype=torch.int64)

    d._gather_info = gather_info
    return d


def _densegate_delayer(dp: int, rank: int, ex: _Exchange) -> Any:
    from densegate.integrations.sglang.config import PluginSettings, gate_config
    from densegate.integrations.sglang.delayer import DenseGatePrefillDelayer

    d = DenseGatePrefillDelayer.__new__(DenseGatePrefillDelayer)
    d.settings = PluginSettings()
    d.gate_config = gate_config(
        d.settings,
        max_delay_passes=K,
        max_prefill_tokens=LIMITS.max_prefill_tokens,
        chunked_prefill_size=LIMITS.chunked_prefill_size,
    )
    d.token_usage_low_watermark = None
    d._start(
        num_dp_ranks=dp,
        attn_dp_enabled=True,
        group=None,
        device="cpu",
        width=1,
        metrics_collector=None,
        debug_log=False,
    )
    d.reduce = lambda vec: [sum(col) for col in zip(*ex.gather(rank, vec), strict=True)]
    return d


def run(scenario: Scenario, policy: str) -> dict[str, Any]:
    """One scenario under one policy, every rank a thread; the figures of the run."""
    from sglang.srt.managers.prefill_delayer import (
        PrefillDelayerSinglePassExecutor,
        RecentPrefillBatchSizeTracker,
    )

    from densegate.integrations.sglang.observe import PassObservation

    dp = scenario.dp
    ex, done = _Exchange(dp), _Exchange(dp)
    make: Callable[[int, int, _Exchange], Any] = (
        _sglang_delayer if policy == "sglang" else _densegate_delayer
    )
    loads = [RankLoad(LIMITS) for _ in range(dp)]
    for load, reqs in zip(loads, scenario.ranks, strict=True):
        for req in reqs:
            load.add(req)
    passes: list[list[PassResult]] = [[] for _ in range(dp)]
    errors: list[BaseException] = []

    def rank_loop(rank: int) -> None:
        try:
            delayer, load = make(dp, rank, ex), loads[rank]
            tracker = RecentPrefillBatchSizeTracker(window_size=16)
            hook = None
            if policy == "densegate":

                def hook(view: RankLoad) -> None:
                    delayer.observe_pass(PassObservation(*view.observation()))

            for t in range(MAX_PASSES):
                executor = PrefillDelayerSinglePassExecutor(delayer, token_usage=0.5)
                passes[rank].append(load.step(t, executor, tracker, before=hook))
                if not any(done.gather(rank, [int(load.has_work())])[r][0] for r in range(dp)):
                    return
        except BaseException as e:
            errors.append(e)
            ex.barrier.abort()
            done.barrier.abort()

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(dp)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return _figures(scenario, policy, passes, loads)


def _figures(
    scenario: Scenario, policy: str, passes: list[list[PassResult]], loads: list[RankLoad]
) -> dict[str, Any]:
    n = len(passes[0])
    held = mixed = disagree = run_len = longest = 0
    for t in range(n):
        row = [p[t] for p in passes]
        verdicts = {p.allowed for p in row}
        disagree += len(verdicts) > 1
        hold = not row[0].allowed
        held += hold
        run_len = run_len + 1 if hold else 0
        longest = max(longest, run_len)
        prefills = any(p.prefill_reqs for p in row)
        decode_only = any(p.decode_seqs and not p.prefill_reqs for p in row)
        mixed += prefills and decode_only
    return {
        "name": scenario.name,
        "dp": scenario.dp,
        "policy": policy,
        "passes": n,
        "max_consecutive_holds": longest,
        "held_share": round(held / n, 4) if n else 0.0,
        "mixed_passes": mixed,
        "disagreements": disagree,
        "finished": sum(load.finished for load in loads),
        "submitted": sum(load.submitted for load in loads),
        "max_delay_passes": K,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = "| scenario | dp | policy | passes | longest hold | held | mixed | disagree | finished |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['dp']} | {r['policy']} | {r['passes']} | "
            f"{r['max_consecutive_holds']} | {100 * r['held_share']:.1f}% | {r['mixed_passes']} | "
            f"{r['disagreements']} | {r['finished']}/{r['submitted']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--requests", type=int, default=None, help="requests per bench workload")
    args = ap.parse_args(argv)
    if args.requests is not None and args.requests < 1:
        ap.error(f"--requests must be >= 1, got {args.requests}")
    scenarios = _issue_scenarios() + _bench_scenarios(args.requests)
    rows = [run(s, policy) for s in scenarios for policy in POLICIES]
    if args.json:
        keys = [k for k in rows[0] if k != "passes"] if rows else []
        print(json.dumps({"scenarios": [{k: r[k] for k in keys} for r in rows]}, indent=1))
    else:
        print(_table(rows))
    bad = [
        r
        for r in rows
        if r["policy"] == "densegate"
        and (
            r["max_consecutive_holds"] > K - 1
            or r["disagreements"]
            or r["finished"] != r["submitted"]
        )
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
