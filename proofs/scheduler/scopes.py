"""What the scheduler-level proofs cover, in words: the one place their scopes are written.

S1-S6 are proved of machines without request slots (the pass ledger, the summary,
the TTFT window) given facts about each pass; S11-S15 prove those facts, for any number
of requests, of folds of one per-request step (step 0: S13; the decodes: S11 with S12's
victim search; the partial chunks, admission and the commit: S14, with S7's and S9's
scans inside; the window's figures of an undisturbed pass: S15, beside S14's folds),
each request as S10 describes it. The per-slot machine (the one S8 and R3 run) calls
the same steps from its own loops; S16 checks semantically, at ``LINK_SLOTS``
requests, that its pass is the folds' run (step 0 as ``JoinScan``, everything after the
decodes as ``PassTail`` with S14's readings), and S8 checks every fact again at 3. So
S1-S6 and S10-S15 are parametric in the number of requests on the machines they are
about, and what carries them to the per-slot machine is bounded: S16's ``LINK_SLOTS``.
"""

from __future__ import annotations

__all__ = [
    "LINK_SLOTS",
    "NIGHTLY_SLOTS",
    "S8_SLOTS",
    "TEST_BLOCK_SIZES",
    "TEST_SLOTS",
    "decode_scope",
    "fold_scope",
    "life_scope",
    "per_slot_scope",
    "slot_free_scope",
    "window_scope",
]

S8_SLOTS = 3
LINK_SLOTS = 8
TEST_BLOCK_SIZES = (1, 3, 16)
"""Block sizes the test suite proves S10-S16 at beside 2 (``tests/test_proofs_scheduler.py``)."""
"""Request slots S16 checks the per-slot pass against its folds at (``link``)."""
"""Request slots ``densegate prove`` proves S8 at (``per_slot.SLOTS``)."""
TEST_SLOTS = 4
"""Request slots the test suite proves S8 at as well (``tests/test_proofs_scheduler_scale.py``)."""
NIGHTLY_SLOTS = (5, 6)
"""Request slots the nightly test profile proves S8 at, the z3 resource limit lifted."""

_GATE = "the gate without its STALL valve"
_BOUND = (
    f"{S8_SLOTS} requests ({TEST_SLOTS} in the tests, {NIGHTLY_SLOTS[0]} and "
    f"{NIGHTLY_SLOTS[1]} nightly)"
)
_SIZES = ", ".join(str(b) for b in TEST_BLOCK_SIZES[:-1]) + f" and {TEST_BLOCK_SIZES[-1]}"
_OTHER_SIZES = (
    f"the machine takes no block size, and the facts hold at block sizes {_SIZES} too "
    "(the test suite proves S10-S16 there)"
)
_FOLDS = (
    "the per-slot scheduler calls that step from its own loop, and S16 checks at "
    f"{LINK_SLOTS} requests that its pass is the folds' run"
)


def slot_free_scope(machine: str, facts: str, bs: int) -> str:
    """S1-S5: proved of ``machine`` given ``facts``, which S11-S14 prove of every per-slot
    pass for any number of requests."""
    return (
        f"any number of requests, block size {bs}, {_GATE}: on the {machine}, given {facts}, "
        "which S11-S14 prove for any number of requests of the folds of per-request steps "
        f"the per-slot scheduler's phases are built from (each request as S10 describes it; "
        f"{_FOLDS}); S8 checks them again at {S8_SLOTS} requests; {_OTHER_SIZES}"
    )


def window_scope(bs: int) -> str:
    """S6: its window facts, which S15 proves of the per-slot scheduler for any R."""
    return (
        f"any number of requests, block size {bs}, {_GATE}: on the TTFT window, given "
        "window_facts for the tracked request, which S15 proves for any number of requests "
        "of every undisturbed pass of its window as a fold beside S14's (each request as "
        "S10 describes it; "
        f"{_FOLDS}); checked again by S8, at {S8_SLOTS} requests; {_OTHER_SIZES}"
    )


def fold_scope(bs: int, what: str) -> str:
    """S12-S14: one phase of the per-slot pass as a fold, for any number of requests."""
    return (
        f"any number of requests, block size {bs}: {what}, one request per step, each "
        f"request as S10 describes it; {_FOLDS}"
    )


def life_scope(bs: int) -> str:
    """S10 at block size ``bs``."""
    return (
        f"any number of requests, block size {bs}: one request's pass with what the others "
        "decide left arbitrary but for S12's (a victim is running); the per-slot scheduler "
        "changes a request only through these functions, in this order (a source test), "
        "and where its decode phase differs in form (a request an earlier turn preempted "
        "meets its own turn queued) a lemma shows the request ends the same"
    )


def decode_scope(bs: int) -> str:
    """S11 at block size ``bs``."""
    return (
        f"any number of requests, block size {bs}: the decode scan, whose victim is any "
        "running request after the turn holding >= 1 block, or itself; that each decode "
        "turn of the per-slot scheduler (its victim the newest running request) is a step "
        "of it is S12's lemma, for any number of requests; each request as S10 describes it"
    )


def per_slot_scope(slots: int, bs: int) -> str:
    """S8 at ``slots`` request slots and block size ``bs``."""
    return f"{slots} requests, block size {bs}, {_GATE}"
