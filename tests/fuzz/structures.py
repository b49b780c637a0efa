"""Strategies for the structural fuzzers: inputs whose size is in their structure, not their bytes, and the
places the CLI writes to.

- :func:`symbolic_recipes`: recipes whose ``forward:`` does arithmetic on symbolic dims (a dim squared
  again and again, long sums, ``//`` / ``%`` towers, products of several dims) and uses the result as a
  shape (``reshape``, ``arange``);
- :func:`deep_onnx_models`: ONNX models with nested Loops (trip counts beyond any unrolling budget), a
  Concat of hundreds or thousands of inputs, inputs of rank 40-1000, long node chains, nested Ifs and
  Shape arithmetic that squares a dim again and again;
- :func:`output_targets`: what ``--output P`` / ``--save-params P`` point at (a FIFO, a directory, a
  character device, an existing file with a special mode, a symlink to each, a dangling symlink, a
  missing folder), made by :meth:`tests.fuzz.cases.Fuzzing.output_path`;
- :func:`many_overrides`: thousands of ``KEY=VALUE`` overrides, with non-UTF-8 bytes (as the command line
  passes them: ``surrogateescape``) and lone surrogates in keys and values;
- :func:`tp_weights`: two weights files of the same shapes for two tensor-parallel ranks (the long run
  only, :meth:`tests.fuzz.cases.Fuzzing.tp_weights`).
"""
from __future__ import annotations

from hypothesis import strategies as st

# --- recipes with symbolic-shape arithmetic -------------------------------------------------------------

_SYM_RECIPE = """\
name: symbolic
model:
  forward: |
{forward}
functions:
  forward:
    x: {{shape: [batch, seq, 4], dtype: float32}}
"""


@st.composite
def symbolic_recipes(draw) -> tuple[str, str]:
    """``(description, recipe text)``: a chain of symbolic-int assignments over ``batch`` and ``seq`` whose
    last value sizes a ``reshape`` or an ``arange`` (see the module docstring)."""
    kind = draw(st.sampled_from(["square", "square_plus", "sum", "floordiv", "product", "mixed"]))
    n = draw(st.sampled_from([2, 4, 8, 10, 12, 16]))
    start = draw(st.sampled_from(["batch", "batch + seq", "batch + 1", "2 * batch - seq", "seq * seq + batch"]))
    lines = [f"d0 = {start}"]
    for i in range(1, n + 1):
        p = f"d{i - 1}"
        if kind == "square":
            lines.append(f"d{i} = {p} * {p}")
        elif kind == "square_plus":
            lines.append(f"d{i} = {p} * {p} + {draw(st.sampled_from(['1', 'batch', 'seq', p]))}")
        elif kind == "sum":
            lines.append(f"d{i} = " + " + ".join([p] * draw(st.sampled_from([2, 50, 400]))))
        elif kind == "floordiv":
            lines.append(f"d{i} = ({p} * {draw(st.sampled_from(['3', 'seq', p]))} + 7) // "
                         f"{draw(st.sampled_from(['2', 'batch', '5']))} % {draw(st.sampled_from(['1000', 'seq + 1']))}")
        elif kind == "product":
            lines.append(f"d{i} = ({p} + batch) * ({p} + seq)")
        else:
            lines.append(f"d{i} = {draw(st.sampled_from([f'{p} * {p}', f'{p} + {p}', f'({p} - seq) * ({p} + seq)', f'{p} // 2 + {p} * batch']))}")
    last = f"d{n}"
    use = draw(st.sampled_from(["reshape", "arange", "both"]))
    if use == "reshape":
        lines.append(f"return reshape(x, [{last}, -1])")
    elif use == "arange":
        lines.append(f"return arange({last})")
    else:
        lines.append(f"return reshape(x, [batch * seq, -1]) + {last}")
    forward = "\n".join("    " + ln for ln in lines)
    return f"{kind} x{n} from {start}, {use}", _SYM_RECIPE.format(forward=forward)


# --- deep / nested / wide ONNX models ------------------------------------------------------------------------

