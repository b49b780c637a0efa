"""The row-tiled int8-activation kernel: 4-bit weights stored in tiles of 16 rows
(``row_tile=16``, :mod:`builder.ir.op.quantize`), x quantized once per call to int8 per group
(:class:`~.int8_rows.Int8Rows`), every batch size.

A tile's packed words are stored word-major: word ``w`` (columns ``8w .. 8w+7``) of its 16 rows
side by side, 64 bytes, so one 512-bit load (two 256-bit ones) holds 8 columns of 16 rows, one
row per int32 lane -- rows in lanes, as llama.cpp's repacked ``Q4_0`` blocks (``block_q4_0x8``)
and onnxruntime's MatMulNBits packed panels lay them out. Per 8 columns the low nibbles
(even columns) and the high nibbles (odd columns) are multiplied with 4 int8 values of x broadcast
to every lane: one ``vpdpbusd`` each (VNNI), or ``vpmaddubsw`` pairs summed in int16 over up to 4
such steps (at most ``8 * 2 * 15 * 127 = 30480``: no saturation) and widened once with
``vpmaddwd``. The int32 sums of a group start at ``-zero_point * sum q`` (x's per-group table,
one broadcast load) and leave the integers once per group and input row: ``acc += float(isum) *
scale * d`` with the 16 rows' scales (stored transposed, one vector per group) -- 8 integer dot
instructions and 3 float ones per 512 products, where the row-major GEMV needs 2 and 3 per 128
(its lanes hold 8 columns of one row, so every step needs its own scales). (The zero point as a
float FMA of ``scale * (d * sum q)`` per group and row: LlamaMLP q4f16_1+a8 batch 128 2% slower.) Weights are decoded once per
vector and block of ``MB`` input rows (8 with 32 registers, 4 with 16), so batch 2-8 read and
decode the weights once; larger batches loop over blocks of ``MB`` rows inside each tile, whose
words stay in L1 / L2 -- no per-call packing (the row-major int8 GEMM unpacked every panel per
call).

The result is the same as the row-major int8 GEMV / GEMM's: the same columns are quantized (whole
64-column steps inside whole groups) and the same integer sums formed; the columns past them stay
float (``x * dequantized weight``, scalar). A mixin of :class:`~.emitter.LinearEmitter`."""
from __future__ import annotations

from math import gcd

from llvmlite import ir

from ...llvm_emit import F32, I8, I16, I32, PTR
from ..simd import KFunc, vec
from .plan import TUNING

__all__ = ["GemvInt8Tiles", "TILE_ROWS"]

#: Rows per tile (the ``row_tile`` the kernel reads).
TILE_ROWS = 16


