import pytest

from builder import ir


def _relu(x):
    return ir.Call(ir.Op.get("nn.relu"), [x])


def _relu_main(x, operand):
    """``main(x)`` returning ``relu(operand)`` through a dataflow block."""
    bb = ir.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            lv = bb.emit(_relu(operand), "relu")
            gv = bb.emit_output(lv)
        bb.emit_func_output(gv)
    return bb.get()


def test_use_before_definition_shows_ir():
    x = ir.Var("x", ir.TensorStructInfo((2, 3), "float32"))
    ghost = ir.Var("ghost", ir.TensorStructInfo((2, 3), "float32"))
    with pytest.raises(ir.IRVerifyError, match="'ghost' is used before it is defined") as info:
        ir.verify(_relu_main(x, ghost))
    assert "--> " in str(info.value) and "R.nn.relu(ghost)" in str(info.value)


def test_dataflow_var_escaping_its_block():
    x = ir.Var("x", ir.TensorStructInfo((2, 3), "float32"))
    bb = ir.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            lv = bb.emit(_relu(x), "relu")
            bb.emit_output(lv)
        bb.emit_func_output(lv)
    with pytest.raises(ir.IRVerifyError, match="not visible"):
        ir.verify(bb.get())


def test_wrong_annotation():
    x = ir.Var("x", ir.TensorStructInfo((2, 3), "float32"))
    mod = _relu_main(x, x)
    mod["main"].body.blocks[0].bindings[0].var.struct_info = ir.TensorStructInfo((3, 3), "float32")
    with pytest.raises(ir.IRVerifyError, match=r"annotated R.Tensor\(\(3, 3\)"):
        ir.verify(mod)
