"""The DP peers (``densegate.lab.baselines.dp_peers``): each rule on hand-built reduced and
local views, with broken twins the same check rejects; the bench's slots and local view
from a real engine; the registry and the best-peer bar; then every policy through the real
rank loops at dp 2 and 4 (global peers: identical decisions; every request finished) and
the JSON."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from densegate.cli.bench_names import DP_POLICY_NAMES
from densegate.cli.main import main as cli_main
from densegate.impl.dp_gate import RankObservation
from densegate.impl.engine import Engine
from densegate.impl.gate import Decision, Reason
from densegate.lab.baselines.dp_peers import (
    ALIASES,
    PEERS,
    VARIANTS,
    AtomCoalescer,
    LocalView,
    PeerPolicy,
    PeerView,
    SglangDelayer,
    TrtllmAdp,
    TrtllmAdpBalance,
    VllmCadence,
    VllmCadenceGlobal,
)
from densegate.lab.bench import WORKLOADS, bench_config
from densegate.lab.bench.dp_policies import (
    DP_POLICIES,
    PeerCollective,
    _PeerPhase,
    policy_rows,
    run_dp_policies,
)
from densegate.lab.bench.dp_runs import dp_trace
from densegate.lab.cost import LinearPassModel

UNIT = LinearPassModel({k: (1.0, 0, 0, 0, 0, 0) for k in ("prefill", "mixed", "decode_eager")})
DENSE = 100


def view(ranks: int = 4, waiting: int = 2, tokens: int = 50, decodes: int = 8, kv: int = 0,
         partial: int = 0, full: int = 0, low: int = 0, no_decode: int = 0,
         batch_full: int = 0) -> PeerView:  # fmt: skip
    return PeerView(ranks, waiting, tokens, decodes, kv, partial, full, low, DENSE, no_decode,
                    batch_full)  # fmt: skip


def local(tokens: int = 50, decodes: int = 2, running: int = 3, left: bool = False) -> LocalView:
    return LocalView(tokens, decodes, running, 8, left)


LOCAL = local()


def fires(policy: PeerPolicy, views: Sequence[PeerView], start: int = 1,
          here: LocalView = LOCAL) -> list[bool]:  # fmt: skip
    return [policy.decide(v, start + i, here)[0] for i, v in enumerate(views)]


# -- each rule, and twins with the rule broken --------------------------------------------------


def vllm_ok(p: PeerPolicy) -> bool:
    """#44558 per rank: the cadence is global, the deferral reads only this rank."""
    every = view(waiting=4, full=4)  # every rank has a full pass waiting: no global escape
    return (
        fires(p, [every] * 4, here=local()) == [False, True, False, True]  # interval 2
        and p.decide(every, 1, local(left=True))[0]  # this rank is capacity-bound
        and p.decide(every, 1, local(decodes=0))[0]  # this rank decodes nothing
        and p.decide(every, 1, local(tokens=0))[0]  # #46532: no local prefill work
        and not p.decide(view(decodes=0, no_decode=3), 1, local())[0]  # others idle: still
        and not p.decide(view(waiting=0, tokens=0), 1, local())[0]  # the view is not read
    )


class VllmReadsTheView(VllmCadence):  # the old all-ranks-at-once escapes
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        if v.decode_seqs == 0 or v.waiting_ranks == 0 or v.full_ranks > 0:
            return True, "global"
        return super().decide(v, tick, here)


class VllmNoCapacityBound(VllmCadence):
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        return super().decide(v, tick, here._replace(left_waiting=False))


class VllmDefersIdleRanks(VllmCadence):
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        return super().decide(v, tick, here._replace(decode_seqs=v.decode_seqs))


def vllm_global_ok(p: PeerPolicy) -> bool:
    odd = fires(p, [view()] * 4)  # ticks 1..4: fire on even ticks only
    return (
        odd == [False, True, False, True]
        and p.decide(view(full=1), 1, LOCAL)[0]  # capacity-bound: never deferred
        and p.decide(view(decodes=0), 1, LOCAL)[0]  # nothing decodes: never deferred
    )


class VllmGlobalNoCapacity(VllmCadenceGlobal):
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        return super().decide(v._replace(full_ranks=0), tick, here)


