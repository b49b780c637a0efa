"""RewriteAttention: attention written out as ``softmax(q @ k.T * c + mask) @ v`` over head-split
(B, H, S, D) operands (HF eager attention, ONNX exports) becomes one ``R.nn.attention``, and the
head-split / merge transposes cancel. Against float64 numpy; the forms that must stay as written
(an intermediate used twice, the mask before the scale, softmax over another axis, broadcast batches)
keep their kernels and their values."""
import numpy as np
import pytest
from helpers.functional import exported, jit_kernels

from builder.nn import op
from builder.transform import RewriteAttention

RNG = np.random.default_rng(5)
B, S, H, D = 2, 9, 3, 8


def heads(t, h=H):
    """(B, S, h * D) -> (B, h, S, D), as the models split heads."""
    return op.permute_dims(op.reshape(t, [t.shape[0], t.shape[1], h, D]), [0, 2, 1, 3])


def merge(o):
    """(B, H, S, D) -> (B, S, H * D)."""
    return op.reshape(op.permute_dims(o, [0, 2, 1, 3]), [o.shape[0], o.shape[2], o.shape[1] * o.shape[3]])


def np_heads(t, h=H):
    return t.astype(np.float64).reshape(t.shape[0], t.shape[1], h, D).transpose(0, 2, 1, 3)


def np_softmax(s, axis=-1):
    p = np.exp(s - s.max(axis, keepdims=True))
    return p / p.sum(axis, keepdims=True)


def np_attention(q, k, v, scale, mask=None):
    s = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None:
        s = s + mask
    o = np_softmax(s) @ v
    return o.transpose(0, 2, 1, 3).reshape(o.shape[0], o.shape[2], -1)


def one_attention(fam) -> bool:
    """Whether the kernels are one attention kernel and transposes (of operands given (B, H, S, D))."""
    att = [n for n, k in fam.items() if k.startswith("attention/")]
    return len(att) == 1 and all(n in att or n.startswith("transpose") for n in fam)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def test_eager_attention_becomes_one_kernel_without_transposes():
    """HF's eager form (scale as a multiply after ``q @ k.T``, an additive padding mask (B, 1, 1, S)
    with ``finfo.min``): one attention kernel, no softmax, matmul or transpose kernels; float64
    numpy's values."""
    def fn(xq, xk, xv, mask):
        s = op.matmul(heads(xq), op.permute_dims(heads(xk), [0, 1, 3, 2])) * (1.0 / np.sqrt(D))
        return merge(op.matmul(op.softmax(s + mask, axis=-1), heads(xv)))

    spec = dict(xq=(["b", "s", H * D], "float32"), xk=(["b", "s", H * D], "float32"),
                xv=(["b", "s", H * D], "float32"), mask=(["b", 1, 1, "s"], "float32"))
    f, fam = jit_kernels(fn, **spec)
    assert [k.split("/")[0] for k in fam.values()] == ["attention"], fam
    for b, s in ((B, S), (1, 1), (3, 17)):
        xq, xk, xv = rand(b, s, H * D), rand(b, s, H * D), rand(b, s, H * D)
        mask = np.zeros((b, 1, 1, s), np.float32)
        mask[-1, ..., s // 2 + 1:] = np.finfo(np.float32).min
        want = np_attention(np_heads(xq), np_heads(xk), np_heads(xv), 1 / np.sqrt(D), mask.astype(np.float64))
        np.testing.assert_allclose(f(xq, xk, xv, mask), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", ["divide", "scaled_operands", "no_scale", "mask_first", "mask_2d", "full_mask_first"])
def test_scale_and_mask_forms(form):
    """The scale as a divide, as scalar multiples of q and k (torch's decomposed SDPA), absent (1); the
    mask added from the left (also one of the scores' full shape) or 2-D (S, S) (broadcast): one
    attention kernel, numpy's values."""
    mshape = {"mask_2d": [S, S], "full_mask_first": [B, H, S, S]}.get(form, [B, 1, S, S])

    def fn(q, k, v, mask):
        if form == "scaled_operands":
            s = op.matmul(q * 0.5, op.permute_dims(k, [0, 1, 3, 2]) * 0.25)
        else:
            s = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2]))
            if form == "divide":
                s = s / 4.0
            elif form != "no_scale":
                s = s * 0.125
        s = mask + s if form in ("mask_first", "full_mask_first") else s + mask
        return op.matmul(op.softmax(s, axis=3), v)

    t = ([B, H, S, D], "float32")
    f, fam = jit_kernels(fn, q=t, k=t, v=t, mask=(mshape, "float32"))
    assert one_attention(fam), fam
    q, k, v, mask = rand(B, H, S, D), rand(B, H, S, D), rand(B, H, S, D), rand(*mshape)
    scale = {"divide": 0.25, "no_scale": 1.0}.get(form, 0.125)
    want = np_attention(*(a.astype(np.float64) for a in (q, k, v)), scale, mask.astype(np.float64))
    got = f(q, k, v, mask)
    np.testing.assert_allclose(got, want.reshape(B, S, H, D).transpose(0, 2, 1, 3), rtol=1e-5, atol=1e-5)


