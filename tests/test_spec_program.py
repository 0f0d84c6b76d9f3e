"""R4's and the lockstep's spec evaluator (``densegate.proofs.refinement.spec_program``) is the
spec's own: the same ``Program`` nodes as ``densegate.spec.machine`` builds, the same values
as ``Program.run``, and the same step as ``evaluate``, on every machine it is used for."""

from __future__ import annotations

import random
from typing import Any

import pytest
import z3

from densegate.proofs.refinement.spec_program import Stepper, as_python, compiled
from densegate.spec.dp_gate import DP
from densegate.spec.gate import GATE
from densegate.spec.machine import Machine, Program, evaluate
from densegate.spec.scheduler import SchedulerMachine

MACHINES = {
    "scheduler 12 slots, block size 5": SchedulerMachine(12, 5),
    "scheduler 6 slots, block size 1": SchedulerMachine(6, 1),
    "gate": GATE,
    "aligned gate": DP,
}


def _roots(m: Machine) -> tuple[list[z3.ExprRef], list[dict[str, z3.ExprRef]]]:
    p, s, o = m.params("t"), m.state("t"), m.fresh(m.obs_sorts, "t")
    roots: list[z3.ExprRef] = [m.param_ok(p), m.obs_ok(p, s, o)]
    for c in m.commands(p, s, o):
        roots += [c.guard, *c.out.values(), *c.next.values()]
    return roots, [p, s, o]


def _random(group: dict[str, z3.ExprRef], rng: random.Random) -> dict[str, Any]:
    return {k: rng.random() < 0.5 if z3.is_bool(v) else rng.randint(0, 6) for k, v in group.items()}


@pytest.mark.parametrize("name", MACHINES)
def test_compiled_is_the_specs_program_node_for_node(name: str) -> None:
    roots, _ = _roots(MACHINES[name])
    mine, theirs = compiled(roots), Program(roots)
    assert mine.nodes == theirs.nodes and mine.roots == theirs.roots


@pytest.mark.parametrize("name", MACHINES)
def test_as_python_computes_what_program_run_does(name: str) -> None:
    roots, groups = _roots(MACHINES[name])
    program = Program(roots)
    run = as_python(program)
    rng = random.Random(name)
    names = {k: v.decl().name() for g in groups for k, v in g.items()}
    for _ in range(200):
        env = {names[k]: x for g in groups for k, x in _random(g, rng).items()}
        assert run(env) == program.run(env)


@pytest.mark.parametrize("name", MACHINES)
def test_stepper_takes_the_step_evaluate_takes(name: str) -> None:
    m = MACHINES[name]
    stepper = Stepper(m)
    _, (p, s, o) = _roots(m)
    rng = random.Random(name)
    compared = 0
    for _ in range(300):
        params, state, obs = _random(p, rng), _random(s, rng), _random(o, rng)
        try:
            want = evaluate(m, params, state, obs)
        except ValueError as e:  # no command or two: the stepper must say so too
            with pytest.raises(ValueError, match="commands enabled"):
                stepper.step(params, state, obs)
            assert "commands enabled" in str(e)
            continue
        got = stepper.step(params, state, obs)
        assert (got.command, got.out, got.next) == want
        compared += 1
        if compared <= 10:  # the constraints it evaluates beside the step, against z3's
            assert (got.params_ok, got.obs_ok) == _admitted(m, (p, s, o), params, state, obs)
    assert compared > 100


def _admitted(m: Machine, groups: Any, *values: dict[str, Any]) -> tuple[bool, bool]:
    def const(x: Any) -> z3.ExprRef:
        return z3.BoolVal(x) if isinstance(x, bool) else z3.IntVal(x)

    pairs = [(g[k], const(v[k])) for g, v in zip(groups, values, strict=True) for k in g]
    p, s, o = groups
    ok = [z3.simplify(z3.substitute(t, *pairs)) for t in (m.param_ok(p), m.obs_ok(p, s, o))]
    return z3.is_true(ok[0]), z3.is_true(ok[1])
