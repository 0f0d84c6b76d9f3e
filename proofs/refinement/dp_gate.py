"""R2: ``AlignedGate`` (the shipped code) refines ``densegate.spec.dp_gate.DP``, for any N.

The abstraction is the gate's ``state`` (``hold_passes``, ``last_fill``,
``grew_at``) read as the spec's (h, q, g). One check over unbounded ints: for
every configuration (B, K, N >= 1, fill threshold 1 <= T <= B, S >= 0, KV valve
and gate on or off) and every state with 0 <= h < K (stall memory any ints), a
fresh gate starts in the spec's initial state, and one ``decide`` on any reduced
vector the spec admits (0 <= W <= N, W <= F <= W*B, D >= 0, 0 <= P, C <= N) and
tick t >= 0 returns the spec's decision and reason and leaves its next state.
The number of ranks is a symbolic int, so this is for every N, not a sampled few.

What is taken as given rather than executed: the config's ``fill_tokens``
(``ceil(target_fill * B)``, exact rational arithmetic CrossHair would have to
make concrete) is read as the spec's parameter T, any int in [1, B]; the gate's
constructor, the reduced vector's validation and the decision all run as shipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import z3

from densegate.impl.dp_gate import AlignedGate, AlignedGateConfig, ReducedObservation
from densegate.proofs.refinement.gate import Replay
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.refinement.symbolic import admit, agrees, fail, guarded, holds, term
from densegate.spec.dp_gate import DP, reason
from densegate.spec.machine import evaluate

__all__ = ["R2_CHECKS", "R2_MUTANTS", "replay"]

PARAMS = ("B", "K", "N", "T", "S", "kv", "enabled")
STATE = ("h", "q", "g")
OBS = ("W", "F", "D", "P", "C", "t")


class _Config(AlignedGateConfig):
    """The shipped config with ``fill_tokens`` supplied as the spec's T (see the module doc)."""

    @property
    def fill_tokens(self) -> int:
        return self._T  # type: ignore[attr-defined,no-any-return]


def _pre(v: dict[str, z3.ExprRef]) -> z3.BoolRef:
    B, K, N, T, S, h = v["B"], v["K"], v["N"], v["T"], v["S"], v["h"]
    W, F, D, P, C, t = v["W"], v["F"], v["D"], v["P"], v["C"], v["t"]
    return z3.And(
        B >= 1, K >= 1, N >= 1, T >= 1, T <= B, S >= 0, h >= 0, h < K,
        W >= 0, W <= N, W <= F, F <= W * B, D >= 0, P >= 0, P <= N, C >= 0, C <= N, t >= 0,
    )  # fmt: skip


def _run(cls: type, v: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """Build the gate, put it in state (h, q, g), decide once: (fresh state, decision, next)."""
    config = _Config(v["B"], v["K"], v["enabled"], 1, v["S"], v["kv"])
    object.__setattr__(config, "_T", v["T"])
    gate = cls(config, v["N"])
    fresh = gate.state
    gate._h, gate._last_fill, gate._grew_at = v["h"], v["q"], v["g"]
    reduced = ReducedObservation(v["N"], v["W"], v["F"], v["D"], v["P"], v["C"])
    decision = gate.decide(reduced, v["t"])
    return fresh, decision, gate.state


def _check(cls: type) -> Callable[..., None]:
    def check(
        B: int, K: int, N: int, T: int, S: int, kv: bool, enabled: bool,
        h: int, q: int, g: int, W: int, F: int, D: int, P: int, C: int, t: int,
    ) -> None:  # fmt: skip
        assert admit(_pre, B=B, K=K, N=N, T=T, S=S, h=h, W=W, F=F, D=D, P=P, C=C, t=t)
        v = {
            "B": B, "K": K, "N": N, "T": T, "S": S, "kv": kv, "enabled": enabled,
            "h": h, "q": q, "g": g, "W": W, "F": F, "D": D, "P": P, "C": C, "t": t,
        }  # fmt: skip
        fresh, dec, nxt = guarded(lambda: _run(cls, v), v)
        p = {k: v[k] for k in PARAMS}
        init = DP.init(
            {k: term(x) for k, x in p.items()}, dict(zip(STATE, map(term, fresh), strict=True))
        )
        if not holds(init):
            fail(v, "a fresh gate is not in the spec's initial state")
        s2 = dict(zip(STATE, nxt, strict=True))
        o = {k: v[k] for k in OBS}
        if not agrees(DP, reason, p, {k: v[k] for k in STATE}, o, dec.fire, dec.reason.name, s2):
            fail(v, "decide differs from the spec")

    return check


R2_CHECKS: dict[str, Callable[[type], Callable[..., None]]] = {"decide": _check}
"""Entry point -> check of an AlignedGate-like class (the shipped one or a mutant)."""


def _text(fire: object, why: str, nxt: tuple[Any, ...]) -> str:
    h, q, g = nxt
    return f"{'FIRE' if fire else 'HOLD'} {why} h'={h} q'={q} g'={g}"


def replay(cls: type, via: str, witness: Mapping[str, Any]) -> Replay:
    """Run ``cls`` and the spec on the witness, outside CrossHair."""
    v = witness
    try:
        fresh, dec, nxt = _run(cls, v)
    except Exception as e:
        return Replay(f"raised {type(e).__name__}: {e}", "no error")
    if tuple(fresh) != (0, 0, 0):
        return Replay(f"fresh gate state {tuple(fresh)}", "fresh gate state (0, 0, 0)")
    p = {k: v[k] for k in PARAMS}
    _, out, s2 = evaluate(DP, p, {k: v[k] for k in STATE}, {k: v[k] for k in OBS})
    spec = _text(out["fire"], str(out["reason"]), tuple(s2[k] for k in STATE))
    return Replay(_text(dec.fire, dec.reason.name, tuple(nxt)), spec)


def _m(name: str, description: str, old: str, new: str) -> CodeMutant:
    return CodeMutant(name, description, AlignedGate, "_rules", old, new)


R2_MUTANTS: tuple[CodeMutant, ...] = (
    _m(
        "dense_any_rank",
        "DENSE without every rank waiting (aggregate fill alone)",
        "waiting_ranks == self._world and fill >= self._fill_target",
        "fill >= self._fill_target",
    ),
    _m(
        "kv_valve_ignores_flag",
        "the KV valve fires even when the config turns it off",
        "self._kv_valve and pressured > 0",
        "pressured > 0",
    ),
    _m(
        "stall_memory_on_equal",
        "an unchanged fill counts as growth (flipped comparison)",
        "fill > self._last_fill",
        "fill >= self._last_fill",
    ),
)
"""Broken AlignedGates R2 must refute, each with inputs on which it disagrees."""
