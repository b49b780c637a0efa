"""LiftTransformParams on seed 001's ``test_generate_parameters`` model (its ``ExpectedAfterLift``
as TVM prints it) and on smaller cases; the lifted pair (``transform_params`` then ``forward``)
is compiled and run against numpy float64 and against the unlifted module."""
import numpy as np
import pytest

from builder import nn
from builder.compile import compile as build
from builder.ir.expr import Var
from builder.nn import spec
from builder.transform import LiftTransformParams
from helpers.exporter_models import GateUpMLP
from runtime import VirtualMachine


EXPECTED_AFTER_LIFT = '''# from tvm.script import ir as I
# from tvm.script import tir as T
# from tvm.script import relax as R

@I.ir_module
class Module:
    @R.function
    def forward(x: R.Tensor(("batch_size", 4096), dtype="float16"), permute_dims: R.Tensor((4096, 22016), dtype="float16"), permute_dims1: R.Tensor((11008, 4096), dtype="float16")) -> R.Tensor(("batch_size", 4096), dtype="float16"):
        batch_size = T.int64()
        R.func_attr({"num_input": 1})
        with R.dataflow():
            matmul: R.Tensor((batch_size, 22016), dtype="float16") = R.matmul(x, permute_dims, out_dtype="void")
            split: R.Tuple(R.Tensor((batch_size, 11008), dtype="float16"), R.Tensor((batch_size, 11008), dtype="float16")) = R.split(matmul, indices_or_sections=2, axis=-1)
            split_0: R.Tensor((batch_size, 11008), dtype="float16") = split[0]
            split_1: R.Tensor((batch_size, 11008), dtype="float16") = split[1]
            silu: R.Tensor((batch_size, 11008), dtype="float16") = R.nn.silu(split_0)
            mul: R.Tensor((batch_size, 11008), dtype="float16") = R.multiply(silu, split_1)
            matmul1: R.Tensor((batch_size, 4096), dtype="float16") = R.matmul(mul, permute_dims1, out_dtype="void")
            gv: R.Tensor((batch_size, 4096), dtype="float16") = matmul1
            R.output(gv)
        return gv

    @R.function
    def transform_params(model_params: R.Tuple(R.Tensor((11008, 4096), dtype="float16"), R.Tensor((11008, 4096), dtype="float16"), R.Tensor((4096, 11008), dtype="float16"))) -> R.Tuple(R.Tensor((4096, 22016), dtype="float16"), R.Tensor((11008, 4096), dtype="float16")):
        R.func_attr({"num_input": 0})
        with R.dataflow():
            gate_proj_weight: R.Tensor((11008, 4096), dtype="float16") = model_params[0]
            up_proj_weight: R.Tensor((11008, 4096), dtype="float16") = model_params[1]
            gate_up_proj_weights: R.Tensor((22016, 4096), dtype="float16") = R.concat((gate_proj_weight, up_proj_weight), axis=0)
            permute_dims: R.Tensor((4096, 22016), dtype="float16") = R.permute_dims(gate_up_proj_weights, axes=None)
            down_proj_weight: R.Tensor((4096, 11008), dtype="float16") = model_params[2]
            permute_dims1: R.Tensor((11008, 4096), dtype="float16") = R.permute_dims(down_proj_weight, axes=None)
            output: R.Tuple(R.Tensor((4096, 22016), dtype="float16"), R.Tensor((11008, 4096), dtype="float16")) = permute_dims, permute_dims1
            R.output(output)
        return output
'''


def _spec(hidden, dtype="float16"):
    return {"forward": {"x": spec.Tensor((Var("batch_size", "int64"), hidden), dtype)}}


@pytest.mark.parametrize("shared", [True, None], ids=["shared_transform", "default"])
def test_generate_parameters_expected_after_lift(shared):
    exported, _ = GateUpMLP(4096, 11008).export_tvm(spec=_spec(4096))
    before = exported.script()
    lift = LiftTransformParams(shared_transform=True) if shared else LiftTransformParams()
    lifted = lift(exported)
    assert lifted.script() == EXPECTED_AFTER_LIFT
    assert exported.script() == before                       # the input module is not modified


