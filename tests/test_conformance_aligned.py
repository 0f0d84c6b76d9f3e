"""The aligned conformance kit: the shipped ``AlignedGate`` conforms, and each wrong DP gate
of ``tests/support/wrong_dp_gates.py`` is caught by exactly the properties its one wrong
rule breaks, sampled (``check_aligned_gate``, ``densegate conform --aligned``) and, where a
tick shows it, proved (``--prove --aligned``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from densegate.cli import main as cli
from densegate.impl.dp_gate import AlignedGate, AlignedGateConfig
from densegate.impl.gate import Reason
from densegate.proofs.dp_paced_conform import ALIGNED_IDS, prove_aligned_conforms
from densegate.testing import (
    ALIGNED_PROPERTIES,
    AlignedReport,
    assert_aligned_conforms,
    check_aligned_gate,
)
from tests.support import wrong_dp_gates as wrong

IDS = [p.id for p in ALIGNED_PROPERTIES]


def profile() -> dict[str, Any]:
    """The loaded Hypothesis profile's budget, so ``nightly`` deepens these checks too."""
    s = settings()
    return {"max_examples": s.max_examples, "derandomize": s.derandomize}


_REPORTS: dict[object, AlignedReport] = {}


def check(factory: Any) -> AlignedReport:
    """One report per gate for the whole session: several tests read the same one."""
    if factory not in _REPORTS:
        _REPORTS[factory] = check_aligned_gate(factory, **profile())
    return _REPORTS[factory]


# Each wrong gate and exactly what it breaks. A gate that only fires otherwise (a valve
# late, a cap off) breaks no D-property that bounds holding: agreement, and D10 for caps.
WRONG: dict[type[wrong.RuleAlignedGate], set[str]] = {
    wrong.OldFillRule: {"D7", "agreement"},
    wrong.HoldsNoDecodeRank: {"D3", "D7", "agreement"},
    wrong.AlignedWaitsForVacant: {"D8", "agreement"},
    wrong.PacedCapPerWorld: {"D10", "agreement"},
    wrong.PacedUncapped: {"D10", "agreement"},
    wrong.SurgeIgnored: {"D10", "agreement"},
    wrong.SurgeOnOwnRank: {"D10", "agreement"},
    wrong.DenseCappedInPacedMode: {"D10", "agreement"},
    wrong.PacedHolds: {"D3", "D7", "D9", "agreement"},
    wrong.BudgetOffByOne: {"D2", "D4", "D6", "agreement"},
    wrong.DisabledIgnored: {"D5", "D6", "D7", "agreement"},
    wrong.StallLate: {"agreement"},
}


def test_shipped_aligned_gate_conforms() -> None:
    report = assert_aligned_conforms(AlignedGate, **profile())
    assert report.conforms and report.violated == ()
    assert [r.id for r in report.results] == IDS
    assert report.runs >= 50 and report.ticks >= 1000


def test_rule_gate_conforms() -> None:
    """The control: the wrong gates' base is right, so each catch is its one rule's."""
    assert check(wrong.RuleAlignedGate).violated == ()


@pytest.mark.parametrize("gate", list(WRONG), ids=lambda g: g.__name__)
def test_each_wrong_gate_is_caught_by_what_it_breaks(gate: type[wrong.RuleAlignedGate]) -> None:
    report = check(gate)
    assert set(report.violated) == WRONG[gate], report.format()
    for pid in report.violated:
        v = report[pid].violation
        assert v is not None and v.records and v.records[-1].decision is not None, pid


def _last(gate: Any, pid: str) -> Any:
    v = check(gate)[pid].violation
    assert v is not None
    return v, v.records[-1]


