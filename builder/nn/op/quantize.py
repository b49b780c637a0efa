"""Quantization ops: ``group_dequantize`` (MLC-LLM group quantization)."""
from __future__ import annotations



from ..core import Tensor, wrap_nested
from .common import op_call


def group_dequantize(q_weight: Tensor, q_scale: Tensor, bits: int, group_size: int, zero_point: int,
                     in_features: int, activation_quantization: str = "none", row_tile: int = 0,
                     name: str = "dequantize") -> Tensor:
    """The float weight (rows, in_features) of a group-quantized parameter pair, in the dtype of
    ``q_scale``: ``R.group_dequantize(q_weight, q_scale, bits=..., group_size=..., zero_point=...,
    in_features=...)``.

    ``q_weight`` (rows, words) packs ``storage_bits // bits`` values per word (element ``i`` in
    bits ``[i*bits, (i+1)*bits)``); ``q_scale`` (rows, ceil(in_features / group_size)); value
    ``v`` of column ``k`` dequantizes to ``(v - zero_point) * q_scale[row, k // group_size]``
    (MLC-LLM's group quantization). A matmul or take that consumes the result is compiled into
    one kernel that dequantizes in registers; ``activation_quantization="int8"`` (printed only
    then) lets that matmul's GEMV quantize its input to int8 per group (see
    :class:`schemas.GroupQuantization`). ``row_tile=T`` (printed only when not 0): both parameters
    are stored in tiles of ``T`` rows, (rows / T, words | groups, T), each tile transposed (see
    :mod:`builder.ir.op.quantize`). Raises ValueError / TypeError when the shapes, dtypes or
    attributes do not fit together.
    """
    extra = {} if activation_quantization == "none" else {"activation_quantization": activation_quantization}
    if row_tile:
        extra["row_tile"] = int(row_tile)
    return wrap_nested(op_call("group_dequantize", [q_weight._expr, q_scale._expr], bits=int(bits),
                             group_size=int(group_size), zero_point=int(zero_point),
                             in_features=int(in_features), **extra), name)
