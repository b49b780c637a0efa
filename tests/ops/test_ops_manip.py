"""Tensor creation / manipulation / reduction ops (``nn.op.concat`` ... ``nn.op.cumsum``).

Golden lines: the binding each op prints, spelled as TVM 0.27 prints it (op names and attribute
order from TVM's op attrs; e.g. ``R.split(x, indices_or_sections=2, axis=0)``, ``R.triu(x, 0)``,
``R.cumsum(x, axis=1, dtype="void", exclusive=None)``). Numeric checks:
``Module.jit`` against numpy in float64, with symbolic dims bound to several sizes (1 and sizes
that are not multiples of 8), float32 and float16.
"""
import numpy as np
import pytest

from builder import nn
from builder.nn import op

SIZES = (1, 3, 13)


class Fn(nn.Module):
    """A module whose forward is ``fn``."""

    def __init__(self, fn):
        self.fn = fn

    def forward(self, x, y=None):
        return self.fn(x) if y is None else self.fn(x, y)


def spec(**inputs):
    return {"forward": {k: nn.spec.Tensor(list(s), d) for k, (s, d) in inputs.items()}}


def script(fn, **inputs) -> str:
    mod, _ = Fn(fn).export_tvm(spec=spec(**inputs))
    return mod.script()


def jit(fn, **inputs):
    return Fn(fn).jit(spec=spec(**inputs))["forward"]


def rand(shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def close(got, want, dtype="float32"):
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    tol = {"float16": 2e-3, "float32": 2e-6}.get(str(dtype), 0)
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64),
                               rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# golden lines (x: (1, 5, 2) float32 as in TVM's frontend tests)

X = {"x": ((1, 5, 2), "float32")}

GOLDEN = [
    (lambda x: op.concat([x, x], dim=0),
     'concat: R.Tensor((2, 5, 2), dtype="float32") = R.concat((x, x), axis=0)'),
    (lambda x: op.split(x, 2, axis=-1),
     'split: R.Tuple(R.Tensor((1, 5, 1), dtype="float32"), R.Tensor((1, 5, 1), dtype="float32")) '
     '= R.split(x, indices_or_sections=2, axis=-1)'),
    (lambda x: op.split(x, [1, 3], axis=1),
     'split: R.Tuple(R.Tensor((1, 1, 2), dtype="float32"), R.Tensor((1, 2, 2), dtype="float32"), '
     'R.Tensor((1, 2, 2), dtype="float32")) = R.split(x, indices_or_sections=[1, 3], axis=1)'),
    (lambda x: op.chunk(x, 5, dim=1),
     'chunk_4: R.Tensor((1, 1, 2), dtype="float32") = chunk[4]'),
    (lambda x: op.unsqueeze(x, 0),
     'unsqueeze: R.Tensor((1, 1, 5, 2), dtype="float32") = R.expand_dims(x, axis=[0])'),
    (lambda x: op.squeeze(x, 0),
     'squeeze: R.Tensor((5, 2), dtype="float32") = R.squeeze(x, axis=[0])'),
    (lambda x: op.broadcast_to(x, [2, 5, 2]),
     'broadcast_to: R.Tensor((2, 5, 2), dtype="float32") = R.broadcast_to(x, R.shape([2, 5, 2]))'),
    (lambda x: op.repeat(x, repeats=2, axis=1),
     'repeat: R.Tensor((1, 10, 2), dtype="float32") = R.repeat(x, repeats=2, axis=1)'),
    (lambda x: op.pad(x, [0, 0, 1, 1, 2, 0]),
     'pad: R.Tensor((1, 7, 4), dtype="float32") = R.nn.pad(x, pad_width=[0, 0, 1, 1, 2, 0], '
     'pad_value=0, pad_mode="constant")'),
    (lambda x: op.triu(x),
     'triu: R.Tensor((1, 5, 2), dtype="float32") = R.triu(x, 0)'),
    (lambda x: op.full([10, 10], fill_value=10),
     'full: R.Tensor((10, 10), dtype="float32") = R.full(R.shape([10, 10]), R.const(10, "float32"), '
     'dtype="float32")'),
    (lambda x: op.zeros([10, 10], dtype="float16"),
     'zeros: R.Tensor((10, 10), dtype="float16") = R.zeros(R.shape([10, 10]), dtype="float16")'),
    (lambda x: op.ones([3]),
     'ones: R.Tensor((3,), dtype="float32") = R.ones(R.shape([3]), dtype="float32")'),
    (lambda x: op.arange(0, 5, dtype="float32"),
     'arange: R.Tensor((5,), dtype="float32") = R.arange(R.prim_value(0), R.prim_value(5), '
     'R.prim_value(1), dtype="float32")'),
    (lambda x: op.where(op.greater(x, x), x, x),
     'where: R.Tensor((1, 5, 2), dtype="float32") = R.where(greater, x, x)'),
    (lambda x: op.sum(x, axis=[1, 2], keepdims=True),
     'sum: R.Tensor((1, 1, 1), dtype="float32") = R.sum(x, axis=[1, 2], keepdims=True)'),
    (lambda x: op.mean(x),
     'mean: R.Tensor((), dtype="float32") = R.mean(x, axis=None, keepdims=False)'),
    (lambda x: op.max(x, axis=1),
     'max: R.Tensor((1, 2), dtype="float32") = R.max(x, axis=[1], keepdims=False)'),
    (lambda x: op.min(x, axis=[1, 2], keepdims=True),
     'min: R.Tensor((1, 1, 1), dtype="float32") = R.min(x, axis=[1, 2], keepdims=True)'),
    (lambda x: op.argmax(x, axis=1),
     'argmax: R.Tensor((1, 2), dtype="int64") = R.argmax(x, axis=1, keepdims=False)'),
    (lambda x: op.cumsum(x, axis=1),
     'cumsum: R.Tensor((1, 5, 2), dtype="float32") = R.cumsum(x, axis=1, dtype="void", '
     'exclusive=None)'),
]


