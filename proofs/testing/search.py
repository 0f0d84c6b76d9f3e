"""Survey, then shrink per property: the search both halves of the sampled kit run.

One Hypothesis search (the survey) drives a gate over generated runs and notes the first
run that breaks each property; then, for every broken property, a search of its own
replays the same runs up to one that breaks it and shrinks it, and a pass-level sweep
deletes what shrinking left. So each violated property comes with its own minimal run,
whatever else the gate breaks. The single-rank kit (``check_gate``) and the aligned one
(``check_aligned_gate``) differ only in their runs and judges: a ``CachedDriver`` each.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

__all__ = [
    "CachedDriver",
    "Outcome",
    "check_fresh",
    "draw_seed",
    "first_breaks",
    "search_settings",
    "shrunk_violations",
    "target_name",
]

Rec = TypeVar("Rec")
R = TypeVar("R", bound=Hashable)


@dataclass
class Outcome(Generic[Rec]):
    """One run as driven: a record per pass, and the first break of each property."""

    records: list[Rec] = field(default_factory=list)
    first: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Property id -> (index of the breaking pass, -1 when building the gate; message)."""

    def flag(self, pid: str, at: int, message: str) -> None:
        self.first.setdefault(pid, (at, message))


class CachedDriver(Generic[R, Rec]):
    """Drives a factory's gates over runs, one simulation per distinct run, for every search.

    A subclass says how to simulate a run, read its passes and rebuild it with others.
    """

    def __init__(self) -> None:
        self.cache: dict[R, Outcome[Rec]] = {}
        self.passes = 0
        """Passes simulated so far (each distinct run once)."""

    def outcome(self, run: R) -> Outcome[Rec]:
        hit = self.cache.get(run)
        if hit is None:
            hit = self.cache[run] = self._simulate(run)
            self.passes += len(hit.records)
        return hit

    def _simulate(self, run: R) -> Outcome[Rec]:
        raise NotImplementedError

    def steps(self, run: R) -> tuple[Any, ...]:
        """The run's passes, in order."""
        raise NotImplementedError

    def with_steps(self, run: R, steps: tuple[Any, ...]) -> R:
        """The run's config with other passes."""
        raise NotImplementedError

    def prefix(self, run: R, pid: str) -> R:
        """The run cut after the pass that breaks ``pid``, keeping what was observed: a gate
        that is not deterministic need not break ``pid`` again when the prefix is replayed."""
        seen = self.outcome(run)
        at = seen.first[pid][0]
        cut = self.with_steps(run, self.steps(run)[: at + 1])
        self.cache[cut] = Outcome(
            seen.records[: at + 1], {k: v for k, v in seen.first.items() if v[0] <= at}
        )
        return cut


def target_name(factory: object) -> str:
    """``module:qualname`` of a factory, as a report names it."""
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None) or type(factory).__name__
    return f"{module}:{name}" if module else str(name)


def check_fresh(build: Callable[[], object], max_examples: int) -> None:
    """Refuse, before any search, a survey of no runs and a factory that returns None or the
    same object twice (a kit judges fresh gates). A factory that raises is left to the runs,
    which report it pass by pass."""
    if max_examples < 1:
        raise ValueError(f"max_examples must be >= 1, got {max_examples}")
    try:
        built = (build(), build())
    except Exception:
        return
    if built[0] is None:
        raise TypeError("factory returned None: it must return a fresh gate")
    if built[0] is built[1]:
        raise TypeError("factory returned the same object twice: it must build a fresh gate")


def draw_seed(seed: int | None, *, derandomize: bool) -> int | None:
    """The seed a report names: the caller's, a fresh one when not derandomized, else None."""
    return random.getrandbits(64) if seed is None and not derandomize else seed


def first_breaks(
    driver: CachedDriver[R, Rec], found: dict[str, R], pid: str
) -> tuple[R, tuple[Rec, ...], str] | None:
    """``pid``'s shrunk run, its records up to the pass that breaks it and the message; None
    when no run broke it."""
    run = found.get(pid)
    if run is None:
        return None
    seen = driver.outcome(run)
    at, message = seen.first[pid]
    return run, tuple(seen.records[: at + 1]), message


def search_settings(max_examples: int, *, derandomize: bool) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


def shrunk_violations(
    strata: Sequence[tuple[st.SearchStrategy[R], int]],
    driver: CachedDriver[R, Rec],
    ids: Iterable[str],
    *,
    seed: int | None,
) -> dict[str, R]:
    """Each property of ``ids`` that some run of the survey breaks, with its own shrunk run.

    The survey draws each stratum's runs (``(strategy, max_examples)``), derandomized when
    ``seed`` is None, else from it; a broken property's own search replays the stratum that
    first broke it.
    """

    def search(
        stratum: tuple[st.SearchStrategy[R], int], condition: Callable[[R], bool]
    ) -> R | None:
        strategy, n = stratum
        rnd = None if seed is None else random.Random(seed)
        conf = search_settings(n, derandomize=seed is None)
        try:
            return find(strategy, condition, settings=conf, random=rnd)
        except NoSuchExample:
            return None

    first_seen: dict[str, tuple[int, R]] = {}

    def survey(k: int) -> Callable[[R], bool]:
        def note(run: R) -> bool:
            for pid in driver.outcome(run).first:
                first_seen.setdefault(pid, (k, run))
            return False

        return note

    for k, stratum in enumerate(strata):
        search(stratum, survey(k))
    found: dict[str, R] = {}
    for pid in ids:
        if pid in first_seen:
            k, seen = first_seen[pid]
            # Replays the stratum's runs up to the first that breaks pid, then shrinks it.
            shrunk = search(strata[k], _breaks(driver, pid))
            found[pid] = trim(driver, seen if shrunk is None else shrunk, pid)
    return found


def _breaks(driver: CachedDriver[R, Rec], pid: str) -> Callable[[R], bool]:
    return lambda run: pid in driver.outcome(run).first


def trim(driver: CachedDriver[R, Rec], run: R, pid: str) -> R:
    """Delete passes, in blocks of halving powers of two, while ``pid`` stays broken.

    Hypothesis shrinks the segments a run is drawn from; a pass-level sweep afterwards
    removes stretches it could not, so printed runs stay short.
    """
    run = driver.prefix(run, pid)
    block = 1 << max(len(driver.steps(run)) - 1, 1).bit_length()  # 2^k keeps a counter's parity
    while block >= 1:
        i, progress = 0, False
        while i < len(steps := driver.steps(run)):
            cand = driver.with_steps(run, steps[:i] + steps[i + block :])
            if pid in driver.outcome(cand).first:
                run, progress = driver.prefix(cand, pid), True
            else:
                i += block
        if not progress:
            block //= 2
    return run
