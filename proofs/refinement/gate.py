"""R1: ``PrefillGate`` (the shipped code) refines the gate machine, the STALL valve off or on.

The abstraction is the gate's counter and stall memory: ``hold_passes`` (the ``_h``
slot) is the spec's ``h``, ``stall_memory`` (``_last``, ``_quiet``) its ``q`` and
``n``. Two checks, one per entry point, each over unbounded ints: from every
configuration (B >= 1, K >= 1, enabled or not, stall_passes S >= 0) and every state
0 <= h < K, q >= 0, n >= 0, a fresh gate starts in the spec's initial state and one
call on any observation (w, d >= 0) returns the decision and reason the spec's
relation gives and leaves its next state. The spec is ``GATE`` when the valve is off
(S = 0: the counter, the memory neither kept nor read, as V3 proves of the stall
machine) and ``STALL_GATE`` when it is on (S > 0: counter and memory). With P1 and
V1 (every reachable h is in range) every run of the code is a run of a proved
machine, so P1-P7 (valve off) and V1-V4 (valve on) hold of the code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import z3

from densegate.impl.gate import GateConfig, GateInput, PrefillGate
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.refinement.symbolic import (
    Classes,
    admit,
    agrees,
    fail,
    guarded,
    holds,
    reached,
    sample,
    term,
)
from densegate.spec import stall_gate
from densegate.spec.gate import GATE, reason
from densegate.spec.machine import Machine, evaluate
from densegate.spec.stall_gate import STALL_GATE

__all__ = ["R1_CHECKS", "R1_CLASSES", "R1_MUTANTS", "R1_PRECONDITION", "Replay", "replay"]

Pre = Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef]


def _pre(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.And(
        v["B"] >= 1, v["K"] >= 1, v["S"] >= 0, v["h"] >= 0, v["h"] < v["K"],
        v["q"] >= 0, v["n"] >= 0, v["w"] >= 0, v["d"] >= 0,
    )  # fmt: skip


R1_PRECONDITION: Pre = _pre
"""What R1's checks admit: configurations, states and observations."""

R1_CLASSES: Classes = {
    "gate on": lambda v: v["enabled"],
    "gate off": lambda v: z3.Not(v["enabled"]),
    "STALL valve off (S = 0)": lambda v: v["S"] == 0,
    "STALL valve on (S > 0)": lambda v: v["S"] > 0,
}
"""The configuration classes R1's scope names; each must be reached by an explored path."""


def _spec(S: int) -> tuple[Machine, Callable[[str], z3.ExprRef], tuple[str, ...]]:
    """The machine the code refines at stall_passes ``S``: its reasons and state names."""
    if S == 0:
        return GATE, reason, ("h",)
    return STALL_GATE, stall_gate.reason, ("h", "q", "n")


def _state(gate: Any) -> tuple[Any, Any, Any]:
    return (gate.hold_passes, *gate.stall_memory)


