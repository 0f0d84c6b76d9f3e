"""``prove_conforms(factory)``: the kit's properties, proved symbolically for anyone's gate.

The gate is a black box that speaks the protocol (``factory(GateConfig)``,
``decide(GateInput) -> Decision``, ``hold_passes``), so its hidden state cannot
be set: every run starts from a fresh gate. CrossHair explores every path of
every run of ``passes`` passes, over every config (B, K >= 1, enabled or not)
and every observation (w, d >= 0), all unbounded ints. Each property is judged
on the same observables as the sampled kit (decision, reason, ``hold_passes``)
and is one symbolic question per path; a property is

- ``proved``: every path of every such run explored, none broke it (the bound
  is the number of passes, reported; never "all runs");
- ``refuted``: with the run that breaks it, replayed concretely through the
  sampled kit's own judges, which must flag the same property;
- ``out of reach``: CrossHair could not explore every path (a call it cannot
  model, a value it had to make concrete, the path cap), with the reason;
- ``vacuous``: every path explored, but the precondition admits nothing, no path
  got past it, or a configuration class (gate on, gate off) was reached by no
  explored path: nothing was shown of that class, so nothing is claimed.

The configs are ``GateConfig(B, K, enabled)``: the STALL valve off (stall_passes =
0), the machine the kit's properties are about.

As in every symbolic check here (``symbolic.explore``), a ``min`` or ``max`` of
symbolic ints in the gate is one z3 term, not a branch per comparison.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import z3

from densegate.impl.gate import GateConfig, GateInput, Reason
from densegate.lab.baselines.policies import RawCounts
from densegate.proofs.refinement.symbolic import (
    Classes,
    Outcome,
    admit,
    admitted_classes,
    explore,
    fail,
    guarded,
    holds,
    reached,
    term,
)
from densegate.spec.gate import GATE, reason
from densegate.spec.machine import Frame
from densegate.spec.properties import GATE_IDS, Property, by_id
from densegate.testing.driver import Driver, GateFactory
from densegate.testing.strategies import GateRun, Observation

__all__ = [
    "CONFORM_CLASSES",
    "DEFAULT_PASSES",
    "ProofReport",
    "ProvedProperty",
    "prove_conforms",
    "verdict_lines",
]

DEFAULT_PASSES = 2
"""Passes per symbolic run: every path of every run this long is explored."""

CONFORM_CLASSES: Classes = {
    "gate on": lambda v: v["enabled"],
    "gate off": lambda v: z3.Not(v["enabled"]),
}
"""The configuration classes every property's check must reach on some explored path."""


@dataclass(frozen=True)
class ProvedProperty:
    """One property's symbolic verdict, with the breaking run or the reason it is out of reach."""

    prop: Property
    status: str  # proved | refuted | out of reach | vacuous
    seconds: float
    run: dict[str, Any] | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.prop.id, "statement": self.prop.statement, "status": self.status,
                "run": self.run, "detail": self.detail}  # fmt: skip


def verdict_lines(
    results: Sequence[ProvedProperty], run_text: Callable[[Mapping[str, Any]], str]
) -> list[str]:
    """A report's body: each property's status, then each refuted one's run (in
    ``run_text``'s words) and each out-of-reach or vacuous one's reason."""
    width = max(len(r.prop.label) for r in results)
    lines = [f"  {r.prop.label:<{width}}  {r.status}" for r in results]
    for r in results:
        if r.status == "refuted" and r.run is not None:
            lines += ["", f"{r.prop.id} REFUTED: {r.prop.statement}", f"  {run_text(r.run)}"]
            lines.append(f"  {r.detail}")
        elif r.status in ("out of reach", "vacuous"):
            lines += ["", f"{r.prop.id} {r.status.upper()}: {r.detail}"]
    return lines


@dataclass(frozen=True)
class ProofReport:
    """A ``conform --prove`` verdict for a single-rank gate, over runs of ``passes`` passes;
    the aligned kit's report is this with its own unit, header and run text."""

    target: str
    passes: int
    results: tuple[ProvedProperty, ...]
    seconds: float
    unit: ClassVar[str] = "passes"

    @property
    def proved(self) -> bool:
        return all(r.status == "proved" for r in self.results)

    def __getitem__(self, pid: str) -> ProvedProperty:
        for r in self.results:
            if r.prop.id == pid:
                return r
        raise KeyError(pid)

    def header(self) -> str:
        """What was explored, the report's first line."""
        return (
            f"densegate conform --prove {self.target}: every path of every run of "
            f"{self.passes} passes from a fresh gate, all configs (B, K >= 1, gate on and "
            f"off, STALL valve off) and observations (unbounded ints), {self.seconds:.1f} s"
        )

    def run_text(self, run: Mapping[str, Any]) -> str:
        """A refuted run, on one line."""
        return _run_text(run)

    def format(self) -> str:
        lines = [self.header(), *verdict_lines(self.results, self.run_text)]
        verdict = "proved" if self.proved else "NOT proved"
        lines.append(f"{self.target}: {verdict} (runs of up to {self.passes} {self.unit})")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "proved": self.proved,
            self.unit: self.passes,
            "seconds": round(self.seconds, 3),
            "properties": [r.as_dict() for r in self.results],
        }


