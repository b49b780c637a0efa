"""TVMScript printing of PrimFuncs built with builder.te (MLC-course style goldens)."""
from builder import te
from builder.ir import tir
from builder.ir.expr import Var


def te_matmul(A, B):
    k = te.reduce_axis((0, A.shape[1]), name="k")
    return te.compute((A.shape[0], B.shape[1]),
                      lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul")


def te_relu(A):
    return te.compute(A.shape, lambda *i: te.max(A(*i), 0), name="relu")


MATMUL = '''\
@T.prim_func
def te_matmul(rxplaceholder: T.Buffer[(128, 128), "float32"], rxplaceholder_1: T.Buffer[(128, 128), "float32"], matmul: T.Buffer[(128, 128), "float32"]) -> None:
    # function attr dict
    T.func_attr({"global_symbol": "te_matmul", "tir.noalias": True})
    # body
    # with T.block("root")
    for i0, i1, i2 in T.grid(128, 128, 128):
        with T.block("matmul"):
            i, j, k = T.axis.remap("SSR", [i0, i1, i2])
            T.reads(rxplaceholder[i, k], rxplaceholder_1[k, j])
            T.writes(matmul[i, j])
            with T.init():
                matmul[i, j] = T.float32(0)
            matmul[i, j] = matmul[i, j] + rxplaceholder[i, k] * rxplaceholder_1[k, j]'''


def test_matmul_golden():
    A = te.placeholder((128, 128), "float32", name="rxplaceholder")
    B = te.placeholder((128, 128), "float32", name="rxplaceholder")
    f = te.create_prim_func([A, B, te_matmul(A, B)], name="te_matmul")
    assert f.script() == MATMUL
    assert str(f) == MATMUL
    assert f.script(name="mm").splitlines()[1].startswith("def mm(rxplaceholder: ")


RELU = '''\
@T.prim_func
def te_relu(rxplaceholder: T.Buffer[(1, 128), "float32"], relu: T.Buffer[(1, 128), "float32"]) -> None:
    # function attr dict
    T.func_attr({"global_symbol": "te_relu", "tir.noalias": True})
    # body
    # with T.block("root")
    for i0, i1 in T.grid(1, 128):
        with T.block("relu"):
            i0_1, i1_1 = T.axis.remap("SS", [i0, i1])
            T.reads(rxplaceholder[i0_1, i1_1])
            T.writes(relu[i0_1, i1_1])
            relu[i0_1, i1_1] = T.max(rxplaceholder[i0_1, i1_1], T.float32(0))'''


def test_relu_golden(capsys):
    A = te.placeholder((1, 128), name="rxplaceholder")
    f = te.create_prim_func([A, te_relu(A)], name="te_relu")
    assert f.script() == RELU
    f.show()
    assert capsys.readouterr().out == RELU + "\n"


MLP = '''\
@T.prim_func
def linear_relu(x: T.Buffer[(n, 784), "float32"], w: T.Buffer[(784, 128), "float32"], b: T.Buffer[(128,), "float32"], relu: T.Buffer[(n, 128), "float32"]) -> None:
    n = T.int64()
    # function attr dict
    T.func_attr({"global_symbol": "linear_relu", "tir.noalias": True})
    # body
    # with T.block("root")
    matmul = T.alloc_buffer([n, 128], dtype="float32")
    add = T.alloc_buffer([n, 128], dtype="float32")
    for i0, i1, i2 in T.grid(n, 128, 784):
        with T.block("matmul"):
            i, j, k = T.axis.remap("SSR", [i0, i1, i2])
            T.reads(x[i, k], w[k, j])
            T.writes(matmul[i, j])
            with T.init():
                matmul[i, j] = T.float32(0)
            matmul[i, j] = matmul[i, j] + x[i, k] * w[k, j]
    for i0, i1 in T.grid(n, 128):
        with T.block("add"):
            i, j = T.axis.remap("SS", [i0, i1])
            T.reads(matmul[i, j], b[j])
            T.writes(add[i, j])
            add[i, j] = matmul[i, j] + b[j]
    for i0, i1 in T.grid(n, 128):
        with T.block("relu"):
            i0_1, i1_1 = T.axis.remap("SS", [i0, i1])
            T.reads(add[i0_1, i1_1])
            T.writes(relu[i0_1, i1_1])
            relu[i0_1, i1_1] = T.max(add[i0_1, i1_1], T.float32(0))'''


def test_mlp_with_intermediates_and_symbolic_batch():
    n = te.var("n")
    x = te.placeholder((n, 784), name="x")
    w = te.placeholder((784, 128), name="w")
    b = te.placeholder((128,), name="b")
    mm = te_matmul(x, w)
    add = te.compute(mm.shape, lambda i, j: mm[i, j] + b[j], name="add")
    out = te_relu(add)
    f = te.create_prim_func([x, w, b, out], name="linear_relu")
    assert f.script() == MLP
    assert f.sym_vars == [n]


ONE_D = '''\
@T.prim_func
def main(A: T.Buffer[(10,), "float32"], B: T.Buffer[(10,), "float32"], total: T.Buffer[(), "float32"]) -> None:
    # function attr dict
    T.func_attr({"global_symbol": "main", "tir.noalias": True})
    # body
    # with T.block("root")
    for i0 in T.serial(10):
        with T.block("B"):
            i0_1 = T.axis.spatial(10, i0)
            T.reads(A[i0_1])
            T.writes(B[i0_1])
            B[i0_1] = T.exp(A[i0_1])
    for i0 in T.serial(10):
        with T.block("total"):
            r = T.axis.reduce(10, i0)
            T.reads(B[r])
            T.writes(total[()])
            with T.init():
                total[()] = T.float32(0)
            total[()] = total[()] + B[r]'''


def test_one_d_nest_and_scalar_reduction():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda *i: te.exp(A(*i)), name="B")
    r = te.reduce_axis((0, 10), name="r")
    total = te.compute((), lambda: te.sum(B[r], axis=r), name="total")
    assert te.create_prim_func([A, B, total]).script() == ONE_D


