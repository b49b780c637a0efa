"""The int8-activation GEMM family (``M > gemv_max_rows_qig`` when every weight takes int8
activations): panels unpacked into bytes in k-quad order, ``vpmaddubsw`` (or VNNI) micro-kernels,
the float columns added by a tail helper.

A mixin of :class:`~.emitter.LinearEmitter`: its methods use the emitter's state (plan, tile sizes,
shared-helper cache)."""
from __future__ import annotations


from llvmlite import ir

from ...llvm_emit import F32, I1, I8, I16, I32, I64, PTR
from ..decode import GroupQuantDecoder
from ..simd import KFunc, vec
from .plan import TUNING
from .int8_rows import Int8Rows

__all__ = ["GemmInt8"]


class GemmInt8:
    """The int8-activation GEMM family (``M > gemv_max_rows_qig`` when every weight takes int8"""

    def _fill_int8_gemm_x(self, kf: KFunc, xf, M, gs: int, slot) -> None:
        """x quantized to int8 per group of ``gs`` as for the GEMV (``d = max|x| / 127``,
        ``q = rint(x / d)`` clamped to +-127, NaN / inf -> ``d`` NaN), in the plain layout of
        the int8 GEMM: ``q[m, k]`` row-major for the ``Ki`` = :attr:`Int8Rows.columns` columns
        the GEMV quantizes too, then float32 ``d[m, g]`` and ``sum_k q[m, k] * d[m, g]`` for
        their ``Ki / gs`` groups (all rows). Stores the malloc'ed buffer in ``slot`` (returns
        the error code on failure)."""
        b = kf.b
        K = self.K_static
        kpad = Int8Rows(K, gs).columns
        G = kpad // gs
        malloc = kf.declare("malloc", PTR, [I64])
        qbytes = kf.mul(M, kpad)
        buf = b.call(malloc, [kf.add(kf.add(qbytes, kf.mul(M, 8 * G)), 64)])
        with kf.if_(b.icmp_unsigned("==", buf, ir.Constant(PTR, None)), "oomg"):
            b.ret(ir.Constant(I32, self.error_code))
        b.store(buf, slot)
        dbase = kf.gep(buf, qbytes, I8)
        sbase = kf.gep(dbase, kf.mul(M, 4 * G), I8)
        f8, i8x8 = vec(F32, 8), vec(I32, 8)
        fabs = kf.declare("llvm.fabs.v8f32", f8, [f8])
        fmax = kf.declare("llvm.maxnum.v8f32", f8, [f8, f8])
        fmin = kf.declare("llvm.minnum.v8f32", f8, [f8, f8])
        rmax = kf.declare("llvm.vector.reduce.fmax.v8f32", F32, [f8])
        radd = kf.declare("llvm.vector.reduce.add.v8i32", I32, [i8x8])
        fadd8 = kf.declare("llvm.vector.reduce.fadd.v8f32", F32, [F32, f8])
        rint8 = kf.declare("llvm.rint.v8f32", f8, [f8])
        lo127, hi127 = ir.Constant(f8, [-127.0] * 8), ir.Constant(f8, [127.0] * 8)
        zero8 = ir.Constant(f8, [0.0] * 8)
        with kf.loop(0, M, 1, "gm") as m:
            xrow = kf.gep(xf, kf.mul(m, K), F32)
            qrow = kf.gep(buf, kf.mul(m, kpad), I8)
            with kf.loop(0, G, 1, "gg") as g:
                base = kf.gep(xrow, kf.mul(g, gs), F32)
                vals = [kf.load(f8, base, kf.i64(j), align=4) for j in range(0, gs, 8)]
                amax, bad = zero8, zero8   # bad: x * 0 is NaN where x is NaN or inf
                for v in vals:
                    amax = b.call(fmax, [amax, b.call(fabs, [v])])
                    bad = b.fadd(bad, b.fmul(v, zero8))
                a = b.call(rmax, [amax])
                d = b.fadd(b.fdiv(a, ir.Constant(F32, 127.0)), b.call(fadd8, [ir.Constant(F32, 0.0), bad]))
                pos = b.fcmp_ordered(">", a, ir.Constant(F32, 0.0))
                invv = kf.splat(b.select(pos, b.fdiv(ir.Constant(F32, 127.0), a), ir.Constant(F32, 0.0)), 8)
                qs = ir.Constant(i8x8, [0] * 8)
                for j, v in enumerate(vals):
                    c = b.call(fmin, [b.call(fmax, [b.fmul(v, invv), lo127]), hi127])
                    qi = b.fptosi(b.call(rint8, [c]), i8x8)
                    qs = b.add(qs, qi)
                    kf.store(b.trunc(qi, vec(I8, 8)), qrow, kf.add(kf.mul(g, gs), 8 * j), align=1)
                idx = kf.add(kf.mul(m, G), g)
                kf.store(d, dbase, idx, align=4)
                kf.store(b.fmul(b.sitofp(b.call(radd, [qs]), F32), d), sbase, idx, align=4)

    def _i8_pack_fn(self, w: int) -> ir.Function:
        """``void pack(ptr w0, ptr w1, i64 ld0, i64 ld1, i64 n0, i64 nr_eff, i64 kb, i64 kc,
        ptr bp, ptr sp)``: the 4-bit values of weight rows ``n0 .. n0 + NRI - 1``, columns
        ``kb .. kb + kc`` (``kc`` whole groups, ``kb`` a multiple of 64) as bytes in k-quad
        order: ``bp[j * 4 NRI + r * 4 + i] = q[n0 + r, kb + 4 j + i]``, so that 32 bytes hold 4
        consecutive columns of 8 rows (one ``vpmaddubsw`` operand); ``sp[g * NRI + r]`` = the
        float32 scale of row ``n0 + r``, group ``kb / group_size + g``. Rows past ``nr_eff``
        are zero. Full panels are unpacked 64 columns at a time (nibbles interleaved in
        registers, 8 x 8 transposes of 32-bit quads)."""
        key = f"mb.i8pack.{self._fmt_key(w)}.nr{self.NRI}"
        fn, kf = self._new_helper(key, [PTR, PTR, I64, I64, I64, I64, I64, I64, PTR, PTR])
        if kf is None:
            return fn
        p0, p1, ld0, ld1, n0, nr_eff, kb, kc, bp, sp = fn.args
        d = self.plan.weights[w]
        gs = d.group_size
        dec = GroupQuantDecoder(p0, d.storage, p1, d.scale_dtype, ld0, ld1, 4, gs,
                                d.zero_point, 8)
        b = kf.b
        NR = self.NRI
        i32v, i8v = vec(I32, 8), vec(I8, 32)
        cv = kf.sub(kc, b.srem(kc, kf.i64(64)))
        interleave = ir.Constant(vec(I32, 64), [j // 2 + 32 * (j % 2) for j in range(64)])

        def fast():
            for h in range(NR // 8):
                rows = [dec.row(kf, kf.add(n0, h * 8 + r))[0] for r in range(8)]
                with kf.loop(0, cv, 64, "pc") as c:
                    byte = b.lshr(kf.add(kb, c), kf.i64(1))
                    halves = ([], [])
                    for row in rows:
                        if TUNING["prefetch_i8pack"]:
                            kf.prefetch(kf.gep(row, kf.add(byte, TUNING["prefetch_i8pack"]), I8))
                        raw = kf.load(i8v, kf.gep(row, byte, I8), None, align=1)
                        lo = b.and_(raw, ir.Constant(i8v, [15] * 32))
                        hi = b.lshr(raw, ir.Constant(i8v, [4] * 32))
                        nat = b.bitcast(b.shuffle_vector(lo, hi, interleave), vec(I32, 16))
                        for part in range(2):
                            halves[part].append(b.shuffle_vector(
                                nat, ir.Constant(nat.type, ir.Undefined),
                                ir.Constant(i32v, list(range(8 * part, 8 * part + 8)))))
                    q0 = b.lshr(c, kf.i64(2))
                    for part in range(2):
                        for j, col in enumerate(kf.transpose(halves[part])):
                            off = kf.add(kf.mul(kf.add(q0, 8 * part + j), 4 * NR), h * 32)
                            kf.store(col, kf.gep(bp, off, I8), None, align=32)

        def quads(q_lo):
            # quads [q_lo, kc / 4) of every row, 16 bits (4 nibbles) at a time
            last = kf.sub(nr_eff, 1)
            with kf.loop(q_lo, b.lshr(kc, kf.i64(2)), 1, "pq") as j:
                byte = b.lshr(kf.add(kb, kf.mul(j, 4)), kf.i64(1))
                with kf.loop(0, NR, 1, "pr") as r:
                    row = dec.row(kf, kf.add(n0, kf.smin(r, last)))[0]
                    x = b.zext(kf.load(I16, kf.gep(row, byte, I8), None, align=1), I32)
                    v = b.and_(x, ir.Constant(I32, 0xF))
                    for sh, mask in ((4, 0xF0), (8, 0xF00), (12, 0xF000)):
                        v = b.or_(v, b.shl(b.and_(x, ir.Constant(I32, mask)), ir.Constant(I32, sh)))
                    v = b.select(kf.lt(r, nr_eff), v, ir.Constant(I32, 0))
                    kf.store(v, bp, kf.add(kf.mul(j, NR), r), align=4)

        def full_panel():
            fast()
            quads(b.lshr(cv, kf.i64(2)))

        full = b.icmp_signed("==", nr_eff, kf.i64(NR))
        kf.if_else(full, full_panel, lambda: quads(kf.i64(0)), "ip")
        g0 = kf.sdiv(kb, gs)
        last = kf.sub(nr_eff, 1)
        ngroups = kf.sdiv(kc, gs)

        def scales_full():
            # per group, the NRI rows' scales in one vector, widened once (one scalar conversion
            # and store per scale cost as much as unpacking the panel's nibbles)
            srows = [dec.row(kf, kf.add(n0, r) if r else n0)[1] for r in range(NR)]
            salign = 4 if dec.st == F32 else 2
            with kf.loop(0, ngroups, 1, "ps") as g:
                gi = kf.add(g0, g)
                v = ir.Constant(vec(dec.st, NR), ir.Undefined)
                for r, srow in enumerate(srows):
                    v = b.insert_element(v, kf.load(dec.st, srow, gi, align=salign), ir.Constant(I32, r))
                kf.store(kf.widen(v, dec.scale_dtype), sp, kf.mul(g, NR), align=4)

        def scales_partial():
            with kf.loop(0, ngroups, 1, "ps") as g:
                with kf.loop(0, NR, 1, "psr") as r:
                    row = dec.row(kf, kf.add(n0, kf.smin(r, last)))
                    s = dec.scale_value(kf, row, kf.add(g0, g))
                    s = b.select(kf.lt(r, nr_eff), s, ir.Constant(F32, 0.0))
                    kf.store(s, sp, kf.add(kf.mul(g, NR), r), align=4)

        kf.if_else(full, scales_full, scales_partial, "ips")
        b.ret_void()
        kf.finish()
        return fn

    def _i8_micro_fn(self, gs: int, zp: int, t: int) -> ir.Function:
        """``void micro(ptr bp, ptr sp, ptr xq, i64 ldx, ptr dp, ptr sdp, i64 ldg, i64 kc,
        ptr cs, i1 first)``: ``cs[i, 0:NRI] (+)= sum_k x[i, k] W[0:NRI, k]`` for ``t`` rows of
        int8 x (``xq`` row stride ``ldx`` bytes; ``dp`` / ``sdp`` their ``d`` and
        ``sum q * d`` per group, stride ``ldg``) against a panel of :meth:`_i8_pack_fn`.
        Per 4 columns: one 32-bit broadcast of x per row, and per 8 weight rows one
        ``vpmaddubsw`` (unsigned nibbles x signed int8, pairs summed to int16; ``2 * 15 * 127``
        times 8 fits int16) added in int16 over up to 32 columns, then ``vpmaddwd`` by ones
        into int32; per group ``acc += scale * (d * dot - zero_point * d * sum q)``
        (``(q_w - zp) * scale`` times ``q_x * d`` summed over the group)."""
        key = f"mb.i8micro.g{gs}.z{zp}.nr{self.NRI}.t{t}{self.vnni_tag}".replace("-", "m")
        fn, kf = self._new_helper(key, [PTR, PTR, PTR, I64, PTR, PTR, I64, I64, PTR, I1])
        if kf is None:
            return fn
        bp, sp, xq, ldx, dp, sdp, ldg, kc, cs, first = fn.args
        b = kf.b
        NR = self.NRI
        NV = NR // 8
        i8v, i16v, i32v, f8 = vec(I8, 32), vec(I16, 16), vec(I32, 8), vec(F32, 8)
        maddubs = kf.declare("llvm.x86.avx2.pmadd.ub.sw", i16v, [i8v, i8v])
        maddwd = kf.declare("llvm.x86.avx2.pmadd.wd", i32v, [i16v, i16v])
        ones = ir.Constant(i16v, [1] * 16)
        nzp = ir.Constant(F32, float(-zp))
        accs = [[kf.alloca(f8, name="c") for _ in range(NV)] for _ in range(t)]
        for i in range(t):
            for v in range(NV):
                old = kf.load(f8, cs, kf.i64(i * NR + v * 8), align=4)
                b.store(b.select(first, kf.fzero(8), old), accs[i][v])
        xrows = [kf.gep(xq, kf.mul(ldx, i), I8) if i else xq for i in range(t)]
        drows = [kf.gep(dp, kf.mul(ldg, i), F32) if i else dp for i in range(t)]
        srows = [kf.gep(sdp, kf.mul(ldg, i), F32) if i else sdp for i in range(t)]
        chunk = min(gs, 32)
        qu = max(1, min(TUNING["qu_i8"], chunk // 4))
        while (chunk // 4) % qu:
            qu -= 1
        zero16, zero32 = ir.Constant(i16v, [0] * 16), ir.Constant(i32v, [0] * 8)
        dots = [[kf.alloca(i32v, name="dot") for _ in range(NV)] for _ in range(t)]
        part = [[kf.alloca(i16v, name="part") for _ in range(NV)] for _ in range(t)]
        with kf.loop(0, kf.sdiv(kc, gs), 1, "g") as g:
            for i in range(t):
                for v in range(NV):
                    b.store(zero32, dots[i][v])
            # runtime loops (not unrolled: with every quad of a group in one block LLVM
            # hoists all the weight loads and spills them)
            with kf.loop(0, gs // 4, chunk // 4, "c") as c0:
                for i in range(0 if self.vnni else t):
                    for v in range(NV):
                        b.store(zero16, part[i][v])
                with kf.loop(0, chunk // 4, qu, "q") as q:
                    for u in range(qu):
                        kq = kf.add(kf.add(kf.mul(g, gs // 4), c0), kf.add(q, u) if u else q)
                        wv = [kf.load(i8v, kf.gep(bp, kf.add(kf.mul(kq, 4 * NR), 32 * v), I8), None,
                                      align=32) for v in range(NV)]
                        for i in range(t):
                            xw = kf.load(I32, kf.gep(xrows[i], kf.mul(kq, 4), I8), None, align=1)
                            xb = b.bitcast(kf.splat(xw, 8), i8v)
                            for v in range(NV):
                                if self.vnni:   # into int32 at once: no int16 partial sums
                                    dv = kf.dot_u8s8(b.load(dots[i][v], typ=i32v), wv[v], xb,
                                                     self.simd.native("vnni"))
                                    b.store(dv, dots[i][v])
                                else:
                                    pv = b.call(maddubs, [wv[v], xb])
                                    b.store(b.add(b.load(part[i][v], typ=i16v), pv), part[i][v])
                for i in range(0 if self.vnni else t):
                    for v in range(NV):
                        dw = b.call(maddwd, [b.load(part[i][v], typ=i16v), ones])
                        b.store(b.add(b.load(dots[i][v], typ=i32v), dw), dots[i][v])
            dots_v = [[b.load(dots[i][v], typ=i32v) for v in range(NV)] for i in range(t)]
            sc = [kf.load(f8, sp, kf.add(kf.mul(g, NR), 8 * v), align=4) for v in range(NV)]
            for i in range(t):
                dd = kf.splat(kf.load(F32, drows[i], g, align=4), 8)
                cc = kf.splat(b.fmul(kf.load(F32, srows[i], g, align=4), nzp), 8)
                for v in range(NV):
                    val = kf.fma(b.sitofp(dots_v[i][v], f8), dd, cc)
                    b.store(kf.fma(val, sc[v], b.load(accs[i][v], typ=f8)), accs[i][v])
        for i in range(t):
            for v in range(NV):
                kf.store(b.load(accs[i][v], typ=f8), cs, kf.i64(i * NR + v * 8), align=4)
        b.ret_void()
        kf.finish()
        return fn

    def _i8_tail_fn(self, w: int) -> ir.Function:
        """``void tail(ptr w0, ptr w1, i64 ld0, i64 ld1, ptr xf, i64 K, i64 n0, i64 nr_eff,
        i64 k0, i64 M, ptr cs, ptr wt)``: ``cs[m, r] += sum_{k0 <= k < K} x[m, k] W[n0 + r, k]``
        in float32 for ``r < NRI`` (rows past ``nr_eff`` add zero): the columns of a row that
        are not whole 64-column steps of whole groups (fewer than ``group_size + 64``), as in
        the GEMV. ``wt`` receives the decoded columns, ``(K - k0) x NRI`` float32."""
        key = f"mb.i8tail.{self._fmt_key(w)}.nr{self.NRI}"
        fn, kf = self._new_helper(key, [PTR, PTR, I64, I64, PTR, I64, I64, I64, I64, I64, PTR, PTR])
        if kf is None:
            return fn
        p0, p1, ld0, ld1, xf, K, n0, nr_eff, k0, M, cs, wt = fn.args
        d = self.plan.weights[w]
        dec = GroupQuantDecoder(p0, d.storage, p1, d.scale_dtype, ld0, ld1, 4, d.group_size,
                                d.zero_point, 8)
        b = kf.b
        NR = self.NRI
        f8 = vec(F32, 8)
        last = kf.sub(nr_eff, 1)
        with kf.loop(k0, K, 1, "tk") as k:
            with kf.loop(0, NR, 1, "tr") as r:
                v = dec.scalar(kf, dec.row(kf, kf.add(n0, kf.smin(r, last))), k)
                v = b.select(kf.lt(r, nr_eff), v, ir.Constant(F32, 0.0))
                kf.store(v, wt, kf.add(kf.mul(kf.sub(k, k0), NR), r), align=4)
        with kf.loop(0, M, 1, "tm") as m:
            accs = [kf.alloca(f8, name="t") for _ in range(NR // 8)]
            for v, a in enumerate(accs):
                b.store(kf.load(f8, cs, kf.add(kf.mul(m, NR), 8 * v), align=4), a)
            with kf.loop(k0, K, 1, "tk2") as k:
                xv = kf.splat(kf.load(F32, xf, kf.add(kf.mul(m, K), k), align=4), 8)
                for v, a in enumerate(accs):
                    wv = kf.load(f8, wt, kf.add(kf.mul(kf.sub(k, k0), NR), 8 * v), align=4)
                    b.store(kf.fma(xv, wv, b.load(a, typ=f8)), a)
            for v, a in enumerate(accs):
                kf.store(b.load(a, typ=f8), cs, kf.add(kf.mul(m, NR), 8 * v), align=4)
        b.ret_void()
        kf.finish()
        return fn

    def _gemm_i8(self, kf, st, u0, u1) -> None:
        """GEMM with int8 x (:meth:`_fill_int8_gemm_x`): per panel of ``NRI`` weight rows and
        block of ``KCI`` columns, :meth:`_i8_pack_fn` then ``MRI``-row micro-kernels over all
        rows of x into a per-panel ``M x NRI`` float32 buffer; the columns past
        :attr:`Int8Rows.columns` in float (:meth:`_i8_tail_fn`); then the epilogue."""
        b = kf.b
        NR, KC, MR = self.NRI, self.KCI, self.MRI
        M, N = st.M, st.N
        K = self.K_static
        ctx = st.fn.args[0]
        free = kf.declare("free", ir.VoidType(), [PTR])
        cs_floats = kf.mul(kf.mul(M, NR), self.nw)
        sp_floats = (KC // 8) * NR
        tail = max(K - Int8Rows(K, gs).columns for gs in self.qint.values())
        nbytes = kf.add(kf.mul(kf.add(cs_floats, sp_floats + tail * NR), 4), KC * NR + 128)
        raw, bp = self._workspace(kf, nbytes)
        sp = kf.gep(bp, kf.i64(KC * NR), I8)
        wt = kf.gep(sp, kf.i64(sp_floats), F32)
        cs = kf.gep(wt, kf.i64(tail * NR), F32)
        wargs = [self._weight_args(st, w) for w in range(self.nw)]
        full_m = kf.sub(M, b.srem(M, kf.i64(MR)))
        rem = b.srem(M, kf.i64(MR))
        with kf.loop(u0, u1, 1, "panel") as p:
            n0 = kf.mul(p, NR)
            nr_eff = kf.smin(kf.sub(N, n0), NR)
            for w in range(self.nw):
                d = self.plan.weights[w]
                gs, zp = d.group_size, d.zero_point
                kpad = Int8Rows(K, gs).columns
                G = kpad // gs
                xi = b.inttoptr(st.extra[f"xi{self.ikeys.index(gs)}"], PTR)
                dbase = kf.gep(xi, kf.mul(M, kpad), I8)
                sbase = kf.gep(dbase, kf.mul(M, 4 * G), I8)
                micro = {t: self._i8_micro_fn(gs, zp, t) for t in range(1, MR + 1)}
                pack = self._i8_pack_fn(w)
                csw = kf.gep(cs, kf.mul(kf.mul(M, NR), w), F32) if w else cs
                with kf.loop(0, kpad, KC, "kb") as kb:
                    kc = kf.smin(kf.sub(kf.i64(kpad), kb), KC)
                    b.call(pack, wargs[w] + [n0, nr_eff, kb, kc, bp, sp])
                    first = b.icmp_signed("==", kb, kf.i64(0))
                    g0 = kf.sdiv(kb, gs)

                    def call(t, m0):
                        args = [bp, sp, kf.gep(xi, kf.add(kf.mul(m0, kpad), kb), I8), kf.i64(kpad),
                                kf.gep(dbase, kf.add(kf.mul(m0, G), g0), F32),
                                kf.gep(sbase, kf.add(kf.mul(m0, G), g0), F32), kf.i64(G), kc,
                                kf.gep(csw, kf.mul(m0, NR), F32), first]
                        b.call(micro[t], args)

                    with kf.loop(0, full_m, MR, "mt") as m0:
                        call(MR, m0)
                    kf.switch_const(rem, {t: (lambda t=t: call(t, full_m)) for t in range(1, MR)},
                                    f"imr{w}")
                if kpad < K:
                    b.call(self._i8_tail_fn(w), wargs[w] + [st.xf, kf.i64(K), n0, nr_eff,
                                                            kf.i64(kpad), M, csw, wt])
            self._panel_epilogue(kf, ctx, cs, M, NR, n0, nr_eff)
        b.call(free, [raw])
        b.ret(ir.Constant(I32, 0))
