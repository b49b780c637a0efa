"""Attention as one kernel: ``out = softmax(scale * q k^T + bias, causally masked) v`` per
(batch, head, block of query rows), without the score matrix.

A PrimFunc of :func:`builder.te.topi.attention` carries an
:class:`~builder.ir.kernel.AttentionKernelSpec` (put on it when ``nn.attention`` is legalized,
:func:`builder.ops.nn.attention_kernel_spec`); :func:`plan_attention` (:mod:`.plan`) checks it
and :func:`emit_attention` (:mod:`.emitter`) writes the code. Shapes: ``q`` (B, Sq, H, D), ``k``
(B, Sk, Hk, D), ``v`` (B, Sk, Hk, Dv), ``bias`` broadcastable to (B, H, Sq, Sk), ``out`` (B, Sq,
H, Dv); B, Sq, Sk may be symbolic, H, Hk, D, Dv are static (any value: vector tails are scalar
loops). float32 / float16 / bfloat16 tensors, float32 math (16-bit values are widened in
registers as the linear kernels do, :meth:`~builder.codegen.kernels.simd.KFunc.widen`); float64
stays on the reference loops.

Schedule (FlashAttention-2, Dao 2023, on CPU; the online softmax of Milakov & Gimelshein 2018):

* a *work unit* is (batch b, kv head, block of ``rows`` = 64 rows), a row being a (query i,
  head h) pair ordered ``i * group + g`` so that the ``group = H / Hk`` query heads of a kv head
  share every key and value they load (grouped-query attention; decode with Sq = 1 fills a
  block with the group's heads). Units are split over ``mb_parallel_for`` tasks (8 per thread)
  when the work is large enough. Every unit packs the key blocks it visits, so more rows per
  unit pack them fewer times (Intel Xeon, 2 threads, 8 -> 32 rows: TinyLlama-shaped prefill of
  128 tokens 896 -> 691 us, Llama D = 128 1828 -> 1554, MiniLM 8 x 41 421 -> 342, 1 x 12 22.7
  -> 19.9; decode unchanged; 32 -> 64 rows once the loops took 4 rows per pass: Whisper-shaped
  16.3-17.1 -> 15.3-15.4 ms, TinyLlama 478-501 -> 442-454 us);
* per unit: the rows' queries, times ``scale``, are copied to float32 ``Qs``; the keys are
  visited in blocks of ``KB = 4 * lanes`` up to the last key any row may see (causal masks end
  the loop early), or of one vector when that is at most ``lanes`` keys (MiniLM's 12-token
  sentences, the first rows of a causal prefill: 16 lanes, 12 heads x 12 tokens 37 -> 22 us on
  an Intel Xeon; 2-4 vectors per block stayed faster from Sk = 41 on). Each block is packed
  transposed into ``Kt[D][KB]`` (float32; L x L blocks transposed in registers), so that the scores
  of ``pass_rows`` rows (4 with 32 registers, 2 with 16) are ``4 x 4`` vector accumulators of
  broadcast ``Qs[r][d]`` times ``Kt[d][:]`` (no horizontal sums; 2 rows per pass left the FMAs one
  chain each of latency: Whisper-shaped 18.5 -> 15.9 ms, Llama D = 128 1226 -> 1136 us);
* scores get the bias (vector loads along keys, a broadcast for a broadcast key dim; the
  block's last vector reads only keys < Sk) and the mask (``-inf`` past the row's causal limit
  and past the block); the running max ``m`` (``a > b ? a : b``, one ``vmaxps``: ``llvm.maxnum``
  and its reduction, scalarized for NaN semantics, took 16 extracts and compares per row and
  block: Whisper-shaped 22.2 -> 18.5 ms, Llama D = 128 prefill 1578 -> 1226 us; the rows of a pass
  reduced together, two rows' vectors halving into one, and their ``m``, ``l``, ``alpha`` as one
  vector: Whisper-shaped 13.4 -> 11.9 ms), ``alpha = exp(m_old - m_new)``, ``P = exp(s -
  m_new)`` (:func:`~builder.codegen.fastmath.exp_f32`: Cody-Waite reduction and Cephes'
  polynomial, within 2 ulp of the correctly rounded value for normal results, results below
  2**-126 flushed to 0; its arguments are never positive, so no upper clamp and ``2**n`` in one
  multiply: Whisper-shaped 14.5-15.4 -> 14.1-14.8 ms, TinyLlama prefill 459-496 -> 440-473 us,
  interleaved in one process) and the running sum ``l = alpha l + sum P`` are updated per row;
* the value product ``O = alpha O + P V`` runs over head_dim in passes of 4 vectors, ``pass_rows``
  rows at a time (16 accumulators), each value vector loaded once per pass;
* finally ``out = O / l``, 0 where ``l`` is 0 (every key masked, or Sk = 0), as the reference
  (PyTorch >= 2.5's ``_safe_softmax``).

The variable-length form (:func:`builder.te.topi.attention_var_len`, a spec with ``seqstart``: sequences
packed one after another, FlashAttention-2's ``cu_seqlens``) runs the same units with the token rows of
batch ``b`` starting at ``seqstart[b]`` and ``Sq = Sk`` its length; the number of units is that of the
longest sequence, and a unit past its sequence's rows does nothing. ``seqstart`` is checked before any
unit runs (0 first, never decreasing, the token count last; else the seqstart error). A padded batch
packed this way attends over its real tokens only: MiniLM-L6 on 8 sentences of 8-41 tokens, 5,066 of the
13,448 query-key pairs of the batch padded to 41.

The paged form (:func:`builder.te.topi.paged_attention`, a spec with ``block_table`` and ``lengths``: ``k`` / ``v``
are one layer's pools (N, BS, Hk, D) of a paged KV cache, vLLM's PagedAttention) runs the BSNH units with row
``b``'s ``Sk = lengths[b]`` and its queries the last ``Sq`` of its keys (causal ``BottomRight`` per row); the K
packing and the value product address key ``j`` as slot ``j % BS`` of block ``block_table[b, j // BS]``, so the
keys are read in place, never gathered into a copy. Before any unit runs every length is checked to lie in
``[Sq, M * BS]`` (and within a bias's key dim) and every block id of a row's first ``ceil(lengths[b] / BS)``
entries in ``[0, N)``; a bias's key column is the key's position.

A sliding window of ``W`` keys (the spec's ``window``; with a causal mask) starts each unit's key loop at
its first row's ``limit - W + 1`` (rows ascend in ``i``), so a decode step over a cache of ``Sk`` keys visits
``W`` of them, not ``Sk``; keys of a block before a row's own window start are masked with the causal limit.
A logit soft-cap ``c`` (``softcap``, Gemma 2) turns each score vector into ``c * tanh(s / c)``
(:func:`~builder.codegen.fastmath.tanh_f32`) before the bias and the masks.

The emulated vector widths (``MB_SIMD_SHAPE=avx512 / avx2 / sse``) generate the 16 / 8 / 4-lane
code on any x86 host; the scalar target (``MB_SIMD=scalar``) keeps the reference loops.
"""
from .emitter import AttentionEmitter, emit_attention
from .plan import ATTENTION_TUNING, STAGES, AttentionPlan, plan_attention

__all__ = ["AttentionPlan", "plan_attention", "emit_attention", "AttentionEmitter", "ATTENTION_TUNING", "STAGES"]
