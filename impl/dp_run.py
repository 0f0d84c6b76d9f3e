"""Data-parallel runs on torch.distributed: the launcher, the rank entry point, the summary.

Two ways to start the same ranks, with the same code in each rank:

- ``densegate run --dp N ...`` (``launch``) starts N processes with
  ``torch.multiprocessing`` on 127.0.0.1 (forkserver, so torch is imported
  once rather than once per rank; spawn where there is no forkserver). The
  parent hosts the rendezvous store and hands each child the environment
  torchrun would give it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
  TORCHELASTIC_USE_AGENT_STORE), so the children take the ``env://`` path
  exactly as under torchrun. Because the store lives in the parent, it
  outlives any rank, and the parent marks a rank that exited abnormally as
  dead in it, so survivors learn who died at once.
- ``torchrun --nproc-per-node N -m densegate.impl.dp_run [densegate run
  options]`` (``main``) on one or many machines; rank 0 prints the summary.
  Without torchrun, set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT by hand
  and start ``python -m densegate.impl.dp_run`` once per rank (rank 0 then
  hosts the store).

The backend is gloo, or NCCL when the runner's device is CUDA and every rank
has a GPU (``--dp-backend`` in the module's own command line overrides it).
Collectives wait at most ``--dp-timeout`` seconds (the first of each phase
waits ``startup_timeout_s``, while ranks build their models): a rank that died
closes its sockets and is noticed at once, a rank that hangs is noticed at the
timeout, and either way the survivors carry on alone (``densegate.impl.dp_rank``).
Under torchrun the elastic agent itself SIGTERMs the whole group when a
worker dies, so the fallback serves the launcher and hand-started ranks.

``DENSEGATE_DP_CRASH=RANK:TICK[:hang]`` makes that rank die (or hang) at that
tick, to watch the fallback; ``DENSEGATE_DP_OUT=DIR`` keeps the launcher's
per-rank reports (decision logs included) in DIR.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densegate.impl.dp_rank import (
    CollectiveError,
    DPConfig,
    RankReport,
    run_rank,
)
from densegate.impl.workload import TraceRequest

__all__ = [
    "DPResult",
    "TorchCollective",
    "launch",
    "main",
    "merge_reports",
    "rank_main",
    "run_dp",
]

log = logging.getLogger("densegate.dp")

_ALIVE = "densegate/dp/alive/{}"
_DEAD = "densegate/dp/dead/{}"
_NCCL_VOTE = "densegate/dp/nccl/{}"
_REPORT = "rank{}.json"


class TorchCollective:
    """``Collective`` over a torch.distributed process group, with timeouts and liveness.

    ``survivors`` publishes this rank as alive in the rendezvous store and
    waits up to ``grace_s`` for every other rank to do the same (or to be
    marked dead by the launcher); ranks heard from neither way count as dead.
    If the store itself is gone (it lived in rank 0), rank 0 is taken as dead.
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        store: Any,
        timeout_s: float,
        startup_timeout_s: float,
        device: str = "cpu",
        grace_s: float | None = None,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.store = store
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.device = device
        self.grace_s = timeout_s if grace_s is None else grace_s

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        import torch
        import torch.distributed as dist

        t = torch.tensor(list(vector), dtype=torch.int64, device=self.device)
        wait = self.startup_timeout_s if first else self.timeout_s
        try:
            work = dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)
            if work is None or not work.wait(timeout=datetime.timedelta(seconds=wait)):
                raise CollectiveError(f"all_reduce did not complete within {wait}s")
        except CollectiveError:
            raise
        except Exception as e:  # gloo raises RuntimeError; NCCL may raise DistBackendError
            raise CollectiveError(f"{type(e).__name__}: {e}") from e
        out: list[int] = t.tolist()
        return out

    def survivors(self, routed: int) -> dict[int, int]:
        store = self.store
        try:
            store.set_timeout(datetime.timedelta(seconds=max(self.grace_s, 0.1)))
            store.set(_ALIVE.format(self.rank), str(routed))
        except Exception as e:
            log.warning("rank %d: store unreachable (%s); taking rank 0 as dead", self.rank, e)
            return {r: routed for r in range(self.world_size) if r != 0 or r == self.rank}
        alive = {self.rank: routed}
        unknown = set(range(self.world_size)) - set(alive)
        deadline = time.monotonic() + self.grace_s
        while unknown and time.monotonic() < deadline:
            for r in sorted(unknown):
                try:
                    if store.check([_ALIVE.format(r)]):
                        alive[r] = int(store.get(_ALIVE.format(r)))
                        unknown.discard(r)
                    elif store.check([_DEAD.format(r)]):
                        unknown.discard(r)
                except Exception:
                    unknown.discard(r)
            if unknown:
                time.sleep(0.02)
        return alive


