"""A ``permute_dims`` of a matmul's result (with or without an elementwise epilogue) is folded into the
linear kernel's store (issue 15: "transposes folded into the consumer's indexing"; a Conv1D's NCW result
straight from its NWC GEMM): one kernel, no transpose pass, the same values as float64 numpy, on the
GEMV and GEMM paths, with symbolic dims, 16-bit data, two weights, quantized weights and the emulated
vector widths."""
import numpy as np
import pytest
from helpers.functional import jit_kernels as compiled
from helpers.linear_kernels import transposed_bias_func

from builder import nn
from builder.nn import op

RNG = np.random.default_rng(27)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def assert_one_linear_kernel(fam: dict, name: str):
    assert list(fam) == [name], fam
    assert fam[name].startswith("linear/"), fam


@pytest.mark.parametrize("axes", [[0, 2, 1], [1, 0, 2], [2, 1, 0], [1, 2, 0]])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_transposed_linear_with_bias_matches_float64(axes, dtype):
    """``permute_dims(x @ W.T + b, axes)`` over symbolic ``(n, m)``: rows from 1 (the GEMV) to 67
    (the GEMM with a row tail), N = 37 (a panel tail)."""
    f, fam = compiled(lambda x, w, b: op.permute_dims(op.matmul(x, op.permute_dims(w)) + b, axes),
                      x=(["n", "m", 24], dtype), w=([37, 24], dtype), b=([37], dtype))
    assert_one_linear_kernel(fam, "fused_matmul_add_permute_dims")
    w, b = rand(37, 24, dtype=dtype), rand(37, dtype=dtype)
    tol = 1e-4 if dtype == "float32" else 2e-2
    for n, m in ((1, 1), (2, 3), (1, 30), (3, 67)):
        x = rand(n, m, 24, dtype=dtype)
        want = (x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)).transpose(axes)
        y = f(x, w, b)
        assert y.dtype == np.dtype(dtype) and y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol)


def test_transposed_4d_and_a_bare_matmul():
    """A 4-D ``(a, s, h, d) -> (a, h, s, d)`` transpose (the last dim stays: contiguous rows) of a bare
    matmul, and one that moves the last dim."""
    for axes in ([0, 2, 1, 3], [0, 3, 1, 2]):
        f, fam = compiled(lambda x, w: op.permute_dims(op.matmul(x, op.permute_dims(w)), axes),
                          x=(["a", "s", 5, 16], "float32"), w=([40, 16], "float32"))
        assert_one_linear_kernel(fam, "fused_matmul_permute_dims")
        w = rand(40, 16)
        for a, s in ((1, 1), (2, 9), (1, 31)):
            x = rand(a, s, 5, 16)
            np.testing.assert_allclose(f(x, w), (x.astype(np.float64) @ w.T.astype(np.float64)).transpose(axes),
                                       rtol=1e-4, atol=1e-4)


def test_transposed_gated_pair():
    """Two weights (LLaMA's gated MLP) and a transposed store: ``permute(silu(x Wg.T) * (x Wu.T))``."""
    f, fam = compiled(lambda x, wg, wu: op.permute_dims(op.silu(op.matmul(x, op.permute_dims(wg)))
                                                       * op.matmul(x, op.permute_dims(wu)), [0, 2, 1]),
                      x=([1, "m", 32], "float32"), wg=([48, 32], "float32"), wu=([48, 32], "float32"))
    (name,) = fam
    assert fam[name].startswith("linear/") and name.endswith("permute_dims"), fam
    wg, wu = rand(48, 32), rand(48, 32)
    for m in (1, 7, 50):
        x = rand(1, m, 32).astype(np.float64)
        g = x @ wg.T
        want = (g / (1 + np.exp(-g)) * (x @ wu.T)).transpose(0, 2, 1)
        np.testing.assert_allclose(f(x.astype(np.float32), wg, wu), want, rtol=1e-4, atol=1e-4)


def test_a_transpose_of_a_value_used_twice_stays_a_transpose():
    """The matmul's result is also returned: it is computed once, the transpose is its own kernel."""
    f, fam = compiled(lambda x, w: (op.matmul(x, op.permute_dims(w)),
                                    op.permute_dims(op.matmul(x, op.permute_dims(w)), [1, 0])),
                      x=(["m", 8], "float32"), w=([6, 8], "float32"))
    x, w = rand(5, 8), rand(6, 8)
    y, yt = f(x, w)
    np.testing.assert_allclose(yt, (x.astype(np.float64) @ w.T).T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, yt.T, rtol=0, atol=0)


