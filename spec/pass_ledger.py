"""The scheduler's resources over whole passes, for any number of requests: a ledger.

``PassLedger`` keeps the gate's counter and three totals: free KV blocks,
blocks held, and running requests. A pass is observed through its figures at
each phase boundary (after aborts and arrivals, after the decodes, the
prefill plan, what admission would add, the totals after the commit),
constrained only by ``ledger_facts``, one function per phase (``join_facts``,
``decode_facts``, ``tail_facts``, each a ``PassLedger`` method so a ledger's own
facts are the ones checked). No-idle (S1) and conservation (S2) are proved of
the ledger for any number of requests given those facts; S13 (step 0), S11 with
S12 (the decodes) and S14 (the rest) prove them of every pass of the per-slot
scheduler, whatever its number of requests, each phase a fold of one step per
request; S8 checks them again at 3 request slots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import z3

from densegate.spec.gate import GATE, GateMachine
from densegate.spec.machine import Command, Vars
from densegate.spec.scheduler_summary import GatedPasses, pass_facts

__all__ = [
    "LEDGER_BOOLS",
    "LEDGER_INTS",
    "PassLedger",
    "decode_facts",
    "join_facts",
    "ledger_facts",
    "tail_facts",
]

LEDGER_INTS = (
    "free0", "held0", "run0", "wait0",  # after aborts and arrivals
    "free1", "run1", "wait1", "d", "owing", "pre",  # after the decodes
    "work", "planned", "run",  # the prefill plan
    "k", "a",  # admissions and the blocks they reserve, if the gate fires
    "free3", "held3", "run3",  # after the commit
)  # fmt: skip
LEDGER_BOOLS = ("head_fits", "head_admit")


def join_facts(s: Vars, o: Vars) -> z3.BoolRef:
    """Step 0 (aborts, then arrivals), from the totals ``s`` before the pass to the figures
    ``o`` after it: an abort returns its blocks; arrivals only join the queue (S13, for
    any number of requests)."""
    return z3.And(
        o["free0"] - s["free"] == s["held"] - o["held0"],
        o["held0"] <= s["held"],
        o["run0"] >= 0,
        o["run0"] <= s["run"],
        o["wait0"] >= 0,
        o["held0"] >= o["run0"],
        z3.Implies(o["run0"] == 0, o["held0"] == 0),
    )


def decode_facts(p: Vars, o: Vars) -> z3.BoolRef:
    """The decodes, from a conserved pool after step 0 (S11 and S12, for any number of
    requests): free >= 0, every running request decodes, owes prefill or is preempted,
    a preemption leaves one running and queues the request it preempts, and each
    running request holds >= 1 block."""
    held1 = p["N"] - o["free1"]
    return z3.And(
        o["free1"] >= 0,
        o["d"] >= 0,
        o["owing"] >= 0,
        o["pre"] >= 0,
        o["d"] + o["owing"] + o["pre"] == o["run0"],
        o["run1"] == o["d"] + o["owing"],
        z3.Implies(o["pre"] > 0, o["run1"] > 0),
        held1 >= o["run1"],
        z3.Implies(o["run1"] == 0, held1 == 0),
        o["wait1"] == o["wait0"] + o["pre"],
    )


def tail_facts(p: Vars, o: Vars, fire: z3.BoolRef, room: z3.ArithRef) -> z3.BoolRef:
    """The prefill plan, admission and the commit (S14, for any number of requests, with
    S7's and S9's scans inside it). ``room`` bounds the blocks admissions reserve."""
    N, S = p["N"], p["S"]
    held1 = N - o["free1"]
    run2 = o["run1"] + z3.If(fire, o["k"], 0)
    free2 = o["free1"] - z3.If(fire, o["a"], 0)
    held2 = held1 + z3.If(fire, o["a"], 0)
    figures = {k: o[k] for k in ("planned", "d", "work", "run", "head_fits", "head_admit")}
    return z3.And(
        # the prefill plan (S10: a running partial owes >= 1 token; S7, S9)
        z3.Implies(o["owing"] > 0, o["work"] >= o["owing"]),
        z3.Implies(o["owing"] == 0, o["work"] == 0),
        pass_facts(p, figures),
        # admission (S7): within free slots and blocks, none after a preemption, and the
        # head of a quiet pass with nothing running fits (it needs <= N blocks, <= T tokens)
        o["k"] >= 0,
        o["k"] <= o["wait1"],
        o["k"] <= S - o["run1"],
        o["a"] >= o["k"],
        o["a"] <= room,
        z3.Implies(o["pre"] > 0, o["k"] == 0),
        z3.Implies(z3.And(o["pre"] == 0, o["run1"] == 0, o["wait1"] > 0), o["head_fits"]),
        # the commit (S10): a finished request returns its blocks
        o["free3"] - free2 == held2 - o["held3"],
        o["held3"] <= held2,
        o["run3"] >= 0,
        o["run3"] <= run2,
        o["held3"] >= o["run3"],
        z3.Implies(o["run3"] == 0, o["held3"] == 0),
    )


Facts = Callable[..., z3.BoolRef]


def ledger_facts(
    p: Vars,
    s: Vars,
    o: Vars,
    fire: z3.BoolRef,
    room: z3.ArithRef,
    *,
    join: Facts = join_facts,
    decode: Facts = decode_facts,
    tail: Facts = tail_facts,
) -> z3.BoolRef:
    """What every pass guarantees, phase by phase (the proof that owns each in brackets).

    ``room`` bounds the blocks admissions reserve: the free blocks after the decodes;
    ``join``, ``decode`` and ``tail`` are the phases' facts (a ledger's own)."""
    conserved0 = z3.And(o["free0"] >= 0, o["free0"] + o["held0"] == p["N"])
    return z3.And(
        # step 0 (S13)
        join(s, o),
        # from a conserved pool: the decodes (S11 and S12), then the plan, admission and
        # the commit (S14)
        z3.Implies(conserved0, z3.And(decode(p, o), tail(p, o, fire, room))),
    )


class PassLedger(GatedPasses):
    """The gate's counter and the free/held/running totals over passes (parameter ``N``,
    the KV blocks, besides the gate's and the pass's)."""

    def __init__(self, gate: GateMachine = GATE, name: str = "pass ledger") -> None:
        super().__init__(gate, name)
        self.param_sorts["N"] = z3.Int
        self.state_sorts = {k: z3.Int for k in ("h", "free", "held", "run")}
        self.obs_sorts = {k: z3.Int for k in LEDGER_INTS}
        self.obs_sorts.update({k: z3.Bool for k in LEDGER_BOOLS})
        self.out_sorts.update({k: z3.Int for k in ("prefill_tokens", "decode_seqs")})

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(super().param_ok(p), p["N"] >= 1)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(s["h"] == 0, s["free"] == p["N"], s["held"] == 0, s["run"] == 0)

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        fire, room = self.fires(p, s, o), self.reserve_room(o)
        return ledger_facts(
            p, s, o, fire, room,
            join=self.join_facts, decode=self.decode_facts, tail=self.tail_facts,
        )  # fmt: skip

    def join_facts(self, s: Vars, o: Vars) -> z3.BoolRef:
        """This ledger's step-0 facts (S13 proves them of the per-slot step 0)."""
        return join_facts(s, o)

    def decode_facts(self, p: Vars, o: Vars) -> z3.BoolRef:
        """This ledger's decode facts (S11's lemma proves them of the decode scan's end)."""
        return decode_facts(p, o)

    def tail_facts(self, p: Vars, o: Vars, fire: z3.BoolRef, room: z3.ArithRef) -> z3.BoolRef:
        """This ledger's plan, admission and commit facts (S14's lemma proves them of the
        per-slot pass's folds)."""
        return tail_facts(p, o, fire, room)

    def reserve_room(self, o: Vars) -> z3.ArithRef:
        """How many blocks admissions may reserve: the free ones (a hook for a broken variant)."""
        return o["free1"]

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        w, _ = self.observe(p, o)
        out_cmds = []
        for gc in self.gate_commands(p, s, o):
            out = dict(gc.out)
            # the sequences that really decode, whatever the gate was told
            out.update({"w": w, "decode_seqs": o["d"]})
            out["prefill_tokens"] = z3.If(gc.out["fire"], o["planned"], 0)
            nxt = {"h": gc.next["h"], "free": o["free3"], "held": o["held3"], "run": o["run3"]}
            out_cmds.append(Command(gc.name, gc.guard, out, nxt))
        return out_cmds
