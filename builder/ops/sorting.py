"""Sorting ops: sort, argsort, topk, legalized to the merge-sort loops of :mod:`builder.te.topi.sort`."""
from __future__ import annotations

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import OpPattern, register_op
from ..ir.op.sorting import infer_argsort, infer_sort, infer_topk
from ..ir.struct_info import TupleStructInfo
from ..te import placeholder, topi
from .common import localize_shape


def _sorting(kind: str):
    def rule(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
        x = call.args[0]
        si = x.struct_info
        ph = placeholder(localize_shape(si.shape), si.dtype, name="data")
        a = call.attrs
        axis = int(a.get("axis", -1))
        if kind == "sort":
            func = topi.sort_prim_func(ph, axis, bool(a.get("descending")), indices=False, name="sort")
        elif kind == "argsort":
            func = topi.sort_prim_func(ph, axis, bool(a.get("descending")), values=False,
                                       index_dtype=a.get("dtype", "int32"), name="argsort")
        else:
            ret = a.get("ret_type", "both")
            func = topi.sort_prim_func(ph, axis, bool(a.get("largest", True)), k=a.get("k", 1),
                                       values=ret != "indices", indices=ret != "values",
                                       index_dtype=a.get("dtype", "int32"), name="topk")
        gvar = bb.add_func(func, kind)
        sinfo = call.struct_info
        fields = list(sinfo.fields) if isinstance(sinfo, TupleStructInfo) else [sinfo]
        return rx.Call(rx.Op.get("call_tir"), [gvar, rx.Tuple([x])], sinfo_args=fields)

    return rule


register_op("sort", infer_sort, ("axis", "descending"), pattern=OpPattern.OPAQUE, legalize=_sorting("sort"),
            frontend="sort", in_recipes=True,
            doc="The values sorted along ``axis`` (stable; NaN the largest).")
register_op("argsort", infer_argsort, ("axis", "descending", "dtype"), pattern=OpPattern.OPAQUE,
            legalize=_sorting("argsort"), frontend="argsort", in_recipes=True,
            doc="The positions that sort ``axis`` (stable: equal values keep their order).")
register_op("topk", infer_topk, ("k", "axis", "ret_type", "largest", "dtype"), pattern=OpPattern.OPAQUE,
            legalize=_sorting("topk"), frontend="topk", in_recipes=True,
            doc="The ``k`` largest (or smallest) values along ``axis`` and their positions, sorted.")
