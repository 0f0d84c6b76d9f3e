"""Data-parallel ranks on torch.distributed, one aligned gate decision per tick.

Modules, in dependency order: ``config`` (what a DP run is), ``collective``
(the all-reduce and liveness), ``router`` (which rank gets a request),
``report`` (what a rank returns), ``rank`` (one rank's loop), ``summary``
(merging reports), ``launch`` (starting the ranks). The per-tick vector's
layout is the aligned gate's (``densegate.impl.dp_gate``).
"""
