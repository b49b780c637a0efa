"""Float weights in row tiles (``DenseWeight.row_tile``; :meth:`GemvDenseTiles._tiles_dense`,
:meth:`GemvDenseTiles._tile_fn_dense`; :class:`~builder.transform.TileWeights` gives a model's float
Linear weights this layout, ``(out / 16, in, 16)``): a column of 16 rows is one load (widened from
float16 / bfloat16), multiplied with x's value broadcast for each input row of a block (12 rows
with 32 registers, 6 with 16: :meth:`GemvDenseTiles._dense_tile_shape`), two tiles per helper call
with 32 registers, so that one broadcast serves two FMAs (with one tile, 13 loads per 12 FMAs: the
load ports, not the FMAs, bounded it). No horizontal sums and no per-call packing, where the
row-major GEMV ends every dot product with one and the GEMM packed the weights on every call.
MiniLM's matmuls at 12 tokens (weights in cache, Intel Xeon): 384 -> 1536 101 -> 42 us, 1536 ->
384 85 -> 43, 384 -> 384 23 -> 14; the model at batch 1 x 12 2.81 -> 2.08 ms. Above
``tile_max_rows_dense`` rows the float GEMM runs on panels copied from the tiles
(:meth:`~.tiles.GemvTiles._pack_tiles_fn`: a panel row is a row of consecutive tiles).

A mixin of :class:`~.emitter.LinearEmitter` beside :class:`~.tiles.GemvTiles` (whose row blocks
and helper registry it shares)."""
from __future__ import annotations

from llvmlite import ir

from ....ir.op.quantize import ROW_TILE
from ...llvm_emit import F32, I8, PTR, elem_bytes, mem_type
from ..simd import KFunc, vec
from .plan import TUNING

__all__ = ["GemvDenseTiles"]


