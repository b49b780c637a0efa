"""The exporter examples of seed 001 that the golden files (test_export_golden.py) do not cover,
with their expected IR text as TVM prints it: debug effects counted in ``num_input`` across
functions, dynamic shapes, nested modules, Linear with symbolic ``out_features``, the fifth
``test_duplicate_names`` variant, weights defined as expressions of other parameters
(``test_generate_parameters``), the spec's parameter / effect modes, tuple and int inputs, and
ConvTranspose1D (exported and run against a numpy float64 reference)."""
import numpy as np
import pytest

from builder import nn
from builder.ir.expr import Var
from builder.nn import spec
from helpers.exporter_models import DupModel, GateUpMLP

HEADER = """# from tvm.script import ir as I
# from tvm.script import tir as T
# from tvm.script import relax as R

@I.ir_module
class Module:
"""
HEADER_NO_T = HEADER.replace("# from tvm.script import tir as T\n", "")

INIT_IO = '''    @R.function
    def _initialize_effect() -> R.Tuple(R.Object):
        with R.dataflow():
            _io: R.Object = R.null_value()
            lv: R.Tuple(R.Object) = (_io,)
            gv: R.Tuple(R.Object) = lv
            R.output(gv)
        return gv

'''


def T(shape, dtype="float32"):
    return spec.Tensor(shape, dtype)


# ---------------------------------------------------------------------------------------------
# debug effects + one symbolic variable in several functions + symbolic out_features


class TwoHeads(nn.Module):
    def __init__(self):
        self.lin = nn.Linear(8, "n", bias=False)

    def forward_relu(self, x):
        return nn.relu(self.lin(x))

    def forward_silu(self, x):
        return nn.silu(self.lin(x))


TWO_HEADS_DEBUG = HEADER + INIT_IO + '''    @R.function
    def forward_relu(x: R.Tensor(("batch_size", 8), dtype="float32"), _io: R.Object, lin_weight: R.Tensor(("n", 8), dtype="float32")) -> R.Tuple(R.Tensor(("batch_size", "n"), dtype="float32"), R.Tuple(R.Object)):
        batch_size = T.int64()
        n = T.int64()
        R.func_attr({"num_input": 2})
        with R.dataflow():
            permute_dims: R.Tensor((8, n), dtype="float32") = R.permute_dims(lin_weight, axes=None)
            matmul: R.Tensor((batch_size, n), dtype="float32") = R.matmul(x, permute_dims, out_dtype="void")
            relu: R.Tensor((batch_size, n), dtype="float32") = R.nn.relu(matmul)
            gv1: R.Tuple(R.Tensor((batch_size, n), dtype="float32"), R.Tuple(R.Object)) = relu, (_io,)
            R.output(gv1)
        return gv1

    @R.function
    def forward_silu(x: R.Tensor(("batch_size", 8), dtype="float32"), _io: R.Object, lin_weight: R.Tensor(("n", 8), dtype="float32")) -> R.Tuple(R.Tensor(("batch_size", "n"), dtype="float32"), R.Tuple(R.Object)):
        batch_size = T.int64()
        n = T.int64()
        R.func_attr({"num_input": 2})
        with R.dataflow():
            permute_dims1: R.Tensor((8, n), dtype="float32") = R.permute_dims(lin_weight, axes=None)
            matmul1: R.Tensor((batch_size, n), dtype="float32") = R.matmul(x, permute_dims1, out_dtype="void")
            silu: R.Tensor((batch_size, n), dtype="float32") = R.nn.silu(matmul1)
            gv2: R.Tuple(R.Tensor((batch_size, n), dtype="float32"), R.Tuple(R.Object)) = silu, (_io,)
            R.output(gv2)
        return gv2
'''


@pytest.mark.parametrize("dim", ["batch_size", Var("batch_size", "int64")], ids=["str", "var"])
def test_debug_effect_shared_symbolic_var_and_symbolic_out_features(dim):
    mod, params = TwoHeads().export_tvm(
        spec={"forward_relu": {"x": T((dim, 8))}, "forward_silu": {"x": T((dim, 8))}}, debug=True)
    assert mod.script() == TWO_HEADS_DEBUG
    assert [n for n, _ in params] == ["lin.weight"]
    if isinstance(dim, str):  # string dims: each function gets its own variable
        relu_dim = mod["forward_relu"].params[0].struct_info.shape[0]
        assert relu_dim is not mod["forward_silu"].params[0].struct_info.shape[0]