@pytest.mark.parametrize("fn,line", GOLDEN, ids=[g[1].split(":")[0] for g in GOLDEN])
def test_golden_line(fn, line):
    lines = [ln.strip() for ln in script(fn, **X).splitlines()]
    assert line in lines, "\n".join(lines)


def test_golden_empty():
    line = ('empty: R.Tensor((2, 3), dtype="float32") = R.builtin.alloc_tensor(R.shape([2, 3]), '
            'R.dtype("float32"), R.prim_value(0), R.str("global"))')
    assert line in [ln.strip() for ln in script(lambda x: op.empty([2, 3]), **X).splitlines()]


def test_golden_symbolic():
    text = script(lambda x: (op.split(x, 2, axis=0), op.arange(x.shape[0], dtype="int64"),
                             op.concat([x, x], dim=0)), x=(("n", 4), "float32"))
    lines = [ln.strip() for ln in text.splitlines()]
    assert ('split: R.Tuple(R.Tensor(((n + 1) // 2, 4), dtype="float32"), '
            'R.Tensor((n - (n + 1) // 2, 4), dtype="float32")) = '
            'R.split(x, indices_or_sections=2, axis=0)') in lines
    assert ('arange: R.Tensor((n,), dtype="int64") = R.arange(R.prim_value(0), R.prim_value(n), '
            'R.prim_value(1), dtype="int64")') in lines
    assert 'concat: R.Tensor((n * 2, 4), dtype="float32") = R.concat((x, x), axis=0)' in lines


# ---------------------------------------------------------------------------------------------
# numerics: manipulation


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_concat_split_chunk(dtype):
    f = jit(lambda x, y: (op.concat([x, y, x], dim=1), *op.split(x, [2, 3], axis=1),
                          *op.chunk(y, 3, dim=1), *op.split(x, 2, axis=0),
                          *op.split(x, [1], axis=0)),
            x=(("n", 5), dtype), y=(("n", 7), dtype))
    for n in SIZES:
        x, y = rand((n, 5), dtype, n), rand((n, 7), dtype, n + 1)
        cat, a, b, c, y0, y1, y2, x0, x1, head, tail = f(x, y)
        close(head, x[:1], dtype)
        close(tail, x[1:], dtype)  # empty when n == 1
        close(cat, np.concatenate([x, y, x], axis=1), dtype)
        for got, want in zip((a, b, c), np.split(x, [2, 3], axis=1)):
            close(got, want, dtype)
        for got, want in zip((y0, y1, y2), (y[:, :3], y[:, 3:6], y[:, 6:])):
            close(got, want, dtype)
        h = (n + 1) // 2
        close(x0, x[:h], dtype)
        close(x1, x[h:], dtype)