def _model(nodes, inputs, outputs, inits=(), opset: int = 18) -> bytes:
    from onnx import helper

    import onnx

    graph = helper.make_graph(nodes, "deep", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    try:    # outputs typed as onnx infers them (the checker wants a shape); unknown ones: rank of the input
        inferred = onnx.shape_inference.infer_shapes(model).graph.output
    except Exception:  # noqa: BLE001 - onnx's inference gave up on a huge structure: typed by hand below
        inferred = []
    for i, out in enumerate(model.graph.output):
        if out.type.tensor_type.HasField("shape"):
            continue
        if i < len(inferred) and inferred[i].type.tensor_type.HasField("shape"):
            out.type.CopyFrom(inferred[i].type)
        else:
            out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            for _ in model.graph.input[0].type.tensor_type.shape.dim:
                out.type.tensor_type.shape.dim.add()
    return model.SerializeToString()


def _nested_loops(depth: int, trips: list[int]) -> bytes:
    """``depth`` Loops nested in each other's bodies, the one at level ``i`` running ``trips[i]`` times,
    the innermost adding 1 to a carried float tensor (the result: ``x + prod(trips)``)."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    def body(level: int):
        name = f"L{level}"
        ins = [helper.make_tensor_value_info(f"{name}_i", T.INT64, []),
               helper.make_tensor_value_info(f"{name}_c", T.BOOL, []),
               helper.make_tensor_value_info(f"{name}_v", T.FLOAT, [2])]
        outs = [helper.make_tensor_value_info(f"{name}_co", T.BOOL, []),
                helper.make_tensor_value_info(f"{name}_vo", T.FLOAT, [2])]
        nodes = [helper.make_node("Identity", [f"{name}_c"], [f"{name}_co"])]
        if level == depth:
            one = numpy_helper.from_array(np.ones(2, np.float32), f"{name}_one")
            nodes.append(helper.make_node("Constant", [], [f"{name}_k"], value=one))
            nodes.append(helper.make_node("Add", [f"{name}_v", f"{name}_k"], [f"{name}_vo"]))
        else:
            nodes += _loop_node(level + 1, f"{name}_v", f"{name}_vo")
        return helper.make_graph(nodes, name, ins, outs)

    def _loop_node(level: int, src: str, dst: str):
        trip = numpy_helper.from_array(np.array(trips[level - 1], np.int64), f"trip{level}")
        cond = numpy_helper.from_array(np.array(True), f"cond{level}")
        return [helper.make_node("Constant", [], [f"trip{level}_c"], value=trip),
                helper.make_node("Constant", [], [f"cond{level}_c"], value=cond),
                helper.make_node("Loop", [f"trip{level}_c", f"cond{level}_c", src], [dst], body=body(level))]

    x = helper.make_tensor_value_info("x", T.FLOAT, [2])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2])
    return _model(_loop_node(1, "x", "y"), [x], [y])


def _wide_concat(n: int, distinct: bool) -> bytes:
    from onnx import TensorProto as T
    from onnx import helper

    x = helper.make_tensor_value_info("x", T.FLOAT, ["n", 2])
    nodes, names = [], []
    for i in range(n):
        if distinct:
            nodes.append(helper.make_node("Relu", ["x"], [f"r{i}"]))
            names.append(f"r{i}")
        else:
            names.append("x")
    nodes.append(helper.make_node("Concat", names, ["y"], axis=0))
    return _model(nodes, [x], [helper.make_tensor_value_info("y", T.FLOAT, None)])


def _high_rank(rank: int, op: str) -> bytes:
    from onnx import TensorProto as T
    from onnx import helper

    x = helper.make_tensor_value_info("x", T.FLOAT, [1] * (rank - 1) + ["n"])
    if op == "Transpose":
        node = helper.make_node("Transpose", ["x"], ["y"], perm=list(range(rank))[::-1])
    elif op == "ReduceSum":
        node = helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)
    else:
        node = helper.make_node(op, ["x"], ["y"])
    return _model([node], [x], [helper.make_tensor_value_info("y", T.FLOAT, None)])


def _chain(n: int, op: str) -> bytes:
    from onnx import TensorProto as T
    from onnx import helper

    x = helper.make_tensor_value_info("x", T.FLOAT, ["n", 3])
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"h{i}"
        ins = [prev, "x"] if op == "Add" else [prev]
        nodes.append(helper.make_node(op, ins, [out]))
        prev = out
    return _model(nodes, [x], [helper.make_tensor_value_info("y", T.FLOAT, None)])


def _nested_ifs(depth: int) -> bytes:
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    def branch(level: int, tag: str):     # only the then-branch nests: the model grows linearly with depth
        out = f"b{level}{tag}"
        if level == depth or tag == "e":
            nodes = [helper.make_node("Relu" if tag == "t" else "Neg", ["x"], [out])]
        else:
            nodes = [helper.make_node("If", ["c"], [out], then_branch=branch(level + 1, "t"),
                                      else_branch=branch(level + 1, "e"))]
        return helper.make_graph(nodes, f"g{level}{tag}", [], [helper.make_tensor_value_info(out, T.FLOAT, None)])

    c = numpy_helper.from_array(np.array(True), "c")
    x = helper.make_tensor_value_info("x", T.FLOAT, ["n", 2])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch(1, "t"), else_branch=branch(1, "e"))
    return _model([node], [x], [helper.make_tensor_value_info("y", T.FLOAT, None)], [c])


def _shape_squares(n: int, use: str) -> bytes:
    """The symbolic dim ``n`` squared ``n`` times by Shape arithmetic (Mul of a shape by itself), the result
    sizing a Reshape, a ConstantOfShape, a Range or an Expand."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    x = helper.make_tensor_value_info("x", T.FLOAT, ["n"])
    nodes = [helper.make_node("Shape", ["x"], ["s0"])]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero1")]
    for i in range(1, n + 1):
        nodes.append(helper.make_node("Mul", [f"s{i - 1}", f"s{i - 1}"], [f"s{i}"]))
    last = f"s{n}"
    if use == "Reshape":
        nodes.append(helper.make_node("Concat", [last, "minus1"], ["shape"], axis=0))
        nodes.append(helper.make_node("Reshape", ["x", "shape"], ["y"]))
    elif use == "ConstantOfShape":
        nodes.append(helper.make_node("ConstantOfShape", [last], ["y"]))
    elif use == "Range":
        nodes.append(helper.make_node("Squeeze", [last, "zero1"], ["lim"]))
        nodes.append(helper.make_node("Range", ["zero", "lim", "one"], ["r"]))
        nodes.append(helper.make_node("Cast", ["r"], ["y"], to=T.FLOAT))
    else:
        nodes.append(helper.make_node("Expand", ["x", last], ["y"]))
    return _model(nodes, [x], [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)


class Blob:
    """A generated file's bytes with a short description (what Hypothesis prints for a failing case,
    instead of the bytes)."""

    def __init__(self, desc: str, data: bytes) -> None:
        self.desc, self.data = desc, data

    def __repr__(self) -> str:
        return f"<{self.desc}: {len(self.data)} bytes>"


@st.composite
def deep_onnx_models(draw, large: bool = True) -> Blob:
    """One of the structures of the module docstring, as a :class:`Blob`. ``large=False`` (the test
    suite's budget) leaves out the sizes that take seconds even when handled well (a Concat of 1000 or
    5000 inputs, chains of 5000 nodes)."""
    kind = draw(st.sampled_from(["loops", "concat", "rank", "chain", "ifs", "shape_squares"]))
    if kind == "loops":
        depth = draw(st.integers(1, 4))
        trips = [draw(st.sampled_from([1, 3, 10, 100, 1000, 100_000])) for _ in range(depth)]
        return Blob(f"{depth} nested Loops, trips {trips}", _nested_loops(depth, trips))
    if kind == "concat":
        n = draw(st.sampled_from([2, 50, 250, 1000, 5000] if large else [2, 50, 250]))
        distinct = draw(st.booleans())
        return Blob(f"Concat of {n} {'distinct' if distinct else 'equal'} inputs", _wide_concat(n, distinct))
    if kind == "rank":
        rank = draw(st.sampled_from([8, 40, 65, 300, 1000]))
        op = draw(st.sampled_from(["Relu", "Transpose", "ReduceSum", "Identity", "Softmax"]))
        return Blob(f"{op} of an input of rank {rank}", _high_rank(rank, op))
    if kind == "chain":
        n = draw(st.sampled_from([100, 1000, 5000] if large else [100, 1000]))
        op = draw(st.sampled_from(["Relu", "Neg", "Add", "Identity"]))
        return Blob(f"a chain of {n} {op}", _chain(n, op))
    if kind == "ifs":
        depth = draw(st.sampled_from([2, 8, 20]))   # protobuf itself refuses much deeper messages
        return Blob(f"{depth} nested Ifs", _nested_ifs(depth))
    n = draw(st.sampled_from([2, 5, 10, 16]))
    use = draw(st.sampled_from(["Reshape", "ConstantOfShape", "Range", "Expand"]))
    return Blob(f"a symbolic dim squared {n} times into {use}", _shape_squares(n, use))


# --- output paths ----------------------------------------------------------------------------------------------

#: What an output path can be (made by :meth:`tests.fuzz.cases.Fuzzing.output_path`).
TARGET_KINDS = ["fifo", "dir", "chardev", "file", "missing", "missing_dir"]


@st.composite
def output_targets(draw) -> dict:
    """``{"flag": "--output" | "--save-params", "kind": one of TARGET_KINDS, "link": "none" | "symlink" |
    "dangling", "mode": file mode of an existing file}``."""
    link = draw(st.sampled_from(["none", "none", "symlink", "dangling"]))
    kind = "missing" if link == "dangling" else draw(st.sampled_from(TARGET_KINDS))
    return {"flag": draw(st.sampled_from(["--output", "--save-params"])), "kind": kind, "link": link,
            "mode": draw(st.sampled_from([0o644, 0o600, 0o640, 0o444, 0o755, 0o4755, 0o1777, 0o000]))}


# --- many overrides -------------------------------------------------------------------------------------------

_KEYS = ["hidden_size", "intermediate_size", "dtype", "name", "description", "vars.hidden_size",
         "model.layers.gate_proj.bias", "quantization", "functions.forward.x.shape.0", "nope", "a.b.c"]
_VALUES = ["16", "8", "24", "float32", "float16", "true", "false", "x", "[1, 2]", "{a: 1}", "~", "''", "-1", "0"]


def _junk(draw) -> str:
    """A piece of text as the command line gives it: valid text, non-UTF-8 bytes decoded with
    ``surrogateescape`` (U+DC80-U+DCFF), a lone surrogate, control characters."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return bytes(draw(st.lists(st.integers(0x80, 0xFF), min_size=1, max_size=6))).decode("utf-8", "surrogateescape")
    if kind == 1:
        return draw(st.sampled_from(["\ud800", "\udfff", "a\udc80b", "\x00", "\x1b[31m", "\u202e", "\n", "\t"]))
    if kind == 2:
        return draw(st.text(max_size=8))
    return "x" * draw(st.sampled_from([1, 100, 10_000]))


@st.composite
def many_overrides(draw) -> tuple[str, list[str]]:
    """``(description, [KEY=VALUE, ...])``: 500 to 50,000 overrides of the ``mlp`` seed, mostly of valid keys
    and values (the last one of a key wins), some with junk keys or values (see :func:`_junk`)."""
    n = draw(st.sampled_from([500, 2000, 10_000, 50_000]))
    junk_every = draw(st.sampled_from([0, 1, 10, 1000]))
    pattern = [f"{draw(st.sampled_from(_KEYS))}={draw(st.sampled_from(_VALUES))}" for _ in range(8)]
    junk = [draw(st.sampled_from([f"{_junk(draw)}=1", f"hidden_size={_junk(draw)}", f"{_junk(draw)}",
                                  f"name={_junk(draw)}", f"vars.{_junk(draw)}={_junk(draw)}"])) for _ in range(8)]
    out = []
    for i in range(n):
        if junk_every and i % junk_every == 0:
            out.append(junk[i % len(junk)])
        else:
            out.append(pattern[i % len(pattern)])
    return f"{n} overrides, junk every {junk_every or 'never'}", out


# --- tensor-parallel weights --------------------------------------------------------------------------------

@st.composite
def tp_weights(draw) -> dict:
    """How rank 1's weights file differs from rank 0's (same names, shapes and dtypes): ``same`` (a control:
    identical files), ``seed`` (every tensor drawn from another seed), ``one_value`` (one element of one
    tensor changed by ``delta``), ``one_tensor`` (one tensor scaled)."""
    how = draw(st.sampled_from(["same", "seed", "one_value", "one_value", "one_tensor"]))
    return {"how": how, "index": draw(st.integers(0, 1 << 30)),
            "delta": draw(st.sampled_from([1e-7, 1e-3, 1.0, -1.0, float("nan")]))}
