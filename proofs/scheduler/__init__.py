"""The scheduler level, S1-S15: one module per machine the obligations are proved of.

S8 (``per_slot``) is proved of the per-slot scheduler at a fixed number of request
slots; the others of machines with no request slots (the pass ledger, the summary,
the TTFT window, the scans, one request's life) or of one per-request step of the
per-slot pass's folds (S11-S15), so for any number of requests.
"""
