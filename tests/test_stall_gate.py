"""The one-rank STALL valve: impl against the stall machine pass by pass, injected bugs
caught, configuration passed through, and the proofs V1-V4 with their refuted mutants."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

import densegate.impl.gate as gate_module
from densegate.impl import GateConfig, GateInput, PrefillGate, Reason
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.sched.config import SchedulerConfig
from densegate.proofs.stall_gate_obligations import STALL_GATE_MUTANTS
from densegate.spec.machine import evaluate
from tests.support.gate_lockstep import StallGateLockstep
from tests.support.mutation import assert_lockstep_catches, mutant_module, text_mutant
from tests.support.profiles import examples
from tests.support.prove_run import prove_run

MIN_PASSES = 3_000
RUNS = settings(max_examples=examples(ci=30, nightly=1_000), stateful_step_count=20)
"""Fewer runs than GateLockstep's: the valve-off rules are that suite's; this one adds S."""


def test_stall_gate_agrees_with_spec_every_pass() -> None:
    StallGateLockstep.passes = 0
    run_state_machine_as_test(StallGateLockstep, settings=RUNS)
    print(f"{StallGateLockstep.passes} lockstep passes")
    assert StallGateLockstep.passes >= MIN_PASSES, StallGateLockstep.passes


# decide_counts compares (negate index): w > last 0, w == 0 1, d == 0 2, w >= dense 3,
# quiet >= stall 4, h + 1 >= budget 5; (shift index, > and >= only): w > last 0, quiet >= stall 2.
VALVE = "decide_counts"
MUTANTS = [
    ("negate", 0),  # growth read as "w <= last"
    ("shift", 0),  # an equal fill counts as growth: a flat queue never stalls
    ("shift", 2),  # quiet > stall: one pass late
    ("drop_assign:self._quiet", 0),  # growth does not restart the quiet count
    ("drop_assign:self._last", 0),  # the previous fill is never recorded
]


@pytest.mark.parametrize(("kind", "index"), MUTANTS, ids=[f"{k}{i}" for k, i in MUTANTS])
def test_lockstep_catches_injected_valve_bug(kind: str, index: int) -> None:
    mod = mutant_module(gate_module, VALVE, kind, index)
    assert_lockstep_catches(StallGateLockstep, mod, RUNS, raises=(AssertionError, Flaky))


def test_lockstep_catches_a_valve_that_is_never_consulted() -> None:
    mod = text_mutant(gate_module, "valve_ignored", "if self._stall:", "if False:")
    assert_lockstep_catches(StallGateLockstep, mod, RUNS, raises=(AssertionError, Flaky))


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_stall_passes_is_named(bad: object) -> None:
    for owner, make in (
        ("GateConfig", lambda: GateConfig(8, stall_passes=bad)),  # type: ignore[arg-type]
        ("SchedulerConfig", lambda: SchedulerConfig(stall_passes=bad)),  # type: ignore[arg-type]
        ("EngineConfig", lambda: EngineConfig(stall_passes=bad)),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError, match=rf"{owner}\.stall_passes.*{bad!r}"):
            make()


def test_stall_passes_reaches_the_engine_gate_and_defaults_off() -> None:
    assert Engine(EngineConfig()).scheduler.gate.config.stall_passes == 0  # type: ignore[attr-defined]
    cfg = EngineConfig(stall_passes=3)
    assert cfg.gate_config().stall_passes == 3
    assert Engine(cfg).scheduler.gate.config.stall_passes == 3  # type: ignore[attr-defined]


def test_a_flat_thin_queue_fires_after_s_quiet_passes_not_k() -> None:
    gate = PrefillGate(GateConfig(dense_tokens=100, max_hold_passes=30, stall_passes=3))
    reasons = [gate.decide(GateInput(20, 4)).reason for _ in range(5)]
    # pass 1: the fill grew from 0 (HOLD); passes 2-4 quiet 1, 2, 3: STALL at 3, and
    # again at 4 (a gate asked again with the same queue: nothing came to grow it).
    assert reasons == [Reason.HOLD, Reason.HOLD, Reason.HOLD, Reason.STALL, Reason.STALL]
    gate.reset()
    assert (gate.hold_passes, gate.stall_memory) == (0, (0, 0))
    off = PrefillGate(GateConfig(dense_tokens=100, max_hold_passes=30))
    assert {off.decide(GateInput(20, 4)).reason for _ in range(29)} == {Reason.HOLD}
    assert off.stall_memory == (0, 0)  # the valve off keeps no memory


def test_refuting_traces_are_runs_of_the_mutant() -> None:
    """Replayed on the mutant from the initial state, each V2 trace (from the session's
    ``densegate prove --json``) repeats its rows."""
    mutants = prove_run().by_id["V2"]["mutants"]
    assert mutants
    for m in mutants:
        machine = STALL_GATE_MUTANTS[m["name"]].machine
        state = {"h": 0, "q": 0, "n": 0}
        for row in m["trace"]:
            assert {k: row[k] for k in state} == state, (m["name"], row)
            try:
                _, out, state = evaluate(
                    machine, m["params"], state, {"w": row["w"], "d": row["d"]}
                )
            except ValueError:  # no command or several: the mutant has no single answer
                break
            if row.get("reason") is not None:
                assert out["reason"] == row["reason"], (m["name"], row)


def test_bench_valve_column_alone_has_the_valve() -> None:
    from densegate.lab.bench import BENCH_POLICIES, WORKLOADS, bench_config, run_policy

    base = dataclasses.replace(bench_config(), stall_passes=2)
    cfgs = {name: p.config(base) for name, p in BENCH_POLICIES.items()}
    assert {n: c.stall_passes for n, c in cfgs.items() if c.stall_passes} == {"densegate-stall": 2}
    trace = WORKLOADS["bursty"].trace(0, 60)
    on = run_policy(trace, BENCH_POLICIES["densegate-stall"], base)
    off = run_policy(trace, BENCH_POLICIES["densegate"], base)
    assert on.summary["reasons"].get("STALL", 0) > 0
    assert "STALL" not in off.summary["reasons"]
    # every under-full pass beside decodes is one of the valves' fires
    assert set(on.figures["underfull_interrupting_by_reason"]) <= {"BUDGET", "NO_DECODE", "STALL"}
    assert on.figures["output_tokens"] == off.figures["output_tokens"]


def test_cli_stall_passes(capsys: pytest.CaptureFixture[str]) -> None:
    from densegate.cli.main import main

    argv = ["run", "--gen", "30", "--runner", "null", "--json", "--stall-passes", "3"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stall_passes"] == 3
    assert main(["run", "--gen", "5", "--runner", "null", "--stall-passes", "-1"]) == 2
    assert "--stall-passes: the value must be >= 0, got -1" in capsys.readouterr().err
    bench = ["bench", "--requests", "5", "--workloads", "steady", "--quiet", "--json"]
    assert main([*bench, "--stall-passes", "-2"]) == 2
    assert "--stall-passes: the value must be >= 0, got -2" in capsys.readouterr().err
    assert main([*bench, "--policies", "densegate-stall", "--stall-passes", "6"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["stall_passes"] == 6
