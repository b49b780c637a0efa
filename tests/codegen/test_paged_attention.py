"""The paged attention (issue 43): new queries attend over the keys a paged KV cache holds, read from its
blocks in place through a block table and per-row lengths (``topi.paged_attention``, the attention kernel's
paged form): ragged rows, tables in shuffled order, GQA, a prefix in the cache + a chunk of new queries, decode;
a padding / position bias over key positions, a sliding window and a soft-cap; the 16 / 8 / 4-lane kernels and
the reference loops against a float64 numpy reference; bad lengths and block ids refused before any read."""
from __future__ import annotations

import math

import numpy as np
import pytest

from builder import te
from builder.codegen import Target, build
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.attention import plan_attention
from builder.ir.kernel import KERNEL_ATTR, AttentionKernelSpec
from builder.nn import op
from builder.te import topi
from helpers.attention_cases import build_one as _build, to_dtype as _to, to_f64 as _f64

HOST = Target.host()
HOST_SIMD = SimdInfo.from_target(HOST.triple, HOST.features)
RNG = np.random.default_rng(43)

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/codegen/conftest.py
needs_vectors = pytest.mark.skipif(not HOST_SIMD.usable, reason="no vector unit: the reference loops run")

TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 2e-2}


def _func(H, Hk, D, Dv, dtype="float32", causal="BottomRight", bias=None, index="int32", spec=True, window=None,
          softcap=None, seq=None):
    """``topi.paged_attention`` on symbolic sizes (B, Sq, blocks N, block size BS, table width M, the bias's key
    dim), with its spec (``spec=False``: the reference loops); ``seq`` an int fixes Sq (a decode step's 1). ``bias``:
    None, ``"pad"`` (B, 1, 1, Skv) or ``"head"`` (1, H, Sq, Skv)."""
    B, Sq, N, BS, M, Skv = (te.var(n) for n in ("B", "Sq", "N", "BS", "M", "Skv"))
    Sq = Sq if seq is None else seq
    q = te.placeholder((B, Sq, H, D), dtype, name="q")
    k = te.placeholder((N, BS, Hk, D), dtype, name="k_pool")
    v = te.placeholder((N, BS, Hk, Dv), dtype, name="v_pool")
    table = te.placeholder((B, M), index, name="block_table")
    lengths = te.placeholder((B,), index, name="lengths")
    args = [q, k, v, table, lengths]
    bshape = None
    if bias is not None:
        bshape = {"pad": (B, 1, 1, Skv), "head": (1, H, Sq, Skv)}[bias]
        args.append(te.placeholder(bshape, dtype, name="bias"))
    out = topi.paged_attention(*args[:5], args[5] if bias else None, None, causal, window, softcap)
    f = te.create_prim_func(args + [out])
    if spec:
        bc = tuple(d for d in range(4) if bshape is not None and isinstance(bshape[d], int) and bshape[d] == 1)
        f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, 5 if bias else -1, len(args), causal or "none", bc,
                                                   H // Hk, 1 / math.sqrt(D), window=window or 0,
                                                   softcap=softcap or 0.0, block_table=3, lengths=4)
    return f





