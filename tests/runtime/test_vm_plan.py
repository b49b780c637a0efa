"""The VM's prepared plans (``runtime.vm_plan._Plan``): a function's bytecode is resolved once per VM, its
shapes with symbolic dims come from a table cached per group of dims, and kernel calls go through
``NativeLibrary.invoke``. Every result is checked against numpy; the checks on arguments are the same
as before the plans (a wrong argument is still refused, whatever path it takes)."""
import copy

import numpy as np
import pytest

import runtime.memory
import runtime.vm_plan
from builder import compile as build
from builder import te
from builder.ir import BlockBuilder, TensorStructInfo, Var
from builder.ir import relax as rx
from builder.ir.expr import Var as SymVar
from runtime import Executable, VirtualMachine
from runtime.memory import MemoryLimitError


class Sub(np.ndarray):
    """An ndarray subclass (the VM takes its data as a plain ndarray)."""


def te_relu(A):
    return te.compute(A.shape, lambda *i: te.max(A(*i), 0), name="relu")


def te_concat_scaled(A, B):
    """(n + m, 4): rows of A times 2, then rows of B plus 1."""
    n = A.shape[0]
    return te.compute((n + B.shape[0], 4),
                      lambda i, j: te.if_then_else(i < n, A[te.min(i, n - 1), j] * 2.0,
                                                   B[te.max(i - n, 0), j] + 1.0), name="concat")