def test_multi_query_keys_broadcast_over_heads():
    """Keys and values with one head (the matmul's broadcast over H): the attention op's H_kv = 1."""
    def fn(q, k, v):
        return op.matmul(op.softmax(op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * 0.3, axis=-1), v)

    f, fam = jit_kernels(fn, q=([B, 4, S, D], "float32"), k=([B, 1, S, D], "float32"), v=([B, 1, S, 5], "float32"))
    assert one_attention(fam), fam
    q, k, v = rand(B, 4, S, D), rand(B, 1, S, D), rand(B, 1, S, 5)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * 0.3
    np.testing.assert_allclose(f(q, k, v), np_softmax(s) @ v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("float32_softmax", [False, True])
def test_16_bit_attention_within_rounding(float32_softmax):
    """float16 operands: one attention kernel (float32 sums and softmax), within float16 rounding of
    float64 numpy; also with the softmax taken in float32 as HF's eager attention of 16-bit models does
    (``softmax(s, dtype=float32).to(float16)``: ``astype(softmax(astype(s, float32)), float16)``)."""
    def fn(q, k, v):
        s = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * 0.35
        p = (op.astype(op.softmax(op.astype(s, "float32"), axis=-1), "float16") if float32_softmax
             else op.softmax(s, axis=-1))
        return op.matmul(p, v)

    t = ([B, H, S, D], "float16")
    f, fam = jit_kernels(fn, q=t, k=t, v=t)
    assert one_attention(fam), fam
    q, k, v = (rand(B, H, S, D, dtype="float16") for _ in range(3))
    want = np_attention(*(a.astype(np.float64) for a in (q, k, v)), 0.35)
    got = np.asarray(f(q, k, v), dtype=np.float64).transpose(0, 2, 1, 3).reshape(B, S, -1)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("form", ["scores_used_twice", "mask_before_scale", "softmax_axis_2", "batch_broadcast"])
def test_forms_left_as_written(form):
    """Where the rewrite would change what is computed, the graph stays: the scores also returned,
    ``(s + mask) * c``, softmax over the query axis, keys broadcast over the batch. Values as numpy."""
    kb = 1 if form == "batch_broadcast" else B

    def fn(q, k, v, mask):
        s = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2]))
        s = (s + mask) * 0.5 if form == "mask_before_scale" else s * 0.5 + mask
        o = op.matmul(op.softmax(s, axis=2 if form == "softmax_axis_2" else -1), v)
        return (o, s) if form == "scores_used_twice" else o

    spec = dict(q=([B, H, S, D], "float32"), k=([kb, H, S, D], "float32"), v=([kb, H, S, D], "float32"),
                mask=([B, 1, 1, S], "float32"))
    mod = RewriteAttention()(exported(fn, **spec))
    assert "R.nn.attention" not in mod.script()
    f, fam = jit_kernels(fn, **spec)
    assert not any(k.startswith("attention") for k in fam.values()), fam
    q, k, v, mask = rand(B, H, S, D), rand(kb, H, S, D), rand(kb, H, S, D), rand(B, 1, 1, S)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2)
    s = (s + mask) * 0.5 if form == "mask_before_scale" else s * 0.5 + mask
    ax = 2 if form == "softmax_axis_2" else -1
    want = np_softmax(s, ax) @ v
    got = f(q, k, v, mask)
    if form == "scores_used_twice":
        np.testing.assert_allclose(got[1], s, rtol=1e-5, atol=1e-5)
        got = got[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fully_masked_row_gives_zeros():
    """A query row whose keys are all masked with -inf: zeros (the attention op's rule, PyTorch's
    ``_safe_softmax``) where the written-out softmax gave NaN; the other rows as numpy."""
    def fn(q, k, v, mask):
        return op.matmul(op.softmax(op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) + mask, axis=-1), v)

    t = ([1, 1, 4, D], "float32")
    f, _ = jit_kernels(fn, q=t, k=t, v=t, mask=([1, 1, 4, 4], "float32"))
    q, k, v = rand(1, 1, 4, D), rand(1, 1, 4, D), rand(1, 1, 4, D)
    mask = np.zeros((1, 1, 4, 4), np.float32)
    mask[0, 0, 2] = -np.inf
    got = f(q, k, v, mask)
    assert np.all(got[0, 0, 2] == 0)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2)
    want = np_softmax(s) @ v
    rows = [0, 1, 3]
    np.testing.assert_allclose(got[0, 0, rows], want[0, 0, rows], rtol=1e-5, atol=1e-5)


