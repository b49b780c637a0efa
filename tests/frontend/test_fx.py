"""from_fx (issue 16): the MLC course's flow (a 784-128-10 MLP traced with torch.fx, translated through a
TE-level map of topi computes and through an op-level map), the default maps on torch.nn layers with
symbolic dims, and the errors for nodes without a translation. Each result is checked against PyTorch."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")
from torch import fx, nn

import runtime
from builder import compile as build
from builder.frontend import FrontendError, UnsupportedNodeError, from_fx
from builder.ir import relax as rx
from builder.te import topi


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
    assert 'weight: R.Tensor((128, 128), dtype="float32") = metadata["relax.expr.Constant"][0]' in text
    assert "R.nn.relu(" in text
    x = torch.randn(1, 128)
    np.testing.assert_allclose(_run(mod, x.numpy()), model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_mlp_through_the_te_level_map(mlp):
    _, gm, img, want = mlp
    mod = from_fx(gm, input_shapes=[(1, 784)], call_function_map={},
                  call_module_map={nn.Linear: map_nn_linear, nn.ReLU: map_nn_relu})
    buf = io.StringIO()
    mod.show(plain=True, file=buf)
    text = buf.getvalue()
    assert "    def linear(" in text and "    def add(" in text and "    def relu(" in text
    assert 'def main(x: R.Tensor((1, 784), dtype="float32")) -> R.Tensor((1, 10), dtype="float32"):' in text
    assert 'lv: R.Tensor((1, 128), dtype="float32") = R.call_tir(cls.linear, (x, metadata["relax.expr.Constant"][0])' \
        in text   # the seed's meta[relay.Constant][0]
    assert "R.call_tir(cls.relu, (lv1,), out_sinfo=R.Tensor((1, 128), dtype=\"float32\"))" in text
    got = _run(mod, img.numpy())
    assert got.shape == (1, 10)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert int(np.argmax(got)) == int(np.argmax(want))


def test_mlp_through_the_op_level_map(mlp):
    _, gm, img, want = mlp
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
    assert 'linear0_weight: R.Tensor((128, 784), dtype="float32") = metadata["relax.expr.Constant"][' in text
    exe = build(mod)
    assert exe.get_function_params("main") == ["x"]
    assert all(k["kernel"].startswith("linear/") for k in exe.kernels.values())
    vm = runtime.VirtualMachine(exe)
    for batch in (1, 5):
        x = torch.rand(batch, 784)
        np.testing.assert_allclose(vm["main"](x.numpy()), model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


# -- default maps: torch.nn layers with symbolic dims ------------------------------------------------

class Encoder(nn.Module):
    def __init__(self, norm_first=False, activation="relu"):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, norm_first=norm_first,
                                                activation=activation)

    def forward(self, x, pad):
        return self.layer(x, src_key_padding_mask=pad)


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_transformer_encoder_layer_with_symbolic_batch_and_sequence(norm_first, activation):
    torch.manual_seed(2)
    model = Encoder(norm_first, activation).eval()
    mod = from_fx(fx.symbolic_trace(model), [("batch", "seq", 64), ("batch", "seq")],
                  input_dtypes=["float32", torch.bool])
    assert 'layer_self_attn_in_proj_weight_q: R.Tensor((64, 64), dtype="float32")' in mod.script()
    exe = build(mod)
    vm = runtime.VirtualMachine(exe)
    for batch, seq in ((2, 5), (3, 9)):
        x = torch.randn(batch, seq, 64)
        pad = torch.zeros(batch, seq, dtype=torch.bool)
        pad[0, -2:] = True
        with torch.no_grad():
            want = model(x, pad).numpy()
        got = vm["main"](x.numpy(), pad.numpy())
        assert got.shape == (batch, seq, 64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_bare_torch_nn_module_is_wrapped_and_traced():
    """``from_fx(nn.Linear(...))`` and a bare ``TransformerEncoderLayer``: the module is traced as the only
    child of a wrapper taking its inputs positionally, and translated by its module map entry."""
    torch.manual_seed(4)
    lin = nn.Linear(4, 3).eval()
    x = torch.randn(5, 4)
    with torch.no_grad():
        np.testing.assert_allclose(_run(from_fx(lin, [("n", 4)]), x.numpy()), lin(x).numpy(), rtol=1e-5, atol=1e-6)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        np.testing.assert_allclose(_run(from_fx(layer, [(2, "seq", 8)]), x.numpy()), layer(x).numpy(),
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises(FrontendError, match="wrap it"):
        from_fx(nn.Bilinear(2, 2, 1), [])


def test_multihead_attention_returns_averaged_weights():
    torch.manual_seed(3)
    mha = nn.MultiheadAttention(32, 4).eval()     # sequence-first, need_weights=True by default

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = mha

        def forward(self, q, kv):
            return self.mha(q, kv, kv)

    mod = from_fx(fx.symbolic_trace(M()), [("tgt", 2, 32), ("src", 2, 32)])
    vm = runtime.VirtualMachine(build(mod))
    q, kv = torch.randn(3, 2, 32), torch.randn(7, 2, 32)
    with torch.no_grad():
        want_out, want_w = mha(q, kv, kv)
    got_out, got_w = vm["main"](q.numpy(), kv.numpy())
    np.testing.assert_allclose(got_out, want_out.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_w, want_w.numpy(), rtol=1e-4, atol=1e-5)


class ConvStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(8, 16, 3, padding=1)
        self.act = nn.GELU()
        self.conv2 = nn.Conv1d(16, 8, 3, stride=2, padding=1)

    def forward(self, x):
        h = self.act(self.conv1(x))
        h = torch.nn.functional.gelu(self.conv2(h), approximate="tanh")
        return h.transpose(1, 2).flatten(1) * x.size(1) ** 0.5


def test_conv1d_gelu_stack_with_symbolic_batch_and_length():
    torch.manual_seed(4)
    model = ConvStack().eval()
    gm = fx.symbolic_trace(model)
    mod = from_fx(gm, [("batch", 8, "length")])
    vm = runtime.VirtualMachine(build(mod))
    for batch, length in ((1, 12), (3, 31)):
        x = torch.randn(batch, 8, length)
        with torch.no_grad():
            want = model(x).numpy()
        got = vm["main"](x.numpy())
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_functional_ops_indexing_and_sizes():
    class M(nn.Module):
        def forward(self, x, ids):
            b, s, h = x.shape
            y = x.view(b, s, 2, h // 2).permute(0, 2, 1, 3).contiguous()
            a, c = y.chunk(2, dim=-1)
            z = torch.cat([c, -a], dim=-1)[:, :, 1:, :]
            m = torch.arange(s - 1).unsqueeze(0) < 3
            z = z.masked_fill(m[None, :, :, None], 0.0)
            w = torch.softmax(z, dim=-1).sum(dim=1) + x[:, 1:, :].mean(-1, keepdim=True)
            e = torch.nn.functional.embedding(ids, x[0])
            return w, e[..., 0].float().exp(), torch.where(w > 0.5, w, torch.zeros_like(w)).var(-1)

    model = M()
    mod = from_fx(fx.symbolic_trace(model), [("batch", "seq", 8), (4,)], input_dtypes=["float32", "int64"])
    vm = runtime.VirtualMachine(build(mod))
    for batch, seq in ((1, 6), (2, 9)):
        x = torch.randn(batch, seq, 8)
        ids = torch.tensor([0, 3, 1, 5])
        want = [v.numpy() for v in model(x, ids)]
        got = vm["main"](x.numpy(), ids.numpy())
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


# -- errors ---------------------------------------------------------------------------------------

def test_an_unsupported_function_names_the_node_target_and_source_line():
    class M(nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real

    with pytest.raises(UnsupportedNodeError, match="no source line recorded: pass the nn.Module itself"):
        from_fx(fx.symbolic_trace(M()), [(4,)])
    with pytest.raises(UnsupportedNodeError) as info:
        from_fx(M(), [(4,)])     # traced here, with stack traces
    msg = str(info.value)
    assert "node 'fft_fft'" in msg and "call_function" in msg and "fft" in msg
    assert "test_fx.py" in msg and "return torch.fft.fft(x).real" in msg
    assert "call_function_map" in msg


def test_an_unsupported_module_and_a_failing_translation_are_clear_errors():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.LPPool1d(2, 3)
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            return self.pool(x)

    with pytest.raises(UnsupportedNodeError, match=r"node 'pool' \(call_module torch.nn.modules.pooling.LPPool1d\)"):
        from_fx(fx.symbolic_trace(M()), [(1, 4, 6)])

    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            return self.lin(x)

    with pytest.raises(FrontendError, match=r"node 'lin' \(call_module torch.nn.modules.linear.Linear\).*matmul"):
        from_fx(fx.symbolic_trace(Bad()), [(2, 5)])
    with pytest.raises(FrontendError, match="1 input shapes for 2 placeholders"):
        from_fx(fx.symbolic_trace(Encoder()), [(1, 2, 64)])
