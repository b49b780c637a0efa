"""The int8-activation GEMV family (4-bit weights whose graph allows ``activation_quantization=int8``;
8-bit ones only in the row-tiled kernel, :mod:`.tiles`, which shares the quantization of x here):
x quantized once per call into :class:`~.int8_rows.Int8Rows`, then ``vpmaddubsw`` / ``vpmaddwd``
(or VNNI ``vpdpbusd``) integer dots per group.

A mixin of :class:`~.emitter.LinearEmitter`: its methods use the emitter's state (plan, tile sizes,
shared-helper cache)."""
from __future__ import annotations


from llvmlite import ir

from ...llvm_emit import F32, I8, I16, I32, I64, PTR
from ..simd import KFunc, vec
from .int8_rows import Int8Rows
from .plan import TUNING

__all__ = ["GemvInt8"]


def _reduce8(b: ir.IRBuilder, vs: list, op) -> ir.Value:
    """The 8 vectors ``vs`` (``<8 x T>``) reduced across their lanes by ``op`` (associative and
    commutative: max, add) into one vector whose lane ``i`` is ``vs[i]``'s result: three rounds
    of pairing halves (two shuffles and one ``op`` each), 7 ``op`` and 14 shuffles for the 8
    reductions where 8 horizontal reductions take 24 of each."""
    t = vs[0].type

    def pair(x, y, lo, hi):
        idx = [ir.Constant(vec(I32, 8), m) for m in (lo, hi)]
        return op(b.shuffle_vector(x, y, idx[0]), b.shuffle_vector(x, y, idx[1]))
    assert len(vs) == 8 and t.count == 8
    # round 1: lanes 0-3 hold vs[2k]'s 4 partials, lanes 4-7 vs[2k+1]'s
    r1 = [pair(vs[2 * k], vs[2 * k + 1], [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])
          for k in range(4)]
    # round 2: lanes (0, 1), (2, 3), (4, 5), (6, 7) hold the 2 partials of vectors a, c, b, d of (a b) (c d)
    r2 = [pair(r1[2 * k], r1[2 * k + 1], [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]) for k in range(2)]
    # round 3: lanes hold vectors 0, 2, 1, 3, 4, 6, 5, 7
    r3 = pair(r2[0], r2[1], [0, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 15])
    return b.shuffle_vector(r3, ir.Constant(t, ir.Undefined), ir.Constant(vec(I32, 8), [0, 2, 1, 3, 4, 6, 5, 7]))


