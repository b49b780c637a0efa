"""The VM surface of seed 003 (TVM's VM Executable / VirtualMachine): bytecode listing, stats,
globals, primitive ops, parameter names, save / load through a file (also in a process that
never imports the compiler), invoke / set_input (keywords by parameter name) / run / vm[name]."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder import compile as build
from builder import nn, te
from builder.ir import BlockBuilder, TensorStructInfo, Var
from builder.ir import relax as rx
from builder.ir.expr import Var as SymVar
from runtime import Executable, VirtualMachine

ROOT = Path(__file__).resolve().parents[2]


def te_matmul(A, B):
    k = te.reduce_axis((0, A.shape[1]), name="k")
    return te.compute((A.shape[0], B.shape[1]), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k),
                      name="matmul")


def te_relu(A):
    return te.compute(A.shape, lambda *i: te.max(A(*i), 0), name="relu")


class MLP(nn.Module):
    def __init__(self):
        self.fc1 = nn.Linear(6, 8, bias=True)
        self.fc2 = nn.Linear(8, 3, bias=False)

    def forward(self, x: nn.Tensor):
        return self.fc2(nn.relu(self.fc1(x)))


@pytest.fixture(scope="module")
def mlp():
    mod, params = MLP().export_tvm(spec={"forward": {"x": nn.spec.Tensor(["batch", 6], "float32")}})
    rng = np.random.default_rng(0)
    data = {name: rng.standard_normal(p.shape).astype("float32") for name, p in params}
    return build(mod), data


def reference(x, data):
    h = np.maximum(x @ data["fc1.weight"].T + data["fc1.bias"], 0)
    return h @ data["fc2.weight"].T


@pytest.fixture(scope="module")
def chapter_exe():
    """main(A, B) = relu(A @ B) with a constant bias added (a constant in the pool)."""
    n = SymVar("n", "int64")
    A = Var("A", TensorStructInfo((n, 4), "float32"))
    B = Var("B", TensorStructInfo((4, 4), "float32"))
    bias = rx.const(np.arange(4, dtype="float32"))
    bb = BlockBuilder()
    with bb.function("main", [A, B]):
        with bb.dataflow():
            mm = bb.emit_te(te_matmul, A, B)
            add = bb.emit_te(lambda x, b: te.compute(x.shape, lambda i, j: x[i, j] + b[j], name="add"),
                             mm, bias, primfunc_name_hint="bias_add")
            gv = bb.emit_output(bb.emit_te(te_relu, add))
        bb.emit_func_output(gv)
    return build(bb.get())


def test_introspection(mlp, chapter_exe):
    exe, _ = mlp
    assert exe.globals == ["forward"]
    assert exe.get_function_params("forward") == ["x", "fc1_weight", "fc1_bias", "fc2_weight"]
    assert exe.get_function_arity("forward") == 4
    assert exe.functions["forward"]["num_input"] == 1
    # FuseOps may merge the relu into its matmul (``fused_matmul_relu``)
    assert any("matmul" in k for k in exe.primitive_ops) and any("relu" in k for k in exe.primitive_ops)
    with pytest.raises(KeyError, match="no function 'nope'.*forward"):
        exe.get_function_params("nope")
    assert chapter_exe.primitive_ops == ["te_matmul", "bias_add", "te_relu"]
    assert len(chapter_exe.constants) == 1


def test_bytecode_listing(chapter_exe):
    text = chapter_exe.bytecode
    lines = text.splitlines()
    assert lines[0] == "func main(%0: A float32[n, 4], %1: B float32[4, 4]) -> float32[n, 4]"
    assert lines[1] == "  num_input=2 registers=6"
    assert "  0: %2 = call te_matmul(%0, %1) -> float32[n, 4]" in lines
    assert "  1: %3 = const[0]" in lines
    assert "  2: %4 = call bias_add(%2, %3) -> float32[n, 4]" in lines
    assert lines[-1] == "  4: ret %5"


def test_bytecode_lists_reshape_tuple_and_get_item():
    x = Var("x", TensorStructInfo((2, 3), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(rx.Call(rx.Op.get("reshape"), [x, rx.ShapeExpr([3, 2])]))
            t = bb.emit(rx.Tuple([r, x]))
            gv = bb.emit_output(rx.TupleGetItem(t, 0))
        bb.emit_func_output(gv)
    exe = build(bb.get())
    text = exe.bytecode
    assert "%1 = reshape %0 [3, 2]" in text
    assert "%2 = tuple(%1, %0)" in text
    assert "%3 = %2[0]" in text
    out = VirtualMachine(exe)["main"](np.arange(6, dtype="float32").reshape(2, 3))
    np.testing.assert_array_equal(out, np.arange(6, dtype="float32").reshape(3, 2))


def test_stats(mlp, chapter_exe):
    exe, _ = mlp
    stats = exe.stats
    assert stats.startswith("functions: 1\n  forward: 4 params (1 inputs), ")
    assert f"kernels: {len(exe.kernels)} (" in stats
    assert "constants: 0 (0 bytes)" in stats
    assert "object code: " in stats
    assert "  const[0]: float32[4]" in chapter_exe.stats
    assert "Executable(functions=['main']" in repr(chapter_exe)


def test_call_styles(mlp):
    exe, data = mlp
    vm = VirtualMachine(exe)
    params = [data["fc1.weight"], data["fc1.bias"], data["fc2.weight"]]
    x = np.random.default_rng(1).standard_normal((5, 6)).astype("float32")
    want = reference(x, data)
    # vm[name](...), positional and by keyword
    np.testing.assert_allclose(vm["forward"](x, *params), want, rtol=1e-5, atol=1e-5)
    kw = dict(fc1_weight=params[0], fc1_bias=params[1], fc2_weight=params[2])
    np.testing.assert_allclose(vm["forward"](x, **kw), want, rtol=1e-5, atol=1e-5)
    # invoke with arguments
    np.testing.assert_allclose(vm.invoke("forward", x, *params), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vm.invoke("forward", x=x, **kw), want, rtol=1e-5, atol=1e-5)
    # set_input (keywords by parameter name, in any order) then run / invoke without arguments
    vm.set_input("forward", fc2_weight=params[2], x=x, fc1_bias=params[1], fc1_weight=params[0])
    np.testing.assert_allclose(vm.run("forward"), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vm.invoke("forward"), want, rtol=1e-5, atol=1e-5)
    # run with a name and arguments is invoke
    x2 = x[:2]
    np.testing.assert_allclose(vm.run("forward", x2, *params), reference(x2, data), rtol=1e-5, atol=1e-5)


def test_call_errors(mlp):
    exe, data = mlp
    vm = VirtualMachine(exe)
    x = np.zeros((2, 6), "float32")
    with pytest.raises(ValueError, match="no inputs set for 'forward'"):
        vm.run("forward")
    with pytest.raises(TypeError, match="missing arguments: fc1_bias, fc2_weight"):
        vm.set_input("forward", x, fc1_weight=data["fc1.weight"])
    with pytest.raises(TypeError, match="has no parameter 'w'"):
        vm.set_input("forward", x, w=1)
    with pytest.raises(TypeError, match="got parameter 'x' twice"):
        vm.invoke("forward", x, x=x)
    with pytest.raises(KeyError, match="no function 'main'"):
        vm.run(x)  # TVM's run(...) is invoke("main", ...)
    with pytest.raises(ValueError, match="argument 'fc1_weight'.*dtype float64, expected float32"):
        vm["forward"](x, data["fc1.weight"].astype("float64"), data["fc1.bias"], data["fc2.weight"])
    with pytest.raises(ValueError, match="only 'cpu'"):
        VirtualMachine(exe, "cuda")


def test_run_without_name_calls_main(chapter_exe):
    vm = VirtualMachine(chapter_exe)
    a = np.random.default_rng(2).standard_normal((3, 4)).astype("float32")
    b = np.random.default_rng(3).standard_normal((4, 4)).astype("float32")
    want = np.maximum(a @ b + np.arange(4, dtype="float32"), 0)
    np.testing.assert_allclose(vm.run(a, b), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vm.run(A=a, B=b), want, rtol=1e-5, atol=1e-5)


def test_save_load_round_trip(tmp_path, chapter_exe):
    path = tmp_path / "model.mbexe"
    data = chapter_exe.save(path)
    assert path.read_bytes() == data
    loaded = Executable.load(path)
    assert loaded.functions == chapter_exe.functions
    assert loaded.kernels == chapter_exe.kernels
    assert loaded.object_code == chapter_exe.object_code
    assert loaded.bytecode == chapter_exe.bytecode
    assert len(loaded.constants) == 1
    np.testing.assert_array_equal(loaded.constants[0], chapter_exe.constants[0])
    assert Executable.load(data).globals == ["main"]
    assert Executable.load_exec(data).primitive_ops == chapter_exe.primitive_ops
    a = np.ones((2, 4), "float32")
    b = np.eye(4, dtype="float32")
    np.testing.assert_allclose(VirtualMachine(loaded)["main"](a, b),
                               VirtualMachine(chapter_exe)["main"](a, b))


def test_load_rejects_bad_files(tmp_path, chapter_exe):
    data = chapter_exe.save()
    with pytest.raises(ValueError, match="bad magic"):
        Executable.load(b"not an executable")
    with pytest.raises(ValueError, match="truncated"):
        Executable.load(data[:20])
    with pytest.raises(ValueError, match="truncated"):
        Executable.load(data[:-3])
    bad = bytearray(data)
    bad[60] = ord("?")
    with pytest.raises(ValueError, match="damaged"):
        Executable.load(bytes(bad))
    with pytest.raises(ValueError, match="lib=None"):
        Executable.load_exec(data, lib=object())


def test_load_and_run_in_a_process_without_builder(tmp_path, mlp):
    exe, data = mlp
    path = tmp_path / "mlp.mbexe"
    exe.save(path)
    x = np.random.default_rng(4).standard_normal((3, 6)).astype("float32")
    np.savez(tmp_path / "io.npz", x=x, w1=data["fc1.weight"], b1=data["fc1.bias"], w2=data["fc2.weight"])
    script = f"""
