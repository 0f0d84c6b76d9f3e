"""The dense prefill gate and the scheduler as Z3 transition relations, each written once.

Needs z3 (the ``prove`` extra); without it importing this package names the extra.
"""

from densegate.impl.extras import require

require("z3", "densegate.spec")
