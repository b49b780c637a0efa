"""Quantization ops: ``R.group_dequantize`` (MLC-LLM's group-quantized weights).

On its own it becomes a ``T_dequantize`` kernel (a real float buffer); its usual consumers -- a
matmul through ``permute_dims`` (a quantized Linear) and ``take`` (a quantized Embedding) -- are
rewritten by :class:`builder.transform.SelectKernels` so that the weight is dequantized in registers.
"""
from __future__ import annotations

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import OpPattern, register_op
from ..ir.op.quantize import infer_group_dequantize
from ..te import topi
from ..te.call_te import call_te

__all__ = ["quant_attrs"]


def quant_attrs(call: rx.Call) -> dict:
    """The integer attributes of a ``group_dequantize`` call: bits, group_size, zero_point,
    in_features, row_tile (0 when absent)."""
    a = call.attrs
    return {"bits": int(a["bits"]), "group_size": int(a["group_size"]), "zero_point": int(a["zero_point"]),
            "in_features": int(a["in_features"]), "row_tile": int(a.get("row_tile", 0))}


def _group_dequantize(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    return call_te(bb, topi.group_dequantize, call.args, quant_attrs(call), "dequantize")


register_op("group_dequantize", infer_group_dequantize,
            ("bits", "group_size", "zero_point", "in_features", "activation_quantization", "row_tile"),
            pattern=OpPattern.INJECTIVE, legalize=_group_dequantize, frontend="group_dequantize",
            doc="``(value - zero_point) * scale`` of packed group-quantized weights.")
