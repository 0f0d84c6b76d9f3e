"""The benchmark's phases of a data-parallel run: the coordinated run, then the two
uncoordinated baselines, optionally in timed rounds of alternating order.

The baselines still all-reduce every tick, so their mixed ticks are counted the
same way: every rank with its gate off, and every rank with its own local gate.
Untimed (``timed_rounds`` 0) they run on the null runner, since scheduling does
not depend on token values; timed, every phase runs on the engine's runner, in
``timed_rounds`` rounds (``densegate.lab.cost.compare``) so a drift in the
machine's speed weighs every phase alike.
"""

from __future__ import annotations

import dataclasses

from densegate.impl.dp.config import COORDINATED, Phase
from densegate.impl.engine import EngineConfig
from densegate.impl.validation import check_int
from densegate.lab.cost.compare import round_name, round_order

__all__ = ["BASELINE", "LOCAL_GATE", "bench_phases"]

BASELINE = "uncoordinated_gate_off"
"""The phase timed ratios are taken against."""
LOCAL_GATE = "uncoordinated_local_gate"


def bench_phases(
    engine: EngineConfig, *, baselines: bool = True, timed_rounds: int = 0
) -> tuple[Phase, ...]:
    """``DPConfig.phases`` for the coordinated run and (if ``baselines``) the baselines.

    ``timed_rounds`` R >= 1 repeats them in R rounds, ``<phase>@<round>`` from round 2.
    """
    check_int("bench_phases", "timed_rounds", timed_rounds, 0)
    out = [Phase(COORDINATED, "aligned", engine)]
    if baselines:
        null = engine if timed_rounds else dataclasses.replace(engine, runner="null", model=None)
        out.append(Phase(BASELINE, "local", dataclasses.replace(null, gate_enabled=False)))
        out.append(Phase(LOCAL_GATE, "local", dataclasses.replace(null, gate_enabled=True)))
    rounds = max(timed_rounds, 1)
    return tuple(
        dataclasses.replace(p, name=round_name(p.name, k)) for k, p in round_order(out, rounds)
    )
