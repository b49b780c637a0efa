"""Quantization ops: ``group_dequantize`` (MLC-LLM group quantization)."""
from __future__ import annotations

from typing import Optional

from ...ir.quant_format import QuantFormat
from ..core import Tensor, wrap_nested
from .common import op_call


def group_dequantize(q_weight: Tensor, q_scale: Tensor, bits: Optional[int] = None,
                     group_size: Optional[int] = None, zero_point: Optional[int] = None,
                     in_features: Optional[int] = None, activation_quantization: str = "none", row_tile: int = 0,
                     name: str = "dequantize", *, fmt: Optional[QuantFormat] = None) -> Tensor:
    """The float weight (rows, in_features) of a group-quantized parameter pair, in the dtype of
    ``q_scale``: ``R.group_dequantize(q_weight, q_scale, bits=..., group_size=..., zero_point=...,
    in_features=...)``.

    The attributes are those of one :class:`~builder.ir.quant_format.QuantFormat`
    (:meth:`~builder.ir.quant_format.QuantFormat.to_attrs`): ``fmt`` gives it (a codebook format too), or
    the keywords ``bits``, ``group_size``, ``zero_point``, ``activation_quantization``, ``row_tile``
    describe one, stored in ``q_weight``'s dtype with scales in ``q_scale``'s; ``in_features`` is always
    given. ``q_weight`` (rows, words) packs ``storage_bits // bits`` values per word (element ``i`` in
    bits ``[i*bits, (i+1)*bits)``); ``q_scale`` (rows, ceil(in_features / group_size)); value
    ``v`` of column ``k`` dequantizes to ``(v - zero_point) * q_scale[row, k // group_size]``
    (MLC-LLM's group quantization). A matmul or take that consumes the result is compiled into
    one kernel that dequantizes in registers; ``activation_quantization="int8"`` (printed only
    then) lets that matmul's GEMV quantize its input to int8 per group (see
    :class:`schemas.GroupQuantization`). ``row_tile=T`` (printed only when not 0): both parameters
    are stored in tiles of ``T`` rows, (rows / T, words | groups, T), each tile transposed (see
    :mod:`builder.ir.op.quantize`). Raises ValueError / TypeError when the shapes, dtypes or
    attributes do not fit together, or when ``fmt`` and the keywords are both given or neither is.
    """
    keywords = (bits, group_size, zero_point)
    if in_features is None:
        raise ValueError("group_dequantize needs in_features (the weight's columns)")
    if fmt is None:
        if any(k is None for k in keywords):
            raise ValueError("group_dequantize needs fmt=QuantFormat(...) or bits, group_size and zero_point")
        fmt = QuantFormat(bits=int(bits), group_size=int(group_size), storage_dtype=q_weight.dtype,
                          scale_dtype=q_scale.dtype, zero_point=int(zero_point),
                          activation=activation_quantization, row_tile=int(row_tile))
    elif any(k is not None for k in keywords) or activation_quantization != "none" or row_tile:
        raise ValueError("group_dequantize takes fmt=QuantFormat(...) or the format's keywords, not both")
    return wrap_nested(op_call("group_dequantize", [q_weight._expr, q_scale._expr],
                               **fmt.to_attrs(int(in_features))), name)
