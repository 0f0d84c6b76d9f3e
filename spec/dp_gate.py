"""The aligned gate (any number of DP ranks) as a Z3 guarded-command machine.

One rank's copy of the gate. Parameters: ``B`` (dense_tokens), ``K``
(max_hold_passes), ``N`` >= 1 ranks (symbolic, unbounded), ``T`` the per-rank
fill threshold ``ceil(target_fill * B)``, ``S`` stall ticks (0 = off), ``kv``
(KV-pressure valve on), ``enabled``, ``al`` (the aligned release on) and ``A``
(its ``align_ticks``: fire once every rank waits or is vacant and ``h >= A``), ``pc`` (the paced
mode on), ``Cp`` (its cap, ``pace_tokens``) and ``Cs`` (its surge cap, ``surge_tokens``,
the cap of a PACED tick where some rank can fill a dense pass on its own; ``Cs = Cp`` with
the surge off), ``bz`` (the paced mode's busy wait on) and ``Db`` (its ``busy_decodes``: a tick
the paced mode would fire goes to the hold rules while some rank is neither waiting nor vacant,
``D >= Db`` and ``Nd = 0``). A cost model outside the spec picks both caps, so the spec takes
them as any values with ``cmin <= Cp <= Cs <= cmax``: ``cmin`` the least prefill a fire runs,
``cmax`` the pass's token budget, which the gate itself never reads. State: ``h``
(ticks the episode has been held) and the stall memory ``q`` (last aggregate
fill) and ``g`` (tick it last grew). The observation is the SUM-reduced vector
every rank sees alike (``W``
ranks waiting, ``F`` aggregate capped fill, ``D`` decodes, ``P`` ranks under KV
pressure, ``C`` ranks mid chunked prefill, ``Fl`` ranks whose own capped fill reaches
``T``, ``Nd`` waiting ranks with no decode, ``Va`` vacant ranks (nothing waiting, nothing
decoding), ``t`` the shared tick) plus this rank's own summand and wall clock, which the
gate must ignore. The per-rank counts are what keep one rank's emptiness from holding
another: a filled rank fires DENSE, a no-decode rank NO_DECODE, and ALIGNED does not
wait for vacant ranks. Outputs: ``fire``,
``reason`` and ``cap`` (the prefill-token cap of a FIRE, 0 for none). Keeping the local
view in the observation is what lets a mutant leak it, and the two-rank product
(``densegate.spec.dp_products.pair``) catch the leak: agreement is a theorem, not an
absence of variables.
Ticks are any non-negative ints: nothing proved assumes they increase, so a
skipped or repeated tick can only shift when STALL fires.

``densegate.spec.dp_products.one_rank`` states the refinement: with ``N = 1``,
``T = B``, ``S = 0``, the KV valve, the aligned release and the paced mode off, this
machine and
``densegate.spec.gate.GATE`` take the same decision on the same pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import z3

from densegate.spec import gate as single
from densegate.spec.machine import Command, Machine, Vars

__all__ = ["DP", "LOCAL", "REASONS", "SHARED", "DpConditions", "DpMachine", "DpReason",
           "busy", "everyone_dense", "reason", "same_reason", "surge_cap"]  # fmt: skip

REASONS = (*single.REASONS, "KV_PRESSURE", "STALL", "ALIGNED", "PACED")
"""In ``densegate.impl.Reason`` order: the single-rank six, then the aligned gate's rules."""
DpReason, _reason_values = z3.EnumSort("DpReason", list(REASONS))
_BY_NAME = dict(zip(REASONS, _reason_values, strict=True))

SHARED = ("W", "F", "D", "P", "C", "Fl", "Nd", "Va", "t")
"""The reduced vector and the tick: identical on every rank by construction."""
LOCAL = ("lw", "lf", "ld", "lp", "lfl", "lnd", "lva", "clock")
"""This rank's own (l for local) waiting bit, capped tokens, decodes, KV bit, filled,
no-decode and vacant bits, and its wall clock: different on every rank, and never to be
read by the decision."""


def reason(name: str) -> z3.ExprRef:
    """The Z3 constant of a reason, by the name ``densegate.impl.Reason`` uses."""
    return _BY_NAME[name]


def same_reason(gate_reason: z3.ExprRef, dp_reason: z3.ExprRef) -> z3.BoolRef:
    """The single-rank reason and the aligned one have the same name."""
    return z3.Or(
        *[z3.And(gate_reason == single.reason(n), dp_reason == reason(n)) for n in single.REASONS]
    )


def _reason_var(name: str) -> z3.ExprRef:
    return z3.Const(name, DpReason)


def _bit(x: z3.ArithRef) -> z3.BoolRef:
    return z3.Or(x == 0, x == 1)


@dataclass(frozen=True)
class DpConditions:
    """The aligned gate's atomic tests, all over the reduced vector and the state."""

    waiting: z3.BoolRef
    enabled: z3.BoolRef
    decoding: z3.BoolRef
    pressured: z3.BoolRef
    dense: z3.BoolRef
    aligned: z3.BoolRef
    stalled: z3.BoolRef
    spent: z3.BoolRef
    paced: z3.BoolRef


