"""The attention kernel's code (see the package docstring for the schedule): :class:`AttentionEmitter`
writes ``<name>.compute`` (sizes, the work split over threads) and ``<name>.attn_task`` (one range of
work units: row setup, K packing, scores, online softmax, value product, output)."""
from __future__ import annotations

from llvmlite import ir

from ...fastmath import exp_f32, tanh_f32
from ...llvm_emit import F32, I32, I64, PTR, BufferExprEmitter, ModuleEmitter, mem_type
from ..simd import KFunc, SimdInfo, bind_params, internal_function, vec
from .plan import ATTENTION_TUNING, AttentionPlan

__all__ = ["AttentionEmitter", "emit_attention"]

_EXTRA = ("B", "Sq", "Sk", "rows", "nrb", "units", "ntasks")


class AttentionEmitter:
    """Emits one attention kernel for ``plan`` with ``simd.lanes`` float32 lanes."""

    def __init__(self, mod: ModuleEmitter, name: str, func, sig, plan: AttentionPlan, simd: SimdInfo) -> None:
        self.mod, self.module, self.name = mod, mod.module, name
        self.func, self.sig, self.plan, self.simd = func, sig, plan, simd
        self.L = simd.lanes
        self.MR = max(2, ATTENTION_TUNING["rows"])
        self.KV = max(1, ATTENTION_TUNING["key_vectors"])
        self.KB = self.KV * self.L
        self.CU = max(1, ATTENTION_TUNING["value_vectors"])
        # rows per pass of the score and value loops: RP x KV (x CU) vector accumulators
        self.RP = max(1, ATTENTION_TUNING["pass_rows"] or (4 if simd.registers >= 32 else 2))
        self.rep = plan.spec.group
        self.error_code = len(sig.checks) + 1
        self.nparams = len(func.params)
        self.ctx_t = ir.LiteralStructType([PTR] * self.nparams + [I64] * (len(sig.sym_vars) + len(_EXTRA)))
        # workspace (float32): Kt[D][KB], Qs[MR][D], P[MR][KB], O[MR][Dv], m[MR], l[MR], alpha[MR]; the paged
        # form also Sl[KB] (i64: the pool rows of a key block's keys)
        D, Dv, MR, KB = plan.dim, plan.dim_v, self.MR, self.KB
        sizes = [D * KB, MR * D, MR * KB, MR * Dv, MR, MR, MR, 2 * KB if plan.block_table is not None else 0]
        offs, off = [], 0
        for s in sizes:
            offs.append(off)
            off += -(-s // 16) * 16   # 64-byte aligned regions
        self.ws_offsets = offs
        self.ws_floats = off

    # -- helpers
    def _function(self, fname: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        return internal_function(self.module, fname, ret, args)

    def _bind(self, kf: KFunc, ptrs, syms) -> BufferExprEmitter:
        return bind_params(self.mod, kf, self.sig, self.func, ptrs, syms)

    def _load_f32(self, kf: KFunc, ptr, idx, n: int) -> ir.Value:
        """``n`` elements (1: a scalar) of the inputs' dtype at ``ptr[idx]``, as float32."""
        dtype = self.plan.dtype
        mt = mem_type(dtype)
        b = kf.b
        if n == 1:
            raw = kf.load(mt, ptr, idx, align=2 if dtype != "float32" else 4)
            if dtype == "float16":
                return b.fpext(raw, F32)
            if dtype == "bfloat16":
                return b.bitcast(b.shl(b.zext(raw, I32), ir.Constant(I32, 16)), F32)
            return raw
        raw = kf.load(vec(mt, n), ptr, idx, align=2 if dtype != "float32" else 4)
        return kf.widen(raw, dtype)

    def _fcall(self, kf: KFunc, base: str, args: list) -> ir.Value:
        return kf.b.call(kf.intrinsic(base, args[0].type, len(args)), args, fastmath=KFunc.FM)

    def _math_em(self, kf: KFunc):
        """The expression emitter :mod:`~builder.codegen.fastmath` takes: ``kf``'s builder and its intrinsics."""
        class _Em:
            b = kf.b

            @staticmethod
            def fcall(base, args):
                return self._fcall(kf, base, args)

        return _Em

    def _exp(self, kf: KFunc, x: ir.Value) -> ir.Value:
        """:func:`~builder.codegen.fastmath.exp_f32` (within 2 ulp for normal results) of an
        argument ``<= 0`` (``s - max`` and ``max_old - max_new``), ``-inf`` or NaN."""
        return exp_f32(self._math_em(kf), x, nonpositive=True)

    def _softcap(self, kf: KFunc, s: ir.Value) -> ir.Value:
        """``c * tanh(s / c)`` of a vector of scaled scores, ``c`` the spec's ``softcap`` (Gemma 2's
        ``attn_logit_softcapping``, HF ``modeling_gemma2.eager_attention_forward``), with
        :func:`~builder.codegen.fastmath.tanh_f32` (within 2 ulp of ``numpy.tanh``)."""
        c = self.plan.spec.softcap
        t = tanh_f32(self._math_em(kf), kf.b.fmul(s, self._cvec(1.0 / c), flags=KFunc.FM))
        return kf.b.fmul(t, self._cvec(c), flags=KFunc.FM)

    def _max(self, a: ir.Value, c: ir.Value) -> ir.Value:
        """``a > c ? a : c`` (one ``vmaxps``; a NaN score gives NaN or is passed over, and its own
        exponential is NaN either way), where ``llvm.maxnum`` adds a NaN test and a blend and its
        vector reduction is scalarized (16 extracts and compares per row and key block: the
        Whisper-shaped attention 22.2 -> 18.5 ms on the Xeon)."""
        b = self.kf.b
        return b.select(b.fcmp_ordered(">", a, c), a, c)

    def _reduce_rows(self, vs: list, op) -> list:
        """``[op over the lanes of v for v in vs]`` as scalars, the rows' vectors reduced together:
        pairs of vectors halve into one (the low halves of both against their high halves, two
        two-input shuffles and one ``op`` for two rows), then the lanes within each row's segment;
        4 rows of 16 lanes take 13 shuffles and ops where one row at a time takes 8 each. ``op``
        must be commutative and associative (max, reassociated add)."""
        b, L = self.kf.b, self.L
        n = 1
        while n < len(vs):
            n *= 2
        if n > L:   # more rows than lanes: one row at a time
            return [self._reduce_rows([v], op)[0] for v in vs]
        cur = list(vs) + [vs[-1]] * (n - len(vs))   # a power of two of rows (copies of the last)
        seg = L
        while len(cur) > 1:
            half = seg // 2
            lo = [k * seg + t for k in range(L // seg) for t in range(half)]
            hi = [k * seg + half + t for k in range(L // seg) for t in range(half)]
            lo_idx = ir.Constant(vec(I32, L), lo + [L + i for i in lo])
            hi_idx = ir.Constant(vec(I32, L), hi + [L + i for i in hi])
            cur = [op(b.shuffle_vector(cur[i], cur[i + 1], lo_idx), b.shuffle_vector(cur[i], cur[i + 1], hi_idx))
                   for i in range(0, len(cur), 2)]
            seg = half
        v = cur[0]
        width = seg
        while width > 1:   # within each segment: swap its halves and combine
            half = width // 2
            perm = [i + half if i % width < half else i - half for i in range(L)]
            v = op(v, b.shuffle_vector(v, v, ir.Constant(vec(I32, L), perm)))
            width = half
        return [b.extract_element(v, ir.Constant(I32, x * seg)) for x in range(len(vs))]

    def _rows_vec(self, values: list) -> ir.Value:
        """The scalars ``values`` as one vector of ``len(values)`` lanes."""
        b = self.kf.b
        t = vec(F32, len(values))
        v = ir.Constant(t, ir.Undefined)
        for x, val in enumerate(values):
            v = b.insert_element(v, val, ir.Constant(I32, x))
        return v

    def _splat(self, kf: KFunc, v: ir.Value) -> ir.Value:
        return kf.splat(v, self.L)

    def _cvec(self, value: float) -> ir.Constant:
        return ir.Constant(vec(F32, self.L), [value] * self.L)

    # -- the compute function
    def emit(self) -> list[str]:
        """Write ``<name>.compute`` into the module: it reads the sizes (B, Sq, Sk; for the variable-length
        form from ``seqstart``, checked first), returns 0 at once for no work units (batch x kv head x block
        of ``MR`` rows), splits the units into tasks (one task below ``parallel_min_macs`` multiply-adds or
        with one thread, else up to ``tasks_per_thread`` per thread of ``mb_parallel_for``) and runs
        ``<name>.attn_task`` on each. Returns the messages of the error codes after the signature's checks:
        a failed workspace allocation, and a malformed ``seqstart`` for the variable-length form."""
        plan, sig = self.plan, self.sig
        task = self._emit_task()
        body_fn = self._function(f"{self.name}.compute", I32, [PTR] * self.nparams + [I64] * len(sig.sym_vars))
        for a in body_fn.args[:self.nparams]:
            a.add_attribute("noalias")
        kf = KFunc(self.module, body_fn)
        b = kf.b
        ptrs = list(body_fn.args[:self.nparams])
        syms = list(body_fn.args[self.nparams:])
        em = self._bind(kf, ptrs, syms)
        if plan.seqstart is not None:
            # sequences one after another: Sq = Sk = the longest (units of the shorter ones past their
            # rows do nothing); seqstart checked first, so that no unit reads outside the tokens
            B, Sq = self._var_len_sizes(kf, em, ptrs[3])
            Sk = Sq
        elif plan.block_table is not None:
            # a paged cache: every length and the block ids a row uses checked first; Sk the longest row
            B = em.typed(plan.q.shape[0], "int64")
            Sq = em.typed(plan.q.shape[1], "int64")
            Sk = self._paged_check(kf, em, ptrs, B, Sq)
        else:
            B = em.typed(plan.q.shape[0], "int64")
            Sq = em.typed(plan.q.shape[1], "int64")
            Sk = em.typed(plan.k.shape[1], "int64")
        rows = kf.mul(Sq, self.rep)
        nrb = kf.sdiv(kf.add(rows, self.MR - 1), self.MR)
        units = kf.mul(kf.mul(B, plan.kv_heads), nrb)
        with kf.if_(b.icmp_signed("<=", units, kf.i64(0)), "empty"):
            b.ret(ir.Constant(I32, 0))
        nthreads = b.sext(b.call(kf.declare("mb_num_threads", I32, []), []), I64)
        seen = kf.smin(Sk, plan.spec.window) if plan.spec.window else Sk   # keys a row visits, at most
        macs = kf.mul(kf.mul(kf.mul(B, plan.heads), kf.mul(Sq, kf.smax(seen, 1))), plan.dim + plan.dim_v)
        small = b.or_(kf.lt(macs, ATTENTION_TUNING["parallel_min_macs"]), b.icmp_signed("<=", nthreads, kf.i64(1)))
        many = kf.smin(units, kf.mul(nthreads, ATTENTION_TUNING["tasks_per_thread"]))
        ntasks = b.select(small, kf.i64(1), kf.smax(many, 1))
        slot = kf.alloca(self.ctx_t, name="ctx")
        values = list(ptrs) + list(syms) + [B, Sq, Sk, rows, nrb, units, ntasks]
        for i, val in enumerate(values):
            b.store(val, b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True))
        rc_slot = kf.alloca(I32, name="rc")
        par = kf.declare("mb_parallel_for", I32, [PTR, PTR, I64])
        kf.if_else(b.icmp_signed("==", ntasks, kf.i64(1)),
                   lambda: kf.b.store(kf.b.call(task, [slot, kf.i64(0)]), rc_slot),
                   lambda: kf.b.store(kf.b.call(par, [task, slot, ntasks]), rc_slot), "split")
        b.ret(b.load(rc_slot, typ=I32))
        kf.finish()
        self.body_fn = body_fn
        extra = ["out of memory allocating an attention workspace"]
        if plan.seqstart is not None:
            extra.append("seqstart must start at 0, never decrease and end at the number of tokens")
        if plan.block_table is not None:
            extra += ["paged attention: a row's length (keys held before the call + seq) must be at least seq and "
                      "at most max_blocks * block_size" + ("" if plan.bias is None or 3 in plan.spec.bias_broadcast
                                                           else ", and at most the bias's key dim"),
                      "paged attention: a block id of a row's block table is outside the pools' blocks"]
        return extra

    @staticmethod
    def _index(kf: KFunc, buf, ptr, idx) -> ir.Value:
        """``buf[idx]`` of an int32 / int64 index buffer (``seqstart``, a block table, lengths) as i64."""
        val = kf.load(I64 if buf.dtype == "int64" else I32, ptr, idx, align=8 if buf.dtype == "int64" else 4)
        return val if buf.dtype == "int64" else kf.b.sext(val, I64)

    def _seqstart(self, kf: KFunc, ptr, idx) -> ir.Value:
        """``seqstart[idx]`` as i64."""
        return self._index(kf, self.plan.seqstart, ptr, idx)

    def _paged_check(self, kf: KFunc, em, ptrs, B, Sq) -> ir.Value:
        """The longest row of the paged form, after checking every row ``b``: ``Sq <= lengths[b] <= M * BS``
        (and at most the bias's key dim when it has one) -- else the function returns the length error --
        and ``0 <= block_table[b, t] < N`` for the row's first ``ceil(lengths[b] / BS)`` entries -- else the
        block error; so that no unit reads outside the pools, the table or the bias."""
        plan, b = self.plan, kf.b
        table, lengths = ptrs[plan.spec.block_table], ptrs[plan.spec.lengths]
        nblocks = em.typed(plan.k.shape[0], "int64")
        bsize = em.typed(plan.k.shape[1], "int64")
        width = em.typed(plan.block_table.shape[1], "int64")
        skv = em.typed(plan.bias.shape[3], "int64") if plan.bias is not None and 3 not in plan.spec.bias_broadcast \
            else None
        one = kf.smax(bsize, 1)
        bad_len = kf.alloca(ir.IntType(1), name="bad_length")
        bad_block = kf.alloca(ir.IntType(1), name="bad_block")
        longest = kf.alloca(I64, name="longest")
        b.store(ir.Constant(ir.IntType(1), 0), bad_len)
        b.store(ir.Constant(ir.IntType(1), 0), bad_block)
        b.store(kf.i64(0), longest)
        with kf.loop(0, B, 1, "prow") as r:
            n = self._index(kf, plan.lengths, lengths, r)
            # the blocks the row uses, ceil(n / BS) without an addition that could overflow (n comes from data)
            nn = kf.smax(n, 0)
            used = kf.add(kf.sdiv(nn, one), b.zext(b.icmp_signed("!=", b.srem(nn, one), kf.i64(0)), I64))
            bad = b.or_(b.icmp_signed("<", n, Sq), b.icmp_signed(">", used, width))
            bad = b.or_(bad, b.and_(b.icmp_signed("==", bsize, kf.i64(0)), b.icmp_signed(">", n, kf.i64(0))))
            if skv is not None:
                bad = b.or_(bad, b.icmp_signed(">", n, skv))
            b.store(b.or_(b.load(bad_len), bad), bad_len)
            b.store(kf.smax(b.load(longest), n), longest)
            row = kf.mul(r, width)
            with kf.loop(0, kf.smin(used, width), 1, "pblk") as t:
                blk = self._index(kf, plan.block_table, table, kf.add(row, t))
                out = b.or_(b.icmp_signed("<", blk, kf.i64(0)), b.icmp_signed(">=", blk, nblocks))
                b.store(b.or_(b.load(bad_block), out), bad_block)
        with kf.if_(b.load(bad_len), "bad_length"):
            b.ret(ir.Constant(I32, self.error_code + 1))
        with kf.if_(b.load(bad_block), "bad_block"):
            b.ret(ir.Constant(I32, self.error_code + 2))
        return b.load(longest)

    def _var_len_sizes(self, kf: KFunc, em, ptr) -> tuple:
        """``(B, longest)`` of the variable-length form, after checking ``seqstart``: 0 first, never
        decreasing, the number of tokens last (else the function returns the seqstart error)."""
        b = kf.b
        tokens = em.typed(self.plan.q.shape[0], "int64")
        nseq = kf.sub(em.typed(self.plan.seqstart.shape[0], "int64"), 1)
        bad = kf.alloca(ir.IntType(1), name="bad_seqstart")
        longest = kf.alloca(I64, name="longest")
        b.store(b.icmp_signed("<", nseq, kf.i64(0)), bad)
        b.store(kf.i64(0), longest)
        with kf.if_(b.icmp_signed(">=", nseq, kf.i64(0)), "seqs"):
            first, last = self._seqstart(kf, ptr, kf.i64(0)), self._seqstart(kf, ptr, nseq)
            b.store(b.or_(b.icmp_signed("!=", first, kf.i64(0)), b.icmp_signed("!=", last, tokens)), bad)
            with kf.loop(0, nseq, 1, "seq") as q:
                n = kf.sub(self._seqstart(kf, ptr, kf.add(q, 1)), self._seqstart(kf, ptr, q))
                b.store(b.or_(b.load(bad), b.icmp_signed("<", n, kf.i64(0))), bad)
                b.store(kf.smax(b.load(longest), n), longest)
        with kf.if_(b.load(bad), "bad"):
            b.ret(ir.Constant(I32, self.error_code + 1))
        return nseq, b.load(longest)

    # -- one task: a range of work units (batch, kv head, block of MR rows)
    def _emit_task(self) -> ir.Function:
        plan = self.plan
        fn = self._function(f"{self.name}.attn_task", I32, [PTR, I64])
        kf = KFunc(self.module, fn)
        b = kf.b
        ctx, idx = fn.args
        vals = []
        for i, t in enumerate(self.ctx_t.elements):
            p = b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True, source_etype=self.ctx_t)
            vals.append(b.load(p, typ=t))
        ptrs = vals[:self.nparams]
        syms = vals[self.nparams:self.nparams + len(self.sig.sym_vars)]
        ex = dict(zip(_EXTRA, vals[self.nparams + len(self.sig.sym_vars):]))
        em = self._bind(kf, ptrs, syms)
        self.kf, self.em, self.ptrs, self.ex = kf, em, ptrs, ex
        u0 = kf.sdiv(kf.mul(idx, ex["units"]), ex["ntasks"])
        u1 = kf.sdiv(kf.mul(kf.add(idx, 1), ex["units"]), ex["ntasks"])
        raw = b.call(kf.declare("malloc", PTR, [I64]), [kf.i64(4 * self.ws_floats + 63)])
        with kf.if_(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), "oom"):
            b.ret(ir.Constant(I32, self.error_code))
        base = b.inttoptr(b.and_(kf.add(b.ptrtoint(raw, I64), 63), kf.i64(~63)), PTR)
        self.Kt, self.Qs, self.P, self.O, self.Mx, self.Ls, self.Al, self.Sl = (
            kf.gep(base, kf.i64(o), F32) for o in self.ws_offsets)
        # bias strides (0 along broadcast dims)
        if plan.bias is not None:
            shape = [em.typed(d, "int64") for d in plan.bias.shape]
            strides = [None] * 4
            s = kf.i64(1)
            for d in range(3, -1, -1):
                strides[d] = kf.i64(0) if d in plan.spec.bias_broadcast else s
                s = kf.mul(s, shape[d])
            self.bias_strides = strides
        with kf.loop(u0, u1, 1, "unit") as u:
            self._unit(u)
        b.call(kf.declare("free", ir.VoidType(), [PTR]), [raw])
        b.ret(ir.Constant(I32, 0))
        kf.finish()
        return fn

    def _row(self, r0, r):
        """``(i, h)``: query position and head of row ``r`` of the unit starting at row ``r0``."""
        kf = self.kf
        gr = kf.add(r0, r)
        if self.rep == 1:
            return gr, self.kvh
        i = kf.sdiv(gr, self.rep)
        return i, kf.add(kf.mul(self.kvh, self.rep), kf.b.srem(gr, kf.i64(self.rep)))

    def _causal_end(self, i):
        """One past row ``i``'s causal limit (``i + 1`` TopLeft, ``i + 1 + Sk - Sq`` BottomRight), unclamped."""
        kf = self.kf
        if self.plan.spec.causal == "TopLeft":
            return kf.add(i, 1)
        return kf.add(kf.sub(kf.add(i, 1), self.sq), self.sk)

    def _key_end(self, i):
        """One past the last key row ``i`` attends to (causal masks), clamped to ``[0, Sk]`` (the unit's
        sequence's length in the variable-length form)."""
        kf, Sk = self.kf, self.sk
        if self.plan.spec.causal == "none":
            return Sk
        return kf.smax(kf.smin(self._causal_end(i), Sk), 0)

    def _key_start(self, i):
        """The first key row ``i`` attends to: ``limit - W + 1`` for a sliding window of ``W`` keys ending at
        its causal ``limit`` (HF ``sliding_window_overlay``: ``j > limit - W``), unclamped; 0 without a window."""
        W = self.plan.spec.window
        return self.kf.sub(self._causal_end(i), W) if W else self.kf.i64(0)

    def _unit(self, u) -> None:
        """Work unit ``u``: its batch, kv head and block of rows; the token rows of its batch start at
        ``qbase`` / ``kbase`` (``b * Sq`` / ``b * Sk``, or ``seqstart[b]`` for sequences packed one after
        another, whose ``Sq = Sk`` is the sequence's length: a unit past its rows does nothing)."""
        kf, b, plan, ex = self.kf, self.kf.b, self.plan, self.ex
        nrb = ex["nrb"]
        rb = b.srem(u, nrb)
        bk = kf.sdiv(u, nrb)
        self.kvh = b.srem(bk, kf.i64(plan.kv_heads))
        self.bidx = kf.sdiv(bk, plan.kv_heads)
        r0 = kf.mul(rb, self.MR)
        if plan.block_table is not None:
            # a paged cache: the unit's row reads its keys through its block table row (tbase); Sk its length
            self.qbase, self.sq = kf.mul(self.bidx, ex["Sq"]), ex["Sq"]
            self.sk = self._index(kf, plan.lengths, self.ptrs[plan.spec.lengths], self.bidx)
            self.tbase = kf.mul(self.bidx, self.em.typed(plan.block_table.shape[1], "int64"))
            self.bsize = self.em.typed(plan.k.shape[1], "int64")
            self.r0, self.nr = r0, kf.smin(kf.i64(self.MR), kf.sub(ex["rows"], r0))
            self._unit_rows()
            return
        if plan.seqstart is None:
            self.qbase, self.kbase = kf.mul(self.bidx, ex["Sq"]), kf.mul(self.bidx, ex["Sk"])
            self.sq, self.sk = ex["Sq"], ex["Sk"]
            self.r0, self.nr = r0, kf.smin(kf.i64(self.MR), kf.sub(ex["rows"], r0))
            self._unit_rows()
            return
        start = self._seqstart(kf, self.ptrs[3], self.bidx)
        length = kf.sub(self._seqstart(kf, self.ptrs[3], kf.add(self.bidx, 1)), start)
        self.qbase = self.kbase = start
        self.sq = self.sk = length
        self.r0, self.nr = r0, kf.smin(kf.i64(self.MR), kf.sub(kf.mul(length, self.rep), r0))
        with kf.if_(b.icmp_signed(">", self.nr, kf.i64(0)), "unit_rows"):
            self._unit_rows()

    def _unit_rows(self) -> None:
        """The unit's rows ``[r0, r0 + nr)`` (``nr >= 1``): set up, key blocks, output."""
        kf, b, plan = self.kf, self.kf.b, self.plan
        D, Dv = plan.dim, plan.dim_v
        r0, nr = self.r0, self.nr
        scale = ir.Constant(F32, plan.spec.scale)
        qptr = self.ptrs[0]
        H = plan.heads
        # rows: Qs = q * scale (float32), m = -inf, l = 0, O = 0
        with kf.loop(0, nr, 1, "setup") as r:
            i, h = self._row(r0, r)
            qoff = kf.mul(kf.add(kf.mul(kf.add(self.qbase, i), H), h), D)
            with kf.loop(0, D, 1, "qd", plain=False) as d:
                v = b.fmul(self._load_f32(kf, qptr, kf.add(qoff, d), 1), scale, flags=KFunc.FM)
                kf.store(v, self.Qs, kf.add(kf.mul(r, D), d), align=4)
            kf.store(ir.Constant(F32, float("-inf")), self.Mx, r, align=4)
            kf.store(ir.Constant(F32, 0.0), self.Ls, r, align=4)
            with kf.loop(0, Dv, 1, "od", plain=False) as e:
                kf.store(ir.Constant(F32, 0.0), self.O, kf.add(kf.mul(r, Dv), e), align=4)
        i_last, _ = self._row(r0, kf.sub(nr, 1))
        kend = self._key_end(i_last)
        # a window: the loop starts at the first row's first key (rows ascend in i), so a decode step over a
        # long cache visits W keys, not Sk; blocks straddling a row's window start are masked per row
        kstart = kf.smax(self._key_start(self._row(r0, kf.i64(0))[0]), 0) if plan.spec.window else kf.i64(0)

        def key_blocks():
            with kf.loop(kstart, kend, self.KB, "kblk") as j0:
                kb = kf.smin(kf.i64(self.KB), kf.sub(kend, j0))
                if plan.block_table is not None:
                    self._slots(j0, kb)
                self._pack_keys(j0, kb)
                with kf.loop(0, nr, self.RP, "srow") as ra:
                    rows = self._pass_rows(ra)
                    self._softmax(rows, self._scores(rows), j0, kb)
                self._values(j0, kb)

        def one_vector_block():
            # at most one vector of keys (MiniLM's 12-token sentences): blocks of one vector
            # instead of KV, so the packing, scores, exponentials and value product skip the
            # KV - 1 masked vectors (MiniLM b1x12 attention on 16 lanes: 37 -> 22 us)
            full = (self.KV, self.KB)
            self.KV, self.KB = 1, self.L
            key_blocks()
            self.KV, self.KB = full

        if self.KV > 1:
            kf.if_else(b.icmp_signed("<=", kf.sub(kend, kstart), kf.i64(self.L)), one_vector_block, key_blocks,
                       "keys")
        else:
            key_blocks()
        self._finish_rows()

    def _slots(self, j0, kb) -> None:
        """The paged form: ``Sl[jj]`` = the pool row (slot index times Hk) of key ``j0 + jj``, ``jj < kb``: slot
        ``j % BS`` of block ``block_table[b, j // BS]`` (ids checked by :meth:`_paged_check`), found once per key
        block for the packing and the value product (one division per block, the slot then stepped)."""
        kf, b = self.kf, self.kf.b
        table = self.ptrs[self.plan.spec.block_table]
        bi = kf.alloca(I64, name="blk_index")
        rem = kf.alloca(I64, name="blk_slot")
        b.store(kf.sdiv(j0, self.bsize), bi)
        b.store(b.srem(j0, self.bsize), rem)
        with kf.loop(0, kb, 1, "slot") as jj:
            blk = self._index(kf, self.plan.block_table, table, kf.add(self.tbase, b.load(bi)))
            r = b.load(rem)
            kf.store(kf.mul(kf.add(kf.mul(blk, self.bsize), r), self.plan.kv_heads), self.Sl, jj, align=8)
            nxt = kf.add(r, 1)
            wrap = b.icmp_signed("==", nxt, self.bsize)
            b.store(b.select(wrap, kf.i64(0), nxt), rem)
            b.store(b.select(wrap, kf.add(b.load(bi), 1), b.load(bi)), bi)
        self.j0 = j0

    def _kv_offset(self, j, dim: int):
        """Element offset of key / value row ``j`` of the unit's batch and kv head (the paged form: through
        ``Sl``, :meth:`_slots`, of the key block being visited)."""
        kf = self.kf
        if self.plan.block_table is not None:
            row = kf.load(I64, self.Sl, kf.sub(j, self.j0), align=8)
            return kf.mul(kf.add(row, self.kvh), dim)
        return kf.mul(kf.add(kf.mul(kf.add(self.kbase, j), self.plan.kv_heads), self.kvh), dim)

    def _pack_keys(self, j0, kb) -> None:
        """``Kt[d][jj] = k[b, j0 + jj, kvh, d]`` (float32) for ``jj < kb``, 0 for ``kb <= jj < KB``:
        ``L x L`` blocks transposed in registers, scalar tails."""
        kf, b, D, L, KB = self.kf, self.kf.b, self.plan.dim, self.L, self.KB
        kptr = self.ptrs[1]
        full = kf.sub(kb, b.srem(kb, kf.i64(L)))
        dfull = D - D % L
        with kf.loop(0, full, L, "pk") as jg:
            offs = [self._kv_offset(kf.add(kf.add(j0, jg), t), D) for t in range(L)]
            if dfull:
                with kf.loop(0, dfull, L, "pd") as d:
                    rows = [self._load_f32(kf, kptr, kf.add(o, d), L) for o in offs]
                    for t, col in enumerate(kf.transpose(rows)):
                        kf.store(col, self.Kt, kf.add(kf.mul(kf.add(d, t), KB), jg), align=4)
            for dd in range(dfull, D):
                for t in range(L):
                    kf.store(self._load_f32(kf, kptr, kf.add(offs[t], dd), 1), self.Kt,
                             kf.add(kf.i64(dd * KB), kf.add(jg, t)), align=4)
        with kf.loop(full, kb, 1, "pkt") as jj:
            off = self._kv_offset(kf.add(j0, jj), D)
            with kf.loop(0, D, 1, "pdt") as d:
                kf.store(self._load_f32(kf, kptr, kf.add(off, d), 1), self.Kt, kf.add(kf.mul(d, KB), jj), align=4)
        with kf.loop(kb, KB, 1, "pkz") as jj:
            with kf.loop(0, D, 1, "pdz") as d:
                kf.store(ir.Constant(F32, 0.0), self.Kt, kf.add(kf.mul(d, KB), jj), align=4)

    def _pass_rows(self, ra) -> list:
        """The ``RP`` rows of a pass from row ``ra``, a row past the unit's last one clamped to it
        (its scores and value sums are computed again, the same, and not applied twice)."""
        kf = self.kf
        last = kf.sub(self.nr, 1)
        return [ra] + [kf.smin(kf.add(ra, x), last) for x in range(1, self.RP)]

    def _scores(self, rows: list) -> list[list[ir.Value]]:
        """``sum_d Qs[r][d] * Kt[d][:]`` for each of ``rows``: ``KV`` vectors each."""
        kf, b, D, L, KB = self.kf, self.kf.b, self.plan.dim, self.L, self.KB
        vt = vec(F32, L)
        slots = [[kf.alloca(vt, name="sacc") for _ in range(self.KV)] for _ in rows]
        for row in slots:
            for s in row:
                b.store(kf.fzero(L), s)
        qrows = [kf.mul(r, D) for r in rows]
        with kf.loop(0, D, 1, "sd") as d:
            xs = [self._splat(kf, kf.load(F32, self.Qs, kf.add(q, d), align=4)) for q in qrows]
            krow = kf.mul(d, KB)
            for t in range(self.KV):
                kv = kf.load(vt, self.Kt, kf.add(krow, t * L), align=4)
                for x, row in zip(xs, slots):
                    b.store(kf.fma(x, kv, b.load(row[t], typ=vt)), row[t])
        return [[b.load(s, typ=vt) for s in row] for row in slots]

    def _bias_vec(self, row_off, j, count) -> ir.Value:
        """Bias for ``L`` keys from ``j`` (float32), reading only the first ``count`` (<= L)
        of them when ``count < L`` (the rest 0)."""
        kf, b, L = self.kf, self.kf.b, self.L
        bptr = self.ptrs[self.plan.spec.bias]
        vt = vec(F32, L)
        if 3 in self.plan.spec.bias_broadcast:
            return self._splat(kf, self._load_f32(kf, bptr, row_off, 1))
        off = kf.add(row_off, j)
        slot = kf.alloca(vt, name="bvec")
        tmp = kf.alloca(F32, L, name="btail", align=64)

        def full():
            kf.b.store(self._load_f32(kf, bptr, off, L), slot)

        def tail():
            for t in range(L):
                kf.store(ir.Constant(F32, 0.0), tmp, kf.i64(t), align=4)
            with kf.loop(0, count, 1, "bt") as t:
                kf.store(self._load_f32(kf, bptr, kf.add(off, t), 1), tmp, t, align=4)
            kf.b.store(kf.load(vt, tmp, None, align=4), slot)

        kf.if_else(b.icmp_signed(">=", count, kf.i64(L)), full, tail, "bias")
        return b.load(slot, typ=vt)

    def _softmax(self, rows: list, accs: list, j0, kb) -> None:
        """Online softmax step (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023) of a pass of
        rows (:meth:`_pass_rows`; a copy of the last row computes and stores the same values again)
        for the key block ``[j0, j0 + kb)``: scores soft-capped (``softcap``), masked (bias, causal
        limit, the window's start, block end),
        ``m' = max(m, max_j s)``, ``alpha = exp(m - m')``, ``P = exp(s - m')``, ``l' = alpha l + sum
        P``. A row with every score so far ``-inf`` uses ``m' = 0`` for the exponentials, so that its
        ``P`` and ``alpha`` are 0 (never ``-inf - -inf``). The rows' maxima and sums are reduced
        together (:meth:`_reduce_rows`) and their ``m``, ``l`` and ``alpha`` updated as one vector
        (one exponential for all of them), where each row's horizontal max and sum and its scalar
        ``exp`` took 13% of the Whisper-shaped attention (Xeon, 2 threads, interleaved: Whisper-shaped
        13.4 -> 11.9 ms, TinyLlama prefill 403 -> 369 us, MiniLM 8 x 41 202 -> 187 us; with the AVX2
        kernels 22.7 -> 21.3 ms, 647 -> 615, 288 -> 257)."""
        kf, b, L, plan = self.kf, self.kf.b, self.L, self.plan
        iota = ir.Constant(vec(I32, L), list(range(L)))
        neg_inf = self._cvec(float("-inf"))
        masked, maxes = [], []
        for r, row_accs in zip(rows, accs):
            i, h = self._row(self.r0, r)
            lim = kf.smin(self._key_end(i), kf.add(j0, kb))   # keys j < lim count
            lo = self._key_start(i) if plan.spec.window else None   # ... and keys j >= lo
            if plan.bias is not None:
                st = self.bias_strides
                row_off = kf.add(kf.add(kf.mul(self.bidx, st[0]), kf.mul(h, st[1])), kf.mul(i, st[2]))
            svals = []
            for t, s in enumerate(row_accs):
                jt = kf.add(j0, t * L)
                if plan.spec.softcap:
                    s = self._softcap(kf, s)
                if plan.bias is not None:
                    avail = kf.smax(kf.smin(kf.sub(kf.add(j0, kb), jt), L), 0)
                    s = b.fadd(s, self._bias_vec(row_off, jt, avail), flags=KFunc.FM)
                n_ok = b.trunc(kf.smax(kf.smin(kf.sub(lim, jt), L), 0), I32)
                valid = b.icmp_signed("<", iota, kf.splat(n_ok, L))
                if lo is not None:   # the lanes before the window's start
                    n_lo = b.trunc(kf.smax(kf.smin(kf.sub(lo, jt), L), 0), I32)
                    valid = b.and_(valid, b.icmp_signed(">=", iota, kf.splat(n_lo, L)))
                svals.append(b.select(valid, s, neg_inf))
            mx = svals[0]
            for s in svals[1:]:
                mx = self._max(mx, s)
            masked.append(svals)
            maxes.append(mx)
        n = len(rows)
        m_old = self._rows_vec([kf.load(F32, self.Mx, r, align=4) for r in rows])
        m_new = self._max(m_old, self._rows_vec(self._reduce_rows(maxes, self._max)))
        zero = ir.Constant(vec(F32, n), [0.0] * n)
        m_use = b.select(b.fcmp_ordered("==", m_new, ir.Constant(vec(F32, n), [float("-inf")] * n)), zero, m_new)
        alpha = self._exp(kf, b.fsub(m_old, m_use, flags=KFunc.FM))
        tots = []
        for x, (r, svals) in enumerate(zip(rows, masked)):
            ms = self._splat(kf, b.extract_element(m_use, ir.Constant(I32, x)))
            tot = None
            for t, s in enumerate(svals):
                p = self._exp(kf, b.fsub(s, ms, flags=KFunc.FM))
                kf.store(p, self.P, kf.add(kf.mul(r, self.KB), t * L), align=4)
                tot = p if tot is None else b.fadd(tot, p, flags=KFunc.FM)
            tots.append(tot)
        sums = self._rows_vec(self._reduce_rows(tots, lambda u, w: b.fadd(u, w, flags=KFunc.FM)))
        l_old = self._rows_vec([kf.load(F32, self.Ls, r, align=4) for r in rows])
        l_new = kf.fma(l_old, alpha, sums)
        for x, r in enumerate(rows):
            lane = ir.Constant(I32, x)
            kf.store(b.extract_element(l_new, lane), self.Ls, r, align=4)
            kf.store(b.extract_element(m_new, lane), self.Mx, r, align=4)
            kf.store(b.extract_element(alpha, lane), self.Al, r, align=4)

    def _values(self, j0, kb) -> None:
        """``O[r] = alpha[r] O[r] + sum_jj P[r][jj] v[b, j0 + jj, kvh, :]`` for the unit's rows:
        ``CU`` vectors of head_dim at a time for two rows, a scalar loop over the tail."""
        kf, b, Dv, L, KB = self.kf, self.kf.b, self.plan.dim_v, self.L, self.KB
        vptr = self.ptrs[2]
        vt = vec(F32, L)
        nchunks = Dv // L
        nr = self.nr
        for c0 in range(0, nchunks, self.CU):
            cs = range(c0, min(c0 + self.CU, nchunks))
            with kf.loop(0, nr, self.RP, "vrow") as ra:
                rows = self._pass_rows(ra)
                slots = {}
                for x, r in enumerate(rows):
                    al = self._splat(kf, kf.load(F32, self.Al, r, align=4))
                    for c in cs:
                        s = kf.alloca(vt, name="oacc")
                        o = kf.load(vt, self.O, kf.add(kf.mul(r, Dv), c * L), align=4)
                        b.store(b.fmul(o, al, flags=KFunc.FM), s)
                        slots[x, c] = s
                prow = [kf.mul(r, KB) for r in rows]
                with kf.loop(0, kb, 1, "vj") as jj:
                    voff = self._kv_offset(kf.add(j0, jj), Dv)
                    ps = [self._splat(kf, kf.load(F32, self.P, kf.add(p, jj), align=4)) for p in prow]
                    for c in cs:
                        vv = self._load_f32(kf, vptr, kf.add(voff, c * L), L)
                        for x, px in enumerate(ps):
                            s = slots[x, c]
                            b.store(kf.fma(px, vv, b.load(s, typ=vt)), s)
                for x, r in enumerate(rows):
                    for c in cs:
                        kf.store(b.load(slots[x, c], typ=vt), self.O, kf.add(kf.mul(r, Dv), c * L), align=4)
        if Dv % L:
            with kf.loop(0, nr, 1, "vtr") as r:
                al = kf.load(F32, self.Al, r, align=4)
                with kf.loop(nchunks * L, Dv, 1, "vte") as e:
                    oidx = kf.add(kf.mul(r, Dv), e)
                    s = kf.alloca(F32, name="otail")
                    b.store(b.fmul(kf.load(F32, self.O, oidx, align=4), al, flags=KFunc.FM), s)
                    with kf.loop(0, kb, 1, "vtj") as jj:
                        vv = self._load_f32(kf, vptr, kf.add(self._kv_offset(kf.add(j0, jj), Dv), e), 1)
                        p = kf.load(F32, self.P, kf.add(kf.mul(r, KB), jj), align=4)
                        b.store(kf.fma(p, vv, b.load(s, typ=F32)), s)
                    kf.store(b.load(s, typ=F32), self.O, oidx, align=4)

    def _finish_rows(self) -> None:
        """``out[b, i, h, :] = O[r] / l[r]`` (0 where ``l`` is 0: every key masked, or no keys)."""
        kf, b, plan = self.kf, self.kf.b, self.plan
        Dv, em = plan.dim_v, self.em
        optr = self.ptrs[-1]
        with kf.loop(0, self.nr, 1, "fin") as r:
            i, h = self._row(self.r0, r)
            lsum = kf.load(F32, self.Ls, r, align=4)
            inv = b.select(b.fcmp_ordered("==", lsum, ir.Constant(F32, 0.0)), ir.Constant(F32, 0.0),
                           b.fdiv(ir.Constant(F32, 1.0), lsum))
            ooff = kf.mul(kf.add(kf.mul(kf.add(self.qbase, i), plan.heads), h), Dv)
            with kf.loop(0, Dv, 1, "fe", plain=False) as e:
                val = b.fmul(kf.load(F32, self.O, kf.add(kf.mul(r, Dv), e), align=4), inv, flags=KFunc.FM)
                val = em.cast_value(val, "float32", plan.out_dtype)
                em.store_value(plan.out, val, kf.gep(optr, kf.add(ooff, e), mem_type(plan.out_dtype)))


def emit_attention(mod: ModuleEmitter, name: str, func, sig, plan: AttentionPlan,
                   simd: SimdInfo) -> tuple[ir.Function, list[str]]:
    """Emit ``<name>.compute`` and its task function for ``plan``; returns the body function (the
    ABI entry calls it) and the extra error messages (codes after the signature checks)."""
    em = AttentionEmitter(mod, name, func, sig, plan, simd)
    extra = em.emit()
    return em.body_fn, extra

