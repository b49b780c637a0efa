"""Torch ops that models use around their layers -- max / min along a dim (values and indices), argmax,
rounding, floor division and remainder of tensors, ``div`` with a rounding mode, ``Tensor.repeat`` /
``torch.tile``, ``repeat_interleave``, ``clamp_min``, ``.T`` / ``.mT`` / ``.mH``, ``F.pad`` with negative
widths -- through torch.fx and torch.export against eager
PyTorch, and the ONNX ops of the same family against onnxruntime."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")
from torch import nn

import runtime
from builder import compile as build
from builder.frontend import from_exported_program, from_fx


def _onnx_vm_and_session(graph, opset: int):
    """The ONNX graph as a model of ``opset``: our VM of it and an onnxruntime session."""
    import onnxruntime as ort
    from onnx import helper

    from builder.frontend import from_onnx

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return (runtime.VirtualMachine(build(from_onnx(model))),
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]))


def _against_pytorch(model, args, paths=("fx", "export"), tol=1e-6, exact=False):
    """``model`` (eval) on the tensors ``args`` through each import path -- ``fx`` (symbolic_trace, static
    shapes), ``export`` (torch.export), ``decomposed`` (its ``run_decompositions()``) -- against eager
    PyTorch: every output, same dtype, equal (``exact``) or within ``tol``."""
    with torch.no_grad():
        want = model(*args)
    want = [w.numpy() for w in (want if isinstance(want, (tuple, list)) else [want])]
    for path in paths:
        if path == "fx":
            mod = from_fx(torch.fx.symbolic_trace(model), [(tuple(a.shape), str(a.dtype).split(".")[-1]) for a in args])
        else:
            ep = torch.export.export(model, tuple(args))
            mod = from_exported_program(ep.run_decompositions() if path == "decomposed" else ep)
        got = runtime.VirtualMachine(build(mod))["main"](*[a.numpy() for a in args])
        got = got if isinstance(got, (tuple, list)) else [got]
        assert len(got) == len(want), path
        for g, w in zip(got, want):
            assert g.dtype == w.dtype, (path, g.dtype, w.dtype)
            if exact:
                np.testing.assert_array_equal(g, w, err_msg=path)
            else:
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=path)


class Ops(nn.Module):
    def forward(self, x, k):
        vals, idx = torch.max(x, dim=1)
        mn = x.min(dim=-1, keepdim=True).values
        am = torch.argmax(x, dim=2) + x.argmin(dim=2) * 10 + torch.argmax(x)
        r = torch.round(x * 3) + torch.floor(x) - torch.ceil(x) + torch.trunc(x * 2) + torch.sign(x)
        d = torch.div(x, 0.7, rounding_mode="floor") + torch.div(x, -0.3, rounding_mode="trunc")
        q = k // 3 + k % 4 + torch.remainder(k, -5) + torch.floor_divide(k, -2)
        t = x.repeat(2, 1, 3) + torch.tile(x, (2, 1, 3))
        ri = torch.repeat_interleave(k, 2, dim=1)
        crop = nn.functional.pad(x, (1, -2, -1, 0), value=0.5)   # negative widths crop (RWKV's time shift)
        return (vals, idx, mn, am, r, d, q, t, ri, torch.clamp_min(x, 0.1), torch.max(x), torch.min(x, k.float()), x.mT,
                x.T, x.mH, crop)


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (2, 4, 5)).astype(np.float32)
    x[0, 0, 0] = 0.5 / 3      # a half after the scaling: round half to even
    k = rng.integers(-20, 20, (2, 4, 5)).astype(np.int64)
    return x, k


def _check(mod, x, k):
    got = runtime.VirtualMachine(build(mod))["main"](x, k)
    with torch.no_grad():
        want = Ops()(torch.from_numpy(x), torch.from_numpy(k))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = w.numpy()
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors")   # (x.T of 3-d: deliberate)
def test_extra_ops_through_fx():
    x, k = _inputs()
    _check(from_fx(torch.fx.symbolic_trace(Ops()), [((2, 4, 5), "float32"), ((2, 4, 5), "int64")]), x, k)


@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors")   # (x.T of 3-d: deliberate)
def test_extra_ops_through_export():
    x, k = _inputs()
    _check(from_exported_program(torch.export.export(Ops(), (torch.from_numpy(x), torch.from_numpy(k)))), x, k)


def test_onnx_rounding_mod_argmax_tile():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    F, I64 = TensorProto.FLOAT, TensorProto.INT64
    nodes = [helper.make_node("Floor", ["x"], ["f"]), helper.make_node("Ceil", ["x"], ["c"]),
             helper.make_node("Round", ["x"], ["r"]), helper.make_node("Sign", ["x"], ["s"]),
             helper.make_node("Mod", ["x", "d"], ["fm"], fmod=1), helper.make_node("Mod", ["k", "e"], ["im"]),
             helper.make_node("ArgMax", ["x"], ["am"], axis=1), helper.make_node("ArgMin", ["x"], ["an"], axis=-1,
                                                                                keepdims=0),
             helper.make_node("Tile", ["x", "reps"], ["t"])]
    outs = [("f", F, ["n", 4]), ("c", F, ["n", 4]), ("r", F, ["n", 4]), ("s", F, ["n", 4]), ("fm", F, ["n", 4]),
            ("im", I64, ["n", 4]), ("am", I64, ["n", 1]), ("an", I64, ["n"]), ("t", F, ["m", 8])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 4]),
                                           helper.make_tensor_value_info("k", I64, ["n", 4])],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outs],
                              initializer=[numpy_helper.from_array(np.array([0.7, -1.5, 2.0, 0.3], np.float32), "d"),
                                           numpy_helper.from_array(np.array([3, -4, 5, 7], np.int64), "e"),
                                           numpy_helper.from_array(np.array([3, 2], np.int64), "reps")])
    vm, sess = _onnx_vm_and_session(graph, 17)
    rng = np.random.default_rng(1)
    for n in (1, 3):
        x = rng.uniform(-4, 4, (n, 4)).astype(np.float32)
        x[0, 0] = 2.5
        k = rng.integers(-30, 30, (n, 4)).astype(np.int64)
        for g, w in zip(vm["main"](x, k), sess.run(None, {"x": x, "k": k})):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.prelu = nn.PReLU(4)
        with torch.no_grad():
            self.prelu.weight.copy_(torch.tensor([0.1, -0.3, 0.5, 2.0]))
        self.acts = nn.ModuleList([nn.ELU(0.7), nn.SELU(), nn.CELU(1.3), nn.Softplus(2.0, 5.0), nn.Softsign(),
                                   nn.Mish(), nn.Hardswish(), nn.Hardsigmoid(), nn.LeakyReLU(0.2),
                                   nn.Hardtanh(-0.5, 2.0), nn.ReLU6(), nn.GLU(1)])

    def forward(self, x):
        return tuple(a(x) for a in self.acts) + (self.prelu(x), torch.nn.functional.softplus(x * 30))


def test_activations_match_pytorch():
    x = np.random.default_rng(3).uniform(-8, 8, (3, 4, 6)).astype(np.float32)
    model = Activations().eval()
    with torch.no_grad():
        want = [v.numpy() for v in model(torch.from_numpy(x))]
    for mod in (from_fx(torch.fx.symbolic_trace(model), [((3, 4, 6), "float32")]),
                from_exported_program(torch.export.export(model, (torch.from_numpy(x),)))):
        got = runtime.VirtualMachine(build(mod))["main"](x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


def test_onnx_activations_match_onnxruntime():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    F = TensorProto.FLOAT
    specs = [("HardSigmoid", {}), ("HardSigmoid", dict(alpha=0.3, beta=0.4)), ("HardSwish", {}),
             ("LeakyRelu", dict(alpha=0.1)), ("Elu", dict(alpha=0.5)), ("Selu", {}), ("Celu", dict(alpha=2.0)),
             ("Softplus", {}), ("Softsign", {}), ("PRelu", {})]
    nodes, outs = [], []
    for i, (kind, attrs) in enumerate(specs):
        ins = ["x", "slope"] if kind == "PRelu" else ["x"]
        nodes.append(helper.make_node(kind, ins, [f"y{i}"], **attrs))
        outs.append(helper.make_tensor_value_info(f"y{i}", F, ["n", 4]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 4])], outs,
                              initializer=[numpy_helper.from_array(np.array([0.1, -0.2, 0.3, 1.5], np.float32),
                                                                   "slope")])
    vm, sess = _onnx_vm_and_session(graph, 18)
    x = np.random.default_rng(2).uniform(-6, 6, (5, 4)).astype(np.float32)
    for g, w in zip(vm["main"](x), sess.run(None, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


class NormShuffle(nn.Module):
    def __init__(self):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(8, affine=True)
        self.inorm1d = nn.InstanceNorm1d(8)
        with torch.no_grad():
            self.inorm.weight.copy_(torch.linspace(0.5, 2.0, 8))
            self.inorm.bias.copy_(torch.linspace(-1.0, 1.0, 8))
        self.shuffle, self.unshuffle = nn.PixelShuffle(2), nn.PixelUnshuffle(2)

    def forward(self, x):
        y = self.inorm(x)
        return self.shuffle(y), self.unshuffle(x), self.inorm1d(x.flatten(2))


def test_instance_norm_and_pixel_shuffle_match_pytorch():
    x = np.random.default_rng(4).standard_normal((2, 8, 4, 6)).astype(np.float32) * 3 + 1
    model = NormShuffle().eval()
    with torch.no_grad():
        want = [v.numpy() for v in model(torch.from_numpy(x))]
    for mod in (from_fx(torch.fx.symbolic_trace(model), [((2, 8, 4, 6), "float32")]),
                from_exported_program(torch.export.export(model, (torch.from_numpy(x),)))):
        got = runtime.VirtualMachine(build(mod))["main"](x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


class InPlace(nn.Module):
    """In-place updates whose other users must see the new value (torch's aliasing)."""

    def forward(self, x, y):
        keep = x
        x += y                     # keep is x: mutated too
        z = y * 2
        z.mul_(x).add_(1.0)
        w = torch.zeros_like(y)
        w.copy_(z[:, :1])           # broadcast copy into w
        return keep + 0, z, w


def test_in_place_ops_rebind_their_argument():
    x = np.random.default_rng(7).standard_normal((3, 4)).astype(np.float32)
    y = np.random.default_rng(8).standard_normal((3, 4)).astype(np.float32)
    with torch.no_grad():
        want = [v.numpy() for v in InPlace()(torch.from_numpy(x.copy()), torch.from_numpy(y.copy()))]
    ep = torch.export.export(InPlace(), (torch.from_numpy(x.copy()), torch.from_numpy(y.copy())))
    fx_mod = from_fx(torch.fx.symbolic_trace(InPlace()), [((3, 4), "float32"), ((3, 4), "float32")])
    # torch.fx traces ``x += y`` as ``x + y`` (a Proxy has no __iadd__), so ``keep`` is the old x there:
    # the aliasing of the first output is checked through torch.export only
    for mod, first in ((from_exported_program(ep), 0), (fx_mod, 1)):
        got = runtime.VirtualMachine(build(mod))["main"](x, y)
        for g, w in list(zip(got, want))[first:]:
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


class Gather(nn.Module):
    def forward(self, x, i, j):
        return torch.gather(x, 1, i), x.gather(-1, j), torch.take_along_dim(x, i, dim=1)


def test_gather_matches_pytorch_and_out_of_range_is_an_error():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 5, 4)).astype(np.float32)
    i = rng.integers(0, 5, (3, 2, 4)).astype(np.int64)        # fewer rows than x along dim 1
    j = rng.integers(0, 4, (2, 5, 6)).astype(np.int64)        # a smaller batch, more picks along the last dim
    with torch.no_grad():
        want = [v.numpy() for v in Gather()(*(torch.from_numpy(a) for a in (x, i, j)))]
    ep = torch.export.export(Gather(), tuple(torch.from_numpy(a) for a in (x, i, j)))
    for mod in (from_exported_program(ep),
                from_fx(torch.fx.symbolic_trace(Gather()), [((3, 5, 4), "float32"), ((3, 2, 4), "int64"),
                                                           ((2, 5, 6), "int64")])):
        vm = runtime.VirtualMachine(build(mod))
        for g, w in zip(vm["main"](x, i, j), want):
            np.testing.assert_array_equal(g, w)
        bad = i.copy()
        bad[0, 0, 0] = 5
        with pytest.raises(ValueError, match="index out of range"):
            vm["main"](x, bad, j)