def test_the_runs_show_each_wrong_rule() -> None:
    """The tick that breaks each property is the one the wrong rule decides."""
    v, row = _last(wrong.OldFillRule, "D7")  # a filled rank, held
    assert row.decision.reason is Reason.HOLD and row.obs.filled_ranks > 0
    assert v.config.pace_tokens is None
    v, row = _last(wrong.HoldsNoDecodeRank, "D3")  # a rank with no decode, held
    assert row.decision.reason is Reason.HOLD
    assert row.obs.no_decode_ranks > 0 and row.obs.decode_seqs > 0
    v, row = _last(wrong.AlignedWaitsForVacant, "D8")  # held for a vacant rank
    assert row.decision.reason is Reason.HOLD and v.config.align_ticks is not None
    assert row.obs.vacant_ranks > 0
    assert row.obs.waiting_ranks + row.obs.vacant_ranks == v.world_size
    v, row = _last(wrong.PacedCapPerWorld, "D10")  # the cap times the world
    assert row.decision.reason is Reason.PACED and v.world_size >= 2
    assert row.decision.cap == v.config.pace_tokens * v.world_size
    v, row = _last(wrong.PacedHolds, "D9")  # the paced mode, released the plain way
    assert v.config.pace_tokens is not None
    assert row.decision.reason in (Reason.HOLD, Reason.ALIGNED, Reason.STALL, Reason.BUDGET)
    v, row = _last(wrong.DenseCappedInPacedMode, "D10")
    assert row.decision.reason is Reason.DENSE and row.decision.cap is not None


def test_rank_copies_that_share_state_break_rank_agreement() -> None:
    report = check(wrong.SharedCounter)
    assert "D1" in report.violated, report.format()
    v = report["D1"].violation
    assert v is not None and "returned" in v.message and "copy 0" in v.message


def test_a_raising_gate_shows_the_exception_in_its_run() -> None:
    report = check(wrong.RaisesOnWideWorld)
    assert set(report.violated) == {"D4", "agreement"}, report.format()
    v = report["D4"].violation
    assert v is not None and v.world_size > 4
    assert v.records[-1].decision is None and "IndexError" in (v.records[-1].error or "")


def test_report_prints_each_violation_tick_by_tick() -> None:
    report = check(wrong.BudgetOffByOne)
    text = report.format()
    assert "D2  bounded hold, one budget" in text
    assert "VIOLATES D2, D4, D6, agreement" in text
    v = report["D2"].violation
    assert v is not None
    block = text.split("D2 VIOLATED:")[1].split("\n\n")[0].splitlines()
    assert block[1].startswith("  params: B=") and f"N={v.world_size}" in block[1]
    head = ["tick", "t", "W", "F", "D", "P", "C", "Fl", "Nd", "Va", "h", "decision", "reason"]
    assert block[2].split() == [*head, "cap", "h'"]
    assert len(block) == 3 + len(v.records)
    assert block[-1].rstrip().endswith(v.message)
    # K holds in a row: the budget spent one tick late.
    holds = [r.decision.reason for r in v.records if r.decision is not None]
    assert holds[-v.config.max_hold_passes :] == [Reason.HOLD] * v.config.max_hold_passes
    agreement = text.split("agreement VIOLATED:")[1].splitlines()
    assert agreement[2].split()[-1] == "spec"


def test_default_report_is_reproducible() -> None:
    a, b = (check_aligned_gate(wrong.PacedUncapped, max_examples=30) for _ in range(2))
    assert a.seed is None
    assert a.format().splitlines()[1:] == b.format().splitlines()[1:]


def test_factory_must_build_fresh_gates() -> None:
    gate = AlignedGate(AlignedGateConfig(4, 2), 2)
    with pytest.raises(TypeError, match="fresh"):
        check_aligned_gate(lambda config, world: gate, max_examples=5)
    with pytest.raises(TypeError, match="returned None"):
        check_aligned_gate(wrong.returns_none, max_examples=5)


# -- the command ---------------------------------------------------------------------


def _n() -> str:
    return str(min(profile()["max_examples"], 50))


