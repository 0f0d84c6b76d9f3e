"""The lockstep machine: ``PrefillGate`` and the spec's relation, pass by pass.

Kept importable (not a test module) so the mutation tests can point it at a
broken implementation or a broken spec and show that it fails.
"""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import densegate.impl.gate
from densegate.spec.gate import GATE
from densegate.spec.machine import Machine, evaluate

# Small values hit the boundaries; large ones show nothing depends on size.
dense_tokens = st.one_of(st.integers(1, 12), st.integers(13, 4096), st.just(10**9))
hold_budgets = st.one_of(st.integers(1, 8), st.integers(9, 64))
run_lengths = st.integers(1, 40)
decodes = st.integers(1, 512)


class GateLockstep(RuleBasedStateMachine):
    """Drives an implementation and a spec machine with the same observations."""

    impl: ClassVar[ModuleType] = densegate.impl.gate
    """A module with PrefillGate, GateConfig and GateInput: the real one or a mutant."""
    spec: ClassVar[Machine] = GATE
    passes: ClassVar[int] = 0

    @initialize(B=dense_tokens, K=hold_budgets, enabled=st.sampled_from([True, True, True, False]))
    def setup(self, B: int, K: int, enabled: bool) -> None:
        self.params = {"B": B, "K": K, "enabled": enabled}
        self.gate = self.impl.PrefillGate(self.impl.GateConfig(B, K, enabled))
        self.h = 0

    def _pass(self, w: int, d: int) -> None:
        dec = self.gate.decide(self.impl.GateInput(w, d))
        _, out, nxt = evaluate(self.spec, self.params, {"h": self.h}, {"w": w, "d": d})
        GateLockstep.passes += 1
        got = (dec.fire, dec.reason.name, self.gate.hold_passes)
        want = (out["fire"], out["reason"], nxt["h"])
        assert got == want, f"w={w} d={d} h={self.h}: impl {got} != spec {want}"
        self.h = nxt["h"]

    @rule(w=st.integers(0, 5000), d=st.integers(0, 512))
    def one_pass(self, w: int, d: int) -> None:
        self._pass(w, d)

    @rule(n=run_lengths, d=st.integers(0, 512))
    def nothing_waiting(self, n: int, d: int) -> None:
        for _ in range(n):
            self._pass(0, d)

    @rule(n=run_lengths, extra=st.integers(0, 3), d=decodes)
    def dense_waiting(self, n: int, extra: int, d: int) -> None:
        B = self.params["B"]
        for _ in range(n):
            self._pass(B + extra, d)

    @rule(n=run_lengths, w=st.integers(1, 5000))
    def nothing_decoding(self, n: int, w: int) -> None:
        for _ in range(n):
            self._pass(w, 0)

    @rule(n=run_lengths, data=st.data(), d=decodes)
    def under_full(self, n: int, data: st.DataObject, d: int) -> None:
        B = self.params["B"]
        if B == 1:
            return self._pass(0, d)
        w = data.draw(st.integers(1, B - 1), label="w")
        for _ in range(n):
            self._pass(w, d)

    @invariant()
    def counter_matches(self) -> None:
        if hasattr(self, "gate"):
            assert self.gate.hold_passes == self.h
