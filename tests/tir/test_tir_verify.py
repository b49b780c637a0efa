"""verify(): well-formedness errors name the function and the offending statement."""
import pytest

from builder import te
from builder.ir import tir
from builder.ir.expr import IntImm, Var


def test_unbound_var_and_unknown_buffer():
    A = tir.Buffer("A", (4,), "float32")
    stray = tir.Buffer("stray", (4,), "float32")
    i, j = Var("i"), Var("j")
    body = tir.For(i, 0, 4, "serial", tir.BufferStore(A, stray[j], [i]))
    with pytest.raises(tir.VerifyError) as err:
        tir.verify(tir.PrimFunc([A], body, name="bad"))
    msg = str(err.value)
    assert "PrimFunc 'bad'" in msg
    assert "variable 'j' is not bound" in msg
    assert "buffer 'stray' is neither a param nor allocated" in msg
    assert "A[i] = stray[j]" in msg


def test_store_dtype_mismatch():
    A = tir.Buffer("A", (4,), "float32")
    i = Var("i")
    body = tir.For(i, 0, 4, "serial", tir.BufferStore(A, i, [i]))
    with pytest.raises(ValueError, match=r"store of a int64 value into float32 buffer 'A'.*A\[i\] = i"):
        tir.verify(tir.PrimFunc([A], body, name="f"))


def test_block_body_may_not_use_outer_loop_vars():
    A = tir.Buffer("A", (4,), "float32")
    i0 = Var("i0")
    vi = Var("vi")
    block = tir.Block("b", [tir.IterVar(vi, (0, 4), "S")], [], [tir.BufferRegion.point(A, [vi])],
                      tir.BufferStore(A, 1.0, [i0]))
    body = tir.For(i0, 0, 4, "serial", tir.BlockRealize([i0], IntImm(1, "bool"), block))
    with pytest.raises(tir.VerifyError, match="variable 'i0' is not bound"):
        tir.verify(tir.PrimFunc([A], body, name="g"))


def test_wrong_index_count_is_rejected_at_construction():
    A = tir.Buffer("A", (4, 4), "float32")
    with pytest.raises(ValueError, match="2 dims but is indexed with 1"):
        A[Var("i")]
    t = te.placeholder((3,), name="t")
    with pytest.raises(ValueError, match="1 dims but is indexed with 2"):
        t[0, 1]


def test_create_prim_func_errors():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(ValueError, match="placeholder 'A' .* is not among the arguments"):
        te.create_prim_func([B])
    with pytest.raises(ValueError, match="listed twice"):
        te.create_prim_func([A, A, B])
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(ValueError, match="top-level"):
        te.compute((1,), lambda i: te.sum(A[k], axis=k) * 2.0)
    with pytest.raises(TypeError, match="floating-point"):
        te.exp(Var("n"))


def test_verify_accepts_te_output_and_lowered_output():
    from builder.codegen import lower

    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    k = te.reduce_axis((0, 3), name="k")
    s = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="s")
    f = te.create_prim_func([A, s])
    tir.verify(f)
    low = lower(f)
    tir.verify(low)
    assert "s[i0] = T.float32(-3.4028234663852886e+38)" in low.script()
