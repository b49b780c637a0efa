"""The linear kernel planner: :data:`TUNING`, and :func:`plan_linear`, which checks a PrimFunc
against its :class:`~builder.ir.kernel.LinearKernelSpec` (shapes, dtypes, which buffers each block
reads) and returns a :class:`LinearPlan` (with the special instruction path it takes, ``variant``)
or the reason the fast kernel does not apply."""
from __future__ import annotations

from dataclasses import dataclass, field, replace


from runtime.host import host_cache_bytes

from ....ir import expr as E
from ....ir import tir
from ....ir.expr import PrimExpr, Var
from ....ir.kernel import KERNEL_ATTR, GroupWeight, LinearKernelSpec
from ....ir.tir import Block, BlockRealize, Buffer, BufferLoad, BufferStore, PrimFunc
from ....ir.op.quantize import QUANT_STORAGE_BITS, ROW_TILE
from ..decode import GroupQuantDecoder
from ..simd import SimdInfo
from .int8_rows import int8_gemv_supported

__all__ = ["TUNING", "WeightPlan", "LinearPlan", "plan_linear", "FAST_QUANT_ATTRS", "quant_format_unsupported"]

#: The float GEMM's default row chunk of x: half the host's L2 per core (beside the chunk, the L2 holds
#: the packed weight panel and the chunk's accumulators), 1 MiB where the L2 is unknown.
_GEMM_CHUNK = host_cache_bytes(2) // 2 or 1 << 20