def _run_text(run: Mapping[str, Any]) -> str:
    head = f"B={run['B']} K={run['K']} enabled={run['enabled']}"
    cols = ("w", "d", "running", "queued")
    passes = "  ".join(
        f"pass {i + 1}: " + " ".join(f"{c}={x}" for c, x in zip(cols, p, strict=False))
        for i, p in enumerate(run["passes"])
    )
    return f"{head}  {passes}"


def _judge(pid: str, p: dict[str, Any], steps: list[tuple[Any, ...]], K: Any) -> z3.BoolRef:
    """The property over one symbolic run, as one formula (the kit's judges, in Z3)."""
    pz = {k: term(v) for k, v in p.items()}
    conds: list[z3.BoolRef] = []
    age: z3.ArithRef = z3.IntVal(0)
    Kz = term(K)
    for h, w, d, fire, why, h2 in steps:
        hz, wz, dz, fz, h2z = term(h), term(w), term(d), term(fire), term(h2)
        if pid == "P1":
            conds += [hz >= 0, hz < Kz, h2z >= 0, h2z < Kz]
        elif pid == "P2":
            conds.append(z3.Implies(z3.And(wz > 0, dz == 0), fz))
        elif pid == "P3":
            if why is Reason.BUDGET:
                conds.append(age == Kz - 1)
            age = z3.If(fz, z3.IntVal(0), age + 1)
            conds.append(age < Kz)
        elif pid == "P4":
            conds.append(z3.Implies(wz >= pz["B"], fz))
        elif pid == "P5":
            conds.append(z3.Implies(z3.Not(pz["enabled"]), fz))
        elif pid == "P6":
            conds.append(
                z3.Implies(z3.Not(fz), z3.And(pz["enabled"], dz > 0, wz > 0, wz < pz["B"]))
            )
        elif pid == "P7":
            conds.append(z3.Implies(z3.Not(fz), z3.And(Kz - 1 - hz >= 0, h2z > hz)))
        elif pid == "agreement":
            out = {"fire": fz, "reason": reason(why.name)}
            frame = Frame({"h": hz}, {"w": wz, "d": dz}, out)
            conds.append(GATE.relation(pz, frame, {"h": h2z}))
    if pid == "agreement" and steps:
        conds.append(term(steps[0][0]) == 0)
    return z3.And(*conds) if conds else z3.BoolVal(True)