def _agree_backend(store: Any, rank: int, world: int, device: str, choice: str) -> str:
    """NCCL only if every rank, on every machine, has a GPU of its own; else gloo.

    Each rank votes through the rendezvous store and all read every vote, so
    machines with and without enough GPUs still pick the same backend.
    """
    if choice != "auto":
        return choice
    import torch

    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    mine = (
        device.startswith("cuda")
        and torch.cuda.is_available()
        and torch.cuda.device_count() >= local_world
    )
    store.set(_NCCL_VOTE.format(rank), "1" if mine else "0")
    votes = [store.get(_NCCL_VOTE.format(r)) for r in range(world)]
    return "nccl" if all(v == b"1" for v in votes) else "gloo"


def rank_main(
    trace: Sequence[TraceRequest],
    config: DPConfig,
    out_dir: str | None = None,
    *,
    gather: bool = False,
    backend: str = "auto",
) -> tuple[int, list[RankReport], list[list[dict[str, Any]]] | None]:
    """Join the ``env://`` group, run every phase, write ``out_dir/rank{R}.json``.

    Returns ``(rank, this rank's reports, every rank's reports)``; the last is
    gathered onto rank 0 only with ``gather`` and a healthy group (else None).
    """
    import dataclasses

    import torch
    import torch.distributed as dist
    from torch.distributed.rendezvous import rendezvous

    rdzv_timeout = datetime.timedelta(seconds=config.startup_timeout_s)
    store, rank, world = next(rendezvous("env://", timeout=rdzv_timeout))
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    engine = config.engine
    device = "cpu"
    chosen = _agree_backend(store, rank, world, engine.device, backend)
    if engine.device.startswith("cuda") and torch.cuda.is_available():
        dev = f"cuda:{local_rank % torch.cuda.device_count()}"
        config = dataclasses.replace(config, engine=dataclasses.replace(engine, device=dev))
        if chosen == "nccl":
            torch.cuda.set_device(dev)
            device = dev
    else:
        # Ranks share this machine's cores; tiny matmuls gain nothing from more threads.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, world)))
    pg_timeout = max(config.timeout_s, config.startup_timeout_s)
    dist.init_process_group(
        chosen,
        store=store,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=pg_timeout),
    )
    collective = TorchCollective(
        rank, world, store, config.timeout_s, config.startup_timeout_s, device
    )
    reports = run_rank(rank, world, trace, config, collective)
    if out_dir is not None:
        path = Path(out_dir) / _REPORT.format(rank)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([r.as_dict() for r in reports]))
        tmp.replace(path)
    everyone: list[list[dict[str, Any]]] | None = None
    healthy = all(r.failure is None for r in reports)
    if gather and healthy:
        objs: list[Any] = [None] * world if rank == 0 else []
        dist.gather_object([r.as_dict() for r in reports], objs if rank == 0 else None, dst=0)
        everyone = objs if rank == 0 else None
    if healthy:
        dist.destroy_process_group()
    return rank, reports, everyone


def _spawn_entry(
    index: int,
    env: dict[str, str],
    trace: Sequence[TraceRequest],
    config: DPConfig,
    out_dir: str,
    backend: str,
) -> None:
    os.environ.update(env)
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(index)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    rank_main(trace, config, out_dir, backend=backend)