def test_expand_squeeze_broadcast_repeat():
    f = jit(lambda x: (op.unsqueeze(x, -1), op.squeeze(op.unsqueeze(x, 1), 1),
                       op.squeeze(op.unsqueeze(op.unsqueeze(x, 0), 2), None),
                       op.broadcast_to(op.unsqueeze(x, 0), [3, x.shape[0], 5]),
                       op.repeat(x, 3, axis=0), op.repeat(x, 2)),
            x=(("n", 5), "float32"))
    for n in SIZES:
        x = rand((n, 5), seed=n)
        u, s, s2, b, r0, rf = f(x)
        close(u, x[..., None])
        close(s, x)
        close(s2, x)  # the symbolic n stays even when it is 1 at run time
        close(b, np.broadcast_to(x, (3, n, 5)))
        close(r0, np.repeat(x, 3, axis=0))
        close(rf, np.repeat(x, 2))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad(mode):
    f = jit(lambda x: op.pad(x, [1, 2, 0, 3], mode=mode, value=1.5), x=(("n", 5), "float16"))
    for n in (3, 4, 13):
        x = rand((n, 5), "float16", n)
        want = (np.pad(x, [(1, 2), (0, 3)], mode="constant", constant_values=1.5)
                if mode == "constant" else np.pad(x, [(1, 2), (0, 3)], mode=mode))
        close(f(x), want, "float16")


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_negative_pad_crops_first(mode):
    """Negative widths crop that side before the positive ones pad (torch's ``F.pad``, onnxruntime's
    ``Pad``), on a symbolic and a static axis; a crop larger than a static dim is refused when the
    graph is built, on a symbolic dim when the function runs."""
    f = jit(lambda x: op.pad(x, [-1, 2, 1, -3], mode=mode, value=-2.0), x=(("n", 6), "float32"))
    for n in (4, 7):   # (reflect: the cropped axis needs 3 rows to pad 2)
        x = rand((n, 6), seed=n)
        crop = x[1:, :3]
        want = (np.pad(crop, [(0, 2), (1, 0)], mode="constant", constant_values=-2.0)
                if mode == "constant" else np.pad(crop, [(0, 2), (1, 0)], mode=mode))
        close(f(x), want)
    g = jit(lambda x: op.pad(x, [-2, -1, 0, 0]), x=(("n", 2), "float32"))
    close(g(rand((5, 2), seed=5)), rand((5, 2), seed=5)[2:4])
    with pytest.raises(ValueError):
        g(rand((2, 2), seed=2))
    with pytest.raises(ValueError, match="remove 7 elements from axis 1 of length 6"):
        jit(lambda x: op.pad(x, [0, 0, -4, -3]), x=(("n", 6), "float32"))


def test_reflect_pad_of_a_too_small_symbolic_dim_is_an_error():
    """A static dim smaller than the reflect pad is refused when the graph is built; a symbolic
    one when the function runs: an error, never a read out of bounds."""
    f = jit(lambda x: op.pad(x, [2, 1, 0, 0], mode="reflect"), x=(("n", 5), "float32"))
    x = rand((4, 5), seed=1)
    close(f(x), np.pad(x, [(2, 1), (0, 0)], mode="reflect"))
    for n in (1, 2):   # pad before 2 needs n >= 3
        with pytest.raises(ValueError, match=r"index out of range: expected 0 <= index < n"):
            f(rand((n, 5), seed=n))
    g = jit(lambda x: op.pad(x, [0, 3, 0, 0], mode="reflect"), x=(("n", 5), "float32"))
    close(g(rand((4, 5), seed=4)), np.pad(rand((4, 5), seed=4), [(0, 3), (0, 0)], mode="reflect"))
    with pytest.raises(ValueError, match="index out of range"):
        g(rand((3, 5), seed=3))