def test_onnx_gather_elements_negative_indices():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, "m"]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [3, "m"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, "m"])])
    vm, sess = _onnx_vm_and_session(graph, 17)
    rng = np.random.default_rng(10)
    for m in (2, 5):
        x = rng.standard_normal((4, m)).astype(np.float32)
        i = rng.integers(-4, 4, (3, m)).astype(np.int64)
        np.testing.assert_array_equal(vm["main"](x, i), sess.run(None, {"x": x, "i": i})[0])


class ShiftRight(nn.Module):
    """BART / T5's ``shift_tokens_right`` and mask edits: assignments into slices and rows of a tensor,
    ``fill_`` on a view, ``masked_fill_``."""

    def forward(self, ids, h):
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        shifted[:, 0] = 2
        shifted.masked_fill_(shifted == 7, 1)
        g = h.clone()
        g[..., -1] = 0.5
        g[:, 1:3] *= 2.0
        g[:, 0].fill_(-1.0)
        return shifted, g


def test_assignment_into_views_matches_pytorch():
    rng = np.random.default_rng(11)
    ids = rng.integers(0, 10, (2, 6)).astype(np.int64)
    h = rng.standard_normal((2, 4, 3)).astype(np.float32)
    with torch.no_grad():
        want = [v.numpy() for v in ShiftRight()(torch.from_numpy(ids), torch.from_numpy(h))]
    ep = torch.export.export(ShiftRight(), (torch.from_numpy(ids), torch.from_numpy(h)))
    for g, w in zip(runtime.VirtualMachine(build(from_exported_program(ep)))["main"](ids, h), want):
        np.testing.assert_array_equal(g, w)


