"""FuseOps, row fusion and parallel loops (never timed): the LlamaMLP recipe fuses and matches numpy,
FuseOps' patterns, an elementwise chain is one kernel, norms and softmax make one pass per row,
transposes walk tiles, batch and row loops fuse into one parallel loop (any thread count), and a loop
with cross-row reads is not fused."""
from __future__ import annotations

import numpy as np
import pytest

from builder import te
from builder.codegen import build
from builder.codegen.lower import lower
from builder.codegen.schedule import schedule
from builder.ir.kernel import KERNEL_ATTR
from builder.te import topi
from runtime import threadpool

from helpers.linear_kernels import silu as _silu
from helpers.linear_cases import ROOT

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/helpers/fixtures.py


def test_llama_mlp_recipe_fuses_and_matches_numpy():
    import builder

    m = builder.build(ROOT / "recipes" / "llama_mlp.yaml",
                      ["dtype=float32", "hidden_size=72", "intermediate_size=200"])
    names = set(m.exe.kernels)
    assert names == {"fused_matmul_silu_multiply", "matmul"}, names
    wg, wu, wd = (m.params[n] for n in m.param_names)
    for b in (1, 6, 19):
        x = np.random.default_rng(b).standard_normal((b, 72), dtype=np.float32)
        ref = (_silu(x @ wg.T) * (x @ wu.T)) @ wd.T
        np.testing.assert_allclose(m(x), ref, rtol=1e-4, atol=1e-6)


