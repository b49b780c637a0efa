"""Scatters (``nn.op.scatter_elements``, ``nn.op.scatter_nd``) against numpy loops in float64: every
reduction, duplicates (applied in order: the last update wins), negative indices, indices smaller than
the data and the updates, symbolic dims bound to several sizes, float16; an index out of range is an
error when the code runs, never a write out of bounds."""
import numpy as np
import pytest

from builder.nn import op
from helpers.functional import export, jit

REDUCE = {"update": lambda a, b: b, "add": lambda a, b: a + b, "mul": lambda a, b: a * b,
          "max": max, "min": min}


def scatter_elements_ref(x, idx, upd, axis, reduction):
    out = x.astype(np.float64).copy()
    for i in np.ndindex(*idx.shape):
        at = list(i)
        at[axis] = int(idx[i]) % x.shape[axis]
        out[tuple(at)] = REDUCE[reduction](out[tuple(at)], float(upd[i]))
    return out


def scatter_nd_ref(x, idx, upd, reduction):
    out = x.astype(np.float64).copy()
    q = idx.shape[-1]
    for j in np.ndindex(*idx.shape[:-1]):
        at = tuple(int(v) % d for v, d in zip(idx[j], x.shape[:q]))
        for t in np.ndindex(*x.shape[q:]):
            out[at + t] = REDUCE[reduction](out[at + t], float(upd[j + t]))
    return out


def close(got, want, dtype="float32"):
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = 2e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("reduction", ["update", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_matches_numpy(reduction, axis):
    """Indices smaller than the data (and the updates, as ``torch.scatter`` allows) on a symbolic batch,
    with repeated and negative indices."""
    f = jit(lambda x, i, u: op.scatter_elements(x, i, u, axis=axis, reduction=reduction),
            x=(["n", 5, 4], "float32"), i=(["m", 3, 2], "int64"), u=(["m", 4, 3], "float32"))
    rng = np.random.default_rng(1)
    ax = axis % 3
    for n in (2, 5):
        x = rng.standard_normal((n, 5, 4)).astype(np.float32)
        dim = x.shape[ax]
        i = rng.integers(-dim, dim, (min(n, 2), 3, 2)).astype(np.int64)
        u = rng.standard_normal((min(n, 2), 4, 3)).astype(np.float32)
        close(f(x, i, u), scatter_elements_ref(x, i, u[:, :3, :2], ax, reduction))


@pytest.mark.parametrize("reduction", ["update", "add", "mul", "max", "min"])
@pytest.mark.parametrize("q", [1, 2, 3])
def test_scatter_nd_matches_numpy(reduction, q):
    """Index rows into the first q dims (slices of the rest), duplicates and negative indices, a
    symbolic number of index rows."""
    shape = (4, 3, 5)
    rest = shape[q:]
    f = jit(lambda x, i, u: op.scatter_nd(x, i, u, reduction=reduction),
            x=(list(shape), "float32"), i=(["j", q], "int32"), u=(["j", *rest], "float32"))
    rng = np.random.default_rng(q)
    x = rng.standard_normal(shape).astype(np.float32)
    for j in (1, 3, 7):
        i = np.stack([rng.integers(-d, d, j) for d in shape[:q]], axis=-1).astype(np.int32)
        i[-1] = i[0]   # a duplicate row
        u = rng.standard_normal((j, *rest)).astype(np.float32)
        close(f(x, i, u), scatter_nd_ref(x, i, u, reduction))


def test_scatter_float16_and_slice_assignment():
    """float16 data (added in float32, rounded once); ScatterND with 2-d index rows as exporters write
    ``x[:, 0] = v``."""
    f = jit(lambda x, i, u: op.scatter_elements(x, i, u, axis=1, reduction="add"),
            x=([3, 6], "float16"), i=([3, 2], "int64"), u=([3, 2], "float16"))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 6)).astype(np.float16)
    i = np.array([[0, 0], [5, 1], [2, -1]], np.int64)
    u = rng.standard_normal((3, 2)).astype(np.float16)
    close(f(x, i, u), scatter_elements_ref(x, i, u, 1, "add"), "float16")
    g = jit(lambda x, i, u: op.scatter_nd(x, i, u), x=(["b", "t", 4], "float32"), i=(["b", 1, 2], "int64"),
            u=(["b", 1, 4], "float32"))
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    i = np.array([[[0, 0]], [[1, 0]]], np.int64)
    u = rng.standard_normal((2, 1, 4)).astype(np.float32)
    want = x.astype(np.float64).copy()
    want[:, 0] = u[:, 0]
    close(g(x, i, u), want)


