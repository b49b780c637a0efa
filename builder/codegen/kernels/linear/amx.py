"""The GEMM on Intel AMX tiles (plan variants ``amx`` and ``amx3``): ``tdpbf16ps`` multiplies 16 x 32
bfloat16 tiles of x by 32 x 16 bfloat16 tiles of the weights into 16 x 16 float32 accumulator tiles, 16
times the products of a 512-bit ``vdpbf16ps`` per instruction.

Operands (Intel's AMX programming reference, "Intel Advanced Matrix Extensions"; the tile layout of
oneDNN's and llama.cpp's AMX kernels):

* **x** becomes ``A'``, one row of ``Kp`` bfloat16 per row of x (``Kp = split * K`` rounded up to the
  32 columns of a tile, zero beyond; rows up to a multiple of 32, zero), by all threads before the
  GEMM (:meth:`GemmAmx._amx_x_task`);
* the **weights** are packed per panel of ``NR`` (64) outputs and block of columns (``B'`` tiles of
  about ``amx_b_bytes``) as the float GEMM packs them (:meth:`~.gemm.GemmFloat._pack_fn`,
  :meth:`~.tiles.GemvTiles._pack_tiles_fn`: float32, 16-bit, row-tiled or group-quantized weights
  alike), then turned into ``B'`` tiles
  (:meth:`GemmAmx._amx_pack_b_fn`): per 16 outputs and 32 columns of ``B'`` one 1 KiB tile in the
  pair-interleaved ("VNNI") order ``tdpbf16ps`` reads, row ``r`` holding columns ``2r, 2r + 1`` of
  the 16 outputs. bfloat16 weights in rows with an even K skip the float32 round trip: their 32-bit
  words are column pairs, so the words panel of the bfloat16 GEMM (``_pack_fn(words=True)``) is
  already ``B'`` (a tile: 16 pairs of 16 outputs, rows ``NR`` words apart; ``tileloadd`` takes the
  stride), and x's bfloat16 rows are copied as they are (Xeon, 2 threads, against the float32 round
  trip: 32 x 4096 -> 11008 10.0 -> 5.9 ms, 128 rows 20.2 -> 13.1, 328 x 384 -> 1536 584 -> 516 us);
* the **micro-kernel** (:meth:`GemmAmx._amx_micro_fn`) keeps 2 x 2 accumulator tiles (32 rows x 32
  outputs) and per 32 columns loads two tiles of ``A'`` and two of ``B'`` for four ``tdpbf16ps``:
  eight tiles, the whole register file; a panel of 64 outputs is two calls. Its accumulators go to
  the float GEMM's ``cs`` rows, so the epilogue of each 32-row block is the float GEMM's.

``split`` (the plan variant): **1** (``amx``) multiplies bfloat16 roundings of both operands, exact for
a bfloat16 model's x and weights (products of two bfloat16 are exact in float32) and PyTorch's
``medium`` float32 matmul precision otherwise; **3** (``amx3``, precision ``high``) writes each float32
value ``v`` as ``hi + lo`` (``hi = bf16(v)``, ``lo = bf16(v - hi)``, about 16 significant bits) and
puts three columns per column of x into ``A'`` (``hi, lo, hi``) and of the weights into ``B'`` (``hi,
hi, lo``): one GEMM of depth ``3 K`` sums ``hi*hi + lo*hi + hi*lo`` (the "bf16x3" scheme of Henry,
Tang and Heinecke, "Leveraging the bfloat16 Artificial Intelligence Datatype For Higher-Precision
Computations", ARITH 2019; the ``lo*lo`` term, below 2**-16 relative, is left out). Measured on an
Intel Xeon (family 6 model 167), one core, operands in L2, K = 1536: 1.5 bfloat16 TFLOP/s = 500 GFLOP/s of
float32 work with ``split`` 3, 2.3x the core's float32 FMA peak; relative error of a 1536-term dot
product about 4e-6 (float32 8e-7).

The tile configuration (palette 1, eight tiles of 16 rows x 64 bytes) is loaded once per task
(``ldtilecfg`` costs about 0.17 us: a third of a 12-step micro-kernel call when each call loaded it)
and the tile state released at the end of the task (``tilerelease``), so no tile state lives between
kernel calls. ``MB_SIMD_EMULATE=amx`` emits the micro-kernel as float32 loops over the same tiles,
which any host runs (tests).

The emitter takes this GEMM from ``amx_min_rows`` (16) rows of x with ``split`` 1 and from
``amx3_min_rows`` (64) with ``split`` 3, the FMA kernels below. In a GEMM of 328 x 384 -> 1536 + GELU at
``split`` 3 (Xeon, 2 threads, 790-880 us against 1353 in float32) the micro-kernels took about 456 us,
the exact-GELU epilogue 150, x's split 15, the packing the rest; the micro-kernel is bound by its tile
loads (4 KiB per four ``tdpbf16ps``: 35-43 ns per step from L2, 26 from L1, against 21 ns of
``tdpbf16ps``).

A mixin of :class:`~.emitter.LinearEmitter`: its methods use the emitter's state (plan, tile sizes,
shared-helper cache)."""
from __future__ import annotations

