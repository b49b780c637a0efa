"""Quantized and onnxruntime-optimized ONNX models against onnxruntime: the linear-quantization ops one by one (QuantizeLinear,
DequantizeLinear per tensor and per axis, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul, QLinearConv) and whole models as onnxruntime's own quantizers write them -- dynamic
(DynamicQuantizeLinear + MatMulInteger, what ``quantize_dynamic`` makes of a transformer) and static, in
the QDQ and the QOperator (QLinearConv, com.microsoft QGemm) formats, per tensor and per channel."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="from_onnx needs the onnx package (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="the reference results come from onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from helpers.onnx_models import make_model, outputs_of_both  # noqa: E402

F, U8, I8, I32 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32


def model_of(nodes, inputs, outputs, inits=(), opset=19):
    return make_model(nodes, inputs, outputs, inits, opset=opset, ir_version=9)


both = outputs_of_both


def _onnxruntime_u8s8_exact() -> bool:
    """Whether this host's onnxruntime computes 8-bit matrix products exactly. Its MLAS multiplies u8 x s8
    with ``vpmaddubsw`` on x86-64 CPUs without VNNI (SSE4.1, AVX2, AVX-512 BW: an AMD Zen 3, a Skylake-X),
    whose int16 pair sums saturate (``2 * 255 * 127 > 2**15``; onnxruntime's PR 12088, "x86/64 U8S8 Gemm
    Precision Fix", says so and offers weights in [-64, 63], ``reduce_range``), so there its MatMulInteger /
    QLinearMatMul / QLinearConv results differ from the spec's integers; with AVX-VNNI, AVX512-VNNI or AMX
    (and off x86) they are exact. Our results are checked against numpy's int64 arithmetic everywhere and
    against onnxruntime's only where it is exact."""
    import platform

    import llvmlite.binding as llvm

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True
    llvm.initialize_native_target()
    feats = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
    return bool({"avxvnni", "avx512vnni", "amx-int8"} & feats)


ORT_EXACT = _onnxruntime_u8s8_exact()


def _matmul_integer_ref(a, b, a_zp=0, b_zp=0):
    """The spec's MatMulInteger in int64: ``(a - a_zp) @ (b - b_zp)`` (``b_zp`` per column or scalar)."""
    return (a.astype(np.int64) - np.int64(a_zp)) @ (b.astype(np.int64) - np.asarray(b_zp, np.int64))


def _conv_integer_ref(x, w, x_zp=0, w_zp=0, pad=0):
    """The spec's ConvInteger in int64 (2-d, stride 1, ``pad`` on every side, one group): ``x`` (N, C, H, W),
    ``w`` (M, C, kh, kw), the zero points subtracted first (a padded position is the zero point, i.e. 0)."""
    xs = np.pad(x.astype(np.int64) - np.int64(x_zp), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    ws = w.astype(np.int64) - np.int64(w_zp)
    n, _, hh, ww = xs.shape
    m, _, kh, kw = ws.shape
    out = np.zeros((n, m, hh - kh + 1, ww - kw + 1), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,mc->nmhw", xs[:, :, i:i + out.shape[2], j:j + out.shape[3]], ws[:, :, i, j])
    return out


@pytest.mark.parametrize("qtype", [U8, I8])
def test_quantize_dequantize_linear(qtype):
    """QuantizeLinear (halves to even, saturating) and DequantizeLinear per tensor, and per axis with a
    1-d scale and zero point, of a graph input and of a constant (folded)."""
    np_q = np.uint8 if qtype == U8 else np.int8
    rng = np.random.default_rng(0)
    w = rng.integers(-100, 100, (4, 3)).astype(np_q) if qtype == I8 else rng.integers(0, 255, (4, 3)).astype(np_q)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"]),
             helper.make_node("QuantizeLinear", ["x", "sc", "zc"], ["qc"], axis=1),
             helper.make_node("DequantizeLinear", ["qc", "sc", "zc"], ["dqc"], axis=1),
             helper.make_node("DequantizeLinear", ["w", "sw"], ["dw"], axis=0)]
    zp = np.array(3 if qtype == I8 else 128, np_q)
    inits = [("s", np.array(0.05, np.float32)), ("zp", zp), ("sc", np.array([0.02, 0.1, 0.5], np.float32)),
             ("zc", np.array([0, 5, 250 if qtype == U8 else -7], np_q)), ("w", w),
             ("sw", np.array([0.1, 0.2, 0.3, 0.4], np.float32))]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, [4, 3])],
                     [helper.make_tensor_value_info("q", qtype, [4, 3]), helper.make_tensor_value_info("dq", F, [4, 3]),
                      helper.make_tensor_value_info("qc", qtype, [4, 3]), helper.make_tensor_value_info("dqc", F, [4, 3]),
                      helper.make_tensor_value_info("dw", F, [4, 3])], inits)
    x = (rng.standard_normal((4, 3)) * 8).astype(np.float32)
    x[0, 0] = 0.025 * 3     # a tie at scale 0.05: 1.5 rounds to 2
    got, want = both(model, {"x": x})
    for g, w_ in zip(got, want):
        assert g.dtype == w_.dtype
        np.testing.assert_allclose(g.astype(np.float64), w_.astype(np.float64), rtol=0, atol=1e-6)


