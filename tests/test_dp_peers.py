"""The four DP peers (``densegate.lab.baselines.dp_peers``): each rule on hand-built reduced
vectors, with a broken twin the same check rejects; then every policy through the real
rank loops at dp 2 and 4 (identical decisions, every request finished) and the JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from densegate.cli.bench_names import DP_POLICY_NAMES
from densegate.cli.main import main as cli_main
from densegate.lab.baselines.dp_peers import (
    AtomCoalescer,
    PeerPolicy,
    PeerView,
    SglangDelayer,
    TrtllmAdpBalance,
    VllmCadence,
)
from densegate.lab.bench import WORKLOADS, bench_config
from densegate.lab.bench.dp_policies import DP_POLICIES, run_dp_policies
from densegate.lab.bench.dp_runs import dp_trace
from densegate.lab.cost import LinearPassModel

UNIT = LinearPassModel({k: (1.0, 0, 0, 0, 0, 0) for k in ("prefill", "mixed", "decode_eager")})
DENSE = 100


def view(ranks: int = 4, waiting: int = 2, tokens: int = 50, decodes: int = 8, kv: int = 0,
         partial: int = 0, full: int = 0, low: int = 0) -> PeerView:  # fmt: skip
    return PeerView(ranks, waiting, tokens, decodes, kv, partial, full, low, DENSE)


def fires(policy: PeerPolicy, views: list[PeerView], start: int = 1) -> list[bool]:
    return [policy.decide(v, start + i)[0] for i, v in enumerate(views)]


# -- each rule, and a twin with the rule broken -----------------------------------------------


def vllm_ok(p: PeerPolicy) -> bool:
    odd = fires(p, [view()] * 4)  # ticks 1..4: fire on even ticks only
    return (
        odd == [False, True, False, True]
        and p.decide(view(full=1), 1)[0]  # capacity-bound: never deferred
        and p.decide(view(decodes=0), 1)[0]  # nothing decodes: never deferred
    )


class VllmNoCapacity(VllmCadence):
    def decide(self, v: PeerView, tick: int) -> tuple[bool, str]:
        return super().decide(v._replace(full_ranks=0), tick)


def sglang_ok(p: PeerPolicy) -> bool:
    mixed = fires(p, [view()] * 31)
    return (
        mixed == [False] * 30 + [True]  # mixed: 30 delayed passes, then release
        and p.decide(view(waiting=4), 40)[0]  # all prefillable
        and fires(SglangDelayer(low_watermark=0.5), [view(low=1)]) == [True]
    )


class SglangOffByOne(SglangDelayer):
    def decide(self, v: PeerView, tick: int) -> tuple[bool, str]:
        if v.waiting_ranks not in (0, v.ranks) and self.delayed >= self.max_delay_passes - 1:
            self.delayed = 0
            return True, "max_delay"
        return super().decide(v, tick)


def atom_ok(p: PeerPolicy) -> bool:
    stalled = [view(waiting=3, tokens=250)] * 20  # some rank lacks prefill: no stall valve
    aligned_full = view(waiting=4, tokens=int(0.9 * 4 * DENSE))
    return (
        not any(fires(p, stalled))  # the alignment gate holds
        and p.decide(aligned_full, 30)[0]  # every rank, fill target reached
        and not AtomCoalescer().decide(view(waiting=4, tokens=300), 1)[0]  # under target
        and fires(AtomCoalescer(), [view(waiting=4, tokens=300)] * 11)[-1]  # stall of 10
        and fires(AtomCoalescer(), [view(waiting=3)] * 200)[-1]  # TTFT limit 200
        and not any(fires(AtomCoalescer(), [view(waiting=3)] * 199))
        and AtomCoalescer().decide(view(kv=1), 1)[0]
    )


class AtomIgnoresAlignment(AtomCoalescer):
    def decide(self, v: PeerView, tick: int) -> tuple[bool, str]:
        return super().decide(v._replace(waiting_ranks=v.ranks), tick)


def trtllm_ok(p: PeerPolicy) -> bool:
    some = fires(p, [view(waiting=2)] * 50)
    return (
        some == [False] * 49 + [True]  # timeout_iters 50
        and fires(TrtllmAdpBalance(), [view(waiting=4)] * 11) == [False] * 10 + [True]
        and TrtllmAdpBalance().decide(view(waiting=4, full=4), 1)[0]
    )


class TrtllmNoTimeout(TrtllmAdpBalance):
    def decide(self, v: PeerView, tick: int) -> tuple[bool, str]:
        self.waited = 0
        return super().decide(v, tick)


RULES: list[tuple[Callable[[PeerPolicy], bool], type[Any], type[Any]]] = [
    (vllm_ok, VllmCadence, VllmNoCapacity),
    (sglang_ok, SglangDelayer, SglangOffByOne),
    (atom_ok, AtomCoalescer, AtomIgnoresAlignment),
    (trtllm_ok, TrtllmAdpBalance, TrtllmNoTimeout),
]


@pytest.mark.parametrize(
    ("check", "good", "broken"), RULES, ids=lambda x: getattr(x, "__name__", x)
)
def test_peer_rule_and_its_broken_twin(check: Any, good: type[Any], broken: type[Any]) -> None:
    assert check(good())
    assert not check(broken())


def test_every_peer_fires_with_nothing_decoding_or_nothing_waiting() -> None:
    for cls in (VllmCadence, SglangDelayer, AtomCoalescer, TrtllmAdpBalance):
        assert cls().decide(view(waiting=0), 1)[0]
        if cls is not SglangDelayer:  # SGLang's delayer is not described with that escape
            assert cls().decide(view(decodes=0), 1)[0]


# -- through the real rank loops --------------------------------------------------------------


@pytest.mark.parametrize("dp", [2, 4])
def test_every_policy_identical_on_every_rank_and_finishes(dp: int) -> None:
    trace = dp_trace(WORKLOADS["bursty"], 0, dp, 12)
    runs = run_dp_policies(trace, bench_config(), dp, UNIT, DP_POLICIES)
    assert list(runs) == list(DP_POLICIES)
    for name, r in runs.items():
        assert r["finished"] == len(trace), name
        reps = r["reports"]
        if name != "gate-off":  # gate-off is uncoordinated: each rank its own
            assert all(x.decisions == reps[0].decisions for x in reps), name
            assert reps[0].decisions, name
    holds = {n: sum(not f for _, f, _ in r["reports"][0].decisions) for n, r in runs.items()}
    assert holds["atom-coalescer"] > 0 and holds["trtllm-adp"] > 0  # the peers do hold


def test_policies_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bench", "--dp", "2", "--cost", "roofline:H100-SXM", "--workloads", "steady",
            "--requests", "6", "--quiet"]  # fmt: skip
    argv = [*base, "--policies", ",".join(DP_POLICY_NAMES), "--json"]
    assert cli_main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    (w,) = d["workloads"]
    assert w["name"] == "steady" and w["load"] == 1.0
    assert [p["name"] for p in w["policies"]] == list(DP_POLICY_NAMES)
    for p in w["policies"]:
        for k in ("tokens_per_s", "itl_ms_p99", "ttft_ms_p99", "mixed_ticks"):
            assert k in p
        assert p["finished"] == 12
    off = next(p for p in w["policies"] if p["name"] == "gate-off")
    assert off["ratio_to_gate_off"]["tokens_per_s"] == pytest.approx(1.0)
    assert cli_main([*base, "--policies", "densegate,nope"]) == 2


def test_dp_policy_names_agree() -> None:
    assert DP_POLICIES == DP_POLICY_NAMES


def test_load_respaces_arrivals_to_a_fraction_of_capacity() -> None:
    from densegate.lab.bench.dp_load import at_load, capacity_per_tick, offered_per_tick

    trace = dp_trace(WORKLOADS["steady"], 0, 2, 10)
    cap = capacity_per_tick(trace, bench_config(), 2, UNIT)
    assert cap > 0
    half, double = at_load(trace, 0.5, cap), at_load(trace, 2.0, cap)
    assert [r.prompt_len for r in half] == [r.prompt_len for r in trace]
    assert offered_per_tick(half) == pytest.approx(0.5 * cap, rel=0.15)
    assert offered_per_tick(double) > offered_per_tick(half)
    with pytest.raises(ValueError):
        at_load(trace, 0.0, cap)


def test_load_cli_one_entry_per_workload_and_load(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bench", "--dp", "2", "--cost", "roofline:H200", "--workloads", "steady",
            "--requests", "6", "--quiet",
            "--policies", "densegate,gate-off,trtllm-adp"]  # fmt: skip
    assert cli_main([*base, "--load", "0.5,0.9", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [(w["name"], w["load"]) for w in d["workloads"]] == [("steady", 0.5), ("steady", 0.9)]
    assert all(w["capacity_requests_per_tick"] > 0 for w in d["workloads"])
    assert all(p["finished"] == 12 for w in d["workloads"] for p in w["policies"])
    assert cli_main(["bench", "--cost", "roofline:H200", "--load", "0.5", "--quiet"]) == 2


def test_load_plot_one_png_per_workload(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    argv = ["bench", "--dp", "2", "--cost", "roofline:H100-SXM", "--workloads", "steady",
            "--requests", "4", "--quiet", "--policies", "densegate,gate-off",
            "--load", "0.5,1", "--plot", str(tmp_path)]  # fmt: skip
    assert cli_main(argv) == 0
    assert (tmp_path / "dp_load_steady.png").stat().st_size > 0
    assert "wrote" in capsys.readouterr().out
