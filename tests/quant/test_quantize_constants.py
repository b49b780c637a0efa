"""quantize_constants: an imported module's constant Linear weights quantized as a preset says, run on
the quantized kernels, against float64 numpy on the weights quantize_weight / dequantize_weight give (the
same numbers a recipe gets); and ``build model.onnx quantization=...``."""
import numpy as np
import pytest

import runtime
from builder import compile as build
from builder.ir import relax as rx
from builder.quant import QuantLayout, dequantize_weight, quantize_constants, quantize_weight, resolve

torch = pytest.importorskip("torch", reason="the modules are imported from PyTorch")
from torch import nn

from builder.frontend import from_fx


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 48)
        self.down = nn.Linear(48, 32, bias=False)
        self.tiny = nn.Linear(32, 8)      # 32 features: one group

    def forward(self, x):
        return self.tiny(self.down(torch.relu(self.up(x))))


def _quantized(w: np.ndarray, preset: str) -> np.ndarray:
    spec = resolve(preset).model_copy(update={"model_dtype": "float32"})
    layout = QuantLayout.of(spec, w.shape[1], w.shape[0])
    return dequantize_weight(*quantize_weight(w, layout), layout).astype(np.float64)


def _uint32_kernels(exe) -> int:
    return sum(1 for k in exe.kernels.values() if any(p["dtype"] == "uint32" for p in k["params"]))


@pytest.mark.parametrize("preset", ["q4f32_1", "q4f16_1", "q8f32_1"])
def test_constant_linear_weights_are_quantized(preset):
    torch.manual_seed(0)
    model = MLP().eval()
    mod = from_fx(torch.fx.symbolic_trace(model), [(["n", 64], "float32")])
    qmod = quantize_constants(mod, preset)
    assert qmod is not mod and "group_dequantize" in qmod.script()
    exe = build(qmod)
    assert _uint32_kernels(exe) == 3, exe.kernels
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    h = np.maximum(x @ _quantized(sd["up.weight"], preset).T + sd["up.bias"], 0)
    h = h @ _quantized(sd["down.weight"], preset).T
    want = h @ _quantized(sd["tiny.weight"], preset).T + sd["tiny.bias"]
    np.testing.assert_allclose(runtime.VirtualMachine(exe)["main"](x), want, rtol=1e-4, atol=1e-4)


def test_constant_weights_in_a_codebook_format():
    """A QuantFormat (here a registered 4-bit codebook) quantizes an imported model's constants as a preset
    does; its matmuls run on the reference loops (the planner refuses the codebook), against the format's
    float64 reference."""
    from builder.ir.quant_format import QuantFormat, register_quant_format, unregister_quant_format

    codes = tuple(float(np.sign(v) * v * v) for v in np.linspace(-1, 1, 16))
    fmt = register_quant_format(QuantFormat(4, 32, "uint32", "float32", codebook=codes, name="sq4_const"))
    try:
        torch.manual_seed(0)
        model = MLP().eval()
        mod = from_fx(torch.fx.symbolic_trace(model), [(["n", 64], "float32")])
        exe = build(quantize_constants(mod, fmt))
        loops = [k["kernel"] for k in exe.kernels.values() if "codebook='sq4_const'" in k["kernel"]]
        assert len(loops) == 3 and _uint32_kernels(exe) == 3, exe.kernels
        sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}

        def wq(w):
            layout = QuantLayout.of(fmt, w.shape[1], w.shape[0])
            return layout.format.dequantize_reference(*quantize_weight(w, layout), w.shape[1])

        x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
        h = np.maximum(x @ wq(sd["up.weight"]).T + sd["up.bias"], 0) @ wq(sd["down.weight"]).T
        want = h @ wq(sd["tiny.weight"]).T + sd["tiny.bias"]
        np.testing.assert_allclose(runtime.VirtualMachine(exe)["main"](x), want, rtol=1e-4, atol=1e-4)
    finally:
        unregister_quant_format("sq4_const")


def test_no_quantization_unknown_presets_and_narrow_weights():
    mod = from_fx(torch.fx.symbolic_trace(nn.Linear(16, 4)), [([2, 16], "float32")])
    assert quantize_constants(mod, "none") is mod
    with pytest.raises(ValueError, match="unknown quantization preset"):
        quantize_constants(mod, "q9")
    # 16 input features: fewer than a group of 32, the float weight stays
    out = quantize_constants(mod, "q4f32_1")
    assert "group_dequantize" not in out.script()
    consts = [b.value for blk in out["main"].body.blocks for b in blk.bindings if isinstance(b.value, rx.Constant)]
    assert any(c.data.shape == (4, 16) for c in consts)


def test_build_model_file_with_quantization(tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from builder.build_model import build_model_file

    w = np.random.default_rng(2).standard_normal((64, 24)).astype(np.float32)     # MatMul weight (K, N)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 24])],
                              initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    m = build_model_file(path, quantization="q4f32_1")
    x = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(m(x), x @ _quantized(w.T, "q4f32_1").T, rtol=1e-4, atol=1e-4)
    assert _uint32_kernels(m.exe) == 1