from llvmlite import ir

from ...llvm_emit import F32, I1, I8, I16, I32, I64, PTR, round_to_bf16_bits
from ..decode import scalar_to_f32
from ..simd import vec
from .plan import TUNING

__all__ = ["GemmAmx", "AMX_ROWS"]

AMX_ROWS = 32
"""Rows of x per AMX micro-kernel call (two 16-row tiles)."""

_TILE = 1024   # bytes of a tile: 16 rows x 64 bytes
_VOID = ir.VoidType()


class GemmAmx:
    """The GEMM on Intel AMX tiles (plan variants ``amx`` and ``amx3``): ``tdpbf16ps`` multiplies 16 x 32"""

    # ---------------------------------------------------------------------------------------- tiles

    def _amx_config(self) -> ir.GlobalVariable:
        """The module's 64-byte tile configuration: palette 1, tiles 0-7 of 16 rows x 64 bytes."""
        name = "mb.amx.tilecfg"
        g = self.module.globals.get(name)
        if g is not None:
            return g
        data = [0] * 64
        data[0] = 1
        for t in range(8):
            data[16 + 2 * t] = 64      # colsb (bytes per row), little-endian u16
            data[48 + t] = 16          # rows
        arr = ir.ArrayType(I8, 64)
        g = ir.GlobalVariable(self.module, arr, name)
        g.initializer = ir.Constant(arr, bytearray(data))
        g.global_constant = True
        g.linkage = "internal"
        g.align = 64
        return g

    def _amx_micro_fn(self) -> ir.Function:
        """``void micro(ptr a, i64 lda, ptr b0, ptr b1, i64 ldb, i64 bstep, i64 steps, ptr c, i64 ldc,
        i1 first)``: ``c[i, 0:32] (+)= sum_k A'[i, k] B'[k, 0:32]`` for 32 rows ``i`` (``a``: row-major
        bfloat16, ``lda`` bytes per row), ``steps`` tiles of 32 columns; ``b0`` / ``b1`` the first tile
        of outputs 0-15 / 16-31 (rows of 64 bytes ``ldb`` apart), the next one ``bstep`` bytes on;
        ``c`` float32 rows of ``ldc`` bytes, overwritten when ``first``. The caller has loaded the tile configuration
        (:meth:`_gemm_amx`, once per task: ``ldtilecfg`` per call took a third of a 12-step call)."""
        native = self.simd.native("amx")
        fn, kf = self._new_helper("mb.amx.micro" + ("" if native else ".emulated"),
                                  [PTR, I64, PTR, PTR, I64, I64, I64, PTR, I64, I1])
        if kf is None:
            return fn
        if native:
            self._amx_micro_native(kf, fn)
        else:
            self._amx_micro_emulated(kf, fn)
        kf.finish()
        return fn

    def _amx_micro_native(self, kf, fn) -> None:
        b = kf.b
        a, lda, b0, b1, ldb, bstep, steps, c, ldc, first = fn.args
        load = kf.declare("llvm.x86.tileloadd64", _VOID, [I8, PTR, I64])
        store = kf.declare("llvm.x86.tilestored64", _VOID, [I8, PTR, I64])
        zero = kf.declare("llvm.x86.tilezero", _VOID, [I8])
        dot = kf.declare("llvm.x86.tdpbf16ps", _VOID, [I8, I8, I8])

        def t(i: int) -> ir.Constant:
            return ir.Constant(I8, i)

        row16 = kf.mul(ldc, 16)
        # accumulators: tmm0 rows 0-15 x outputs 0-15, tmm1 x 16-31, tmm2 / tmm3 rows 16-31
        cptr = [c, kf.gep(c, kf.i64(64), I8), kf.gep(c, row16, I8), kf.gep(kf.gep(c, row16, I8), kf.i64(64), I8)]

        def init_zero():
            for i in range(4):
                kf.b.call(zero, [t(i)])

        def init_load():
            for i in range(4):
                kf.b.call(load, [t(i), cptr[i], ldc])

        kf.if_else(first, init_zero, init_load, "cinit")
        a1 = kf.gep(a, kf.mul(lda, 16), I8)
        with kf.loop(0, steps, 1, "ks") as s:
            ao = kf.mul(s, 64)
            bo = kf.mul(s, bstep)
            b.call(load, [t(4), kf.gep(a, ao, I8), lda])
            b.call(load, [t(6), kf.gep(b0, bo, I8), ldb])
            b.call(dot, [t(0), t(4), t(6)])
            b.call(load, [t(5), kf.gep(a1, ao, I8), lda])
            b.call(dot, [t(2), t(5), t(6)])
            b.call(load, [t(7), kf.gep(b1, bo, I8), ldb])
            b.call(dot, [t(1), t(4), t(7)])
            b.call(dot, [t(3), t(5), t(7)])
        for i in range(4):
            b.call(store, [t(i), cptr[i], ldc])
        b.ret_void()

    def _amx_micro_emulated(self, kf, fn) -> None:
        """The same arithmetic in float32 loops: per tile row ``r`` of a step, ``c[i, n] +=
        A'[i, 2r] B'[r, n, 0] + A'[i, 2r + 1] B'[r, n, 1]`` (bfloat16 products are exact in
        float32, as in ``tdpbf16ps``)."""
        b = kf.b
        a, lda, b0, b1, ldb, bstep, steps, c, ldc, first = fn.args
        L = 16
        vt = vec(F32, L)

        with kf.loop(0, AMX_ROWS, 1, "ei") as i:
            crow = kf.gep(c, kf.mul(i, ldc), I8)
            arow = kf.gep(a, kf.mul(i, lda), I8)
            for g, bg in enumerate((b0, b1)):
                cp = kf.gep(crow, kf.i64(64 * g), I8)
                acc = kf.alloca(vt, name="acc")
                b.store(b.select(first, kf.fzero(L), b.load(cp, typ=vt, align=4)), acc)
                with kf.loop(0, steps, 1, "es") as s:
                    with kf.loop(0, 16, 1, "er") as r:
                        k2 = kf.add(kf.mul(s, 32), kf.mul(r, 2))
                        x0 = kf.splat(scalar_to_f32(kf, kf.load(I16, arow, k2, align=2), "bfloat16"), L)
                        x1 = kf.splat(scalar_to_f32(kf, kf.load(I16, arow, kf.add(k2, 1), align=2), "bfloat16"), L)
                        tile_row = kf.gep(bg, kf.add(kf.mul(s, bstep), kf.mul(r, ldb)), I8)
                        pairs = b.load(tile_row, typ=vec(I16, 2 * L), align=2)
                        half = [ir.Constant(vec(I32, L), list(range(e, 2 * L, 2))) for e in (0, 1)]
                        w0, w1 = (kf.widen(b.shuffle_vector(pairs, pairs, m), "bfloat16") for m in half)
                        s2 = b.fadd(b.fmul(x0, w0), b.fmul(x1, w1))
                        b.store(b.fadd(b.load(acc, typ=vt), s2), acc)
                b.store(b.load(acc, typ=vt), cp, align=4)
        b.ret_void()

    # -------------------------------------------------------------------------------- bfloat16 splits

    def _amx_bf16(self, kf, v):
        """``<16 x float>`` -> ``(hi, lo)`` ``<16 x i16>`` bfloat16 bits: ``hi`` the nearest-even
        rounding of ``v`` (:func:`~builder.codegen.llvm_emit.round_to_bf16_bits`) and ``lo`` that of
        ``v - hi`` (exact in float32; zero where that is not a number: ``inf - inf``); NaN stays a NaN."""
        b = kf.b
        h = round_to_bf16_bits(b, v)
        d = b.fsub(v, kf.widen(h, "bfloat16"))
        return h, round_to_bf16_bits(b, b.select(b.fcmp_ordered("ord", d, d), d, kf.fzero(16)))

    @staticmethod
    def _interleave(b, x, y) -> ir.Value:
        """``<16 x i16>`` x2 -> ``<32 x i16>`` ``x0, y0, x1, y1, ...``."""
        return b.shuffle_vector(x, y, ir.Constant(vec(I32, 32), [i // 2 + 16 * (i % 2) for i in range(32)]))

    def _amx_pack_b_fn(self, split: int) -> ir.Function:
        """``void packb(ptr bp, i64 kc, ptr bt, i64 steps)``: the float32 panel ``bp[kk][0:NR]``
        (``kk < kc``, as :meth:`~.gemm.GemmFloat._pack_fn` writes it) as ``B'`` tiles: for each
        group ``g`` of 16 outputs ``steps`` consecutive 1 KiB tiles at ``bt + g * steps KiB``;
        pair ``p`` of ``B'`` columns is row ``p % 16`` of tile ``p // 16``. ``split`` 1: column
        ``kk`` is ``bf16(w)``; 3: columns ``3kk, 3kk+1, 3kk+2`` are ``hi, hi, lo``. Pairs past the
        data up to ``16 steps`` are zero."""
        NR = self.NR
        G = NR // 16
        fn, kf = self._new_helper(f"mb.amx.packb{split}.n{NR}", [PTR, I64, PTR, I64])
        if kf is None:
            return fn
        b = kf.b
        bp, kc, bt, steps = fn.args
        vt = vec(F32, 16)
        zero16 = ir.Constant(vec(I16, 32), [0] * 32)

        def put(g, p, row):   # pair p of group g
            s, r = kf.sdiv(p, 16), b.srem(p, kf.i64(16))
            off = kf.add(kf.mul(kf.add(kf.mul(kf.i64(g), steps), s), _TILE), kf.mul(r, 64))
            b.store(row, kf.gep(bt, off, I8), align=64)

        with kf.loop(0, kc, 2, "kk") as kk:
            has2 = kf.lt(kf.add(kk, 1), kc)
            for g in range(G):
                v0 = kf.load(vt, bp, kf.add(kf.mul(kk, NR), g * 16), align=64)
                v1 = kf.load(vt, bp, kf.add(kf.mul(kf.add(kk, 1), NR), g * 16), align=64)
                v1 = b.select(has2, v1, kf.fzero(16))   # (the row past kc is not read as data)
                h0, l0 = self._amx_bf16(kf, v0)
                h1, l1 = self._amx_bf16(kf, v1)
                if split == 1:
                    put(g, kf.sdiv(kk, 2), self._interleave(b, h0, h1))
                else:
                    p = kf.sdiv(kf.mul(kk, 3), 2)   # kk even: B' columns 3kk .. 3kk + 5
                    put(g, p, self._interleave(b, h0, h0))
                    put(g, kf.add(p, 1), self._interleave(b, l0, h1))
                    put(g, kf.add(p, 2), self._interleave(b, h1, l1))
        pairs = kf.mul(kf.sdiv(kf.add(kc, 1), 2), split)
        with kf.loop(pairs, kf.mul(steps, 16), 1, "pz") as p:
            for g in range(G):
                put(g, p, zero16)
        b.ret_void()
        kf.finish()
        return fn

    def _amx_row_bytes(self, kf, K):
        """Bytes per row of ``A'``: ``split * K`` bfloat16 rounded up to whole tiles of 32."""
        return kf.mul(kf.mul(kf.sdiv(kf.add(kf.mul(K, self.amx_split), 31), 32), 32), 2)

    def _amx_x_task(self) -> ir.Function:
        """``i32 xprep_amx(ptr ctx, i64 idx)``: task ``idx`` of the context's ``xtasks_amx`` writes
        its share of the rows of ``A'`` (``xa``): from the float32 view of x per 16 columns one load,
        the bfloat16 split and (``split`` 3) one three-way interleave ``hi, lo, hi``; bfloat16 x on
        the words path (``amx_words``) row by row as it is. The columns past ``split * K`` and the
        rows past ``M`` (to a multiple of 32) are zero."""
        kf, st = self._open("xprep_amx", I32, [I64], inline=True)
        b = kf.b
        split = self.amx_split
        idx, n = st.args[0], st.extra["xtasks_amx"]
        M, K = st.M, st.K
        mpad = kf.mul(kf.sdiv(kf.add(M, AMX_ROWS - 1), AMX_ROWS), AMX_ROWS)
        m_lo = b.sdiv(kf.mul(idx, mpad), n)
        m_hi = b.sdiv(kf.mul(kf.add(idx, 1), mpad), n)
        xa = b.inttoptr(st.extra["xa"], PTR)
        rowb = self._amx_row_bytes(kf, K)
        kv = kf.sub(K, b.srem(K, kf.i64(16)))
        vt = vec(F32, 16)
        mask3 = ir.Constant(vec(I32, 48), [(i // 3) + (16 if i % 3 == 1 else 0) for i in range(48)])
        memset = kf.declare("llvm.memset.p0.i64", _VOID, [PTR, I8, I64, I1])

        def zero(ptr, nbytes):   # (a loop of 16-bit stores: 24 padded rows of MiniLM's K = 384 took ~25 us)
            kf.b.call(memset, [ptr, ir.Constant(I8, 0), nbytes, ir.Constant(I1, 0)])

        memcpy = kf.declare("llvm.memcpy.p0.p0.i64", _VOID, [PTR, PTR, I64, I1])
        with kf.loop(m_lo, m_hi, 1, "am") as m:
            dst = kf.gep(xa, kf.mul(m, rowb), I8)
            inside = kf.lt(m, M)

            def copy():   # bfloat16 x (the bfloat16 weights' path): its rows as they are
                src = kf.gep(st.ptrs[self.plan.x], kf.mul(m, K), I16)
                kf.b.call(memcpy, [dst, src, kf.mul(K, 2), ir.Constant(I1, 0)])
                zero(kf.gep(dst, kf.mul(K, 2), I8), kf.sub(rowb, kf.mul(K, 2)))

            def data():
                src = kf.gep(st.xf, kf.mul(m, K), F32)
                with kf.loop(0, kv, 16, "ak") as k:
                    h, lo = self._amx_bf16(kf, kf.load(vt, src, k, align=4))
                    if split == 1:
                        kf.b.store(h, kf.gep(dst, k, I16), align=2)
                    else:
                        kf.b.store(kf.b.shuffle_vector(h, lo, mask3), kf.gep(dst, kf.mul(k, 3), I16), align=2)
                with kf.loop(kv, K, 1, "at") as k:   # the last K % 16 columns
                    v = kf.load(F32, src, k, align=4)
                    h, lo = self._amx_bf16(kf, kf.splat(v, 16))
                    parts = [h] if split == 1 else [h, lo, h]
                    for j, part in enumerate(parts):
                        kf.store(kf.b.extract_element(part, ir.Constant(I32, 0)), dst,
                                 kf.add(kf.mul(k, split), j), align=2)
                used = kf.mul(K, 2 * split)
                zero(kf.gep(dst, used, I8), kf.sub(rowb, used))

            def pad():
                zero(dst, rowb)

            kf.if_else(inside, copy if self.amx_words else data, pad, "arow")
        b.ret(ir.Constant(I32, 0))
        kf.finish()
        return st.fn

    # ---------------------------------------------------------------------------------------- GEMM

    def _gemm_amx(self, kf, st, u0, u1) -> None:
        """Units ``[u0, u1)`` of the GEMM on AMX tiles, in the float GEMM's units (a panel of ``NR``
        outputs of a row chunk, :meth:`~.gemm.GemmFloat._gemm`): per weight and block of columns (its
        ``B'`` about ``amx_b_bytes``) the panel is packed in float32 and turned into ``B'`` tiles (or,
        bfloat16 weights, packed as 32-bit words, which are the tiles), and the micro-kernel runs
        down the chunk's rows 32 at a time (two calls per 64 outputs) into the
        ``cs`` accumulators (rows to a multiple of 32); the last block runs each row block's
        epilogue. A block's ``B'`` tiles stay in L1 while the row blocks use them: micro-kernel calls
        over all of K (the accumulators in tiles from the first column to the last, ``B'`` streamed
        from L2) were slower, 930 against 790 us on 328 x 384 -> 1536 at ``high`` (Xeon, 2 threads)."""
        b = kf.b
        NR = self.NR
        G = NR // 16
        split = self.amx_split
        KB = max(32, TUNING["amx_b_bytes"] // (2 * split * NR) // 32 * 32)   # B' of a block: about amx_b_bytes
        steps_max = -(-split * KB // 32)
        M, N, K = st.M, st.N, st.K
        mc = st.extra.get("mc", M)
        mcp = kf.mul(kf.sdiv(kf.add(mc, AMX_ROWS - 1), AMX_ROWS), AMX_ROWS)
        npanels = kf.sdiv(kf.add(N, NR - 1), NR)
        ctx = st.fn.args[0]
        free = kf.declare("free", _VOID, [PTR])
        bt_bytes = G * steps_max * _TILE
        cs_floats = kf.mul(kf.mul(mcp, NR), self.nw)
        nbytes = kf.add(kf.mul(kf.add(cs_floats, KB * NR), 4), bt_bytes + 128)
        raw, bp = self._workspace(kf, nbytes)
        bt = kf.gep(bp, kf.i64(KB * NR * 4), I8)
        cs = kf.gep(bt, kf.i64(bt_bytes), I8)
        micro = self._amx_micro_fn()
        words = self.amx_words
        packb = None if words else self._amx_pack_b_fn(split)
        packs = [self._pack_tiles_fn(w) if self.tiled else self._pack_fn(w, words=words) for w in range(self.nw)]
        wargs = [self._weight_args(st, w) for w in range(self.nw)]
        if words:   # the panel of 32-bit words: pairs of columns (ld, K and the block counted in words)
            wargs = [[a[0], a[1], kf.sdiv(a[2], 2), a[3]] for a in wargs]
        memset = kf.declare("llvm.memset.p0.i64", _VOID, [PTR, I8, I64, I1])
        xa = b.inttoptr(st.extra["xa"], PTR)
        lda = self._amx_row_bytes(kf, K)
        if self.simd.native("amx"):
            b.call(kf.declare("llvm.x86.ldtilecfg", _VOID, [PTR]), [b.bitcast(self._amx_config(), PTR)])
        ldc = kf.i64(NR * 4)
        with kf.loop(u0, u1, 1, "unit") as u:
            chunk = kf.sdiv(u, npanels)
            p = kf.sub(u, kf.mul(chunk, npanels))
            mlo = kf.mul(chunk, mc)
            Mc = kf.smin(kf.sub(M, mlo), mc)
            Mcp = kf.mul(kf.sdiv(kf.add(Mc, AMX_ROWS - 1), AMX_ROWS), AMX_ROWS)
            n0 = kf.mul(p, NR)
            nr_eff = kf.smin(kf.sub(N, n0), NR)
            with kf.if_(b.icmp_signed("==", K, kf.i64(0)), "k0"):
                with kf.loop(0, kf.mul(kf.mul(Mcp, NR), self.nw), 1, "z") as i:
                    kf.store(ir.Constant(F32, 0.0), cs, i, align=4)
            for w in range(self.nw):
                csw = kf.gep(cs, kf.mul(kf.mul(Mcp, NR), w), F32) if w else cs
                with kf.loop(0, K, KB, "kb") as kb:
                    kc = kf.smin(kf.sub(K, kb), KB)
                    steps = kf.sdiv(kf.add(kf.mul(kc, split), 31), 32)
                    if words:
                        # bfloat16 weights: the words panel bp[pair][0:NR] is already B' (a tile: 16
                        # pairs of 16 outputs, rows NR words apart); pairs past the block's zero
                        kw = kf.sdiv(kc, 2)   # (K is even)
                        b.call(packs[w], wargs[w] + [kf.sdiv(K, 2), n0, nr_eff, kf.sdiv(kb, 2), kw, bp])
                        tail = kf.gep(bp, kf.mul(kw, NR * 4), I8)
                        b.call(memset, [tail, ir.Constant(I8, 0), kf.mul(kf.sub(kf.mul(steps, 16), kw), NR * 4),
                                        ir.Constant(I1, 0)])
                        btiles, ldb, bstep, gstep = bp, kf.i64(NR * 4), kf.i64(16 * NR * 4), kf.i64(64)
                    else:
                        b.call(packs[w], wargs[w] + [K, n0, nr_eff, kb, kc, bp])
                        b.call(packb, [bp, kc, bt, steps])
                        btiles, ldb, bstep, gstep = bt, kf.i64(64), kf.i64(_TILE), kf.mul(steps, _TILE)
                    first = b.icmp_signed("==", kb, kf.i64(0))
                    last = b.icmp_signed(">=", kf.add(kb, KB), K)
                    done = last if w == self.nw - 1 else ir.Constant(I1, 0)
                    with kf.loop(0, Mc, AMX_ROWS, "mt") as m0:
                        arow = kf.gep(xa, kf.add(kf.mul(kf.add(mlo, m0), lda), kf.mul(kb, 2 * split)), I8)
                        crow = kf.gep(csw, kf.mul(m0, NR), F32)
                        for half in range(G // 2):
                            b0 = kf.gep(btiles, kf.mul(gstep, 2 * half), I8)
                            b1 = kf.gep(btiles, kf.mul(gstep, 2 * half + 1), I8)
                            b.call(micro, [arow, lda, b0, b1, ldb, bstep, steps,
                                           kf.gep(crow, kf.i64(32 * half), F32), ldc, first])
                        with kf.if_(done, "epi"):
                            self._panel_epilogue(kf, ctx, cs, Mcp, NR, n0, nr_eff,
                                                 (m0, kf.smin(kf.sub(Mc, m0), AMX_ROWS)), mlo)
            with kf.if_(b.icmp_signed("==", K, kf.i64(0)), "k0e"):
                self._panel_epilogue(kf, ctx, cs, Mcp, NR, n0, nr_eff, (kf.i64(0), Mc), mlo)
        if self.simd.native("amx"):
            b.call(kf.declare("llvm.x86.tilerelease", _VOID, []), [])
        b.call(free, [raw])
        b.ret(ir.Constant(I32, 0))
