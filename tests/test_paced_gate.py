"""The aligned gate's paced mode (``pace_tokens``): its lockstep with the spec, its rules on
examples, and D9-D12's and R2's planted twins replayed on the shipped code.

``densegate prove`` proves D9-D12 and R2 (``tests/support/prove_run.py`` runs it once);
here each refuting trace of the paced obligations is replayed: D11's on the shipped
``AlignedGate`` (which fires every tick the mutant holds, or caps where it caps lower),
D12's on the shipped ``capped_prefill`` (which keeps what the spec's cap rule keeps,
the mutant not), and R2's cap-only twin, which R2's step check refutes on the cap. Last,
the conformance kit's aligned half (``conform --prove --aligned``) on the shipped gate and
two broken paced ones.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import z3
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from densegate.cli import main as cli
from densegate.impl.dp_gate import AlignedGate, AlignedGateConfig, ReducedObservation
from densegate.impl.gate import Decision, Reason
from densegate.impl.sched.cap import capped_prefill
from densegate.impl.sched.request import Request
from densegate.proofs.dp_paced import PACED_MUTANTS, PACED_OBLIGATIONS, first_token_lemma
from densegate.proofs.dp_paced_conform import (
    ALIGNED_IDS,
    AlignedProofReport,
    prove_aligned_conforms,
)
from densegate.proofs.dp_paced_machines import CAP_RULE
from densegate.proofs.refinement import dp_gate
from densegate.proofs.refinement.obligations import REFINEMENT_OBLIGATIONS
from densegate.proofs.registry import level
from densegate.spec.dp_gate import DP
from densegate.spec.machine import Machine, evaluate
from tests.support.dp_lockstep import AlignedLockstep, BusyLockstep, PacedLockstep
from tests.support.prove_run import prove_run

MIN_PACED_TICKS = 1_500
MIN_SURGED_TICKS = 100
MIN_BUSY_TICKS = 100


@pytest.fixture(scope="session")
def proved() -> dict[str, dict[str, Any]]:
    return prove_run().by_id


def _lockstep(machine: type[AlignedLockstep]) -> type[AlignedLockstep]:
    """Run ``machine`` against the spec with its tick counters from zero; the counters."""
    for counter in ("ticks", "paced_ticks", "surged_ticks", "busy_ticks"):
        setattr(AlignedLockstep, counter, 0)
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=30))
    return AlignedLockstep


def test_paced_gate_agrees_with_spec_every_tick() -> None:
    """Decision, reason, cap and state equal the spec's on every tick, paced mode on."""
    lock = _lockstep(PacedLockstep)
    print(f"{lock.ticks} paced lockstep ticks, {lock.paced_ticks} PACED, {lock.surged_ticks} "
          "of them surged")  # fmt: skip
    assert lock.paced_ticks >= MIN_PACED_TICKS, lock.paced_ticks
    assert lock.surged_ticks >= MIN_SURGED_TICKS, lock.surged_ticks


def test_busy_waiting_gate_agrees_with_spec_every_tick() -> None:
    """The same, the busy wait on in every run: its held ticks, and the BUDGET or STALL
    ending them, equal the spec's."""
    lock = _lockstep(BusyLockstep)
    print(f"{lock.ticks} busy-wait lockstep ticks, {lock.paced_ticks} PACED, {lock.busy_ticks} "
          "in the busy wait")  # fmt: skip
    assert lock.busy_ticks >= MIN_BUSY_TICKS, lock.busy_ticks
    assert lock.paced_ticks >= MIN_BUSY_TICKS, lock.paced_ticks


def _reduced(n: int, waiting: int, decodes: int, no_decode: int = 0, vacant: int = 0) -> Any:
    return ReducedObservation(n, waiting, waiting, decodes, no_decode_ranks=no_decode,
                              vacant_ranks=vacant)  # fmt: skip


