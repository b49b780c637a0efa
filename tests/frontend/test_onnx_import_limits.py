"""The ONNX importer's bounds on untrusted models (issue 40): one budget of unrolled nodes for Loops nested in
Loops and If branches, ranks over the project's limit, deep symbolic shape arithmetic, and external data
larger than the memory available."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="from_onnx needs the onnx package (pip install onnx)")
from onnx import TensorProto, helper  # noqa: E402

from builder.frontend.onnx import MAX_UNROLLED_NODES, ONNXImportError, from_onnx  # noqa: E402
from helpers.onnx_models import check_against_onnxruntime, make_model  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def nested_loops(trips: list[int], tag: str = "") -> onnx.GraphProto:
    """A Loop body (iteration, cond, v) -> (cond, v + 1), or, with more trip counts, a body whose one node is a
    Loop of the next trip count over v; the loop-carried v is a float scalar."""
    name = f"L{len(trips)}{tag}"
    if not trips:
        nodes = [helper.make_node("Add", [f"v{name}", "one"], [f"o{name}"])]
    else:
        nodes = [helper.make_node("Loop", [f"n{len(trips)}", "", f"v{name}"], [f"o{name}"], name=f"loop{len(trips)}",
                                  body=nested_loops(trips[1:], tag))]
    return helper.make_graph(nodes, name, [vi(f"i{name}", [], I64), vi(f"c{name}", [], B), vi(f"v{name}", [])],
                             [vi(f"c{name}", [], B), vi(f"o{name}", [])])


def nested_loop_model(trips: list[int]) -> onnx.ModelProto:
    """``y = x + prod(trips)`` by Loops nested ``len(trips)`` deep (trip counts as initializers n1, n2, ...)."""
    inits = [(f"n{len(trips) - k}", np.array(t, np.int64)) for k, t in enumerate(trips)] + [("one", np.array(1, np.float32))]
    loop = helper.make_node("Loop", [f"n{len(trips)}", "", "x"], ["y"], name="outer", body=nested_loops(trips[1:]))
    return make_model([loop], [vi("x", [])], [vi("y", [])], inits, opset=17)


def test_nested_loops_share_one_budget_and_fail_fast():
    """Three Loops of 4,000 iterations nested (64e9 body nodes; each Loop alone is within the limit, which used
    to count only its own body: the import never finished): refused with ONNXImportError naming the node past
    MAX_UNROLLED_NODES, in a subprocess that must end within a minute."""
    model = nested_loop_model([4000, 4000, 4000])
    assert model.ByteSize() < 1000
    code = textwrap.dedent("""
        import sys
        from builder.frontend.onnx import ONNXImportError, from_onnx
        try:
            from_onnx(sys.stdin.buffer.read())
        except ONNXImportError as e:
            print("REFUSED", e)
        else:
            print("IMPORTED")
    """)
    try:
        run = subprocess.run([sys.executable, "-c", code], input=model.SerializeToString(), capture_output=True,
                             timeout=60, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail("importing nested Loops did not finish within 60 s")
    out = run.stdout.decode()
    assert out.startswith("REFUSED"), (out, run.stderr.decode()[-2000:])
    assert "MAX_UNROLLED_NODES" in out and f"node {MAX_UNROLLED_NODES + 1} " in out
    assert "loop" in out or "Add" in out


def test_nested_loops_within_the_budget_compute_the_product():
    """Loops nested 3 deep with 3 * 4 * 5 iterations (60 Add nodes unrolled) add 60, as onnxruntime."""
    check_against_onnxruntime(nested_loop_model([3, 4, 5]), [{"x": np.array(1.5, np.float32)}])


def test_if_branches_inside_loops_count():
    """An If inside a Loop: each iteration imports the branch it takes, and those nodes count against the same
    budget (a Loop of MAX_UNROLLED_NODES iterations of a one-node body passes its own check, the branch's node
    then goes past the budget)."""
    then = helper.make_graph([helper.make_node("Add", ["vb", "one"], ["t"])], "then", [], [vi("t", [])])
    other = helper.make_graph([helper.make_node("Sub", ["vb", "one"], ["e"])], "else", [], [vi("e", [])])
    body = helper.make_graph([helper.make_node("If", ["yes"], ["ob"], name="choose", then_branch=then, else_branch=other)],
                             "body", [vi("ib", [], I64), vi("cb", [], B), vi("vb", [])], [vi("cb", [], B), vi("ob", [])])
    inits = [("n", np.array(MAX_UNROLLED_NODES, np.int64)), ("one", np.array(1, np.float32)), ("yes", np.array(True))]
    model = make_model([helper.make_node("Loop", ["n", "", "x"], ["y"], name="outer", body=body)], [vi("x", [])],
                       [vi("y", [])], inits, opset=17)
    with pytest.raises(ONNXImportError, match="MAX_UNROLLED_NODES"):
        from_onnx(model)
    inits[0] = ("n", np.array(7, np.int64))
    model = make_model([helper.make_node("Loop", ["n", "", "x"], ["y"], name="outer", body=body)], [vi("x", [])],
                       [vi("y", [])], inits, opset=17)
    check_against_onnxruntime(model, [{"x": np.array(0.25, np.float32)}])


def test_rank_over_the_limit_is_refused():
    """An input of rank 300 (compiling it used to raise RecursionError), one of 33 symbolic dims, and a folded
    constant of 40 dims (ConstantOfShape: numpy allows 64) are refused with ONNXImportError naming the value and
    core.limits.MAX_NDIM; rank 32 is still imported."""
    from core.limits import MAX_NDIM

    relu = [helper.make_node("Relu", ["x"], ["y"])]
    with pytest.raises(ONNXImportError, match=r"input 'x' has 300 dims.*MAX_NDIM"):
        from_onnx(make_model(relu, [vi("x", [1] * 300)], [vi("y", [1] * 300)]))
    with pytest.raises(ONNXImportError, match=rf"input 'x' has {MAX_NDIM + 1} dims"):
        from_onnx(make_model(relu, [vi("x", [f"d{k}" for k in range(MAX_NDIM + 1)])], [vi("y", ["n"])]))
    cos = [helper.make_node("ConstantOfShape", ["s"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    with pytest.raises(ONNXImportError, match=r"ConstantOfShape.*'c' of 40 dims.*MAX_NDIM"):
        from_onnx(make_model(cos, [vi("x", [1])], [vi("y", ["n"])], [("s", np.ones(40, np.int64))]))
    x = np.random.default_rng(0).standard_normal([1] * (MAX_NDIM - 2) + [2, 3]).astype(np.float32)
    check_against_onnxruntime(make_model(relu, [vi("x", list(x.shape))], [vi("y", list(x.shape))]), [{"x": x}])


@pytest.mark.parametrize("op_type", ["Div", "Mod"])
def test_deep_shape_arithmetic_is_refused(op_type):
    """3,000 Div (Mod) nodes chained on a symbolic Shape build one dim expression nesting 3,000 deep (a
    RecursionError in the simplifier): refused with ONNXImportError at the node past MAX_EXPRESSION_DEPTH."""
    from core.limits import MAX_EXPRESSION_DEPTH

    nodes = [helper.make_node("Shape", ["x"], ["s0"])]
    nodes += [helper.make_node(op_type, [f"s{k}", "s0"], [f"s{k + 1}"]) for k in range(3000)]
    nodes.append(helper.make_node("Reshape", ["x", "s3000"], ["y"]))
    model = make_model(nodes, [vi("x", ["a"])], [vi("y", ["b"])])
    with pytest.raises(ONNXImportError, match=rf"{op_type}_{MAX_EXPRESSION_DEPTH}\b.*MAX_EXPRESSION_DEPTH"):
        from_onnx(model)


def _external_weight_model(folder, n: int) -> str:
    """``y = x + w`` with ``w`` (n float32) stored as external data in ``w.bin`` (a sparse file: nothing written)."""
    with open(folder / "w.bin", "wb") as fh:
        fh.truncate(4 * n)
    w = TensorProto(name="w", data_type=F, dims=[n], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", str(4 * n))):
        w.external_data.add(key=k, value=v)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [vi("x", [n])], [vi("y", [n])],
                              initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def test_external_data_larger_than_memory_is_refused_before_reading(tmp_path, monkeypatch):
    """External data of 1 MiB against 64 KiB of memory available: MemoryLimitError naming the data and both sizes,
    and the file is never opened for reading; with the memory there, the same model imports and adds the zeros."""
    import builtins

    import runtime.memory as memory

    path = _external_weight_model(tmp_path, 1 << 18)
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    monkeypatch.setattr(memory, "available_memory", lambda: 1 << 16)
    with pytest.raises(memory.MemoryLimitError, match=r"external data of 1 tensor.*1\.0 MiB \(1,048,576 bytes\).*64\.0 KiB"):
        from_onnx(path)
    assert not [f for f in opened if f.endswith("w.bin")]
    monkeypatch.setattr(memory, "available_memory", lambda: 1 << 30)
    mod = from_onnx(path)
    assert mod["main"] is not None


def test_six_gib_sparse_external_data_under_an_address_space_limit(tmp_path):
    """The issue's case: a 6 GiB sparse data file, read by a process limited to 1.5 GiB more address space than it
    uses (the read used to fail with an empty MemoryError): MemoryLimitError with its message, in a subprocess."""
    path = _external_weight_model(tmp_path, 3 << 29)
    code = textwrap.dedent("""
        import resource, sys
        from builder.frontend.onnx import from_onnx
        from runtime.memory import MemoryLimitError
        with open("/proc/self/status") as fh:
            vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 29), resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            from_onnx(sys.argv[1])
        except MemoryLimitError as e:
            print("REFUSED", e)
        except MemoryError as e:
            print("MEMORYERROR", repr(e))
        else:
            print("IMPORTED")
    """)
    run = subprocess.run([sys.executable, "-c", code, path], capture_output=True, timeout=120, cwd=REPO)
    out = run.stdout.decode()
    assert out.startswith("REFUSED"), (out, run.stderr.decode()[-2000:])
    assert "6.0 GiB (6,442,450,944 bytes)" in out and "of memory is available" in out
