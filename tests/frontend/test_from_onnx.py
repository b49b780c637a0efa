"""builder.frontend.onnx.from_onnx (issue 16): small onnx.helper graphs and the real MiniLM-L6 export,
each checked against onnxruntime (float32), symbolic dims run at two sizes."""
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="from_onnx needs the onnx package (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="the reference results come from onnxruntime")

from onnx import TensorProto, helper, numpy_helper

import runtime
from builder import compile as build
from builder.frontend.onnx import ONNXImportError, UnsupportedOpsError, from_onnx
from helpers.onnx_models import make_model

F = TensorProto.FLOAT
I64 = TensorProto.INT64
RNG = np.random.default_rng(16)


def run_both(model, feeds_list, tol=1e-5):
    """Import once, compile once, run every feed against onnxruntime; returns the max error."""
    vm = runtime.VirtualMachine(build(from_onnx(model)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    worst = 0.0
    for feeds in feeds_list:
        ref = sess.run(None, feeds)[0]
        out = np.asarray(vm["main"](*feeds.values()))
        assert out.shape == ref.shape and out.dtype == ref.dtype
        err = float(np.abs(out.astype(np.float64) - ref).max()) if out.size else 0.0
        assert err <= tol, err
        worst = max(worst, err)
    return worst


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_mlp_matmul_add_relu_reaches_linear_kernel():
    w1, b1, w2, b2 = rand(8, 16), rand(16), rand(16, 4), rand(4)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
         helper.make_node("Add", ["o", "b2"], ["y"])],
        [helper.make_tensor_value_info("x", F, ["batch", 8])], [helper.make_tensor_value_info("y", F, ["batch", 4])],
        [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)])
    run_both(model, [{"x": rand(3, 8)}, {"x": rand(7, 8)}])
    mod = from_onnx(model)
    assert [p.name_hint for p in mod["main"].params] == ["x"]
    kernels = build(mod).kernels
    assert sum(k["kernel"].startswith("linear/") for k in kernels.values()) >= 2, kernels


def test_gemm_trans_b_alpha_beta():
    w, c = rand(5, 6), rand(5)
    model = make_model([helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)],
                       [helper.make_tensor_value_info("x", F, ["n", 6])], [helper.make_tensor_value_info("y", F, ["n", 5])],
                       [("w", w), ("c", c)])
    run_both(model, [{"x": rand(2, 6)}, {"x": rand(9, 6)}])


def test_layer_norm_softmax():
    g, b = rand(6), rand(6)
    model = make_model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], epsilon=1e-6),
                        helper.make_node("Softmax", ["n"], ["y"], axis=-1)],
                       [helper.make_tensor_value_info("x", F, ["b", "s", 6])],
                       [helper.make_tensor_value_info("y", F, ["b", "s", 6])], [("g", g), ("b", b)])
    run_both(model, [{"x": rand(2, 3, 6)}, {"x": rand(1, 5, 6)}])


def test_reshape_transpose_dynamic_batch_with_shape_subgraph():
    # heads split as exporters write it: Reshape(x, Concat(Shape(x)[0:2], [2, -1])) then Transpose
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "st", "en"], ["bs"]),
             helper.make_node("Concat", ["bs", "tail"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t", "flat"], ["y"])]
    inits = [("st", np.array([0], np.int64)), ("en", np.array([2], np.int64)), ("tail", np.array([2, -1], np.int64)),
             ("flat", np.array([0, -1], np.int64))]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, ["batch", "seq", 8])],
                       [helper.make_tensor_value_info("y", F, ["batch", "n"])], inits)
    run_both(model, [{"x": rand(2, 3, 8)}, {"x": rand(4, 5, 8)}])
    params = from_onnx(model)["main"].params
    assert str(params[0].struct_info.shape[0]) == "batch"


def test_gather_embedding_and_index():
    table = rand(10, 4)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("Gather", ["e", "last"], ["y"], axis=1)]   # a negative scalar index
    model = make_model(nodes, [helper.make_tensor_value_info("ids", I64, ["b", "s"])],
                       [helper.make_tensor_value_info("y", F, ["b", 4])],
                       [("table", table), ("last", np.array(-1, np.int64))])
    run_both(model, [{"ids": RNG.integers(-10, 10, (2, 3))}, {"ids": RNG.integers(0, 10, (3, 6))}])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_log_softmax_stays_finite(axis):
    """LogSoftmax along each axis, with values far apart (softmax underflows to 0 where log(softmax) would be
    -inf), on a symbolic batch at two sizes."""
    model = make_model([helper.make_node("LogSoftmax", ["x"], ["y"], axis=axis)],
                       [helper.make_tensor_value_info("x", F, ["b", 6])],
                       [helper.make_tensor_value_info("y", F, ["b", 6])])
    x1, x2 = rand(3, 6) * 50, rand(5, 6)
    x1[0, 0] = -200.0
    run_both(model, [{"x": x1}, {"x": x2}], tol=1e-4)


