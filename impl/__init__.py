"""densegate's runtime: the dense prefill gate, scheduler, KV blocks, runners, engine.

Imports neither z3 nor ``densegate.spec``: engines embed this package alone.
"""

from densegate.impl.gate import Decision, GateConfig, GateInput, PrefillGate, Reason

__all__ = ["Decision", "GateConfig", "GateInput", "PrefillGate", "Reason"]
