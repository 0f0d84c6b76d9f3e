"""The broken aligned gates the D obligations refute, by name (``DP_MUTANTS``).

Most change one condition or one command of ``densegate.spec.dp_gate.DP``.
``two_budgets`` is the original's composition (flaw 4 in docs/ARCHITECTURE.md): a
cross-rank delayer with a pass budget of its own in front of a per-rank gate with
another, so the worst-case hold is their sum. The ``local_*``, ``aligned_local`` and
``wall_clock_stall`` ones let a rank-local input decide, which made the original's
ranks disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

import z3

from densegate.proofs.common import named_mutant, patch
from densegate.proofs.obligation import Mutant
from densegate.spec.dp_gate import DpConditions, DpMachine, everyone_dense, reason
from densegate.spec.machine import Command, Vars

__all__ = ["DP_MUTANTS"]


def _cond(**fields: object) -> type[DpMachine]:
    """The spec machine with some atomic conditions replaced: a one-condition slip."""

    class _M(DpMachine):
        def conditions(self, p: Vars, s: Vars, o: Vars) -> DpConditions:
            c = super().conditions(p, s, o)
            return replace(c, **{k: f(self, p, s, o, c) for k, f in fields.items()})  # type: ignore[operator]

    return _M


def _busy_slip(
    *, unaligned: bool = True, decoded: bool = True, strict: bool = False, own: bool = False
) -> type[DpMachine]:
    """The spec machine with one slip in its busy wait: the alignment or the no-decode test
    dropped, ``>`` for ``>=``, or the rank's own decodes for the group's."""

    def paced(m: DpMachine, p: Vars, s: Vars, o: Vars, c: DpConditions) -> z3.BoolRef:
        d = o["ld"] if own else o["D"]
        busy = [p["bz"], d > p["Db"] if strict else d >= p["Db"]]
        busy += [o["W"] + o["Va"] < p["N"]] if unaligned else []
        busy += [o["Nd"] == 0] if decoded else []
        return z3.And(p["pc"], z3.Not(z3.And(*busy)))

    return _cond(paced=paced)


def _filled_or(everyone: Callable[[Vars, Vars], z3.BoolRef]) -> type[DpMachine]:
    """The spec machine with the every-rank half of its dense test replaced."""
    return _cond(
        dense=lambda m, p, s, o, c: z3.Or(everyone(p, o), z3.And(o["Fl"] > 0, z3.Not(p["pc"])))
    )


def _waiting_or_vacant(p: Vars, o: Vars) -> z3.BoolRef:
    return o["W"] + o["Va"] == p["N"]


def _counts(command: str, h: Callable[[Vars, Vars, Vars], z3.ExprRef]) -> type[DpMachine]:
    """The spec machine with one command's next counter replaced: a one-rule slip."""

    class _M(DpMachine):
        def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
            cmds = super().commands(p, s, o)
            was = next(c for c in cmds if c.name == command)
            return patch(cmds, command, next=dict(was.next) | {"h": h(p, s, o)})

    return _M


# -- the original's composition: two budgets in short circuit ---------------------------


class _TwoBudgets(DpMachine):
    """A delayer (counter ``x``) holds until every rank is ready or ITS budget is spent;
    only then is the per-rank gate (counter ``h``) consulted, with a budget of its own."""

    delayer_first: ClassVar[bool] = False
    """True: the delayer runs even when the gate is disabled, as in the original."""

    def __init__(self) -> None:
        super().__init__()
        self.state_sorts = {**self.state_sorts, "x": z3.Int}

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(super().init(p, s), s["x"] == 0)

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        mem = self.memory(p, s, o)
        allows = z3.Or(c.dense, s["x"] + 1 >= p["K"])  # delayer: all ranks ready, or expired
        reset = {"h": z3.IntVal(0), "x": z3.IntVal(0), **mem}
        gate_on = z3.BoolVal(True) if self.delayer_first else c.enabled
        gate_live = z3.And(c.waiting, c.enabled, c.decoding, allows)

        def fire(name: str, guard: z3.BoolRef) -> Command:
            out = {"fire": z3.BoolVal(True), "reason": reason(name), "cap": z3.IntVal(0)}
            return Command(name, guard, out, reset)

        def hold(name: str, guard: z3.BoolRef, nxt: Mapping[str, z3.ExprRef]) -> Command:
            out = {"fire": z3.BoolVal(False), "reason": reason("HOLD"), "cap": z3.IntVal(0)}
            return Command(name, guard, out, {**nxt, **mem})

        pre = allows if self.delayer_first else z3.BoolVal(True)
        delay_needs = c.waiting if self.delayer_first else z3.And(c.waiting, c.enabled, c.decoding)
        return (
            fire("EMPTY", z3.Not(c.waiting)),
            hold(
                "DELAY",
                z3.And(delay_needs, gate_on, z3.Not(allows)),
                {"h": s["h"], "x": s["x"] + 1},
            ),
            fire("DISABLED", z3.And(c.waiting, z3.Not(c.enabled), pre)),
            fire("NO_DECODE", z3.And(c.waiting, c.enabled, z3.Not(c.decoding), pre)),
            fire("DENSE", z3.And(gate_live, c.dense)),
            fire("BUDGET", z3.And(gate_live, z3.Not(c.dense), c.spent)),
            hold(
                "HOLD",
                z3.And(gate_live, z3.Not(c.dense), z3.Not(c.spent)),
                {"h": s["h"] + 1, "x": s["x"]},
            ),
        )


