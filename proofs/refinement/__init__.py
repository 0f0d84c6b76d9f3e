"""Refinement: the shipped Python decides exactly as the proved machines (level R).

``densegate prove`` runs the R obligations (``obligations``); ``densegate conform
--prove`` runs the same symbolic machinery on anyone's gate (``conform``). Needs
CrossHair (``crosshair-tool``) and z3; ``densegate.impl`` never imports this.
"""
