"""The aligned-gate lockstep machine: ``AlignedGate`` and the dp spec, tick by tick.

Every tick draws one local observation per rank, builds each rank's vector,
sums them (the all-reduce), and asks the implementation and the spec's relation
for the decision; the spec also gets one rank's own summand and a wall clock it
must ignore. Besides, N replicas of the gate (one per rank) are fed the same
reduced vector and must never diverge. Decision, reason, cap (``Decision.cap``, the
spec's 0 for none) and state are compared; the paced mode is drawn in some runs
(``PacedLockstep``: in every run). Importable, so the mutation tests can point it at a
broken implementation.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import densegate.impl.dp_gate
from densegate.spec.dp_gate import DP
from densegate.spec.machine import Machine, evaluate
from tests.support.dp_slots import LOCAL, SHARED

dense_tokens = st.one_of(st.integers(1, 12), st.integers(13, 4096))
hold_budgets = st.one_of(st.integers(1, 8), st.integers(9, 40))
world_sizes = st.one_of(st.just(1), st.integers(2, 4), st.integers(5, 8))
target_fills = st.one_of(
    st.just(1.0), st.sampled_from([0.1, 0.25, 0.3, 0.5, 2 / 3, 0.75, 0.9]), st.floats(0.01, 1.0)
)
stall_ticks = st.one_of(st.just(0), st.integers(1, 6))
align_ticks = st.one_of(st.none(), st.just(0), st.integers(1, 5))
pace_tokens = st.integers(1, 64)
"""A pace cap: the spec takes any value in [cmin, cmax]; the lockstep passes cmin = 1 and
cmax = the cap itself, which the gate never reads."""
surge_extra = st.one_of(st.none(), st.just(0), st.integers(1, 64))
"""The surge cap as pace_tokens plus this (None: off, the spec's Cs = Cp)."""
busy_decodes = st.integers(1, 24)
"""The paced mode's busy wait, small enough that drawn decodes reach it (``BusyLockstep``)."""
run_lengths = st.integers(1, 30)
advances = st.sampled_from([1, 1, 1, 1, 0, 3])


class AlignedLockstep(RuleBasedStateMachine):
    """Drives an aligned-gate implementation and a spec machine with the same vectors."""

    impl: ClassVar[ModuleType] = densegate.impl.dp_gate
    """A module with AlignedGate, AlignedGateConfig, RankObservation, ReducedObservation."""
    spec: ClassVar[Machine] = DP
    ticks: ClassVar[int] = 0
    paces: ClassVar[st.SearchStrategy[int | None]] = st.one_of(st.none(), st.none(), pace_tokens)
    """The paced mode's cap (None: off), drawn once per run."""
    busies: ClassVar[st.SearchStrategy[int | None]] = st.none()
    """The busy wait's ``busy_decodes`` with the paced mode on (off here: ``BusyLockstep``)."""
    paced_ticks: ClassVar[int] = 0
    surged_ticks: ClassVar[int] = 0
    """PACED ticks that carried a surge cap other than pace_tokens (a rank was filled)."""
    busy_ticks: ClassVar[int] = 0
    """Paced-mode ticks the busy wait held (or ended by BUDGET or STALL)."""

    @initialize(
        B=dense_tokens,
        K=hold_budgets,
        N=world_sizes,
        enabled=st.sampled_from([True, True, True, False]),
        fill=target_fills,
        S=stall_ticks,
        kv=st.booleans(),
        A=align_ticks,
        data=st.data(),
    )
    def setup(
        self,
        B: int,
        K: int,
        N: int,
        enabled: bool,
        fill: float,
        S: int,
        kv: bool,
        A: int | None,
        data: st.DataObject,
    ) -> None:
        m = self.impl
        pace = data.draw(self.paces, label="pace_tokens")
        extra = None if pace is None else data.draw(surge_extra, label="surge above pace")
        surge = None if pace is None or extra is None else pace + extra
        busy = None if pace is None else data.draw(self.busies, label="busy_decodes")
        self.config = m.AlignedGateConfig(B, K, enabled, fill, S, kv, A, pace, surge, busy)
        self.gate = m.AlignedGate(self.config, N)
        self.replicas = [m.AlignedGate(self.config, N) for _ in range(N)]
        T = self.config.fill_tokens
        assert 1 <= T <= B
        self.params = {"B": B, "K": K, "N": N, "T": T, "S": S, "kv": kv, "enabled": enabled}
        self.params |= {"al": A is not None, "A": 0 if A is None else A}
        cs = surge or pace or 1
        self.params |= {"pc": pace is not None, "Cp": pace or 1, "Cs": cs, "cmin": 1, "cmax": cs}
        self.params |= {"bz": busy is not None, "Db": busy or 1}
        self.state = {"h": 0, "q": 0, "g": 0}
        self.tick = 0
        self._strategies()

    # -- one tick ---------------------------------------------------------------------
    def _tick(self, ranks: list[Any], who: int, clock: int, advance: int = 1) -> None:
        vectors = [self.gate.contribution(r) for r in ranks]
        total = [sum(col) for col in zip(*vectors, strict=True)]
        reduced = self.impl.ReducedObservation.from_sum(total, len(ranks))
        dec = self.gate.decide(reduced, self.tick)
        own = vectors[who % len(ranks)]
        obs = dict(zip(SHARED, total[1:], strict=True)) | {"t": self.tick, "clock": clock}
        obs |= {k: own[i] for k, i in LOCAL.items()}
        _, out, nxt = evaluate(self.spec, self.params, self.state, obs)
        AlignedLockstep.ticks += 1
        AlignedLockstep.paced_ticks += dec.cap is not None
        AlignedLockstep.surged_ticks += dec.cap is not None and dec.cap != self.params["Cp"]
        AlignedLockstep.busy_ticks += self.params["pc"] and dec.reason.name in (
            "HOLD", "BUDGET", "STALL")  # fmt: skip
        got = (dec.fire, dec.reason.name, dec.cap or 0, tuple(self.gate.state))
        want = (out["fire"], out["reason"], out["cap"], (nxt["h"], nxt["q"], nxt["g"]))
        assert got == want, f"tick {self.tick} {obs} state {self.state}: impl {got} != spec {want}"
        for replica in self.replicas:
            assert replica.decide(reduced, self.tick) == dec
            assert replica.state == self.gate.state
        self.state = nxt
        self.tick += advance

    def _strategies(self) -> None:
        """Built once per run: building strategies per draw costs more than the gate."""
        B, n = self.params["B"], self.params["N"]
        some = st.one_of(st.just(0), st.integers(1, max(1, B - 1)), st.integers(B, 2 * B + 3))
        few = st.sampled_from([False, False, False, True])

        def ranks(waiting: st.SearchStrategy[int], decodes: st.SearchStrategy[int]) -> Any:
            rank = st.tuples(waiting, decodes, few, st.booleans())
            return st.lists(rank, min_size=n, max_size=n)

        self.any_ranks = ranks(some, st.integers(0, 64))
        self.trickle_ranks = ranks(st.integers(1, 3), st.integers(1, 8))
        self.dense_ranks = ranks(st.integers(B, 2 * B), st.integers(1, 8))
        self.idle_ranks = ranks(st.just(0), st.integers(0, 8))
        self.stuck_ranks = ranks(some, st.just(0))
        lopsided = st.one_of(st.just(0), st.integers(B, 2 * B))
        self.lopsided_ranks = ranks(lopsided, st.integers(0, 8))
        # Every rank waits under its fill share and decodes, or is vacant (nothing waits or
        # decodes); no KV pressure: ALIGNED's ground.
        short = st.integers(1, max(1, self.config.fill_tokens - 1))
        calm = st.tuples(short, st.integers(1, 8), st.just(False), st.booleans())
        vacant = st.just((0, 0, False, False))
        calm_or_vacant = st.one_of(calm, calm, vacant)
        self.aligned_ranks = st.lists(calm_or_vacant, min_size=n, max_size=n)
        # One hot rank with a full batch, the others thin, vacant or decoding only.
        cold = st.tuples(st.integers(0, 2), st.integers(0, 8), few, st.booleans())
        hot = st.tuples(st.integers(B, 2 * B), st.integers(0, 8), few, st.booleans())
        self.skewed_ranks = st.tuples(hot, st.lists(cold, min_size=n - 1, max_size=n - 1))
        # Full batches, one rank decoding with nothing waiting: the busy wait's ground.
        thin = st.tuples(st.integers(1, max(1, B - 1)), st.integers(4, 12), few, st.booleans())
        self.busy_ranks = st.tuples(st.integers(4, 12), st.lists(thin, min_size=n - 1,
                                                                  max_size=n - 1))  # fmt: skip

    def _draw(self, data: st.DataObject, strategy: Any) -> list[Any]:
        rows = data.draw(strategy, label="ranks")
        return [self.impl.RankObservation(*row) for row in rows]

    # -- rules --------------------------------------------------------------------------
    @rule(data=st.data(), who=st.integers(0, 7), clock=st.integers(0, 10**6), adv=advances)
    def one_tick(self, data: st.DataObject, who: int, clock: int, adv: int) -> None:
        self._tick(self._draw(data, self.any_ranks), who, clock, adv)

    @rule(data=st.data(), n=run_lengths, who=st.integers(0, 7))
    def quiet_run(self, data: st.DataObject, n: int, who: int) -> None:
        """The same vector again and again: budget and stall valve territory."""
        ranks = self._draw(data, self.any_ranks)
        for i in range(n):
            self._tick(ranks, who, clock=1000 - i)

    @rule(data=st.data(), n=run_lengths, step=st.integers(1, 3))
    def growing_run(self, data: st.DataObject, n: int, step: int) -> None:
        """Under-full work that keeps arriving on rank 0: the fill grows until capped."""
        ranks = self._draw(data, self.trickle_ranks)
        for i in range(n):
            grown = self.impl.RankObservation(ranks[0].waiting_tokens + i * step, 4)
            self._tick([grown, *ranks[1:]], who=i, clock=7 * i)

    @rule(data=st.data(), n=run_lengths)
    def all_dense(self, data: st.DataObject, n: int) -> None:
        ranks = self._draw(data, self.dense_ranks)
        for i in range(n):
            self._tick(ranks, who=i, clock=i)

    @rule(data=st.data(), n=run_lengths)
    def lopsided(self, data: st.DataObject, n: int) -> None:
        """Some ranks have a full batch, others nothing: the mixed tick DENSE must avoid."""
        ranks = self._draw(data, self.lopsided_ranks)
        for i in range(n):
            self._tick(ranks, who=i, clock=3 * i)

    @rule(data=st.data(), n=run_lengths)
    def skewed(self, data: st.DataObject, n: int) -> None:
        """One hot rank fills a pass of its own, the cold ones cannot: DENSE (paced mode
        off) must not wait for them."""
        hot, cold = data.draw(self.skewed_ranks, label="ranks")
        ranks = [self.impl.RankObservation(*row) for row in (*cold, hot)]
        for i in range(n):
            self._tick(ranks, who=i, clock=i)

    @rule(data=st.data(), n=run_lengths)
    def all_waiting_thin(self, data: st.DataObject, n: int) -> None:
        """Every rank waits or is vacant, none has its fill share: ALIGNED fires at h = A."""
        ranks = self._draw(data, self.aligned_ranks)
        for i in range(n):
            self._tick(ranks, who=i, clock=i)

    @rule(data=st.data(), n=run_lengths)
    def nothing_waiting(self, data: st.DataObject, n: int) -> None:
        ranks = self._draw(data, self.idle_ranks)
        for i in range(n):
            self._tick(ranks, who=i, clock=i)

    @rule(data=st.data(), n=run_lengths)
    def nothing_decoding(self, data: st.DataObject, n: int) -> None:
        ranks = self._draw(data, self.stuck_ranks)
        for i in range(n):
            self._tick(ranks, who=i, clock=i)

    @rule()
    def reset_everywhere(self) -> None:
        self.gate.reset()
        for replica in self.replicas:
            replica.reset()
        self.state = {"h": 0, "q": 0, "g": 0}

    @invariant()
    def counter_bounded(self) -> None:
        if hasattr(self, "gate"):
            assert 0 <= self.gate.hold_passes < self.params["K"]


class PacedLockstep(AlignedLockstep):
    """The same lockstep with the paced mode on in every run."""

    paces: ClassVar[st.SearchStrategy[int | None]] = pace_tokens


class BusyLockstep(PacedLockstep):
    """The paced lockstep with the busy wait on in every run, and a rule for its ground."""

    busies: ClassVar[st.SearchStrategy[int | None]] = busy_decodes

    @rule(data=st.data(), n=run_lengths, delta=st.sampled_from([-1, 0, 0, 1, 8]))
    def busy(self, data: st.DataObject, n: int, delta: int) -> None:
        """Batches full, one rank decoding with nothing waiting, the decodes at
        ``busy_decodes`` plus ``delta``: the paced mode's busy wait holds (at most K - 1
        ticks) from ``delta`` 0 on, and not one decode short."""
        _, waiting = data.draw(self.busy_ranks, label="ranks")
        others = [self.impl.RankObservation(*row) for row in waiting]
        need = int(self.config.busy_decodes or 1) - sum(r.decode_seqs for r in others)
        for d in (delta, 0):  # the drawn offset, then the decodes at busy_decodes exactly
            ranks = [self.impl.RankObservation(0, max(1, need + d)), *others]
            for i in range(n):
                self._tick(ranks, who=i, clock=i)
