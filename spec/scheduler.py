"""The scheduler as a Z3 machine: R request slots in arrival order, one pass per step.

Slot ``i`` is the ``i``-th request to arrive. Every running request arrived
before every waiting one (FCFS admission from the head, preemption of the
newest admission), so the waiting queue is the waiting slots in index order,
its head is the lowest waiting index, and "most recently admitted" is the
highest running index. The implementation checks that order at run time and
the lockstep test compares it with this machine pass by pass.

One pass, exactly as ``densegate.impl.sched.scheduler`` runs it:

0. aborts end requests (their blocks are freed), then arrivals join the queue;
1. decodes in slot order, each taking a KV slot; with no free block the
   highest running slot is preempted by recompute (a fold of ``victim_step``
   from the last slot back: ``densegate.spec.victim_search``);
2. partial prefills get their next chunk from the pass budget;
3. if nothing was preempted, waiting slots are admitted FCFS within budget,
   sequence slots and free blocks (whole sequence reserved), the last chunked;
4. the gate (the commands of ``densegate.spec.gate``, reused, not restated)
   sees ``w = min(planned prefill tokens, B)`` and ``d = decodes``;
5. a FIRE commits steps 2-3; every scheduled sequence that reaches its end
   samples a token; a request with ``max_tokens`` outputs finishes.

Request lengths are symbolic parameters; the block size is a Python int per
instance, which keeps every constraint linear.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from densegate.spec.gate import GATE, GateMachine
from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.scheduler_request import (
    ABORTED,
    FINISHED,
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    Req,
    end_or_join,
    owed,
    pass_chunk,
    reserve_and_run,
    sample,
    scheduled,
    take_block,
    turn,
)
from densegate.spec.scheduler_scan import admit_start, admit_step, partial_start, partial_step
from densegate.spec.victim_search import Search, search_start, search_step

__all__ = [
    "ABORTED",
    "FINISHED",
    "NOT_ARRIVED",
    "RUNNING",
    "WAITING",
    "PassPlan",
    "SchedulerMachine",
    "count_true",
]

_PARAMS = ("S", "T", "N", "L", "cap", "B", "K")
_SLOT_PARAMS = ("P", "M")
_SLOT_STATE = ("st", "c", "g", "b")
_OUTS = (
    "prefill_tokens",
    "prefill_seqs",
    "decode_seqs",
    "preempted",
    "waiting",
    "running",
    "kv_free",
    "w",
)


def _min(*xs: z3.ArithRef) -> z3.ArithRef:
    m = xs[0]
    for x in xs[1:]:
        m = z3.If(x < m, x, m)
    return m


def count_true(bs: Sequence[z3.BoolRef]) -> z3.ArithRef:
    """How many of ``bs`` hold (requests in a status, decodes, admissions)."""
    return z3.Sum([z3.If(b, 1, 0) for b in bs]) if bs else z3.IntVal(0)


@dataclass(frozen=True)
class PassPlan:
    """Steps 0-3 of a pass as Z3 terms: what the gate is asked about, and what follows."""

    st: list[z3.ArithRef]
    c: list[z3.ArithRef]
    g: list[z3.ArithRef]
    b: list[z3.ArithRef]
    free: z3.ArithRef
    decoding: list[z3.BoolRef]
    chunk: list[z3.ArithRef]
    """Prefill tokens each slot would run if the gate fired (partial or admission)."""
    admit: list[z3.BoolRef]
    need: list[z3.ArithRef]
    preempted: z3.ArithRef
    planned: z3.ArithRef
    """Prefill tokens the pass runs if the gate fires (partials, then admissions)."""
    d: z3.ArithRef
    partial_work: z3.ArithRef
    """Prefill tokens owed to running requests when the pass is planned."""
    partial_run: z3.ArithRef
    """Of those, the tokens this pass would run if it fired."""
    head_fits: z3.BoolRef
    """The head of the queue fits this pass (slot, blocks, budget; nothing preempted)."""
    head_admit: z3.BoolRef
    """The plan admits the head of the queue if the gate fires."""
    joined: list[Req]
    """Every request after step 0 (aborts, then arrivals), and the free blocks then."""
    free0: z3.ArithRef


class SchedulerMachine(Machine):
    """R slots; parameters S (max seqs), T (token budget), N (blocks), L (max len),
    cap (chunk cap), chunked, B/K/enabled (the gate); P_i, M_i per request."""

    def __init__(self, slots: int, block_size: int, gate: GateMachine = GATE) -> None:
        if slots < 1 or block_size < 1:
            raise ValueError(f"need slots >= 1 and block_size >= 1, got {slots}, {block_size}")
        self.R = slots
        self.bs = block_size
        self.gate = gate
        self.name = f"scheduler[R={slots},bs={block_size}]"
        self.param_sorts = {k: z3.Int for k in _PARAMS}
        self.param_sorts.update({"enabled": z3.Bool, "chunked": z3.Bool})
        self.param_sorts.update({f"{k}{i}": z3.Int for i in range(slots) for k in _SLOT_PARAMS})
        self.state_sorts = {"h": z3.Int, "free": z3.Int}
        self.state_sorts.update({f"{k}{i}": z3.Int for i in range(slots) for k in _SLOT_STATE})
        self.obs_sorts = {f"{k}{i}": z3.Bool for i in range(slots) for k in ("arrive", "abort")}
        self.out_sorts = {"fire": z3.Bool, "reason": gate.out_sorts["reason"]}
        self.out_sorts.update({k: z3.Int for k in _OUTS})

    # -- helpers ------------------------------------------------------------------
    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """One trace row: arrivals and aborts, the gate's counter and free blocks,
        each request as ``<status><computed>/<generated>b<blocks>`` (W waiting, R
        running, F finished, A aborted, - not arrived), the gate's observation and
        decision, then monitors and what the pass left behind."""
        slot_keys = {f"{k}{i}" for k in (*_SLOT_STATE, "arrive", "abort") for i in range(self.R)}
        shown = {"w", "decode_seqs", "fire", "reason", "prefill_tokens", "preempted"}
        hidden = {"prefill_seqs", "waiting", "running", "kv_free", "next_h", "next_free"}

        def requests(prefix: str) -> str:
            return " ".join(
                f"{'-WRFA'[row[f'{prefix}st{i}']]}{row[f'{prefix}c{i}']}/"
                f"{row[f'{prefix}g{i}']}b{row[f'{prefix}b{i}']}"
                for i in range(self.R)
            )

        out: dict[str, Any] = {"pass": row["pass"]}
        for key in ("arrive", "abort"):
            out[key] = ",".join(str(i) for i in range(self.R) if row.get(f"{key}{i}")) or "-"
        out["h"], out["free"], out["requests"] = row["h"], row["free"], requests("")
        if row.get("fire") is not None:
            out.update({"w": row["w"], "d": row["decode_seqs"], "fire": row["fire"]})
            out.update({"reason": row["reason"], "prefill": row["prefill_tokens"]})
            out["preempt"] = row["preempted"]
        for key, val in row.items():
            bare = key.removeprefix("next_")
            if key == "pass" or bare in slot_keys or key in shown or key in hidden:
                continue
            out[key] = val
        if "next_st0" in row:
            out["after"] = requests("next_")
        return out

    def blocks_for(self, tokens: z3.ArithRef) -> z3.ArithRef:
        return tokens if self.bs == 1 else (tokens + (self.bs - 1)) / self.bs

    def slot(self, v: Vars, key: str) -> list[z3.ExprRef]:
        return [v[f"{key}{i}"] for i in range(self.R)]

    # -- hooks: single points a broken variant (a proof's mutant) may replace ------
    def preempt_frees(self, held: z3.ArithRef) -> z3.ArithRef:
        """Blocks a preemption by recompute returns to the free pool."""
        return held

    def victim_step(
        self, acc: Search, r: Req, slot: z3.ArithRef, short: z3.BoolRef
    ) -> tuple[Search, Req, z3.BoolRef]:
        """One slot of a short decode turn's victim search (from the last slot back)."""
        return search_step(acc, r, slot, short, self.preempt_frees)

    def partial_chunk(
        self, left: z3.ArithRef, cap: z3.ArithRef, budget: z3.ArithRef
    ) -> z3.ArithRef:
        """The next chunk of a partial prefill with ``left`` tokens to go."""
        return z3.If(z3.And(left > 0, budget > 0), _min(left, cap, budget), 0)

    def admission_blocks(self, prompt: z3.ArithRef, generated: z3.ArithRef) -> z3.ArithRef:
        """Blocks an admission reserves (for its ``reserved_tokens``)."""
        return self.blocks_for(self.reserved_tokens(prompt, generated))

    def reserved_tokens(self, prompt: z3.ArithRef, generated: z3.ArithRef) -> z3.ArithRef:
        """Tokens an admission reserves blocks for: all it will recompute."""
        return prompt + generated

    def admission_allowed(self, partial_run: z3.ArithRef) -> z3.BoolRef:
        """Whether new requests may join a pass that runs ``partial_run`` chunk tokens."""
        return z3.BoolVal(True)

    def observe(self, p: Vars, plan: PassPlan) -> tuple[z3.ArithRef, z3.ArithRef]:
        """The gate's observation ``(w, d)``: what the pass would really run."""
        return _min(plan.planned, p["B"]), plan.d

    # -- the machine ---------------------------------------------------------------
    def param_ok(self, p: Vars) -> z3.BoolRef:
        cons = [
            p["S"] >= 1,
            p["T"] >= p["S"],
            p["N"] >= 1,
            p["L"] >= 2,
            p["cap"] >= 1,
            p["B"] >= 1,
            p["B"] <= p["T"],
            p["K"] >= 1,
            z3.Implies(z3.Not(p["chunked"]), z3.And(p["T"] >= p["L"], p["cap"] == p["T"])),
        ]
        for plen, most in zip(self.slot(p, "P"), self.slot(p, "M"), strict=True):
            cons += [plen >= 1, most >= 1, plen + most <= p["L"]]
            cons.append(self.blocks_for(plen + most) <= p["N"])
        return z3.And(*cons)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        cons = [s["h"] == 0, s["free"] == p["N"]]
        for k in _SLOT_STATE:
            cons += [x == (NOT_ARRIVED if k == "st" else 0) for x in self.slot(s, k)]
        return z3.And(*cons)

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        st, arrive, abort = self.slot(s, "st"), self.slot(o, "arrive"), self.slot(o, "abort")
        cons = []
        for i in range(self.R):
            cons.append(z3.Implies(arrive[i], st[i] == NOT_ARRIVED))
            if i > 0:
                cons.append(z3.Implies(arrive[i], z3.Or(st[i - 1] != NOT_ARRIVED, arrive[i - 1])))
            cons.append(z3.Implies(abort[i], z3.Or(st[i] == WAITING, st[i] == RUNNING)))
        return z3.And(*cons)

    def _key(self, p: Vars, s: Vars, o: Vars) -> tuple[int, ...]:
        return tuple(x.get_id() for d in (p, s, o) for x in d.values())

    def plan(self, p: Vars, s: Vars, o: Vars) -> PassPlan:
        """Steps 0-3 over the given terms; built once per distinct (p, s, o).

        Properties, monitors and the transition relation all ask for the same
        plan; building the terms is most of a scheduler proof's Python time.
        """
        cache: dict[tuple[int, ...], tuple[tuple[Vars, ...], PassPlan]]
        cache = self.__dict__.setdefault("_plan_cache", {})
        key = self._key(p, s, o)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = ((p, s, o), self._plan(p, s, o))
        return hit[1]

    def _plan(self, p: Vars, s: Vars, o: Vars) -> PassPlan:
        R, bs = self.R, self.bs
        P = self.slot(p, "P")
        st, c, g, b = (self.slot(s, k) for k in _SLOT_STATE)
        reqs = [Req(*x) for x in zip(st, c, g, b, strict=True)]
        free = s["free"]
        arrive, abort = self.slot(o, "arrive"), self.slot(o, "abort")
        # 0. aborts, then arrivals
        for i in range(R):
            reqs[i], free = end_or_join(reqs[i], free, abort=abort[i], arrive=arrive[i])
        joined, free0 = list(reqs), free
        # 1. decodes in slot order; preempt the highest running slot when KV is out
        decoding: list[z3.BoolRef] = []
        preempted: z3.ArithRef = z3.IntVal(0)
        for i in range(R):
            t = turn(reqs[i], P[i], bs)
            short = t.short(free)
            # the victim search: a fold of ``victim_step`` from the last slot back to i
            search = search_start(free)
            for j in reversed(range(i, R)):
                search, reqs[j], _ = self.victim_step(search, reqs[j], z3.IntVal(j), short)
            free, preempted = search.free, preempted + search.victims
            reqs[i], free, dec = take_block(reqs[i], free, t)
            decoding.append(dec)
        st, c, g, b = ([getattr(r, k) for r in reqs] for k in _SLOT_STATE)
        d = count_true(decoding)
        # 2. partial prefills from the pass budget: a fold of ``partial_step``
        budget = partial_start(p["T"], d)
        chunk: list[z3.ArithRef] = []
        work: list[z3.ArithRef] = []
        for i in range(R):
            left = owed(reqs[i], P[i], decoding[i])
            budget, n = partial_step(self.partial_chunk, budget, left, p["cap"])
            work.append(left)
            chunk.append(n)
        partial_run = z3.Sum(chunk)
        # 3. FCFS admission, unless something was preempted: a fold of one step
        #    per request (``densegate.spec.scheduler_scan``)
        quiet = preempted == 0
        allowed = self.admission_allowed(partial_run)
        running = count_true([x == RUNNING for x in st])
        acc = admit_start(p["S"] - running, budget, free, partial_run, quiet)
        admit: list[z3.BoolRef] = []
        need: list[z3.ArithRef] = []
        for i in range(R):
            total = P[i] + g[i]
            nb = self.admission_blocks(P[i], g[i])
            acc, ok, n = admit_step(
                acc, waiting=st[i] == WAITING, total=total, need=nb,
                chunked=p["chunked"], cap=p["cap"], quiet=quiet, allowed=allowed,
            )  # fmt: skip
            chunk[i] = pass_chunk(ok, n, chunk[i])
            admit.append(ok)
            need.append(nb)
        return PassPlan(
            st, c, g, b, free, decoding, chunk, admit, need, preempted, acc.planned, d,
            z3.Sum(work), partial_run, acc.head_fits, acc.head_admit, joined, free0,
        )  # fmt: skip

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cache: dict[tuple[int, ...], tuple[tuple[Vars, ...], list[Command]]]
        cache = self.__dict__.setdefault("_command_cache", {})
        key = self._key(p, s, o)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = ((p, s, o), self._commands(p, s, o))
        return hit[1]

    def _commands(self, p: Vars, s: Vars, o: Vars) -> list[Command]:
        plan = self.plan(p, s, o)
        w, d = self.observe(p, plan)
        gp = {"B": p["B"], "K": p["K"], "enabled": p["enabled"]}
        cmds = []
        for gc in self.gate.commands(gp, {"h": s["h"]}, {"w": w, "d": d}):
            out, nxt = self._commit(p, plan, gc.out["fire"], gc.out, gc.next["h"])
            out["w"] = w
            cmds.append(Command(gc.name, gc.guard, out, nxt))
        return cmds

    def _commit(
        self,
        p: Vars,
        plan: PassPlan,
        fire: z3.BoolRef,
        gate_out: Mapping[str, z3.ExprRef],
        h_next: z3.ArithRef,
    ) -> tuple[dict[str, z3.ExprRef], dict[str, z3.ExprRef]]:
        P, M = self.slot(p, "P"), self.slot(p, "M")
        reqs = [Req(*x) for x in zip(plan.st, plan.c, plan.g, plan.b, strict=True)]
        free = plan.free
        for i in range(self.R):
            reqs[i], free = reserve_and_run(
                reqs[i], free, fire=fire, chunk=plan.chunk[i], admit=plan.admit[i],
                need=plan.need[i], dec=plan.decoding[i],
            )  # fmt: skip
        outs: dict[str, z3.ExprRef] = dict(gate_out)
        outs["prefill_tokens"] = z3.If(fire, plan.planned, 0)
        outs["prefill_seqs"] = z3.If(fire, count_true([n > 0 for n in plan.chunk]), 0)
        outs["decode_seqs"] = plan.d
        outs["preempted"] = plan.preempted
        outs["waiting"] = count_true([r.st == WAITING for r in reqs])
        outs["running"] = count_true([r.st == RUNNING for r in reqs])
        outs["kv_free"] = free
        for i in range(self.R):
            run = scheduled(plan.decoding[i], fire, plan.chunk[i])
            reqs[i], free = sample(reqs[i], free, scheduled=run, prompt=P[i], most=M[i])
        nxt: dict[str, z3.ExprRef] = {}
        for k in _SLOT_STATE:
            nxt.update({f"{k}{i}": getattr(r, k) for i, r in enumerate(reqs)})
        nxt["free"] = free
        nxt["h"] = h_next
        return outs, nxt
