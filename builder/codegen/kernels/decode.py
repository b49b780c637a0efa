"""Weight decoders: read rows of an ``(N, K)`` weight as float32 values in registers.

A decoder turns one weight operand of a matmul kernel into float32 vectors along ``k`` (the
reduction dim), so that one GEMV / GEMM code generator serves every storage format:

* :class:`DenseDecoder` -- ``float32`` / ``float16`` / ``bfloat16`` ``w[n, k]``; 16-bit values
  are widened in registers (``vcvtph2ps`` with F16C, a shift for bfloat16);
* :class:`GroupQuantDecoder` -- MLC-LLM's group quantization (``R.group_dequantize``):
  ``q[n, k // per_word]`` holds ``per_word = storage_bits // bits`` values (value ``i`` of a word
  in bits ``[i * bits, (i + 1) * bits)``), ``scale[n, k // group_size]`` one scale per group,
  ``w[n, k] = (value - zero_point) * scale`` computed in float32 as
  ``fmuladd(value, scale, -zero_point * scale)``. Signed ``int8`` storage holds one signed
  8-bit value per element.

Interface used by :mod:`builder.codegen.kernels.linear`:

* ``row(kf, n)`` -> per-row state (base pointers) for row ``n`` (an i64 value);
* ``vectors(kf, rows, k_lo, k_hi, unroll, body)`` emits a loop over ``[k_lo, k_hi)`` in chunks
  of ``lanes`` and calls ``body(k, u, [vector per row])`` (``u`` in ``[0, unroll)`` picks an
  accumulator set); ``k_lo`` / ``k_hi`` must be multiples of ``vec_step``;
* ``vec_limit(kf, K)`` -> the end of the vector part of a row (a multiple of ``vec_step``);
  ``scalar(kf, row, k)`` reads one element for the remaining ``[vec_limit, K)``;
* ``bytes_per_weight`` -- storage read per weight element (for reports).
"""
from __future__ import annotations

from llvmlite import ir

from ...ir.op.quantize import QUANT_STORAGE_BITS
from ..llvm_emit import F16, F32, I8, I16, I32
from .simd import KFunc, vec

__all__ = ["DenseDecoder", "GroupQuantDecoder"]

#: Storage dtypes of quantized words: bits per word.

#: Largest group whose inner loop is unrolled in Python (group_size / lanes chunks).
_UNROLL_GROUP = 256


def scalar_to_f32(kf: KFunc, v: ir.Value, dtype: str) -> ir.Value:
    """A scalar of ``dtype`` (``float32``; ``float16`` as ``half``; ``bfloat16`` as its ``i16``
    bits) widened to float32 (exact). Raises ValueError for another dtype."""
    b = kf.b
    if dtype == "float32":
        return v
    if dtype == "float16":
        return b.fpext(v, F32)
    if dtype == "bfloat16":
        return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)
    raise ValueError(f"unsupported weight dtype {dtype}")


def _mem_scalar_type(dtype: str) -> ir.Type:
    return {"float32": F32, "float16": F16, "bfloat16": I16}[dtype]


