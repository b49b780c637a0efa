"""The ops of ONNX opsets 23 / 24 that transformer exports use -- RMSNormalization, RotaryEmbedding (3-d and
4-d, halves and interleaved pairs, partial rotation, with and without position ids), Attention (3-d with
GQA heads, bool and additive masks, a past key / value cache with its present outputs and the causal
mask aligned to it), Swish -- and older ops classic models use (GatherND, LRN, MeanVarianceNormalization,
Shrink, ThresholdedRelu, GlobalLpPool, ReduceLogSum, EyeLike, ReverseSequence, LSTM / GRU / RNN), against
onnxruntime, on symbolic dims where the op allows."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="from_onnx needs the onnx package (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="the reference results come from onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from builder.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402
from helpers.onnx_models import check_against_onnxruntime, make_model  # noqa: E402

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def model_of(nodes, inputs, outputs, opset, inits=()):
    return make_model(nodes, inputs, outputs, inits, opset=opset, ir_version=10)


def check(model, feeds_list, tol=2e-6):
    check_against_onnxruntime(model, feeds_list, tol)


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


# -- older ops that classic and exported models use ------------------------------------------------------


@pytest.mark.parametrize("batch_dims,q", [(0, 2), (1, 2), (2, 2), (0, 1)])
def test_gather_nd(batch_dims, q):
    """GatherND with batch dims and index rows of 1 or 2 coordinates, negative ones included."""
    data = randn(2, 3, 4, 5)
    lead = [2, 3][:batch_dims] + [4]
    dims = data.shape[batch_dims:batch_dims + q]
    idx = np.stack([rng.integers(-d, d, lead) for d in dims], axis=-1).astype(np.int64)
    out = lead + list(data.shape[batch_dims + q:])
    model = model_of([helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=batch_dims)],
                     [vi("d", [2, 3, 4, 5]), vi("i", list(idx.shape), I64)], [vi("y", out)], 17)
    check(model, [{"d": data, "i": idx}])


def test_gather_nd_of_symbolic_dims():
    """GatherND over data whose indexed dims are symbolic (what torch's ONNX exporter writes for a dynamic
    batch / sequence around the attention mask): the dims come from the shapes at run time, at two sizes."""
    model = model_of([helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=1)],
                     [vi("d", ["b", "s", 4]), vi("i", ["b", 3, 1], I64)], [vi("y", ["b", 3, 4])], 18)
    feeds = []
    for b, s_ in ((2, 5), (3, 9)):
        idx = rng.integers(-s_, s_, (b, 3, 1)).astype(np.int64)
        feeds.append({"d": randn(b, s_, 4), "i": idx})
    check(model, feeds)


def test_classic_normalizations_and_activations():
    """LRN (odd and size-1 windows), MeanVarianceNormalization, Shrink, ThresholdedRelu, GlobalLpPool (p 2
    and 3), ReduceLogSum."""
    nodes = [helper.make_node("LRN", ["x"], ["lrn5"], size=5, alpha=0.01, beta=0.6, bias=1.5),
             helper.make_node("LRN", ["x"], ["lrn1"], size=1),
             helper.make_node("MeanVarianceNormalization", ["x"], ["mvn"]),
             helper.make_node("Shrink", ["x"], ["shrink"], lambd=0.7, bias=0.2),
             helper.make_node("ThresholdedRelu", ["x"], ["trelu"], alpha=0.3),
             helper.make_node("GlobalLpPool", ["x"], ["lp3"], p=3), helper.make_node("GlobalLpPool", ["x"], ["lp2"]),
             helper.make_node("Abs", ["x"], ["ax"]), helper.make_node("ReduceLogSum", ["ax"], ["rls"], axes=[1, 2])]
    shapes = {"lp3": ["n", 7, 1, 1], "lp2": ["n", 7, 1, 1], "rls": ["n", 1, 1, 4]}
    names = ["lrn5", "lrn1", "mvn", "shrink", "trelu", "lp3", "lp2", "rls"]
    model = model_of(nodes, [vi("x", ["n", 7, 4, 4])], [vi(o, shapes.get(o, ["n", 7, 4, 4])) for o in names], 17)
    check(model, [{"x": randn(2, 7, 4, 4)}, {"x": randn(1, 7, 4, 4)}], tol=3e-6)


def test_eye_like_and_reverse_sequence():
    nodes = [helper.make_node("EyeLike", ["e"], ["eye"], k=1),
             helper.make_node("EyeLike", ["e"], ["eye_int"], k=-2, dtype=TensorProto.INT32),
             helper.make_node("ReverseSequence", ["s", "lens"], ["rev_t0"], time_axis=0, batch_axis=1),
             helper.make_node("ReverseSequence", ["s2", "lens"], ["rev_t1"], time_axis=1, batch_axis=0)]
    model = model_of(nodes, [vi("e", ["a", "b"]), vi("s", [5, 3, 2]), vi("s2", [3, 5, 2]), vi("lens", [3], I64)],
                     [vi("eye", ["a", "b"]), vi("eye_int", ["a", "b"], TensorProto.INT32), vi("rev_t0", [5, 3, 2]),
                      vi("rev_t1", [3, 5, 2])], 17)
    check(model, [{"e": randn(3, 5), "s": randn(5, 3, 2), "s2": randn(3, 5, 2), "lens": np.array([5, 1, 3], np.int64)},
                  {"e": randn(4, 2), "s": randn(5, 3, 2), "s2": randn(3, 5, 2), "lens": np.array([0, 5, 2], np.int64)}])


@pytest.mark.parametrize("kind,attrs", [("LSTM", {}), ("LSTM", {"direction": "bidirectional"}),
                                        ("GRU", {"direction": "reverse"}), ("GRU", {"linear_before_reset": 1}),
                                        ("RNN", {"direction": "bidirectional"}),
                                        ("RNN", {"activations": ["Relu"]})])
def test_recurrent_layers(kind, attrs):
    """LSTM / GRU / RNN (forward, reverse, bidirectional; GRU's linear_before_reset) with biases and initial
    states: Y, Y_h (and Y_c) on a symbolic sequence length."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    hid, feat, batch = 4, 3, 2
    inits = [("W", randn(dirs, gates * hid, feat) * 0.5), ("R", randn(dirs, gates * hid, hid) * 0.5),
             ("B", randn(dirs, 2 * gates * hid))]
    lstm = kind == "LSTM"
    node = helper.make_node(kind, ["x", "W", "R", "B", "", "h0"] + (["c0"] if lstm else []),
                            ["y", "yh"] + (["yc"] if lstm else []), hidden_size=hid, **attrs)
    state = [dirs, batch, hid]
    model = model_of([node], [vi("x", ["s", batch, feat]), vi("h0", state)] + ([vi("c0", state)] if lstm else []),
                     [vi("y", ["s", dirs, batch, hid]), vi("yh", state)] + ([vi("yc", state)] if lstm else []), 14,
                     inits)
    feeds = []
    for s in (1, 5):
        f = {"x": randn(s, batch, feat), "h0": randn(*state)}
        if lstm:
            f["c0"] = randn(*state)
        feeds.append(f)
    check(model, feeds, tol=2e-6)


def test_one_hot_of_constants_folds_into_shape_arithmetic():
    """A Tile whose repeats come from OneHot of constants (CANINE's legacy export: ``repeat`` of one dim):
    the OneHot folds at import time, so the repeats stay static."""
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(v, name))  # noqa: E731
    nodes = [c("i", np.array([1], np.int64)), c("depth", np.array(3, np.int64)), c("vals", np.array([1, 4], np.int64)),
             helper.make_node("OneHot", ["i", "depth", "vals"], ["oh"]),
             c("shape", np.array([3], np.int64)), helper.make_node("Reshape", ["oh", "shape"], ["reps"]),
             helper.make_node("Tile", ["x", "reps"], ["y"])]
    model = model_of(nodes, [vi("x", ["n", 2, 5])], [vi("y", ["n", 8, 5])], 17)
    check(model, [{"x": randn(2, 2, 5)}, {"x": randn(1, 2, 5)}])


