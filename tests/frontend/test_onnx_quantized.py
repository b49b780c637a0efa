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
    """DynamicQuantizeLinear's three outputs, MatMulInteger with both zero points (int8 weights with a
    per-column zero point), ConvInteger: the same integers as onnxruntime."""
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
    for g, w_ in zip(got, want):
        assert g.dtype == w_.dtype
        np.testing.assert_allclose(g, w_, rtol=1e-6, atol=1e-7)


def test_qlinear_matmul():
    """QLinearMatMul (uint8 activations, int8 weights with a per-column scale): the quantized result within
    one step of onnxruntime's (a float product can land the other side of a rounding tie)."""
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
    assert np.abs(got.astype(np.int64) - want.astype(np.int64)).max() <= 1


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
    symbolic batch."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(3)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "q.onnx"
    quantize_static(str(cnn_path), str(out), Reader(), quant_format=getattr(QuantFormat, fmt), per_channel=per_channel,
                    activation_type=getattr(QuantType, act), weight_type=QuantType.QInt8)
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
    embeddings through DequantizeLinear) with a padding mask, against onnxruntime."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    dst = tmp_path / "bert_q.onnx"
    quantize_dynamic(str(tiny_bert_onnx), str(dst), weight_type=QuantType.QInt8)
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
