"""builder.ir.structural_equal / assert_structural_equal: equality modulo variable naming."""
import numpy as np
import pytest

from builder import nn, te
from builder.ir import (BlockBuilder, DataflowVar, IRModule, TensorStructInfo, Var, assert_structural_equal,
                        parse, structural_equal)
from builder.ir import expr as E
from builder.ir import relax as rx
from builder.ir import tir

F32 = "float32"


def call(op, *args, **attrs):
    return rx.Call(rx.Op.get(op), list(args), attrs)


def func(build, params, name="main", dataflow=True):
    bb = BlockBuilder()
    with bb.function(name, params):
        if dataflow:
            with bb.dataflow():
                gv = bb.emit_output(build(bb))
        else:
            gv = build(bb)
        bb.emit_func_output(gv)
    return bb.get()


def relu_mod(xname="x", shape=(3, 3), dtype=F32, op="nn.relu"):
    x = Var(xname, TensorStructInfo(shape, dtype))
    return func(lambda bb: bb.emit(call(op, x), name_hint="y" + xname), [x])


def test_names_do_not_matter():
    a, b = relu_mod("x"), relu_mod("input")
    assert a.script() != b.script()
    assert structural_equal(a, b)
    assert_structural_equal(a, b)


def test_two_exports_of_the_same_model_are_equal():
    spec = {"forward": {"x": nn.spec.Tensor(["n", 8], F32)}}
    a, _ = nn.ReLU().export_tvm(spec=spec)
    b, _ = nn.ReLU().export_tvm(spec=spec)
    assert a["forward"].params[0] is not b["forward"].params[0]
    assert_structural_equal(a, b)
    assert_structural_equal(a["forward"], b["forward"])


def test_mismatch_message_has_path_reason_and_diff():
    with pytest.raises(AssertionError) as info:
        assert_structural_equal(relu_mod(), relu_mod(dtype="float16"))
    msg = str(info.value)
    first = msg.splitlines()[0]
    assert first.startswith('structural mismatch at mod["main"].params[0].struct_info.dtype: float32 vs float16')
    assert "--- lhs\n+++ rhs\n" in msg
    assert '-    def main(x: R.Tensor((3, 3), dtype="float32"))' in msg
    assert '+    def main(x: R.Tensor((3, 3), dtype="float16"))' in msg


def test_op_shape_attr_and_kind_differences():
    assert not structural_equal(relu_mod(), relu_mod(op="nn.silu"))
    assert not structural_equal(relu_mod(), relu_mod(shape=(3, 4)))
    x = Var("x", TensorStructInfo((2, 3), F32))
    a = func(lambda bb: bb.emit(call("permute_dims", x, axes=None)), [x])
    b = func(lambda bb: bb.emit(call("permute_dims", x, axes=[1, 0])), [x])
    with pytest.raises(AssertionError, match=r"value\.attrs\['axes'\]: None vs \[1, 0\]"):
        assert_structural_equal(a, b)
    # a DataflowVar is not a Var
    c = func(lambda bb: bb.emit(call("nn.relu", x)), [x], dataflow=False)
    d = func(lambda bb: bb.emit(call("nn.relu", x)), [x], dataflow=True)
    assert not structural_equal(c, d)
    bd = d["main"].body.blocks[0].bindings
    assert type(bd[0].var) is DataflowVar


def test_attribute_numbers_compare_by_value_and_constants_exactly():
    assert structural_equal({"pad_value": 0}, {"pad_value": 0.0})
    assert not structural_equal({"k": True}, {"k": 1})
    assert not structural_equal({"k": "a"}, {"k": "b"})
    c1 = rx.const(np.array([1.0, np.nan], "float32"))
    c2 = rx.const(np.array([1.0, np.nan], "float32"))
    c3 = rx.const(np.array([1.0, 2.0], "float32"))
    assert structural_equal(c1, c2)
    with pytest.raises(AssertionError, match=r"constant values differ \(first at index \(1,\)"):
        assert_structural_equal(c1, c3)
    assert not structural_equal(c3, rx.Constant(np.array([1.0, 2.0], "float64")))


def test_symbolic_vars_map_one_to_one():
    def transpose_mod(swap: bool, same: bool):
        n, m = E.Var("n"), E.Var("m")
        x = Var("x", TensorStructInfo((n, n if same else m), F32))
        axes = [1, 0]
        return func(lambda bb: bb.emit(call("permute_dims", x, axes=axes)) if swap else bb.emit(call("nn.relu", x)),
                    [x])

    a = transpose_mod(False, False)
    assert structural_equal(a, transpose_mod(False, False))
    # (n, m) vs (n, n): m would have to map to n, which already has a partner
    with pytest.raises(AssertionError, match="already mapped|corresponds to"):
        assert_structural_equal(a, transpose_mod(False, True))
    # the output shape (m, n) of a transpose is not (n, m)
    n, m = E.Var("n"), E.Var("m")
    x = Var("x", TensorStructInfo((n, m), F32))
    ret_nm = func(lambda bb: bb.emit(call("permute_dims", x, axes=[1, 0])), [x])
    n2, m2 = E.Var("n"), E.Var("m")
    x2 = Var("x", TensorStructInfo((n2, m2), F32))
    ret_same = func(lambda bb: bb.emit(call("nn.relu", x2)), [x2])
    assert not structural_equal(ret_nm, ret_same)


