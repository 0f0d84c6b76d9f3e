"""S1 and S2 for any number of requests on the pass ledger, given the ledger facts.

``PassLedger`` has no request slots; its observation is a pass's figures at
each phase boundary, constrained by ``ledger_facts``. So no-idle (S1) and conservation of blocks and
sequence slots (S2) hold of the ledger for every number of requests, at the block
size S10 and S11 are proved for. That every pass of the per-slot scheduler meets
the ledger facts, whatever its number of requests, is S11-S14 (one phase each, by
induction over the requests), and S8 checks it again at 3 slots (``scopes``).
"""

from __future__ import annotations

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Mutant, Obligation, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE
from densegate.proofs.scheduler.scopes import slot_free_scope
from densegate.spec.machine import Vars
from densegate.spec.pass_ledger import PassLedger

__all__ = ["LEDGER", "LEDGER_OBLIGATIONS", "LEDGER_SCOPE", "ledger_inv"]

LEDGER = PassLedger()
LEDGER_SCOPE = slot_free_scope("pass ledger", "ledger_facts", LIFE_BLOCK_SIZE)


class _DecodesAreRunning(PassLedger):
    """Flaw 2 on the ledger: the gate is told how many run, not how many decode."""

    def observe(self, p: Vars, o: Vars) -> tuple[z3.ArithRef, z3.ArithRef]:
        w, _ = super().observe(p, o)
        return w, o["run1"]


class _OverReserves(PassLedger):
    """Admission reserves one block more than is free."""

    def reserve_room(self, o: Vars) -> z3.ArithRef:
        return o["free1"] + 1


def _mutants() -> dict[str, Mutant]:
    return {
        "tail_escape_on_running": named_mutant(
            "pass ledger", "tail_escape_on_running",
            "gate's d counts running requests, not decoding ones (flaw 2)", _DecodesAreRunning(),
        ),
        "over_reserves": named_mutant(
            "pass ledger", "over_reserves",
            "admission reserves one block more than is free", _OverReserves(),
        ),
    }  # fmt: skip


def ledger_inv(p: Vars, s: Vars) -> z3.BoolRef:
    """Blocks conserved, each running request holds >= 1, running within S, h < K."""
    return z3.And(
        s["h"] >= 0,
        s["h"] < p["K"],
        s["free"] >= 0,
        s["free"] + s["held"] == p["N"],
        s["run"] >= 0,
        s["run"] <= p["S"],
        s["held"] >= s["run"],
        z3.Implies(s["run"] == 0, s["held"] == 0),
    )


def _no_idle(st: Step) -> z3.BoolRef:
    work = st.o["run0"] + st.o["wait0"] > 0
    return z3.Implies(work, st.out["prefill_tokens"] + st.out["decode_seqs"] > 0)


def _conserved(st: Step) -> z3.BoolRef:
    s2, p = st.s2, st.p
    return z3.And(
        s2["free"] >= 0, s2["free"] + s2["held"] == p["N"], s2["run"] >= 0, s2["run"] <= p["S"]
    )


def _all_partial(st: Step) -> z3.BoolRef:
    return z3.And(st.o["d"] == 0, st.o["owing"] > 0)


def _empty_queue_only(st: Step) -> z3.BoolRef:
    return z3.And(st.o["run0"] == 0, st.o["wait0"] > 0)


def _admits(st: Step) -> z3.BoolRef:
    return z3.And(st.out["fire"], st.o["a"] > 0, st.s2["free"] == 0)


def _small(p: Vars) -> z3.BoolRef:
    return z3.And(p["N"] <= 4, p["S"] <= 2, p["T"] <= 4, p["B"] <= 3, p["K"] <= 3, p["cap"] <= 3)


def _ledger_obligations() -> list[Obligation]:
    broken = _mutants()

    def ob(id: str, statement: str, prop, mutant: str, triggers, names) -> Obligation:  # type: ignore[no-untyped-def]
        return Obligation(
            id=id, level="scheduler", statement=statement, machine=LEDGER, prop=prop,
            invariant=ledger_inv, mutants=[broken[mutant]], readable=_small, trace_depth=4,
            scope=LEDGER_SCOPE, parametric=True, triggers=triggers, trigger_names=names,
        )  # fmt: skip

    return [
        ob(
            "S1",
            "no deadlock: with any request waiting or running, the pass schedules a token "
            "(on the pass ledger, for any number of requests given its facts, which S11-S14 "
            f"prove of the per-slot pass's folds; block size {LIFE_BLOCK_SIZE})",
            _no_idle,
            "tail_escape_on_running",
            [_all_partial, _empty_queue_only],
            ["every running request owes prefill, none decodes", "nothing runs, a request waits"],
        ),
        ob(
            "S2",
            "KV block and slot conservation: free + held = num_blocks, free >= 0, and at most "
            "max_num_seqs requests running, every pass (on the pass ledger, for any number of "
            "requests given its facts, which S11-S14 prove of the per-slot pass's folds; block "
            f"size {LIFE_BLOCK_SIZE})",
            _conserved,
            "over_reserves",
            [_admits],
            ["a fire's admissions take the last free blocks"],
        ),
    ]


LEDGER_OBLIGATIONS: list[Obligation] = _ledger_obligations()