class ViewEdits(nn.Module):
    """In-place methods on views, which torch.fx can trace (it cannot trace ``x[...] = v``)."""

    def forward(self, h):
        g = h.clone()
        g[:, 0].fill_(-1.0)
        g[:, 1:3].mul_(2.0)
        g[..., -1:].add_(g[..., :1])
        return g


def test_in_place_methods_on_views_through_fx():
    h = np.random.default_rng(12).standard_normal((2, 4, 3)).astype(np.float32)
    with torch.no_grad():
        want = ViewEdits()(torch.from_numpy(h)).numpy()
    for mod in (from_fx(torch.fx.symbolic_trace(ViewEdits()), [((2, 4, 3), "float32")]),
                from_exported_program(torch.export.export(ViewEdits(), (torch.from_numpy(h),)))):
        np.testing.assert_array_equal(runtime.VirtualMachine(build(mod))["main"](h), want)


class Deconv(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose1d(4, 3, 4, stride=2, padding=1, output_padding=1, dilation=1)
        self.w = nn.Parameter(torch.randn(3, 2, 3))

    def forward(self, x):
        y = self.up(x)
        return nn.functional.conv_transpose1d(y, self.w, stride=3, padding=2, output_padding=1, dilation=2)


def test_conv_transpose1d_matches_pytorch():
    torch.manual_seed(5)
    model = Deconv().eval()
    x = np.random.default_rng(13).standard_normal((2, 4, 9)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    for mod in (from_fx(torch.fx.symbolic_trace(model), [((2, 4, 9), "float32")]),
                from_exported_program(torch.export.export(model, (torch.from_numpy(x),)))):
        np.testing.assert_allclose(runtime.VirtualMachine(build(mod))["main"](x), want, rtol=1e-5, atol=1e-5)


EINSUMS = [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bhid,bhjd->bhij", [(2, 3, 5, 4), (2, 3, 6, 4)]),
           ("ij,jk", [(3, 4), (4, 2)]), ("i,j->ij", [(3,), (4,)]), ("bi,bi->b", [(3, 4), (3, 4)]),
           ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 2)]), ("ij->ji", [(3, 4)]), ("ijk->i", [(2, 3, 4)]),
           ("bn,anm,bm->ba", None), ("ik,jkl->ijl", [(2, 3), (4, 3, 5)]), ("bij,jk->bki", [(2, 3, 4), (4, 5)]),
           ("ii->", [(4, 4)]), ("ii->i", [(3, 3)]), ("bii,bj->bij", [(2, 3, 3), (2, 4)]), ("iji->j", [(3, 2, 3)])]


