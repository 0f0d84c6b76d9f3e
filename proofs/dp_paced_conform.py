"""``prove_aligned_conforms(factory)``: the conformance kit, symbolically, for anyone's
aligned (data-parallel) gate, paced mode and its cap included.

The kit's single-rank half (``densegate.proofs.refinement.conform``) judges a gate built
from ``GateConfig``, which has no paced mode. This half judges a gate built as
``factory(AlignedGateConfig, world_size)`` with ``decide(ReducedObservation, tick) ->
Decision`` and ``hold_passes`` (``densegate.impl.dp_gate.AlignedGate`` is one), as a black
box from a fresh gate: CrossHair explores every path of every run of ``passes`` ticks,
over every config (B, K, N >= 1, gate, KV valve, STALL valve (any S >= 0), aligned
release (any A >= 0), paced mode (any ``pace_tokens`` >= 1), its surge cap (any
``surge_tokens`` >= ``pace_tokens``) and its busy wait (any ``busy_decodes`` >= 1) each on
or off; the fill
threshold any T in [1, B], handed to the gate as ``config.fill_tokens``, which it must
read there) and every reduced vector and tick the spec admits, all unbounded ints.
Each property is one symbolic question per path:

- ``agreement``: decision, reason, cap (``Decision.cap``, None as the spec's 0) and
  ``hold_passes`` equal ``densegate.spec.dp_gate.DP``'s on every tick, its state
  carried beside the gate's from the initial one;
- ``D9``: with the paced mode on every tick FIREs, never ALIGNED, STALL or BUDGET, but a
  busy one (busy wait on, some rank neither waiting nor vacant, D >= ``busy_decodes``, no
  waiting rank without decodes); PACED only with it on and not busy;
- ``D10``: the cap is ``pace_tokens`` on a PACED fire with no filled rank, ``surge_tokens``
  (``pace_tokens`` with the surge off) on one with a filled rank, None on every other;
  a tick where every rank waits and the fill reaches T*N is uncapped (the spec's
  ``cmin <= cap <= cmax`` is no input of a gate, so it is not judged here).

Verdicts as in ``--prove`` for single-rank gates: ``proved`` (bounded in ticks only),
``refuted`` with the run, replayed concretely on the gate beside the spec's evaluator
through the sampled aligned kit's own judges (``densegate.testing.aligned_driver``, which
must show the same property broken), ``out of reach`` with the reason, or
``vacuous`` (the precondition admits nothing, no path got past it, or a class (gate on,
gate off, paced mode on, paced mode off) no explored path reached).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import z3

from densegate.impl.dp_gate import AlignedGateConfig, ReducedObservation
from densegate.impl.gate import Reason
from densegate.proofs.refinement.conform import ProofReport, ProvedProperty
from densegate.proofs.refinement.symbolic import (
    Classes,
    NoTracing,
    admit,
    admitted_classes,
    explore,
    fail,
    guarded,
    holds,
    keyword_signature,
    reached,
    term,
)
from densegate.spec.dp_gate import DP, reason
from densegate.spec.machine import Command
from densegate.testing.aligned_driver import ALIGNED_PROPERTIES, AlignedDriver, AlignedFactory
from densegate.testing.aligned_strategies import AlignedRun

__all__ = [
    "ALIGNED_CLASSES",
    "ALIGNED_IDS",
    "AlignedFactory",
    "AlignedProofReport",
    "prove_aligned_conforms",
]

ALIGNED_IDS = ("agreement", "D9", "D10")
_PROPS = {p.id: p for p in ALIGNED_PROPERTIES if p.id in ALIGNED_IDS}
"""Worded as the sampled aligned kit words them: one table, ``ALIGNED_PROPERTIES``."""
PARAMS = ("B", "K", "N", "T", "S", "kv", "enabled", "al", "A", "pc", "Cp", "Cs", "sg", "bz", "Db")
_BOOLS = ("kv", "enabled", "al", "pc", "sg", "bz")
_OBS = ("W", "F", "D", "P", "C", "Fl", "Nd", "Va", "t")

ALIGNED_CLASSES: Classes = {
    "gate on": lambda v: v["enabled"],
    "gate off": lambda v: z3.Not(v["enabled"]),
    "paced mode on": lambda v: v["pc"],
    "paced mode off": lambda v: z3.Not(v["pc"]),
    "surge cap on": lambda v: z3.And(v["pc"], v["sg"]),
    "busy wait on": lambda v: z3.And(v["pc"], v["bz"]),
}
"""The configuration classes every property's check must reach on some explored path."""


class _Config(AlignedGateConfig):
    """The config with ``fill_tokens`` given as the spec's T (exact rationals would be made
    concrete); ``target_fill`` is left at 1. T is a class attribute of a subclass made per
    run, so a gate that ``dataclasses.replace``-s its config keeps it."""

    T: Any = 1

    @property
    def fill_tokens(self) -> int:
        return self.T  # type: ignore[no-any-return]


