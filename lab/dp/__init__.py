"""The data-parallel lab: benchmark phases, their timing, injected rank faults, and the
summary's tables; it reaches the runtime (``densegate.impl.dp``) through its hooks."""