class _DelayerIgnoresDisabled(_TwoBudgets):
    delayer_first = True


# -- a rank-local clock leaking into the decision ----------------------------------------


class _WallClockStall(DpMachine):
    def memory(self, p: Vars, s: Vars, o: Vars) -> dict[str, z3.ExprRef]:
        return {"q": o["F"], "g": z3.If(o["F"] > s["q"], o["clock"], s["g"])}

    def conditions(self, p: Vars, s: Vars, o: Vars) -> DpConditions:
        c = super().conditions(p, s, o)
        quiet = o["clock"] - self.memory(p, s, o)["g"]
        return replace(c, stalled=z3.And(p["S"] > 0, quiet >= p["S"]))


class _StallGap(DpMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cmds = super().commands(p, s, o)
        stall = next(c for c in cmds if c.name == "STALL")
        quiet = o["t"] - self.memory(p, s, o)["g"]
        return patch(cmds, "STALL", guard=z3.And(stall.guard, quiet > p["S"]))


class _AlignedOverlap(DpMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        guard = z3.And(c.waiting, c.enabled, c.decoding, z3.Not(c.pressured), c.aligned)
        return patch(super().commands(p, s, o), "ALIGNED", guard=guard)  # forgets not-dense


class _KvOverlap(DpMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        guard = z3.And(c.waiting, c.decoding, c.pressured)  # forgets enabled
        return patch(super().commands(p, s, o), "KV_PRESSURE", guard=guard)


# -- the paced mode: where PACED sits, and the cap it carries ----------------------------


def _paced_cap(cap: Callable[[Vars, Vars, Vars], z3.ExprRef]) -> type[DpMachine]:
    """The spec machine with PACED's cap replaced."""

    class _M(DpMachine):
        def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
            cmds = super().commands(p, s, o)
            was = next(c for c in cmds if c.name == "PACED")
            return patch(cmds, "PACED", out=dict(was.out) | {"cap": cap(p, s, o)})

    return _M


class _PacedBelowValves(DpMachine):
    """PACED only where HOLD would be: ALIGNED, STALL and BUDGET still fire in paced mode."""

    def conditions(self, p: Vars, s: Vars, o: Vars) -> DpConditions:
        return replace(super().conditions(p, s, o), paced=z3.BoolVal(False))

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cmds = super().commands(p, s, o)
        hold = next(c for c in cmds if c.name == "HOLD").guard
        cmds = patch(cmds, "PACED", guard=z3.And(hold, p["pc"]))
        return patch(cmds, "HOLD", guard=z3.And(hold, z3.Not(p["pc"])))


class _PacedBeforeDense(DpMachine):
    """PACED ahead of DENSE: a tick where every rank fills a dense pass is capped."""

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        calm = z3.And(c.waiting, c.enabled, c.decoding, z3.Not(c.pressured))
        cmds = patch(super().commands(p, s, o), "PACED", guard=z3.And(calm, c.paced))
        return patch(cmds, "DENSE", guard=z3.And(calm, c.dense, z3.Not(c.paced)))


_CATALOG: dict[str, tuple[type[DpMachine], str]] = {
    "two_budgets": (
        _TwoBudgets,
        "cross-rank delayer with its own K-pass budget in front of a per-rank gate with another "
        "(flaw 4): the holds add up",
    ),
    "delayer_ignores_disabled": (
        _DelayerIgnoresDisabled,
        "the cross-rank delayer holds even when the gate is disabled",
    ),
    "local_dense": (
        _cond(dense=lambda m, p, s, o, c: o["lfl"] == 1),
        "density judged on this rank's own queue (the original's local 'prefillable')",
    ),
    "local_tail_escape": (
        _cond(decoding=lambda m, p, s, o, c: o["ld"] > 0),
        "tail escape on this rank's decodes only",
    ),
    "wall_clock_stall": (
        _WallClockStall,
        "stall valve timed by this rank's wall clock instead of the shared tick",
    ),
    "local_hold_counter": (
        _counts("HOLD", lambda p, s, o: z3.If(o["lw"] == 1, s["h"] + 1, s["h"])),
        "hold counter advances only on ranks with waiting work of their own",
    ),
    "tail_escape_dropped": (
        _cond(decoding=lambda m, p, s, o, c: z3.BoolVal(True)),
        "no tail escape: holds while no rank decodes",
    ),
    "budget_off_by_one": (
        _cond(spent=lambda m, p, s, o, c: s["h"] >= p["K"]),
        "budget fires at h >= K instead of h + 1 >= K",
    ),
    "count_while_empty": (
        _counts("EMPTY", lambda p, s, o: s["h"] + 1),
        "counter advances on ticks where nothing waits",
    ),
    "hold_not_counted": (
        _counts("HOLD", lambda p, s, o: s["h"]),
        "a HOLD does not advance the counter",
    ),
    "growth_resets_budget": (
        _counts("HOLD", lambda p, s, o: z3.If(o["F"] > s["q"], z3.IntVal(1), s["h"] + 1)),
        "a growing queue restarts the hold budget (steady arrivals hold forever)",
    ),
    "stall_gap": (_StallGap, "STALL guard t - g > S leaves t - g = S uncovered"),
    "kv_overlap": (_KvOverlap, "KV_PRESSURE guard forgets enabled, overlapping DISABLED"),
    "disabled_ignored": (
        _cond(enabled=lambda m, p, s, o, c: z3.BoolVal(True)),
        "the enabled flag is ignored",
    ),
    "dense_strict": (
        _filled_or(lambda p, o: z3.And(o["W"] == p["N"], o["F"] > p["T"] * p["N"])),
        "dense test F > T*N instead of F >= T*N",
    ),
    "dense_any_rank": (
        _filled_or(lambda p, o: z3.And(o["W"] >= 1, o["F"] >= p["T"] * p["N"])),
        "dense without every rank waiting or one filled: idle ranks decode through a mixed tick",
    ),
    "dense_unscaled": (
        _filled_or(lambda p, o: z3.And(o["W"] == p["N"], o["F"] >= p["T"])),
        "fill threshold not scaled by the number of ranks",
    ),
    "dense_world_fill": (
        _cond(dense=lambda m, p, s, o, c: everyone_dense(p, o)),
        "DENSE only once every rank waits with the world's fill: a filled rank held by cold ones",
    ),
    "idle_rank_held": (
        _cond(decoding=lambda m, p, s, o, c: o["D"] > 0),
        "a rank with waiting work and no decode held while other ranks decode",
    ),
    "aligned_waits_for_vacant": (
        _cond(aligned=lambda m, p, s, o, c: z3.And(p["al"], o["W"] == p["N"], s["h"] >= p["A"])),
        "ALIGNED waits for vacant ranks (nothing waiting or decoding) to get work",
    ),
    "stall_zero_not_off": (
        _cond(
            stalled=lambda m, p, s, o, c: o["t"] - m.memory(p, s, o)["g"] >= p["S"],
        ),
        "stall_ticks = 0 means 'stalled at once' instead of 'valve off'",
    ),
    "kv_valve_ignores_flag": (
        _cond(pressured=lambda m, p, s, o, c: o["P"] > 0),
        "KV-pressure valve fires even when configured off",
    ),
    "aligned_any_rank": (
        _cond(aligned=lambda m, p, s, o, c: z3.And(p["al"], o["W"] >= 1, s["h"] >= p["A"])),
        "aligned release once any rank waits: idle ranks decode through a mixed tick",
    ),
    "aligned_off_by_one": (
        _cond(
            aligned=lambda m, p, s, o, c: z3.And(p["al"], _waiting_or_vacant(p, o), s["h"] > p["A"])
        ),
        "aligned release at h > A instead of h >= A: one more held tick once aligned",
    ),
    "aligned_ignores_flag": (
        _cond(aligned=lambda m, p, s, o, c: z3.And(_waiting_or_vacant(p, o), s["h"] >= p["A"])),
        "aligned release fires even when configured off",
    ),
    "aligned_local": (
        _cond(aligned=lambda m, p, s, o, c: z3.And(p["al"], o["lw"] == 1, s["h"] >= p["A"])),
        "aligned release judged on this rank's own queue",
    ),
    "aligned_overlap": (_AlignedOverlap, "ALIGNED guard forgets not-dense, overlapping DENSE"),
    "aligned_keeps_count": (
        _counts("ALIGNED", lambda p, s, o: s["h"]),
        "an ALIGNED release does not end the episode: the next one starts part-spent",
    ),
    "paced_holds_first_tick": (
        _cond(paced=lambda m, p, s, o, c: z3.And(p["pc"], s["h"] >= 1)),
        "paced mode holds the first tick of an episode (PACED only from h >= 1)",
    ),
    "paced_only_all_waiting": (
        _cond(paced=lambda m, p, s, o, c: z3.And(p["pc"], o["W"] == p["N"])),
        "paced release only once every rank waits: a tick with an idle rank holds",
    ),
    "paced_below_valves": (
        _PacedBelowValves,
        "PACED only where HOLD would be: ALIGNED, STALL and BUDGET still fire in paced mode",
    ),
    "busy_aligned_too": (
        _busy_slip(unaligned=False),
        "the busy wait holds an aligned release too (every rank waiting or vacant)",
    ),
    "busy_holds_no_decode": (
        _busy_slip(decoded=False),
        "the busy wait holds a tick where a waiting rank has no decode",
    ),
    "busy_strict": (
        _busy_slip(strict=True),
        "the busy wait needs more than busy_decodes decodes, not at least",
    ),
    "busy_local": (
        _busy_slip(own=True),
        "the busy wait judged on this rank's own decodes: ranks hold and fire on one tick",
    ),
    "paced_before_dense": (
        _PacedBeforeDense,
        "PACED ahead of DENSE: a tick where every rank can fill a dense pass is capped",
    ),
    "paced_cap_dense_tokens": (
        _paced_cap(lambda p, s, o: p["B"]),
        "the paced cap is dense_tokens, not the configured pace_tokens",
    ),
    "paced_uncapped": (
        _paced_cap(lambda p, s, o: z3.IntVal(0)),
        "a PACED fire carries no cap",
    ),
    "paced_cap_split": (
        _paced_cap(lambda p, s, o: z3.If(p["Cp"] >= p["N"], p["Cp"] / p["N"], 1)),
        "the cap split across the ranks (pace_tokens / N each), below c_min on N >= 2 ranks",
    ),
    "paced_local_cap": (
        _paced_cap(lambda p, s, o: z3.If(o["lw"] == 1, p["Cp"], 0)),
        "the cap only on ranks with waiting work of their own: an idle rank fires uncapped",
    ),
    "surge_ignored": (
        _paced_cap(lambda p, s, o: p["Cp"]),
        "a tick with a filled rank keeps pace_tokens: the surge cap is never given",
    ),
    "surge_always": (
        _paced_cap(lambda p, s, o: p["Cs"]),
        "every PACED tick carries the surge cap, filled rank or not",
    ),
    "surge_on_aggregate": (
        _paced_cap(lambda p, s, o: z3.If(o["F"] >= p["T"], p["Cs"], p["Cp"])),
        "the surge judged on the aggregate fill (T tokens over all ranks), not on a filled rank",
    ),
    "surge_local": (
        _paced_cap(lambda p, s, o: z3.If(o["lfl"] == 1, p["Cs"], p["Cp"])),
        "the surge judged on this rank's own fill: ranks cap differently on one tick",
    ),
}


DP_MUTANTS: dict[str, Mutant] = {
    name: named_mutant("dp", name, description, cls())
    for name, (cls, description) in _CATALOG.items()
}
"""Every broken aligned gate (as a single rank), by name; each is refuted by a D obligation."""
