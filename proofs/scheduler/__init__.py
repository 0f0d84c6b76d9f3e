"""Scheduler-level proofs: the scheduler machine, its summaries and its TTFT window."""
