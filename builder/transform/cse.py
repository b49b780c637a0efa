"""EliminateCommonSubexpr: a binding that recomputes what an earlier binding of the same block
computed (the same pure op on the same arguments and attributes) is dropped and its uses read the
earlier variable (TVM's ``relax.transform.EliminateCommonSubexpr``, within dataflow blocks).

Why it is in the default pipeline: a Llama recipe computes the rotary embedding's ``cos`` / ``sin``
tables from the positions in every layer, for the queries and for the keys (the layers do not share
tensors). At TinyLlama's shape that is about 220 of the 600 kernel calls of one decode step
(positions cast, frequencies multiplied and concatenated, ``cos`` / ``sin`` and their casts, 44
times each); after this pass they run once per step.

What counts as equal: the same op record, arguments that are the same variables (after earlier
eliminations), constants with equal dtype, shape and bytes (the same constant object above 64 KiB), equal prim values, shapes and strings,
and equal attributes and ``sinfo_args``. Only graph-level op calls whose record is pure take part:
never an impure ``R.call_packed`` (``vm.builtin.kv_cache_append``, which writes the cache), nor the
runtime's other calls (``call_tir``, ``call_inplace_packed``, ``call_dps_packed``, collectives). A
``call_pure_packed`` of a builtin takes part (the KV cache's positions, computed in
every attention layer from the same arguments, run once per call), unless its result is an object: an
object has an identity, and two created (``vm.builtin.attention_kv_cache_create``) are not one. Tuple
items (``t[i]``) of the same tuple variable are merged as well. Candidates are matched within one binding block (a dataflow variable does not
outlive its block).
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.functor import ExprMutator
from ..ir.struct_info import ObjectStructInfo, TupleStructInfo
from .pass_infra import Pass

__all__ = ["EliminateCommonSubexpr", "eliminate_common_subexpr"]

#: Op records that never merge: calls into the runtime (but ``call_pure_packed``) and collectives
#: (effects the graph does not show).
_OPAQUE_PREFIXES = ("relax.call_", "relax.ccl.", "relax.null_value")
_PURE_PACKED = "relax.call_pure_packed"

#: Constants up to this size compare by value (dtype, shape, bytes); larger ones (the weights an
#: importer binds as constants) by identity, so the pass never hashes a model's weights.
_HASHED_CONSTANT_BYTES = 1 << 16


def _prim_key(v) -> tuple:
    """A scalar expression by its text and the identity of its symbolic variables."""
    return (repr(v), getattr(v, "dtype", None), tuple(id(x) for x in E.free_vars(v)))


def _attr_key(v):
    """A hashable key of an attribute value (arrays by their bytes: a numpy repr elides elements)."""
    if isinstance(v, np.ndarray):
        data = np.ascontiguousarray(v)
        return ("array", str(data.dtype), data.shape, hashlib.sha1(data.tobytes()).hexdigest())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_attr_key(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, _attr_key(x)) for k, x in v.items())))
    if isinstance(v, E.PrimExpr):
        return _prim_key(v)
    return (type(v).__name__, repr(v))


def _arg_key(a):
    """A hashable key of argument ``a`` (None when it cannot be compared cheaply)."""
    if isinstance(a, rx.Var):
        return ("var", id(a))
    if isinstance(a, rx.Constant):
        if a.data.nbytes > _HASHED_CONSTANT_BYTES:   # an imported model's weights: by identity
            return ("const-id", id(a))
        data = np.ascontiguousarray(a.data)
        return ("const", a.dtype, data.shape, hashlib.sha1(data.tobytes()).hexdigest())
    if isinstance(a, rx.PrimValue):
        return ("prim", _prim_key(a.value))
    if isinstance(a, rx.ShapeExpr):
        return ("shape", tuple(_prim_key(d) for d in a.values))
    if isinstance(a, rx.ExternFunc):
        return ("extern", a.global_symbol)
    if isinstance(a, rx.StringImm):
        return ("str", type(a).__name__, a.value)
    if isinstance(a, rx.Tuple):
        fields = tuple(_arg_key(f) for f in a.fields)
        return None if any(f is None for f in fields) else ("tuple", fields)
    return None


def _holds_object(sinfo) -> bool:
    """Whether struct info ``sinfo`` is (or is a tuple holding) an object, or is unknown."""
    if isinstance(sinfo, TupleStructInfo):
        return any(_holds_object(f) for f in sinfo.fields)
    return sinfo is None or isinstance(sinfo, ObjectStructInfo)


def _binding_key(value):
    """The key of a binding's value, or None when it must stay (impure, opaque, not comparable)."""
    if isinstance(value, rx.TupleGetItem) and isinstance(value.tuple_value, rx.Var):
        return ("item", id(value.tuple_value), value.index)
    if not isinstance(value, rx.Call) or not isinstance(value.op, rx.Op):
        return None
    op = value.op
    if not op.purity:
        return None
    if op.name == _PURE_PACKED:
        if _holds_object(value.struct_info):
            return None
    elif op.name.startswith(_OPAQUE_PREFIXES):
        return None
    args = tuple(_arg_key(a) for a in value.args)
    if any(a is None for a in args):
        return None
    try:
        attrs = tuple(sorted((k, _attr_key(v)) for k, v in value.attrs.items()))
    except TypeError:   # attributes without an order: leave the call alone
        return None
    return (op.name, args, attrs, repr(value.sinfo_args))


class _Eliminator(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.removed = 0

    def visit_seq_expr(self, e: rx.SeqExpr) -> rx.SeqExpr:
        blocks = []
        for block in e.blocks:
            seen: dict = {}
            kept = []
            for b in block.bindings:
                nb = self.visit_binding(b)
                key = _binding_key(nb.value)
                if key is not None:
                    first = seen.get(key)
                    # a block's output (a Var) may not become one of its DataflowVars
                    if first is not None and (isinstance(nb.var, rx.DataflowVar)
                                              or not isinstance(first, rx.DataflowVar)) and (
                            first.struct_info is None or nb.var.struct_info is None
                            or first.struct_info.same_as(nb.var.struct_info)):
                        self.var_map[b.var] = first
                        self.removed += 1
                        continue
                    seen.setdefault(key, nb.var)
                kept.append(nb)
            blocks.append(type(block)(kept))
        return rx.SeqExpr(blocks, self.visit_expr(e.body))


def eliminate_common_subexpr(mod: rx.IRModule) -> rx.IRModule:
    """A new module in which every graph-level function's repeated pure computations are bound
    once (see the module docstring); loop-level functions are kept as they are."""
    return _Eliminator().visit_module(mod)


class EliminateCommonSubexpr(Pass):
    """Pass form of :func:`eliminate_common_subexpr`."""

    name = "eliminate_common_subexpr"

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """The module with every graph-level function's repeated pure computations bound once
        (:func:`eliminate_common_subexpr`); the input module is not modified."""
        return eliminate_common_subexpr(mod)
