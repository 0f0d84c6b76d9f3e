"""The conformance kit: densegate's gate conforms, and each broken gate is caught
by exactly the properties its one wrong rule breaks."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, ClassVar

import pytest
from hypothesis import settings

from densegate.cli import main as cli
from densegate.impl.gate import Decision, GateConfig, GateInput, PrefillGate, Reason
from densegate.lab.baselines.policies import LegacyPolicy, OriginalPolicy, RawCounts
from densegate.testing import (
    PROPERTIES,
    ConformanceReport,
    assert_conforms,
    check_gate,
)

ALL = {p.id for p in PROPERTIES}


def profile() -> dict[str, Any]:
    """The loaded Hypothesis profile's budget, so ``nightly`` deepens these checks too."""
    s = settings()
    return {"max_examples": s.max_examples, "derandomize": s.derandomize}


_REPORTS: dict[object, ConformanceReport] = {}


def check(factory: Any) -> ConformanceReport:
    """One report per gate for the whole session: several tests read the same one."""
    if factory not in _REPORTS:
        _REPORTS[factory] = check_gate(factory, **profile())
    return _REPORTS[factory]


# -- a gate written from the rules, and single-rule mutants of it -------------------

_FIRE: dict[Reason, Decision] = {r: Decision(True, r) for r in Reason if r is not Reason.HOLD}


class RuleGate:
    """Someone's own gate, written independently of ``PrefillGate``; one hook per rule."""

    def __init__(self, config: GateConfig) -> None:
        self.B, self.K, self.enabled = config.dense_tokens, config.max_hold_passes, config.enabled
        self.h = 0

    @property
    def hold_passes(self) -> int:
        return self.h

    def decide(self, inp: GateInput) -> Decision:
        return self.decide_raw(inp, RawCounts.honest(inp))

    def decide_raw(self, inp: GateInput, raw: RawCounts) -> Decision:
        if inp.waiting_tokens == 0:
            self.on_empty()
            return _FIRE[Reason.EMPTY]
        if not self.enabled:
            return self.fire(Reason.DISABLED)
        if self.no_decode(inp, raw):
            return self.fire(Reason.NO_DECODE)
        if self.dense(inp, raw):
            self.on_dense()
            return _FIRE[Reason.DENSE]
        if self.spent():
            return self.fire(Reason.BUDGET)
        self.on_hold()
        return Decision(False, Reason.HOLD)

    def fire(self, reason: Reason) -> Decision:
        self.h = 0
        return _FIRE[reason]

    def on_empty(self) -> None:
        self.h = 0

    def no_decode(self, inp: GateInput, raw: RawCounts) -> bool:
        return inp.decode_seqs == 0

    def dense(self, inp: GateInput, raw: RawCounts) -> bool:
        return inp.waiting_tokens >= self.B

    def on_dense(self) -> None:
        self.h = 0

    def spent(self) -> bool:
        return self.h + 1 >= self.K

    def on_hold(self) -> None:
        self.h += 1


class BudgetOffByOne(RuleGate):
    def spent(self) -> bool:
        return self.h >= self.K


class TailEscapeOnRunningEmpty(RuleGate):
    def no_decode(self, inp: GateInput, raw: RawCounts) -> bool:
        return raw.running_seqs == 0


class CountsWhileEmpty(RuleGate):
    def on_empty(self) -> None:
        self.h += 1


class DenseOnUncappedTokens(RuleGate):
    def dense(self, inp: GateInput, raw: RawCounts) -> bool:
        return raw.queued_tokens >= self.B


class NoResetAfterDense(RuleGate):
    def on_dense(self) -> None:
        pass


class DenseStrict(RuleGate):
    def dense(self, inp: GateInput, raw: RawCounts) -> bool:
        return inp.waiting_tokens > self.B


class DisabledIgnored(RuleGate):
    def __init__(self, config: GateConfig) -> None:
        super().__init__(config)
        self.enabled = True


class HoldNotCounted(RuleGate):
    def on_hold(self) -> None:
        pass


# Each mutant and exactly what it breaks. Firing too early never breaks P1-P7
# (they bound holding, none demands it), so a gate that only fires more is
# caught by agreement alone, like legacy.
MUTANTS: dict[type[RuleGate], set[str]] = {
    BudgetOffByOne: {"P1", "P3", "agreement"},
    TailEscapeOnRunningEmpty: {"P2", "P6", "agreement"},
    CountsWhileEmpty: {"P1", "P3", "agreement"},
    DenseOnUncappedTokens: {"agreement"},
    NoResetAfterDense: {"P3", "agreement"},
    DenseStrict: {"P4", "P6", "agreement"},
    DisabledIgnored: {"P5", "P6", "agreement"},
    HoldNotCounted: {"P3", "P7", "agreement"},
}


