"""What the scheduler-level proofs cover, in words: the one place their scopes are written.

S1-S6, S10 and S11 are proved by induction of machines without request slots (the
pass ledger, the summary, the TTFT window, one request's life, the decode scan), for
any number of requests *given* the facts those machines take as their observation.
What ties the facts to the per-slot scheduler (the machine the implementation is
compared against) is S8, an induction over the per-slot machine at a fixed number of
request slots, and a source test (the per-slot pass changes a request only through
the one-request functions). So each scope says what stays bounded: the link, at
S8's slot counts. None of these is reported parametric.
"""

from __future__ import annotations

__all__ = [
    "NIGHTLY_SLOTS",
    "S8_SLOTS",
    "TEST_SLOTS",
    "decode_scope",
    "life_scope",
    "per_slot_scope",
    "slot_free_scope",
]

S8_SLOTS = 3
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


def slot_free_scope(machine: str, facts: str, bs: int) -> str:
    """S1-S6: proved of ``machine`` for any number of requests given ``facts``, which only
    S8 checks the per-slot scheduler against."""
    return (
        f"any number of requests, block size {bs}, {_GATE}: on the {machine}, given {facts}; "
        f"the per-slot scheduler is checked to meet them only by S8, at {_BOUND}"
    )


def life_scope(bs: int) -> str:
    """S10 at block size ``bs``."""
    return (
        f"any number of requests, block size {bs}: one request's pass with what the others "
        "decide left arbitrary; that each request of the per-slot scheduler runs so is a "
        "source test (only the one-request functions change a request) and, for their order "
        f"and arguments, S8's invariant, at {_BOUND}"
    )


def decode_scope(bs: int) -> str:
    """S11 at block size ``bs``."""
    return (
        f"any number of requests, block size {bs}: the decode scan, whose victim is any "
        "running request after the turn holding >= 1 block, or itself; that the per-slot "
        "scheduler's victim (the newest running request) is one is checked only by S8 "
        f"(through the ledger facts), at {_BOUND}"
    )


def per_slot_scope(slots: int, bs: int) -> str:
    """S8 at ``slots`` request slots and block size ``bs``."""
    return f"{slots} requests, block size {bs}, {_GATE}"
