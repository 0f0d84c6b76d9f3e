"""Data-parallel ranks on torch.distributed, one aligned gate decision per tick.

The runtime an engine embeds; what only measures or compares it (fault
injection, benchmark phases, phase timing, tables) is ``densegate.lab.dp``,
let in through ``hooks``. Modules, in dependency order: ``config`` (what the
ranks agree on: the run and its phases), ``membership`` (who is left after a
failure, agreed through the store), ``collective`` (the all-reduce, liveness,
regrouping), ``router`` (which rank gets a request), ``readmission`` (a dead
rank's requests handed to the survivors), ``report`` (what a rank returns),
``recovery`` (an agreement held until it is applied, across phases), ``hooks``
(where the lab comes in), ``rank`` (one rank's loop), ``summary``
(merging reports), ``launch`` (starting the ranks). The per-tick vector's
layout is the aligned gate's (``densegate.impl.dp_gate``).
"""
