"""Matmul kernels: ``out[..., n] = epilogue(sum_k x[..., k] * W_w[n, k] for each weight w)``.

A PrimFunc opts in with the attribute ``attrs["mb.kernel"]`` (set by
:func:`builder.te.topi.linear_kernel`, which the FuseOps pass and the quantization legalizer
use)::

    {"kind": "linear", "x": 0, "out": 3, "acc": ["NT_matmul_acc", ...],
     "weights": [{"format": "dense", "w": 1},
                 {"format": "group", "q": 2, "scale": 3, "bits": 4, "group_size": 32,
                  "zero_point": 7}]}

(param indices; ``acc`` names the reduction block of each weight). The PrimFunc body stays the
reference semantics: one float32 reduction block per weight and one elementwise block writing
``out`` from the accumulators and other params (bias, residual, ...). :func:`plan_linear`
checks that structure (shapes, dtypes, which buffers each block reads) and returns a
:class:`LinearPlan`, or the reason it does not apply -- then the generic loop code runs.

Generated code (:func:`emit_linear`), for the host's widest vectors (:class:`SimdInfo`):

* ``x`` (``M = prod(leading dims)`` rows of ``K``) is used in place when float32, else widened
  once into a float32 scratch;
* **GEMV** (``M <= gemv_max_rows``: 24 with float weights, 4 with packed ones): tiles of
  ``R`` weight rows (4, packed ones too); each tile streams its rows once per group of ``MT`` input
  rows (``MT`` and the unroll ``U`` chosen so that the accumulators fit the register file),
  decoding weights in registers; vector accumulators are summed horizontally, the scalar tail
  ``K % step`` is added, then the epilogue writes the tile. Packed 4 / 8-bit weights take the
  fast path of :meth:`GroupQuantDecoder.fast_chunk`: ``x`` is permuted once per call to the
  decoder's lane order, the scale is applied once per group and the zero point through
  per-group sums of ``x``;
* **int8-activation GEMV** for 4-bit weights whose graph says ``activation_quantization=int8``
  (``M <= gemv_max_rows_qi`` = 32, hosts with AVX2; see :class:`schemas.GroupQuantization`): x
  is quantized once per call to int8 per group (:class:`Int8Rows`), then per 64-column step
  and weight row one 32-byte load and, per input row (2 at a time, 4 with 32 registers), two
  ``vpmaddubsw`` (nibbles x int8) and one ``vpmaddwd`` give eight int32 partial dots that are
  converted and accumulated with ``scale * d`` per lane -- about half the instructions per
  weight of the float path (:meth:`_LinearEmitter._gemv_micro_i8`); from ``M >
  gemv_max_rows_qig`` (8) the **int8 GEMM**: x quantized the same way into a plain int8 copy,
  each panel of ``NRI`` (16) weight rows unpacked once per block of ``KCI`` columns into bytes in k-quad
  order (32 bytes = 4 columns of 8 rows), and a 3-row micro-kernel (6 with 32 registers) that
  per 4 columns broadcasts 4 int8 values of a row and runs one ``vpmaddubsw`` per 8 weight
  rows, adds those in int16 over 32 columns, widens with ``vpmaddwd`` and applies ``scale * d``
  per group (:meth:`_LinearEmitter._i8_micro_fn`); the columns the GEMV keeps float are added
  in float (:meth:`_LinearEmitter._i8_tail_fn`), so every batch size computes the same. On
  CPUs with VNNI (plan variant ``vnni``) one ``vpdpbusd`` replaces each ``vpmaddubsw`` /
  ``vpmaddwd`` pair: the GEMV's two nibble halves go into one int32 sum seeded with
  ``-zero_point * sum q``, the GEMM's micro-kernel accumulates int32 directly (no int16
  partial sums) -- the same exact integer sums;
* **GEMM** (larger ``M``): BLIS-style. For each panel of ``NR`` weight rows (2 vectors, 4 with
  32 registers) and each block of ``KC`` columns, the decoder unpacks the panel transposed into
  an L1-resident float32 buffer ``Bp[k][NR]`` (in-register VLxVL transposes); an ``MR x NR``
  micro-kernel (``MR = 6``: 12 / 24 accumulators) broadcasts ``x[m, k]`` and runs FMAs against
  ``Bp``, accumulating into a per-panel ``M x NR`` buffer; after the last block the epilogue
  reads it. Remainder rows (``M % MR``) use smaller micro-kernels, remainder columns a
  zero-padded panel. While a block's micro-kernels run, each issues L2 prefetches for part of
  the next block's weight rows (``prefetch_gemm``), so the unpacking does not wait on memory
  (measured: the unpacking alone read float32 weights at single-core DRAM speed, 9% of a
  batch-128 layer's time; with the prefetch the layer runs 2-5% faster);
* **bfloat16 dot products** (plan variant ``bf16dot``: bfloat16 ``x`` and weights, even static
  ``K``, a CPU with AVX512-BF16): the GEMV reads ``x`` and each weight row as vectors of 32-bit
  words (two columns each) and runs one ``vdpbf16ps`` per (weight row, input row) and
  ``2 * lanes`` columns (:meth:`_LinearEmitter._gemv_micro_bf16`); the GEMM packs panels of
  those words without widening (``KC`` words = ``2 KC`` columns per block) and its micro-kernel
  broadcasts one word of ``x`` per row and column pair (:meth:`_LinearEmitter._micro_bf16_fn`):
  two products per lane and instruction, where the float32 path does one FMA per product after
  widening. ``x`` is read as it is (no float32 copy);
* work is split over weight-row tiles / panels with ``mb_parallel_for`` (see
  :mod:`runtime.threadpool`) when ``M * N * K >= parallel_min_macs``, in ``tasks_per_thread``
  (16) tasks per thread for dynamic balance;
* helpers that do not depend on the kernel (micro-kernels, row-dot and panel-pack functions
  per weight format) are shared by all kernels of a module and kept out of line, which keeps
  LLVM's work (and the build time) small.

Epilogues are the reference block's expression (the accumulators substituted), emitted in one
out-of-line function per kernel that writes a run of outputs of a row (LLVM vectorizes it;
``exp`` is inlined as a polynomial). :data:`TUNING` holds the tunables (``MB_TUNE`` overrides).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from llvmlite import ir

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr, Var
from ...ir.kernel import KERNEL_ATTR, LinearKernelSpec
from ...ir.tir import Block, BlockRealize, Buffer, BufferLoad, BufferStore, PrimFunc
from ..llvm_emit import F32, I1, I8, I16, I32, I64, PTR, BufferExprEmitter, ModuleEmitter, mem_type, reg_type
from .decode import DenseDecoder, GroupQuantDecoder, QUANT_STORAGE, scalar_to_f32
from .simd import KFunc, SimdInfo, vec

__all__ = ["KERNEL_ATTR", "LinearPlan", "plan_linear", "emit_linear", "TUNING"]


#: Tunables (read at code generation time).
TUNING = {
    "gemv_max_rows": 24,         # M <= this: GEMV path (float weights)
    "gemv_max_rows_q": 4,        # the same with quantized weights
    "gemv_max_rows_qi": 32,      # M <= this: int8-activation GEMV (when every weight takes it)
    "gemv_max_rows_qig": 8,      # the same when the larger M take the int8 GEMM
    "gemv_rows_x_i8": 0,         # input rows per int8 GEMV tile (0: 2, 4 with 32 registers)
    "gemv_rows": 4,              # R: weight rows per GEMV tile
    "gemv_rows_q": 4,            # the same for packed 4 / 8-bit weights (8 spills with 16 registers)
    "kc_bytes": 0,               # packed panel KC x NR float32 bytes (0: 16 KiB, 32 KiB with 32 registers)
    "mr": 6,                     # GEMM micro-kernel rows
    "parallel_min_macs": 1 << 18,
    "tasks_per_thread": 16,
    "prefetch": 0,               # GEMV software prefetch distance in bytes (0: off)
    "prefetch_gemm": 1,          # GEMM: prefetch the next weight block during the micro-kernels
    "prefetch_q": 0,             # the same for packed quantized rows
    "gemv_parts_q": 1,           # partial-sum chains per (row, input row) in a 4/8-bit group
    "gemm_i8": 1,                # int8-activation GEMM for M > gemv_max_rows_qig (0: float GEMM above gemv_max_rows_qi)
    "mr_i8": 0,                  # its micro-kernel rows (0: 3, 6 with 32 registers)
    "kc_i8": 1024,               # its packed panel columns (NRI bytes each)
    "qu_i8": 2,                  # its k-quads per inner loop iteration
    "nv_i8": 2,                  # its weight rows per panel / 8 (int32 vectors per row of x)
    "gemm_bf16dot": 1,           # bfloat16 x and weights on AVX512-BF16: vdpbf16ps GEMV / GEMM (0: float32)
}


def _env_tuning() -> None:
    """``MB_TUNE="gemv_max_rows=4,mr=6"`` overrides :data:`TUNING` (for experiments)."""
    import os

    for item in filter(None, os.environ.get("MB_TUNE", "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in TUNING:
            raise ValueError(f"MB_TUNE: unknown key {key!r}; known: {', '.join(TUNING)}")
        TUNING[key.strip()] = int(value)


_env_tuning()


@dataclass
class LinearPlan:
    """A validated ``linear`` kernel: param indices, decoders' descriptions, the epilogue."""

    x: int
    out: int
    weights: list[dict]
    acc_vars: list[Var]
    lead_vars: list[Var]
    n_var: Var
    value: PrimExpr
    params: list[Buffer] = field(default_factory=list)
    variant: str = ""
    simd: SimdInfo | None = None   # set when planned for narrower vectors than the target's


