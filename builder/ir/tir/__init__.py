"""Loop-level IR, modelled on TVM TensorIR (``tvm.tir``).

- :mod:`.nodes`: buffers, :class:`BufferLoad`, statements and :class:`PrimFunc`;
- :mod:`.functor`: children, walking helpers, :class:`StmtExprVisitor`, :class:`ExprMutator`,
  :class:`StmtExprMutator`;
- :mod:`.printer`: TVMScript in the style of the MLC course (TVM 0.10 era), :func:`script`;
- :mod:`.verifier`: :func:`verify`;
- :mod:`.intrinsics`: the scalar intrinsics (``exp``, ``erf``, ``if_then_else``, ``max_value`` ...)
  and the :data:`INTRINSICS` table of call ops the code generator lowers.
"""
from .functor import (ExprMutator, StmtExprMutator, StmtExprVisitor, buffer_loads, expr_children, post_order_visit,
    stmt_children, stmt_exprs, walk_stmt)
from . import intrinsics
from .intrinsics import *  # noqa: F401,F403 - the intrinsics and their constructors (intrinsics.__all__)
from .nodes import (FOR_KINDS, Allocate, Block, BlockRealize, Buffer, BufferLoad, BufferRegion,
    BufferStore, Evaluate, For, IfThenElse, IterVar, LetStmt, PrimFunc, Range, SeqStmt, Stmt)
from .printer import script
from .verifier import VerifyError, verify

__all__ = [
    "Range", "Buffer", "BufferLoad", "BufferRegion", "IterVar", "Stmt", "BufferStore", "For",
    "SeqStmt", "IfThenElse", "LetStmt", "Evaluate", "Block", "BlockRealize", "Allocate",
    "PrimFunc", "VerifyError", "verify", "script", "FOR_KINDS",
    "expr_children", "post_order_visit", "stmt_children", "stmt_exprs", "walk_stmt", "buffer_loads",
    "StmtExprVisitor", "ExprMutator", "StmtExprMutator", *intrinsics.__all__,
]