def test_wrap_pad_of_any_width_and_an_empty_symbolic_dim():
    """``wrap`` (PyTorch's ``circular``) continues periodically for pads wider than the dim, as numpy's
    ``wrap``; a symbolic dim that is 0 when the function runs is an error (never a division by zero), a
    static empty one is refused when the graph is built."""
    f = jit(lambda x: op.pad(x, [5, 7, 2, 1], mode="wrap"), x=(("n", 3), "float32"))
    for n in (1, 2, 5):
        x = rand((n, 3), seed=n)
        close(f(x), np.pad(x, [(5, 7), (2, 1)], mode="wrap"))
    with pytest.raises(ValueError, match="index out of range"):
        f(np.zeros((0, 3), np.float32))
    with pytest.raises(ValueError, match="wrap padding of the empty dim 1"):
        jit(lambda x: op.pad(x, [0, 0, 1, 0], mode="wrap"), x=(("n", 0), "float32"))


def test_take_out_of_range_is_an_error():
    """``take`` (mode "fast", as ``nn.Embedding`` uses it) checks each index when it runs:
    an index outside [0, rows) raises ValueError instead of reading out of bounds, also when
    the gather is split over threads."""
    f = jit(lambda w, i: op.take(w, i, axis=0), x=((10, 3), "float32"), y=(("n",), "int32"))
    w = rand((10, 3), seed=2)
    good = np.array([0, 9, 3], "int32")
    close(f(w, good), w[good])
    for i in (10, -1, 2**31 - 1):
        with pytest.raises(ValueError, match=r"take: index out of range: expected 0 <= index < 10"):
            f(w, np.array([1, i], "int32"))
    emb = jit(lambda w, i: op.take(w, i, axis=0), x=((50, 4096), "float32"), y=(("n",), "int64"))
    big_w = rand((50, 4096), seed=3)
    ids = np.arange(5000, dtype="int64") % 50
    close(emb(big_w, ids), big_w[ids])
    ids[4321] = 50
    with pytest.raises(ValueError, match="index out of range"):
        emb(big_w, ids)


def test_max_min_relu_propagate_nan():
    """Float maximum / minimum are NaN-propagating as in numpy and PyTorch: relu, maximum,
    minimum, clip and the max / min reductions keep a NaN (LLVM's maxnum would drop it)."""
    f = jit(lambda x, y: (op.relu(x), op.maximum(x, y), op.minimum(x, y), op.max(x, axis=-1),
                          op.min(x, axis=-1)),
            x=(("n", 37), "float32"), y=(("n", 37), "float32"))
    x, y = rand((3, 37), seed=5), rand((3, 37), seed=6)
    x[0, 4] = y[1, 30] = np.nan
    x[2, 0] = np.inf
    r, mx, mn, rmax, rmin = f(x, y)
    close(r, np.maximum(x, 0))
    close(mx, np.maximum(x, y))
    close(mn, np.minimum(x, y))
    close(rmax, np.max(x, axis=-1))
    close(rmin, np.min(x, axis=-1))
    assert np.isnan(r[0, 4]) and np.isnan(mx[1, 30]) and np.isnan(rmax[0]) and rmax[2] == np.inf


def test_bfloat16_constants():
    """Scalars and created tensors of a bfloat16 graph are bfloat16 constants (numpy has no
    such dtype: the IR keeps their bits): they print as numbers, parse back to the same module,
    and compute as in float32 with bfloat16 rounding."""
    from builder import ir
    from runtime.native import bfloat16_bits_to_float32 as b2f
    from runtime.native import float32_to_bfloat16_bits as f2b

    def fn(x):
        return (x * 2.0, op.add(x, 1.5), op.layer_norm(x, 8),
                op.add(x, op.full([8], 0.1, "bfloat16")))

    mod, _ = Fn(fn).export_tvm(spec=spec(x=(("n", 8), "bfloat16")))
    text = mod.script()
    assert 'R.const(2, "bfloat16")' in text and 'R.const(1.5, "bfloat16")' in text   # as float32 prints
    assert ir.structural_equal(ir.parse(text), mod)
    f = jit(fn, x=(("n", 8), "bfloat16"))
    x = f2b(rand((3, 8), seed=9))
    xf = b2f(x).astype(np.float64)
    twice, plus, ln, plus_full = (b2f(v) for v in f(x))
    np.testing.assert_array_equal(twice, b2f(f2b(xf * 2)))
    np.testing.assert_array_equal(plus, b2f(f2b(xf + 1.5)))
    want = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln, want, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(plus_full, xf + b2f(f2b(np.float32(0.1))), rtol=1e-2, atol=1e-2)
    one = f2b(np.float32(1.0))
    assert isinstance(one, np.ndarray) and one.shape == () and one == 0x3F80