def test_dynamic_quantize_matmul_integer_conv_integer():
    """DynamicQuantizeLinear's three outputs (as onnxruntime's), MatMulInteger with both zero points (int8
    weights with a per-column zero point), ConvInteger: the spec's integers (numpy int64 from the quantized
    values), and onnxruntime's where it computes them exactly (:func:`_onnxruntime_u8s8_exact`: a Zen 3's
    onnxruntime gives -14112 for -19605 here)."""
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (6, 5)).astype(np.int8)
    cw = rng.integers(0, 256, (2, 3, 3, 3)).astype(np.uint8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ["q", "w", "z", "wz"], ["y"]),
             helper.make_node("ConvInteger", ["img", "cw", "iz", "cz"], ["c"], pads=[1, 1, 1, 1])]
    inits = [("w", w), ("wz", np.array([0, 1, -2, 3, 0], np.int8)), ("cw", cw), ("iz", np.array(7, np.uint8)),
             ("cz", np.array(128, np.uint8))]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, ["n", 6]),
                             helper.make_tensor_value_info("img", U8, [1, 3, 5, 5])],
                     [helper.make_tensor_value_info("q", U8, ["n", 6]), helper.make_tensor_value_info("s", F, []),
                      helper.make_tensor_value_info("z", U8, []), helper.make_tensor_value_info("y", I32, ["n", 5]),
                      helper.make_tensor_value_info("c", I32, [1, 2, 5, 5])], inits, opset=13)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    img = rng.integers(0, 256, (1, 3, 5, 5)).astype(np.uint8)
    got, want = both(model, {"x": x, "img": img})
    for g, w_ in zip(got[:3], want[:3]):
        assert g.dtype == w_.dtype
        np.testing.assert_allclose(g, w_, rtol=1e-6, atol=1e-7)
    q, _, z = want[:3]
    exact = [_matmul_integer_ref(q, w, z, np.array([0, 1, -2, 3, 0])), _conv_integer_ref(img, cw, 7, 128, pad=1)]
    for g, ref, w_ in zip(got[3:], exact, want[3:]):
        assert g.dtype == np.int32 and g.shape == ref.shape
        np.testing.assert_array_equal(g.astype(np.int64), ref)
        if ORT_EXACT:
            np.testing.assert_array_equal(w_, ref)


_EXTREMES = {U8: (0, 255), I8: (-128, 127)}


