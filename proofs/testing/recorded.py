"""Judge a decision log an engine recorded, with the kit's per-pass judge.

An integration (vLLM's scheduler, SGLang's delayer) logs what its gate saw and
decided each pass. Replaying that log through the kit's ``Driver`` as if the
log were a gate checks P1-P7 and agreement with the spec on exactly the passes
the engine ran, with no second gate to disagree with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from densegate.impl.gate import Decision, GateConfig, GateInput
from densegate.testing.driver import Driver
from densegate.testing.strategies import GateRun, Observation

__all__ = ["RecordedPass", "judge_recorded"]


@dataclass(frozen=True)
class RecordedPass:
    """One logged pass: what the gate saw, what it decided, its counter after."""

    observation: Observation
    decision: Decision
    hold_passes: int


def judge_recorded(config: GateConfig, log: Sequence[RecordedPass]) -> dict[str, tuple[int, str]]:
    """The first violation per property (``{}`` when the log conforms), as the kit reports it.

    A log that does not replay (the kit feeds a pass other than the one recorded) is
    reported as a P7 violation naming the pass, never as conforming.
    """
    passes = tuple(log)

    class Replay:
        def __init__(self, _cfg: GateConfig) -> None:
            self.i = 0
            self.h = 0

        @property
        def hold_passes(self) -> int:
            return self.h

        def decide(self, inp: GateInput) -> Decision:
            rec = passes[self.i]
            if inp != rec.observation.gate_input:
                raise ValueError(f"pass {self.i}: the kit fed {inp}, the log has {rec.observation}")
            self.i += 1
            self.h = rec.hold_passes
            return rec.decision

    run = GateRun(config, tuple(r.observation for r in passes))
    return dict(Driver(Replay).outcome(run).first)