def test_negative_output_dim_is_a_clear_error():
    """When symbolic inputs are too small for an op (3 sections of a width-1 dim), the VM
    names the function, the op and the shape instead of numpy's bare "negative dimensions"."""
    f = jit(lambda x: op.split(x, 3, axis=1), x=((2, "d"), "float32"))
    pieces = f(rand((2, 9), seed=1))
    assert [p.shape[1] for p in pieces] == [3, 3, 3]
    with pytest.raises(ValueError, match=r"^forward: the output of 'split' would have shape \(2, -1\) "
                                         r".*with d=1\): the inputs are too small for it$"):
        f(rand((2, 1), seed=1))


def test_vm_takes_numpy_scalars_and_bfloat16_bit_arrays():
    """A numpy scalar is a 0-d array for a 0-d input, and a bfloat16 input takes int16 bit
    patterns as the native layer does; a wrong dtype names the bit-pattern convention."""
    from runtime.native import bfloat16_bits_to_float32 as b2f

    f = jit(lambda x, y: op.add(op.astype(x, "bfloat16"), y), x=((), "float32"), y=((3,), "bfloat16"))
    out = f(np.float32(2.0), np.array([0x3F80, 0x4000, 0], np.int16))
    np.testing.assert_array_equal(b2f(out), [3.0, 4.0, 2.0])
    with pytest.raises(ValueError, match=r"has dtype float32, expected bfloat16 \(bfloat16 arrays "
                                         r"are their uint16 bit patterns\)"):
        f(np.float32(1.0), np.zeros(3, np.float32))


def test_dims_of_different_symbols_are_compared_when_the_code_runs():
    """A matmul whose reduction dims are two different symbols, or a binary op over two
    symbols, cannot be checked when the graph is built: the generated code compares them
    before any loop runs (an error in both directions, never a read past an input or a
    silently partial result; the error gives the symbol's value), and computes normally when they
    agree."""
    f = jit(lambda x, y: op.matmul(x, y), x=(("b", 8), "float32"), y=(("k", 3), "float32"))
    g = jit(lambda x, y: op.add(x, y), x=(("b", 8), "float32"), y=(("c", 8), "float32"))
    x = rand((3, 8), seed=1)
    close(f(x, rand((8, 3), seed=2)), x @ rand((8, 3), seed=2))
    close(g(x, rand((3, 8), seed=3)), x + rand((3, 8), seed=3))
    for k in (5, 12):
        with pytest.raises(ValueError, match=r"^matmul: shapes do not match: a loop of (8|k) "
                                             r"iterations reads a dim of (k|8) elements, "
                                             rf"where k = {k} \(dim 0 of argument '\w+'\)$"):
            f(x, rand((k, 3), seed=k))
    for c in (1, 2, 4):
        with pytest.raises(ValueError, match=r"^add: shapes do not match"):
            g(x, rand((c, 8), seed=c))


def test_reshape_to_a_size_the_input_does_not_have_is_a_clear_error():
    """A reshape the graph cannot check (a symbolic input to a fixed shape) is checked when it
    runs: the message names the function and both shapes, not numpy's bare text."""
    f = jit(lambda x: op.reshape(x, [7, 3]), x=(("b", 8), "float32"))
    with pytest.raises(ValueError, match=r"^forward: cannot reshape a tensor of shape \(3, 8\) "
                                         r"\(24 elements\) to \(7, 3\)$"):
        f(rand((3, 8), seed=1))


