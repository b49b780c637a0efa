"""The attention kernel family (issue 15; :mod:`builder.codegen.kernels.attention`): PrimFuncs of
``topi.attention`` with their :class:`AttentionKernelSpec`, built with symbolic batch / query /
key lengths and checked against a float64 numpy reference (PyTorch >= 2.5's math attention:
rows with every key masked give 0), for decode (Sq = 1), Sq < Sk with BottomRight, TopLeft,
bias with broadcast dims, fully masked rows, GQA, head dims with vector tails, odd key counts,
16-bit inputs and every emulated vector width; then the graph path (``nn.attention`` legalized
with the spec, the kernel chosen) and the spec's print / parse round trip."""
from __future__ import annotations

import math

import numpy as np
import pytest

from builder import te
from builder.codegen import Target
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.attention import plan_attention
from builder.ir.kernel import KERNEL_ATTR, AttentionKernelSpec, spec_from_attr
from builder.nn import op
from builder.te import topi
from helpers.functional import Fn, spec_of
from helpers.attention_cases import build_one as _build, to_dtype as _to, to_f64 as _f64

HOST = Target.host()
HOST_SIMD = SimdInfo.from_target(HOST.triple, HOST.features)
RNG = np.random.default_rng(15)


pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/codegen/conftest.py


#: bias shapes by name, in terms of (B, H, Sq, Sk)
BIAS = {
    None: None,
    "pad": lambda B, H, Sq, Sk: (B, 1, 1, Sk),          # a padding mask
    "full": lambda B, H, Sq, Sk: (B, H, Sq, Sk),
    "head": lambda B, H, Sq, Sk: (1, H, 1, Sk),         # ALiBi-like, per head
    "row": lambda B, H, Sq, Sk: (B, 1, Sq, 1),          # broadcast along keys
}


def _func(H, Hk, D, Dv, dtype="float32", causal=None, bias=None, scale=None, spec=True):
    """``topi.attention`` on symbolic B / Sq / Sk with its spec (``spec=False``: none)."""
    B, Sq, Sk = te.var("B"), te.var("Sq"), te.var("Sk")
    q = te.placeholder((B, Sq, H, D), dtype, name="q")
    k = te.placeholder((B, Sk, Hk, D), dtype, name="k")
    v = te.placeholder((B, Sk, Hk, Dv), dtype, name="v")
    args = [q, k, v]
    bshape = None
    if bias is not None:
        bshape = BIAS[bias](B, H, Sq, Sk)
        args.append(te.placeholder(bshape, dtype, name="bias"))
    out = topi.attention(q, k, v, args[3] if bias else None, scale, causal)
    f = te.create_prim_func(args + [out])
    if spec:
        bc = tuple(d for d in range(4) if bshape is not None and isinstance(bshape[d], int) and bshape[d] == 1)
        f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, 3 if bias else -1, len(args), causal or "none", bc,
                                                   H // Hk, 1 / math.sqrt(D) if scale is None else scale)
    return f





def reference(q, k, v, bias=None, causal=None, scale=None):
    """Attention in float64 (BSNH inputs): scores, bias, causal alignment, softmax with fully masked
    rows (and Sk = 0) giving 0, value product."""
    B, Sq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    kk, vv = np.repeat(k, H // Hk, axis=2), np.repeat(v, H // Hk, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) * (1 / math.sqrt(D) if scale is None else scale)
    if bias is not None:
        s = s + bias
    if causal is not None:
        keep = np.arange(Sk)[None, :] <= np.arange(Sq)[:, None] + (Sk - Sq if causal == "BottomRight" else 0)
        s = np.where(keep, s, -np.inf)
    dead = np.isneginf(s).all(-1, keepdims=True)
    m = np.where(dead, 0.0, s.max(-1, keepdims=True, initial=-np.inf))
    p = np.exp(s - m)
    p = np.where(dead, 0.0, p / np.where(dead, 1.0, p.sum(-1, keepdims=True)))
    return np.einsum("bhij,bjhd->bihd", p, vv)


def _inputs(b, sq, sk, H, Hk, D, Dv, dtype, bias, masked=0.0):
    q = RNG.standard_normal((b, sq, H, D))
    k = RNG.standard_normal((b, sk, Hk, D))
    v = RNG.standard_normal((b, sk, Hk, Dv))
    args = [_to(q, dtype), _to(k, dtype), _to(v, dtype)]
    if bias is not None:
        bb = RNG.standard_normal(BIAS[bias](b, H, sq, sk))
        if masked:
            bb = np.where(RNG.random(bb.shape) < masked, -np.inf, bb)
        args.append(_to(bb, dtype))
    return args


def _check(fn, args, H, Dv, dtype, causal, scale=None):
    b, sq = args[0].shape[:2]
    out = np.empty((b, sq, H, Dv), np.uint16 if dtype == "bfloat16" else dtype)
    fn(*args, out)
    f64 = [_f64(a, dtype) for a in args]
    want = reference(*f64[:3], f64[3] if len(f64) > 3 else None, causal, scale)
    got = _f64(out, dtype)
    tol = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 2e-2}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    return got


