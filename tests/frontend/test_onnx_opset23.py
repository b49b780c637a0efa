"""The ops of ONNX opsets 23 / 24 that transformer exports use -- RMSNormalization, RotaryEmbedding (3-d and
4-d, halves and interleaved pairs, partial rotation, with and without position ids), Attention (3-d with
GQA heads, bool and additive masks, a past key / value cache with its present outputs and the causal
mask aligned to it), Swish -- against onnxruntime, on symbolic dims where the op allows."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="from_onnx needs the onnx package (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="the reference results come from onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import runtime  # noqa: E402
from builder import compile as build  # noqa: E402
from builder.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def model_of(nodes, inputs, outputs, opset, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def check(model, feeds_list, tol=2e-6):
    vm = runtime.VirtualMachine(build(from_onnx(model)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        got = vm["main"](*feeds.values())
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        want = sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_rms_normalization_and_swish():
    """RMSNormalization over the last two dims with a broadcast scale; Swish with alpha."""
    nodes = [helper.make_node("RMSNormalization", ["x", "s"], ["r"], axis=-2, epsilon=1e-3),
             helper.make_node("Swish", ["r"], ["y"], alpha=1.5)]
    model = model_of(nodes, [vi("x", ["n", 3, 8])], [vi("y", ["n", 3, 8])], 24, [("s", randn(8))])
    check(model, [{"x": randn(2, 3, 8)}, {"x": randn(1, 3, 8)}])


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_rotary_embedding(interleaved, rotary_dim):
    """(B, S, H * D) with num_heads and position ids into (max_pos, dim / 2) caches; (B, H, S, D) with caches
    already per (B, S); all of the head or its first rotary_dim features."""
    half = (rotary_dim or 6) // 2
    nodes = [helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], num_heads=2, interleaved=interleaved,
                              rotary_embedding_dim=rotary_dim),
             helper.make_node("RotaryEmbedding", ["x4", "c4", "s4"], ["y4"], interleaved=interleaved,
                              rotary_embedding_dim=rotary_dim)]
    model = model_of(nodes, [vi("x", ["b", "s", 12]), vi("p", ["b", "s"], I64), vi("x4", [2, 3, 5, 6]),
                             vi("c4", [2, 5, half]), vi("s4", [2, 5, half])],
                     [vi("y", ["b", "s", 12]), vi("y4", [2, 3, 5, 6])], 23,
                     [("c", randn(16, half)), ("s", randn(16, half))])
    feeds = {"x": randn(2, 4, 12), "p": np.array([[0, 1, 2, 3], [7, 8, 9, 15]], np.int64), "x4": randn(2, 3, 5, 6),
             "c4": randn(2, 5, half), "s4": randn(2, 5, half)}
    check(model, [feeds])


@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_attention_3d_gqa_with_masks(mask):
    """3-d Q (4 heads) against K / V with 2 heads (GQA), a key length other than the query's, a padding-style
    bool mask or an additive float one, an explicit scale, on a symbolic batch."""
    ins = ["q", "k", "v"] + (["m"] if mask else [])
    inputs = [vi("q", ["b", 3, 16]), vi("k", ["b", 5, 8]), vi("v", ["b", 5, 8])]
    if mask:
        inputs.append(vi("m", ["b", 1, 3, 5], B if mask == "bool" else F))
    model = model_of([helper.make_node("Attention", ins, ["y"], q_num_heads=4, kv_num_heads=2, scale=0.4)],
                     inputs, [vi("y", ["b", 3, 16])], 23)
    feeds_list = []
    for n in (1, 2):
        feeds = {"q": randn(n, 3, 16), "k": randn(n, 5, 8), "v": randn(n, 5, 8)}
        if mask == "bool":
            m = rng.random((n, 1, 3, 5)) > 0.4
            m[..., 0] = True
            feeds["m"] = m
        elif mask == "float":
            feeds["m"] = randn(n, 1, 3, 5)
        feeds_list.append(feeds)
    check(model, feeds_list)


@pytest.mark.parametrize("opset", [23, 24])
def test_attention_with_past_and_causal(opset):
    """4-d inputs with a past key / value: present outputs concatenate along the sequence, and the causal
    mask lets query i see the past and new keys up to its own (bottom-right)."""
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "kk", "vv"], is_causal=1)
    model = model_of([node], [vi("q", [2, 4, 3, 8]), vi("k", [2, 2, 3, 8]), vi("v", [2, 2, 3, 8]),
                              vi("pk", [2, 2, "p", 8]), vi("pv", [2, 2, "p", 8])],
                     [vi("y", [2, 4, 3, 8]), vi("kk", [2, 2, "t", 8]), vi("vv", [2, 2, "t", 8])], opset)
    check(model, [{"q": randn(2, 4, 3, 8), "k": randn(2, 2, 3, 8), "v": randn(2, 2, 3, 8), "pk": randn(2, 2, p, 8),
                   "pv": randn(2, 2, p, 8)} for p in (0, 4)])
    plain = model_of([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
                     [vi("q", [1, 2, "s", 4]), vi("k", [1, 2, "s", 4]), vi("v", [1, 2, "s", 4])],
                     [vi("y", [1, 2, "s", 4])], opset)
    check(plain, [{"q": randn(1, 2, s, 4), "k": randn(1, 2, s, 4), "v": randn(1, 2, s, 4)} for s in (1, 6)])


def test_attention_refusals_and_opset_bound():
    def refused(attrs, outputs=("y",)):
        node = helper.make_node("Attention", ["q", "k", "v"], list(outputs), **attrs)
        model = model_of([node], [vi("q", [1, 2, 3, 4]), vi("k", [1, 2, 3, 4]), vi("v", [1, 2, 3, 4])],
                         [vi(o, [1, 2, 3, 4] if o == "y" else [1, 2, 3, 3]) for o in outputs if o], 23)
        with pytest.raises(ONNXImportError):
            from_onnx(model)

    refused({"softcap": 30.0})
    refused({}, ("y", "", "", "qk"))
    too_new = model_of([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], 25)
    with pytest.raises(ONNXImportError, match="opset 25 is not supported"):
        from_onnx(too_new)