def _run(cls: type, via: str, v: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """Build the gate, put it in state (h, q, n), make one call: (fresh state, decision,
    next state), states as (h, q, n)."""
    gate = cls(GateConfig(v["B"], v["K"], v["enabled"], v["S"]))
    fresh = _state(gate)
    gate._h, gate._last, gate._quiet = v["h"], v["q"], v["n"]
    if via == "decide_counts":
        decision = gate.decide_counts(v["w"], v["d"])
    else:
        decision = gate.decide(GateInput(v["w"], v["d"]))
    return fresh, decision, _state(gate)


def _check(cls: type, via: str, pre: Pre = _pre) -> Callable[..., None]:
    def check(
        B: int, K: int, enabled: bool, S: int, h: int, q: int, n: int, w: int, d: int
    ) -> None:
        assert admit(pre, B=B, K=K, S=S, h=h, q=q, n=n, w=w, d=d)
        v = {"B": B, "K": K, "enabled": enabled, "S": S, "h": h, "q": q, "n": n, "w": w, "d": d}
        fresh, dec, after = guarded(lambda: _run(cls, via, v), v)
        machine, why, names = _spec(S)
        p = {"B": B, "K": K, "enabled": enabled, **({"S": S} if len(names) > 1 else {})}
        start = dict(zip(names, map(term, fresh), strict=False))
        if not holds(machine.init({k: term(x) for k, x in p.items()}, start)):
            fail(v, "a fresh gate is not in the spec's initial state")
        state = {k: v[k] for k in names}
        nxt = dict(zip(names, after, strict=False))
        if not agrees(machine, why, p, state, {"w": w, "d": d}, dec.fire, dec.reason.name, nxt):
            fail(v, f"{via} differs from the spec")
        reached(v)
        sample(v)  # a state this path reached: mutants are replayed on it first

    return check


R1_CHECKS: dict[str, Callable[[type], Callable[..., None]]] = {
    "decide_counts": lambda cls: _check(cls, "decide_counts"),
    "decide": lambda cls: _check(cls, "decide"),
}
"""Entry point -> check of a PrefillGate-like class (the shipped one or a mutant)."""


@dataclass(frozen=True)
class Replay:
    """A witness run concretely on the code and on the spec's own evaluator."""

    code: str
    spec: str

    @property
    def disagrees(self) -> bool:
        return self.code != self.spec


def _text(fire: object, why: str, nxt: tuple[Any, ...]) -> str:
    names = ("h", "q", "n")[: len(nxt)]
    state = " ".join(f"{k}'={x}" for k, x in zip(names, nxt, strict=True))
    return f"{'FIRE' if fire else 'HOLD'} {why} {state}"


def replay(cls: type, via: str, witness: Mapping[str, Any]) -> Replay:
    """Run ``cls`` and the spec on the witness, outside CrossHair."""
    v = witness
    machine, _, names = _spec(v["S"])
    p = {k: v[k] for k in machine.param_sorts}
    try:
        fresh, dec, after = _run(cls, via, v)
    except Exception as e:
        return Replay(f"raised {type(e).__name__}: {e}", "no error")
    if fresh[: len(names)] != (0,) * len(names):
        return Replay(f"fresh gate {fresh[: len(names)]}", f"fresh gate {(0,) * len(names)}")
    _, out, nxt = evaluate(machine, p, {k: v[k] for k in names}, {"w": v["w"], "d": v["d"]})
    spec = _text(out["fire"], str(out["reason"]), tuple(nxt[k] for k in names))
    return Replay(_text(dec.fire, dec.reason.name, after[: len(names)]), spec)


def _m(name: str, description: str, method: str, old: str, new: str) -> CodeMutant:
    return CodeMutant(name, description, PrefillGate, method, old, new)


R1_MUTANTS: tuple[CodeMutant, ...] = (
    _m(
        "dense_flipped",
        "DENSE needs w > B (flipped comparison)",
        "decide_counts",
        "waiting_tokens >= self._dense",
        "waiting_tokens > self._dense",
    ),
    _m(
        "reset_dropped",
        "a FIRE leaves the counter where it was (dropped reset)",
        "decide_counts",
        "self._h = 0\n    return _DECISIONS[reason]",
        "return _DECISIONS[reason]",
    ),
    _m(
        "budget_off_by_one",
        "BUDGET fires once h >= K (one hold too many)",
        "decide_counts",
        "self._h + 1 >= self._budget",
        "self._h >= self._budget",
    ),
    _m(
        "counts_on_empty",
        "a pass with nothing waiting advances the counter",
        "decide_counts",
        "reason = Reason.EMPTY",
        "self._h += 1\n        return _DECISIONS[Reason.EMPTY]",
    ),
    _m(
        "stall_one_pass_late",
        "the STALL valve waits one pass more than stall_passes (quiet > S)",
        "decide_counts",
        "self._quiet >= self._stall",
        "self._quiet > self._stall",
    ),
    _m(
        "decide_swaps_counts",
        "decide passes (d, w) to decide_counts (only the decide entry point is wrong)",
        "decide",
        "self.decide_counts(inp.waiting_tokens, inp.decode_seqs)",
        "self.decide_counts(inp.decode_seqs, inp.waiting_tokens)",
    ),
)
"""Broken PrefillGates R1 must refute, each with inputs on which it disagrees."""