def test_triu_where():
    f = jit(lambda x, y: (op.triu(x), op.triu(x, 2), op.triu(x, -1),
                          op.where(y, x, op.negative(x)), op.where(op.greater(x, y), 2.0, x)),
            x=(("b", "n", 6), "float32"), y=(("n", 1), "float32"))
    for n in SIZES:
        x, c = rand((2, n, 6), seed=n), rand((n, 1), seed=n + 7)
        t0, t2, tm, w, w2 = f(x, c)
        close(t0, np.triu(x))
        close(t2, np.triu(x, 2))
        close(tm, np.triu(x, -1))
        close(w, np.where(c.astype(bool), x, -x))
        close(w2, np.where(x > c, 2.0, x))


# ---------------------------------------------------------------------------------------------
# numerics: creation


def test_creation_static_and_symbolic():
    def fn(x):
        n = x.shape[0]
        return (op.zeros([n * 2, 3], "float16"), op.ones([n, 2], "int32"),
                op.full([2, n], 2.5), op.full([n], op.max(x), dtype="float32"),
                op.empty([n, 3], "float32"), op.arange(n), op.arange(1, n * 2, 2, dtype="int32"),
                op.arange(0.5, 3.0, 0.25), op.arange(5, 0, -2, dtype="float16"))

    f = jit(fn, x=(("n",), "float32"))
    for n in SIZES:
        x = rand((n,), seed=n)
        z, o, fl, fx, e, a, a2, af, an = f(x)
        close(z, np.zeros((2 * n, 3)), "float16")
        assert z.dtype == np.float16 and o.dtype == np.int32
        close(o, np.ones((n, 2)), "int32")
        close(fl, np.full((2, n), 2.5))
        close(fx, np.full(n, x.max()))
        assert e.shape == (n, 3) and e.dtype == np.float32
        close(a, np.arange(n))
        close(a2, np.arange(1, 2 * n, 2))
        close(af, np.arange(0.5, 3.0, 0.25))
        close(an, np.arange(5, 0, -2), "float16")


# ---------------------------------------------------------------------------------------------
# numerics: reductions


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_reductions(dtype):
    f = jit(lambda x: (op.sum(x, axis=1), op.sum(x, axis=[0, 2], keepdims=True), op.sum(x),
                       op.mean(x, axis=-1), op.mean(x, keepdims=True), op.max(x, axis=1),
                       op.min(x, axis=[0, 1]), op.max(x)),
            x=((2, "n", "m"), dtype))
    for n, m in zip(SIZES, (37, 5, 11)):
        x = rand((2, n, m), dtype, n)
        x64 = x.astype(np.float64)
        outs = f(x)
        wants = (x64.sum(1), x64.sum((0, 2), keepdims=True), x64.sum(), x64.mean(-1),
                 x64.mean(keepdims=True), x64.max(1), x64.min((0, 1)), x64.max())
        for got, want in zip(outs, wants):
            assert got.dtype == np.dtype(dtype)
            close(got, np.asarray(want).astype(dtype), dtype)


def test_float16_sum_accumulates_in_float32():
    f = jit(lambda x: op.sum(x, axis=0), x=(("n",), "float16"))
    x = np.full(4097, 1.0, np.float16)  # a float16 accumulator would stop at 2048
    assert float(f(x)) == 4096.0  # 4097 rounds to 4096 in float16 only at the end


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_argmax_first_on_ties(dtype):
    f = jit(lambda x: (op.argmax(x, axis=1), op.argmax(x, axis=0, keepdims=True), op.argmax(x),
                       op.argmin(x, axis=1)),
            x=(("n", 9), dtype))
    for n in SIZES:
        x = np.round(rand((n, 9), dtype, n) * 2).astype(dtype)  # many ties
        x[-1, 3] = x[-1, 7] = 50  # global max twice: the first wins
        a1, a0, af, m1 = f(x)
        assert a1.dtype == np.int64
        np.testing.assert_array_equal(a1, x.argmax(1))
        np.testing.assert_array_equal(a0, x.argmax(0)[None])
        assert af.shape == () and int(af) == x.argmax() == (n - 1) * 9 + 3
        np.testing.assert_array_equal(m1, x.argmin(1))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cumsum(dtype):
    f = jit(lambda x: (op.cumsum(x, axis=1), op.cumsum(x, axis=0, exclusive=True), op.cumsum(x),
                       op.cumsum(x, axis=-1, dtype="float32")),
            x=(("n", 300), dtype))
    for n in SIZES:
        x = np.abs(rand((n, 300), dtype, n))
        x64 = x.astype(np.float64)
        c1, c0, cf, c32 = f(x)
        close(c1, np.cumsum(x64, 1).astype(dtype), dtype)
        close(c0, (np.cumsum(x64, 0) - x64).astype(dtype), dtype)
        close(cf, np.cumsum(x64).astype(dtype), dtype)
        assert c32.dtype == np.float32
        close(c32, np.cumsum(x64, -1), "float16" if dtype == "float16" else "float32")