def test_linear_symbolic_out_features_without_debug():
    mod, _ = nn.Linear(in_features=4, out_features="n", bias=True).export_tvm(
        spec={"forward": {"x": T((1, 4))}})
    assert mod.script() == HEADER + '''    @R.function
    def forward(x: R.Tensor((1, 4), dtype="float32"), weight: R.Tensor(("n", 4), dtype="float32"), bias: R.Tensor(("n",), dtype="float32")) -> R.Tensor((1, "n"), dtype="float32"):
        n = T.int64()
        R.func_attr({"num_input": 1})
        with R.dataflow():
            permute_dims: R.Tensor((4, n), dtype="float32") = R.permute_dims(weight, axes=None)
            matmul: R.Tensor((1, n), dtype="float32") = R.matmul(x, permute_dims, out_dtype="void")
            add: R.Tensor((1, n), dtype="float32") = R.add(matmul, bias)
            gv: R.Tensor((1, n), dtype="float32") = add
            R.output(gv)
        return gv
'''


# ---------------------------------------------------------------------------------------------
# nested modules: ModuleList of ModuleDict


class Nested(nn.Module):
    def __init__(self):
        self.blocks = nn.ModuleList([nn.ModuleDict({"norm": nn.LayerNorm(4), "proj": nn.Linear(4, 4, bias=False)})])

    def forward(self, x):
        b = self.blocks[0]
        return b["proj"](b["norm"](x))


def test_nested_modules_name_parameters_by_path():
    mod, params = Nested().export_tvm(spec={"forward": {"x": T(("n", 4))}})
    assert [n for n, _ in params] == ["blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.proj.weight"]
    assert mod.script() == HEADER + '''    @R.function
    def forward(x: R.Tensor(("n", 4), dtype="float32"), blocks_0_norm_weight: R.Tensor((4,), dtype="float32"), blocks_0_norm_bias: R.Tensor((4,), dtype="float32"), blocks_0_proj_weight: R.Tensor((4, 4), dtype="float32")) -> R.Tensor(("n", 4), dtype="float32"):
        n = T.int64()
        R.func_attr({"num_input": 1})
        with R.dataflow():
            layer_norm: R.Tensor((n, 4), dtype="float32") = R.nn.layer_norm(x, blocks_0_norm_weight, blocks_0_norm_bias, axes=[-1], epsilon=1.0000000000000001e-05, center=True, scale=True)
            permute_dims: R.Tensor((4, 4), dtype="float32") = R.permute_dims(blocks_0_proj_weight, axes=None)
            matmul: R.Tensor((n, 4), dtype="float32") = R.matmul(layer_norm, permute_dims, out_dtype="void")
            gv: R.Tensor((n, 4), dtype="float32") = matmul
            R.output(gv)
        return gv
'''


# ---------------------------------------------------------------------------------------------
# test_duplicate_names, the variant TVM marks unsupported


def test_duplicate_names_distinct_tir_vars_with_same_name():
    a, b = Var("hidden_size", "int64"), Var("hidden_size", "int64")
    mod, _ = DupModel(a, b).export_tvm(spec={"forward": {"state": T(["batch_size", 1024])}})
    assert mod.script() == HEADER + '''    @R.function
    def forward(state: R.Tensor(("batch_size", 1024), dtype="float32"), embedding_weights: R.Tensor(("hidden_size", 1024), dtype="float32"), up_weights: R.Tensor(("hidden_size_1", "hidden_size"), dtype="float32"), down_weights: R.Tensor(("hidden_size", "hidden_size_1"), dtype="float32")) -> R.Tensor(("batch_size", "hidden_size"), dtype="float32"):
        batch_size = T.int64()
        hidden_size = T.int64()
        hidden_size_1 = T.int64()
        R.func_attr({"num_input": 1})
        with R.dataflow():
            permute_dims: R.Tensor((1024, hidden_size), dtype="float32") = R.permute_dims(embedding_weights, axes=None)
            matmul: R.Tensor((batch_size, hidden_size), dtype="float32") = R.matmul(state, permute_dims, out_dtype="void")
            permute_dims1: R.Tensor((hidden_size, hidden_size_1), dtype="float32") = R.permute_dims(up_weights, axes=None)
            matmul1: R.Tensor((batch_size, hidden_size_1), dtype="float32") = R.matmul(matmul, permute_dims1, out_dtype="void")
            silu: R.Tensor((batch_size, hidden_size_1), dtype="float32") = R.nn.silu(matmul1)
            permute_dims2: R.Tensor((hidden_size_1, hidden_size), dtype="float32") = R.permute_dims(down_weights, axes=None)
            matmul2: R.Tensor((batch_size, hidden_size), dtype="float32") = R.matmul(silu, permute_dims2, out_dtype="void")
            gv: R.Tensor((batch_size, hidden_size), dtype="float32") = matmul2
            R.output(gv)
        return gv
'''
    fwd = mod["forward"]
    assert fwd.params[1].struct_info.shape[0] is not fwd.params[2].struct_info.shape[0]