def _blocks(func: PrimFunc) -> list[Block]:
    out: list[Block] = []

    def visit(s) -> None:
        if isinstance(s, BlockRealize):
            out.append(s.block)
        for c in tir.stmt_children(s):
            visit(c)

    visit(func.body)
    return out


def _loaded_buffers(e) -> set[int]:
    return {id(ld.buffer) for ld in tir.buffer_loads(e)}


def _stmt_loads(s) -> list[BufferLoad]:
    loads: list[BufferLoad] = []

    def visit(x) -> None:
        if isinstance(x, BufferStore):
            loads.extend(tir.buffer_loads(x.value))
            for i in x.indices:
                loads.extend(tir.buffer_loads(i))
        for c in tir.stmt_children(x):
            visit(c)

    visit(s)
    return loads


def _map_loads(e: PrimExpr, fn) -> PrimExpr:
    """Rebuild ``e`` with every BufferLoad replaced by ``fn(load)``."""
    if isinstance(e, BufferLoad):
        return fn(e)
    if isinstance(e, E.BinaryOp):
        return type(e)(_map_loads(e.a, fn), _map_loads(e.b, fn), e.dtype)
    if isinstance(e, E.Not):
        return E.Not(_map_loads(e.a, fn))
    if isinstance(e, E.Select):
        return E.Select(_map_loads(e.condition, fn), _map_loads(e.true_value, fn),
                        _map_loads(e.false_value, fn))
    if isinstance(e, E.Cast):
        return E.Cast(e.dtype, _map_loads(e.value, fn))
    if isinstance(e, E.Call):
        return E.Call(e.dtype, e.op, [_map_loads(a, fn) for a in e.args])
    if isinstance(e, E.Let):
        return E.Let(e.var, _map_loads(e.value, fn), _map_loads(e.body, fn))
    return e


def _same_dims(a, b) -> bool:
    return len(a) == len(b) and all(E.prove_equal(x, y) for x, y in zip(a, b))


def plan_linear(func: PrimFunc, simd: SimdInfo) -> LinearPlan | str:
    """Validate ``func`` against its ``mb.kernel`` description; returns the plan or a reason
    (a string) why the fast kernel does not apply. The plan's ``variant`` names a special
    instruction path the kernel takes (``"bf16dot"``: bfloat16 ``x`` and weights, an even
    static ``K`` and ``vdpbf16ps``; ``"vnni"``: int8-activation weights and ``vpdpbusd``),
    shown in the built function's ``kernel`` label.

    A function the target's vectors are too wide for (groups of 8 columns with 16 float32
    lanes) is planned for narrower x86 vectors (8, then 4 lanes; ``plan.simd``), which the
    CPU runs as well, rather than left to the loops."""
    plan = _plan_linear(func, simd)
    if isinstance(plan, str) and simd.name in ("avx512", "avx2", "avx"):
        for name, lanes in (("avx2", 8), ("sse", 4)):
            if lanes >= simd.lanes:
                continue
            narrow = replace(simd, name=name, lanes=lanes, registers=16)
            retry = _plan_linear(func, narrow)
            if isinstance(retry, LinearPlan):
                retry.simd, simd, plan = narrow, narrow, retry
                break
    if isinstance(plan, LinearPlan):
        k = E.simplify(plan.params[plan.x].shape[-1])
        if (simd.avx512bf16 and TUNING["gemm_bf16dot"] and plan.params[plan.x].dtype == "bfloat16"
                and isinstance(k, E.IntImm) and k.value % 2 == 0
                and all(d["format"] == "dense" and d["dtype"] == "bfloat16" for d in plan.weights)):
            plan.variant = "bf16dot"
        elif simd.vnni and isinstance(k, E.IntImm) and any(
                d["format"] == "group" and d.get("activation") == "int8"
                and int8_gemv_supported(d["storage"], d["bits"], d["group_size"], k.value)
                for d in plan.weights):
            plan.variant = "vnni"
    return plan


