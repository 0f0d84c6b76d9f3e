"""The scheduler and what it schedules: requests, KV blocks, batches.

The runtime twin of ``spec/scheduler.py``.
"""
