"""ArgMax / ArgMin on rows holding NaN (issue 40, item 2): the index of the row's FIRST NaN, as
``numpy.argmax`` / ``argmin`` and ``torch.argmax`` give it (NaN counts as both the largest and the smallest
value), never an index outside the axis. Checked against numpy on every float dtype (bfloat16 through its
bits), on integers (no NaN), with keepdims, axis=None, +-inf, and through the recipe's ``argmax`` and ONNX's
ArgMax / ArgMin.

onnxruntime (1.2x CPU) is not the reference here: its ArgMax compares with ``>`` from the first element, so it
skips NaN except at index 0 (``[1, nan, 3]`` -> 2, ``[nan, 1, 3]`` -> 0); the ONNX spec says nothing about NaN.
"""
from __future__ import annotations

import numpy as np
import pytest

from builder.nn import op
from helpers.functional import jit

NAN, INF = np.nan, np.inf

#: rows of 7: NaN first / middle / last / twice / everywhere, with +-inf around, and rows without NaN
ROWS = np.array([
    [NAN, 1, 3, NAN, 0, -1, 2],
    [1, NAN, 3, NAN, 0, -1, 2],
    [1, 5, 3, 5, 0, -1, NAN],
    [INF, 2, 1, -INF, NAN, 0, INF],
    [-INF, -INF, NAN, INF, INF, NAN, 0],
    [NAN, NAN, NAN, NAN, NAN, NAN, NAN],
    [2, -INF, INF, 3, INF, -INF, 1],
    [0.5, 0.25, 0.5, -0.25, 0.25, -0.25, 0.125],
], np.float64)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float64 values exactly representable in bfloat16 (those of ROWS) -> bfloat16 bits (NaN: 0x7FC0)."""
    b = (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), b)


def _input(dtype: str, x: np.ndarray) -> np.ndarray:
    return _bf16_bits(x) if dtype == "bfloat16" else x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_first_nan_wins_every_float_dtype(dtype):
    f = jit(lambda x: (op.argmax(x, axis=1), op.argmin(x, axis=1), op.argmax(x, axis=0, keepdims=True),
                       op.argmin(x, axis=0, keepdims=True), op.argmax(x), op.argmin(x)),
            x=(("n", 7), dtype))
    for rows in (ROWS, ROWS[[6, 7]], ROWS[[7, 2, 6]]):
        a1, m1, a0, m0, af, mf = f(_input(dtype, rows))
        np.testing.assert_array_equal(a1, rows.argmax(1))
        np.testing.assert_array_equal(m1, rows.argmin(1))
        np.testing.assert_array_equal(a0, rows.argmax(0, keepdims=True))
        np.testing.assert_array_equal(m0, rows.argmin(0, keepdims=True))
        assert af.shape == () and int(af) == rows.argmax()
        assert mf.shape == () and int(mf) == rows.argmin()
        assert a1.dtype == np.int64 and (a1 < 7).all() and (m1 < 7).all()


def test_rows_of_3d_tensor_and_random_nan_positions():
    rng = np.random.default_rng(40)
    x = rng.standard_normal((5, 33, 9))
    x[rng.random(x.shape) < 0.05] = NAN
    x[rng.random(x.shape) < 0.05] = INF
    x[rng.random(x.shape) < 0.05] = -INF
    f = jit(lambda t: (op.argmax(t, axis=1), op.argmin(t, axis=2, keepdims=True), op.argmax(t, axis=-1)),
            t=(("b", 33, 9), "float32"))
    a1, m2, a2 = f(x.astype(np.float32))
    np.testing.assert_array_equal(a1, x.argmax(1))
    np.testing.assert_array_equal(m2, x.argmin(2, keepdims=True))
    np.testing.assert_array_equal(a2, x.argmax(-1))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integers_first_extreme(dtype):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, (6, 11)).astype(dtype)   # many ties
    f = jit(lambda t: (op.argmax(t, axis=1), op.argmin(t, axis=0), op.argmax(t)), t=((6, 11), dtype))
    a1, m0, af = f(x)
    np.testing.assert_array_equal(a1, x.argmax(1))
    np.testing.assert_array_equal(m0, x.argmin(0))
    assert int(af) == x.argmax()


def test_recipe_argmax_takes_the_first_nan(tmp_path):
    import builder
    from helpers.recipes import with_forward

    path = tmp_path / "r.yaml"
    path.write_text(with_forward("return argmax(x, axis=1), argmin(x, axis=1, keepdims=True)", shape="[batch, 7]"))
    m = builder.build(path)
    a, b = m(ROWS.astype(np.float32))
    np.testing.assert_array_equal(a, ROWS.argmax(1))
    np.testing.assert_array_equal(b, ROWS.argmin(1, keepdims=True))


@pytest.mark.parametrize("kind", ["ArgMax", "ArgMin"])
def test_onnx_arg_reduce_takes_the_first_nan(kind):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import runtime
    from builder import compile as build
    from builder.frontend.onnx import from_onnx
    from helpers.onnx_models import make_model

    nodes = [helper.make_node(kind, ["x"], ["y"], axis=1, keepdims=0),
             helper.make_node(kind, ["x"], ["z"], axis=0, keepdims=1)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 7])],
                       [helper.make_tensor_value_info("y", TensorProto.INT64, ["n"]),
                        helper.make_tensor_value_info("z", TensorProto.INT64, [1, 7])])
    y, z = runtime.VirtualMachine(build(from_onnx(model)))["main"](ROWS.astype(np.float32))
    ref = np.argmax if kind == "ArgMax" else np.argmin
    np.testing.assert_array_equal(y, ref(ROWS, 1))
    np.testing.assert_array_equal(z, ref(ROWS, 0, keepdims=True))