def test_duplicate_names_distinct_tir_vars_with_same_name_run():
    model = DupModel(Var("hidden_size", "int64"), Var("hidden_size", "int64"))
    rng = np.random.default_rng(5)
    for (name, p), shape in zip(model.named_parameters(), [(3, 1024), (5, 3), (3, 5)]):
        p.data = rng.standard_normal(shape).astype("float32") * 0.1
    f = model.jit(spec={"forward": {"state": T(["batch_size", 1024])}})
    x = rng.standard_normal((2, 1024)).astype("float32")
    e, u, d = (p.data.astype(np.float64) for p in model.parameters())
    h = (x.astype(np.float64) @ e.T) @ u.T
    ref = (h / (1.0 + np.exp(-h))) @ d.T
    np.testing.assert_allclose(f["forward"](x), ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# test_generate_parameters: a weight defined as an expression of other parameters


GENERATE_PARAMETERS_EXPECTED = HEADER + '''    @R.function
    def forward(x: R.Tensor(("batch_size", 4096), dtype="float16"), gate_proj_weight: R.Tensor((11008, 4096), dtype="float16"), up_proj_weight: R.Tensor((11008, 4096), dtype="float16"), down_proj_weight: R.Tensor((4096, 11008), dtype="float16")) -> R.Tensor(("batch_size", 4096), dtype="float16"):
        batch_size = T.int64()
        R.func_attr({"num_input": 1})
        with R.dataflow():
            gate_up_proj_weights: R.Tensor((22016, 4096), dtype="float16") = R.concat((gate_proj_weight, up_proj_weight), axis=0)
            permute_dims: R.Tensor((4096, 22016), dtype="float16") = R.permute_dims(gate_up_proj_weights, axes=None)
            matmul: R.Tensor((batch_size, 22016), dtype="float16") = R.matmul(x, permute_dims, out_dtype="void")
            split: R.Tuple(R.Tensor((batch_size, 11008), dtype="float16"), R.Tensor((batch_size, 11008), dtype="float16")) = R.split(matmul, indices_or_sections=2, axis=-1)
            split_0: R.Tensor((batch_size, 11008), dtype="float16") = split[0]
            split_1: R.Tensor((batch_size, 11008), dtype="float16") = split[1]
            silu: R.Tensor((batch_size, 11008), dtype="float16") = R.nn.silu(split_0)
            mul: R.Tensor((batch_size, 11008), dtype="float16") = R.multiply(silu, split_1)
            permute_dims1: R.Tensor((11008, 4096), dtype="float16") = R.permute_dims(down_proj_weight, axes=None)
            matmul1: R.Tensor((batch_size, 4096), dtype="float16") = R.matmul(mul, permute_dims1, out_dtype="void")
            gv: R.Tensor((batch_size, 4096), dtype="float16") = matmul1
            R.output(gv)
        return gv
'''


def test_generate_parameters_exports_the_expected_module():
    model = GateUpMLP(hidden_size=4096, intermediate_size=11008)
    mod, params = model.export_tvm(spec={"forward": {"x": T((Var("batch_size", "int64"), 4096), "float16")}})
    assert mod.script() == GENERATE_PARAMETERS_EXPECTED
    # the original weights stay the parameters (names as in a checkpoint); the concatenation is not one
    assert [n for n, _ in params] == ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]
    # exporting again re-emits the expression in the new module
    again, _ = model.export_tvm(spec={"forward": {"x": T((Var("batch_size", "int64"), 4096), "float16")}})
    assert again.script() == GENERATE_PARAMETERS_EXPECTED


# ---------------------------------------------------------------------------------------------
# spec: param_mode and effect_mode


class Lin(nn.Module):
    def __init__(self):
        self.lin = nn.Linear(4, 3, bias=True)

    def forward(self, x):
        return self.lin(x)

    def no_params(self, x):
        return nn.op.relu(x)


def _modes(method, param_mode, effect_mode, debug):
    return {method: {"x": T((2, 4)), "$": {"param_mode": param_mode, "effect_mode": effect_mode}}}


