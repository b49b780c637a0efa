"""Pack / unpack and quantize / dequantize against a straightforward reference written with Python
loops and ints (one value at a time), for 4 and 8 bits, several group sizes, padded in_features,
per-channel int8, and float16 / bfloat16 / float32 scales."""
import math
import struct

import numpy as np
import pytest

from builder.quant import (
    GroupQuantization, PerChannelQuantization, QuantLayout, dequantize_weight, pack_bits, quantize_weight,
    unpack_bits,
)
from runtime.native import as_bfloat16_bits, bfloat16_bits_to_float32, float32_to_bfloat16_bits, numpy_dtype


def _bf16_bits(x: float) -> int:
    """Round a float32 value to bfloat16 (nearest, ties to even) with integer arithmetic."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def _round_to(x: np.float32, dtype: str) -> tuple[float, object]:
    """(value as a Python float, stored representation) of float32 ``x`` in ``dtype``."""
    if dtype == "bfloat16":
        bits = _bf16_bits(float(x))
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0], bits
    v = np.dtype(dtype).type(x)
    return float(v), v


def reference(w: np.ndarray, bits: int, group_size: int | None, model_dtype: str, storage: str):
    """MLC's formulas, one value at a time: (q words as Python ints, stored scales, dequantized)."""
    rows, k_in = w.shape
    gs = group_size or k_in
    groups = math.ceil(k_in / gs)
    max_int = 2 ** (bits - 1) - 1
    signed = storage == "int8"
    zero = 0 if signed else max_int
    per_word = 1 if signed else {"uint8": 8, "uint16": 16, "uint32": 32}[storage] // bits
    words, scales, deq = [], [], np.zeros((rows, k_in), np.float32)
    for n in range(rows):
        values, row_scales = [], []
        for g in range(groups):
            cols = [float(w[n, k]) if k < k_in else 0.0 for k in range(g * gs, (g + 1) * gs)]
            scale32 = np.float32(np.float32(max(abs(c) for c in cols)) / np.float32(max_int))
            s, stored = _round_to(scale32, model_dtype)
            row_scales.append(stored)
            for j, c in enumerate(cols):
                r = 0 if s == 0 else round(float(np.float32(c) / np.float32(s)))  # Python round: half to even
                q = min(max(r, -max_int), max_int) + zero
                values.append(q)
                if g * gs + j < k_in:
                    deq[n, g * gs + j] = np.float32((q - zero) * s)
        row_words = []
        for i in range(0, len(values), per_word):
            word = 0
            for j, v in enumerate(values[i:i + per_word]):
                word |= v << (bits * j)
            row_words.append(word)
        words.append(row_words)
        scales.append(row_scales)
    return words, scales, deq


CASES = [  # bits, group_size, in_features, model dtype, storage
    (4, 32, 64, "float16", "uint32"),
    (4, 32, 40, "float32", "uint32"),     # padded: 40 -> 64
    (4, 16, 100, "bfloat16", "uint32"),   # padded: 100 -> 112
    (4, 64, 64, "float16", "uint16"),
    (8, 32, 96, "float32", "uint32"),
    (8, 16, 20, "float16", "uint32"),     # padded: 20 -> 32
    (8, 4, 10, "bfloat16", "uint8"),      # one value per byte, padded: 10 -> 12
    (8, None, 37, "float32", "int8"),     # per-channel
    (8, None, 24, "float16", "int8"),
]


@pytest.mark.parametrize("bits,group_size,k_in,model_dtype,storage", CASES)
def test_quantize_matches_reference_exactly(bits, group_size, k_in, model_dtype, storage):
    rng = np.random.default_rng(bits * 1000 + k_in)
    w = (rng.standard_normal((6, k_in)) * rng.uniform(0.01, 3, (6, 1))).astype(np.float32)
    w[2, :] = 0.0                                       # an all-zero row: scale 0, q = zero point
    w[3, 0] = 1e-3                                      # a group dominated by one value
    cols = np.arange(k_in)
    # scale exactly 1 in every group (max |w| = 7 = max_int for 4 bits): w / scale = x.5 are ties
    w[4, :] = np.where(cols % (group_size or k_in) == 0, 2 ** (bits - 1) - 1, cols % 14 - 6.5)
    if group_size is None:
        spec = PerChannelQuantization(model_dtype=model_dtype)
    else:
        spec = GroupQuantization(bits=bits, group_size=group_size, model_dtype=model_dtype, storage_dtype=storage)
    layout = QuantLayout.of(spec, k_in)
    q_weight, q_scale = quantize_weight(w, layout)
    words, scales, deq = reference(w, bits, group_size, model_dtype, storage)

    assert q_weight.dtype == np.dtype(storage) and q_weight.shape == (6, layout.words)
    assert q_scale.dtype == numpy_dtype(model_dtype) and q_scale.shape == (6, layout.num_groups)
    assert [[int(v) for v in row] for row in q_weight.astype(np.int64)] == words
    if model_dtype == "bfloat16":
        assert [[int(v) for v in row] for row in q_scale] == scales
    else:
        np.testing.assert_array_equal(q_scale, np.array(scales, dtype=model_dtype))
    np.testing.assert_array_equal(dequantize_weight(q_weight, q_scale, layout), deq)
    # the padding columns of the last group hold the zero point (they dequantize to exactly 0)
    values = unpack_bits(q_weight, bits)
    assert (values[:, k_in:] == layout.zero_point).all()
    assert (values[2] == layout.zero_point).all()