@pytest.mark.parametrize("eq, shapes", [e for e in EINSUMS if e[1] is not None])
def test_einsum_matches_numpy_through_fx_and_export(eq, shapes):
    rng = np.random.default_rng(14)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]

    class E1(nn.Module):
        def forward(self, a):
            return torch.einsum(eq, a)

    class E2(nn.Module):
        def forward(self, a, b):
            return torch.einsum(eq, a, b)

    model = (E1 if len(xs) == 1 else E2)()
    want = np.einsum(eq, *[x.astype(np.float64) for x in xs])
    ep = torch.export.export(model, tuple(torch.from_numpy(x) for x in xs))
    for mod in (from_exported_program(ep), from_fx(torch.fx.symbolic_trace(model), [(s, "float32") for s in shapes])):
        got = runtime.VirtualMachine(build(mod))["main"](*xs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_einsum_errors_and_onnx():
    from builder.nn import op as nnop
    from builder.nn.core import Tensor
    from builder.ir import expr as E
    from builder.ir import relax as rx
    from builder.ir.struct_info import TensorStructInfo

    v = lambda *s: Tensor(_expr=rx.Var("v", TensorStructInfo(s, "float32")))
    with pytest.raises(ValueError, match="one or two operands"):
        nnop.einsum("bn,anm,bm->ba", [v(2, 3), v(4, 3, 5), v(2, 5)])
    with pytest.raises(ValueError, match="sizes 3 and 4"):
        nnop.einsum("ii->i", [v(3, 4)])
    with pytest.raises(ValueError, match="diagonals need static sizes"):
        nnop.einsum("ii->i", [Tensor(_expr=rx.Var("v", TensorStructInfo([E.Var("n", "int64")] * 2, "float32")))])
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Einsum", ["a", "b"], ["y"], equation="bhid,bhjd->bhij")], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 2, 5, 4]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 2, 6, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2, 5, 6])])
    vm, sess = _onnx_vm_and_session(graph, 17)
    rng = np.random.default_rng(15)
    for n in (1, 3):
        a, b = rng.standard_normal((n, 2, 5, 4)).astype(np.float32), rng.standard_normal((n, 2, 6, 4)).astype(np.float32)
        np.testing.assert_allclose(vm["main"](a, b), sess.run(None, {"a": a, "b": b})[0], rtol=1e-5, atol=1e-5)


class Deconv2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.w = nn.Parameter(torch.randn(6, 2, 2, 3))

    def forward(self, x):
        return nn.functional.conv_transpose2d(self.up(x), self.w, stride=(1, 2), padding=(1, 0), groups=3,
                                              dilation=(2, 1))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")     # torch.onnx's TorchScript exporter
def test_conv_transpose2d_matches_pytorch_and_onnxruntime():
    torch.manual_seed(6)
    model = Deconv2d().eval()
    x = np.random.default_rng(16).standard_normal((2, 4, 5, 6)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    for mod in (from_fx(torch.fx.symbolic_trace(model), [((2, 4, 5, 6), "float32")]),
                from_exported_program(torch.export.export(model, (torch.from_numpy(x),)))):
        np.testing.assert_allclose(runtime.VirtualMachine(build(mod))["main"](x), want, rtol=1e-4, atol=1e-4)
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import io

    import onnx

    from builder.frontend import from_onnx

    buf = io.BytesIO()
    torch.onnx.export(model, (torch.from_numpy(x),), buf, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False)
    ref = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = runtime.VirtualMachine(build(from_onnx(onnx.load_from_string(buf.getvalue()))))["main"](x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


class Scatters(nn.Module):
    def forward(self, x, i, s):
        e = x.clone()
        e.scatter_(1, i, s, reduce="multiply")
        return (x.scatter(1, i, s), x.scatter(0, i, 2.5), torch.scatter_add(x, 1, i, s),
                x.scatter_reduce(1, i, s, "amax"), e, x.scatter_reduce(0, i, s, "prod"),
                x.scatter_reduce(1, i, s, "amin"))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_family_matches_pytorch():
    """``scatter`` with a tensor and a scalar, ``scatter_`` with ``reduce``, ``scatter_add``,
    ``scatter_reduce`` (sum / prod / amax / amin), with repeated indices and an index smaller than the
    source, through torch.fx and torch.export."""
    g = torch.Generator().manual_seed(4)
    x, i, s = torch.randn(4, 5, generator=g), torch.randint(0, 4, (3, 2), generator=g), torch.randn(3, 4, generator=g)
    i[1, 1] = i[1, 0]   # a repeated index within a row
    _against_pytorch(Scatters(), [x, i, s])


class Sorting(nn.Module):
    def forward(self, x, y):
        v, i = torch.sort(x, dim=1, descending=True, stable=True)
        tv, ti = torch.topk(y, 3, dim=-1)
        sv, si = y.topk(2, dim=0, largest=False)
        return v, i, torch.argsort(x, dim=0, stable=True), x.sort(0).values, torch.msort(x), tv, ti, sv, si


def test_sort_argsort_topk_match_pytorch():
    """``torch.sort`` / ``argsort`` with ``stable=True`` on data full of ties (the order PyTorch promises),
    ``topk`` largest and smallest on distinct values (PyTorch leaves the order of tied ones open),
    through torch.fx and torch.export; indices int64."""
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-3, 4, (5, 6), generator=g).float()
    _against_pytorch(Sorting(), [x, torch.randn(5, 6, generator=g)], exact=True)


class Aliases(nn.Module):
    def forward(self, x, y):
        a = torch.multiply(x, y) + torch.subtract(x, y) * torch.divide(x, y + 3.0)
        b = torch.greater(x, y).float() + x.less_equal(y).float() + torch.not_equal(x, y).float()
        c = torch.swapaxes(x, 0, 1).reshape_as(y) + x.view_as(y) + torch.absolute(x).negative().clip(-1.0, 0.5)
        e = torch.empty(2, 3).fill_(1.5) + torch.empty_like(x).zero_() + x.new_empty(2, 3).fill_(0.25)
        return a, b, c, e, torch.concatenate([x, y]).fix()


def test_torch_aliases_and_empty_match_pytorch():
    """torch's second names (multiply, subtract, divide, greater, ..., swapaxes, concatenate, fix),
    ``view_as`` / ``reshape_as``, and ``empty`` / ``empty_like`` / ``new_empty`` filled before use, through
    torch.fx and torch.export."""
    g = torch.Generator().manual_seed(7)
    _against_pytorch(Aliases(), [torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)])


class Unfolds(nn.Module):
    def __init__(self):
        super().__init__()
        self.unfold = nn.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1))

    def forward(self, x):
        return self.unfold(x), nn.functional.unfold(x, (9, 1), padding=(4, 0)), x.unfold(2, 3, 2)


