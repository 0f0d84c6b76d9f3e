"""The dense prefill gate and the scheduler as Z3 transition relations, each written once."""