def _silu(v):
    return v / (1.0 + np.exp(-v))


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float16", 2e-2)])
def test_lifted_pair_runs_like_the_exported_module(dtype, tol):
    hidden, inter = 16, 24
    model = GateUpMLP(hidden, inter, dtype)
    rng = np.random.default_rng(7)
    for _, p in model.named_parameters():
        p.data = (rng.standard_normal(p.shape) * 0.3).astype(dtype)
    exported, params = model.export_tvm(spec=_spec(hidden, dtype))
    weights = [p.data for _, p in params]
    x = rng.standard_normal((3, hidden)).astype(dtype)

    g, u, d = (w.astype(np.float64) for w in weights)
    x64 = x.astype(np.float64)
    ref = (_silu(x64 @ g.T) * (x64 @ u.T)) @ d.T

    y_exported = VirtualMachine(build(exported))["forward"](x, *weights)
    vm = VirtualMachine(build(LiftTransformParams()(exported)))
    transformed = vm["transform_params"](tuple(weights))
    assert [t.shape for t in transformed] == [(hidden, 2 * inter), (inter, hidden)]
    np.testing.assert_allclose(transformed[0], np.concatenate([g, u]).T, rtol=tol, atol=tol)
    y_lifted = vm["forward"](x, *transformed)
    np.testing.assert_allclose(y_exported, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(y_lifted, ref, rtol=tol, atol=tol)


class TwoLayer(nn.Module):
    """A weight used as is (bias), one unused (skip.weight), one transformed per call."""

    def __init__(self):
        self.lin = nn.Linear(4, 3, bias=True)
        self.skip = nn.Linear(4, 4, bias=False)
        self.scale = nn.Parameter((3,))

    def forward(self, x):
        return self.lin(x) * nn.op.exp(self.scale)

    def prefill(self, x):
        return self.lin(x)


def test_passthrough_unused_and_per_call_weights():
    mod, params = TwoLayer().export_tvm(spec={"forward": {"x": spec.Tensor(("n", 4), "float32")}})
    lifted = LiftTransformParams()(mod)
    tp = lifted["transform_params"]
    assert [v.name_hint for v in lifted["forward"].params] == ["x", "permute_dims", "lin_bias", "exp"]
    text = lifted.script()
    assert "skip_weight" not in text.split("def forward")[1].split("def transform_params")[0]
    assert 'lin_bias: R.Tensor((3,), dtype="float32") = model_params[1]' in text
    assert "model_params[2]" not in text                      # skip.weight is never read
    assert tp.num_input == 0
    rng = np.random.default_rng(2)
    weights = [rng.standard_normal(p.shape).astype("float32") for _, p in params]
    vm = VirtualMachine(build(lifted))
    x = rng.standard_normal((5, 4)).astype("float32")
    y = vm["forward"](x, *vm["transform_params"](tuple(weights)))
    w, b, _, s = (a.astype(np.float64) for a in weights)
    np.testing.assert_allclose(y, (x.astype(np.float64) @ w.T + b) * np.exp(s), rtol=1e-5, atol=1e-5)


def test_shared_transform_deduplicates_across_functions():
    s = {"forward": {"x": spec.Tensor(("n", 4), "float32")}, "prefill": {"x": spec.Tensor((1, 4), "float32")}}
    mod, _ = TwoLayer().export_tvm(spec=s)
    lifted = LiftTransformParams()(mod)
    text = lifted.script()
    assert text.count("R.permute_dims(lin_weight") == 1     # in both functions, lifted once
    assert [v.name_hint for v in lifted["forward"].params] == ["x", "permute_dims", "lin_bias", "exp"]
    assert [v.name_hint for v in lifted["prefill"].params] == ["x", "permute_dims1", "lin_bias", "exp"]

    separate = LiftTransformParams(shared_transform=False)(mod)
    assert list(separate.functions) == ["forward", "prefill", "forward_transform_params",
                                        "prefill_transform_params"]
    assert [v.name_hint for v in separate["prefill"].params] == ["x", "permute_dims1", "lin_bias"]

    only = LiftTransformParams(shared_transform=["prefill"])(mod)
    assert "transform_params" in only.functions and "forward_transform_params" in only.functions


def test_input_dependent_shapes_are_not_lifted():
    class M(nn.Module):
        def __init__(self):
            self.w = nn.Parameter((4, 4))

        def forward(self, x, n):
            big = nn.op.broadcast_to(nn.op.reshape(self.w, [1, 4, 4]), [n, 4, 4])  # needs the input's n
            return x + nn.op.permute_dims(self.w), big

    mod, _ = M().export_tvm(spec={"forward": {"x": spec.Tensor((4, 4), "float32"), "n": int}})
    lifted = LiftTransformParams()(mod)
    fwd = lifted.script().split("def transform_params")[0]
    assert "R.broadcast_to(reshape, R.shape([n_1, 4, 4]))" in fwd
    assert [v.name_hint for v in lifted["forward"].params] == ["x", "n", "reshape", "permute_dims"]


def test_shared_transform_needs_identical_weights():
    class A(nn.Module):
        def __init__(self):
            self.w = nn.Parameter((2, 2))

        def f(self, x):
            return x + self.w

    mod, _ = A().export_tvm(spec={"f": {"x": spec.Tensor((2, 2), "float32")}})
    other, _ = nn.Linear(2, 3, bias=False).export_tvm(spec={"forward": {"x": spec.Tensor((1, 2), "float32")}})
    mod["forward"] = other["forward"]
    with pytest.raises(ValueError, match=r"functions 'f' and 'forward' share one transform_params but have "
                                         r"different model parameters"):
        LiftTransformParams()(mod)
    with pytest.raises(ValueError, match="'g' is not a function with model parameters"):
        LiftTransformParams(shared_transform=["g"])(mod)


def test_effects_stay_in_the_function():
    class M(nn.Module):
        def __init__(self):
            self.lin = nn.Linear(2, 2, bias=False)
            self.cache = nn.KVCache(4, [2])

        def forward(self, x):
            self.cache.append(self.lin(x))
            return self.cache.view(1)

    mod, _ = M().export_tvm(spec={"forward": {"x": spec.Tensor((1, 2), "float32")}}, debug=True)
    lifted = LiftTransformParams()(mod)
    assert [v.name_hint for v in lifted["forward"].params] == ["x", "_io", "cache", "permute_dims"]
    assert "_initialize_effect" in lifted.functions and lifted["forward"].num_input == 3
    exe = build(lifted)
    vm = VirtualMachine(exe)
    w = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")
    state = vm["_initialize_effect"]()
    (wt,) = vm["transform_params"]((w,))
    y, state = vm["forward"](np.ones((1, 2), "float32"), *state, wt)
    np.testing.assert_allclose(y, [[3.0, 7.0]])
