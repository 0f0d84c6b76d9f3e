"""Running one gate on one generated run, and judging every pass against P1-P7 and the spec.

The judges here are the sampled kit's: they read what the gate did (decision,
``hold_passes``) pass by pass, beside the spec's own step from the spec's own
counter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from densegate.impl.gate import Decision, GateConfig, GateInput, Reason
from densegate.spec.gate import GATE
from densegate.spec.machine import evaluate
from densegate.testing.report import PassRecord
from densegate.testing.search import CachedDriver, Outcome
from densegate.testing.strategies import GateRun, Observation

__all__ = ["CheckedGate", "Driver", "GateFactory", "Outcome"]


class CheckedGate(Protocol):
    """All the kit needs: ``decide`` per pass and the hold counter it keeps."""

    @property
    def hold_passes(self) -> int: ...

    def decide(self, inp: GateInput) -> Decision: ...


GateFactory = Callable[[GateConfig], CheckedGate]
"""Builds a fresh gate, in its initial state, for a config: a class or a function."""


def _well_formed(dec: object) -> bool:
    fire, reason = getattr(dec, "fire", None), getattr(dec, "reason", None)
    return (
        isinstance(fire, bool)
        and isinstance(reason, Reason)
        and fire == (reason is not Reason.HOLD)
    )


def _exc(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class Driver(CachedDriver[GateRun, PassRecord]):
    """Runs the factory's gates on runs, caching each run's outcome for every search."""

    def __init__(self, factory: GateFactory) -> None:
        super().__init__()
        self.factory = factory
        self.raw = False

    def steps(self, run: GateRun) -> tuple[Observation, ...]:
        return run.passes

    def with_steps(self, run: GateRun, steps: tuple[Any, ...]) -> GateRun:
        return GateRun(run.config, steps)

    def _step(self, gate: Any, obs: Observation) -> tuple[Decision, object]:
        decide_raw = getattr(gate, "decide_raw", None)
        if callable(decide_raw):
            self.raw = True
            dec = decide_raw(obs.gate_input, obs.raw)
        else:
            dec = gate.decide(obs.gate_input)
        return dec, gate.hold_passes

    def _simulate(self, run: GateRun) -> Outcome[PassRecord]:
        cfg, out = run.config, Outcome[PassRecord]()
        B, K, enabled = cfg.dense_tokens, cfg.max_hold_passes, cfg.enabled
        params = {"B": B, "K": K, "enabled": enabled}
        try:
            a, b = self.factory(cfg), self.factory(cfg)
            h: object = a.hold_passes  # whatever it is: P1 judges it
            h_twin: object = b.hold_passes
        except Exception as e:
            out.flag("P7", -1, f"building the gate raised {_exc(e)}")
            return out
        if not _counter_ok(h, K):
            out.flag("P1", -1, f"initial hold_passes={h!r} outside [0, {K})")
        if h_twin != h:
            out.flag("P7", -1, f"two fresh gates start at hold_passes {h!r} and {h_twin!r}")
        if h != 0:
            out.flag("agreement", -1, f"initial hold_passes={h!r}, the spec starts at 0")
        spec_h, age = 0, 0
        for i, obs in enumerate(run.passes):
            w, d = obs.waiting_tokens, obs.decode_seqs
            _, s_out, s_next = evaluate(GATE, params, {"h": spec_h}, {"w": w, "d": d})
            spec = (bool(s_out["fire"]), str(s_out["reason"]), int(s_next["h"]))
            try:
                dec, h_next = self._step(a, obs)
            except Exception as e:
                out.records.append(PassRecord(obs, h, None, None, spec, _exc(e)))
                out.flag("P7", i, f"decide raised {_exc(e)}")
                break
            if not _well_formed(dec):
                bad = f"returned {dec!r}"
                out.records.append(PassRecord(obs, h, None, h_next, spec, bad))
                out.flag("P7", i, f"decide {bad}, not a Decision whose fire matches its reason")
                break
            out.records.append(PassRecord(obs, h, dec, h_next, spec))
            twin: tuple[object, object]
            try:
                twin = self._step(b, obs)
            except Exception as e:
                twin = (None, _exc(e))
            if twin != (dec, h_next):
                out.flag("P7", i, f"a twin fed the same passes returned {twin}")
            fire, why = dec.fire, dec.reason
            if not _counter_ok(h_next, K):
                out.flag("P1", i, f"hold_passes={h_next!r} outside [0, {K})")
            if w > 0 and d == 0 and not fire:
                out.flag("P2", i, "something waits and nothing decodes, yet HOLD")
            if why is Reason.BUDGET and age != K - 1:
                out.flag("P3", i, f"BUDGET after {age} holds of this episode, not K-1 = {K - 1}")
            age = 0 if fire else age + 1
            if age >= K:
                out.flag("P3", i, f"held {age} passes in a row, budget K = {K}")
            if w >= B and not fire:
                out.flag("P4", i, f"w={w} >= B={B}, yet HOLD")
            if not enabled and not fire:
                out.flag("P5", i, "gate disabled, yet HOLD")
            if not fire and not (enabled and d > 0 and 0 < w < B):
                out.flag("P6", i, "HOLD without enabled, d > 0 and 0 < w < B")
            if not fire and not (
                isinstance(h, int) and isinstance(h_next, int) and K - 1 - h >= 0 and h_next > h
            ):
                out.flag("P7", i, f"HOLD took h {h!r} -> {h_next!r}: rank K-1-h did not decrease")
            if (fire, why.name, h_next) != spec:
                out.flag("agreement", i, "differs from the spec")
            h, spec_h = h_next, spec[2]
        return out


def _counter_ok(h: object, K: int) -> bool:
    return isinstance(h, int) and not isinstance(h, bool) and 0 <= h < K