@pytest.mark.parametrize("ta,tb", [(U8, I8), (U8, U8), (I8, I8), (I8, U8)])
@pytest.mark.parametrize("b_const", [True, False])
def test_matmul_integer_extreme_values(ta, tb, b_const):
    """MatMulInteger at the ends of the 8-bit ranges (every pair sum of a saturating ``u8 x s8`` multiply-add
    overflows int16: ``255 * 127 * 2 > 2**15``), with and without zero points, a constant weight (the linear
    kernels) and a graph input one (a matmul of two activations), K = 64 and 200: exactly numpy's int64 result
    (and onnxruntime's where it is exact)."""
    np_t = {U8: np.uint8, I8: np.int8}
    rng = np.random.default_rng(7)
    for K in (64, 200):
        lo_a, hi_a = _EXTREMES[ta]
        lo_b, hi_b = _EXTREMES[tb]
        a = rng.choice([lo_a, hi_a], (9, K)).astype(np_t[ta])
        a[0] = hi_a                       # a row at the top of its range, against columns at both ends
        b = rng.choice([lo_b, hi_b], (K, 6)).astype(np_t[tb])
        b[:, 0], b[:, 1] = hi_b, lo_b
        for zps in (None, (np.array(hi_a // 2 + 1, np_t[ta]), np.array(lo_b, np_t[tb]))):
            names = ["a", "b"] + (["az", "bz"] if zps else [])
            inits = [("az", zps[0]), ("bz", zps[1])] if zps else []
            inputs = [helper.make_tensor_value_info("a", ta, ["n", K])]
            if b_const:
                inits.append(("b", b))
            else:
                inputs.append(helper.make_tensor_value_info("b", tb, [K, 6]))
            model = model_of([helper.make_node("MatMulInteger", names, ["y"])], inputs,
                             [helper.make_tensor_value_info("y", I32, ["n", 6])], inits, opset=13)
            feeds = {"a": a} if b_const else {"a": a, "b": b}
            (got,), (want,) = both(model, feeds)
            ref = _matmul_integer_ref(a, b, *(zps or (0, 0)))
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got.astype(np.int64), ref)
            if ORT_EXACT and ta == U8:   # (onnxruntime's MatMulInteger takes uint8 or int8 a)
                np.testing.assert_array_equal(want, ref)


@pytest.mark.parametrize("tx,tw", [(U8, U8), (U8, I8), (I8, I8)])
def test_conv_integer_extreme_values(tx, tw):
    """ConvInteger at the ends of the 8-bit ranges (3 x 3 kernels over 16 channels: 144 products per output,
    every pair of them past int16), with zero points and padding: exactly numpy's int64 result."""
    from builder import compile as build
    from builder.frontend.onnx import from_onnx
    from runtime import VirtualMachine

    np_t = {U8: np.uint8, I8: np.int8}
    rng = np.random.default_rng(8)
    (lo_x, hi_x), (lo_w, hi_w) = _EXTREMES[tx], _EXTREMES[tw]
    x = rng.choice([lo_x, hi_x], (2, 16, 6, 6)).astype(np_t[tx])
    x[0] = hi_x
    w = rng.choice([lo_w, hi_w], (4, 16, 3, 3)).astype(np_t[tw])
    w[0], w[1] = hi_w, lo_w
    xz, wz = np.array(lo_x, np_t[tx]), np.array(hi_w, np_t[tw])
    model = model_of([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])],
                     [helper.make_tensor_value_info("x", tx, ["n", 16, 6, 6])],
                     [helper.make_tensor_value_info("y", I32, ["n", 4, 6, 6])],
                     [("w", w), ("xz", xz), ("wz", wz)], opset=13)
    got = np.asarray(VirtualMachine(build(from_onnx(model)))["main"](x))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.astype(np.int64), _conv_integer_ref(x, w, xz, wz, pad=1))


def _qlinear_matmul_ref(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp, dtype):
    """The spec's QLinearMatMul: the int64 product of the 8-bit values minus their zero points, scaled by
    ``a_s * b_s / y_s`` in float64, rounded half to even, plus ``y_zp``, saturated to ``dtype``."""
    acc = _matmul_integer_ref(a, b, a_zp, b_zp).astype(np.float64)
    y = np.rint(acc * (np.float64(a_s) * np.asarray(b_s, np.float64) / np.float64(y_s))) + np.int64(y_zp)
    info = np.iinfo(dtype)
    return np.clip(y, info.min, info.max).astype(np.int64)


