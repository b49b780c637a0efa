"""A small ResNet-style CNN (Conv2d, BatchNorm2d in eval mode, ReLU / ReLU6, MaxPool2d, AvgPool2d,
AdaptiveAvgPool2d, a residual add, flatten, Linear) and a 1-D audio-style CNN, imported through torch.fx,
torch.export (with a dynamic batch) and ONNX, compiled and checked against PyTorch / onnxruntime."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")
from torch import nn
import torch.nn.functional as F

import runtime
from builder import compile as build
from builder.frontend import UnsupportedNodeError, from_exported_program, from_fx


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + x)


class TinyResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 5, stride=2, padding=2, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU6()
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.block = Block(8)
        self.avg = nn.AvgPool2d(2, stride=1, ceil_mode=False, count_include_pad=False, padding=1)
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        x = self.pool(self.act(self.bn(self.stem(x))))
        x = self.avg(self.block(x))
        return self.fc(torch.flatten(self.gap(x), 1))


class Audio1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 6, 3, padding=1)
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.bn(self.conv(x))), 2)
        x = F.avg_pool1d(x, 3, stride=2, padding=1)
        return F.adaptive_avg_pool1d(x, 3)


def _trained_stats(model):
    """Non-trivial running statistics (a fresh BatchNorm's are 0 / 1)."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.3)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.randn(m.num_features, generator=g))
            m.bias.data.copy_(torch.randn(m.num_features, generator=g))
    return model.eval()


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    return _trained_stats(TinyResNet())


def _run(mod, *xs):
    vm = runtime.VirtualMachine(build(mod))
    return vm["main"](*xs)


def _torch(model, *xs):
    with torch.no_grad():
        return model(*(torch.from_numpy(x) for x in xs)).numpy()


def test_resnet_from_fx_matches_pytorch(resnet):
    mod = from_fx(torch.fx.symbolic_trace(resnet), [(["n", 3, 32, 32], "float32")])
    vm = runtime.VirtualMachine(build(mod))
    rng = np.random.default_rng(0)
    for n in (1, 3):
        x = rng.standard_normal((n, 3, 32, 32)).astype(np.float32)
        np.testing.assert_allclose(vm["main"](x), _torch(resnet, x), rtol=1e-4, atol=1e-4)


def test_resnet_from_exported_program_with_a_dynamic_batch(resnet):
    batch = torch.export.Dim("batch", min=1, max=16)
    ep = torch.export.export(resnet, (torch.zeros(2, 3, 28, 28),), dynamic_shapes=({0: batch},))
    mod = from_exported_program(ep)
    assert [str(d) for d in mod["main"].params[0].struct_info.shape] == ["batch", "3", "28", "28"]
    vm = runtime.VirtualMachine(build(mod))
    rng = np.random.default_rng(1)
    for n in (1, 4):
        x = rng.standard_normal((n, 3, 28, 28)).astype(np.float32)
        np.testing.assert_allclose(vm["main"](x), _torch(resnet, x), rtol=1e-4, atol=1e-4)


def test_audio_1d_cnn_from_fx_and_export():
    torch.manual_seed(2)
    model = _trained_stats(Audio1d())
    x = np.random.default_rng(2).standard_normal((2, 2, 23)).astype(np.float32)
    want = _torch(model, x)
    got_fx = _run(from_fx(torch.fx.symbolic_trace(model), [([2, 2, 23], "float32")]), x)
    got_ep = _run(from_exported_program(torch.export.export(model, (torch.from_numpy(x),))), x)
    np.testing.assert_allclose(got_fx, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_ep, want, rtol=1e-5, atol=1e-5)


def test_unbatched_pooling_and_ceil_mode_match_pytorch():
    class M(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 3, stride=2, ceil_mode=True) + F.avg_pool2d(x, 3, stride=2, ceil_mode=True)

    x = np.random.default_rng(3).standard_normal((4, 10, 12)).astype(np.float32)
    got = _run(from_fx(torch.fx.symbolic_trace(M()), [([4, 10, 12], "float32")]), x)
    np.testing.assert_allclose(got, _torch(M(), x), rtol=1e-5, atol=1e-5)


def test_batch_norm_in_training_mode_is_refused(resnet):
    model = TinyResNet().train()
    with pytest.raises(UnsupportedNodeError, match="training mode"):
        from_fx(torch.fx.symbolic_trace(model), [([1, 3, 32, 32], "float32")])
    resnet.eval()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")     # torch.onnx's TorchScript exporter
def test_resnet_from_onnx_matches_onnxruntime(resnet):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from builder.frontend import from_onnx

    buf = io.BytesIO()
    torch.onnx.export(resnet, (torch.zeros(1, 3, 32, 32),), buf, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}}, opset_version=17, dynamo=False)
    model = onnx.load_from_string(buf.getvalue())
    vm = runtime.VirtualMachine(build(from_onnx(model)))
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for n in (1, 2):
        x = rng.standard_normal((n, 3, 32, 32)).astype(np.float32)
        np.testing.assert_allclose(vm["main"](x), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


class Upsampler(nn.Module):
    """The decoder side of a U-Net: nearest / bilinear upsampling by factor and to a size; bicubic
    resizing (a ViT's position embeddings at another image size)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.up_corners = nn.Upsample(size=(9, 7), mode="bilinear", align_corners=True)

    def forward(self, x):
        y = F.interpolate(self.conv(x), scale_factor=2, mode="nearest")
        z = self.up(x)
        w = F.interpolate(x, size=(7, 11), mode="nearest-exact")
        c = F.interpolate(x, size=(4, 9), mode="bicubic") + F.interpolate(x, scale_factor=2, mode="bicubic",
                                                                          align_corners=True)[:, :, :4, :9]
        return y, z, self.up_corners(x), w, c


def test_upsampling_from_fx_and_export():
    torch.manual_seed(3)
    model = Upsampler().eval()
    x = np.random.default_rng(5).standard_normal((2, 3, 5, 6)).astype(np.float32)
    with torch.no_grad():
        want = [v.numpy() for v in model(torch.from_numpy(x))]
    for mod in (from_fx(torch.fx.symbolic_trace(model), [((2, 3, 5, 6), "float32")]),
                from_exported_program(torch.export.export(model, (torch.from_numpy(x),)))):
        got = _run(mod, x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


class SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(self.pool(x)))))


class InvertedResidual(nn.Module):
    """MobileNetV3's block: 1x1 expansion, depthwise k x k (groups = channels), squeeze-and-excite,
    1x1 projection, hardswish, a residual when the shape allows."""

    def __init__(self, cin, exp, cout, k, s):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(exp, exp, k, s, k // 2, groups=exp, bias=False), nn.BatchNorm2d(exp),
                                nn.Hardswish())
        self.se = SqueezeExcite(exp)
        self.project = nn.Sequential(nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.res = s == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.res else y


def test_mobilenet_v3_style_blocks_match_pytorch():
    """Depthwise convolutions (the reference loops), squeeze-and-excite (adaptive pooling, a per-channel
    product with the GEMM-lowered convolutions' NHWC values), hardswish / hardsigmoid; BatchNorm statistics
    calibrated on data so that activations keep their scale."""
    torch.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish(),
                          InvertedResidual(16, 64, 24, 3, 2), InvertedResidual(24, 72, 24, 3, 1),
                          InvertedResidual(24, 96, 40, 5, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(40, 10))
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(8, 3, 48, 48))
    model.eval()
    x = np.random.default_rng(6).standard_normal((2, 3, 48, 48)).astype(np.float32)
    want = _torch(model, x)
    assert np.abs(want[0] - want[1]).max() > 1e-2        # the features carry the input
    got = _run(from_fx(torch.fx.symbolic_trace(model), [(["n", 3, 48, 48], "float32")]), x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_grouped_convolutions_with_constant_weights():
    """ResNeXt-style grouped 3 x 3 convolutions between 1 x 1 ones, weights bound as constants (each group's
    slice of the weight made at build time): deep groups on per-group GEMMs, shallow ones in the loops."""
    torch.manual_seed(7)
    model = nn.Sequential(nn.Conv2d(8, 32, 1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1, groups=4), nn.ReLU(),
                          nn.Conv2d(32, 32, 3, padding=1, groups=8, bias=False), nn.Conv2d(32, 8, 1)).eval()
    x = np.random.default_rng(8).standard_normal((2, 8, 10, 12)).astype(np.float32)
    got = _run(from_fx(torch.fx.symbolic_trace(model), [(["n", 8, 10, 12], "float32")]), x)
    np.testing.assert_allclose(got, _torch(model, x), rtol=1e-4, atol=1e-4)
