"""Reductions: sum / mean / max / min / prod, argmax / argmin, cumsum / cumprod, softmax."""
from __future__ import annotations

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import OpPattern, register_op
from ..ir.op.reduction import infer_arg_reduce, infer_cumsum, infer_softmax, infer_statistical
from ..te import placeholder, topi
from ..te.call_te import call_te
from .common import localize_shape, out_sinfo, te_rule

REDUCE = OpPattern.COMM_REDUCE


def _statistical(fn, name: str):
    def rule(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
        new = call_te(bb, fn, (call.args[0],), {"axis": call.attrs.get("axis"),
                                                "keepdims": bool(call.attrs.get("keepdims"))}, name)
        return out_sinfo(new, call.struct_info)

    return rule


def _scan(kind: str):
    """The legalization of ``R.cum<kind>``: :func:`builder.te.topi.scan_prim_func` as a ``call_tir``."""
    def rule(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
        x = call.args[0]
        sinfo = x.struct_info
        ph = placeholder(localize_shape(sinfo.shape), sinfo.dtype, name=x.name_hint if isinstance(x, rx.Var) else "data")
        dtype = call.attrs.get("dtype")
        func = topi.scan_prim_func(ph, call.attrs.get("axis"), None if dtype in (None, "void") else dtype,
                                   bool(call.attrs.get("exclusive")), kind)
        gvar = bb.add_func(func, f"cum{kind}")
        return rx.Call(rx.Op.get("call_tir"), [gvar, rx.Tuple([x])], sinfo_args=[call.struct_info])
    return rule


for _name, _doc in (("sum", "Sum"), ("mean", "Mean"), ("max", "Maximum"), ("min", "Minimum"), ("prod", "Product")):
    register_op(_name, infer_statistical, ("axis", "keepdims"), pattern=REDUCE,
                legalize=_statistical(getattr(topi, _name), _name), frontend=_name, in_recipes=True,
                doc=f"{_doc} over ``axis`` (all axes when None).")
for _name in ("argmax", "argmin"):
    register_op(_name, infer_arg_reduce, ("axis", "keepdims"), pattern=REDUCE,
                legalize=_statistical(getattr(topi, _name), _name), frontend=_name, in_recipes=True,
                doc=f"Index of the first {_name[3:]}imum along ``axis`` (of the flattened tensor when None).")
for _kind, _doc in (("sum", "sum"), ("prod", "product")):
    register_op(f"cum{_kind}", infer_cumsum, ("axis", "dtype", "exclusive"), pattern=OpPattern.OPAQUE,
                legalize=_scan(_kind), frontend=f"cum{_kind}", in_recipes=True, doc=f"Running {_doc} along ``axis``.")
register_op("nn.softmax", infer_softmax, ("axis",), pattern=OpPattern.OPAQUE,
            legalize=te_rule(topi.softmax, "softmax", ("axis",)), frontend="softmax", in_recipes=True,
            doc="``exp(x - max) / sum(exp(x - max))`` along ``axis``.")
