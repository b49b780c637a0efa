"""Graph-level IR (TVM Relax-shaped) and the scalar expressions shared with the loop level.

``from builder import ir``: ``ir.Var(name, struct_info)``, ``ir.TensorStructInfo(shape, dtype)``,
``ir.BlockBuilder``, ``ir.IRModule``, ``ir.op`` constructors, ``ir.verify``, ``ir.parse(text)``
(TVMScript -> IRModule) and ``ir.assert_structural_equal`` / ``ir.structural_equal``.
"""
from . import expr
from .expr import PrimExpr
from .struct_info import (
    DTYPES, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo,
    TupleStructInfo,
)
from .relax import (
    Call, Constant, DataflowBlock, DataflowVar, Expr, ExternFunc, Function, GlobalVar, IRModule, Op,
    PrimValue, SeqExpr, ShapeExpr, StringImm, Tuple, TupleGetItem, Var, VarBinding, BindingBlock, const,
)
from . import op
from .block_builder import BlockBuilder
from .printer import print_irmodule, print_struct_info
from .verifier import IRVerifyError, verify
from .parser import ParseError, parse
from .structural import assert_structural_equal, structural_equal

__all__ = [
    "expr", "PrimExpr", "DTYPES", "ObjectStructInfo", "PrimStructInfo", "ShapeStructInfo", "StructInfo",
    "TensorStructInfo", "TupleStructInfo", "Call", "Constant", "DataflowBlock", "DataflowVar", "Expr",
    "ExternFunc", "Function", "GlobalVar", "IRModule", "Op", "PrimValue", "SeqExpr", "ShapeExpr",
    "StringImm", "Tuple", "TupleGetItem", "Var", "VarBinding", "BindingBlock", "const", "op",
    "BlockBuilder", "print_irmodule", "print_struct_info", "IRVerifyError", "verify",
    "ParseError", "parse", "assert_structural_equal", "structural_equal",
]