def test_the_busy_wait_holds_only_an_unaligned_busy_tick_and_at_most_k_minus_1() -> None:
    """With 3 ranks, 2 waiting and 10 decodes at busy_decodes 10, K = 4: HOLD three ticks,
    then BUDGET; the same tick aligned (the third rank vacant), with 9 decodes, with a
    waiting rank that has no decode, or with the wait off, fires PACED at once."""
    busy = AlignedGateConfig(64, max_hold_passes=4, pace_tokens=8, busy_decodes=10)
    gate = AlignedGate(busy, 3)
    got = [gate.decide(_reduced(3, 2, 10), t).reason for t in range(5)]
    assert got == [Reason.HOLD] * 3 + [Reason.BUDGET, Reason.HOLD]
    for case in (_reduced(3, 2, 10, vacant=1), _reduced(3, 2, 9), _reduced(3, 2, 10, 1)):
        assert AlignedGate(busy, 3).decide(case, 0) == Decision(True, Reason.PACED, 8)
    off = AlignedGate(dataclasses.replace(busy, busy_decodes=None), 3)
    assert off.decide(_reduced(3, 2, 10), 0) == Decision(True, Reason.PACED, 8)


# -- the rules, on examples ----------------------------------------------------------------


def _decide(gate: AlignedGate, w: int, f: int, d: int, t: int, p: int = 0) -> Decision:
    return gate.decide(ReducedObservation(gate.world_size, w, f, d, p), t)


def test_paced_never_holds_and_caps_all_but_dense() -> None:
    cfg = AlignedGateConfig(100, max_hold_passes=3, stall_ticks=2, align_ticks=0, pace_tokens=24)
    gate = AlignedGate(cfg, world_size=2)
    thin = [_decide(gate, 1, 5, 4, t) for t in range(10)]  # one rank waits, under-full
    assert thin == [Decision(True, Reason.PACED, 24)] * 10
    assert gate.state.hold_passes == 0 and gate.state.last_fill == 5
    assert _decide(gate, 2, 200, 4, 10) == Decision(True, Reason.DENSE)  # dense: uncapped
    assert _decide(gate, 2, 10, 4, 11) == Decision(True, Reason.PACED, 24)  # not ALIGNED
    assert _decide(gate, 1, 5, 4, 12, p=1) == Decision(True, Reason.PACED, 24)  # valve off
    assert _decide(gate, 0, 0, 4, 13) == Decision(True, Reason.EMPTY)
    assert _decide(gate, 1, 5, 0, 14) == Decision(True, Reason.NO_DECODE)
    assert gate.state.grew_at == 14  # tracked every tick: 0 at tick 13, then 5
    kv = AlignedGate(dataclasses.replace(cfg, kv_pressure_valve=True), 2)
    assert _decide(kv, 1, 5, 4, 0, p=1) == Decision(True, Reason.KV_PRESSURE)
    off = AlignedGate(dataclasses.replace(cfg, enabled=False), 2)
    assert _decide(off, 1, 5, 4, 0) == Decision(True, Reason.DISABLED)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_pace_tokens_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="pace_tokens"):
        AlignedGateConfig(8, pace_tokens=bad)  # type: ignore[arg-type]


# -- the obligations as `densegate prove` reports them ---------------------------------------


def test_paced_obligations_registered_and_proved(proved: dict[str, dict[str, Any]]) -> None:
    ids = [o.id for o in level("dp").obligations()]
    assert ids == [f"D{i}" for i in range(1, 13)]
    assert level("dp").unused_mutants() == set()
    for ob in PACED_OBLIGATIONS:
        r = proved[ob.id]
        assert r["status"] == "proved", (ob.id, r["checks"])
        assert r["parametric"] is True and r["bound"] is None and r["scope"] is None
        assert r["mutants"] and all(m["status"] == "refuted" for m in r["mutants"]), ob.id
        assert all(t["reachable"] for t in r["triggers"]), ob.id
    d11 = [c["name"] for c in proved["D11"]["checks"]]
    assert "lemma 1" in d11  # the ceil bound is a checked lemma, not prose


def test_first_token_lemma_and_a_wrong_one() -> None:
    s = z3.Solver()
    s.add(z3.Not(first_token_lemma()))
    assert s.check() == z3.unsat
    n, c, Q, k = z3.Ints("n c Q k")
    given = z3.And(n >= 0, c >= 1, Q >= 1, c * (k - 1) < Q, c * k >= Q, n * c < Q)
    wrong = z3.ForAll([n, c, Q, k], z3.Implies(given, n + 2 <= k))  # one tick too few
    s2 = z3.Solver()
    s2.add(z3.Not(wrong))
    assert s2.check() == z3.sat


