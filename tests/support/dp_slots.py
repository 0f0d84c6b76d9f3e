"""The spec's names of the aligned gate's vector slots, once for every test that feeds the spec
a summed vector (the lockstep, SGLang's judge)."""

from __future__ import annotations

from densegate.impl.dp_vector import (
    DECODE_SEQS,
    FILLED_RANKS,
    KV_PRESSURE_RANKS,
    NO_DECODE_RANKS,
    VACANT_RANKS,
    WAITING_RANKS,
    WAITING_TOKENS,
)

SHARED = ("W", "F", "D", "P", "C", "Fl", "Nd", "Va")
"""The spec's names of the gate's slots after RANKS, in vector order."""
LOCAL = {"lw": WAITING_RANKS, "lf": WAITING_TOKENS, "ld": DECODE_SEQS, "lp": KV_PRESSURE_RANKS,
         "lfl": FILLED_RANKS, "lnd": NO_DECODE_RANKS, "lva": VACANT_RANKS}  # fmt: skip
"""The spec's names of one rank's own summand, by slot."""
