"""The bfloat16 dot-product family (plan variant ``bf16dot``: bfloat16 ``x`` and weights, even static
``K``, AVX512-BF16): ``vdpbf16ps`` GEMV rows and GEMM micro-kernels on pairs of columns.

A mixin of :class:`~.emitter.LinearEmitter`: its methods use the emitter's state (plan, tile sizes,
shared-helper cache)."""
from __future__ import annotations


from llvmlite import ir

from ...llvm_emit import F32, I16, I32
from ..decode import scalar_to_f32
from ..simd import vec

__all__ = ["Bf16Dot"]


class Bf16Dot:
    """The bfloat16 dot-product family (plan variant ``bf16dot``: bfloat16 ``x`` and weights, even static"""

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
