"""Check anyone's gate against the proved machine, property by property.

``check_gate(factory)`` builds gates with ``factory(GateConfig)``, drives them
with generated runs of observations, and judges the observed behaviour against
each of P1-P7 separately and against the spec's relation (agreement). A survey
of generated runs finds which properties break; then, for each broken one, a
Hypothesis search of its own finds and shrinks a run that breaks it, so every
violated property comes with its own minimal run, printed pass by pass.

"Held" means no run among those generated broke the property: evidence, not a
proof. The proofs are about the spec; this kit is how an engine's own gate is
tied to them.

A gate that also has ``decide_raw(GateInput, RawCounts)`` is given the raw list
counts of each pass as well (running list, queued tokens); properties are
always judged on the honest counts (``w``, ``d``), which is how a gate that
trusts the raw lists is caught.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from densegate.impl.gate import Decision, GateConfig, GateInput, Reason
from densegate.spec.gate import GATE
from densegate.spec.machine import evaluate
from densegate.testing.strategies import GateRun, Observation, gate_runs

__all__ = [
    "DEFAULT_MAX_EXAMPLES",
    "PROPERTIES",
    "CheckedGate",
    "ConformanceReport",
    "GateFactory",
    "PassRecord",
    "Property",
    "PropertyResult",
    "Violation",
    "assert_conforms",
    "check_gate",
]

DEFAULT_MAX_EXAMPLES = 200
"""Runs in the survey, and the most any violated property's own search replays."""


class CheckedGate(Protocol):
    """All the kit needs: ``decide`` per pass and the hold counter it keeps."""

    @property
    def hold_passes(self) -> int: ...

    def decide(self, inp: GateInput) -> Decision: ...


GateFactory = Callable[[GateConfig], CheckedGate]
"""Builds a fresh gate, in its initial state, for a config: a class or a function."""


@dataclass(frozen=True)
class Property:
    """One line of the report: a property id (docs/ARCHITECTURE.md) (or ``agreement``) and what it demands."""

    id: str
    title: str
    statement: str

    @property
    def label(self) -> str:
        return self.title if self.id == "agreement" else f"{self.id}  {self.title}"


PROPERTIES: tuple[Property, ...] = (
    Property("P1", "counter bound", "0 <= hold_passes < K after every pass"),
    Property("P2", "no idle pass", "w > 0 and d = 0 => FIRE"),
    Property(
        "P3",
        "bounded hold",
        "a waiting episode fires within K passes (age < K); BUDGET only after K-1 holds",
    ),
    Property("P4", "dense immediacy", "w >= B => FIRE"),
    Property("P5", "legacy equivalence", "disabled => FIRE"),
    Property("P6", "hold justification", "HOLD => enabled, d > 0, 0 < w < B"),
    Property(
        "P7",
        "determinism and totality",
        "decide never raises and returns a Decision whose fire matches its reason; "
        "a twin fed the same passes decides alike; a HOLD decreases K-1-h >= 0",
    ),
    Property(
        "agreement",
        "agreement with spec",
        "decision, reason and counter equal the spec's on every pass",
    ),
)
"""What ``check_gate`` judges, in report order; ``agreement`` is the lockstep with the spec."""


@dataclass(frozen=True)
class PassRecord:
    """One pass as driven: the observation, the gate's counter around it, both verdicts."""

    obs: Observation
    h: object
    decision: Decision | None
    h_next: object
    spec: tuple[bool, str, int]
    """The spec's (fire, reason, h') from the spec's own counter."""
    error: str | None = None


@dataclass(frozen=True)
class Violation:
    """A shrunk run that breaks one property, cut after the pass that breaks it."""

    config: GateConfig
    records: tuple[PassRecord, ...]
    message: str
    raw: bool
    """Whether the gate was fed raw counts (then the running/queued columns matter)."""


@dataclass(frozen=True)
class PropertyResult:
    """One property's verdict: held, or violated with its own shrunk run."""

    prop: Property
    violation: Violation | None

    @property
    def id(self) -> str:
        return self.prop.id

    @property
    def held(self) -> bool:
        return self.violation is None


