"""Quantization ops: ``R.group_dequantize`` (MLC-LLM's group-quantized weights).

On its own it becomes a ``T_dequantize`` kernel (a real float buffer); its usual consumers -- a
matmul through ``permute_dims`` (a quantized Linear) and ``take`` (a quantized Embedding) -- are
rewritten by :class:`builder.transform.SelectKernels` so that the weight is dequantized in registers.
Its attributes are those of a :class:`~builder.ir.quant_format.QuantFormat` (:data:`~builder.ir.quant_format.ATTR_NAMES`).
"""
from __future__ import annotations

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import OpPattern, register_op
from ..ir.op.quantize import infer_group_dequantize
from ..ir.quant_format import ATTR_NAMES
from ..te import topi
from ..te.call_te import call_te

__all__ = ["quant_attrs"]


def quant_attrs(call: rx.Call) -> dict:
    """The attributes of a ``group_dequantize`` call as they are (a copy): what the topi computes read
    with :meth:`~builder.ir.quant_format.QuantFormat.from_attrs`, so that none is dropped on the way."""
    return dict(call.attrs)


def _group_dequantize(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    return call_te(bb, topi.group_dequantize, call.args, quant_attrs(call), "dequantize")


register_op("group_dequantize", infer_group_dequantize, ATTR_NAMES,
            pattern=OpPattern.INJECTIVE, legalize=_group_dequantize, frontend="group_dequantize",
            doc="``(value - zero_point) * scale`` (or ``codebook[value] * scale``) of packed group-quantized weights.")
