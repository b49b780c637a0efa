"""Struct-info inference of calls into the runtime: call_tir, packed and DPS-packed calls, collectives, null values."""
from __future__ import annotations

from ..relax import Call, ExternFunc, GlobalVar, Tuple
from ..struct_info import ObjectStructInfo, StructInfo, TensorStructInfo, TupleStructInfo
from .common import tensor_arg


def infer_null(call: Call) -> StructInfo:
    """Struct info of ``R.null_value()`` (TVM's null object, an absent optional value): an ``R.Object``;
    nothing is checked."""
    return ObjectStructInfo()


def infer_call_tir(call: Call) -> StructInfo:
    """Struct info of ``R.call_tir(cls.func, (args...), out_sinfo=...)``: the declared output (a tuple of
    them when ``out_sinfo`` lists several). Raises TypeError when the callee is not a module function
    (GlobalVar) or the arguments are not a tuple."""
    if not isinstance(call.args[0], GlobalVar) or not isinstance(call.args[1], Tuple):
        raise TypeError("R.call_tir(func, (args...), out_sinfo=...) expects a GlobalVar and a tuple")
    outs = call.sinfo_args
    return outs[0] if len(outs) == 1 else TupleStructInfo(outs)


def infer_call_dps_packed(call: Call) -> StructInfo:
    """Struct info of ``R.call_dps_packed("func", (args...), out_sinfo=...)`` (destination-passing style:
    the runtime function writes into outputs the VM allocates): the declared output. Raises TypeError
    when the callee is not an extern function name, the arguments not a tuple, or ``out_sinfo`` is not
    one tensor (or one tuple of tensors) with known shapes."""
    if not isinstance(call.args[0], ExternFunc) or not isinstance(call.args[1], Tuple):
        raise TypeError("R.call_dps_packed(func, (args...), out_sinfo=...) expects an extern "
                        "function name and a tuple of arguments")
    outs = call.sinfo_args
    if len(outs) != 1:
        raise TypeError("R.call_dps_packed: out_sinfo must be one tensor or one tuple of tensors")
    fields = outs[0].fields if isinstance(outs[0], TupleStructInfo) else outs
    for s in fields:
        if not isinstance(s, TensorStructInfo) or s.shape is None:
            raise TypeError(f"R.call_dps_packed: every output must be a tensor with a known shape, "
                            f"got {s!r}")
    return outs[0]


CCL_REDUCE_OPS = ("sum", "prod", "min", "max", "avg")


def infer_ccl_allreduce(call: Call) -> StructInfo:
    """Struct info of ``R.ccl.allreduce(x, op_type)`` (a collective over the tensor-parallel workers):
    ``x``'s shape and dtype. Raises ValueError for an ``op_type`` not in :data:`CCL_REDUCE_OPS`."""
    x = tensor_arg(call, 0)
    op_type = call.attrs.get("op_type")
    if op_type not in CCL_REDUCE_OPS:
        raise ValueError(f"R.ccl.allreduce: op_type must be one of {', '.join(CCL_REDUCE_OPS)}, "
                         f"got {op_type!r}")
    return TensorStructInfo(x.shape, x.dtype)


def infer_packed(call: Call) -> StructInfo:
    """Struct info of ``R.call_pure_packed`` / ``R.call_inplace_packed("func", args..., sinfo_args=(s,))``:
    the one declared ``s``. Raises TypeError when the first argument is not the runtime function's name
    or ``sinfo_args`` does not hold exactly one entry."""
    if not call.args or not isinstance(call.args[0], ExternFunc):
        raise TypeError(f"{call.op.name}: the first argument must be the runtime function's name")
    if len(call.sinfo_args) != 1:
        raise TypeError(f"{call.op.name}: needs exactly one sinfo_args entry, got {len(call.sinfo_args)}")
    return call.sinfo_args[0]
