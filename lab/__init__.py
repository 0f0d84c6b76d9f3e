"""densegate's laboratory: what measures the runtime and compares it, never what engines run.

``cost`` (pass-time models, profiles, the figures a run gives on either clock),
``baselines`` (the policies and schedulers densegate is compared against),
``bench`` (workloads replayed by every policy, with checks, tables and plots).
``densegate.impl`` never imports this package; it imports the runtime.
"""
