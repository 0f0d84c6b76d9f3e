"""The rest of a pass after the decodes, one request per step: partial chunks, admission, commit.

``SchedulerMachine`` runs four folds over its slots after the decodes, each
threading its own totals: the partial chunks (``partial_step``, the budget), the
admission (``admit_step``, ``AdmitScan``), then, once the gate has decided, the
commit's two halves (``reserve_and_run`` and ``sample``, the free blocks). Each
fold starts from where the one before it ended (the budget and chunk tokens the
partials left, the free blocks the reservations left), and one request's step in
a later fold reads only that request's results from the earlier ones.
``PassTail`` runs the four folds side by side, one request per transition, with
each later fold's starting values as parameters (``bud_e``, ``prun_e``, ``fr_e``:
any values); a run whose parameters equal the earlier folds' end values is the
per-slot pass. So what an induction over its steps proves, read at the end with
those equalities, holds of every pass, whatever the number of requests (S14).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import z3

from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import (
    RUNNING,
    WAITING,
    Req,
    decodes,
    owed,
    pass_chunk,
    reserve_and_run,
    sample,
    scheduled,
)
from densegate.spec.scheduler_scan import AdmitScan, admit_start, admit_step, partial_step

__all__ = ["ADMIT_BOOLS", "ADMIT_INTS", "SUMS", "PassTail"]

ADMIT_INTS = ("slots", "abudget", "spare", "planned")
ADMIT_BOOLS = ("stopped", "seen_waiting", "head_fits", "head_admit")
SUMS = (
    "nrun1", "nwait1", "nd", "now", "held1",  # after the decodes
    "k", "a",  # admissions and the blocks they would reserve
    "held2", "run2", "held3", "run3",  # after the reservations, after the samples
    "hneed", "htotal",  # the head of the queue's blocks and tokens
)  # fmt: skip
_AFTER = ("st3", "c3", "g3", "b3")
"""The request after the commit, as the transition's outputs."""
_PARTIAL = ("budget", "work", "prun", "seen")
_PARAMS = ("T", "S", "N", "L", "cap", "d_t", "ow_t", "run1_t", "bud_e", "prun_e", "fr_e", "free1")

Sample = Callable[..., tuple[Req, z3.ArithRef]]
RequestOk = Callable[[z3.ArithRef, z3.ArithRef, Req], z3.BoolRef]


