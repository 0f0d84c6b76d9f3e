"""Drop-in uses of densegate inside other inference engines.

Each engine gets its own sub-package (``densegate.integrations.vllm``), which
imports that engine; ``densegate.impl`` never does, so the core stays
importable without any engine installed.
"""
