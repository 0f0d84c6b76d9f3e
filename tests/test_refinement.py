"""The R level: the shipped gates refine the spec machines, and every broken variant is caught.

Each refuted mutant's counterexample is re-run here, concretely, on the mutant
and on the spec's own evaluator, independently of the prover's replay.
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest
import z3

from densegate.impl.dp_gate import AlignedGate
from densegate.impl.gate import Decision, GateConfig, GateInput, PrefillGate
from densegate.proofs.refinement import dp_gate, gate
from densegate.proofs.refinement.symbolic import explore
from densegate.proofs.registry import level
from densegate.spec.dp_gate import DP
from densegate.spec.gate import GATE
from densegate.spec.machine import evaluate
from densegate.spec.properties import statement
from densegate.spec.stall_gate import STALL_GATE
from densegate.testing.strategies import GateRun, Observation
from tests.support.prove_run import prove_run


@pytest.fixture(scope="session")
def reported() -> dict[str, dict[str, Any]]:
    return prove_run().by_id


def test_registered_as_a_level_with_the_table_statements() -> None:
    obs = [*level("refinement").obligations(), *level("refinement-dp").obligations()]
    assert [o.id for o in obs] == ["R1", "R2"]
    assert all(o.statement == statement(o.id) for o in obs)


@pytest.mark.parametrize("rid", ["R1", "R2"])
def test_shipped_code_is_the_subject_and_every_path_the_scope(
    reported: dict[str, dict[str, Any]], rid: str
) -> None:
    r = reported[rid]
    assert r["about"] == "code" and r["scope"].startswith("impl/"), r["scope"]
    assert r["scope_statement"] == f"all parameters; {r['scope']}"
    assert "every path" in r["scope"]


def _r1_disagrees(cls: type, entry: str, row: dict[str, Any], p: dict[str, Any]) -> bool:
    """Run ``cls`` on the witness and the spec machine for its valve setting: GATE with
    the valve off (the counter), the stall gate with it on (counter and stall memory)."""
    S = p["S"]
    g = cls(GateConfig(p["B"], p["K"], p["enabled"], S))
    if (g.hold_passes, *g.stall_memory) != (0, 0, 0):
        return True
    g._h, g._last, g._quiet = row["h"], row["q"], row["n"]
    if entry == "decide":
        dec = g.decide(GateInput(row["w"], row["d"]))
    else:
        dec = g.decide_counts(row["w"], row["d"])
    obs = {"w": row["w"], "d": row["d"]}
    if S == 0:
        gp = {k: p[k] for k in ("B", "K", "enabled")}
        _, out, nxt = evaluate(GATE, gp, {"h": row["h"]}, obs)
        code: tuple[Any, ...] = (dec.fire, dec.reason.name, g.hold_passes)
        return code != (out["fire"], out["reason"], nxt["h"])
    state = {k: row[k] for k in ("h", "q", "n")}
    _, out, nxt = evaluate(STALL_GATE, p, state, obs)
    code = (dec.fire, dec.reason.name, g.hold_passes, *g.stall_memory)
    return code != (out["fire"], out["reason"], nxt["h"], nxt["q"], nxt["n"])


def test_r1_mutants_include_one_of_the_stall_valve_refuted_with_it_on(
    reported: dict[str, dict[str, Any]],
) -> None:
    (res,) = [m for m in reported["R1"]["mutants"] if m["name"] == "stall_one_pass_late"]
    assert res["status"] == "refuted" and res["params"]["S"] > 0, res


def _r2_disagrees(cls: type, row: dict[str, Any], p: dict[str, Any]) -> bool:
    v = {**p, **row}
    fresh, dec, nxt = dp_gate._run(cls, v)
    obs = {k: v[k] for k in dp_gate.OBS}
    _, out, s2 = evaluate(DP, dp_gate.spec_params(v), {k: v[k] for k in ("h", "q", "g")}, obs)
    spec = (out["fire"], out["reason"], (s2["h"], s2["q"], s2["g"]))
    return tuple(fresh) != (0, 0, 0) or (dec.fire, dec.reason.name, tuple(nxt)) != spec


@pytest.mark.parametrize(
    ("rid", "mutants"), [("R1", gate.R1_MUTANTS), ("R2", dp_gate.R2_MUTANTS)], ids=["R1", "R2"]
)
def test_every_mutant_refuted_by_an_input_that_really_disagrees(
    reported: dict[str, dict[str, Any]], rid: str, mutants: tuple[Any, ...]
) -> None:
    r = reported[rid]
    # R2 refutes its cap-only twins too; tests/test_paced_gate.py replays those on the cap
    cap_only = [m.name for m in dp_gate.R2_CAP_MUTANTS] if rid == "R2" else []
    assert [m["name"] for m in r["mutants"]] == [m.name for m in mutants] + cap_only
    for res, mutant in zip(r["mutants"], mutants, strict=False):
        name, params = res["name"], res["params"]
        assert res["status"] == "refuted", (name, res["reason"])
        (row,) = res["trace"]
        assert row["code"] != row["spec"]
        entry = row["entry"]
        inputs = {k: v for k, v in row.items() if k not in ("pass", "entry", "code", "spec")}
        cls = mutant.build
        if rid == "R1":
            assert _r1_disagrees(cls, entry, inputs, params), name
            assert not _r1_disagrees(PrefillGate, entry, inputs, params)
        else:
            assert _r2_disagrees(cls, inputs, params), name
            assert not _r2_disagrees(AlignedGate, inputs, params)


def test_mutant_snippet_must_exist() -> None:
    from densegate.proofs.refinement.mutate import CodeMutant

    bad = CodeMutant("x", "gone", PrefillGate, "decide_counts", "no such code", "")
    with pytest.raises(ValueError, match="occurs 0 times"):
        _ = bad.build


class _Opaque(PrefillGate):
    """Correct, but through a call CrossHair cannot model (a C checksum of the input)."""

    __slots__ = ()

    def decide_counts(self, waiting_tokens: int, decode_seqs: int) -> Decision:
        if zlib.crc32(str(waiting_tokens).encode()) < 0:  # never true: crc32 is unsigned
            self._h = 0
        return super().decide_counts(waiting_tokens, decode_seqs)


def test_a_path_that_cannot_be_explored_is_unknown_never_proved() -> None:
    out = explore(gate.R1_CHECKS["decide_counts"](_Opaque), max_iterations=40)
    assert out.status == "unknown", out
    assert "not every path explored" in out.detail


# -- conform --prove: the kit's properties, symbolically, for anyone's gate ------------------


@pytest.fixture(scope="module")
def proved() -> dict[str, Any]:
    from densegate.lab.baselines.policies import POLICIES
    from densegate.proofs.refinement.conform import prove_conforms

    return {n: prove_conforms(POLICIES[n], passes=1, name=n) for n in POLICIES}


def test_prove_conforms_densegate_proved(proved: dict[str, Any]) -> None:
    r = proved["densegate"]
    assert r.proved, r.format()
    assert "runs of up to 1 passes" in r.format()


@pytest.mark.parametrize(
    ("policy", "refuted"), [("original", {"P2", "P6", "agreement"}), ("legacy", {"agreement"})]
)
def test_prove_conforms_refutes_with_runs_the_sampled_kit_confirms(
    proved: dict[str, Any], policy: str, refuted: set[str]
) -> None:
    from densegate.lab.baselines.policies import POLICIES
    from densegate.testing.driver import Driver

    r = proved[policy]
    assert not r.proved
    assert {x.prop.id for x in r.results if x.status == "refuted"} == refuted, r.format()
    assert all(x.status == "proved" for x in r.results if x.prop.id not in refuted)
    for x in r.results:
        if x.status == "refuted":
            run = x.run
            obs = tuple(Observation(p[0], p[1], *(p[2:] or (p[1], p[0]))) for p in run["passes"])
            cfg = GateConfig(run["B"], run["K"], run["enabled"])
            assert x.prop.id in Driver(POLICIES[policy]).outcome(GateRun(cfg, obs)).first


def test_prove_conforms_is_vacuous_on_a_false_precondition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from densegate.lab.baselines.policies import POLICIES
    from densegate.proofs.refinement import conform

    monkeypatch.setattr(conform, "_pre", lambda v: z3.BoolVal(False))
    r = conform.prove_conforms(POLICIES["densegate"], passes=1, name="densegate")
    assert not r.proved
    assert {x.status for x in r.results} == {"vacuous"}, r.format()
    assert all("precondition has no model" in x.detail for x in r.results)
    assert "P1 VACUOUS: the precondition has no model" in r.format()


def test_prove_conforms_is_vacuous_when_a_configuration_class_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A precondition that admits only enabled gates leaves "gate off" unexplored: every
    property is then vacuous, not proved, naming the class."""
    from densegate.lab.baselines.policies import POLICIES
    from densegate.proofs.refinement import conform

    real = conform._pre
    monkeypatch.setattr(conform, "_pre", lambda v: z3.And(real(v), v["enabled"]))
    r = conform.prove_conforms(POLICIES["densegate"], passes=1, name="densegate")
    assert {x.status for x in r.results} == {"vacuous"}, r.format()
    assert all("gate off" in x.detail for x in r.results), r.format()