def test_pad_gather_and_window_regions():
    A = te.placeholder((8,), name="A")
    pad = te.compute((10,), lambda i: te.if_then_else(te.all(i >= 1, i < 9), A[i - 1], 0.0),
                     name="pad")
    win = te.compute((8,), lambda i: pad[i] + pad[i + 1] + pad[i + 2], name="win")
    idx = te.placeholder((4,), "int32", name="idx")
    W = te.placeholder((100, 16), name="W")
    emb = te.compute((4, 16), lambda i, j: W[idx[i], j], name="emb")
    text = te.create_prim_func([A, win], name="f").script()
    assert ('pad[i] = T.if_then_else(i >= 1 and i < 9, A[i - 1], T.float32(0))' in text)
    assert "T.reads(pad[i:i + 3])" in text
    assert 'pad = T.alloc_buffer([10], dtype="float32")' in text
    text = te.create_prim_func([idx, W, emb], name="g").script()
    assert "T.reads(W[0:100, j], idx[i])" in text
    assert "emb[i, j] = W[idx[i], j]" in text


def test_lowered_and_handwritten_statements_print():
    A = tir.Buffer("A", (Var("n"),), "float32")
    i = Var("i")
    x = Var("x", "float32")
    body = tir.For(i, 0, A.shape[0], "parallel",
                   tir.LetStmt(x, A[i] * 2.0,
                               tir.IfThenElse(x > 0.0, tir.BufferStore(A, x, [i]),
                                              tir.BufferStore(A, 0.0, [i]))))
    f = tir.PrimFunc([A], body, name="scale")
    text = f.script()
    assert "    for i in T.parallel(n):" in text
    assert "        x: T.float32 = A[i] * T.float32(2)" in text
    assert "        if x > T.float32(0):" in text
    assert "            A[i] = T.float32(0)" in text.split("else:")[1]
    tir.verify(f)
