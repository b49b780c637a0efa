"""Concat of hundreds / thousands of inputs (issue 40, item 13): the body selects its input through
``if_then_else`` nested as a balanced search (depth log2 n), so no recursive walk of it (te's nested-reduce
check, the printer, lowering, LLVM emission) overflows Python's stack; checked against numpy through
``nn.op.concat``, a recipe's ``concat`` and ONNX's Concat."""
from __future__ import annotations

import math

import numpy as np
import pytest

from builder import te
from builder.ir import expr as E
from builder.ir import tir
from builder.nn import op
from builder.te import topi
from helpers.functional import jit


def _depth(e: E.PrimExpr) -> int:
    """Nesting depth of ``if_then_else`` calls in ``e`` (iterative)."""
    best, stack = 0, [(e, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, E.Call) and node.op == "if_then_else":
            d += 1
            best = max(best, d)
        stack.extend((c, d) for c in tir.expr_children(node))
    return best


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000])
def test_concat_body_is_a_balanced_search(n):
    xs = [te.placeholder((2, i % 3 + 1), "float32", f"x{i}") for i in range(n)]
    out = topi.concat(xs, axis=1)
    assert _depth(out.op.body) == math.ceil(math.log2(n))


def test_nn_concat_of_1000_inputs_compiles_and_runs():
    f = jit(lambda x, y: op.concat([x, y] * 500, dim=1), x=(("n", 3), "float32"), y=(("n", "m"), "float32"))
    rng = np.random.default_rng(13)
    for rows, m in ((1, 1), (3, 5)):
        x = rng.standard_normal((rows, 3)).astype(np.float32)
        y = rng.standard_normal((rows, m)).astype(np.float32)
        np.testing.assert_array_equal(f(x, y), np.concatenate([x, y] * 500, axis=1))


def test_recipe_concat_of_1000_inputs(tmp_path):
    import builder
    from helpers.recipes import with_forward

    parts = ", ".join(["x", "h"] * 500)
    path = tmp_path / "r.yaml"
    path.write_text(with_forward(f"h = x * 2.0\nreturn concat([{parts}], dim=0)", shape="[batch, 4]"))
    m = builder.build(path)
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(m(x), np.concatenate([x, x * 2] * 500, axis=0))


def test_onnx_concat_of_300_inputs():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import runtime
    from builder import compile as build
    from builder.frontend.onnx import from_onnx
    from helpers.onnx_models import make_model

    n = 300
    nodes = [helper.make_node("Concat", ["x", "y"] * (n // 2), ["z"], axis=-1)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 2]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 1])],
                       [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["b", 3 * n // 2])])
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((4, 2)).astype(np.float32), rng.standard_normal((4, 1)).astype(np.float32)
    z = runtime.VirtualMachine(build(from_onnx(model)))["main"](x, y)
    np.testing.assert_array_equal(z, np.concatenate([x, y] * (n // 2), axis=-1))


def test_nested_reduce_check_walks_deep_bodies_without_recursion():
    x = te.placeholder((4, 4), "float32", "x")
    k = te.reduce_axis((0, 4), "k")
    deep = te.compute((4,), lambda i: _chain(x[i, 0], 3000))
    assert deep.shape[0].value == 4
    with pytest.raises(ValueError, match="top-level expression"):
        te.compute((4,), lambda i: _chain(te.sum(x[i, k], axis=k), 3000))
    ok = te.compute((4,), lambda i: te.sum(_chain(x[i, k], 3000), axis=k))   # a deep source of a top reduce
    assert ok.dtype == "float32"


def _chain(e: E.PrimExpr, n: int) -> E.PrimExpr:
    for _ in range(n):
        e = e + E.FloatImm(1.0, "float32")
    return e
