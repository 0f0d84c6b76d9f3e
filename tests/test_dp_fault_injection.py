"""Randomized fault injection on real gloo ranks: seeded schedules kill one or two of 3-4
local rank processes at random ticks, before or inside the tick's collective.

Every schedule must lose nothing: every request ends exactly once (and the
caller is streamed each output position exactly once), the survivors log one
identical decision per tick before and after the fault, hold nothing at the
end and get every KV block back, and no survivor stalls past ``--dp-timeout``
plus ``MARGIN_S``. Schedules: ``examples(ci=3, nightly=30)``; seeds are fixed
in ci and drawn in nightly (printed on failure). benchmarks/dp_faults.py runs
the same schedules and prints the worst detection and recovery times.
"""

from __future__ import annotations

import os
import random

import pytest
import torch.distributed as dist

from densegate.impl.dp.config import DPConfig, Fault
from densegate.impl.dp.inject import CRASH_EXIT_CODE, random_schedule
from densegate.impl.dp.launch import launch
from densegate.impl.dp.readmission import StreamView
from tests.support.dp_small import ENGINE, small_trace
from tests.support.profiles import NIGHTLY, examples

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed gloo"
)

TIMEOUT_S = 3.0
GRACE_S = 3.0
MARGIN_S = GRACE_S + 2.0
"""Past the timeout, a survivor may wait ``GRACE_S`` for peers that neither answer nor
exit, plus 2 s for the new group to form on a loaded machine."""
N = 24

_BASE = random.Random(os.environ.get("DENSEGATE_FAULT_SEED")).randrange(10**6) if NIGHTLY else 0
SEEDS = [_BASE + i for i in range(examples(3, 30))]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_fault_schedule_loses_nothing(seed: int) -> None:
    world, router, faults = random_schedule(seed)
    trace = small_trace(N, seed, rate=1.0)
    config = DPConfig(
        ENGINE,
        router=router,
        timeout_s=TIMEOUT_S,
        grace_s=GRACE_S,
        baselines=False,
        faults=faults,
    )
    result = launch(trace, config, world)
    why = f"seed {seed}: world {world}, {router}, {faults}, exit codes {result.exitcodes}"
    reps = result.phase("coordinated")
    died = {r for r, code in enumerate(result.exitcodes) if code == CRASH_EXIT_CODE}
    assert died <= {f.rank for f in faults}, why
    assert set(reps) == set(range(world)) - died, why
    first = reps[min(reps)]
    for rep in reps.values():
        assert rep.decisions == first.decisions, why
        assert rep.alignment == first.alignment, why
        assert rep.unfinished == [], why
        assert rep.kv_blocks == [ENGINE.num_blocks, ENGINE.num_blocks], why
        assert [t for t, _, _ in rep.decisions] == list(range(rep.ticks)), why
        for f in rep.faults:
            assert f["detected_after_s"] + f["recovery_s"] <= TIMEOUT_S + MARGIN_S, (why, f)
    s = result.summary()
    assert s["unaccounted"] == [] and s["duplicated"] == [] and s["lost"] == 0, why
    assert s["finished"] == N and s["rejected"] == 0, why  # the small trace fits every rank
    assert bool(first.faults) == bool(died), why
    mixed = first.alignment["mixed_by_reason"]
    assert set(mixed) <= {"BUDGET", "STALL", "KV_PRESSURE", "DISABLED"}, why
    # The caller's view: the dead ranks' streams in the order they died, then the rest.
    order = [d for f in first.faults for d in f["dead_ranks"]]
    view = StreamView()
    for r in order + [r for r in range(world) if r not in order]:
        view.add(r, result.streams[r])
    ordered = sorted(trace, key=lambda q: q.arrival_pass)
    want = {str(i): q.output_len for i, q in enumerate(ordered)}
    assert {rid: len(t) for rid, t in view.tokens.items()} == want, why


def test_a_slow_rank_below_the_timeout_is_not_declared_dead() -> None:
    """Rank 1 sleeps 1 s before two ticks' collectives (timeout 3 s): gloo and the store
    poll wait for it; nobody regroups and every rank finishes."""
    trace = small_trace(N, 1, rate=1.0)
    slow = (Fault(1, 4, "slow", 1.0), Fault(1, 9, "slow", 1.0))
    config = DPConfig(ENGINE, timeout_s=TIMEOUT_S, baselines=False, faults=slow)
    result = launch(trace, config, 3)
    assert result.exitcodes == [0, 0, 0]
    reps = result.phase("coordinated")
    assert all(rep.faults == [] for rep in reps.values())
    assert all(rep.decisions == reps[0].decisions for rep in reps.values())
    s = result.summary()
    assert s["healthy"] and s["finished"] == N and s["readmitted"] == 0