def test_densegate_conforms() -> None:
    report = assert_conforms(PrefillGate, **profile())
    assert report.conforms and report.violated == ()
    assert report.runs >= 50 and report.passes >= 1000


def test_rule_gate_conforms() -> None:
    """The control: the mutants' base is right, so each catch is its one rule's."""
    assert check(RuleGate).violated == ()


@pytest.mark.parametrize("mutant", list(MUTANTS), ids=lambda m: m.__name__)
def test_single_rule_mutant_is_caught(mutant: type[RuleGate]) -> None:
    report = check(mutant)
    assert set(report.violated) == MUTANTS[mutant], report.format()
    for pid in report.violated:
        v = report[pid].violation
        assert v is not None and v.records, pid


# -- the shipped policies ------------------------------------------------------------


class PlainOriginal:
    """``OriginalPolicy`` through the plain protocol only: raw lists taken as honest."""

    def __init__(self, config: GateConfig) -> None:
        self.inner = OriginalPolicy(config)

    @property
    def hold_passes(self) -> int:
        return self.inner.hold_passes

    def decide(self, inp: GateInput) -> Decision:
        return self.inner.decide(inp)


class OriginalFlaw1Fixed(OriginalPolicy):
    def decide_raw(self, inp: GateInput, raw: RawCounts) -> Decision:
        if inp.waiting_tokens == 0:
            self.reset()
            return _FIRE[Reason.EMPTY]
        return super().decide_raw(inp, raw)


class OriginalFlaws12Fixed(OriginalFlaw1Fixed):
    def decide_raw(self, inp: GateInput, raw: RawCounts) -> Decision:
        return super().decide_raw(inp, RawCounts(inp.decode_seqs, raw.queued_tokens))


class OriginalAllFixed(OriginalFlaws12Fixed):
    def decide_raw(self, inp: GateInput, raw: RawCounts) -> Decision:
        return super().decide_raw(inp, RawCounts.honest(inp))


def test_legacy_breaks_only_agreement() -> None:
    report = check(LegacyPolicy)
    assert report.violated == ("agreement",)
    v = report["agreement"].violation
    assert v is not None and v.records[-1].decision == Decision(True, Reason.DISABLED)


@pytest.mark.parametrize(
    ("factory", "violated"),
    [
        (OriginalPolicy, {"P2", "P6", "agreement"}),  # flaws 1, 2 and 3
        (PlainOriginal, {"P6", "agreement"}),  # flaw 1 only: holds with nothing waiting
        (OriginalFlaw1Fixed, {"P2", "P6", "agreement"}),  # flaw 2: holds with nothing decoding
        (OriginalFlaws12Fixed, {"agreement"}),  # flaw 3: DENSE fires under-full
        (OriginalAllFixed, set()),  # the original gate, fixed, is densegate's machine
    ],
    ids=["original", "flaw1", "flaw2", "flaw3", "fixed"],
)
def test_original_breaks_what_its_flaws_break(factory: Any, violated: set[str]) -> None:
    assert set(check(factory).violated) == violated


def test_original_flaw_runs_show_the_flaw() -> None:
    report = check(OriginalPolicy)
    p2 = report["P2"].violation
    assert p2 is not None and p2.raw
    last = p2.records[-1].obs
    assert last.waiting_tokens > 0 and last.decode_seqs == 0 and last.running_seqs > 0
    flaw3 = check(OriginalFlaws12Fixed)["agreement"].violation
    assert flaw3 is not None
    row = flaw3.records[-1]
    assert row.decision == Decision(True, Reason.DENSE)
    assert row.obs.waiting_tokens < flaw3.config.dense_tokens <= row.obs.queued_tokens


# -- P7 and the report ---------------------------------------------------------------


class SharedCounter(RuleGate):
    """Keeps its counter on the class: two gates interfere, so decisions depend on history
    the gate was not given."""

    shared: ClassVar[list[int]] = [0]

    @property
    def hold_passes(self) -> int:
        return self.shared[0] % self.K

    def on_hold(self) -> None:
        self.shared[0] += 1
        self.h = self.shared[0] % self.K


class RaisesOnBigQueue(RuleGate):
    def decide_raw(self, inp: GateInput, raw: RawCounts) -> Decision:
        if inp.waiting_tokens > 4000:
            raise OverflowError("queue too long")
        return super().decide_raw(inp, raw)