def test_unfold_matches_pytorch():
    """``F.unfold`` / ``nn.Unfold`` (``aten.im2col``: dilation, padding, stride; ConvBERT's 9 x 1 columns)
    and ``Tensor.unfold`` (a sliding window on one dim) are told apart, through torch.fx and torch.export."""
    _against_pytorch(Unfolds(), [torch.randn(2, 3, 7, 6, generator=torch.Generator().manual_seed(8))])


class Trig(nn.Module):
    def forward(self, x, y):
        z = x.clamp(-0.99, 0.99)
        return (torch.tan(x), torch.atan(x), torch.asin(z), torch.acos(z), torch.asinh(x * 5), torch.acosh(x.abs() + 1),
                torch.atanh(z), torch.atan2(y, x), torch.arctan2(x, y), x.arctan())


def test_inverse_trigonometric_and_hyperbolic_match_pytorch():
    """tan / atan / asin / acos (the C library's, per element), asinh / acosh / atanh (log compositions) and
    atan2 in every quadrant, on both axes and at the origin, through torch.fx and torch.export."""
    g = torch.Generator().manual_seed(9)
    x, y = torch.randn(4, 5, generator=g) * 2, torch.randn(4, 5, generator=g)
    x[0, :4] = torch.tensor([0.0, 0.0, -1.0, -2.0])
    y[0, :4] = torch.tensor([0.0, 1.5, 0.0, -0.5])
    _against_pytorch(Trig(), [x, y], tol=2e-6)


