#!/usr/bin/env python3
"""Randomized fault injection on local gloo ranks: how fast survivors notice and recover.

Runs the seeded schedules of tests/test_dp_fault_injection.py
(``densegate.lab.dp.inject.random_schedule``: 3-4 rank processes over the CLI's
three phases, one or two killed in random phases at random ticks, before or
inside the tick's collective) and prints, measured, not asserted: how many
schedules ran, in how many every request of every phase ended exactly once,
and the worst and median times a survivor took to notice a death
(``detected_after_s``: from entering the failed collective to its error) and
to agree on the survivors and regroup (``recovery_s``). A fault-free launch of
the same workload, in the same run, gives the per-tick collective time the
recovery is compared with. ``--hangs`` also hangs rank 1 right before each
phase's first collective (tick 0) and prints how long the survivor took to
notice, against ``--timeout`` plus ``DETECTION_MARGIN_S``. Run from the
repository root: ``python benchmarks/dp_faults.py`` (``--schedules N``,
``--quick`` for 3).
"""

from __future__ import annotations

import argparse
import statistics
import time

from densegate.impl.dp.collective import DETECTION_MARGIN_S
from densegate.impl.dp.config import DPConfig
from densegate.impl.dp.launch import launch
from densegate.impl.engine import EngineConfig
from densegate.impl.traces.workload import TraceRequest, synthetic_trace
from densegate.lab.dp.inject import Fault, FaultHooks, random_schedule
from densegate.lab.dp.phases import bench_phases

ENGINE = EngineConfig(
    max_num_seqs=8,
    max_num_batched_tokens=256,
    block_size=16,
    num_blocks=160,
    max_model_len=512,
    max_hold_passes=6,
)


PHASES = bench_phases(ENGINE)


def _trace(n: int, seed: int) -> list[TraceRequest]:
    return synthetic_trace(n, seed, rate=1.0, prompt_median=48, output_median=12, max_model_len=512)


def _clean(s: dict[str, object], n: int) -> bool:
    """Every request of every phase that ran ended exactly once; the ranks agree."""
    if "error" in s:
        return False
    accounting = s["accounting"]
    assert isinstance(accounting, dict)
    return (
        all(a["finished"] + a["rejected"] == n for a in accounting.values())
        and not (s["unaccounted"] or s["duplicated"] or s["lost"])
        and bool(s["decisions_agree"])
    )


def hangs(timeout: float, gen: int) -> bool:
    """Rank 1 hangs at tick 0 of each phase in turn; print the survivor's detection time."""
    ok = True
    for k, phase in enumerate(PHASES):
        config = DPConfig(ENGINE, timeout_s=timeout, phases=PHASES)
        hooks = FaultHooks((Fault(1, 0, "hang", phase=k),))
        s = launch(_trace(gen, 0), config, 2, hooks=hooks).summary()
        f = s.get("failure") or {}
        clean = _clean(s, gen)
        ok = ok and clean and f.get("phase") == phase.name
        print(
            f"hang at tick 0 of {phase.name}: noticed after {f.get('detected_after_s', 0):.3f} s "
            f"(--dp-timeout {timeout} + margin {DETECTION_MARGIN_S}), agreed after "
            f"{f.get('recovery_s', 0):.3f} s more; "
            + ("every request ended once" if clean else "FAILED")
        )
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schedules", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="3 schedules")
    p.add_argument("--seed", type=int, default=0, help="first schedule's seed")
    p.add_argument("--gen", type=int, default=24, help="requests per run")
    p.add_argument("--timeout", type=float, default=3.0, help="--dp-timeout, seconds")
    p.add_argument("--hangs", action="store_true", help="also time a tick-0 hang per phase")
    args = p.parse_args()
    count = 3 if args.quick else args.schedules
    detect: list[float] = []
    recover: list[float] = []
    clean = killed = agreements = readmitted = 0
    t0 = time.perf_counter()
    for seed in range(args.seed, args.seed + count):
        world, router, faults = random_schedule(seed, phases=len(PHASES))
        config = DPConfig(ENGINE, router=router, timeout_s=args.timeout, phases=PHASES)
        s = launch(_trace(args.gen, seed), config, world, hooks=FaultHooks(faults)).summary()
        ok = _clean(s, args.gen)
        clean += ok
        f = s.get("failure") or {}
        if f:
            killed += len(f["dead_ranks"])
            agreements += f["agreements"]
            readmitted += f["readmitted"]
            detect.append(f["detected_after_s"])
            recover.append(f["recovery_s"])
        shown = ", ".join(x.spec for x in faults)
        print(
            f"seed {seed}: {world} ranks, {router}, faults [{shown}]: "
            f"{'every request ended once' if ok else 'FAILED'}"
            + (
                f", dead {f['dead_ranks']} in {f['phase']}, re-admitted {f['readmitted']}"
                if f
                else ", no fault hit"
            )
        )
    wall = time.perf_counter() - t0
    healthy = launch(_trace(args.gen, 0), DPConfig(ENGINE, timeout_s=args.timeout), 3)
    tick_ms = statistics.median(
        rep.collective_ms_per_tick for rep in healthy.phase("coordinated").values()
    )
    print()
    print(f"schedules run                         {count} ({wall:.0f} s)")
    print(f"schedules where every request ended once  {clean} / {count}")
    print(f"killed ranks / agreements / re-admitted   {killed} / {agreements} / {readmitted}")
    if detect:
        print(
            f"detection s, worst / median               {max(detect):.3f} / "
            f"{statistics.median(detect):.3f}   (--dp-timeout {args.timeout})"
        )
        print(
            f"recovery s, worst / median                {max(recover):.3f} / "
            f"{statistics.median(recover):.3f}"
        )
        print(
            f"healthy collective ms per tick (3 ranks)  {tick_ms:.2f}; worst recovery = "
            f"{1e3 * max(recover) / tick_ms:.0f} healthy ticks"
        )
    hung_ok = hangs(args.timeout, args.gen) if args.hangs else True
    return 0 if clean == count and hung_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
