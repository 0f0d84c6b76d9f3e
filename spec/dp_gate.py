"""The aligned gate (any number of DP ranks) as a Z3 guarded-command machine.

One rank's copy of the gate. Parameters: ``B`` (dense_tokens), ``K``
(max_hold_passes), ``N`` >= 1 ranks (symbolic, unbounded), ``T`` the per-rank
fill threshold ``ceil(target_fill * B)``, ``S`` stall ticks (0 = off), ``kv``
(KV-pressure valve on), ``enabled``, ``al`` (the aligned release on) and ``A``
(its ``align_ticks``: fire once every rank waits and ``h >= A``), ``pc`` (the paced
mode on) and ``Cp`` (its cap, ``pace_tokens``; a cost model outside the spec picks it,
so the spec takes any value in ``[cmin, cmax]``, the least prefill a fire runs and the
pass's token budget, which the gate itself never reads). State: ``h``
(ticks the episode has been held) and the stall memory ``q`` (last aggregate
fill) and ``g`` (tick it last grew). The observation is the SUM-reduced vector
every rank sees alike (``W``
ranks waiting, ``F`` aggregate capped fill, ``D`` decodes, ``P`` ranks under KV
pressure, ``C`` ranks mid chunked prefill, ``t`` the shared tick) plus this
rank's own summand and wall clock, which the gate must ignore. Outputs: ``fire``,
``reason`` and ``cap`` (the prefill-token cap of a FIRE, 0 for none). Keeping the local
view in the observation is what lets a mutant leak it, and the two-rank product
(``pair``) catch the leak: agreement is a theorem, not an absence of variables.
Ticks are any non-negative ints: nothing proved assumes they increase, so a
skipped or repeated tick can only shift when STALL fires.

``one_rank`` states the refinement: with ``N = 1``, ``T = B``, ``S = 0``, the KV
valve, the aligned release and the paced mode off, this machine and
``densegate.spec.gate.GATE`` take the same decision on the same pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import ClassVar

import z3

from densegate.spec import gate as single
from densegate.spec.machine import Command, Machine, Sort, Vars

__all__ = ["DP", "LOCAL", "REASONS", "SHARED", "DpConditions", "DpMachine", "DpReason",
           "one_rank", "pair", "reason", "same_reason"]  # fmt: skip

REASONS = (*single.REASONS, "KV_PRESSURE", "STALL", "ALIGNED", "PACED")
"""In ``densegate.impl.Reason`` order: the single-rank six, then the aligned gate's rules."""
DpReason, _reason_values = z3.EnumSort("DpReason", list(REASONS))
_BY_NAME = dict(zip(REASONS, _reason_values, strict=True))