def test_transpose_of_a_transpose_is_composed():
    """``permute_dims(permute_dims(x, a), b)``: one transpose with the composed axes, none when they
    cancel."""
    f, fam = jit_kernels(lambda x: op.permute_dims(op.permute_dims(x, [1, 2, 0]), [2, 0, 1]) + 1.0,
                         x=([3, 4, 5], "float32"))
    assert "transpose" not in " ".join(fam), fam
    g, gam = jit_kernels(lambda x: op.permute_dims(op.permute_dims(x, [1, 2, 0]), [1, 0, 2]),
                         x=([3, 4, 5], "float32"))
    assert len(gam) == 1, gam
    x = rand(3, 4, 5)
    np.testing.assert_array_equal(f(x), x + 1.0)
    np.testing.assert_array_equal(g(x), x.transpose(1, 2, 0).transpose(1, 0, 2))


def test_sdpa_as_torch_exports_it_to_onnx():
    """torch's ONNX export of ``scaled_dot_product_attention``: q and k.T each times ``sqrt(scale)``, an
    additive -inf mask, ``where(isnan(p), 0, p)`` after the softmax (imported as ``p != p``), then a
    reshape to the same shape before the head merge: one attention kernel, no transposes; a fully
    masked row is zeros in both."""
    def fn(xq, xk, xv, mask):
        s = op.matmul(heads(xq) * 0.5, op.permute_dims(heads(xk), [0, 1, 3, 2]) * 0.5) + mask
        p = op.softmax(s, axis=-1)
        o = op.matmul(op.where(op.not_equal(p, p), 0.0, p), heads(xv))
        o = op.reshape(o, [o.shape[0], H, o.shape[2], D])
        return op.reshape(op.permute_dims(o, [0, 2, 1, 3]), [o.shape[0], o.shape[2], H * D])

    spec = dict(xq=(["b", "s", H * D], "float32"), xk=(["b", "s", H * D], "float32"),
                xv=(["b", "s", H * D], "float32"), mask=(["b", 1, "s", "s"], "float32"))
    f, fam = jit_kernels(fn, **spec)
    assert [k.split("/")[0] for k in fam.values()] == ["attention"], fam
    xq, xk, xv = rand(B, S, H * D), rand(B, S, H * D), rand(B, S, H * D)
    mask = np.zeros((B, 1, S, S), np.float32)
    mask[1, 0, 3] = -np.inf                      # query 3 of the second sequence sees no key
    mask[0, 0, :, 5:] = -np.inf
    got = f(xq, xk, xv, mask)
    m = mask.astype(np.float64)
    m[1, 0, 3] = 0.0                             # (numpy's softmax of an all -inf row is NaN: compare the rest)
    want = np_attention(np_heads(xq), np_heads(xk), np_heads(xv), 0.25, m)
    assert np.all(got[1, 3] == 0)
    keep = np.ones((B, S), bool)
    keep[1, 3] = False
    np.testing.assert_allclose(got[keep], want[keep], rtol=1e-5, atol=1e-5)


