"""The paced cap in the scheduler: ``capped_prefill`` runs as D12's cap rule, and
``Scheduler.commit`` under a capped FIRE never prefills more than the cap.

D12 proves the rule of a model (``densegate.proofs.dp_paced_machines.CapRule``); here the
shipped function is run beside that model on every drawn plan, item by item, so the
proof is about the code that runs. The scheduler tests drive real passes whose plans
would run more than the cap: a commit that ignored the cap fails them.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from densegate.impl.gate import Decision, Reason
from densegate.impl.sched.cap import capped_prefill
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.request import Request
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.dp_paced_machines import CAP_RULE
from densegate.spec.machine import evaluate

_sizes = st.lists(st.integers(1, 40), max_size=6)


def _requests(n: int, start: int = 0) -> list[Request]:
    return [Request(f"r{start + i}", start + i, [1], 1, 0, 0.0) for i in range(n)]


def _model(partials: list[int], admits: list[int], cap: int, chunked: bool) -> list[int]:
    """What the cap rule keeps of each planned item, in order (0: not kept)."""
    params = {"cap": cap, "chunked": chunked}
    state: dict[str, Any] = {"left": cap, "stop": False, "adm": False}
    takes = []
    for n, adm in [(n, False) for n in partials] + [(n, True) for n in admits]:
        _, out, state = evaluate(CAP_RULE, params, state, {"n": n, "a": adm})
        takes.append(out["take"])
    return takes


@settings(max_examples=400)
@given(partials=_sizes, admits=_sizes, cap=st.integers(1, 120), chunked=st.booleans())
def test_capped_prefill_is_the_cap_rule(
    partials: list[int], admits: list[int], cap: int, chunked: bool
) -> None:
    """Item by item, the shipped function keeps exactly what D12's model keeps."""
    rp, ra = _requests(len(partials)), _requests(len(admits), 100)
    kept_p, kept_a = capped_prefill(
        list(zip(rp, partials, strict=True)), list(zip(ra, admits, strict=True)), cap, chunked
    )
    takes = _model(partials, admits, cap, chunked)
    got = [n for _, n in kept_p] + [0] * (len(partials) - len(kept_p))
    got += [n for _, n in kept_a] + [0] * (len(admits) - len(kept_a))
    assert got == takes, (partials, admits, cap, chunked)
    # the kept lists are prefixes of the plan, in order, and their sizes respect the cap
    assert [r for r, _ in kept_p] == rp[: len(kept_p)]
    assert [r for r, _ in kept_a] == ra[: len(kept_a)]
    assert sum(takes) <= cap
    assert all(n > 0 for _, n in kept_p + kept_a)


@given(partials=_sizes, admits=_sizes, chunked=st.booleans())
def test_no_cap_keeps_the_plan(partials: list[int], admits: list[int], chunked: bool) -> None:
    rp, ra = _requests(len(partials)), _requests(len(admits), 100)
    plan_p, plan_a = list(zip(rp, partials, strict=True)), list(zip(ra, admits, strict=True))
    assert capped_prefill(plan_p, plan_a, None, chunked) == (plan_p, plan_a)


# -- Scheduler.commit under a capped FIRE ------------------------------------------------


def _scheduler(chunked: bool, budget: int, seqs: int) -> Scheduler:
    cfg = SchedulerConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        block_size=4,
        num_blocks=512,
        max_model_len=budget if not chunked else 4 * budget,
        enable_chunked_prefill=chunked,
    )
    return Scheduler(cfg)


def _add(s: Scheduler, prompts: list[int], first: int) -> None:
    for i, n in enumerate(prompts):
        s.add(Request(f"q{first + i}", first + i, list(range(1, n + 1)), 3, 0, 0.0))


def _run(s: Scheduler, cap: int | None, passes: int, arrivals: list[list[int]]) -> list[int]:
    """Passes of ``s``, each a FIRE capped at ``cap`` (PACED) or uncapped (DENSE); the
    prefill tokens each ran. Checks each against its plan as it goes."""
    ran = []
    seq = 1000
    for k in range(passes):
        if k < len(arrivals):
            _add(s, arrivals[k], seq)
            seq += len(arrivals[k])
        plan = s.plan()
        decision = (
            Decision(True, Reason.DENSE) if cap is None else Decision(True, Reason.PACED, cap)
        )
        batch = s.commit(plan, decision)
        tokens = sum(len(c.token_ids) for c in batch.prefills)
        assert tokens == s.pass_log[-1].prefill_tokens
        if cap is not None:
            assert tokens <= cap, (k, tokens, cap)
            # what ran is the cap rule's prefix of the plan
            kp, ka = capped_prefill(
                plan.partials, plan.admits, cap, s.config.enable_chunked_prefill
            )
            assert [len(c.token_ids) for c in batch.prefills] == [n for _, n in kp + ka]
            assert tokens >= min(plan.prefill_tokens, cap) or (
                not s.config.enable_chunked_prefill and plan.admits
            )
        else:
            assert tokens == plan.prefill_tokens
        ran.append(tokens)
        sampled = sum(c.sample for c in batch.prefills) + sum(c.sample for c in batch.decodes)
        s.update(batch, [7] * sampled, float(k))
    return ran


def test_a_capped_fire_prefills_at_most_the_cap_where_the_plan_would_run_more() -> None:
    """The same queue, committed capped and uncapped: the plan runs more than the cap
    (so ignoring the cap would fail), the capped scheduler runs exactly the cap (chunked:
    owed chunks and admissions cut to what is left) while work is left."""
    prompts = [[30, 25, 40]]
    capped = _run(_scheduler(True, 64, 8), 16, 8, prompts)
    uncapped = _run(_scheduler(True, 64, 8), None, 8, prompts)
    assert uncapped[0] == 64 > 16  # the plan: the whole budget
    assert capped[:5] == [16] * 5 and sum(capped) == 95  # 95 tokens at 16 a pass
    assert max(capped) <= 16


def test_unchunked_admission_waits_for_room_under_the_cap() -> None:
    """Chunked prefill off: an admission that does not fit what is left of the cap waits
    (whole) for a later pass; the pass still never exceeds the cap."""
    s = _scheduler(False, 64, 8)
    ran = _run(s, 40, 4, [[30, 30, 10]])
    assert ran[0] == 30  # the second 30 would make 60 > 40: it waits, and so does the 10
    assert max(ran) <= 40 and sum(ran) == 70


@settings(max_examples=60, deadline=None)
@given(
    chunked=st.booleans(),
    budget=st.integers(16, 64),
    seqs=st.integers(1, 6),
    cap=st.integers(1, 64),
    arrivals=st.lists(st.lists(st.integers(1, 16), max_size=4), min_size=1, max_size=5),
    passes=st.integers(1, 12),
)
def test_capped_fires_never_prefill_more_than_the_cap(
    chunked: bool, budget: int, seqs: int, cap: int, arrivals: list[list[int]], passes: int
) -> None:
    _run(_scheduler(chunked, budget, seqs), cap, passes, arrivals)
