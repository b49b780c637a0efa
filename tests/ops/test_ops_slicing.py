"""``nn.op.strided_slice`` / ``R.strided_slice`` and ``nn.Tensor.__getitem__`` (issue 14): the
printed binding, struct info with symbolic dims, and ``Module.jit`` results against numpy basic
indexing in float64, with symbolic dims bound to several sizes."""

import numpy as np
import pytest

from builder.ir.parser import parse
from builder.nn import op
from helpers.functional import export, jit


def rand(*shape, dtype="float64", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def same(got, want):
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.asarray(got, np.float64), want)


def test_strided_slice_prints_and_parses_back():
    text = export(lambda x: op.strided_slice(x, [1, 2], [1, 0], [-1, 5], [1, 2]), x=(["b", "s", 5], "float32"))
    line = ('strided_slice: R.Tensor((b, s - 2, 3), dtype="float32") = R.strided_slice(x, axes=[1, 2], '
            'begin=[1, 0], end=[-1, 5], strides=[1, 2], assume_inbound=False)')
    assert line in [ln.strip() for ln in text.splitlines()], text
    assert parse(text).script() == text


@pytest.mark.parametrize("begin,end,stride", [(0, 7, 1), (2, 5, 1), (-3, 7, 1), (1, 100, 2), (-100, 3, 3),
                                              (5, 2, 1), (6, 7, 4), (-1, 7, 1), (0, -2, 2)])
def test_static_bounds_clamp_as_numpy(begin, end, stride):
    f = jit(lambda x: op.strided_slice(x, [1], [begin], [end], [stride]), x=([2, 7, 3], "float64"))
    x = rand(2, 7, 3)
    same(f(x), x[:, begin:end:stride])


def test_symbolic_bounds_and_dims():
    # the last token of each sequence, and a window ending at the sequence's end
    f = jit(lambda x: op.strided_slice(x, [1], [-1], [x.shape[1]]), x=(["b", "s", 4], "float64"))
    g = jit(lambda x: op.strided_slice(x, [1, 2], [x.shape[1] - 3, 1], [x.shape[1], 4], [2, 1]),
            x=(["b", "s", 4], "float64"))
    for b, s in ((1, 3), (2, 8), (3, 13)):
        x = rand(b, s, 4, seed=s)
        same(f(x), x[:, s - 1:s])
        same(g(x), x[:, s - 3:s:2, 1:4])


def test_getitem_forms():
    cases = [
        (lambda x: x[:, -1, :], lambda x: x[:, -1, :]),
        (lambda x: x[:, 1:], lambda x: x[:, 1:]),
        (lambda x: x[..., ::2], lambda x: x[..., ::2]),
        (lambda x: x[1], lambda x: x[1]),
        (lambda x: x[-1, 2:5:2], lambda x: x[-1, 2:5:2]),
        (lambda x: x[..., 0], lambda x: x[..., 0]),
        (lambda x: x[:, np.int64(2)], lambda x: x[:, 2]),
        (lambda x: x[1:, ..., -2:], lambda x: x[1:, ..., -2:]),
    ]
    x = rand(3, 5, 6)
    for fn, ref in cases:
        same(jit(fn, x=([3, 5, 6], "float64"))(x), ref(x))
    # nothing sliced: the tensor itself, no binding
    text = export(lambda x: x[...] + x[:, :], x=([3, 5], "float32"))
    assert "strided_slice" not in text


def test_getitem_symbolic():
    f = jit(lambda h: h[:, -1, :], h=(["b", "s", 4], "float32"))
    g = jit(lambda x: x[:, 1:, ::3], x=(["b", "s", "d"], "float32"))
    k = jit(lambda x: x[:, x.shape[1] - 2], x=(["b", "s", 3], "float32"))
    for b, s, d in ((1, 2, 1), (2, 5, 7), (3, 9, 4)):
        h = rand(b, s, 4, dtype="float32", seed=s)
        same(f(h), h[:, -1, :])
        x = rand(b, s, d, dtype="float32", seed=d)
        same(g(x), x[:, 1:, ::3])
        y = rand(b, s, 3, dtype="float32", seed=b)
        same(k(y), y[:, s - 2])
    text = export(lambda h: h[:, -1, :], h=(["b", "s", 4], "float32"))
    assert 'squeeze: R.Tensor((b, 4), dtype="float32") = R.squeeze(strided_slice, axis=[1])' in text


def test_symbolic_out_of_range_is_an_error_when_it_runs():
    """Bounds on a symbolic dim are assumed in range; a slice that does not fit is refused
    when the code runs (a negative length, or an index read out of range), never read out of
    bounds."""
    f = jit(lambda h: h[:, -1], h=(["b", "s"], "float32"))
    g = jit(lambda x: x[:, 2:4], x=([2, "s"], "float32"))
    same(g(rand(2, 5, dtype="float32")), rand(2, 5, dtype="float32")[:, 2:4])
    with pytest.raises(ValueError, match="index out of range"):
        f(rand(2, 0, dtype="float32"))
    with pytest.raises(ValueError, match="index out of range"):
        g(rand(2, 3, dtype="float32"))


@pytest.mark.parametrize("fn,err,match", [
    (lambda x: x[:, ::-1], ValueError, "steps must be positive"),
    (lambda x: op.strided_slice(x, [0], [0], [2], [0]), ValueError, "strides must be positive"),
    (lambda x: x[None], TypeError, "None / tensor indices are not supported"),
    (lambda x: x[0, 0, 0], ValueError, "3 indices for a tensor of 2 dims"),
    (lambda x: x[..., ...], ValueError, "at most one"),
    (lambda x: x[4], ValueError, "index 4 is out of range for dim 0 of size 4"),
    (lambda x: x[0.5], TypeError, "indices must be ints"),
    (lambda x: op.strided_slice(x, [0, 0], [0, 1], [1, 2]), ValueError, "repeated axis"),
    (lambda x: op.strided_slice(x, [0], [0, 1], [1]), ValueError, "one value each per sliced axis"),
    (lambda x: op.strided_slice(x, [2], [0], [1]), ValueError, "axis 2 is out of range"),
    (lambda x: op.strided_slice(x, [0], [1.5], [2]), TypeError, "begin values must be ints"),
])
def test_errors(fn, err, match):
    with pytest.raises(err, match=match):
        export(fn, x=([4, 5], "float32"))


def test_tensor_is_not_iterable():
    with pytest.raises(TypeError, match="not iterable"):
        export(lambda x: list(x), x=([2, 3], "float32"))