needs_vectors = pytest.mark.skipif(not HOST_SIMD.usable, reason="no vector unit: the reference loops run")

# (H, Hk, D, Dv, dtype, causal, bias)
CASES = [
    (4, 4, 32, 32, "float32", None, None),
    (4, 4, 64, 64, "float32", "TopLeft", None),
    (8, 2, 48, 48, "float32", "BottomRight", "pad"),       # GQA, a head-dim tail
    (8, 2, 64, 64, "float32", None, "full"),
    (3, 3, 32, 20, "float32", "TopLeft", "head"),          # Dv != D, Dv tail
    (2, 1, 7, 5, "float32", None, "row"),                  # head dims below one vector
    (6, 2, 32, 32, "float16", "BottomRight", "pad"),
    (4, 2, 40, 40, "bfloat16", "TopLeft", "full"),
]
# (B, Sq, Sk): decode, prefill, Sq < Sk, odd Sk, one key, batch 1 and 3
SIZES = [(1, 1, 37), (3, 1, 64), (1, 9, 9), (3, 7, 7), (2, 5, 40), (1, 13, 1), (3, 33, 71), (1, 4, 0)]


@needs_vectors
@pytest.mark.parametrize("H,Hk,D,Dv,dtype,causal,bias", CASES)
def test_attention_kernel_matches_numpy(H, Hk, D, Dv, dtype, causal, bias):
    kernel, fn = _build(_func(H, Hk, D, Dv, dtype, causal, bias))
    assert kernel == f"attention/{HOST_SIMD.name}"
    for b, sq, sk in SIZES:
        if causal == "TopLeft" and sq > sk:
            continue   # (rows past the keys see them all, as the reference: fine, but keep the sizes square)
        _check(fn, _inputs(b, sq, sk, H, Hk, D, Dv, dtype, bias, masked=0.2), H, Dv, dtype, causal)


@needs_vectors
def test_fully_masked_rows_give_zeros_as_the_loops():
    """A bias of -inf over whole rows (and BottomRight with Sq > Sk, where the first rows see no
    key) gives 0 there, as the reference loops (PyTorch >= 2.5's ``_safe_softmax``)."""
    f = _func(4, 2, 32, 32, "float32", "BottomRight", "full")
    kernel, fn = _build(f)
    assert kernel.startswith("attention/")
    _, loops = _build(_func(4, 2, 32, 32, "float32", "BottomRight", "full", spec=False))
    for b, sq, sk in ((2, 6, 11), (1, 5, 3), (3, 1, 17)):
        args = _inputs(b, sq, sk, 4, 2, 32, 32, "float32", "full")
        args[3][:, 1, 0, :] = -np.inf       # head 1, query 0: every key masked
        args[3][-1, :, -1, :] = -np.inf     # the last batch's last query, every head
        got = _check(fn, args, 4, 32, "float32", "BottomRight")
        assert not got[:, 0, 1].any() and not got[-1, -1].any()
        want = np.empty_like(got, dtype=np.float32)
        loops(*args, want)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        assert np.array_equal(got == 0, want == 0)


@needs_vectors
@pytest.mark.parametrize("shape", ["avx512", "avx2", "sse"])
def test_every_vector_width(shape, monkeypatch):
    """The 16-, 8- and 4-lane kernels (``MB_SIMD_SHAPE``: LLVM splits or widens the vectors for
    this host) compute the same: GQA, bias, both causal alignments, tails in D and Sk, and
    units whose keys fit one vector (the one-vector key blocks: Sk 3 and 6, and the first rows of
    a TopLeft-causal prefill)."""
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    for causal, bias, dtype in (("BottomRight", "pad", "float32"), ("TopLeft", "full", "float32"),
                                (None, "row", "float16")):
        kernel, fn = _build(_func(8, 2, 48, 40, dtype, causal, bias))
        assert kernel == f"attention/{shape}"
        for b, sq, sk in ((1, 1, 37), (3, 5, 67), (2, 19, 19), (2, 6, 6), (1, 2, 3)):
            _check(fn, _inputs(b, sq, sk, 8, 2, 48, 40, dtype, bias, masked=0.1), 8, 40, dtype, causal)


