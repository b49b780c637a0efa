"""Identical kernels are compiled once (builder/codegen/dedup.py): a function structurally equal to
one emitted already gets only its own entry (argument checks naming its own parameters) and calls
the twin's body; functions that differ in anything but names keep their own bodies."""
import re

import numpy as np
import pytest

import builder
from builder import nn, te
from builder.codegen import build, emit_llvm_ir


def _scale(factor: float, xname: str, dim: str):
    n = te.var(dim)
    x = te.placeholder((n, 16), "float32", name=xname)
    return te.create_prim_func([x, te.compute((n, 16), lambda i, j: x[i, j] * factor + 1.0, name="y")])


def _bodies(llvm_ir: str) -> list[str]:
    return sorted(re.findall(r'define [^@\n]*@"?([\w.]+)\.compute"?\(', llvm_ir))


def test_identical_functions_share_one_body():
    funcs = {"a": _scale(2.0, "x", "n"), "b": _scale(2.0, "inp", "batch"), "c": _scale(3.0, "x", "n")}
    text, _ = emit_llvm_ir(funcs)
    assert _bodies(text) == ["a", "c"]          # b is a's twin (names aside); c differs
    lib = build(funcs)
    native = lib.load()
    x = np.arange(48, dtype=np.float32).reshape(3, 16)
    for name, factor in (("a", 2.0), ("b", 2.0), ("c", 3.0)):
        y = np.empty_like(x)
        native.call(name, [x, y])
        np.testing.assert_array_equal(y, x * np.float32(factor) + np.float32(1.0))
    # the twin's entry checks its own arguments and names its own parameter
    with pytest.raises(ValueError, match="inp"):
        native.call("b", [np.zeros((3, 15), np.float32), np.zeros((3, 16), np.float32)])
    assert lib.functions["b"]["params"][0]["name"] == "inp"


class _Stack(nn.Module):
    def __init__(self, n: int):
        self.layers = nn.ModuleList([nn.Linear(32, 32, bias=True) for _ in range(n)])
        self.head = nn.Linear(32, 8, bias=False)

    def forward(self, x):
        for layer in self.layers:
            x = nn.op.silu(layer(x)) + x
        return self.head(x)


def test_repeated_layers_compile_one_kernel_each_kind():
    spec = {"forward": {"x": nn.spec.Tensor(["n", 32], "float32")}}
    net = _Stack(5)
    rng = np.random.default_rng(0)
    for _, p in net.named_parameters():
        p.data = (rng.standard_normal(p.shape) * 0.2).astype(np.float32)
    irmod, _ = net.export_tvm(spec)
    exe = builder.compile(irmod)
    # 5 identical layers share one, + the head, + the weight transform of the layers' (32, 32)
    # weights into row tiles (the head's 8 rows stay row-major)
    assert len(exe.kernels) == 3 and len(_bodies(exe.llvm_ir)) == 2      # (the transform: parallel loops)
    assert [n for n, m in exe.kernels.items() if m.get("weight_transform")] == ["tile_rows"]
    x = rng.standard_normal((4, 32)).astype(np.float32)
    got = net.jit(spec)["forward"](x)
    h = x.astype(np.float64)
    params = dict(net.named_parameters())
    for i in range(5):
        z = h @ params[f"layers.{i}.weight"].data.T + params[f"layers.{i}.bias"].data
        h = z / (1 + np.exp(-z)) + h
    np.testing.assert_allclose(got, h @ params["head.weight"].data.T, rtol=2e-5, atol=2e-5)


