"""Cold loops kernels (builder.codegen.cold_kernel): integer / bool results of a few values per row of at most
two symbolic dims, and float results of at most 64 values per row of two symbolic dims (the rotary tables of a
prefill or decode step), are compiled without LLVM's optimizer (``optnone``); float rows of one symbolic dim (a
small model's activation, a flattened one), kernels over hidden-size rows, images with symbolic height and width,
and weight-sized constant shapes are not. Results against numpy either way."""
import re

import numpy as np

from builder import te
from builder.ir import tir
from builder.codegen import build, cold_kernel, emit_llvm_ir


def _mask(b, s):
    """(b, s) int64 -> (b, s) int64: 1 where the input is not 0 (an attention mask's cast)."""
    x = te.placeholder((b, s), "int64", name="ids")
    return te.create_prim_func([x, te.compute((b, s), lambda i, j: tir.if_then_else(tir.not_equal(x[i, j], 0), 1, 0)
                                              .astype("int64"), name="mask")])


def _rows(shape):
    """y = x * 2 + 1 over ``shape`` (float32)."""
    x = te.placeholder(shape, "float32", name="x")
    return te.create_prim_func([x, te.compute(shape, lambda *i: x[i] * 2.0 + 1.0, name="y")])


def _inv_freq(b, s, half):
    """(b, s, 1) float32 positions x (half,) inverse frequencies -> (b, s, half): a rotary table's angles."""
    pos = te.placeholder((b, s, 1), "float32", name="pos")
    inv = te.placeholder((half,), "float32", name="inv_freq")
    return te.create_prim_func([pos, inv, te.compute((b, s, half), lambda i, j, k: pos[i, j, 0] * inv[k],
                                                     name="freqs")])


def _flags(text: str, name: str) -> str:
    return re.search(rf'define [^\n]*@"{re.escape(name)}"\([^\n]*', text).group(0)


def test_which_kernels_are_cold():
    b, s, h, w = te.var("b"), te.var("s"), te.var("h"), te.var("w")
    assert cold_kernel(_mask(b, s))
    assert cold_kernel(_mask(b, 1)) and not cold_kernel(_mask(b, 17))   # 17 ids per row
    assert not cold_kernel(_rows((s,)))                # floats: a flattened activation is a long 1-D vector
    assert cold_kernel(_rows((b, s, 1, 64))) and not cold_kernel(_rows((b, s, 1, 65)))   # rotary tables
    assert not cold_kernel(_rows((b, s, 2, 64)))
    assert not cold_kernel(_rows((s, 37)))             # rows of one symbolic dim: maybe a small model's activation
    assert cold_kernel(_inv_freq(b, s, 32))            # positions x inv_freq: a constant 1-D input is fine
    ids = te.placeholder((b, s, h), "int64", name="ids")
    assert not cold_kernel(te.create_prim_func([ids, te.compute((b, s, h), lambda *i: ids[i] + 1, name="y")]))
    assert not cold_kernel(_rows((b, s, 384)))         # a hidden-size row per token
    assert not cold_kernel(_rows((b, 3, h, w)))        # an image with symbolic height and width
    assert not cold_kernel(_rows((384, 384)))          # weight-sized constants (a weight transform)


def test_cold_kernels_are_optnone_and_compute_the_same():
    b, s = te.var("b"), te.var("s")
    funcs = {"mask": _mask(b, s), "rows": _rows((b, s, 384)), "freqs": _inv_freq(b, s, 32)}
    text, _ = emit_llvm_ir(funcs)
    assert "optnone" in _flags(text, "mask") and "optnone" in _flags(text, "mask.compute")
    assert "optnone" in _flags(text, "freqs.compute")
    assert "optnone" not in _flags(text, "rows") and "optnone" not in _flags(text, "rows.compute")
    native = build(funcs).load()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 3, size=(8, 517)).astype(np.int64)
    out = np.empty_like(ids)
    native.call("mask", [ids, out])
    np.testing.assert_array_equal(out, (ids != 0).astype(np.int64))
    x = rng.standard_normal((2, 5, 384)).astype(np.float32)
    y = np.empty_like(x)
    native.call("rows", [x, y])
    np.testing.assert_allclose(y, x.astype(np.float64) * 2 + 1, rtol=1e-6, atol=1e-6)
    pos = rng.uniform(0, 4096, size=(3, 77, 1)).astype(np.float32)
    inv = rng.uniform(0, 1, size=32).astype(np.float32)
    freqs = np.empty((3, 77, 32), np.float32)
    native.call("freqs", [pos, inv, freqs])
    np.testing.assert_allclose(freqs, pos.astype(np.float64) * inv.astype(np.float64), rtol=1e-6)
