"""Scalar expressions (``PrimExpr``) as one namespace, the ``E`` every caller writes (``E.Add(a, b)``,
``E.simplify(e)``): the nodes and their helpers (:mod:`builder.ir.prim_expr`) and their analysis
(:mod:`builder.ir.arith`: ``simplify``, ``prove_equal``, ``substitute``, ...), which imports the nodes.
"""
from .arith import divide_exact, evaluate, free_vars, prove_equal, simplify, substitute
from .prim_expr import *  # noqa: F401,F403
from .prim_expr import __all__ as _NODES
from .prim_expr import _binary, _bits, _children  # noqa: F401 (used by te, the tir parser and nodes)

__all__ = [*_NODES, "simplify", "prove_equal", "free_vars", "substitute", "evaluate", "divide_exact"]
