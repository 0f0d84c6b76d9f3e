"""What an engine is built from: the scheduler's limits, the runner, the model, checked.

Apart from the engine (``densegate.impl.engine``, which re-exports it) so the config's
checks, every field named and bounded where it is read, sit in one short module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from densegate.impl.runners.hf_config import model_len
from densegate.impl.sched.batch import KVLayout
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.validation import (
    MAX_RETRIES,
    check_bool,
    check_choice,
    check_device,
    check_int,
    check_optional_int,
)

__all__ = ["DTYPES", "RUNNERS", "EngineConfig"]

RUNNERS = ("null", "torch")
DTYPES = ("float32", "float64", "bfloat16", "float16", "auto")


@dataclass(frozen=True)
class EngineConfig(SchedulerConfig):
    """Scheduler limits plus which runner executes the passes.

    ``runner="null"`` schedules without computing (a fixed token per step);
    ``"torch"`` runs the Llama-family model in ``densegate.impl.runners.model``
    (``dtype="auto"``: the checkpoint's own dtype, float32 for a seeded model).
    """

    max_model_len: int = 0
    """0: the model's ``max_position_embeddings`` (4096 for a model without one); never more."""
    runner: str = "null"
    device: str = "cpu"
    dtype: str = "float32"
    model: Any = None
    """A Hugging Face Llama checkpoint directory or a seeded ``ModelConfig``: selects torch."""
    num_threads: int | None = None
    """Torch intra-op threads while the torch runner runs a pass (None: torch's setting)."""
    runner_retries: int = 0
    """Failed passes in a row a request survives, run again; the next failure aborts it."""
    check_weights: bool = True
    """Refuse NaN or infinite checkpoint weights (False skips that read, for a huge one)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_model_len", model_len(self.model, self.max_model_len))
        if self.model is not None and self.runner == "null":
            object.__setattr__(self, "runner", "torch")
        super().__post_init__()
        self.check_sizes()
        # A prompt token and an output token: no request fits below 2.
        check_int("EngineConfig", "max_model_len", self.max_model_len, 2)
        check_choice("EngineConfig", "runner", self.runner, RUNNERS)
        check_choice("EngineConfig", "dtype", self.dtype, DTYPES)
        check_device("EngineConfig", "device", self.device)
        # num_threads is ignored by the null runner, so a config can switch runners.
        check_optional_int("EngineConfig", "num_threads", self.num_threads, 1)
        check_int("EngineConfig", "runner_retries", self.runner_retries, 0, MAX_RETRIES)
        check_bool("EngineConfig", "check_weights", self.check_weights)

    @property
    def layout(self) -> KVLayout:
        return KVLayout(self.block_size, self.num_blocks, self.max_model_len, self.max_num_seqs)
