"""Which Hypothesis profile is active, for tests whose size depends on the profile."""

from __future__ import annotations

import os

PROFILE = os.environ.get("DENSEGATE_PROFILE", os.environ.get("HYPOTHESIS_PROFILE", "ci"))
NIGHTLY = PROFILE == "nightly"


def examples(ci: int, nightly: int) -> int:
    return nightly if NIGHTLY else ci
