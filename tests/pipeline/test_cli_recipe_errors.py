"""Recipe problems found while the forward runs are recipe errors at the call (exit 2, file:line:column,
no traceback), never an internal exception; user text never drives the terminal or breaks the printed
IR (issue 12, items 6 and 10, beyond the listed cases)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import builder
from builder import nn
from builder.ir.parser import parse
from helpers.recipes import with_forward
from core.limits import MAX_NDIM

CASES = [
    # (id, forward, input dtype, input shape, line of the call in the file, column, message)
    ("op on a number", "return silu(3)", "float32", None, 6, 12, "silu: x must be a Tensor, got int 3"),
    ("matmul with a number", "return matmul(x, 3)", "float32", None, 6, 12, "matmul: b must be a Tensor, got int 3"),
    ("number @ tensor", "y = 3 @ x\nreturn y", "float32", None, 6, 9, "matmul: a must be a Tensor, got int 3"),
    ("op on a tuple", "return softmax((x, x))", "float32", None, 6, 12,
     "softmax: x must be a Tensor, got a tuple of Tensor"),
    ("reshape of a number", "return reshape(3, [1])", "float32", None, 6, 12, "reshape: x must be a Tensor, got int 3"),
    ("permute_dims of a string", "return permute_dims('ab')", "float32", None, 6, 12,
     "permute_dims: x must be a Tensor, got str 'ab'"),
    ("layer on a number", "return fc(3)", "float32", None, 6, 12, "fc() (Linear) takes tensors, got int"),
    ("layer on a tuple", "return fc((x, x))", "float32", None, 6, 12, "fc() (Linear) takes tensors, got tuple"),
    ("astype to its own dtype with a number as name", "return fc(astype(x, 'float32', name=5))", "float32", None,
     6, 15, "astype: name must be a string (the result's name hint), got int 5"),
    ("int8 + 1000", "return x + 1000", "int8", None, 6, 12, "the constant 1000 does not fit int8 (-128 to 127)"),
    ("uint8 + -1", "return x + -1", "uint8", None, 6, 12, "the constant -1 does not fit uint8 (0 to 255)"),
    ("int64 + 1.5", "return x + 1.5", "int64", None, 6, 12,
     "cannot combine an int64 tensor with the float 1.5 (it would be truncated)"),
    ("bool + 2", "return x + 2", "bool", None, 6, 12, "cannot combine a bool tensor with 2"),
    ("an integer beyond int64", "return x * 99999999999999999999", "float32", None, 6, 16,
     "an integer constant must fit int64, got 99999999999999999999"),
    ("a 20,000-digit hex literal", "return softmax(x, axis=0x" + "f" * 20_000 + ")", "float32", None, 6, 28,
     "an integer constant must fit int64, got an integer of about 24,083 digits"),
    ("reshape to 33 dims", "return reshape(x, [" + "1, " * MAX_NDIM + "-1])", "float32", None, 6, 12,
     f"reshape: a tensor may have at most {MAX_NDIM} dims, got {MAX_NDIM + 1}"),
    ("a name that is not an identifier", "return silu(x, '1st')", "float32", None, 6, 12,
     "silu(): name must be an identifier (letters, digits and '_', not starting with a digit, not a Python "
     "keyword), got '1st'"),
    ("a keyword as name", "return silu(x, name='for')", "float32", None, 6, 12, "got 'for'"),
    ("reshape with -5", "return reshape(x, [-5, -1])", "float32", None, 6, 12,
     "reshape: negative dim -5 in the shape (only -1, inferred, may be negative)"),
    ("a result of 2**80 elements", "y = permute_dims(x, [1, 0])\nreturn matmul(x, y)", "float32",
     "[1099511627776, 1]", 7, 12, "would take 4,835,703,278,458,516,698,824,704 bytes, more than the 2**62"),
    ("a result of 2**124 elements by reshape", "return reshape(x, [4611686018427387904, 4611686018427387904])",
     "float32", None, 6, 12, "more than the 2**62 any tensor may have"),
]


@pytest.mark.parametrize("forward,dtype,shape,line,col,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_forward_errors_at_the_call(run_cli, forward, dtype, shape, line, col, message):
    text = with_forward(forward, dtype, shape or "[batch, 16]")
    rc, err, _, path = run_cli(text)
    assert rc == 2, err
    assert re.search(rf"^{re.escape(path)}:{line}:{col}: model\.forward: .*{re.escape(message)}", err, re.M), err


def test_a_function_named_like_a_printer_alias(run_cli):
    text = with_forward("return fc(x)").replace("  forward:\n    x:", "  R:\n    x:")
    rc, err, _, path = run_cli(text)
    assert rc == 2 and f"{path}:9:5: functions.R: function name 'R' is reserved" in err


@pytest.mark.parametrize("edit", [
    ("    x: {shape: [batch, 16]", "    R: {shape: [batch, 16]"),       # an input named like the relax alias
    ("[batch, 16]", "[T, 16]"),                                        # a symbolic dim named like the tir alias
    ("    x: {shape: [batch, 16]", "    cls: {shape: [I, 16]"),        # cls.f calls, the ir alias
])
def test_names_of_the_printed_ir_are_never_shadowed(tmp_path, edit):
    text = with_forward("return fc(x)").replace(*edit)
    name = edit[1].split(":")[0].strip()
    text = text.replace("fc(x)", f"fc({name})") if name != "[T, 16]" else text
    path = tmp_path / "r.yaml"
    path.write_text(text)
    script = builder.build(path).ir.script()
    signature = next(line for line in script.splitlines() if "def forward(" in line)
    assert not re.search(r"\b(R|T|I|cls)(:| =)", script), signature
    assert re.search(r"\b(R|T|I|cls)_1\b", signature), signature
    assert parse(script).script() == script       # valid TVMScript that parses back to the same module


@pytest.mark.parametrize("hint", ["a b\n@R.function", "R", "cls", "for", "123", "", "x", "h\u00e9llo", "a" * 5000])
def test_any_name_hint_prints_valid_tvmscript(hint):
    """Python code may pass any text as a name hint; where names are made unique it becomes a valid,
    unshadowing identifier, so the printed module always parses back to itself."""
    class M(nn.Module):
        def forward(self, x):
            y = nn.op.silu(x, name=hint)
            return nn.op.add(nn.op.silu(y, name=hint), y, name=hint)

    mod, _ = M().export_tvm(spec={"forward": {"x": nn.spec.Tensor(["n", 4], "float32")}})
    text = mod.script()
    assert parse(text).script() == text
    names = re.findall(r"^ {12}(\w+): R\.Tensor", text, re.M)
    assert len(names) == 4 and len(set(names)) == 4 and not set(names) & {"R", "T", "I", "cls", "x"}, names


def test_terminal_control_characters_in_a_name_are_shown_escaped(run_cli):
    rc, err, out, _ = run_cli(with_forward("return fc(x)").replace("name: base", 'name: "\\e[2J\\nx"'))
    assert rc == 0, err
    assert "\x1b" not in out and out.splitlines()[0].strip() == "\\x1b[2J\\nx"


def test_terminal_control_characters_in_an_error_message_are_shown_escaped(run_cli):
    text = with_forward("return fc(x)") + 'weights: {path: "\\e[2Jw.safetensors"}\n'
    rc, err, _, _ = run_cli(text)
    assert rc == 1 and "\x1b" not in err and "\\x1b[2Jw.safetensors" in err


@pytest.mark.parametrize("dtype,value,error,message", [
    ("float32", 10 ** 400, ValueError, "does not fit float32 (beyond float64)"),
    ("uint64", 2 ** 64, ValueError, "the constant 18446744073709551616 does not fit uint64"),
    ("int32", np.int64(2 ** 40), ValueError, "the constant 1099511627776 does not fit int32"),
    ("int16", 2.5, TypeError, "cannot combine an int16 tensor with the float 2.5"),
    ("bool", 0.5, ValueError, "cannot combine a bool tensor with 0.5"),
    ("float32", "1", TypeError, "cannot combine a Tensor with str '1'"),
])
def test_scalar_operands_must_fit_the_tensors_dtype(dtype, value, error, message):
    with pytest.raises(error, match=re.escape(message)):
        nn.op.add(nn.Parameter((2,), dtype), value)


@pytest.mark.parametrize("dtype,value", [("float32", 1e39), ("float16", 1e6), ("bool", True), ("uint8", 255.0),
                                         ("int64", -2 ** 63), ("bfloat16", 3)])
def test_scalar_operands_that_fit(dtype, value):
    assert nn.op.add(nn.Parameter((2,), dtype), value).dtype == dtype


def test_op_arguments_are_checked_before_anything_is_built():
    x = nn.Parameter((2, 3), "float32")
    with pytest.raises(TypeError, match="concat: x must be a list of Tensors, got a list of Parameter, int"):
        nn.op.concat([x, 1], dim=0)
    with pytest.raises(TypeError, match="layer_norm: weight must be a Tensor or None, got str"):
        nn.op.layer_norm(x, 3, weight="w")
    with pytest.raises(TypeError, match="permute_dims: name must be a string .* or None, got int 1"):
        nn.op.permute_dims(x, name=1)
    with pytest.raises(ValueError, match=f"broadcast_to: a tensor may have at most {MAX_NDIM} dims"):
        nn.op.broadcast_to(x, [1] * (MAX_NDIM + 1))
