"""Group-quantized weights: dequantization and the fused quantized matmul / gather computes.

The weight's format is a :class:`~builder.ir.quant_format.QuantFormat` (read from the op's attributes
with :func:`~builder.ir.op.quantize.operand_format`, which refuses attributes it does not know; the
layout is documented there): ``q`` (rows, words) packs ``per_word = storage bits // bits`` values per
word, element ``i`` of a word in bits ``[i * bits, (i + 1) * bits)``; ``s`` (rows, groups) holds one
scale per ``group_size`` columns. Column ``k`` of row ``n`` dequantizes to
``(unpack(q[n, k // per_word], k % per_word) - zero_point) * s[n, k // group_size]`` (with a codebook:
``codebook[unpack(...)] * s[...]``), computed in float32 (exact: a small integer times a 16-bit float;
a codebook entry is a float32 constant). With ``row_tile = T`` both are stored in tiles of ``T`` rows,
(rows / T, words | groups, T): word ``w`` of row ``n`` is ``q[n // T, w, n % T]``, its scale
``s[n // T, g, n % T]``. The fused kernels read ``q`` and ``s`` directly inside their reduction /
gather, so no float copy of the weight exists.
"""
from __future__ import annotations

from ...ir import expr as E
from ...ir.expr import PrimExpr
from ...ir.op.common import fmt_shape, static_int
from ...ir.op.quantize import operand_format
from ...ir.quant_format import QuantFormat
from .. import tensor as _te
from ..tensor import Tensor
from .common import cast_value, output_dtype, two_stage_compute, upcast
from .transform import checked_index

__all__ = ["dequantize_linear", "dequantize_take", "group_dequantize", "dequant_value", "dequantized_weight"]


def _word_divisor(r: PrimExpr, bits: int, per_word: int, dtype: str, lo: int = 0,
                  hi: int | None = None) -> PrimExpr:
    """``2 ** (bits * r)`` as a ``dtype`` constant chosen by a balanced tree of selects on
    ``r`` in ``[lo, hi)`` (depth log2(per_word), so LLVM turns the division into a shift)."""
    hi = per_word if hi is None else hi
    if hi - lo == 1:
        return E.const(1 << (bits * lo), dtype)
    mid = (lo + hi) // 2
    return E.Select(E.LT(r, E.const(mid, r.dtype)), _word_divisor(r, bits, per_word, dtype, lo, mid),
                    _word_divisor(r, bits, per_word, dtype, mid, hi))


def _table(v: PrimExpr, table: tuple, lo: int = 0, hi: int | None = None) -> PrimExpr:
    """``table[v]`` (float32 constants) for an int32 ``v`` in ``[lo, hi)``: a balanced tree of selects
    (depth log2(len(table)); LLVM may turn it into a lookup)."""
    hi = len(table) if hi is None else hi
    if hi - lo == 1:
        return E.const(float(table[lo]), "float32")
    mid = (lo + hi) // 2
    return E.Select(E.LT(v, E.const(mid, "int32")), _table(v, table, lo, mid), _table(v, table, mid, hi))


