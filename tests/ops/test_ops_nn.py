"""Neural-network functional ops (issue 3, part B) end to end: the printed IR line of each op as
TVM spells it, struct-info errors, and ``Module.jit`` results against float64 numpy references
written from the PyTorch / diffusers definitions, with symbolic dims bound to several sizes."""
import math

import numpy as np
import pytest

import runtime
from builder import te
from builder.ir.expr import Var
from builder.nn import op
from builder.nn.core import Tensor
from builder.te import topi
from builder.transform import LegalizeOps
from helpers.conv_refs import conv2d_ref, conv_transpose2d_ref
from helpers.functional import export, exported, jit

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def close(got, want, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def has_line(text: str, line: str) -> None:
    assert line in [ln.strip() for ln in text.splitlines()], text


# ---------------------------------------------------------------------------------------------
# float64 references (PyTorch definitions)


def conv_transpose1d_ref(x, w, b=None, stride=1, pad=(0, 0), out_pad=0, dil=1, groups=1):
    """torch.nn.functional.conv_transpose1d as a scatter: every input element adds
    ``x * w[c, o, k]`` at position ``i*stride + k*dil``, then the padding is cropped."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, width = x.shape
    _, og, k = w.shape
    cg = c // groups
    full = (width - 1) * stride + dil * (k - 1) + 1 + out_pad
    out = np.zeros((n, og * groups, full))
    for ch in range(c):
        g = ch // cg
        for kk in range(k):
            for i in range(width):
                out[:, g * og:(g + 1) * og, i * stride + kk * dil] += x[:, ch, i][:, None] * w[ch, :, kk]
    out_w = full - pad[0] - pad[1]
    out = out[:, :, pad[0]:pad[0] + out_w]
    if b is not None:
        out += b.astype(np.float64)[None, :, None]
    return out


def group_norm_ref(x, g, weight, bias, eps):
    """torch.nn.functional.group_norm on (N, C, *)."""
    x = x.astype(np.float64)
    n, c = x.shape[:2]
    xg = x.reshape(n, g, -1)
    mean = xg.mean(-1, keepdims=True)
    var = xg.var(-1, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * weight.reshape(shape) + bias.reshape(shape)


def _src_linear(out, n_in, align):
    i = np.arange(out, dtype=np.float64)
    if align:
        src = i * ((n_in - 1) / (out - 1)) if out > 1 else np.zeros(out)
    else:
        src = np.maximum((i + 0.5) * (n_in / out) - 0.5, 0.0)
    i0 = np.floor(src).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, src - i0


def _cubic_ref(x, size, align, a=-0.75):
    """Bicubic resizing in float64, one axis at a time: Keys' cubic convolution kernel (a = -0.75 as
    PyTorch) over the 4 taps around the unclamped source coordinate, edge pixels repeated."""
    def kernel(d):
        d = np.abs(d)
        return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                        np.where(d < 2, a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a, 0.0))

    def along(v, axis, out):
        n = v.shape[axis]
        i = np.arange(out, dtype=np.float64)
        if align:
            src = i * ((n - 1) / (out - 1)) if out > 1 else np.zeros(out)
        else:
            src = (i + 0.5) * (n / out) - 0.5
        base = np.floor(src).astype(np.int64)
        res = 0.0
        for k in range(-1, 3):
            taps = np.take(v, np.clip(base + k, 0, n - 1), axis=axis)
            shape = [1] * v.ndim
            shape[axis] = out
            res = res + taps * kernel(src - (base + k)).reshape(shape)
        return res

    return along(along(x, 2, size[0]), 3, size[1])


def interpolate_ref(x, size, mode, align_corners=False):
    """torch.nn.functional.interpolate(x, size) for 'nearest', 'bilinear' and 'bicubic'."""
    x = x.astype(np.float64)
    h, w = x.shape[2:]
    oh, ow = size
    if mode == "bicubic":
        return _cubic_ref(x, size, align_corners)
    if mode == "nearest":
        iy = np.minimum(np.floor(np.arange(oh) * (h / oh)).astype(np.int64), h - 1)
        ix = np.minimum(np.floor(np.arange(ow) * (w / ow)).astype(np.int64), w - 1)
        return x[:, :, iy][:, :, :, ix]
    y0, y1, ly = _src_linear(oh, h, align_corners)
    x0, x1, lx = _src_linear(ow, w, align_corners)
    ly, lx = ly[:, None], lx[None, :]

    def at(yi, xi):
        return x[:, :, yi][:, :, :, xi]

    top = at(y0, x0) * (1 - lx) + at(y0, x1) * lx
    bottom = at(y1, x0) * (1 - lx) + at(y1, x1) * lx
    return top * (1 - ly) + bottom * ly


def sdpa_ref(q, k, v, causal=False, scale=None):
    """torch.nn.functional.scaled_dot_product_attention on (B, S, H, D) inputs (transposed to
    (B, H, S, D)); key / value heads repeat for grouped-query attention."""
    q, k, v = (a.astype(np.float64).transpose(0, 2, 1, 3) for a in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.tril(np.ones((sq, sk), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3)


def timestep_ref(t, dim, flip=False, shift=1.0, scale=1.0, max_period=10000):
    """diffusers.models.embeddings.get_timestep_embedding."""
    half = dim // 2
    exponent = -math.log(max_period) * np.arange(half, dtype=np.float64) / (half - shift)
    emb = scale * t.astype(np.float64)[:, None] * np.exp(exponent)[None, :]
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=-1)
    if flip:
        emb = np.concatenate([emb[:, half:], emb[:, :half]], axis=-1)
    if dim % 2 == 1:
        emb = np.pad(emb, ((0, 0), (0, 1)))
    return emb


# ---------------------------------------------------------------------------------------------
# elementwise


UNARY = [
    ("sigmoid", lambda a: 1 / (1 + np.exp(-a)), "R.sigmoid"),
    ("tanh", np.tanh, "R.tanh"),
    ("exp", np.exp, "R.exp"),
    ("log", np.log, "R.log"),
    ("sqrt", np.sqrt, "R.sqrt"),
    ("rsqrt", lambda a: 1 / np.sqrt(a), "R.rsqrt"),
    ("sin", np.sin, "R.sin"),
    ("cos", np.cos, "R.cos"),
    ("negative", np.negative, "R.negative"),
]


def test_elementwise_print_and_numeric():
    def fn(x):
        return tuple(getattr(op, name)(x) for name, _, _ in UNARY)

    text = export(fn, x=(["n", 3], "float32"))
    for name, _, spelled in UNARY:
        has_line(text, f'{name}: R.Tensor((n, 3), dtype="float32") = {spelled}(x)')
    f = jit(fn, x=(["n", 3], "float32"))
    for n in (1, 7):
        x = RNG.uniform(0.1, 3.0, (n, 3)).astype("float32")
        for got, (name, ref, _) in zip(f(x), UNARY):
            close(got, ref(x.astype(np.float64)), rtol=2e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# conv2d


def test_conv2d_print_matches_tvm():
    text = export(lambda x, w, b: op.conv2d(x, w, b), x=([1, 3, 32, 32], "float32"),
                  w=([32, 3, 3, 3], "float32"), b=([32], "float32"))
    has_line(text, 'lv: R.Tensor((1, 32, 30, 30), dtype="float32") = R.nn.conv2d(x, w, '
                   'strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, '
                   'data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW", out_dtype="void")')
    has_line(text, 'lv1: R.Tensor((1, 32, 1, 1), dtype="float32") = R.reshape(b, R.shape([1, 32, 1, 1]))')
    has_line(text, 'conv2d: R.Tensor((1, 32, 30, 30), dtype="float32") = R.add(lv, lv1)')


@pytest.mark.parametrize("kw", [
    dict(stride=1, padding=1),
    dict(stride=2, padding=(1, 2), dilation=(1, 2)),
    dict(stride=(2, 1), padding=(0, 1, 2, 0), groups=2),
])
def test_conv2d_numeric_symbolic(kw):
    groups = kw.get("groups", 1)
    f = jit(lambda x, w, b: op.conv2d(x, w, b, **kw), x=(["n", 4, "h", "w"], "float32"),
            w=([6, 4 // groups, 3, 3], "float32"), b=([6], "float32"))
    w, b = rand(6, 4 // groups, 3, 3), rand(6)
    p = kw.get("padding", 0)     # TVM's [top, left, bottom, right] from an int, (pH, pW) or 4 ints
    pad = [p] * 4 if isinstance(p, int) else list(p) * (2 if len(p) == 2 else 1)
    stride = tuple(np.broadcast_to(kw.get("stride", 1), 2))
    dil = tuple(np.broadcast_to(kw.get("dilation", 1), 2))
    for n, h, wd in ((1, 9, 11), (3, 13, 6)):
        x = rand(n, 4, h, wd)
        close(f(x, w, b), conv2d_ref(x, w, b, stride, pad, dil, groups), atol=3e-5)


def test_conv2d_same_padding_and_float16():
    f = jit(lambda x, w: op.conv2d(x, w, padding="same", dilation=2),
            x=([2, 3, "h", 10], "float16"), w=([5, 3, 3, 2], "float16"))
    w = rand(5, 3, 3, 2, dtype="float16")
    x = rand(2, 3, 7, 10, dtype="float16")
    y = f(x, w)
    assert y.dtype == np.float16 and y.shape == (2, 5, 7, 10)
    close(y, conv2d_ref(x, w, None, (1, 1), (2, 1, 2, 1), (2, 2)), rtol=2e-3, atol=2e-2)


def test_conv2d_errors_name_both_sides():
    with pytest.raises(ValueError, match=r"\(1, 3, 8, 8\).*has 3 channels.*\(4, 2, 3, 3\)"):
        export(lambda x, w: op.conv2d(x, w), x=([1, 3, 8, 8], "float32"), w=([4, 2, 3, 3], "float32"))
    with pytest.raises(TypeError, match="data dtype float32 differs from weight dtype float16"):
        export(lambda x, w: op.conv2d(x, w), x=([1, 3, 8, 8], "float32"), w=([4, 3, 3, 3], "float16"))
    with pytest.raises(ValueError, match="output height would be -1"):
        export(lambda x, w: op.conv2d(x, w), x=([1, 3, 1, 8], "float32"), w=([4, 3, 3, 3], "float32"))
    with pytest.raises(ValueError, match="needs stride 1"):
        export(lambda x, w: op.conv2d(x, w, stride=2, padding="same"), x=([1, 3, 8, 8], "float32"),
               w=([4, 3, 3, 3], "float32"))
    # a norm over a repeated axis says so (not a shape mismatch of its weight)
    with pytest.raises(ValueError, match=r"relax.nn.rms_norm: axes \[-1, -1\] repeat a dim of input \(2, 12\)"):
        export(lambda x, w: op.rms_norm(x, w, axes=[-1, -1]), x=([2, 12], "float32"), w=([12, 12], "float32"))
    # a rule without its own message for it still names the op
    with pytest.raises(ValueError, match=r"^relax.nn.conv1d: the input of length 3 \(padded to 3\) is shorter than the dilated kernel "
                                         r"\(13 = dilation 2 x \(kernel 7 - 1\) \+ 1\)$"):
        export(lambda x, w: op.conv1d(x, w, dilation=2), x=([1, 1, 3], "float32"), w=([1, 1, 7], "float32"))


# ---------------------------------------------------------------------------------------------
# conv1d_transpose


def test_conv1d_transpose_print():
    text = export(lambda x, w, b: op.conv1d_transpose(x, w, b, stride=2, padding=1, output_padding=1),
                  x=(["n", 4, 10], "float32"), w=([4, 3, 3], "float32"), b=([3], "float32"))
    has_line(text, 'lv: R.Tensor((n, 3, 20), dtype="float32") = R.nn.conv1d_transpose(x, w, '
                   'strides=[2], padding=[1, 1], output_padding=[1], dilation=[1], groups=1, '
                   'data_layout="NCW", kernel_layout="IOW", out_layout="NCW", out_dtype="void")')
    has_line(text, 'conv1d_transpose: R.Tensor((n, 3, 20), dtype="float32") = R.add(lv, lv1)')


@pytest.mark.parametrize("stride,pad,out_pad,dil,groups", [
    (1, (0, 0), 0, 1, 1), (2, (1, 1), 1, 1, 1), (3, (2, 0), 0, 2, 2)])
def test_conv1d_transpose_numeric_symbolic(stride, pad, out_pad, dil, groups):
    f = jit(lambda x, w, b: op.conv1d_transpose(x, w, b, stride=stride, padding=pad,
                                                output_padding=out_pad, dilation=dil,
                                                groups=groups),
            x=(["n", 4, "w"], "float32"), w=([4, 3, 3], "float32"), b=([3 * groups], "float32"))
    w, b = rand(4, 3, 3), rand(3 * groups)
    for n, width in ((1, 1), (2, 9), (3, 13)):
        x = rand(n, 4, width)
        close(f(x, w, b), conv_transpose1d_ref(x, w, b, stride, pad, out_pad, dil, groups))


def test_conv1d_transpose_errors():
    with pytest.raises(ValueError, match=r"data \(1, 4, 8\) has 4 channels but weight \(5, 3, 3\)"):
        export(lambda x, w: op.conv1d_transpose(x, w), x=([1, 4, 8], "float32"), w=([5, 3, 3], "float32"))
    with pytest.raises(ValueError, match="output_padding 2 must be smaller than the stride 2"):
        export(lambda x, w: op.conv1d_transpose(x, w, stride=2, output_padding=2),
               x=([1, 4, 8], "float32"), w=([4, 3, 3], "float32"))
    with pytest.raises(ValueError, match="not divisible by groups=3"):
        export(lambda x, w: op.conv1d_transpose(x, w, groups=3), x=([1, 4, 8], "float32"),
               w=([4, 3, 3], "float32"))


# ---------------------------------------------------------------------------------------------
# group_norm


def test_group_norm_print_matches_tvm():
    text = export(lambda x, b: op.group_norm(x, num_groups=1, weight=b, bias=b),
                  x=([2, 3, 4, 5], "float32"), b=([3], "float32"))
    has_line(text, 'group_norm: R.Tensor((2, 3, 4, 5), dtype="float32") = R.nn.group_norm(x, b, b, '
                   'num_groups=1, channel_axis=1, axes=[2, 3], epsilon=1.0000000000000001e-05, '
                   'center=True, scale=True)')


def test_group_norm_numeric_symbolic():
    f = jit(lambda x, w, b: op.group_norm(x, 3, w, b, eps=1e-6), x=(["n", 6, "l"], "float32"),
            w=([6], "float32"), b=([6], "float32"))
    w, b = rand(6), rand(6)
    for n, length in ((1, 1), (2, 5), (3, 17)):
        x = rand(n, 6, length) * 3 + 1
        close(f(x, w, b), group_norm_ref(x, 3, w, b, 1e-6), atol=2e-5)


def test_group_norm_channels_last_and_defaults():
    f = jit(lambda x: op.group_norm(x, 2, None, None, channel_axis=-1, axes=[1, 2]),
            x=(["n", 3, 5, 4], "float32"))
    x = rand(2, 3, 5, 4)
    want = group_norm_ref(x.transpose(0, 3, 1, 2), 2, np.ones(4), np.zeros(4), 1e-5)
    close(f(x), want.transpose(0, 2, 3, 1), atol=2e-5)


def test_group_norm_errors():
    with pytest.raises(ValueError, match=r"6 channels \(axis 1 of \(2, 6, 4\)\) are not divisible by num_groups=4"):
        export(lambda x: op.group_norm(x, 4, None, None), x=([2, 6, 4], "float32"))
    with pytest.raises(ValueError, match=r"gamma shape \(5,\) does not match the normalized dims \(6,\)"):
        export(lambda x, w: op.group_norm(x, 2, w, w), x=([2, 6, 4], "float32"), w=([5], "float32"))


# ---------------------------------------------------------------------------------------------
# interpolate -> R.image.resize2d


def test_interpolate_print():
    text = export(lambda x: op.interpolate(x, size=[40, 40]), x=([1, 3, 32, 32], "float32"))
    has_line(text, 'interpolate: R.Tensor((1, 3, 40, 40), dtype="float32") = R.image.resize2d(x, '
                   'R.shape([40, 40]), roi=[T.float32(0), T.float32(0), T.float32(0), T.float32(0)], '
                   'layout="NCHW", method="nearest_neighbor", coordinate_transformation_mode="asymmetric", '
                   'rounding_method="floor", cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0, '
                   'out_dtype="void")')
    text = export(lambda x: op.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
                  x=(["n", 3, "h", 5], "float32"))
    has_line(text, 'interpolate: R.Tensor((n, 3, h * 2, 10), dtype="float32") = R.image.resize2d(x, '
                   'R.shape([h * 2, 10]), roi=[T.float32(0), T.float32(0), T.float32(0), T.float32(0)], '
                   'layout="NCHW", method="linear", coordinate_transformation_mode="align_corners", '
                   'rounding_method="round", cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0, '
                   'out_dtype="void")')


@pytest.mark.parametrize("mode,align", [("nearest", None), ("bilinear", False), ("bilinear", True),
                                        ("bicubic", False), ("bicubic", True)])
def test_interpolate_numeric_size(mode, align):
    f = jit(lambda x: op.interpolate(x, size=(7, 12), mode=mode, align_corners=align),
            x=(["n", 2, "h", "w"], "float32"))
    for n, h, w in ((1, 1, 1), (2, 5, 3), (1, 9, 13), (1, 14, 24)):
        x = rand(n, 2, h, w)
        close(f(x), interpolate_ref(x, (7, 12), mode, bool(align)))


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_interpolate_numeric_scale_factor_symbolic(mode):
    f = jit(lambda x: op.interpolate(x, scale_factor=(2, 3), mode=mode), x=([1, 2, "h", "w"], "float32"))
    for h, w in ((1, 1), (3, 5), (4, 9)):
        x = rand(1, 2, h, w)
        y = f(x)
        assert y.shape == (1, 2, 2 * h, 3 * w)
        close(y, interpolate_ref(x, (2 * h, 3 * w), mode))


def test_interpolate_bicubic_attrs_and_exclude_outside():
    """bicubic prints method="cubic" with its kernel's a (-0.75 as PyTorch unless given); with
    cubic_exclude the taps past the border weigh 0 and the rest are renormalized (ONNX's
    exclude_outside), which a constant image keeps constant where edge repetition would too."""
    text = export(lambda x: op.interpolate(x, size=[6, 6], mode="bicubic"), x=([1, 1, 4, 4], "float32"))
    assert ('method="cubic", coordinate_transformation_mode="half_pixel", rounding_method="round", '
            'cubic_alpha=-0.75, cubic_exclude=0') in text, text
    f = jit(lambda x: op.interpolate(x, size=(7, 3), mode="bicubic", cubic_alpha=-0.5, cubic_exclude=True),
            x=([1, 1, 5, 4], "float32"))
    x = rand(1, 1, 5, 4)
    got = f(x)

    def excl(v, axis, out, a=-0.5):   # float64: outside taps dropped, weights renormalized
        n = v.shape[axis]
        src = (np.arange(out) + 0.5) * (n / out) - 0.5
        base = np.floor(src).astype(np.int64)
        num, den = 0.0, 0.0
        for k in range(-1, 3):
            j = base + k
            d = np.abs(src - j)
            wk = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1, a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a)
            wk = np.where((j >= 0) & (j < n), wk, 0.0)
            shape = [1] * v.ndim
            shape[axis] = out
            num = num + np.take(v, np.clip(j, 0, n - 1), axis=axis) * wk.reshape(shape)
            den = den + wk.reshape(shape)
        return num / den

    close(got, excl(excl(x.astype(np.float64), 2, 7), 3, 3))
    assert not np.allclose(got, _cubic_ref(x.astype(np.float64), (7, 3), False, a=-0.5), atol=1e-4)


def test_interpolate_errors():
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        export(lambda x: op.interpolate(x), x=([1, 2, 4, 4], "float32"))
    with pytest.raises(ValueError, match="mode must be"):
        export(lambda x: op.interpolate(x, size=8, mode="area"), x=([1, 2, 4, 4], "float32"))
    with pytest.raises(ValueError, match="align_corners can only be set"):
        export(lambda x: op.interpolate(x, size=8, align_corners=True), x=([1, 2, 4, 4], "float32"))
    with pytest.raises(ValueError, match="non-integer factor 1.5"):
        export(lambda x: op.interpolate(x, scale_factor=1.5), x=([1, 2, "h", 4], "float32"))
    with pytest.raises(ValueError, match="antialias"):
        export(lambda x: op.interpolate(x, size=8, antialias=True), x=([1, 2, 4, 4], "float32"))


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention -> R.nn.attention


def test_sdpa_print_matches_tvm():
    text = export(lambda q, k, v: op.scaled_dot_product_attention(q, k, v),
                  q=([1, 32, 32, 32], "float32"), k=([1, 32, 32, 32], "float32"),
                  v=([1, 32, 32, 32], "float32"))
    has_line(text, 'scaled_dot_product_attention: R.Tensor((1, 32, 32, 32), dtype="float32") = '
                   'R.nn.attention(q, k, v, scale=None, causal_mask=None, window_size=None)')
    text = export(lambda q, k, v: op.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5),
                  q=([1, "s", 4, 8], "float32"), k=([1, "t", 2, 8], "float32"),
                  v=([1, "t", 2, 6], "float32"))
    has_line(text, 'scaled_dot_product_attention: R.Tensor((1, s, 4, 6), dtype="float32") = '
                   'R.nn.attention(q, k, v, scale=T.float32(0.5), causal_mask="TopLeft", window_size=None)')


def test_sdpa_causal_numeric_symbolic():
    f = jit(lambda q, k, v: op.scaled_dot_product_attention(q, k, v, is_causal=True),
            q=(["b", "s", 4, 8], "float32"), k=(["b", "s", 4, 8], "float32"),
            v=(["b", "s", 4, 5], "float32"))
    for b, s in ((1, 1), (2, 7), (1, 13)):
        q, k, v = rand(b, s, 4, 8), rand(b, s, 4, 8), rand(b, s, 4, 5)
        close(f(q, k, v), sdpa_ref(q, k, v, causal=True))


def test_sdpa_grouped_query_cross_lengths_scale_float16():
    f = jit(lambda q, k, v: op.scaled_dot_product_attention(q, k, v, scale=0.3),
            q=([2, "s", 6, 4], "float16"), k=([2, "t", 2, 4], "float16"), v=([2, "t", 2, 3], "float16"))
    for s, t in ((1, 5), (3, 1), (5, 9)):
        q, k, v = (rand(2, s, 6, 4, dtype="float16"), rand(2, t, 2, 4, dtype="float16"),
                   rand(2, t, 2, 3, dtype="float16"))
        y = f(q, k, v)
        assert y.dtype == np.float16
        close(y, sdpa_ref(q, k, v, scale=0.3), rtol=2e-3, atol=2e-3)
    # no keys: zeros, as PyTorch's math attention (an empty softmax times an empty v), not 0 / 0
    y = f(rand(2, 3, 6, 4, dtype="float16"), rand(2, 0, 2, 4, dtype="float16"), rand(2, 0, 2, 3, dtype="float16"))
    assert y.shape == (2, 3, 6, 3) and not y.any()
    # a NaN in the scores still propagates
    k = rand(2, 4, 2, 4, dtype="float16")
    k[0, 1, 0, 0] = np.nan
    y = f(rand(2, 3, 6, 4, dtype="float16"), k, rand(2, 4, 2, 3, dtype="float16"))
    assert np.isnan(y[0, :, :3]).all() and not np.isnan(y[0, :, 3:]).any()   # heads of kv head 0


def test_sdpa_errors():
    with pytest.raises(ValueError, match=r"head dim of query \(1, 4, 2, 8\) is 8 but the head dim of key \(1, 4, 2, 6\) is 6"):
        export(lambda q, k: op.scaled_dot_product_attention(q, k, k), q=([1, 4, 2, 8], "float32"),
               k=([1, 4, 2, 6], "float32"))
    with pytest.raises(ValueError, match=r"number of heads of query \(1, 4, 3, 8\) \(3\) is not a multiple"):
        export(lambda q, k: op.scaled_dot_product_attention(q, k, k), q=([1, 4, 3, 8], "float32"),
               k=([1, 4, 2, 8], "float32"))
    with pytest.raises(ValueError, match="query must be 4-D"):
        export(lambda q: op.scaled_dot_product_attention(q, q, q), q=([4, 2, 8], "float32"))
    with pytest.raises(ValueError, match="attn_mask must have 1 to 4 dims"):
        export(lambda q, m: op.scaled_dot_product_attention(q, q, q, attn_mask=m), q=([1, 4, 2, 8], "float32"),
               m=([1, 1, 1, 4, 4], "bool"))
    with pytest.raises(TypeError, match="attn_mask must be bool or have query's dtype float32, got int32"):
        export(lambda q, m: op.scaled_dot_product_attention(q, q, q, attn_mask=m), q=([1, 4, 2, 8], "float32"),
               m=([4, 4], "int32"))
    with pytest.raises(ValueError, match=r"bias \(1, 1, 4, 5\) must be 4-D .* = \(1, 2, 4, 4\)"):
        export(lambda q, m: op.scaled_dot_product_attention(q, q, q, attn_mask=m), q=([1, 4, 2, 8], "float32"),
               m=([4, 5], "bool"))
    with pytest.raises(ValueError, match="either is_causal=True"):
        export(lambda q: op.scaled_dot_product_attention(q, q, q, is_causal=True, causal_mask="TopLeft"),
               q=([1, 4, 2, 8], "float32"))
    with pytest.raises(ValueError, match="causal_mask must be None, 'TopLeft' or 'BottomRight', got 'Lower'"):
        export(lambda q: op.scaled_dot_product_attention(q, q, q, causal_mask="Lower"), q=([1, 4, 2, 8], "float32"))


def masked_sdpa_ref(q, k, v, mask=None, causal=None, scale=None):
    """torch.nn.functional.scaled_dot_product_attention (PyTorch >= 2.5 math backend) with an
    attention mask broadcast to (B, H, Sq, Sk) (bool: True attends; float: added) and a causal
    alignment ("TopLeft": j <= i, "BottomRight": j <= i + Sk - Sq); rows with every key masked
    give 0 (``_safe_softmax``). Inputs (B, S, H, D), float64 throughout."""
    q, k, v = (a.astype(np.float64).transpose(0, 2, 1, 3) for a in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    sq, sk = s.shape[-2:]
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask.astype(np.float64)
    if causal is not None:
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq if causal == "BottomRight" else 0)
        s = np.where(keep, s, -np.inf)
    dead = np.isneginf(s).all(-1, keepdims=True)
    m = np.where(dead, 0.0, s.max(-1, keepdims=True))
    p = np.exp(s - m)
    p = np.where(dead, 0.0, p / np.where(dead, 1.0, p.sum(-1, keepdims=True)))
    return (p @ v).transpose(0, 2, 1, 3)


def test_sdpa_mask_print_matches_tvm():
    text = export(lambda q, m: op.scaled_dot_product_attention(q, q, q, attn_mask=m, causal_mask="BottomRight"),
                  q=([1, 4, 2, 8], "float32"), m=([1, 2, 4, 4], "float32"))
    has_line(text, 'scaled_dot_product_attention: R.Tensor((1, 4, 2, 8), dtype="float32") = '
                   'R.nn.attention(q, q, q, m, scale=None, causal_mask="BottomRight", window_size=None)')
    from builder.ir.parser import parse
    assert parse(text).script() == text


def test_sdpa_bool_padding_mask_symbolic():
    f = jit(lambda q, k, v, m: op.scaled_dot_product_attention(q, k, v, attn_mask=m),
            q=(["b", "s", 4, 8], "float32"), k=(["b", "s", 2, 8], "float32"),
            v=(["b", "s", 2, 5], "float32"), m=(["b", 1, 1, "s"], "bool"))
    for b, s in ((1, 1), (2, 6), (3, 9)):
        q, k, v = rand(b, s, 4, 8), rand(b, s, 2, 8), rand(b, s, 2, 5)
        m = RNG.random((b, 1, 1, s)) < 0.7
        m[0, 0, 0, 0] = True
        if b > 1:
            m[1] = False       # a fully padded sequence: zeros, as PyTorch's _safe_softmax
        close(f(q, k, v, m), masked_sdpa_ref(q, k, v, m))
        if b > 1:
            assert not np.asarray(f(q, k, v, m))[1].any()


def test_sdpa_float_mask_2d_3d_with_causal():
    f2 = jit(lambda q, k, v, m: op.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True),
             q=([2, "s", 2, 4], "float32"), k=([2, "s", 2, 4], "float32"), v=([2, "s", 2, 3], "float32"),
             m=(["s", "s"], "float32"))
    f3 = jit(lambda q, k, v, m: op.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.7),
             q=([2, 5, 2, 4], "float32"), k=([2, 7, 2, 4], "float32"), v=([2, 7, 2, 3], "float32"),
             m=([2, 5, 7], "float32"))
    for s in (1, 5):
        q, k, v, m = rand(2, s, 2, 4), rand(2, s, 2, 4), rand(2, s, 2, 3), rand(s, s)
        close(f2(q, k, v, m), masked_sdpa_ref(q, k, v, m, causal="TopLeft"))
    q, k, v, m = rand(2, 5, 2, 4), rand(2, 7, 2, 4), rand(2, 7, 2, 3), rand(2, 5, 7)
    m[0, 1, :] = -np.inf            # a fully masked row of a float mask: zeros too
    close(f3(q, k, v, m), masked_sdpa_ref(q, k, v, m, scale=0.7))


def test_sdpa_bottom_right_kv_cache_gqa_mask():
    f = jit(lambda q, k, v, m: op.scaled_dot_product_attention(q, k, v, attn_mask=m, causal_mask="BottomRight"),
            q=(["b", "n", 6, 4], "float64"), k=(["b", "t", 2, 4], "float64"), v=(["b", "t", 2, 3], "float64"),
            m=(["b", 6, "n", "t"], "bool"))
    for b, n, t in ((1, 1, 4), (2, 3, 7), (1, 4, 4)):
        q, k, v = rand(b, n, 6, 4, dtype="float64"), rand(b, t, 2, 4, dtype="float64"), rand(b, t, 2, 3, dtype="float64")
        m = RNG.random((b, 6, n, t)) < 0.8
        close(f(q, k, v, m), masked_sdpa_ref(q, k, v, m, causal="BottomRight"), rtol=1e-10, atol=1e-10)
    # bottom-right without a mask, more queries than keys: the first Sq - Sk rows see no key -> 0
    g = jit(lambda q, k, v: op.scaled_dot_product_attention(q, k, v, causal_mask="BottomRight"),
            q=([1, "n", 2, 4], "float32"), k=([1, "t", 2, 4], "float32"), v=([1, "t", 2, 3], "float32"))
    for n, t in ((3, 8), (5, 3)):
        q, k, v = rand(1, n, 2, 4), rand(1, t, 2, 4), rand(1, t, 2, 3)
        close(g(q, k, v), masked_sdpa_ref(q, k, v, causal="BottomRight"))


def test_sdpa_float16_bool_mask():
    f = jit(lambda q, k, v, m: op.scaled_dot_product_attention(q, k, v, attn_mask=m),
            q=([1, 3, 2, 4], "float16"), k=([1, 5, 2, 4], "float16"), v=([1, 5, 2, 4], "float16"),
            m=([3, 5], "bool"))
    q, k, v = (rand(1, 3, 2, 4, dtype="float16"), rand(1, 5, 2, 4, dtype="float16"),
               rand(1, 5, 2, 4, dtype="float16"))
    m = np.array([[1, 0, 1, 0, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 0]], bool)
    y = f(q, k, v, m)
    assert y.dtype == np.float16
    close(y, masked_sdpa_ref(q, k, v, m), rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------------------------------------
# get_timestep_embedding (composed of manipulation ops, as TVM emits it)


def test_timestep_embedding_print_matches_tvm():
    text = export(lambda x: op.get_timestep_embedding(x, 10), x=([3], "float32"))
    for line in [
        'lv: R.Tensor((3,), dtype="float32") = R.astype(x, dtype="float32")',
        'lv1: R.Tensor((3, 1), dtype="float32") = R.expand_dims(lv, axis=[1])',
        'lv2: R.Tensor((5,), dtype="float32") = R.arange(R.prim_value(0), R.prim_value(5), '
        'R.prim_value(1), dtype="float32")',
        'lv3: R.Tensor((5,), dtype="float32") = R.multiply(R.const(-9.2103404998779297, "float32"), lv2)',
        'lv4: R.Tensor((5,), dtype="float32") = R.divide(lv3, R.const(4, "float32"))',
        'lv5: R.Tensor((5,), dtype="float32") = R.exp(lv4)',
        'lv6: R.Tensor((1, 5), dtype="float32") = R.expand_dims(lv5, axis=[0])',
        'lv7: R.Tensor((3, 5), dtype="float32") = R.multiply(lv1, lv6)',
        'lv8: R.Tensor((3, 5), dtype="float32") = R.sin(lv7)',
        'lv9: R.Tensor((3, 5), dtype="float32") = R.cos(lv7)',
        'lv10: R.Tensor((3, 10), dtype="float32") = R.concat((lv8, lv9), axis=-1)',
        'get_timestep_embedding: R.Tensor((3, 10), dtype="float32") = R.astype(lv10, dtype="float32")',
    ]:
        has_line(text, line)


@pytest.mark.parametrize("dim,flip,shift,scale", [(10, False, 1.0, 1.0), (7, True, 0.0, 2.5)])
def test_timestep_embedding_numeric(dim, flip, shift, scale):
    f = jit(lambda x: op.get_timestep_embedding(x, dim, flip_sin_to_cos=flip,
                                                downscale_freq_shift=shift, scale=scale,
                                                max_period=1000), x=(["n"], "int64"))
    for n in (1, 5):
        t = RNG.integers(0, 1000, n)
        close(f(t), timestep_ref(t, dim, flip, shift, scale, 1000), atol=2e-3)


# ---------------------------------------------------------------------------------------------
# tensor_expr_op / tensor_ir_op


def test_tensor_expr_op_prints_compiles_and_runs():
    def scaled_add(a, b, alpha):
        return te.compute(a.shape, lambda i, j: a[i, j] * alpha + b[j], name="T_scaled_add")

    def fn(x, y):
        z = op.tensor_expr_op(scaled_add, "scaled_add", [x, y, 2.0], attrs={"op_pattern": 0})
        return op.tensor_expr_op(topi.add, "add_one", [z, 1.0])

    mod = exported(fn, x=(["n", 5], "float32"), y=([5], "float32"))
    text = mod.script()
    has_line(text, 'lv: R.Tensor((n, 5), dtype="float32") = R.call_tir(cls.scaled_add, (x, y), '
                   'out_sinfo=R.Tensor((n, 5), dtype="float32"))')
    has_line(text, 'lv1: R.Tensor((n, 5), dtype="float32") = R.call_tir(cls.add_one, (lv,), '
                   'out_sinfo=R.Tensor((n, 5), dtype="float32"))')
    assert mod["scaled_add"].attrs["op_pattern"] == 0
    f = jit(fn, x=(["n", 5], "float32"), y=([5], "float32"))
    y = rand(5)
    for n in (1, 9):
        x = rand(n, 5)
        close(f(x, y), x * 2.0 + y + 1.0)


def test_tensor_ir_op_prints_compiles_and_runs():
    n, m = te.var("n"), te.var("m")
    a = te.placeholder((n, m), "float32", name="A")
    b = te.placeholder((m,), "float32", name="B")
    c = te.compute((n, m), lambda i, j: a[i, j] - b[j], name="C")
    d = te.compute((n, m), lambda i, j: a[i, j] * b[j], name="D")
    func = te.create_prim_func([a, b, c, d])

    def fn(x, y):
        return op.tensor_ir_op(func, "sub_mul", [x, y], [Tensor.placeholder(x.shape, "float32"),
                                                         Tensor.placeholder(x.shape, "float32")])

    mod = exported(fn, x=(["n", 6], "float32"), y=([6], "float32"))
    text = mod.script()
    has_line(text, 'lv: R.Tuple(R.Tensor((n, 6), dtype="float32"), R.Tensor((n, 6), dtype="float32")) = '
                   'R.call_tir(cls.sub_mul, (x, y), out_sinfo=[R.Tensor((n, 6), dtype="float32"), '
                   'R.Tensor((n, 6), dtype="float32")])')
    has_line(text, 'sub_mul_0: R.Tensor((n, 6), dtype="float32") = lv[0]')
    assert "sub_mul" in mod.functions and func.name == "main"
    f = jit(fn, x=(["n", 6], "float32"), y=([6], "float32"))
    y = rand(6)
    for rows in (1, 11):
        x = rand(rows, 6)
        got_c, got_d = f(x, y)
        close(got_c, x - y)
        close(got_d, x * y)


def test_tensor_ir_op_errors():
    a = te.placeholder((4,), "float32", name="A")
    func = te.create_prim_func([a, te.compute((4,), lambda i: a[i] + 1.0, name="B")])
    with pytest.raises(ValueError, match="has 2 buffer parameters but 2 inputs and 1 outputs"):
        export(lambda x: op.tensor_ir_op(func, "f", [x, x], Tensor.placeholder([4], "float32")),
               x=([4], "float32"))
    with pytest.raises(TypeError, match="tir_vars"):
        export(lambda x: op.tensor_ir_op(func, "f", [x, Var("k", "int64")],
                                         Tensor.placeholder([4], "float32")), x=([4], "float32"))


# ---------------------------------------------------------------------------------------------
# extern -> R.call_dps_packed, run through runtime.register_extern


def _axpy(x, y, alpha, rows, tag, out):
    assert tag == "ok" and rows == x.shape[0]
    out[...] = alpha * x + y


def _split_sum(x, out_a, out_b):
    out_a[...] = x.sum(-1)
    out_b[...] = x.max(-1)


runtime.register_extern("test_ops_nn.axpy", _axpy, override=True)
runtime.register_extern("test_ops_nn.split_sum", _split_sum, override=True)


def test_extern_print_matches_tvm():
    def fn(q, k, v):
        b, s, h, d = q.shape
        return op.extern("flashinfer.single_decode", [q, k, v, 0, 0, 1.0, 10000.0],
                         Tensor.placeholder((b, s, h * d), "float16"))

    text = export(fn, q=([1, 1, 16, 8], "float32"), k=([64, 16, 8], "float32"),
                  v=([64, 16, 8], "float32"))
    has_line(text, 'flashinfer_single_decode: R.Tensor((1, 1, 128), dtype="float16") = '
                   'R.call_dps_packed("flashinfer.single_decode", (q, k, v, R.prim_value(0), '
                   'R.prim_value(0), R.prim_value(T.float64(1)), R.prim_value(T.float64(10000))), '
                   'out_sinfo=R.Tensor((1, 1, 128), dtype="float16"))')


def test_extern_runs_registered_python_function():
    def fn(x, y):
        out = op.extern("test_ops_nn.axpy", [x, y, 3.0, x.shape[0], "ok"],
                        Tensor.placeholder(x.shape, "float32"))
        return op.relu(out)

    text = export(fn, x=(["n", 4], "float32"), y=(["n", 4], "float32"))
    has_line(text, 'test_ops_nn_axpy: R.Tensor((n, 4), dtype="float32") = R.call_dps_packed('
                   '"test_ops_nn.axpy", (x, y, R.prim_value(T.float64(3)), R.prim_value(n), '
                   'R.str("ok")), out_sinfo=R.Tensor((n, 4), dtype="float32"))')
    f = jit(fn, x=(["n", 4], "float32"), y=(["n", 4], "float32"))
    for n in (1, 6):
        x, y = rand(n, 4), rand(n, 4)
        close(f(x, y), np.maximum(3.0 * x + y, 0))


def test_extern_tuple_output_and_saved_executable(tmp_path):
    def fn(x):
        s, m = op.extern("test_ops_nn.split_sum", [x], [Tensor.placeholder([x.shape[0]], "float32"),
                                                       Tensor.placeholder([x.shape[0]], "float32")])
        return op.add(s, m)

    from builder.compile import compile as build

    mod = exported(fn, x=(["n", 3], "float32"))
    build(mod).save(tmp_path / "exe.bin")
    vm = runtime.VirtualMachine(runtime.Executable.load(tmp_path / "exe.bin"))
    x = rand(5, 3)
    close(vm["forward"](x), x.astype(np.float64).sum(-1) + x.max(-1))


def test_extern_unregistered_and_registry_errors():
    f = jit(lambda x: op.extern("test_ops_nn.missing", [x], Tensor.placeholder(x.shape, "float32")),
            x=([2], "float32"))
    with pytest.raises(ValueError, match="extern function 'test_ops_nn.missing' is not registered"):
        f(rand(2))
    with pytest.raises(ValueError, match="already registered"):
        runtime.register_extern("test_ops_nn.axpy", _axpy)
    with pytest.raises(TypeError, match="expected a callable"):
        runtime.register_extern("test_ops_nn.bad", 3)


# ---------------------------------------------------------------------------------------------
# ccl


def test_ccl_print_verify_and_legalize():
    def fn(x):
        return op.ccl_broadcast_from_worker0(op.ccl_allreduce(x, "max"))

    mod = exported(fn, x=(["n", 4], "float16"))
    text = mod.script()
    has_line(text, 'ccl_allreduce: R.Tensor((n, 4), dtype="float16") = R.ccl.allreduce(x, op_type="max")')
    has_line(text, 'broadcast_from_worker: R.Tensor((n, 4), dtype="float16") = '
             'R.ccl.broadcast_from_worker0(ccl_allreduce)')
    text = LegalizeOps()(mod).script()     # the runtime's collectives, as TVM legalizes them
    has_line(text, 'ccl_allreduce: R.Tensor((n, 4), dtype="float16") = R.call_dps_packed('
             '"runtime.disco.allreduce", (x, R.str("max")), out_sinfo=R.Tensor((n, 4), dtype="float16"))')
    has_line(text, 'broadcast_from_worker: R.Tensor((n, 4), dtype="float16") = R.call_dps_packed('
             '"runtime.disco.broadcast_from_worker0", (ccl_allreduce,), out_sinfo=R.Tensor((n, 4), dtype="float16"))')
    with pytest.raises(ValueError, match="op_type must be one of sum, prod, min, max, avg, got 'mean'"):
        export(lambda x: op.ccl_allreduce(x, "mean"), x=([4], "float32"))


@pytest.mark.parametrize("kw", [
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 3), padding=(0, 1, 1, 2), dilation=(1, 2), groups=2),
    dict(stride=1, padding=0),
])
def test_conv2d_transpose_numeric_symbolic(kw):
    groups = kw.get("groups", 1)
    f = jit(lambda x, w, b: op.conv2d_transpose(x, w, b, **kw), x=(["n", 4, "h", "w"], "float32"),
            w=([4, 6 // groups, 3, 2], "float32"), b=([6], "float32"))
    w, b = rand(4, 6 // groups, 3, 2), rand(6)
    p = kw.get("padding", 0)
    pad = [p] * 4 if isinstance(p, int) else list(p)
    stride = tuple(np.broadcast_to(kw.get("stride", 1), 2))
    dil = tuple(np.broadcast_to(kw.get("dilation", 1), 2))
    opad = tuple(np.broadcast_to(kw.get("output_padding", 0), 2))
    for n, h, wd in ((1, 5, 4), (2, 3, 7)):
        x = rand(n, 4, h, wd)
        close(f(x, w, b), conv_transpose2d_ref(x, w, b, stride, pad, opad, dil, groups), atol=3e-5)


def test_conv2d_transpose_checks_output_padding():
    with pytest.raises(ValueError, match="output_padding"):
        export(lambda x, w: op.conv2d_transpose(x, w, stride=2, output_padding=2), x=([1, 4, 5, 5], "float32"),
               w=([4, 2, 3, 3], "float32"))