@pytest.mark.parametrize("bounds", [("lo", "hi"), ("lo", ""), ("", "hi"), ("hi", "lo")])
def test_clip_with_optional_bounds(bounds):
    """Clip with both bounds, one (an empty input name for the other), and lo > hi (every value is hi)."""
    inits = [("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.75, np.float32))]
    model = make_model([helper.make_node("Clip", ["x", *bounds], ["y"])],
                       [helper.make_tensor_value_info("x", F, ["n", 4])],
                       [helper.make_tensor_value_info("y", F, ["n", 4])], inits)
    run_both(model, [{"x": rand(3, 4)}, {"x": rand(1, 4)}])


@pytest.mark.parametrize("mode,axes", [("constant", None), ("reflect", None), ("edge", [1, -1])])
def test_pad_modes_and_axes(mode, axes):
    """Pad with begins / ends per axis (all begins first), a constant value, reflect and edge modes, and the
    opset-18 axes input, on a symbolic batch."""
    pads = np.array([0, 1, 2, 0, 2, 1] if axes is None else [1, 2, 2, 1], np.int64)
    ins = ["x", "pads", "cv"] + (["axes"] if axes is not None else [])
    inits = [("pads", pads), ("cv", np.array(1.5, np.float32))] + (
        [("axes", np.array(axes, np.int64))] if axes is not None else [])
    model = make_model([helper.make_node("Pad", ins, ["y"], mode=mode)],
                       [helper.make_tensor_value_info("x", F, ["b", 4, 5])],
                       [helper.make_tensor_value_info("y", F, ["b", 7, 8])], inits, opset=18)
    run_both(model, [{"x": rand(2, 4, 5)}, {"x": rand(1, 4, 5)}])


def test_pad_wrap_mode():
    """Pad's ``wrap`` mode (opset 19: periodic, PyTorch's ``circular``) on the last two axes, a negative pad
    cropping first."""
    model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")],
                       [helper.make_tensor_value_info("x", F, ["b", 4, 5])],
                       [helper.make_tensor_value_info("y", F, ["b", 6, 7])],
                       [("pads", np.array([0, 2, 1, 0, 0, 1], np.int64))], opset=19)
    run_both(model, [{"x": rand(2, 4, 5)}, {"x": rand(1, 4, 5)}])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_negative_pads_crop(mode):
    """Negative pads remove elements (onnxruntime crops first, then pads), mixed with positive ones."""
    model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)],
                       [helper.make_tensor_value_info("x", F, ["b", 4, 6])],
                       [helper.make_tensor_value_info("y", F, ["b", 4, 5])],
                       [("pads", np.array([0, -1, 2, 0, 1, -3], np.int64))], opset=18)
    run_both(model, [{"x": rand(2, 4, 6)}, {"x": rand(1, 4, 6)}])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_and_scatter_nd_match_onnxruntime(reduction):
    """ScatterElements (negative indices, indices smaller than the data) and ScatterND (rows into the first
    dim, and full 2-d index rows as exporters write ``x[:, 0] = v``) with each reduction (opset 18). The
    reductions get a duplicate index row (applied in order); "none" does not (ONNX leaves duplicates
    undefined there)."""
    ie = np.array([[1, -1, 0], [3, 2, -4]], np.int64)
    nd1 = np.array([[2], [-2]] if reduction != "none" else [[2], [-3]], np.int64)
    nd2 = np.array([[[0, 0]], [[1, 0]]], np.int64)
    nodes = [helper.make_node("ScatterElements", ["x", "ie", "ue"], ["a"], axis=1, reduction=reduction),
             helper.make_node("ScatterND", ["x", "nd1", "u1"], ["b"], reduction=reduction),
             helper.make_node("ScatterND", ["x", "nd2", "u2"], ["c"], reduction=reduction)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [4, 4, 5]),
                               helper.make_tensor_value_info("ue", F, [2, 3, 5]),
                               helper.make_tensor_value_info("u1", F, [2, 4, 5]),
                               helper.make_tensor_value_info("u2", F, [2, 1, 5])],
                       [helper.make_tensor_value_info(n, F, [4, 4, 5]) for n in "abc"],
                       [("ie", np.broadcast_to(ie[:, :, None], (2, 3, 5)).copy()), ("nd1", nd1), ("nd2", nd2)],
                       opset=18)
    feeds = {"x": rand(4, 4, 5), "ue": rand(2, 3, 5), "u1": rand(2, 4, 5), "u2": rand(2, 1, 5)}
    got = runtime.VirtualMachine(build(from_onnx(model)))["main"](*feeds.values())
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_float_shape_arithmetic_folds():
    """A reshape target computed in float from constants, as a legacy export writes MobileViT's
    ``int(math.ceil(h / p) * p)`` (Ceil, Mul, Cast, Div folded at import time: exact on floats)."""
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(v, name))
    nodes = [c("h", np.array(1.5, np.float32)), c("two", np.array(2.0, np.float32)),
             helper.make_node("Ceil", ["h"], ["ch"]), helper.make_node("Mul", ["ch", "two"], ["m"]),
             helper.make_node("Cast", ["m"], ["mi"], to=TensorProto.INT64),
             helper.make_node("Round", ["two"], ["r"]), helper.make_node("Cast", ["r"], ["ri"], to=TensorProto.INT64),
             helper.make_node("Div", ["mi", "ri"], ["half"]),
             helper.make_node("Mul", ["half", "ri"], ["cols"]),
             helper.make_node("Unsqueeze", ["cols", "ax"], ["cols1"]),
             helper.make_node("Concat", ["neg", "cols1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, ["n", 8])],
                       [helper.make_tensor_value_info("y", F, ["m", 4])],
                       [("ax", np.array([0], np.int64)), ("neg", np.array([-1], np.int64))], opset=17)
    run_both(model, [{"x": rand(2, 8)}, {"x": rand(1, 8)}])


@pytest.mark.parametrize("largest,axis", [(1, -1), (0, 1), (1, 0)])
def test_topk_matches_onnxruntime(largest, axis):
    """TopK (K an initializer) with ties (the lower index first, as the spec and onnxruntime order them),
    values and int64 indices, on a symbolic batch."""
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)],
                       [helper.make_tensor_value_info("x", F, ["n", 7, 5])],
                       [helper.make_tensor_value_info("v", F, ["n", "a", "b"]),
                        helper.make_tensor_value_info("i", I64, ["n", "a", "b"])],
                       [("k", np.array([2], np.int64))])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    vm = runtime.VirtualMachine(build(from_onnx(model)))
    rng = np.random.default_rng(6)
    for n in (2, 3):
        x = rng.integers(-2, 3, (n, 7, 5)).astype(np.float32)
        for g, w in zip(vm["main"](x), sess.run(None, {"x": x})):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("scalar_input", [False, True])
