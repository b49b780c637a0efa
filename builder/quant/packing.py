"""numpy implementations of the quantized storage formats: bit packing, group quantization and
dequantization, and float dtype conversions (bfloat16 as uint16 bits).

Formulas (MLC-LLM's group quantization, NK layout; per-channel is one group per row):

* ``max_int = 2**(bits-1) - 1`` (7 for 4 bits, 127 for 8 bits);
* per row ``n`` and group ``g`` (columns ``[g*group_size, (g+1)*group_size)``, the last group
  padded with zero columns): ``scale = max|w| / max_int``, computed in float32 and rounded to the
  model dtype; the stored (rounded) scale is the one used below;
* ``q = clamp(rint(w / scale) + zero_point, zero_point - max_int, zero_point + max_int)`` with
  ``rint`` rounding half to even and ``w / scale`` a float32 division; ``zero_point`` is
  ``max_int`` for unsigned group storage (q in ``[0, 2*max_int]``) and 0 for int8 per-channel
  storage; a group whose scale is 0 (all zero) stores ``zero_point``;
* packing: value ``i`` of a word sits in bits ``[i*bits, (i+1)*bits)`` (the first value in the
  lowest bits), ``elements_per_word = storage bits / bits`` values per word;
* a codebook format (:class:`~builder.ir.quant_format.QuantFormat` ``codebook``, QLoRA's NF4): ``scale =
  max|w| / max|codebook|`` and ``q`` the index of the entry nearest ``w / scale`` (the first of two as
  near), dequantized as ``codebook[q] * scale``;
* dequantization: ``(q - zero_point) * scale``, exact in float32 (the format's float64 reference rounded
  once);
* row tiles (``layout.row_tile = T``, 4- and 8-bit weights in uint32 words): ``q_weight`` and
  ``q_scale`` as (rows / T, words | groups, T), each tile of ``T`` rows transposed
  (:func:`tile_rows`; see :mod:`builder.ir.op.quantize`).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from core.dtypes import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from core.layout import tile_rows, untile_rows

from .config import QuantLayout

__all__ = ["pack_bits", "unpack_bits", "quantize_weight", "dequantize_weight", "to_float32", "from_float32",
           "cast_array", "tile_rows", "untile_rows"]

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def to_float32(a: np.ndarray, dtype: str | None = None) -> np.ndarray:
    """``a`` as float32 (exact for float16 / bfloat16). ``dtype`` names the element type when the
    array holds bfloat16 bits (uint16); default: ``a.dtype``. Raises TypeError for non-floats."""
    dtype = dtype or str(a.dtype)
    if dtype == "bfloat16":
        return bfloat16_bits_to_float32(a)
    if dtype not in _FLOATS:
        raise TypeError(f"expected a floating-point array, got dtype {dtype}")
    return np.asarray(a, dtype=np.float32)


def from_float32(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to ``dtype`` (nearest, ties to even); bfloat16 as uint16 bits."""
    if dtype == "bfloat16":
        return float32_to_bfloat16_bits(a)
    with np.errstate(over="ignore"):  # out-of-range values become inf, as a C conversion does
        return np.asarray(a, dtype=np.float32).astype(dtype)


