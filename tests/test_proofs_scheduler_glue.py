"""S16's planted twins: glue edits of the per-slot machine that bite only at seven or more requests.

Each twin (``densegate.proofs.scheduler.link.LINK_GLUE_TWINS``) edits one line of the
per-slot machine's own loops (which slots admission visits, how many decodes the pass
counts, which slots the commit reserves for), not a step the folds share. Here: S8
still proves on each at its 3 request slots (the edit hides there), ``densegate prove``
refutes each through S16 with a trace at 8 requests, the trace is a run of the twin,
and replayed on the shipped Scheduler (the trace's gate decisions scripted) it goes as
the unedited spec goes and not as the twin does: each twin is a real bug.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
import z3

from densegate.cli.main import main
from densegate.impl.gate import Decision, GateInput, Reason
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.prover import prove
from densegate.proofs.scheduler.link import LINK_GLUE_TWINS, PassLink, initial, link_obligation
from densegate.proofs.scheduler.per_slot import PER_SLOT_OBLIGATIONS
from densegate.proofs.scheduler.scopes import LINK_SLOTS
from densegate.spec.decode_scan import DecodeScan
from densegate.spec.machine import evaluate
from densegate.spec.scheduler import SchedulerMachine
from tests.support.scheduler_lockstep import replay

TWINS = [t.name for t in LINK_GLUE_TWINS]


@pytest.fixture(scope="module")
def s16() -> dict[str, Any]:
    """``densegate prove --only S16 --json``, as a user runs it."""
    return _prove_s16()


def _prove_s16() -> dict[str, Any]:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["prove", "--only", "S16", "--json", "--jobs", "1"])
    assert rc == 0, buf.getvalue()[-2000:]
    (row,) = json.loads(buf.getvalue())["obligations"]
    return dict(row)


def test_s16_is_proved_bounded_and_says_so(s16: dict[str, Any]) -> None:
    assert s16["status"] == "proved"
    assert s16["parametric"] is False
    assert s16["scope"].startswith(f"{LINK_SLOTS} request slots"), s16["scope"]
    assert f"({LINK_SLOTS} requests, block size 2)" in s16["statement"]
    assert "any number" not in s16["scope"] and "any number" not in s16["statement"]
    assert {m["name"]: m["status"] for m in s16["mutants"]} == dict.fromkeys(TWINS, "refuted")


@pytest.mark.parametrize("name", TWINS)
def test_each_twin_hides_from_s8(name: str) -> None:
    """S8 proves the twin at its 3 request slots: only a check at >= 7 requests sees it."""
    (s8,) = [ob for ob in PER_SLOT_OBLIGATIONS if ob.id == "S8"]
    twin = next(t for t in LINK_GLUE_TWINS if t.name == name)
    machine = twin.build(s8.machine.R, s8.machine.bs)  # type: ignore[attr-defined]
    result = prove(replace(s8, machine=machine, mutants=()), mutants=False)
    assert result.status == "proved", name


@dataclass
class Scripted:
    """A gate that decides as a trace says (the trace's ``fire`` column)."""

    fires: list[bool]
    hold_passes: int = 0

    def decide(self, inp: GateInput) -> Decision:
        fire = self.fires.pop(0)
        return Decision(fire, Reason.DENSE if fire else Reason.HOLD)

    def reset(self) -> None:
        self.hold_passes = 0


@pytest.mark.parametrize("name", TWINS)
def test_each_twin_trace_is_a_real_bug(s16: dict[str, Any], name: str) -> None:
    """The twin's trace is a run of the twin; the shipped Scheduler and the unedited spec
    agree on it pass by pass, and the twin's pass differs from both somewhere."""
    (m,) = [m for m in s16["mutants"] if m["name"] == name]
    params, trace = m["params"], m["trace"]
    twin = next(t for t in LINK_GLUE_TWINS if t.name == name)
    real, bad = PassLink(SchedulerMachine(LINK_SLOTS, 2)), PassLink(twin.build(LINK_SLOTS, 2))
    state = {k: trace[0][k] for k in real.state_sorts}
    fires = [row["fire"] for row in trace]  # the shipped Scheduler, its gate scripted
    shipped = replay(params, 2, trace, make=lambda cfg: Scheduler(cfg, Scripted(fires)))
    wrong: set[str] = set()
    for row, ship in zip(trace, shipped, strict=True):
        obs = {k: row[k] for k in real.obs_sorts}
        _, out, want = evaluate(real, params, state, obs)
        _, bad_out, got = evaluate(bad, params, state, obs)
        assert all(ship[f"next_{k}"] == v for k, v in want.items() if k != "h"), (name, ship)
        wrong |= {k for k in want if got[k] != want[k]}
        wrong |= {k for k in out if bad_out[k] != out[k]}
        plans = [_planned(m, params, state, obs) for m in (real, bad)]
        wrong |= {"the plan"} if plans[0] != plans[1] else set()
        state = want
    assert wrong, name  # a held pass may hide the plan's admissions from the outputs


def _planned(link: PassLink, params: dict[str, Any], state: dict[str, Any],
             obs: dict[str, Any]) -> tuple[object, ...]:  # fmt: skip
    """The pass's plan at concrete values: its planned prefill and whom it admits."""
    p, s, o = link.params(), link.state("s"), link.fresh(link.obs_sorts, "o")
    plan = link.m.plan(p, s, o)
    pairs = [(v[k], z3.BoolVal(x) if isinstance(x, bool) else z3.IntVal(x))
             for v, vals in ((p, params), (s, state), (o, obs)) for k, x in vals.items()
             if k in v]  # fmt: skip
    terms = [plan.planned, *plan.admit]
    return tuple(str(z3.simplify(z3.substitute(x, *pairs))) for x in terms)


def test_initial_reads_an_init_of_equalities_and_refuses_any_other() -> None:
    """The folds' start is read off ``init``; an init that is not ``var == term`` is an error."""
    link = link_obligation(1).machine
    p = link.params()
    start = initial(link, p)
    assert start["free"].eq(p["N"]) and start["st0"].eq(z3.IntVal(0)), start
    scan = DecodeScan(SchedulerMachine(1, 2), lambda P, M, r: z3.BoolVal(True))
    with pytest.raises(ValueError, match="not var == term"):
        initial(scan, scan.params())  # its init says free >= 0: a range, not a value
