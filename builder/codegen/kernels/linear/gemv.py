"""The GEMV family (``M <= gemv_max_rows``): tiles of weight rows streamed once per group of input rows,
weights decoded in registers; dense float32 / float16 / bfloat16 and packed 4 / 8-bit weights (the
decoder's fast path), and the row-dot helpers every GEMV calls.

A mixin of :class:`~.emitter.LinearEmitter`: its methods use the emitter's state (plan, tile sizes,
shared-helper cache)."""
from __future__ import annotations


from llvmlite import ir

from ...llvm_emit import F32, I8, I64, PTR
from ..decode import DenseDecoder
from ..simd import KFunc, vec
from .plan import TUNING

__all__ = ["GemvFloat"]


class GemvFloat:
    """The GEMV family (``M <= gemv_max_rows``): tiles of weight rows streamed once per group of input rows,"""

    def _gemv(self, kf, st, u0, u1) -> None:
        b = kf.b
        R, MG = self.R, self.MG
        epi = self.epi_fn
        dots = {(w, rc): self._dot_fn(w, rc) for w in range(self.nw) for rc in (R, 1)}
        wargs = [self._weight_args(st, w) for w in range(self.nw)]
        res = kf.alloca(F32, self.nw * MG * R, name="res")
        resw = [kf.gep(res, kf.i64(w * MG * R), F32) if w else res for w in range(self.nw)]
        ctx = st.fn.args[0]

        qx = {}
        for w, key in self.qfast.items():
            i = self.qkeys.index(key)
            qx[w] = (b.inttoptr(st.extra[f"xq{i}"], PTR), b.inttoptr(st.extra[f"xs{i}"], PTR))
        for w, gs in self.qint.items():
            qx[w] = (b.inttoptr(st.extra[f"xi{self.ikeys.index(gs)}"], PTR), ir.Constant(PTR, None))
        null = ir.Constant(PTR, None)

        def rows(n0, rc):
            for w in range(self.nw):
                xq, xs = qx.get(w, (null, null))
                b.call(dots[(w, rc)], wargs[w] + [st.xf, xq, xs, st.M, st.K, n0, resw[w]])
            accs = resw + [resw[0]] * (2 - self.nw)
            b.call(epi, [ctx, kf.i64(0), st.M, n0, kf.i64(rc)] + accs + [kf.i64(rc)])

        with kf.loop(u0, u1, 1, "tile") as t:
            n0 = kf.mul(t, R)
            full = b.icmp_signed("<=", kf.add(n0, R), st.N)

            def partial():
                with kf.loop(n0, st.N, 1, "nr") as n:
                    rows(n, 1)

            kf.if_else(full, lambda: rows(n0, R), partial, "gtile")

    def _dot_fn(self, w: int, rc: int) -> ir.Function:
        """``void dot(ptr w0, ptr w1, i64 ld0, i64 ld1, ptr xf, ptr xq, ptr xs, i64 M, i64 K,
        i64 n0, ptr res)``: ``res[m * rc + r] = sum_k xf[m, k] W[n0 + r, k]`` for ``m < M``
        (``M <= gemv_max_rows``) and ``r < rc``, in tiles of ``rc`` weight rows x ``MT`` input
        rows; ``xq`` / ``xs`` are the prepared copies of x of the packed fast path (permuted x
        and group sums) or the int8-activation path (its :class:`Int8Rows` buffer). Shared by
        every kernel of the module with this weight format."""
        if w in self.qint:
            MT, tag = self.MTi, f".i8.k{self.K_static}{self.vnni_tag}"
        elif w in self.qfast:
            MT, tag = self.MTq, ".q"
        elif self.bf16dot:
            MT, tag = self.MT, ".bf16dot" + ("" if self.simd.native("avx512bf16") else "_emulated")
        else:
            MT, tag = self.MT, ""
        key = f"mb.dot.{self._fmt_key(w)}.v{self.lanes}.mt{MT}.r{rc}{tag}"
        fn, kf = self._new_helper(key, [PTR, PTR, I64, I64, PTR, PTR, PTR, I64, I64, I64, PTR])
        if kf is None:
            return fn
        p0, p1, ld0, ld1, xf, xq, xs, M, K, n0, res = fn.args
        dec = self._decoder(w, p0, p1, ld0, ld1)
        rows = [dec.row(kf, kf.add(n0, r) if r else n0) for r in range(rc)]
        if w in self.qint:
            lay = self._int8_rows(self.qint[w])

            def micro(m0, t):
                self._gemv_micro_i8(kf, dec, rows, xf, xq, lay, K, m0, t, rc, res)
        elif w in self.qfast:
            def micro(m0, t):
                self._gemv_micro_q(kf, dec, rows, xf, xq, xs, K, m0, t, rc, res)
        elif self.bf16dot:
            def micro(m0, t):
                self._gemv_micro_bf16(kf, dec, rows, xf, K, m0, t, rc, res)
        else:
            kv = dec.vec_limit(kf, K)

            def micro(m0, t):
                self._gemv_micro(kf, dec, rows, xf, K, kv, m0, t, rc, res)
        with kf.loop(0, M, MT, "m0") as m0:
            mt = kf.smin(kf.sub(M, m0), MT)
            if MT == 1:
                micro(m0, 1)
            else:
                kf.switch_const(mt, {t: (lambda t=t: micro(m0, t)) for t in range(1, MT + 1)}, "mt")
        kf.b.ret_void()
        kf.finish()
        return fn

    def _gemv_micro_q(self, kf, dec, rows, xf, xq, xs, K, m0, t: int, rc: int, res) -> None:
        """GEMV tile over packed 4/8-bit rows (:meth:`GroupQuantDecoder.fast_chunk`):
        ``res[m * rc + r] = sum_k x[m, k] W[r, k]`` for the ``rc`` weight rows and ``t`` input rows
        from ``m0``. The rows are read one after the other, each over all its groups (a tile's rows
        are adjacent, so a task reads one sequential stream; interleaving the four rows group by
        group made each tile four short streams: a TinyLlama-shaped gate / up GEMV read 10.4 GB/s
        that way, 15.4 this way, same process)."""
        b = kf.b
        L = self.lanes
        vt = vec(F32, L)
        gs, chunk = dec.group_size, dec.chunk
        G = kf.sdiv(K, gs)
        accs = [[kf.alloca(vt, name="qacc") for _ in range(t)] for _ in range(rc)]
        corr = [[kf.alloca(F32, name="qcorr") for _ in range(t)] for _ in range(rc)]
        for r in range(rc):
            for i in range(t):
                b.store(kf.fzero(L), accs[r][i])
                b.store(ir.Constant(F32, 0.0), corr[r][i])
        ms = [kf.add(m0, i) if i else m0 for i in range(t)]
        xrows = [kf.gep(xq, kf.mul(m, K), F32) for m in ms]
        srows = [kf.gep(xs, kf.mul(m, G), F32) for m in ms]
        pf = TUNING["prefetch_q"]
        # ``A`` accumulators per (row, input row), taken by the groups in turn: with one, its FMA
        # per group (4 cycles of latency for a group of 32 weights, about 8 instructions) bounded
        # the loop
        A = max(1, TUNING["gemv_chains_q"])
        chains = [accs] + [[[kf.alloca(vt, name="qacc") for _ in range(t)] for _ in range(rc)]
                           for _ in range(A - 1)]

        def group(r, g, acc):
            k0 = kf.mul(g, gs)
            if pf:
                byte = kf.add(kf.b.lshr(k0, kf.i64(1)) if dec.bits == 4 else k0, pf)
                # one prefetch per 64-byte line of the row, from every per_line-th group (the
                # addresses advance a line per prefetch, aligned or not): a 4-bit group of 32
                # is 16 bytes, and a prefetch per group was 4 per line (Intel Xeon, LlamaMLP
                # batch 1 from DRAM: q8f32_1 6.66 -> 6.35 ms, q4f16_1 unchanged at 4.3)
                gbytes = gs * dec.bits // 8
                per_line = 64 // gbytes if 0 < gbytes < 64 and 64 % gbytes == 0 else 1
                if per_line > 1:
                    first = kf.b.icmp_unsigned("==", kf.b.and_(g, kf.i64(per_line - 1)), kf.i64(0))
                    with kf.if_(first, "qpf"):
                        kf.prefetch(kf.gep(rows[r][0], byte, I8), TUNING["prefetch_locality"])
                else:
                    kf.prefetch(kf.gep(rows[r][0], byte, I8), TUNING["prefetch_locality"])
            # partial sums per (row, input row): ``gemv_parts_q`` chains each (more chains are
            # shorter, but with 8 rows and 16 registers they spill)
            P = max(1, min(TUNING["gemv_parts_q"], gs // L))
            parts = [[None] * P for _ in range(t)]
            nv = 0
            for c in range(0, gs, chunk):
                kc = kf.add(k0, c) if c else k0
                xv = [[kf.load(vt, xr, kf.add(kc, p * L) if p else kc, align=4)
                       for p in range(chunk // L)] for xr in xrows]
                vals = dec.fast_chunk(kf, rows[r], kc)
                for i in range(t):
                    for p, v in enumerate(vals):
                        q = (nv + p) % P
                        prev = parts[i][q]
                        parts[i][q] = b.fmul(xv[i][p], v, flags=KFunc.FM) if prev is None \
                            else kf.fma(xv[i][p], v, prev)
                nv += len(xv[0]) if xv else 0
            gacc = [None] * t
            for i in range(t):
                g_sum = parts[i][0]
                for extra_part in parts[i][1:]:
                    g_sum = b.fadd(g_sum, extra_part, flags=KFunc.FM)
                gacc[i] = g_sum
            sv = dec.scale_splat(kf, rows[r], g)
            for i in range(t):
                b.store(kf.fma(gacc[i], sv, b.load(acc[r][i], typ=vt)), acc[r][i])

        # the rows one after the other (adjacent in memory: one sequential stream per task, see
        # GemvInt8._gemv_micro_i8), each over all its groups
        for r in range(rc):
            for extra in chains[1:]:   # zeroed per row: only the current row's extra chains live
                for i in range(t):
                    b.store(kf.fzero(L), extra[r][i])
            g_main = kf.sub(G, b.srem(G, kf.i64(A))) if A > 1 else G
            with kf.loop(0, g_main, A, "qg") as g0:
                for a in range(A):
                    group(r, kf.add(g0, a) if a else g0, chains[a])
            if A > 1:
                with kf.loop(g_main, G, 1, "qgt") as g:
                    group(r, g, accs)
                for extra in chains[1:]:
                    for i in range(t):
                        b.store(b.fadd(b.load(accs[r][i], typ=vt), b.load(extra[r][i], typ=vt),
                                       flags=KFunc.FM), accs[r][i])
        # zero-point term: sum_g scale[n, g] * xs[m, g], a short vector dot per row
        if dec.zero_point:
            for r, vals in enumerate(dec.scale_dot(kf, rows, srows, G)):
                for i, v in enumerate(vals):
                    b.store(v, corr[r][i])
        zp = ir.Constant(F32, float(-dec.zero_point))
        sums = [[kf.alloca(F32, name="qs") for _ in range(t)] for _ in range(rc)]
        for r in range(rc):
            for i in range(t):
                tot = kf.fma(b.load(corr[r][i], typ=F32), zp, kf.hsum(b.load(accs[r][i], typ=vt)))
                b.store(tot, sums[r][i])
        kv = kf.mul(G, gs)
        with kf.loop(kv, K, 1, "qt") as k:
            xsv = [kf.load(F32, xf, kf.add(kf.mul(m, K), k), align=4) for m in ms]
            for r in range(rc):
                wv = dec.scalar(kf, rows[r], k)
                for i in range(t):
                    sl = sums[r][i]
                    b.store(kf.fma(xsv[i], wv, b.load(sl, typ=F32)), sl)
        for r in range(rc):
            for i in range(t):
                kf.store(b.load(sums[r][i], typ=F32), res, kf.add(kf.mul(ms[i], rc), r))

    def _gemv_accs(self, kf, t: int, rc: int) -> tuple[int, list]:
        """The unroll ``U`` of a GEMV tile of ``rc`` weight rows x ``t`` input rows (as many
        independent float32 vector accumulators as the register file holds, up to 4 per pair)
        and those accumulators, zeroed: ``accs[r][i][u]``."""
        budget = max(self.simd.registers - 6, 4)
        U = 1
        while U < 4 and rc * t * U * 2 <= budget:
            U *= 2
        vt = vec(F32, self.lanes)
        accs = [[[kf.alloca(vt, name="acc") for _ in range(U)] for _ in range(t)] for _ in range(rc)]
        for r in range(rc):
            for i in range(t):
                for u in range(U):
                    kf.b.store(kf.fzero(self.lanes), accs[r][i][u])
        return U, accs

    def _gemv_finish(self, kf, dec, rows, accs, x_scalar, kv, K, m0, t: int, rc: int, res) -> None:
        """End of a GEMV tile: the accumulators of each (weight row, input row) summed
        horizontally, the columns ``kv <= k < K`` added in float32 (``x_scalar(i, k)``: input
        row ``i``'s value; weights from ``dec.scalar``), the dots stored to ``res[m * rc + r]``."""
        b = kf.b
        vt = vec(F32, self.lanes)
        sums = [[kf.alloca(F32, name="s") for _ in range(t)] for _ in range(rc)]
        for r in range(rc):
            for i in range(t):
                v = b.load(accs[r][i][0], typ=vt)
                for u in range(1, len(accs[r][i])):
                    v = b.fadd(v, b.load(accs[r][i][u], typ=vt), flags=KFunc.FM)
                b.store(kf.hsum(v), sums[r][i])
        with kf.loop(kv, K, 1, "kt") as k:
            xs = [x_scalar(i, k) for i in range(t)]
            for r in range(rc):
                wv = dec.scalar(kf, rows[r], k)
                for i in range(t):
                    s = sums[r][i]
                    b.store(kf.fma(xs[i], wv, b.load(s, typ=F32)), s)
        for r in range(rc):
            for i in range(t):
                m = kf.add(m0, i) if i else m0
                kf.store(b.load(sums[r][i], typ=F32), res, kf.add(kf.mul(m, rc), r))

    def _gemv_micro(self, kf, dec, rows, xf, K, kv, m0, t: int, rc: int, res) -> None:
        vt = vec(F32, self.lanes)
        U, accs = self._gemv_accs(kf, t, rc)
        xrows = [kf.gep(xf, kf.mul(kf.add(m0, i) if i else m0, K), F32) for i in range(t)]

        def body(k, u, wvecs):
            xs = [kf.load(vt, xr, k, align=4) for xr in xrows]
            for r in range(rc):
                for i in range(t):
                    a = accs[r][i][u]
                    kf.b.store(kf.fma(xs[i], wvecs[r], kf.b.load(a, typ=vt)), a)

        if isinstance(dec, DenseDecoder) and TUNING["prefetch"]:
            dec.vectors(kf, rows, kf.i64(0), kv, U, body, prefetch=TUNING["prefetch"],
                        locality=TUNING["prefetch_locality"])
        else:
            dec.vectors(kf, rows, kf.i64(0), kv, U, body)
        self._gemv_finish(kf, dec, rows, accs, lambda i, k: kf.load(F32, xrows[i], k, align=4),
                          kv, K, m0, t, rc, res)
