"""Matmul kernels: ``out[..., n] = epilogue(sum_k x[..., k] * W_w[n, k] for each weight w)``.

A PrimFunc opts in with the attribute ``attrs["mb.kernel"]``, a
:class:`~builder.ir.kernel.LinearKernelSpec` (set by :func:`builder.te.topi.linear_kernel`, which
kernel selection uses): the parameter indices of ``x`` and ``out``, one or two weights
(:class:`~builder.ir.kernel.DenseWeight` / :class:`~builder.ir.kernel.GroupWeight`) and the name of
each weight's reduction block. The PrimFunc body stays the reference semantics: one float32
reduction block per weight and one elementwise block writing ``out`` from the accumulators and other
params (bias, residual, ...). :func:`plan_linear` (:mod:`.plan`) checks that structure and returns a
:class:`LinearPlan`, or the reason it does not apply -- then the generic loop code runs.

Files: :mod:`.plan` (the planner and :data:`TUNING`), :mod:`.emitter` (the driver,
:func:`emit_linear`), and one file per kernel family, each a mixin of the emitter: :mod:`.gemv`
(float / packed-weight GEMV), :mod:`.int8_gemv`, :mod:`.tiles` (row-tiled 4- and 8-bit weights),
:mod:`.bf16` (``vdpbf16ps`` GEMV and GEMM), :mod:`.gemm` (float GEMM), :mod:`.int8_gemm`, :mod:`.amx`
(the GEMM on AMX tiles);
:mod:`.int8_rows` (the int8 layout of x).

Generated code (:func:`emit_linear`), for the host's widest vectors (:class:`SimdInfo`):

* ``x`` (``M = prod(leading dims)`` rows of ``K``) is used in place when float32, else widened
  once into a float32 scratch;
* **GEMV** (``M <= gemv_max_rows``: 24 with float weights, 4 with packed ones, 8 with 32 registers): tiles of
  ``R`` weight rows (4, packed ones too); each tile streams its rows once per group of ``MT`` input
  rows (``MT`` and the unroll ``U`` chosen so that the accumulators fit the register file),
  decoding weights in registers; vector accumulators are summed horizontally, the scalar tail
  ``K % step`` is added, then the epilogue writes the tile. Packed 4 / 8-bit weights take the
  fast path of :meth:`GroupQuantDecoder.fast_chunk`: ``x`` is permuted once per call to the
  decoder's lane order, the scale is applied once per group (into ``gemv_chains_q`` = 4
  accumulators taken in turn: one chain's FMA latency per group bounded the loop, LlamaMLP
  q4f16_1 batch 8 22.0 -> 19.7 ms, AVX2 kernels batch 1 4.24 -> 3.95 on an Intel Xeon) and the
  zero point through per-group sums of ``x``. Every GEMV prefetches its weight rows 4 KiB ahead into L2
  (``prefetch`` / ``prefetch_q``, ``prefetch_locality`` 2 = ``prefetcht1``): a core that spends a
  dozen instructions per 64-byte line keeps too few misses in flight through L1 (a line
  prefetched into L1 holds one of its few miss buffers), and the stream ran at half the
  bandwidth a plain sum gets from one core (Zen 4: int8 GEMV 1 thread 16.5 -> 20.7 GB/s,
  LlamaMLP q4f16_1+a8 batch 1 2.60 -> 2.23 ms, q8f32_1 6.9 -> 5.5 ms; 1 KiB into L1 gained nothing);
* **int8-activation GEMV** for 4-bit weights whose graph says ``activation_quantization=int8``
  (``M <= gemv_max_rows_qi`` = 32, hosts with AVX2; see :class:`schemas.GroupQuantization`): x
  is quantized once per call to int8 per group (:class:`Int8Rows`), then per 64-column step
  (128 columns in 512-bit vectors with the 16-lane shape) and weight row one 32-byte (64-byte)
  load and, per input row (2 at a time, 4 with 32 registers), two ``vpmaddubsw`` (nibbles x
  int8) and one ``vpmaddwd`` give eight (sixteen) int32 partial dots that are converted and
  accumulated with ``scale * d`` per lane, the weights' zero point once per row as a short dot
  of the scales with the per-group ``d * sum q`` -- about half the instructions per weight of
  the float path (:meth:`~.emitter.LinearEmitter._gemv_micro_i8`); from ``M >
  gemv_max_rows_qig`` (8) the **int8 GEMM**: x quantized the same way into a
  plain int8 copy, each panel of ``NRI`` (16) weight rows unpacked once per block of ``KCI`` columns
  into bytes in k-quad order (32 bytes = 4 columns of 8 rows; the rows' next bytes prefetched,
  ``prefetch_i8pack``; the scales of a full panel gathered into one vector per group), and a 3-row micro-kernel (6 with 32 registers) that
  per 4 columns broadcasts 4 int8 values of a row and runs one ``vpmaddubsw`` per 8 weight
  rows, adds those in int16 over 32 columns, widens with ``vpmaddwd`` and applies ``scale * d``
  per group (:meth:`~.emitter.LinearEmitter._i8_micro_fn`); the columns the GEMV keeps float are added
  in float (:meth:`~.emitter.LinearEmitter._i8_tail_fn`), so every batch size computes the same. On
  CPUs with VNNI (plan variant ``vnni``) one ``vpdpbusd`` replaces each ``vpmaddubsw`` /
  ``vpmaddwd`` pair: the GEMV's two nibble halves go into one int32 sum, the GEMM's micro-kernel accumulates int32 directly (no int16
  partial sums) -- the same exact integer sums;
* **row-tiled kernels** (plan variant ``tiles``) where the weights are stored in tiles of 16
  rows (``row_tile=16``: what the quantization gives 4- and 8-bit weights in uint32 words whose rows
  fill whole tiles, :class:`~builder.quant.config.QuantLayout`): one vector holds 8 (4-bit) or 4
  (8-bit) columns of 16 rows, one row per lane. With int8 activations for every ``M``: ``vpdpbusd`` (or
  ``vpmaddubsw``) against 4 int8 values of x broadcast, the integer sums leave once per group;
  with float activations up to ``tile_max_rows`` (32 rows with 32 registers, 16 with 16): per column one shift, mask and
  conversion for 16 rows and an FMA per input row, and above it the float GEMM on panels packed
  from the tiles; 4- and 8-bit tiles with float16 / bfloat16 x (plan variant ``x16``) take x in int16 per
  group instead, a ``vpmaddwd`` (``vpdpwssd``) per 8 (4-bit) or 4 (8-bit) columns of 16 rows and input row,
  for every ``M``. The weights are decoded once per block of 8 input rows (4 with 16 registers) --
  see :mod:`.tiles`. LlamaMLP on an Intel Xeon with AMX (2 cores), against the row-major kernels
  in the same session: q4f16_1+a8 batch 1 2.86 -> 2.69 ms, batch 8 9.49 -> 4.69, batch 128 76
  -> 56; q4f16_1 batch 1 5.39 -> 4.78, batch 8 27.2 -> 10.5. Float weights in tiles of 16 rows
  (``DenseWeight.row_tile``, the layout :class:`~builder.transform.TileWeights` gives a model's
  float weights): a column of a tile is one load, multiplied with x broadcast per input row, two
  tiles per broadcast -- a GEMM micro-kernel whose panel is the tiles themselves -- up to
  ``tile_max_rows_dense`` (32) rows, the float GEMM on panels copied from the tiles above;
* **GEMM** (larger ``M``): BLIS-style. For each panel of ``NR`` weight rows (2 vectors, 4 with
  32 registers) and each block of ``KC`` columns, the decoder unpacks the panel transposed into
  a float32 buffer ``Bp[k][NR]`` (in-register VLxVL transposes; ``kc_bytes``: 16 KiB, 64 KiB
  with 32 registers, where 32 KiB had each weight row read in runs of 512 bytes of float32 or
  64 of 4-bit weights per block -- Intel Xeon with AMX, 2 cores: LlamaMLP batch 128 float32
  129 -> 108 ms, q4f16_1 115 -> 99, TinyLlama float32 prefill 934 -> 843 ms; 128 KiB and more
  lost again); an ``MR x NR
  micro-kernel (``MR = 6``: 12 / 24 accumulators) broadcasts ``x[m, k]`` and runs FMAs against
  ``Bp``, accumulating into a per-panel ``M x NR`` buffer; in the last block (of the last weight)
  each row block's epilogue runs right after its micro-kernel, its accumulators still in L1 (a pass
  over the buffer after the panel read them back from L2 or L3: Xeon, 2 threads, 3000 x 240 x 384
  1880 -> 1586 us, 328 x 384 x 384 281 -> 247, 1500 x 384 x 1536 5872 -> 5424). Remainder rows
  (``M % MR``) use smaller micro-kernels, remainder columns a zero-padded panel. While a block's
  micro-kernels run, each issues L2 prefetches for part of the next block's weight rows
  (``prefetch_gemm``), so the unpacking does not wait on memory (measured: the unpacking alone
  read float32 weights at single-core DRAM speed, 9% of a batch-128 layer's time; with the
  prefetch the layer runs 2-5% faster). Float weights with ``x`` larger than ``gemm_chunk_bytes``
  (1 MiB) run in **row chunks** (BLIS's loop order): a task takes one chunk of at least
  ``gemm_chunk_min_rows`` (128) rows through every panel, packing its own panels, so its x stays in
  the core's L2 where tasks of whole panels read all of x from L3 for each panel (Xeon, 2 threads:
  Whisper-tiny encoder 144 -> 133 ms, its stem's 3000 x 240 -> 384 1745 -> 1611 us; with the AVX2
  kernels 3321 -> 2640 us); 4- and 8-bit weights stay whole (a chunk would decode them again);
* **bfloat16 dot products** (plan variant ``bf16dot``: bfloat16 ``x`` and weights, even static
  ``K``, a CPU with AVX512-BF16): the GEMV reads ``x`` and each weight row as vectors of 32-bit
  words (two columns each) and runs one ``vdpbf16ps`` per (weight row, input row) and
  ``2 * lanes`` columns (:meth:`~.emitter.LinearEmitter._gemv_micro_bf16`); the GEMM packs panels of
  those words without widening (``KC`` words = ``2 KC`` columns per block) and its micro-kernel
  broadcasts one word of ``x`` per row and column pair (:meth:`~.emitter.LinearEmitter._micro_bf16_fn`):
  two products per lane and instruction, where the float32 path does one FMA per product after
  widening. ``x`` is read as it is (no float32 copy). That GEMM only where the core issues
  ``vdpbf16ps`` at least at its FMAs' rate (:attr:`SimdInfo.bf16dot_gemm`: AMD's Zen 4 / 5);
  elsewhere (Intel) the variant is ``bf16gemv``: the GEMV as above, the GEMM on float32 (``x``
  widened once per call, only when the GEMM runs) -- LlamaMLP bfloat16 batch 128 on a Xeon with
  AMX, 2 cores: 162 -> 101 ms;
* **AMX tiles** (plan variants ``amx`` / ``amx3``, :mod:`.amx`; a CPU with AMX-BF16 whose OS grants the
  tile state): the GEMM from ``amx_min_rows`` (32) rows multiplies bfloat16 tiles into float32
  accumulator tiles with ``tdpbf16ps`` -- bfloat16 x and weights at every precision (exact products),
  float32 ones as the target's ``matmul_precision`` allows (``high``: the bf16x3 split, ``medium``:
  bfloat16 roundings); the weights go through the float GEMM's panel packing, so every weight format
  takes it. Xeon (2 cores), 328 x 384 -> 1536 + GELU: 1353 us float32, 930 high, 531 medium;
  MiniLM-L6 batch 8 x 41: 27 -> 21 (high) -> 12 ms (medium);
* work is split over weight-row tiles / panels (or the GEMM's row chunks) with ``mb_parallel_for``
  (see :mod:`runtime.threadpool`) when ``M * N * K >= parallel_min_macs``, in ``tasks_per_thread``
  (16) tasks per thread for dynamic balance;
* helpers that do not depend on the kernel (micro-kernels, row-dot and panel-pack functions
  per weight format) are shared by all kernels of a module and kept out of line, which keeps
  LLVM's work (and the build time) small.

Epilogues are the reference block's expression (the accumulators substituted), emitted in one
out-of-line function per kernel that writes a run of outputs in each row of a block of rows
(LLVM vectorizes each row's run; ``exp`` and ``erf`` are inlined as polynomials). :data:`TUNING` holds the tunables (``MB_TUNE`` overrides).
"""
from ....ir.kernel import KERNEL_ATTR
from .emitter import LinearEmitter, emit_linear
from .int8_rows import Int8Rows, int8_gemv_supported
from .plan import TUNING, LinearPlan, WeightPlan, plan_linear

__all__ = ["KERNEL_ATTR", "LinearPlan", "WeightPlan", "plan_linear", "emit_linear", "TUNING", "LinearEmitter", "Int8Rows",
           "int8_gemv_supported"]
