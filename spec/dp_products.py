"""Products of the aligned gate: two machines stepped together on related inputs.

``pair`` runs two ranks of ``densegate.spec.dp_gate.DP`` on one reduced vector (D1:
agreement for every N); ``one_rank`` runs one aligned rank beside the single-rank gate
(D6: refinement). Kept apart from the machine so the machine's module holds one thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product

import z3

from densegate.spec import gate as single
from densegate.spec.dp_gate import DpMachine
from densegate.spec.machine import Command, Machine, Sort, Vars

__all__ = ["one_rank", "pair"]


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
            "pc": off, "Cp": one, "Cs": one, "bz": off, "Db": one, "cmin": one,
            "cmax": one}  # fmt: skip

    def _dp_obs(self, p: Vars, o: Vars) -> Vars:
        """What the rank's vector sums to when it is alone: its own, capped at B."""
        w, d, B = o["w"], o["d"], p["B"]
        one, zero = z3.IntVal(1), z3.IntVal(0)
        waiting = z3.If(w > 0, one, zero)
        fill = z3.If(w >= B, B, w)
        filled = z3.If(w >= B, one, zero)
        no_decode = z3.If(z3.And(w > 0, d == 0), one, zero)
        vacant = z3.If(z3.And(w <= 0, d == 0), one, zero)
        shared = {"W": waiting, "F": fill, "D": d, "P": o["P"], "C": o["C"], "Fl": filled,
                  "Nd": no_decode, "Va": vacant, "t": o["t"]}  # fmt: skip
        local = {"lw": waiting, "lf": fill, "ld": d, "lp": o["P"], "lfl": filled,
                 "lnd": no_decode, "lva": vacant, "clock": o["clock"]}  # fmt: skip
        return shared | local

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
