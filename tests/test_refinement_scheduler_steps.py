"""R5: the shipped Scheduler's prefill planning is the spec's, for any number of requests.

Read from the session's ``densegate prove --json``: R5 is proved, parametric (no bound on
the requests), says which block sizes it fixes, reaches every class in every check, and
refutes each planted twin, every one a bug that bites only at 7 or more requests, after 6
calls or at a block size that is not a power of two. Each refuting witness is replayed here
on the twin and on the shipped code: the twin differs from the spec and the shipped code
does not. R5 is also run on a scheduler whose glue and steps are right but whose spec
hook differs, to show the checks can fail.
"""

from __future__ import annotations

from typing import Any

import pytest
import z3

from densegate.impl.sched.scheduler import Scheduler
from densegate.impl.sched.steps import PartialTotals
from densegate.proofs.refinement import scheduler_steps as steps
from densegate.proofs.refinement.scheduler_step_mutants import R5_MUTANTS
from densegate.proofs.refinement.symbolic import explore
from densegate.proofs.registry import level
from tests.support.prove_run import prove_run

_BY_NAME = {m.name: m for m in R5_MUTANTS}


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return prove_run().by_id["R5"]


def test_in_the_scheduler_refinement_level_not_the_default() -> None:
    lv = level("refinement-scheduler")
    assert "R5" in lv.ids and not lv.default and "R5" not in level("refinement").ids


def test_reported_proved_parametric_with_its_fixed_block_sizes(result: dict[str, Any]) -> None:
    assert result["status"] == "proved", result["checks"]
    assert result["about"] == "code" and result["parametric"] is True and result["bound"] is None
    assert result["scope_statement"] == f"all other parameters; {result['scope']}"
    assert "block sizes 1, 2, 3, 4, 5, 16" in result["scope"]
    assert "taken as given: the fold loop" in result["scope"]
    names = [c["name"] for c in result["checks"]]
    assert names == [f"{n}: every path" for n in steps.R5_CHECKS]
    assert all(c["status"] == "unsat" for c in result["checks"])
    cover = {(c["check"], c["class"]) for c in result["coverage"] if c["reached"]}
    assert cover == {(n, k) for n in steps.R5_CHECKS for k in steps.R5_CLASSES}


@pytest.mark.parametrize("name", list(_BY_NAME))
def test_each_twin_refuted_with_a_witness_the_shipped_code_agrees_on(
    result: dict[str, Any], name: str
) -> None:
    (m,) = [x for x in result["mutants"] if x["name"] == name]
    assert m["status"] == "refuted", m
    (row,) = m["trace"]
    via, witness = (
        row["entry"],
        {**m["params"], **{k: v for k, v in row.items() if k in steps.PARAMS}},
    )
    twin = steps.replay(_BY_NAME[name].build, via, witness)
    shipped = steps.replay(Scheduler, via, witness)
    assert twin.disagrees and not shipped.disagrees, (twin, shipped)


def test_twins_bite_only_past_r3s_bound(result: dict[str, Any]) -> None:
    """Where the witness says how: a request index of 6 or more, more than 6 decodes, or a
    block size that is not a power of two."""
    rows = {m["name"]: m for m in result["mutants"]}
    late = {**rows["late_chunk_over_cap"]["params"]}
    assert late["seq"] >= 6
    assert rows["budget_short_when_wide"]["params"]["nd"] > 6
    shift = rows["blocks_by_shift"]["trace"]
    assert "block size 3" in str(shift) or "block size 5" in str(shift)


def test_the_checks_fail_on_a_scheduler_that_admits_one_token_short() -> None:
    class Short(Scheduler):
        def _admit_step(self, acc: Any, r: Any) -> Any:
            acc, n = super()._admit_step(acc, r)
            return acc, max(n - 1, 0)

    out = explore(steps.R5_CHECKS["step 3 (block size 2)"](Short))
    assert out.status == "refuted" and "tokens" in out.detail, out


def test_a_step_that_grows_a_list_in_place_is_caught() -> None:
    class Grow(Scheduler):
        def _admit_step(self, acc: Any, r: Any) -> Any:
            self.running.append(r)
            return super()._admit_step(acc, r)

    out = explore(steps.R5_CHECKS["step 3 (block size 2)"](Grow))
    assert out.status == "refuted" and "unchanged" in out.detail, out


def test_a_fold_that_stops_early_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop clause can fail: totals ``done`` with budget left would end step 2 while a
    request could still get a chunk."""
    monkeypatch.setattr(PartialTotals, "done", property(lambda t: t.budget <= 1))
    out = explore(steps.R5_CHECKS["step 2"](Scheduler))
    assert out.status == "refuted" and "done" in out.detail, out


def test_a_spec_step_that_touches_a_request_not_waiting_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The skipped-requests clause of step 3 can fail on its own: a spec admission step that
    reads every request as waiting agrees with the shipped step on waiting ones, but would
    not be the fold of the queue alone."""
    spec_step = steps.admit_step

    def loose(acc: Any, **kw: Any) -> Any:
        return spec_step(acc, **{**kw, "waiting": z3.BoolVal(True)})

    monkeypatch.setattr(steps, "admit_step", loose)
    out = explore(steps.R5_CHECKS["step 3 (block size 2)"](Scheduler))
    assert out.status == "refuted" and out.detail.endswith("on others skipped"), out