@dataclass(frozen=True)
class ConformanceReport:
    """Per-property verdicts for one gate, with a minimal run for each violation."""

    target: str
    results: tuple[PropertyResult, ...]
    max_examples: int
    seed: int | None
    """None when derandomized."""
    runs: int
    passes: int
    seconds: float

    @property
    def conforms(self) -> bool:
        return all(r.held for r in self.results)

    @property
    def violated(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.results if not r.held)

    def __getitem__(self, pid: str) -> PropertyResult:
        for r in self.results:
            if r.id == pid:
                return r
        raise KeyError(pid)

    def format(self) -> str:
        mode = "derandomized" if self.seed is None else f"seed={self.seed}"
        lines = [
            f"densegate conform {self.target}: {self.runs} runs, {self.passes} passes "
            f"(max_examples={self.max_examples}, {mode}, {self.seconds:.1f} s)",
        ]
        width = max(len(p.label) for p in PROPERTIES)
        for r in self.results:
            lines.append(f"  {r.prop.label:<{width}}  {'held' if r.held else 'VIOLATED'}")
        verdict = "conforms" if self.conforms else f"VIOLATES {', '.join(self.violated)}"
        lines.append(f"{self.target}: {verdict}")
        for r in self.results:
            if r.violation is not None:
                lines += ["", *format_violation(r.prop, r.violation)]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "conforms": self.conforms,
            "violated": list(self.violated),
            "max_examples": self.max_examples,
            "derandomize": self.seed is None,
            "seed": self.seed,
            "runs": self.runs,
            "passes": self.passes,
            "seconds": round(self.seconds, 3),
            "properties": [
                {
                    "id": r.id,
                    "title": r.prop.title,
                    "statement": r.prop.statement,
                    "status": "held" if r.held else "violated",
                    "counterexample": None if r.violation is None else _violation_json(r.violation),
                }
                for r in self.results
            ],
        }


# -- running one gate on one run ---------------------------------------------------


@dataclass
class _Outcome:
    records: list[PassRecord] = field(default_factory=list)
    first: dict[str, tuple[int, str]] = field(default_factory=dict)

    def flag(self, pid: str, at: int, message: str) -> None:
        self.first.setdefault(pid, (at, message))


def _well_formed(dec: object) -> bool:
    fire, reason = getattr(dec, "fire", None), getattr(dec, "reason", None)
    return (
        isinstance(fire, bool)
        and isinstance(reason, Reason)
        and fire == (reason is not Reason.HOLD)
    )


def _exc(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class _Driver:
    """Runs the factory's gates on runs, caching each run's outcome for every search."""

    def __init__(self, factory: GateFactory) -> None:
        self.factory = factory
        self.cache: dict[GateRun, _Outcome] = {}
        self.passes = 0
        self.raw = False

    def outcome(self, run: GateRun) -> _Outcome:
        hit = self.cache.get(run)
        if hit is None:
            hit = self.cache[run] = self._simulate(run)
            self.passes += len(hit.records)
        return hit

    def _step(self, gate: Any, obs: Observation) -> tuple[Decision, object]:
        decide_raw = getattr(gate, "decide_raw", None)
        if callable(decide_raw):
            self.raw = True
            dec = decide_raw(obs.gate_input, obs.raw)
        else:
            dec = gate.decide(obs.gate_input)
        return dec, gate.hold_passes

    def _simulate(self, run: GateRun) -> _Outcome:
        cfg, out = run.config, _Outcome()
        B, K, enabled = cfg.dense_tokens, cfg.max_hold_passes, cfg.enabled
        params = {"B": B, "K": K, "enabled": enabled}
        try:
            a, b = self.factory(cfg), self.factory(cfg)
            h: object = a.hold_passes  # whatever it is: P1 judges it
            h_twin: object = b.hold_passes
        except Exception as e:
            out.flag("P7", -1, f"building the gate raised {_exc(e)}")
            return out
        if not _counter_ok(h, K):
            out.flag("P1", -1, f"initial hold_passes={h!r} outside [0, {K})")
        if h_twin != h:
            out.flag("P7", -1, f"two fresh gates start at hold_passes {h!r} and {h_twin!r}")
        if h != 0:
            out.flag("agreement", -1, f"initial hold_passes={h!r}, the spec starts at 0")
        spec_h, age = 0, 0
        for i, obs in enumerate(run.passes):
            w, d = obs.waiting_tokens, obs.decode_seqs
            _, s_out, s_next = evaluate(GATE, params, {"h": spec_h}, {"w": w, "d": d})
            spec = (bool(s_out["fire"]), str(s_out["reason"]), int(s_next["h"]))
            try:
                dec, h_next = self._step(a, obs)
            except Exception as e:
                out.records.append(PassRecord(obs, h, None, None, spec, _exc(e)))
                out.flag("P7", i, f"decide raised {_exc(e)}")
                break
            if not _well_formed(dec):
                bad = f"returned {dec!r}"
                out.records.append(PassRecord(obs, h, None, h_next, spec, bad))
                out.flag("P7", i, f"decide {bad}, not a Decision whose fire matches its reason")
                break
            out.records.append(PassRecord(obs, h, dec, h_next, spec))
            twin: tuple[object, object]
            try:
                twin = self._step(b, obs)
            except Exception as e:
                twin = (None, _exc(e))
            if twin != (dec, h_next):
                out.flag("P7", i, f"a twin fed the same passes returned {twin}")
            fire, why = dec.fire, dec.reason
            if not _counter_ok(h_next, K):
                out.flag("P1", i, f"hold_passes={h_next!r} outside [0, {K})")
            if w > 0 and d == 0 and not fire:
                out.flag("P2", i, "something waits and nothing decodes, yet HOLD")
            if why is Reason.BUDGET and age != K - 1:
                out.flag("P3", i, f"BUDGET after {age} holds of this episode, not K-1 = {K - 1}")
            age = 0 if fire else age + 1
            if age >= K:
                out.flag("P3", i, f"held {age} passes in a row, budget K = {K}")
            if w >= B and not fire:
                out.flag("P4", i, f"w={w} >= B={B}, yet HOLD")
            if not enabled and not fire:
                out.flag("P5", i, "gate disabled, yet HOLD")
            if not fire and not (enabled and d > 0 and 0 < w < B):
                out.flag("P6", i, "HOLD without enabled, d > 0 and 0 < w < B")
            if not fire and not (
                isinstance(h, int) and isinstance(h_next, int) and K - 1 - h >= 0 and h_next > h
            ):
                out.flag("P7", i, f"HOLD took h {h!r} -> {h_next!r}: rank K-1-h did not decrease")
            if (fire, why.name, h_next) != spec:
                out.flag("agreement", i, "differs from the spec")
            h, spec_h = h_next, spec[2]
        return out


def _counter_ok(h: object, K: int) -> bool:
    return isinstance(h, int) and not isinstance(h, bool) and 0 <= h < K


def _spec_text(spec: tuple[bool, str, int]) -> str:
    fire, reason, h = spec
    return f"{'FIRE' if fire else 'HOLD'} {reason} h'={h}"


# -- searching ---------------------------------------------------------------------


def _settings(max_examples: int, *, derandomize: bool) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


def _target_name(factory: GateFactory) -> str:
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None) or type(factory).__name__
    return f"{module}:{name}" if module else str(name)


