"""The core frontend API (``builder.nn.core``, ``spec``, ``visitor``) against TVM's documented
behaviour (seed 000 / 002): Tensor, Parameter, Object, Module, ModuleList, ModuleDict,
default dtype, wrap_nested, jit, Mutator. Numbers are checked against numpy float64."""
import numpy as np
import pytest

from builder import nn
from builder.ir import relax as rx
from builder.ir.expr import Var
from builder.ir.struct_info import ObjectStructInfo, TensorStructInfo
from builder.nn import spec

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def export_text(fn, specs, debug=False):
    class M(nn.Module):
        def forward(self, *args):
            return fn(*args)

    return M().export_tvm(spec={"forward": specs}, debug=debug)[0].script()


def body_lines(text):
    return [ln.strip() for ln in text.splitlines() if " = " in ln and ":" in ln.split(" = ")[0]]


# ---------------------------------------------------------------------------------------------
# default dtype


def test_default_dtype_roundtrip_and_errors():
    assert nn.get_default_dtype() == "float32"
    try:
        nn.set_default_dtype("float16")
        assert nn.Parameter((2,)).dtype == "float16"
        assert nn.KVCache(4, [2]).dtype == "float16"
    finally:
        nn.set_default_dtype("float32")
    assert nn.Parameter((2,)).dtype == "float32"
    with pytest.raises(ValueError, match="unknown dtype 'float128'"):
        nn.set_default_dtype("float128")


# ---------------------------------------------------------------------------------------------
# Tensor


def test_placeholder_static_and_symbolic_dims():
    t = nn.Tensor.placeholder([2, "n", Var("m", "int64")], "float16", name="x")
    assert t.ndim == 3 and t.dtype == "float16"
    assert t.shape[0] == 2
    assert isinstance(t.shape[1], Var) and t.shape[1].name == "n"
    assert t.shape[2].name == "m"
    assert repr(t) == "Tensor(['2', 'n', 'm'], \"float16\")"
    assert repr(nn.Tensor.placeholder((3, 4), "int32")) == 'Tensor([3, 4], "int32")'
    assert t._expr.name_hint == "x"


@pytest.mark.parametrize("shape, exc", [(3, TypeError), ("n", TypeError), ([2.5], TypeError),
                                        ([-1], ValueError), ([Var("k", "int32")], TypeError)])
def test_placeholder_rejects_invalid_shapes(shape, exc):
    with pytest.raises(exc):
        nn.Tensor.placeholder(shape, "float32")


def test_from_const_narrows_like_relax_const():
    assert nn.Tensor.from_const(np.ones((2, 3))).dtype == "float32"       # float64 -> float32
    assert nn.Tensor.from_const([1, 2, 3]).dtype == "int32"               # int64 -> int32
    assert nn.Tensor.from_const(1.5).shape == []
    half = nn.Tensor.from_const(np.zeros((4,), "float16"))
    assert half.dtype == "float16" and half.shape == [4]
    assert nn.Tensor.from_const(np.zeros(2, "uint8")).dtype == "uint8"


def test_from_scalar_and_from_struct_info():
    s = nn.Tensor.from_scalar(3, "float16")
    assert s.dtype == "float16" and s.shape == []
    assert float(s._expr.data) == 3.0
    with pytest.raises(ValueError, match="unknown dtype"):
        nn.Tensor.from_scalar(1, "float8")
    t = nn.Tensor.from_struct_info(TensorStructInfo((5, 6), "int8"), name="q")
    assert t.shape == [5, 6] and t._expr.name_hint == "q"


def test_tensor_needs_a_tensor_expression():
    with pytest.raises(TypeError, match="known shape"):
        nn.Tensor(_expr=rx.Var("o", ObjectStructInfo()))


