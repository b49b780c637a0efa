"""Struct-info inference of ``R.group_dequantize`` (MLC-LLM's group-quantized weight layout).

``R.group_dequantize(q_weight, q_scale, bits=4, group_size=32, zero_point=7, in_features=4096)``: the
weight of a group-quantized Linear / Embedding (the NK layout of MLC-LLM's ``q4f16_1``). ``q_weight``
(rows, words) packs ``storage_bits // bits`` values per word (element ``i`` in bits ``[i*bits,
(i+1)*bits)``), ``q_scale`` (rows, ceil(in_features / group_size)) holds one scale per group; the
result (rows, in_features) in the scale dtype is ``(value - zero_point) * scale``. Per-channel int8 is
the case ``group_size == in_features`` with int8 storage and zero point 0.

``row_tile=T`` (absent or 0: none) stores the same words and scales in tiles of ``T`` rows, each tile
transposed: ``q_weight`` (rows / T, words, T) and ``q_scale`` (rows / T, groups, T), so word ``w`` of
row ``n`` is ``q_weight[n // T, w, n % T]`` (the 4-byte words of ``T`` rows side by side: one vector
holds ``T`` rows, as llama.cpp's repacked ``Q4_0`` blocks interleave rows). The values inside a
word keep their order. :func:`runtime.weights.tile_rows` converts the row layout to it.
"""
from __future__ import annotations

from .. import expr as E
from ..relax import Call
from ..struct_info import StructInfo, TensorStructInfo
from .common import definitely_different, fmt_shape, tensor_arg


#: Storage dtype of packed quantized values -> its bits (the one table: ops, topi, kernels).
QUANT_STORAGE_BITS = {"uint8": 8, "uint16": 16, "uint32": 32, "int8": 8}


#: Rows per tile of a row-tiled weight (one 512-bit vector of 4-byte words; two 256-bit ones).
ROW_TILE = 16

#: Row tiles a ``row_tile`` attribute may name (0: the plain row layout).
ROW_TILES = (0, ROW_TILE)