SHARED = ("W", "F", "D", "P", "C", "t")
"""The reduced vector and the tick: identical on every rank by construction."""
LOCAL = ("lw", "lf", "ld", "lp", "clock")
"""This rank's own (l for local) waiting bit, capped tokens, decodes, KV bit, and its wall
clock: different on every rank, and never to be read by the decision."""


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
    Paced mode: a tick ALIGNED, STALL, BUDGET or HOLD would take fires PACED with cap Cp."""

    shared_obs: ClassVar[tuple[str, ...]] = SHARED

    def __init__(self) -> None:
        self.name = "dp"
        names = ("B", "K", "N", "T", "S", "kv", "enabled", "al", "A", "pc", "Cp", "cmin", "cmax")
        bools = ("kv", "enabled", "al", "pc")
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
        )

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(s["h"] == 0, s["q"] == 0, s["g"] == 0)

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """The reduced vector is a sum of N rank vectors, one of which is this rank's."""
        B, N = p["B"], p["N"]
        W, F, D, P, C = o["W"], o["F"], o["D"], o["P"], o["C"]
        reduced = [
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
        same = z3.And(N == 1, *[o1[k] == o2[k] for k in LOCAL])
        distinct = z3.And(
            N >= 2,
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
            decoding=o["D"] > 0,
            pressured=z3.And(p["kv"], o["P"] > 0),
            dense=z3.And(o["W"] == p["N"], o["F"] >= p["T"] * p["N"]),
            aligned=z3.And(p["al"], o["W"] == p["N"], s["h"] >= p["A"]),
            stalled=z3.And(p["S"] > 0, o["t"] - grew_at >= p["S"]),
            spent=s["h"] + 1 >= p["K"],
            paced=p["pc"],
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        mem = self.memory(p, s, o)
        live = z3.And(c.waiting, c.enabled, c.decoding)
        calm = z3.And(live, z3.Not(c.pressured))
        sparse = z3.And(calm, z3.Not(c.dense))
        held = z3.And(sparse, z3.Not(c.paced))  # paced mode never gets past PACED
        thin = z3.And(held, z3.Not(c.aligned))
        slow = z3.And(thin, z3.Not(c.stalled))
        return (
            _fire("EMPTY", z3.Not(c.waiting), mem),
            _fire("DISABLED", z3.And(c.waiting, z3.Not(c.enabled)), mem),
            _fire("NO_DECODE", z3.And(c.waiting, c.enabled, z3.Not(c.decoding)), mem),
            _fire("KV_PRESSURE", z3.And(live, c.pressured), mem),
            _fire("DENSE", z3.And(calm, c.dense), mem),
            _fire("PACED", z3.And(sparse, c.paced), mem, p["Cp"]),
            _fire("ALIGNED", z3.And(held, c.aligned), mem),
            _fire("STALL", z3.And(thin, c.stalled), mem),
            _fire("BUDGET", z3.And(slow, c.spent), mem),
            _hold(z3.And(slow, z3.Not(c.spent)), {"h": s["h"] + 1, **mem}),
        )


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


# -- products: two machines stepped together on related inputs --------------------------


class _Pair(Machine):
    """Ranks 1 and 2 of ``base``: one reduced vector and tick, two local views."""

    def __init__(self, base: DpMachine) -> None:
        self.base = base
        self.name = f"pair({base.name})"
        shared = base.shared_obs
        self.param_sorts = dict(base.param_sorts)
        self.state_sorts = {f"{k}{i}": v for i in (1, 2) for k, v in base.state_sorts.items()}
        self.obs_sorts = {k: v for k, v in base.obs_sorts.items() if k in shared} | {
            f"{k}{i}": v for i in (1, 2) for k, v in base.obs_sorts.items() if k not in shared
        }
        self.out_sorts = {f"{k}{i}": v for i in (1, 2) for k, v in base.out_sorts.items()}

    def _states(self, s: Vars) -> list[Vars]:
        return [{k: s[f"{k}{i}"] for k in self.base.state_sorts} for i in (1, 2)]

    def _views(self, s: Vars, o: Vars) -> list[tuple[Vars, Vars]]:
        shared = self.base.shared_obs
        obs = [
            {k: o[k] if k in shared else o[f"{k}{i}"] for k in self.base.obs_sorts} for i in (1, 2)
        ]
        return list(zip(self._states(s), obs, strict=True))

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return self.base.param_ok(p)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(*[self.base.init(p, st) for st in self._states(s)])

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        (s1, o1), (s2, o2) = self._views(s, o)
        return z3.And(
            self.base.obs_ok(p, s1, o1),
            self.base.obs_ok(p, s2, o2),
            self.base.two_ranks_ok(p, o1, o2),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        (s1, o1), (s2, o2) = self._views(s, o)
        cmds = []
        for c1, c2 in product(self.base.commands(p, s1, o1), self.base.commands(p, s2, o2)):
            out = {f"{k}1": v for k, v in c1.out.items()} | {f"{k}2": v for k, v in c2.out.items()}
            nxt = {f"{k}1": v for k, v in c1.next.items()} | {
                f"{k}2": v for k, v in c2.next.items()
            }
            cmds.append(Command(f"{c1.name}|{c2.name}", z3.And(c1.guard, c2.guard), out, nxt))
        return cmds


def pair(base: DpMachine) -> Machine:
    """The two-copy product of ``base``: any two of the N ranks, stepped together.

    Every rank receives the same reduced vector and tick; what differs is its
    own summand and clock. If two copies with equal state always decide alike
    and stay equal, then by induction all N ranks do, for every N.
    """
    return _Pair(base)


class _OneRank(Machine):
    """``GATE`` and one aligned rank configured like it, fed the same pass."""

    def __init__(self, dp: DpMachine, gate: Machine) -> None:
        self.dp, self.gate = dp, gate
        self.name = f"one_rank({dp.name})"
        extra: dict[str, Sort] = {"P": z3.Int, "C": z3.Int, "t": z3.Int, "clock": z3.Int}
        self.param_sorts = dict(gate.param_sorts)
        self.state_sorts = dict(gate.state_sorts) | {
            f"dp_{k}": v for k, v in dp.state_sorts.items()
        }
        self.obs_sorts = dict(gate.obs_sorts) | extra
        self.out_sorts = dict(gate.out_sorts) | {f"dp_{k}": v for k, v in dp.out_sorts.items()}

    def _dp_params(self, p: Vars) -> Vars:
        one, zero, off = z3.IntVal(1), z3.IntVal(0), z3.BoolVal(False)
        same = {k: p[k] for k in ("B", "K", "enabled")}
        return same | {"N": one, "T": p["B"], "S": zero, "kv": off, "al": off, "A": zero} | {
            "pc": off, "Cp": one, "cmin": one, "cmax": one}  # fmt: skip

    def _dp_obs(self, p: Vars, o: Vars) -> Vars:
        """What the rank's vector sums to when it is alone: its own, capped at B."""
        w, B = o["w"], p["B"]
        waiting = z3.If(w > 0, z3.IntVal(1), z3.IntVal(0))
        fill = z3.If(w >= B, B, w)
        return {
            "W": waiting,
            "F": fill,
            "D": o["d"],
            "P": o["P"],
            "C": o["C"],
            "t": o["t"],
            "lw": waiting,
            "lf": fill,
            "ld": o["d"],
            "lp": o["P"],
            "clock": o["clock"],
        }

    def _split(self, s: Vars) -> tuple[Vars, Vars]:
        return (
            {k: s[k] for k in self.gate.state_sorts},
            {k: s[f"dp_{k}"] for k in self.dp.state_sorts},
        )

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(self.gate.param_ok(p), self.dp.param_ok(self._dp_params(p)))

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        sg, sd = self._split(s)
        return z3.And(self.gate.init(p, sg), self.dp.init(self._dp_params(p), sd))

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        sg, sd = self._split(s)
        og = {k: o[k] for k in self.gate.obs_sorts}
        return z3.And(
            self.gate.obs_ok(p, sg, og),
            self.dp.obs_ok(self._dp_params(p), sd, self._dp_obs(p, o)),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        sg, sd = self._split(s)
        og = {k: o[k] for k in self.gate.obs_sorts}
        dcmds = self.dp.commands(self._dp_params(p), sd, self._dp_obs(p, o))
        cmds = []
        for cg, cd in product(self.gate.commands(p, sg, og), dcmds):
            out = dict(cg.out) | {f"dp_{k}": v for k, v in cd.out.items()}
            nxt = dict(cg.next) | {f"dp_{k}": v for k, v in cd.next.items()}
            cmds.append(Command(f"{cg.name}~{cd.name}", z3.And(cg.guard, cd.guard), out, nxt))
        return cmds


def one_rank(dp: DpMachine, gate: Machine = single.GATE) -> Machine:
    """The refinement product: ``dp`` with N = 1, T = B, S = 0, KV valve, aligned release and
    paced mode off, beside ``gate``.

    Observation: the single-rank pass (``w`` uncapped, ``d``) plus the inputs
    the one-rank configuration must ignore (KV bit ``P``, chunk bit ``C``, tick
    ``t``, clock).
    """
    return _OneRank(dp, gate)