def _start_method() -> str:
    """forkserver where there is one: torch is imported once, in the server, and every
    rank forks from it (spawn would import torch in each rank, seconds apiece)."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "densegate.impl.dp_run"])
    return "forkserver"


class DPResult:
    """A finished ``launch``: every surviving rank's reports, exit codes, wall time."""

    def __init__(
        self,
        world_size: int,
        reports: dict[int, list[RankReport]],
        exitcodes: list[int | None],
        wall_s: float,
        trace_len: int,
    ) -> None:
        self.world_size = world_size
        self.reports = reports
        self.exitcodes = exitcodes
        self.wall_s = wall_s
        self.trace_len = trace_len

    def phase(self, name: str) -> dict[int, RankReport]:
        """Rank -> report of phase ``name``, for the ranks that reported it."""
        return {
            rank: rep for rank, reps in self.reports.items() for rep in reps if rep.phase == name
        }

    def summary(self) -> dict[str, Any]:
        return merge_reports(
            self.world_size,
            {r: [x.as_dict() for x in reps] for r, reps in self.reports.items()},
            self.trace_len,
            self.wall_s,
            self.exitcodes,
        )


def launch(
    trace: Sequence[TraceRequest],
    config: DPConfig,
    world_size: int,
    *,
    backend: str = "auto",
    out_dir: str | None = None,
) -> DPResult:
    """Start ``world_size`` rank processes on 127.0.0.1 and wait for all of them.

    Ranks that exit abnormally are marked dead in the store at once. Once a
    survivor reports a broken group, a rank that has not said it is alive
    within ``timeout_s`` (plus slack) is taken as hung, killed, and marked dead.
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]
    from torch.multiprocessing.spawn import start_processes

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    t0 = time.perf_counter()
    store = TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(store.port),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }
    with tempfile.TemporaryDirectory(prefix="densegate-dp-") as tmp:
        where = out_dir or tmp
        Path(where).mkdir(parents=True, exist_ok=True)
        ctx = start_processes(  # type: ignore[no-untyped-call]
            _spawn_entry,
            args=(env, list(trace), config, where, backend),
            nprocs=world_size,
            join=False,
            start_method=_start_method(),
        )
        procs = ctx.processes
        marked: set[int] = set()
        failed_at: float | None = None  # when a survivor first reported a broken group
        while any(p.is_alive() for p in procs):
            for r, p in enumerate(procs):
                if not p.is_alive() and p.exitcode != 0 and r not in marked:
                    store.set(_DEAD.format(r), str(p.exitcode))
                    marked.add(r)
            if failed_at is None and any(
                store.check([_ALIVE.format(r)]) for r in range(world_size)
            ):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > config.timeout_s + 1:
                # Survivors have stopped waiting for them: a rank that never said it is
                # alive is hung, and would outlive the run.
                for r, p in enumerate(procs):
                    if p.is_alive() and not store.check([_ALIVE.format(r)]):
                        log.warning("rank %d hung after the group broke; killing it", r)
                        store.set(_DEAD.format(r), "killed")
                        p.kill()
                        p.join()
            time.sleep(0.05)
        for p in procs:
            p.join()
        exitcodes = [p.exitcode for p in procs]
        reports: dict[int, list[RankReport]] = {}
        for r in range(world_size):
            path = Path(where) / _REPORT.format(r)
            if path.exists():
                reports[r] = [RankReport.from_dict(d) for d in json.loads(path.read_text())]
    return DPResult(world_size, reports, exitcodes, time.perf_counter() - t0, len(trace))


# -- the summary -------------------------------------------------------------------------


def merge_reports(
    world_size: int,
    reports: dict[int, list[dict[str, Any]]],
    trace_len: int,
    wall_s: float,
    exitcodes: Sequence[int | None] | None = None,
) -> dict[str, Any]:
    """One JSON-ready summary from every reporting rank's phase reports.

    Every request must be finished by some rank, rejected, or reported lost
    with a dead rank; anything else is listed as ``unaccounted``.
    """
    by_phase: dict[str, dict[int, RankReport]] = collections.defaultdict(dict)
    for rank, reps in reports.items():
        for d in reps:
            rep = RankReport.from_dict(d)
            by_phase[rep.phase][rank] = rep
    main = by_phase.get("coordinated", {})
    if not main:
        return {"dp": world_size, "requests": trace_len, "error": "no rank reported"}
    first = main[min(main)]
    finished = sorted({rid for rep in main.values() for rid in rep.finished}, key=int)
    rejected = sorted({rid for rep in main.values() for rid in rep.rejected}, key=int)
    failures = {r: rep.failure for r, rep in main.items() if rep.failure is not None}
    # Survivors a failure names but whose reports are not here (under torchrun each
    # survivor reports alone) hold their own requests: "elsewhere", not unaccounted.
    elsewhere_ranks: set[int] = set()
    lost: set[str] = set()
    dead_set: set[int] = set()
    for f in failures.values():
        lost.update(f["lost_requests"])
        dead_set.update(f["dead_ranks"])
        elsewhere_ranks.update(set(f["survivors"]) - set(main))
    dead = sorted(dead_set | (set(range(world_size)) - set(main) - elsewhere_ranks))
    accounted = set(finished) | set(rejected) | lost
    unaccounted: list[str] = []
    elsewhere = 0
    for i in range(trace_len):
        rid = str(i)
        if rid in accounted:
            continue
        if first.assignment.get(rid) in elsewhere_ranks:
            elsewhere += 1
        else:
            unaccounted.append(rid)
    healthy = not failures and not dead
    decisions = {r: rep.decisions for r, rep in main.items()}
    agree = len({json.dumps(d) for d in decisions.values()}) == 1
    reasons = collections.Counter(reason for _, _, reason in first.decisions)
    alignment = {name: reps[min(reps)].alignment for name, reps in by_phase.items()}
    alignment_agree = all(
        len({json.dumps(rep.alignment, sort_keys=True) for rep in reps.values()}) == 1
        for reps in by_phase.values()
    )
    ranks = []
    for r in range(world_size):
        mine = main.get(r)
        row: dict[str, Any] = {"rank": r}
        if exitcodes is not None:
            row["exitcode"] = exitcodes[r]
        if mine is None:
            row["status"] = "survivor, reports alone" if r in elsewhere_ranks else "dead"
        else:
            row.update(
                status="fell back" if mine.failure else "ok",
                assigned=len(mine.assigned),
                finished=len(mine.finished),
                ticks=mine.ticks,
                wall_s=mine.wall_s,
                collective_ms_per_tick=mine.collective_ms_per_tick,
                **{k: v for k, v in mine.figures.items() if k not in ("requests", "finished")},
            )
        ranks.append(row)
    failure = None
    if failures:
        f = failures[min(failures)]
        failure = {
            "tick": f["tick"],
            "dead_ranks": dead,
            "detected_after_s": max(x["detected_after_s"] for x in failures.values()),
            "liveness_s": max(x["liveness_s"] for x in failures.values()),
            "finished_alone_s": max(x.get("finished_alone_s", 0.0) for x in failures.values()),
            "lost_requests": sorted(lost, key=int),
            "error": f["error"],
        }
    return {
        "dp": world_size,
        "router": first.router,
        "runner_kind": first.runner,
        "gate": first.gate,
        "requests": trace_len,
        "finished": len(finished),
        "rejected": len(rejected),
        "lost": len(lost),
        "unaccounted": unaccounted,
        "held_by_unreporting_survivors": elsewhere,
        "healthy": healthy,
        "decisions_agree": agree,
        "alignment_agree": alignment_agree,
        "ticks": first.ticks,
        "reasons": dict(sorted(reasons.items())),
        "alignment": alignment,
        "ranks": ranks,
        "failure": failure,
        "coordinated_wall_s": max(rep.wall_s for rep in main.values()),
        "wall_s": wall_s,
    }


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
    if isinstance(x, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in x.items()) or "-"
    return str(x)


def print_summary(s: dict[str, Any]) -> None:
    """The summary as rich tables: run, alignment per phase, ranks."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(
        title=f"densegate run --dp {s['dp']} (router {s.get('router')}, gate {s.get('gate')}, "
        f"runner {s.get('runner_kind')})",
        show_header=False,
    )
    t.add_column("figure")
    t.add_column("value")
    rows = [
        ("requests finished", f"{s['finished']} / {s['requests']}"),
        (
            "rejected / lost / unaccounted",
            f"{s['rejected']} / {s['lost']} / {len(s['unaccounted'])}",
        ),
        ("ticks", s["ticks"]),
        ("all ranks logged the same decisions", s["decisions_agree"]),
        ("aligned decisions", s["reasons"]),
        ("coordinated run seconds", s["coordinated_wall_s"]),
        ("wall seconds (all phases, start-up included)", s["wall_s"]),
    ]
    if s.get("held_by_unreporting_survivors"):
        rows.insert(2, ("held by survivors reporting alone", s["held_by_unreporting_survivors"]))
    for k, v in rows:
        t.add_row(k, _fmt(v))
    console.print(t)
    phase_names = list(s["alignment"])
    a = Table(title="alignment: a mixed tick has some rank prefilling while another only decodes")
    a.add_column("figure")
    for name in phase_names:
        a.add_column(name.replace("_", " "))
    for label, key in (
        ("ticks", "ticks"),
        ("prefill ticks", "prefill_ticks"),
        ("  ranks prefilled together", "aligned_prefill_ticks"),
        ("  every rank prefilled", "all_ranks_prefill_ticks"),
        ("  mixed", "mixed_ticks"),
        ("rank-ticks stalled by mixed", "stalled_rank_ticks"),
        ("mixed allowed by", "mixed_by_reason"),
    ):
        a.add_row(label, *(_fmt(s["alignment"][n][key]) for n in phase_names))
    console.print(a)
    r = Table(title="ranks (coordinated run)")
    r.add_column("figure")
    for row in s["ranks"]:
        r.add_column(f"rank {row['rank']}")
    for label, get in (
        ("status", lambda row: row.get("status")),
        ("requests assigned / finished", lambda row: f"{_fmt(row.get('assigned'))} / "
         f"{_fmt(row.get('finished'))}"),
        ("prompt / output tokens", lambda row: f"{_fmt(row.get('prompt_tokens'))} / "
         f"{_fmt(row.get('output_tokens'))}"),
        ("prefill / decode-only passes", lambda row: f"{_fmt(row.get('prefill_passes'))} / "
         f"{_fmt(row.get('decode_only_passes'))}"),
        ("TTFT passes p50 / p99", lambda row: "{} / {}".format(
            *(_fmt((row.get("ttft_passes") or {}).get(q)) for q in ("p50", "p99")))),
        ("runner ms per pass", lambda row: _fmt(row.get("runner_ms_per_pass"))),
        ("collective ms per tick", lambda row: _fmt(row.get("collective_ms_per_tick"))),
    ):  # fmt: skip
        r.add_row(label, *(str(get(row)) for row in s["ranks"]))
    console.print(r)
    f = s.get("failure")
    if f:
        console.print(
            f"[bold red]rank(s) {f['dead_ranks']} died at tick {f['tick']}[/]: survivors noticed "
            f"after {_fmt(f['detected_after_s'])} s, agreed on the dead in "
            f"{_fmt(f['liveness_s'])} s, finished alone in {_fmt(f['finished_alone_s'])} s; "
            f"lost requests: {f['lost_requests']}"
        )


