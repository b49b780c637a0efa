"""from_fx (issue 16): the MLC course's flow (a 784-128-10 MLP traced with torch.fx, translated through a
TE-level map of topi computes and through an op-level map), the default maps on torch.nn layers with
symbolic dims, and the errors for nodes without a translation. Each result is checked against PyTorch."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")
from torch import fx, nn  # noqa: E402

import runtime  # noqa: E402
from builder import compile as build  # noqa: E402
from builder.frontend import FrontendError, UnsupportedNodeError, from_fx  # noqa: E402
from builder.ir import relax as rx  # noqa: E402

from builder.te import topi  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear0 = nn.Linear(784, 128, bias=True)
        self.relu = nn.ReLU()
        self.linear1 = nn.Linear(128, 10, bias=True)

    def forward(self, x):
        return self.linear1(self.relu(self.linear0(x)))


def map_param(param):
    return rx.const(param.data.cpu().numpy())


# the course's TE-level translations: topi.linear is TVM's topi.nn.dense (x @ w.T)
def map_nn_linear(bb, node_map, node, nn_mod):
    x = node_map[node.args[0]]
    y = bb.emit_te(topi.linear, x, map_param(nn_mod.weight))
    return bb.emit_te(topi.add, y, map_param(nn_mod.bias))


def map_nn_relu(bb, node_map, node, nn_mod):
    return bb.emit_te(topi.relu, node_map[node.args[0]])


# the course's "high-level operators" variant: graph-level op calls through bb.emit
def map_nn_linear_op(bb, node_map, node, nn_mod):
    x = node_map[node.args[0]]
    wt = bb.emit(rx.Call(rx.Op.get("relax.permute_dims"), [map_param(nn_mod.weight)], {"axes": [1, 0]}))
    y = bb.emit(rx.Call(rx.Op.get("relax.matmul"), [x, wt], {"out_dtype": None}))
    return bb.emit(rx.Call(rx.Op.get("relax.add"), [y, map_param(nn_mod.bias)]))


def map_nn_relu_op(bb, node_map, node, nn_mod):
    return bb.emit(rx.Call(rx.Op.get("relax.nn.relu"), [node_map[node.args[0]]]))


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model = MLP().eval()
    img = torch.rand(1, 784)
    return model, fx.symbolic_trace(model), img, model(img).detach().numpy()


def _run(mod, *inputs):
    return runtime.VirtualMachine(build(mod))["main"](*[np.ascontiguousarray(a) for a in inputs])


def test_course_matmul_relu_with_get_attr():
    class MyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(128, 128))

        def forward(self, x):
            return torch.relu(torch.matmul(x, self.weight))

    torch.manual_seed(1)
    model = MyModel()
    gm = fx.symbolic_trace(model)
    mod = from_fx(gm, input_shapes=[(1, 128)])
    text = mod.script()
    assert 'def main(x: R.Tensor((1, 128), dtype="float32")) -> R.Tensor((1, 128), dtype="float32"):' in text
    assert 'weight: R.Tensor((128, 128), dtype="float32") = R.const(' in text
    assert "R.nn.relu(" in text
    x = torch.randn(1, 128)
    np.testing.assert_allclose(_run(mod, x.numpy()), model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_mlp_through_the_te_level_map(mlp):
    model, gm, img, want = mlp
    mod = from_fx(gm, input_shapes=[(1, 784)], call_function_map={},
                  call_module_map={nn.Linear: map_nn_linear, nn.ReLU: map_nn_relu})
    buf = io.StringIO()
    mod.show(plain=True, file=buf)
    text = buf.getvalue()
    assert "    def linear(" in text and "    def add(" in text and "    def relu(" in text
    assert 'def main(x: R.Tensor((1, 784), dtype="float32")) -> R.Tensor((1, 10), dtype="float32"):' in text
    assert 'lv: R.Tensor((1, 128), dtype="float32") = R.call_tir(cls.linear, (x, R.const(' in text
    assert "R.call_tir(cls.relu, (lv1,), out_sinfo=R.Tensor((1, 128), dtype=\"float32\"))" in text
    got = _run(mod, img.numpy())
    assert got.shape == (1, 10)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert int(np.argmax(got)) == int(np.argmax(want))


def test_mlp_through_the_op_level_map(mlp):
    model, gm, img, want = mlp
    mod = from_fx(gm, input_shapes=[(1, 784)],
                  call_module_map={nn.Linear: map_nn_linear_op, nn.ReLU: map_nn_relu_op})
    text = mod.script()
    assert "R.matmul(x, lv" in text and "R.nn.relu(" in text and "call_tir" not in text
    exe = build(mod)
    assert sorted(k["kernel"].split("/")[0] for k in exe.kernels.values()) == ["linear", "linear"]
    np.testing.assert_allclose(runtime.VirtualMachine(exe)["main"](img.numpy()), want, rtol=1e-5, atol=1e-5)


def test_mlp_through_the_default_maps_with_a_symbolic_batch(mlp):
    model, gm, _, _ = mlp
    mod = from_fx(gm, input_shapes=[("batch", 784)])
    text = mod.script()
    assert 'def main(x: R.Tensor(("batch", 784), dtype="float32")) -> R.Tensor(("batch", 10), dtype="float32"):' in text
    assert 'linear0_weight: R.Tensor((128, 784), dtype="float32") = R.const(' in text
    exe = build(mod)
    assert exe.get_function_params("main") == ["x"]
    assert all(k["kernel"].startswith("linear/") for k in exe.kernels.values())
    vm = runtime.VirtualMachine(exe)
    for batch in (1, 5):
        x = torch.rand(batch, 784)
        np.testing.assert_allclose(vm["main"](x.numpy()), model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
