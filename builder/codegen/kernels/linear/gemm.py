"""The float GEMM family (BLIS-style): weight panels unpacked (transposed) into an L1-resident float32
buffer per block of ``KC`` columns, ``MR x NR`` FMA micro-kernels, the panel epilogue.

A mixin of :class:`~.emitter.LinearEmitter`: its methods use the emitter's state (plan, tile sizes,
shared-helper cache)."""
from __future__ import annotations

import math

from llvmlite import ir

from ...llvm_emit import F32, I1, I16, I32, I64, PTR, mem_type
from ..decode import DenseDecoder, GroupQuantDecoder
from ..simd import vec
from .plan import TUNING

__all__ = ["GemmFloat"]


class GemmFloat:
    """The float GEMM family (BLIS-style): weight panels unpacked (transposed) into an L1-resident float32"""

    def _micro_fn(self, t: int) -> ir.Function:
        """``void micro_t(ptr bp, ptr xp, i64 ldx, i64 kc, ptr cs, i1 first)``: ``cs[i, 0:NR]
        (+)= sum_k x[i, k] bp[k, 0:NR]`` for ``t`` float32 rows of ``x`` (row stride ``ldx``):
        per column one broadcast of ``x`` per row and one FMA per accumulator."""
        return self._micro_kernel(f"mb.micro.v{self.lanes}x{self.NV}.t{t}", t, F32, F32, 4,
                                  lambda kf, acc, a, bv: kf.fma(a, bv, acc))

    def _micro_kernel(self, key: str, t: int, xt: ir.Type, wt: ir.Type, xalign: int,
                      update) -> ir.Function:
        """The frame the GEMM micro-kernels share (module-wide helper ``key``): ``t x NV``
        float32 vector accumulators loaded from ``cs`` (zero when ``first``), then per step
        ``k < kc`` the ``NV`` panel vectors ``bp[k * NR : (k + 1) * NR]`` of ``wt`` elements,
        one ``wt`` broadcast of ``x`` per row (element ``k`` of the row seen as ``wt``; rows of
        ``xt`` elements, stride ``ldx``) and ``acc = update(kf, acc, a, bv)`` per accumulator;
        the accumulators are stored back to ``cs``."""
        fn, kf = self._new_helper(key, [PTR, PTR, I64, I64, PTR, I1])
        if kf is None:
            return fn
        b = kf.b
        bp, xp, ldx, kc, cs, first = fn.args
        L, NV, NR = self.lanes, self.NV, self.NR
        vt, bt = vec(F32, L), vec(wt, L)
        accs = [[kf.alloca(vt, name="c") for _ in range(NV)] for _ in range(t)]
        for i in range(t):
            for v in range(NV):
                old = kf.load(vt, cs, kf.i64(i * NR + v * L), align=4)
                b.store(b.select(first, kf.fzero(L), old), accs[i][v])
        xrows = [kf.gep(xp, kf.mul(ldx, i), xt) if i else xp for i in range(t)]
        with kf.loop(0, kc, 1, "k") as k:
            brow = kf.mul(k, NR)
            bv = [kf.load(bt, bp, kf.add(brow, v * L) if v else brow, align=min(64, 4 * L))
                  for v in range(NV)]
            for i in range(t):
                a = kf.splat(kf.load(wt, xrows[i], k, align=xalign), L)
                for v in range(NV):
                    slot = accs[i][v]
                    b.store(update(kf, b.load(slot, typ=vt), a, bv[v]), slot)
        for i in range(t):
            for v in range(NV):
                kf.store(b.load(accs[i][v], typ=vt), cs, kf.i64(i * NR + v * L), align=4)
        b.ret_void()
        kf.finish()
        return fn

    def _pack_fn(self, w: int, words: bool = False) -> ir.Function:
        """``void pack(ptr w0, ptr w1, i64 ld0, i64 ld1, i64 K, i64 n0, i64 nr_eff, i64 kb,
        i64 kc, ptr bp)``: ``bp[kk][j] = W[n0 + j, kb + kk]`` (zero for ``j >= nr_eff``).
        ``words``: the weight's rows taken as 32-bit words, moved without conversion (the
        bfloat16 pairs of :meth:`_micro_bf16_fn`; ``ld0``, ``K``, ``kb``, ``kc`` count words)."""
        fmt = "dense_float32" if words else self._fmt_key(w)
        key = f"mb.pack.{fmt}.v{self.lanes}x{self.NV}"
        fn, kf = self._new_helper(key, [PTR, PTR, I64, I64, I64, I64, I64, I64, I64, PTR])
        if kf is None:
            return fn
        p0, p1, ld0, ld1, K, n0, nr_eff, kb, kc, bp = fn.args
        dec = DenseDecoder(p0, "float32", ld0, self.lanes) if words else self._decoder(w, p0, p1, ld0, ld1)
        b = kf.b
        L, NV, NR = self.lanes, self.NV, self.NR
        kv = dec.vec_limit(kf, K)
        full = b.icmp_signed("==", nr_eff, kf.i64(NR))
        kend = kf.add(kb, kc)

        def fast():
            vend = kf.smax(kf.smin(kend, kv), kb)
            for g in range(NV):
                rows = [dec.row(kf, kf.add(n0, g * L + r)) for r in range(L)]

                def body(k, u, wvecs, g=g):
                    cols = kf.transpose(wvecs)
                    base = kf.mul(kf.sub(k, kb), NR)
                    for c in range(L):
                        kf.store(cols[c], bp, kf.add(base, c * NR + g * L), align=min(64, 4 * L))

                if isinstance(dec, GroupQuantDecoder):
                    dec.vectors(kf, rows, kb, vend, 1, body, compact=True)
                else:
                    dec.vectors(kf, rows, kb, vend, 1, body)

        def tail_rows(jend):
            with kf.loop(0, NR, 1, "pj") as j:
                inside = kf.lt(j, jend)

                def real():
                    row = dec.row(kf, kf.add(n0, j))
                    with kf.loop(kf.smax(kf.sub(kv, kb), 0) if jend is not nr_eff else 0,
                                 kc, 1, "pk") as kk:
                        kf.store(dec.scalar(kf, row, kf.add(kb, kk)), bp, kf.add(kf.mul(kk, NR), j),
                                 align=4)

                def zero():
                    with kf.loop(0, kc, 1, "pz") as kk:
                        kf.store(ir.Constant(F32, 0.0), bp, kf.add(kf.mul(kk, NR), j), align=4)

                kf.if_else(inside, real, zero, "pr")

        def full_panel():
            fast()
            tail_rows(kf.i64(NR))   # columns past the vector part, all rows

        kf.if_else(full, full_panel, lambda: tail_rows(nr_eff), "pack")
        b.ret_void()
        kf.finish()
        return fn

    def _pack_kn_fn(self) -> ir.Function:
        """``void pack(ptr w0, ptr w1, i64 ld0, i64 ld1, i64 K, i64 n0, i64 nr_eff, i64 kb, i64 kc,
        ptr bp)`` (:meth:`_pack_fn`'s signature) for a float weight stored ``(K, N)`` (row length
        ``ld0 = N``; ``x @ W``'s right operand as it is): ``bp[kk][j] = W[kb + kk, n0 + j]`` in
        float32, zero for ``j >= nr_eff``: a row of the panel is a copy (16-bit weights widened), no
        transpose."""
        dtype = self.plan.weights[0].dtype
        key = f"mb.pack.kn_{dtype}.v{self.lanes}x{self.NV}"
        fn, kf = self._new_helper(key, [PTR, PTR, I64, I64, I64, I64, I64, I64, I64, PTR])
        if kf is None:
            return fn
        p0, _, ld0, _, _, n0, nr_eff, kb, kc, bp = fn.args
        b = kf.b
        L, NV, NR = self.lanes, self.NV, self.NR
        dec = DenseDecoder(p0, dtype, ld0, L)   # its rows: the K rows of W, N long

        def full():
            with kf.loop(0, kc, 1, "pk") as kk:
                row = dec.row(kf, kf.add(kb, kk))
                for v in range(NV):
                    kf.store(dec.load_vec(kf, row, kf.add(n0, v * L)), bp, kf.add(kf.mul(kk, NR), v * L),
                             align=min(64, 4 * L))

        def part():
            with kf.loop(0, kc, 1, "pk") as kk:
                row = dec.row(kf, kf.add(kb, kk))
                with kf.loop(0, nr_eff, 1, "pj") as j:
                    kf.store(dec.scalar(kf, row, kf.add(n0, j)), bp, kf.add(kf.mul(kk, NR), j), align=4)
                with kf.loop(nr_eff, NR, 1, "pz") as j:
                    kf.store(ir.Constant(F32, 0.0), bp, kf.add(kf.mul(kk, NR), j), align=4)

        kf.if_else(b.icmp_signed("==", nr_eff, kf.i64(NR)), full, part, "pack")
        b.ret_void()
        kf.finish()
        return fn

    def _gemm(self, kf, st, u0, u1) -> None:
        """Units ``[u0, u1)`` of the float GEMM: unit ``u`` is the panel ``u % P`` (``P`` panels of
        ``NR`` outputs) of the row chunk ``u // P`` (``st.extra["mc"]`` rows each, see
        :meth:`~.emitter.LinearEmitter._gemm_chunk_rows`; one chunk of all ``M`` rows unless x is
        larger than the chunk size). Per panel and block of ``KB`` columns the weights are packed,
        then the ``MR``-row micro-kernels run down the chunk's rows, accumulating in ``cs``
        (``mc x NR`` float32 per weight); the last block runs each row block's epilogue."""
        if self.i8gemm:
            return self._gemm_i8(kf, st, u0, u1)
        b = kf.b
        NR, KC, MR = self.NR, self.KC, self.MR
        G = math.lcm(MR, self.lanes)
        M, N, K = st.M, st.N, st.K
        mc = st.extra.get("mc", M)   # (float weights only; else one chunk)
        npanels = kf.sdiv(kf.add(N, NR - 1), NR)
        ctx = st.fn.args[0]
        free = kf.declare("free", ir.VoidType(), [PTR])
        cs_floats = kf.mul(kf.mul(mc, NR), self.nw)
        nbytes = kf.add(kf.mul(kf.add(cs_floats, KC * NR), 4), 128)
        raw, bp = self._workspace(kf, nbytes)
        cs = kf.gep(bp, kf.i64(KC * NR), F32)
        micro = self.micro_fns
        bf = self.bf16dot_gemm
        # a block of KB columns fills the KC x NR panel: KC float32 columns, or KC words of
        # two bfloat16 columns each for the vdpbf16ps micro-kernel
        KB = 2 * KC if bf else KC
        packs = [self._pack_tiles_fn(w) if self.tiled else self._pack_kn_fn() if self.kn
                 else self._pack_fn(w, words=bf) for w in range(self.nw)]
        wargs = [self._weight_args(st, w) for w in range(self.nw)]
        pargs = [[a[0], a[1], kf.sdiv(a[2], 2), a[3]] for a in wargs] if bf else wargs
        xt = I16 if bf else F32   # x: bfloat16 as it is, or float32
        # (the next block's prefetch: not for batched weights, whose matrix changes from chunk to chunk)
        decs = [None if self.tiled or self.batched else self._decoder(w, *wargs[w]) for w in range(self.nw)]
        with kf.loop(u0, u1, 1, "unit") as u:
            chunk = kf.sdiv(u, npanels)
            p = kf.sub(u, kf.mul(chunk, npanels))
            if self.batched:   # chunk ``lc`` of batch ``bi``, whose matrix is the weight's ``bi``-th
                mb, cpb = st.extra["mb"], st.extra["cpb"]
                bi = kf.sdiv(chunk, cpb)
                lo = kf.mul(kf.sub(chunk, kf.mul(bi, cpb)), mc)
                mlo = kf.add(kf.mul(bi, mb), lo)
                Mc = kf.smin(kf.sub(mb, lo), mc)
                wb = self.plan.params[self.plan.weights[0].w]
                off = kf.mul(bi, kf.mul(N, K))
                wargs = [[kf.gep(a[0], off, mem_type(wb.dtype))] + a[1:] for a in wargs]   # (no bf16 pairs here)
            else:
                mlo = kf.mul(chunk, mc)
                Mc = kf.smin(kf.sub(M, mlo), mc)   # the chunk's rows
            xc = kf.gep(st.xf, kf.mul(mlo, K), xt)
            full_m = kf.sub(Mc, b.srem(Mc, kf.i64(MR)))
            rem = b.srem(Mc, kf.i64(MR))
            ntiles = kf.sdiv(full_m, MR)
            n0 = kf.mul(p, NR)
            nr_eff = kf.smin(kf.sub(N, n0), NR)
            chunk_cs = kf.mul(kf.mul(Mc, NR), self.nw)
            with kf.if_(b.icmp_signed("==", K, kf.i64(0)), "k0"):
                with kf.loop(0, chunk_cs, 1, "z") as i:
                    kf.store(ir.Constant(F32, 0.0), cs, i, align=4)
            for w in range(self.nw):
                csw = kf.gep(cs, kf.mul(kf.mul(Mc, NR), w), F32) if w else cs
                with kf.loop(0, K, KB, "kb") as kb:
                    kc = kf.smin(kf.sub(K, kb), KB)
                    if bf:   # K is even: so are kb and kc
                        kcm = kf.sdiv(kc, 2)
                        b.call(packs[w], pargs[w] + [kf.sdiv(K, 2), n0, nr_eff, kf.sdiv(kb, 2), kcm, bp])
                    else:
                        kcm = kc
                        b.call(packs[w], wargs[w] + [K, n0, nr_eff, kb, kc, bp])
                    first = b.icmp_signed("==", kb, kf.i64(0))
                    # the next block's weights (the next KB columns, or the next panel's
                    # first ones) stream into L2 while this block's micro-kernels run
                    last = b.icmp_signed(">=", kf.add(kb, KB), K)
                    pk = b.select(last, kf.i64(0), kf.add(kb, KB))
                    pn0 = b.select(last, kf.add(n0, NR), n0)
                    pkend = kf.smin(kf.add(pk, KB), K)
                    pvalid = b.and_(kf.lt(pn0, N), ir.Constant(I1, int(bool(TUNING["prefetch_gemm"]))))
                    # after the last block of the last weight, each row block's epilogue right
                    # after its micro-kernel, while its accumulators are in L1 (a pass over the
                    # panel's M x NR accumulators after the loop read them back from L2 or L3)
                    # (a transposed output with rows contiguous: after every G rows, the G rows' epilogue,
                    # G a multiple of the vector lanes, which it transposes in blocks; the rest below)
                    done = last if w == self.nw - 1 else ir.Constant(I1, 0)
                    with kf.loop(0, full_m, MR, "mt") as m0:
                        xp = kf.gep(xc, kf.add(kf.mul(m0, K), kb), xt)
                        b.call(micro[MR], [bp, xp, K, kcm, kf.gep(csw, kf.mul(m0, NR), F32), first])
                        if self.rows_contiguous:
                            end = kf.add(m0, MR)
                            with kf.if_(b.and_(done, b.icmp_signed("==", b.srem(end, kf.i64(G)), kf.i64(0))), "epi"):
                                self._panel_epilogue(kf, ctx, cs, Mc, NR, n0, nr_eff, (kf.sub(end, G), kf.i64(G)), mlo)
                        else:
                            with kf.if_(done, "epi"):
                                self._panel_epilogue(kf, ctx, cs, Mc, NR, n0, nr_eff, (m0, kf.i64(MR)), mlo)
                        if decs[w] is not None:   # (row tiles: the hardware prefetcher follows them)
                            with kf.if_(pvalid, "pfn"):
                                j = kf.sdiv(m0, MR)
                                cnt = kf.sdiv(kf.smax(kf.add(kf.sub(kf.i64(NR - 1), j), ntiles), 0), ntiles)
                                with kf.loop(0, cnt, 1, "pfr") as i:
                                    r = kf.add(j, kf.mul(i, ntiles))
                                    decs[w].prefetch(kf, decs[w].row(kf, kf.smin(kf.add(pn0, r),
                                                                                  kf.sub(N, 1))), pk, pkend)
                    xp = kf.gep(xc, kf.add(kf.mul(full_m, K), kb), xt)
                    csr = kf.gep(csw, kf.mul(full_m, NR), F32)
                    kf.switch_const(rem, {t: (lambda t=t: b.call(micro[t], [bp, xp, K, kcm, csr, first]))
                                          for t in range(1, MR)}, f"mr{w}")
                    if not self.rows_contiguous:
                        with kf.if_(done, "epr"):
                            self._panel_epilogue(kf, ctx, cs, Mc, NR, n0, nr_eff, (full_m, rem), mlo)
            if self.rows_contiguous:   # the rows past whole groups of G (all of them when K is 0)
                start = b.select(b.icmp_signed("==", K, kf.i64(0)), kf.i64(0),
                                 kf.mul(kf.sdiv(full_m, G), G))
                self._panel_epilogue(kf, ctx, cs, Mc, NR, n0, nr_eff, (start, kf.sub(Mc, start)), mlo)
            else:
                with kf.if_(b.icmp_signed("==", K, kf.i64(0)), "k0e"):   # no block ran: the zeros' epilogue
                    self._panel_epilogue(kf, ctx, cs, Mc, NR, n0, nr_eff, None, mlo)
        b.call(free, [raw])
        b.ret(ir.Constant(I32, 0))
