"""R1: ``PrefillGate`` (the shipped code) refines ``densegate.spec.gate.GATE``.

The abstraction is the gate's counter: ``hold_passes`` (the ``_h`` slot) is the
spec's ``h``. Two checks, one per entry point, each over unbounded ints: a fresh
gate starts in the spec's initial state, and from every configuration
(B >= 1, K >= 1, enabled or not) and every counter 0 <= h < K, one call on any
observation (w, d >= 0) returns the decision and reason the spec's relation
gives and leaves its next counter. With P1 (every reachable h is in range) this
makes every run of the code a run of the machine, so P1-P7 hold of the code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import z3

from densegate.impl.gate import GateConfig, GateInput, PrefillGate
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.refinement.symbolic import (
    admit,
    agrees,
    fail,
    guarded,
    holds,
    sample,
    term,
)
from densegate.spec.gate import GATE, reason
from densegate.spec.machine import evaluate

__all__ = ["R1_CHECKS", "R1_MUTANTS", "Replay", "replay"]


def _pre(v: dict[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.And(v["B"] >= 1, v["K"] >= 1, v["h"] >= 0, v["h"] < v["K"], v["w"] >= 0, v["d"] >= 0)


def _run(cls: type, via: str, v: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """Build the gate, put it at counter h, make one call: (fresh counter, decision, h')."""
    gate = cls(GateConfig(v["B"], v["K"], v["enabled"]))
    fresh = gate.hold_passes
    gate._h = v["h"]
    if via == "decide_counts":
        decision = gate.decide_counts(v["w"], v["d"])
    else:
        decision = gate.decide(GateInput(v["w"], v["d"]))
    return fresh, decision, gate.hold_passes


def _check(cls: type, via: str) -> Callable[..., None]:
    def check(B: int, K: int, enabled: bool, h: int, w: int, d: int) -> None:
        assert admit(_pre, B=B, K=K, h=h, w=w, d=d)
        v = {"B": B, "K": K, "enabled": enabled, "h": h, "w": w, "d": d}
        fresh, dec, h2 = guarded(lambda: _run(cls, via, v), v)
        p = {"B": B, "K": K, "enabled": enabled}
        if not holds(GATE.init({k: term(x) for k, x in p.items()}, {"h": term(fresh)})):
            fail(v, "a fresh gate is not in the spec's initial state")
        if not agrees(
            GATE, reason, p, {"h": h}, {"w": w, "d": d}, dec.fire, dec.reason.name, {"h": h2}
        ):
            fail(v, f"{via} differs from the spec")
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


def _text(fire: object, why: str, nxt: object) -> str:
    return f"{'FIRE' if fire else 'HOLD'} {why} h'={nxt}"


def replay(cls: type, via: str, witness: Mapping[str, Any]) -> Replay:
    """Run ``cls`` and the spec on the witness, outside CrossHair."""
    v = witness
    p = {"B": v["B"], "K": v["K"], "enabled": v["enabled"]}
    try:
        fresh, dec, h2 = _run(cls, via, v)
    except Exception as e:
        return Replay(f"raised {type(e).__name__}: {e}", "no error")
    if fresh != 0:
        return Replay(f"fresh gate h={fresh}", "fresh gate h=0")
    _, out, nxt = evaluate(GATE, p, {"h": v["h"]}, {"w": v["w"], "d": v["d"]})
    return Replay(
        _text(dec.fire, dec.reason.name, h2), _text(out["fire"], str(out["reason"]), nxt["h"])
    )


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
        "decide_swaps_counts",
        "decide passes (d, w) to decide_counts (only the decide entry point is wrong)",
        "decide",
        "self.decide_counts(inp.waiting_tokens, inp.decode_seqs)",
        "self.decide_counts(inp.decode_seqs, inp.waiting_tokens)",
    ),
)
"""Broken PrefillGates R1 must refute, each with inputs on which it disagrees."""