def _plan_linear(func: PrimFunc, simd: SimdInfo) -> LinearPlan | str:
    spec = func.attrs.get(KERNEL_ATTR)
    if not isinstance(spec, LinearKernelSpec):
        return "no linear kernel attribute"
    if not simd.usable:
        return f"no vector unit ({simd.name})"
    params = list(func.params)
    try:
        x, out = params[spec.x], params[spec.out]
        weights = [dict(vars(w), format=w.format) for w in spec.weights]
        acc_names = list(spec.acc)
    except (IndexError, TypeError) as err:
        return f"malformed kernel attribute: {err!r}"
    if len(acc_names) != len(weights) or not 1 <= len(weights) <= 2:
        return "one or two weights with one accumulator each"
    if x.dtype not in ("float32", "float16", "bfloat16"):
        return f"input dtype {x.dtype}"
    if x.ndim < 1 or out.ndim != x.ndim or not _same_dims(x.shape[:-1], out.shape[:-1]):
        return "input / output shapes"
    n_dim, k_dim = out.shape[-1], x.shape[-1]
    for w in weights:
        if w.get("format") == "dense":
            wb = params[w["w"]]
            if wb.ndim != 2 or wb.dtype not in ("float32", "float16", "bfloat16"):
                return f"dense weight {wb.name} {wb.dtype} {wb.ndim}-D"
            if not _same_dims(wb.shape, (n_dim, k_dim)):
                return f"weight {wb.name} shape"
            w["dtype"] = wb.dtype
            w["reads"] = {id(wb)}
        elif w.get("format") == "group":
            q, s = params[w["q"]], params[w["scale"]]
            if q.ndim != 2 or s.ndim != 2 or q.dtype not in QUANT_STORAGE:
                return "quantized weight layout"
            if s.dtype not in ("float32", "float16", "bfloat16"):
                return f"scale dtype {s.dtype}"
            bits, gs, zp = int(w["bits"]), int(w["group_size"]), int(w["zero_point"])
            if not GroupQuantDecoder.supported(q.dtype, bits, gs, simd.lanes):
                return f"quantized format {q.dtype} bits={bits} group_size={gs}"
            per_word = QUANT_STORAGE[q.dtype] // bits
            if not (E.prove_equal(q.shape[0], n_dim) and E.prove_equal(s.shape[0], n_dim)):
                return "quantized weight rows"
            kk = E.simplify(k_dim)
            if not isinstance(kk, E.IntImm):
                return "quantized weights need a static in_features"
            groups = -(-kk.value // gs)
            if not (E.prove_equal(s.shape[1], groups)
                    and E.prove_equal(q.shape[1], groups * gs // per_word)):
                return "quantized weight shape"
            w.update(storage=q.dtype, scale_dtype=s.dtype, bits=bits, group_size=gs,
                     zero_point=zp, reads={id(q), id(s)})
        else:
            return f"weight format {w.get('format')!r}"
    blocks = {b.name: b for b in _blocks(func)}
    if "root" in blocks:
        del blocks["root"]
    acc_blocks = []
    for name in acc_names:
        blk = blocks.get(name)
        if blk is None or blk.init is None or len(blk.writes) != 1:
            return f"accumulator block {name!r}"
        abuf = blk.writes[0].buffer
        if abuf.dtype != "float32" or not _same_dims(abuf.shape, out.shape):
            return f"accumulator {abuf.name} must be float32 of the output shape"
        acc_blocks.append(blk)
    for blk, w in zip(acc_blocks, weights):
        abuf = blk.writes[0].buffer
        reads = {id(ld.buffer) for ld in _stmt_loads(blk.body)} - {id(abuf)}
        if reads != {id(x)} | w["reads"]:
            return f"accumulator block {blk.name} reads unexpected buffers"
    acc_bufs = [b.writes[0].buffer for b in acc_blocks]
    out_blocks = [b for b in blocks.values() if b.writes and b.writes[0].buffer is out]
    others = [b for b in blocks.values() if b not in acc_blocks and b not in out_blocks]
    if len(out_blocks) != 1 or others:
        return "blocks other than the accumulators and one output block"
    ob = out_blocks[0]
    ivars = [iv.var for iv in ob.iter_vars]
    acc_vars = [Var(f"acc{i}", "float32") for i in range(len(weights))]
    if ob in acc_blocks:
        if len(weights) != 1 or out.dtype != "float32":
            return "an accumulating output block needs one float32 weight"
        spatial = [iv.var for iv in ob.iter_vars if iv.kind == "S"]
        if len(spatial) != out.ndim:
            return "output block iterators"
        return LinearPlan(spec.x, spec.out, weights, acc_vars, spatial[:-1], spatial[-1],
                          acc_vars[0], params)
    store = ob.body
    if (not isinstance(store, BufferStore) or store.buffer is not out or ob.init is not None
            or len(ivars) != out.ndim or any(iv.kind != "S" for iv in ob.iter_vars)
            or not all(i is v for i, v in zip(store.indices, ivars))):
        return "output block is not out[i, ..., n] = f(...)"
    param_ids = {id(p) for p in params} - {id(out)}
    bad: list[str] = []

    def same_element(i: PrimExpr, v: Var, dim: PrimExpr) -> bool:
        # a broadcast reads a dim of extent 1 at 0 (topi's numpy-style broadcasting)
        if i is v:
            return True
        d = E.simplify(dim)
        return isinstance(d, E.IntImm) and d.value == 1 and isinstance(i, E.IntImm) and i.value == 0

    def sub(ld: BufferLoad) -> PrimExpr:
        for buf, var in zip(acc_bufs, acc_vars):
            if ld.buffer is buf:
                if len(ld.indices) != len(ivars) or not all(
                        same_element(i, v, d) for i, v, d in zip(ld.indices, ivars, out.shape)):
                    bad.append(f"{buf.name} read at another element")
                return var
        if id(ld.buffer) not in param_ids:
            bad.append(f"reads intermediate {ld.buffer.name}")
        elif any(tir.buffer_loads(i) for i in ld.indices):
            bad.append("data-dependent index")
        return ld

    value = _map_loads(store.value, sub)
    if bad:
        return "epilogue " + bad[0]
    allowed = set(ivars)
    if any(v not in allowed and v not in func.sym_vars for v in E.free_vars(value)
           if not any(v is a for a in acc_vars)):
        return "epilogue uses unknown variables"
    return LinearPlan(spec.x, spec.out, weights, acc_vars, ivars[:-1], ivars[-1], value,
                      params)


# ---------------------------------------------------------------------------------------------
# code generation


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


class _LinearEmitter:
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
        self.MR = TUNING["mr"]
        self.NV = 4 if regs >= 32 else 2
        self.NR = self.NV * self.lanes
        step = self.lanes
        for w in plan.weights:
            if w["format"] == "group" and w["group_size"] <= 256:
                step = max(step, w["group_size"])
        kc_bytes = TUNING["kc_bytes"] or (16384 if regs < 32 else 32768)
        kc = max(32, kc_bytes // (4 * self.NR))
        self.KC = max(step, kc - kc % step)
        # GEMV weights read through GroupQuantDecoder.fast_chunk: one permuted copy of x and
        # per-group sums of x per distinct (bits, group_size)
        self.qkeys: list = []
        self.qfast: dict[int, tuple] = {}
        # 4-bit weights whose graph allows int8 activations: integer GEMV (``_gemv_micro_i8``),
        # one int8 copy of x per distinct group size
        self.ikeys: list[int] = []
        self.qint: dict[int, int] = {}
        k_static = E.simplify(plan.params[plan.x].shape[-1])
        for w, d in enumerate(plan.weights):
            if (d["format"] == "group" and d.get("activation") == "int8" and simd.int8_dot
                    and isinstance(k_static, E.IntImm)
                    and int8_gemv_supported(d["storage"], d["bits"], d["group_size"], k_static.value)):
                if d["group_size"] not in self.ikeys:
                    self.ikeys.append(d["group_size"])
                self.qint[w] = d["group_size"]
                continue
            if d["format"] == "group" and GroupQuantDecoder.fast_dot_supported(
                    d["storage"], d["bits"], d["group_size"], self.lanes):
                key = (d["bits"], d["group_size"])
                if key not in self.qkeys:
                    self.qkeys.append(key)
                self.qfast[w] = key
        self.K_static = k_static.value if isinstance(k_static, E.IntImm) else None
        # bfloat16 activations and weights on AVX512-BF16: GEMV and GEMM multiply pairs of
        # columns with vdpbf16ps, the GEMM's panels hold the weights' 32-bit words as they are
        self.bf16dot = plan.variant == "bf16dot"
        # int8 activations on a CPU with VNNI: vpdpbusd replaces vpmaddubsw + vpmaddwd
        self.vnni = plan.variant == "vnni"
        self.vnni_tag = (".vnni" + ("" if simd.native("vnni") else "_emulated")) if self.vnni else ""
        if self.qfast or self.qint:
            self.R = TUNING["gemv_rows_q"]
            self.MT = max(1, min(4, budget // self.R))
        self.MTq = max(1, min(4, budget // (2 * self.R)))
        self.MTi = TUNING["gemv_rows_x_i8"] or (4 if regs >= 32 else 2)
        # int8-activation GEMM when every weight takes the int8 path: it quantizes the same
        # columns as the GEMV (the rest stay float), so every batch size computes the same
        self.i8gemm = bool(TUNING["gemm_i8"]) and len(self.qint) == self.nw
        if any(w["format"] == "group" for w in plan.weights):
            # GEMV re-decodes a tile's packed weights for every MT rows of x, GEMM once per
            # panel: the crossover comes earlier than for float weights
            groups = [w for w, d in enumerate(plan.weights) if d["format"] == "group"]
            if self.i8gemm:
                self.MG = TUNING["gemv_max_rows_qig"]
            elif all(w in self.qint for w in groups):
                self.MG = TUNING["gemv_max_rows_qi"]
            else:
                self.MG = min(self.MG, TUNING["gemv_max_rows_q"])
        self.MRI = TUNING["mr_i8"] or (6 if regs >= 32 else 3)
        step_i = max([64] + list(self.qint.values()))
        self.KCI = max(step_i, TUNING["kc_i8"] - TUNING["kc_i8"] % step_i)
        self.NRI = 8 * TUNING["nv_i8"]
        self.gemm_nr = self.NRI if self.i8gemm else self.NR
        extra = ["M", "N", "K", "ntasks", "units"]
        extra += [f"xq{i}" for i in range(len(self.qkeys))] + [f"xs{i}" for i in range(len(self.qkeys))]
        extra += [f"xi{i}" for i in range(len(self.ikeys))]
        self.ctx = _Ctx(len(func.params), len(sig.sym_vars), extra)

    # -- helpers --------------------------------------------------------------------------------
    def _function(self, fname: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(ret, args), name=fname)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        return fn

    def _bind(self, kf: KFunc, ptrs, syms) -> BufferExprEmitter:
        env = {}
        for v, s in zip(self.sig.sym_vars, syms):
            env[v] = s if reg_type(v.dtype) == I64 else kf.b.trunc(s, reg_type(v.dtype))
        em = BufferExprEmitter(self.mod, kf.b, env, {id(p): a for p, a in zip(self.func.params, ptrs)})
        return em

    def _weight_args(self, st: "_State", w: int) -> list:
        """``[ptr0, ptr1, ld0, ld1]`` of weight ``w`` in a function with the context loaded:
        the weight (or packed words and scales) and their row lengths."""
        kf, em, ptrs = st.kf, st.em, st.ptrs
        desc, params = self.plan.weights[w], self.plan.params
        if desc["format"] == "dense":
            wb = params[desc["w"]]
            return [ptrs[desc["w"]], ir.Constant(PTR, None), em.typed(wb.shape[1], "int64"), kf.i64(0)]
        q, s = params[desc["q"]], params[desc["scale"]]
        return [ptrs[desc["q"]], ptrs[desc["scale"]], em.typed(q.shape[1], "int64"),
                em.typed(s.shape[1], "int64")]

    def _fmt_key(self, w: int) -> str:
        d = self.plan.weights[w]
        if d["format"] == "dense":
            return f"dense_{d['dtype']}"
        return (f"q{d['bits']}_{d['storage']}_{d['scale_dtype']}_g{d['group_size']}"
                f"_z{d['zero_point']}".replace("-", "m"))

    def _decoder(self, w: int, ptr0, ptr1, ld0, ld1):
        d = self.plan.weights[w]
        if d["format"] == "dense":
            return DenseDecoder(ptr0, d["dtype"], ld0, self.lanes)
        return GroupQuantDecoder(ptr0, d["storage"], ptr1, d["scale_dtype"], ld0, ld1, d["bits"],
                                 d["group_size"], d["zero_point"], self.lanes)

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

    def _epilogue_row(self, kf: KFunc, em: BufferExprEmitter, m, N):
        """Bind the output's leading iter vars for flat row ``m``; returns the row's offset."""
        out = self.plan.params[self.plan.out]
        lead = self.plan.lead_vars
        rem = m
        for d in range(len(lead) - 1, -1, -1):
            if d == 0:
                em.env[lead[d]] = rem
            else:
                dim = em.typed(out.shape[d], "int64")
                em.env[lead[d]] = kf.b.srem(rem, dim)
                rem = kf.b.sdiv(rem, dim)
        return kf.mul(m, N)

    def _epilogue_store(self, kf: KFunc, em: BufferExprEmitter, out_ptr, row_off, n, accs) -> None:
        out = self.plan.params[self.plan.out]
        em.env[self.plan.n_var] = n
        for var, val in zip(self.plan.acc_vars, accs):
            em.env[var] = val
        v = em.typed(self.plan.value, out.dtype)
        em.store_value(out, v, kf.gep(out_ptr, kf.add(row_off, n), mem_type(out.dtype)))

    # -- entry body -----------------------------------------------------------------------------
    def emit(self) -> list[str]:
        func, plan = self.func, self.plan
        nparams = len(func.params)
        body_fn = self._function(f"{self.name}.compute", I32,
                                 [PTR] * nparams + [I64] * len(self.sig.sym_vars))
        for a in body_fn.args[:nparams]:
            a.add_attribute("noalias")
        self.epi_fn = self._emit_epilogue()
        micro = self._micro_bf16_fn if self.bf16dot else self._micro_fn
        self.micro_fns = {} if self.i8gemm else {t: micro(t) for t in range(1, self.MR + 1)}
        gemv = self._emit_task("gemv")
        gemm = self._emit_task("gemm")
        kf = KFunc(self.module, body_fn)
        b = kf.b
        ptrs = list(body_fn.args[:nparams])
        syms = list(body_fn.args[nparams:])
        em = self._bind(kf, ptrs, syms)
        x = plan.params[plan.x]
        out = plan.params[plan.out]
        M = kf.i64(1)
        for d in x.shape[:-1]:
            M = kf.mul(M, em.typed(d, "int64"))
        K = em.typed(x.shape[-1], "int64")
        N = em.typed(out.shape[-1], "int64")
        empty = b.or_(b.icmp_signed("<=", M, kf.i64(0)), b.icmp_signed("<=", N, kf.i64(0)))
        with kf.if_(empty, "empty"):
            b.ret(ir.Constant(I32, 0))
        # float32 view of x
        xptr = ptrs[plan.x]
        if x.dtype == "float32" or self.bf16dot:   # the bfloat16 GEMV / GEMM read x as it is
            xf = xptr
            scratch = None
        else:
            malloc = kf.declare("malloc", PTR, [I64])
            total = kf.mul(M, K)
            scratch = b.call(malloc, [kf.smax(kf.mul(total, 4), 1)])
            with kf.if_(b.icmp_unsigned("==", scratch, ir.Constant(PTR, None)), "oom"):
                b.ret(ir.Constant(I32, self.error_code))
            mt = mem_type(x.dtype)
            with kf.loop(0, total, 1, "cv", plain=False) as i:
                raw = kf.load(mt, xptr, i, align=2)
                if x.dtype == "float16":
                    v = b.fpext(raw, F32)
                else:
                    v = b.bitcast(b.shl(b.zext(raw, I32), ir.Constant(I32, 16)), F32)
                kf.store(v, scratch, i, align=4)
            xf = scratch
        qbufs = self._prepare_quant_x(kf, xf, M, K)
        ibufs = self._prepare_int8_x(kf, xf, M, K)
        # split the work
        nthreads = b.sext(b.call(kf.declare("mb_num_threads", I32, []), []), I64)
        macs = kf.mul(kf.mul(M, N), kf.smax(K, 1))
        small = b.or_(kf.lt(macs, TUNING["parallel_min_macs"]), b.icmp_signed("<=", nthreads, kf.i64(1)))
        use_gemv = b.icmp_signed("<=", M, kf.i64(self.MG))
        units = b.select(use_gemv, kf.sdiv(kf.add(N, self.R - 1), self.R),
                         kf.sdiv(kf.add(N, self.gemm_nr - 1), self.gemm_nr))
        many = kf.smin(units, kf.mul(nthreads, TUNING["tasks_per_thread"]))
        ntasks = b.select(small, kf.i64(1), kf.smax(many, 1))
        slot = kf.alloca(self.ctx.type, name="ctx")
        values = {"M": M, "N": N, "K": K, "ntasks": ntasks, "units": units}
        for i, (xq, xs) in enumerate(qbufs):
            values[f"xq{i}"] = b.ptrtoint(xq, I64)
            values[f"xs{i}"] = b.ptrtoint(xs, I64)
        for i, xi in enumerate(ibufs):
            values[f"xi{i}"] = b.ptrtoint(xi, I64)
        self.ctx.store(kf, slot, ptrs, syms, xf, values)
        task = b.select(use_gemv, gemv, gemm)
        par = kf.declare("mb_parallel_for", I32, [PTR, PTR, I64])
        rc_slot = kf.alloca(I32, name="rc")

        def serial():
            kf.if_else(use_gemv, lambda: kf.b.store(kf.b.call(gemv, [slot, kf.i64(0)]), rc_slot),
                       lambda: kf.b.store(kf.b.call(gemm, [slot, kf.i64(0)]), rc_slot), "path")

        def parallel():
            kf.b.store(kf.b.call(par, [task, slot, ntasks]), rc_slot)

        kf.if_else(b.icmp_signed("==", ntasks, kf.i64(1)), serial, parallel, "split")
        rc = b.load(rc_slot, typ=I32)
        free = kf.declare("free", ir.VoidType(), [PTR])
        if scratch is not None:
            b.call(free, [scratch])
        for xq in [q for q, _ in qbufs] + ibufs:
            b.call(free, [xq])  # free(NULL) is a no-op
        b.ret(rc)
        kf.finish()
        self.body_fn = body_fn
        return ["out of memory allocating a matmul workspace"]

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

    # -- tasks ----------------------------------------------------------------------------------
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
        """``void epi(ctx, i64 m, i64 n0, i64 count, ptr acc0, ptr acc1)``: outputs
        ``out[m, n0:n0+count]`` from float32 accumulators ``acc_w[0:count]``."""
        kf, st = self._open("epi", ir.VoidType(), [I64, I64, I64, PTR, PTR])
        m, n0, count, a0, a1 = st.args
        for a in (a0, a1):
            a.add_attribute("noalias")
        row_off = self._epilogue_row(kf, st.em, m, st.N)
        with kf.loop(0, count, 1, "j", plain=False) as j:
            accs = [kf.load(F32, a, j, align=4) for a in (a0, a1)[:self.nw]]
            self._epilogue_store(kf, st.em, st.ptrs[self.plan.out], row_off, kf.add(n0, j), accs)
        kf.b.ret_void()
        kf.finish()
        return st.fn

    def _emit_task(self, kind: str) -> ir.Function:
        kf, st = self._open(kind, I32, [I64], inline=True)
        b = kf.b
        idx = st.args[0]
        u0 = b.sdiv(kf.mul(idx, st.units), st.ntasks)
        u1 = b.sdiv(kf.mul(kf.add(idx, 1), st.units), st.ntasks)
        if kind == "gemv":
            self._gemv(kf, st, u0, u1)
            b.ret(ir.Constant(I32, 0))
        else:
            self._gemm(kf, st, u0, u1)
        kf.finish()
        return st.fn

    # GEMV ----------------------------------------------------------------------------------------
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
            with kf.loop(0, st.M, 1, "me") as m:
                accs = [kf.gep(resw[w], kf.mul(m, rc), F32) for w in range(self.nw)]
                accs += [accs[0]] * (2 - self.nw)
                b.call(epi, [ctx, m, n0, kf.i64(rc)] + accs)

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
            lay = Int8Rows(self.K_static, self.qint[w])

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

    # int8-activation GEMV (4-bit weights, AVX2 integer multiply-adds) ---------------------------
    def _prepare_int8_x(self, kf: KFunc, xf, M, K) -> list:
        """For each group size of :attr:`ikeys`: a buffer (NULL unless ``M`` takes the GEMV, or
        the layout of :meth:`_fill_int8_gemm_x` when it takes the int8 GEMM) holding, per row of x, the layout of :class:`Int8Rows`: x quantized to int8 per group
        (``d = max|x| / 127``, ``q = rint(x * 127 / max|x|)`` clamped to +-127), each 64-column
        step in the decoder's lane order (even columns, then odd), and per step and per 32-bit
        lane of the step's dot product the group's ``d`` and ``sum q`` (the latter only in the
        group's first lane, for the zero point). A NaN or infinity in a group makes its ``d``
        NaN, so that the outputs of that row are NaN as with float activations."""
        out = []
        b = kf.b
        malloc = kf.declare("malloc", PTR, [I64])
        small = b.icmp_signed("<=", M, kf.i64(self.MG))
        f8, i8x8 = vec(F32, 8), vec(I32, 8)
        for gs in self.ikeys:
            lay = Int8Rows(self.K_static, gs)
            slot = kf.alloca(PTR, name="xi")
            b.store(ir.Constant(PTR, None), slot)

            def fill(lay=lay, slot=slot, gs=gs):
                b = kf.b
                buf = b.call(malloc, [kf.smax(kf.mul(M, lay.row_bytes), 1)])
                with kf.if_(b.icmp_unsigned("==", buf, ir.Constant(PTR, None)), "oomi"):
                    b.ret(ir.Constant(I32, self.error_code))
                b.store(buf, slot)
                fabs = kf.declare("llvm.fabs.v8f32", f8, [f8])
                fmax = kf.declare("llvm.maxnum.v8f32", f8, [f8, f8])
                rmax = kf.declare("llvm.vector.reduce.fmax.v8f32", F32, [f8])
                radd = kf.declare("llvm.vector.reduce.add.v8i32", I32, [i8x8])
                rint8 = kf.declare("llvm.rint.v8f32", f8, [f8])
                fadd8 = kf.declare("llvm.vector.reduce.fadd.v8f32", F32, [F32, f8])
                f64v, i64v = vec(F32, 64), vec(I32, 64)
                rint64 = kf.declare("llvm.rint.v64f32", f64v, [f64v])

                def clamp(v):   # +-127; a NaN becomes a number (maxnum / minnum drop NaNs)
                    n = v.type.count
                    lo_, hi_ = (kf.declare(f"llvm.{op}.v{n}f32", v.type, [v.type, v.type])
                                for op in ("maxnum", "minnum"))
                    return b.call(hi_, [b.call(lo_, [v, ir.Constant(v.type, [-127.0] * n)]),
                                        ir.Constant(v.type, [127.0] * n)])
                with kf.loop(0, M, 1, "im") as m:
                    xrow = kf.gep(xf, kf.mul(m, K), F32)
                    row = kf.gep(buf, kf.mul(m, lay.row_bytes), I8)
                    dptr = kf.gep(row, kf.i64(lay.d_off), I8)
                    iptr = kf.gep(row, kf.i64(lay.inv_off), I8)
                    sptr = kf.gep(row, kf.i64(lay.sum_off), I8)
                    # pass 1, per group: d, 1/d and sum q
                    with kf.loop(0, lay.groups, 1, "ig") as g:
                        base = kf.gep(xrow, kf.mul(g, gs), F32)
                        amax = ir.Constant(f8, [0.0] * 8)
                        bad = ir.Constant(f8, [0.0] * 8)   # x * 0: NaN where x is NaN or inf
                        for j in range(0, gs, 8):
                            v = kf.load(f8, base, kf.i64(j), align=4)
                            amax = b.call(fmax, [amax, b.call(fabs, [v])])
                            bad = b.fadd(bad, b.fmul(v, ir.Constant(f8, [0.0] * 8)))
                        a = b.call(rmax, [amax])
                        d = b.fadd(b.fdiv(a, ir.Constant(F32, 127.0)),
                                   b.call(fadd8, [ir.Constant(F32, 0.0), bad]))
                        pos = b.fcmp_ordered(">", a, ir.Constant(F32, 0.0))
                        inv = b.select(pos, b.fdiv(ir.Constant(F32, 127.0), a), ir.Constant(F32, 0.0))
                        invv = kf.splat(inv, 8)
                        qs = ir.Constant(i8x8, [0] * 8)
                        for j in range(0, gs, 8):
                            v = kf.load(f8, base, kf.i64(j), align=4)
                            qs = b.add(qs, b.fptosi(b.call(rint8, [clamp(b.fmul(v, invv))]), i8x8))
                        kf.store(d, dptr, g, align=4)
                        kf.store(inv, iptr, g, align=4)
                        kf.store(b.call(radd, [qs]), sptr, g, align=4)
                    # pass 2, per 64-column step: the permuted int8 values and the lane tables
                    ng = max(1, 64 // gs)
                    with kf.loop(0, lay.steps, 1, "is") as st:
                        x64 = kf.load(f64v, xrow, kf.mul(st, 64), align=4)
                        g0 = kf.sdiv(kf.mul(st, 64), gs)
                        iv = kf.load(vec(F32, ng), iptr, g0, align=4)
                        invs = b.shuffle_vector(iv, ir.Constant(iv.type, ir.Undefined),
                                                ir.Constant(vec(I32, 64), [j // gs if gs < 64 else 0
                                                                           for j in range(64)]))
                        q = b.trunc(b.fptosi(b.call(rint64, [clamp(b.fmul(x64, invs))]), i64v),
                                    vec(I8, 64))
                        perm = [2 * j for j in range(32)] + [2 * j + 1 for j in range(32)]
                        q = b.shuffle_vector(q, ir.Constant(q.type, ir.Undefined),
                                             ir.Constant(vec(I32, 64), perm))
                        kf.store(q, row, kf.mul(st, 64), align=1)
                        lane_g = [(8 * i) // gs if gs < 64 else 0 for i in range(8)]
                        dv = kf.load(vec(F32, ng), dptr, g0, align=4)
                        dl = b.shuffle_vector(dv, ir.Constant(dv.type, ir.Undefined),
                                              ir.Constant(vec(I32, 8), lane_g))
                        kf.store(dl, kf.gep(row, kf.i64(lay.xsv_off), I8), kf.mul(st, 8), align=4)
                        sv = kf.load(vec(I32, ng), sptr, g0, align=4)
                        first = [lane_g[i] if (8 * i) % gs == 0 else ng for i in range(8)]
                        sl = b.shuffle_vector(sv, ir.Constant(sv.type, [0] * ng),
                                              ir.Constant(vec(I32, 8), first))
                        if gs > 64:  # a group spans several steps: only its first one counts
                            starts = b.icmp_signed("==", b.srem(kf.mul(st, 64), kf.i64(gs)), kf.i64(0))
                            sl = b.select(starts, sl, ir.Constant(i8x8, [0] * 8))
                        kf.store(sl, kf.gep(row, kf.i64(lay.xsum_off), I8), kf.mul(st, 8), align=4)

            if self.i8gemm:
                kf.if_else(small, fill, lambda gs=gs, slot=slot: self._fill_int8_gemm_x(
                    kf, xf, M, gs, slot), "ix")
            else:
                with kf.if_(small, "ix"):
                    fill()
            out.append(b.load(slot, typ=PTR))
        return out

    def _gemv_micro_i8(self, kf, dec, rows, xf, xi, lay: "Int8Rows", K, m0, t: int, rc: int,
                       res) -> None:
        """``res[m * rc + r] = sum_k x[m, k] W[r, k]`` for the ``rc`` weight rows and the ``t``
        input rows from ``m0``, with int8 x: per 64-column step, each weight row is loaded and
        unpacked once (nibbles 0..15, unsigned) and, per input row, two ``vpmaddubsw`` with the
        int8 values (no saturation: 2 * 15 * 127 < 2**15), the even- and odd-column halves
        added, ``vpmaddwd`` by ones into eight int32 partial dots of 8 columns each, minus
        ``zero_point * sum q`` of those columns, converted to float and accumulated with
        ``scale * d`` per lane. Columns past the last whole step: float x and
        :meth:`GroupQuantDecoder.scalar`."""
        b = kf.b
        gs = lay.group_size
        i8v, i16v, i32v, f8 = vec(I8, 32), vec(I16, 16), vec(I32, 8), vec(F32, 8)
        maddubs = kf.declare("llvm.x86.avx2.pmadd.ub.sw", i16v, [i8v, i8v])
        maddwd = kf.declare("llvm.x86.avx2.pmadd.wd", i32v, [i16v, i16v])
        ones = ir.Constant(i16v, [1] * 16)
        low = ir.Constant(i8v, [15] * 32)
        four = ir.Constant(i8v, [4] * 32)
        zpv = ir.Constant(i32v, [dec.zero_point] * 8)
        ng = max(1, 64 // gs)
        lane_g = ir.Constant(vec(I32, 8), [(8 * i) // gs if gs < 64 else 0 for i in range(8)])
        ms = [kf.add(m0, i) if i else m0 for i in range(t)]
        xrows = [kf.gep(xi, kf.mul(m, lay.row_bytes), I8) for m in ms]
        accs = [[kf.alloca(f8, name="iacc") for _ in range(t)] for _ in range(rc)]
        for r in range(rc):
            for i in range(t):
                b.store(kf.fzero(8), accs[r][i])
        st_t = dec.st
        with kf.loop(0, lay.steps, 1, "ks") as s:
            xo = kf.mul(s, 64)
            lo8 = kf.mul(s, 8)
            xs = []
            for xr in xrows:
                xlo = kf.load(i8v, xr, xo, align=1)
                xhi = kf.load(i8v, xr, kf.add(xo, 32), align=1)
                xsv = kf.load(f8, kf.gep(xr, kf.i64(lay.xsv_off), I8), lo8, align=4)
                zc = b.mul(kf.load(i32v, kf.gep(xr, kf.i64(lay.xsum_off), I8), lo8, align=4), zpv)
                xs.append((xlo, xhi, xsv, zc))
            g0 = kf.sdiv(xo, gs)
            for r in range(rc):
                wv = kf.load(i8v, kf.gep(rows[r][0], kf.mul(s, 32), I8), None, align=1)
                lo = b.and_(wv, low)
                hi = b.lshr(wv, four)
                raw = kf.load(vec(st_t, ng), rows[r][1], g0, align=4 if st_t == F32 else 2)
                sc = kf.widen(b.shuffle_vector(raw, ir.Constant(raw.type, ir.Undefined), lane_g),
                              dec.scale_dtype)
                for i, (xlo, xhi, xsv, zc) in enumerate(xs):
                    if self.vnni:   # the same sums of four byte products per int32 lane
                        native = self.simd.native("vnni")
                        dot = kf.dot_u8s8(kf.dot_u8s8(b.neg(zc), lo, xlo, native), hi, xhi, native)
                    else:
                        p = b.add(b.call(maddubs, [lo, xlo]), b.call(maddubs, [hi, xhi]))
                        dot = b.sub(b.call(maddwd, [p, ones]), zc)
                    b.store(kf.fma(b.sitofp(dot, f8), b.fmul(sc, xsv, flags=KFunc.FM),
                                   b.load(accs[r][i], typ=f8)), accs[r][i])
        sums = [[kf.alloca(F32, name="is") for _ in range(t)] for _ in range(rc)]
        for r in range(rc):
            for i in range(t):
                b.store(kf.hsum(b.load(accs[r][i], typ=f8)), sums[r][i])
        with kf.loop(lay.steps * 64, K, 1, "it") as k:
            xv = [kf.load(F32, xf, kf.add(kf.mul(m, K), k), align=4) for m in ms]
            for r in range(rc):
                wk = dec.scalar(kf, rows[r], k)
                for i in range(t):
                    b.store(kf.fma(xv[i], wk, b.load(sums[r][i], typ=F32)), sums[r][i])
        for r in range(rc):
            for i in range(t):
                kf.store(b.load(sums[r][i], typ=F32), res, kf.add(kf.mul(ms[i], rc), r))

    def _gemv_micro_q(self, kf, dec, rows, xf, xq, xs, K, m0, t: int, rc: int, res) -> None:
        """GEMV tile over packed 4/8-bit rows (:meth:`GroupQuantDecoder.fast_chunk`)."""
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
        with kf.loop(0, G, 1, "qg") as g:
            k0 = kf.mul(g, gs)
            if pf:
                byte = kf.add(kf.b.lshr(k0, kf.i64(1)) if dec.bits == 4 else k0, pf)
                for r in range(rc):
                    kf.prefetch(kf.gep(rows[r][0], byte, I8))
            # partial sums per (row, input row): ``gemv_parts_q`` chains each (more chains are
            # shorter, but with 8 rows and 16 registers they spill)
            P = max(1, min(TUNING["gemv_parts_q"], gs // L))
            parts = [[[None] * P for _ in range(t)] for _ in range(rc)]
            nv = 0
            for c in range(0, gs, chunk):
                kc = kf.add(k0, c) if c else k0
                xv = [[kf.load(vt, xr, kf.add(kc, p * L) if p else kc, align=4)
                       for p in range(chunk // L)] for xr in xrows]
                for r in range(rc):
                    vals = dec.fast_chunk(kf, rows[r], kc)
                    for i in range(t):
                        for p, v in enumerate(vals):
                            q = (nv + p) % P
                            prev = parts[r][i][q]
                            parts[r][i][q] = b.fmul(xv[i][p], v, flags=KFunc.FM) if prev is None \
                                else kf.fma(xv[i][p], v, prev)
                nv += len(xv[0]) if xv else 0
            gacc = [[None] * t for _ in range(rc)]
            for r in range(rc):
                for i in range(t):
                    g_sum = parts[r][i][0]
                    for extra_part in parts[r][i][1:]:
                        g_sum = b.fadd(g_sum, extra_part, flags=KFunc.FM)
                    gacc[r][i] = g_sum
            for r in range(rc):
                sv = dec.scale_splat(kf, rows[r], g)
                for i in range(t):
                    b.store(kf.fma(gacc[r][i], sv, b.load(accs[r][i], typ=vt)), accs[r][i])
        # zero-point term: sum_g scale[n, g] * xs[m, g], a short vector dot per row
        if dec.zero_point:
            gv = kf.sub(G, b.srem(G, kf.i64(L)))
            cacc = [[kf.alloca(vt, name="qc") for _ in range(t)] for _ in range(rc)]
            for r in range(rc):
                for i in range(t):
                    b.store(kf.fzero(L), cacc[r][i])
            with kf.loop(0, gv, L, "qz") as g:
                xsv = [kf.load(vt, sr, g, align=4) for sr in srows]
                for r in range(rc):
                    sv = dec.scale_vec(kf, rows[r], g)
                    for i in range(t):
                        b.store(kf.fma(sv, xsv[i], b.load(cacc[r][i], typ=vt)), cacc[r][i])
            for r in range(rc):
                for i in range(t):
                    b.store(kf.hsum(b.load(cacc[r][i], typ=vt)), corr[r][i])
            with kf.loop(gv, G, 1, "qzt") as g:
                for r in range(rc):
                    sc = dec.scale_value(kf, rows[r], g)
                    for i in range(t):
                        xsum = kf.load(F32, srows[i], g, align=4)
                        b.store(kf.fma(sc, xsum, b.load(corr[r][i], typ=F32)), corr[r][i])
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
        b = kf.b
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
            dec.vectors(kf, rows, kf.i64(0), kv, U, body, prefetch=TUNING["prefetch"])
        else:
            dec.vectors(kf, rows, kf.i64(0), kv, U, body)
        self._gemv_finish(kf, dec, rows, accs, lambda i, k: kf.load(F32, xrows[i], k, align=4),
                          kv, K, m0, t, rc, res)

    def _gemv_micro_bf16(self, kf, dec, rows, xb, K, m0, t: int, rc: int, res) -> None:
        """The GEMV tile of :meth:`_gemv_micro` for bfloat16 ``x`` (``xb``, read as it is) and
        weights on AVX512-BF16: per step of ``2 * lanes`` columns one 32-bit-word vector load
        per weight row and per input row, and one ``vdpbf16ps`` per (weight row, input row)
        (:meth:`KFunc.dot_bf16`); the columns past the last full step are added in float32."""
        b = kf.b
        L = self.lanes
        native = self.simd.native("avx512bf16")
        vt, wt = vec(F32, L), vec(I32, L)
        U, accs = self._gemv_accs(kf, t, rc)
        xrows = [kf.gep(xb, kf.mul(kf.add(m0, i) if i else m0, K), I16) for i in range(t)]

        def words(p, k):
            return b.load(kf.gep(p, k, I16), typ=wt, align=2)

        def body(k, u):
            xs = [words(xr, k) for xr in xrows]
            ws = [words(row, k) for row in rows]
            for r in range(rc):
                for i in range(t):
                    a = accs[r][i][u]
                    b.store(kf.dot_bf16(b.load(a, typ=vt), xs[i], ws[r], native), a)

        step = 2 * L
        kv = kf.sub(K, b.srem(K, kf.i64(step)))
        main_end = kf.sub(kv, b.srem(kv, kf.i64(step * U)))
        with kf.loop(0, main_end, step * U, "kv") as k:
            for u in range(U):
                body(kf.add(k, u * step) if u else k, u)
        if U > 1:
            with kf.loop(main_end, kv, step, "kr") as k:
                body(k, 0)
        self._gemv_finish(kf, dec, rows, accs, lambda i, k: scalar_to_f32(
            kf, kf.load(I16, xrows[i], k, align=2), "bfloat16"), kv, K, m0, t, rc, res)

    # GEMM ----------------------------------------------------------------------------------------
    def _micro_fn(self, t: int) -> ir.Function:
        """``void micro_t(ptr bp, ptr xp, i64 ldx, i64 kc, ptr cs, i1 first)``: ``cs[i, 0:NR]
        (+)= sum_k x[i, k] bp[k, 0:NR]`` for ``t`` float32 rows of ``x`` (row stride ``ldx``):
        per column one broadcast of ``x`` per row and one FMA per accumulator."""
        return self._micro_kernel(f"mb.micro.v{self.lanes}x{self.NV}.t{t}", t, F32, F32, 4,
                                  lambda kf, acc, a, bv: kf.fma(a, bv, acc))

    def _micro_bf16_fn(self, t: int) -> ir.Function:
        """``void micro_bf16_t(ptr bp, ptr xp, i64 ldx, i64 kcp, ptr cs, i1 first)``: the
        micro-kernel of :meth:`_micro_fn` for bfloat16 ``x`` and weights on AVX512-BF16.
        ``bp[kp][j]`` is the 32-bit word holding ``W[n0 + j, kb + 2kp : kb + 2kp + 2]`` (a
        panel packed by ``_pack_fn(w, words=True)``), ``xp`` the bfloat16 rows of ``x`` (row
        stride ``ldx`` elements) from column ``kb``; per column pair one 32-bit broadcast of
        ``x`` per row and one ``vdpbf16ps`` per accumulator (:meth:`KFunc.dot_bf16`: two
        products per lane, twice the multiply-adds of an FMA)."""
        native = self.simd.native("avx512bf16")
        key = f"mb.micro_bf16{'' if native else '_emulated'}.v{self.lanes}x{self.NV}.t{t}"
        return self._micro_kernel(key, t, I16, I32, 2,
                                  lambda kf, acc, a, bv: kf.dot_bf16(acc, a, bv, native))

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

    def _workspace(self, kf: KFunc, nbytes) -> tuple[ir.Value, ir.Value]:
        """``malloc(nbytes)`` (the function returns the out-of-memory code on failure) and its
        first 64-byte-aligned address (``nbytes`` must include 63 bytes of slack)."""
        b = kf.b
        raw = b.call(kf.declare("malloc", PTR, [I64]), [nbytes])
        with kf.if_(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), "oom"):
            b.ret(ir.Constant(I32, self.error_code))
        aligned = b.and_(kf.add(b.ptrtoint(raw, I64), 63), kf.i64(~63))
        return raw, b.inttoptr(aligned, PTR)

    def _panel_epilogue(self, kf: KFunc, ctx, cs, M, NR: int, n0, nr_eff) -> None:
        """The epilogue of a panel: ``out[m, n0:n0+nr_eff]`` for every row from the per-weight
        ``M x NR`` float32 accumulators at ``cs``."""
        b = kf.b
        with kf.loop(0, M, 1, "me") as m:
            accs = [kf.gep(cs, kf.add(kf.mul(m, NR), kf.mul(kf.mul(M, NR), w)), F32)
                    for w in range(self.nw)]
            accs += [accs[0]] * (2 - self.nw)
            b.call(self.epi_fn, [ctx, m, n0, nr_eff] + accs)

    def _gemm(self, kf, st, u0, u1) -> None:
        if self.i8gemm:
            return self._gemm_i8(kf, st, u0, u1)
        b = kf.b
        NR, KC, MR = self.NR, self.KC, self.MR
        M, N, K = st.M, st.N, st.K
        ctx = st.fn.args[0]
        free = kf.declare("free", ir.VoidType(), [PTR])
        cs_floats = kf.mul(kf.mul(M, NR), self.nw)
        nbytes = kf.add(kf.mul(kf.add(cs_floats, KC * NR), 4), 128)
        raw, bp = self._workspace(kf, nbytes)
        cs = kf.gep(bp, kf.i64(KC * NR), F32)
        micro = self.micro_fns
        bf = self.bf16dot
        # a block of KB columns fills the KC x NR panel: KC float32 columns, or KC words of
        # two bfloat16 columns each for the vdpbf16ps micro-kernel
        KB = 2 * KC if bf else KC
        packs = [self._pack_fn(w, words=bf) for w in range(self.nw)]
        wargs = [self._weight_args(st, w) for w in range(self.nw)]
        pargs = [[a[0], a[1], kf.sdiv(a[2], 2), a[3]] for a in wargs] if bf else wargs
        xt = I16 if bf else F32   # x: bfloat16 as it is, or float32
        full_m = kf.sub(M, b.srem(M, kf.i64(MR)))
        rem = b.srem(M, kf.i64(MR))
        ntiles = kf.sdiv(full_m, MR)
        decs = [self._decoder(w, *wargs[w]) for w in range(self.nw)]
        with kf.loop(u0, u1, 1, "panel") as p:
            n0 = kf.mul(p, NR)
            nr_eff = kf.smin(kf.sub(N, n0), NR)
            with kf.if_(b.icmp_signed("==", K, kf.i64(0)), "k0"):
                with kf.loop(0, cs_floats, 1, "z") as i:
                    kf.store(ir.Constant(F32, 0.0), cs, i, align=4)
            for w in range(self.nw):
                csw = kf.gep(cs, kf.mul(kf.mul(M, NR), w), F32) if w else cs
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
                    with kf.loop(0, full_m, MR, "mt") as m0:
                        xp = kf.gep(st.xf, kf.add(kf.mul(m0, K), kb), xt)
                        b.call(micro[MR], [bp, xp, K, kcm, kf.gep(csw, kf.mul(m0, NR), F32), first])
                        with kf.if_(pvalid, "pfn"):
                            j = kf.sdiv(m0, MR)
                            cnt = kf.sdiv(kf.smax(kf.add(kf.sub(kf.i64(NR - 1), j), ntiles), 0), ntiles)
                            with kf.loop(0, cnt, 1, "pfr") as i:
                                r = kf.add(j, kf.mul(i, ntiles))
                                decs[w].prefetch(kf, decs[w].row(kf, kf.smin(kf.add(pn0, r), kf.sub(N, 1))),
                                                 pk, pkend)
                    xp = kf.gep(st.xf, kf.add(kf.mul(full_m, K), kb), xt)
                    csr = kf.gep(csw, kf.mul(full_m, NR), F32)
                    kf.switch_const(rem, {t: (lambda t=t: b.call(micro[t], [bp, xp, K, kcm, csr, first]))
                                          for t in range(1, MR)}, f"mr{w}")
            self._panel_epilogue(kf, ctx, cs, M, NR, n0, nr_eff)
        b.call(free, [raw])
        b.ret(ir.Constant(I32, 0))

    # int8-activation GEMM (4-bit weights, AVX2 integer multiply-adds) ---------------------------
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
        gs = d["group_size"]
        dec = GroupQuantDecoder(p0, d["storage"], p1, d["scale_dtype"], ld0, ld1, 4, gs,
                                d["zero_point"], 8)
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

        kf.if_else(b.icmp_signed("==", nr_eff, kf.i64(NR)), full_panel, lambda: quads(kf.i64(0)), "ip")
        g0 = kf.sdiv(kb, gs)
        last = kf.sub(nr_eff, 1)
        with kf.loop(0, kf.sdiv(kc, gs), 1, "ps") as g:
            with kf.loop(0, NR, 1, "psr") as r:
                row = dec.row(kf, kf.add(n0, kf.smin(r, last)))
                s = dec.scale_value(kf, row, kf.add(g0, g))
                s = b.select(kf.lt(r, nr_eff), s, ir.Constant(F32, 0.0))
                kf.store(s, sp, kf.add(kf.mul(g, NR), r), align=4)
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
        dec = GroupQuantDecoder(p0, d["storage"], p1, d["scale_dtype"], ld0, ld1, 4, d["group_size"],
                                d["zero_point"], 8)
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
                gs, zp = d["group_size"], d["zero_point"]
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


def int8_gemv_supported(storage: str, bits: int, group_size: int, k: int) -> bool:
    """Whether the int8-activation GEMV applies: 4-bit values in unsigned words, groups that
    tile 64-column steps (``group_size`` a multiple of 8 dividing 64, or a multiple of 64 up to
    256) and at least one whole step of ``k`` columns."""
    if storage not in ("uint8", "uint16", "uint32") or bits != 4 or group_size % 8 or group_size > 256:
        return False
    if 64 % group_size and group_size % 64:
        return False
    return Int8Rows(k, group_size).steps > 0


@dataclass(frozen=True)
class Int8Rows:
    """Byte layout of one row of x in the int8-activation buffer (``k`` columns, groups of
    ``group_size``): ``steps`` = whole 64-column steps inside whole groups; int8 values
    (``steps * 64`` bytes, each step even columns then odd), ``xsv`` (``steps * 8`` float32:
    per step and 32-bit lane, the group's ``d``), ``xsum`` (``steps * 8`` int32: the group's
    ``sum q`` in its first lane, else 0), then per covered group ``d``, ``1/d`` (float32) and
    ``sum q`` (int32)."""

    k: int
    group_size: int

    @property
    def steps(self) -> int:
        """Whole 64-column steps inside whole groups (``(k // group_size) * group_size // 64``)."""
        return (self.k // self.group_size) * self.group_size // 64

    @property
    def columns(self) -> int:
        """Columns quantized to int8 (``steps * 64``); the rest of a row stays float."""
        return self.steps * 64

    @property
    def groups(self) -> int:
        """Groups the steps cover (``steps * 64 // group_size``)."""
        return self.steps * 64 // self.group_size

    @property
    def xsv_off(self) -> int:
        """Byte offset of the per-lane ``d`` table (float32, ``steps * 8``)."""
        return self.steps * 64

    @property
    def xsum_off(self) -> int:
        """Byte offset of the per-lane ``sum q`` table (int32, ``steps * 8``)."""
        return self.steps * 96

    @property
    def d_off(self) -> int:
        """Byte offset of the per-group ``d`` (float32, padded by one vector)."""
        return self.steps * 128

    @property
    def inv_off(self) -> int:
        """Byte offset of the per-group ``127 / max|x|`` (float32)."""
        return self.d_off + 4 * self.groups + 4 * max(1, 64 // self.group_size)

    @property
    def sum_off(self) -> int:
        """Byte offset of the per-group ``sum q`` (int32)."""
        return self.inv_off + 4 * self.groups + 4 * max(1, 64 // self.group_size)

    @property
    def row_bytes(self) -> int:
        """Bytes per row of x, rounded up to 64."""
        end = self.sum_off + 4 * self.groups + 4 * max(1, 64 // self.group_size)
        return -(-end // 64) * 64


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


def emit_linear(mod: ModuleEmitter, name: str, func: PrimFunc, sig, plan: LinearPlan,
                simd: SimdInfo) -> tuple[ir.Function, list[str]]:
    """Emit ``<name>.compute`` (and its task / micro-kernel functions) for ``plan``; returns
    the body function (the ABI entry calls it) and the extra error messages (codes after the
    signature checks)."""
    em = _LinearEmitter(mod, name, func, sig, plan, simd)
    extra = em.emit()
    return em.body_fn, extra