#: Tunables (read at code generation time).
TUNING = {
    "gemv_max_rows": 24,         # M <= this: GEMV path (float weights)
    "gemv_short_k": 512,         # K <= this (static): the GEMV takes at most gemv_max_rows_short_k rows
    "gemv_max_rows_short_k": 8,
    "gemv_max_rows_q": 0,        # the same with quantized weights (0: 4, 8 with 32 registers)
    "gemv_max_rows_qi": 32,      # M <= this: int8-activation GEMV (when every weight takes it)
    "gemv_max_rows_qig": 8,      # the same when the larger M take the int8 GEMM
    "gemv_rows_x_i8": 0,         # input rows per int8 GEMV tile (0: 2, 4 with 32 registers)
    "gemv_acc_i8": 2,            # accumulator chains per weight row and input row in the int8 GEMV
    "gemv_rows_step_i8": 1,      # int8 GEMV, 2+ input rows: weight rows sharing each load of x (1: one stream per task)
    "gemv_wide_i8": 1,           # int8 GEMV with 16 lanes: 128-column steps in 512-bit vectors (0: 64 in 256-bit)
    "tile_lanes_i8": 0,          # row-tiled int8 kernel: int32 lanes per vector (0: 16 with 16 float lanes, else 8;
                                 # 8 on an AVX-512 Xeon: LlamaMLP q4f16_1+a8 batch 8 3.8 -> 5.9 ms)
    "tile_pair_rows_i8": 2,      # row-tiled int8 kernel with 8 lanes, no VNNI: helpers of up to this many input rows
                                 # take a whole tile as two 256-bit vectors per word (GemvTiles._tile_shape; 0: off)
    "tile_pair_rows_f32": 4,     # the same for the float-activation tiles with 8 lanes (LlamaMLP-sized q8 from DRAM 1.6x
                                 # at 1 row; 4: blocks of 4 rows of whole tiles, 3-16 rows 20-29% faster, Zen 4 AVX2 code)
    "tile_streams": 2,           # row-tiled int8 kernel, 4-bit weights on 256-bit vectors: tiles read in lockstep per
                                 # helper call, group by group (GemvTiles._tile_streams; 1: one; Zen 3 LlamaMLP
                                 # q4f16_1+a8 batch 1 2.38 -> 2.28 ms: two read streams per thread beat one)
    "tile_streams_rows": 1,      # ... for up to this many input rows (at most tile_pair_rows_i8)
    "tile_rows_x_i8": 0,         # row-tiled int8 kernel: input rows per block (0: 8, GemvTiles._tile_shape)
    "tile_rows_x": 0,            # the same for the float-activation tiles (0: tile_pair_rows_f32 with 8 lanes, else 8)
    "xprep_min_values": 1 << 16,  # row-tiled int8 kernel: x quantized on all threads from this many values
    "prefetch_scales": 2048,     # row-tiled kernels: the scales' prefetch distance in bytes (0: off;
                                 # LlamaMLP q4f16_1+a8 batch 8 4.83-4.92 -> 4.59-4.72 ms from DRAM, Xeon)
    "tile_x16": 1,               # 4- / 8-bit tiles with float16 / bfloat16 x (float32 below highest): x in int16
                                 # per group (_int16_activations; 0: off)
    "tile_permps": 1,            # float tiles on AVX-512: decode with vpermps (0: mask and conversion)
    "tile_chains_f32": 4,        # float tiles: FMA chains per group over the input rows of a block (4: 4 for
                                 # 1 row, 2 for 2; LlamaMLP q4f16_1 batch 1 4.04 -> 3.63 ms, Xeon)
    "tile_max_rows": 0,          # M <= this: float-activation tiles, else the float GEMM (0: 32 with 32
                                 # registers, 16 with 16; Xeon, q4 2048 x 2048 at 24 / 32 rows 857 -> 711,
                                 # 1117 -> 979 us with 32; with the AVX2 kernels the GEMM stays 25% faster there)
    "tile_max_rows_dense": 32,   # the same for float weights in row tiles,
    "tile_dense_x_bytes": 1 << 20,   # or more rows while x (M x K float32) is at most this many bytes
    "tile_rows_x_dense": 0,      # their input rows per block (0: 12 with 32 registers, 6 with 16 (2 with SSE))
    "tile_chains_dense": 1,      # their FMA chains over the input rows of a block (8: 8 for 1 row, 4 for 2, ...;
                                 # 1: a row's sum in column order whatever the block, tile pairing or M, as the
                                 # GEMM sums it: tensor-parallel shards and every batch size compute a row alike;
                                 # 8 was within the noise from DRAM and 5-20% faster with the weights in L2)
    "gemv_rows": 4,              # R: weight rows per GEMV tile
    "gemv_rows_q": 4,            # the same for packed 4 / 8-bit weights (8 spills with 16 registers)
    "kc_bytes": 0,               # packed panel KC x NR float32 bytes (0: 16 KiB, 64 KiB with 32 registers)
    "mr": 6,                     # GEMM micro-kernel rows
    "gemm_chunk_bytes": _GEMM_CHUNK,  # GEMM: x in chunks of rows of at most this many bytes, a task per chunk (0:
                                 # off; half the host's L2 per core, 1 MiB where unknown: Whisper-tiny encoder 144 ->
                                 # 133 ms, 384 x 240 -> 384 at 3000 rows 1745 -> 1611 us, 2 threads, Xeon (L2 2 MiB);
                                 # 3321 -> 2640 us with the AVX2 kernels)
    "gemm_chunk_min_rows": 128,  # ... unless a chunk would have fewer rows than this
    "parallel_min_macs": 1 << 18,
    "tasks_per_thread": 16,
    "tasks_per_thread_tiles": 4,  # the same for 4- / 8-bit weights in row tiles (TinyLlama q4f16_1+a8 decode 3-5%
                                 # faster than with 16, interleaved A/B in one process both ways round; prefill the same)
    "tasks_per_thread_dense_tiles": 2,   # the same for float weights in row tiles (MiniLM's 384 -> 1536
                                 # matmul at 12 rows 51-54 -> 40-43 us with 4 against 16; 1536 -> 384 50.9 ->
                                 # 43.4-44.2, 384 -> 384 16.3-16.9 -> 14.7 with 2 against 4, interleaved, Xeon)
    "prefetch": 4096,            # GEMV software prefetch distance in bytes (0: off)
    "prefetch_gemm": 1,          # GEMM: prefetch the next weight block during the micro-kernels
    "prefetch_q": 4096,          # the same for packed 4 / 8-bit rows, int8 GEMV included (0: off)
    "prefetch_locality": 2,      # llvm.prefetch locality of those: 2 = into L2 (prefetcht1), 3 = L1 (prefetcht0)
    "gemv_parts_q": 1,           # partial-sum chains per (row, input row) in a 4/8-bit group
    "gemv_chains_q": 4,          # accumulators per (row, input row) across 4/8-bit groups, taken in turn
    "gemm_i8": 1,                # int8-activation GEMM for M > gemv_max_rows_qig (0: float GEMM above gemv_max_rows_qi)
    "mr_i8": 0,                  # its micro-kernel rows (0: 3, 6 with 32 registers)
    "kc_i8": 1024,               # its packed panel columns (NRI bytes each)
    "prefetch_i8pack": 256,      # its packing: prefetch distance in bytes along each weight row (0: off)
    "qu_i8": 2,                  # its k-quads per inner loop iteration
    "nv_i8": 2,                  # its weight rows per panel / 8 (int32 vectors per row of x)
    "epi_interleave": 2,         # epilogue loop: vector iterations interleaved by LLVM (adds a 4-wide remainder loop)
    "amx_b_bytes": 24576,        # AMX GEMM: bytes of a panel's bfloat16 weight tiles per block of columns (the block:
                                 # a multiple of 32 columns; 192 with bfloat16 products, 64 with bf16x3; Xeon, 2
                                 # threads, 328 x 1536 -> 384 at medium 477 -> 409 us against 128 columns)
    "amx_min_rows": 16,          # AMX GEMM with bfloat16 products from this many rows of x (the FMA kernels below;
                                 # Xeon, 2 threads, 384 -> 1536 at 16 rows 145 -> 138 us, 24: 168 -> 140)
    "amx3_min_rows": 64,         # the same with the bf16x3 split (its packing costs three times as much: 48 rows
                                 # 258 -> 279 us, 64: 310 -> 240)
    "gemm_bf16dot": 1,           # bfloat16 x and weights on AVX512-BF16: vdpbf16ps GEMV, and GEMM where
                                 # SimdInfo.bf16dot_gemm (0: float32 both; 2: GEMM too on any such CPU)
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
class WeightPlan:
    """One weight of a planned kernel: the spec's fields (:class:`~builder.ir.kernel.DenseWeight`:
    ``format="dense"``, parameter ``w``; :class:`~builder.ir.kernel.GroupWeight`: ``format="group"``,
    parameters ``q`` / ``scale``, ``bits``, ``group_size``, ``zero_point``, ``in_features``,
    ``activation``, ``row_tile``, ``extra_attrs``) and what the planner read from the buffers: the dense weight's ``dtype``, the
    packed words' ``storage`` dtype and the ``scale_dtype``, and ``reads`` (the ids of the weight's
    buffers, which its accumulator block may read besides x)."""

    format: str
    w: int = -1
    q: int = -1
    scale: int = -1
    bits: int = 0
    group_size: int = 0
    zero_point: int = 0
    in_features: int = 0
    activation: str = "none"
    row_tile: int = 0
    batched: int = 0
    kn: int = 0
    extra_attrs: tuple = ()
    dtype: str = ""
    storage: str = ""
    scale_dtype: str = ""
    reads: set = field(default_factory=set)
    spec: object = None

    @classmethod
    def from_spec(cls, w) -> "WeightPlan":
        """The plan of a spec weight, before the planner reads the buffers (``spec``: the weight itself)."""
        return cls(format=w.format, spec=w, **{k: v for k, v in vars(w).items() if k != "format"})


@dataclass
class LinearPlan:
    """A validated ``linear`` kernel: param indices, the weights' plans, the epilogue. ``lead_vars`` /
    ``n_var`` are the output block's iter vars that index the products' leading dims and their
    last (N) dim: the output's own order, or permuted where the output is a transpose of the
    products (``transposed``; a ``permute_dims`` folded into the kernel's store)."""

    x: int
    out: int
    weights: list[WeightPlan]
    acc_vars: list[Var]
    lead_vars: list[Var]
    n_var: Var
    value: PrimExpr
    params: list[Buffer] = field(default_factory=list)
    acc_shape: list = field(default_factory=list)   # the products: (x's leading dims, N)
    transposed: bool = False   # the output is a transpose of acc_shape (stored at its own strides)
    out_vars: list = field(default_factory=list)   # the output block's iter vars, in the output's order
    variant: str = ""
    simd: SimdInfo | None = None   # set when planned for narrower vectors than the target's
    notes: tuple = ()   # what the kernel does differently from what the model asked (a fallback), in words


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


#: The ``R.group_dequantize`` attributes the fast kernels implement. A quantized weight whose format
#: writes any other (a codebook, an attribute a new :class:`~builder.ir.quant_format.QuantFormat` adds) is
#: refused, so it runs on the reference loops rather than on a kernel that decodes another format.
FAST_QUANT_ATTRS = frozenset({"bits", "group_size", "zero_point", "in_features", "activation_quantization",
                              "row_tile"})


def quant_format_unsupported(w: GroupWeight, storage: str, scale_dtype: str) -> str:
    """Why no fast kernel takes the group-quantized weight ``w`` with words of ``storage`` and scales of
    ``scale_dtype``, or ``""``: a format :meth:`QuantFormat.from_attrs` refuses (its reason), or one that
    writes an attribute outside :data:`FAST_QUANT_ATTRS` (named in the reason)."""
    try:
        fmt = w.quant_format(storage, scale_dtype, "quantized weight")
    except (ValueError, TypeError) as err:
        return f"{err}"
    unknown = [k for k in fmt.to_attrs(w.in_features) if k not in FAST_QUANT_ATTRS]
    if unknown:
        what = ", ".join(f"{k}={fmt.to_attrs(w.in_features)[k]!r}" for k in unknown)
        return f"quantized format {what}: no fast kernel implements it (the reference loops run)"
    return ""


def _tiled_unsupported(storage: str, bits: int, group_size: int, tile: int) -> str:
    """Why the row-tiled kernels (:mod:`.tiles`) cannot run a row-tiled weight, or ``""``: they
    take 4- and 8-bit values in uint32 words in tiles of 16 rows, groups of whole words (elsewhere
    the generic loops read the tiles). With int8 activations they multiply in int8 on AVX2
    (:func:`int8_gemv_supported`), else in float32 as the other kernels do."""
    if storage != "uint32" or bits not in (4, 8) or tile != 16 or group_size % (32 // bits):
        return f"row-tiled {storage} bits={bits} row_tile={tile} group_size={group_size}"
    return ""


def plan_linear(func: PrimFunc, simd: SimdInfo) -> LinearPlan | str:
    """Validate ``func`` against its ``mb.kernel`` description; returns the plan or a reason
    (a string) why the fast kernel does not apply. The plan's ``variant`` names a special
    instruction path the kernel takes (``"bf16dot"``: bfloat16 ``x`` and weights, an even
    static ``K`` and ``vdpbf16ps`` in the GEMV and GEMM; ``"bf16gemv"``: in the GEMV only, the
    GEMM multiplies widened float32 (:attr:`SimdInfo.bf16dot_gemm`, ``gemm_bf16dot``);
    ``"vnni"``: int8-activation weights and ``vpdpbusd``; ``"x16"``: 4- or 8-bit row tiles with x in
    int16 per group (:func:`_int16_activations`); ``"tiles"`` added: row-tiled weights and
    the row-tiled kernels of :mod:`.tiles`; ``"amx"`` / ``"amx3"`` added: the GEMM on AMX tiles with
    bfloat16 products or the bf16x3 split, :func:`_amx_split`), shown in the built function's
    ``kernel`` label.

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
    if isinstance(plan, LinearPlan) and not any(d.batched or d.kn for d in plan.weights):
        k = E.simplify(plan.params[plan.x].shape[-1])
        if (simd.avx512bf16 and TUNING["gemm_bf16dot"] and plan.params[plan.x].dtype == "bfloat16"
                and isinstance(k, E.IntImm) and k.value % 2 == 0
                and all(d.format == "dense" and d.dtype == "bfloat16" and not d.row_tile for d in plan.weights)):
            gemm = TUNING["gemm_bf16dot"] >= 2 or simd.bf16dot_gemm
            plan.variant = "bf16dot" if gemm else "bf16gemv"
        elif simd.vnni and _int8_activations(plan, k):
            plan.variant = "vnni"
        elif _int16_activations(plan, simd, k):
            plan.variant = "x16"
        if any(d.row_tile for d in plan.weights):
            plan.variant = "+".join(filter(None, [plan.variant, "tiles"]))
        split = _amx_split(plan, simd, k)
        if split:
            plan.variant = "+".join(filter(None, [plan.variant, "amx" if split == 1 else "amx3"]))
        plan.notes = _fallback_notes(plan, simd, k, split)
    return plan


#: The fallbacks :func:`_fallback_notes` reports, as ``build`` prints them (:func:`builder.summary.kernel_notes`).
NO_INT8_DOT = ("activation_quantization=int8: this CPU has no AVX2 integer multiply-adds, so these matmuls "
               "run with float activations")
NO_AMX = ("matmul_precision={precision}: this CPU has no AMX tiles (or the OS does not grant them, or the "
          "target's vectors are not AVX-512's 16 lanes), so float32 matmuls compute in float32, as at highest")


def _fallback_notes(plan: LinearPlan, simd: SimdInfo, k, split: int) -> tuple[str, ...]:
    """What ``plan`` computes differently from what its model asked, in words (empty when nothing):
    int8 activations (``activation: int8`` weights) without AVX2's integer multiply-adds run on float
    activations (:data:`NO_INT8_DOT`); a float32 matmul at a ``matmul_precision`` below ``highest``
    without AMX tiles (:func:`_amx_split` gave 0 for want of them) computes in float32
    (:data:`NO_AMX`). bfloat16 x with bfloat16 weights (exact products at every precision), the
    int8-activation kernels (which never take the tiles) and the 4-bit tiles with int16 x (variant
    ``x16``, the reduced precision the setting allows) are not fallbacks of the precision."""
    notes = []
    if not simd.int8_dot and _int8_activations(plan, k):
        notes.append(NO_INT8_DOT)
    int8 = simd.int8_dot and _int8_activations(plan, k)
    bf16 = plan.params[plan.x].dtype == "bfloat16" and all(d.format == "dense" and d.dtype == "bfloat16"
                                                           for d in plan.weights)
    x16 = "x16" in plan.variant.split("+")
    if (simd.matmul_precision != "highest" and not split and not int8 and not bf16 and not x16
            and not (simd.amx and simd.lanes == 16 and simd.registers >= 32)):
        notes.append(NO_AMX.format(precision=simd.matmul_precision))
    return tuple(notes)


def _int8_activations(plan: LinearPlan, k) -> bool:
    """True when a weight of ``plan`` takes the int8-activation kernels (on a CPU with AVX2 integer
    multiply-adds): 4- / 8-bit weights whose graph allows int8 activations, in a layout
    :func:`int8_gemv_supported` takes, with a static K (``k``, simplified)."""
    return isinstance(k, E.IntImm) and any(
        d.format == "group" and d.activation == "int8"
        and int8_gemv_supported(d.storage, d.bits, d.group_size, k.value, d.row_tile, d.zero_point)
        for d in plan.weights)


def _int16_activations(plan: LinearPlan, simd: SimdInfo, k) -> bool:
    """True when ``plan`` takes the 4- or 8-bit row tiles with x in int16 (:meth:`~.tiles.GemvTiles._tile_fn_x16`):
    every weight 4-bit (or every one 8-bit) in row tiles with float activations in a layout :func:`int8_gemv_supported`
    takes, a static K (``k``, simplified), AVX2 integer multiply-adds on 8 or 16 lanes, and x in
    float16 / bfloat16 (or float32 at a ``matmul_precision`` below ``highest``). x is rounded to
    ``q = rint(x * 32767 / max|x|)`` per group of the weights: an error of at most ``max|x| / 65534``
    per value, 32 times below float16's own rounding of the group's largest value (2**-11 of it), so
    the products -- exact in int32 -- carry no more error than the float16 inputs did. Where float
    activations need a shift, a byte shuffle, a conversion and an FMA per 8 weights and rows of 8
    lanes, x in int16 pairs each column with the one 4 further on in one ``vpmaddwd`` lane: a shift,
    a mask and a ``vpmaddwd`` (with AVX512-VNNI a ``vpdpwssd``) per 16 weights (8-bit words: their
    even and odd bytes, split once per word, where float x took a byte shuffle and a conversion per 4
    weights). A zero point outside 0 .. 15 (0 .. 255 for 8-bit weights: what the int32 sums' bound
    assumes) keeps the float tiles. ``tile_x16 = 0``: off."""
    x = plan.params[plan.x]
    if not (TUNING["tile_x16"] and simd.int8_dot and simd.lanes >= 8 and isinstance(k, E.IntImm)):
        return False
    if x.dtype not in ("float16", "bfloat16") and simd.matmul_precision == "highest":
        return False
    bits = {d.bits for d in plan.weights}     # one layout of x for all: 4-bit or 8-bit weights alone
    return not _int8_activations(plan, k) and len(bits) == 1 and all(
        d.format == "group" and d.row_tile and d.bits in (4, 8)
        and 0 <= d.zero_point < 1 << d.bits   # (the int32 sums' bound)
        and int8_gemv_supported(d.storage, d.bits, d.group_size, k.value, d.row_tile, d.zero_point)
        for d in plan.weights)


def _amx_split(plan: LinearPlan, simd: SimdInfo, k) -> int:
    """The GEMM on AMX tiles (:mod:`.amx`) for ``plan``: 1 (bfloat16 products), 3 (the bf16x3
    split) or 0 (not taken). Taken on a host with AMX (:attr:`SimdInfo.amx`) in the 16-lane shape
    when no weight takes the int8-activation kernels: with 1 for bfloat16 x and bfloat16 weights (its
    products are exact, whatever the precision), else as the target's matmul precision says
    (``high`` 3, ``medium`` 1, ``highest`` 0)."""
    if not simd.amx or simd.lanes != 16 or simd.registers < 32:
        return 0
    if simd.int8_dot and _int8_activations(plan, k):
        return 0
    if plan.params[plan.x].dtype == "bfloat16" and all(d.format == "dense" and d.dtype == "bfloat16"
                                                       for d in plan.weights):
        return 1
    return {"high": 3, "medium": 1}.get(simd.matmul_precision, 0)


def _plan_linear(func: PrimFunc, simd: SimdInfo) -> LinearPlan | str:
    spec = func.attrs.get(KERNEL_ATTR)
    if not isinstance(spec, LinearKernelSpec):
        return "no linear kernel attribute"
    if not simd.usable:
        return f"no vector unit ({simd.name})"
    params = list(func.params)
    try:
        x, out = params[spec.x], params[spec.out]
        weights = [WeightPlan.from_spec(w) for w in spec.weights]
        acc_names = list(spec.acc)
    except (IndexError, TypeError) as err:
        return f"malformed kernel attribute: {err!r}"
    if len(acc_names) != len(weights) or not 1 <= len(weights) <= 2:
        return "one or two weights with one accumulator each"
    if x.dtype not in ("float32", "float16", "bfloat16"):
        return f"input dtype {x.dtype}"
    if x.ndim < 1 or out.ndim != x.ndim:
        return "input / output shapes"
    blocks = {b.name: b for b in _blocks(func)}
    if "root" in blocks:
        del blocks["root"]
    acc_blocks = []
    for name in acc_names:
        blk = blocks.get(name)
        if blk is None or blk.init is None or len(blk.writes) != 1:
            return f"accumulator block {name!r}"
        abuf = blk.writes[0].buffer
        # the accumulators: (x's leading dims, N) in float32; the output is that or a transpose of it
        if (abuf.dtype != "float32" or abuf.ndim != x.ndim or not _same_dims(abuf.shape[:-1], x.shape[:-1])
                or not _same_dims(abuf.shape, acc_blocks[0].writes[0].buffer.shape if acc_blocks else abuf.shape)):
            return f"accumulator {abuf.name} must be float32 of x's leading dims and N"
        acc_blocks.append(blk)
    acc_shape = list(acc_blocks[0].writes[0].buffer.shape)
    n_dim, k_dim = acc_shape[-1], x.shape[-1]
    for w in weights:
        if w.format == "dense" and (w.batched or w.kn):
            # one matrix per batch (a matmul of two activations) or a weight stored (in, out): the
            # float GEMM alone, (in, out) panels copied row by row
            wb = params[w.w]
            lead = x.ndim - 2 if w.batched else 0
            if (w.batched not in (0, 1) or w.kn not in (0, 1) or w.row_tile or len(weights) != 1
                    or lead < 0 or (w.batched and lead < 1) or wb.ndim != lead + 2):
                return f"weight {wb.name} {wb.ndim}-D (batched={w.batched}, kn={w.kn})"
            if wb.dtype not in ("float32", "float16", "bfloat16"):
                return f"weight {wb.name} {wb.dtype}"
            want = (k_dim, n_dim) if w.kn else (n_dim, k_dim)
            if not (_same_dims(wb.shape[:lead], x.shape[:lead]) and _same_dims(wb.shape[lead:], want)):
                return f"weight {wb.name} shape"
            w.dtype, w.reads = wb.dtype, {id(wb)}
        elif w.format == "dense":
            wb = params[w.w]
            tile = int(w.row_tile)
            if wb.ndim != (3 if tile else 2) or wb.dtype not in ("float32", "float16", "bfloat16"):
                return f"dense weight {wb.name} {wb.dtype} {wb.ndim}-D"
            if tile != 0 and tile != ROW_TILE:
                return f"dense weight {wb.name} row_tile={tile}"
            if not (_same_dims(wb.shape, (n_dim, k_dim)) if not tile else
                    E.prove_equal(wb.shape[0] * tile, n_dim) and _same_dims(wb.shape[1:], (k_dim, tile))):
                return f"weight {wb.name} shape"
            w.dtype, w.reads = wb.dtype, {id(wb)}
        elif w.format == "group":
            q, s = params[w.q], params[w.scale]
            tile = int(w.row_tile)
            if q.ndim != (3 if tile else 2) or s.ndim != q.ndim or q.dtype not in QUANT_STORAGE_BITS:
                return "quantized weight layout"
            if s.dtype not in ("float32", "float16", "bfloat16"):
                return f"scale dtype {s.dtype}"
            why = quant_format_unsupported(w.spec, q.dtype, s.dtype)
            if why:
                return why
            bits, gs, zp = int(w.bits), int(w.group_size), int(w.zero_point)
            kk = E.simplify(k_dim)
            if not isinstance(kk, E.IntImm):
                return "quantized weights need a static in_features"
            if tile:
                why = _tiled_unsupported(q.dtype, bits, gs, tile)
                if why:
                    return why
                if not (E.prove_equal(q.shape[0] * tile, n_dim) and E.prove_equal(s.shape[0] * tile, n_dim)
                        and E.prove_equal(q.shape[2], tile) and E.prove_equal(s.shape[2], tile)):
                    return "row-tiled weight rows"
            elif not GroupQuantDecoder.supported(q.dtype, bits, gs, simd.lanes):
                return f"quantized format {q.dtype} bits={bits} group_size={gs}"
            elif not (E.prove_equal(q.shape[0], n_dim) and E.prove_equal(s.shape[0], n_dim)):
                return "quantized weight rows"
            per_word = QUANT_STORAGE_BITS[q.dtype] // bits
            groups = -(-kk.value // gs)
            if not (E.prove_equal(s.shape[1], groups)
                    and E.prove_equal(q.shape[1], groups * gs // per_word)):
                return "quantized weight shape"
            w.bits, w.group_size, w.zero_point = bits, gs, zp
            w.storage, w.scale_dtype, w.reads = q.dtype, s.dtype, {id(q), id(s)}
        else:
            return f"weight format {w.format!r}"
    if len({(w.format, w.row_tile > 0) for w in weights}) > 1 and any(w.row_tile for w in weights):
        return "row-tiled and other weights in one kernel"
    if len({(w.bits, w.zero_point, w.group_size, w.activation)
            for w in weights if w.format == "group" and w.row_tile}) > 1:
        return "row-tiled weights with different bits, zero points, group sizes or activations in one kernel"
    for blk, w in zip(acc_blocks, weights):
        abuf = blk.writes[0].buffer
        reads = {id(ld.buffer) for ld in _stmt_loads(blk.body)} - {id(abuf)}
        if reads != {id(x)} | w.reads:
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
        if len(spatial) != out.ndim or not _same_dims(acc_shape, out.shape):
            return "output block iterators"
        return LinearPlan(spec.x, spec.out, weights, acc_vars, spatial[:-1], spatial[-1],
                          acc_vars[0], params, acc_shape=acc_shape)
    store = ob.body
    if (not isinstance(store, BufferStore) or store.buffer is not out or ob.init is not None
            or len(ivars) != out.ndim or any(iv.kind != "S" for iv in ob.iter_vars)
            or not all(i is v for i, v in zip(store.indices, ivars))):
        return "output block is not out[i, ..., n] = f(...)"
    param_ids = {id(p) for p in params} - {id(out)}
    bad: list[str] = []
    # the accumulators' element of output element ivars: acc[ivars[perm[0]], ..., ivars[perm[-1]]]
    # (perm the identity, or the permutation of a transposed store)
    perms: set = set()

    def same_element(i: PrimExpr, v: Var, dim: PrimExpr) -> bool:
        # a broadcast reads a dim of extent 1 at 0 (topi's numpy-style broadcasting)
        if i is v:
            return True
        d = E.simplify(dim)
        return isinstance(d, E.IntImm) and d.value == 1 and isinstance(i, E.IntImm) and i.value == 0

    def acc_perm(idx) -> tuple | None:
        if len(idx) != len(ivars):
            return None
        if all(same_element(i, v, d) for i, v, d in zip(idx, ivars, out.shape)):
            return tuple(range(len(ivars)))
        pos = [next((k for k, v in enumerate(ivars) if i is v), None) for i in idx]
        # a dim of extent 1 may be read at 0: it pairs with an unused output dim of extent 1
        free = [k for k in range(len(ivars)) if k not in pos and same_element(E.IntImm(0, "int64"), ivars[k],
                                                                                 out.shape[k])]
        for d, i in enumerate(idx):
            if pos[d] is None and free and same_element(i, None, acc_shape[d]):
                pos[d] = free.pop(0)
        if None in pos or sorted(pos) != list(range(len(ivars))):
            return None
        return tuple(pos)

    def sub(ld: BufferLoad) -> PrimExpr:
        for buf, var in zip(acc_bufs, acc_vars):
            if ld.buffer is buf:
                perm = acc_perm(ld.indices)
                if perm is None:
                    bad.append(f"{buf.name} read at another element")
                else:
                    perms.add(perm)
                return var
        if id(ld.buffer) not in param_ids:
            bad.append(f"reads intermediate {ld.buffer.name}")
        elif any(tir.buffer_loads(i) for i in ld.indices):
            bad.append("data-dependent index")
        return ld

    value = _map_loads(store.value, sub)
    if bad:
        return "epilogue " + bad[0]
    if len(perms) > 1:
        return "epilogue reads the accumulators transposed in different ways"
    perm = perms.pop() if perms else tuple(range(len(ivars)))
    if not all(E.prove_equal(acc_shape[d], out.shape[p]) for d, p in enumerate(perm)):
        return "output shape is not the accumulators' (or their transpose)"
    allowed = set(ivars)
    if any(v not in allowed and v not in func.sym_vars for v in E.free_vars(value)
           if not any(v is a for a in acc_vars)):
        return "epilogue uses unknown variables"
    lead = [ivars[p] for p in perm]
    return LinearPlan(spec.x, spec.out, weights, acc_vars, lead[:-1], lead[-1], value, params,
                      acc_shape=acc_shape, transposed=perm != tuple(range(len(ivars))), out_vars=ivars)
