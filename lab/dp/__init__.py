"""The data-parallel lab: benchmark phases, their timing, and injected rank faults."""