def test_scalars_stay_0d(scalar_input):
    """A 0-d index drops the gathered axis (``x[:, 0]`` as exporters write it: Gather with a scalar), 0-d
    constants stay 0-d, and numpy folds of 0-d integer constants (Abs, Neg, Cast) stay tensors."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=1),                 # (3, 5)
             helper.make_node("Abs", ["k"], ["ak"]), helper.make_node("Neg", ["ak"], ["nk"]),
             helper.make_node("Cast", ["nk"], ["fk"], to=F),                       # -2.0, 0-d
             helper.make_node("Mul", ["g", "fk"], ["y"])]
    inits = [("k", np.array(-2, np.int64))] + ([] if scalar_input else [("i", np.array(0, np.int64))])
    inputs = [helper.make_tensor_value_info("x", F, [3, 4, 5])]
    if scalar_input:
        inputs.append(helper.make_tensor_value_info("i", I64, []))
    model = make_model(nodes, inputs, [helper.make_tensor_value_info("y", F, [3, 5])], inits)
    feeds = [{"x": rand(3, 4, 5)} | ({"i": np.array(2, np.int64)} if scalar_input else {})]
    run_both(model, feeds)


def test_slice_and_where_and_expand():
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("Where", ["c", "s", "neg"], ["w"]),
             helper.make_node("Shape", ["w"], ["ws"]),
             helper.make_node("Expand", ["one", "ws"], ["ones"]),
             helper.make_node("Add", ["w", "ones"], ["y"])]
    inits = [("starts", np.array([1, 0], np.int64)), ("ends", np.array([np.iinfo(np.int64).max, -1], np.int64)),
             ("axes", np.array([1, 2], np.int64)), ("steps", np.array([1, 2], np.int64)),
             ("zero", np.array(0, np.float32)), ("neg", np.array([-1.0], np.float32)),
             ("one", np.array([[1.0]], np.float32))]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, ["b", "s", 7])],
                       [helper.make_tensor_value_info("y", F, ["b", "s1", 3])], inits)
    run_both(model, [{"x": rand(2, 4, 7)}, {"x": rand(3, 2, 7)}])


def test_conv1d_gelu_reduce_mean_unsqueeze_squeeze():
    w, b = rand(6, 3, 3), rand(6)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1], strides=[2]),
             helper.make_node("Gelu", ["c"], ["g"]),
             helper.make_node("ReduceMean", ["g", "axes"], ["m"], keepdims=0),
             helper.make_node("Unsqueeze", ["m", "ax0"], ["u"]),
             helper.make_node("Squeeze", ["u", "ax0"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, ["b", 3, "l"])],
                       [helper.make_tensor_value_info("y", F, ["b", 6])],
                       [("w", w), ("b", b), ("axes", np.array([-1], np.int64)), ("ax0", np.array([0], np.int64))],
                       opset=20)
    run_both(model, [{"x": rand(2, 3, 9)}, {"x": rand(1, 3, 16)}])


def test_range_constant_of_shape_cast_split_concat():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i1"], ["n"]),
             helper.make_node("Range", ["z", "n", "o"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Mul", ["x", "rf"], ["xm"]),
             helper.make_node("ConstantOfShape", ["s"], ["ones"], value=helper.make_tensor("v", F, [1], [1.0])),
             helper.make_node("Add", ["xm", "ones"], ["a"]),
             helper.make_node("Split", ["a", "sp"], ["p", "q"], axis=0),
             helper.make_node("Concat", ["q", "p"], ["y"], axis=0)]
    inits = [("i1", np.array(1, np.int64)), ("z", np.array(0, np.int64)), ("o", np.array(1, np.int64)),
             ("sp", np.array([1, 1], np.int64))]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [2, "n"])],
                       [helper.make_tensor_value_info("y", F, [2, "n"])], inits)
    run_both(model, [{"x": rand(2, 3)}, {"x": rand(2, 8)}])


def test_float_range_to_a_symbolic_dim_and_folded_cumsum():
    """``torch.arange(x.shape[1], dtype=torch.float32)`` as torch's ONNX exporter writes it (Range over float
    bounds, the limit a symbolic dim cast to float), at two lengths; a Range whose limit is the last running
    sum of constant repeats (``repeat_interleave``: CumSum of a constant is folded), exclusive too."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Squeeze", ["s"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=F),
             helper.make_node("Range", ["zf", "nf", "of"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [2, "t"])],
                       [helper.make_tensor_value_info("y", F, [2, "t"])],
                       [("zf", np.array(0.0, np.float32)), ("of", np.array(1.0, np.float32))], opset=18)
    run_both(model, [{"x": rand(2, 5)}, {"x": rand(2, 9)}])
    nodes = [helper.make_node("CumSum", ["rep", "ax"], ["cs"]),
             helper.make_node("CumSum", ["rep", "ax"], ["ex"], exclusive=1),
             helper.make_node("Gather", ["cs", "last"], ["lim"], axis=0),
             helper.make_node("Gather", ["ex", "last"], ["lim2"], axis=0),
             helper.make_node("Range", ["lim2", "lim", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Add", ["x", "rf"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, [3])],
                       [("rep", np.array([1, 2, 0, 3], np.int64)), ("ax", np.array(0, np.int64)),
                        ("last", np.array(-1, np.int64)), ("one", np.array(1, np.int64))], opset=18)
    run_both(model, [{"x": rand(3)}])


def test_unsupported_ops_one_message_with_every_node():
    nodes = [helper.make_node("Bernoulli", ["x"], ["h"], name="hard_1"),
             helper.make_node("Det", ["h"], ["e"], name="ein_a"),
             helper.make_node("Det", ["e"], ["e2"], name="ein_b"),
             helper.make_node("Relu", ["e2"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [2, 3])])
    with pytest.raises(UnsupportedOpsError) as info:
        from_onnx(model)
    msg = str(info.value)
    for word in ("Bernoulli", "hard_1", "Det", "ein_a", "ein_b"):
        assert word in msg
    assert "Relu" not in msg
    assert info.value.missing == {"Det": ["ein_a", "ein_b"], "Bernoulli": ["hard_1"]}


@pytest.mark.parametrize("opset", [9, 10, 12])
def test_older_opsets_are_converted(opset):
    """Opsets 7-12 (the ONNX model zoo's era) go through onnx.version_converter to 13 first: Upsample
    (opset 9), Resize's older inputs, Split / Squeeze / ReduceMean with attributes, Softmax's 2-d
    coercion before 13, BatchNormalization with its older attributes -- the results of onnxruntime on the
    original model."""
    nodes = [helper.make_node("Upsample" if opset == 9 else "Resize", ["x", "sc"] if opset == 9 else
                              (["x", "sc"] if opset == 10 else ["x", "roi", "sc"]), ["u"], mode="nearest"),
             helper.make_node("BatchNormalization", ["u", "s", "b", "m", "v"], ["bn"], epsilon=1e-3),
             helper.make_node("ReduceMean", ["bn"], ["r"], axes=[2, 3], keepdims=1),
             helper.make_node("Squeeze", ["r"], ["q"], axes=[2, 3]),
             helper.make_node("Split", ["q"], ["a", "c"], axis=1, split=[1, 2]),
             helper.make_node("Concat", ["c", "a"], ["cat"], axis=1),
             helper.make_node("Softmax", ["cat"], ["y"], axis=1)]
    inits = [("sc", np.array([1, 1, 2, 2], np.float32)), ("s", rand(3)), ("b", rand(3)), ("m", rand(3)),
             ("v", np.abs(rand(3)) + 0.5)] + ([("roi", np.zeros(0, np.float32))] if opset > 10 else [])
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 3, 4, 4])],
                       [helper.make_tensor_value_info("y", F, [2, 3])], inits, opset=opset)
    run_both(model, [{"x": rand(2, 3, 4, 4)}])