def test_conform_prove_cli_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    from densegate.cli import main as cli

    rc = cli.main(["conform", "--prove", "--passes", "1", "--policies", "legacy"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "agreement with spec           refuted" in out
    assert cli.main(["conform", "--prove"]) == 2


def test_report_says_code_for_refinement_and_model_for_the_rest(
    reported: dict[str, dict[str, Any]],
) -> None:
    about = {i: o["about"] for i, o in reported.items()}
    refinement = {
        *level("refinement").ids,
        *level("refinement-dp").ids,
        *level("refinement-scheduler").ids,
    }
    assert {i for i, a in about.items() if a == "code"} == refinement
    assert set(about.values()) == {"code", "model"}


def test_an_unexplored_check_makes_the_obligation_unknown_and_the_run_fail(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from densegate.cli import main as cli
    from densegate.proofs.refinement import obligations as robs
    from densegate.proofs.refinement.symbolic import Outcome

    monkeypatch.setattr(
        robs, "explore", lambda check, **kw: Outcome("unknown", 0.0, 5, None, "cap")
    )
    r = robs.REFINEMENT_OBLIGATIONS[0].prove()
    assert r.status == "unknown" and not r.ok
    assert all(m.status == "unknown" for m in r.mutants)
    assert cli.main(["prove", "--level", "refinement", "--only", "R1", "--jobs", "1"]) == 1
    assert "unknown" in capsys.readouterr().out
