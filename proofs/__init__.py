"""Proof obligations over ``densegate.spec``, the prover, and ``densegate prove``."""