def sglang_ok(p: PeerPolicy) -> bool:
    mixed = fires(p, [view()] * 60)
    return (
        mixed == ([False] * 29 + [True]) * 2  # max_delay_passes 30: 29 held, then released
        and p.decide(view(waiting=4), 70, LOCAL)[0]  # all prefillable
        and fires(SglangDelayer(low_watermark=0.5), [view(low=1)]) == [True]
    )


class SglangThirty(SglangDelayer):  # the old rebuild: 30 passes held
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        if v.waiting_ranks not in (0, v.ranks) and self.delayed == self.max_delay_passes - 1:
            self.delayed += 1
            return False, "delay"
        return super().decide(v, tick, here)


def atom_ok(p: PeerPolicy) -> bool:
    stalled = [view(waiting=3, tokens=250)] * 20  # some rank lacks prefill: no stall valve
    aligned_full = view(waiting=4, tokens=int(0.9 * 4 * DENSE))
    return (
        not any(fires(p, stalled))  # the alignment gate holds
        and p.decide(aligned_full, 30, LOCAL)[0]  # every rank, fill target reached
        and not AtomCoalescer().decide(view(waiting=4, tokens=300), 1, LOCAL)[0]  # under target
        and fires(AtomCoalescer(), [view(waiting=4, tokens=300)] * 11)[-1]  # stall of 10
        and fires(AtomCoalescer(), [view(waiting=3)] * 200)[-1]  # TTFT limit 200
        and not any(fires(AtomCoalescer(), [view(waiting=3)] * 199))
        and AtomCoalescer().decide(view(kv=1), 1, LOCAL)[0]
    )


class AtomIgnoresAlignment(AtomCoalescer):
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        return super().decide(v._replace(waiting_ranks=v.ranks), tick, here)


def trtllm_ok(p: PeerPolicy) -> bool:
    """``_balance_adp_requests``: wait, release, reset, as the source has them."""
    some, every = view(waiting=2), view(waiting=4, full=4)
    fresh = type(p)
    reset = fresh()
    before = fires(reset, [some] * 30 + [every])  # 30 counted, then every rank has context
    return (
        fires(p, [some] * 50) == [False] * 49 + [True]  # timeout_iters 50
        and fires(fresh(), [every] * 11) == [False] * 10 + [True]  # fill does not cut it short
        and fresh().decide(view(waiting=2, no_decode=1), 1, LOCAL)[0]  # a rank without gen
        and fresh().decide(view(waiting=4, no_decode=1), 1, LOCAL)[0]  # ... even when aligned
        and fires(fresh(), [view(waiting=4, batch_full=1)] * 50) == [False] * 49 + [True]
        and before == [False] * 31
        and fires(reset, [some] * 50, start=32) == [False] * 49 + [True]  # the timeout was reset
    )


class TrtllmNoReset(TrtllmAdp):
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        waited = self.waited
        out = super().decide(v, tick, here)
        if v.waiting_ranks == v.ranks and v.batch_full_ranks == 0:
            self.waited = waited
        return out


class TrtllmSumOfDecodes(TrtllmAdp):  # releases only when NO rank decodes, not when one lacks
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        return super().decide(v._replace(no_decode_ranks=v.ranks * (v.decode_seqs == 0)), tick,
                              here)  # fmt: skip


class TrtllmFillRelease(TrtllmAdp):
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        if v.waiting_ranks == v.full_ranks == v.ranks:
            return True, "balanced_full"
        return super().decide(v, tick, here)


class TrtllmIgnoresFullBatch(TrtllmAdp):
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        return super().decide(v._replace(batch_full_ranks=0), tick, here)


def trtllm_variant_ok(p: PeerPolicy) -> bool:
    some = fires(p, [view(waiting=2)] * 50)
    return (
        some == [False] * 49 + [True]  # timeout_iters 50
        and fires(TrtllmAdpBalance(), [view(waiting=4)] * 11) == [False] * 10 + [True]
        and TrtllmAdpBalance().decide(view(waiting=4, full=4), 1, LOCAL)[0]
    )


class TrtllmVariantNoTimeout(TrtllmAdpBalance):
    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        self.waited = 0
        return super().decide(v, tick, here)