class DenseDecoder:
    """A float weight ``(N, K)`` (row length ``k_len`` elements)."""

    def __init__(self, ptr: ir.Value, dtype: str, k_len: ir.Value, lanes: int) -> None:
        if dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"dense weights must be float32/float16/bfloat16, got {dtype}")
        self.ptr = ptr
        self.dtype = dtype
        self.k_len = k_len
        self.lanes = lanes
        self.vec_step = lanes
        self.mt = _mem_scalar_type(dtype)
        self.esize = 4 if dtype == "float32" else 2

    @property
    def bytes_per_weight(self) -> float:
        """Bytes of storage read per weight element: 4.0 for float32, 2.0 for float16 / bfloat16."""
        return float(self.esize)

    def row(self, kf: KFunc, n: ir.Value):
        """The pointer to the start of row ``n`` (an i64 value) of the weight: ``ptr + n * k_len`` elements."""
        return kf.gep(self.ptr, kf.mul(n, self.k_len), self.mt)

    def vec_limit(self, kf: KFunc, k_total: ir.Value) -> ir.Value:
        """The end of the whole-vector part of a row of ``k_total`` elements: ``k_total - k_total % lanes``
        (an i64 value)."""
        return kf.sub(k_total, kf.b.srem(k_total, kf.i64(self.lanes)))

    def load_vec(self, kf: KFunc, row, k: ir.Value) -> ir.Value:
        """``lanes`` weights of ``row`` from column ``k`` as a float32 vector (float16 / bfloat16 widened
        exactly in registers)."""
        raw = kf.load(vec(self.mt, self.lanes), row, k, align=self.esize)
        return kf.widen(raw, self.dtype)

    def vectors(self, kf: KFunc, rows: list, k_lo, k_hi, unroll: int, body, prefetch: int = 0,
                locality: int = 3) -> None:
        """``body(k, u, [vector of each row at k])`` for ``k`` in ``[k_lo, k_hi)`` by ``lanes * unroll``
        (then single vectors to the last whole one); with ``prefetch`` (bytes), each step first
        prefetches that far ahead every 64-byte line of each row the step reads, with
        ``llvm.prefetch`` ``locality`` (3 = L1, 2 = L2)."""
        step = self.lanes * unroll
        span = kf.sub(k_hi, k_lo)
        main_end = kf.add(k_lo, kf.sub(span, kf.b.srem(span, kf.i64(step))))
        lines = max(1, step * self.esize // 64)
        with kf.loop(k_lo, main_end, step, "kv") as k:
            if prefetch:
                ahead = kf.add(k, prefetch // self.esize)
                for r in rows:
                    for j in range(lines):
                        kf.prefetch(kf.gep(r, kf.add(ahead, j * 64 // self.esize) if j else ahead, self.mt),
                                    locality)
            for u in range(unroll):
                kk = kf.add(k, u * self.lanes) if u else k
                body(kk, u, [self.load_vec(kf, r, kk) for r in rows])
        if unroll > 1:
            with kf.loop(main_end, k_hi, self.lanes, "kr") as k:
                body(k, 0, [self.load_vec(kf, r, k) for r in rows])

    def scalar(self, kf: KFunc, row, k: ir.Value) -> ir.Value:
        """The weight at column ``k`` of ``row`` as a float32 scalar (for the tail past :meth:`vec_limit`)."""
        return scalar_to_f32(kf, kf.load(self.mt, row, k, align=self.esize), self.dtype)

    def prefetch(self, kf: KFunc, row, k_lo, k_hi) -> None:
        """Prefetch (into L2) the cache lines holding columns ``[k_lo, k_hi)`` of ``row``."""
        _prefetch_span(kf, kf.gep(row, k_lo, self.mt), kf.mul(kf.sub(k_hi, k_lo), self.esize))


class GroupQuantDecoder:
    """Group-quantized rows: ``q`` (N, words) of ``storage``, ``scale`` (N, groups) of
    ``scale_dtype`` (see the module docstring). Needs ``group_size % lanes == 0`` and either
    ``lanes % per_word == 0`` or ``per_word % lanes == 0``."""

    def __init__(self, q: ir.Value, storage: str, scale: ir.Value, scale_dtype: str,
                 words: ir.Value, groups: ir.Value, bits: int, group_size: int, zero_point: int,
                 lanes: int) -> None:
        sbits = QUANT_STORAGE_BITS[storage]
        self.q, self.storage, self.scale, self.scale_dtype = q, storage, scale, scale_dtype
        self.words, self.groups = words, groups
        self.bits, self.group_size, self.zero_point = bits, group_size, zero_point
        self.per_word = sbits // bits
        self.signed = storage == "int8"
        self.wt = ir.IntType(sbits)
        self.st = _mem_scalar_type(scale_dtype)
        self.lanes = lanes
        self.blocked = group_size <= _UNROLL_GROUP
        self.vec_step = group_size if self.blocked else lanes
        if group_size % lanes or (lanes % self.per_word and self.per_word % lanes):
            raise ValueError("unsupported group / vector geometry")

    @staticmethod
    def supported(storage: str, bits: int, group_size: int, lanes: int) -> bool:
        """Whether this decoder handles the format with ``lanes``-wide vectors."""
        if storage not in QUANT_STORAGE_BITS or bits <= 0 or bits > 8:
            return False
        sbits = QUANT_STORAGE_BITS[storage]
        if sbits % bits or (storage == "int8" and bits != 8):
            return False
        per_word = sbits // bits
        if per_word & (per_word - 1):
            return False
        return group_size % lanes == 0 and (lanes % per_word == 0 or per_word % lanes == 0)

    @property
    def bytes_per_weight(self) -> float:
        """Bytes of storage read per weight element: ``bits / 8`` for the value plus its share of the group's
        scale (2 or 4 bytes over ``group_size`` elements)."""
        return self.bits / 8 + (2 if self.scale_dtype != "float32" else 4) / self.group_size

    def row(self, kf: KFunc, n: ir.Value):
        """The per-row state of row ``n`` (an i64 value): the pointers to its first packed word
        (``q + n * words``) and its first scale (``scale + n * groups``)."""
        return (kf.gep(self.q, kf.mul(n, self.words), self.wt),
                kf.gep(self.scale, kf.mul(n, self.groups), self.st))

    def vec_limit(self, kf: KFunc, k_total: ir.Value) -> ir.Value:
        """The end of the part of a row of ``k_total`` elements read in whole steps of ``vec_step`` (the group
        size when groups are unrolled, else ``lanes``): ``k_total - k_total % vec_step``."""
        return kf.sub(k_total, kf.b.srem(k_total, kf.i64(self.vec_step)))

    def _scale(self, kf: KFunc, row, g: ir.Value) -> tuple[ir.Value, ir.Value]:
        s = scalar_to_f32(kf, kf.load(self.st, row[1], g, align=4 if self.st == F32 else 2),
                           self.scale_dtype)
        zs = kf.b.fmul(s, ir.Constant(F32, float(-self.zero_point)))
        return kf.splat(s, self.lanes), kf.splat(zs, self.lanes)

    def _values(self, kf: KFunc, row, k: ir.Value) -> ir.Value:
        """The ``lanes`` stored values at ``k`` (a multiple of ``lanes``) as float32."""
        b = kf.b
        n = self.lanes
        f32v = vec(F32, n)
        i32v = vec(I32, n)
        if self.signed:
            raw = kf.load(vec(I8, n), row[0], k, align=1)
            return b.sitofp(raw, f32v)
        pw, bits = self.per_word, self.bits
        mask = ir.Constant(i32v, [(1 << bits) - 1] * n)
        if n >= pw:
            nw = n // pw
            widx = b.lshr(k, kf.i64(pw.bit_length() - 1)) if pw > 1 else k
            words = kf.load(vec(self.wt, nw), row[0], widx, align=self.wt.width // 8)
            if self.wt.width < 32:
                words = b.zext(words, vec(I32, nw))
            if pw == 1 and nw == n:
                rep = words
            else:
                rep = b.shuffle_vector(words, ir.Constant(words.type, ir.Undefined),
                                       ir.Constant(vec(I32, n), [j // pw for j in range(n)]))
            if pw > 1:
                rep = b.lshr(rep, ir.Constant(i32v, [(j % pw) * bits for j in range(n)]))
            if bits < 32:
                rep = b.and_(rep, mask)
            return b.uitofp(rep, f32v)
        # fewer lanes than values per word: one word, shifted by the position inside it
        widx = b.lshr(k, kf.i64(pw.bit_length() - 1))
        word = kf.load(self.wt, row[0], widx, align=self.wt.width // 8)
        if self.wt.width < 32:
            word = b.zext(word, I32)
        pos = b.trunc(b.and_(k, kf.i64(pw - 1)), I32)
        base = kf.splat(b.mul(pos, ir.Constant(I32, bits)), n)
        shifts = b.add(base, ir.Constant(i32v, [j * bits for j in range(n)]))
        rep = b.and_(b.lshr(kf.splat(word, n), shifts), mask)
        return b.uitofp(rep, f32v)

    def vectors(self, kf: KFunc, rows: list, k_lo, k_hi, unroll: int, body,
                compact: bool = False) -> None:
        """See the module docstring; ``compact`` emits a runtime loop over each group's
        chunks instead of unrolling them (smaller code, for the GEMM panel packing)."""
        gs, n = self.group_size, self.lanes
        if self.blocked and not compact:
            g_lo = kf.sdiv(k_lo, gs)
            g_hi = kf.sdiv(k_hi, gs)
            with kf.loop(g_lo, g_hi, 1, "g") as g:
                scales = [self._scale(kf, r, g) for r in rows]
                k0 = kf.mul(g, gs)
                for j in range(gs // n):
                    k = kf.add(k0, j * n) if j else k0
                    body(k, j % unroll, [kf.fma(self._values(kf, r, k), s, zs)
                                         for r, (s, zs) in zip(rows, scales)])
            return
        # large groups (per-channel): one scale load per group, a runtime inner loop
        g_lo = kf.sdiv(k_lo, gs)
        g_hi = kf.sdiv(kf.add(k_hi, gs - 1), gs)
        with kf.loop(g_lo, g_hi, 1, "g") as g:
            scales = [self._scale(kf, r, g) for r in rows]
            ks = kf.smax(kf.mul(g, gs), k_lo)
            ke = kf.smin(kf.add(kf.mul(g, gs), gs), k_hi)
            with kf.loop(ks, ke, n, "kq") as k:
                body(k, 0, [kf.fma(self._values(kf, r, k), s, zs)
                            for r, (s, zs) in zip(rows, scales)])

    # -- GEMV fast path --------------------------------------------------------------------------
    # For 4- and 8-bit values in unsigned little-endian words, byte ``B`` of a row holds the
    # values of columns ``2B`` (low nibble) and ``2B + 1`` (high nibble), or column ``B`` for
    # 8 bits, whatever the word size. So ``lanes`` consecutive bytes zero-extend to one vector
    # (8 bits) or, masked and shifted, to two vectors holding the even and the odd columns of a
    # chunk of ``2 * lanes`` columns (4 bits): ``x`` is then read in the same permuted order
    # (:meth:`x_perm`). The scale is applied once per group to a group accumulator, and the
    # zero point through per-group sums of ``x``: ``sum_k x_k (q_k - zp) s = s * (sum_k x_k q_k)
    # - zp * s * sum_k x_k``.

    @staticmethod
    def fast_dot_supported(storage: str, bits: int, group_size: int, lanes: int) -> bool:
        """Whether :meth:`fast_group` applies (unsigned storage, 4 or 8 bits, groups of whole
        chunks of at most 256 columns)."""
        if storage not in ("uint8", "uint16", "uint32") or bits not in (4, 8) or group_size > 256:
            return False
        chunk = 2 * lanes if bits == 4 else lanes
        return group_size % chunk == 0

    @property
    def chunk(self) -> int:
        """Columns per byte vector. Two nibbles per byte: ``2 * lanes`` for 4-bit values, ``lanes`` for 8-bit
        ones (one ``lanes``-byte load per chunk)."""
        return 2 * self.lanes if self.bits == 4 else self.lanes

    def x_perm(self, j: int) -> int:
        """Position inside a chunk of the ``x`` value that lane-vector element ``j`` multiplies
        (``j`` counts the decoded vectors' elements in order)."""
        if self.bits == 8:
            return j
        n = self.lanes
        return 2 * j if j < n else 2 * (j - n) + 1

    def fast_chunk(self, kf: KFunc, row, k: ir.Value) -> list[ir.Value]:
        """The chunk at column ``k`` (a multiple of :attr:`chunk`) as float vectors of the
        stored unsigned values (no zero point, no scale), in :meth:`x_perm` order."""
        b = kf.b
        n = self.lanes
        i32v = vec(I32, n)
        f32v = vec(F32, n)
        byte = b.lshr(k, kf.i64(1)) if self.bits == 4 else k
        raw = kf.load(vec(I8, n), row[0], byte, align=1)
        z = b.zext(raw, i32v)
        if self.bits == 8:
            return [b.uitofp(z, f32v)]
        lo = b.and_(z, ir.Constant(i32v, [15] * n))
        hi = b.lshr(z, ir.Constant(i32v, [4] * n))
        return [b.uitofp(lo, f32v), b.uitofp(hi, f32v)]

    def scale_value(self, kf: KFunc, row, g: ir.Value) -> ir.Value:
        """The float32 scale of group ``g``. Read at ``row[1][g]`` in the scale dtype and widened exactly
        (:func:`scalar_to_f32`)."""
        return scalar_to_f32(kf, kf.load(self.st, row[1], g, align=4 if self.st == F32 else 2),
                              self.scale_dtype)

    def scale_splat(self, kf: KFunc, row, g: ir.Value) -> ir.Value:
        """The float32 scale of group ``g`` in every lane (a float16 scale is broadcast before
        it is widened: ``vpbroadcastw`` + one ``vcvtph2ps`` instead of insert, convert,
        broadcast)."""
        if self.scale_dtype != "float16":
            return kf.splat(self.scale_value(kf, row, g), self.lanes)
        raw = kf.load(self.st, row[1], g, align=2)
        return kf.widen(kf.splat(raw, self.lanes), "float16")

    def scale_vec(self, kf: KFunc, row, g: ir.Value) -> ir.Value:
        """The float32 scales of groups ``g .. g + lanes - 1``. One vector load of ``lanes`` scales in the
        scale dtype, widened exactly (:meth:`KFunc.widen`); the caller keeps ``g + lanes`` within the row's
        groups."""
        raw = kf.load(vec(self.st, self.lanes), row[1], g, align=4 if self.st == F32 else 2)
        return kf.widen(raw, self.scale_dtype)

    def scale_dot(self, kf: KFunc, rows: list, tables: list, groups: ir.Value) -> list[list[ir.Value]]:
        """``out[r][i] = sum_{g < groups} scale_r[g] * tables[i][g]`` (float32) for each weight row
        of ``rows`` (from :meth:`row`) and each float32 per-group table pointer of ``tables``: the
        zero-point term of the GEMVs (the table holds per-group sums of x, float or int8-quantized).
        Vectors of :attr:`lanes` groups, then the groups left one by one; each table vector is
        loaded once for all rows."""
        b = kf.b
        L = self.lanes
        vt = vec(F32, L)
        gv = kf.sub(groups, b.srem(groups, kf.i64(L)))
        cacc = [[kf.alloca(vt, name="qc") for _ in tables] for _ in rows]
        corr = [[kf.alloca(F32, name="qcorr") for _ in tables] for _ in rows]
        for accs in cacc:
            for a in accs:
                b.store(kf.fzero(L), a)
        with kf.loop(0, gv, L, "qz") as g:
            tv = [kf.load(vt, tb, g, align=4) for tb in tables]
            for row, accs in zip(rows, cacc):
                sv = self.scale_vec(kf, row, g)
                for a, x in zip(accs, tv):
                    b.store(kf.fma(sv, x, b.load(a, typ=vt)), a)
        for accs, outs in zip(cacc, corr):
            for a, o in zip(accs, outs):
                b.store(kf.hsum(b.load(a, typ=vt)), o)
        with kf.loop(gv, groups, 1, "qzt") as g:
            for row, outs in zip(rows, corr):
                sc = self.scale_value(kf, row, g)
                for o, tb in zip(outs, tables):
                    b.store(kf.fma(sc, kf.load(F32, tb, g, align=4), b.load(o, typ=F32)), o)
        return [[b.load(o, typ=F32) for o in outs] for outs in corr]

    def prefetch(self, kf: KFunc, row, k_lo, k_hi) -> None:
        """Prefetch (into L2) the packed words and the scales of columns ``[k_lo, k_hi)`` of
        ``row`` (``k_lo`` a multiple of the group size)."""
        wbytes = self.wt.width // 8
        w_lo = kf.sdiv(k_lo, self.per_word)
        w_hi = kf.sdiv(kf.add(k_hi, self.per_word - 1), self.per_word)
        _prefetch_span(kf, kf.gep(row[0], w_lo, self.wt), kf.mul(kf.sub(w_hi, w_lo), wbytes))
        g_lo = kf.sdiv(k_lo, self.group_size)
        g_hi = kf.sdiv(kf.add(k_hi, self.group_size - 1), self.group_size)
        ssize = 4 if self.st == F32 else 2
        _prefetch_span(kf, kf.gep(row[1], g_lo, self.st), kf.mul(kf.sub(g_hi, g_lo), ssize))

    def scalar(self, kf: KFunc, row, k: ir.Value) -> ir.Value:
        """The dequantized weight at column ``k`` of ``row`` as a float32 scalar: its value (the ``bits``-wide
        field of its word, or the signed byte of ``int8`` storage) as ``fmuladd(value, scale,
        -zero_point * scale)`` with its group's scale, as the vector path computes it."""
        b = kf.b
        pw, bits = self.per_word, self.bits
        if self.signed:
            v = b.sitofp(kf.load(I8, row[0], k, align=1), F32)
        else:
            widx = b.lshr(k, kf.i64(pw.bit_length() - 1)) if pw > 1 else k
            word = kf.load(self.wt, row[0], widx, align=self.wt.width // 8)
            if self.wt.width < 32:
                word = b.zext(word, I32)
            if pw > 1:
                pos = b.trunc(b.and_(k, kf.i64(pw - 1)), I32)
                word = b.lshr(word, b.mul(pos, ir.Constant(I32, bits)))
            if bits < 32:
                word = b.and_(word, ir.Constant(I32, (1 << bits) - 1))
            v = b.uitofp(word, F32)
        g = kf.sdiv(k, self.group_size)
        s = scalar_to_f32(kf, kf.load(self.st, row[1], g, align=4 if self.st == F32 else 2),
                           self.scale_dtype)
        return kf.fma(v, s, b.fmul(s, ir.Constant(F32, float(-self.zero_point))))


def _prefetch_span(kf: KFunc, start, nbytes) -> None:
    """``llvm.prefetch`` (read, L2) of every 64-byte line of ``[start, start + nbytes)``."""
    with kf.loop(0, nbytes, 64, "pf") as off:
        kf.prefetch(kf.gep(start, off, I8), locality=2)