def test_onnx_trigonometric_and_hyperbolic_match_onnxruntime():
    from onnx import TensorProto, helper

    ops = ["Tan", "Atan", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"]
    graph = helper.make_graph([helper.make_node(o, ["x"], [o]) for o in ops], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["n", 4]) for o in ops])
    vm, sess = _onnx_vm_and_session(graph, 17)
    x = np.random.default_rng(10).uniform(-0.9, 0.9, (3, 4)).astype(np.float32)
    x[0] += 1.5    # past 1: NaN for asin / acos / atanh, as onnxruntime gives
    for g, w in zip(vm["main"](x), sess.run(None, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6)


class CoreAten(nn.Module):
    def forward(self, x, i, m):
        a = x.clone()
        a[i] = 2.0
        b = x.clone()
        b[:, i] = torch.arange(12.0).reshape(4, 3)
        c = x.clone()
        c[i, i] += 1.5
        d = x.clone()
        d[m] = -1.0
        y = torch.zeros(3, 4, 5)
        y[1:, :, i[:2]] = 7.0
        return (a, b, c, d, y, torch.slice_scatter(x, torch.zeros(4, 2), 1, 1, 5, 2),
                torch.slice_scatter(x, torch.zeros(2, 6), 0, 1, 3), torch.select_scatter(x, torch.full((6,), 3.0), 0, -1),
                torch.diagonal(x, 1), torch.diagonal(x.reshape(2, 2, 6), -1, 2, 1),
                torch.fmod(x * 5, 1.5), torch.fmod(torch.arange(-7, 5).reshape(2, 6), 3),
                torch.logical_xor(x > 0, m), torch.log10(x.abs() + 1),
                nn.functional.pad(x.reshape(1, 4, 6), (2, 1), mode="reflect"),
                nn.functional.pad(x.reshape(1, 1, 4, 6), (1, 2, 2, 0), mode="replicate"),
                nn.functional.pad(x.reshape(1, 1, 4, 6), (2, 3, 1, 0), mode="circular"))


@pytest.mark.parametrize("decompose", [False, True])
def test_index_put_scatters_and_core_aten_ops_match_pytorch(decompose):
    """Assignments through index tensors (in front, after a slice, two broadcast together with ``+=``, a bool
    mask, into a slice of a view), slice / select scatters, diagonals, fmod of floats and ints, logical xor,
    log10, reflect / replicate / circular padding -- as torch.export gives them and after ``run_decompositions()`` (the
    core ATen opset: index_put, slice_scatter, constant_pad_nd, reflection_pad1d, ...)."""
    g = torch.Generator().manual_seed(11)
    x, m = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g) > 0
    _against_pytorch(CoreAten(), [x, torch.tensor([0, 2, 1]), m], paths=["decomposed" if decompose else "export"])


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = nn.GRU(3, 5, num_layers=2)
        self.rnn = nn.RNN(3, 4, bidirectional=True)
        self.relu = nn.RNN(3, 4, nonlinearity="relu", batch_first=True)
        self.plain = nn.LSTM(3, 4, bias=False)

    def forward(self, x):
        a, (h, c) = self.lstm(x)
        b, hb = self.gru(x)
        r, hr = self.rnn(x)
        q, hq = self.relu(x)
        e, _ = self.plain(x, (torch.ones(1, 5, 4), torch.zeros(1, 5, 4)))
        return a, h, c, b, hb, r, hr, q, hq, e


