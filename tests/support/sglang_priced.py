"""SGLang's DP ranks in lockstep threads on the modeled clock: the side by side's arms.

Each rank is a ``RankLoad`` (``tests.support.sglang_load``) driven through SGLang's real
``PrefillDelayerSinglePassExecutor``; the arms differ only in the delayer behind it:

- ``plain``: SGLang without ``--enable-prefill-delayer`` (no executor is consulted in
  ``Scheduler.get_new_batch_prefill``: a prefill is always allowed);
- ``sglang``: SGLang's own ``PrefillDelayer``, built with ``__new__`` and its fields set
  as its constructor would (no low watermark, no queue trigger), its ``_gather_info``
  an in-process gather of the ranks' real contributions (as SGLang's own CPU test of
  the delayer does);
- ``densegate``: ``DenseGatePrefillDelayer`` at its defaults, its all-gather an
  in-process sum, fed the pass observation its scheduler hook records.

Between passes the ranks meet (a barrier whose action runs alone): the pass just run is
priced (``StepClock.close``: the slowest rank's modeled pass plus the collective; a pass
in which no rank ran anything costs the collective, the delayer's gather), the arrivals
the clock has passed reach their ranks, and when no rank has anything to do the clock
jumps to the next arrival (SGLang's scheduler blocks on its input there: no pass).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from densegate.integrations.sglang.config import PluginSettings
from densegate.lab.bench.step_price import StepClock
from tests.support.sglang_load import Limits, PassResult, RankLoad

BARRIER_TIMEOUT_S = 120
"""A rank that misses a pass's gather fails the run (BrokenBarrierError), never hangs it."""
MAX_PASSES = 60_000
"""A run that has not drained by then stops (and shows unfinished requests)."""


@dataclass(frozen=True, slots=True)
class Routed:
    """One request: its modeled arrival (us), lengths and the rank it is routed to."""

    at_us: int
    prompt_len: int
    output_len: int
    rank: int


class Exchange:
    """The in-process collective: every rank posts its row, all read every row."""

    def __init__(self, dp: int) -> None:
        self.rows: list[list[list[int]]] = [[[] for _ in range(dp)] for _ in range(2)]
        self.barrier = threading.Barrier(dp, timeout=BARRIER_TIMEOUT_S)
        self.calls = [0] * dp

    def gather(self, rank: int, row: list[int]) -> list[list[int]]:
        buf = self.rows[self.calls[rank] % 2]  # two buffers: a fast rank cannot overwrite
        self.calls[rank] += 1
        buf[rank] = row
        self.barrier.wait()
        return [list(r) for r in buf]


class NoDelayer:
    """The executor's place without a delayer: every prefill allowed, nothing gathered."""

    def negotiate_should_allow_prefill(self, **_: Any) -> bool:
        return True

    def finalize(self, actual_prefill_bs: int) -> int:
        return actual_prefill_bs


def sglang_delayer(dp: int, rank: int, ex: Exchange, k: int) -> Any:
    import torch
    from sglang.srt.managers.prefill_delayer import PrefillDelayer

    d = PrefillDelayer.__new__(PrefillDelayer)
    fields = {  # what PrefillDelayer.__init__ sets, with SGLang's defaults
        "_max_delay_passes": k,
        "_token_usage_low_watermark": None,
        "_debug_log_enabled": False,
        "_queue_min_ratio": None,
        "_max_delay_ms": 5000.0,
        "_queue_trigger_enabled": False,
        "_prefill_max_requests": None,
        "num_dp_ranks": dp,
        "attn_dp_enabled": True,
        "_metrics_collector": None,
        "_curr_state": None,
        "skip_first_delayer": True,
    }
    for name, v in fields.items():
        setattr(d, name, v)

    def gather_info(**info: Any) -> Any:
        row = [int(info["local_prefillable"]), int(info["local_token_watermark_force_allow"])]
        row += [int(info[n]) for n in ("running_batch", "max_prefill_bs", "waiting_queue_len")]
        row.append(int(info["queue_timeout_expired"]))
        return torch.tensor(ex.gather(rank, row), dtype=torch.int64)

    d._gather_info = gather_info
    return d