# -- command lines -----------------------------------------------------------------------


def _dp_config(args: argparse.Namespace, runner: str) -> DPConfig:
    from densegate.impl.run_cmd import _config

    crash = None
    crash_mode = "exit"
    spec = os.environ.get("DENSEGATE_DP_CRASH")
    if spec:  # "RANK:TICK[:hang]", a fault-injection hook for tests and demos
        parts = spec.split(":")
        crash = (int(parts[0]), int(parts[1]))
        crash_mode = parts[2] if len(parts) > 2 else "exit"
    return DPConfig(
        _config(args, runner),
        router=getattr(args, "router", "round-robin"),
        timeout_s=getattr(args, "dp_timeout", 30.0),
        target_fill=getattr(args, "target_fill", 1.0),
        stall_ticks=getattr(args, "stall_ticks", 0),
        kv_pressure_valve=getattr(args, "kv_valve", False),
        seed=args.seed,
        baselines=not getattr(args, "no_baselines", False),
        crash=crash,
        crash_mode=crash_mode,
    )


def _trace(args: argparse.Namespace) -> list[TraceRequest]:
    from densegate.impl.workload import load_trace, synthetic_trace

    if args.trace:
        return load_trace(args.trace)
    n = 500 if args.gen is None else args.gen
    return synthetic_trace(n, args.seed, rate=args.rate, max_model_len=args.max_model_len)