@pytest.mark.filterwarnings("ignore:The tensor attributes self")   # (torch.export about nn.RNNBase's _flat_weights)
@pytest.mark.parametrize("how", ["fx", "export", "decomposed"])
def test_lstm_gru_rnn_match_pytorch(how):
    """nn.LSTM (2 layers, bidirectional, batch first), nn.GRU (2 layers), nn.RNN (bidirectional; relu) and an
    LSTM without biases from a given state: outputs and final states, through torch.fx (module calls),
    torch.export (aten.lstm / gru / rnn_tanh) and the decomposed program."""
    torch.manual_seed(0)
    _against_pytorch(Recurrent().eval(), [torch.randn(2, 5, 3)], paths=[how], tol=1e-5)


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.shuffle = nn.ChannelShuffle(3)
        self.drop = nn.Dropout2d(0.3)

    def forward(self, x, y):
        F = nn.functional
        a = F.relu_(x.clone()) + F.leaky_relu_(x.clone(), 0.2) + F.hardtanh_(x.clone()) + F.elu_(x.clone())
        b = self.shuffle(self.drop(x)) + F.channel_shuffle(x, 2) + F.dropout1d(x[0], training=False)
        up = F.upsample_nearest(x, scale_factor=2) + F.upsample_bilinear(x, size=(8, 10)) + F.upsample(
            x, scale_factor=2, mode="bilinear")
        losses = torch.stack([F.mse_loss(x, y), F.l1_loss(x, y, reduction="sum"), F.smooth_l1_loss(x, y, beta=0.5),
                              F.huber_loss(x, y, delta=0.7)])
        return a, b, up, losses, F.mse_loss(x, y, reduction="none"), F.pairwise_distance(x[0, 0], y[0, 0])


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample")   # (deprecated in PyTorch: deliberately used)
def test_functional_extras_match_pytorch():
    """Eval-mode dropouts (identity), in-place activations, channel shuffle (module and function), the
    deprecated upsample functions, regression losses with each reduction, pairwise distance -- through
    torch.fx and torch.export."""
    g = torch.Generator().manual_seed(12)
    x, y = torch.randn(2, 6, 4, 5, generator=g), torch.randn(2, 6, 4, 5, generator=g)
    _against_pytorch(Functional().eval(), [x, y], tol=2e-6)


class GridsAndPools(nn.Module):
    def __init__(self):
        super().__init__()
        self.bilinear = nn.Bilinear(5, 3, 4)
        self.amax = nn.AdaptiveMaxPool2d((3, None))
        self.amax1 = nn.AdaptiveMaxPool1d(2)

    def forward(self, x, k):
        F = nn.functional
        gi, gj = torch.meshgrid(x[0, 0, :, 0], x[0, 0, 0, :3], indexing="ij")
        xi, xj = torch.meshgrid(x[0, 0, :, 0], x[0, 0, 0, :3], indexing="xy")
        return (gi * 2 + gj, xi - xj, torch.frac(x * 3.3), torch.cumprod(x, 3), torch.cumprod(k, 1),
                self.bilinear(x[..., :5], x[..., 1:4]), self.amax(x), self.amax1(x[0]),
                F.adaptive_max_pool2d(x, (2, 5)), F.adaptive_max_pool2d(x, 1), F.adaptive_max_pool2d(x, (4, 2)))


def test_meshgrid_frac_cumprod_bilinear_adaptive_max_pool_match_pytorch():
    """``torch.meshgrid`` (ij and xy), ``frac``, ``cumprod`` (float; int64 from an int32 input, as PyTorch
    promotes), ``nn.Bilinear``, adaptive max pooling to sizes that divide the input (a reshape), that do not
    (PyTorch's overlapping windows: 7 -> 3, 5 -> 2), to 1 and keeping a dim -- through torch.fx and
    torch.export."""
    g = torch.Generator().manual_seed(13)
    x = torch.randn(2, 3, 7, 5, generator=g)
    k = torch.randint(-3, 4, (2, 5), generator=g, dtype=torch.int32)
    _against_pytorch(GridsAndPools().eval(), [x, k], tol=2e-6)


class _NoGradInside(nn.Module):
    """A model whose positional part runs under ``@torch.no_grad()`` (torch.export wraps it in a
    ``wrap_with_set_grad_enabled`` submodule, as HF Speech2Text's sinusoidal positions)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    @torch.no_grad()
    def positions(self, x):
        return torch.sin(x * 0.5) + 1.0

    def forward(self, x):
        return self.lin(x) + self.positions(x)


class _Decomposable(nn.Module):
    """Ops translated through PyTorch's decompositions: ``F.fold`` (aten.col2im), linear interpolation of a
    3-D input (aten.upsample_linear1d), an LSTM with ``proj_size`` (aten.lstm, whose translation refuses the
    projection)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, proj_size=3, batch_first=True)

    def forward(self, x, seq):
        F = nn.functional
        folded = F.fold(x, output_size=(4, 5), kernel_size=(2, 2))
        up = F.interpolate(seq, size=11, mode="linear", align_corners=False)
        return folded, up, self.lstm(seq.transpose(1, 2))[0]


def test_no_grad_submodules_are_inlined_and_missing_ops_decomposed():
    """torch.export programs: a ``@torch.no_grad()`` forward (a ``wrap_with_set_grad_enabled`` submodule) is
    inlined; ATen ops without a translation of their own (col2im, upsample_linear1d) and one whose translation
    refuses its arguments (an LSTM with ``proj_size``) go through PyTorch's decomposition of just those ops;
    against eager PyTorch."""
    torch.manual_seed(0)
    _against_pytorch(_NoGradInside().eval(), [torch.randn(2, 6)], paths=["export"])
    g = torch.Generator().manual_seed(14)
    _against_pytorch(_Decomposable().eval(), [torch.randn(2, 12, 12, generator=g), torch.randn(2, 4, 7, generator=g)],
                     paths=["export"], tol=2e-6)


