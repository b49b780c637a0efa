"""Ops the runtime runs itself: ``call_tir`` (a compiled kernel), DPS-packed and packed calls
(externs, the KV cache's ``vm.builtin.*``, debug effects), collectives, null values."""
from __future__ import annotations

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import OpPattern, register_op
from ..ir.op.elementwise import infer_unary
from ..ir.op.runtime import (infer_call_dps_packed, infer_call_tir, infer_ccl_allreduce, infer_null,
    infer_packed)
from .common import keep

OPAQUE = OpPattern.OPAQUE


#: The runtime functions the collectives legalize to (TVM's names; ``runtime/distributed.py`` registers them).
CCL_EXTERNS = {"relax.ccl.allreduce": "runtime.disco.allreduce",
               "relax.ccl.broadcast_from_worker0": "runtime.disco.broadcast_from_worker0"}


def _legalize_ccl(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    """``R.ccl.allreduce(x, op_type)`` -> ``R.call_dps_packed("runtime.disco.allreduce", (x, "sum"),
    out_sinfo=x)``, ``R.ccl.broadcast_from_worker0(x)`` -> ``R.call_dps_packed(
    "runtime.disco.broadcast_from_worker0", (x,), out_sinfo=x)`` (as TVM's LegalizeOps): the VM calls the
    worker group's collective with the output buffer it allocated."""
    x = call.args[0]
    args = [x] + ([rx.StringImm(call.attrs["op_type"])] if call.op.name == "relax.ccl.allreduce" else [])
    return rx.Call(rx.Op.get("call_dps_packed"), [rx.ExternFunc(CCL_EXTERNS[call.op.name]), rx.Tuple(args)],
                   sinfo_args=[call.struct_info])


register_op("call_tir", infer_call_tir, pattern=OPAQUE, legalize=keep, doc="Call a loop-level function (DPS).")
register_op("null_value", infer_null, pattern=OPAQUE, legalize=keep, frontend="null_value",
            doc="A null object (an effect's empty state).")
register_op("call_dps_packed", infer_call_dps_packed, pattern=OPAQUE, legalize=keep,
            doc="Call a registered extern function, destination-passing style.")
register_op("call_pure_packed", infer_packed, pattern=OPAQUE, legalize=keep,
            doc="Call a pure runtime builtin (the VM runs it).")
register_op("call_inplace_packed", infer_packed, ("inplace_indices",), pattern=OPAQUE, legalize=keep,
            doc="Call a runtime builtin that updates arguments in place (the KV cache).")
register_op("ccl.allreduce", infer_ccl_allreduce, ("op_type",), pattern=OPAQUE, legalize=_legalize_ccl,
            frontend="ccl_allreduce", doc="All-reduce across workers.")
register_op("ccl.broadcast_from_worker0", infer_unary, pattern=OPAQUE, legalize=_legalize_ccl,
            frontend="ccl_broadcast_from_worker0", doc="Broadcast worker 0's tensor to every worker.")