def densegate_delayer(
    dp: int, rank: int, ex: Exchange, k: int, limits: Limits, settings: PluginSettings | None = None
) -> Any:
    """densegate's delayer with ``settings`` (a ``PluginSettings``; None: the defaults)."""
    from densegate.integrations.sglang.config import gate_config
    from densegate.integrations.sglang.delayer import DenseGatePrefillDelayer

    d = DenseGatePrefillDelayer.__new__(DenseGatePrefillDelayer)
    d.settings = PluginSettings() if settings is None else settings
    d.gate_config = gate_config(
        d.settings,
        max_delay_passes=k,
        max_prefill_tokens=limits.max_prefill_tokens,
        chunked_prefill_size=limits.chunked_prefill_size,
        max_running_requests=limits.max_running_requests,
        ranks=dp,
    )
    d.token_usage_low_watermark = None
    d._start(
        num_dp_ranks=dp,
        attn_dp_enabled=True,
        group=None,
        device="cpu",
        width=1,
        metrics_collector=None,
        debug_log=False,
    )
    d.reduce = lambda vec: [sum(col) for col in zip(*ex.gather(rank, vec), strict=True)]
    return d


@dataclass
class PricedRun:
    passes: list[list[PassResult]]
    loads: list[RankLoad]
    clock: StepClock


def run_priced(
    dp: int,
    requests: Sequence[Routed],
    policy: str,
    limits: Limits,
    clock: StepClock,
    k: int,
    settings: PluginSettings | None = None,
) -> PricedRun:
    """One arm over ``requests`` (``clock.arrivals_us`` are their times), ranks as threads;
    ``settings``: the densegate arm's ``PluginSettings`` (None: the plugin's defaults)."""
    from sglang.srt.managers.prefill_delayer import (
        PrefillDelayerSinglePassExecutor,
        RecentPrefillBatchSizeTracker,
    )

    from densegate.integrations.sglang.observe import PassObservation

    ex = Exchange(dp)
    loads = [RankLoad(limits) for _ in range(dp)]
    passes: list[list[PassResult]] = [[] for _ in range(dp)]
    state = {"t": 0, "ran": False, "stop": False}

    def route() -> None:
        for i in clock.due():
            r = requests[i]
            loads[r.rank].arrive(r.prompt_len, r.output_len, r.at_us, state["t"])

    def between() -> None:  # every rank waits here; this runs alone
        if state["ran"]:
            clock.close([p[-1].work for p in passes])
            state["t"] += 1
        route()
        if not any(load.has_work() for load in loads):
            if clock.idle():
                route()
            else:
                state["stop"] = True
        if state["t"] >= MAX_PASSES:
            state["stop"] = True
        state["ran"] = not state["stop"]

    tick = threading.Barrier(dp, action=between, timeout=BARRIER_TIMEOUT_S)
    errors: list[BaseException] = []
    make: dict[str, Callable[[int], Any]] = {
        "plain": lambda rank: None,
        "sglang": lambda rank: sglang_delayer(dp, rank, ex, k),
        "densegate": lambda rank: densegate_delayer(dp, rank, ex, k, limits, settings),
    }

    def rank_loop(rank: int) -> None:
        try:
            delayer, load = make[policy](rank), loads[rank]
            tracker = RecentPrefillBatchSizeTracker(window_size=16)
            hook = None
            if policy == "densegate":

                def hook(view: RankLoad) -> None:
                    delayer.observe_pass(PassObservation(*view.observation()))

            while True:
                tick.wait()
                if state["stop"]:
                    return
                executor: Any = NoDelayer()
                if delayer is not None:
                    executor = PrefillDelayerSinglePassExecutor(
                        delayer, token_usage=load.token_usage()
                    )
                passes[rank].append(load.step(int(state["t"]), executor, tracker, before=hook))
        except BaseException as e:
            errors.append(e)
            ex.barrier.abort()
            tick.abort()

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(dp)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return PricedRun(passes, loads, clock)