@pytest.mark.parametrize("bits,storage", [(4, "uint32"), (8, "uint32"), (4, "uint8"), (8, "uint16"), (4, "uint16")])
def test_pack_unpack_round_trip_and_bit_order(bits, storage):
    per_word = np.dtype(storage).itemsize * 8 // bits
    rng = np.random.default_rng(bits)
    q = rng.integers(0, 2 ** bits, (3, 4 * per_word))
    words = pack_bits(q, bits, storage)
    assert words.dtype == np.dtype(storage) and words.shape == (3, 4)
    np.testing.assert_array_equal(unpack_bits(words, bits), q)
    first = int(words[0, 0])
    assert [(first >> (bits * i)) & (2 ** bits - 1) for i in range(per_word)] == list(q[0, :per_word])


def test_pack_rejects_values_and_lengths_that_do_not_fit():
    with pytest.raises(ValueError, match=r"4-bit packing needs values in \[0, 15\]"):
        pack_bits(np.array([[16] * 8]), 4, "uint32")
    with pytest.raises(ValueError, match="whole uint32 words"):
        pack_bits(np.zeros((1, 12), np.int64), 4, "uint32")


def test_quantize_rejects_other_widths_and_non_finite_weights():
    layout = QuantLayout.of(GroupQuantization(), 64)
    with pytest.raises(ValueError, match=r"weight has shape \(2, 32\), expected \(rows, 64\)"):
        quantize_weight(np.zeros((2, 32), np.float32), layout)
    with pytest.raises(ValueError, match="non-finite values or magnitudes too large for float16"):
        quantize_weight(np.full((2, 64), 1e6, np.float32), layout)
    with pytest.raises(ValueError, match="in_features='n'"):
        QuantLayout.of(GroupQuantization(), "n")


def test_bfloat16_bits_helpers():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.5, np.inf, np.nan, 3.0e38], np.float32)
    bits = float32_to_bfloat16_bits(x)
    assert bits.dtype == np.uint16
    assert [int(b) for b in bits] == [_bf16_bits(float(v)) if not np.isnan(v) else 0x7FC0 for v in x]
    back = bfloat16_bits_to_float32(bits)
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == 1.015625 and back[3] == -3.5 and np.isinf(back[4])
    assert numpy_dtype("bfloat16") == np.uint16
    assert as_bfloat16_bits(bits.view(np.int16)).dtype == np.uint16
    with pytest.raises(TypeError, match="got dtype float32"):
        as_bfloat16_bits(x)


@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiles_of_4_and_8_bit_weights(bits):
    """A Linear's 4- and 8-bit weights in uint32 words whose rows fill tiles of 16 are stored
    row-tiled, with float or int8 activations: (rows / 16, words | groups, 16), word ``w`` of row
    ``n`` at ``[n // 16, w, n % 16]``; other weights (uint8 / uint16 words, rows not a multiple of
    16, an Embedding's table: no rows given) keep the row layout. Quantizing to tiles is the
    row-major quantization tiled, and dequantizes to the same weight."""
    from builder.quant.packing import tile_rows, untile_rows

    a8 = GroupQuantization(bits=bits, activation_quantization="int8")
    assert QuantLayout.of(a8, 64, 48).row_tile == 16
    assert QuantLayout.of(GroupQuantization(bits=bits), 64, 48).row_tile == 16
    for spec, rows in ((a8, 40), (a8, None), (GroupQuantization(bits=bits), 40),
                       (GroupQuantization(bits=bits, storage_dtype="uint16"), 48),
                       (GroupQuantization(bits=bits, storage_dtype="uint8", activation_quantization="int8"), 48)):
        assert QuantLayout.of(spec, 64, rows).row_tile == 0, (spec, rows)
    layout = QuantLayout.of(a8, 100, 32)
    words = layout.words
    assert words == 128 // (32 // bits)
    assert layout.q_weight_shape(32) == (2, words, 16) and layout.q_scale_shape(32) == (2, 4, 16)
    assert layout.op_attrs["row_tile"] == 16 and "row_tile" not in QuantLayout.of(a8, 100).op_attrs
    w = np.random.default_rng(4).standard_normal((32, 100)).astype(np.float32)
    q, s = quantize_weight(w, layout)
    plain = QuantLayout.of(a8, 100)
    q0, s0 = quantize_weight(w, plain)
    assert q.shape == (2, words, 16) and s.shape == (2, 4, 16) and q.flags.c_contiguous
    for n in (0, 5, 17, 31):
        for word in (0, 3, words - 1):
            assert q[n // 16, word, n % 16] == q0[n, word]
        assert s[n // 16, 2, n % 16] == s0[n, 2]
    np.testing.assert_array_equal(untile_rows(q), q0)
    np.testing.assert_array_equal(tile_rows(q0, 16), q)
    np.testing.assert_array_equal(dequantize_weight(q, s, layout), dequantize_weight(q0, s0, plain))
    with pytest.raises(ValueError, match="20 rows do not fill whole tiles of 16"):
        tile_rows(np.zeros((20, 4), np.uint32), 16)
