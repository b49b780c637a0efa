"""The op library is the one place an op is declared: every record with a frontend name has its
``nn.op`` function, the recipe ``forward:`` language offers exactly the records marked ``in_recipes``,
and the functions made from records compute what numpy does."""
import numpy as np
import pytest

from builder import nn
from builder.ir import relax as rx
from builder.ir.op import OpPattern, register_op, registered_ops
from builder.ir.op.elementwise import infer_unary
from builder.ir.struct_info import TensorStructInfo
from builder.nn.op.elementwise import record_functions, unary_function
from builder.recipe import FORWARD_OPS
from builder.ops import frontend_ops, recipe_ops


def test_every_frontend_name_is_an_nn_op_function():
    names = {op.frontend for op in registered_ops() if op.frontend}
    assert names <= set(nn.op.__all__)
    for name in names:
        assert callable(getattr(nn.op, name)), name
    assert set(recipe_ops()) <= set(FORWARD_OPS) and set(recipe_ops()) <= set(frontend_ops())
    assert {"abs", "tril", "prod"} <= names     # registered and legalized before, now reachable


def test_a_record_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        register_op("add", infer_unary)
    with pytest.raises(ValueError, match="in_recipes needs a frontend"):
        register_op("test_only.no_frontend", infer_unary, in_recipes=True)


def test_functions_made_from_records_carry_the_record():
    fn = nn.op.sigmoid
    assert fn.__name__ == "sigmoid" and fn.__doc__.startswith(rx.Op.get("sigmoid").doc)
    # only elementwise / broadcast records get a made function; a hand-written one is kept
    made = record_functions({"multiply": nn.op.multiply})
    assert "multiply" not in made and "add" in made and "take" not in made
    assert all(op.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST)
               for op in registered_ops() if op.frontend in made)


def test_made_unary_function_checks_its_argument():
    with pytest.raises(TypeError, match="x must be a Tensor"):
        nn.op.abs(3.0)
    f = unary_function(rx.Op.get("abs"))
    assert f.__name__ == "abs"


class _Ops(nn.Module):
    def forward(self, x, m):
        return (nn.op.abs(x), nn.op.tril(m, 1), nn.op.triu(m, -1), nn.op.prod(m, axis=1, keepdims=True),
                nn.op.prod(x), nn.op.subtract(2.0, x), nn.op.maximum(x, 0.25))


@pytest.mark.parametrize("n", [1, 5])
def test_new_frontend_functions_match_numpy(n):
    spec = {"forward": {"x": nn.spec.Tensor(["n"], "float32"), "m": nn.spec.Tensor(["n", 4], "float32")}}
    f = _Ops().jit(spec)["forward"]
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    m = rng.uniform(0.5, 1.5, (n, 4)).astype(np.float32)
    got = f(x, m)
    x64, m64 = x.astype(np.float64), m.astype(np.float64)
    want = (np.abs(x64), np.tril(m64, 1), np.triu(m64, -1), np.prod(m64, axis=1, keepdims=True), np.prod(x64),
            2.0 - x64, np.maximum(x64, 0.25))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-6, atol=1e-7)


def test_every_convolution_checks_its_layouts():
    """conv1d took any layout attribute (a parsed ``data_layout="NWC"`` compiled as NCW)."""
    x = rx.Var("x", TensorStructInfo((1, 4, 9), "float32"))
    w = rx.Var("w", TensorStructInfo((6, 4, 3), "float32"))
    attrs = dict(strides=[1], padding=[0, 0], dilation=[1], groups=1, data_layout="NWC", kernel_layout="OIW",
                 out_layout="NCW", out_dtype="void")
    with pytest.raises(ValueError, match="R.nn.conv1d: only data_layout='NCW', kernel_layout='OIW'"):
        rx.Call(rx.Op.get("nn.conv1d"), [x, w], attrs)
    call = rx.Call(rx.Op.get("nn.conv1d"), [x, w], {**attrs, "data_layout": "NCW"})
    assert [int(d) for d in call.struct_info.shape] == [1, 6, 7]


def test_every_scalar_intrinsic_compiles():
    """Each loop-level intrinsic (and so each op record's ``intrinsic``) lowers to native code for
    float32 and float64 and computes what numpy does."""
    import math

    from builder import te
    from builder.codegen import build
    from builder.ir import tir

    names = {op.intrinsic for op in registered_ops() if op.intrinsic}
    assert names <= set(tir.INTRINSICS)
    ref = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
           "rsqrt": lambda v: 1 / np.sqrt(v), "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
           "erf": np.vectorize(math.erf), "fabs": np.abs, "floor": np.floor, "ceil": np.ceil,
           "round": np.round, "trunc": np.trunc, "sin": np.sin, "cos": np.cos, "tan": np.tan, "atan": np.arctan,
           "asin": np.arcsin, "acos": np.arccos}
    unary = sorted(n for n, intr in tir.INTRINSICS.items() if intr.num_args == 1)
    assert set(unary) == set(ref)
    funcs = {}
    for dtype in ("float32", "float64"):
        x = te.placeholder((16,), dtype, name="x")
        for name in unary:
            f = getattr(tir, "abs" if name == "fabs" else name)
            funcs[f"{name}_{dtype}"] = te.create_prim_func([x, te.compute((16,), lambda i: f(x[i]), name="y")])
    lib = build(funcs).load()
    for dtype in ("float32", "float64"):
        x = np.linspace(0.25, 3.5, 16).astype(dtype)
        for name in unary:
            y = np.empty_like(x)
            lib.call(f"{name}_{dtype}", [x, y])
            with np.errstate(invalid="ignore"):   # (asin / acos past 1: NaN on both sides)
                want = ref[name](x.astype(np.float64))
            np.testing.assert_allclose(y, want, rtol=1e-6 if dtype == "float32" else 1e-12, err_msg=f"{name} {dtype}")
