"""Time: a pass-time model, its profiles (measured and fitted, or roofline), and the
figures (tokens/s, TTFT, inter-token latency, tick) a run gives on either clock."""

from densegate.lab.cost.model import (
    FEATURES,
    KINDS,
    LinearPassModel,
    PassModel,
    PassWork,
    kind_of,
    tick_ms,
)
from densegate.lab.cost.profile import Profile, Sample, fit, fit_error, roofline_profile
from densegate.lab.cost.roofline import GPUS, SHAPES, GPUSpec, ModelShape, RooflineInputs
from densegate.lab.cost.roofline import RooflineModel as RooflineModel
from densegate.lab.cost.timeline import (
    PassTimeline,
    RankTiming,
    TimedRunner,
    TimeFigures,
    dp_figures,
    measured_figures,
    modeled_figures,
    rank_timing,
)

__all__ = [
    "FEATURES",
    "GPUS",
    "KINDS",
    "SHAPES",
    "GPUSpec",
    "LinearPassModel",
    "ModelShape",
    "PassModel",
    "PassTimeline",
    "PassWork",
    "Profile",
    "RankTiming",
    "RooflineInputs",
    "RooflineModel",
    "Sample",
    "TimeFigures",
    "TimedRunner",
    "dp_figures",
    "fit",
    "fit_error",
    "kind_of",
    "measured_figures",
    "modeled_figures",
    "rank_timing",
    "roofline_profile",
    "tick_ms",
]