LIN_BODY = '''            permute_dims: R.Tensor((4, 3), dtype="float32") = R.permute_dims(lin_weight, axes=None)
            matmul: R.Tensor((2, 3), dtype="float32") = R.matmul(x, permute_dims, out_dtype="void")
            add: R.Tensor((2, 3), dtype="float32") = R.add(matmul, lin_bias)
'''
PACKED_PARAMS = 'packed_params: R.Tuple(R.Tensor((3, 4), dtype="float32"), R.Tensor((3,), dtype="float32"))'
PLAIN_PARAMS = 'lin_weight: R.Tensor((3, 4), dtype="float32"), lin_bias: R.Tensor((3,), dtype="float32")'
UNPACK_PARAMS = '''            lin_weight: R.Tensor((3, 4), dtype="float32") = packed_params[0]
            lin_bias: R.Tensor((3,), dtype="float32") = packed_params[1]
'''

MODE_CASES = {
    ("forward", "packed", "plain", False): HEADER_NO_T + f'''    @R.function
    def forward(x: R.Tensor((2, 4), dtype="float32"), {PACKED_PARAMS}) -> R.Tensor((2, 3), dtype="float32"):
        R.func_attr({{"num_input": 1}})
        with R.dataflow():
{UNPACK_PARAMS}{LIN_BODY}            gv: R.Tensor((2, 3), dtype="float32") = add
            R.output(gv)
        return gv
''',
    ("no_params", "none", "plain", False): HEADER_NO_T + '''    @R.function
    def no_params(x: R.Tensor((2, 4), dtype="float32")) -> R.Tensor((2, 4), dtype="float32"):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            relu: R.Tensor((2, 4), dtype="float32") = R.nn.relu(x)
            gv: R.Tensor((2, 4), dtype="float32") = relu
            R.output(gv)
        return gv
''',
    ("forward", "plain", "packed", True): HEADER_NO_T + INIT_IO + f'''    @R.function
    def forward(x: R.Tensor((2, 4), dtype="float32"), packed_effects: R.Tuple(R.Object), {PLAIN_PARAMS}) -> R.Tuple(R.Tensor((2, 3), dtype="float32"), R.Tuple(R.Object)):
        R.func_attr({{"num_input": 2}})
        with R.dataflow():
            _io1: R.Object = packed_effects[0]
{LIN_BODY}            gv1: R.Tuple(R.Tensor((2, 3), dtype="float32"), R.Tuple(R.Object)) = add, (_io1,)
            R.output(gv1)
        return gv1
''',
    ("forward", "plain", "none", True): HEADER_NO_T + INIT_IO + f'''    @R.function
    def forward(x: R.Tensor((2, 4), dtype="float32"), {PLAIN_PARAMS}) -> R.Tensor((2, 3), dtype="float32"):
        R.func_attr({{"num_input": 1}})
        with R.dataflow():
{LIN_BODY}            gv1: R.Tensor((2, 3), dtype="float32") = add
            R.output(gv1)
        return gv1
''',
    ("forward", "packed", "packed", True): HEADER_NO_T + INIT_IO + f'''    @R.function
    def forward(x: R.Tensor((2, 4), dtype="float32"), packed_effects: R.Tuple(R.Object), {PACKED_PARAMS}) -> R.Tuple(R.Tensor((2, 3), dtype="float32"), R.Tuple(R.Object)):
        R.func_attr({{"num_input": 2}})
        with R.dataflow():
            _io1: R.Object = packed_effects[0]
{UNPACK_PARAMS}{LIN_BODY}            gv1: R.Tuple(R.Tensor((2, 3), dtype="float32"), R.Tuple(R.Object)) = add, (_io1,)
            R.output(gv1)
        return gv1
''',
    ("forward", "plain", "plain", True): HEADER_NO_T + INIT_IO + f'''    @R.function
    def forward(x: R.Tensor((2, 4), dtype="float32"), _io: R.Object, {PLAIN_PARAMS}) -> R.Tuple(R.Tensor((2, 3), dtype="float32"), R.Tuple(R.Object)):
        R.func_attr({{"num_input": 2}})
        with R.dataflow():
{LIN_BODY}            gv1: R.Tuple(R.Tensor((2, 3), dtype="float32"), R.Tuple(R.Object)) = add, (_io,)
            R.output(gv1)
        return gv1
''',
}