def test_distinct_symbolic_vars_with_one_name_stay_distinct_through_print_and_parse():
    d1, d2 = E.Var("hidden_size"), E.Var("hidden_size")
    x = Var("x", TensorStructInfo((d1, d2), F32))
    mod = func(lambda bb: bb.emit(call("permute_dims", x, axes=None)), [x])
    text = mod.script()
    assert 'R.Tensor(("hidden_size", "hidden_size_1"), dtype="float32")' in text
    back = parse(text)
    assert_structural_equal(mod, back)
    one = E.Var("hidden_size")
    y = Var("x", TensorStructInfo((one, one), F32))
    assert not structural_equal(mod, func(lambda bb: bb.emit(call("permute_dims", y, axes=None)), [y]))


def test_free_vars_need_map_free_vars():
    n, m = E.Var("n"), E.Var("m")
    a, b = TensorStructInfo((n, 4), F32), TensorStructInfo((m, 4), F32)
    assert structural_equal(a, TensorStructInfo((n, 4), F32))
    assert not structural_equal(a, b)
    assert structural_equal(a, b, map_free_vars=True)
    with pytest.raises(AssertionError, match="free variables differ.*map_free_vars=True"):
        assert_structural_equal(n * 2, m * 2)
    assert_structural_equal(n * 2 + 1, m * 2 + 1, map_free_vars=True)
    assert not structural_equal(n * 2 + n, m * 2 + n, map_free_vars=True)  # n already maps to m


def test_size_expressions_compare_by_value_other_expressions_by_structure():
    n = E.Var("n")
    assert structural_equal(TensorStructInfo((E.Mul(n, E.IntImm(2)),), F32),
                            TensorStructInfo((E.Add(n, n),), F32))
    A = tir.Buffer("A", (4,), "int64")
    i = E.Var("i")
    store = lambda v: tir.For(i, 0, 4, "serial", tir.BufferStore(A, v, [i]))  # noqa: E731
    assert not structural_equal(store(E.Mul(i, E.IntImm(2))), store(E.Add(i, i)))
    # loop bounds are sizes: 0 + 4 and 4 agree
    B = tir.Buffer("B", (n,), F32)
    j, k = E.Var("j"), E.Var("k")
    f1 = tir.PrimFunc([B], tir.For(j, 0, E.Add(n, E.IntImm(0)), "serial", tir.BufferStore(B, 0.0, [j])))
    f2 = tir.PrimFunc([B], tir.For(k, 0, n, "serial", tir.BufferStore(B, 0.0, [k])))
    assert structural_equal(f1, f2)


def te_relu_func(in_name, out_name, block_name="relu", dtype=F32, name="main"):
    A = te.placeholder((4, 5), dtype, name=in_name)
    return te.create_prim_func([A, te.compute(A.shape, lambda *i: te.max(A(*i), 0), name=block_name)], name)


def test_prim_funcs_modulo_buffer_and_loop_names():
    a = te_relu_func("A", "out")
    b = te_relu_func("inp", "res")
    assert structural_equal(a, b)
    assert not structural_equal(a, te_relu_func("A", "out", dtype="float16"))
    with pytest.raises(AssertionError, match=r'body\.block\.body\.body\.body\.block\.name: T.block\("relu"\) vs '
                                             r'T.block\("other"\)'):
        assert_structural_equal(a, te_relu_func("A", "out", block_name="other"))
    with pytest.raises(AssertionError, match=r"attrs\['global_symbol'\]: 'main' vs 'g'"):
        assert_structural_equal(a, te_relu_func("A", "out", name="g"))


def test_loop_and_block_variables_are_scoped():
    A = tir.Buffer("A", (4,), F32)
    i = E.Var("i")
    shared = tir.SeqStmt([tir.For(i, 0, 4, "serial", tir.BufferStore(A, 1.0, [i])),
                          tir.For(i, 0, 4, "serial", tir.BufferStore(A, 2.0, [i]))])
    j, k = E.Var("j"), E.Var("k")
    separate = tir.SeqStmt([tir.For(j, 0, 4, "serial", tir.BufferStore(A, 1.0, [j])),
                            tir.For(k, 0, 4, "serial", tir.BufferStore(A, 2.0, [k]))])
    f1, f2 = tir.PrimFunc([A], shared, name="f"), tir.PrimFunc([A], separate, name="f")
    assert_structural_equal(f1, f2)
    assert_structural_equal(f2, f1)
    assert not structural_equal(tir.PrimFunc([A], separate, name="f"),
                                tir.PrimFunc([A], tir.SeqStmt([separate.seq[0], separate.seq[0]]), name="f")
                                .with_attr("x", 1))


def test_module_function_sets_and_shared_symbolic_vars_across_functions():
    a = relu_mod()
    b = IRModule(dict(a.functions))
    b["extra"] = te_relu_func("A", "B")
    with pytest.raises(AssertionError, match=r"functions differ: only in lhs \[\], only in rhs \['extra'\]"):
        assert_structural_equal(a, b)
    # a legalized module shares its graph-level symbolic vars with its PrimFuncs; a parsed one
    # has one set per function: both are fine
    from builder.transform import LegalizeOps

    mod, _ = nn.ReLU().export_tvm(spec={"forward": {"x": nn.spec.Tensor(["n", 8], F32)}})
    legal = LegalizeOps()(mod)
    assert_structural_equal(legal, parse(legal.script()))


def test_plain_values_and_type_mismatches():
    assert structural_equal([1, "a", None], (1, "a", None))
    assert not structural_equal([1, 2], [1, 2, 3])
    assert not structural_equal({"a": 1}, {"b": 1})
    assert not structural_equal(relu_mod(), relu_mod()["main"])
    with pytest.raises(AssertionError, match="lhs is IRModule, rhs is Function"):
        assert_structural_equal(relu_mod(), relu_mod()["main"])
