"""The recipes of the trade in docs/ARCHITECTURE.md, done: adding an op is one record, adding a pass is
one class run by the pass manager, adding a layer type one registration, adding a quantization format one
``QuantFormat``. Each test does what the document says and checks the result against numpy."""
from typing import Annotated, Literal, Optional

import numpy as np
import pytest
from pydantic import Field

import builder
from builder import nn, te
from builder.ir import relax as rx
from builder.ir.functor import ExprMutator
from builder.ir.op import OpPattern, register_op
from builder.ir.op.elementwise import infer_unary_float
from builder.layers import LAYERS, LayerRegistrationError, register_layer, unregister_layer
from builder.nn.op.elementwise import unary_function
from builder.ops.common import te_rule
from builder.recipe import instantiate
from builder.transform import FunctionPass, PassContext, PassTiming, PrintAfter, Sequential, default_pipeline
from runtime import VirtualMachine
from schemas import LAYER_TYPES, DType, LayerEntry, RecipeError, load_recipe_text
from schemas.json_schema import recipe_json_schema


def _softsign(x: te.Tensor) -> te.Tensor:
    """The topi compute of the new op: ``x / (1 + |x|)``."""
    return te.compute(x.shape, lambda *i: x[i] / (te.abs(x[i]) + 1.0), name="T_softsign")


@pytest.fixture
def softsign():
    """"How to add an op": one record (here registered by the test, removed afterwards)."""
    op = register_op("softsign", infer_unary_float, pattern=OpPattern.ELEMWISE, compute=_softsign,
                     legalize=te_rule(_softsign), frontend="softsign", doc="``x / (1 + |x|)``.")
    yield unary_function(op)   # the nn.op function the record makes (nn.op makes it at import)
    del rx.Op._registry[op.name]


class _SiluSoftsign(nn.Module):
    def __init__(self, fn):
        self.fn = fn

    def forward(self, x):
        return self.fn(nn.op.silu(x)) * 2.0


def test_add_an_op_is_one_record(softsign):
    spec = {"forward": {"x": nn.spec.Tensor(["n", 16], "float32")}}
    irmod, _ = _SiluSoftsign(softsign).export_tvm(spec)
    text = irmod.script()
    assert "R.softsign(silu)" in text
    assert builder.ir.print_irmodule(builder.ir.parse(text)) == text           # printer and parser know it
    lowered = default_pipeline()(irmod)
    kernels = [n for n, f in lowered.functions.items() if not isinstance(f, rx.Function)]
    assert kernels == ["fused_silu_softsign_multiply"]                          # fused with its neighbours
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    got = _SiluSoftsign(softsign).jit(spec)["forward"](x)
    s = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(got, s / (1 + np.abs(s)) * 2, rtol=1e-6, atol=1e-7)


class FoldMultiplyByOne(FunctionPass):
    """"How to add a pass": ``multiply(x, 1)`` -> ``x`` with the relax ExprMutator."""

    name = "fold_multiply_by_one"

    def transform_function(self, bb, func, name):
        class Fold(ExprMutator):
            def visit_call(self, call):
                call = self.generic_visit(call)
                if isinstance(call.op, rx.Op) and call.op.name == "relax.multiply":
                    a, b = call.args
                    if isinstance(b, rx.Constant) and b.data.size == 1 and b.data.item() == 1 and (
                            a.struct_info.same_as(call.struct_info)):
                        return a
                return call

        return Fold().visit_expr(func)


class _TimesOne(nn.Module):
    def forward(self, x):
        return nn.op.exp(x * 1.0) + x


def test_add_a_pass_runs_in_the_pass_manager():
    spec = {"forward": {"x": nn.spec.Tensor([4], "float32")}}
    irmod, _ = _TimesOne().export_tvm(spec)
    assert "R.multiply(x, R.const(1" in irmod.script()
    shown = []
    timing = PassTiming()
    pipeline = Sequential([FoldMultiplyByOne(), *default_pipeline().passes])
    with PassContext([PrintAfter(["fold_multiply_by_one"], lambda mod, name: shown.append(mod.script())),
                      timing]):
        lowered = pipeline(irmod)
    # the binding of the product now aliases x (the mutator keeps bindings; later passes read through it)
    assert len(shown) == 1 and "R.multiply" not in shown[0]
    assert 'mul: R.Tensor((4,), dtype="float32") = x\n' in shown[0]
    assert list(timing.timings) == ["fold_multiply_by_one", *default_pipeline().names]
    x = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    got = VirtualMachine(builder.compile(lowered))["forward"](x)
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)) + x, rtol=1e-6)
    # the same numbers as the default pipeline alone
    np.testing.assert_array_equal(got, VirtualMachine(builder.compile(irmod))["forward"](x))


class ScaleEntry(LayerEntry):
    """"How to add a layer type", the schema model: ``{type: Scale, channels: N}``."""

    type: Literal["Scale"] = "Scale"
    channels: Annotated[int, Field(ge=1)]
    dtype: Optional[DType] = None


class Scale(nn.Module):
    """The module: ``y = x * weight``, a learned per-channel scale, weight (num_channels,)."""

    def __init__(self, num_channels: int, dtype: str | None = None) -> None:
        self.weight = nn.Parameter((num_channels,), dtype)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return x * self.weight