class GemvInt8Tiles:
    """The row-tiled int8-activation kernel family (see the module docstring)."""

    def _tile_shape(self) -> tuple[int, int]:
        """``(NL, MB)``: int32 lanes per vector (16 with the 16-lane shape, else 8: a tile is
        ``16 / NL`` vectors) and input rows per block (``tile_rows_x_i8``; 0: 8 with 32
        registers, 4 with 16)."""
        nl = 16 if self.lanes >= 16 and TUNING["tile_lanes_i8"] != 8 else 8
        mb = TUNING["tile_rows_x_i8"] or (8 if self.simd.registers >= 32 else 4)
        return nl, max(1, mb)

    def _tiles(self, kf: KFunc, st, u0, u1) -> None:
        """Tiles ``u0 .. u1`` of 16 weight rows: per tile and block of ``MB`` input rows, the
        tile helper per weight and vector (:meth:`_tile_fn`), then the epilogue of each input row."""
        b = kf.b
        T = TILE_ROWS
        NL, MB = self._tile_shape()
        res = kf.alloca(F32, self.nw * MB * T, name="res", align=64)
        resw = [kf.gep(res, kf.i64(w * MB * T), F32) if w else res for w in range(self.nw)]
        ctx = st.fn.args[0]
        wargs = [self._weight_args(st, w) for w in range(self.nw)]
        xis = [b.inttoptr(st.extra[f"xi{self.ikeys.index(self.qint[w])}"], PTR) for w in range(self.nw)]
        lays = [self._int8_rows(self.qint[w]) for w in range(self.nw)]
        fns = {(w, t, h): self._tile_fn(w, t, h == 0) for w in range(self.nw) for t in range(1, MB + 1)
               for h in range(T // NL)}
        sbytes = [{"float32": 4}.get(self.plan.weights[w].scale_dtype, 2) for w in range(self.nw)]
        with kf.loop(u0, u1, 1, "tile") as tile:
            n0 = kf.mul(tile, T)
            qt, stl = [], []
            for w in range(self.nw):
                q, s, words, groups = wargs[w]
                qt.append(kf.gep(q, kf.mul(tile, kf.mul(words, 4 * T)), I8))
                stl.append(kf.gep(s, kf.mul(tile, kf.mul(groups, sbytes[w] * T)), I8))
            with kf.loop(0, st.M, MB, "mb") as m0:
                t_eff = kf.smin(kf.sub(st.M, m0), MB)

                def block(t: int) -> None:
                    for w in range(self.nw):
                        xi = kf.gep(xis[w], kf.mul(m0, lays[w].row_bytes), I8)
                        xf = kf.gep(st.xf, kf.mul(m0, st.K), F32)
                        for h in range(T // NL):
                            kf.b.call(fns[(w, t, h)], [kf.gep(qt[w], kf.i64(4 * NL * h), I8),
                                                       kf.gep(stl[w], kf.i64(sbytes[w] * NL * h), I8),
                                                       xi, xf, kf.gep(resw[w], kf.i64(NL * h), F32)])

                kf.switch_const(t_eff, {t: (lambda t=t: block(t)) for t in range(1, MB + 1)}, "tb")
                with kf.loop(0, t_eff, 1, "te") as i:
                    accs = [kf.gep(resw[w], kf.mul(i, T), F32) for w in range(self.nw)]
                    accs += [accs[0]] * (2 - self.nw)
                    b.call(self.epi_fn, [ctx, kf.add(m0, i), n0, kf.i64(T)] + accs)

    def _tile_fn(self, w: int, t: int, first: bool) -> ir.Function:
        """``void tile(ptr q, ptr s, ptr xi, ptr xf, ptr res)``: ``res[i * 16 + r] = sum_k x[i, k]
        W[r, k]`` for the ``NL`` rows of one vector of a tile (``q`` / ``s``: that vector's first
        word / scale in the tile) and ``t`` input rows (``xi``: their :class:`Int8Rows`, ``xf``:
        their float32 values, for the columns that stay float). ``first``: the tile's first vector,
        which prefetches the tile's lines ``prefetch_q`` bytes ahead. Shared by every kernel of the
        module with this format, ``K`` and ``t``."""
        d = self.plan.weights[w]
        NL, _ = self._tile_shape()
        K = self.K_static
        lay = self._int8_rows(d.group_size)
        native = self.simd.native("vnni")
        key = (f"mb.tile.{self._fmt_key(w)}.k{K}.v{NL}.t{t}{'.pf' if first else ''}"
               f"{self.vnni_tag}{'.zmm' if self.simd.int8_512 else ''}")
        fn, kf = self._new_helper(key, [PTR] * 5)
        if kf is None:
            return fn
        q, s, xi, xf, res = fn.args
        b = kf.b
        T, gs, zp = TILE_ROWS, d.group_size, d.zero_point
        i8v, i32v, f32v = vec(I8, 4 * NL), vec(I32, NL), vec(F32, NL)
        st_t = {"float32": F32, "float16": ir.HalfType()}.get(d.scale_dtype, I16)
        zmm = self.simd.int8_512 and NL == 16
        low = ir.Constant(i8v, [15] * (4 * NL))
        four = ir.Constant(i8v, [4] * (4 * NL))
        ones = ir.Constant(vec(I16, 2 * NL), [1] * (2 * NL))
        S = lay.step                            # 64: x's int8 values even columns, then odd, per step
        B = gs * S // gcd(gs, S)                # columns per loop iteration: whole groups and steps
        xrows = [kf.gep(xi, kf.i64(i * lay.row_bytes), I8) if i else xi for i in range(t)]
        facc = [kf.alloca(f32v, name="tacc") for _ in range(t)]
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
                sc = kf.widen(kf.load(vec(st_t, NL), kf.gep(s, kf.mul(g, T * (4 if st_t == F32 else 2)), I8),
                                      None, align=2), d.scale_dtype)
                if zp:   # the zero point: the integer sums start at -zero_point * sum q (x's table)
                    iacc = [kf.splat(kf.load(I32, kf.gep(xr, kf.add(kf.mul(g, 4), lay.zsum_off), I8), None,
                                             align=4), NL) for xr in xrows]
                else:
                    iacc = [ir.Constant(i32v, [0] * NL)] * t
                p16 = [None] * t
                for c in range(gs // 8):
                    off = gi * gs + 8 * c              # column of this word, from k0
                    word = kf.add(kf.sdiv(k0, 8), off // 8)
                    wp = kf.gep(q, kf.mul(word, 4 * T), I8)
                    if pf:
                        kf.prefetch(kf.gep(wp, kf.i64(pf), I8), TUNING["prefetch_locality"])
                    wv = kf.load(i8v, wp, None, align=1)
                    lo, hi = b.and_(wv, low), b.lshr(wv, four)
                    xo = kf.add(k0, (off // S) * S + (off % S) // 2)
                    for i, xr in enumerate(xrows):
                        xlo, xhi = xbcast(xr, xo), xbcast(xr, kf.add(xo, S // 2))
                        if self.vnni:
                            wide = (self.simd.vnni_512 and NL == 16) if native else zmm
                            iacc[i] = kf.dot_u8s8(kf.dot_u8s8(iacc[i], lo, xlo, native, wide), hi, xhi, native, wide)
                        else:
                            p = b.add(kf.maddubs(lo, xlo, zmm), kf.maddubs(hi, xhi, zmm))
                            p16[i] = p if p16[i] is None else b.add(p16[i], p)
                    if not self.vnni and (c % 4 == 3 or c == gs // 8 - 1):
                        for i in range(t):
                            iacc[i] = b.add(iacc[i], kf.madd_wd(p16[i], ones, zmm))
                            p16[i] = None
                for i, xr in enumerate(xrows):
                    dv = kf.load(F32, kf.gep(xr, kf.add(kf.mul(g, 4), lay.d_off), I8), None, align=4)
                    prod = b.fmul(sc, kf.splat(dv, NL), flags=KFunc.FM)
                    b.store(kf.fma(b.sitofp(iacc[i], f32v), prod, b.load(facc[i], typ=f32v)), facc[i])
        outs = [kf.gep(res, kf.i64(i * T), F32) if i else res for i in range(t)]
        for i in range(t):
            kf.store(b.load(facc[i], typ=f32v), outs[i], None, align=4)
        if lay.columns < K:
            # the columns past the int8 ones: float x times the dequantized weight, scalar
            bpe = 4 if st_t == F32 else 2
            with kf.loop(lay.columns, K, 1, "tk") as k:
                wbase = kf.gep(q, kf.mul(kf.sdiv(k, 8), 4 * T), I8)
                shift = b.trunc(kf.mul(b.srem(k, kf.i64(8)), 4), I32)
                sp = kf.gep(s, kf.mul(kf.sdiv(k, gs), T * bpe), I8)
                xv = [kf.load(F32, kf.gep(xf, kf.add(k, i * K) if i else k, F32), None, align=4)
                      for i in range(t)]
                for r in range(NL):
                    wr = kf.load(I32, kf.gep(wbase, kf.i64(4 * r), I8), None, align=4)
                    nib = b.and_(b.lshr(wr, shift), ir.Constant(I32, 15))
                    sv = kf.load(st_t, kf.gep(sp, kf.i64(r * bpe), I8), None, align=2)
                    scale = b.extract_element(kf.widen(_one(b, sv), d.scale_dtype), ir.Constant(I32, 0))
                    wval = b.fmul(b.sitofp(b.sub(nib, ir.Constant(I32, zp)), F32), scale)
                    for i in range(t):
                        p = kf.gep(outs[i], kf.i64(r), F32)
                        b.store(kf.fma(xv[i], wval, b.load(p, typ=F32)), p)
        b.ret_void()
        kf.finish()
        return fn


def _one(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A scalar as a one-element vector (for :meth:`KFunc.widen`)."""
    t = ir.VectorType(v.type, 1)
    return b.insert_element(ir.Constant(t, ir.Undefined), v, ir.Constant(I32, 0))