def test_checks_opset_and_bad_files(tmp_path):
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    io = ([helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])])
    with pytest.raises(ONNXImportError, match="opset 6 is not supported"):
        from_onnx(make_model(relu, *io, opset=6))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model")
    with pytest.raises(ONNXImportError):
        from_onnx(bad)
    with pytest.raises(ONNXImportError, match="shape_dict"):
        from_onnx(make_model(relu, *io), shape_dict={"nope": [2]})


def test_serialized_bytes_import_as_the_model(tmp_path, monkeypatch):
    """The model's serialized bytes (what onnxruntime's InferenceSession also takes) import as the
    ModelProto does; damaged or oversized bytes and external data referred to from bytes are refused, and
    anything else is a TypeError naming the accepted kinds."""
    import builder.frontend.onnx.loading as onnx_loading   # (the module that enforces the limit)

    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])]
    w = rand(2, 5)
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, ["n", 5])],
                       [helper.make_tensor_value_info("y", F, ["n", 5])], inits=[("w", w)])
    data = model.SerializeToString()
    x = rand(2, 5)
    for src in (data, bytearray(data), memoryview(data)):
        got = runtime.VirtualMachine(build(from_onnx(src)))["main"](x)
        np.testing.assert_allclose(got, np.tanh(x.astype(np.float64) * w), rtol=1e-6, atol=1e-7)
    with pytest.raises(ONNXImportError, match="not a readable ONNX model"):
        from_onnx(b"\x00not a model" + data[:7])
    monkeypatch.setattr(onnx_loading, "MAX_MODEL_BYTES", len(data) - 1)
    with pytest.raises(ONNXImportError, match="more than the limit"):
        from_onnx(data)
    monkeypatch.undo()
    path, _ = _external_model(tmp_path)
    with pytest.raises(ONNXImportError, match="ModelProto or bytes: pass the model's path"):
        from_onnx(path.read_bytes())
    with pytest.raises(TypeError, match="ModelProto, its serialized bytes or a path"):
        from_onnx(3.5)


def _external_model(tmp_path, n=3):
    """An Add of ``n`` initializers saved with every weight in ``w.bin`` (ONNX external data, as
    ``torch.onnx.export`` writes by default); returns (path, the initializer values)."""
    ws = [rand(4) + i for i in range(n)]
    names = [f"w{i}" for i in range(n)]
    nodes, prev = [], "x"
    for i, nm in enumerate(names):
        nodes.append(helper.make_node("Add", [prev, nm], [f"s{i}"]))
        prev = f"s{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, [4])],
                       inits=list(zip(names, ws)))
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.bin", size_threshold=0)
    return tmp_path / "m.onnx", ws


def test_external_data_is_read_from_the_model_folder(tmp_path):
    """A model whose weights are external data (``w.bin`` beside it) imports from its path, the weights read
    from that file; the same model as a ModelProto still referring to the file is refused (no folder)."""
    path, ws = _external_model(tmp_path)
    x = rand(4)
    got = runtime.VirtualMachine(build(from_onnx(path)))["main"](x)
    np.testing.assert_allclose(got, x + sum(ws), rtol=1e-6)
    run_both(onnx.load(path), [{"x": x}])
    with pytest.raises(ONNXImportError, match="pass the model's path"):
        from_onnx(onnx.load(path, load_external_data=False))