@pytest.mark.parametrize("case", sorted(MODE_CASES), ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-debug{c[3]}")
def test_spec_modes_print_as_tvm(case):
    method, param_mode, effect_mode, debug = case
    mod, _ = Lin().export_tvm(spec=_modes(method, param_mode, effect_mode, debug), debug=debug)
    assert mod.script() == MODE_CASES[case]


def test_param_mode_none_rejects_parameter_use():
    from builder.ir.verifier import IRVerifyError

    with pytest.raises(IRVerifyError, match="'lin_weight' is used before it is defined"):
        Lin().export_tvm(spec=_modes("forward", "none", "plain", False))


def test_packed_params_run():
    m = Lin()
    m.lin.weight.data = np.arange(12, dtype="float32").reshape(3, 4) / 10
    m.lin.bias.data = np.array([1.0, -1.0, 0.5], "float32")
    f = m.jit(spec=_modes("forward", "packed", "plain", False))
    x = np.linspace(-1, 1, 8, dtype="float32").reshape(2, 4)
    ref = x.astype(np.float64) @ m.lin.weight.data.T.astype(np.float64) + m.lin.bias.data
    np.testing.assert_allclose(f["forward"](x), ref, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# tuple and int inputs


class TupleIn(nn.Module):
    def forward(self, x, n):
        a, b = x
        return nn.op.add(a, b), nn.op.reshape(b, [n, 4])


def test_tuple_and_int_inputs():
    s = {"forward": {"x": (T(("n", 4)), T(("n", 4))), "n": int}}
    mod, _ = TupleIn().export_tvm(spec=s)
    assert mod.script() == HEADER + '''    @R.function
    def forward(x: R.Tuple(R.Tensor(("n_1", 4), dtype="float32"), R.Tensor(("n_1", 4), dtype="float32")), n: R.Shape(["n_1"])) -> R.Tuple(R.Tensor(("n_1", 4), dtype="float32"), R.Tensor(("n_1", 4), dtype="float32")):
        n_1 = T.int64()
        R.func_attr({"num_input": 2})
        with R.dataflow():
            x_0: R.Tensor((n_1, 4), dtype="float32") = x[0]
            x_1: R.Tensor((n_1, 4), dtype="float32") = x[1]
            add: R.Tensor((n_1, 4), dtype="float32") = R.add(x_0, x_1)
            reshape: R.Tensor((n_1, 4), dtype="float32") = R.reshape(x_1, R.shape([n_1, 4]))
            gv: R.Tuple(R.Tensor((n_1, 4), dtype="float32"), R.Tensor((n_1, 4), dtype="float32")) = add, reshape
            R.output(gv)
        return gv
'''
    f = TupleIn().jit(spec=s)
    a, b = np.ones((3, 4), "float32"), np.full((3, 4), 2.0, "float32")
    total, same = f["forward"]((a, b), 3)
    np.testing.assert_array_equal(total, 3.0)
    np.testing.assert_array_equal(same, b)
    with pytest.raises(ValueError, match="must be a tuple of 2 values"):
        f["forward"](a, 3)


# ---------------------------------------------------------------------------------------------
# ConvTranspose1D


def _conv_transpose1d_ref(x, w, b, stride, padding, output_padding, dilation, groups):
    """Scatter form of PyTorch ConvTranspose1d in float64."""
    n, cin, width = x.shape
    cg, og, k = cin // groups, w.shape[1], w.shape[2]
    out_w = (width - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
    full = np.zeros((n, og * groups, (width - 1) * stride + dilation * (k - 1) + 1 + output_padding))
    for g in range(groups):
        for c in range(cg):
            for o in range(og):
                for kk in range(k):
                    for s in range(width):
                        full[:, g * og + o, s * stride + kk * dilation] += \
                            x[:, g * cg + c, s] * w[g * cg + c, o, kk]
    out = full[:, :, padding:padding + out_w]
    return out + (0 if b is None else b[None, :, None])


def test_conv_transpose1d_exports_and_runs():
    m = nn.ConvTranspose1D(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    assert m.weight.shape == [4, 3, 3] and m.bias.shape == [6]
    mod, _ = m.export_tvm(spec={"forward": {"x": T(("b", 4, 5))}})
    text = mod.script()
    assert ('R.nn.conv1d_transpose(x, weight, strides=[2], padding=[1, 1], output_padding=[1], '
            'dilation=[1], groups=2, data_layout="NCW", kernel_layout="IOW", out_layout="NCW", '
            'out_dtype="void")') in text
    assert '-> R.Tensor(("b", 6, 10), dtype="float32")' in text
    rng = np.random.default_rng(3)
    m.weight.data = rng.standard_normal((4, 3, 3)).astype("float32")
    m.bias.data = rng.standard_normal(6).astype("float32")
    x = rng.standard_normal((2, 4, 5)).astype("float32")
    y = m.jit(spec={"forward": {"x": T(("b", 4, 5))}})["forward"](x)
    ref = _conv_transpose1d_ref(x.astype(np.float64), m.weight.data.astype(np.float64),
                                m.bias.data.astype(np.float64), 2, 1, 1, 1, 2)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="divisible by groups=4"):
        nn.ConvTranspose1D(6, 6, 3, groups=4)