def _pre(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """Configs and observations; raw list counts (r, q) at least the honest ones (d, w)."""
    obs = [x >= 0 for k, x in v.items() if k[0] in "wd"]
    raw = [x >= v["d" + k[1:]] for k, x in v.items() if k[0] == "r"]
    raw += [x >= v["w" + k[1:]] for k, x in v.items() if k[0] == "q"]
    return z3.And(v["B"] >= 1, v["K"] >= 1, *obs, *raw)


def _reads_raw(factory: GateFactory) -> bool:
    """Whether the gates also take raw list counts (``decide_raw``), as the sampled kit asks."""
    try:
        return callable(getattr(factory(GateConfig(4, 2)), "decide_raw", None))
    except Exception:
        return False


def _check(
    factory: GateFactory, pid: str, passes: int, raw: bool, folder: Path
) -> Callable[..., None]:
    def step(gate: Any, v: dict[str, Any], i: int) -> Any:
        inp = GateInput(v[f"w{i}"], v[f"d{i}"])
        if raw:
            return gate.decide_raw(inp, RawCounts(v[f"r{i}"], v[f"q{i}"]))
        return gate.decide(inp)

    def drive(v: dict[str, Any]) -> list[tuple[Any, ...]]:
        config = GateConfig(v["B"], v["K"], v["enabled"])
        gate, twin = factory(config), factory(config)
        steps = []
        for i in range(passes):
            w, d = v[f"w{i}"], v[f"d{i}"]
            h = gate.hold_passes
            dec = step(gate, v, i)
            if pid == "P7" and (step(twin, v, i), twin.hold_passes) != (dec, gate.hold_passes):
                fail(v, "a twin fed the same passes decided differently")
            if not isinstance(dec.reason, Reason) or dec.fire != (dec.reason is not Reason.HOLD):
                fail(v, f"decide returned {dec!r}, not a Decision whose fire matches its reason")
            steps.append((h, w, d, dec.fire, dec.reason, gate.hold_passes))
        return steps

    # CrossHair needs one named, typed parameter per symbol: the check is generated.
    names = ["B", "K", "enabled"] + [
        f"{x}{i}" for i in range(passes) for x in "wdrq"[: 4 if raw else 2]
    ]
    hints = ", ".join(f"{n}: {'bool' if n == 'enabled' else 'int'}" for n in names)
    src = (
        f"def check({hints}) -> None:\n"
        f"    assert admit(_pre, {', '.join(f'{n}={n}' for n in names)})\n"
        f"    v = dict({', '.join(f'{n}={n}' for n in names)})\n"
        f"    steps = guarded(lambda: drive(v), v)\n"
        f"    if not holds(_judge(pid, {{'B': B, 'K': K, 'enabled': enabled}}, steps, K)):\n"
        f"        fail(v, pid + ' broken')\n"
        f"    reached(v)\n"
    )
    scope: dict[str, Any] = {}
    env: dict[str, Any] = {"admit": admit, "_pre": _pre, "guarded": guarded, "drive": drive}
    env.update({"holds": holds, "_judge": _judge, "pid": pid, "fail": fail, "reached": reached})
    _compile_check(src, env, scope, folder)
    return scope["check"]  # type: ignore[no-any-return]


def _compile_check(src: str, env: dict[str, Any], scope: dict[str, Any], folder: Path) -> None:
    """Compile a generated check from a real file: CrossHair tells a failure in the body from
    one in the precondition by the traceback's line in the check's own source file."""
    path = folder / f"check_{hashlib.sha1(src.encode()).hexdigest()[:16]}.py"
    path.write_text(src)
    exec(compile(src, str(path), "exec"), env, scope)


def _replay_flags(factory: GateFactory, run: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """The sampled kit's judges on the witness run: which properties it breaks, and how."""
    cfg = GateConfig(run["B"], run["K"], run["enabled"])
    obs = tuple(Observation(p[0], p[1], *(p[2:] or (p[1], p[0]))) for p in run["passes"])
    return Driver(factory).outcome(GateRun(cfg, obs)).first


def _vacuity(check: Callable[..., None], out: Outcome) -> str:
    """Why a fully explored check shows nothing (empty when it shows something of every
    class): the precondition has no model, no path got past it, or a class went unreached."""
    pre, admits = admitted_classes(check, _pre, CONFORM_CLASSES)
    if not pre:
        return "the precondition has no model: every path would pass vacuously"
    if out.passed == 0:
        return f"no explored path ({out.paths}) got past the precondition and the judge"
    missed = [n for n in CONFORM_CLASSES if not (admits[n] and n in out.covered)]
    return f"configuration class {', '.join(missed)} reached by no explored path" if missed else ""


def prove_conforms(
    factory: GateFactory,
    *,
    passes: int = DEFAULT_PASSES,
    name: str | None = None,
    max_iterations: int = 600,
) -> ProofReport:
    """Prove, refute or report out of reach each of P1-P7 and agreement for ``factory``'s gates."""
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    t0 = time.perf_counter()
    raw = _reads_raw(factory)
    results = []
    for pid in GATE_IDS:
        with tempfile.TemporaryDirectory(prefix="densegate-conform-") as folder:
            check = _check(factory, pid, passes, raw, Path(folder))
            out = explore(check, max_iterations=max_iterations, classes=CONFORM_CLASSES)
        prop = by_id(pid)
        empty = _vacuity(check, out)
        if out.status == "proved" and empty:
            results.append(ProvedProperty(prop, "vacuous", out.seconds, None, empty))
        elif out.status == "proved":
            results.append(ProvedProperty(prop, "proved", out.seconds))
        elif out.status == "refuted" and out.witness is not None:
            w = out.witness
            run = {
                "B": w["B"],
                "K": w["K"],
                "enabled": w["enabled"],
                "passes": [
                    [w[f"{x}{i}"] for x in ("wdrq" if raw else "wd")] for i in range(passes)
                ],
            }
            flags = _replay_flags(factory, run)
            if pid in flags:
                at, message = flags[pid]
                detail = f"replayed by the sampled kit: pass {at + 1}: {message}"
                results.append(ProvedProperty(prop, "refuted", out.seconds, run, detail))
            else:
                why = f"witness {run} ({out.detail}) did not break {pid} when replayed"
                results.append(ProvedProperty(prop, "out of reach", out.seconds, run, why))
        else:
            results.append(ProvedProperty(prop, "out of reach", out.seconds, None, out.detail))
    target = (
        name or f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', '?')}"
    )
    return ProofReport(target, passes, tuple(results), time.perf_counter() - t0)