@pytest.mark.parametrize("damage,match", [
    (lambda info, p: info.update(location="../w.bin"), "not a relative path inside|outside the directory"),
    (lambda info, p: info.update(location=str(p.parent / "w.bin")), "not a relative path inside|absolute path"),
    (lambda info, p: info.update(location="missing.bin"), "not a regular file|check_model"),
    (lambda info, p: info.update(length="8"), "for 16 bytes of data"),
    (lambda info, p: info.update(offset="40"), r"bytes \[40, 56\)"),
    (lambda info, p: info.update(offset="-4"), "bytes|check_model"),
    (lambda info, p: info.update(offset="x"), "not integers|check_model"),
])
def test_damaged_external_data_is_refused(tmp_path, damage, match):
    """External data locations leaving the model's folder (``..``, an absolute path), missing files, regions
    of the wrong size or outside the file, a bad offset: ONNXImportError naming the tensor, nothing read."""
    path, _ = _external_model(tmp_path)
    model = onnx.load(path, load_external_data=False)
    t = model.graph.initializer[1]
    info = {e.key: e.value for e in t.external_data}
    damage(info, path)
    del t.external_data[:]
    for k, v in info.items():
        t.external_data.add(key=k, value=v)
    onnx.save(model, path)
    with pytest.raises(ONNXImportError, match=match):
        from_onnx(path)


def test_external_data_regions_cannot_multiply_memory(tmp_path):
    """Every tensor pointing at the same 16 bytes of a 16-byte file: together the regions would read three times
    what the file holds, which is refused (a small file cannot make the import allocate many times its size);
    a data file that is a symlink leaving the folder is refused too."""
    path, _ = _external_model(tmp_path, n=3)
    model = onnx.load(path, load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "offset":
                e.value = "0"
    onnx.save(model, path)
    data = tmp_path / "w.bin"
    data.write_bytes(data.read_bytes()[:16])
    with pytest.raises(ONNXImportError, match="read more bytes"):
        from_onnx(path)
    sub = tmp_path / "sub"
    sub.mkdir()
    path2, _ = _external_model(sub, n=1)
    outside = tmp_path / "outside.bin"
    outside.write_bytes((sub / "w.bin").read_bytes())
    (sub / "w.bin").unlink()
    (sub / "w.bin").symlink_to(outside)
    with pytest.raises(ONNXImportError, match="not a regular file inside|symbolic link"):
        from_onnx(path2)


def test_shape_dict_and_dtype_dict_override():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, ["a", None])],
                       [helper.make_tensor_value_info("y", F, ["a", None])])
    main = from_onnx(model, shape_dict={"x": [4, "width"]})["main"]
    shape = main.params[0].struct_info.shape
    assert shape[0] == 4 and str(shape[1]) == "width"
    main = from_onnx(model)["main"]
    assert [str(d) for d in main.params[0].struct_info.shape] == ["a", "x_dim1"]
    assert from_onnx(model, dtype_dict={"x": "float64"})["main"].params[0].struct_info.dtype == "float64"


# -- the real MiniLM-L6 ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm_onnx(tmp_path_factory):
    torch = pytest.importorskip("torch", reason="the MiniLM export needs torch")
    transformers = pytest.importorskip("transformers", reason="the MiniLM export needs transformers")
    try:
        from builder.text import minilm_assets
        folder = minilm_assets()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        pytest.skip(f"MiniLM weights are not installed: {e}")
    bert = transformers.BertModel.from_pretrained(str(folder)).eval()

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    path = tmp_path_factory.mktemp("minilm") / "minilm.onnx"
    ids = torch.randint(0, 30522, (2, 7))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the TorchScript exporter's deprecation and tracer warnings
        torch.onnx.export(Wrapper(bert), (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(path),
                          input_names=names, output_names=["last_hidden_state"], opset_version=17,
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in names}, dynamo=False)
    return path


@pytest.fixture(scope="module")
def minilm_compiled(minilm_onnx):
    return build(from_onnx(minilm_onnx))


def minilm_feeds(b, s, seed):
    rng = np.random.default_rng(seed)
    mask = np.ones((b, s), np.int64)
    mask[0, s - 2:] = 0   # padding in the first row
    return {"input_ids": rng.integers(0, 30522, (b, s)), "attention_mask": mask,
            "token_type_ids": rng.integers(0, 2, (b, s))}


def test_minilm_matches_onnxruntime_at_two_sizes(minilm_onnx, minilm_compiled):
    vm = runtime.VirtualMachine(minilm_compiled)
    sess = ort.InferenceSession(str(minilm_onnx), providers=["CPUExecutionProvider"])
    for b, s, seed in ((2, 7, 0), (3, 16, 1)):
        feeds = minilm_feeds(b, s, seed)
        ref = sess.run(None, feeds)[0]
        out = np.asarray(vm["main"](*feeds.values()))
        assert out.shape == ref.shape == (b, s, 384)
        assert np.abs(out - ref).max() <= 1e-4


def test_minilm_matmuls_reach_linear_kernels(minilm_compiled):
    kernels = {n: k["kernel"] for n, k in minilm_compiled.kernels.items()}
    linear = {n: k for n, k in kernels.items() if k.startswith("linear/")}
    # q/k/v (+bias), attention output (+bias+residual), intermediate (+bias+gelu), output (+bias+residual)
    assert any("gelu" in n for n in linear), kernels
    assert not [n for n, k in kernels.items() if n.startswith("fused_matmul") and not k.startswith("linear/")], kernels