@pytest.mark.parametrize("shape", ["avx2", "sse", "avx512"])
def test_transposed_store_on_every_vector_width(shape, monkeypatch):
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    f, fam = compiled(lambda x, w, b: op.permute_dims(op.gelu(op.matmul(x, op.permute_dims(w)) + b), [0, 2, 1]),
                      x=(["n", "m", 20], "float32"), w=([19, 20], "float32"), b=([19], "float32"))
    assert fam == {"fused_matmul_add_gelu_permute_dims": f"linear/{shape}"}, fam
    from math import erf

    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))
    w, b = rand(19, 20), rand(19)
    for n, m in ((1, 1), (2, 13), (1, 45)):
        x = rand(n, m, 20)
        want = gelu(x.astype(np.float64) @ w.T + b).transpose(0, 2, 1)
        np.testing.assert_allclose(f(x, w, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bits,group_size,k_in", [(4, 32, 64), (8, 16, 40), (4, 32, 36)])
def test_transposed_quantized_linear_matches_the_dequantized_weights(bits, group_size, k_in):
    """A group-quantized Linear (read packed, dequantized in the kernel) with a transposed store,
    against float64 numpy on the dequantized weights."""
    from builder.compile import compile as compile_module
    from builder.quant import GroupQuantization, QuantizeMapping, dequantize_weight, quantize_mutator
    from runtime import VirtualMachine

    class Net(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(k_in, 21, bias=True)

        def forward(self, x):
            return op.permute_dims(self.fc(x), [0, 2, 1])

    mapping = QuantizeMapping()
    net = quantize_mutator(GroupQuantization(bits=bits, group_size=group_size, model_dtype="float32"),
                           mapping).visit("", Net())
    irmod, params = net.export_tvm({"forward": {"x": nn.spec.Tensor(["n", "m", k_in], "float32")}})
    exe = compile_module(irmod)
    fam = {k: v["kernel"] for k, v in exe.kernels.items()}
    assert len(fam) == 1 and next(iter(fam.values())).startswith("linear/"), fam
    q_weight, q_scale = mapping.map_func["fc.weight"](rand(21, k_in) * 0.1)
    values = {"fc.q_weight": q_weight, "fc.q_scale": q_scale, "fc.bias": rand(21)}
    wd = dequantize_weight(q_weight, q_scale, net.fc.layout).astype(np.float64)
    fwd = VirtualMachine(exe)["forward"]
    for n, m in ((1, 1), (2, 5), (1, 40)):
        x = rand(n, m, k_in)
        y = fwd(x, *[values[p] for p, _ in params])
        want = (x.astype(np.float64) @ wd.T + values["fc.bias"]).transpose(0, 2, 1)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_transposed_store_with_no_products_and_no_rows():
    """K = 0 (every product 0: the output is the bias, transposed; GEMV and GEMM row counts) and M = 0."""
    from builder import codegen

    for K in (0, 9):
        lib = codegen.build({"f": transposed_bias_func(K, 6)})
        assert lib.functions["f"]["kernel"].startswith("linear/")
        fn = lib.load()["f"]
        b = np.arange(6, dtype=np.float32)
        for M in ((2, 40) if K == 0 else (0,)):
            y = np.full((6, M), 7.0, np.float32)
            fn(np.zeros((M, K), np.float32), np.ones((6, K), np.float32), b, y)
            np.testing.assert_array_equal(y, np.broadcast_to(b[:, None], (6, M)))


def test_transposed_store_of_a_linear_with_row_tiled_weights():
    """An ``nn.Linear`` whose float weight is a model parameter (read in row tiles, TileWeights) with a
    transposed result: the row tiles' GEMV rows and the GEMM's, against float64 numpy."""
    class Net(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(40, 48, bias=True)

        def forward(self, x):
            return op.permute_dims(op.gelu(self.fc(x)), [0, 2, 1])

    net = Net()
    w, b = rand(48, 40), rand(48)
    net.fc.weight.data, net.fc.bias.data = w, b
    m = net.jit({"forward": {"x": nn.spec.Tensor([2, "m", 40], "float32")}})
    fam = {k: v["kernel"] for k, v in m.exe.kernels.items()}
    assert any(v.startswith("linear/") and "tiles" in v for v in fam.values()), fam
    assert not any(k.startswith("transpose") for k in fam), fam
    from math import erf

    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))
    for rows in (1, 9, 100):
        x = rand(2, rows, 40)
        want = gelu(x.astype(np.float64) @ w.T.astype(np.float64) + b).transpose(0, 2, 1)
        np.testing.assert_allclose(m["forward"](x), want, rtol=1e-4, atol=1e-4)


def test_a_reshape_to_the_same_shape_is_looked_through():
    """ONNX exports put ``Reshape`` to the same shape between attention's ``p @ v`` and its transpose:
    the batched matmul, the no-op reshape and the transpose are one kernel."""
    def fn(p, v):
        y = op.matmul(p, v)
        return op.permute_dims(op.reshape(y, y.shape), [0, 2, 1, 3])

    f, fam = compiled(fn, p=(["b", 3, "s", "s"], "float32"), v=(["b", 3, "s", 8], "float32"))
    assert fam == {"fused_matmul_permute_dims": fam.get("fused_matmul_permute_dims")}, fam
    assert fam["fused_matmul_permute_dims"].startswith("linear/"), fam
    for b, s in ((1, 1), (2, 13)):
        p, v = rand(b, 3, s, s), rand(b, 3, s, 8)
        np.testing.assert_allclose(f(p, v), (p.astype(np.float64) @ v).transpose(0, 2, 1, 3), rtol=1e-4, atol=1e-4)