def test_tensor_operators_emit_the_tvm_ops():
    def fn(x, y):
        a = x + y
        b = a - 1.0
        c = 2.0 - b
        d = c * y
        e = d / 2.0
        f = -e
        g = f @ nn.op.permute_dims(y)
        h = g.astype("float16").reshape(4).permute_dims([0])
        return h, x < y, x >= y, x.maximum(y), x.minimum(y)

    text = export_text(fn, {"x": spec.Tensor((2, 2), "float32"), "y": spec.Tensor((2, 2), "float32")})
    calls = [ln.split(" = ", 1)[1].split("(")[0] for ln in body_lines(text)]
    assert calls == ["R.add", "R.subtract", "R.subtract", "R.multiply", "R.divide", "R.negative",
                     "R.permute_dims", "R.matmul", "R.astype", "R.reshape", "R.permute_dims", "R.less",
                     "R.greater_equal", "R.maximum", "R.minimum",
                     "permute_dims1, less, greater_equal, maximum, minimum"]
    assert 'R.subtract(add, R.const(1, "float32"))' in text
    assert 'R.subtract(R.const(2, "float32"), subtract)' in text


def test_tensor_operators_numerically():
    class M(nn.Module):
        def forward(self, x, y):
            return (2.0 - x) * y / (x + 3.0) - y @ x

    x = np.abs(rand(3, 3)) + 0.5
    y = rand(3, 3)
    f = M().jit(spec={"forward": {"x": spec.Tensor((3, 3), "float32"), "y": spec.Tensor((3, 3), "float32")}})
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(f["forward"](x, y), (2.0 - x64) * y64 / (x64 + 3.0) - y64 @ x64,
                               rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Parameter


class _DLPackOnly:
    """A DLPack producer that is not a numpy array (as a torch / jax tensor would be)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, *args, **kwargs):
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_parameter_data_accepts_numpy_and_dlpack():
    p = nn.Parameter((2, 3))
    assert p.data is None and p.dtype == "float32" and p.attrs == {}
    a = rand(2, 3)
    p.data = a
    assert p.data is a
    b = rand(2, 3)
    p.data = _DLPackOnly(b)
    np.testing.assert_array_equal(p.data, b)
    p.data = None
    assert p.data is None


def test_parameter_data_checks_name_both_sides():
    p = nn.Parameter((2, 3), "float16")
    with pytest.raises(ValueError, match=r"Shape mismatch: expected \(2, 3\), got \(3, 2\)"):
        p.data = np.zeros((3, 2), "float16")
    with pytest.raises(ValueError, match="Dtype mismatch: expected float16, got float32"):
        p.data = np.zeros((2, 3), "float32")
    with pytest.raises(TypeError, match="Unsupported data type: list"):
        p.data = [[0, 0, 0], [0, 0, 0]]
    sym = nn.Parameter(("n", 4))
    sym.data = np.zeros((7, 4), "float32")       # a symbolic dim takes any size
    with pytest.raises(ValueError, match=r"expected \(n, 4\), got \(7, 5\)"):
        sym.data = np.zeros((7, 5), "float32")


def test_parameter_to_dtype():
    p = nn.Parameter((2,))
    p.to(None)
    assert p.dtype == "float32"
    p.to("float16")
    assert p.dtype == "float16" and p.shape == [2]
    p.data = np.zeros(2, "float16")
    with pytest.raises(ValueError, match=r"bound to concrete data \(float16 -> float32\)"):
        p.to("float32")
    assert p.dtype == "float16"


def test_object_needs_object_struct_info():
    v = rx.Var("h", ObjectStructInfo())
    assert nn.Object(_expr=v, _name="h")._expr is v
    with pytest.raises(TypeError, match="ObjectStructInfo"):
        nn.Object(_expr=rx.Var("t", TensorStructInfo((1,), "float32")), _name="t")


# ---------------------------------------------------------------------------------------------
# Module, ModuleList, ModuleDict


class Block(nn.Module):
    def __init__(self, dim):
        self.norm = nn.RMSNorm(dim, axes=-1, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        return self.proj(self.norm(x))


class Net(nn.Module):
    def __init__(self):
        self.embed = nn.Linear(4, 8, bias=True)
        self.layers = nn.ModuleList([Block(8), Block(8)])
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2, bias=False), "b": nn.Linear(8, 3, bias=False)})
        self.dtype = "float32"

    def forward(self, x):
        h = self.layers(self.embed(x))
        return self.heads["a"](h), self.heads["b"](h)


NET_PARAMS = ["embed.weight", "embed.bias", "layers.0.norm.weight", "layers.0.proj.weight",
              "layers.1.norm.weight", "layers.1.proj.weight", "heads.a.weight", "heads.b.weight"]


def test_named_parameters_parameters_and_state_dict():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == NET_PARAMS
    assert [n for n, _ in net.named_parameters(prefix="model.")] == ["model." + n for n in NET_PARAMS]
    assert list(net.parameters()) == [p for _, p in net.named_parameters()]
    sd = net.state_dict(prefix="m.")
    assert list(sd) == ["m." + n for n in NET_PARAMS]
    dest = {"x": 1}
    assert net.state_dict(destination=dest) is dest and list(dest)[1:] == NET_PARAMS


def test_load_state_dict_strict_and_lenient():
    net = Net()
    sd = {n: np.zeros(p.shape, p.dtype) for n, p in net.state_dict().items()}
    assert net.load_state_dict(sd) == ([], [])
    assert net.embed.weight.data is sd["embed.weight"]
    partial = {"embed.weight": np.ones((8, 4), "float32"), "extra.weight": np.zeros(1, "float32")}
    with pytest.raises(KeyError, match=r"Missing keys: \['embed.bias'.*Unexpected keys: \['extra.weight'\]"):
        Net().load_state_dict(partial)
    fresh = Net()
    missing, unexpected = fresh.load_state_dict(partial, strict=False)
    assert missing == NET_PARAMS[1:] and unexpected == ["extra.weight"]
    np.testing.assert_array_equal(fresh.embed.weight.data, 1.0)
    src = Net()
    src.embed.weight.data = np.full((8, 4), 2.0, "float32")      # Parameters as values
    dst = Net()
    dst.load_state_dict({"embed.weight": src.embed.weight}, strict=False)
    np.testing.assert_array_equal(dst.embed.weight.data, 2.0)
    with pytest.raises(ValueError, match="Parameter embed.bias is not set"):
        dst.load_state_dict({"embed.bias": src.embed.bias}, strict=False)
    with pytest.raises(ValueError, match="Shape mismatch"):
        dst.load_state_dict({"embed.bias": np.zeros(3, "float32")}, strict=False)


def test_module_call_and_to():
    net = Net()
    with pytest.raises(TypeError, match="does not have a `forward` method"):
        nn.Module()(1)
    net.to("float16")
    assert {p.dtype for p in net.parameters()} == {"float16"} and net.dtype == "float16"
    lin = nn.Linear(4, 4, out_dtype="float32")
    lin.to("float16")
    assert lin.weight.dtype == "float16" and lin.bias.dtype == "float32"


def test_modulelist_behaves_like_a_list():
    blocks = nn.ModuleList([nn.ReLU()])
    blocks.append(nn.SiLU())
    assert len(blocks) == 2 and isinstance(blocks[1], nn.SiLU)
    assert [type(m).__name__ for m in blocks] == ["ReLU", "SiLU"]
    blocks[0] = nn.GELU()
    assert isinstance(blocks[0], nn.GELU)
    text = blocks.export_tvm(spec={"forward": {"x": spec.Tensor((2,), "float32")}})[0].script()
    assert "R.nn.gelu(x)" in text and "R.nn.silu(gelu)" in text


def test_moduledict_behaves_like_a_dict():
    d = nn.ModuleDict({"x": nn.ReLU()})
    d["y"] = nn.Linear(2, 2, bias=False)
    d.update([("z", nn.Linear(2, 3, bias=False))])
    assert list(d) == ["x", "y", "z"] and list(d.keys()) == ["x", "y", "z"] and len(d) == 3
    assert "y" in d and "w" not in d
    assert [n for n, _ in d.named_parameters()] == ["y.weight", "z.weight"]
    del d["x"]
    assert list(d.values()) == [d["y"], d["z"]]
    d.to("float16")
    assert d["z"].weight.dtype == "float16"
    with pytest.raises(KeyError, match="without '.'"):
        d["a.b"] = nn.ReLU()


def test_nested_export_and_jit_matches_numpy():
    net = Net()
    for _, p in net.named_parameters():
        p.data = rand(*p.shape) * 0.5
    f = net.jit(spec={"forward": {"x": spec.Tensor(("n", 4), "float32")}})
    x = rand(5, 4)
    ya, yb = f["forward"](x)
    w = {n: p.data.astype(np.float64) for n, p in net.named_parameters()}
    h = x.astype(np.float64) @ w["embed.weight"].T + w["embed.bias"]
    for i in range(2):
        h = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + 1e-5) * w[f"layers.{i}.norm.weight"]
        h = h @ w[f"layers.{i}.proj.weight"].T
    np.testing.assert_allclose(ya, h @ w["heads.a.weight"].T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(yb, h @ w["heads.b.weight"].T, rtol=1e-4, atol=1e-4)
    assert f.params[0] is net.embed.weight.data
    np.testing.assert_array_equal(f(x)[0], ya)                   # m(x) runs forward


def test_export_tvm_returns_params_and_optionally_externs():
    mod, params = Net().export_tvm(spec={"forward": {"x": spec.Tensor((1, 4), "float32")}})
    assert [n for n, _ in params] == NET_PARAMS
    assert mod["forward"].num_input == 1 and len(mod["forward"].params) == 1 + len(NET_PARAMS)
    out = Net().export_tvm(spec={"forward": {"x": spec.Tensor((1, 4), "float32")}}, allow_extern=True)
    assert len(out) == 3 and out[2] == []


def test_jit_errors():
    lin = nn.Linear(2, 2)
    s = {"forward": {"x": spec.Tensor((1, 2), "float32")}}
    with pytest.raises(ValueError, match="Parameters are not set to any concrete values: weight, bias"):
        lin.jit(spec=s)
    with pytest.raises(ValueError, match="device 'cuda' is not supported"):
        lin.jit(spec=s, device="cuda")
    with pytest.raises(ValueError, match="Unknown out_format: 'torch'"):
        lin.jit(spec=s, out_format="torch")
    relu = nn.ReLU().jit(spec={"forward": {"x": spec.Tensor((2,), "float32")}})
    with pytest.raises(TypeError, match=r"forward\(\) takes 1 inputs, got 2"):
        relu["forward"](np.zeros(2, "float32"), np.zeros(2, "float32"))
    with pytest.raises(AttributeError, match="no function 'backward'"):
        relu.backward


def test_jit_packed_params_and_int_input():
    class M(nn.Module):
        def __init__(self):
            self.lin = nn.Linear(3, 2)

        def forward(self, x, n):
            return nn.op.reshape(self.lin(x), [n, 2])

    m = M()
    m.lin.weight.data = rand(2, 3)
    m.lin.bias.data = rand(2)
    f = m.jit(spec={"forward": {"x": spec.Tensor((1, "n", 3), "float32"), "n": int,
                                "$": {"param_mode": "packed"}}})
    x = rand(1, 4, 3)
    ref = x[0].astype(np.float64) @ m.lin.weight.data.T.astype(np.float64) + m.lin.bias.data
    np.testing.assert_allclose(f["forward"](x, 4), ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="symbolic dim 'n'"):
        f["forward"](x, 5)


# ---------------------------------------------------------------------------------------------
# wrap_nested and ops outside an export


def test_wrap_nested_names_tuple_elements_and_rejects_objects():
    seen = {}

    def fn(x):
        a, b = nn.op.split(x, 2, axis=0)
        seen["a"] = a
        return a, b

    text = export_text(fn, {"x": spec.Tensor((4,), "float32")})
    assert "split_0: R.Tensor((2,), dtype=\"float32\") = split[0]" in text
    assert "split_1: R.Tensor((2,), dtype=\"float32\") = split[1]" in text
    assert isinstance(seen["a"], nn.Tensor)

    def bad(x):
        return nn.wrap_nested(rx.Call(rx.Op.get("null_value"), []), "n")

    with pytest.raises(TypeError, match="Unsupported return type: R.Object"):
        export_text(bad, {"x": spec.Tensor((1,), "float32")})


def test_ops_outside_an_export_are_deferred_until_traced():
    a, b = nn.Parameter((2, 3)), nn.Parameter((2, 3))
    cat = nn.op.concat([a, b], dim=0, name="ab")
    assert isinstance(cat, nn.Tensor) and not isinstance(cat, nn.Parameter)
    assert cat.shape == [4, 3] and cat.dtype == "float32" and cat.ndim == 2
    first, second = nn.op.split(cat, 2, axis=0)
    assert first.shape == [2, 3]
    with pytest.raises(ValueError, match="neither a Parameter nor the result"):
        nn.op.relu(nn.Tensor.placeholder((2,), "float32"))

    class M(nn.Module):
        def __init__(self):
            self.a, self.b = a, b

        def forward(self, x):
            return x + second, x + first, x + second

    text = M().export_tvm(spec={"forward": {"x": spec.Tensor((2, 3), "float32")}})[0].script()
    assert body_lines(text) == [
        'ab: R.Tensor((4, 3), dtype="float32") = R.concat((a, b), axis=0)',
        'split: R.Tuple(R.Tensor((2, 3), dtype="float32"), R.Tensor((2, 3), dtype="float32")) = '
        'R.split(ab, indices_or_sections=2, axis=0)',
        'split_1: R.Tensor((2, 3), dtype="float32") = split[1]',
        'add: R.Tensor((2, 3), dtype="float32") = R.add(x, split_1)',
        'split_0: R.Tensor((2, 3), dtype="float32") = split[0]',
        'add1: R.Tensor((2, 3), dtype="float32") = R.add(x, split_0)',
        'add2: R.Tensor((2, 3), dtype="float32") = R.add(x, split_1)',   # emitted once, reused
        'gv: R.Tuple(R.Tensor((2, 3), dtype="float32"), R.Tensor((2, 3), dtype="float32"), '
        'R.Tensor((2, 3), dtype="float32")) = add, add1, add2',
    ]


def test_deferred_tensor_is_emitted_in_every_function():
    w = nn.Parameter((3,))

    class M(nn.Module):
        def __init__(self):
            self.w = w
            self.w2 = nn.op.multiply(w, w, name="w_sq")

        def f(self, x):
            return x + self.w2

        def g(self, x):
            return x * self.w2

    mod, params = M().export_tvm(spec={"f": {"x": spec.Tensor((3,), "float32")},
                                       "g": {"x": spec.Tensor((3,), "float32")}})
    assert [n for n, _ in params] == ["w"]
    text = mod.script()
    assert "w_sq: R.Tensor((3,), dtype=\"float32\") = R.multiply(w, w)" in text
    assert "w_sq1: R.Tensor((3,), dtype=\"float32\") = R.multiply(w, w)" in text


# ---------------------------------------------------------------------------------------------
# spec


def test_spec_reprs_and_conversions():
    assert repr(spec.Tensor(["n", 4], "float16")) == "Tensor([n, 4], 'float16')"
    assert repr(spec.Int()) == "int"
    assert repr(spec.Object()) == "object" and spec.Object().object_type is nn.Object

    class M(nn.Module):
        def forward(self, x, n, pair):
            return x

    ms = spec.MethodSpec.from_raw({"pair": (spec.Tensor((1,), "float32"), [spec.Tensor((2,), "int32")]),
                                   "n": "int", "x": spec.Tensor((1,), "float32")}, M().forward)
    assert ms.arg_names == ["x", "n", "pair"]                      # signature order
    assert isinstance(ms.arg_specs[1], spec.Int)
    pair = ms.arg_specs[2]
    assert isinstance(pair, spec.Tuple) and pair.name == "pair" and isinstance(pair.elements, tuple)
    assert isinstance(pair.elements[1], spec.Tuple) and pair.elements[1].name == "pair_1"
    assert repr(ms).startswith("MethodSpec(x: Tensor([1], 'float32'), n: int, pair: (")
    mod_spec = spec.ModuleSpec.from_raw({"forward": ms}, M())
    assert repr(mod_spec).startswith("ModuleSpec:\n  forward(x: Tensor([1], 'float32')")


def test_spec_errors_name_both_sides():
    class M(nn.Module):
        def forward(self, x, y=None):
            return x

    with pytest.raises(ValueError, match=r"spec arguments \['z'\] do not match the parameters \['x', 'y'\]"):
        spec.MethodSpec.from_raw({"z": spec.Tensor((1,), "float32")}, M().forward)
    with pytest.raises(ValueError, match="Invalid param_mode: 'flat'"):
        spec.MethodSpec.from_raw({"x": spec.Tensor((1,), "float32"), "$": {"param_mode": "flat"}}, M().forward)
    with pytest.raises(ValueError, match="Invalid effect_mode: 'x'"):
        spec.MethodSpec(M().forward, [], [], effect_mode="x")
    with pytest.raises(TypeError, match="Invalid spec for argument x"):
        spec.MethodSpec.from_raw({"x": 3.0}, M().forward)
    with pytest.raises(ValueError, match="has no method 'backward'"):
        spec.ModuleSpec.from_raw({"backward": {}}, M())
    with pytest.raises(ValueError, match="unknown dtype 'f32'"):
        spec.Tensor((1,), "f32")
    raw = {"x": spec.Tensor((1,), "float32"), "$": {"param_mode": "none"}}
    spec.MethodSpec.from_raw(raw, M().forward)
    assert "$" in raw                                                # the caller's dict is kept


# ---------------------------------------------------------------------------------------------
# Mutator


def _recording(kind, visit):
    """A Mutator method that records ``(kind, name)`` in ``self.seen``, then does what ``visit``
    (the nn.Mutator method it overrides) does."""
    def method(self, name, node):
        self.seen.append((kind, name))
        return visit(self, name, node)
    return method


class _Recorder(nn.Mutator):
    def __init__(self):
        self.seen = []

    visit_module = _recording("module", nn.Mutator.visit_module)
    visit_modulelist = _recording("list", nn.Mutator.visit_modulelist)
    visit_moduledict = _recording("dict", nn.Mutator.visit_moduledict)
    visit_param = _recording("param", nn.Mutator.visit_param)
    visit_effect = _recording("effect", nn.Mutator.visit_effect)


def test_mutator_visits_every_node_with_dotted_names():
    net = Net()
    net.cache = nn.KVCache(4, [2])
    top = nn.ModuleList([nn.Linear(2, 2, bias=False)])
    rec = _Recorder()
    assert rec.visit("", net) is net
    assert rec.seen == [
        ("module", "embed"), ("param", "embed.weight"), ("param", "embed.bias"),
        ("list", "layers"),
        ("module", "layers.0"), ("module", "layers.0.norm"), ("param", "layers.0.norm.weight"),
        ("module", "layers.0.proj"), ("param", "layers.0.proj.weight"),
        ("module", "layers.1"), ("module", "layers.1.norm"), ("param", "layers.1.norm.weight"),
        ("module", "layers.1.proj"), ("param", "layers.1.proj.weight"),
        ("dict", "heads"), ("module", "heads.a"), ("param", "heads.a.weight"),
        ("module", "heads.b"), ("param", "heads.b.weight"),
        ("effect", "cache"),
    ]
    rec2 = _Recorder()
    rec2.visit("", top)                       # a top-level ModuleList: no leading dot
    assert rec2.seen == [("module", "0"), ("param", "0.weight")]


def test_mutator_replaces_layers_and_params():
    class SwapLinear(nn.Mutator):
        def visit_module(self, name, node):
            if isinstance(node, nn.Linear) and name.startswith("heads."):
                return nn.Linear(node.in_features, node.out_features, bias=True)
            return super().visit_module(name, node)

    class Cast(nn.Mutator):
        def visit_param(self, name, node):
            node.to("float16")
            return node

    net = SwapLinear().visit("", Net())
    assert "heads.a.bias" in dict(net.named_parameters())
    net = Cast().visit("", net)
    assert {p.dtype for p in net.parameters()} == {"float16"}