def test_a_kernel_with_a_dim_fixed_calls_the_general_kernels_body():
    """A decode-shaped linear (``seq`` fixed to 1) is the prefill-shaped one called with ``seq = 1``
    (:func:`builder.codegen.dedup.specialization`): one body, the step's own entry checks its own dims, and
    its results equal float64 numpy and, bit for bit, the general kernel's at ``seq = 1``."""
    class _Steps(_Stack):
        def step(self, x):
            return self.forward(x)

    net = _Steps(1)
    spec = {"forward": {"x": nn.spec.Tensor(["b", "s", 32], "float32")},
            "step": {"x": nn.spec.Tensor(["b", 1, 32], "float32")}}
    rng = np.random.default_rng(1)
    for _, p in net.named_parameters():
        p.data = (rng.standard_normal(p.shape) * 0.2).astype(np.float32)
    irmod, _ = net.export_tvm(spec)
    exe = builder.compile(irmod)
    linear = [n for n, m in exe.kernels.items() if m["kernel"].startswith("linear")]
    bodies = [n for n in _bodies(exe.llvm_ir) if n in linear]
    # the layer and the head for each function; the heads share one body, and so do the layers: the
    # step's epilogue reads x[i, 0, j] where forward's reads x[i, s, j], s over [0, seq) = [0, 1) there
    assert len(linear) == 4 and len(bodies) == 2
    heads = [n for n in linear if n.startswith("matmul")]
    assert len(heads) == 2 and sum(n in bodies for n in heads) == 1
    assert exe.kernels[heads[0]]["kernel"] == exe.kernels[heads[1]]["kernel"]
    assert exe.kernels[heads[1]]["params"][0]["shape"] == [["var", "b"], 1, 32]
    jit = net.jit(spec)
    params = dict(net.named_parameters())
    for b in (1, 3, 40):   # GEMV rows and GEMM rows
        x = rng.standard_normal((b, 1, 32)).astype(np.float32)
        got = jit["step"](x)
        h = x.astype(np.float64)
        z = h @ params["layers.0.weight"].data.T + params["layers.0.bias"].data
        h = z / (1 + np.exp(-z)) + h
        np.testing.assert_allclose(got, h @ params["head.weight"].data.T, rtol=2e-5, atol=2e-5)
        assert got.tobytes() == jit["forward"](x).tobytes()
    with pytest.raises(ValueError, match="x"):
        jit["step"](np.zeros((2, 2, 32), np.float32))


def _rows_scaled(seq, literal_zero: bool):
    """y[i, j, k] = x[i, j, k] * p[j, 0] + 1 over (n, seq, 16); ``literal_zero`` indexes 0 where j stands
    (as the legalized seq = 1 kernel of a decode step does)."""
    n = te.var("n")
    s = te.var(seq) if isinstance(seq, str) else seq
    x = te.placeholder((n, s, 16), "float32", name="x")
    p = te.placeholder((s, 1), "float32", name="p")
    if literal_zero:
        y = te.compute((n, s, 16), lambda i, j, k: x[i, 0, k] * p[0, 0] + 1.0, name="y")
    else:
        y = te.compute((n, s, 16), lambda i, j, k: x[i, j, k] * p[j, 0] + 1.0, name="y")
    return te.create_prim_func([x, p, y])


def test_a_loops_kernel_with_a_dim_fixed_to_one_calls_the_general_body():
    """A loops kernel whose shapes fix ``seq`` to 1 and whose indices say 0 there is the general kernel
    called with ``seq = 1`` (iterators of extent 1 read as their start), in whichever order the two come;
    fixed to 2, the same indices compute something else, and that kernel keeps its own body. Results
    against numpy."""
    from builder.codegen.dedup import specialization

    general, step, two = _rows_scaled("s", False), _rows_scaled(1, True), _rows_scaled(2, True)
    order = specialization(general, step)
    assert order is not None and order[1] == 1
    assert specialization(general, two) is None
    lib = build({"step": step, "general": general, "two": two})   # the general one is emitted first
    assert _bodies(lib.llvm_ir) == ["general", "two"] and list(lib.functions) == ["step", "general", "two"]
    native = lib.load()
    rng = np.random.default_rng(2)
    for rows in (1, 5):
        x = rng.standard_normal((rows, 1, 16)).astype(np.float32)
        p = rng.standard_normal((1, 1)).astype(np.float32)
        y, yg = np.empty_like(x), np.empty_like(x)
        native.call("step", [x, p, y])
        native.call("general", [x, p, yg])
        np.testing.assert_allclose(y, x.astype(np.float64) * p[0, 0] + 1.0, rtol=1e-6, atol=1e-6)
        assert y.tobytes() == yg.tobytes()
    x2 = rng.standard_normal((3, 2, 16)).astype(np.float32)
    p2 = rng.standard_normal((2, 1)).astype(np.float32)
    y2 = np.empty_like(x2)
    native.call("two", [x2, p2, y2])
    np.testing.assert_allclose(y2, np.repeat(x2[:, :1] * p2[0, 0], 2, axis=1) + 1.0, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="x"):   # the step's entry checks its own dims
        native.call("step", [np.zeros((2, 2, 16), np.float32), np.zeros((1, 1), np.float32),
                             np.zeros((2, 2, 16), np.float32)])