def test_qlinear_matmul():
    """QLinearMatMul (uint8 activations, int8 weights with a per-column scale): the quantized result within
    one step of the spec's (numpy int64 products; a float product can land the other side of a rounding
    tie), and of onnxruntime's where it computes the products exactly; at the ends of the ranges too (every
    pair sum of a saturating ``u8 x s8`` multiply-add past int16)."""
    rng = np.random.default_rng(2)
    b = rng.integers(-127, 128, (8, 4)).astype(np.int8)
    nodes = [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])]
    inits = [("as", np.array(0.02, np.float32)), ("az", np.array(120, np.uint8)), ("b", b),
             ("bs", np.array([0.01, 0.02, 0.03, 0.015], np.float32)), ("bz", np.zeros(4, np.int8)),
             ("ys", np.array(0.05, np.float32)), ("yz", np.array(128, np.uint8))]
    model = model_of(nodes, [helper.make_tensor_value_info("a", U8, ["n", 8])],
                     [helper.make_tensor_value_info("y", U8, ["n", 4])], inits, opset=21)
    a = rng.integers(0, 256, (5, 8)).astype(np.uint8)
    (got,), (want,) = both(model, {"a": a})
    assert got.dtype == np.uint8
    ref = _qlinear_matmul_ref(a, 0.02, 120, b, [0.01, 0.02, 0.03, 0.015], 0, 0.05, 128, np.uint8)
    assert np.abs(got.astype(np.int64) - ref).max() <= 1
    if ORT_EXACT:
        assert np.abs(got.astype(np.int64) - want.astype(np.int64)).max() <= 1

    # the ends of the ranges: a = 255 / 0 against b = 127 / -128, scaled so that the outputs stay inside uint8
    K = 64
    a = rng.choice([0, 255], (6, K)).astype(np.uint8)
    a[0] = 255
    b = rng.choice([-128, 127], (K, 4)).astype(np.int8)
    b[:, 0] = 127
    inits = [("as", np.array(1.0, np.float32)), ("az", np.array(0, np.uint8)), ("b", b),
             ("bs", np.full(4, 1.0, np.float32)), ("bz", np.zeros(4, np.int8)),
             ("ys", np.array(255 * 128 * K / 127, np.float32)), ("yz", np.array(128, np.uint8))]
    model = model_of(nodes, [helper.make_tensor_value_info("a", U8, ["n", K])],
                     [helper.make_tensor_value_info("y", U8, ["n", 4])], inits, opset=21)
    (got,), (want,) = both(model, {"a": a})
    ref = _qlinear_matmul_ref(a, 1.0, 0, b, np.ones(4), 0, np.float32(255 * 128 * K / 127), 128, np.uint8)
    assert ref[0, 0] == 128 + 126   # 255 * 127 * K / (255 * 128 * K / 127): the top of the range, unsaturated
    assert np.abs(got.astype(np.int64) - ref).max() <= 1
    if ORT_EXACT:
        assert np.abs(want.astype(np.int64) - ref).max() <= 1


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    torch = pytest.importorskip("torch", reason="the float model is exported from torch")
    import contextlib
    import io

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2)
            self.l = torch.nn.Linear(8 * 3 * 3, 10)

        def forward(self, x):
            return self.l(torch.relu(self.c2(torch.relu(self.c(x)))).flatten(1))

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("q") / "cnn.onnx"
    with contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(Net().eval(), (torch.randn(1, 3, 8, 8),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}})
    return path


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("fmt,per_channel,act", [("QDQ", False, "QUInt8"), ("QDQ", True, "QInt8"),
                                                 ("QOperator", False, "QUInt8"), ("QOperator", True, "QInt8")])
