"""Conformance kit: check any gate against the proved machine (strategies, check_gate)."""