def cast_array(a: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Convert a float array from dtype ``src`` to ``dst`` (bfloat16 as uint16 bits), rounding
    once to nearest even (float64 goes directly to float16 / float32; to bfloat16 via float32).
    Raises TypeError for non-float dtypes."""
    if src == dst:
        return a
    if src not in _FLOATS or dst not in _FLOATS:
        raise TypeError(f"cannot convert {src} to {dst}: only floating-point casts are supported")
    if src == "float64" and dst != "bfloat16":
        return np.asarray(a).astype(dst)
    return from_float32(to_float32(a, src), dst)


def pack_bits(q: np.ndarray, bits: int, storage_dtype: str) -> np.ndarray:
    """Pack the last axis of non-negative integers ``q`` (< 2**bits) into ``storage_dtype``
    words, ``storage bits / bits`` values per word, value ``i`` in bits ``[i*bits, (i+1)*bits)``.

    ``q.shape[-1]`` must be a multiple of the values per word; for ``int8`` (8-bit signed
    storage) the values are stored as they are. Raises ValueError for values out of range or a
    length that does not fill whole words.
    """
    q = np.asarray(q)
    if storage_dtype == "int8":
        if q.size and (q.min() < -128 or q.max() > 127):
            raise ValueError("int8 storage needs values in [-128, 127]")
        return q.astype(np.int8)
    sbits = np.dtype(storage_dtype).itemsize * 8
    per_word = sbits // bits
    if sbits % bits or q.shape[-1] % per_word:
        raise ValueError(f"cannot pack {q.shape[-1]} values of {bits} bits into whole {storage_dtype} words")
    if q.size and (q.min() < 0 or q.max() >= 1 << bits):
        raise ValueError(f"{bits}-bit packing needs values in [0, {(1 << bits) - 1}]")
    grouped = q.reshape(*q.shape[:-1], q.shape[-1] // per_word, per_word)
    words = grouped[..., 0].astype(storage_dtype)
    for i in range(1, per_word):
        words |= grouped[..., i].astype(storage_dtype) << np.array(bits * i, dtype=storage_dtype)
    return words


def unpack_bits(words: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: int64 values, ``storage bits / bits`` per word along the
    last axis (``int8`` words are returned as their signed values)."""
    words = np.asarray(words)
    if words.dtype == np.int8:
        return words.astype(np.int64)
    sbits = words.dtype.itemsize * 8
    per_word = sbits // bits
    shifts = np.arange(per_word, dtype=np.uint64) * np.uint64(bits)
    vals = (words.astype(np.uint64)[..., None] >> shifts) & np.uint64((1 << bits) - 1)
    return vals.reshape(*words.shape[:-1], words.shape[-1] * per_word).astype(np.int64)


def quantize_weight(w: np.ndarray, layout: QuantLayout, dtype: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a (rows, in_features) float weight: returns ``(q_weight, q_scale)`` with shapes
    ``(rows, layout.words)`` in the storage dtype and ``(rows, layout.num_groups)`` in the model
    dtype (bfloat16 as uint16 bits); with ``layout.row_tile`` in tiles of that many rows
    (:func:`tile_rows`: ``layout.q_weight_shape(rows)`` / ``q_scale_shape(rows)``). ``dtype`` names bfloat16 input bits (see :func:`to_float32`).
    Works on blocks of rows, so temporaries stay small.

    Raises ValueError for a weight of another width, or one whose scales are not finite in the
    model dtype (NaN / inf weights, or magnitudes beyond the model dtype's range).
    """
    w32 = to_float32(np.asarray(w), dtype)
    if w32.ndim != 2 or w32.shape[1] != layout.in_features:
        raise ValueError(f"weight has shape {w32.shape}, expected (rows, {layout.in_features})")
    rows, groups, size = w32.shape[0], layout.num_groups, layout.group_size
    q_weight = np.empty((rows, layout.words), layout.storage_dtype)
    scale_dtype = np.uint16 if layout.model_dtype == "bfloat16" else np.dtype(layout.model_dtype)
    q_scale = np.empty((rows, groups), scale_dtype)
    codebook = None if layout.format.codebook is None else np.asarray(layout.format.codebook, np.float32)
    # scale = max|w| / the largest magnitude a stored value means (max_int, or the codebook's largest)
    top = layout.max_int if codebook is None else float(np.abs(codebook).max())
    small = np.int8 if layout.format.signed else np.uint8  # every stored value fits in 8 bits
    step = max(1, (1 << 18) // layout.padded_in)
    for r0 in range(0, rows, step):
        chunk = w32[r0:r0 + step]
        if layout.padded_in != layout.in_features:
            padded = np.zeros((chunk.shape[0], layout.padded_in), np.float32)
            padded[:, :layout.in_features] = chunk
            chunk = padded
        g = chunk.reshape(chunk.shape[0], groups, size)
        scale = from_float32(np.abs(g).max(axis=2) / np.float32(top), layout.model_dtype)
        s32 = to_float32(scale, layout.model_dtype)[:, :, None]
        if not np.isfinite(s32).all():
            raise ValueError(f"weight of shape {w32.shape} has non-finite values or magnitudes too large for "
                             f"{layout.model_dtype} scales (rows {r0}..{r0 + chunk.shape[0] - 1})")
        r = np.zeros(g.shape, np.float32)
        np.divide(g, s32, out=r, where=s32 != 0)
        if codebook is not None:   # the nearest entry (the first of two as near)
            q = np.abs(r[..., None] - codebook).argmin(axis=-1).astype(np.int16)
        else:
            np.rint(r, out=r)
            np.clip(r, -layout.max_int, layout.max_int, out=r)
            q = r.astype(np.int16) + np.int16(layout.zero_point)
        q_weight[r0:r0 + step] = pack_bits(q.astype(small).reshape(chunk.shape[0], layout.padded_in),
                                           layout.bits, layout.storage_dtype)
        q_scale[r0:r0 + step] = scale
    return tile_rows(q_weight, layout.row_tile), tile_rows(q_scale, layout.row_tile)


def dequantize_weight(q_weight: np.ndarray, q_scale: np.ndarray, layout: QuantLayout) -> np.ndarray:
    """The float32 weight (rows, in_features) that ``(q_weight, q_scale)`` stand for:
    ``(q - zero_point) * scale`` or ``codebook[q] * scale`` -- the format's float64 reference
    (:meth:`~builder.ir.quant_format.QuantFormat.dequantize_reference`, exact) rounded once to float32,
    which is what the kernels compute -- padding columns dropped. ``q_weight`` / ``q_scale`` may be row-major
    or in the layout's row tiles."""
    fmt = replace(layout.format, row_tile=0)
    return fmt.dequantize_reference(untile_rows(q_weight), untile_rows(q_scale), layout.in_features).astype(np.float32)
