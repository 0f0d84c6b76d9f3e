"""R6: what the shipped Scheduler does to each request is the spec's per-request step, for
every request whatever its place.

Read from the session's ``densegate prove --json``: R6 is proved, parametric, reaches both
classes (one of the first 6 requests, the 7th on) in every check, and refutes each planted
twin, every one a bug that bites only from the 7th request on. Each refuting witness is
replayed on the twin and on the shipped code: the twin differs from the spec, the shipped
code does not. The checks are also run on schedulers that are wrong in ways the twins are
not, to show each kind of entry can fail.
"""

from __future__ import annotations

from typing import Any

import pytest
import z3

from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement import scheduler_requests as requests
from densegate.proofs.refinement.scheduler_request_mutants import R6_MUTANTS
from densegate.proofs.refinement.symbolic import explore
from densegate.proofs.registry import level
from densegate.spec.scheduler_request import WAITING
from tests.support.prove_run import prove_run

_BY_NAME = {m.name: m for m in R6_MUTANTS}


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return prove_run().by_id["R6"]


def test_in_the_scheduler_refinement_level_not_the_default() -> None:
    lv = level("refinement-scheduler")
    assert "R6" in lv.ids and not lv.default


def test_reported_proved_parametric(result: dict[str, Any]) -> None:
    assert result["status"] == "proved", result["checks"]
    assert result["about"] == "code" and result["parametric"] is True and result["bound"] is None
    assert result["scope_statement"] == f"all other parameters; {result['scope']}"
    assert "taken as given: the loops" in result["scope"]
    names = [c["name"] for c in result["checks"]]
    assert names == [f"{n}: every path" for n in requests.R6_CHECKS]
    assert all(c["status"] == "unsat" for c in result["checks"])
    cover = {(c["check"], c["class"]) for c in result["coverage"] if c["reached"]}
    assert cover == {(n, k) for n in requests.R6_CHECKS for k in requests.R6_CLASSES}


@pytest.mark.parametrize("name", list(_BY_NAME))
def test_each_twin_refuted_from_the_7th_request(result: dict[str, Any], name: str) -> None:
    (m,) = [x for x in result["mutants"] if x["name"] == name]
    assert m["status"] == "refuted", m
    (row,) = m["trace"]
    witness = {**m["params"], **{k: v for k, v in row.items() if k in requests.PARAMS}}
    # where it bites: the 7th request on, or (the victim) more than 6 running
    late, early_value = ("n", 6) if name == "victim_sixth_when_wide" else ("seq", 5)
    assert witness[late] > early_value
    twin = requests.replay(_BY_NAME[name].build, row["entry"], witness)
    shipped = requests.replay(Scheduler, row["entry"], witness)
    assert twin.disagrees and not shipped.disagrees, (twin, shipped)
    early = requests.replay(_BY_NAME[name].build, row["entry"], {**witness, late: early_value})
    assert not early.disagrees, early  # so R3's 2 requests could not see it


def test_a_walk_that_decodes_without_a_block_is_caught() -> None:
    """A turn short of a block that decodes anyway, preempting nothing."""

    class NoPreempt(Scheduler):
        def _walk_turn(self, running: Any, i: int, decodes: Any, pre: Any, owed: Any) -> int:
            r = running[i]
            dec, grow = self._turn(r)
            (decodes if dec else owed).append(r)
            if grow and self.blocks.num_free > 0:
                self._take_block(r)
            return i + 1

    out = explore(requests.R6_CHECKS["walk turn (block size 2)"](NoPreempt))
    assert out.status == "refuted" and "preempted" in out.detail, out


def test_a_preemption_that_leaves_the_victim_behind_the_queue_is_caught() -> None:
    class Back(Scheduler):
        def _preempt(self, r: Any) -> None:
            super()._preempt(r)
            self.waiting.rotate(-1)

    out = explore(requests.R6_CHECKS["preempt"](Back))
    assert out.status == "refuted" and "queue" in out.detail, out


def test_an_admission_left_in_the_queue_is_caught() -> None:
    class Stays(Scheduler):
        def _admit_chunk(self, r: Any, n: int) -> Any:
            chunk = super()._admit_chunk(r, n)
            self.waiting.appendleft(r)
            return chunk

    out = explore(requests.R6_CHECKS["admission (block size 3)"](Stays))
    assert out.status == "refuted" and "queue" in out.detail, out


def test_a_turn_that_changes_the_request_is_caught() -> None:
    class Touch(Scheduler):
        def _turn(self, r: Any) -> tuple[bool, bool]:
            got = super()._turn(r)
            r.num_preemptions = r.num_preemptions
            r.head_pass = 7
            return got

    out = explore(requests.R6_CHECKS["turn (block size 4)"](Touch))
    assert out.status == "refuted" and "unchanged" in out.detail, out


def test_a_stop_token_ignored_is_caught() -> None:
    class NoStop(Scheduler):
        def _sample(self, r: Any, tok: int, index: int, now: float) -> bool:
            r.stop_token_ids = frozenset()
            return super()._sample(r, tok, index, now)

    out = explore(requests.R6_CHECKS["sample"](NoStop))
    assert out.status == "refuted" and "finished" in out.detail, out


def test_a_scan_step_that_counts_a_request_not_running_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The walk turn's skipped-requests clause can fail on its own: a decode scan that counts
    a waiting request as owing agrees with the shipped turn on running ones, but would not be
    the scan of the running list alone."""
    from densegate.proofs.refinement import walk_views
    from densegate.spec.decode_scan import DecodeScan
    from densegate.spec.machine import Command

    class Loose(DecodeScan):
        def commands(self, p: Any, s: Any, o: Any) -> Any:
            (cmd,) = super().commands(p, s, o)
            nxt = dict(cmd.next, owing=cmd.next["owing"] + z3.If(o["st"] == WAITING, 1, 0))
            return [Command(cmd.name, cmd.guard, cmd.out, nxt)]

    monkeypatch.setattr(walk_views, "DecodeScan", Loose)
    out = explore(requests.R6_CHECKS["walk turn (block size 2)"](Scheduler))
    assert out.status == "refuted" and out.detail.endswith("on others skipped"), out