def _run_from_first_row(machine: Machine, p: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The trace is a run of ``machine`` from its first row's state (the initial one)."""
    state = {k: rows[0][k] for k in machine.state_sorts}
    for row in rows:
        assert {k: row[k] for k in state} == state
        _, out, state = evaluate(machine, p, state, {k: row[k] for k in machine.obs_sorts})
        assert {k: row[k] for k in out} == out
        assert {k: row[f"next_{k}"] for k in state} == state


def test_d11_traces_hold_or_undercap_where_the_shipped_gate_fires_capped(
    proved: dict[str, dict[str, Any]],
) -> None:
    ob = next(o for o in PACED_OBLIGATIONS if o.id == "D11")
    machines = {m.name: m.machine for m in ob.mutants}
    for m in proved["D11"]["mutants"]:
        p, rows = m["params"], m["trace"]
        assert rows[0]["r"] == p["Q"] and rows[0]["n"] == 0 and p["pc"]
        _run_from_first_row(machines[m["name"]], p, rows)
        last = rows[-1]
        assert last["r"] > 0 and last["n"] * p["cmin"] >= p["Q"]  # still waiting, too late
        cfg = AlignedGateConfig(p["B"], p["K"], p["enabled"], 1, p["S"], p["kv"], None, p["Cp"],
                                p["Cs"])  # fmt: skip
        gate = AlignedGate(dataclasses.replace(cfg, target_fill=p["T"] / p["B"]), p["N"])
        assert gate.config.fill_tokens == p["T"]
        shipped = []
        for row in rows:
            dec = gate.decide(ReducedObservation(p["N"], *(row[k] for k in "WFDPC")), row["t"])
            shipped.append((dec.fire, dec.cap or 0))
        mutant = [(row["fire"], row["cap"]) for row in rows]
        assert all(fire for fire, _ in shipped), m["name"]
        assert all(cap in (0, p["Cp"], p["Cs"]) and p["Cp"] >= p["cmin"] for _, cap in shipped)
        assert shipped != mutant, m["name"]


def test_d12_traces_are_not_what_capped_prefill_keeps(proved: dict[str, dict[str, Any]]) -> None:
    for m in proved["D12"]["mutants"]:
        p, rows = m["params"], m["trace"]
        _run_from_first_row(PACED_MUTANTS[m["name"]].machine, p, rows)
        reqs = [Request(f"r{i}", i, [1], 1, 0, 0.0) for i in range(len(rows))]
        items = list(zip(reqs, (row["n"] for row in rows), strict=True))
        split = next((i for i, row in enumerate(rows) if row["a"]), len(rows))
        kp, ka = capped_prefill(items[:split], items[split:], p["cap"], p["chunked"])
        kept = {id(r): n for r, n in kp + ka}
        shipped = [kept.get(id(r), 0) for r in reqs]
        state: dict[str, Any] = {"left": p["cap"], "stop": False, "adm": False}
        spec = []
        for row in rows:
            _, out, state = evaluate(CAP_RULE, p, state, {"n": row["n"], "a": row["a"]})
            spec.append(out["take"])
        assert shipped == spec != [row["take"] for row in rows], m["name"]


# -- R2 in paced mode ----------------------------------------------------------------------


def test_r2_reaches_paced_mode_and_refutes_its_planted_twins(
    proved: dict[str, dict[str, Any]],
) -> None:
    r = proved["R2"]
    assert r["status"] == "proved"
    for check in ("decide", "inputs"):
        names = {c["class"] for c in r["coverage"] if c["check"] == check and c["reached"]}
        assert {"paced mode on", "paced mode off"} <= names, check
        if check == "decide":
            assert {"surge cap on", "surge cap off"} <= names
    paced = [m for m in r["mutants"] if m["name"].startswith(("paced_", "surge_"))]
    assert len(paced) == 5 and all(m["status"] == "refuted" for m in paced)
    assert all(m["params"]["pc"] for m in paced)
    surged = [m for m in paced if m["name"].startswith("surge_")]
    assert len(surged) == 2 and all(m["params"]["sg"] for m in surged)


def _cap_disagrees(cls: type, v: dict[str, Any]) -> bool:
    _, dec, nxt = dp_gate._run(cls, v)
    state, obs = ({k: v[k] for k in keys} for keys in (dp_gate.STATE, dp_gate.OBS))
    _, out, s2 = evaluate(DP, dp_gate.spec_params(v), state, obs)
    spec = (out["fire"], out["reason"], out["cap"], (s2["h"], s2["q"], s2["g"]))
    return (dec.fire, dec.reason.name, dec.cap or 0, tuple(nxt)) != spec


def test_r2_refutes_a_gate_wrong_only_in_its_cap() -> None:
    """A twin that differs from the spec in Decision.cap alone: R2's step compares it."""
    (r2,) = [o for o in REFINEMENT_OBLIGATIONS if o.id == "R2"]
    result = dataclasses.replace(r2, mutants=dp_gate.R2_CAP_MUTANTS).prove()
    assert result.status == "proved"
    for res, mutant in zip(result.mutants, dp_gate.R2_CAP_MUTANTS, strict=True):
        assert res.status == "refuted" and res.trace is not None, (res.name, res.reason)
        (row,) = res.trace.rows
        assert "cap=" in row["code"] and row["code"] != row["spec"]
        v = {**res.trace.params, **{k: row[k] for k in (*dp_gate.STATE, *dp_gate.OBS)}}
        assert _cap_disagrees(mutant.build, v)
        assert not _cap_disagrees(AlignedGate, v)


# -- the aligned (data-parallel) gate, paced mode and its cap: `conform --prove --aligned` --


class _UncappedPaced(AlignedGate):
    """Paced mode fires PACED, but without its cap."""

    __slots__ = ()

    def decide(self, reduced: ReducedObservation, tick: int) -> Decision:
        d = super().decide(reduced, tick)
        return dataclasses.replace(d, cap=None) if d.reason is Reason.PACED else d


def _ignores_pace(config: AlignedGateConfig, world: int) -> AlignedGate:
    """Paced mode off whatever the config says: it holds where paced mode fires."""
    return AlignedGate(dataclasses.replace(config, pace_tokens=None, surge_tokens=None), world)


def _ignores_surge(config: AlignedGateConfig, world: int) -> AlignedGate:
    """The surge cap off whatever the config says: a filled rank's tick keeps the pace cap."""
    return AlignedGate(dataclasses.replace(config, surge_tokens=None), world)


_ALIGNED_REPORTS: dict[object, AlignedProofReport] = {}


def _aligned_report(factory: Any) -> AlignedProofReport:
    if factory not in _ALIGNED_REPORTS:
        _ALIGNED_REPORTS[factory] = prove_aligned_conforms(factory, max_iterations=2000)
    return _ALIGNED_REPORTS[factory]


@pytest.mark.parametrize(
    ("factory", "refuted"),
    [
        (AlignedGate, set()),
        (_UncappedPaced, {"agreement", "D10"}),
        (_ignores_pace, {"agreement", "D9"}),
        (_ignores_surge, {"agreement", "D10"}),
    ],
    ids=["shipped", "uncapped", "ignores_pace", "ignores_surge"],
)
def test_aligned_kit_judges_the_paced_mode_and_its_cap(factory: Any, refuted: set[str]) -> None:
    report = _aligned_report(factory)
    got = {r.prop.id: r.status for r in report.results}
    assert got == {pid: "refuted" if pid in refuted else "proved" for pid in ALIGNED_IDS}, got
    for pid in refuted:
        run = report[pid].run
        assert run is not None and run["pc"] is True, run  # found in paced mode
        assert "replayed on the gate and the spec" in report[pid].detail
    assert report.proved == (not refuted)
    assert f"{'proved' if not refuted else 'NOT proved'} (runs of up to 1 ticks)" in report.format()


def test_aligned_kit_refutation_shows_the_missing_cap() -> None:
    r = _aligned_report(_UncappedPaced)["D10"]
    assert "FIRE PACED cap=None" in r.detail and "pace_tokens=" in r.detail, r.detail
    r = _aligned_report(_ignores_surge)["D10"]
    assert r.run is not None and r.run["sg"] is True and r.run["Cs"] > r.run["Cp"], r.run
    assert "surge_tokens=" in r.detail and "filled ranks Fl=" in r.detail, r.detail


def test_cli_prove_aligned_needs_a_target(capsys: pytest.CaptureFixture[str]) -> None:
    """(Without --prove, --aligned samples: tests/test_conformance_aligned.py.)"""
    assert cli.main(["conform", "--prove", "--aligned"]) == 2
    assert "--aligned needs a target" in capsys.readouterr().err
    assert cli.main(["conform", "--prove", "--aligned", "--policies", "densegate"]) == 2