@needs_vectors
@pytest.mark.parametrize("rows,pass_rows,shape", [(5, 3, None), (64, 1, None), (12, 6, None), (64, 4, None),
                                                (24, 8, "sse")])
def test_work_unit_and_pass_sizes(rows, pass_rows, shape, monkeypatch):
    """Other rows per work unit and per pass of the score / value loops compute the same (a last
    pass past the unit's rows repeats its last row without applying it twice; the pass's maxima
    and sums reduced together, padded to a power of two of rows, or one row at a time where a
    pass has more rows than a vector has lanes: 8 rows of 4 lanes)."""
    from builder.codegen.kernels.attention import ATTENTION_TUNING

    if shape:
        monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    monkeypatch.setitem(ATTENTION_TUNING, "rows", rows)
    monkeypatch.setitem(ATTENTION_TUNING, "pass_rows", pass_rows)
    kernel, fn = _build(_func(6, 2, 32, 24, "float32", "TopLeft", "pad"))
    assert kernel.startswith("attention/")
    for b, sq, sk in ((1, 1, 37), (2, 7, 7), (1, 23, 23)):
        _check(fn, _inputs(b, sq, sk, 6, 2, 32, 24, "float32", "pad", masked=0.1), 6, 24, "float32", "TopLeft")


@needs_vectors
def test_short_key_ranges_take_one_vector_blocks():
    """A unit whose keys fit one vector (Sk <= lanes, or the first rows of a causal prefill) runs
    key blocks of one vector, not ``key_vectors`` (the masked vectors cost MiniLM's 12-token
    attention 40%): both loops are in the code, chosen per unit at run time."""
    from builder.codegen import emit_llvm_ir
    from builder.codegen.kernels.attention import ATTENTION_TUNING

    text, _ = emit_llvm_ir({"f": _func(4, 4, 32, 32, "float32", "TopLeft", "pad")})
    assert ("keys.then" in text) == (ATTENTION_TUNING["key_vectors"] > 1)
    assert text.count('"kblk') >= (2 if ATTENTION_TUNING["key_vectors"] > 1 else 1)


def test_scalar_target_keeps_the_reference_loops(monkeypatch):
    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
    monkeypatch.setenv("MB_SIMD", "scalar")
    kernel, fn = _build(_func(4, 2, 16, 16, "float32", "TopLeft", "pad"))
    assert kernel == "loops (attention: no vector unit)"
    _check(fn, _inputs(2, 5, 5, 4, 2, 16, 16, "float32", "pad"), 4, 16, "float32", "TopLeft")


def test_planner_reasons():
    """The planner checks the PrimFunc against its spec and says why it declines."""
    simd = SimdInfo("avx2", 8, 16)
    f = _func(4, 2, 16, 16, "float32", None, "pad")
    assert not isinstance(plan_attention(f, simd), str)
    spec = f.attrs[KERNEL_ATTR]
    f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, 3, 4, "none", (1, 2), 4, spec.scale)   # wrong group
    assert "group" in plan_attention(f, simd)
    f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, 3, 4, "none", (1,), 2, spec.scale)     # dim 2 not broadcast
    assert "bias dim 2" in plan_attention(f, simd)
    f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, -1, 3, "none", (), 2, spec.scale)      # bias missing
    assert "parameters" in plan_attention(f, simd)
    f64 = _func(4, 2, 16, 16, "float64", None, None)
    assert "dtypes" in plan_attention(f64, simd)
    assert plan_attention(_func(4, 2, 16, 16), SimdInfo("scalar", 1, 0)) == "no vector unit"


def test_spec_prints_and_parses_back():
    from builder.ir import tir
    from builder.ir.parser import parse

    f = _func(8, 2, 32, 32, "float32", "BottomRight", "pad", scale=0.125)
    text = tir.script(f)
    assert '"kind": "attention"' in text and '"bias_broadcast": [1, 2]' in text
    back = parse(text)
    g = next(iter(back.functions.values()))
    assert g.attrs[KERNEL_ATTR] == f.attrs[KERNEL_ATTR]
    with pytest.raises(ValueError, match="causal"):
        spec_from_attr({"q": 0, "k": 1, "v": 2, "bias": -1, "out": 3, "causal": "Lower", "bias_broadcast": [],
                        "group": 1, "scale": 1.0, "kind": "attention"})


