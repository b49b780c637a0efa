"""Matmuls whose right operand the linear kernels read as stored (``patterns.stored_weight``): batched
matmuls of two activations (attention's ``q @ k.T`` and ``p @ v``, ``torch.bmm``; issue 15: "batched
matmul of attention shapes"), one matrix per batch (``DenseWeight.batched``), ``(*B, N, K)`` behind a
transpose or ``(*B, K, N)``; and ``x @ W`` with ``W`` stored ``(in, out)`` (``DenseWeight.kn``: ONNX
MatMul's ``B``, GPT-2's ``Conv1D``). Against float64 numpy over symbolic batch and row counts, row /
panel tails, row chunks inside a batch, 16-bit data, the emulated vector widths, and the cases left to
the loops (broadcast batch dims, K dims the shapes cannot prove equal)."""
import numpy as np
import pytest
from helpers.functional import jit_kernels as compiled

from builder.codegen.kernels.linear import TUNING
from builder.nn import op

RNG = np.random.default_rng(31)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def swap(t):
    return np.swapaxes(t, -1, -2)


@pytest.mark.parametrize("transposed", [False, True])
def test_attention_shaped_products_match_float64(transposed):
    """``a @ b`` with ``b`` as stored (``p @ v``) or ``a @ permute_dims(t)`` (``q @ k.T``), 4-D with
    symbolic batch and rows: 1 row per batch (decode), 7, 41 (MiniLM), 130; N = 37 (a panel tail)."""
    if transposed:
        fn = lambda a, t: op.matmul(a, op.permute_dims(t, [0, 1, 3, 2]))   # noqa: E731
        f, fam = compiled(fn, a=(["b", 3, "m", 45], "float32"), t=(["b", 3, 37, 45], "float32"))
    else:
        f, fam = compiled(lambda a, t: op.matmul(a, t), a=(["b", 3, "m", 45], "float32"),
                          t=(["b", 3, 45, 37], "float32"))
    assert list(fam) == ["matmul"] and fam["matmul"].startswith("linear/"), fam
    for bsz, m in ((1, 1), (2, 7), (2, 41), (1, 130)):
        a = rand(bsz, 3, m, 45)
        t = rand(bsz, 3, 37, 45) if transposed else rand(bsz, 3, 45, 37)
        want = a.astype(np.float64) @ (swap(t) if transposed else t).astype(np.float64)
        np.testing.assert_allclose(f(a, t), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_row_chunks_inside_each_batch(threads, monkeypatch):
    """Rows split into chunks (small ``gemm_chunk_bytes``) that never cross a batch: each packs its own
    batch's matrix; 3-D (``torch.bmm``), several chunks per batch and a short last one."""
    from runtime import threadpool

    monkeypatch.setitem(TUNING, "gemm_chunk_bytes", 4096)
    monkeypatch.setitem(TUNING, "gemm_chunk_min_rows", 6)
    f, fam = compiled(lambda a, t: op.matmul(a, t), a=(["b", "m", 32], "float32"), t=(["b", 32, 70], "float32"))
    assert fam["matmul"].startswith("linear/"), fam
    old = threadpool.set_num_threads(threads)
    try:
        for bsz, m in ((3, 100), (2, 37), (5, 6)):
            a, t = rand(bsz, m, 32), rand(bsz, 32, 70)
            np.testing.assert_allclose(f(a, t), a.astype(np.float64) @ t, rtol=1e-4, atol=1e-4)
    finally:
        threadpool.set_num_threads(old)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_operands(dtype):
    """16-bit ``q @ k.T`` (rows converted as the panels are packed) and ``p @ v`` (``(K, N)`` rows widened
    as they are copied) on the kernel, float32 sums: within 16-bit rounding of float64 numpy."""
    from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

    def as16(a):
        return float32_to_bfloat16_bits(a) if dtype == "bfloat16" else a.astype("float16")

    def as64(a):
        return (bfloat16_bits_to_float32(a) if dtype == "bfloat16" else a).astype(np.float64)

    f, fam = compiled(lambda a, t: op.matmul(a, op.permute_dims(t, [0, 2, 1])),
                      a=(["b", "m", 40], dtype), t=(["b", 24, 40], dtype))
    g, gam = compiled(lambda a, t: op.matmul(a, t), a=(["b", "m", 40], dtype), t=(["b", 40, 24], dtype))
    assert fam["matmul"].startswith("linear/") and gam["matmul"].startswith("linear/"), (fam, gam)
    for bsz, m in ((1, 3), (2, 50)):
        a, t = as16(rand(bsz, m, 40)), as16(rand(bsz, 24, 40))
        want = as64(a) @ swap(as64(t))
        np.testing.assert_allclose(as64(f(a, t)), want, rtol=2e-2, atol=5e-2)
        np.testing.assert_allclose(as64(g(a, np.ascontiguousarray(swap(t)))), want, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("shape", ["avx2", "sse", "avx512"])
def test_every_vector_width(shape, monkeypatch):
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    f, fam = compiled(lambda a, t: op.matmul(a, t), a=(["b", "m", 19], "float32"), t=(["b", 19, 29], "float32"))
    assert fam == {"matmul": f"linear/{shape}"}, fam
    for bsz, m in ((1, 1), (3, 17), (2, 64)):
        a, t = rand(bsz, m, 19), rand(bsz, 19, 29)
        np.testing.assert_allclose(f(a, t), a.astype(np.float64) @ t, rtol=1e-4, atol=1e-4)


def test_broadcast_batches_and_unproven_k_stay_in_the_loops():
    """Batch dims that broadcast (``(2, 3, m, K) @ (1, 3, K, N)``) and K dims the shapes cannot prove
    equal are the loops' (numpy's values; a K mismatch is an error, not a read past the end)."""
    f, fam = compiled(lambda a, t: op.matmul(a, t), a=([2, 3, "m", 8], "float32"), t=([1, 3, 8, 5], "float32"))
    assert fam["matmul"] == "loops", fam
    a, t = rand(2, 3, 4, 8), rand(1, 3, 8, 5)
    np.testing.assert_allclose(f(a, t), a.astype(np.float64) @ t, rtol=1e-5, atol=1e-5)
    g, gam = compiled(lambda a, t: op.matmul(a, t), a=(["b", "m", "k"], "float32"), t=(["b", "j", 6], "float32"))
    assert not gam["matmul"].startswith("linear/"), gam
    a, t = rand(2, 3, 7), rand(2, 7, 6)
    np.testing.assert_allclose(g(a, t), a.astype(np.float64) @ t, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception):
        g(rand(2, 3, 7), rand(2, 5, 6))


def test_scaled_masked_scores_are_one_kernel():
    """HF's eager attention scores, ``(q @ k.T) * scale + mask`` with a (B, 1, 1, S) padding mask: the
    scale and the mask are the batched GEMM's epilogue (one kernel), then the softmax. (With ``p @ v``
    after it the whole attention becomes the attention op: ``tests/transform/test_rewrite_attention.py``.)"""
    def probs(q, k, mask):
        s = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * 0.125 + mask
        return op.softmax(s, axis=-1)

    f, fam = compiled(probs, q=(["b", 2, "s", 16], "float32"), k=(["b", 2, "s", 16], "float32"),
                      mask=(["b", 1, 1, "s"], "float32"))
    linear = sorted(n for n, k in fam.items() if k.startswith("linear/"))
    assert linear == ["fused_matmul_multiply_add"], fam
    for bsz, s in ((1, 1), (2, 9), (1, 70)):
        q, k = rand(bsz, 2, s, 16), rand(bsz, 2, s, 16)
        mask = np.where(RNG.random((bsz, 1, 1, s)) < 0.2, -1e4, 0.0).astype(np.float32)
        sc = q.astype(np.float64) @ swap(k) * 0.125 + mask
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(f(q, k, mask), p, rtol=1e-4, atol=1e-4)


def test_a_weight_stored_in_out():
    """``gelu(x @ W + b)`` with ``W`` ``(in, out)`` as it is: one GEMM kernel with the epilogue, for 1 row
    (decode), 5 and 100 rows, 2-D and 3-D ``x``, N = 40 (a panel tail); a 1-D ``x`` is a row (numpy's
    rule); a float16 ``W`` too, its rows widened as they are copied."""
    from math import erf

    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))
    f, fam = compiled(lambda x, w, b: op.gelu(op.matmul(x, w) + b), x=([2, "n", 64], "float32"),
                      w=([64, 40], "float32"), b=([40], "float32"))
    assert fam == {"fused_matmul_add_gelu": fam.get("fused_matmul_add_gelu")}, fam
    assert fam["fused_matmul_add_gelu"].startswith("linear/"), fam
    w, b = rand(64, 40), rand(40)
    for n in (1, 5, 100):
        x = rand(2, n, 64)
        np.testing.assert_allclose(f(x, w, b), gelu(x.astype(np.float64) @ w + b), rtol=1e-4, atol=1e-4)
    g, gam = compiled(lambda x, w: op.matmul(x, w), x=([64], "float32"), w=([64, 40], "float32"))
    assert gam["matmul"].startswith("linear/"), gam
    x = rand(64)
    y = g(x, w)
    assert y.shape == (40,)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    h, ham = compiled(lambda x, w: op.matmul(x, w), x=(["n", 64], "float16"), w=([64, 40], "float16"))
    assert ham["matmul"].startswith("linear/"), ham
    x = rand(3, 64, dtype="float16")
    np.testing.assert_allclose(h(x, w.astype("float16")).astype(np.float64),
                               x.astype(np.float64) @ w.astype("float16").astype(np.float64), rtol=2e-2, atol=2e-2)


def test_a_model_weight_stored_in_out_is_read_in_row_tiles():
    """A model parameter stored (in, out) (GPT-2's ``Conv1D``): TileWeights gives the kernel the row tiles
    of its transpose once, so 1 row runs on the row-tiled GEMV and 100 on the GEMM, both exact to
    float64 numpy."""
    from builder import nn

    class Conv1DLike(nn.Module):
        def __init__(self):
            self.weight = nn.Parameter((48, 32), "float32")
            self.bias = nn.Parameter((32,), "float32")

        def forward(self, x):
            return op.matmul(x, self.weight) + self.bias

    net = Conv1DLike()
    w, b = rand(48, 32), rand(32)
    net.weight.data, net.bias.data = w, b
    m = net.jit({"forward": {"x": nn.spec.Tensor([1, "n", 48], "float32")}})
    fam = {k: v["kernel"] for k, v in m.exe.kernels.items()}
    assert any(v.startswith("linear/") and "tiles" in v for v in fam.values()), fam
    for n in (1, 9, 100):
        x = rand(1, n, 48)
        np.testing.assert_allclose(m["forward"](x), x.astype(np.float64) @ w + b, rtol=1e-4, atol=1e-4)