def test_statically_quantized_cnn(cnn_path, tmp_path, fmt, per_channel, act):
    """A CNN quantized by onnxruntime's ``quantize_static`` (calibrated on random inputs): the QDQ format
    (QuantizeLinear / DequantizeLinear around float ops) and the QOperator format (QLinearConv, QGemm), on a
    symbolic batch; 7-bit weights (``reduce_range``) where onnxruntime's own products saturate
    (:func:`_onnxruntime_u8s8_exact`)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(3)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "q.onnx"
    # where onnxruntime's u8 x s8 products saturate (no VNNI), weights in [-64, 63] keep its reference exact
    quantize_static(str(cnn_path), str(out), Reader(), quant_format=getattr(QuantFormat, fmt), per_channel=per_channel,
                    activation_type=getattr(QuantType, act), weight_type=QuantType.QInt8, reduce_range=not ORT_EXACT)
    model = onnx.load(str(out))
    ops = {n.op_type for n in model.graph.node}
    assert ("QLinearConv" in ops) == (fmt == "QOperator")
    for n in (1, 3):
        (got,), (want,) = both(model, {"x": rng.standard_normal((n, 3, 8, 8)).astype(np.float32)})
        step = float(np.abs(np.diff(np.unique(want))).min()) if want.size > 1 else 1.0
        assert np.abs(got - want).max() <= step + 1e-6


@pytest.mark.filterwarnings("ignore")
def test_dynamically_quantized_bert(tiny_bert_onnx, tmp_path, bert_feeds):
    """A BERT quantized by ``quantize_dynamic`` (int8 weights: DynamicQuantizeLinear, MatMulInteger, the
    embeddings through DequantizeLinear) with a padding mask, against onnxruntime. On a host without VNNI
    onnxruntime's u8 x s8 kernel multiplies with ``vpmaddubsw``, whose int16 pair sums saturate (its quantization
    guide), so there the weights take 7 bits (``reduce_range``, the guide's remedy) and onnxruntime is exact;
    with VNNI the full int8 range."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from builder.codegen import Target

    features = Target.host().features.split(",")
    vnni = "+avx512vnni" in features or "+avxvnni" in features
    dst = tmp_path / "bert_q.onnx"
    quantize_dynamic(str(tiny_bert_onnx), str(dst), weight_type=QuantType.QInt8, reduce_range=not vnni)
    model = onnx.load(str(dst))
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= {n.op_type for n in model.graph.node}
    (got,), (want,) = both(model, bert_feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore")
def test_bert_fused_by_onnxruntimes_optimizer(tiny_bert_onnx, bert_feeds):
    """The same BERT after onnxruntime.transformers' optimizer (com.microsoft EmbedLayerNormalization with its
    mask index, Attention, SkipLayerNormalization, BiasGelu fused in), against onnxruntime."""
    from onnxruntime.transformers import optimizer

    model = optimizer.optimize_model(str(tiny_bert_onnx), model_type="bert", num_heads=4, hidden_size=64).model
    fused = {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"}
    assert fused <= {n.op_type for n in model.graph.node}
    (got,), (want,) = both(model, bert_feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("b_const", [True, False])
def test_matmul_integer_sums_past_float32s_integers(b_const):
    """MatMulInteger over K = 1030 and 4100 (sums of ``255 * 127`` products far past 2**24, where float32 no longer
    holds every integer): the spec's int32 result exactly (numpy int64), a constant weight and an activation
    one, with a zero point."""
    rng = np.random.default_rng(11)
    for K in (1030, 4100):
        a = rng.integers(200, 256, (3, K)).astype(np.uint8)
        b = rng.integers(90, 128, (K, 5)).astype(np.int8)
        b[:, 1::2] *= -1
        b[::3, 0] = 127
        az = np.array(3, np.uint8)
        inits = [("az", az)] + ([("b", b)] if b_const else [])
        inputs = [helper.make_tensor_value_info("a", U8, ["n", K])] + (
            [] if b_const else [helper.make_tensor_value_info("b", I8, [K, 5])])
        model = model_of([helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])], inputs,
                         [helper.make_tensor_value_info("y", I32, ["n", 5])], inits, opset=13)
        (got,), _ = both(model, {"a": a} if b_const else {"a": a, "b": b})
        ref = _matmul_integer_ref(a, b, az)
        assert np.abs(ref).max() > 2 ** 24
        np.testing.assert_array_equal(got.astype(np.int64), ref)


@pytest.mark.parametrize("group", [1, 2])
def test_conv_integer_sums_past_float32s_integers(group):
    """ConvInteger with 3 x 3 x 300 products per output (of up to ``255 * 255``: sums past 2**24), one group and
    two: the spec's int32 result exactly (numpy int64, per group)."""
    from builder import compile as build
    from builder.frontend.onnx import from_onnx
    from runtime import VirtualMachine

    rng = np.random.default_rng(12)
    C, M = 300 * group, 4
    x = rng.integers(240, 256, (1, C, 5, 5)).astype(np.uint8)
    w = rng.integers(240, 256, (M, C // group, 3, 3)).astype(np.uint8)
    model = model_of([helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=group)],
                     [helper.make_tensor_value_info("x", U8, [1, C, 5, 5])],
                     [helper.make_tensor_value_info("y", I32, [1, M, 5, 5])], [("w", w)], opset=13)
    got = np.asarray(VirtualMachine(build(from_onnx(model)))["main"](x)).astype(np.int64)
    cg, mg = C // group, M // group
    ref = np.concatenate([_conv_integer_ref(x[:, g * cg:(g + 1) * cg], w[g * mg:(g + 1) * mg], pad=1)
                          for g in range(group)], axis=1)
    assert np.abs(ref).max() > 2 ** 24
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("b_const", [True, False])
def test_matmul_integer_symbolic_k_exact(b_const):
    """MatMulInteger whose K is symbolic (``a`` is ``[1, "k"]``, fed K = 1024; ``b`` a constant or an input of
    shape ``["k", 2]``) with zero points: sums of products past 2**24 (one float32 sum was off by up to 13), the
    spec's int32 result exactly (numpy int64)."""
    rng = np.random.default_rng(21)
    K = 1024
    a = rng.integers(200, 256, (1, K)).astype(np.uint8)
    b = rng.integers(200, 256, (K, 2)).astype(np.uint8)
    az, bz = np.array(1, np.uint8), np.array([3, 0], np.uint8)
    inits = [("az", az), ("bz", bz)] + ([("b", b)] if b_const else [])
    inputs = [helper.make_tensor_value_info("a", U8, [1, "k"])] + (
        [] if b_const else [helper.make_tensor_value_info("b", U8, ["k", 2])])
    model = model_of([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], inputs,
                     [helper.make_tensor_value_info("y", I32, [1, 2])], inits, opset=13)
    (got,), _ = both(model, {"a": a} if b_const else {"a": a, "b": b})
    ref = _matmul_integer_ref(a, b, az, bz)
    assert np.abs(ref).max() > 2 ** 24
    np.testing.assert_array_equal(got.astype(np.int64), ref)


def test_conv_integer_symbolic_channels_exact():
    """ConvInteger with a symbolic channel count (``x`` ``[1, "c", 5, 5]``, ``w`` ``[4, "c", 3, 3]``, fed
    C = 300): 3 x 3 x 300 products of up to ``255 * 255`` per output, past 2**24, exactly (numpy int64)."""
    from builder import compile as build
    from builder.frontend.onnx import from_onnx
    from runtime import VirtualMachine

    rng = np.random.default_rng(22)
    x = rng.integers(240, 256, (1, 300, 5, 5)).astype(np.uint8)
    w = rng.integers(240, 256, (4, 300, 3, 3)).astype(np.uint8)
    model = model_of([helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                     [helper.make_tensor_value_info("x", U8, [1, "c", 5, 5]),
                      helper.make_tensor_value_info("w", U8, [4, "c", 3, 3])],
                     [helper.make_tensor_value_info("y", I32, [1, 4, 5, 5])], opset=13)
    got = np.asarray(VirtualMachine(build(from_onnx(model)))["main"](x, w)).astype(np.int64)
    ref = _conv_integer_ref(x, w, pad=1)
    assert np.abs(ref).max() > 2 ** 24
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("k", [3, 700])
def test_integer_ops_folded_at_import(k):
    """MatMulInteger and ConvInteger with every input an initializer (the importer computes them when it
    imports; this refused with "round: x must be a Tensor, got ndarray"), zero points per column / per
    tensor: the spec's int32 results (numpy int64)."""
    from builder import compile as build
    from builder.frontend.onnx import from_onnx
    from runtime import VirtualMachine

    rng = np.random.default_rng(23)
    a = rng.integers(0, 256, (2, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, 2)).astype(np.int8)
    az, bz = np.array(7, np.uint8), np.array([3, -4], np.int8)
    model = model_of([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y0"]),
                      helper.make_node("Neg", ["y0"], ["y"])], [],
                     [helper.make_tensor_value_info("y", I32, [2, 2])],
                     [("a", a), ("b", b), ("az", az), ("bz", bz)], opset=13)
    got = np.asarray(VirtualMachine(build(from_onnx(model)))["main"]()).astype(np.int64)
    np.testing.assert_array_equal(got, -_matmul_integer_ref(a, b, az, bz))
    x = rng.integers(0, 256, (1, 3, 4, 4)).astype(np.uint8)
    w = rng.integers(0, 256, (2, 3, 3, 3)).astype(np.uint8)
    xz = np.array(5, np.uint8)
    model = model_of([helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"])], [],
                     [helper.make_tensor_value_info("y", I32, [1, 2, 2, 2])], [("x", x), ("w", w), ("xz", xz)],
                     opset=13)
    got = np.asarray(VirtualMachine(build(from_onnx(model)))["main"]()).astype(np.int64)
    np.testing.assert_array_equal(got, _conv_integer_ref(x, w, xz))
