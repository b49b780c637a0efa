"""``nn.op.normalize`` (torch.nn.functional.normalize), ``nn.op.mean_pooling`` (sentence-transformers'
mean pooling) and ``nn.GroupNorm`` (issue 14), compiled with ``Module.jit`` and checked against
float64 numpy references written here, with symbolic batch / sequence dims."""

import numpy as np
import pytest

from builder import nn
from builder.nn import op
from helpers.functional import export, jit


def rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def close(got, want, tol=1e-6):
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


def normalize_ref(x, p, axis, eps):
    """torch.nn.functional.normalize: x / max(||x||_p, eps)."""
    x = x.astype(np.float64)
    if np.isinf(p):
        norm = np.abs(x).max(axis, keepdims=True)
    else:
        norm = (np.abs(x) ** p).sum(axis, keepdims=True) ** (1.0 / p)
    return x / np.maximum(norm, eps)


@pytest.mark.parametrize("p,axis", [(2.0, -1), (1, 1), (3.0, -1), (float("inf"), 0)])
def test_normalize(p, axis):
    f = jit(lambda x: op.normalize(x, p=p, axis=axis), x=(["b", "s", 6], "float32"))
    for b, s in ((1, 1), (2, 5)):
        x = rand(b, s, 6, seed=s)
        x[0, 0] = 0.0                    # a zero vector: 0 / eps = 0, not NaN
        close(f(x), normalize_ref(x, p, axis, 1e-12), tol=2e-6)


def test_normalize_float64_eps_and_errors():
    f = jit(lambda x: op.normalize(x, eps=0.5), x=([3, 4], "float64"))
    x = rand(3, 4, dtype="float64", seed=1) * 0.1
    close(f(x), normalize_ref(x, 2.0, -1, 0.5), tol=1e-12)
    with pytest.raises(TypeError, match="normalize: x must be a floating-point tensor, got int32"):
        export(lambda x: op.normalize(x), x=([3, 4], "int32"))
    with pytest.raises(ValueError, match="p must be > 0"):
        export(lambda x: op.normalize(x, p=0), x=([3, 4], "float32"))


def mean_pooling_ref(x, mask):
    """sentence-transformers: sum(x * m, 1) / clamp(sum(m, 1), min=1e-9)."""
    m = mask.astype(np.float64)[:, :, None]
    return (x.astype(np.float64) * m).sum(1) / np.maximum(m.sum(1), 1e-9)


@pytest.mark.parametrize("mdtype", ["int64", "bool", "float32"])
def test_mean_pooling(mdtype):
    f = jit(lambda x, m: op.mean_pooling(x, m), x=(["b", "s", 8], "float32"), m=(["b", "s"], mdtype))
    for b, s in ((1, 1), (3, 7)):
        x = rand(b, s, 8, seed=b + s)
        m = (np.random.default_rng(s).random((b, s)) < 0.6).astype(mdtype)
        m[0, 0] = 1
        if b > 1:
            m[1] = 0                     # no token kept: zeros
        y = f(x, m)
        close(y, mean_pooling_ref(x, m))
        if b > 1:
            assert not y[1].any()


def test_mean_pooling_then_normalize_and_errors():
    f = jit(lambda x, m: op.normalize(op.mean_pooling(x, m)), x=([2, "s", 5], "float64"), m=([2, "s"], "int32"))
    x, m = rand(2, 4, 5, dtype="float64"), np.array([[1, 1, 0, 0], [1, 1, 1, 1]], "int32")
    close(f(x, m), normalize_ref(mean_pooling_ref(x, m), 2.0, -1, 1e-12), tol=1e-12)
    with pytest.raises(ValueError, match=r"mean_pooling: the seq of token_embeddings \(2, 4, 5\) is 4"):
        export(lambda x, m: op.mean_pooling(x, m), x=([2, 4, 5], "float32"), m=([2, 3], "int32"))
    with pytest.raises(ValueError, match="must be \\(batch, seq, hidden\\)"):
        export(lambda x, m: op.mean_pooling(x, m), x=([2, 4], "float32"), m=([2, 4], "int32"))


def group_norm_ref(x, g, weight, bias, eps):
    """torch.nn.functional.group_norm on (N, C, *)."""
    x = x.astype(np.float64)
    n, c = x.shape[:2]
    xg = x.reshape(n, g, -1)
    y = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * weight.reshape(shape) + bias.reshape(shape)


def test_group_norm_module():
    m = nn.GroupNorm(3, 6, eps=1e-4)
    assert [name for name, _ in m.named_parameters()] == ["weight", "bias"]
    assert m.weight.shape == [6] or tuple(m.weight.shape) == (6,)
    w, b = rand(6, seed=7), rand(6, seed=8)
    m.weight.data, m.bias.data = w, b
    f = m.jit(spec={"forward": {"x": nn.spec.Tensor(["n", 6, "l"], "float32")}})["forward"]
    for n, length in ((1, 1), (2, 5)):
        x = rand(n, 6, length, seed=length)
        close(f(x), group_norm_ref(x, 3, w, b, 1e-4), tol=2e-5)
    plain = nn.GroupNorm(2, 4, affine=False)
    assert list(plain.named_parameters()) == []
    g = plain.jit(spec={"forward": {"x": nn.spec.Tensor([2, 4, 3, 3], "float32")}})["forward"]
    x = rand(2, 4, 3, 3, seed=3)
    close(g(x), group_norm_ref(x, 2, np.ones(4), np.zeros(4), 1e-5), tol=2e-5)
    with pytest.raises(ValueError, match="GroupNorm: num_channels \\(6\\) must be divisible by num_groups \\(4\\)"):
        nn.GroupNorm(4, 6)
