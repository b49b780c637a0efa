"""The row-tiled kernels: 4- and 8-bit weights stored in tiles of 16 rows (``row_tile=16``,
:mod:`builder.ir.op.quantize`; what the quantization gives every 4- and 8-bit Linear weight in
uint32 words whose rows fill whole tiles); float weights in tiles of 16 rows: :mod:`.dense_tiles`.

A tile's packed words are stored word-major: word ``w`` (columns ``8w .. 8w+7`` with 4 bits,
``4w .. 4w+3`` with 8) of its 16 rows side by side, 64 bytes, so one 512-bit load (two 256-bit
ones, four 128-bit ones) holds 8 (4) columns of 16 rows, one row per 32-bit lane -- rows in
lanes, as llama.cpp's repacked ``Q4_0`` blocks (``block_q4_0x8``) and onnxruntime's MatMulNBits
packed panels lay them out. The weights of a
tile are one sequential stream, decoded once per vector and block of ``MB`` input rows (8; 4 rows of
whole tiles for float activations on 8 lanes; a helper per row count 1-4 and ``MB``, so 7 rows are 4 +
3; :meth:`GemvTiles._tile_shape`): a block reads and decodes the weights once, larger batches loop over
blocks of ``MB`` rows inside each tile, whose words stay in L1 / L2 -- no per-call packing. A decode
batch of 16 reads each weight from DRAM once: from 4-8 rows on these kernels are bound by their
multiplies, not by the reads (``benchmarks/bench_decode_batch.py``, AMD Zen 4, one thread, CPU time,
LlamaMLP-sized q4 matmuls 1024 -> 2816 / 2816 -> 1024 at 16 rows with the weights from DRAM against L2:
int8 activations 317 / 297 and 332 / 321 us, 145 G multiply-adds/s, 68% of ``vpdpbusd``'s measured
rate, the rest mostly the per-group float epilogue, 3 operations per 16 rows and 32 columns against 8
``vpdpbusd``; float activations 914 / 877 and 908 / 878 us, 101 GFLOP/s: the FMA unit's rate).

**int8 activations** (:meth:`GemvTiles._tile_fn_i8`, every batch size; on AVX2,
:func:`~.int8_rows.int8_gemv_supported`): x quantized once per call to int8 per group
(:class:`~.int8_rows.Int8Rows`), each thread its share of the rows when x has at least
``xprep_min_values`` values (TinyLlama q4f16_1+a8 prefill 416 -> 403 ms on the Xeon). Per 8 columns the low nibbles (even columns) and the high
nibbles (odd columns) are multiplied with 4 int8 values of x broadcast to every lane: one
``vpdpbusd`` each (VNNI), or ``vpmaddubsw`` pairs summed in int16 over up to 4 such steps (at
most ``8 * 2 * 15 * 127 = 30480``: no saturation) and widened once with ``vpmaddwd``. The int32
sums of a group start at ``-zero_point * sum q`` (x's per-group table, one broadcast load) and
leave the integers once per group and input row: ``acc += float(isum) * scale * d`` with the 16
rows' scales (stored transposed, one vector per group) -- 8 integer dot instructions and 3 float
ones per 512 products, where the row-major GEMV needs 2 and 3 per 128 (its lanes hold 8 columns
of one row, so every step needs its own scales). (The zero point as a float FMA of ``scale * (d *
sum q)`` per group and row: LlamaMLP q4f16_1+a8 batch 128 2% slower.) The result is the same as
the row-major int8 GEMV / GEMM's: the same columns are quantized (whole 64-column steps inside
whole groups) and the same integer sums formed; the columns past them stay float (``x *
dequantized weight``, scalar, :meth:`GemvTiles._tile_tail`).

**int16 x** (plan variant ``x16``, :meth:`GemvTiles._tile_fn_x16`; 4- and 8-bit tiles with float16 /
bfloat16 x, or float32 x below ``matmul_precision=highest``: :func:`~.plan._int16_activations`; every
batch size, as with int8 x): x quantized once per call to int16 per group (the int8 path's
:class:`~.int8_rows.Int8Rows` with ``bits = 16``, by every thread from ``xprep_min_values`` values),
each word's columns ``p`` and ``p + 4`` paired in one lane by ``(word >> 4 p) & 0x000F000F`` and
multiplied with x's pair by one ``vpmaddwd`` (``vpdpwssd`` with VNNI) per 16 weights and input row:
a shift, a mask and a multiply-add where float x took a shuffle, a conversion and two FMAs, and half
the multiply instructions of the FMAs at any row count. x's rounding, at most ``max|x| / 65534`` per
group, is 32 times below float16's own of the group's largest value. LlamaMLP-sized q4 matmul 4096
-> 11008, weights from DRAM, one thread, CPU time, AMD Zen 5 (float tiles -> int16 x): the AVX2 code
without VNNI (what a Zen 3 runs) at 1 / 2 / 4 / 8 / 16 rows 1923 -> 1161, 2937 -> 1698, 4601 -> 3368,
8783 -> 6305, 17560 -> 12228 us; AVX2 with VNNI 2446 -> 1207 us at 1 row, 22026 -> 8637 at 16; the
host's AVX-512 1157 -> 1033 at 1 row (both at this thread's read rate), 8297 -> 4735 at 16. The
whole LlamaMLP q4f16_1 at batch 1 with the AVX2 code, alone after a cache sweep: 5.00 -> 2.33 ms
(39 -> 77% of the plain read of its 76 MB); batch 8 13.3 -> 9.1 ms; with the host's AVX-512 batch 8
6.84 -> 3.50 ms, batch 1 1.98 -> 1.80 ms (``benchmarks/bench_mlp.py``). Above ``tile_max_rows`` the tiles
beat the float GEMM on panels packed from them too (the 2048 -> 5632 matmul, 2 threads: the AVX2 code
without VNNI at 32 / 128 / 512 / 2048 rows 0.75 / 0.84 / 0.88 / 0.46 of its time, the AVX-512 code 0.61 /
0.57 / 0.73 / 0.64), so they take every batch size. 8-bit weights (``q8f16_1``): each word's even and odd
bytes (``word & 0x00FF00FF``, ``(word >> 8) & 0x00FF00FF``) against x's pairs of columns 0 2 and 1 3, two
``vpmaddwd`` per word of 4 columns and input row, where float x took a byte shuffle, a conversion and an
FMA per column. The 1024 -> 2816 q8 matmul from DRAM, one thread, float tiles -> int16 x, interleaved
(AMD Zen 5): the AVX2 code without VNNI at 1 / 4 / 8 / 16 rows 111 -> 112, 242 -> 180, 489 -> 357, 971 ->
732 us; the host's AVX-512 + VNNI 109 -> 110, 165 -> 112, 271 -> 158, 509 -> 319; 2048 -> 5632 on 2
threads at 32 / 128 / 512 rows (the float GEMM above 16): AVX2 4150 -> 2929, 13691 -> 11397, 54530 -> 46899
us, AVX-512 2014 -> 1184, 7465 -> 4043, 27925 -> 19376.

**Both halves of a tile at once with 8 lanes** (``tile_pair_rows_i8``, ``tile_pair_rows_f32``;
:meth:`GemvTiles._tile_shape`): with 256-bit vectors a tile's word is two vectors of 8 rows, and a helper
of 8 rows read half of each 64-byte line, the second helper the other half from L2. Helpers of up to 2
(int8 activations, without VNNI) / 1 (float) input rows take both halves as one 16-lane vector instead
(two 256-bit instructions per operation): x's broadcasts serve both, and the tile is read in one pass.
AMD Zen 3, 2 threads, one 16384 x 4096 (8192 x 4096 for 8-bit) matrix from DRAM against this project's
row sum reading as many bytes, interleaved: q4 with int8 activations 64 -> 88% of the read, q8 with
int8 activations 61 -> 79%, q8 with float activations 63 -> 100%, q4 with float activations 47 -> 54%
(bound by decoding: a byte shuffle, a conversion and an FMA per 8 weights, about 20 cycles per line by
``llvm-mca -mcpu=znver3`` where DRAM delivers a line in about 10).

**float activations** (:meth:`GemvTiles._tile_fn_f32`, up to ``tile_max_rows`` input rows): per
column of 4-bit weights a shift of the words and, on AVX-512, one ``vpermps`` of the 16-entry
table ``q - zero_point`` by each lane's low 4 bits give the 16 rows' values as floats (elsewhere
the word's nibbles split once into the bytes of two vectors, then per column one byte shuffle and
a conversion, the zero point through per-group sums of x: LlamaMLP q4f16_1 batch 1 with the AVX2
kernels 4.85 -> 4.51 ms, SSE 7.91 -> 7.06, against a shift, a mask and a conversion per column,
Xeon); per column of 8-bit
weights one byte shuffle (``vpshufb``; a mask or a shift for the first and last byte) and a
conversion, the zero point through the sums of x. Each column's values are multiplied with x's
value broadcast for each input row (an FMA per row and 16 weights), into ``tile_chains_f32``
partial sums per group over the rows of a block (4 for one row: one chain's FMA latency bounded
it; LlamaMLP q4f16_1 batch 1 4.04 -> 3.63 ms from DRAM on the Xeon); per group ``acc += scale *
sum``. (LlamaMLP q8f32_1 on the Xeon against its row-major packed GEMV, interleaved: batch 1 6.15
-> 5.3-5.8 ms, batch 8 19.9 -> 10.8.)
(``vpermps`` against mask and conversion, Intel Xeon, LlamaMLP q4f16_1: batch 1 3.45 -> 3.02 ms
with the weights in L3, 4.5 -> 4.3 from DRAM; batch 8 9.84 -> 9.04.) Above ``tile_max_rows`` the float GEMM runs on panels
packed from the tiles (:meth:`GemvTiles._pack_tiles_fn`: a word of a tile is already a row of
the panel, no transposes). Intel Xeon with AMX, 2 cores, LlamaMLP q4f16_1 against the row-major
kernels in the same session: batch 1 5.39 -> 4.78 ms, batch 8 27.2 -> 10.5, batch 128 about the
same (133 ms with the tiles packed, 167 with the tiles at every batch size).

**float weights** in tiles of 16 rows: :mod:`.dense_tiles`.

8-bit weights with int8 activations: a word is 4 columns of each row, so one ``vpdpbusd`` per
word and input row against x's 4 int8 values broadcast (x in column order, :class:`~.int8_rows.Int8Rows`
``natural``), the same zero-point table, scales and float tail as the 4-bit tiles. Without VNNI
(``vpmaddubsw`` would saturate, ``2 * 255 * 127 > 2**15``) x's int8 values are stored as int16, each
4 columns in the order ``0 2 1 3`` (:class:`~.int8_rows.Int8Rows` ``wide``), and the int16-x helper
multiplies them (:meth:`GemvTiles._tile_fn_x16`): a word's even bytes (``word & 0x00FF00FF``) and odd
ones (``(word >> 8) & 0x00FF00FF``) meet x's pairs in two ``vpmaddwd`` per word and input row, where
widening x's bytes for each row took three more instructions (the same exact sums). LlamaMLP q8f32_1 with int8 activations on the Xeon (weights from DRAM): batch 1 5.01 ms
against 5.58 with float ones, batch 8 5.77 (1.15x batch 1), batch 128 44.9 against 107.5.

**The words of a group in a loop** (every integer-x helper of more than one input row): with a group's
words unrolled LLVM took the input rows one after another and spilled each decoded word to reload it
for every row, two loads per multiply. AMD Zen 5 running the AVX2 code without VNNI, one thread, the
1024 -> 2816 matmul from DRAM (``bench_decode_batch.py``'s kernel part, two runs of each, alternating):
q8 with int8 x at 4 / 8 / 16 rows 277-289 -> 201-230, 483-533 -> 348-376, 980-1020 -> 618-832 us (int16
x and the loop), q4 with int8 x 155-159 -> 114-123, 250-256 -> 186-226, 467 -> 379-437 us; the host's
AVX-512 + VNNI code the same within the spread.

A mixin of :class:`~.emitter.LinearEmitter`."""
from __future__ import annotations