def dequant_value(q: Tensor, s: Tensor, row: PrimExpr, k: PrimExpr, fmt: QuantFormat,
                  split: tuple | None = None) -> PrimExpr:
    """The float32 value of column ``k`` of row ``row`` of a weight in format ``fmt`` (see the module
    docstring). ``split`` ``(word, r)`` gives ``k // per_word`` and ``k % per_word`` as separate loop
    variables (then ``r`` runs over a constant range that LLVM unrolls, and every shift becomes a
    constant). ``fmt.group_size`` is the weight's (:meth:`QuantFormat.for_weight`)."""
    row_tile, bits, per_word = fmt.row_tile, fmt.bits, fmt.elements_per_word

    def at(t: Tensor, col: PrimExpr) -> PrimExpr:
        if row_tile:
            return t[row // row_tile, col, row % row_tile]
        return t[row, col]

    if per_word > 1:
        word_index, r = split if split is not None else (k // per_word, k % per_word)
        word = at(q, word_index)
        value = (word // _word_divisor(r, bits, per_word, q.dtype)) % E.const(1 << bits, q.dtype)
    else:
        value = at(q, k)
    value = value.astype("int32")
    if fmt.codebook is not None:
        return _table(value, fmt.codebook) * upcast(at(s, k // fmt.group_size))
    if fmt.zero_point:
        value = value - E.const(fmt.zero_point, "int32")
    return value.astype("float32") * upcast(at(s, k // fmt.group_size))


def weight_rows(q: Tensor, row_tile: int) -> PrimExpr:
    """The rows of a packed weight ``q`` (2-D, or 3-D tiles of ``row_tile`` rows)."""
    return q.shape[0] * row_tile if row_tile else q.shape[0]


def dequantized_weight(q: Tensor, s: Tensor, fmt: QuantFormat, in_features: int, dtype: str = "float32",
                       name: str = "T_dequantize") -> Tensor:
    """The weight ``(rows, in_features)`` of ``q`` / ``s`` in format ``fmt`` as a ``dtype`` stage (float32:
    the injective stage a fused matmul inlines into its reduction; the scale dtype: a real buffer)."""
    return _te.compute((weight_rows(q, fmt.row_tile), E.IntImm(in_features, "int64")),
                       lambda n, k: cast_value(dequant_value(q, s, n, k, fmt), dtype), name=name)


def group_dequantize(q: Tensor, s: Tensor, **attrs) -> Tensor:
    """The dequantized weight ``(rows, in_features)`` in the scale dtype (``T_dequantize``), for
    a ``group_dequantize`` that no matmul / take consumes directly (then it is a real buffer).
    ``attrs``: the op's attributes (:data:`~builder.ir.quant_format.ATTR_NAMES`).

    Raises TypeError / ValueError when the attributes or the layout do not fit (unknown attributes,
    words or groups per row, storage dtype, group size): :func:`~builder.ir.op.quantize.operand_format`.
    """
    fmt, in_features = operand_format(q, s, attrs, "group_dequantize")
    return dequantized_weight(q, s, fmt, in_features, s.dtype)


def dequantize_linear(x: Tensor, q: Tensor, s: Tensor, out_dtype: str | None = None, **attrs) -> Tensor:
    """``x @ dequantize(q, s).T`` in one kernel (``dequantize_NT_matmul``): the fused form of
    ``matmul(x, permute_dims(group_dequantize(q, s, **attrs)))``. Each weight is unpacked and scaled in
    registers inside the reduction over ``k < in_features`` (padding columns are never read);
    when ``in_features`` fills whole words the reduction runs over words ``kw`` and the values
    ``r`` of a word (``k = kw * per_word + r``), so that the unpacking shifts are constants.

    ``x`` (..., in_features) in the scale dtype; result (..., rows) in ``out_dtype`` (default:
    ``x.dtype``), accumulated in float32 (float64 never: the weights are at most 16-bit floats
    times small integers). Raises ValueError / TypeError for mismatched shapes or dtypes, and as
    :func:`~builder.ir.op.quantize.operand_format` does for the attributes.
    """
    fmt, in_features = operand_format(q, s, attrs, "dequantize_linear")
    per_word = fmt.elements_per_word
    if x.ndim == 0:
        raise ValueError("dequantize_linear: input must have ndim >= 1")
    kx = static_int(x.shape[-1])
    if kx is not None and kx != in_features:
        raise ValueError(f"dequantize_linear: input {fmt_shape(x.shape)} does not match the "
                         f"weight's in_features={in_features}")
    if x.dtype != s.dtype:
        raise TypeError(f"dequantize_linear: input dtype {x.dtype} differs from scale dtype {s.dtype}")
    odt = output_dtype(x.dtype, out_dtype)
    acc = "float64" if x.dtype == "float64" else "float32"
    shape = list(x.shape[:-1]) + [weight_rows(q, fmt.row_tile)]

    def fbody(*idx):
        if per_word > 1 and in_features % per_word == 0:
            # two reduction loops, over words and over the values of a word (constant extent)
            kw = _te.reduce_axis((0, E.IntImm(in_features // per_word, "int64")), name="kw")
            r = _te.reduce_axis((0, E.IntImm(per_word, "int64")), name="r")
            k, axes, split = kw.var * per_word + r.var, [kw, r], (kw.var, r.var)
        else:
            kk = _te.reduce_axis((0, E.IntImm(in_features, "int64")), name="k")
            k, axes, split = kk.var, kk, None
        w = dequant_value(q, s, idx[-1], k, fmt, split)
        return _te.sum(cast_value(x[tuple(idx[:-1]) + (k,)], acc) * cast_value(w, acc), axis=axes)

    return two_stage_compute(shape, fbody, acc, odt, "dequantize_NT_matmul")


def dequantize_take(q: Tensor, s: Tensor, indices: Tensor, **attrs) -> Tensor:
    """Rows ``indices`` of ``dequantize(q, s)`` (``T_dequantize_take``): the fused form of
    ``take(group_dequantize(q, s, **attrs), indices, axis=0)``, unpacking only the gathered rows.

    Result ``indices.shape + (in_features,)`` in the scale dtype. An index outside the rows is
    an error when the code runs (as for ``take``, :func:`checked_index`). Raises TypeError for
    non-integer indices, and as :func:`~builder.ir.op.quantize.operand_format` does for the attributes.
    """
    fmt, in_features = operand_format(q, s, attrs, "dequantize_take")
    if not E.is_int_dtype(indices.dtype) or indices.dtype == "bool":
        raise TypeError(f"dequantize_take: indices must be integers, got {indices.dtype}")
    ni = indices.ndim

    def f(*idx):
        row = checked_index(indices[tuple(idx[:ni])].astype("int64"), weight_rows(q, fmt.row_tile))
        return cast_value(dequant_value(q, s, row, idx[ni], fmt), s.dtype)

    return _te.compute(list(indices.shape) + [E.IntImm(in_features, "int64")], f, name="T_dequantize_take")
