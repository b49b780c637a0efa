"""Loop-level IR, modelled on TVM TensorIR (``tvm.tir``).

- :mod:`.nodes`: buffers, :class:`BufferLoad`, statements and :class:`PrimFunc`;
- :mod:`.functor`: children, walking helpers, :class:`StmtExprVisitor` / :class:`ExprMutator`;
- :mod:`.printer`: TVMScript in the style of the MLC course (TVM 0.10 era), :func:`script`;
- :mod:`.verifier`: :func:`verify`;
- :mod:`.intrinsics`: the scalar intrinsics (``exp``, ``erf``, ``if_then_else``, ``max_value`` ...)
  and the :data:`INTRINSICS` table of call ops the code generator lowers.
"""
from .functor import (ExprMutator, StmtExprVisitor, buffer_loads, expr_children, post_order_visit,
    stmt_children, stmt_exprs, walk_stmt)
from .intrinsics import (INTRINSICS, abs, all, any, ceil, cos, equal, erf, exp, exp2, floor,
    if_then_else, log, log2, log10, max_value, maximum, min_value, minimum, not_equal, power, round,
    rsqrt, sigmoid, sin, sqrt, tanh, trunc)
from .nodes import (FOR_KINDS, Allocate, Block, BlockRealize, Buffer, BufferLoad, BufferRegion,
    BufferStore, Evaluate, For, IfThenElse, IterVar, LetStmt, PrimFunc, Range, SeqStmt, Stmt)
from .printer import script
from .verifier import VerifyError, verify

__all__ = [
    "Range", "Buffer", "BufferLoad", "BufferRegion", "IterVar", "Stmt", "BufferStore", "For",
    "SeqStmt", "IfThenElse", "LetStmt", "Evaluate", "Block", "BlockRealize", "Allocate",
    "PrimFunc", "VerifyError", "verify", "script", "FOR_KINDS", "INTRINSICS",
    "expr_children", "post_order_visit", "stmt_children", "stmt_exprs", "walk_stmt", "buffer_loads",
    "StmtExprVisitor", "ExprMutator",
    "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs",
    "floor", "ceil", "round", "trunc", "power", "sin", "cos", "if_then_else", "equal",
    "not_equal", "maximum", "minimum", "max_value", "min_value", "all", "any",
]