@pytest.fixture
def scale_layer():
    """"How to add a layer type": one registration (here by the test, removed afterwards)."""
    yield register_layer(ScaleEntry, Scale, arguments={"channels": "num_channels"})
    unregister_layer("Scale")


SCALED = """\
name: scaled
model:
  layers:
    fc: {type: Linear, in_features: 8, out_features: 4}
    scale: {type: Scale, channels: 4}
  forward: return scale(relu(fc(x)))
functions:
  forward:
    x: {shape: [batch, 8], dtype: float32}
"""


def test_add_a_layer_is_one_registration(scale_layer):
    recipe = load_recipe_text(SCALED)
    assert recipe.model.layers["scale"] == ScaleEntry(channels=4)
    assert "ScaleEntry" in recipe_json_schema()["$defs"]                         # `build --schema` lists it
    module, spec = instantiate(recipe)
    assert isinstance(module.scale, Scale) and module.scale.weight.shape == [4]
    rng = np.random.default_rng(0)
    P = {name: rng.standard_normal(p.shape).astype(np.float32) for name, p in module.named_parameters()}
    for name, p in module.named_parameters():
        p.data = P[name]
    x = rng.standard_normal((3, 8)).astype(np.float32)
    got = module.jit(spec)["forward"](x)
    P64 = {k: v.astype(np.float64) for k, v in P.items()}
    ref = np.maximum(x.astype(np.float64) @ P64["fc.weight"].T + P64["fc.bias"], 0) * P64["scale.weight"]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(RecipeError, match=r"<string>:5:36: model.layers.scale.channels: Input should be greater"):
        load_recipe_text(SCALED.replace("channels: 4", "channels: 0"))          # the schema model validates


def test_a_layer_whose_fields_do_not_fit_its_init_is_refused_at_registration():
    with pytest.raises(LayerRegistrationError, match=r"layer 'Scale': field 'channels' of ScaleEntry is not an "
                                                     r"argument of Scale.__init__ \(its arguments: num_channels, "
                                                     r"dtype\)"):
        register_layer(ScaleEntry, Scale)                  # no `arguments={"channels": "num_channels"}`
    assert "Scale" not in LAYERS and "Scale" not in LAYER_TYPES   # nothing half-registered
    with pytest.raises(RecipeError, match="unknown layer type 'Scale'"):
        load_recipe_text(SCALED)


#: QLoRA's NF4 table (Dettmers et al. 2023, appendix E): the 16 values a 4-bit code stands for.
NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0)


@pytest.fixture
def nf4():
    """"How to add a quantization format": one QuantFormat and its registration (removed afterwards)."""
    from builder.ir.quant_format import QuantFormat, register_quant_format, unregister_quant_format

    yield register_quant_format(QuantFormat(4, 64, "uint32", "float32", codebook=NF4, name="nf4"))
    unregister_quant_format("nf4")


class _QuantMLP(nn.Module):
    def __init__(self):
        self.up = nn.Linear(128, 32)

    def forward(self, x):
        return nn.op.silu(self.up(x))


def test_add_a_quant_format_is_one_quantformat(nf4):
    """A model quantized with the new format exports, prints, parses and compiles; its matmul (fused with
    the bias and the SiLU) runs on the reference loops, which dequantize through the codebook -- the
    planner refuses the fast kernels, naming the attribute they do not implement -- and the result is
    the numpy float64 reference of the format's own dequantization."""
    from builder.codegen.kernels.linear import plan_linear
    from builder.codegen.kernels.simd import SimdInfo
    from builder.ir.kernel import KERNEL_ATTR
    from builder.quant import QuantizedLinear, quantize_weight

    model = _QuantMLP()
    model.up = QuantizedLinear.from_linear(model.up, nf4)
    spec = {"forward": {"x": nn.spec.Tensor(["n", 128], "float32")}}
    irmod, _ = model.export_tvm(spec)
    text = irmod.script()
    assert 'in_features=128, row_tile=16, codebook="nf4")' in text                # 32 rows: in row tiles
    assert builder.ir.print_irmodule(builder.ir.parse(text)) == text
    lowered = default_pipeline()(irmod)
    kernel = next(f for f in lowered.functions.values() if KERNEL_ATTR in getattr(f, "attrs", {}))
    assert kernel.attrs[KERNEL_ATTR].weights[0].extra_attrs == (("codebook", "nf4"),)   # carried, not dropped
    why = plan_linear(kernel, SimdInfo("avx2", 8, 16, int8_dot=True))
    assert isinstance(why, str) and "codebook='nf4'" in why and "no fast kernel" in why
    exe = builder.compile(irmod)
    labels = [k["kernel"] for k in exe.kernels.values()]
    assert any(lab.startswith("loops (linear: quantized format codebook='nf4'") for lab in labels), labels
    assert not any(lab.startswith("linear/") for lab in labels), labels

    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 128)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    q, s = quantize_weight(w, model.up.layout)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    got = VirtualMachine(exe)["forward"](x, q, s, b)
    wq = nf4.for_weight(128, 32).dequantize_reference(q, s, 128)                  # float64, exact
    assert np.abs(wq - w).max() < 0.25 * np.abs(w).max()                           # a 4-bit code of w
    y = x.astype(np.float64) @ wq.T + b
    np.testing.assert_allclose(got, y / (1 + np.exp(-y)), rtol=1e-5, atol=1e-5)
