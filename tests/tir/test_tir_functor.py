"""Loop-level visitors and mutators (TVM's StmtExprVisitor / StmtExprMutator) and the graph-level
ExprVisitor: what they visit and rebuild, checked on a real PrimFunc and a real Relax function."""
import numpy as np

from builder import nn, te
from builder.codegen import build
from builder.codegen.schedule import substitute_stmt
from builder.ir import expr as E
from builder.ir import relax as rx
from builder.ir import tir
from builder.ir.functor import ExprVisitor


def _func():
    n = te.var("n")
    x = te.placeholder((n, 8), "float32", name="x")
    k = te.reduce_axis((0, 8), name="k")
    s = te.compute((n,), lambda i: te.sum(x[i, k] * 2.0, axis=k), name="s")
    return te.create_prim_func([x, te.compute((n,), lambda i: te.exp(s[i]), name="y")])


def test_stmt_expr_visitor_counts_nodes():
    class Count(tir.StmtExprVisitor):
        def __init__(self):
            self.loads, self.stores, self.calls = [], 0, []

        def visit_buffer_load(self, e):
            self.loads.append(e.buffer.name)
            self.generic_visit_expr(e)

        def visit_buffer_store(self, s):
            self.stores += 1
            self.generic_visit_stmt(s)

        def visit_call(self, e):
            self.calls.append(e.op)
            self.generic_visit_expr(e)

    c = Count()
    c.visit_stmt(_func().body)
    # s = s + x * 2 (init store, update store), y = exp(s)
    assert sorted(c.loads) == ["s", "s", "x"] and c.stores == 3 and c.calls == ["exp"]


def test_stmt_expr_mutator_rebuilds_every_expression():
    """``substitute_stmt`` (a StmtExprMutator overriding visit_expr) renames a symbolic dim in loop
    bounds, block bindings and stores; the rewritten function computes the same."""
    f = _func()
    n = f.sym_vars[0]
    m = E.Var("m", "int64")
    body = substitute_stmt(f.body, {n: m})
    class Extents(tir.StmtExprVisitor):
        def __init__(self):
            self.vars = []

        def visit_for(self, loop):
            self.vars += [v.name for v in E.free_vars(loop.extent)]
            self.generic_visit_stmt(loop)

    before, after = Extents(), Extents()
    before.visit_stmt(f.body)
    after.visit_stmt(body)
    assert before.vars == ["n", "n"] and after.vars == ["m", "m"]
    # identity substitution keeps the semantics: compile and run the rebuilt body
    same = f.with_body(substitute_stmt(f.body, {n: n}))
    lib = build({"f": same}).load()
    x = np.arange(24, dtype=np.float32).reshape(3, 8) / 10
    y = np.empty(3, np.float32)
    lib.call("f", [x, y])
    np.testing.assert_allclose(y, np.exp((x.astype(np.float64) * 2).sum(1)), rtol=1e-5)


def test_relax_expr_visitor_sees_every_call():
    class Net(nn.Module):
        def forward(self, x):
            return nn.op.silu(x) * x + 1.0

    mod, _ = Net().export_tvm({"forward": {"x": nn.spec.Tensor(["n", 4], "float32")}})

    class Ops(ExprVisitor):
        def __init__(self):
            self.ops = []

        def visit_call(self, call):
            self.ops.append(call.op.name)
            self.generic_visit(call)

    v = Ops()
    v.visit_module(mod)
    assert v.ops == ["relax.nn.silu", "relax.multiply", "relax.add"]
    assert all(isinstance(f, rx.Function) for f in mod.functions.values())