def _sdpa_module(dtype, causal, mask):
    names = {"q": (["b", "s", 8, 48], dtype), "k": (["b", "t", 2, 48], dtype), "v": (["b", "t", 2, 48], dtype)}
    if mask:
        names["m"] = (["b", 1, 1, "t"], dtype)

    def fn(q, k, v, m=None):
        return op.scaled_dot_product_attention(q, k, v, attn_mask=m, causal_mask=causal)

    return Fn(fn, list(names)).jit(spec_of(**names))


@pytest.mark.parametrize("dtype,causal,mask", [("float32", "BottomRight", True), ("float16", None, False),
                                               ("float64", "TopLeft", True)])
def test_graph_selects_the_kernel(dtype, causal, mask):
    """``nn.attention`` is legalized with the spec and the kernel is chosen (float64 stays on the
    loops); the results match the reference."""
    jm = _sdpa_module(dtype, causal, mask)
    kinds = [meta["kernel"] for meta in jm.exe.kernels.values() if "attention" in meta["kernel"]]
    if dtype == "float64" or not HOST_SIMD.usable:
        assert not any(k.startswith("attention/") for k in kinds)
    else:
        assert kinds and all(k.startswith("attention/") for k in kinds)
    for b, s, t in ((1, 1, 23), (3, 6, 9)):
        args = _inputs(b, s, t, 8, 2, 48, 48, dtype, "pad" if mask else None, masked=0.2)
        got = jm["forward"](*args)
        f64 = [_f64(a, dtype) for a in args]
        want = reference(*f64[:3], f64[3] if mask else None, causal)
        tol = {"float32": 2e-5, "float16": 4e-3, "float64": 1e-12}[dtype]
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


# -- the variable-length form: sequences packed one after another (``attention_var_len``) -------------

def _var_len_func(H, Hk, D, Dv, dtype="float32", causal=None, index="int64", spec=True):
    """``topi.attention_var_len`` on symbolic tokens T and sequences B + 1, with its spec."""
    T, B1 = te.var("T"), te.var("B1")
    q = te.placeholder((T, H, D), dtype, name="q")
    k = te.placeholder((T, Hk, D), dtype, name="k")
    v = te.placeholder((T, Hk, Dv), dtype, name="v")
    st = te.placeholder((B1,), index, name="seqstart")
    f = te.create_prim_func([q, k, v, st, topi.attention_var_len(q, k, v, st, None, causal)])
    if spec:
        f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, -1, 4, causal or "none", (), H // Hk,
                                                   1 / math.sqrt(D), seqstart=3)
    return f


def _var_len_check(fn, lengths, H, Hk, D, Dv, dtype, causal, index="int64"):
    """Run ``fn`` on random sequences of ``lengths`` and compare each with the float64 reference of that
    sequence alone (one batch row)."""
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(index)
    T = int(starts[-1])
    q, k, v = (_to(RNG.standard_normal((T, h, d)), dtype) for h, d in ((H, D), (Hk, D), (Hk, Dv)))
    out = np.empty((T, H, Dv), np.uint16 if dtype == "bfloat16" else dtype)
    fn(q, k, v, starts, out)
    got = _f64(out, dtype)
    tol = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 2e-2}[dtype]
    for a, e in zip(starts[:-1], starts[1:]):
        if a == e:
            continue
        want = reference(*(_f64(x, dtype)[None, a:e] for x in (q, k, v)), causal=causal)[0]
        np.testing.assert_allclose(got[a:e], want, rtol=tol, atol=tol)


#: sequence lengths: one, empty ones between, longer than a work unit's rows, a batch of none
VAR_LENGTHS = [[5], [12, 8, 33, 14, 36, 20, 14, 41], [3, 0, 0, 70, 1], [0], [], [129, 2]]


@needs_vectors
@pytest.mark.parametrize("H,Hk,D,Dv,dtype,causal", [(12, 12, 32, 32, "float32", None),
                                                    (8, 2, 48, 40, "float32", "TopLeft"),
                                                    (6, 2, 32, 32, "float16", None),
                                                    (4, 1, 40, 40, "bfloat16", "TopLeft")])