def test_keys_repeated_over_heads_are_read_once():
    """GQA written out (HF's ``repeat_kv``: ``reshape(broadcast_to(expand_dims(k, 2), (B, Hk, n, S, D)))``
    for keys and values): the attention op gets the Hk heads themselves (no repeated copy is made, no
    transpose is left); numpy's values with head ``h`` reading key head ``h // n``."""
    hk, n = 2, 3

    def rep(t):
        e = op.broadcast_to(op.unsqueeze(t, 2), [t.shape[0], hk, n, t.shape[2], D])
        return op.reshape(e, [t.shape[0], hk * n, t.shape[2], D])

    def fn(xq, xk, xv):
        k, v = rep(heads(xk, hk)), rep(heads(xv, hk))
        p = op.softmax(op.matmul(heads(xq, hk * n), op.permute_dims(k, [0, 1, 3, 2])) * 0.3, axis=-1)
        o = op.matmul(p, v)
        return op.reshape(op.permute_dims(o, [0, 2, 1, 3]), [o.shape[0], o.shape[2], hk * n * D])

    spec = dict(xq=(["b", "s", hk * n * D], "float32"), xk=(["b", "s", hk * D], "float32"),
                xv=(["b", "s", hk * D], "float32"))
    text = RewriteAttention()(exported(fn, **spec)).script()
    assert "R.nn.attention" in text and "broadcast_to" not in text, text
    f, fam = jit_kernels(fn, **spec)
    assert [k.split("/")[0] for k in fam.values()] == ["attention"], fam
    xq, xk, xv = rand(B, S, hk * n * D), rand(B, S, hk * D), rand(B, S, hk * D)
    kk, vv = (np.repeat(np_heads(t, hk), n, axis=1) for t in (xk, xv))
    np.testing.assert_allclose(f(xq, xk, xv), np_attention(np_heads(xq, hk * n), kk, vv, 0.3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_dims", [0, 2, 3])
def test_3d_batched_attention(mask_dims):
    """``torch.bmm`` attention over (batch x heads, S, D) operands, keys transposed, a scale, no mask or a
    (S, S) / (N, S, S) mask: one attention kernel (the op's one head, operands reshaped, not copied)."""
    n = B * H
    mshape = {2: [S, S], 3: [n, S, S]}.get(mask_dims)

    def fn(q, k, v, *mask):
        s = op.matmul(q, op.permute_dims(k, [0, 2, 1])) * 0.3
        if mask:
            s = s + mask[0]
        return op.matmul(op.softmax(s, axis=-1), v)

    t = ([n, S if mshape else "s", D], "float32")
    spec = dict(q=t, k=t, v=t, **({"mask": (mshape, "float32")} if mshape else {}))
    f, fam = jit_kernels(fn, **spec)
    assert [k.split("/")[0] for k in fam.values()] == ["attention"], fam
    q, k, v = rand(n, S, D), rand(n, S, D), rand(n, S, D)
    mask = [rand(*mshape)] if mshape else []
    sc = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * 0.3 + (mask[0] if mask else 0.0)
    want = np_softmax(sc) @ v
    np.testing.assert_allclose(f(q, k, v, *mask), want, rtol=1e-5, atol=1e-5)
