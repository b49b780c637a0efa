"""Every layer compiled to native code (``Module.jit``) against the HF / PyTorch reference
outputs in tests/data and float64 numpy, with symbolic dims bound to several sizes."""
from pathlib import Path

import numpy as np
import pytest

from builder import nn

DATA = Path(__file__).resolve().parents[1] / "data"


def ref(name):
    return np.load(DATA / f"{name}.npz")


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol)


def test_layernorm_hf():
    d = ref("layernorm")
    m = nn.LayerNorm(384, eps=float(d["eps"]))
    m.weight.data, m.bias.data = d["weight"], d["bias"]
    f = m.jit(spec={"forward": {"x": nn.spec.Tensor(["batch", "seq", 384], "float32")}})
    close(f["forward"](d["x"]), d["y"], atol=2e-6)
    x = d["x"][:1, :3]
    mean = x.astype(np.float64).mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    close(f["forward"](x), (x - mean) / np.sqrt(var + 1e-12) * d["weight"] + d["bias"], atol=2e-6)


def test_rmsnorm_hf():
    d = ref("rmsnorm")
    m = nn.RMSNorm(256, axes=-1, epsilon=float(d["eps"]), bias=False)
    m.weight.data = d["weight"]
    f = m.jit(spec={"forward": {"x": nn.spec.Tensor(["batch", "seq", 256], "float32")}})
    close(f["forward"](d["x"]), d["y"])


@pytest.mark.parametrize("name", ["conv1d_s1", "conv1d_s2"])
def test_conv1d_hf(name):
    d = ref(name)
    m = nn.Conv1D(80, 64, kernel_size=int(d["kernel_size"]), stride=int(d["stride"]),
                  padding=int(d["padding"]))
    m.weight.data, m.bias.data = d["weight"], d["bias"]
    f = m.jit(spec={"forward": {"x": nn.spec.Tensor(["batch", 80, 50], "float32")}})
    close(f["forward"](d["x"]), d["y"], atol=1e-5)
    close(f["forward"](d["x"][:1]), d["y"][:1], atol=1e-5)


def test_embedding_hf():
    d = ref("embedding")
    m = nn.Embedding(1000, 64)
    m.weight.data = d["weight"]
    f = m.jit(spec={"forward": {"x": nn.spec.Tensor(["batch", "seq"], "int64")}})
    close(f["forward"](d["ids"]), d["y"], rtol=0, atol=0)
    close(f["forward"](d["ids"][:1, :1]), d["y"][:1, :1], rtol=0, atol=0)


@pytest.mark.parametrize("name,approx", [("gelu_exact", None), ("gelu_tanh", "tanh")])
def test_gelu_hf(name, approx):
    d = ref(name)

    class G(nn.Module):
        def forward(self, x):
            return nn.op.gelu(x, approximate=approx)

    f = G().jit(spec={"forward": {"x": nn.spec.Tensor(["n", 33], "float32")}})
    close(f["forward"](d["x"]), d["y"], atol=1e-6)


def test_softmax_hf_large_shift():
    d = ref("softmax")

    class S(nn.Module):
        def forward(self, x):
            return nn.op.softmax(x, axis=-1)

    f = S().jit(spec={"forward": {"x": nn.spec.Tensor(["b", 4, "n"], "float32")}})
    y = f["forward"](d["x"])
    assert np.isfinite(y).all()
    close(y, d["y"], atol=1e-6)


@pytest.mark.parametrize("n", [1, 7, 33])
def test_linear_bias_symbolic_batch(n):
    rng = np.random.default_rng(n)
    m = nn.Linear(19, 13, bias=True)
    m.weight.data = rng.standard_normal((13, 19)).astype(np.float32)
    m.bias.data = rng.standard_normal(13).astype(np.float32)
    f = m.jit(spec={"forward": {"x": nn.spec.Tensor(["n", 19], "float32")}})
    x = rng.standard_normal((n, 19)).astype(np.float32)
    close(f["forward"](x), x.astype(np.float64) @ m.weight.data.T.astype(np.float64) + m.bias.data)


@pytest.mark.parametrize("n", [1, 9])
def test_relu_silu_float16(n):
    class M(nn.Module):
        def forward(self, x):
            return nn.op.relu(x) + nn.op.silu(x)

    f = M().jit(spec={"forward": {"x": nn.spec.Tensor(["n", 37], "float16")}})
    x = np.random.default_rng(n).standard_normal((n, 37)).astype(np.float16)
    xd = x.astype(np.float64)
    y = f["forward"](x)
    assert y.dtype == np.float16
    close(y, np.maximum(xd, 0) + xd / (1 + np.exp(-xd)), rtol=2e-3, atol=2e-3)