def test_var_len_kernel_matches_each_sequence_alone(H, Hk, D, Dv, dtype, causal):
    """Every sequence attends within itself only (GQA, causal, head-dim tails, 16-bit inputs), whatever
    the lengths around it; int32 starts too."""
    kernel, fn = _build(_var_len_func(H, Hk, D, Dv, dtype, causal))
    assert kernel == f"attention/{HOST_SIMD.name}"
    for lengths in VAR_LENGTHS:
        _var_len_check(fn, lengths, H, Hk, D, Dv, dtype, causal)
    _, fn32 = _build(_var_len_func(H, Hk, D, Dv, dtype, causal, index="int32"))
    _var_len_check(fn32, [7, 0, 19], H, Hk, D, Dv, dtype, causal, index="int32")


@needs_vectors
@pytest.mark.parametrize("shape", ["avx512", "avx2", "sse"])
def test_var_len_every_vector_width_and_the_loops(shape, monkeypatch):
    """The 16-, 8- and 4-lane kernels, and the reference loops (no spec), agree with the reference."""
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    kernel, fn = _build(_var_len_func(8, 2, 48, 40, "float32", "TopLeft"))
    assert kernel == f"attention/{shape}"
    _, loops = _build(_var_len_func(8, 2, 48, 40, "float32", "TopLeft", spec=False))
    for f in (fn, loops):
        for lengths in ([1, 17, 0, 6], [40]):
            _var_len_check(f, lengths, 8, 2, 48, 40, "float32", "TopLeft")


@needs_vectors
def test_var_len_refuses_starts_outside_the_tokens():
    """seqstart that does not start at 0, decreases or does not end at the token count is an error,
    before any row is read (never a read outside q / k / v)."""
    _, fn = _build(_var_len_func(4, 2, 16, 16))
    q, k, v = (np.zeros((11, h, 16), np.float32) for h in (4, 2, 2))
    out = np.empty((11, 4, 16), np.float32)
    for bad in ([1, 3, 11], [0, 5, 4, 11], [0, 3, 10], [0, 3, 12], [], [0, -5, 11], [0, 2**40, 11]):
        with pytest.raises(ValueError, match="seqstart must start at 0, never decrease and end at the number"):
            fn(q, k, v, np.array(bad, np.int64), out)


def test_var_len_planner_and_graph_op():
    """The planner takes the variable-length form (3-D tensors, seqstart) and says why it declines;
    ``nn.op.attention_var_len`` is legalized with the spec and checks its arguments."""
    simd = SimdInfo("avx2", 8, 16)
    plan = plan_attention(_var_len_func(4, 2, 16, 16), simd)
    assert not isinstance(plan, str) and plan.seqstart is not None and "attention_var_len" in str(plan)
    assert "dtypes" in plan_attention(_var_len_func(4, 2, 16, 16, "float64"), simd)
    with pytest.raises(ValueError, match="causal_mask must be None or 'TopLeft'"):
        topi.attention_var_len(*[te.placeholder((3, 2, 4), "float32")] * 3, te.placeholder((2,), "int64"),
                               causal_mask="BottomRight")
    from helpers.functional import exported
    with pytest.raises(ValueError, match="seqstart must be 1-D int32 / int64"):
        exported(lambda q, s: op.attention_var_len(q, q, q, s), q=(["t", 2, 4], "float32"), s=((3,), "float32"))
    with pytest.raises(ValueError, match="not a multiple"):
        exported(lambda q, k, s: op.attention_var_len(q, k, k, s), q=(["t", 3, 4], "float32"),
                 k=(["t", 2, 4], "float32"), s=((3,), "int64"))
    mod = exported(lambda q, s: op.attention_var_len(q, q, q, s, causal_mask="TopLeft"),
                   q=(["t", 2, 4], "float32"), s=(["b"], "int64"))
    assert 'R.nn.attention_var_len(q, q, q, s, scale=None, causal_mask="TopLeft")' in mod.script()
    from builder.ir import structural_equal, tir
    from builder.ir.parser import parse
    assert structural_equal(parse(mod.script()), mod)
    f = _var_len_func(4, 2, 16, 16, causal="TopLeft")
    back = next(iter(parse(tir.script(f)).functions.values()))
    assert back.attrs[KERNEL_ATTR] == f.attrs[KERNEL_ATTR] and back.attrs[KERNEL_ATTR].seqstart == 3
