"""Starting ranks: each rank's process entry, and the launcher that starts N on 127.0.0.1.

``rank_main`` joins the ``env://`` group (as under torchrun), runs every phase
and writes its reports to ``rank{R}.json`` as each phase ends (so a rank that
dies in a later phase has still reported the phases it finished). ``launch`` starts N such processes
with ``torch.multiprocessing`` (forkserver, so torch is imported once rather
than once per rank; spawn where there is no forkserver). The parent hosts the
rendezvous store and hands each child the environment torchrun would give it
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE), so
the children take the ``env://`` path exactly as under torchrun. Because the
store lives in the parent, it outlives any rank: the parent marks a rank that
exited abnormally as dead in it (so survivors need not wait for it), kills a
rank the survivors agreed is gone (a hung one), and at the end reads every
rank's stream of every phase from it: what a caller was sent
(``DPResult.streams``), which also accounts for a phase a dead rank finished
but could not report.

Nothing outlives the launcher: its children die with it, SIGKILL included, and a
Ctrl-C stops the ranks and raises ``Interrupted`` with what they had reported
(``densegate.impl.dp.lifetime``).
"""

from __future__ import annotations

import datetime
import json
import logging
import multiprocessing
import os
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from densegate.impl.dp.collective import Collective, Excluded, TorchCollective, agree_backend
from densegate.impl.dp.config import DPConfig, check_trace
from densegate.impl.dp.hooks import NO_HOOKS, RankHooks
from densegate.impl.dp.lifetime import LAUNCHER_ENV, arm_rank
from densegate.impl.dp.membership import DEAD_KEY, EXCLUDED_KEY, STREAM_KEY
from densegate.impl.dp.rank import run_rank
from densegate.impl.dp.report import RankReport
from densegate.impl.dp.summary import merge_reports
from densegate.impl.traces.workload import TraceRequest
from densegate.impl.validation import check_int

__all__ = ["EXCLUDED_EXIT_CODE", "DPResult", "Interrupted", "launch", "rank_main"]

log = logging.getLogger("densegate.dp")

_REPORT = "rank{}.json"
EXCLUDED_EXIT_CODE = 18
"""Exit status of a rank that found the survivors had agreed it was gone."""


def rank_main(
    trace: Sequence[TraceRequest],
    config: DPConfig,
    out_dir: str | None = None,
    *,
    gather: bool = False,
    backend: str = "auto",
    hooks: RankHooks = NO_HOOKS,
    wrap: Callable[[Collective], Collective] | None = None,
) -> tuple[int, list[RankReport], list[list[dict[str, Any]]] | None]:
    """Join the ``env://`` group, run every phase, write ``out_dir/rank{R}.json`` (all the
    phases so far, rewritten as each ends).

    ``wrap`` (a top-level callable, pickled to the rank) may extend the rank's collective,
    e.g. the bench's extra slots after the runtime's (one all-reduce a tick still).

    Returns ``(rank, this rank's reports, every rank's reports)``; the last is
    gathered onto rank 0 only with ``gather`` and a healthy group (else None).
    ``ValueError`` before joining if a trace request cannot fit the engine.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.rendezvous import rendezvous

    check_trace(trace, config)

    rdzv_timeout = datetime.timedelta(seconds=config.startup_timeout_s)
    store, rank, world = next(rendezvous("env://", timeout=rdzv_timeout))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt:  # torchrun's agent store outlives a restart: keep each attempt's keys apart
        store = dist.PrefixStore(f"densegate/attempt{attempt}", store)  # type: ignore[attr-defined]
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    engine = config.engine
    device = "cpu"
    chosen = agree_backend(store, rank, world, engine.device, backend)
    if engine.device.startswith("cuda") and torch.cuda.is_available():
        dev = f"cuda:{local_rank % torch.cuda.device_count()}"
        config = config.on_device(dev)
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
    collective: Collective = TorchCollective(
        rank, world, store, config.timeout_s, config.startup_timeout_s, device, config.grace
    )
    if wrap is not None:
        collective = wrap(collective)

    def write(so_far: list[RankReport]) -> None:
        if out_dir is not None:
            path = Path(out_dir) / _REPORT.format(rank)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps([r.as_dict() for r in so_far]))
            tmp.replace(path)  # atomic: a rank killed while writing leaves the last phase's

    reports = run_rank(rank, world, trace, config, collective, hooks=hooks, on_phase=write)
    everyone: list[list[dict[str, Any]]] | None = None
    healthy = all(not r.faults for r in reports)
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
    hooks: RankHooks,
    wrap: Callable[[Collective], Collective] | None,
) -> None:
    arm_rank()  # the launcher stops the ranks on Ctrl-C; its death kills them
    os.environ.update(env)
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(index)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    try:
        rank_main(trace, config, out_dir, backend=backend, hooks=hooks, wrap=wrap)
    except Excluded as e:
        logging.getLogger("densegate.dp").warning("%s; stopping", e)
        os._exit(EXCLUDED_EXIT_CODE)
    except BaseException:
        # torch's spawn wrapper queues the traceback for a join() this launcher
        # never calls: print it, or a crashed rank dies silently.
        traceback.print_exc()
        raise


def _start_method() -> str:
    """forkserver where there is one: torch is imported once, in the server, and every
    rank forks from it (spawn would import torch in each rank, seconds apiece). The
    server imports ``lifetime`` first: armed before the seconds torch takes."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["densegate.impl.dp.lifetime", "torch", "torch.distributed", "densegate.impl.dp.launch"]
    )
    return "forkserver"


