"""Workloads: synthetic and on-disk traces, and replaying one through an Engine."""
