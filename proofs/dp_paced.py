"""D9-D12: the aligned gate's paced mode (``AlignedGateConfig.pace_tokens``), for all
parameters and any N.

D9 and D10 are one-step properties of ``densegate.spec.dp_gate.DP`` itself (paced mode
on or off, every cap in ``[cmin, cmax]``). D11 bounds a request's wait for its first
token on ``PacedQueue``, the gate composed with a counter of the tokens ahead of the
request on its rank, by induction over the ticks and for every ``Q`` and ``cmin``, under
the assumption its statement names. D12 proves the cap rule (``CapRule``, the model of
``densegate.impl.sched.cap.capped_prefill``) by induction over the planned items, for
any number of them and every cap. D1-D8 (``densegate.proofs.dp_obligations``) hold with
the paced mode on and off alike: ``pc`` is a free parameter of their machines, except
D6's one-rank product, which fixes it off. The broken gates are
``densegate.proofs.dp_mutants``'s ``paced_*``; the broken cap rules are here.
"""

from __future__ import annotations

from collections.abc import Mapping

import z3

from densegate.proofs.common import named_mutant, true_invariant
from densegate.proofs.dp_mutants import DP_MUTANTS
from densegate.proofs.dp_paced_machines import CAP_RULE, PACED_QUEUE, CapRule, PacedQueue, least
from densegate.proofs.obligation import Monitor, Mutant, Obligation, Prop, Step
from densegate.spec.dp_gate import DP, DpMachine, reason
from densegate.spec.machine import Vars

__all__ = ["PACED_MUTANTS", "PACED_OBLIGATIONS", "PACED_STATEMENTS", "first_token_lemma"]

PACED_STATEMENTS: Mapping[str, str] = {
    "D9": "paced mode holds only busy ticks: with it on, every tick FIREs whatever the reduced "
    "vector (so no HOLD while work waits, W > 0) and ALIGNED, STALL and BUDGET never fire, "
    "except on a busy tick (the busy wait on, some rank neither waiting nor vacant, W + Va < N, "
    "D >= busy_decodes and no waiting rank without decodes, Nd = 0), which never fires PACED "
    "(and is held at most K - 1 ticks in a row: D2); PACED only with it on",
    "D10": "paced cap: a decision's cap is Cp (the configured pace_tokens) on a PACED fire "
    "where no rank is filled, Cs (surge_tokens) on one where some rank's own fill reaches T "
    "(Fl > 0), and none (0) on every other, so every capped fire has cmin <= cap <= cmax (the "
    "spec takes any cmin <= Cp <= Cs <= cmax); a tick where every rank waits and F >= T*N "
    "is uncapped",
    "D11": "first token, paced (busy wait off): a request with Q >= 1 prefill tokens ahead of it "
    "on its rank "
    "(its own included) gets its first token within ceil(Q/cmin) ticks, whatever the other "
    "ranks do: each tick k it still waits has (k-1)*cmin < Q, so k <= ceil(Q/cmin) (by "
    "induction over the ticks, for every Q and cmin, on the gate composed with a counter "
    "of the tokens ahead); assumed, not proved of the scheduler: a tick the gate FIREs "
    "prefills at least min(tokens ahead, cmin, its cap) of them (D12: the cap keeps "
    "min(planned, cap) with chunked prefill on), a HOLD none",
    "D12": "cap rule (capped_prefill): over any number of planned owed chunks, then "
    "admissions, and every cap >= 1, the kept sizes sum to <= cap, each is <= its planned "
    "size, nothing is kept after an item cut or dropped (the kept lists are prefixes, only "
    "their last item cut), an admission is kept whole or not at all with chunked prefill "
    "off, and with it on (or over owed chunks only) the kept sizes sum to exactly "
    "min(planned, cap) (by induction over the items, one per step)",
}
"""The statements, as the report prints them."""


def _readable(p: Vars) -> z3.BoolRef:
    small = {"B": 8, "K": 4, "N": 3, "S": 3, "A": 3, "Cp": 4, "Cs": 6, "cmax": 6, "Q": 6,
             "cap": 6, "Db": 6}  # fmt: skip
    return z3.And(*[p[k] <= v for k, v in small.items() if k in p])