@pytest.fixture(scope="module")
def two_dims_exe():
    """main(A (n, 4), B (m, 4)) = (relu(A) (n, 4), concat_scaled(A, B) (n + m, 4)): one output shape of
    ``n`` alone, one of ``n`` and ``m``."""
    n, m = SymVar("n", "int64"), SymVar("m", "int64")
    A = Var("A", TensorStructInfo((n, 4), "float32"))
    B = Var("B", TensorStructInfo((m, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [A, B]):
        with bb.dataflow():
            r = bb.emit_te(te_relu, A)
            c = bb.emit_te(te_concat_scaled, A, B)
            gv = bb.emit_output(rx.Tuple([r, c]))
        bb.emit_func_output(gv)
    return build(bb.get())


@pytest.fixture(scope="module")
def static_exe():
    """main(A (3, 4) float32) = relu(A): every shape static."""
    A = Var("A", TensorStructInfo((3, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [A]):
        with bb.dataflow():
            gv = bb.emit_output(bb.emit_te(te_relu, A))
        bb.emit_func_output(gv)
    return build(bb.get())


def expected(a, b):
    return np.maximum(a, 0), np.concatenate([a * 2, b + 1])


def data(n, m, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 4)).astype("float32"), rng.standard_normal((m, 4)).astype("float32"))


def test_symbolic_shapes_change_between_calls(two_dims_exe):
    f = VirtualMachine(two_dims_exe)["main"]
    # n and m both change, m alone changes (the n-only shapes come from the cache), back to an
    # earlier pair, and n = 0 (empty buffers)
    for seed, (n, m) in enumerate([(2, 3), (2, 5), (4, 3), (2, 3), (0, 2), (1, 1), (7, 2)]):
        a, b = data(n, m, seed)
        relu, concat = f(a, b)
        want_relu, want_concat = expected(a, b)
        assert relu.shape == (n, 4) and concat.shape == (n + m, 4)
        np.testing.assert_array_equal(relu, want_relu)
        np.testing.assert_array_equal(concat, want_concat)


def test_group_cache_is_bounded_and_still_right(two_dims_exe, monkeypatch):
    monkeypatch.setattr(runtime.vm_plan._Plan, "CACHE_ENTRIES", 2)
    vm = VirtualMachine(two_dims_exe)
    for seed, (n, m) in enumerate([(1, 1), (2, 1), (3, 1), (1, 2), (1, 1), (3, 3)]):
        a, b = data(n, m, seed)
        relu, concat = vm["main"](a, b)
        np.testing.assert_array_equal(relu, expected(a, b)[0])
        np.testing.assert_array_equal(concat, expected(a, b)[1])
    caches = [cache for _, _, cache in vm._plans["main"]._groups]
    assert caches and all(1 <= len(c) <= 2 for c in caches)


def test_returned_arrays_are_never_overwritten_by_later_calls(two_dims_exe):
    f = VirtualMachine(two_dims_exe)["main"]
    kept = []
    for seed in range(6):
        a, b = data(3, 2, seed)          # same shapes every call
        kept.append((f(a, b), expected(a, b)))
    outputs = [id(arr) for (got, _) in kept for arr in got]
    assert len(set(outputs)) == len(outputs)
    for (relu, concat), (want_relu, want_concat) in kept:
        np.testing.assert_array_equal(relu, want_relu)
        np.testing.assert_array_equal(concat, want_concat)


def test_static_arguments_are_still_fully_checked(static_exe):
    f = VirtualMachine(static_exe)["main"]
    a = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    np.testing.assert_array_equal(f(a), np.maximum(a, 0))
    with pytest.raises(ValueError, match="argument 'A' .*dtype float64, expected float32"):
        f(a.astype("float64"))
    with pytest.raises(ValueError, match="argument 'A' .*dtype >f4, expected float32"):
        f(a.astype(">f4"))
    with pytest.raises(ValueError, match=r"argument 'A' .*has shape \(3, 5\), expected \(3, 4\)"):
        f(np.zeros((3, 5), "float32"))
    with pytest.raises(ValueError, match="argument 'A' .*has 1 dims"):
        f(np.zeros(12, "float32"))
    with pytest.raises(ValueError, match=r"argument 'A' \(#0\) must be a numpy array"):
        f(a.tolist())
    # accepted as before: not C-contiguous (copied), read-only, a subclass
    wide = np.linspace(-1, 1, 24, dtype="float32").reshape(3, 8)
    np.testing.assert_array_equal(f(wide[:, ::2]), np.maximum(wide[:, ::2], 0))
    ro = a.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(f(ro), np.maximum(a, 0))
    np.testing.assert_array_equal(f(a.view(Sub)), np.maximum(a, 0))


def test_outputs_over_the_checked_size_are_checked_against_memory(two_dims_exe, static_exe, monkeypatch):
    monkeypatch.setattr(runtime.vm_plan, "_CHECKED_ALLOCATION", 16)
    monkeypatch.setattr(runtime.memory, "available_memory", lambda: 40)
    a, b = data(2, 1, 0)           # relu (2, 4) float32: 32 bytes, fits; concat (3, 4): 48 bytes, does not
    with pytest.raises(MemoryLimitError, match="main: the output of 'te_concat_scaled' of shape \\(3, 4\\) float32"):
        VirtualMachine(two_dims_exe)["main"](a, b)
    a1, b1 = data(1, 1, 1)         # 16 and 32 bytes: both fit
    relu, concat = VirtualMachine(two_dims_exe)["main"](a1, b1)
    np.testing.assert_array_equal(concat, expected(a1, b1)[1])
    with pytest.raises(MemoryLimitError, match="main: the output of 'te_relu' of shape \\(3, 4\\)"):
        VirtualMachine(static_exe)["main"](np.zeros((3, 4), "float32"))


def _edited(exe: Executable, edit) -> Executable:
    functions = copy.deepcopy(exe.functions)
    edit(functions["main"])
    return Executable(functions, exe.kernels, exe.object_code, exe.constants, exe.target)


def test_instructions_after_ret_never_run(two_dims_exe):
    a, b = data(2, 3, 0)
    bad = ["reshape", 2, 0, [["floordiv", ["var", "n"], 0]]]    # a division by zero
    after = _edited(two_dims_exe, lambda fn: fn["instructions"].append(bad))
    relu, concat = VirtualMachine(after)["main"](a, b)
    np.testing.assert_array_equal(concat, expected(a, b)[1])
    before = _edited(two_dims_exe, lambda fn: fn["instructions"].insert(len(fn["instructions"]) - 1, bad))
    with pytest.raises(ZeroDivisionError):
        VirtualMachine(before)["main"](a, b)


def test_a_plan_is_made_again_for_new_bytecode(two_dims_exe):
    exe = _edited(two_dims_exe, lambda fn: None)
    vm = VirtualMachine(exe)
    a, b = data(2, 3, 0)
    np.testing.assert_array_equal(vm["main"](a, b)[0], expected(a, b)[0])
    # return A itself instead of the tuple
    exe.functions["main"] = copy.deepcopy(exe.functions["main"])
    exe.functions["main"]["instructions"][-1] = ["ret", 0]
    got = vm["main"](a, b)
    np.testing.assert_array_equal(got, a)


def test_library_invoke_checks_inputs_and_trusts_fresh_outputs(static_exe):
    lib = VirtualMachine(static_exe).lib
    name = static_exe.primitive_ops[0]
    entry = lib.entry(name)
    a = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    out = np.empty((3, 4), "float32")
    lib.invoke(entry, [a, out], 1)
    np.testing.assert_array_equal(out, np.maximum(a, 0))
    ro = a.copy()
    ro.flags.writeable = False
    out2 = np.empty((3, 4), "float32")
    lib.invoke(entry, [ro, out2], 1)          # a read-only input is fine
    np.testing.assert_array_equal(out2, np.maximum(a, 0))
    wide = np.zeros((3, 8), "float32")
    with pytest.raises(ValueError, match="must be C-contiguous"):
        lib.invoke(entry, [wide[:, ::2], out], 1)
    with pytest.raises(ValueError, match="has dtype float64"):
        lib.invoke(entry, [a.astype("float64"), out], 1)
    with pytest.raises(ValueError, match="got shape \\(3, 5\\)"):     # the kernel's own dim check
        lib.invoke(entry, [np.zeros((3, 5), "float32"), out], 1)
    ro_out = np.empty((3, 4), "float32")
    ro_out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        lib.call(name, [a, ro_out])
    with pytest.raises(KeyError, match="no function 'nope'"):
        lib.entry("nope")