class GemvDenseTiles:
    """Float weights in tiles of 16 rows (see the module docstring): :meth:`_tiles_dense` drives a
    helper per weight, block size and tile count (:meth:`_tile_fn_dense`)."""

    def _dense_tile_shape(self) -> tuple[int, int, int]:
        """``(NL, MB, P)`` of the float weights in row tiles: float32 lanes per vector, input rows
        per block (``tile_rows_x_dense``; 0: 12 with 32 registers, else as many as the register file
        holds beside a column's weights and x's broadcast: 6 with 16 registers of 8 lanes, 2 of 4)
        and tiles per helper call (2 with 32 registers: each broadcast of x serves two vectors of
        weights, where with one the broadcasts and the weight load outnumbered the FMAs on the two
        load ports)."""
        regs = self.simd.registers
        nl = min(16, self.lanes)
        # 16 registers: the accumulators of a block (V = 16 / NL per row) beside the V weight vectors of a
        # column and x's broadcast: 6 rows of two 8-lane vectors, 2 of four 4-lane ones. With 8 rows (16
        # accumulators) LLVM spilled them in the column loop: AMD Zen 3, 2 threads, MiniLM 1 x 12 3.9 ->
        # 2.8 ms, 8 x 41 50 -> 25 ms with 6 (5: 24.9, 7: 54.7, 3: 29.3), LlamaMLP float32 batch 8 33.8 ->
        # 23.8 ms, batch 16 67.1 -> 33.4 (an AVX-512 Xeon capped to AVX2 had timed 8 rows faster)
        V = ROW_TILE // nl
        mb = TUNING["tile_rows_x_dense"] or (12 if regs >= 32 else max(1, (regs - V - 1) // V))
        return nl, max(1, mb), (2 if regs >= 32 else 1)

    def _dense_tile_max_rows(self) -> int:
        """The most input rows the float tiles take (the float GEMM above): ``tile_max_rows_dense``,
        or more while x is at most ``tile_dense_x_bytes`` (each pair of tiles reads all of x: from
        L2 it beats the GEMM's packed panels, from L3 not). Intel Xeon, 2 threads, against the GEMM
        on panels copied from the tiles: 2048 x 2048 at 48 / 64 / 128 rows (x 0.4 / 0.5 / 1 MB)
        1395 -> 1080, 1732 -> 1527, 3110 -> 3010 us (with the AVX2 kernels 10-14% faster too);
        384 x 1536 at 328 rows (x 2 MB) 1058 -> 1285 us, 384 x 1152 at 1500 (6.9 MB) 3983 -> 4327."""
        rows = TUNING["tile_max_rows_dense"]
        if self.K_static:
            rows = max(rows, TUNING["tile_dense_x_bytes"] // (4 * self.K_static))
        return rows

    def _tiles_dense(self, kf: KFunc, st, u0, u1) -> None:
        """Tiles ``u0 .. u1`` of 16 rows of float weights (``DenseWeight.row_tile``): per ``P``
        tiles and block of ``MB`` input rows one helper call per weight (:meth:`_tile_fn_dense`; a
        last single tile by itself), then the epilogue of each input row."""
        T = ROW_TILE
        NL, MB, P = self._dense_tile_shape()
        res = kf.alloca(F32, self.nw * MB * P * T, name="res", align=64)
        resw = [kf.gep(res, kf.i64(w * MB * P * T), F32) if w else res for w in range(self.nw)]
        wargs = [self._weight_args(st, w) for w in range(self.nw)]
        sizes = sorted(set(range(1, min(4, MB) + 1)) | {min(8, MB), MB})
        fns = {(w, t, p): self._tile_fn_dense(w, t, p) for w in range(self.nw) for t in sizes
               for p in sorted({1, P})}
        ebytes = [elem_bytes(d.dtype) for d in self.plan.weights]

        def group(tile, p: int) -> None:
            qt = [kf.gep(wargs[w][0], kf.mul(tile, kf.mul(wargs[w][2], ebytes[w] * T)), I8) for w in range(self.nw)]

            def run(m, part: int, r0: int) -> None:
                for w in range(self.nw):
                    kf.b.call(fns[(w, part, p)], [qt[w], kf.gep(st.xf, kf.mul(m, st.K), F32),
                                                  kf.gep(resw[w], kf.i64(r0 * P * T), F32)])

            self._row_blocks(kf, st, MB, sizes, run, kf.mul(tile, T), p * T, P * T, resw)

        tiles = kf.sdiv(st.N, T)
        with kf.loop(u0, u1, 1, "unit") as u:   # a unit: P tiles, the last one perhaps fewer
            tile = kf.mul(u, P)
            if P == 1:
                group(tile, 1)
            else:
                kf.if_else(kf.lt(kf.add(tile, P - 1), tiles), lambda: group(tile, P),
                           lambda: group(tile, 1), "pair")

    def _tile_fn_dense(self, w: int, t: int, p: int) -> ir.Function:
        """``void tile(ptr q, ptr xf, ptr res)``: ``res[i * P * 16 + r] = sum_k x[i, k]
        W[r, k]`` for the ``16 p`` rows of ``p`` consecutive tiles of float weights at ``q`` and
        ``t`` input rows of ``xf`` (float32, rows of ``K``; ``P``: :meth:`_dense_tile_shape`).
        Per column the tiles' rows are ``16 p / NL`` vector loads (widened from float16 /
        bfloat16), each multiplied with x's value broadcast for every input row: FMAs into
        ``tile_chains_dense`` chains in all (column ``k`` into chain ``k % C``) -- a GEMM
        micro-kernel whose panel is the tiles themselves, with no horizontal sums. Shared by every
        kernel of the module with this weight dtype and ``K``."""
        d = self.plan.weights[w]
        NL, _, P = self._dense_tile_shape()
        K = self.K_static
        T = ROW_TILE
        key = f"mb.tile.{self._fmt_key(w)}.k{K}.v{NL}.t{t}.p{p}x{P}"
        fn, kf = self._new_helper(key, [PTR, PTR, PTR])
        if kf is None:
            return fn
        q, xf, res = fn.args
        b = kf.b
        f32v, wt = vec(F32, NL), vec(mem_type(d.dtype), NL)
        eb = elem_bytes(d.dtype)
        V = p * T // NL                          # weight vectors per column
        C = max(1, TUNING["tile_chains_dense"] // (t * V))
        U = C if K >= C else 1                   # columns per loop iteration
        pf = TUNING["prefetch"]
        xrows = [kf.gep(xf, kf.i64(i * K), F32) if i else xf for i in range(t)]
        slots = [[[kf.alloca(f32v, name="dacc") for _ in range(C)] for _ in range(V)] for _ in range(t)]
        for row in slots:
            for vs in row:
                for a in vs:
                    b.store(kf.fzero(NL), a)
        # vector v: tile v // (16 / NL) of the call, lanes NL * (v % (16 / NL)) on
        offs = [(v // (T // NL)) * K * T * eb + (v % (T // NL)) * NL * eb for v in range(V)]

        def columns(k0, count: int) -> None:
            accs = [[[b.load(a, typ=f32v) for a in vs] for vs in row] for row in slots]
            for j in range(count):
                k = kf.add(k0, j) if j else k0
                col = kf.gep(q, kf.mul(k, eb * T), I8)
                wv = []
                for v in range(V):
                    wp = kf.gep(col, kf.i64(offs[v]), I8) if offs[v] else col
                    if pf and (offs[v] % 64 == 0) and (j * eb * T) % 64 == 0:
                        kf.prefetch(kf.gep(wp, kf.i64(pf), I8), TUNING["prefetch_locality"])
                    wv.append(kf.widen(kf.load(wt, wp, None, align=eb), d.dtype))
                for i in range(t):
                    xv = kf.splat(kf.load(F32, kf.gep(xrows[i], k, F32), None, align=4), NL)
                    for v in range(V):
                        accs[i][v][j % C] = kf.fma(wv[v], xv, accs[i][v][j % C])
            for row, vals in zip(slots, accs):
                for vs, vv in zip(row, vals):
                    for a, val in zip(vs, vv):
                        b.store(val, a)

        whole = K - K % U
        with kf.loop(0, whole, U, "dk") as k0:
            columns(k0, U)
        for k in range(whole, K):
            columns(kf.i64(k), 1)
        for i in range(t):
            for v in range(V):
                vals = [b.load(a, typ=f32v) for a in slots[i][v]]
                while len(vals) > 1:
                    vals = [b.fadd(vals[c], vals[c + 1], flags=KFunc.FM) if c + 1 < len(vals) else vals[c]
                            for c in range(0, len(vals), 2)]
                kf.store(vals[0], res, kf.i64(i * P * T + v * NL), align=4)
        b.ret_void()
        kf.finish()
        return fn
