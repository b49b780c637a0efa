"""Bounds of the tree of a symbolic int expression (issue 40 fuzzers, after items 9 / 13).

A chain ``d = d // 2 + d * batch`` (the floor division an opaque atom holding the whole polynomial), then
squared, stayed inside the polynomial bounds but made a dim of 83,157 nodes once its DAG is expanded as a
tree; ``codegen.abi.dim_to_json`` re-simplified every subtree recursively and the build never finished.
Now :func:`builder.ir.arith.simplify` refuses an integer result past ``MAX_EXPR_NODES`` / ``MAX_EXPR_DEPTH``
(recipe: at the statement, exit 2; ONNX: at the node) and ``dim_to_json`` walks its dim once, iteratively.
The case that hung runs in a subprocess with a timeout.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.codegen.abi import dim_to_json
from builder.ir import arith
from builder.ir import expr as E
from runtime.native import eval_dim

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60   # seconds; the old code ran past 25 s and did not finish

CHAIN = """name: symbolic
model:
  forward: |
    d0 = 2 * batch - seq
    d1 = d0 + d0
    d2 = d1 * d1
    d3 = (d2 - seq) * (d2 + seq)
    d4 = d3 * d3
    d5 = d4 // 2 + d4 * batch
    d6 = d5 // 2 + d5 * batch
    d7 = d6 // 2 + d6 * batch
    d8 = d7 // 2 + d7 * batch
    d9 = d8 + d8
    d10 = d9 * d9
    return arange(d10)
functions:
  forward:
    x: {shape: [batch, seq, 4], dtype: float32}
"""


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def _tree_size(e) -> int:
    """Independent count: the expression's nodes as a tree (recursion is fine on these small cases)."""
    if isinstance(e, E.BinaryOp):
        return 1 + _tree_size(e.a) + _tree_size(e.b)
    return 1


def test_recipe_floordiv_chain_squared_is_a_positioned_error(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(CHAIN)
    done = _run(f"from builder.cli import main; raise SystemExit(main([{str(path)!r}, '--no-ir']))")
    assert done.returncode == 2, done.stderr
    # d10 = d9 * d9 (line 14, column 11 of the file) is the first dim past MAX_EXPR_NODES
    assert f"{path}:14:11: model.forward: operator *: the symbolic expression in batch, seq is too large" \
        in done.stderr, done.stderr
    assert "MAX_EXPR_NODES" in done.stderr and "Traceback" not in done.stderr


def _chain(levels: int):
    b, s = E.Var("batch"), E.Var("seq")
    d = E.simplify(2 * b - s)
    d = E.simplify(d + d)
    d = E.simplify(d * d)
    d = E.simplify((d - s) * (d + s))
    d = E.simplify(d * d)
    for _ in range(levels):
        d = E.simplify(d // 2 + d * b)
    return b, s, d


def test_dim_within_the_bounds_serialises_and_evaluates_exactly():
    b, s, d = _chain(4)                 # d8 of the recipe: ~4,300 nodes, inside MAX_EXPR_NODES
    size, depth = arith.expr_tree_size(d)
    assert size == _tree_size(d) and size <= arith.MAX_EXPR_NODES and depth <= arith.MAX_EXPR_DEPTH
    tree = dim_to_json(d)
    for bv, sv in ((1, 1), (3, 2), (2, 7)):
        # reference: the same chain in Python ints
        r = 2 * bv - sv
        r = r + r
        r = r * r
        r = (r - sv) * (r + sv)
        r = r * r
        for _ in range(4):
            r = r // 2 + r * bv
        assert eval_dim(tree, {"batch": bv, "seq": sv}) == r
        assert E.evaluate(d, {b: bv, s: sv}) == r


def test_simplify_refuses_a_tree_past_max_expr_nodes():
    b, s, d = _chain(4)
    with pytest.raises(ValueError, match=r"expression in batch, seq is too large .*MAX_EXPR_NODES"):
        E.simplify((d + d) * (d + d))


def test_a_small_dag_with_an_exponential_tree_is_refused_not_walked():
    n = E.Var("n")
    m = n
    for _ in range(200):                 # min(m, m + 1) 200 times: 400 distinct nodes, ~2**200 as a tree
        m = E.Min(m, m + 1)
    size, _ = arith.expr_tree_size(m, limit=arith.MAX_EXPR_NODES)
    assert size > arith.MAX_EXPR_NODES
    with pytest.raises(ValueError, match="MAX_EXPR_NODES"):
        E.simplify(m)
    with pytest.raises(ValueError, match="MAX_EXPR_NODES"):
        dim_to_json(m)


def test_simplify_refuses_a_chain_past_max_expr_depth():
    xs = [E.Var(f"v{i}") for i in range(arith.MAX_EXPR_DEPTH + 10)]
    total = xs[0]
    for v in xs[1:]:
        total = total + v
    with pytest.raises(ValueError, match="MAX_EXPR_DEPTH"):
        E.simplify(total)
    small = xs[0]
    for v in xs[1:50]:
        small = small + v
    env = {f"v{i}": i * 3 + 1 for i in range(50)}
    assert eval_dim(dim_to_json(small), env) == sum(env.values())


def test_onnx_shape_chain_squared_and_floordivided_names_the_node():
    pytest.importorskip("onnx")
    code = """
from onnx import TensorProto, helper
from builder.frontend.onnx import ONNXImportError, from_onnx
from helpers.onnx_models import make_model
import numpy as np
nodes = [helper.make_node("Shape", ["x"], ["s0"])]
nodes += [helper.make_node("Mul", ["s0", "s0"], ["q0"])]
for i in range(8):
    nodes += [helper.make_node("Div", [f"q{i}", "two"], [f"h{i}"]),
              helper.make_node("Mul", [f"q{i}", "s0"], [f"m{i}"]),
              helper.make_node("Add", [f"h{i}", f"m{i}"], [f"a{i}"]),
              helper.make_node("Mul", [f"a{i}", f"a{i}"], [f"q{i + 1}"])]
nodes.append(helper.make_node("ConstantOfShape", ["q8"], ["y"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])))
model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m"])], inits=[("two", np.array([2], np.int64))])
try:
    from_onnx(model)
except ONNXImportError as err:
    print("ERR", err)
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert "ERR" in done.stdout and "Traceback" not in done.stderr, done.stdout + done.stderr