RULES: list[tuple[Callable[[PeerPolicy], bool], type[Any], type[Any]]] = [
    (vllm_ok, VllmCadence, VllmReadsTheView),
    (vllm_ok, VllmCadence, VllmNoCapacityBound),
    (vllm_ok, VllmCadence, VllmDefersIdleRanks),
    (vllm_global_ok, VllmCadenceGlobal, VllmGlobalNoCapacity),
    (vllm_ok, VllmCadence, VllmCadenceGlobal),  # the variant is not vLLM's own rule
    (sglang_ok, SglangDelayer, SglangThirty),
    (atom_ok, AtomCoalescer, AtomIgnoresAlignment),
    (trtllm_ok, TrtllmAdp, TrtllmNoReset),
    (trtllm_ok, TrtllmAdp, TrtllmSumOfDecodes),
    (trtllm_ok, TrtllmAdp, TrtllmFillRelease),
    (trtllm_ok, TrtllmAdp, TrtllmIgnoresFullBatch),
    (trtllm_ok, TrtllmAdp, TrtllmAdpBalance),  # the variant is not the source's rule
    (trtllm_variant_ok, TrtllmAdpBalance, TrtllmVariantNoTimeout),
]


@pytest.mark.parametrize(
    ("check", "good", "broken"), RULES, ids=lambda x: getattr(x, "__name__", x)
)
def test_peer_rule_and_its_broken_twin(check: Any, good: type[Any], broken: type[Any]) -> None:
    assert check(good())
    assert not check(broken())


def test_vllm_cadence_interval_and_the_ranks_differ() -> None:
    every = view(waiting=4, full=4)
    assert fires(VllmCadence(4), [every] * 8) == [False, False, False, True] * 2
    assert fires(VllmCadence(8), [every] * 8) == [False] * 7 + [True]
    p = VllmCadence()  # one tick, two ranks' copies: the same view, their own facts
    assert [p.decide(every, 1, x)[0] for x in (local(), local(decodes=0))] == [False, True]


def test_every_peer_fires_with_nothing_waiting() -> None:
    for name, make in PEERS.items():
        p = make()
        if p.per_rank:
            assert p.decide(view(waiting=0, tokens=0), 1, local(tokens=0))[0], name
        elif not isinstance(p, TrtllmAdp):  # TensorRT-LLM's counter runs on idle passes
            assert p.decide(view(waiting=0, tokens=0), 1, LOCAL)[0], name


def test_registry_order_variants_and_alias() -> None:
    assert list(PEERS) == ["vllm-cadence-2", "vllm-cadence-4", "vllm-cadence-8",
                           "sglang-delayer", "atom-coalescer", "trtllm-adp",
                           "vllm-cadence-global", "trtllm-adp-variant", "vllm-cadence"]  # fmt: skip
    assert sorted(VARIANTS) == ["trtllm-adp-variant", "vllm-cadence-global"]
    assert VARIANTS.issubset(PEERS)
    assert [PEERS[f"vllm-cadence-{n}"]() for n in (2, 4, 8)] == [VllmCadence(n) for n in (2, 4, 8)]
    for old, new in ALIASES.items():
        assert PEERS[old]() == PEERS[new]()
    assert SglangDelayer().max_delay_passes == 30


def test_best_peer_is_the_engines_own_rules_not_a_variant() -> None:
    def run(tps: float, ttft: float) -> dict[str, Any]:
        p = {"p50": 1.0, "p99": ttft, "max": ttft}
        return {"modeled": {"output_tokens_per_s": tps, "itl_ms": p, "ttft_ms": p},
                "mixed_ticks": 0, "finished": 1, "reports": []}  # fmt: skip

    runs = {"densegate": run(100, 10), "vllm-cadence-2": run(50, 20),
            "vllm-cadence-global": run(200, 5)}  # fmt: skip
    rows = {x["name"]: x for x in policy_rows(runs)}
    best = rows["densegate"]["ratio_to_best_peer"]
    assert best["tokens_per_s"] == pytest.approx(2.0) and best["ttft_ms_p99"] == pytest.approx(0.5)