def _config(v: Mapping[str, Any]) -> AlignedGateConfig:
    with NoTracing():
        cls = type("AlignedGateConfig", (_Config,), {"T": v["T"], "__module__": __name__})
    return cls(v["B"], v["K"], v["enabled"], 1, v["S"], v["kv"],  # type: ignore[no-any-return]
               v["A"] if v["al"] else None, v["Cp"] if v["pc"] else None,
               v["Cs"] if v["pc"] and v["sg"] else None,
               v["Db"] if v["bz"] else None)  # fmt: skip


def _pre(ticks: int) -> Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef]:
    def pre(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
        B, N = v["B"], v["N"]
        conds = [B >= 1, v["K"] >= 1, N >= 1, v["T"] >= 1, v["T"] <= B, v["S"] >= 0]
        conds += [v["A"] >= 0, v["Cp"] >= 1, v["Cs"] >= v["Cp"], v["Db"] >= 1]
        for i in range(ticks):
            W, F, D, P, C, Fl, Nd, Va, t = (v[f"{k}{i}"] for k in _OBS)
            conds += [W >= 0, W <= N, W <= F, F <= W * B, D >= 0, P >= 0, P <= N, C >= 0]
            conds += [C <= N, t >= 0, Fl >= 0, Fl <= W, Nd >= 0, Nd <= W, Va >= 0, Va <= N - W]
        return z3.And(*conds)

    return pre


def _names(ticks: int) -> list[str]:
    return [*PARAMS, *(f"{k}{i}" for i in range(ticks) for k in _OBS)]


def _drive(factory: AlignedFactory, v: Mapping[str, Any], ticks: int) -> list[tuple[Any, ...]]:
    """A fresh gate over the run: (decision, hold_passes after) per tick."""
    gate = factory(_config(v), v["N"])
    out = []
    for i in range(ticks):
        red = ReducedObservation(v["N"], *(v[f"{k}{i}"] for k in _OBS[:-1]))
        dec = gate.decide(red, v[f"t{i}"])
        if not isinstance(dec.reason, Reason) or dec.fire != (dec.reason is not Reason.HOLD):
            fail(dict(v), f"decide returned {dec!r}, not a Decision whose fire matches its reason")
        out.append((dec.fire, dec.reason.name, dec.cap, gate.hold_passes))
    return out


def _chosen(cmds: Sequence[Command], key: str, part: str) -> z3.ExprRef:
    """Output (``part`` "out") or next state ("next") ``key`` of the enabled command
    (exactly one is: D4)."""
    out = getattr(cmds[-1], part)[key]
    for c in reversed(cmds[:-1]):
        out = z3.If(c.guard, getattr(c, part)[key], out)
    return out


def _judge(pid: str, v: Mapping[str, Any], steps: Sequence[tuple[Any, ...]]) -> z3.BoolRef:
    """The property over one run, as one formula (the spec's terms for agreement)."""
    surge = z3.If(term(v["sg"]), term(v["Cs"]), term(v["Cp"]))  # surge off: the spec's Cs = Cp
    p = {k: term(v[k]) for k in PARAMS if k != "sg"} | {"Cs": surge}
    p |= {"cmin": z3.IntVal(1), "cmax": surge}
    s: dict[str, z3.ExprRef] = {"h": z3.IntVal(0), "q": z3.IntVal(0), "g": z3.IntVal(0)}
    conds = []
    for i, (fire, why, cap, h2) in enumerate(steps):
        o = {k: term(v[f"{k}{i}"]) for k in _OBS} | {
            k: z3.IntVal(0) for k in DP.obs_sorts if k not in _OBS
        }
        f, r, c = term(fire), reason(why), term(0 if cap is None else cap)
        if pid == "agreement":
            cmds = DP.commands(p, s, o)
            want = [_chosen(cmds, k, "out") for k in ("fire", "reason", "cap")]
            s = {k: _chosen(cmds, k, "next") for k in s}
            conds += [f == want[0], r == want[1], c == want[2], term(h2) == s["h"]]
        elif pid == "D9":
            never = [r != reason(n) for n in ("ALIGNED", "STALL", "BUDGET")]
            unaligned = o["W"] + o["Va"] < p["N"]
            busy = z3.And(p["bz"], unaligned, o["D"] >= p["Db"], o["Nd"] == 0)
            calm = z3.And(p["pc"], z3.Not(busy))
            conds.append(z3.Implies(calm, z3.And(f, *never)))
            conds.append(z3.Implies(r == reason("PACED"), calm))
        else:
            dense = z3.And(o["W"] == p["N"], o["F"] >= p["T"] * p["N"])
            pace = z3.If(o["Fl"] > 0, p["Cs"], p["Cp"])
            conds += [c == z3.If(r == reason("PACED"), pace, 0), z3.Implies(dense, c == 0)]
    return z3.And(*conds) if conds else z3.BoolVal(True)


def _check(factory: AlignedFactory, pid: str, ticks: int) -> Callable[..., None]:
    pre = _pre(ticks)

    def check(**v: Any) -> None:
        assert admit(pre, **{k: x for k, x in v.items()})
        steps = guarded(lambda: _drive(factory, v, ticks), v)
        with NoTracing():
            formula = _judge(pid, v, steps)
        if not holds(formula):
            fail(v, f"{pid} broken")
        reached(v)

    names = _names(ticks)
    check.__signature__ = keyword_signature(  # type: ignore[attr-defined]
        {n: bool if n in _BOOLS else int for n in names}
    )
    return check


# -- replay, verdicts, the report ------------------------------------------------------------


def _flags(factory: AlignedFactory, run: Mapping[str, Any], ticks: int) -> dict[str, str]:
    """The run replayed concretely through the sampled aligned kit's own judges (the gate
    beside the spec's evaluator): each property it breaks, with the first tick that does.
    A gate that raises or returns a malformed decision breaks all three."""
    driver = AlignedDriver(factory)
    try:
        steps = tuple(
            (ReducedObservation(run["N"], *(run[f"{k}{i}"] for k in _OBS[:-1])), run[f"t{i}"])
            for i in range(ticks)
        )
        replay = AlignedRun(_config(run), run["N"], steps)
        first = driver.outcome(replay).first
    except Exception as e:  # a config or vector the shipped constructors refuse
        return {pid: f"replay raised {type(e).__name__}: {e}" for pid in ALIGNED_IDS}
    if replay in driver.broken:
        return dict.fromkeys(ALIGNED_IDS, driver.broken[replay])
    return {pid: f"tick {at + 1}: {msg}" for pid, (at, msg) in first.items() if pid in _PROPS}


class AlignedProofReport(ProofReport):
    """``conform --prove --aligned``'s verdict: the single-rank report's, over runs of ticks."""

    unit: ClassVar[str] = "ticks"

    @property
    def ticks(self) -> int:
        return self.passes

    def header(self) -> str:
        return (
            f"densegate conform --prove --aligned {self.target}: every path of every run of "
            f"{self.ticks} ticks from a fresh gate, all configs (B, K, N >= 1, T in [1, B]; "
            "gate, KV valve, STALL valve, aligned release, paced mode, surge cap and busy wait "
            "each on and off) and "
            f"reduced vectors (unbounded ints), {self.seconds:.1f} s"
        )

    def run_text(self, run: Mapping[str, Any]) -> str:
        return _run_text(run)


def _run_text(run: Mapping[str, Any]) -> str:
    head = " ".join(f"{k}={run[k]}" for k in PARAMS)
    ticks = "  ".join(
        f"tick {i + 1}: " + " ".join(f"{k}={x}" for k, x in zip(_OBS, t, strict=True))
        for i, t in enumerate(run["ticks"])
    )
    return f"{head}  {ticks}"


def prove_aligned_conforms(
    factory: AlignedFactory,
    *,
    ticks: int = 1,
    name: str | None = None,
    max_iterations: int = 600,
) -> AlignedProofReport:
    """Prove, refute or report out of reach agreement, D9 and D10 for ``factory``'s gates."""
    if ticks < 1:
        raise ValueError(f"ticks must be >= 1, got {ticks}")
    t0 = time.perf_counter()
    results = []
    for pid in ALIGNED_IDS:
        check = _check(factory, pid, ticks)
        out = explore(check, max_iterations=max_iterations, classes=ALIGNED_CLASSES)
        prop = _PROPS[pid]
        pre, admits = admitted_classes(check, _pre(ticks), ALIGNED_CLASSES)
        missed = [n for n in ALIGNED_CLASSES if not (admits[n] and n in out.covered)]
        if out.status == "proved" and (not pre or out.passed == 0 or missed):
            why = (
                "the precondition has no model"
                if not pre
                else f"no explored path ({out.paths}) got past the precondition and the judge"
                if out.passed == 0
                else f"configuration class {', '.join(missed)} reached by no explored path"
            )
            results.append(ProvedProperty(prop, "vacuous", out.seconds, None, why))
        elif out.status == "proved":
            results.append(ProvedProperty(prop, "proved", out.seconds))
        elif out.status == "refuted" and out.witness is not None:
            w = out.witness
            run = {k: w[k] for k in PARAMS}
            run["ticks"] = [[w[f"{k}{i}"] for k in _OBS] for i in range(ticks)]
            flags = _flags(factory, w, ticks)
            if pid in flags:
                detail = f"replayed on the gate and the spec: {flags[pid]}"
                results.append(ProvedProperty(prop, "refuted", out.seconds, run, detail))
            else:
                why = f"witness {run} ({out.detail}) did not break {pid} when replayed"
                results.append(ProvedProperty(prop, "out of reach", out.seconds, run, why))
        else:
            results.append(ProvedProperty(prop, "out of reach", out.seconds, None, out.detail))
    target = (
        name or f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', '?')}"
    )
    return AlignedProofReport(target, ticks, tuple(results), time.perf_counter() - t0)
