"""The attention kernel with a sliding window and logit soft-capping (issue 42;
:mod:`builder.codegen.kernels.attention`): ``topi.attention(..., window_size=W, logit_softcap=c)`` with its
spec is compiled to the kernel (not the reference loops) and matches a float64 numpy reference and the
reference loops, for TopLeft and BottomRight, prefill, decode over a cache longer and shorter than the window,
a chunk, W = 1, GQA, a padding bias, the cap with and without a window, on every emulated vector width; then
the graph path (``nn.attention`` legalized with a window and a cap picks the kernel)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from builder import te
from builder.codegen import Target
from builder.codegen.kernels import SimdInfo
from builder.ir.kernel import KERNEL_ATTR, AttentionKernelSpec
from builder.te import topi
from helpers.attention_cases import build_one as _build, to_dtype as _to, to_f64 as _f64

HOST = Target.host()
HOST_SIMD = SimdInfo.from_target(HOST.triple, HOST.features)
RNG = np.random.default_rng(42)
TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 2e-2}

pytestmark = [pytest.mark.usefixtures("private_object_cache"),   # tests/codegen/conftest.py
              pytest.mark.skipif(not HOST_SIMD.usable, reason="no vector unit: the reference loops run")]


def _func(H, Hk, D, dtype, causal, window, cap, bias, spec=True):
    """``topi.attention`` on symbolic B / Sq / Sk with a window / cap and its spec (``spec=False``: none);
    ``bias`` a (B, 1, 1, Sk) padding mask when true."""
    B, Sq, Sk = te.var("B"), te.var("Sq"), te.var("Sk")
    args = [te.placeholder((B, Sq, H, D), dtype, name="q"), te.placeholder((B, Sk, Hk, D), dtype, name="k"),
            te.placeholder((B, Sk, Hk, D), dtype, name="v")]
    if bias:
        args.append(te.placeholder((B, 1, 1, Sk), dtype, name="bias"))
    out = topi.attention(*args[:3], args[3] if bias else None, None, causal, window, cap)
    f = te.create_prim_func(args + [out])
    if spec:
        f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, 3 if bias else -1, len(args), causal or "none",
                                                   (1, 2) if bias else (), H // Hk, 1 / math.sqrt(D),
                                                   window=window or 0, softcap=cap or 0.0)
    return f





def reference(q, k, v, bias, causal, window, cap):
    """float64 attention (BSNH): scores * 1/sqrt(D), ``cap * tanh(s / cap)``, + bias, the causal and window
    masks (keys ``limit - W < j <= limit``, HF ``sliding_window_overlay``), softmax (rows with every key
    masked give 0, PyTorch >= 2.5's ``_safe_softmax``), value product."""
    B, Sq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    kk, vv = np.repeat(k, H // Hk, axis=2), np.repeat(v, H // Hk, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) / math.sqrt(D)
    if cap:
        s = cap * np.tanh(s / cap)
    if bias is not None:
        s = s + bias
    if causal is not None:
        limit = np.arange(Sq)[:, None] + (Sk - Sq if causal == "BottomRight" else 0)
        j = np.arange(Sk)[None, :]
        keep = (j <= limit) & ((j > limit - window) if window else True)
        s = np.where(keep, s, -np.inf)
    dead = np.isneginf(s).all(-1, keepdims=True)
    p = np.exp(s - np.where(dead, 0.0, s.max(-1, keepdims=True, initial=-np.inf)))
    p = np.where(dead, 0.0, p / np.where(dead, 1.0, p.sum(-1, keepdims=True)))
    return np.einsum("bhij,bjhd->bihd", p, vv)


def _run(fn, dtype, b, sq, sk, H, Hk, D, bias, scale_q=1.0):
    """Random inputs (``scale_q`` spreads the scores so that a cap bites), ``fn``'s output and the inputs."""
    args = [_to(RNG.standard_normal((b, sq, H, D)) * scale_q, dtype), _to(RNG.standard_normal((b, sk, Hk, D)), dtype),
            _to(RNG.standard_normal((b, sk, Hk, D)), dtype)]
    if bias:
        pad = np.where(RNG.random((b, 1, 1, sk)) < 0.15, -np.inf, 0.1 * RNG.standard_normal((b, 1, 1, sk)))
        args.append(_to(pad, dtype))
    out = np.empty((b, sq, H, D), np.uint16 if dtype == "bfloat16" else dtype)
    fn(*args, out)
    return _f64(out, dtype), [_f64(a, dtype) for a in args], args


#: (causal, window, cap, bias) of each compiled kernel
KERNELS = [("TopLeft", 5, None, False), ("BottomRight", 16, None, True), ("BottomRight", 1, None, False),
           (None, None, 8.0, True), ("BottomRight", 12, 4.0, True)]
#: (B, Sq, Sk): prefill, decode with Sk > W and Sk < W, chunks (1 < Sq < Sk), a prefill longer than a work unit
SIZES = [(2, 23, 23), (3, 1, 100), (1, 1, 7), (2, 7, 50), (1, 3, 2), (1, 150, 150)]


@pytest.mark.parametrize("shape", ["avx512", "avx2", "sse"])
@pytest.mark.parametrize("causal,window,cap,bias", KERNELS)
def test_window_and_softcap_kernel_matches_numpy(shape, causal, window, cap, bias, monkeypatch):
    """Every vector width (``MB_SIMD_SHAPE`` emulates 16 / 8 / 4 lanes on any x86 host), GQA (8 heads over 2):
    the kernel is chosen and equals the float64 reference."""
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    kernel, fn = _build(_func(8, 2, 24, "float32", causal, window, cap, bias))
    assert kernel == f"attention/{shape}"
    for b, sq, sk in SIZES:
        if causal == "TopLeft" and sq > sk:
            continue
        got, f64, _ = _run(fn, "float32", b, sq, sk, 8, 2, 24, bias, scale_q=6.0 if cap else 1.0)
        np.testing.assert_allclose(got, reference(*f64[:3], f64[3] if bias else None, causal, window, cap),
                                   rtol=TOL["float32"], atol=TOL["float32"], err_msg=f"{(b, sq, sk)}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_inputs(dtype):
    kernel, fn = _build(_func(4, 1, 32, dtype, "BottomRight", 9, 6.0, True))
    assert kernel.startswith("attention/")
    for b, sq, sk in ((2, 1, 40), (1, 12, 12), (2, 5, 30)):
        got, f64, _ = _run(fn, dtype, b, sq, sk, 4, 1, 32, True, scale_q=4.0)
        np.testing.assert_allclose(got, reference(*f64[:3], f64[3], "BottomRight", 9, 6.0),
                                   rtol=TOL[dtype], atol=TOL[dtype])


def test_the_kernel_equals_the_reference_loops():
    """Same inputs through the kernel and through the reference loops of the same PrimFunc without its spec:
    TopLeft with Sq > Sk (rows past the keys see the last W of them, rows whose window misses every key: 0)."""
    kernel, fn = _build(_func(6, 3, 16, "float32", "TopLeft", 4, 3.0, True))
    loops_kernel, loops = _build(_func(6, 3, 16, "float32", "TopLeft", 4, 3.0, True, spec=False))
    assert kernel.startswith("attention/") and not loops_kernel.startswith("attention/")
    for b, sq, sk in ((2, 9, 9), (1, 12, 5), (3, 1, 30)):
        got, _, args = _run(fn, "float32", b, sq, sk, 6, 3, 16, True, scale_q=3.0)
        want = np.empty((b, sq, 6, 16), np.float32)
        loops(*args, want)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        assert np.array_equal(got == 0, want == 0)


def test_decode_starts_the_key_loop_at_the_window():
    """The key loop starts at the first key of the unit's window (``kblk`` from ``limit - W + 1``), so a decode
    step reads W keys of a long cache: keys before the window may be NaN without changing the output."""
    kernel, fn = _build(_func(4, 2, 16, "float32", "BottomRight", 8, None, False))
    assert kernel.startswith("attention/")
    sk = 300
    q, k, v = (RNG.standard_normal((1, n, h, 16)).astype(np.float32) for n, h in ((1, 4), (sk, 2), (sk, 2)))
    k[:, :sk - 8], v[:, :sk - 8] = np.nan, np.nan   # a kernel that masked them would still multiply by NaN
    out = np.empty((1, 1, 4, 16), np.float32)
    fn(q, k, v, out)
    want = reference(*(x.astype(np.float64)[:, -8:] if x is not q else x.astype(np.float64) for x in (q, k, v)),
                     None, "BottomRight", 8, None)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


def test_planner_and_spec_round_trip():
    """The planner declines a window without a causal mask; the spec's window and cap print and parse back."""
    from builder.codegen.kernels.attention import plan_attention
    from builder.ir import tir
    from builder.ir.parser import parse

    f = _func(4, 2, 16, "float32", "BottomRight", 7, 2.5, True)
    plan = plan_attention(f, SimdInfo("avx2", 8, 16))
    assert not isinstance(plan, str) and "window=7 softcap=2.5" in str(plan)
    back = next(iter(parse(tir.script(f)).functions.values()))
    assert back.attrs[KERNEL_ATTR] == f.attrs[KERNEL_ATTR]
    f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, 3, 4, "none", (1, 2), 2, 0.25, window=7)
    assert "window" in plan_attention(f, SimdInfo("avx2", 8, 16))


def test_graph_selects_the_kernel_for_a_window_and_a_cap():
    """``op.scaled_dot_product_attention`` with ``window_size`` and ``logit_softcap``: legalized with the spec,
    the kernel is chosen, and the output is the reference's."""
    from builder.nn import op
    from helpers.functional import Fn, spec_of

    names = {"q": (["b", "s", 4, 16], "float32"), "k": (["b", "t", 2, 16], "float32"),
             "v": (["b", "t", 2, 16], "float32")}
    jm = Fn(lambda q, k, v: op.scaled_dot_product_attention(q, k, v, causal_mask="BottomRight", window_size=6,
                                                            logit_softcap=5.0), list(names)).jit(spec_of(**names))
    kinds = [m["kernel"] for m in jm.exe.kernels.values() if "attention" in m["kernel"]]
    assert kinds and all(k.startswith("attention/") for k in kinds), kinds
    for b, s, t in ((1, 1, 23), (2, 9, 9)):
        q, k, v = (RNG.standard_normal((b, n, h, 16)).astype(np.float32) for n, h in ((s, 4), (t, 2), (t, 2)))
        got = np.asarray(jm["forward"](q * 4, k, v), np.float64)
        want = reference(q.astype(np.float64) * 4, k.astype(np.float64), v.astype(np.float64), None,
                         "BottomRight", 6, 5.0)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_scalar_target_keeps_the_reference_loops(monkeypatch):
    """Without vector units (``MB_SIMD=scalar``) a window and a cap stay on the reference loops, which match."""
    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
    monkeypatch.setenv("MB_SIMD", "scalar")
    kernel, fn = _build(_func(4, 2, 16, "float32", "BottomRight", 3, 2.0, True))
    assert kernel == "loops (attention: no vector unit)"
    got, f64, _ = _run(fn, "float32", 2, 5, 9, 4, 2, 16, True, scale_q=3.0)
    np.testing.assert_allclose(got, reference(*f64[:3], f64[3], "BottomRight", 3, 2.0), rtol=2e-5, atol=2e-5)