def _busy(p: Vars, o: Vars) -> z3.BoolRef:
    """Stated apart from the machine's ``busy``, so a mutant cannot change the property's test."""
    return z3.And(p["bz"], o["W"] + o["Va"] < p["N"], o["D"] >= p["Db"], o["Nd"] == 0)


def _d9(st: Step) -> z3.BoolRef:
    p, out = st.p, st.out
    never = [out["reason"] != reason(n) for n in ("ALIGNED", "STALL", "BUDGET")]
    calm = z3.And(p["pc"], z3.Not(_busy(p, st.o)))
    return z3.And(
        z3.Implies(calm, z3.And(out["fire"], *never)),
        z3.Implies(out["reason"] == reason("PACED"), calm),
    )


def _dense(p: Vars, o: Vars) -> z3.BoolRef:
    """Stated apart from the machine, so a mutant cannot change the property's test."""
    return z3.And(o["W"] == p["N"], o["F"] >= p["T"] * p["N"])


def _d10(st: Step) -> z3.BoolRef:
    p, o, cap = st.p, st.o, st.out["cap"]
    paced = st.out["reason"] == reason("PACED")
    pace = z3.If(o["Fl"] > 0, p["Cs"], p["Cp"])  # stated apart from the machine's surge_cap
    return z3.And(
        cap == z3.If(paced, pace, 0),
        z3.Implies(paced, z3.And(p["cmin"] <= cap, cap <= p["cmax"])),
        z3.Implies(_dense(p, o), cap == 0),
    )


# -- D11: the first token, on the gate composed with the tokens ahead -----------------------

_TICKS = Monitor("n", z3.Int, lambda p: z3.IntVal(0), lambda st: st.s["n"] + 1)
"""Ticks since the request's wait began (the one now is tick n + 1)."""


def _d11(st: Step) -> z3.BoolRef:
    p, s = st.p, st.s
    return z3.Implies(z3.And(p["pc"], z3.Not(p["bz"]), s["r"] > 0), s["n"] * p["cmin"] < p["Q"])


def _d11_inv(p: Vars, s: Vars) -> z3.BoolRef:
    ahead = z3.Or(s["r"] == 0, s["r"] + s["n"] * p["cmin"] <= p["Q"])
    paced = z3.And(p["pc"], z3.Not(p["bz"]))
    return z3.And(s["n"] >= 0, s["r"] >= 0, s["r"] <= p["Q"], z3.Implies(paced, ahead))


def first_token_lemma() -> z3.BoolRef:
    """Tick n + 1 with n*c < Q is tick <= ceil(Q / c) = k, the least k with k*c >= Q."""
    n, c, Q, k = z3.Ints("n c Q k")
    given = z3.And(n >= 0, c >= 1, Q >= 1, c * (k - 1) < Q, c * k >= Q, n * c < Q)
    return z3.ForAll([n, c, Q, k], z3.Implies(given, n + 1 <= k))


# -- D12: the cap rule ----------------------------------------------------------------------

_CAP_MONITORS = (
    Monitor("kept", z3.Int, lambda p: z3.IntVal(0), lambda st: st.s["kept"] + st.out["take"]),
    Monitor("planned", z3.Int, lambda p: z3.IntVal(0), lambda st: st.s["planned"] + st.o["n"]),
    Monitor(
        "ended",
        z3.Bool,
        lambda p: z3.BoolVal(False),
        lambda st: z3.Or(st.s["ended"], st.out["take"] < st.o["n"]),
    ),
)
"""What the items kept so far sum to, what they were planned at, and whether one was cut
or dropped (the machine never reads them)."""


def _d12(st: Step) -> z3.BoolRef:
    p, s, o, s2, take = st.p, st.s, st.o, st.s2, st.out["take"]
    return z3.And(
        take >= 0,
        take <= o["n"],
        s2["kept"] <= p["cap"],
        z3.Implies(s["ended"], take == 0),
        z3.Implies(z3.And(o["a"], z3.Not(p["chunked"])), z3.Or(take == 0, take == o["n"])),
        z3.Implies(
            z3.Or(p["chunked"], z3.Not(s2["adm"])),
            s2["kept"] == least(s2["planned"], p["cap"]),
        ),
    )