def check_packed_layout(q, s, bits: int, group_size: int, in_features: int, name: str,
                        row_tile: int = 0) -> int:
    """Check a group-quantized weight against its attributes; returns the values per word.

    ``q`` / ``s`` are the packed words and the scales (struct info or te tensors: ``dtype``,
    ``ndim``, ``shape``): 2-D, or 3-D tiles with ``row_tile`` (see the module docstring). Raises
    TypeError for a storage dtype not in :data:`QUANT_STORAGE_BITS` or integer scales, ValueError
    for operands of the wrong rank, a row tile not in :data:`ROW_TILES` or not matching the last
    axes, ``bits`` the storage cannot hold, a group size that is not a positive multiple of the
    values per word, or words / groups per row that do not fit ``in_features`` (padded to whole
    groups); ``name`` (the op) starts each message."""
    if row_tile not in ROW_TILES:
        raise ValueError(f"{name}: row_tile must be one of {ROW_TILES}, got {row_tile}")
    if row_tile:
        if q.ndim != 3 or s.ndim != 3:
            raise ValueError(f"{name}: with row_tile={row_tile} q_weight and q_scale must be 3-D tiles "
                             f"(rows / {row_tile}, words | groups, {row_tile}), got {fmt_shape(q.shape)} and "
                             f"{fmt_shape(s.shape)}")
        if definitely_different(q.shape[2], row_tile) or definitely_different(s.shape[2], row_tile):
            raise ValueError(f"{name}: q_weight {fmt_shape(q.shape)} and q_scale {fmt_shape(s.shape)} must "
                             f"end in tiles of {row_tile} rows")
        q = _Untiled(q.dtype, q.shape)
        s = _Untiled(s.dtype, s.shape)
    if q.dtype not in QUANT_STORAGE_BITS:
        raise TypeError(f"{name}: q_weight dtype must be one of {', '.join(QUANT_STORAGE_BITS)}, "
                        f"got {q.dtype}")
    if not E.is_float_dtype(s.dtype):
        raise TypeError(f"{name}: q_scale must be floating point, got {s.dtype}")
    if q.ndim != 2 or s.ndim != 2:
        raise ValueError(f"{name}: q_weight and q_scale must be 2-D, got {fmt_shape(q.shape)} and "
                         f"{fmt_shape(s.shape)}")
    sbits = QUANT_STORAGE_BITS[q.dtype]
    if bits <= 0 or sbits % bits or (q.dtype.startswith("int") and bits != sbits):
        raise ValueError(f"{name}: cannot store {bits}-bit values in {q.dtype}")
    per_word = sbits // bits
    if in_features <= 0 or group_size <= 0 or group_size % per_word:
        raise ValueError(f"{name}: group_size {group_size} must be a positive multiple of the "
                         f"{per_word} values per {q.dtype} word (in_features {in_features} > 0)")
    groups = -(-in_features // group_size)
    words = groups * group_size // per_word
    if definitely_different(q.shape[1], words):
        raise ValueError(f"{name}: q_weight {fmt_shape(q.shape)} has {q.shape[1]} words per row, but "
                         f"in_features={in_features} padded to groups of {group_size} needs {words}")
    if definitely_different(s.shape[1], groups):
        raise ValueError(f"{name}: q_scale {fmt_shape(s.shape)} has {s.shape[1]} groups per row, but "
                         f"in_features={in_features} in groups of {group_size} needs {groups}")
    return per_word


class _Untiled:
    """The (tiles, words | groups) view of a tiled operand's shape, for the per-row checks."""

    def __init__(self, dtype: str, shape) -> None:
        self.dtype, self.shape, self.ndim = dtype, (shape[0], shape[1]), 2


def infer_group_dequantize(call: Call) -> StructInfo:
    """Struct info of ``R.group_dequantize(q_weight, q_scale, bits, group_size, zero_point, in_features[,
    activation_quantization, row_tile])`` (module docstring): the dequantized weight (rows, in_features) in
    the scale dtype (rows = the tiles times ``row_tile`` for a tiled weight). Raises ValueError for a
    missing attribute, an ``activation_quantization`` other than ``"none"`` / ``"int8"``, a non-integer
    ``row_tile``, words and scales with different row counts, and the layout errors of
    :func:`check_packed_layout` (also TypeError there, for the storage or scale dtype)."""
    q, s = tensor_arg(call, 0, "q_weight"), tensor_arg(call, 1, "q_scale")
    a = call.attrs
    name = "R.group_dequantize"
    try:
        bits, group_size = int(a["bits"]), int(a["group_size"])
        int(a["zero_point"])
        in_features = int(a["in_features"])
    except KeyError as exc:
        raise ValueError(f"{name}: missing attribute {exc.args[0]!r} (needs bits, group_size, "
                         "zero_point, in_features)") from None
    act = a.get("activation_quantization", "none")
    if act not in ("none", "int8"):
        raise ValueError(f"{name}: activation_quantization must be \"none\" or \"int8\", got {act!r}")
    try:
        row_tile = int(a.get("row_tile", 0))
    except (TypeError, ValueError):
        raise ValueError(f"{name}: row_tile must be an integer, got {a.get('row_tile')!r}") from None
    check_packed_layout(q, s, bits, group_size, in_features, name, row_tile)
    if definitely_different(q.shape[0], s.shape[0]):
        raise ValueError(f"{name}: q_weight {fmt_shape(q.shape)} and q_scale {fmt_shape(s.shape)} "
                         "have different numbers of rows")
    rows = q.shape[0]
    if row_tile:
        rows = rows * row_tile if isinstance(rows, int) else E.simplify(E.convert(rows) * row_tile)
    return TensorStructInfo((rows, in_features), s.dtype)
