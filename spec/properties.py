"""The property table: every property id, its short title and its one-sentence statement.

Stated once, here, as pure data (no z3): the prover's report (``densegate prove``)
and the conformance kit (``densegate conform``, sampled or ``--prove``) both read
their wording from this table, so a property cannot say one thing in the proof
table and another in a conformance report. P* are the one-rank gate's, D* the
aligned (data-parallel) gate's, R* the refinement of the machines by the shipped
Python; ``agreement`` is the conformance kit's lockstep with the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GATE_IDS", "PROPERTIES", "Property", "by_id", "statement"]


@dataclass(frozen=True)
class Property:
    """One row of the table: an id, a title of a few words, and what it demands."""

    id: str
    title: str
    statement: str

    @property
    def label(self) -> str:
        return self.title if self.id == "agreement" else f"{self.id}  {self.title}"


PROPERTIES: tuple[Property, ...] = (
    Property("P1", "counter bound", "counter bound: 0 <= h < K in every reachable state"),
    Property("P2", "no idle pass", "no idle pass: w > 0 and d = 0 => FIRE"),
    Property(
        "P3",
        "bounded hold",
        "bounded hold: a waiting episode fires within K passes (age < K); "
        "BUDGET only after K-1 holds",
    ),
    Property("P4", "dense immediacy", "dense immediacy: w >= B => FIRE"),
    Property("P5", "legacy equivalence", "legacy equivalence: disabled => FIRE"),
    Property("P6", "hold justification", "hold justification: HOLD => enabled, d > 0, 0 < w < B"),
    Property(
        "P7",
        "determinism and totality",
        "determinism and totality: exactly one decision per state and observation "
        "(never an error, a twin fed the same passes decides alike); "
        "HOLD decreases the rank K-1-h >= 0 (no deadlock)",
    ),
    Property(
        "agreement",
        "agreement with spec",
        "agreement: decision, reason and counter equal the spec's on every pass",
    ),
    Property(
        "D1",
        "rank agreement",
        "agreement: any two ranks fed one reduced vector and tick take the same decision "
        "and keep equal state, whatever their local queues and clocks (so all N ranks do)",
    ),
    Property(
        "D2",
        "bounded hold, one budget",
        "bounded hold, one budget: every rank's waiting work fires within K ticks (age < K); "
        "BUDGET only after K-1 held ticks",
    ),
    Property(
        "D3",
        "global tail escape",
        "global tail escape: W > 0 and (no rank decodes, D = 0, or a waiting rank has no decode "
        "of its own, Nd > 0) => FIRE; NO_DECODE only when D = 0 or (Nd > 0, paced mode off)",
    ),
    Property(
        "D4",
        "no deadlock",
        "no deadlock: exactly one command per state and reduced vector; "
        "HOLD decreases the rank K-1-h >= 0",
    ),
    Property(
        "D5",
        "legacy equivalence",
        "legacy equivalence: disabled => every rank FIREs every tick (no delayer either)",
    ),
    Property(
        "D6",
        "one-rank refinement",
        "refinement: one rank, T = B, stall and KV valves and aligned release off equals the "
        "gate machine "
        "(P level) step for step: decision, reason, counter",
    ),
    Property(
        "D7",
        "aligned density",
        "aligned density: DENSE => every rank waits and F >= T*N, or (paced mode off) some rank "
        "is filled on its own (Fl > 0); HOLD => enabled, W > 0, D > 0, Nd = 0 and not dense",
    ),
    Property(
        "D8",
        "aligned release",
        "aligned release: ALIGNED => the release is on, every rank waits or is vacant "
        "(W + Va = N) and h >= A; with it on, enabled, W + Va = N, h >= A and D > 0 => FIRE "
        "(no HOLD once aligned)",
    ),
    Property(
        "V1",
        "bounded hold with the valve",
        "bounded hold with the valve: a waiting episode fires within K passes (age < K); "
        "BUDGET only after K-1 holds",
    ),
    Property(
        "V2",
        "stall",
        "stall: a pass with waiting work whose fill has not grown for S > 0 passes FIREs; "
        "STALL only then, and only on a pass GATE would hold or spend its budget on "
        "(enabled, d > 0, 0 < w < B); HOLD => enabled, d > 0, 0 < w < B, not stalled",
    ),
    Property(
        "V3",
        "valve off",
        "valve off: with S = 0 the stall gate equals GATE step for step "
        "(decision, reason, counter)",
    ),
    Property(
        "V4",
        "determinism and totality with the valve",
        "determinism and totality with the valve: exactly one command per state and "
        "observation; HOLD decreases the rank K-1-h >= 0 (no deadlock)",
    ),
    Property(
        "R1",
        "PrefillGate refines the gate",
        "code refines model: for every B, K >= 1, gate on or off and stall_passes S >= 0, a "
        "fresh PrefillGate starts in the spec's initial state, and from every counter 0 <= h "
        "< K and stall memory q, n >= 0 one call of decide_counts(w, d) or "
        "decide(GateInput(w, d)) returns the spec's decision and reason and leaves the spec's "
        "next counter; the spec is the gate (P1-P7) with the STALL valve off (S = 0) and the "
        "stall gate (V1-V4), next stall memory included, with it on (S > 0)",
    ),
    Property(
        "R2",
        "AlignedGate refines the DP gate",
        "code refines model: for any number of ranks N and every configuration (gate, KV "
        "valve, STALL valve, aligned release (any A >= 0), paced mode (any pace_tokens >= 1), "
        "its surge cap (any surge_tokens >= pace_tokens) and its busy wait (any busy_decodes "
        ">= 1) each on or off; fill_tokens any "
        "T in [1, B]), from every state "
        "(0 <= h < K, any stall memory) one call of AlignedGate.decide on any reduced vector "
        "(its counts of filled, no-decode and vacant ranks included) "
        "and tick the spec admits returns the spec's decision, reason and cap and leaves the "
        "spec's next state",
    ),
    Property(
        "R3",
        "Scheduler plans as the spec scheduler",
        "code refines model, at 2 requests and block size 2: from every state the scheduler "
        "invariant allows, chunked prefill or not, gate on or off, one pass planned by "
        "Scheduler (plan, then observe) shows the gate the spec's observation (w, d) = "
        "(min(planned prefill tokens, B), decoding sequences), decodes, preempts, chunks and "
        "admits exactly the requests the spec's plan does, and keeps each request running or "
        "queued as the spec's status says, the queue in arrival order (arrivals, aborts and "
        "the commit not executed)",
    ),
    Property(
        "R5",
        "Scheduler plans prefill as the spec, any number of requests",
        "code refines model, for any number of requests: Scheduler's steps 2-3 (owed chunks, "
        "then FCFS admission) fold one step per request, and each step returns the spec's "
        "(partial_step, admit_step) for every request and running totals, chunked prefill or "
        "not, at block sizes 1, 2, 3, 4, 5 and 16, changes neither the scheduler nor the "
        "request, and stops only where the spec's step changes nothing; the planning hands "
        "the folds the whole owed list and queue from the spec's start totals and builds the "
        "plan (chunks, admissions, planned prefill, w = min(planned, B)) from their results "
        "as the spec does, for lists of any length (step 1's lists, their arrival order and "
        "the fold loop itself taken as given)",
    ),
    Property(
        "R6",
        "Scheduler does to each request what the spec does, any number of requests",
        "code refines model, for every request whatever its place (the 7th on as the "
        "first) and any number running: Scheduler's decode turn, each turn of step 1's walk "
        "over the running list (a step of S11's decode scan, its victim the newest running "
        "request, reading no other), the block a growing decode takes, a preemption, an "
        "admission's commit, a prefill and a decode chunk, a sampled token, an abort and an "
        "undo each leave the request, the free blocks and the lists it is on as the spec's "
        "per-request step (turn, DecodeScan, take_block, preempt, reserve_and_run, sample, "
        "end_or_join) does, at block sizes 1, 2, 3, 4, 5 and 16 where blocks are counted, a "
        "stop token ending it as its length would; undo leaves the request as before its "
        "chunk (the loops that hand these steps their requests, and the running list's "
        "arrival order, taken as given)",
    ),
)
"""Every property, in report order."""

_BY_ID = {p.id: p for p in PROPERTIES}
assert len(_BY_ID) == len(PROPERTIES), "property ids must be unique"

GATE_IDS: tuple[str, ...] = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "agreement")
"""What the conformance kit judges a gate on, in report order."""


def by_id(pid: str) -> Property:
    """The property with this id (``KeyError`` naming it otherwise)."""
    try:
        return _BY_ID[pid]
    except KeyError:
        raise KeyError(f"no property {pid!r}; known: {', '.join(_BY_ID)}") from None


def statement(pid: str) -> str:
    """The one-sentence statement of ``pid``, as the proof table prints it."""
    return by_id(pid).statement