def test_fuse_ops_patterns():
    from builder import nn
    from builder.transform import FuseOps, LegalizeOps, SelectKernels, Sequential

    class Block(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(16, 24, bias=True)
            self.fc2 = nn.Linear(24, 16, bias=False)

        def forward(self, x, r):
            h = nn.op.relu(self.fc(x))
            y = self.fc2(h) + r
            z = nn.op.silu(y) * y          # y used twice: an elementwise pattern, not fused into fc2
            return z

    mod = Block()
    spec = {"forward": {"x": nn.spec.Tensor(["n", 16], "float32"), "r": nn.spec.Tensor(["n", 16], "float32")}}
    irmod, params = mod.export_tvm(spec=spec)
    fused = Sequential([SelectKernels(), FuseOps(), LegalizeOps()])(irmod)
    prims = [n for n, f in fused.functions.items() if hasattr(f, "params") and KERNEL_ATTR in getattr(f, "attrs", {})]
    assert len(prims) == 2, list(fused.functions)
    rng = np.random.default_rng(0)
    for _, p in mod.named_parameters():
        p.data = rng.standard_normal(p.shape, dtype=np.float32)
    jit = mod.jit(spec=spec)
    x = rng.standard_normal((3, 16), dtype=np.float32)
    r = rng.standard_normal((3, 16), dtype=np.float32)
    pw = dict(mod.named_parameters())
    h = np.maximum(x @ pw["fc.weight"].data.T + pw["fc.bias"].data, 0)
    y = h @ pw["fc2.weight"].data.T + r
    np.testing.assert_allclose(jit(x, r), _silu(y) * y, rtol=1e-4, atol=1e-5)


def test_elementwise_chain_is_one_kernel():
    from builder import nn
    from builder.transform import FuseOps

    class Chain(nn.Module):
        def forward(self, a, b):
            return nn.op.silu(a) * b + a

    spec = {"forward": {"a": nn.spec.Tensor(["n", 8], "float32"), "b": nn.spec.Tensor([8], "float32")}}
    irmod, _ = Chain().export_tvm(spec=spec)
    fused = FuseOps()(irmod)
    prims = [n for n, f in fused.functions.items() if n != "forward"]
    assert len(prims) == 1 and prims[0].startswith("fused_"), prims
    jit = Chain().jit(spec=spec)
    a = np.random.default_rng(0).standard_normal((5, 8), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal(8, dtype=np.float32)
    np.testing.assert_allclose(jit(a, b), _silu(a) * b + a, rtol=1e-5, atol=1e-6)


def test_norm_and_softmax_make_one_pass_per_row():
    n = te.var("n")
    x = te.placeholder((n, 300), "float32", name="x")
    w = te.placeholder((300,), "float32", name="w")
    f = te.create_prim_func([x, w, topi.rms_norm(x, w, -1, 1e-5)])
    text = lower(schedule(f)).script()
    assert text.count("for i0 in T.parallel(n)") == 1, text
    g = te.create_prim_func([x, topi.softmax(x, -1)])
    assert lower(schedule(g)).script().count("for i0 in T.parallel(n)") == 1


@pytest.mark.parametrize("shape,axes,dtype", [
    ((1, 37, 50), (0, 2, 1), "float32"),       # NWC -> NCW, tails of both tiles
    ((2, 3, 20, 17), (0, 2, 3, 1), "float32"),  # NCHW -> NHWC
    ((2, 5, 18, 33), (0, 3, 1, 2), "float16"),  # NHWC -> NCHW: a dim between the two tiled ones
    ((33, 18), (1, 0), "int64"),
    ((3, 16, 32), (2, 1, 0), "float32"),        # exact tiles
])
def test_transposes_walk_tiles_and_match_numpy(shape, axes, dtype):
    """A permute whose innermost dim differs on the two sides runs in 16 x 16 tiles (the source's tiles
    outermost and parallel, a predicate past the ends); the result is numpy's transpose for odd sizes,
    16-bit and integer dtypes, symbolic dims, on one thread and on all. A permute keeping the last dim is
    left as it was (its rows are contiguous copies)."""
    names = [te.var(f"d{i}") for i in range(len(shape))]
    x = te.placeholder(names, dtype, name="x")
    f = te.create_prim_func([x, topi.permute_dims(x, list(axes))])
    text = lower(schedule(f)).script()
    assert "_o in T.parallel(" in text and "16, 16):" in text and "_i < " in text, text   # tiles, masked ends
    keep = te.placeholder((te.var("a"), te.var("b"), 8), "float32", name="k")
    assert "_o in T.parallel(" not in lower(schedule(te.create_prim_func([keep, topi.permute_dims(keep, [1, 0, 2])]))).script()
    lib = build({"t": f}).load()
    rng = np.random.default_rng(1)
    X = (rng.standard_normal(shape) * 100).astype(dtype)
    old = threadpool.get_num_threads()
    try:
        for nt in sorted({1, threadpool.pool_size()}):
            threadpool.set_num_threads(nt)
            y = np.zeros(tuple(shape[a] for a in axes), dtype)
            lib["t"](X, y)
            np.testing.assert_array_equal(y, np.transpose(X, axes))
    finally:
        threadpool.set_num_threads(old)


def test_batch_and_row_loops_are_fused_into_one_parallel_loop():
    """A norm over (batch, rows, C) splits batch x rows over the threads (a batch of 1 gave one
    thread every row: Whisper's LayerNorm over 1 x 1500 x 384); an elementwise nest keeps its
    innermost loop (vectorized) and fuses the two above it, unless its rows are shorter than
    FUSE_MIN_ROW_WORK; the values match numpy for a batch of 1 and of 3, on one thread and on all."""
    b, s = te.var("b"), te.var("s")
    x = te.placeholder((b, s, 96), "float32", name="x")
    w = te.placeholder((96,), "float32", name="w")
    bias = te.placeholder((96,), "float32", name="bias")
    f = te.create_prim_func([x, w, bias, topi.layer_norm(x, w, bias, [-1], 1e-5)])
    g = te.create_prim_func([x, topi.gelu(x)])
    for fn in (f, g):
        text = lower(schedule(fn)).script()
        assert text.count("for i0_i1_fused in T.parallel(b * s)") == 1, text
        assert "for i2 in T.serial(96)" in text, text
    n = te.var("n")
    x2 = te.placeholder((n, 96), "float32", name="x2")   # one row loop: nothing to fuse
    assert "for i0 in T.parallel(n)" in lower(schedule(te.create_prim_func([x2, topi.gelu(x2)]))).script()
    x3 = te.placeholder((b, s, 2), "float32", name="x3")   # rows of 2: a division per row would cost more
    assert "for i0 in T.parallel(b)" in lower(schedule(te.create_prim_func([x3, topi.gelu(x3)]))).script()
    lib = build({"ln": f}).load()
    rng = np.random.default_rng(0)
    W, B = rng.standard_normal(96, dtype=np.float32), rng.standard_normal(96, dtype=np.float32)
    old = threadpool.get_num_threads()
    try:
        for nt in sorted({1, threadpool.pool_size()}):
            threadpool.set_num_threads(nt)
            for shape in [(1, 1500, 96), (3, 7, 96), (1, 0, 96)]:
                X = rng.standard_normal(shape, dtype=np.float32)
                y = np.full_like(X, np.nan)
                lib["ln"](X, W, B, y)
                x64 = X.astype(np.float64)
                mean = x64.mean(-1, keepdims=True)
                ref = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * W + B
                np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    finally:
        threadpool.set_num_threads(old)


@pytest.mark.parametrize("rows", [1, 3, 200])
def test_parallel_rows_match_numpy_with_any_thread_count(rows):
    n = te.var("n")
    x = te.placeholder((n, 4096), "float32", name="x")
    w = te.placeholder((4096,), "float32", name="w")
    lib = build({"rms": te.create_prim_func([x, w, topi.rms_norm(x, w, -1, 1e-5)]),
                 "sm": te.create_prim_func([x, topi.softmax(x, -1)])}).load()
    rng = np.random.default_rng(rows)
    X = rng.standard_normal((rows, 4096), dtype=np.float32) * 3
    W = rng.standard_normal(4096, dtype=np.float32)
    ref = X / np.sqrt((X.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * W
    e = np.exp(X - X.max(-1, keepdims=True))
    sref = e / e.sum(-1, keepdims=True)
    old = threadpool.get_num_threads()
    try:
        for nt in sorted({1, threadpool.pool_size()}):
            threadpool.set_num_threads(nt)
            y, s = np.empty_like(X), np.empty_like(X)
            lib["rms"](X, W, y)
            lib["sm"](X, s)
            np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5)
            np.testing.assert_allclose(s, sref, rtol=2e-5, atol=1e-8)
    finally:
        threadpool.set_num_threads(old)


def test_fused_loop_with_cross_row_reads_is_not_fused():
    # the second stage reads column sums at another row: fusing would be wrong
    x = te.placeholder((6, 5), "float32", name="x")
    k = te.reduce_axis((0, 6), name="k")
    colsum = te.compute((5,), lambda j: te.sum(x[k, j], axis=k), name="colsum")
    y = te.compute((6, 5), lambda i, j: x[i, j] / colsum[j], name="y")
    f = te.create_prim_func([x, y])
    lib = build({"f": f}).load()
    X = np.random.default_rng(0).random((6, 5), dtype=np.float32) + 0.5
    Y = np.empty_like(X)
    lib["f"](X, Y)
    np.testing.assert_allclose(Y, X / X.sum(0), rtol=1e-6)
