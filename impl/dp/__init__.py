"""Data-parallel ranks on torch.distributed, one aligned gate decision per tick.

Modules, in dependency order: ``config`` (what a DP run is, injected faults),
``membership`` (who is left after a failure, agreed through the store),
``collective`` (the all-reduce, liveness, regrouping), ``router`` (which rank
gets a request), ``readmission`` (a dead rank's requests handed to the
survivors), ``report`` (what a rank returns), ``inject`` (fault hooks),
``rank`` (one rank's loop), ``timing`` and ``summary`` (merging reports),
``launch`` (starting the ranks). The per-tick vector's layout is the aligned
gate's (``densegate.impl.dp_gate``).
"""
