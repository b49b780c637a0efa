"""Struct-info inference of ``R.group_dequantize`` (MLC-LLM's group-quantized weight layout).

``R.group_dequantize(q_weight, q_scale, bits=4, group_size=32, zero_point=7, in_features=4096)``: the
weight of a group-quantized Linear / Embedding, in the format its attributes and its operands' dtypes
describe -- a :class:`~builder.ir.quant_format.QuantFormat` (:meth:`~builder.ir.quant_format.QuantFormat.from_attrs`,
which refuses attributes it does not know; the layout, row tiles and codebooks are documented there).
``q_weight`` (rows, words) or row tiles (rows / T, words, T) of the storage dtype, ``q_scale`` (rows,
groups) or (rows / T, groups, T) of a float dtype; the result (rows, in_features) in the scale dtype.
"""
from __future__ import annotations

from collections.abc import Mapping

from .. import expr as E
from ..quant_format import ROW_TILE, ROW_TILES, STORAGE_BITS, QuantFormat
from ..relax import Call
from ..struct_info import StructInfo, TensorStructInfo
from .common import definitely_different, fmt_shape, tensor_arg

__all__ = ["QUANT_STORAGE_BITS", "ROW_TILE", "ROW_TILES", "operand_format", "check_operands", "infer_group_dequantize"]

QUANT_STORAGE_BITS = STORAGE_BITS
"""The storage-bits table (:data:`builder.ir.quant_format.STORAGE_BITS`, under its older name)."""


def operand_format(q, s, attrs: Mapping, name: str) -> tuple[QuantFormat, int]:
    """The format and ``in_features`` of a group-quantized weight: ``q`` / ``s`` are the packed words and
    the scales (struct info or te tensors: ``dtype``, ``ndim``, ``shape``), ``attrs`` the op's attributes.
    Raises ValueError / TypeError as :meth:`QuantFormat.from_attrs` and
    :func:`check_operands` do (unknown or missing attributes, storage or scale dtypes,
    shapes that do not fit); ``name`` (the op) starts each message."""
    fmt = QuantFormat.from_attrs(attrs, q.dtype, s.dtype, name)
    in_features = int(attrs["in_features"])
    check_operands(fmt, q, s, in_features, name)
    return fmt, in_features


def check_operands(fmt: QuantFormat, q, s, in_features: int, name: str) -> None:
    """Check packed words ``q`` and scales ``s`` (struct info or te tensors: ``ndim``, ``shape``; dims
    may be symbolic) against ``fmt`` and ``in_features``: 2-D, or 3-D tiles with ``row_tile``, the
    words and groups per row ``in_features`` needs. Raises ValueError naming ``name``."""
    tile = fmt.row_tile
    qs, ss = tuple(q.shape), tuple(s.shape)
    if tile:
        if q.ndim != 3 or s.ndim != 3:
            raise ValueError(f"{name}: with row_tile={tile} q_weight and q_scale must be 3-D tiles "
                             f"(rows / {tile}, words | groups, {tile}), got {fmt_shape(qs)} and {fmt_shape(ss)}")
        if definitely_different(qs[2], tile) or definitely_different(ss[2], tile):
            raise ValueError(f"{name}: q_weight {fmt_shape(qs)} and q_scale {fmt_shape(ss)} must "
                             f"end in tiles of {tile} rows")
        qs, ss = qs[:2], ss[:2]
    elif q.ndim != 2 or s.ndim != 2:
        raise ValueError(f"{name}: q_weight and q_scale must be 2-D, got {fmt_shape(qs)} and {fmt_shape(ss)}")
    gs = fmt.group_size_for(in_features)
    groups, words = fmt.groups(in_features), fmt.words(in_features)
    if definitely_different(qs[1], words):
        raise ValueError(f"{name}: q_weight {fmt_shape(qs)} has {qs[1]} words per row, but "
                         f"in_features={in_features} padded to groups of {gs} needs {words}")
    if definitely_different(ss[1], groups):
        raise ValueError(f"{name}: q_scale {fmt_shape(ss)} has {ss[1]} groups per row, but "
                         f"in_features={in_features} in groups of {gs} needs {groups}")


def infer_group_dequantize(call: Call) -> StructInfo:
    """Struct info of ``R.group_dequantize(q_weight, q_scale, bits, group_size, zero_point, in_features[,
    activation_quantization, row_tile, codebook])`` (module docstring): the dequantized weight (rows,
    in_features) in the scale dtype (rows = the tiles times ``row_tile`` for a tiled weight). Raises
    ValueError / TypeError as :func:`operand_format` does (an unknown or missing attribute, a bad
    ``activation_quantization`` / ``row_tile`` / ``codebook``, the storage or scale dtype, the layout),
    and ValueError for words and scales with different row counts."""
    q, s = tensor_arg(call, 0, "q_weight"), tensor_arg(call, 1, "q_scale")
    name = "R.group_dequantize"
    fmt, in_features = operand_format(q, s, call.attrs, name)
    if definitely_different(q.shape[0], s.shape[0]):
        raise ValueError(f"{name}: q_weight {fmt_shape(q.shape)} and q_scale {fmt_shape(s.shape)} "
                         "have different numbers of rows")
    rows = q.shape[0]
    if fmt.row_tile:
        rows = rows * fmt.row_tile if isinstance(rows, int) else E.simplify(E.convert(rows) * fmt.row_tile)
    return TensorStructInfo((rows, in_features), s.dtype)
