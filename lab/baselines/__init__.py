"""What densegate is compared against: reference policies and schedulers.

Not imported by the core (gate, scheduler, engine); the conformance kit and the
benchmarks use these to show, rather than assert, what the gate fixes.
"""
