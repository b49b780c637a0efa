"""The ``-1`` of a reshape on symbolic dims (issue 40 fuzzers): ``reshape(x, [batch * seq, -1])`` on x of
shape ``(batch, seq, 4)`` was refused ("cannot infer -1": only single dims were cancelled); the ``-1`` is now
the element count divided exactly by the product of the known dims (``arith.divide_exact``, an exact
multivariate polynomial division)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from builder.ir import expr as E
from builder.ir.op import resolve_reshape

b, s, h = E.Var("batch"), E.Var("seq"), E.Var("heads")
VALUES = [dict(zip((b, s, h), v)) for v in itertools.product((1, 2, 5), (1, 3, 4), (2, 7))]


@pytest.mark.parametrize("e, d", [
    (b * s * 4, b * s),
    ((b + 1) * (s + 2) * 3, s + 2),
    (b * b - 1, b + 1),
    (b * s * h * 12, h * 3 * s),
    (b * 6 + s * b * 3, b * 3),
])
def test_divide_exact_divides_symbolic_products(e, d):
    q = E.divide_exact(e, d)
    assert q is not None
    for env in VALUES:   # reference: Python integers
        ev, dv = E.evaluate(e, env), E.evaluate(d, env)
        assert ev % dv == 0 and E.evaluate(q, env) == ev // dv


@pytest.mark.parametrize("e, d", [(b * s + 1, s), (b * 3, 2), (b * s, h), (b * s * 4, 0), (b + s, b * s)])
def test_divide_exact_says_none_when_not_exact(e, d):
    assert E.divide_exact(e, d) is None


def test_resolve_reshape_symbolic_product_dims():
    got = resolve_reshape((b, s, 4), [b * s, -1])
    assert got[0] is not None and E.prove_equal(got[1], 4)
    got = resolve_reshape((b, s, h * 8), [-1, h * 2])
    assert E.prove_equal(got[0], b * s * 4)
    with pytest.raises(ValueError, match="cannot infer -1"):
        resolve_reshape((b, s, 4), [b * 3, -1])


def test_recipe_reshape_to_a_product_and_minus_one(tmp_path):
    import builder

    path = tmp_path / "r.yaml"
    path.write_text("name: rs\nmodel:\n  forward: |\n    return reshape(x, [batch * seq, -1])\n"
                    "functions:\n  forward:\n    x: {shape: [batch, seq, 4], dtype: float32}\n")
    m = builder.build(path)
    for shape in ((2, 3, 4), (1, 5, 4)):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        np.testing.assert_array_equal(m(x), x.reshape(shape[0] * shape[1], -1))


def test_onnx_reshape_zero_and_minus_one_on_symbolic_dims():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from helpers.onnx_models import make_model

    nodes = [helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("Gather", ["sh", "i0"], ["d0"], axis=0),
             helper.make_node("Gather", ["sh", "i1"], ["d1"], axis=0),
             helper.make_node("Mul", ["d0", "d1"], ["bs"]),
             helper.make_node("Concat", ["bs", "m1"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"]),
             helper.make_node("Reshape", ["x", "z"], ["y2"])]
    inits = [("i0", np.array([0], np.int64)), ("i1", np.array([1], np.int64)),
             ("m1", np.array([-1], np.int64)), ("z", np.array([0, 0, -1], np.int64))]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["bs", 4]),
                        helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", "seq", 4])], inits)
    from helpers.onnx_models import runner_of_both

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got, want = runner_of_both(model)({"x": x})
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert np.asarray(g).shape == w.shape == (6, 4) or np.asarray(g).shape == w.shape == (2, 3, 4)
        np.testing.assert_array_equal(np.asarray(g), w)