def _d12_inv(p: Vars, s: Vars) -> z3.BoolRef:
    cap, left, kept, ended = p["cap"], s["left"], s["kept"], s["ended"]
    return z3.And(
        left >= 0,
        kept == cap - left,
        s["planned"] >= kept,
        z3.Implies(z3.Not(ended), z3.And(kept == s["planned"], z3.Not(s["stop"]))),
        z3.Implies(ended, z3.Or(s["stop"], left == 0)),
        z3.Implies(z3.And(ended, z3.Or(p["chunked"], z3.Not(s["adm"]))), left == 0),
    )


class _KeepsWhole(CapRule):
    def take(self, p: Vars, s: Vars, o: Vars) -> z3.ArithRef:
        return o["n"]


class _SkipsMisfit(CapRule):
    """An admission that does not fit whole is passed over, and the next one tried."""

    def stops(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.Or(s["stop"], s["left"] == 0)

    def take(self, p: Vars, s: Vars, o: Vars) -> z3.ArithRef:
        misfit = z3.And(o["a"], z3.Not(p["chunked"]), o["n"] > s["left"])
        return z3.If(misfit, 0, least(o["n"], s["left"]))


class _CutsUnchunked(CapRule):
    def stops(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.Or(s["stop"], s["left"] == 0)


def _cap_mutant(name: str, description: str, machine: CapRule) -> Mutant:
    return named_mutant("cap rule", name, description, machine)


def _queue_mutant(gate: str) -> Mutant:
    broken = DP_MUTANTS[gate].machine
    assert isinstance(broken, DpMachine)
    return named_mutant("paced queue", gate, DP_MUTANTS[gate].description, PacedQueue(broken))


PACED_MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        _cap_mutant(
            "keeps_whole", "an item that does not fit is kept whole, past the cap", _KeepsWhole()
        ),
        _cap_mutant(
            "skips_misfit",
            "an unchunked admission that does not fit is passed over and the next one kept",
            _SkipsMisfit(),
        ),
        _cap_mutant(
            "cuts_unchunked",
            "an admission is cut to fit even with chunked prefill off",
            _CutsUnchunked(),
        ),
    )
}
"""The broken cap rules D12 refutes, by name."""


def _dp(id: str, prop: Prop, mutants: list[str]) -> Obligation:
    return Obligation(
        id=id,
        level="dp",
        statement=PACED_STATEMENTS[id],
        machine=DP,
        prop=prop,
        invariant=true_invariant,
        mutants=[DP_MUTANTS[m] for m in mutants],
        readable=_readable,
    )


PACED_OBLIGATIONS: list[Obligation] = [
    _dp(
        "D9",
        _d9,
        [
            *("paced_holds_first_tick", "paced_only_all_waiting", "paced_below_valves"),
            *("busy_aligned_too", "busy_holds_no_decode", "busy_strict"),
        ],
    ),
    _dp(
        "D10",
        _d10,
        [
            *("paced_before_dense", "paced_cap_dense_tokens", "paced_uncapped", "paced_cap_split"),
            *("surge_ignored", "surge_always", "surge_on_aggregate"),
        ],
    ),
    Obligation(
        id="D11",
        level="dp",
        statement=PACED_STATEMENTS["D11"],
        machine=PACED_QUEUE,
        prop=_d11,
        invariant=_d11_inv,
        mutants=[_queue_mutant(g) for g in ("paced_holds_first_tick", "paced_cap_split")],
        monitors=[_TICKS],
        readable=_readable,
        lemmas=[first_token_lemma],
        triggers=[
            lambda st: z3.And(st.p["pc"], z3.Not(st.p["bz"]), st.s["r"] > 0),
            lambda st: z3.And(st.p["pc"], z3.Not(st.p["bz"]), st.s["r"] > 0, st.s["n"] >= 1),
        ],
        trigger_names=["paced, tokens ahead", "paced, tokens still ahead at a later tick"],
    ),
    Obligation(
        id="D12",
        level="dp",
        statement=PACED_STATEMENTS["D12"],
        machine=CAP_RULE,
        prop=_d12,
        invariant=_d12_inv,
        mutants=list(PACED_MUTANTS.values()),
        monitors=_CAP_MONITORS,
        readable=_readable,
    ),
]
