"""Rounding and integer-division records (``floor``, ``ceil``, ``round``, ``trunc``, ``sign``,
``floor_divide``, ``floor_mod``, TVM Relax's names) through ``Module.jit`` against numpy, in float32,
float16 and int32, with the edge values (halves, negative operands, NaN, -0.0, an integer divisor of 0)."""
import numpy as np
import pytest

from builder import nn

EDGES = np.array([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 2.4999, -3.7, 7.2, np.nan, 3e4 + 0.5, 8388609.0], np.float32)


class _Unary(nn.Module):
    def forward(self, x):
        return (nn.op.floor(x), nn.op.ceil(x), nn.op.round(x), nn.op.trunc(x), nn.op.sign(x))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_rounding_and_sign_match_numpy(dtype):
    f = _Unary().jit({"forward": {"x": nn.spec.Tensor(["n"], dtype)}})["forward"]
    rng = np.random.default_rng(7)
    if dtype == "int32":
        x = rng.integers(-50, 50, 40).astype(np.int32)
    else:
        edges = EDGES if dtype == "float32" else EDGES[~(np.abs(EDGES) > 6e4)]     # float16's range
        x = np.concatenate([edges, rng.uniform(-10, 10, 30).astype(np.float32)]).astype(dtype)
    got = f(x)
    for g, ref in zip(got, (np.floor, np.ceil, np.round, np.trunc, np.sign)):
        assert g.dtype == x.dtype
        np.testing.assert_array_equal(g, ref(x) if dtype != "int32" else ref(x).astype(np.int32))


class _Div(nn.Module):
    def forward(self, a, b):
        return nn.op.floor_divide(a, b), nn.op.floor_mod(a, b)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_floor_divide_and_mod_match_numpy(dtype):
    f = _Div().jit({"forward": {"a": nn.spec.Tensor(["n", 3], dtype), "b": nn.spec.Tensor([3], dtype)}})["forward"]
    rng = np.random.default_rng(8)
    if dtype == "float32":
        a = rng.uniform(-20, 20, (5, 3)).astype(dtype)
        b = np.array([3.5, -2.0, 0.75], dtype)
    else:
        a = rng.integers(-20, 20, (5, 3)).astype(dtype)
        b = np.array([3, -4, 0], dtype)
    q, r = f(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        want_q, want_r = np.floor_divide(a, b), np.mod(a, b)
    if dtype != "float32":     # numpy: x // 0 == 0 and x % 0 == 0 for integers
        want_q[:, 2] = 0
        want_r[:, 2] = 0
        np.testing.assert_array_equal(q, want_q)
        np.testing.assert_array_equal(r, want_r)
    else:
        np.testing.assert_allclose(q, want_q)
        np.testing.assert_allclose(r, want_r, atol=1e-5)