class ReturnsBool(PrefillGate):
    def decide(self, inp: GateInput) -> Decision:
        return super().decide(inp).fire  # type: ignore[return-value]


@pytest.mark.parametrize("gate", [SharedCounter, RaisesOnBigQueue, ReturnsBool])
def test_p7_catches_nondeterministic_partial_and_malformed_gates(gate: Any) -> None:
    report = check(gate)
    assert "P7" in report.violated, report.format()


def test_a_raising_gate_shows_the_exception_in_its_run() -> None:
    v = check(RaisesOnBigQueue)["P7"].violation
    assert v is not None
    assert v.records[-1].decision is None and "OverflowError" in (v.records[-1].error or "")
    assert v.records[-1].obs.waiting_tokens > 4000


def test_report_prints_each_violation_pass_by_pass() -> None:
    report = check(NoResetAfterDense)
    text = report.format()
    assert "P3  bounded hold" in text and "VIOLATES P3, agreement" in text
    v = report["P3"].violation
    assert v is not None
    block = text.split("P3 VIOLATED:")[1].split("\n\n")[0].splitlines()
    assert block[1].startswith("  params: B=")
    assert block[2].split() == [
        "pass",
        "w",
        "d",
        "running",
        "queued",
        "h",
        "decision",
        "reason",
        "h'",
    ]
    assert len(block) == 3 + len(v.records)
    assert block[-1].rstrip().endswith(v.message)
    # A dense fire kept the counter, so a later BUDGET came early.
    reasons = [r.decision.reason for r in v.records if r.decision is not None]
    assert Reason.DENSE in reasons and reasons[-1] is Reason.BUDGET


def test_assert_conforms_raises_with_the_report() -> None:
    with pytest.raises(AssertionError, match=r"(?s)VIOLATES P1, P3, agreement.*P1 VIOLATED"):
        assert_conforms(BudgetOffByOne, **profile())


def test_default_report_is_reproducible() -> None:
    a, b = (check_gate(DenseStrict, max_examples=30) for _ in range(2))
    assert a.seed is None
    assert a.format().splitlines()[1:] == b.format().splitlines()[1:]


def test_factory_must_build_fresh_gates() -> None:
    gate = PrefillGate(GateConfig(4, 2))
    with pytest.raises(TypeError, match="fresh"):
        check_gate(lambda config: gate, max_examples=5)


# -- the command ---------------------------------------------------------------------


def test_cli_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    n = str(min(profile()["max_examples"], 50))
    assert cli.main(["conform", "densegate.impl.gate:PrefillGate", "--max-examples", n]) == 0
    assert "conforms" in capsys.readouterr().out

    target = "tests.test_conformance:BudgetOffByOne"
    assert cli.main(["conform", target, "--json", "--max-examples", n]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == target and doc["conforms"] is False
    assert [p["id"] for p in doc["properties"]] == [p.id for p in PROPERTIES]
    p1 = next(p for p in doc["properties"] if p["id"] == "P1")
    assert p1["status"] == "violated"
    row = p1["counterexample"]["passes"][-1]
    assert set(row) >= {"pass", "w", "d", "h", "fire", "reason", "h_next", "spec", "error"}
    assert row["h_next"] >= p1["counterexample"]["params"]["K"]

    assert cli.main(["conform", "no_such_module:Gate"]) == 2
    assert cli.main(["conform", "--policies", "bogus"]) == 2
    assert cli.main(["conform", "--max-examples", "0"]) == 2


def test_cli_policy_table(capsys: pytest.CaptureFixture[str]) -> None:
    n = str(min(profile()["max_examples"], 50))
    assert (
        cli.main(["conform", "--policies", "legacy,original,densegate", "--max-examples", n]) == 1
    )
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("property"))
    assert header.split() == ["property", "legacy", "original", "densegate"]
    rows = {line[:30].strip(): line[30:].split() for line in out.splitlines()[3:11]}
    assert rows["P2  no idle pass"] == ["held", "VIOLATED", "held"]
    assert rows["P6  hold justification"] == ["held", "VIOLATED", "held"]
    assert rows["agreement with spec"] == ["VIOLATED", "VIOLATED", "held"]
    assert sum(cells.count("VIOLATED") for cells in rows.values()) == 4
    assert cli.main(["conform", "--policies", "densegate", "--json", "--max-examples", n]) == 0
    assert json.loads(capsys.readouterr().out)["conforms"] is True


def test_command_module_loads_neither_hypothesis_nor_z3() -> None:
    """``densegate --help`` imports every subcommand module; this one must stay light."""
    code = (
        "import sys, densegate.cli.conform\n"
        "bad = [m for m in ('hypothesis', 'z3') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