class GemvInt8:
    """The int8-activation GEMV family (4-bit weights whose graph allows ``activation_quantization=int8``):"""

    def _int8_rows(self, gs: int) -> Int8Rows:
        """The :class:`Int8Rows` layout of this kernel's GEMV for groups of ``gs`` (128-column
        steps with 16-lane vectors where they quantize the same columns, see
        :meth:`Int8Rows.for_lanes`; 64-column steps for the row-tiled kernel)."""
        if self.tiled:   # the row-tiled kernel reads 64-column steps whatever the vector width,
            # in column order for 8-bit weights (4 columns per 32-bit word, one vpdpbusd)
            eight = self.plan.weights[0].bits == 8
            return Int8Rows(self.K_static, gs, natural=eight, bits=16 if self.tile_x16 else 8,
                            wide=eight and not self.tile_x16 and not self.dot_native)
        return Int8Rows.for_lanes(self.K_static, gs, self.lanes if TUNING["gemv_wide_i8"] else 8)

    def _int8_row_sums(self, kf, dec, row, xrows, lay: "Int8Rows", accs, sums) -> None:
        """``sums[i] = hsum(sum_u accs[u][i]) - zero_point * sum_g scale[g] * (d * sum q)[g]``
        for one weight ``row`` and each input row ``xrows[i]`` of the int8 GEMV (the zero-point
        term by :meth:`GroupQuantDecoder.scale_dot` over the per-group table of :class:`Int8Rows`)."""
        b = kf.b
        f8 = vec(F32, lay.lanes)
        corr = None
        if dec.zero_point:
            tables = [kf.gep(xr, kf.i64(lay.dsum_off), I8) for xr in xrows]
            corr = dec.scale_dot(kf, [row], tables, kf.i64(lay.groups))[0]
        for i in range(len(xrows)):
            v = b.load(accs[0][i], typ=f8)
            for a in accs[1:]:
                v = b.fadd(v, b.load(a[i], typ=f8), flags=KFunc.FM)
            v = kf.hsum(v)
            if corr is not None:
                v = kf.fma(corr[i], ir.Constant(F32, -float(dec.zero_point)), v)
            b.store(v, sums[i])

    def _prepare_int8_x(self, kf: KFunc, xf, M, K) -> list:
        """For each group size of :attr:`ikeys`: a buffer (NULL unless ``M`` takes the GEMV, or
        the layout of :meth:`_fill_int8_gemm_x` when it takes the int8 GEMM) holding, per row of x, the layout of :class:`Int8Rows`: x quantized to int8 per group
        (``d = max|x| / 127``, ``q = rint(x * 127 / max|x|)`` clamped to +-127), each 64- or
        128-column step in the decoder's lane order (even columns, then odd; in column order
        for 8-bit row tiles), and per group
        ``d``, ``1/d`` and ``d * sum q`` (the last for the zero point; for the row-tiled kernel
        also ``-zero_point * sum q`` in int32). A NaN or infinity in a group makes its ``d``
        NaN, so that the outputs of that row are NaN as with float activations."""
        out = []
        b = kf.b
        malloc = kf.declare("malloc", PTR, [I64])
        small = b.icmp_signed("<=", M, kf.i64(self.MG))
        for gs in self.ikeys:
            lay = self._int8_rows(gs)
            slot = kf.alloca(PTR, name="xi")
            b.store(ir.Constant(PTR, None), slot)

            def fill(lay=lay, slot=slot, gs=gs):
                b = kf.b
                buf = b.call(malloc, [kf.smax(kf.mul(M, lay.row_bytes), 1)])
                with kf.if_(b.icmp_unsigned("==", buf, ir.Constant(PTR, None)), "oomi"):
                    b.ret(ir.Constant(I32, self.error_code))
                b.store(buf, slot)
                if not self.tile_int_x:   # the row-tiled kernels fill it in parallel (_int8_x_task)
                    self._fill_int8_rows(kf, xf, K, buf, lay, gs, kf.i64(0), M)

            if self.i8gemm:
                kf.if_else(small, fill, lambda gs=gs, slot=slot: self._fill_int8_gemm_x(
                    kf, xf, M, gs, slot), "ix")
            else:
                with kf.if_(small, "ix"):
                    fill()
            out.append(b.load(slot, typ=PTR))
        return out

    def _int8_x_task(self) -> ir.Function:
        """``i32 xprep(ptr ctx, i64 idx)``: task ``idx`` of the context's ``xtasks`` fills its
        share of the rows of every :class:`Int8Rows` buffer of the context (the row-tiled kernel's
        x, quantized on all threads before the tiles run)."""
        kf, st = self._open("xprep", I32, [I64], inline=True)
        b = kf.b
        idx, n = st.args[0], st.extra["xtasks"]
        m_lo = b.sdiv(kf.mul(idx, st.M), n)
        m_hi = b.sdiv(kf.mul(kf.add(idx, 1), st.M), n)
        for i, gs in enumerate(self.ikeys):
            buf = b.inttoptr(st.extra[f"xi{i}"], PTR)
            self._fill_int8_rows(kf, st.xf, st.K, buf, self._int8_rows(gs), gs, m_lo, m_hi)
        b.ret(ir.Constant(I32, 0))
        kf.finish()
        return st.fn

    def _fill_int8_rows(self, kf: KFunc, xf, K, buf, lay: "Int8Rows", gs: int, m_lo, m_hi) -> None:
        """Rows ``m_lo .. m_hi`` of x into ``buf`` in the layout of :class:`Int8Rows` (see
        :meth:`_prepare_int8_x`): pass 1 the per-group tables, 8 groups at a time with their
        lanes reduced together (:func:`_reduce8`; the rest one by one), pass 2 the int8 values
        step by step. (8 groups at a time against one: a row-tiled kernel of 16 weight rows and
        128 input rows, mostly x's quantization, K = 5632 213 -> 171 us, K = 2048 77 -> 62 us on
        the Xeon.)"""
        b = kf.b
        f8, i8x8 = vec(F32, 8), vec(I32, 8)
        fabs = kf.declare("llvm.fabs.v8f32", f8, [f8])
        rmax = kf.declare("llvm.vector.reduce.fmax.v8f32", F32, [f8])
        radd = kf.declare("llvm.vector.reduce.add.v8i32", I32, [i8x8])
        rint8 = kf.declare("llvm.rint.v8f32", f8, [f8])
        fadd8 = kf.declare("llvm.vector.reduce.fadd.v8f32", F32, [F32, f8])
        S = lay.step
        fSv, iSv = vec(F32, S), vec(I32, S)
        rintS = kf.declare(f"llvm.rint.v{S}f32", fSv, [fSv])

        qmax = float(lay.qmax)

        def clamp(v):   # +-qmax, a NaN becomes -qmax (one vmaxps / vminps each: plain compares
            n = v.type.count  # and selects, where maxnum / minnum add NaN fix-ups)
            lo_, hi_ = ir.Constant(v.type, [-qmax] * n), ir.Constant(v.type, [qmax] * n)
            v = b.select(b.fcmp_unordered("<", v, lo_), lo_, v)
            return b.select(b.fcmp_ordered(">", v, hi_), hi_, v)
        with kf.loop(m_lo, m_hi, 1, "im") as m:
            xrow = kf.gep(xf, kf.mul(m, K), F32)
            row = kf.gep(buf, kf.mul(m, lay.row_bytes), I8)
            dptr = kf.gep(row, kf.i64(lay.d_off), I8)
            iptr = kf.gep(row, kf.i64(lay.inv_off), I8)
            sptr = kf.gep(row, kf.i64(lay.dsum_off), I8)
            zptr = kf.gep(row, kf.i64(lay.zsum_off), I8)

            def group_stats(base):   # per-lane max |x| (NaNs dropped) and x * 0 summed (NaN for NaN / inf)
                amax = ir.Constant(f8, [0.0] * 8)
                bad = ir.Constant(f8, [0.0] * 8)
                for j in range(0, gs, 8):
                    v = kf.load(f8, base, kf.i64(j), align=4)
                    av = b.call(fabs, [v])   # NaNs dropped (``bad`` keeps them)
                    amax = b.select(b.fcmp_ordered(">", av, amax), av, amax)
                    bad = b.fadd(bad, b.fmul(v, ir.Constant(f8, [0.0] * 8)))
                return amax, bad

            def group_qsum(base, invv):   # per-lane sums of q = rint(clamp(x * qmax / max|x|))
                qs = ir.Constant(i8x8, [0] * 8)
                for j in range(0, gs, 8):
                    v = kf.load(f8, base, kf.i64(j), align=4)
                    qs = b.add(qs, b.fptosi(b.call(rint8, [clamp(b.fmul(v, invv))]), i8x8))
                return qs

            def scales(a, bad):   # d = max|x| / qmax (+ NaN for NaN / inf), inv = qmax / max|x| or 0
                const = (lambda v: ir.Constant(f8, [v] * 8)) if a.type == f8 else (lambda v: ir.Constant(F32, v))
                d = b.fadd(b.fdiv(a, const(qmax)), bad)
                pos = b.fcmp_ordered(">", a, const(0.0))
                return d, b.select(pos, b.fdiv(const(qmax), a), const(0.0))

            def store_tables(g, d, inv, qsum, n):   # n = 1: scalars of group g; 8: groups g .. g + 7
                kf.store(d, dptr, g, align=4)
                kf.store(inv, iptr, g, align=4)
                kf.store(b.fmul(d, b.sitofp(qsum, f8 if n > 1 else F32)), sptr, g, align=4)
                if self.tiled:
                    zp = ir.Constant(i8x8, [-self.tile_zero_point] * 8) if n > 1 else ir.Constant(
                        I32, -self.tile_zero_point)
                    kf.store(b.mul(qsum, zp), zptr, g, align=4)

            # pass 1, 8 groups at a time: each group's lanes reduced by one transpose-and-reduce
            # of the 8 groups' vectors (the same maxima, sums and quotients, lane by lane)
            g8 = lay.groups // 8 * 8
            with kf.loop(0, g8, 8, "ig8") as g0:
                stats = [group_stats(kf.gep(xrow, kf.mul(kf.add(g0, i), gs), F32)) for i in range(8)]
                a = _reduce8(b, [st[0] for st in stats], lambda x, y: b.select(b.fcmp_ordered(">", x, y), x, y))
                d, inv = scales(a, _reduce8(b, [st[1] for st in stats], lambda x, y: b.fadd(x, y)))
                qs = [group_qsum(kf.gep(xrow, kf.mul(kf.add(g0, i), gs), F32),
                                 b.shuffle_vector(inv, ir.Constant(f8, ir.Undefined), ir.Constant(i8x8, [i] * 8)))
                      for i in range(8)]
                store_tables(g0, d, inv, _reduce8(b, qs, lambda x, y: b.add(x, y)), 8)
            # the other groups one at a time
            with kf.loop(g8, lay.groups, 1, "ig") as g:
                base = kf.gep(xrow, kf.mul(g, gs), F32)
                amax, bad = group_stats(base)
                d, inv = scales(b.call(rmax, [amax], fastmath=("nnan",)),
                                 b.call(fadd8, [ir.Constant(F32, 0.0), bad]))
                store_tables(g, d, inv, b.call(radd, [group_qsum(base, kf.splat(inv, 8))]), 1)
            # pass 2, per step of S columns: the permuted int8 values and the lane tables
            ng = max(1, S // gs)
            with kf.loop(0, lay.steps, 1, "is") as st:
                xS = kf.load(fSv, xrow, kf.mul(st, S), align=4)
                g0 = kf.sdiv(kf.mul(st, S), gs)
                iv = kf.load(vec(F32, ng), iptr, g0, align=4)
                invs = b.shuffle_vector(iv, ir.Constant(iv.type, ir.Undefined),
                                        ir.Constant(vec(I32, S), [j // gs if gs < S else 0
                                                                  for j in range(S)]))
                q = b.trunc(b.fptosi(b.call(rintS, [clamp(b.fmul(xS, invs))]), iSv),
                            vec(I16 if lay.value_bytes == 2 else I8, S))
                if lay.natural and lay.value_bytes == 2:   # each 4 columns 0 2 1 3 (an 8-bit word's
                    perm = [j - j % 4 + (j % 4) // 2 + 2 * (j % 2) for j in range(S)]   # even bytes, then odd)
                elif lay.bits == 16:    # each 8 columns 0 4 1 5 2 6 3 7 (a 4-bit word's nibbles p and p + 4)
                    perm = [j - j % 8 + (j % 8) // 2 + 4 * (j % 2) for j in range(S)]
                elif not lay.natural:   # even columns, then odd (the 4-bit kernels' nibble halves)
                    perm = [2 * j for j in range(S // 2)] + [2 * j + 1 for j in range(S // 2)]
                else:
                    perm = None
                if perm is not None:
                    q = b.shuffle_vector(q, ir.Constant(q.type, ir.Undefined),
                                         ir.Constant(vec(I32, S), perm))
                kf.store(q, row, kf.mul(st, S), align=1)   # (elements of q's type)


    def _gemv_micro_i8(self, kf, dec, rows, xf, xi, lay: "Int8Rows", K, m0, t: int, rc: int,
                       res) -> None:
        """``res[m * rc + r] = sum_k x[m, k] W[r, k]`` for the ``rc`` weight rows and the ``t``
        input rows from ``m0``, with int8 x: per step (:class:`Int8Rows`: 64 columns in 256-bit
        vectors, 128 in 512-bit ones), each weight row is loaded and unpacked once (nibbles
        0..15, unsigned) and, per input row, two ``vpmaddubsw`` with the int8 values (no
        saturation: 2 * 15 * 127 < 2**15), the even- and odd-column halves added, ``vpmaddwd``
        by ones into int32 partial dots of 8 columns each (8 or 16 lanes), converted to float
        and accumulated with ``scale * d`` per lane. With VNNI two ``vpdpbusd`` do the
        multiply-adds. The zero point is one short dot per weight row and input row after the
        steps: ``- zero_point * sum_g scale[g] * (d * sum q)[g]`` (the per-group table of
        :class:`Int8Rows`), instead of an integer correction per step. Columns past the last
        whole step: float x and :meth:`GroupQuantDecoder.scalar`.

        The weight rows are read one after the other (row ``r`` to its end, then row ``r + 1``),
        not interleaved step by step: the rows of a tile are adjacent in memory, so the tile is
        one sequential stream, which the hardware prefetcher follows across the whole task (with
        four interleaved rows of 1 KiB each, every tile was four short streams in a new page, and
        a TinyLlama-shaped gate / up GEMV read 12-14 GB/s instead of 20-21). Each row keeps
        ``gemv_acc_i8`` accumulator chains per input row (consecutive steps alternate), so the
        float adds of one row do not wait on each other."""
        b = kf.b
        gs, S, NL = lay.group_size, lay.step, lay.lanes
        i8v, i16v, i32v, f8 = vec(I8, S // 2), vec(I16, S // 4), vec(I32, NL), vec(F32, NL)
        zmm = self.simd.int8_512
        ones = ir.Constant(i16v, [1] * (S // 4))
        low = ir.Constant(i8v, [15] * (S // 2))
        four = ir.Constant(i8v, [4] * (S // 2))
        ng = max(1, S // gs)
        lane_g = ir.Constant(vec(I32, NL), [(8 * i) // gs if gs < S else 0 for i in range(NL)])
        ms = [kf.add(m0, i) if i else m0 for i in range(t)]
        xrows = [kf.gep(xi, kf.mul(m, lay.row_bytes), I8) for m in ms]
        st_t = dec.st
        steps = lay.steps
        U = max(1, min(TUNING["gemv_acc_i8"], steps))
        sums = [[kf.alloca(F32, name="is") for _ in range(t)] for _ in range(rc)]

        # weight rows per step loop: one (a sequential stream per task) for a single input row;
        # with several input rows, ``gemv_rows_step_i8`` rows share each load of x
        P = max(1, min(rc, TUNING["gemv_rows_step_i8"] if t > 1 else 1))
        if P > 1 and P * t * U > self.simd.registers // 2:
            U = 1

        def step(rs, s, accs_u) -> None:
            """Step ``s`` (an i64 value) of weight rows ``rs`` into ``accs_u[j][i]`` per row
            ``rs[j]`` and input row ``i``."""
            xo = kf.mul(s, S)
            ws = []
            for r in rs:
                if TUNING["prefetch_q"]:
                    kf.prefetch(kf.gep(rows[r][0], kf.add(kf.mul(s, S // 2), TUNING["prefetch_q"]), I8), TUNING["prefetch_locality"])
                wv = kf.load(i8v, kf.gep(rows[r][0], kf.mul(s, S // 2), I8), None, align=1)
                raw = kf.load(vec(st_t, ng), rows[r][1], kf.sdiv(xo, gs), align=4 if st_t == F32 else 2)
                sc = kf.widen(raw, dec.scale_dtype)   # per group of the step
                ws.append((b.and_(wv, low), b.lshr(wv, four), sc))
            for i, xr in enumerate(xrows):
                xlo = kf.load(i8v, xr, xo, align=1)
                xhi = kf.load(i8v, xr, kf.add(xo, S // 2), align=1)
                xd = kf.load(vec(F32, ng), kf.gep(xr, kf.i64(lay.d_off), I8), kf.sdiv(xo, gs), align=4)
                for j, (lo, hi, sc) in enumerate(ws):
                    if self.vnni:   # the same sums of four byte products per int32 lane
                        native = self.simd.native("vnni")
                        wide = self.simd.vnni_512 if native else zmm
                        dot = kf.dot_u8s8(kf.dot_u8s8(ir.Constant(i32v, [0] * NL), lo, xlo, native, wide),
                                          hi, xhi, native, wide)
                    else:
                        p = b.add(kf.maddubs(lo, xlo, zmm), kf.maddubs(hi, xhi, zmm))
                        dot = kf.madd_wd(p, ones, zmm)
                    # scale * d per group, then spread over the group's lanes
                    sd = b.fmul(sc, xd, flags=KFunc.FM)
                    prod = b.shuffle_vector(sd, ir.Constant(sd.type, ir.Undefined), lane_g)
                    b.store(kf.fma(b.sitofp(dot, f8), prod,
                                   b.load(accs_u[j][i], typ=f8)), accs_u[j][i])

        for r0 in range(0, rc, P):
            rs = list(range(r0, min(rc, r0 + P)))
            accs = [[[kf.alloca(f8, name="iacc") for _ in range(t)] for _ in rs] for _ in range(U)]
            for u in range(U):
                for j in range(len(rs)):
                    for i in range(t):
                        b.store(kf.fzero(NL), accs[u][j][i])
            whole = steps - steps % U
            with kf.loop(0, whole, U, "ks") as s:
                for u in range(U):
                    step(rs, kf.add(s, u) if u else s, accs[u])
            for u in range(steps % U):
                step(rs, kf.i64(whole + u), accs[u])
            for j, r in enumerate(rs):
                self._int8_row_sums(kf, dec, rows[r], xrows, lay, [a[j] for a in accs], sums[r])
        with kf.loop(lay.columns, K, 1, "it") as k:
            xv = [kf.load(F32, xf, kf.add(kf.mul(m, K), k), align=4) for m in ms]
            for r in range(rc):
                wk = dec.scalar(kf, rows[r], k)
                for i in range(t):
                    b.store(kf.fma(xv[i], wk, b.load(sums[r][i], typ=F32)), sums[r][i])
        for r in range(rc):
            for i in range(t):
                kf.store(b.load(sums[r][i], typ=F32), res, kf.add(kf.mul(ms[i], rc), r))