class PassTail(Machine):
    """Steps 2, 3 and 5 of ``m``'s pass over the requests after the decodes.

    Parameters: the pass's (``T``, ``S``, ``N``, ``L``, ``cap``, ``chunked``), the
    gate's decision ``fire`` and whether the pass is ``quiet`` (nothing preempted),
    the decode phase's totals (decodes ``d_t``, running requests that owe prefill
    ``ow_t``, running ``run1_t``, free blocks ``free1``) and the later folds' starting
    values (``bud_e``, ``prun_e``, ``fr_e``). Observation: the next request as the
    decodes left it, its lengths, and whether it decodes (``dec``), constrained by
    S10's per-request facts and by being one of the decode phase's totals.
    """

    def __init__(self, m: SchedulerMachine, request_ok: RequestOk, sample_step: Sample = sample):
        self.m = m
        self.request_ok = request_ok
        self.sample = sample_step
        self.name = f"pass tail[{m.name.removeprefix('scheduler')}]"
        self.param_sorts: dict[str, Any] = {k: z3.Int for k in _PARAMS}
        self.param_sorts.update({k: z3.Bool for k in ("chunked", "fire", "quiet")})
        self.state_sorts: dict[str, Any] = {k: z3.Int for k in (*_PARTIAL, *ADMIT_INTS)}
        self.state_sorts.update({k: z3.Bool for k in ADMIT_BOOLS})
        self.state_sorts.update({k: z3.Int for k in ("fr", "fc", *SUMS)})
        self.obs_sorts: dict[str, Any] = {k: z3.Int for k in ("st", "c", "g", "b", "P", "M")}
        self.obs_sorts["dec"] = z3.Bool
        self.out_sorts: dict[str, Any] = {k: z3.Int for k in ("chunk", "need", *_AFTER)}
        self.out_sorts["admit"] = z3.Bool

    def param_ok(self, p: Vars) -> z3.BoolRef:
        """The pass's parameters as the per-slot machine demands them (blocks for at least
        the smallest request: prompt 1, one output), and the decode totals consistent."""
        return z3.And(
            p["S"] >= 1,
            p["T"] >= p["S"],
            p["N"] >= 1,
            self.m.blocks_for(z3.IntVal(2)) <= p["N"],
            p["L"] >= 2,
            p["cap"] >= 1,
            z3.Implies(z3.Not(p["chunked"]), z3.And(p["T"] >= p["L"], p["cap"] == p["T"])),
            p["d_t"] >= 0,
            p["ow_t"] >= 0,
            p["run1_t"] == p["d_t"] + p["ow_t"],
            p["run1_t"] <= p["S"],
            p["free1"] >= 0,
            p["prun_e"] >= 0,
        )

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        acc = admit_start(p["S"] - p["run1_t"], p["bud_e"], p["free1"], p["prun_e"], p["quiet"])
        cons = [s["budget"] == p["T"] - p["d_t"], *[s[k] == 0 for k in _PARTIAL[1:]]]
        cons += [s[k] == getattr(acc, k.replace("abudget", "budget")) for k in ADMIT_INTS]
        cons += [s[k] == getattr(acc, k) for k in ADMIT_BOOLS]
        cons += [s["fr"] == p["free1"], s["fc"] == p["fr_e"], *[s[k] == 0 for k in SUMS]]
        return z3.And(*cons)

    def _req(self, o: Vars) -> Req:
        return Req(o["st"], o["c"], o["g"], o["b"])

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """S10's facts of a request after its decode turn (it decodes exactly when it runs
        with its last token sampled, holding a block for the token), and it is one of the
        decode phase's totals: one more decode, owing or running request than seen."""
        r, P, m = self._req(o), o["P"], self.m
        running = r.st == RUNNING
        dec = o["dec"]
        return z3.And(
            P >= 1,
            o["M"] >= 1,
            P + o["M"] <= p["L"],
            m.blocks_for(P + o["M"]) <= p["N"],
            self.request_ok(P, o["M"], r),
            z3.Implies(running, dec == decodes(r, P)),
            z3.Implies(z3.Not(running), z3.Not(dec)),
            z3.Implies(dec, r.b * m.bs >= P + r.g),
            z3.Implies(dec, s["nd"] + 1 <= p["d_t"]),
            z3.Implies(z3.And(running, z3.Not(dec)), s["now"] + 1 <= p["ow_t"]),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        m, r, P, dec = self.m, self._req(o), o["P"], o["dec"]
        one: Callable[[z3.BoolRef], z3.ArithRef] = lambda x: z3.If(x, 1, 0)  # noqa: E731
        # step 2: the partial chunk
        left = owed(r, P, dec)
        budget, n = partial_step(m.partial_chunk, s["budget"], left, p["cap"])
        # step 3: admission, unless something was preempted
        acc = AdmitScan(s["slots"], s["abudget"], s["spare"], s["planned"],
                        *[s[k] for k in ADMIT_BOOLS])  # fmt: skip
        need = m.admission_blocks(P, r.g)
        waiting = r.st == WAITING
        acc2, ok, n_admit = admit_step(
            acc, waiting=waiting, total=P + r.g, need=need, chunked=p["chunked"],
            cap=p["cap"], quiet=p["quiet"], allowed=m.admission_allowed(p["prun_e"]),
        )  # fmt: skip
        chunk = pass_chunk(ok, n_admit, n)
        # step 5: reserve and run, then sample
        fire = p["fire"]
        r2, fr = reserve_and_run(r, s["fr"], fire=fire, chunk=chunk, admit=ok, need=need, dec=dec)
        run = scheduled(dec, fire, chunk)
        r3, fc = self.sample(r2, s["fc"], scheduled=run, prompt=P, most=o["M"])
        head = z3.And(waiting, z3.Not(s["seen_waiting"]))
        nxt: dict[str, z3.ExprRef] = {
            "budget": budget,
            "work": s["work"] + left,
            "prun": s["prun"] + n,
            "seen": s["seen"] + one(left > 0),
            **{k: getattr(acc2, k.replace("abudget", "budget")) for k in ADMIT_INTS},
            **{k: getattr(acc2, k) for k in ADMIT_BOOLS},
            "fr": fr,
            "fc": fc,
            "nrun1": s["nrun1"] + one(r.st == RUNNING),
            "nwait1": s["nwait1"] + one(waiting),
            "nd": s["nd"] + one(dec),
            "now": s["now"] + one(z3.And(r.st == RUNNING, z3.Not(dec))),
            "held1": s["held1"] + r.b,
            "k": s["k"] + one(ok),
            "a": s["a"] + z3.If(ok, need, 0),
            "held2": s["held2"] + r2.b,
            "run2": s["run2"] + one(r2.st == RUNNING),
            "held3": s["held3"] + r3.b,
            "run3": s["run3"] + one(r3.st == RUNNING),
            "hneed": z3.If(head, need, s["hneed"]),
            "htotal": z3.If(head, P + r.g, s["htotal"]),
        }
        out = {"chunk": chunk, "need": need, "admit": ok, "st3": r3.st, "c3": r3.c, "g3": r3.g,
               "b3": r3.b}  # fmt: skip
        return [Command("REQUEST", z3.BoolVal(True), out, nxt)]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """One request per row: it as the decodes left it, what the pass gives it, the sums."""
        out: dict[str, Any] = {"request": row["pass"]}
        keys = ("st", "c", "g", "b", "P", "M", "dec", "chunk", "admit", "need", *_AFTER)
        out.update({k: row.get(k) for k in keys})
        rest = (*_PARTIAL, *ADMIT_INTS, *ADMIT_BOOLS, "fr", "fc", *SUMS)
        out.update({k: row.get(k) for k in rest})
        if "next_fc" in row:
            out["after"] = " ".join(f"{k}={row[f'next_{k}']}" for k in rest)
        return out