# -- the bench's slots and the local view, from a real engine ------------------------------------


class _Spy:
    low_watermark = 1.0  # every rank with waiting work counts as low
    per_rank: ClassVar[bool] = True

    def __init__(self) -> None:
        self.seen: list[tuple[PeerView, LocalView]] = []

    def decide(self, v: PeerView, tick: int, here: LocalView) -> tuple[bool, str]:
        self.seen.append((v, here))
        return True, "spy"


def test_peer_phase_slots_and_local_view() -> None:
    engine = Engine(dataclasses.replace(bench_config(), max_num_seqs=2))
    for _ in range(3):
        engine.add_request([1] * 8, 4)
    spy = _Spy()
    phase = _PeerPhase("spy", spy, engine)
    alone = SimpleNamespace(all_reduce_sum=lambda v, first=False: list(v))  # one rank: sum = v
    c = PeerCollective(alone)
    extras = []
    for tick in range(2):
        phase.at_tick(tick)
        plan = engine.plan()
        vec = RankObservation(plan.waiting_tokens, plan.decode_seqs, False,
                              bool(plan.partials)).to_vector(engine.config.dense,
                                                             engine.config.dense)  # fmt: skip
        phase.before_collective(c, vec)
        extras.append(list(c.extra))
        c.all_reduce_sum(vec)
        engine.execute(plan, Decision(False, Reason.HOLD))  # the peer's decision wins
    (v0, l0), (v1, l1) = spy.seen
    assert l0 == LocalView(16, 0, 0, 2, False) and not l0.batch_full  # 2 of 3 admitted
    assert l1 == LocalView(0, 2, 2, 2, True) and l1.batch_full  # its release left one waiting
    assert extras == [[0, 1, 1, 0], [0, 0, 0, 1]]  # full, low (waiting only), no decode, batch
    assert (v0.no_decode_ranks, v1.batch_full_ranks) == (1, 1)
    assert [f for _, f, _ in phase.decisions] == [True, True]


# -- through the real rank loops --------------------------------------------------------------


@pytest.mark.parametrize("dp", [2, 4])
def test_every_policy_identical_on_every_rank_and_finishes(dp: int) -> None:
    trace = dp_trace(WORKLOADS["bursty"], 0, dp, 12)
    runs = run_dp_policies(trace, bench_config(), dp, UNIT, DP_POLICIES)
    assert list(runs) == list(DP_POLICIES)
    for name, r in runs.items():
        assert r["finished"] == len(trace), name
        reps = r["reports"]
        if name in PEERS and PEERS[name]().per_rank:  # each rank its own, every tick
            assert all(len(x.decisions) == len(reps[0].decisions) for x in reps), name
            assert any(x.decisions != reps[0].decisions for x in reps), name
        elif name != "gate-off":  # gate-off is uncoordinated: each rank its own
            assert all(x.decisions == reps[0].decisions for x in reps), name
            assert reps[0].decisions, name
    holds = {n: sum(not f for _, f, _ in r["reports"][0].decisions) for n, r in runs.items()}
    assert holds["atom-coalescer"] > 0 and holds["trtllm-adp"] > 0  # the peers do hold
    assert holds["vllm-cadence-2"] > 0


def test_policies_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bench", "--dp", "2", "--cost", "roofline:H100-SXM", "--workloads", "steady",
            "--requests", "6", "--quiet"]  # fmt: skip
    argv = [*base, "--policies", ",".join(DP_POLICY_NAMES), "--json"]
    assert cli_main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    (w,) = d["workloads"]
    assert d["clock"] == "seconds" and w["name"] == "steady" and w["load"] == 0.6
    assert [p["name"] for p in w["policies"]] == list(DP_POLICY_NAMES)
    for p in w["policies"]:
        for k in ("tokens_per_s", "itl_ms_p99", "ttft_ms_p99", "mixed_ticks"):
            assert k in p
        assert p["finished"] == 12
        # no policy beats the physical floor on the same work
        assert p["itl_p99_to_floor"] >= 1 - 1e-9 and p["ttft_p99_to_floor"] >= 1 - 1e-9
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
    assert all(w["capacity_tokens_per_s"] > 0 for w in d["workloads"])
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