def test_scatter_index_out_of_range_is_an_error():
    f = jit(lambda x, i, u: op.scatter_elements(x, i, u, axis=0), x=([4, 2], "float32"), i=(["m", 2], "int64"),
            u=(["m", 2], "float32"))
    x = np.zeros((4, 2), np.float32)
    for bad in (4, -5, 2**40):
        with pytest.raises(ValueError, match="index out of range"):
            f(x, np.array([[0, bad]], np.int64), np.ones((1, 2), np.float32))
    g = jit(lambda x, i, u: op.scatter_nd(x, i, u), x=([4, 2], "float32"), i=(["j", 1], "int64"),
            u=(["j", 2], "float32"))
    with pytest.raises(ValueError, match="index out of range"):
        g(x, np.array([[4]], np.int64), np.ones((1, 2), np.float32))
    # updates with fewer (or more) rows than the indices: refused before the loops
    h = jit(lambda x, i, u: op.scatter_nd(x, i, u), x=([4, 2], "float32"), i=(["j", 1], "int64"),
            u=(["k", 2], "float32"))
    close(h(x, np.array([[1]], np.int64), np.ones((1, 2), np.float32)), np.array([[0, 0], [1, 1], [0, 0], [0, 0]]))
    for k in (1, 4):
        with pytest.raises(ValueError, match="the updates' shape is not"):
            h(x, np.array([[0], [1], [2]], np.int64), np.ones((k, 2), np.float32))
    e = jit(lambda x, i, u: op.scatter_elements(x, i, u, axis=0), x=(["n", 2], "float32"), i=(["m", 2], "int64"),
            u=(["k", 2], "float32"))
    with pytest.raises(ValueError, match="the indices are larger than the updates"):
        e(np.zeros((4, 2), np.float32), np.zeros((2, 2), np.int64), np.ones((1, 2), np.float32))


def test_scatter_shape_and_dtype_errors():
    with pytest.raises(TypeError, match="indices must be integers"):
        export(lambda x, i, u: op.scatter_elements(x, i, u), x=([4, 2], "float32"), i=([1, 2], "float32"),
               u=([1, 2], "float32"))
    with pytest.raises(TypeError, match="updates must have the data's dtype"):
        export(lambda x, i, u: op.scatter_elements(x, i, u), x=([4, 2], "float32"), i=([1, 2], "int64"),
               u=([1, 2], "float16"))
    with pytest.raises(ValueError, match="same rank"):
        export(lambda x, i, u: op.scatter_elements(x, i, u), x=([4, 2], "float32"), i=([2], "int64"),
               u=([2], "float32"))
    with pytest.raises(ValueError, match="reduction must be one of"):
        export(lambda x, i, u: op.scatter_elements(x, i, u, reduction="mean"), x=([4, 2], "float32"),
               i=([1, 2], "int64"), u=([1, 2], "float32"))
    with pytest.raises(ValueError, match="updates .* must have shape"):
        export(lambda x, i, u: op.scatter_nd(x, i, u), x=([4, 2], "float32"), i=([3, 1], "int64"),
               u=([3, 3], "float32"))
    with pytest.raises(ValueError, match="static last dim"):
        export(lambda x, i, u: op.scatter_nd(x, i, u), x=([4, 2], "float32"), i=([3, 3], "int64"),
               u=([3], "float32"))
    text = export(lambda x, i, u: op.scatter_elements(x, i, u, axis=1, reduction="add"), x=([4, 2], "float32"),
                  i=([1, 2], "int64"), u=([1, 2], "float32"))
    assert 'R.scatter_elements(x, i, u, axis=1, reduction="add")' in text, text
