"""Two toy obligations about the gate machine, for tests of the prover's machinery.

They are not in the registry and state nothing ``densegate prove`` proves (P4 says
``w >= B => FIRE``; T1 names the reason; P1 says ``h < K``, T2 only ``h <= K`` after a
step), so a test may prove them as often as it likes. Each has a broken gate to refute.
"""

from __future__ import annotations

import z3

from densegate.proofs.common import hold_bounded, true_invariant
from densegate.proofs.gate_obligations import GATE_MUTANTS
from densegate.proofs.obligation import Obligation, Step
from densegate.proofs.registry import Level, Source
from densegate.spec.gate import GATE, reason

__all__ = ["TOY", "TOY_LEVEL", "TOY_MUTANTS", "TOY_OBLIGATIONS"]

TOY = "toy"


def _dense_is_dense(st: Step) -> z3.BoolRef:
    p, o = st.p, st.o
    live = z3.And(p["enabled"], o["d"] > 0, o["w"] >= p["B"])
    return z3.Implies(live, st.out["reason"] == reason("DENSE"))


def _counter_at_most_k(st: Step) -> z3.BoolRef:
    return st.s2["h"] <= st.p["K"]


TOY_OBLIGATIONS: list[Obligation] = [
    Obligation(
        id="T1",
        level=TOY,
        statement="toy: enabled, decoding and w >= B => reason DENSE",
        machine=GATE,
        prop=_dense_is_dense,
        invariant=true_invariant,
        mutants=[GATE_MUTANTS["dense_strict"]],
    ),
    Obligation(
        id="T2",
        level=TOY,
        statement="toy: the counter after a step is at most K",
        machine=GATE,
        prop=_counter_at_most_k,
        invariant=hold_bounded,
        mutants=[GATE_MUTANTS["count_while_empty"]],
    ),
]

TOY_MUTANTS = {
    name: GATE_MUTANTS[name] for name in ("dense_strict", "count_while_empty", "dense_overlap")
}
"""The toy level's catalog; ``dense_overlap`` is in it on purpose and no toy obligation
refutes it, so the registry's unused-mutant check can be seen to fail."""

TOY_LEVEL = Level(
    TOY,
    "toy obligations for the prover's own tests",
    ("T1", "T2"),
    (Source("tests.support.toy_obligations", "TOY_OBLIGATIONS", "TOY_MUTANTS"),),
)