class DpMachine(Machine):
    """FIRE/HOLD per tick for every rank at once; every FIRE resets ``h``, HOLD adds one.
    Paced mode: a tick ALIGNED, STALL, BUDGET or HOLD would take fires PACED with cap Cp,
    or Cs where some rank is filled (``surge_cap``), but in the busy wait (``busy``)."""

    shared_obs: ClassVar[tuple[str, ...]] = SHARED

    def __init__(self) -> None:
        self.name = "dp"
        names = (
            "B",
            "K",
            "N",
            "T",
            "S",
            "kv",
            "enabled",
            "al",
            "A",
            "pc",
            "Cp",
            "Cs",
            "bz",
            "Db",
            "cmin",
            "cmax",
        )
        bools = ("kv", "enabled", "al", "pc", "bz")
        self.param_sorts = {k: z3.Bool if k in bools else z3.Int for k in names}
        self.state_sorts = {"h": z3.Int, "q": z3.Int, "g": z3.Int}
        self.obs_sorts = {k: z3.Int for k in (*SHARED, *LOCAL)}
        self.out_sorts = {"fire": z3.Bool, "reason": _reason_var, "cap": z3.Int}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(
            p["B"] >= 1,
            p["K"] >= 1,
            p["N"] >= 1,
            p["T"] >= 1,
            p["T"] <= p["B"],
            p["S"] >= 0,
            p["A"] >= 0,
            p["cmin"] >= 1,
            p["cmin"] <= p["Cp"],
            p["Cp"] <= p["cmax"],
            p["Cp"] <= p["Cs"],
            p["Cs"] <= p["cmax"],
            p["Db"] >= 1,
        )

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(s["h"] == 0, s["q"] == 0, s["g"] == 0)

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """The reduced vector is a sum of N rank vectors, one of which is this rank's."""
        B, N = p["B"], p["N"]
        W, F, D, P, C = o["W"], o["F"], o["D"], o["P"], o["C"]
        reduced = [
            *_counts_ok(N, W, o["Fl"], o["Nd"], o["Va"]),
            W >= 0,
            W <= N,
            W <= F,  # a waiting rank offers >= 1 token ...
            F <= W * B,  # ... and at most B once capped
            D >= 0,
            P >= 0,
            P <= N,
            C >= 0,
            C <= N,
            o["t"] >= 0,
        ]
        # The other N - 1 ranks' vectors sum to (reduced - local).
        rW, rF, rD = W - o["lw"], F - o["lf"], D - o["ld"]
        rP = P - o["lp"]
        local = [
            *_local_bits_ok(p, o),
            *_counts_ok(N - 1, rW, o["Fl"] - o["lfl"], o["Nd"] - o["lnd"], o["Va"] - o["lva"]),
            _bit(o["lw"]),
            (o["lw"] == 1) == (o["lf"] > 0),
            o["lf"] >= 0,
            o["lf"] <= B,
            o["ld"] >= 0,
            _bit(o["lp"]),
            o["clock"] >= 0,
            rW >= 0,
            rW <= N - 1,
            rF >= rW,
            rF <= rW * B,
            rD >= 0,
            z3.Implies(N == 1, rD == 0),
            rP >= 0,
            rP <= N - 1,
        ]
        return z3.And(*reduced, *local)

    def two_ranks_ok(self, p: Vars, o1: Vars, o2: Vars) -> z3.BoolRef:
        """Two local views of one reduced vector: the same rank (N = 1), or two different
        ranks whose summands fit in it beside N - 2 others (so a two-rank trace is real)."""
        B, N = p["B"], p["N"]
        rW = o1["W"] - o1["lw"] - o2["lw"]
        rF = o1["F"] - o1["lf"] - o2["lf"]
        rD = o1["D"] - o1["ld"] - o2["ld"]
        rP = o1["P"] - o1["lp"] - o2["lp"]
        rest = {k: o1[k] - o1[f"l{k.lower()}"] - o2[f"l{k.lower()}"] for k in ("Fl", "Nd", "Va")}
        same = z3.And(N == 1, *[o1[k] == o2[k] for k in LOCAL])
        distinct = z3.And(
            N >= 2,
            *_counts_ok(N - 2, rW, rest["Fl"], rest["Nd"], rest["Va"]),
            rW >= 0,
            rW <= N - 2,
            rF >= rW,
            rF <= rW * B,
            rD >= 0,
            z3.Implies(N == 2, rD == 0),
            rP >= 0,
            rP <= N - 2,
        )
        return z3.Or(same, distinct)

    def memory(self, p: Vars, s: Vars, o: Vars) -> dict[str, z3.ExprRef]:
        """Next stall memory: updated every tick, whatever the decision."""
        return {"q": o["F"], "g": z3.If(o["F"] > s["q"], o["t"], s["g"])}

    def conditions(self, p: Vars, s: Vars, o: Vars) -> DpConditions:
        grew_at = self.memory(p, s, o)["g"]
        return DpConditions(
            waiting=o["W"] > 0,
            enabled=p["enabled"],
            decoding=z3.And(o["D"] > 0, z3.Or(o["Nd"] == 0, p["pc"])),
            pressured=z3.And(p["kv"], o["P"] > 0),
            dense=z3.Or(everyone_dense(p, o), z3.And(o["Fl"] > 0, z3.Not(p["pc"]))),
            aligned=z3.And(p["al"], o["W"] + o["Va"] == p["N"], s["h"] >= p["A"]),
            stalled=z3.And(p["S"] > 0, o["t"] - grew_at >= p["S"]),
            spent=s["h"] + 1 >= p["K"],
            paced=z3.And(p["pc"], z3.Not(busy(p, o))),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        mem = self.memory(p, s, o)
        live = z3.And(c.waiting, c.enabled, c.decoding)
        calm = z3.And(live, z3.Not(c.pressured))
        sparse = z3.And(calm, z3.Not(c.dense))
        held = z3.And(sparse, z3.Not(c.paced))  # paced mode gets past PACED only when busy
        thin = z3.And(held, z3.Not(c.aligned))
        slow = z3.And(thin, z3.Not(c.stalled))
        return (
            _fire("EMPTY", z3.Not(c.waiting), mem),
            _fire("DISABLED", z3.And(c.waiting, z3.Not(c.enabled)), mem),
            _fire("NO_DECODE", z3.And(c.waiting, c.enabled, z3.Not(c.decoding)), mem),
            _fire("KV_PRESSURE", z3.And(live, c.pressured), mem),
            _fire("DENSE", z3.And(calm, c.dense), mem),
            _fire("PACED", z3.And(sparse, c.paced), mem, surge_cap(p, o)),
            _fire("ALIGNED", z3.And(held, c.aligned), mem),
            _fire("STALL", z3.And(thin, c.stalled), mem),
            _fire("BUDGET", z3.And(slow, c.spent), mem),
            _hold(z3.And(slow, z3.Not(c.spent)), {"h": s["h"] + 1, **mem}),
        )


def everyone_dense(p: Vars, o: Vars) -> z3.BoolRef:
    """Every rank waits and the aggregate reaches T tokens per rank: the paced mode's only
    uncapped release, and beside any filled rank the plain mode's DENSE."""
    return z3.And(o["W"] == p["N"], o["F"] >= p["T"] * p["N"])


def busy(p: Vars, o: Vars) -> z3.BoolRef:
    """The paced mode's busy wait: on, some rank neither waits nor is vacant (a release now
    would be unaligned), the ranks decode at least ``Db`` requests and every waiting rank
    decodes (so no rank without decodes is held)."""
    return z3.And(p["bz"], o["W"] + o["Va"] < p["N"], o["D"] >= p["Db"], o["Nd"] == 0)


def surge_cap(p: Vars, o: Vars) -> z3.ArithRef:
    """A PACED tick's cap: ``Cs`` where some rank's own capped fill reaches ``T`` (that rank
    holds a dense pass's worth, which ``Cp`` would take ``B / Cp`` ticks to clear), else ``Cp``.
    A function of the reduced vector alone, so every rank caps alike."""
    return z3.If(o["Fl"] > 0, p["Cs"], p["Cp"])


def _counts_ok(
    n: z3.ArithRef, w: z3.ArithRef, fl: z3.ArithRef, nd: z3.ArithRef, va: z3.ArithRef
) -> list[z3.BoolRef]:
    """``n`` ranks, ``w`` of them waiting: filled and no-decode ranks are waiting ones,
    vacant ones are not."""
    return [fl >= 0, fl <= w, nd >= 0, nd <= w, va >= 0, va <= n - w]


def _local_bits_ok(p: Vars, o: Vars) -> list[z3.BoolRef]:
    """This rank's filled, no-decode and vacant bits, as its own queue defines them."""
    lw, ld = o["lw"], o["ld"]
    return [
        _bit(o["lfl"]),
        (o["lfl"] == 1) == (o["lf"] >= p["T"]),
        _bit(o["lnd"]),
        (o["lnd"] == 1) == z3.And(lw == 1, ld == 0),
        _bit(o["lva"]),
        (o["lva"] == 1) == z3.And(lw == 0, ld == 0),
    ]


def _fire(
    name: str, guard: z3.BoolRef, mem: Mapping[str, z3.ExprRef], cap: z3.ArithRef | None = None
) -> Command:
    out = {
        "fire": z3.BoolVal(True),
        "reason": reason(name),
        "cap": z3.IntVal(0) if cap is None else cap,
    }
    return Command(name, guard, out, {"h": z3.IntVal(0), **mem})


def _hold(guard: z3.BoolRef, nxt: Mapping[str, z3.ExprRef]) -> Command:
    out = {"fire": z3.BoolVal(False), "reason": reason("HOLD"), "cap": z3.IntVal(0)}
    return Command("HOLD", guard, out, nxt)


DP = DpMachine()
"""The aligned gate as specified; proofs and agreement tests use this one instance."""