@dataclass(eq=False)
class DPResult:
    """A finished ``launch``: every rank's reports (of the phases it finished), exit codes,
    wall time, and each rank's stream of each phase as the store kept it: ``streams[phase
    name][rank]`` (``membership.read_stream`` reads one)."""

    world_size: int
    reports: dict[int, list[RankReport]]
    exitcodes: list[int | None]
    wall_s: float
    trace_len: int
    streams: dict[str, dict[int, bytes]]

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
            self.streams,
        )


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped ``launch``: every rank is stopped; ``result`` holds the phases they had
    reported and the streams the store kept (its ``exitcodes``: the stopped ranks')."""

    def __init__(self, result: DPResult) -> None:
        super().__init__("interrupted")
        self.result = result


def launch(
    trace: Sequence[TraceRequest],
    config: DPConfig,
    world_size: int,
    *,
    backend: str = "auto",
    out_dir: str | None = None,
    hooks: RankHooks = NO_HOOKS,
    wrap: Callable[[Collective], Collective] | None = None,
) -> DPResult:
    """Start ``world_size`` rank processes on 127.0.0.1 and wait for all of them.

    Ranks that exit abnormally are marked dead in the store at once; a rank
    the survivors agreed is gone is killed (it hung, or would only stop itself).
    ``hooks`` and ``wrap`` go to every rank pickled (``densegate.impl.dp.hooks``;
    ``rank_main``). ``ValueError`` before any process starts if a trace request cannot fit the
    engine (``densegate.impl.dp.config.check_trace``). Ctrl-C (``KeyboardInterrupt``) stops
    every rank and raises ``Interrupted``, a ``KeyboardInterrupt``, with the partial result.
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    check_int("launch", "world_size", world_size, 1)
    check_trace(trace, config)
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
        before = set(multiprocessing.active_children())
        procs: list[Any] = []
        handler: Any = None  # SIGINT's, while a Ctrl-C's cleanup ignores another one
        try:
            ctx = _start(world_size, (env, list(trace), config, where, backend, hooks, wrap))
            procs = ctx.processes
            _watch(procs, store)
        except KeyboardInterrupt:
            handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
            procs = procs or [p for p in multiprocessing.active_children() if p not in before]
            for p in procs:
                p.kill()
        for p in procs:
            p.join()
        exitcodes = [p.exitcode for p in procs] + [None] * (world_size - len(procs))
        reports: dict[int, list[RankReport]] = {}
        for r in range(world_size):
            path = Path(where) / _REPORT.format(r)
            if path.exists():
                reports[r] = [RankReport.from_dict(d) for d in json.loads(path.read_text())]
        streams: dict[str, dict[int, bytes]] = {}
        for k, phase in enumerate(config.run_phases):
            keys = [STREAM_KEY.format(k, r) for r in range(world_size)]
            streams[phase.name] = {
                r: store.get(key) if store.check([key]) else b"" for r, key in enumerate(keys)
            }
    result = DPResult(world_size, reports, exitcodes, time.perf_counter() - t0, len(trace), streams)
    if handler is not None:
        signal.signal(signal.SIGINT, handler)
        raise Interrupted(result)
    return result


def _start(world_size: int, args: tuple[Any, ...]) -> Any:
    """Start the ranks; the forkserver, started with the first, learns it is ours."""
    from torch.multiprocessing.spawn import start_processes

    before = os.environ.get(LAUNCHER_ENV)
    os.environ[LAUNCHER_ENV] = str(os.getpid())  # set only while our processes start
    try:
        return start_processes(  # type: ignore[no-untyped-call]
            _spawn_entry, args=args, nprocs=world_size, join=False, start_method=_start_method()
        )
    finally:
        if before is None:
            os.environ.pop(LAUNCHER_ENV, None)
        else:
            os.environ[LAUNCHER_ENV] = before


def _watch(procs: Sequence[Any], store: Any) -> None:
    """Wait for every rank: mark one that exited abnormally dead in the store, kill one
    the survivors agreed is gone."""
    marked: set[int] = set()
    while any(p.is_alive() for p in procs):
        for r, p in enumerate(procs):
            if r in marked:
                continue
            if not p.is_alive() and p.exitcode != 0:
                store.set(DEAD_KEY.format(r), str(p.exitcode))
                marked.add(r)
            elif p.is_alive() and store.check([EXCLUDED_KEY.format(r)]):
                log.warning("rank %d was agreed gone by the survivors; killing it", r)
                p.kill()
                p.join()
                store.set(DEAD_KEY.format(r), "killed")
                marked.add(r)
        time.sleep(0.02)