def test_cumsum_int():
    f = jit(lambda x: op.cumsum(x, axis=0, dtype="int64"), x=(("n",), "int32"))
    x = np.arange(-5, 8, dtype=np.int32)
    np.testing.assert_array_equal(f(x), np.cumsum(x, dtype=np.int64))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cumprod(dtype):
    """Running products (values near 1 so that 40 factors stay in range) along each axis, exclusive (a leading 1),
    flattened, into float32, and of integers into int64; against float64 / int64 numpy."""
    f = jit(lambda x: (op.cumprod(x, axis=1), op.cumprod(x, axis=0, exclusive=True), op.cumprod(x),
                       op.cumprod(x, axis=-1, dtype="float32")),
            x=(("n", 40), dtype))
    for n in SIZES:
        x = (1 + 0.05 * rand((n, 40), dtype, n)).astype(dtype)
        x64 = x.astype(np.float64)
        c1, c0, cf, c32 = f(x)
        close(c1, np.cumprod(x64, 1).astype(dtype), dtype)
        close(c0, (np.cumprod(x64, 0) / x64).astype(dtype), dtype)
        close(cf, np.cumprod(x64).astype(dtype), dtype)
        assert c32.dtype == np.float32
        close(c32, np.cumprod(x64, -1), "float16" if dtype == "float16" else "float32")
    g = jit(lambda x: op.cumprod(x, axis=0, dtype="int64"), x=(("n",), "int32"))
    k = np.array([3, -2, 5, 0, 7], dtype=np.int32)
    np.testing.assert_array_equal(g(k), np.cumprod(k, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# errors name both sides


@pytest.mark.parametrize("fn,inputs,err,match", [
    (lambda x, y: op.concat([x, y], dim=0), {"y": ((3, 5), "float16")}, TypeError, "float32.*float16"),
    (lambda x, y: op.concat([x, y], dim=0), {"y": ((3, 6), "float32")}, ValueError, r"\(2, 5\).*\(3, 6\)"),
    (lambda x, y: op.where(op.greater(x, x), x, y), {"y": ((2, 5), "float16")}, TypeError,
     "float32.*float16"),
    (lambda x, y: op.broadcast_to(x, [4, 3]), {}, ValueError, r"\(2, 5\).*\(4, 3\)"),
    (lambda x, y: op.squeeze(x, 0), {}, ValueError, "not 1"),
    (lambda x, y: op.split(x, 4, axis=0), {}, ValueError, "sections"),
    (lambda x, y: op.pad(x, [1, 1]), {}, ValueError, "2 values per axis"),
    (lambda x, y: op.triu(op.sum(x, axis=0)), {}, ValueError, "ndim >= 2"),
    (lambda x, y: op.full([2], x), {}, ValueError, "scalar"),
    (lambda x, y: op.arange(0, 4, 0), {}, ValueError, "zero"),
    (lambda x, y: op.sum(x, axis=2), {}, ValueError, "out of range"),
])
def test_errors(fn, inputs, err, match):
    specs = {"x": ((2, 5), "float32"), "y": inputs.get("y", ((2, 5), "float32"))}
    with pytest.raises(err, match=match):
        script(fn, **specs)