@pytest.mark.parametrize("op_type,attrs,shape", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 2]), [None, 3, 11, 9]),
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[2, 1], dilations=[2, 1], ceil_mode=1), [2, 3, 11, 9]),
    ("MaxPool", dict(kernel_shape=[3], auto_pad="SAME_UPPER", strides=[2]), [2, 4, 10]),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [None, 3, 11, 9]),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1), [None, 3, 11, 9]),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1), [2, 3, 12, 9]),
    ("AveragePool", dict(kernel_shape=[4], strides=[3], auto_pad="SAME_LOWER"), [2, 4, 10]),
    ("AveragePool", dict(kernel_shape=[1, 2], strides=[3, 3], auto_pad="SAME_UPPER", count_include_pad=1), [2, 2, 10, 8]),
    ("AveragePool", dict(kernel_shape=[2, 1], strides=[3, 2], auto_pad="SAME_LOWER"), [2, 2, 9, 9]),
    ("GlobalAveragePool", {}, [None, 5, 6, 7]),
    ("GlobalMaxPool", {}, [None, 5, 6]),
])
def test_pooling_matches_onnxruntime(op_type, attrs, shape):
    """MaxPool / AveragePool (asymmetric pads, ceil_mode, dilations, auto_pad, count_include_pad both ways)
    and the global pools, on a symbolic batch where the shape allows. SAME padding with a kernel shorter than
    the stride has negative pads (the spec's formula, onnxruntime's windows): the input is cropped."""
    dims = ["n" if d is None else d for d in shape]
    model = make_model([helper.make_node(op_type, ["x"], ["y"], **attrs)],
                       [helper.make_tensor_value_info("x", F, dims)],
                       [helper.make_tensor_value_info("y", F, [f"o{i}" for i in range(len(shape))])], opset=19)
    sizes = [[2 if d is None else d for d in shape], [1 if d is None else d for d in shape]]
    run_both(model, [{"x": rand(*s)} for s in sizes])


@pytest.mark.parametrize("attrs", [dict(pads=[1, 0, 2, 1], strides=[2, 1]), dict(auto_pad="SAME_UPPER"), dict(pads=[2, 1, 0, 1], dilations=[2, 1]),
                                   dict(auto_pad="SAME_LOWER", strides=[2, 2], group=2),
                                   dict(auto_pad="SAME_UPPER", strides=[4, 3])])
def test_conv2d_and_batch_norm_match_onnxruntime(attrs):
    groups = attrs.get("group", 1)
    w, b = rand(6, 4 // groups, 3, 2), rand(6)
    stats = [("s", rand(6)), ("bb", rand(6)), ("m", rand(6)), ("v", np.abs(rand(6)) + 0.5)]
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
                        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"], epsilon=1e-3)],
                       [helper.make_tensor_value_info("x", F, [2, 4, 9, 8])],
                       [helper.make_tensor_value_info("y", F, ["a", "b", "c", "d"])],
                       [("w", w), ("b", b), *stats])
    run_both(model, [{"x": rand(2, 4, 9, 8)}], tol=3e-5)


@pytest.mark.parametrize("attrs,how", [
    (dict(mode="nearest"), "scales"),
    (dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), "scales"),
    (dict(mode="nearest", nearest_mode="round_prefer_ceil"), "sizes"),
    (dict(mode="linear"), "sizes"),
    (dict(mode="linear", coordinate_transformation_mode="align_corners"), "sizes"),
    (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), "scales"),
    (dict(mode="linear", coordinate_transformation_mode="asymmetric"), "sizes"),
    (dict(mode="cubic"), "scales"),
    (dict(mode="cubic", coordinate_transformation_mode="align_corners"), "sizes"),
    (dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1), "sizes"),
    (dict(mode="cubic", coordinate_transformation_mode="asymmetric", exclude_outside=1), "scales"),
])
def test_resize_matches_onnxruntime(attrs, how):
    """Resize up and down, nearest (the nearest modes), linear (the coordinate modes) and cubic (its kernel's
    a, exclude_outside), by scales or sizes, on a symbolic batch."""
    if how == "scales":
        ins, inits, out = ["x", "", "sc"], [("sc", np.array([1, 1, 2, 3], np.float32))], ["n", 3, 10, 12]
    else:
        ins, inits, out = ["x", "", "", "sz"], [("sz", np.array([2, 3, 7, 3], np.int64))], ["n", 3, 7, 3]
    model = make_model([helper.make_node("Resize", ins, ["y"], **attrs)],
                       [helper.make_tensor_value_info("x", F, ["n", 3, 5, 4])],
                       [helper.make_tensor_value_info("y", F, out)], inits, opset=18)
    run_both(model, [{"x": rand(2, 3, 5, 4)}] + ([{"x": rand(1, 3, 5, 4)}] if how == "scales" else []))


@pytest.mark.parametrize("attrs,how", [
    (dict(mode="linear"), "scales"),
    (dict(mode="linear", coordinate_transformation_mode="align_corners"), "sizes"),
    (dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), "sizes"),
    (dict(mode="nearest", nearest_mode="round_prefer_ceil"), "scales"),
])
def test_resize_of_ncw_data_matches_onnxruntime(attrs, how):
    """Resize of 3-d (N, C, W) data (PyTorch's linear interpolation of sequences exports as this), up by scales
    and down by sizes, on a symbolic batch."""
    if how == "scales":
        ins, inits, out = ["x", "", "sc"], [("sc", np.array([1, 1, 2.5], np.float32))], ["n", 3, 15]
    else:
        ins, inits, out = ["x", "", "", "sz"], [("sz", np.array([2, 3, 4], np.int64))], ["n", 3, 4]
    model = make_model([helper.make_node("Resize", ins, ["y"], **attrs)],
                       [helper.make_tensor_value_info("x", F, ["n", 3, 6])],
                       [helper.make_tensor_value_info("y", F, out)], inits, opset=18)
    run_both(model, [{"x": rand(2, 3, 6)}] + ([{"x": rand(1, 3, 6)}] if how == "scales" else []))