def test_onnxruntime_fused_transformer_ops():
    """com.microsoft Gelu / BiasGelu / FastGelu (with and without a bias) / QuickGelu, SkipLayerNormalization
    (with beta and bias, and the input + skip + bias sum as output 3; with gamma only) and
    SkipSimplifiedLayerNormalization, on a symbolic batch."""
    def ms(*args, **kw):
        return helper.make_node(*args, domain="com.microsoft", **kw)

    nodes = [ms("Gelu", ["x"], ["g"]), ms("BiasGelu", ["x", "b"], ["bg"]), ms("FastGelu", ["x", "b"], ["fg"]),
             ms("FastGelu", ["x"], ["fg2"]), ms("QuickGelu", ["x"], ["qg"], alpha=1.5),
             ms("SkipLayerNormalization", ["x", "s", "gamma", "beta", "b"], ["sl", "", "", "sum"], epsilon=1e-5),
             ms("SkipLayerNormalization", ["x", "s", "gamma"], ["sl2"]),
             ms("SkipSimplifiedLayerNormalization", ["x", "s", "gamma", "b"], ["ssl", "", "", "sum2"], epsilon=1e-6)]
    outs = ["g", "bg", "fg", "fg2", "qg", "sl", "sum", "sl2", "ssl", "sum2"]
    graph = helper.make_graph(nodes, "g", [vi("x", ["n", 3, 8]), vi("s", ["n", 3, 8])], [vi(o, ["n", 3, 8]) for o in outs],
                              initializer=[numpy_helper.from_array(randn(8), n) for n in ("b", "gamma", "beta")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    check(model, [{"x": randn(2, 3, 8), "s": randn(2, 3, 8)}, {"x": randn(1, 3, 8), "s": randn(1, 3, 8)}], tol=3e-6)


@pytest.mark.parametrize("mask,attrs", [("lengths", {}), ("raw", {}), ("raw3", {"scale": 0.3}), (None, {"unidirectional": 1}),
                                        ("bias", {})])
def test_onnxruntime_fused_attention(mask, attrs):
    """com.microsoft Attention: packed q / k / v projection with bias, 4 heads, a mask index of right-padded
    lengths, a raw 2-d or 3-d 0 / 1 mask, causal (unidirectional), an additive attention bias."""
    ins = ["x", "w", "b"] + {"lengths": ["m"], "raw": ["m"], "raw3": ["m"], None: [], "bias": ["", "", "ab"]}[mask]
    node = helper.make_node("Attention", ins, ["y"], domain="com.microsoft", num_heads=4, **attrs)
    shapes = {"lengths": ([2], TensorProto.INT32), "raw": ([2, 5], TensorProto.INT32),
              "raw3": ([2, 5, 5], TensorProto.INT32), "bias": ([1, 4, 5, 5], F)}
    inputs = [vi("x", [2, 5, 16])] + ([vi("m" if mask != "bias" else "ab", *shapes[mask])] if mask else [])
    graph = helper.make_graph([node], "g", inputs, [vi("y", [2, 5, 16])],
                              initializer=[numpy_helper.from_array(randn(16, 48) * 0.3, "w"),
                                           numpy_helper.from_array(randn(48), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    feeds = {"x": randn(2, 5, 16)}
    if mask == "lengths":
        feeds["m"] = np.array([5, 3], np.int32)
    elif mask in ("raw", "raw3"):
        m = (rng.random(shapes[mask][0]) > 0.3).astype(np.int32)
        m[..., 0] = 1
        feeds["m"] = m
    elif mask == "bias":
        feeds["ab"] = randn(1, 4, 5, 5)
    check(model, [feeds], tol=3e-6)


def test_sequences_of_static_length():
    """What torch's ONNX exporter writes without its optimizer (``split`` as SplitToSequence + SequenceAt) and
    the other sequence ops: SplitToSequence by a chunk size, by sizes and into squeezed pieces of 1, SequenceAt
    (a negative position too), SequenceLength, SequenceConstruct / Insert / Erase, ConcatFromSequence
    (concatenating and stacking) -- against onnxruntime, on a symbolic batch."""
    nodes = [helper.make_node("SplitToSequence", ["x", "four"], ["s1"], axis=1),
             helper.make_node("SequenceAt", ["s1", "m2"], ["a"]),
             helper.make_node("SequenceAt", ["s1", "zero"], ["b"]),
             helper.make_node("SplitToSequence", ["x", "sizes"], ["s2"], axis=1),
             helper.make_node("SequenceAt", ["s2", "one"], ["c"]),
             helper.make_node("SplitToSequence", ["x"], ["s3"], axis=1, keepdims=0),
             helper.make_node("SequenceLength", ["s3"], ["n"]),
             helper.make_node("SequenceAt", ["s3", "m1"], ["d"]),
             helper.make_node("SequenceConstruct", ["a", "b"], ["s4"]),
             helper.make_node("SequenceInsert", ["s4", "a", "zero"], ["s5"]),
             helper.make_node("SequenceErase", ["s5", "one"], ["s6"]),
             helper.make_node("ConcatFromSequence", ["s6"], ["cat"], axis=1),
             helper.make_node("ConcatFromSequence", ["s6"], ["stk"], axis=0, new_axis=1),
             helper.make_node("Mul", ["a", "c"], ["ac"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["d", "nf"], ["dn"])]
    inits = [("four", np.array(4, np.int64)), ("m1", np.array(-1, np.int64)), ("m2", np.array(-2, np.int64)),
             ("zero", np.array(0, np.int64)),
             ("one", np.array(1, np.int64)), ("sizes", np.array([2, 4, 4], np.int64))]
    model = model_of(nodes, [vi("x", ["b", 10])], [vi("ac", ["b", 4]), vi("dn", ["b"]), vi("cat", ["b", 8]),
                                                  vi("stk", [2, "b", 4])], 18, inits)
    check(model, [{"x": randn(2, 10)}, {"x": randn(3, 10)}])


def test_split_into_too_many_pieces_is_refused():
    """SplitToSequence of a 100000-wide dim into pieces of 1 would make an op per piece: refused with
    ONNXImportError (at most MAX_SPLIT_PIECES), not a build that runs out of memory or time."""
    from builder.frontend import from_onnx
    from builder.frontend.onnx import ONNXImportError

    model = model_of([helper.make_node("SplitToSequence", ["x"], ["s"], axis=1),
                      helper.make_node("SequenceAt", ["s", "zero"], ["y"])],
                     [vi("x", [2, 100000])], [vi("y", [2, 1])], 18, [("zero", np.array(0, np.int64))])
    with pytest.raises(ONNXImportError, match="at most 4096 pieces"):
        from_onnx(model)


def test_nonzero_and_what_reads_its_count():
    """NonZero (a count known only when the model runs) feeding GatherND, Shape and arithmetic; of a 0-d
    input, and of a constant (folded); inputs with none, some and every element nonzero."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("NonZero", ["pos"], ["idx"]),
             helper.make_node("Transpose", ["idx"], ["idx_t"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx_t"], ["picked"]),
             helper.make_node("Mul", ["picked", "two"], ["y"]),
             helper.make_node("Shape", ["idx"], ["count"]),
             helper.make_node("NonZero", ["s"], ["s_idx"]),
             helper.make_node("NonZero", ["k"], ["k_idx"]),
             helper.make_node("ReduceSum", ["k_idx"], ["k_idx_sum"], keepdims=1),
             helper.make_node("Add", ["idx", "k_idx_sum"], ["shifted"])]
    model = model_of(nodes, [vi("x", ["b", 5]), vi("s", [])],
                     [vi("y", ["n"]), vi("count", [2], I64), vi("s_idx", [1, "m"], I64),
                      vi("shifted", [2, "n"], I64)], 17,
                     [("zero", np.zeros((), np.float32)), ("two", np.full((), 2, np.float32)),
                      ("k", np.array([[0, 3], [1, 0]], np.float32))])
    x = randn(3, 5)
    scalar = lambda v: np.array(v, np.float32)   # noqa: E731
    check(model, [{"x": x, "s": scalar(2)}, {"x": -np.abs(x), "s": scalar(0)},
                  {"x": np.abs(randn(4, 5)) + 1, "s": scalar(-1)}])


def test_compress_along_an_axis_and_flattened():
    """Compress with an axis (a condition shorter than the dim) and without one (the flattened input)."""
    nodes = [helper.make_node("Greater", ["c", "zero"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["y"], axis=1),
             helper.make_node("Greater", ["f", "zero"], ["keepf"]),
             helper.make_node("Compress", ["x", "keepf"], ["z"])]
    model = model_of(nodes, [vi("x", ["b", 5]), vi("c", [4]), vi("f", ["m"])],
                     [vi("y", ["b", "k"]), vi("z", ["j"])], 17, [("zero", np.zeros((), np.float32))])
    check(model, [{"x": randn(3, 5), "c": randn(4), "f": randn(15)},
                  {"x": randn(2, 5), "c": -np.ones(4, np.float32), "f": np.ones(7, np.float32)}])


def _branch(name, nodes, outputs, inits=()):
    return helper.make_graph(nodes, name, [], outputs,
                             [numpy_helper.from_array(v, n) for n, v in inits])


@pytest.mark.parametrize("flag", [True, False])
def test_if_with_a_condition_known_at_import_time(flag):
    """An If whose condition is a constant, or folds from static shapes, imports the branch it selects
    (its nodes read the outer graph's values; an initializer of its own; an If nested in it)."""
    inner = helper.make_node("If", ["flag2"], ["t2"], then_branch=_branch(
        "in_then", [helper.make_node("Neg", ["x"], ["t2a"])], [vi("t2a", None)]),
        else_branch=_branch("in_else", [helper.make_node("Abs", ["x"], ["t2b"])], [vi("t2b", None)]))
    then_g = _branch("then", [helper.make_node("Mul", ["x", "three"], ["ta"]),
                              helper.make_node("Constant", [], ["flag2"], value=numpy_helper.from_array(
                                  np.array(False))), inner,
                              helper.make_node("Add", ["ta", "t2"], ["tout"])],
                     [vi("tout", None)], [("three", np.full((), 3, np.float32))])
    else_g = _branch("else", [helper.make_node("Sub", ["x", "one"], ["eout"])], [vi("eout", None)])
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(flag))),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Shape", ["x"], ["shape"]),                       # a condition from static shapes
             helper.make_node("Gather", ["shape", "i1"], ["width"], axis=0),
             helper.make_node("Greater", ["width", "four"], ["wide"]),
             helper.make_node("If", ["wide"], ["z"], then_branch=_branch(
                 "w", [helper.make_node("Relu", ["y"], ["zw"])], [vi("zw", None)]),
                 else_branch=_branch("n", [helper.make_node("Sigmoid", ["y"], ["zn"])], [vi("zn", None)]))]
    model = model_of(nodes, [vi("x", ["b", 5])], [vi("y", ["b", 5]), vi("z", ["b", 5])], 17,
                     [("one", np.ones((), np.float32)), ("i1", np.array(1, np.int64)),
                      ("four", np.array(4, np.int64))])
    check(model, [{"x": randn(2, 5)}, {"x": randn(3, 5)}])


def test_if_refusals():
    """A condition computed when the model runs is refused; an op we lack inside a branch is listed with the
    model's other unsupported ops, named by its path."""
    branch = _branch("b", [helper.make_node("Relu", ["x"], ["o"])], [vi("o", None)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)]
    model = model_of(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], 17, [("zero", np.zeros((), np.float32))])
    with pytest.raises(ONNXImportError, match="condition is computed when the model runs"):
        from_onnx(model)
    odd = _branch("b", [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Det", ["r"], ["o"])],
                  [vi("o", None)])
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
             helper.make_node("If", ["c"], ["y"], then_branch=odd, else_branch=branch)]
    model = model_of(nodes, [vi("x", [3, 3])], [vi("y", [3, 3])], 17)
    with pytest.raises(ONNXImportError, match=r"unsupported ONNX op type\(s\): Det \(nodes: If_1/then_branch/Det_1"):
        from_onnx(model)


@pytest.mark.parametrize("ordered", [1, 0])
def test_unique_without_an_axis(ordered):
    """Unique of the flattened input, sorted or in first-occurrence order: all four outputs."""
    nodes = [helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], sorted=ordered)]
    model = model_of(nodes, [vi("x", ["b", 3], I64)],
                     [vi("y", ["n"], I64), vi("first", ["n"], I64), vi("inverse", ["m"], I64),
                      vi("counts", ["n"], I64)], 17)
    check(model, [{"x": np.array([[3, 1, 3], [2, 1, 5]], np.int64)}, {"x": np.full((4, 3), 7, np.int64)}])


def test_loop_with_a_trip_count_known_at_import_time():
    """A Loop whose trip count folds from a static shape, with two loop-carried values (one read from the outer
    graph each iteration) and a scan output, unrolled; a condition the body turns false stops it early."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["acc", "x"], ["acc2"]),
         helper.make_node("Add", ["acc2", "fi"], ["acc_out"]),
         helper.make_node("Add", ["cnt", "one"], ["cnt_out"]),
         helper.make_node("Less", ["i", "stop"], ["go"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body", [vi("i", [], I64), vi("c", [], B), vi("acc", None), vi("cnt", [], F)],
        [vi("go", [], B), vi("acc_out", None), vi("cnt_out", [], F), vi("scan", None)])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i1"], ["trips"], axis=0),
             helper.make_node("Loop", ["trips", "true", "x", "zero"], ["acc_f", "cnt_f", "scans"], body=body)]
    for stop in (100, 2):
        model = model_of(nodes, [vi("x", ["b", 4])],
                         [vi("acc_f", ["b", 4]), vi("cnt_f", [], F), vi("scans", ["t", "b", 4])], 17,
                         [("i1", np.array(1, np.int64)), ("true", np.array(True)), ("zero", np.zeros((), np.float32)),
                          ("one", np.ones((), np.float32)), ("stop", np.array(stop, np.int64))])
        check(model, [{"x": randn(2, 4) * 0.5}, {"x": randn(3, 4) * 0.5}], tol=1e-5)


def test_loop_refusals():
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["go"]), helper.make_node("Relu", ["v"], ["vo"])],
                             "body", [vi("i", [], I64), vi("c", [], B), vi("v", None)], [vi("go", [], B), vi("vo", None)])
    runtime_trips = [helper.make_node("ReduceMax", ["n"], ["m"], keepdims=0),
                     helper.make_node("Loop", ["m", "", "x"], ["y"], body=body)]
    model = model_of(runtime_trips, [vi("x", [2]), vi("n", [3], I64)], [vi("y", [2])], 17)
    with pytest.raises(ONNXImportError, match="trip count is computed when the model runs"):
        from_onnx(model)
    huge = [helper.make_node("Loop", ["big", "", "x"], ["y"], body=body)]
    model = model_of(huge, [vi("x", [2])], [vi("y", [2])], 17, [("big", np.array(10**6, np.int64))])
    with pytest.raises(ONNXImportError, match="MAX_UNROLLED_NODES"):
        from_onnx(model)


def test_loop_body_ops_are_checked_with_the_models():
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["go"]), helper.make_node("Det", ["v"], ["vo"])],
                             "body", [vi("i", [], I64), vi("c", [], B), vi("v", None)], [vi("go", [], B), vi("vo", None)])
    model = model_of([helper.make_node("Loop", ["two", "", "x"], ["y"], body=body)], [vi("x", [2, 2])],
                     [vi("y", [2, 2])], 17, [("two", np.array(2, np.int64))])
    with pytest.raises(ONNXImportError, match=r"Det \(nodes: Loop_0/body/Det_1"):
        from_onnx(model)
