"""Proof obligations over ``densegate.spec``, the prover, and ``densegate prove``.

Needs z3 and CrossHair (the ``prove`` extra); without z3 importing this package names it.
"""

from densegate.impl.extras import require

require("z3", "densegate.proofs")