def _runner(args: argparse.Namespace, n: int) -> str:
    """``auto``: as without --dp, torch up to 300 requests (ranks run one thread each)."""
    if args.runner != "auto":
        return str(args.runner)
    return "torch" if n <= 300 else "null"


def _exit_code(s: dict[str, Any]) -> int:
    return 0 if s.get("healthy") and not s.get("unaccounted") and not s.get("lost") else 1


def run_dp(args: argparse.Namespace) -> int:
    """``densegate run --dp N``: launch N local ranks, print the merged summary."""
    try:
        trace = _trace(args)
        config = _dp_config(args, _runner(args, len(trace)))
    except (ValueError, OSError) as e:
        print(f"densegate run: {e}", file=sys.stderr)
        return 2
    if args.dump_trace:
        from densegate.impl.workload import dump_trace

        dump_trace(trace, args.dump_trace)
    result = launch(trace, config, args.dp, out_dir=os.environ.get("DENSEGATE_DP_OUT"))
    summary = result.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(summary)
    return _exit_code(summary)


def build_parser() -> argparse.ArgumentParser:
    """``densegate run``'s options plus the DP knobs only this entry point has."""
    from densegate.impl.run_cmd import add_arguments

    p = argparse.ArgumentParser(
        prog="python -m densegate.impl.dp_run",
        description="one data-parallel rank (env:// rendezvous, e.g. under torchrun)",
    )
    add_arguments(p)
    g = p.add_argument_group("data parallel (this entry point only)")
    g.add_argument("--dp-out", metavar="DIR", help="write each rank's report to DIR/rankR.json")
    g.add_argument("--dp-backend", choices=["auto", "gloo", "nccl"], default="auto")
    g.add_argument("--target-fill", type=float, default=1.0)
    g.add_argument("--stall-ticks", type=int, default=0)
    g.add_argument("--kv-valve", action="store_true", help="fire while any rank's KV is >90%%")
    g.add_argument("--no-baselines", action="store_true", help="skip the uncoordinated runs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """One rank under torchrun (or hand-set env vars); rank 0 prints the merged summary."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    try:
        trace = _trace(args)
        config = _dp_config(args, _runner(args, len(trace)))
    except (ValueError, OSError) as e:
        print(f"dp_run: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rank, reports, everyone = rank_main(
        trace, config, args.dp_out, gather=True, backend=args.dp_backend
    )
    wall = time.perf_counter() - t0
    world = reports[0].world_size
    if everyone is not None:
        summary = merge_reports(world, dict(enumerate(everyone)), len(trace), wall)
    elif any(r.failure for r in reports):
        # The group is broken: each survivor reports what it knows.
        summary = merge_reports(world, {rank: [r.as_dict() for r in reports]}, len(trace), wall)
        summary["reported_by_rank"] = rank
    else:
        return 0
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(summary)
    return _exit_code(summary)


if __name__ == "__main__":
    sys.exit(main())
