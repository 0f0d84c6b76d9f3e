"""The surge cap in densegate's own DP runtime: every rank's scheduler gets the tick's cap.

In-process ranks (``densegate.lab.bench.dp_runs``), null runner. Rank 0 is sent long
prompts and rank 1 short ones, so rank 0 alone is filled (its admissible prefill reaches a
dense pass) while rank 1 is not: those ticks fire PACED with ``surge_tokens`` on both
ranks; the others with ``pace_tokens``. Each rank's pass records what its scheduler really
prefilled under the decision it was handed, so the test reads the cap where it bites.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from densegate.impl.dp.config import COORDINATED, DPConfig
from densegate.impl.dp.hooks import IdlePhase
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.gate import Decision
from densegate.impl.sched.plan import PassPlan
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench.dp_runs import run_rank_threads

PACE, SURGE, DENSE = 16, 40, 64
ENGINE = EngineConfig(max_num_seqs=8, max_num_batched_tokens=72, dense_tokens=DENSE,
                      num_blocks=512, block_size=4, max_model_len=512)  # fmt: skip


def _trace() -> list[TraceRequest]:
    """Round-robin routing: even arrivals (long prompts) to rank 0, odd (short) to rank 1;
    a first pair decodes long enough that later prefill always runs beside decodes."""
    out = [TraceRequest(0, 4, 60), TraceRequest(0, 4, 60)]
    for i in range(6):
        out += [TraceRequest(2 + 3 * i, 90, 4), TraceRequest(2 + 3 * i, 6, 4)]
    return out


@dataclass
class _Recorder(IdlePhase):
    """Wraps one rank's ``Scheduler.commit``: (pass, reason, cap, admissible, prefilled)."""

    engine: Engine
    rows: list[tuple[int, str, int | None, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        sched = self.engine.scheduler
        inner = sched.commit

        def commit(plan: PassPlan, decision: Decision) -> Any:
            batch = inner(plan, decision)
            rec = sched.pass_log[-1]
            self.rows.append((rec.index, decision.reason.name, decision.cap,
                              rec.waiting_tokens, rec.prefill_tokens))  # fmt: skip
            return batch

        sched.commit = commit  # type: ignore[method-assign]


@dataclass
class _Hooks:
    by_rank: dict[int, _Recorder] = field(default_factory=dict)

    def phase(self, rank: int, index: int, phase: Any, engine: Engine) -> _Recorder:
        self.by_rank[rank] = _Recorder(engine)
        return self.by_rank[rank]


def _run(surge: int | None) -> tuple[dict[int, _Recorder], int]:
    hooks = _Hooks()
    config = DPConfig(ENGINE, pace_tokens=PACE, surge_tokens=surge)
    reports = run_rank_threads(2, _trace(), config, hooks)
    finished = sum(len(r.finished) for reps in reports.values() for r in reps
                   if r.phase == COORDINATED)  # fmt: skip
    return hooks.by_rank, finished


@pytest.mark.parametrize("surge", [SURGE, None], ids=["surge", "surge off"])
def test_a_filled_rank_gives_every_rank_the_surge_cap(surge: int | None) -> None:
    by_rank, finished = _run(surge)
    assert finished == len(_trace())
    ticks = [dict(zip(range(2), rows, strict=False)) for rows in
             zip(by_rank[0].rows, by_rank[1].rows, strict=True)]  # fmt: skip
    surged, most = 0, 0
    for tick in ticks:
        (i0, why0, cap0, w0, p0), (i1, why1, cap1, w1, p1) = tick[0], tick[1]
        assert i0 == i1 and (why0, cap0) == (why1, cap1)  # one decision, on every rank
        if why0 != "PACED":
            continue
        filled = max(w0, w1) >= DENSE
        assert cap0 == (surge if filled and surge is not None else PACE), tick
        assert p0 <= cap0 and p1 <= cap0, tick  # no rank prefills past the tick's cap
        surged += filled
        most = max(most, p0, p1)
    assert surged >= 3, surged  # rank 0 alone filled, rank 1 not: the surge's ground
    assert most > PACE if surge is not None else most == PACE  # the surge cap was used