def check_gate(
    factory: GateFactory,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    derandomize: bool = True,
    seed: int | None = None,
    configs: st.SearchStrategy[GateConfig] | None = None,
    name: str | None = None,
) -> ConformanceReport:
    """Judge the gates ``factory`` builds against P1-P7 and the spec, one search each.

    ``factory(config)`` must return a fresh gate in its initial state.
    Derandomized by default, so the same gate always gets the same report;
    ``derandomize=False`` draws a fresh ``seed`` (reported, so a run can be
    replayed with ``seed=``). ``configs`` narrows the configs drawn.

    One survey of ``max_examples`` runs finds which properties break; then a
    search per broken property, replaying the same runs, shrinks its own run.
    """
    if max_examples < 1:
        raise ValueError(f"max_examples must be >= 1, got {max_examples}")
    probe = GateConfig(4, 2)
    try:
        shared = factory(probe) is factory(probe)
    except Exception:
        shared = False  # the runs report it, pass by pass
    if shared:
        raise TypeError("factory returned the same object twice: it must build a fresh gate")
    if seed is None and not derandomize:
        seed = random.getrandbits(64)
    driver = _Driver(factory)
    strategy = gate_runs(configs)
    conf = _settings(max_examples, derandomize=seed is None)

    def search(condition: Callable[[GateRun], bool]) -> GateRun | None:
        rnd = None if seed is None else random.Random(seed)
        try:
            return find(strategy, condition, settings=conf, random=rnd)
        except NoSuchExample:
            return None

    t0 = time.perf_counter()
    first_seen: dict[str, GateRun] = {}

    def survey(run: GateRun) -> bool:
        for pid in driver.outcome(run).first:
            first_seen.setdefault(pid, run)
        return False

    search(survey)
    results = []
    for prop in PROPERTIES:
        pid = prop.id
        if pid not in first_seen:
            results.append(PropertyResult(prop, None))
            continue
        # Replays the survey's runs up to the first that breaks pid, then shrinks it.
        shrunk = search(_breaks(driver, pid))
        run = _trim(driver, first_seen[pid] if shrunk is None else shrunk, pid)
        outcome = driver.outcome(run)
        at, message = outcome.first[pid]
        records = tuple(outcome.records[: at + 1])
        results.append(PropertyResult(prop, Violation(run.config, records, message, driver.raw)))
    return ConformanceReport(
        target=name or _target_name(factory),
        results=tuple(results),
        max_examples=max_examples,
        seed=seed,
        runs=len(driver.cache),
        passes=driver.passes,
        seconds=time.perf_counter() - t0,
    )


