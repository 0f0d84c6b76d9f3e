"""R4: the shipped Scheduler runs as the spec scheduler on fixed traces at 8 and 12 requests.

Read from the session's ``densegate prove --json``. Each refuted mutant's trace is re-run
here independently: the mutant and the shipped Scheduler fed the trace's arrivals and
aborts (``tests.support.scheduler_lockstep.replay``), judged pass by pass by the spec's own
evaluator (``densegate.spec.machine.evaluate``, not R4's compiled one). R4 is also run on
a broken target and with a class no trace reaches, to show it can fail.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from densegate.proofs.refinement.scheduler_traces import BLOCK_SIZES, REQUESTS, SLOTS
from densegate.proofs.refinement.scheduler_wide import (
    R4_MUTANTS,
    STATEMENT,
    WIDE_OBLIGATIONS,
    scheduler_of,
)
from densegate.proofs.registry import level
from densegate.spec.machine import evaluate
from densegate.spec.scheduler import RUNNING, WAITING, SchedulerMachine
from tests.support.prove_run import prove_run
from tests.support.scheduler_lockstep import replay

(R4,) = WIDE_OBLIGATIONS
CLAIMS = ("all parameters", "any number", "for every", "every input", "all inputs")
"""What a bounded check on fixed traces must never say of itself."""


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    """R4 as ``densegate prove --json`` reported it."""
    return prove_run().by_id["R4"]


def test_registered_beside_r3_as_a_bounded_check_on_named_traces() -> None:
    assert level("refinement-scheduler").ids == ("R3", "R4", "R5", "R6")
    assert R4.statement == STATEMENT and "fixed traces" in STATEMENT
    assert R4.bound.startswith("32 traces (4 per size: 2 enumerated bursts, 2 seeded)")
    assert "8 and 12 requests, block sizes 1, 3, 5, 16" in R4.bound
    for text in (R4.statement, R4.scope_statement):
        assert not [c for c in CLAIMS if c in text], text
    assert R4.scope_statement.startswith(f"bounded: {R4.bound}; impl/sched/scheduler.py")


def test_report_says_bounded_code_every_size_checked_every_class_reached(
    result: dict[str, Any],
) -> None:
    assert result["status"] == "proved", result["checks"]
    assert result["about"] == "code" and result["parametric"] is False
    assert result["bound"] == R4.bound and result["scope_statement"] == R4.scope_statement
    sizes = [f"{n} requests, block size {bs}" for n in REQUESTS for bs in BLOCK_SIZES]
    assert [c["name"] for c in result["checks"]] == [f"{s}: every trace" for s in sizes]
    assert all(c["status"] == "unsat" and "every pass agrees" in c["reason"]
               for c in result["checks"]), result["checks"]  # fmt: skip
    cover = {
        (c["check"], c["class"]) for c in result["coverage"] if c["satisfiable"] and c["reached"]
    }
    assert cover == {(s, name) for s in sizes for name in R4.classes}


def _spec_rows(block_size: int, params: dict[str, Any], rows: list[dict[str, Any]]) -> list[Any]:
    """The spec's every pass on the trace's arrivals and aborts, from its initial state."""
    spec = SchedulerMachine(SLOTS, block_size)
    state: dict[str, Any] = {"h": 0, "free": params["N"]}
    state.update({f"{k}{i}": 0 for k in ("st", "c", "g", "b") for i in range(SLOTS)})
    out = []
    for row in rows:
        obs = {
            f"{k}{i}": bool(row.get(f"{k}{i}")) for k in ("arrive", "abort") for i in range(SLOTS)
        }
        _, o, nxt = evaluate(spec, params, state, obs)
        out.append({**o, **{f"next_{k}": v for k, v in nxt.items()}})
        state = nxt
    return out


def _agrees(code: dict[str, Any], spec: dict[str, Any]) -> bool:
    return all(spec[k] == v for k, v in code.items() if k != "order")


def _in_order(code: dict[str, Any]) -> bool:
    """Running requests, then waiting ones, each in slot order (all the spec can mean)."""
    running = [i for i in range(SLOTS) if code[f"next_st{i}"] == RUNNING]
    waiting = [i for i in range(SLOTS) if code[f"next_st{i}"] == WAITING]
    return bool(code["order"] == (running, waiting))


@pytest.mark.parametrize("mutant", R4_MUTANTS, ids=[m.name for m in R4_MUTANTS])
def test_every_mutant_refuted_by_a_trace_the_specs_evaluator_confirms(
    result: dict[str, Any], mutant: Any
) -> None:
    (res,) = [m for m in result["mutants"] if m["name"] == mutant.name]
    assert res["status"] == "refuted", res["reason"]
    shown, rows = res["params"], res["trace"]
    assert rows[-1]["code"] != rows[-1]["spec"] and len(res["display"]) == len(rows)
    n, bs = shown["requests"], shown["block_size"]
    assert n in REQUESTS and bs in BLOCK_SIZES
    params = {
        k: v for k, v in shown.items() if k not in ("trace", "requests", "block_size", "P", "M")
    }
    for i in range(SLOTS):
        params[f"P{i}"], params[f"M{i}"] = (
            (int(shown["P"][i]), int(shown["M"][i])) if i < n else (1, 1)
        )
    spec = _spec_rows(bs, params, rows)
    shipped = replay(params, bs, rows, order=True)
    broken = replay(params, bs, rows, scheduler_of(mutant), order=True)
    assert all(_agrees(c, s) and _in_order(c) for c, s in zip(shipped, spec, strict=True))
    *before, last = list(zip(broken, spec, strict=True))
    assert all(_agrees(c, s) and _in_order(c) for c, s in before)
    assert not (_agrees(*last) and _in_order(last[0])), (mutant.name, last)


def test_r4_fails_with_a_trace_when_the_scheduler_is_broken() -> None:
    broken = dataclasses.replace(R4, target=scheduler_of(R4_MUTANTS[1]), mutants=())
    r = broken.prove()
    assert r.status == "failed" and not r.ok and r.trace is not None
    assert any(c.status == "sat" for c in r.checks)
    assert r.trace.rows[-1]["code"] != r.trace.rows[-1]["spec"]


def test_r4_is_vacuous_when_a_class_it_names_is_never_reached() -> None:
    never = {"nine running at once": (lambda p: p["S"] > 8, lambda row: False)}
    r = dataclasses.replace(R4, classes={**R4.classes, **never}, mutants=()).prove()
    assert r.status == "vacuous" and not r.ok
    assert {c.name for c in r.coverage if not c.ok} == {"nine running at once"}


def test_a_trace_wider_than_the_console_is_printed_whole() -> None:
    """R4's traces (8 and 12 requests a row) are wider than a terminal: every column of
    every row is printed in full, none squeezed to nothing."""
    import io

    from rich.console import Console

    from densegate.proofs.report import _print_wide, render_trace
    from densegate.proofs.results import Trace

    row = {"pass": 0, "arrive": "0,1,2,3,4,5,6,7", "requests": "R1/1b1 " * 12, "code": "x" * 150}
    out = io.StringIO()
    _print_wide(Console(file=out, width=80), render_trace(Trace({"S": 8}, [row], "why")))
    text = out.getvalue()
    assert all(key in text for key in row), text
    assert "0,1,2,3,4,5,6,7" in text and "x" * 150 in text and "R1/1b1 " * 11 in text
