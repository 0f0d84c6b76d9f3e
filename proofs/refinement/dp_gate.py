"""R2: ``AlignedGate`` (the shipped code) refines ``densegate.spec.dp_gate.DP``, for any N.

The abstraction is the gate's ``state`` (``hold_passes``, ``last_fill``,
``grew_at``) read as the spec's (h, q, g). One check over unbounded ints: for
every configuration (B, K, N >= 1, fill threshold 1 <= T <= B, S >= 0, KV valve,
aligned release (``align_ticks`` A >= 0 or None), paced mode (``pace_tokens`` Cp >= 1
or None, and beside it ``surge_tokens`` Cs >= Cp or None, read by the spec as Cs = Cp, and
``busy_decodes`` Db >= 1 or None, the spec's busy wait bz) and gate on or off) and every
state with 0 <= h < K (stall memory any ints),
a fresh gate starts in the spec's initial state, and one ``decide`` on any reduced
vector the spec admits (0 <= W <= N, W <= F <= W*B, D >= 0, 0 <= P, C <= N; filled and
no-decode ranks 0 <= Fl, Nd <= W, vacant ranks 0 <= Va <= N - W) and
tick t >= 0 returns the spec's decision, reason and cap (``Decision.cap``, None read
as the spec's 0) and leaves its next state.
The number of ranks is a symbolic int, so this is for every N, not a sampled few.

What is taken as given rather than executed: the config's ``fill_tokens``
(``ceil(target_fill * B)``, exact rational arithmetic CrossHair would have to
make concrete) is read as the spec's parameter T, any int in [1, B]. The spec's
``cmin`` and ``cmax`` (the range it takes the cap from) are no input of the gate: the
code is checked for every pace_tokens >= 1, a range that contains theirs. The gate's
constructor and ``decide`` run as shipped; the config's and reduced vector's
validating constructors run in a check of their own (``inputs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import z3

from densegate.impl.dp_gate import AlignedGate, AlignedGateConfig, ReducedObservation
from densegate.proofs.refinement.gate import Replay
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.refinement.symbolic import (
    Classes,
    NoTracing,
    admit,
    agrees,
    fail,
    guarded,
    holds,
    keyword_signature,
    reached,
    sample,
    term,
)
from densegate.spec.dp_gate import DP, reason
from densegate.spec.machine import evaluate

__all__ = [
    "R2_CAP_MUTANTS",
    "R2_CHECKS",
    "R2_CLASSES",
    "R2_MUTANTS",
    "R2_PRECONDITION",
    "replay",
]

PARAMS = ("B", "K", "N", "T", "S", "kv", "enabled", "al", "A", "pc", "Cp", "Cs", "sg", "bz", "Db")
"""The checks' configuration inputs: the spec's parameters but ``cmin``, ``cmax``, and ``sg``
(``surge_tokens`` set: else the spec's Cs is Cp, ``spec_params``)."""
STATE = ("h", "q", "g")
OBS = ("W", "F", "D", "P", "C", "Fl", "Nd", "Va", "t")


class _Config(AlignedGateConfig):
    """The shipped config with ``fill_tokens`` supplied as the spec's T (see the module doc)."""

    @property
    def fill_tokens(self) -> int:
        return self._T  # type: ignore[attr-defined,no-any-return]


def _pre(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    B, K, N, T, S, A, h = v["B"], v["K"], v["N"], v["T"], v["S"], v["A"], v["h"]
    W, F, D, P, C, t = v["W"], v["F"], v["D"], v["P"], v["C"], v["t"]
    Fl, Nd, Va = v["Fl"], v["Nd"], v["Va"]
    return z3.And(
        B >= 1, K >= 1, N >= 1, T >= 1, T <= B, S >= 0, A >= 0, v["Cp"] >= 1, h >= 0, h < K,
        v["Cs"] >= v["Cp"], v["Db"] >= 1,
        W >= 0, W <= N, W <= F, F <= W * B, D >= 0, P >= 0, P <= N, C >= 0, C <= N, t >= 0,
        Fl >= 0, Fl <= W, Nd >= 0, Nd <= W, Va >= 0, Va <= N - W,
    )  # fmt: skip


R2_PRECONDITION = _pre
"""What R2's checks admit: configurations, states, reduced vectors and ticks."""

R2_CLASSES: Classes = {
    "gate on": lambda v: v["enabled"],
    "gate off": lambda v: z3.Not(v["enabled"]),
    "KV valve on": lambda v: v["kv"],
    "KV valve off": lambda v: z3.Not(v["kv"]),
    "STALL valve on (S > 0)": lambda v: v["S"] > 0,
    "STALL valve off (S = 0)": lambda v: v["S"] == 0,
    "aligned release on": lambda v: v["al"],
    "aligned release off": lambda v: z3.Not(v["al"]),
    "paced mode on": lambda v: v["pc"],
    "paced mode off": lambda v: z3.Not(v["pc"]),
    "surge cap on": lambda v: z3.And(v["pc"], v["sg"]),
    "surge cap off": lambda v: z3.And(v["pc"], z3.Not(v["sg"])),
    "busy wait on": lambda v: z3.And(v["pc"], v["bz"]),
    "busy wait off": lambda v: z3.And(v["pc"], z3.Not(v["bz"])),
}
"""The configuration classes R2's scope names; each must be reached by an explored path."""

_CONFIG_FIELDS = ("dense_tokens", "max_hold_passes", "enabled", "target_fill", "stall_ticks")
_REDUCED_FIELDS = tuple(f.name for f in dataclasses.fields(ReducedObservation))
"""The reduced vector's fields in slot order, read from the shipped dataclass itself."""


def _unvalidated(cls: type, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    """A frozen dataclass instance with these fields, its ``__post_init__`` validation skipped."""
    obj: Any = object.__new__(cls)
    for name, value in zip(names, values, strict=True):
        object.__setattr__(obj, name, value)
    return obj


def _inputs(v: Mapping[str, Any], validated: bool) -> tuple[Any, Any]:
    """The config and reduced vector; ``validated`` runs their shipped constructors."""
    cfg = (v["B"], v["K"], v["enabled"], 1, v["S"], v["kv"], v["A"] if v["al"] else None,
           v["Cp"] if v["pc"] else None, v["Cs"] if v["pc"] and v["sg"] else None,
           v["Db"] if v["bz"] else None)  # fmt: skip
    red = (v["N"], v["W"], v["F"], v["D"], v["P"], v["C"], v["Fl"], v["Nd"], v["Va"])
    if validated:
        config, reduced = _Config(*cfg), ReducedObservation(*red)
    else:  # plain attribute stores: nothing of the code under check runs, so not traced
        names = (*_CONFIG_FIELDS, "kv_pressure_valve", "align_ticks", "pace_tokens",
                 "surge_tokens", "busy_decodes")  # fmt: skip
        with NoTracing():
            config = _unvalidated(_Config, names, cfg)
            reduced = _unvalidated(ReducedObservation, _REDUCED_FIELDS, red)
    object.__setattr__(config, "_T", v["T"])
    return config, reduced


def _run(cls: type, v: Mapping[str, Any], validated: bool = True) -> tuple[Any, Any, Any]:
    """Build the gate, put it in state (h, q, g), decide once: (fresh state, decision, next)."""
    config, reduced = _inputs(v, validated)
    gate = cls(config, v["N"])
    fresh = gate.state
    gate._h, gate._last_fill, gate._grew_at = v["h"], v["q"], v["g"]
    decision = gate.decide(reduced, v["t"])
    return fresh, decision, gate.state


_NAMES = (*PARAMS, *STATE, *OBS)
_BOOLS = ("kv", "enabled", "al", "pc", "sg", "bz")
_SIGNATURE = keyword_signature({n: bool if n in _BOOLS else int for n in _NAMES})
"""The checks' arguments, keyword-only (``keyword_signature``: CrossHair shares them across
paths instead of copying each on every path)."""


def spec_params(v: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's parameters of these inputs: ``surge_tokens`` off is the spec's Cs = Cp."""
    with NoTracing():
        keep = {k: v[k] for k in PARAMS if k != "sg"}
        if isinstance(v["sg"], bool):
            return keep | {"Cs": v["Cs"] if v["sg"] else v["Cp"]}
        return keep | {"Cs": z3.If(term(v["sg"]), term(v["Cs"]), term(v["Cp"]))}


def _admitted(v: Mapping[str, Any]) -> bool:
    return admit(_pre, **{k: v[k] for k in _NAMES if k not in (*_BOOLS, "q", "g")})


def _agrees(v: Mapping[str, Any], dec: Any, nxt: tuple[Any, ...]) -> bool:
    """Whether the code's (fire, reason, cap, next state) is the step ``DP.relation`` allows
    (``agrees`` with the cap: a Decision's None is the spec's 0; the local view is 0, which
    the spec's commands never read)."""
    cap = 0 if dec.cap is None else dec.cap
    params, state = spec_params(v), {k: v[k] for k in STATE}
    obs, after = {k: v[k] for k in OBS}, dict(zip(STATE, nxt, strict=True))
    return agrees(DP, reason, params, state, obs, dec.fire, dec.reason.name, after, {"cap": cap})


def _check(cls: type) -> Callable[..., None]:
    """The step: the gate's constructor and ``decide`` as shipped, on inputs whose own
    validation, and a fresh gate's state, the ``inputs`` check covers (running them on
    every path here would multiply the cost of each path and prove nothing more)."""

    def check(**v: Any) -> None:
        assert _admitted(v)
        _, dec, nxt = guarded(lambda: _run(cls, v, validated=False), v)
        if not _agrees(v, dec, tuple(nxt)):
            fail(v, "decide differs from the spec")
        reached(v)
        sample(v)  # a state this path reached: mutants are replayed on it first

    check.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
    return check


def _inputs_check(cls: type) -> Callable[..., None]:
    """The config's and the reduced vector's shipped constructors accept every admitted
    input and keep it as given (so the step check may build them without validating),
    and a gate built from that config starts in the spec's initial state."""

    def check(**v: Any) -> None:
        assert _admitted(v)
        config, reduced = guarded(lambda: _inputs(v, validated=True), v)
        fresh = guarded(lambda: cls(config, v["N"]).state, v)
        init = DP.init(
            {k: term(x) for k, x in spec_params(v).items()},
            dict(zip(STATE, map(term, fresh), strict=True)),
        )
        if not holds(init):
            fail(v, "a fresh gate is not in the spec's initial state")
        kept = [getattr(config, f) for f in _CONFIG_FIELDS] + [config.kv_pressure_valve]
        kept += [getattr(reduced, f) for f in _REDUCED_FIELDS]
        given = [v[k] for k in ("B", "K", "enabled")] + [1] + [v[k] for k in ("S", "kv")]
        given += [v[k] for k in ("N", "W", "F", "D", "P", "C", "Fl", "Nd", "Va")]
        if not holds(z3.And(*[term(a) == term(b) for a, b in zip(kept, given, strict=True)])):
            fail(v, "a constructor changed an input")
        if (config.align_ticks is None) == v["al"] or (v["al"] and config.align_ticks != v["A"]):
            fail(v, "the config changed align_ticks")
        if (config.pace_tokens is None) == v["pc"] or (v["pc"] and config.pace_tokens != v["Cp"]):
            fail(v, "the config changed pace_tokens")
        surged = v["pc"] and v["sg"]
        if (config.surge_tokens is None) == surged or (surged and config.surge_tokens != v["Cs"]):
            fail(v, "the config changed surge_tokens")
        if (config.busy_decodes is None) == v["bz"] or (v["bz"] and config.busy_decodes != v["Db"]):
            fail(v, "the config changed busy_decodes")
        reached(v)

    check.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
    return check


R2_CHECKS: dict[str, Callable[[type], Callable[..., None]]] = {
    "decide": _check,
    "inputs": _inputs_check,
}
"""Entry point -> check of an AlignedGate-like class (the shipped one or a mutant)."""


def _text(fire: object, why: str, cap: object, nxt: tuple[Any, ...]) -> str:
    h, q, g = nxt
    capped = f" cap={cap}" if cap else ""
    return f"{'FIRE' if fire else 'HOLD'} {why}{capped} h'={h} q'={q} g'={g}"


def replay(cls: type, via: str, witness: Mapping[str, Any]) -> Replay:
    """Run ``cls`` and the spec on the witness, outside CrossHair (constructors validating)."""
    v = witness
    try:
        fresh, dec, nxt = _run(cls, v)
    except Exception as e:
        return Replay(f"raised {type(e).__name__}: {e}", "no error")
    if tuple(fresh) != (0, 0, 0):
        return Replay(f"fresh gate state {tuple(fresh)}", "fresh gate state (0, 0, 0)")
    p = spec_params(v)
    _, out, s2 = evaluate(DP, p, {k: v[k] for k in STATE}, {k: v[k] for k in OBS})
    spec = _text(out["fire"], str(out["reason"]), out["cap"], tuple(s2[k] for k in STATE))
    return Replay(_text(dec.fire, dec.reason.name, dec.cap, tuple(nxt)), spec)


def _m(name: str, description: str, old: str, new: str, where: str = "_rules") -> CodeMutant:
    return CodeMutant(name, description, AlignedGate, where, old, new)


_DENSE = """    elif (waiting_ranks == self._world and fill >= self._fill_target) or (
        filled > 0 and not self._paced
    ):
        reason = Reason.DENSE
"""
_PACED = (
    "    elif self._paced and not self._busy_wait(waiting_ranks + vacant, decodes, no_decode):\n"
    "        reason = Reason.PACED\n"
)
_DENSE_THEN_PACED, _PACED_THEN_DENSE = _DENSE + _PACED, _PACED + _DENSE

R2_MUTANTS: tuple[CodeMutant, ...] = (
    _m(
        "dense_any_rank",
        "DENSE without every rank waiting (aggregate fill alone)",
        "waiting_ranks == self._world and fill >= self._fill_target",
        "fill >= self._fill_target",
    ),
    _m(
        "dense_world_fill",
        "DENSE only once every rank waits with the world's fill (a filled rank held by cold ones)",
        "filled > 0 and not self._paced",
        "False",
    ),
    _m(
        "idle_rank_held",
        "a rank with waiting work and no decode held while other ranks decode",
        "decodes == 0 or (no_decode > 0 and not self._paced)",
        "decodes == 0",
    ),
    _m(
        "aligned_waits_for_vacant",
        "ALIGNED waits for vacant ranks (nothing waiting, nothing decoding) to get work",
        "self._aligned(waiting_ranks + vacant)",
        "self._aligned(waiting_ranks)",
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
    _m(
        "aligned_any_rank",
        "ALIGNED once the episode is old enough, whether or not every rank waits",
        "self._h >= self._align and waiting_ranks == self._world",
        "self._h >= self._align",
        "_aligned",
    ),
    _m(
        "aligned_off_by_one",
        "ALIGNED one held tick late (h > A instead of h >= A)",
        "self._h >= self._align",
        "self._h > self._align",
        "_aligned",
    ),
    _m(
        "paced_before_dense",
        "the paced release ahead of DENSE: a tick every rank can fill densely fires capped",
        _DENSE_THEN_PACED,
        _PACED_THEN_DENSE,
    ),
    _m(
        "paced_skips_kv_valve",
        "paced mode passes over the KV valve: a pressured tick fires DENSE or PACED",
        "self._kv_valve and pressured > 0",
        "self._kv_valve and pressured > 0 and not self._paced",
    ),
    _m(
        "busy_wait_aligned_too",
        "the busy wait holds an aligned release too (every rank waiting or vacant)",
        "ready < self._world and no_decode == 0",
        "no_decode == 0",
        "_busy_wait",
    ),
    _m(
        "busy_wait_holds_no_decode",
        "the busy wait holds a tick where a waiting rank has no decode",
        "ready < self._world and no_decode == 0",
        "ready < self._world",
        "_busy_wait",
    ),
    _m(
        "busy_wait_strict",
        "the busy wait needs more than busy_decodes decodes, not at least",
        "decodes >= self._busy",
        "decodes > self._busy",
        "_busy_wait",
    ),
    _m(
        "fresh_gate_holding",
        "a new gate starts one held tick into an episode (h = 1, not the spec's h = 0)",
        "self._h = 0",
        "self._h = 1",
        "__init__",
    ),
)
"""Broken AlignedGates R2 must refute, each with inputs on which it disagrees."""

R2_CAP_MUTANTS: tuple[CodeMutant, ...] = (
    _m(
        "paced_cap_dense_tokens",
        "the paced cap is dense_tokens, not pace_tokens (only Decision.cap differs)",
        "Decision(True, Reason.PACED, pace)",
        "Decision(True, Reason.PACED, config.dense_tokens)",
        "__init__",
    ),
    _m(
        "surge_ignored",
        "a PACED tick with a filled rank keeps pace_tokens (surge_tokens never given)",
        "if filled > 0 and reason is Reason.PACED:",
        "if False:",
    ),
    _m(
        "surge_on_fill",
        "the surge judged on the aggregate fill reaching fill_tokens, not on a filled rank",
        "if filled > 0 and reason is Reason.PACED:",
        "if fill >= self._fill and reason is Reason.PACED:",
    ),
)
"""Broken AlignedGates that differ from the spec in the cap alone: R2 refutes them (its step
check compares the cap), and ``tests/test_paced_gate.py`` replays each refutation."""