from llvmlite import ir

from ....ir.op.quantize import ROW_TILE
from ...llvm_emit import F32, I8, I16, I32, I64, PTR, elem_bytes, mem_type
from ..decode import scalar_to_f32
from ..simd import KFunc, vec
from .int8_rows import Int8Rows
from .plan import TUNING

__all__ = ["GemvTiles"]


class GemvTiles:
    """The row-tiled kernel family (see the module docstring): :meth:`_tiles` drives it, a helper
    per weight, vector and block size does the work (:meth:`_tile_fn_i8` with int8 activations,
    :meth:`_tile_fn_f32` with float ones)."""

    def _tile_shape(self, t: int = 0) -> tuple[int, int]:
        """``(NL, MB)``: 32-bit lanes per vector (a tile is ``16 / NL`` vectors) and input rows per
        block. int8 activations: 16 lanes with the 16-lane shape, else 8 (``tile_lanes_i8``), but 16
        (a tile's word as two 256-bit vectors, one helper call per tile) for a helper of ``t`` input
        rows up to ``tile_pair_rows_i8`` without VNNI (AVX2's ``vpmaddubsw`` path): the two halves of
        each word share x's broadcasts, and the tile is read in one pass where two calls of 8 rows read
        half of each line each (Zen 3, one 2048 x 4096 q4 matrix from L3 at batch 1: 134 -> 103 us,
        16384 x 4096 from DRAM 1945 -> 1565 us, interleaved; see the module docstring);
        ``tile_rows_x_i8`` rows (0: 8). Float activations: the kernel's float32 lanes (at most 16),
        16 with 8 lanes for up to ``tile_pair_rows_f32`` input rows (the same pairing);
        ``tile_rows_x`` rows (0: ``tile_pair_rows_f32`` with 8 lanes when that is at least 2, so that
        every block takes whole tiles, else 8): with 16 registers a block of 4 rows of both halves
        holds 8 accumulators, as 8 rows of one half did, and each broadcast of x serves two FMAs
        where it served one (AMD Zen 4 running the AVX2 code, one thread, CPU time, interleaved, the
        LlamaMLP-sized q4 1024 -> 2816 matmul at 3 / 4 / 8 / 13 / 16 rows 433 -> 309, 490 -> 386, 961
        -> 730, 1544 -> 1243, 1824 -> 1463 us against 8 rows of one half, q8 at 16 rows 1518 -> 1128;
        6 rows of both halves about the same as 4; the q4f16_1 decode step of 16 sequences 11-24%
        faster, benchmarks/LOG.md "Batched decode"; ``llvm-mca -mcpu=skylake`` predicts 13% more
        cycles per word on Intel cores, which convert on the FMA ports). ``t`` = 0: the kernel's own
        shape, whatever its helpers'. Eight
        rows (int8 activations; float ones with the pairing off) share each decoded column with 16
        vector registers too, though their accumulators no longer all fit: the decode, not the spills,
        bounds these kernels there (Intel Xeon compiled as for AVX2, LlamaMLP batch 8 against 4 rows
        of one half: q4f16_1
        16.2 -> 12.8 ms, q8f32_1 18.2 -> 14.5, q4f16_1+a8 6.4 -> 5.8; batch 16 q4f16_1 31.0 -> 25.4;
        batch 2-4 the same; as for SSE, q4f16_1 batch 8 50.6 -> 45.9)."""
        if self.tile_int8:
            nl = 16 if self.lanes >= 16 and TUNING["tile_lanes_i8"] != 8 else 8
            if nl == 8 and 0 < t <= TUNING["tile_pair_rows_i8"] and not self.vnni and TUNING["tile_lanes_i8"] != 8:
                nl = 16
            mb = TUNING["tile_rows_x_i8"] or 8
        else:
            base, pair = min(16, self.lanes), TUNING["tile_pair_rows_f32"]
            nl = 16 if base == 8 and 0 < t <= pair else base
            mb = TUNING["tile_rows_x"] or (pair if base == 8 and pair >= 2 else 8)
        return nl, max(1, mb)

    @staticmethod
    def _tile_column(kf: KFunc, wv, j: int, bits: int, nl: int, masked: bool = True):
        """Column ``j`` of a tile vector's 32-bit words (``nl`` lanes, one weight row each): the
        unsigned ``bits``-bit value ``(word >> bits * j) & (2**bits - 1)`` per lane (int32).
        8-bit values are one byte shuffle (``vpshufb``: byte ``j`` of each lane, zeros above) where
        a shift and a mask would be two instructions; ``masked=False`` leaves the bits above the
        value (for ``vpermps``, which reads a lane's low 4 bits only)."""
        b = kf.b
        i32v = vec(I32, nl)
        per_word = 32 // bits
        if j == per_word - 1:
            return b.lshr(wv, ir.Constant(i32v, [bits * j] * nl))
        if bits == 8 and j:
            i8v = vec(I8, 4 * nl)
            zeros = ir.Constant(i8v, [0] * (4 * nl))
            idx = [4 * lane + j if byte == 0 else 4 * nl for lane in range(nl) for byte in range(4)]
            return b.bitcast(b.shuffle_vector(b.bitcast(wv, i8v), zeros, ir.Constant(vec(I32, 4 * nl), idx)), i32v)
        v = wv if j == 0 else b.lshr(wv, ir.Constant(i32v, [bits * j] * nl))
        return b.and_(v, ir.Constant(i32v, [(1 << bits) - 1] * nl)) if masked else v

    @classmethod
    def _tile_columns(cls, kf: KFunc, wv, bits: int, nl: int) -> list:
        """Every column of a tile vector's 32-bit words as :meth:`_tile_column` gives it (int32,
        unsigned values). 4-bit words are first split into two vectors of bytes (low nibbles: the
        even columns, high: the odd ones), so that each column is then one byte shuffle where it
        was a shift and a mask (LlamaMLP q4f16_1 batch 1 with the AVX2 kernels 4.85 -> 4.51 ms,
        SSE 7.91 -> 7.06, Xeon)."""
        if bits != 4:
            return [cls._tile_column(kf, wv, j, bits, nl) for j in range(32 // bits)]
        b = kf.b
        i32v = vec(I32, nl)
        m0f = ir.Constant(i32v, [0x0F0F0F0F] * nl)
        halves = (b.and_(wv, m0f), b.and_(b.lshr(wv, ir.Constant(i32v, [4] * nl)), m0f))
        return [cls._tile_column(kf, halves[j % 2], j // 2, 8, nl) for j in range(8)]

    def _tile_permps(self) -> bool:
        """Whether the float tiles decode with ``vpermps`` (16 lanes, the target's own AVX-512):
        one permute of a 16-entry table ``q - zero_point`` by each lane's low 4 bits replaces the
        mask and the conversion (and the zero point's sums of x)."""
        return (not self.tile_int8 and self.plan.weights[0].bits == 4 and self._tile_shape()[0] == 16
                and self.simd.int8_512 and bool(TUNING["tile_permps"]))

    def _prepare_tile_sums(self, kf: KFunc, xf, M, K):
        """For the float-activation tiles: a buffer of ``xs[m, g]``, the sum of x over each whole
        group (float32, ``M x K // group_size``; the weights' zero point is applied through it;
        NULL where :meth:`_tile_permps` applies it in the table), or None for the other kernels."""
        if not self.tiled or self.tile_int_x or self.tiled_dense:
            return None
        if self._tile_permps():
            return ir.Constant(PTR, None)
        b = kf.b
        gs = self.plan.weights[0].group_size
        G = self.K_static // gs
        slot = kf.alloca(PTR, name="xts")
        b.store(ir.Constant(PTR, None), slot)
        with kf.if_(b.icmp_signed("<=", M, kf.i64(self.MG)), "tsum"):
            self._fill_tile_sums(kf, xf, M, K, gs, G, slot)
        return b.load(slot, typ=PTR)

    def _fill_tile_sums(self, kf: KFunc, xf, M, K, gs: int, G: int, slot) -> None:
        """Allocate and fill :meth:`_prepare_tile_sums`' buffer (its pointer stored in ``slot``)."""
        b = kf.b
        buf = b.call(kf.declare("malloc", PTR, [I64]), [kf.smax(kf.mul(M, 4 * G), 4)])
        with kf.if_(b.icmp_unsigned("==", buf, ir.Constant(PTR, None)), "oomt"):
            b.ret(ir.Constant(I32, self.error_code))
        b.store(buf, slot)
        L = max(1, min(8, gs))
        with kf.loop(0, M, 1, "tm") as m:
            row = kf.gep(xf, kf.mul(m, K), F32)
            with kf.loop(0, G, 1, "tg") as g:
                base = kf.gep(row, kf.mul(g, gs), F32)
                acc = kf.fzero(L)
                for j in range(0, gs - gs % L, L):
                    acc = b.fadd(acc, kf.load(vec(F32, L) if L > 1 else F32, base, kf.i64(j), align=4),
                                 flags=KFunc.FM)
                s = kf.hsum(acc) if L > 1 else acc
                for j in range(gs - gs % L, gs):
                    s = b.fadd(s, kf.load(F32, base, kf.i64(j), align=4), flags=KFunc.FM)
                kf.store(s, buf, kf.add(kf.mul(m, G), g), align=4)

    def _pack_tiles_fn(self, w: int) -> ir.Function:
        """The GEMM's panel packing (:meth:`_pack_fn`'s signature and result, ``bp[kk][j] =
        W[n0 + j, kb + kk]``, zero for ``j >= nr_eff``) for a row-tiled weight: a tile's column of
        16 rows is already a row of the panel, no transposes (:meth:`_pack_words` for packed words,
        :meth:`_pack_floats` for float weights), per part of ``RG`` rows (a whole tile, or part of
        one: NR = 8 with SSE)."""
        d = self.plan.weights[w]
        L, NR = self.lanes, self.NR
        T = ROW_TILE
        RG = min(T, NR)
        NL = min(16, L, RG)
        key = f"mb.pack.tiles.{self._fmt_key(w)}.v{L}x{self.NV}"
        fn, kf = self._new_helper(key, [PTR, PTR, I64, I64, I64, I64, I64, I64, I64, PTR])
        if kf is None:
            return fn
        n0, nr_eff, kc, bp = fn.args[5], fn.args[6], fn.args[8], fn.args[9]
        part = self._pack_floats if d.format == "dense" else self._pack_words
        for ti in range(NR // RG):
            def real(ti=ti):
                first_row = kf.add(n0, ti * RG)
                part(kf, d, fn.args, kf.sdiv(first_row, T), kf.b.srem(first_row, kf.i64(T)), ti * RG, RG, NL)

            def zero(ti=ti):
                with kf.loop(0, kc, 1, "pz") as kk:
                    for h in range(RG // NL):
                        kf.store(kf.fzero(NL), bp, kf.add(kf.mul(kk, NR), ti * RG + h * NL), align=min(64, 4 * NL))

            kf.if_else(kf.lt(kf.i64(ti * RG), nr_eff), real, zero, f"pt{ti}")
        kf.b.ret_void()
        kf.finish()
        return fn

    def _pack_words(self, kf: KFunc, d, args, tile, lane0, col0: int, RG: int, NL: int) -> None:
        """Panel columns ``col0 .. col0 + RG`` from rows ``lane0 ..`` of ``tile`` of packed words:
        each column of a word (:meth:`_tile_columns`) converted and ``(q - zero_point) * scale``."""
        q, s, words, groups, kb, kc, bp = args[0], args[1], args[2], args[3], args[7], args[8], args[9]
        b, NR, T = kf.b, self.NR, ROW_TILE
        gs, zp = d.group_size, d.zero_point
        st_t, bpe = mem_type(d.scale_dtype), elem_bytes(d.scale_dtype)
        i32v, f32v = vec(I32, NL), vec(F32, NL)
        cw = 32 // d.bits                         # columns per word
        whole = kf.sdiv(kc, cw)                   # kb is a multiple of 8 (KC is)
        w0 = kf.sdiv(kb, cw)
        qt = kf.gep(q, kf.add(kf.mul(tile, kf.mul(words, 4 * T)), kf.mul(lane0, 4)), I8)
        stl = kf.gep(s, kf.add(kf.mul(tile, kf.mul(groups, bpe * T)), kf.mul(lane0, bpe)), I8)
        with kf.loop(0, whole, 1, "pw") as wd:
            word = kf.add(w0, wd)
            g = kf.sdiv(kf.mul(word, cw), gs)
            for h in range(RG // NL):
                sc = kf.widen(kf.load(vec(st_t, NL), kf.gep(stl, kf.mul(kf.add(kf.mul(g, T), h * NL), bpe), I8),
                                      None, align=2), d.scale_dtype)
                off = b.fmul(sc, ir.Constant(f32v, [float(-zp)] * NL))
                wv = kf.load(i32v, kf.gep(qt, kf.add(kf.mul(word, 4 * T), 4 * NL * h), I8), None, align=4)
                for j, col in enumerate(self._tile_columns(kf, wv, d.bits, NL)):
                    f = b.sitofp(col, f32v)
                    row = kf.add(kf.mul(wd, cw), j)
                    kf.store(kf.fma(f, sc, off), bp, kf.add(kf.mul(row, NR), col0 + h * NL), align=min(64, 4 * NL))
        with kf.loop(kf.mul(whole, cw), kc, 1, "pt") as kk:   # a last partial word
            for r in range(RG):
                kf.store(self._tile_weight(kf, d, qt, stl, kf.add(kb, kk), r), bp,
                         kf.add(kf.mul(kk, NR), col0 + r), align=4)

    def _pack_floats(self, kf: KFunc, d, args, tile, lane0, col0: int, RG: int, NL: int) -> None:
        """Panel columns ``col0 .. col0 + RG`` from rows ``lane0 ..`` of ``tile`` of float weights:
        row ``kk`` of the panel is row ``kb + kk`` of the tile (a copy, widened to float32)."""
        q, K, kb, kc, bp = args[0], args[2], args[7], args[8], args[9]   # (K: the tiles' row length)
        NR, T = self.NR, ROW_TILE
        eb = elem_bytes(d.dtype)
        wt = vec(mem_type(d.dtype), NL)
        base = kf.gep(q, kf.mul(kf.add(kf.mul(tile, kf.mul(K, T)), kf.add(kf.mul(kb, T), lane0)), eb), I8)
        with kf.loop(0, kc, 1, "pk") as kk:
            src = kf.gep(base, kf.mul(kk, eb * T), I8)
            for h in range(RG // NL):
                v = kf.widen(kf.load(wt, kf.gep(src, kf.i64(h * NL * eb), I8), None, align=eb), d.dtype)
                kf.store(v, bp, kf.add(kf.mul(kk, NR), col0 + h * NL), align=min(64, 4 * NL))

    def _tiles(self, kf: KFunc, st, u0, u1) -> None:
        """Tiles ``u0 .. u1`` of 16 weight rows: per tile and block of ``MB`` input rows, the
        tile helper per weight and vector (:meth:`_tile_fn`), then the epilogue of each input row;
        up to ``tile_streams_rows`` input rows, :meth:`_tile_streams` tiles per helper call (a last
        odd tile by itself)."""
        b = kf.b
        T = ROW_TILE
        MB = self._tile_shape()[1]
        P, PR = self._tile_streams(), TUNING["tile_streams_rows"]
        per_w = max(MB, P * PR if P > 1 else 0) * T
        res = kf.alloca(F32, self.nw * per_w, name="res", align=64)
        resw = [kf.gep(res, kf.i64(w * per_w), F32) if w else res for w in range(self.nw)]
        wargs = [self._weight_args(st, w) for w in range(self.nw)]
        if self.tile_int_x:
            xaux = [b.inttoptr(st.extra[f"xi{self.ikeys.index(self.qint[w])}"], PTR) for w in range(self.nw)]
            aux_row = [self._int8_rows(self.qint[w]).row_bytes for w in range(self.nw)]
        else:
            xaux = [b.inttoptr(st.extra["xts"], PTR)] * self.nw
            aux_row = [4 * (self.K_static // self.plan.weights[w].group_size) for w in range(self.nw)]
        # helpers for 1-4 rows and for a whole block; other remainders take two calls (7 = 4 + 3):
        # a helper per row count doubled the compile time of a q4 model (Llama recipe 3.7 -> 6.5 s)
        sizes = sorted(set(range(1, min(4, MB) + 1)) | {MB})
        lanes = {t: self._tile_shape(t)[0] for t in sizes}   # per helper size (16: a whole tile per call)
        fns = {(w, t, h): self._tile_fn(w, t, h == 0) for w in range(self.nw) for t in sizes
               for h in range(T // lanes[t])}
        sbytes = [elem_bytes(self.plan.weights[w].scale_dtype) for w in range(self.nw)]
        # bytes from one tile's words / scales to the next's
        dq = [kf.mul(wargs[w][2], 4 * T) for w in range(self.nw)]
        ds = [kf.mul(wargs[w][3], sbytes[w] * T) for w in range(self.nw)]

        def at(tile):
            return ([kf.gep(wargs[w][0], kf.mul(tile, dq[w]), I8) for w in range(self.nw)],
                    [kf.gep(wargs[w][1], kf.mul(tile, ds[w]), I8) for w in range(self.nw)])

        def rows(w, m):
            return kf.gep(xaux[w], kf.mul(m, aux_row[w]), I8), kf.gep(st.xf, kf.mul(m, st.K), F32)

        def one(tile) -> None:
            qt, stl = at(tile)

            def run(m, part: int, r0: int) -> None:
                for w in range(self.nw):
                    xa, xf = rows(w, m)
                    nl = lanes[part]
                    for h in range(T // nl):
                        kf.b.call(fns[(w, part, h)], [
                            kf.gep(qt[w], kf.i64(4 * nl * h), I8), kf.gep(stl[w], kf.i64(sbytes[w] * nl * h), I8),
                            xa, xf, kf.gep(resw[w], kf.i64(r0 * T + nl * h), F32)])

            self._row_blocks(kf, st, MB, sizes, run, kf.mul(tile, T), T, T, resw)

        def single() -> None:
            with kf.loop(u0, u1, 1, "tile") as tile:
                one(tile)

        if P == 1:
            single()
            return
        sfns = {(w, t): self._tile_fn_i8(w, t, True, P) for w in range(self.nw) for t in range(1, PR + 1)}

        def streams(tile) -> None:
            qt, stl = at(tile)

            def run(m, part: int, r0: int) -> None:
                for w in range(self.nw):
                    xa, xf = rows(w, m)
                    kf.b.call(sfns[(w, part)], [qt[w], stl[w], xa, xf, kf.gep(resw[w], kf.i64(r0 * P * T), F32),
                                                dq[w], ds[w]])

            self._row_blocks(kf, st, PR, list(range(1, PR + 1)), run, kf.mul(tile, T), P * T, P * T, resw)

        def lockstep() -> None:
            units = kf.sdiv(kf.sub(u1, u0), P)
            with kf.loop(0, units, 1, "tiles") as j:
                streams(kf.add(u0, kf.mul(j, P)))
            with kf.loop(kf.add(u0, kf.mul(units, P)), u1, 1, "tile") as tile:
                one(tile)

        kf.if_else(kf.b.icmp_signed("<=", st.M, kf.i64(PR)), lockstep, single, "streams")

    def _tile_streams(self) -> int:
        """Tiles per helper call of up to ``tile_streams_rows`` input rows: ``tile_streams`` for
        4-bit weights with int8 activations on 256-bit vectors where those helpers take a whole tile
        per call (:meth:`_tile_shape`), else 1. Two tiles, ``K / 2`` bytes apart per row of a tile, read
        group by group in one helper are two read streams in one thread, and x's broadcasts serve both:
        AMD Zen 3 (AVX2 only, 2 cores, 2026-12-04) read 33-37 GB/s with one stream per thread, 38-41
        with 2-4 in lockstep (a C loop over a 512 MB array); LlamaMLP q4f16_1+a8 batch 1 2.38 / 2.40 ->
        2.28 / 2.27 ms against one tile per call in the same run (2026-12-06: 3-11% in four orders).
        Not taken where it did not help on that Zen 3: q4f16_1's int16-x tiles (no change), q8f32_1's
        float tiles (3.62 -> 4.40 ms)."""
        n, rows = TUNING["tile_streams"], TUNING["tile_streams_rows"]
        if n <= 1 or rows < 1 or not self.tile_int8 or self.simd.int8_512:
            return 1
        if any(d.bits != 4 or self._int8_rows(d.group_size).wide for d in self.plan.weights):
            return 1
        if any(self._tile_shape(t)[0] != ROW_TILE for t in range(1, rows + 1)):
            return 1
        return n

    def _row_blocks(self, kf: KFunc, st, MB: int, sizes: list[int], run, n0, count: int, stride: int,
                    resw: list) -> None:
        """The input rows in blocks of ``MB``: per block ``run(m, part, r0)`` for each part of the
        block's rows (a helper for each of ``sizes``; other counts are sums, 7 = 4 + 3), which leaves
        row ``r0 + i`` of the part at ``resw[w] + (r0 + i) * stride``; then the epilogue of each
        row (outputs ``n0 .. n0 + count``)."""
        def parts(t: int) -> list[int]:
            out = []
            while t:
                out.append(max(s for s in sizes if s <= t))
                t -= out[-1]
            return out

        b = kf.b
        with kf.loop(0, st.M, MB, "mb") as m0:
            t_eff = kf.smin(kf.sub(st.M, m0), MB)

            def block(t: int) -> None:
                r0 = 0
                for part in parts(t):
                    run(kf.add(m0, r0) if r0 else m0, part, r0)
                    r0 += part

            kf.switch_const(t_eff, {t: (lambda t=t: block(t)) for t in range(1, MB + 1)}, "tb")
            accs = resw + [resw[0]] * (2 - self.nw)
            b.call(self.epi_fn, [st.fn.args[0], m0, t_eff, n0, kf.i64(count)] + accs + [kf.i64(stride)])

    @staticmethod
    def _prefetch_scales(kf: KFunc, s, g, bpe: int) -> None:
        """Prefetch the tile's scales (a stream of their own) ``prefetch_scales`` bytes past group
        ``g``'s (``bpe`` bytes per scale; 0: off), once per group by the tile's first vector."""
        if TUNING["prefetch_scales"]:
            kf.prefetch(kf.gep(s, kf.add(kf.mul(g, ROW_TILE * bpe), TUNING["prefetch_scales"]), I8),
                        TUNING["prefetch_locality"])

    def _tile_fn(self, w: int, t: int, first: bool) -> ir.Function:
        """``void tile(ptr q, ptr s, ptr xa, ptr xf, ptr res)``: ``res[i * 16 + r] = sum_k x[i, k]
        W[r, k]`` for the ``NL`` rows of one vector of a tile (``q`` / ``s``: that vector's first
        word / scale in the tile) and ``t`` input rows (``xa``: their :class:`Int8Rows` with int8
        or int16 activations, their per-group sums of x with float ones; ``xf``: their float32 values).
        ``first``: the tile's first vector, which prefetches the tile's lines ``prefetch_q`` bytes
        ahead. Shared by every kernel of the module with this format, ``K`` and ``t``."""
        if self.tile_int8 and not self._int8_rows(self.plan.weights[w].group_size).wide:
            fn = self._tile_fn_i8
        else:   # int16 x, or the int8 values of x stored as int16 (8-bit weights without vpdpbusd)
            fn = self._tile_fn_x16 if self.tile_int_x else self._tile_fn_f32
        return fn(w, t, first)

    @staticmethod
    def _tile_weight(kf: KFunc, d, q, s, k, r: int):
        """The float32 weight of column ``k`` (i64) of lane ``r`` of a tile (``q`` / ``s``: the
        tile's, or a part's, first word and scale): ``(q - zero_point) * scale``, scalar."""
        b = kf.b
        st_t, bpe = mem_type(d.scale_dtype), elem_bytes(d.scale_dtype)
        cw = 32 // d.bits
        word = kf.load(I32, kf.gep(q, kf.add(kf.mul(kf.sdiv(k, cw), 4 * ROW_TILE), 4 * r), I8), None, align=4)
        shift = b.trunc(kf.mul(b.srem(k, kf.i64(cw)), d.bits), I32)
        nib = b.and_(b.lshr(word, shift), ir.Constant(I32, (1 << d.bits) - 1))
        sv = kf.load(st_t, kf.gep(s, kf.add(kf.mul(kf.sdiv(k, d.group_size), ROW_TILE * bpe), r * bpe), I8),
                     None, align=2)
        scale = scalar_to_f32(kf, sv, d.scale_dtype)
        return b.fmul(b.sitofp(b.sub(nib, ir.Constant(I32, d.zero_point)), F32), scale)

    def _tile_tail(self, kf: KFunc, d, q, s, xf, outs, NL: int, t: int, k_from: int) -> None:
        """Columns ``k_from .. K`` of the vector's ``NL`` rows, scalar: float x times the
        dequantized weight, added to ``outs[i][r]``."""
        b = kf.b
        K = self.K_static
        with kf.loop(k_from, K, 1, "tk") as k:
            xv = [kf.load(F32, kf.gep(xf, kf.add(k, i * K) if i else k, F32), None, align=4) for i in range(t)]
            for r in range(NL):
                wval = self._tile_weight(kf, d, q, s, k, r)
                for i in range(t):
                    p = kf.gep(outs[i], kf.i64(r), F32)
                    b.store(kf.fma(xv[i], wval, b.load(p, typ=F32)), p)

    @staticmethod
    def _tile_start_sums(kf: KFunc, xrows: list, g, lay: Int8Rows, zp: int, NL: int) -> list:
        """The int32 sums (``NL`` lanes) group ``g`` of an integer-x tile helper starts from, per input
        row (``xrows``: their :class:`Int8Rows`): ``-zero_point * sum q``, x's table broadcast (the
        weights' zero point), or zeros."""
        if not zp:
            return [ir.Constant(vec(I32, NL), [0] * NL)] * len(xrows)
        return [kf.splat(kf.load(I32, kf.gep(xr, kf.add(kf.mul(g, 4), lay.zsum_off), I8), None, align=4), NL)
                for xr in xrows]

    @staticmethod
    def _tile_group_sums(kf: KFunc, xrows: list, g, lay: Int8Rows, sc, isums: list, facc: list) -> None:
        """The integer sums of group ``g`` leave the integers: ``facc[i] += float(isums[i]) * sc * d[g]``
        per input row (``sc``: the rows' scales of the group, float32; ``d``: x's, from its table)."""
        b = kf.b
        f32v = sc.type
        for xr, isum, a in zip(xrows, isums, facc):
            dv = kf.load(F32, kf.gep(xr, kf.add(kf.mul(g, 4), lay.d_off), I8), None, align=4)
            prod = b.fmul(sc, kf.splat(dv, f32v.count), flags=KFunc.FM)
            b.store(kf.fma(b.sitofp(isum, f32v), prod, b.load(a, typ=f32v)), a)

    def _tile_finish(self, kf: KFunc, d, qs: list, ss: list, xf, res, faccs: list, NL: int, k_from: int) -> None:
        """The end of a tile helper of ``len(qs)`` tiles (``qs`` / ``ss``: each one's first word and
        scale): each input row's ``NL`` sums per tile (``faccs[n][i]``) stored at ``res`` (rows of ``16
        len(qs)``, tile ``n`` at ``16 n``), the columns ``k_from .. K`` added in float
        (:meth:`_tile_tail`), and the return."""
        b = kf.b
        T, P = ROW_TILE, len(qs)
        for n, (q, s, facc) in enumerate(zip(qs, ss, faccs)):
            outs = [kf.gep(res, kf.i64(i * P * T + n * T), F32) if i or n else res for i in range(len(facc))]
            for i, a in enumerate(facc):
                kf.store(b.load(a, typ=vec(F32, NL)), outs[i], None, align=4)
            if k_from < self.K_static:
                self._tile_tail(kf, d, q, s, xf, outs, NL, len(facc), k_from)
        b.ret_void()
        kf.finish()

    def _tile_fn_f32(self, w: int, t: int, first: bool) -> ir.Function:
        """The float-activation tile helper (:meth:`_tile_fn`): per group and word of ``32 /
        bits`` columns, each column's values of the ``NL`` rows (:meth:`_tile_columns`, or
        ``vpermps``) converted to float once and multiplied with x's value of that column,
        broadcast, for each of the ``t`` input rows (FMAs into ``tile_chains_f32 / t`` partial
        sums per group and row, column ``j`` into sum ``j % C``); per group and row ``acc += scale *
        (sum - zero_point * xs)``. The columns of a last partial group: :meth:`_tile_tail`."""
        d = self.plan.weights[w]
        NL, _ = self._tile_shape(t)
        K = self.K_static
        key = f"mb.tile.{self._fmt_key(w)}.k{K}.v{NL}.t{t}{'.pf' if first else ''}.f32"
        fn, kf = self._new_helper(key, [PTR] * 5)
        if kf is None:
            return fn
        q, s, xs, xf, res = fn.args
        b = kf.b
        T, gs, zp = ROW_TILE, d.group_size, d.zero_point
        G = K // gs
        i32v, f32v = vec(I32, NL), vec(F32, NL)
        st_t, bpe = mem_type(d.scale_dtype), elem_bytes(d.scale_dtype)
        cw = 32 // d.bits                       # columns per word
        facc = [kf.alloca(f32v, name="tacc") for _ in range(t)]
        for a in facc:
            b.store(kf.fzero(NL), a)
        pf = TUNING["prefetch_q"] if first else 0
        xrows = [kf.gep(xf, kf.i64(i * K), F32) if i else xf for i in range(t)]
        permps = self._tile_permps()
        if permps:
            vperm = kf.declare("llvm.x86.avx512.permvar.sf.512", f32v, [f32v, i32v])
            table = ir.Constant(f32v, [float(v - zp) for v in range(16)])
        with kf.loop(0, G, 1, "tg") as g:
            if pf:
                self._prefetch_scales(kf, s, g, bpe)
            sc = kf.widen(kf.load(vec(st_t, NL), kf.gep(s, kf.mul(g, T * bpe), I8),
                                  None, align=2), d.scale_dtype)
            # C partial sums per input row (column j into sum j % C): independent FMA chains
            C = max(1, min(cw, TUNING["tile_chains_f32"] // (t * max(1, NL // self.lanes))))
            gslot = [[kf.alloca(f32v, name="gacc") for _ in range(C)] for _ in range(t)]
            for row in gslot:
                for a in row:
                    b.store(kf.fzero(NL), a)
            # the words of a group in a loop (unrolled, the float helpers were the larger part of a
            # q4 model's compile time)
            with kf.loop(0, gs // cw, 1, "tc") as c:
                word = kf.add(kf.mul(g, gs // cw), c)
                wp = kf.gep(q, kf.mul(word, 4 * T), I8)
                if pf:
                    kf.prefetch(kf.gep(wp, kf.i64(pf), I8), TUNING["prefetch_locality"])
                wv = kf.load(i32v, wp, None, align=4)
                k = kf.mul(word, cw)
                gacc = [[b.load(a, typ=f32v) for a in row] for row in gslot]
                cols = None if permps else self._tile_columns(kf, wv, d.bits, NL)
                for j in range(cw):
                    if permps:   # vpermps reads the low 4 bits of each lane: table[q] = q - zero_point
                        f = b.call(vperm, [table, self._tile_column(kf, wv, j, d.bits, NL, masked=False)])
                    else:
                        f = b.sitofp(cols[j], f32v)
                    for i in range(t):
                        xv = kf.load(F32, kf.gep(xrows[i], kf.add(k, j), F32), None, align=4)
                        gacc[i][j % C] = kf.fma(f, kf.splat(xv, NL), gacc[i][j % C])
                for row, vals in zip(gslot, gacc):
                    for a, v in zip(row, vals):
                        b.store(v, a)
            gacc = []
            for row in gslot:
                vals = [b.load(a, typ=f32v) for a in row]
                while len(vals) > 1:
                    vals = [b.fadd(vals[c], vals[c + 1], flags=KFunc.FM) if c + 1 < len(vals) else vals[c]
                            for c in range(0, len(vals), 2)]
                gacc.append(vals[0])
            for i in range(t):
                part = gacc[i]
                if zp and not permps:
                    xsv = kf.load(F32, kf.gep(xs, kf.add(kf.mul(g, 4), i * 4 * G), I8), None, align=4)
                    part = kf.fma(kf.splat(xsv, NL), ir.Constant(f32v, [float(-zp)] * NL), part)
                b.store(kf.fma(sc, part, b.load(facc[i], typ=f32v)), facc[i])
        self._tile_finish(kf, d, [q], [s], xf, res, [facc], NL, G * gs)
        return fn

    def _tile_fn_x16(self, w: int, t: int, first: bool) -> ir.Function:
        """The tile helper (:meth:`_tile_fn`) of 4- and 8-bit weights with x in int16 (plan variant
        ``x16``, :func:`~.plan._int16_activations`; x's rows: :class:`Int8Rows` with ``bits = 16``,
        each 8 columns in the order ``0 4 1 5 2 6 3 7`` for 4-bit weights, each 4 in the order ``0 2 1
        3`` for 8-bit ones). 4-bit: per word of 8 columns and ``p`` = 0 .. 3, ``(word >> 4 p) &
        0x000F000F`` holds column ``p`` of each row in the low int16 half of its lane and column ``p +
        4`` in the high half; 8-bit: per word of 4 columns ``word & 0x00FF00FF`` holds columns 0 and 2,
        ``(word >> 8) & 0x00FF00FF`` columns 1 and 3. One ``vpmaddwd`` with x's pair of those columns
        broadcast adds both products of a row to its int32 lane (``vpdpwssd`` with VNNI), for every
        input row of the block. A group's sums start at ``-zero_point * sum q`` (x's table) and leave
        the integers once per group and row: ``acc += float(isum) * scale * d``. Exact: the sum of a
        group is ``sum (w - zero_point) q`` with ``|w - zero_point| <= 15`` (255) and ``|q| <= 32767``
        over at most 256 columns, ``< 2**31`` (the int32 adds wrap, so partial sums past that bound
        still end exact). The columns past the int16 ones stay float (:meth:`_tile_tail`). Also the
        helper of 8-bit weights with int8 x where ``vpdpbusd`` is not native (:class:`Int8Rows`
        ``wide``: x's int8 values stored as int16 in the same order, the same sums)."""
        d = self.plan.weights[w]
        NL, _ = self._tile_shape(t)
        K = self.K_static
        lay = self._int8_rows(d.group_size)
        native = self.simd.vnni and self.simd.native("vnni")
        zmm = self.simd.int8_512 and NL == 16
        key = (f"mb.tile.{self._fmt_key(w)}.k{K}.v{NL}.t{t}{'.pf' if first else ''}.x16"
               f"{'.vnni' if native else ''}{'.zmm' if zmm else ''}")
        fn, kf = self._new_helper(key, [PTR] * 5)
        if kf is None:
            return fn
        q, s, xi, xf, res = fn.args
        b = kf.b
        T, gs, zp = ROW_TILE, d.group_size, d.zero_point
        i16v, i32v, f32v = vec(I16, 2 * NL), vec(I32, NL), vec(F32, NL)
        st_t, bpe = mem_type(d.scale_dtype), elem_bytes(d.scale_dtype)
        bits = d.bits
        mask = ir.Constant(i32v, [0x000F000F if bits == 4 else 0x00FF00FF] * NL)
        cw = 32 // bits                         # columns per word: its pairs p = 0 .. cw / 2 - 1
        xrows = [kf.gep(xi, kf.i64(i * lay.row_bytes), I8) if i else xi for i in range(t)]
        facc = [kf.alloca(f32v, name="tacc") for _ in range(t)]
        for a in facc:
            b.store(kf.fzero(NL), a)
        pf = TUNING["prefetch_q"] if first else 0
        wpg = gs // cw                          # words per group
        with kf.loop(0, lay.groups, 1, "tg") as g:
            if pf:
                self._prefetch_scales(kf, s, g, bpe)
            sc = kf.widen(kf.load(vec(st_t, NL), kf.gep(s, kf.mul(g, T * bpe), I8), None, align=2), d.scale_dtype)
            islot = [kf.alloca(i32v, name="iacc") for _ in range(t)]
            for a, v in zip(islot, self._tile_start_sums(kf, xrows, g, lay, zp, NL)):
                b.store(v, a)
            # the words of a group in a loop of U words, its sums carried from word to word: with a
            # group's words unrolled, LLVM summed each row's products as a tree and took the rows one
            # after another, the decoded words spilled and reloaded for each (AVX2 without VNNI at 4 rows
            # 10% behind the float tiles); one row has no such reuse and runs fastest unrolled
            U = wpg if t == 1 else 1
            with kf.loop(0, wpg, U, "tw") as c0:
                iacc = [b.load(a, typ=i32v) for a in islot]
                for u in range(U):
                    word = kf.add(kf.mul(g, wpg), kf.add(c0, u) if u else c0)
                    wp = kf.gep(q, kf.mul(word, 4 * T), I8)
                    if pf:
                        kf.prefetch(kf.gep(wp, kf.i64(pf), I8), TUNING["prefetch_locality"])
                    wv = kf.load(i32v, wp, None, align=4)
                    xo = kf.mul(word, 2 * cw)           # x's int16 values of the word's columns
                    for p in range(cw // 2):
                        pv = wv if p == 0 else b.lshr(wv, ir.Constant(i32v, [bits * p] * NL))
                        pw = b.bitcast(b.and_(pv, mask), i16v)
                        for i, xr in enumerate(xrows):
                            xv = kf.load(I32, kf.gep(xr, kf.add(xo, 4 * p), I8), None, align=4)
                            iacc[i] = kf.dot_s16(iacc[i], pw, b.bitcast(kf.splat(xv, NL), i16v), native, zmm)
                for a, v in zip(islot, iacc):
                    b.store(v, a)
            self._tile_group_sums(kf, xrows, g, lay, sc, [b.load(a, typ=i32v) for a in islot], facc)
        self._tile_finish(kf, d, [q], [s], xf, res, [facc], NL, lay.columns)
        return fn

    def _tile_fn_i8(self, w: int, t: int, first: bool, n: int = 1) -> ir.Function:
        """The int8-activation tile helper (:meth:`_tile_fn`; see the module docstring); the
        columns past the int8 ones stay float (:meth:`_tile_tail`). ``n`` > 1: ``void tile(ptr q,
        ptr s, ptr xa, ptr xf, ptr res, i64 dq, i64 ds)`` for ``n`` consecutive tiles (``dq`` / ``ds``:
        bytes from one tile's words / scales to the next's), read in lockstep group by group, x's
        broadcasts shared, ``res`` in rows of ``16 n`` (:meth:`_tile_streams`)."""
        d = self.plan.weights[w]
        NL, _ = self._tile_shape(t)
        K = self.K_static
        lay = self._int8_rows(d.group_size)
        native = self.simd.native("vnni")
        key = (f"mb.tile.{self._fmt_key(w)}.k{K}.v{NL}.t{t}{'.pf' if first else ''}{f'.s{n}' if n > 1 else ''}"
               f"{self.vnni_tag}{'.zmm' if self.simd.int8_512 else ''}")
        fn, kf = self._new_helper(key, [PTR] * 5 + [I64] * (2 if n > 1 else 0))
        if kf is None:
            return fn
        q, s, xi, xf, res = fn.args[:5]
        b = kf.b
        qs, ss = [q], [s]
        for _ in range(1, n):
            qs.append(kf.gep(qs[-1], fn.args[5], I8))
            ss.append(kf.gep(ss[-1], fn.args[6], I8))
        T, gs, zp = ROW_TILE, d.group_size, d.zero_point
        i8v, f32v = vec(I8, 4 * NL), vec(F32, NL)
        st_t, bpe = mem_type(d.scale_dtype), elem_bytes(d.scale_dtype)
        zmm = self.simd.int8_512 and NL == 16
        low = ir.Constant(i8v, [15] * (4 * NL))
        four = ir.Constant(i8v, [4] * (4 * NL))
        ones = ir.Constant(vec(I16, 2 * NL), [1] * (2 * NL))
        S = lay.step                            # 64: x's int8 values even columns, then odd, per step
        B = gs                                  # columns per loop iteration: one group
        xrows = [kf.gep(xi, kf.i64(i * lay.row_bytes), I8) if i else xi for i in range(t)]
        faccs = [[kf.alloca(f32v, name="tacc") for _ in range(t)] for _ in range(n)]
        for facc in faccs:
            for a in facc:
                b.store(kf.fzero(NL), a)
        pf = TUNING["prefetch_q"] if first else 0

        def xbcast(xr, off):
            v = kf.load(I32, kf.gep(xr, off, I8), None, align=1)
            return b.bitcast(kf.splat(v, NL), i8v)

        with kf.loop(0, lay.columns // B, 1, "tb") as blk:
            k0 = kf.mul(blk, B)
            for gi in range(B // gs):
                g = kf.add(kf.mul(blk, B // gs), gi)
                scs = []
                for sn in ss:
                    if pf:
                        self._prefetch_scales(kf, sn, g, bpe)
                    scs.append(kf.widen(kf.load(vec(st_t, NL), kf.gep(sn, kf.mul(g, T * bpe), I8),
                                                None, align=2), d.scale_dtype))
                cw = 32 // d.bits                      # columns per word
                wide = (self.simd.vnni_512 and NL == 16) if native and self.vnni else zmm
                wpg = gs // cw                         # words per group
                # the words of a group in a loop of U words, the sums carried from word to word: with
                # a group's words unrolled, LLVM took the input rows one after another and spilled the
                # decoded words, reloading them for each row (as in _tile_fn_x16); one row runs fastest
                # unrolled. 4-bit weights without VNNI: U = the 4 words summed in int16 before vpmaddwd.
                U = wpg if t == 1 else (min(4, wpg) if d.bits == 4 and not self.vnni else 1)
                islots = [[kf.alloca(vec(I32, NL), name="iacc") for _ in range(t)] for _ in range(n)]
                for islot in islots:
                    for a, v in zip(islot, self._tile_start_sums(kf, xrows, g, lay, zp, NL)):
                        b.store(v, a)
                with kf.loop(0, wpg, U, "tw") as c0:
                    iaccs = [[b.load(a, typ=vec(I32, NL)) for a in islot] for islot in islots]
                    p16 = [[None] * t for _ in range(n)]
                    for u in range(U):
                        c = kf.add(c0, u) if u else c0                 # word of the group
                        wvs = []
                        for qn in qs:
                            wp = kf.gep(qn, kf.mul(kf.add(kf.mul(g, wpg), c), 4 * T), I8)
                            if pf:
                                kf.prefetch(kf.gep(wp, kf.i64(pf), I8), TUNING["prefetch_locality"])
                            wvs.append(kf.load(i8v, wp, None, align=1))
                        kk = kf.add(k0, kf.mul(c, cw))                 # its first column
                        if d.bits == 8:   # 4 columns of each row, x in column order: one vpdpbusd per row
                            # (without it, the int16-x helper: _tile_fn)
                            for i, xr in enumerate(xrows):
                                xv = xbcast(xr, kk)
                                for iacc, wv in zip(iaccs, wvs):
                                    iacc[i] = kf.dot_u8s8(iacc[i], wv, xv, self.dot_native, wide)
                            continue
                        halves = [(b.and_(wv, low), b.lshr(wv, four)) for wv in wvs]
                        # x's byte: its step, then half the column in it
                        xo = kf.add(b.and_(kk, kf.i64(-S)), b.lshr(b.and_(kk, kf.i64(S - 1)), kf.i64(1)))
                        for i, xr in enumerate(xrows):
                            xlo, xhi = xbcast(xr, xo), xbcast(xr, kf.add(xo, S // 2))
                            for iacc, ps, (lo, hi) in zip(iaccs, p16, halves):
                                if self.vnni:
                                    iacc[i] = kf.dot_u8s8(kf.dot_u8s8(iacc[i], lo, xlo, native, wide), hi, xhi,
                                                          native, wide)
                                else:
                                    p = b.add(kf.maddubs(lo, xlo, zmm), kf.maddubs(hi, xhi, zmm))
                                    ps[i] = p if ps[i] is None else b.add(ps[i], p)
                        if not self.vnni and (u % 4 == 3 or u == U - 1):
                            for iacc, ps in zip(iaccs, p16):
                                for i in range(t):
                                    iacc[i] = b.add(iacc[i], kf.madd_wd(ps[i], ones, zmm))
                                    ps[i] = None
                    for islot, iacc in zip(islots, iaccs):
                        for a, v in zip(islot, iacc):
                            b.store(v, a)
                for islot, sc, facc in zip(islots, scs, faccs):
                    iacc = [b.load(a, typ=vec(I32, NL)) for a in islot]
                    self._tile_group_sums(kf, xrows, g, lay, sc, iacc, facc)
        self._tile_finish(kf, d, qs, ss, xf, res, faccs, NL, lay.columns)
        return fn