class OrderStatistics(nn.Module):
    def forward(self, x):
        med = x.median(-1)
        kth = torch.kthvalue(x, 3, dim=1, keepdim=True)
        return med.values, med.indices, kth.values, kth.indices, torch.median(x), x[0].median(0, keepdim=True).values


def test_median_and_kthvalue_match_pytorch():
    """``median`` (the lower median; along a dim with indices, of everything, keepdim) and ``kthvalue`` on
    distinct values, and a row holding a NaN (NaN and the NaN's position, as PyTorch) -- through torch.fx and
    torch.export."""
    x = torch.randperm(60, generator=torch.Generator().manual_seed(15)).float().reshape(3, 4, 5) / 7
    x[1, 2, 3] = float("nan")
    _against_pytorch(OrderStatistics(), [x], exact=True)


class DataDependent(nn.Module):
    """Ops whose result size depends on the values: nonzero / argwhere, one-argument where, boolean mask
    indexing, masked_select and assignment of a tensor of values at a mask (counts bound when the model
    runs); count_nonzero beside them."""

    def forward(self, x, m):
        keep = x > 0
        picked = x[keep] * 2                                   # (n,)
        rows = x[:, m[0] > 0]                                  # a mask on dim 1
        ij = torch.nonzero(x > 0.5)                            # (n2, 3)
        i0, i1, i2 = torch.where(x < -0.5)
        y = x.clone()
        y[keep] = torch.arange(picked.shape[0], dtype=x.dtype)  # values in mask order
        z = x.clone()
        z[:, m[0] > 0] = rows.flip(0) + 1.0
        w = x.clone().index_put_((keep,), picked * 0.5, accumulate=True)   # += values at the mask
        sel = torch.masked_select(x, m[0, :, None] > 0)        # the mask broadcast over the last dim
        counts = torch.count_nonzero(x > 0.3, dim=1) + torch.count_nonzero(m > 0)
        return (picked, picked.sum() + picked.shape[0], rows, ij, i0 + i1 * 10 + i2 * 100, y, z, w, sel,
                torch.argwhere(m < 0), counts)


@pytest.mark.parametrize("seed", [0, 1])
def test_data_dependent_ops_match_pytorch(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 3, generator=g)
    m = torch.randn(2, 5, generator=g)
    _against_pytorch(DataDependent().eval(), [x, m], paths=("export",))
    mod = from_exported_program(torch.export.export(DataDependent().eval(), (x, m)))
    vm = runtime.VirtualMachine(build(mod))
    for xs, ms in ((-torch.ones(2, 5, 3), -torch.ones(2, 5)), (torch.ones(2, 5, 3), torch.ones(2, 5))):
        with torch.no_grad():
            want = DataDependent()(xs, ms)
        got = vm["main"](xs.numpy(), ms.numpy())
        for gv, w in zip(got, want):   # none / every element selected, from the same compiled model
            np.testing.assert_allclose(gv, w.numpy(), rtol=1e-6, atol=1e-6)


class RepeatInterleave(nn.Module):
    def forward(self, x, r):
        return (torch.repeat_interleave(x, r, dim=0) * 2, torch.repeat_interleave(r),
                x.repeat_interleave(torch.tensor([2]), dim=1), torch.repeat_interleave(x[:, :1], r))


def test_repeat_interleave_with_tensor_repeats_matches_pytorch():
    """Tensor repeats (one per element along dim, or one for all; no dim: the flattened tensor) and the
    one-argument form, through torch.export; the same model on other repeats, zeros included."""
    x, r = torch.randn(3, 4), torch.tensor([2, 0, 3])
    _against_pytorch(RepeatInterleave().eval(), [x, r], paths=("export",))
    vm = runtime.VirtualMachine(build(from_exported_program(torch.export.export(RepeatInterleave().eval(), (x, r)))))
    for rr in (torch.tensor([0, 0, 0]), torch.tensor([1, 5, 1])):
        want = RepeatInterleave()(x, rr)
        for g, w in zip(vm["main"](x.numpy(), rr.numpy()), want):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=1e-6)


class Unique(nn.Module):
    def forward(self, x):
        v, inv, c = torch.unique(x, return_inverse=True, return_counts=True)
        return v * 2, inv, c, torch.unique(x[0])


def test_unique_matches_pytorch():
    """torch.unique (aten._unique2 through torch.export): values, inverse in x's shape, counts; other values
    with the same compiled model."""
    x = torch.tensor([[3, 1, 3], [2, 1, 5]])
    _against_pytorch(Unique().eval(), [x], paths=("export",), exact=True)
    vm = runtime.VirtualMachine(build(from_exported_program(torch.export.export(Unique().eval(), (x,)))))
    for xx in (torch.full((2, 3), 7), torch.tensor([[9, 8, 7], [6, 5, 4]])):
        for g, w in zip(vm["main"](xx.numpy()), Unique()(xx)):
            np.testing.assert_array_equal(g, w.numpy())