def _cache(lengths, block_size, Hk, D, Dv, dtype, spare=3, index="int32"):
    """Pools and a block table for rows of ``lengths`` keys: the rows' blocks drawn from a shuffled range of
    ids (``spare`` more blocks than needed, so ids are not contiguous), every slot not a row's key NaN (a read
    of one would show), table entries past a row's blocks -1 (never read)."""
    need = [-(-n // block_size) for n in lengths]
    N = sum(need) + spare
    ids = RNG.permutation(N)
    width = max(need + [1]) + 1
    table = np.full((len(lengths), width), -1, np.int64)
    k = np.full((N, block_size, Hk, D), np.nan)
    v = np.full((N, block_size, Hk, Dv), np.nan)
    at = 0
    for r, (n, c) in enumerate(zip(lengths, need)):
        table[r, :c] = ids[at:at + c]
        at += c
        for j in range(n):
            blk, slot = table[r, j // block_size], j % block_size
            k[blk, slot] = RNG.standard_normal((Hk, D))
            v[blk, slot] = RNG.standard_normal((Hk, Dv))
    return _to(k, dtype), _to(v, dtype), table.astype(index)


def reference(q, k_pool, v_pool, table, lengths, bias=None, causal="BottomRight", window=None, softcap=None):
    """float64: each row's keys gathered in position order from its blocks, query ``i`` at ``lengths[b] - Sq +
    i``; scores scaled, capped, biased (column = key position), masked (causal, window); a row that sees no
    key gives 0."""
    B, Sq, H, D = q.shape
    BS, Hk = k_pool.shape[1], k_pool.shape[2]
    out = np.zeros((B, Sq, H, v_pool.shape[3]))
    for b in range(B):
        n = int(lengths[b])
        slots = [(table[b, j // BS], j % BS) for j in range(n)]
        kk = np.repeat(np.array([k_pool[x, y] for x, y in slots]).reshape(n, Hk, D), H // Hk, axis=1)
        vv = np.repeat(np.array([v_pool[x, y] for x, y in slots]).reshape(n, Hk, -1), H // Hk, axis=1)
        s = np.einsum("ihd,jhd->hij", q[b], kk) / math.sqrt(D)
        if softcap:
            s = softcap * np.tanh(s / softcap)
        if bias is not None:
            s = s + np.broadcast_to(bias, (B, H, Sq, bias.shape[3]))[b, :, :, :n]
        pos = n - Sq + np.arange(Sq)[:, None]
        keep = np.ones((Sq, n), bool)
        if causal:
            keep = np.arange(n)[None, :] <= pos
            if window:
                keep &= np.arange(n)[None, :] > pos - window
        s = np.where(keep, s, -np.inf)
        dead = np.isneginf(s).all(-1, keepdims=True)
        m = np.where(dead, 0.0, s.max(-1, keepdims=True, initial=-np.inf))
        p = np.exp(s - m)
        p = np.where(dead, 0.0, p / np.where(dead, 1.0, p.sum(-1, keepdims=True)))
        out[b] = np.einsum("hij,jhd->ihd", p, vv)
    return out


def _check(fn, lengths, seq, H, Hk, D, Dv, dtype="float32", block_size=4, bias=None, index="int32", **opts):
    """Run ``fn`` on rows of ``lengths`` keys whose last ``seq`` are the queries' own; compare with
    :func:`reference`."""
    k, v, table = _cache(lengths, block_size, Hk, D, Dv, dtype, index=index)
    q = _to(RNG.standard_normal((len(lengths), seq, H, D)), dtype)
    args = [q, k, v, table, np.array(lengths, index)]
    if bias is not None:
        skv = max(lengths) + 2                      # a key dim past the longest row is fine
        shape = {"pad": (len(lengths), 1, 1, skv), "head": (1, H, seq, skv)}[bias]
        bb = RNG.standard_normal(shape)
        bb = np.where(RNG.random(shape) < 0.2, -np.inf, bb)
        args.append(_to(bb, dtype))
    out = np.empty((len(lengths), seq, H, Dv), np.uint16 if dtype == "bfloat16" else dtype)
    fn(*args, out)
    f64 = [_f64(a, dtype) if a.dtype.kind in "fu" and a is not args[3] and a is not args[4] else a for a in args]
    want = reference(*f64[:5], f64[5] if bias else None, **opts)
    np.testing.assert_allclose(_f64(out, dtype), want, rtol=TOL[dtype], atol=TOL[dtype])


# (lengths, seq): ragged decode, one row, prefill of a fresh row (no prefix) beside prefixed ones, a chunk of
# new queries after a prefix longer than a work unit's rows, rows one block long
ROWS = [([9, 1, 17, 4], 1), ([33], 1), ([5, 12, 30], 5), ([70, 41], 9), ([4, 4, 4], 4), ([13, 2], 2)]


@needs_vectors
@pytest.mark.parametrize("H,Hk,D,Dv,dtype,index", [(4, 4, 32, 32, "float32", "int32"),
                                                   (8, 2, 48, 40, "float32", "int64"),    # GQA, tails, Dv != D
                                                   (6, 2, 32, 32, "float16", "int32"),
                                                   (4, 1, 40, 40, "bfloat16", "int64")])
def test_kernel_reads_the_blocks_of_ragged_rows(H, Hk, D, Dv, dtype, index):
    """Decode and prefill with a prefix in the cache over ragged rows whose blocks lie in shuffled order: the
    kernel equals the float64 reference (and reads no slot past a row's keys: those are NaN)."""
    kernel, fn = _build(_func(H, Hk, D, Dv, dtype, index=index))
    assert kernel == f"attention/{HOST_SIMD.name}"
    for lengths, seq in ROWS:
        _check(fn, lengths, seq, H, Hk, D, Dv, dtype, index=index)
    _check(fn, [20, 37], 3, H, Hk, D, Dv, dtype, block_size=16, index=index)   # the cache's default block
    _check(fn, [6, 3], 1, H, Hk, D, Dv, dtype, block_size=1, index=index)


@needs_vectors
@pytest.mark.parametrize("bias,opts", [("pad", {}), ("head", {}), (None, {"window": 5}),
                                       (None, {"softcap": 2.0}), (None, {"causal": None})])
def test_kernel_options_of_the_cache_path(bias, opts):
    """A padding mask / per-head bias over key positions, a sliding window, a soft-cap and no causal mask (every
    key of the row) as the attention layer's cache path passes them."""
    kw = {k: v for k, v in opts.items() if k != "causal"}
    causal = opts.get("causal", "BottomRight")
    kernel, fn = _build(_func(8, 2, 32, 32, bias=bias, causal=causal, **kw))
    assert kernel.startswith("attention/")
    for lengths, seq in ROWS[:4]:
        _check(fn, lengths, seq, 8, 2, 32, 32, bias=bias, causal=causal, **kw)


@needs_vectors
@needs_vectors
def test_the_decode_kernel_calls_the_prefill_kernels_body():
    """The decode step's paged attention (Sq fixed to 1, whose index bounds its builder folded: ``M * BS - Sq + 1``
    reads ``M * BS``) is the prefill one called with Sq = 1 (:func:`builder.codegen.dedup.specialization` compares
    integer expressions in canonical form): one body, and the decode entry's results match the reference."""
    from builder.codegen import emit_llvm_parts
    from builder.codegen.dedup import specialization

    general, step = _func(4, 2, 32, 32), _func(4, 2, 32, 32, seq=1)
    order = specialization(general, step)
    assert order is not None and order[1] == 1
    assert specialization(general, _func(4, 2, 32, 32, seq=2)) is not None
    assert specialization(general, _func(4, 1, 32, 32, seq=1)) is None          # other heads: not the same kernel
    assert emit_llvm_parts({"prefill": general, "decode": step}).distinct == 1
    lib = build({"prefill": general, "decode": step}).load()
    _check(lib["decode"], [9, 1, 17, 4], 1, 4, 2, 32, 32)
    _check(lib["prefill"], [5, 12, 30], 3, 4, 2, 32, 32)


@pytest.mark.parametrize("shape", ["avx512", "avx2", "sse"])
def test_every_vector_width_and_the_loops(shape, monkeypatch):
    """The 16-, 8- and 4-lane kernels and the reference loops (no spec) agree with the reference."""
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    kernel, fn = _build(_func(8, 2, 48, 40))
    assert kernel == f"attention/{shape}"
    loops_kernel, loops = _build(_func(8, 2, 48, 40, spec=False))
    assert not loops_kernel.startswith("attention/")
    for f in (fn, loops):
        for lengths, seq in (([9, 1, 17, 4], 1), ([5, 12, 30], 5)):
            _check(f, lengths, seq, 8, 2, 48, 40)


def test_the_loops_without_a_vector_unit(monkeypatch):
    """The scalar target keeps the reference loops (every host), which gather each row's keys from its blocks."""
    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
    monkeypatch.setenv("MB_SIMD", "scalar")
    kernel, fn = _build(_func(4, 2, 8, 8))
    assert not kernel.startswith("attention/")
    for lengths, seq in (([9, 1, 17, 4], 1), ([5, 12, 7], 5)):
        _check(fn, lengths, seq, 4, 2, 8, 8)


def _bad_calls(H=4, Hk=2, D=16, bias=False):
    """(arguments, what is wrong) of calls whose lengths or block ids point outside the arrays."""
    N, BS, M = 3, 4, 2
    q = np.zeros((2, 2, H, D), np.float32)
    k = np.zeros((N, BS, Hk, D), np.float32)
    good = np.array([[0, 1], [2, -1]], np.int32)
    cases = []
    for lengths, table, what in [([5, 4], good, "ok"), ([9, 4], good, "length"), ([5, 1], good, "length"),
                                 ([5, -3], good, "length"), ([5, 2**31 - 1], good, "length"),
                                 ([2**63 - 1, 4], good, "length"), ([-2**63, 4], good, "length"),
                                 ([5, 4], np.array([[0, 3], [2, -1]], np.int32), "block"),
                                 ([5, 4], np.array([[0, 1], [-1, 0]], np.int32), "block")]:
        args = [q, k, k, table.astype(np.int64), np.array(lengths, np.int64)]
        if bias:
            args.append(np.zeros((2, 1, 1, 6), np.float32))
        cases.append((args, what))
    if bias:   # a length past the bias's 6 key columns
        cases.append(([q, k, k, good.astype(np.int64), np.array([7, 4]), np.zeros((2, 1, 1, 6), np.float32)], "length"))
    return cases


@needs_vectors
def test_bad_lengths_and_block_ids_are_refused_before_any_read():
    """A length below seq or above max_blocks * block_size (or the bias's key dim), a block id outside the
    pools in a row's used entries: a clear error before any unit reads; unused entries are not looked at."""
    for bias in (False, True):
        _, fn = _build(_func(4, 2, 16, 16, bias="pad" if bias else None, index="int64"))
        for args, what in _bad_calls(bias=bias):
            out = np.empty((2, 2, 4, 16), np.float32)
            if what == "ok":
                fn(*args, out)
                continue
            match = ("a row's length .* must be at least seq and at most max_blocks \\* block_size" if what == "length"
                     else "a block id of a row's block table is outside the pools' blocks")
            with pytest.raises(ValueError, match=match):
                fn(*args, out)


def test_the_loops_refuse_them_too(monkeypatch):
    """The reference loops check the same indices (an index-out-of-range error, never a read outside)."""
    monkeypatch.setenv("MB_SIMD", "scalar")
    _, fn = _build(_func(4, 2, 16, 16, index="int64"))
    for args, what in _bad_calls():
        out = np.empty((2, 2, 4, 16), np.float32)
        if what == "ok":
            fn(*args, out)
        else:
            with pytest.raises(ValueError, match="index out of range"):
                fn(*args, out)


def test_planner_spec_and_graph_op():
    """The planner takes the paged form and says why it declines; the spec prints and parses back;
    ``nn.op.paged_attention`` checks its arguments and prints as ``R.nn.paged_attention``."""
    simd = SimdInfo("avx2", 8, 16)
    plan = plan_attention(_func(4, 2, 16, 16), simd)
    assert not isinstance(plan, str) and plan.block_table is not None and "attention_paged" in str(plan)
    assert "dtypes" in plan_attention(_func(4, 2, 16, 16, "float64"), simd)
    f = _func(4, 2, 16, 16, causal="BottomRight")
    f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, -1, 5, "TopLeft", (), 2, 0.25, block_table=3, lengths=4)
    assert plan_attention(f, simd) == "causal mask TopLeft of a paged attention"
    f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, -1, 4, "none", (), 2, 0.25, block_table=3, lengths=4)
    assert "do not match the paged attention's 6" in plan_attention(f, simd)
    from builder.ir import structural_equal, tir
    from builder.ir.parser import parse
    f = _func(4, 2, 16, 16, bias="pad", window=3)
    back = next(iter(parse(tir.script(f)).functions.values()))
    assert back.attrs[KERNEL_ATTR] == f.attrs[KERNEL_ATTR] and back.attrs[KERNEL_ATTR].block_table == 3
    with pytest.raises(ValueError, match="causal_mask must be None or 'BottomRight'"):
        topi.paged_attention(te.placeholder((1, 1, 2, 4)), *[te.placeholder((3, 4, 2, 4))] * 2,
                             te.placeholder((1, 2), "int32"), te.placeholder((1,), "int32"), causal_mask="TopLeft")
    from helpers.functional import exported
    shapes = dict(q=(["b", "s", 4, 8], "float32"), k=(["n", "bs", 2, 8], "float32"), t=(["b", "m"], "int32"),
                  n=(["b"], "int32"))
    mod = exported(lambda q, k, t, n: op.paged_attention(q, k, k, t, n, causal_mask="BottomRight"), **shapes)
    text = mod.script()
    assert 'R.nn.paged_attention(q, k, k, t, n, scale=None, causal_mask="BottomRight", window_size=None)' in text
    assert structural_equal(parse(text), mod)
    with pytest.raises(ValueError, match="block_table must be 2-D int32 / int64"):
        exported(lambda q, k, t, n: op.paged_attention(q, k, k, n, n), **shapes)
    with pytest.raises(ValueError, match="not a multiple of the pools' 3"):
        exported(lambda q, k, t, n: op.paged_attention(q, k, k, t, n), **dict(shapes, k=(["n", 4, 3, 8], "float32")))
    with pytest.raises(ValueError, match="the batch of query and lengths differ"):
        exported(lambda q, k, t, n: op.paged_attention(q, k, k, t, n),
                 **dict(shapes, q=([2, "s", 4, 8], "float32"), t=([2, "m"], "int32"), n=((3,), "int32")))
    with pytest.raises(ValueError, match="causal_mask must be None or 'BottomRight'"):
        exported(lambda q, k, t, n: op.paged_attention(q, k, k, t, n, causal_mask="TopLeft"), **shapes)