def test_cli_aligned_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = "densegate.impl.dp_gate:AlignedGate"
    assert cli.main(["conform", "--aligned", shipped, "--max-examples", _n()]) == 0
    out = capsys.readouterr().out
    assert f"{shipped}: conforms" in out and "D10  paced cap" in out

    target = "tests.support.wrong_dp_gates:OldFillRule"
    assert cli.main(["conform", "--aligned", target, "--json", "--max-examples", _n()]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == target and doc["aligned"] is True and doc["conforms"] is False
    assert [p["id"] for p in doc["properties"]] == IDS
    assert set(doc["violated"]) == WRONG[wrong.OldFillRule]
    d7 = next(p for p in doc["properties"] if p["id"] == "D7")
    assert d7["status"] == "violated"
    row = d7["counterexample"]["ticks"][-1]
    assert set(row) >= {"tick", "t", "W", "F", "D", "Fl", "Nd", "Va", "h", "fire", "reason"}
    assert row["reason"] == "HOLD" and row["Fl"] > 0
    assert d7["counterexample"]["params"]["N"] >= 2


def test_cli_aligned_seed_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["conform", "--aligned", "tests.support.wrong_dp_gates:PacedUncapped"]
    assert cli.main([*argv, "--seed", "7", "--max-examples", "20", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["seed"] == 7 and doc["derandomize"] is False


BAD_TARGETS = {
    "no colon": (["tests.support.wrong_dp_gates"], "must look like module:factory"),
    "no module": (["no_such_module_33:Gate"], "No module named"),
    "no attribute": (["tests.support.wrong_dp_gates:NoSuchGate"], "NoSuchGate"),
    "not callable": (["tests.support.wrong_dp_gates:Decision.__doc__"], "is not callable"),
    "returns None": (["tests.support.wrong_dp_gates:returns_none"], "returned None"),
    "syntax error": (["broken_dp_33:gate"], "importing broken_dp_33 raised SyntaxError"),
    "no target": ([], "--aligned needs a target"),
    "policies": (["--policies", "densegate"], "--aligned needs a target"),
    "passes": (["densegate.impl.dp_gate:AlignedGate", "--passes", "2"], "--passes needs"),
}


@pytest.mark.parametrize("case", list(BAD_TARGETS))
def test_cli_aligned_bad_target_is_one_line_and_exit_2(
    case: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "broken_dp_33.py").write_text("def gate(:\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))
    extra, needle = BAD_TARGETS[case]
    assert cli.main(["conform", "--aligned", *extra, "--max-examples", "5"]) == 2
    out = capsys.readouterr()
    assert out.out == "", out.out
    assert out.err.count("\n") == 1 and needle in out.err, out.err


# -- proved: what one tick from a fresh gate shows ------------------------------------------

# One tick shows each of these wrong rules; agreement sees all, D9 and D10 the paced ones.
PROVED_WRONG = {
    wrong.OldFillRule: {"agreement"},
    wrong.HoldsNoDecodeRank: {"agreement"},
    wrong.AlignedWaitsForVacant: {"agreement"},
    wrong.PacedCapPerWorld: {"agreement", "D10"},
    wrong.SurgeOnOwnRank: {"agreement", "D10"},
    wrong.PacedHolds: {"agreement", "D9"},
}


@pytest.mark.parametrize("gate", list(PROVED_WRONG), ids=lambda g: g.__name__)
def test_prove_aligned_refutes_what_one_tick_shows(gate: type[wrong.RuleAlignedGate]) -> None:
    report = prove_aligned_conforms(gate, max_iterations=2000)
    got = {r.prop.id: r.status for r in report.results}
    want = {pid: "refuted" if pid in PROVED_WRONG[gate] else "proved" for pid in ALIGNED_IDS}
    assert got == want, report.format()
    for pid in PROVED_WRONG[gate]:
        r = report[pid]
        assert r.run is not None and r.detail.startswith("replayed on the gate and the spec: ")
        # The sampled kit catches the same property.
        assert pid in check(gate).violated


def test_cli_prove_aligned_still_judges(capsys: pytest.CaptureFixture[str]) -> None:
    target = "tests.support.wrong_dp_gates:PacedUncapped"
    assert cli.main(["conform", "--prove", "--aligned", target, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    status = {p["id"]: p["status"] for p in doc["properties"]}
    assert status["agreement"] == status["D10"] == "refuted", status
    assert doc["proved"] is False and doc["ticks"] == 1