def _trim(driver: _Driver, run: GateRun, pid: str) -> GateRun:
    """Delete passes, in blocks of halving powers of two, while ``pid`` stays broken.

    Hypothesis shrinks the segments a run is drawn from; a pass-level sweep
    afterwards removes stretches it could not, so printed runs stay short.
    """

    def cut(r: GateRun) -> GateRun:
        seen = driver.outcome(r)
        at = seen.first[pid][0]
        prefix = GateRun(r.config, r.passes[: at + 1])
        # Keep what was observed: a gate that is not deterministic (a P7 bug) need
        # not break pid again when the prefix is replayed.
        driver.cache[prefix] = _Outcome(
            seen.records[: at + 1], {k: v for k, v in seen.first.items() if v[0] <= at}
        )
        return prefix

    run = cut(run)
    block = 1 << max(len(run.passes) - 1, 1).bit_length()  # blocks of 2^k keep a counter's parity
    while block >= 1:
        i, progress = 0, False
        while i < len(run.passes):
            cand = GateRun(run.config, run.passes[:i] + run.passes[i + block :])
            if pid in driver.outcome(cand).first:
                run, progress = cut(cand), True
            else:
                i += block
        if not progress:
            block //= 2
    return run


def _breaks(driver: _Driver, pid: str) -> Callable[[GateRun], bool]:
    return lambda run: pid in driver.outcome(run).first


def assert_conforms(factory: GateFactory, **kwargs: Any) -> ConformanceReport:
    """``check_gate`` for pytest: raises ``AssertionError`` carrying the full report."""
    report = check_gate(factory, **kwargs)
    if not report.conforms:
        raise AssertionError(report.format())
    return report


# -- printing ----------------------------------------------------------------------


def _params(cfg: GateConfig) -> Mapping[str, object]:
    return {"B": cfg.dense_tokens, "K": cfg.max_hold_passes, "enabled": cfg.enabled}


def format_violation(prop: Property, v: Violation) -> list[str]:
    """The violating run, one row per pass; the last row is the one that breaks it."""
    params = " ".join(f"{k}={val}" for k, val in _params(v.config).items())
    head = ["pass", "w", "d", *(["running", "queued"] if v.raw else []), "h", "decision", "reason"]
    head.append("h'")
    if prop.id == "agreement":
        head.append("spec")
    rows = [head]
    for i, r in enumerate(v.records, 1):
        o = r.obs
        row = [str(i), str(o.waiting_tokens), str(o.decode_seqs)]
        if v.raw:
            row += [str(o.running_seqs), str(o.queued_tokens)]
        if r.decision is None:
            row += [str(r.h), "-", r.error or "-", "-"]
        else:
            fire = "FIRE" if r.decision.fire else "HOLD"
            row += [str(r.h), fire, r.decision.reason.name, str(r.h_next)]
        if prop.id == "agreement":
            row.append(_spec_text(r.spec))
        rows.append(row)
    widths = [max(len(row[c]) for row in rows) for c in range(len(head))]
    text = ["  ".join(cell.rjust(wd) for cell, wd in zip(row, widths, strict=True)) for row in rows]
    text[-1] += f"   <- {v.message}"
    lines = [f"{prop.id} VIOLATED: {prop.statement}", f"  params: {params}"]
    if not v.records:
        lines.append(f"  {v.message}")
    else:
        lines += [f"  {t}" for t in text]
    return lines


def _violation_json(v: Violation) -> dict[str, Any]:
    return {
        "params": dict(_params(v.config)),
        "message": v.message,
        "raw_counts": v.raw,
        "passes": [
            {
                "pass": i,
                "w": r.obs.waiting_tokens,
                "d": r.obs.decode_seqs,
                "running": r.obs.running_seqs,
                "queued": r.obs.queued_tokens,
                "h": r.h if isinstance(r.h, int) else repr(r.h),
                "fire": None if r.decision is None else r.decision.fire,
                "reason": None if r.decision is None else r.decision.reason.name,
                "h_next": r.h_next if isinstance(r.h_next, int) else repr(r.h_next),
                "spec": {"fire": r.spec[0], "reason": r.spec[1], "h_next": r.spec[2]},
                "error": r.error,
            }
            for i, r in enumerate(v.records, 1)
        ],
    }
