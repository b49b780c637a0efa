"""The linear kernel driver: :class:`LinearEmitter` writes the body function (x widened to float32
once when needed, the prepared copies of x, the work split over threads, GEMV or GEMM by ``M``) and
the shared pieces (task context, epilogue, workspaces, helper cache); the kernel families are its
mixins, one per file: :mod:`.gemv`, :mod:`.int8_gemv`, :mod:`.bf16`, :mod:`.gemm`, :mod:`.int8_gemm`, :mod:`.amx`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from llvmlite import ir

from ....ir import expr as E
from ....ir.op.quantize import ROW_TILE
from ....ir.tir import PrimFunc
from ...llvm_emit import F32, I1, I32, I64, PTR, BufferExprEmitter, ModuleEmitter, mem_type
from ..decode import DenseDecoder, GroupQuantDecoder
from ..simd import KFunc, SimdInfo, bind_params, internal_function, vec
from .plan import TUNING, LinearPlan
from .int8_rows import int8_gemv_supported
from .gemv import GemvFloat
from .bf16 import Bf16Dot
from .int8_gemv import GemvInt8
from .gemm import GemmFloat
from .amx import AMX_ROWS, GemmAmx
from .int8_gemm import GemmInt8
from .tiles import GemvTiles
from .dense_tiles import GemvDenseTiles

__all__ = ["LinearEmitter", "emit_linear"]


class _Ctx:
    """The task context: a struct of param pointers, symbolic vars and kernel values."""

    def __init__(self, nparams: int, nsyms: int, extra: list[str]) -> None:
        self.nparams, self.nsyms = nparams, nsyms
        self.extra = extra
        self.type = ir.LiteralStructType([PTR] * (nparams + 1) + [I64] * (nsyms + len(extra)))

    def store(self, kf: KFunc, slot, ptrs, syms, xf, values: dict) -> None:
        vals = list(ptrs) + [xf] + list(syms) + [values[k] for k in self.extra]
        for i, v in enumerate(vals):
            # ``slot`` is the (typed) alloca: llvmlite derives the field pointer type
            p = kf.b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True)
            kf.b.store(v, p)

    def load(self, kf: KFunc, ctx):
        out = []
        for i, t in enumerate(self.type.elements):
            p = kf.b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                         source_etype=self.type)
            out.append(kf.b.load(p, typ=t))
        n = self.nparams
        ptrs, xf = out[:n], out[n]
        syms = out[n + 1:n + 1 + self.nsyms]
        extra = dict(zip(self.extra, out[n + 1 + self.nsyms:]))
        return ptrs, xf, syms, extra


@dataclass
class _State:
    """Values loaded from the task context inside one generated function."""

    kf: KFunc
    em: BufferExprEmitter
    ptrs: list
    xf: ir.Value
    M: ir.Value
    N: ir.Value
    K: ir.Value
    units: ir.Value
    ntasks: ir.Value
    args: list
    fn: ir.Function
    extra: dict = field(default_factory=dict)


class LinearEmitter(GemvFloat, Bf16Dot, GemvInt8, GemvTiles, GemvDenseTiles, GemmFloat, GemmInt8, GemmAmx):
    """Emits one linear kernel (see the package docstring); the family mixins add the GEMV / GEMM
    code paths."""

    def __init__(self, mod: ModuleEmitter, name: str, func: PrimFunc, sig, plan: LinearPlan,
                 simd: SimdInfo) -> None:
        self.mod = mod
        self.module = mod.module
        self.name = name
        self.func = func
        self.sig = sig
        self.plan = plan
        self.simd = simd
        self.lanes = simd.lanes
        self.nw = len(plan.weights)
        self.error_code = len(sig.checks) + 1
        regs = simd.registers
        self.R = TUNING["gemv_rows"]
        budget = max(regs - 6, 4)
        self.MT = max(1, min(4, budget // self.R))
        self.MG = TUNING["gemv_max_rows"]
        # a transposed output whose last dim is the products' innermost leading dim: the GEMMs store
        # it in runs of rows (:meth:`_epilogue_t_fn`)
        self.rows_contiguous = (plan.transposed and len(plan.lead_vars) >= 1
                                and plan.out_vars[-1] is plan.lead_vars[-1])
        self._epi_t: dict = {}
        self.MR = TUNING["mr"]
        self.NV = 4 if regs >= 32 else 2
        self.NR = self.NV * self.lanes
        step = self.lanes
        for w in plan.weights:
            if w.format == "group" and w.group_size <= 256:
                step = max(step, w.group_size)
        kc_bytes = TUNING["kc_bytes"] or (16384 if regs < 32 else 65536)
        kc = max(32, kc_bytes // (4 * self.NR))
        self.KC = max(step, kc - kc % step)
        # GEMV weights read through GroupQuantDecoder.fast_chunk: one permuted copy of x and
        # per-group sums of x per distinct (bits, group_size)
        self.qkeys: list = []
        self.qfast: dict[int, tuple] = {}
        # 4-bit weights whose graph allows int8 activations: integer GEMV (``_gemv_micro_i8``),
        # one int8 copy of x per distinct group size (the int16 copy of the x16 tiles, below)
        self.ikeys: list[int] = []
        self.qint: dict[int, int] = {}
        k_static = E.simplify(plan.params[plan.x].shape[-1])
        # row-tiled 4- and 8-bit weights (``row_tile``): the row-tiled kernels (:mod:`.tiles`), with
        # int8 activations where int8_gemv_supported takes them, else float ones
        self.tiled = any(d.row_tile for d in plan.weights)
        # float weights in row tiles (``DenseWeight.row_tile``): the same tiles, a column is a load
        self.tiled_dense = self.tiled and plan.weights[0].format == "dense"   # the planner: all or none
        self.tile_zero_point = plan.weights[0].zero_point if self.tiled else 0   # the planner: one for all
        for w, d in enumerate(plan.weights):
            int8 = (d.format == "group" and d.activation == "int8" and simd.int8_dot and isinstance(k_static, E.IntImm)
                    and int8_gemv_supported(d.storage, d.bits, d.group_size, k_static.value, d.row_tile, d.zero_point))
            if self.tiled and not int8:
                continue
            if int8:
                if d.group_size not in self.ikeys:
                    self.ikeys.append(d.group_size)
                self.qint[w] = d.group_size
                continue
            if d.format == "group" and GroupQuantDecoder.fast_dot_supported(
                    d.storage, d.bits, d.group_size, self.lanes):
                key = (d.bits, d.group_size)
                if key not in self.qkeys:
                    self.qkeys.append(key)
                self.qfast[w] = key
        self.K_static = k_static.value if isinstance(k_static, E.IntImm) else None
        if self.K_static is not None and self.K_static <= TUNING["gemv_short_k"]:
            # short rows: the GEMV's per-(row, input row) reductions and epilogue calls weigh
            # more than the GEMM's panel packing (MiniLM's K = 384 / 1536 at 12 tokens)
            self.MG = min(self.MG, TUNING["gemv_max_rows_short_k"])
        # bfloat16 activations and weights on AVX512-BF16: the GEMV (and, variant bf16dot, the GEMM)
        # multiply pairs of columns with vdpbf16ps; that GEMM's panels hold the weights' 32-bit words
        variant = set(plan.variant.split("+"))
        self.bf16dot = bool(variant & {"bf16dot", "bf16gemv"})   # the GEMV multiplies with vdpbf16ps
        self.bf16dot_gemm = "bf16dot" in variant                 # and the GEMM
        # int8 activations on a CPU with VNNI: vpdpbusd replaces vpmaddubsw + vpmaddwd
        self.vnni = "vnni" in variant
        self.vnni_tag = (".vnni" + ("" if simd.native("vnni") else "_emulated")) if self.vnni else ""
        self.dot_native = self.vnni and simd.native("vnni")       # vpdpbusd itself, not its emulation
        if self.qfast or self.qint:
            self.R = TUNING["gemv_rows_q"]
            self.MT = max(1, min(4, budget // self.R))
        self.MTq = max(1, min(4, budget // (2 * self.R)))
        self.MTi = TUNING["gemv_rows_x_i8"] or (4 if regs >= 32 else 2)
        # int8-activation GEMM when every weight takes the int8 path: it quantizes the same
        # columns as the GEMV (the rest stay float), so every batch size computes the same
        self.i8gemm = bool(TUNING["gemm_i8"]) and len(self.qint) == self.nw and not self.tiled
        self.tile_int8 = self.tiled and len(self.qint) == self.nw
        # 4- / 8-bit row tiles with x in int16 per group (plan variant x16, GemvTiles._tile_fn_x16): x's
        # int16 rows in the int8 rows' buffers (ikeys / qint: every weight whose x is an Int8Rows copy)
        self.tile_x16 = self.tiled and not self.tile_int8 and "x16" in variant
        if self.tile_x16:
            for w, d in enumerate(plan.weights):
                if d.group_size not in self.ikeys:
                    self.ikeys.append(d.group_size)
                self.qint[w] = d.group_size
        # the tiles read x as an integer copy (Int8Rows: int8 or int16 x), made by all threads before them,
        # and take every M, no float GEMM (int16 x against the float GEMM on panels packed from the tiles,
        # q4 2048 -> 5632 at 512 / 2048 rows, 2 threads, AMD Zen 5: the AVX2 code without VNNI 60.9 -> 53.4
        # / 480.5 -> 223.1 ms, the host's AVX-512 29.0 -> 21.1 / 125.8 -> 80.9)
        self.tile_int_x = self.tile_int8 or self.tile_x16
        if self.tiled:
            # row-tiled weights: the tiles for every M with int8 / int16 x, else up to
            # ``tile_max_rows`` rows and the float GEMM (panels packed from the tiles) above
            # (a unit of work: a tile, or for float weights the tiles of one helper call)
            self.R = ROW_TILE * (self._dense_tile_shape()[2] if self.tiled_dense else 1)
            self.MG = (1 << 40 if self.tile_int_x else
                       self._dense_tile_max_rows() if self.tiled_dense
                       else TUNING["tile_max_rows"] or (32 if regs >= 32 else 16))
        elif any(w.format == "group" for w in plan.weights):
            # GEMV re-decodes a tile's packed weights for every MT rows of x, GEMM once per
            # panel: the crossover comes earlier than for float weights
            groups = [w for w, d in enumerate(plan.weights) if d.format == "group"]
            if self.i8gemm:
                self.MG = TUNING["gemv_max_rows_qig"]
            elif all(w in self.qint for w in groups):
                self.MG = TUNING["gemv_max_rows_qi"]
            else:
                self.MG = min(self.MG, TUNING["gemv_max_rows_q"] or (8 if regs >= 32 else 4))
        self.MRI = TUNING["mr_i8"] or (6 if regs >= 32 else 3)
        step_i = max([64] + list(self.qint.values()))
        self.KCI = max(step_i, TUNING["kc_i8"] - TUNING["kc_i8"] % step_i)
        self.NRI = 8 * TUNING["nv_i8"]
        self.gemm_nr = self.NRI if self.i8gemm else self.NR
        # the float GEMM's row chunks (see :meth:`_gemm_chunk_rows`), for float weights only: a chunk
        # packs its own panels, and decoding 4-bit ones per chunk cost more than the chunks saved
        # (q4 2048 x 5632 at 128 rows 7.8 -> 9.9 ms in four chunks, Xeon)
        self.row_chunks = not self.i8gemm and all(d.format == "dense" for d in plan.weights)
        # the GEMM on AMX tiles (:mod:`.amx`): bfloat16 products (1) or the bf16x3 split (3)
        self.amx_split = 3 if "amx3" in variant else 1 if "amx" in variant else 0
        # from how many rows: below, the FMA kernels (the GEMV / row tiles, then the float GEMM)
        self.amx_rows = TUNING["amx3_min_rows" if self.amx_split == 3 else "amx_min_rows"]
        if self.amx_split:
            self.MG = min(self.MG, self.amx_rows - 1)
        # bfloat16 x and weights with an even static K (the vdpbf16ps variants): the tiles read the
        # weights' 32-bit words (pairs of columns) and x's rows as they are, no float32 round trip
        self.amx_words = self.amx_split == 1 and self.bf16dot and not self.tiled
        # a batched weight (one matrix per batch of x's rows, DenseWeight.batched): the float GEMM for
        # every M, its row chunks within one batch, the batch's matrix packed by each chunk
        self.batched = plan.weights[0].batched if plan.weights[0].format == "dense" else 0
        # a weight stored (K, N) (DenseWeight.kn): the float GEMM for every M, panels copied row by row
        self.kn = plan.weights[0].kn if plan.weights[0].format == "dense" else 0
        if self.batched or self.kn:
            self.MG = 0
        extra = ["M", "N", "K", "ntasks", "units"] + (["mc"] if self.row_chunks else [])
        extra += ["mb", "cpb"] if self.batched else []
        extra += ["xa", "xtasks_amx"] if self.amx_split else []
        extra += [f"xq{i}" for i in range(len(self.qkeys))] + [f"xs{i}" for i in range(len(self.qkeys))]
        extra += [f"xi{i}" for i in range(len(self.ikeys))]
        extra += ["xts"] if self.tiled and not self.tile_int_x and not self.tiled_dense else []
        extra += ["xtasks"] if self.tile_int_x else []
        self.ctx = _Ctx(len(func.params), len(sig.sym_vars), extra)

    def _function(self, fname: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        return internal_function(self.module, fname, ret, args)

    def _bind(self, kf: KFunc, ptrs, syms) -> BufferExprEmitter:
        return bind_params(self.mod, kf, self.sig, self.func, ptrs, syms)

    def _weight_args(self, st: "_State", w: int) -> list:
        """``[ptr0, ptr1, ld0, ld1]`` of weight ``w`` in a function with the context loaded:
        the weight (or packed words and scales) and their row lengths."""
        kf, em, ptrs = st.kf, st.em, st.ptrs
        desc, params = self.plan.weights[w], self.plan.params
        if desc.format == "dense":   # ld: the row length (K, also for row tiles: (N / 16, K, 16))
            wb = params[desc.w]
            ld = wb.shape[-1] if desc.batched or desc.kn else wb.shape[1]   # (K, or N when stored (.., K, N))
            return [ptrs[desc.w], ir.Constant(PTR, None), em.typed(ld, "int64"), kf.i64(0)]
        q, s = params[desc.q], params[desc.scale]
        return [ptrs[desc.q], ptrs[desc.scale], em.typed(q.shape[1], "int64"),
                em.typed(s.shape[1], "int64")]

    def _fmt_key(self, w: int) -> str:
        d = self.plan.weights[w]
        if d.format == "dense":
            return f"dense_{d.dtype}" + (f"_t{d.row_tile}" if d.row_tile else "")
        return (f"q{d.bits}_{d.storage}_{d.scale_dtype}_g{d.group_size}"
                f"_z{d.zero_point}".replace("-", "m"))

    def _decoder(self, w: int, ptr0, ptr1, ld0, ld1):
        d = self.plan.weights[w]
        if d.format == "dense":
            return DenseDecoder(ptr0, d.dtype, ld0, self.lanes)
        return GroupQuantDecoder(ptr0, d.storage, ptr1, d.scale_dtype, ld0, ld1, d.bits,
                                 d.group_size, d.zero_point, self.lanes)

    def _shared(self, key: str):
        """Module-wide cache of helper functions shared by every kernel of the module."""
        cache = self.mod.__dict__.setdefault("_mb_shared_kernels", {})
        return cache, cache.get(key)

    def _shared_function(self, fname: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        fn = self._function(fname, ret, args)
        fn.attributes.add("noinline")
        return fn

    def _new_helper(self, key: str, args: list[ir.Type]) -> tuple[ir.Function, KFunc | None]:
        """The module-shared ``void key(*args)`` helper: ``(fn, None)`` when it exists already,
        else ``(fn, kf)`` to emit its body (pointer arguments are ``noalias``: helpers get
        distinct buffers)."""
        cache, fn = self._shared(key)
        if fn is not None:
            return fn, None
        fn = self._shared_function(key, ir.VoidType(), args)
        cache[key] = fn
        for a, t in zip(fn.args, args):
            if t == PTR:
                a.add_attribute("noalias")
        return fn, KFunc(self.module, fn)

    def _bind_lead(self, kf: KFunc, em: BufferExprEmitter, m, lead: list) -> None:
        """Bind ``lead`` (the iter vars of the products' first ``len(lead)`` dims) for their flat
        index ``m``."""
        rem = m
        for d in range(len(lead) - 1, -1, -1):
            if d == 0:
                em.env[lead[d]] = rem
            else:
                dim = em.typed(self.plan.acc_shape[d], "int64")
                em.env[lead[d]] = kf.b.srem(rem, dim)
                rem = kf.b.sdiv(rem, dim)

    def _epilogue_row(self, kf: KFunc, em: BufferExprEmitter, m, N):
        """Bind the iter vars of the products' leading dims for flat row ``m``; returns the row's
        offset in the output (None when the output is transposed: :meth:`_epilogue_store` computes
        each element's)."""
        self._bind_lead(kf, em, m, self.plan.lead_vars)
        return None if self.plan.transposed else kf.mul(m, N)

    def _epilogue_store(self, kf: KFunc, em: BufferExprEmitter, out_ptr, row_off, n, accs) -> None:
        """Store output ``(row, n)`` of the products (``row_off`` from :meth:`_epilogue_row`): at
        ``row_off + n``, or, in a transposed output, at the row-major offset of its iter vars."""
        out = self.plan.params[self.plan.out]
        em.env[self.plan.n_var] = n
        for var, val in zip(self.plan.acc_vars, accs):
            em.env[var] = val
        v = em.typed(self.plan.value, out.dtype)
        if row_off is None:
            order = self.plan.out_vars
            off = em.env[order[0]]
            for var, dim in zip(order[1:], out.shape[1:]):
                off = kf.add(kf.mul(off, em.typed(dim, "int64")), em.env[var])
        else:
            off = kf.add(row_off, n)
        em.store_value(out, v, kf.gep(out_ptr, off, mem_type(out.dtype)))

    def emit(self) -> list[str]:
        """Write ``<name>.compute``: it returns 0 at once for an empty output, widens a float16 / bfloat16
        ``x`` to float32 in a malloc'ed copy where the float GEMM reads it, prepares the quantized /
        int8 / AMX forms of ``x`` its variants need, picks the GEMV (M <= ``MG`` rows), the AMX GEMM or the
        GEMM, splits the work over threads (one task below ``parallel_min_macs`` multiply-adds) and frees
        the scratch buffers. Returns the messages of the error codes after the signature's checks (one: a
        failed workspace allocation)."""
        func, plan = self.func, self.plan
        nparams = len(func.params)
        body_fn = self._function(f"{self.name}.compute", I32,
                                 [PTR] * nparams + [I64] * len(self.sig.sym_vars))
        for a in body_fn.args[:nparams]:
            a.add_attribute("noalias")
        self.epi_fn = self._emit_epilogue()
        micro = self._micro_bf16_fn if self.bf16dot_gemm else self._micro_fn
        self.micro_fns = {} if self.i8gemm or self.tile_int_x else {t: micro(t) for t in range(1, self.MR + 1)}
        gemv = self._emit_task("gemv")
        gemm = gemv if self.tile_int_x else self._emit_task("gemm")
        gemm_amx = self._emit_task("gemm_amx") if self.amx_split else None
        kf = KFunc(self.module, body_fn)
        b = kf.b
        ptrs = list(body_fn.args[:nparams])
        syms = list(body_fn.args[nparams:])
        em = self._bind(kf, ptrs, syms)
        x = plan.params[plan.x]
        M = kf.i64(1)
        for d in x.shape[:-1]:
            M = kf.mul(M, em.typed(d, "int64"))
        K = em.typed(x.shape[-1], "int64")
        N = em.typed(plan.acc_shape[-1], "int64")
        empty = b.or_(b.icmp_signed("<=", M, kf.i64(0)), b.icmp_signed("<=", N, kf.i64(0)))
        with kf.if_(empty, "empty"):
            b.ret(ir.Constant(I32, 0))
        # float32 view of x
        xptr = ptrs[plan.x]
        use_gemv = b.icmp_signed("<=", M, kf.i64(self.MG))
        use_amx = b.icmp_signed(">=", M, kf.i64(self.amx_rows)) if self.amx_split else ir.Constant(I1, 0)
        # x in float32 for the float GEMM (and the tiles but from bfloat16 x, which they read as it is)
        fma_gemm = b.not_(b.or_(use_gemv, use_amx)) if self.amx_words else b.not_(use_gemv)
        if x.dtype == "float32" or self.bf16dot_gemm:   # the bfloat16 GEMV / GEMM read x as it is
            xf = xptr
            scratch = None
        else:
            slot = kf.alloca(PTR, name="xf")
            b.store(ir.Constant(PTR, None), slot)

            def widen():
                bb = kf.b
                malloc = kf.declare("malloc", PTR, [I64])
                total = kf.mul(M, K)
                buf = bb.call(malloc, [kf.smax(kf.mul(total, 4), 1)])
                with kf.if_(bb.icmp_unsigned("==", buf, ir.Constant(PTR, None)), "oom"):
                    bb.ret(ir.Constant(I32, self.error_code))
                bb.store(buf, slot)
                mt = mem_type(x.dtype)
                with kf.loop(0, total, 1, "cv", plain=False) as i:
                    raw = kf.load(mt, xptr, i, align=2)
                    if x.dtype == "float16":
                        v = bb.fpext(raw, F32)
                    else:
                        v = bb.bitcast(bb.shl(bb.zext(raw, I32), ir.Constant(I32, 16)), F32)
                    kf.store(v, buf, i, align=4)

            if self.bf16dot:   # the GEMV reads the bfloat16 x as it is; only the GEMM widens it
                with kf.if_(fma_gemm, "widen"):
                    widen()
            else:
                widen()
            scratch = b.load(slot, typ=PTR)
            xf = b.select(b.icmp_unsigned("==", scratch, ir.Constant(PTR, None)), xptr, scratch)
        qbufs = self._prepare_quant_x(kf, xf, M, K)
        ibufs = self._prepare_int8_x(kf, xf, M, K)
        tsums = self._prepare_tile_sums(kf, xf, M, K)
        xamx = self._prepare_amx_x(kf, use_amx, M, K)
        # split the work
        nthreads = b.sext(b.call(kf.declare("mb_num_threads", I32, []), []), I64)
        macs = kf.mul(kf.mul(M, N), kf.smax(K, 1))
        small = b.or_(kf.lt(macs, TUNING["parallel_min_macs"]), b.icmp_signed("<=", nthreads, kf.i64(1)))
        units = b.select(use_gemv, kf.sdiv(kf.add(N, self.R - 1), self.R),
                         kf.sdiv(kf.add(N, self.gemm_nr - 1), self.gemm_nr))
        # the row-tiled kernels' own task counts where they run (use_gemv; int8 tiles: every M), the
        # GEMM's elsewhere (its panels on the tiles' counts: MiniLM's 1536 -> 384 at 328 rows 28% slower,
        # 6 panels in 4 tasks)
        tiles_tpt = TUNING["tasks_per_thread_dense_tiles" if self.tiled_dense else "tasks_per_thread_tiles" if self.tiled
                           else "tasks_per_thread"]
        tiles_run = ir.Constant(I1, 1) if self.tile_int_x else use_gemv
        tpt = b.select(tiles_run, kf.i64(tiles_tpt), kf.i64(TUNING["tasks_per_thread"]))
        many = kf.smin(units, kf.mul(nthreads, tpt))
        ntasks = b.select(small, kf.i64(1), kf.smax(many, 1))
        values = {"M": M, "N": N, "K": K}
        if self.batched:
            # chunks of one batch's rows (``mb`` each): ``cpb`` per batch, a task per chunk
            mb = em.typed(x.shape[-2], "int64")
            mc, cpb = self._gemm_chunk_rows(kf, mb, K, nthreads)
            chunks = kf.mul(b.sdiv(M, mb), cpb)   # (M > 0: mb > 0)
            units = kf.mul(chunks, units)
            ntasks = b.select(small, kf.i64(1), kf.smax(kf.smin(units, kf.mul(nthreads, tpt)), 1))
            values.update(mc=mc, mb=mb, cpb=cpb)
        elif self.row_chunks:
            # the GEMM in row chunks: a task is one chunk's rows through every panel
            mc, nch = self._gemm_chunk_rows(kf, M, K, nthreads)
            chunked = b.and_(b.not_(use_gemv), b.icmp_signed(">", nch, kf.i64(1)))
            units = b.select(chunked, kf.mul(nch, units), units)
            ntasks = b.select(chunked, nch, ntasks)
            values["mc"] = b.select(chunked, mc, M)
        slot = kf.alloca(self.ctx.type, name="ctx")
        values.update(ntasks=ntasks, units=units)
        for i, (xq, xs) in enumerate(qbufs):
            values[f"xq{i}"] = b.ptrtoint(xq, I64)
            values[f"xs{i}"] = b.ptrtoint(xs, I64)
        for i, xi in enumerate(ibufs):
            values[f"xi{i}"] = b.ptrtoint(xi, I64)
        if tsums is not None:
            values["xts"] = b.ptrtoint(tsums, I64)
        if xamx is not None:
            values["xa"] = b.ptrtoint(xamx[1], I64)
            few = b.or_(small, kf.lt(kf.mul(M, K), TUNING["xprep_min_values"]))
            values["xtasks_amx"] = b.select(few, kf.i64(1), nthreads)
        if self.tile_int_x:
            few = b.or_(small, kf.lt(kf.mul(M, K), TUNING["xprep_min_values"]))
            values["xtasks"] = b.select(few, kf.i64(1), kf.smin(kf.smax(M, 1), nthreads))
        self.ctx.store(kf, slot, ptrs, syms, xf, values)
        task = b.select(use_gemv, gemv, gemm if gemm_amx is None else b.select(use_amx, gemm_amx, gemm))
        par = kf.declare("mb_parallel_for", I32, [PTR, PTR, I64])
        rc_slot = kf.alloca(I32, name="rc")
        if self.tile_int_x and ibufs:
            # x quantized to int8 (int16) by all threads, each its share of the rows, before the tiles
            # (on one thread below ``xprep_min_values`` values of x: a round of the pool costs more),
            # where the tiles run (M <= MG: every M but the AMX GEMM's)
            xprep = self._int8_x_task()
            xtasks = values["xtasks"]
            with kf.if_(use_gemv, "xprepx"):
                kf.if_else(kf.b.icmp_signed("==", xtasks, kf.i64(1)), lambda: kf.b.call(xprep, [slot, kf.i64(0)]),
                           lambda: kf.b.call(par, [xprep, slot, xtasks]), "xprep")
        if xamx is not None:
            # x as the AMX kernel's bfloat16 rows, by all threads, before the GEMM
            xprep_amx = self._amx_x_task()
            xtasks = values["xtasks_amx"]
            with kf.if_(use_amx, "xamx"):
                kf.if_else(kf.b.icmp_signed("==", xtasks, kf.i64(1)),
                           lambda: kf.b.call(xprep_amx, [slot, kf.i64(0)]),
                           lambda: kf.b.call(par, [xprep_amx, slot, xtasks]), "xprepa")

        def run(fn):
            return lambda: kf.b.store(kf.b.call(fn, [slot, kf.i64(0)]), rc_slot)

        def serial():
            big = run(gemm) if gemm_amx is None else (lambda: kf.if_else(use_amx, run(gemm_amx), run(gemm), "amx"))
            kf.if_else(use_gemv, run(gemv), big, "path")

        def parallel():
            kf.b.store(kf.b.call(par, [task, slot, ntasks]), rc_slot)

        kf.if_else(b.icmp_signed("==", ntasks, kf.i64(1)), serial, parallel, "split")
        rc = b.load(rc_slot, typ=I32)
        free = kf.declare("free", ir.VoidType(), [PTR])
        if scratch is not None:
            b.call(free, [scratch])
        for xq in [q for q, _ in qbufs] + ibufs + ([tsums] if tsums is not None else []) + (
                [xamx[0]] if xamx is not None else []):
            b.call(free, [xq])  # free(NULL) is a no-op
        b.ret(rc)
        kf.finish()
        self.body_fn = body_fn
        return ["out of memory allocating a matmul workspace"]

    def _prepare_amx_x(self, kf: KFunc, use_amx, M, K):
        """The AMX GEMM's ``A'`` buffer (:mod:`.amx`; its rows are written by the ``xprep_amx``
        tasks): ``(raw, aligned)`` pointers, NULL unless ``use_amx``; None without AMX."""
        if not self.amx_split:
            return None
        b = kf.b
        slot = kf.alloca(PTR, name="xa")
        b.store(ir.Constant(PTR, None), slot)

        def alloc():
            mpad = kf.mul(kf.sdiv(kf.add(M, AMX_ROWS - 1), AMX_ROWS), AMX_ROWS)
            raw, _ = self._workspace(kf, kf.add(kf.mul(mpad, self._amx_row_bytes(kf, K)), 64))
            kf.b.store(raw, slot)

        with kf.if_(use_amx, "xaalloc"):
            alloc()
        raw = b.load(slot, typ=PTR)
        aligned = b.inttoptr(b.and_(kf.add(b.ptrtoint(raw, I64), 63), kf.i64(~63)), PTR)
        return raw, aligned

    def _gemm_chunk_rows(self, kf: KFunc, M, K, nthreads) -> tuple:
        """``(mc, chunks)`` (i64 values): the float GEMM's rows in ``chunks`` chunks of ``mc`` rows
        (a multiple of ``MR``, the last one shorter), so that a chunk of x (``mc x K``) is at most
        ``TUNING["gemm_chunk_bytes"]`` bytes, the count a multiple of the threads. A task takes
        one chunk through every panel: its x stays in the core's L2 from panel to panel, where
        tasks of whole panels read all of x from L3 for each (the BLIS loop order, with each
        chunk packing its own weight panels). One chunk (``chunks = 1``) when x fits, the option
        is 0 or less, or a chunk would have fewer than ``TUNING["gemm_chunk_min_rows"]`` rows: each chunk
        reads all the weights again to pack its panels, which outweighs the reads of x it saves
        (``N / NR`` panels each reading ``M x K``) for short chunks of large weights (TinyLlama's
        5632 -> 2048 float32 matmul at 128 rows in four chunks of 32 rows: 7% slower with the
        AVX2 kernels, the model's prefill 13% slower with the AVX-512 ones, Xeon)."""
        b = kf.b
        limit = TUNING["gemm_chunk_bytes"]
        MR = math.lcm(self.MR, AMX_ROWS) if self.amx_split else self.MR   # whole micro-kernels of both GEMMs
        if limit <= 0:
            return M, kf.i64(1)
        elem = 2 if self.bf16dot_gemm else 4
        min_rows = max(MR, TUNING["gemm_chunk_min_rows"])
        xbytes = kf.mul(kf.mul(M, K), elem)
        want = kf.sdiv(kf.add(xbytes, limit - 1), limit)
        nt = kf.smax(nthreads, 1)
        want = kf.mul(kf.sdiv(kf.add(want, kf.sub(nt, 1)), nt), nt)   # whole rounds of the threads
        rows = kf.sdiv(kf.add(M, kf.sub(want, 1)), kf.smax(want, 1))
        mc = kf.mul(kf.sdiv(kf.add(rows, MR - 1), MR), MR)
        mc = kf.smax(mc, MR)
        nch = kf.sdiv(kf.add(M, kf.sub(mc, 1)), mc)
        few = b.or_(kf.lt(mc, min_rows), b.icmp_signed("<=", xbytes, kf.i64(limit)))
        return b.select(few, M, mc), b.select(few, kf.i64(1), nch)

    def _prepare_quant_x(self, kf: KFunc, xf, M, K) -> list:
        """For each fast-quant key: ``(xq, xs)`` buffers (NULL unless ``M <= gemv_max_rows``):
        ``xq`` = x with every chunk of columns in the decoder's lane order, ``xs[m, g]`` = sum
        of x over group ``g``. Returns the list of pointer pairs (``xs`` lives inside ``xq``'s
        allocation)."""
        out = []
        if not self.qkeys:
            return out
        b = kf.b
        malloc = kf.declare("malloc", PTR, [I64])
        small = b.icmp_signed("<=", M, kf.i64(self.MG))
        for bits, gs in self.qkeys:
            dec = GroupQuantDecoder(ir.Constant(PTR, None), "uint32", ir.Constant(PTR, None),
                                    "float32", kf.i64(0), kf.i64(0), bits, gs, 0, self.lanes)
            chunk = dec.chunk
            G = kf.sdiv(K, gs)
            slot_q = kf.alloca(PTR, name="xq")
            slot_s = kf.alloca(PTR, name="xs")
            b.store(ir.Constant(PTR, None), slot_q)
            b.store(ir.Constant(PTR, None), slot_s)

            def fill():
                nfl = kf.add(kf.mul(M, K), kf.mul(M, G))
                buf = kf.b.call(malloc, [kf.add(kf.mul(nfl, 4), 4)])
                with kf.if_(kf.b.icmp_unsigned("==", buf, ir.Constant(PTR, None)), "oomq"):
                    kf.b.ret(ir.Constant(I32, self.error_code))
                xs = kf.gep(buf, kf.mul(M, K), F32)
                kf.b.store(buf, slot_q)
                kf.b.store(xs, slot_s)
                kv = kf.mul(G, gs)
                with kf.loop(0, M, 1, "qm") as m:
                    row = kf.mul(m, K)
                    with kf.loop(0, kv, chunk, "qc") as c:
                        for j in range(chunk):
                            src = kf.add(kf.add(row, c), dec.x_perm(j))
                            v = kf.load(F32, xf, src, align=4)
                            kf.store(v, buf, kf.add(kf.add(row, c), j), align=4)
                    with kf.loop(kv, K, 1, "qt") as k:
                        kf.store(kf.load(F32, xf, kf.add(row, k), align=4), buf, kf.add(row, k), align=4)
                    with kf.loop(0, G, 1, "qg") as g:
                        base = kf.add(row, kf.mul(g, gs))
                        acc = kf.fzero(self.lanes)
                        for j in range(0, gs, self.lanes):
                            acc = kf.b.fadd(acc, kf.load(vec(F32, self.lanes), xf, kf.add(base, j), align=4),
                                            flags=KFunc.FM)
                        kf.store(kf.hsum(acc), xs, kf.add(kf.mul(m, G), g), align=4)

            with kf.if_(small, "qx"):
                fill()
            out.append((b.load(slot_q, typ=PTR), b.load(slot_s, typ=PTR)))
        return out

    def _open(self, suffix: str, ret: ir.Type, extra: list[ir.Type], inline: bool = False):
        """A new internal function ``<name>.<suffix>(ptr ctx, *extra)`` with the context loaded;
        returns ``(kf, state)``. Helpers are ``noinline`` so each is optimized once."""
        fn = self._function(f"{self.name}.{suffix}", ret, [PTR] + extra)
        if not inline:
            fn.attributes.add("noinline")
        kf = KFunc(self.module, fn)
        ptrs, xf, syms, ex = self.ctx.load(kf, fn.args[0])
        em = self._bind(kf, ptrs, syms)
        st = _State(kf=kf, em=em, ptrs=ptrs, xf=xf, M=ex["M"], N=ex["N"], K=ex["K"],
                    units=ex["units"], ntasks=ex["ntasks"], args=list(fn.args[1:]), fn=fn,
                    extra=ex)
        return kf, st

    def _emit_epilogue(self) -> ir.Function:
        """``void epi(ctx, i64 m0, i64 rows, i64 n0, i64 count, ptr acc0, ptr acc1, i64 stride)``:
        outputs ``out[m0 + r, n0:n0+count]`` for ``r < rows`` from float32 accumulators
        ``acc_w[r * stride : r * stride + count]``.

        Per row the loop is left to LLVM's loop vectorizer with ``TUNING["epi_interleave"]`` vector
        iterations interleaved: with AVX2 that is 16 outputs per iteration (two independent chains
        of the ``erf`` / ``exp`` polynomials, which are latency-bound) and LLVM's epilogue
        vectorization adds a 4-wide loop for the rest. Without it the GEMV tiles (``count =
        gemv_rows = 4`` < the 8 lanes) ran the expression scalar, about 14 ns per GELU output
        (issue 15); with it about 5.5. The rows of a block come in one call, so the core overlaps
        one row's polynomial chains with the next's (a call per row of 64 GELU outputs ran them
        at about half the rate of a long elementwise loop)."""
        kf, st = self._open("epi", ir.VoidType(), [I64, I64, I64, I64, PTR, PTR, I64])
        m0, rows, n0, count, a0, a1, stride = st.args
        for a in (a0, a1):
            a.add_attribute("noalias")
        with kf.loop(0, rows, 1, "r") as r:
            row_off = self._epilogue_row(kf, st.em, kf.add(m0, r), st.N)
            base = kf.mul(r, stride)
            ra = [kf.gep(a, base, F32) for a in (a0, a1)[:self.nw]]
            with kf.loop(0, count, 1, "j", plain=False, interleave=TUNING["epi_interleave"]) as j:
                accs = [kf.load(F32, a, j, align=4) for a in ra]
                self._epilogue_store(kf, st.em, st.ptrs[self.plan.out], row_off, kf.add(n0, j), accs)
        kf.b.ret_void()
        kf.finish()
        return st.fn

    def _epilogue_t_fn(self, NR: int) -> ir.Function:
        """``void epi_t(ctx, i64 m0, i64 rows, i64 n0, i64 count, ptr acc0, ptr acc1)``: the
        epilogue of ``out[m0 + r, n0:n0+count]`` (products' flat rows; accumulators ``acc_w[r * NR +
        j]``) where the output is the products transposed with their rows contiguous
        (:attr:`rows_contiguous`: Conv1D's NCW result of its NWC GEMM). Per column the rows of each
        run within one index of the outer dims are a contiguous stretch of the output: blocks of
        ``L x L`` accumulators (``L`` the vector lanes) are transposed in registers into an ``L x L``
        scratch, then per column the loop over its ``L`` rows is left to LLVM's vectorizer (one
        vector of the epilogue, one contiguous store); the rows and columns past whole blocks are
        done one element at a time. (Gathering the rows ``NR`` apart instead made the epilogue as
        slow as a separate transpose: 0.6 ms on Whisper's 384 x 3000 Conv1D, Intel Xeon.)"""
        key = f"epi_t{NR}"
        fn = self._epi_t.get(key)
        if fn is not None:
            return fn
        kf, st = self._open(key, ir.VoidType(), [I64, I64, I64, I64, PTR, PTR])
        self._epi_t[key] = st.fn
        m0, rows, n0, count, a0, a1 = st.args
        for a in (a0, a1):
            a.add_attribute("noalias")
        b, em, lead, L = kf.b, st.em, self.plan.lead_vars, self.lanes
        accp = (a0, a1)[:self.nw]
        out_ptr = st.ptrs[self.plan.out]
        scratch = [b.inttoptr(b.ptrtoint(kf.alloca(F32, L * L, name="tr", align=64), I64), PTR) for _ in accp]
        vt = vec(F32, L)
        run = em.typed(self.plan.acc_shape[-2], "int64")
        end = kf.add(m0, rows)

        q0 = b.sdiv(m0, run)
        q1 = b.sdiv(kf.add(end, kf.sub(run, 1)), run)
        with kf.loop(q0, q1, 1, "q") as q:
            base = kf.mul(q, run)
            lo, hi = kf.smax(m0, base), kf.smin(end, kf.add(base, run))
            self._bind_lead(kf, em, q, lead[:-1])
            tfull = kf.add(lo, kf.mul(b.sdiv(kf.sub(hi, lo), kf.i64(L)), L))
            jfull = kf.mul(b.sdiv(count, kf.i64(L)), L)
            with kf.loop(lo, tfull, L, "tb") as t0:
                r0 = kf.sub(t0, m0)
                with kf.loop(0, jfull, L, "jb") as j0:
                    for a, sc in zip(accp, scratch):
                        vs = [kf.load(vt, a, kf.add(kf.mul(kf.add(r0, i), NR), j0), align=4) for i in range(L)]
                        for c, v in enumerate(kf.transpose(vs)):
                            kf.store(v, sc, kf.i64(c * L), align=64)
                    with kf.loop(0, L, 1, "jj") as jj:
                        n = kf.add(n0, kf.add(j0, jj))
                        with kf.loop(0, L, 1, "i", plain=False, unroll=False) as i:
                            em.env[lead[-1]] = kf.sub(kf.add(t0, i), base)
                            accs = [kf.load(F32, sc, kf.add(kf.mul(jj, L), i), align=4) for sc in scratch]
                            self._epilogue_store(kf, em, out_ptr, None, n, accs)
                with kf.loop(jfull, count, 1, "jt") as j:   # columns past whole blocks
                    with kf.loop(t0, kf.add(t0, L), 1, "tt") as t:
                        em.env[lead[-1]] = kf.sub(t, base)
                        idx = kf.add(kf.mul(kf.sub(t, m0), NR), j)
                        self._epilogue_store(kf, em, out_ptr, None, kf.add(n0, j),
                                             [kf.load(F32, a, idx, align=4) for a in accp])
            with kf.loop(0, count, 1, "jr") as j:   # rows past whole blocks
                with kf.loop(tfull, hi, 1, "tr") as t:
                    em.env[lead[-1]] = kf.sub(t, base)
                    idx = kf.add(kf.mul(kf.sub(t, m0), NR), j)
                    self._epilogue_store(kf, em, out_ptr, None, kf.add(n0, j),
                                         [kf.load(F32, a, idx, align=4) for a in accp])
        b.ret_void()
        kf.finish()
        return st.fn

    def _emit_task(self, kind: str) -> ir.Function:
        kf, st = self._open(kind, I32, [I64], inline=True)
        b = kf.b
        idx = st.args[0]
        u0 = b.sdiv(kf.mul(idx, st.units), st.ntasks)
        u1 = b.sdiv(kf.mul(kf.add(idx, 1), st.units), st.ntasks)
        if kind == "gemv":
            (self._tiles_dense if self.tiled_dense else self._tiles if self.tiled else self._gemv)(kf, st, u0, u1)
            b.ret(ir.Constant(I32, 0))
        elif kind == "gemm_amx":
            self._gemm_amx(kf, st, u0, u1)
        else:
            self._gemm(kf, st, u0, u1)
        kf.finish()
        return st.fn

    def _workspace(self, kf: KFunc, nbytes) -> tuple[ir.Value, ir.Value]:
        """``malloc(nbytes)`` (the function returns the out-of-memory code on failure) and its
        first 64-byte-aligned address (``nbytes`` must include 63 bytes of slack)."""
        b = kf.b
        raw = b.call(kf.declare("malloc", PTR, [I64]), [nbytes])
        with kf.if_(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), "oom"):
            b.ret(ir.Constant(I32, self.error_code))
        aligned = b.and_(kf.add(b.ptrtoint(raw, I64), 63), kf.i64(~63))
        return raw, b.inttoptr(aligned, PTR)

    def _panel_epilogue(self, kf: KFunc, ctx, cs, M, NR: int, n0, nr_eff, rows=None, base=None) -> None:
        """The epilogue of a panel: ``out[base + m, n0:n0+nr_eff]`` from the per-weight ``M x NR``
        float32 accumulators at ``cs`` (row ``m`` of each), for the rows ``lo <= m < lo + count`` of
        ``rows = (lo, count)`` (i64 values; None: all ``M``; ``base``: the first output row of the
        accumulators, None: 0)."""
        lo, count = rows if rows is not None else (kf.i64(0), M)
        accs = [kf.gep(cs, kf.add(kf.mul(lo, NR), kf.mul(kf.mul(M, NR), w)), F32) for w in range(self.nw)]
        accs += [accs[0]] * (2 - self.nw)
        m0 = lo if base is None else kf.add(base, lo)
        if self.rows_contiguous:
            kf.b.call(self._epilogue_t_fn(NR), [ctx, m0, count, n0, nr_eff] + accs)
        else:
            kf.b.call(self.epi_fn, [ctx, m0, count, n0, nr_eff] + accs + [kf.i64(NR)])


def emit_linear(mod: ModuleEmitter, name: str, func: PrimFunc, sig, plan: LinearPlan,
                simd: SimdInfo) -> tuple[ir.Function, list[str]]:
    """Emit ``<name>.compute`` (and its task / micro-kernel functions) for ``plan``; returns
    the body function (the ABI entry calls it) and the extra error messages (codes after the
    signature checks)."""
    em = LinearEmitter(mod, name, func, sig, plan, simd)
    extra = em.emit()
    return em.body_fn, extra