@pytest.mark.parametrize("op_type,attrs,extra,shape", [
    ("ReduceProd", dict(axes=[1], keepdims=0), [], ["n", 4, 3]),
    ("ReduceL1", dict(axes=[-1]), [], ["n", 4, 3]),
    ("ReduceL2", dict(axes=[1, 2], keepdims=0), [], ["n", 4, 3]),
    ("ReduceSumSquare", dict(axes=[0]), [], ["n", 4, 3]),
    ("ReduceLogSumExp", dict(axes=[2], keepdims=0), [], ["n", 4, 3]),
    ("CumSum", {}, [("ax", np.array(1, np.int64))], ["n", 4, 3]),
    ("CumSum", dict(exclusive=1), [("ax", np.array(-1, np.int64))], ["n", 4, 3]),
    ("Trilu", dict(upper=0), [("k", np.array(1, np.int64))], ["n", 4, 3]),
    ("Trilu", {}, [("k", np.array(-1, np.int64))], ["n", 4, 3]),
    ("DepthToSpace", dict(blocksize=2), [], ["n", 8, 3, 5]),
    ("DepthToSpace", dict(blocksize=2, mode="CRD"), [], ["n", 8, 3, 5]),
    ("SpaceToDepth", dict(blocksize=2), [], ["n", 3, 4, 6]),
    ("InstanceNormalization", dict(epsilon=1e-3), [("sc", None), ("bi", None)], ["n", 4, 5, 3]),
    ("Sum", {}, [("s2", None)], ["n", 4, 3]),
    ("Mean", {}, [("s2", None)], ["n", 4, 3]),
])
def test_more_ops_match_onnxruntime(op_type, attrs, extra, shape):
    """Reductions (Prod, L1, L2, SumSquare, LogSumExp), CumSum, Trilu, DepthToSpace / SpaceToDepth,
    InstanceNormalization and the variadic Sum / Mean, on a symbolic batch."""
    inits = []
    for name, value in extra:
        if value is None:
            value = rand(4) if op_type == "InstanceNormalization" else rand(4, 3)
        inits.append((name, value))
    model = make_model([helper.make_node(op_type, ["x"] + [n for n, _ in extra], ["y"], **attrs)],
                       [helper.make_tensor_value_info("x", F, shape)],
                       [helper.make_tensor_value_info("y", F, [f"o{i}" for i in range(
                           {"ReduceProd": 2, "ReduceL2": 1, "ReduceLogSumExp": 2}.get(op_type, len(shape)))])],
                       inits, opset=17)
    sizes = [[2 if d == "n" else d for d in shape], [1 if d == "n" else d for d in shape]]
    run_both(model, [{"x": rand(*s)} for s in sizes], tol=2e-5)


def test_conv_transpose_1d_matches_onnxruntime():
    w, b = rand(4, 3, 5), rand(6)
    model = make_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2], pads=[1, 2],
                                         output_padding=[1], dilations=[2], group=2)],
                       [helper.make_tensor_value_info("x", F, ["n", 4, 7])],
                       [helper.make_tensor_value_info("y", F, ["n", 6, "l"])], [("w", w), ("b", b)])
    run_both(model, [{"x": rand(2, 4, 7)}, {"x": rand(1, 4, 7)}], tol=2e-5)