import sys
import numpy as np
from runtime import Executable, VirtualMachine
exe = Executable.load({str(path)!r})
io = np.load({str(tmp_path / 'io.npz')!r})
vm = VirtualMachine(exe)
print(exe.get_function_params("forward"))
vm.set_input("forward", io["x"], fc1_weight=io["w1"], fc1_bias=io["b1"], fc2_weight=io["w2"])
np.save({str(tmp_path / 'out.npy')!r}, vm.run("forward"))
assert not any(m == "builder" or m.startswith("builder.") for m in sys.modules), "builder imported"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["['x', 'fc1_weight', 'fc1_bias', 'fc2_weight']", "ok"]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference(x, data), rtol=1e-5, atol=1e-5)


def test_prim_value_to_tensor_builtin():
    """``vm.builtin.prim_value_to_tensor`` (what ``symbolic_scalar`` calls with a ``["dim", tree]``
    argument): an int as a 0-d int64 array, negative ones included; anything else is refused."""
    from runtime.builtins import _BUILTINS

    fn = _BUILTINS["vm.builtin.prim_value_to_tensor"]
    for v in (0, 7, -3, np.int64(5), 2**63 - 1, -(2**63)):
        out = fn(v)
        assert out.shape == () and out.dtype == np.int64 and int(out) == int(v)
    for bad in ("3", 2.0, True, None, np.zeros(())):
        with pytest.raises(TypeError, match="prim_value_to_tensor: expected an int"):
            fn(bad)
    for big in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError, match="does not fit int64"):
            fn(big)


