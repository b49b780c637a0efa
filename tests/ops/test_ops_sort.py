"""Sorting ops (``nn.op.sort`` / ``argsort`` / ``topk``) against a Python reference (``sorted`` on
(value, position) keys: stable, NaN the largest): many ties, NaN, every axis of a 3-d tensor, symbolic
lengths from 1 to past several merge passes, float16 / int32 data, largest and smallest, each
``ret_type``; errors for a k larger than the axis (static: when built; symbolic: when run)."""
import math

import numpy as np
import pytest

from builder.nn import op
from helpers.functional import export, jit


def order_ref(x, axis, descending):
    """Positions that sort ``x`` along ``axis``: stable, NaN after every number ascending and before every
    number descending."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    out = np.empty(x.shape, np.int64)
    for idx in np.ndindex(*x.shape[:-1]):
        line = x[idx]

        def key(i):
            v = line[i]
            nan = math.isnan(v)
            if descending:
                return (0 if nan else 1, 0.0 if nan else -v)
            return (1 if nan else 0, 0.0 if nan else v)

        out[idx] = sorted(range(len(line)), key=key)
    return np.moveaxis(out, -1, axis)


def sample(shape, seed, dtype="float32"):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(dtype)   # many ties
    if dtype.startswith("float"):
        x = x + (rng.random(shape) < 0.5) * rng.standard_normal(shape).astype(dtype)
        x.reshape(-1)[:: 7] = np.nan
    return x


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sort_and_argsort_match_a_stable_reference(descending, axis):
    f = jit(lambda x: op.sort(x, axis=axis, descending=descending), x=(["a", "b", "c"], "float32"))
    g = jit(lambda x: op.argsort(x, axis=axis, descending=descending, dtype="int64"), x=(["a", "b", "c"], "float32"))
    for i, shape in enumerate([(1, 1, 1), (2, 13, 5), (3, 4, 37), (37, 2, 3)]):
        x = sample(shape, i)
        want = order_ref(x, axis, descending)
        got = g(x)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(f(x), np.take_along_axis(x, want, axis))


@pytest.mark.parametrize("dtype", ["float16", "int32"])
def test_sort_other_dtypes(dtype):
    f = jit(lambda x: op.sort(x, descending=True), x=(["n", 100], dtype))
    x = sample((3, 100), 5, dtype)
    np.testing.assert_array_equal(f(x), np.take_along_axis(x, order_ref(x, -1, True), -1))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [0, 1, 4])
def test_topk_matches_the_reference(largest, k):
    f = jit(lambda x: op.topk(x, k, axis=1, largest=largest, dtype="int64"), x=(["n", "m", 3], "float32"))
    for i, shape in enumerate([(1, 4, 3), (2, 9, 3), (2, 130, 3)]):
        x = sample(shape, 10 + i)
        order = order_ref(x, 1, largest)[:, :k]
        values, indices = f(x)
        np.testing.assert_array_equal(indices, order)
        np.testing.assert_array_equal(values, np.take_along_axis(x, order, 1))


def test_topk_ret_types_and_errors():
    x = sample((2, 6), 3)
    v = jit(lambda x: op.topk(x, 2, ret_type="values"), x=(["n", 6], "float32"))(x)
    i = jit(lambda x: op.topk(x, 2, ret_type="indices"), x=(["n", 6], "float32"))(x)
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i, order_ref(x, -1, True)[:, :2])
    np.testing.assert_array_equal(v, np.take_along_axis(x, i.astype(np.int64), -1))
    with pytest.raises(ValueError, match="out of range for an axis of 6"):
        export(lambda x: op.topk(x, 7), x=(["n", 6], "float32"))
    f = jit(lambda x: op.topk(x, 5), x=(["n", "m"], "float32"))
    f(sample((2, 5), 1))
    with pytest.raises(ValueError, match="topk: k is larger than the axis"):
        f(sample((2, 4), 1))
    with pytest.raises(TypeError, match="cannot sort bool"):
        export(lambda x: op.sort(x), x=([3], "bool"))
    with pytest.raises(TypeError, match="int32 or int64"):
        export(lambda x: op.argsort(x, dtype="float32"), x=([3], "float32"))
    text = export(lambda x: op.argsort(x, axis=0, descending=True), x=([3, 2], "float32"))
    assert 'R.argsort(x, axis=0, descending=True, dtype="int32")' in text, text