def test_reversing_slices_symbolic_tile_and_computed_pads():
    """Slices with negative steps on a computed tensor (a static dim in part, a symbolic dim whole), Tile by
    a computed (symbolic) repeat, and Pad to a multiple of 4 with pads from shape arithmetic (Mod): what
    exporters write for ``x.flip``, ``expand``-like tiling and Swin's window padding."""
    big = np.iinfo(np.int64).max
    c = lambda name, v: (name, np.array(v, np.int64))
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Slice", ["r", "m1", "mbig", "ax1", "m1"], ["flip1"]),
             helper.make_node("Slice", ["r", "m1", "mbig", "ax0", "m1"], ["flip0"]),
             helper.make_node("Slice", ["r", "s4", "z", "ax2", "m2"], ["part"]),
             helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Slice", ["shp", "z", "one", "z"], ["n"]),
             helper.make_node("Concat", ["one", "n", "one"], ["reps"], axis=0),
             helper.make_node("Tile", ["r", "reps"], ["tiled"]),
             helper.make_node("Gather", ["shp", "two"], ["w"], axis=0),
             helper.make_node("Mod", ["w", "four"], ["wm"]), helper.make_node("Sub", ["four", "wm"], ["d"]),
             helper.make_node("Mod", ["d", "four"], ["padw"]),
             helper.make_node("Concat", ["zeros5", "padw"], ["pads"], axis=0),
             helper.make_node("Pad", ["r", "pads"], ["padded"])]
    inits = [c("m1", [-1]), c("mbig", [-big]), c("ax1", [1]), c("ax0", [0]), c("s4", [4]), c("z", [0]), c("ax2", [2]),
             c("m2", [-2]), c("one", [1]), c("two", [2]), c("four", 4), c("zeros5", [0] * 5)]
    outs = [("flip1", ["n", 5, 6]), ("flip0", ["n", 5, 6]), ("part", ["n", 5, 2]), ("tiled", ["n", "t", 6]),
            ("padded", ["n", 5, 8])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 5, 6])],
                              [helper.make_tensor_value_info(name, F, shape) for name, shape in outs],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    vm = runtime.VirtualMachine(build(from_onnx(model)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (1, 3):
        x = rand(n, 5, 6)
        for g, w in zip(vm["main"](x), sess.run(None, {"x": x})):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def _nbits(w: np.ndarray, block: int, zero_points: bool):
    """``w`` (N, K) quantized to 4 bits per block in MatMulNBits' layout (low nibble first); symmetric with
    ORT's default zero point 8, or asymmetric with packed per-block zero points."""
    n, k = w.shape
    g = w.reshape(n, k // block, block)
    if zero_points:
        lo, hi = g.min(axis=2, keepdims=True), g.max(axis=2, keepdims=True)
        scale = np.maximum(hi - lo, 1e-6) / 15
        zp = np.clip(np.rint(-lo / scale), 0, 15).astype(np.uint8)
        q = np.clip(np.rint(g / scale) + zp, 0, 15).astype(np.uint8)
        zpad = np.concatenate([zp[..., 0], np.zeros((n, zp.shape[1] % 2), np.uint8)], axis=1)
        packed_zp = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).reshape(-1)
    else:
        scale = np.abs(g).max(axis=2, keepdims=True) / 7
        q = (np.clip(np.rint(g / scale), -8, 7) + 8).astype(np.uint8)
        packed_zp = None
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return packed, scale.reshape(-1).astype(np.float32), packed_zp


@pytest.mark.parametrize("n, zero_points, level", [(48, False, 0), (20, False, 0), (32, True, 0), (48, False, 4)])
def test_matmul_nbits_matches_onnxruntime(n, zero_points, level):
    """onnxruntime's MatMulNBits: symmetric weights stay 4-bit (row tiles when N allows) and run on the
    quantized kernels; per-block zero points are dequantized to float; accuracy_level 4 is int8
    activations on both sides (compared loosely: each side rounds its own way)."""
    k, block = 96, 32
    w = rand(n, k)
    packed, scales, zp = _nbits(w, block, zero_points)
    inits = [("B", packed), ("s", scales), ("bias", rand(n))] + ([("zp", zp)] if zero_points else [])
    ins = ["x", "B", "s", "zp" if zero_points else "", "", "bias"]
    node = helper.make_node("MatMulNBits", ins, ["y"], domain="com.microsoft", K=k, N=n, bits=4, block_size=block,
                            accuracy_level=level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, ["b", k])],
                              [helper.make_tensor_value_info("y", F, ["b", n])],
                              initializer=[numpy_helper.from_array(a, name) for name, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    exe = build(from_onnx(model))
    # the linear kernel reads the packed 4-bit words itself (no float weight is made)
    packed_params = [p["dtype"] for k_ in exe.kernels.values() if k_["kernel"].startswith("linear")
                     for p in k_["params"] if p["dtype"] == "uint32"]
    assert bool(packed_params) != zero_points, exe.kernels
    vm = runtime.VirtualMachine(exe)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b in (1, 5):
        x = rand(b, k)
        want = sess.run(None, {"x": x})[0]
        tol = 3e-2 * float(np.abs(want).max()) if level == 4 else 2e-4
        np.testing.assert_allclose(vm["main"](x), want, rtol=0, atol=tol)


def test_group_normalization_castlike_isinf():
    """GroupNormalization (opset 21, per-channel scale / bias), CastLike and IsInf (both signs, positive
    only) against onnxruntime."""
    g, opset = 2, 21
    scale, bias = rand(6), rand(6)
    nodes = [helper.make_node("GroupNormalization", ["x", "sc", "bi"], ["gn"], num_groups=g, epsilon=1e-3),
             helper.make_node("CastLike", ["k", "x"], ["kf"]), helper.make_node("Mul", ["gn", "kf"], ["y"]),
             helper.make_node("IsInf", ["z"], ["inf"]), helper.make_node("IsInf", ["z"], ["pinf"], detect_negative=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 6, 5]),
                                           helper.make_tensor_value_info("z", F, [4])],
                              [helper.make_tensor_value_info("y", F, ["n", 6, 5]),
                               helper.make_tensor_value_info("inf", TensorProto.BOOL, [4]),
                               helper.make_tensor_value_info("pinf", TensorProto.BOOL, [4])],
                              initializer=[numpy_helper.from_array(scale, "sc"), numpy_helper.from_array(bias, "bi"),
                                           numpy_helper.from_array(np.array(3, np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset == 21 else 8
    vm = runtime.VirtualMachine(build(from_onnx(model)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    z = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    for n in (1, 3):
        x = rand(n, 6, 5)
        for got, want in zip(vm["main"](x, z), sess.run(None, {"x": x, "z": z})):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_lp_normalization_hardmax_one_hot():
    """LpNormalization (p 1 and 2), Hardmax (ties: the first maximum) and OneHot (negative indices wrap,
    an inner axis) against onnxruntime."""
    nodes = [helper.make_node("LpNormalization", ["x"], ["l2"], axis=1, p=2),
             helper.make_node("LpNormalization", ["x"], ["l1"], axis=-1, p=1),
             helper.make_node("Hardmax", ["x"], ["hm"], axis=1),
             helper.make_node("OneHot", ["i", "depth", "vals"], ["oh"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 4, 3]),
                                           helper.make_tensor_value_info("i", I64, ["n", 2])],
                              [helper.make_tensor_value_info(n_, F, s_) for n_, s_ in
                               (("l2", ["n", 4, 3]), ("l1", ["n", 4, 3]), ("hm", ["n", 4, 3]), ("oh", ["n", 5, 2]))],
                              initializer=[numpy_helper.from_array(np.array(5, np.int64), "depth"),
                                           numpy_helper.from_array(np.array([-1.0, 2.5], np.float32), "vals")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    vm = runtime.VirtualMachine(build(from_onnx(model)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (1, 3):
        x = rand(n, 4, 3)
        x[0, 1, 0] = x[0, 2, 0] = 9.0          # a tie: the first maximum wins
        i = RNG.integers(-5, 5, (n, 2)).astype(np.int64)
        for got, want in zip(vm["main"](x, i), sess.run(None, {"x": x, "i": i})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