@pytest.mark.parametrize("kernel_runs", [True, False])
def test_kernel_errors_give_the_values_of_the_dims_they_name(kernel_runs):
    """A kernel's run-time check names the kernel's own dims (``n``, or ``v0`` where the call's dim
    was an expression such as ``p + q``); the error gives each one's value and the argument dim it
    is, on both paths (stretches of kernel calls run natively, and call by call)."""
    from builder.nn import op
    from helpers.functional import Fn, spec_of

    def compiled(fn, **inputs):
        m = Fn(fn, list(inputs)).jit(spec_of(**inputs))
        m.vm.kernel_runs = kernel_runs
        return m["forward"]

    pad = compiled(lambda x: op.pad(x, [2, 1, 0, 0], mode="reflect"), x=(("n", 5), "float32"))
    both = compiled(lambda a, b: op.pad(op.concat([op.exp(a), op.exp(b)], dim=0), [2, 1, 0, 0], mode="reflect"),
                    a=(["p", 5], "float32"), b=(["q", 5], "float32"))
    x = np.ones((4, 5), "float32")
    np.testing.assert_allclose(pad(x), np.pad(x, [(2, 1), (0, 0)], mode="reflect"))
    with pytest.raises(ValueError, match=r"pad: index out of range: expected 0 <= index < n, "
                                         r"where n = 2 \(dim 0 of argument 'x'\)"):
        pad(np.ones((2, 5), "float32"))
    with pytest.raises(ValueError, match=r"pad: index out of range: expected 0 <= index < (\w+), "
                                         r"where \1 = 2 \(dim 0 of argument '\w+'\)"):
        both(np.ones((1, 5), "float32"), np.ones((1, 5), "float32"))
