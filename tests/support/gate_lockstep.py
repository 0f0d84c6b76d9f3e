"""The lockstep machines: ``PrefillGate`` and the spec's relation, pass by pass.

``GateLockstep`` drives the gate as configured by default (valve off) against
``GATE``; ``StallGateLockstep`` turns the STALL valve on and drives it against
``STALL_GATE``, comparing the stall memory too.

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
from densegate.spec.stall_gate import STALL_GATE

# Small values hit the boundaries; large ones show nothing depends on size.
dense_tokens = st.one_of(st.integers(1, 12), st.integers(13, 4096), st.just(10**9))
hold_budgets = st.one_of(st.integers(1, 8), st.integers(9, 64))
run_lengths = st.integers(1, 40)
decodes = st.integers(1, 512)
stall_passes = st.one_of(st.integers(1, 4), st.integers(5, 40))


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


class StallGateLockstep(GateLockstep):
    """The gate with ``stall_passes`` > 0 against the stall machine: decision, counter, memory."""

    spec: ClassVar[Machine] = STALL_GATE

    @initialize(
        B=dense_tokens,
        K=hold_budgets,
        enabled=st.sampled_from([True, True, True, False]),
        S=stall_passes,
    )
    def setup(self, B: int, K: int, enabled: bool, S: int = 1) -> None:
        self.params = {"B": B, "K": K, "enabled": enabled, "S": S}
        self.gate = self.impl.PrefillGate(self.impl.GateConfig(B, K, enabled, S))
        self.state = {"h": 0, "q": 0, "n": 0}
        self.h = 0

    def _pass(self, w: int, d: int) -> None:
        dec = self.gate.decide(self.impl.GateInput(w, d))
        _, out, nxt = evaluate(self.spec, self.params, self.state, {"w": w, "d": d})
        StallGateLockstep.passes += 1
        got = (dec.fire, dec.reason.name, self.gate.hold_passes, *self.gate.stall_memory)
        want = (out["fire"], out["reason"], nxt["h"], nxt["q"], nxt["n"])
        assert got == want, f"w={w} d={d} state={self.state}: impl {got} != spec {want}"
        self.state, self.h = nxt, nxt["h"]

    @rule(grow=st.integers(0, 8), flat=run_lengths, step=st.integers(1, 3), d=decodes)
    def burst_then_quiet(self, grow: int, flat: int, step: int, d: int) -> None:
        """Thin fill growing for ``grow`` passes, then flat: where the valve decides."""
        B = self.params["B"]
        w = 1
        for _ in range(grow):
            self._pass(min(w, B - 1) if B > 1 else 0, d)
            w += step
        for _ in range(flat):
            self._pass(min(w, B - 1) if B > 1 else 0, d)

    @rule()
    def reset(self) -> None:
        self.gate.reset()
        self.state, self.h = {"h": 0, "q": 0, "n": 0}, 0
