"""ConvToGemm (issue 15): Conv1D as im2col + a linear-kernel GEMM, ConvTranspose1D as a GEMM + col2im,
against float64 numpy references written here; that the fast path is the one compiled (the kernel
families in ``exe.kernels``), that the bias / GELU stay the GEMM's epilogue, that chained convolutions
need no transposes, and the fallbacks (groups > 1, float64) to the reference loops."""
from math import erf

import numpy as np
import pytest
from helpers.conv_refs import conv2d_ref, conv_transpose2d_ref
from helpers.functional import Fn, spec_of

from builder.nn import op

RNG = np.random.default_rng(15)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def conv1d_ref(x, w, b=None, stride=1, pad=(0, 0), dil=1):
    """``torch.nn.functional.conv1d`` (groups 1) in float64: a sum over the taps of shifted, strided
    windows of the zero-padded input."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), tuple(pad)))
    k = w.shape[2]
    wo = (xp.shape[2] - dil * (k - 1) - 1) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], wo))
    for kk in range(k):
        win = xp[:, :, kk * dil: kk * dil + stride * (wo - 1) + 1: stride]      # (N, C, W_out)
        out += np.einsum("nct,oc->not", win, w[:, :, kk])
    return out if b is None else out + b.astype(np.float64)[None, :, None]


def conv_transpose1d_ref(x, w, b=None, stride=1, pad=(0, 0), out_pad=0, dil=1):
    """``torch.nn.functional.conv_transpose1d`` (groups 1) in float64 as a scatter: input element
    ``i`` adds ``x[:, c, i] * w[c, :, k]`` at ``i*stride + k*dil``; the padding is then cropped."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, _, width = x.shape
    _, o, k = w.shape
    full = (width - 1) * stride + dil * (k - 1) + 1 + out_pad
    out = np.zeros((n, o, full))
    for kk in range(k):
        for i in range(width):
            out[:, :, i * stride + kk * dil] += x[:, :, i] @ w[:, :, kk]
    out = out[:, :, pad[0]:full - pad[1]]
    return out if b is None else out + b.astype(np.float64)[None, :, None]


gelu_ref = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))


def compile_fn(fn, **inputs):
    """``fn`` compiled for ``inputs`` (``name=(shape, dtype)``): ``(callable, exe.kernels)``."""
    m = Fn(fn, list(inputs)).jit(spec_of(**inputs))
    return m["forward"], m.exe.kernels


def families(kernels) -> dict:
    return {name: k["kernel"] for name, k in kernels.items()}


def tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == "float32" else {"rtol": 2e-2, "atol": 2e-2}


def assert_gemm(kernels, prefix="conv1d_im2col"):
    fam = families(kernels)
    assert any(n.startswith(prefix) for n in fam), fam
    assert any(f.startswith("linear") for f in fam.values()), fam
    assert not any(n in ("conv1d", "conv1d_transpose") or n.startswith(("conv1d_transpose1", "conv1d1"))
                   for n in fam), fam   # the reference loops are gone


# --- Conv1D ---------------------------------------------------------------------------------------

CONV_CASES = [   # kernel, stride, padding, dilation
    (1, 1, 0, 1), (3, 1, 1, 1), (3, 2, 1, 1), (5, 1, 2, 1), (3, 1, 2, 2), (5, 2, (2, 1), 2), (3, 2, 0, 1),
    (5, 3, 1, 2)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("k,stride,pad,dil", CONV_CASES)
def test_conv1d_gemm_matches_float64_symbolic(k, stride, pad, dil, dtype):
    f, kernels = compile_fn(lambda x, w, b: op.conv1d(x, w, b, stride=stride, padding=pad, dilation=dil),
                            x=(["n", 6, "l"], dtype), w=([10, 6, k], dtype), b=([10], dtype))
    assert_gemm(kernels)
    # the NCW result is the GEMM's transposed store, no transpose pass
    assert "fused_matmul_add_permute_dims" in kernels and not any(n.startswith("transpose") for n in kernels), \
        families(kernels)
    lohi = pad if isinstance(pad, tuple) else (pad, pad)
    w, b = rand(10, 6, k, dtype=dtype), rand(10, dtype=dtype)
    for n, length in ((1, 13), (2, 30), (3, dil * (k - 1) + 1 - sum(lohi))):
        x = rand(n, 6, length, dtype=dtype)
        y = f(x, w, b)
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_allclose(y, conv1d_ref(x, w, b, stride, lohi, dil), **tol(dtype))


def test_conv1d_bias_gelu_is_the_gemm_epilogue_and_chains_need_no_transpose():
    """Whisper's stem: gelu(conv1(x)), gelu(conv2(.)) with stride 2, then (N, W, C): two fused GEMM
    kernels and two im2col copies, nothing else (no transpose, no separate bias / GELU kernel)."""
    def stem(x, w1, b1, w2, b2):
        h = op.gelu(op.conv1d(x, w1, b1, padding=1))
        return op.permute_dims(op.gelu(op.conv1d(h, w2, b2, stride=2, padding=1)), [0, 2, 1])

    f, kernels = compile_fn(stem, x=(["n", 8, "l"], "float32"), w1=([16, 8, 3], "float32"),
                            b1=([16], "float32"), w2=([16, 16, 3], "float32"), b2=([16], "float32"))
    fam = families(kernels)
    assert len(fam) == 4, fam
    assert sorted(n for n, f in fam.items() if f.startswith("linear")) == ["fused_matmul_add_gelu",
                                                                            "fused_matmul_add_gelu1"], fam
    assert sorted(n for n, f in fam.items() if f == "loops") == ["conv1d_im2col", "conv1d_im2col1"], fam
    w1, b1, w2, b2 = rand(16, 8, 3), rand(16), rand(16, 16, 3), rand(16)
    for n, length in ((1, 21), (2, 8)):
        x = rand(n, 8, length)
        h = gelu_ref(conv1d_ref(x, w1, b1, 1, (1, 1)))
        want = gelu_ref(conv1d_ref(h, w2, b2, 2, (1, 1))).transpose(0, 2, 1)
        np.testing.assert_allclose(f(x, w1, b1, w2, b2), want, rtol=1e-4, atol=1e-4)


def test_conv1d_outputs_used_in_ncw_and_twice():
    """A pending transpose that is used twice, and an NCW consumer that is not elementwise (a sum over
    the length), get the NCW value."""
    def fn(x, w, b):
        y = op.conv1d(x, w, b, padding=1)
        return op.sum(op.gelu(y) * y, axis=[2])

    f, kernels = compile_fn(fn, x=(["n", 4, "l"], "float32"), w=([6, 4, 3], "float32"), b=([6], "float32"))
    assert_gemm(kernels)
    w, b = rand(6, 4, 3), rand(6)
    x = rand(2, 4, 11)
    y = conv1d_ref(x, w, b, 1, (1, 1))
    np.testing.assert_allclose(f(x, w, b), (gelu_ref(y) * y).sum(2), rtol=1e-4, atol=1e-4)


def test_conv1d_reads_channels_last_input_through_its_transpose():
    """Channels last in and out, ``permute_dims(conv1d(permute_dims(x_nwc)))``: the columns read
    ``x_nwc`` and the GEMM's NWC result is the output (no transpose kernel)."""
    def fn(x, w):
        return op.permute_dims(op.conv1d(op.permute_dims(x, [0, 2, 1]), w, stride=2, padding=2), [0, 2, 1])

    f, kernels = compile_fn(fn, x=(["n", "l", 5], "float32"), w=([7, 5, 3], "float32"))
    assert_gemm(kernels)
    assert not any("transpose" in n or "permute" in n for n in kernels), families(kernels)
    w, x = rand(7, 5, 3), rand(2, 12, 5)
    want = conv1d_ref(x.transpose(0, 2, 1), w, None, 2, (2, 2)).transpose(0, 2, 1)
    np.testing.assert_allclose(f(x, w), want, rtol=1e-4, atol=1e-4)


def test_conv1d_residual_with_a_full_tensor_keeps_ncw():
    """``conv1d(x) + x`` (the other operand a full NCW tensor): not computed in NWC, still right."""
    f, kernels = compile_fn(lambda x, w: op.conv1d(x, w, padding=1) + x, x=(["n", 4, "l"], "float32"),
                            w=([4, 4, 3], "float32"))
    assert_gemm(kernels)
    w, x = rand(4, 4, 3), rand(2, 4, 9)
    np.testing.assert_allclose(f(x, w), conv1d_ref(x, w, None, 1, (1, 1)) + x, rtol=1e-4, atol=1e-4)


def test_conv1d_groups_and_float64_fall_back_to_the_loops():
    f, kernels = compile_fn(lambda x, w: op.conv1d(x, w, padding=1, groups=2), x=(["n", 4, "l"], "float32"),
                            w=([6, 2, 3], "float32"))
    assert families(kernels) == {"conv1d": "loops"}
    w, x = rand(6, 2, 3), rand(2, 4, 9)
    want = np.concatenate([conv1d_ref(x[:, :2], w[:3], None, 1, (1, 1)),
                           conv1d_ref(x[:, 2:], w[3:], None, 1, (1, 1))], axis=1)
    np.testing.assert_allclose(f(x, w), want, rtol=1e-5, atol=1e-5)
    f, kernels = compile_fn(lambda x, w: op.conv1d(x, w), x=([1, 3, 8], "float64"), w=([2, 3, 3], "float64"))
    assert families(kernels) == {"conv1d": "loops"}


def test_conv1d_symbolic_length_too_short_is_an_error():
    f, _ = compile_fn(lambda x, w: op.conv1d(x, w, dilation=2), x=([1, 2, "l"], "float32"), w=([3, 2, 3], "float32"))
    with pytest.raises(Exception, match="shorter than the dilated kernel"):
        f(rand(1, 2, 4), rand(3, 2, 3))


# --- ConvTranspose1D ------------------------------------------------------------------------------

DECONV_CASES = [   # kernel, stride, padding, output_padding, dilation
    (3, 1, (0, 0), 0, 1), (4, 2, (1, 1), 1, 1), (3, 3, (2, 0), 2, 2), (1, 2, (0, 0), 1, 1), (5, 2, (2, 2), 0, 1)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("k,stride,pad,out_pad,dil", DECONV_CASES)
def test_conv1d_transpose_gemm_matches_float64_symbolic(k, stride, pad, out_pad, dil, dtype):
    f, kernels = compile_fn(lambda x, w, b: op.conv1d_transpose(x, w, b, stride=stride, padding=pad,
                                                                 output_padding=out_pad, dilation=dil),
                            x=(["n", 6, "l"], dtype), w=([6, 5, k], dtype), b=([5], dtype))
    assert_gemm(kernels, "conv1d_transpose_col2im")
    w, b = rand(6, 5, k, dtype=dtype), rand(5, dtype=dtype)
    for n, length in ((1, 7), (2, 16), (1, 1)):
        x = rand(n, 6, length, dtype=dtype)
        want = conv_transpose1d_ref(x, w, b, stride, pad, out_pad, dil)
        if want.shape[2] < 1:
            continue
        y = f(x, w, b)
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_allclose(y, want, **tol(dtype))


def test_conv1d_transpose_groups_fall_back_to_the_loops():
    f, kernels = compile_fn(lambda x, w: op.conv1d_transpose(x, w, stride=2, groups=2),
                            x=(["n", 4, "l"], "float32"), w=([4, 3, 3], "float32"))
    assert families(kernels) == {"conv1d_transpose": "loops"}
    w, x = rand(4, 3, 3), rand(2, 4, 5)
    want = np.concatenate([conv_transpose1d_ref(x[:, :2], w[:2], None, 2),
                           conv_transpose1d_ref(x[:, 2:], w[2:], None, 2)], axis=1)
    np.testing.assert_allclose(f(x, w), want, rtol=1e-5, atol=1e-5)


def test_conv_after_conv_transpose():
    """A decoder-like chain: ConvTranspose1D (stride 2) then Conv1D, both on the GEMM path."""
    def fn(x, w1, w2):
        return op.conv1d(op.gelu(op.conv1d_transpose(x, w1, stride=2, padding=1, output_padding=1)), w2, padding=1)

    f, kernels = compile_fn(fn, x=(["n", 4, "l"], "float32"), w1=([4, 6, 4], "float32"), w2=([3, 6, 3], "float32"))
    assert_gemm(kernels)
    assert any(n.startswith("conv1d_transpose_col2im") for n in kernels)
    w1, w2, x = rand(4, 6, 4), rand(3, 6, 3), rand(2, 4, 7)
    want = conv1d_ref(gelu_ref(conv_transpose1d_ref(x, w1, None, 2, (1, 1), 1)), w2, None, 1, (1, 1))
    np.testing.assert_allclose(f(x, w1, w2), want, rtol=1e-4, atol=1e-4)


def test_conv_transpose_of_a_strided_conv_on_symbolic_sizes():
    """An encoder-decoder pair on a symbolic length (U-Net / codec style): a stride-2 Conv1D, whose output length
    is ``(l - 1) // 2 + 1``, then a stride-2 ConvTranspose1D; the same in 2-D on symbolic H and W. The overlap-add
    kernel's output size follows from its input's (which it binds), not from the graph's ``l``."""
    def fn1(x, w1, w2):
        return op.conv1d_transpose(op.conv1d(x, w1, stride=2, padding=1), w2, stride=2, padding=1, output_padding=1)

    f, kernels = compile_fn(fn1, x=(["n", 4, "l"], "float32"), w1=([6, 4, 3], "float32"), w2=([6, 4, 4], "float32"))
    assert any(n.startswith("conv1d_transpose_col2im") for n in kernels)
    w1, w2 = rand(6, 4, 3), rand(6, 4, 4)
    for n, length in ((2, 20), (1, 33), (1, 1)):
        x = rand(n, 4, length)
        want = conv_transpose1d_ref(conv1d_ref(x, w1, None, 2, (1, 1)), w2, None, 2, (1, 1), 1)
        np.testing.assert_allclose(f(x, w1, w2), want, rtol=1e-4, atol=1e-4)

    def fn2(x, w1, w2):
        return op.conv2d_transpose(op.conv2d(x, w1, stride=2, padding=1), w2, stride=2, padding=1)

    f, kernels = compile_fn(fn2, x=(["n", 3, "h", "w"], "float32"), w1=([5, 3, 3, 3], "float32"),
                            w2=([5, 3, 4, 4], "float32"))
    assert any(n.startswith("conv2d_transpose_col2im") for n in kernels)
    w1, w2 = rand(5, 3, 3, 3), rand(5, 3, 4, 4)
    for n, h, wd in ((1, 8, 11), (2, 5, 6)):
        x = rand(n, 3, h, wd)
        want = conv_transpose2d_ref(conv2d_ref(x, w1, None, (2, 2), (1, 1, 1, 1)), w2, None, (2, 2), (1, 1, 1, 1))
        np.testing.assert_allclose(f(x, w1, w2), want, rtol=1e-4, atol=1e-4)


def test_pointwise_conv_after_conv_reads_the_gemm_output_directly():
    """Kernel 1, stride 1, no padding after a GEMM-lowered conv: no im2col copy for the second."""
    f, kernels = compile_fn(lambda x, w1, w2: op.conv1d(op.conv1d(x, w1, padding=1), w2),
                            x=(["n", 4, "l"], "float32"), w1=([6, 4, 3], "float32"), w2=([5, 6, 1], "float32"))
    fam = families(kernels)
    assert sum(n.startswith("conv1d_im2col") for n in fam) == 1 and sum(v.startswith("linear") for v in fam.values()) == 2, fam
    w1, w2, x = rand(6, 4, 3), rand(5, 6, 1), rand(2, 4, 10)
    want = conv1d_ref(conv1d_ref(x, w1, None, 1, (1, 1)), w2)
    np.testing.assert_allclose(f(x, w1, w2), want, rtol=1e-4, atol=1e-4)


def test_bfloat16_conv_and_conv_transpose_on_the_gemm_path():
    """bfloat16 data (passed as their bits: numpy has no such dtype) take the GEMM path too."""
    from runtime.native import bfloat16_bits_to_float32 as b2f
    from runtime.native import float32_to_bfloat16_bits as f2b

    def fn(x, w, wt):
        return op.conv1d(x, w, stride=2, padding=1), op.conv1d_transpose(x, wt, stride=2, padding=1)

    f, kernels = compile_fn(fn, x=(["n", 6, "l"], "bfloat16"), w=([4, 6, 3], "bfloat16"), wt=([6, 4, 3], "bfloat16"))
    assert_gemm(kernels)
    assert any(n.startswith("conv1d_transpose_col2im") for n in kernels)
    x, w, wt = f2b(rand(2, 6, 11)), f2b(rand(4, 6, 3)), f2b(rand(6, 4, 3))
    y, yt = (b2f(v) for v in f(x, w, wt))
    xf, wf, wtf = (b2f(v).astype(np.float64) for v in (x, w, wt))
    np.testing.assert_allclose(y, conv1d_ref(xf, wf, None, 2, (1, 1)), rtol=2e-2, atol=3e-2)
    np.testing.assert_allclose(yt, conv_transpose1d_ref(xf, wtf, None, 2, (1, 1)), rtol=2e-2, atol=3e-2)


# --- Conv2D ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, stride, pad, dil", [
    ((1, 1), (1, 1), (0, 0, 0, 0), (1, 1)), ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((3, 2), (2, 1), (0, 1, 2, 0), (1, 2)), ((5, 5), (2, 2), (2, 2, 2, 2), (1, 1))])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv2d_gemm_matches_float64_symbolic(k, stride, pad, dil, dtype):
    f, kernels = compile_fn(lambda x, w, b: op.conv2d(x, w, b, stride=stride, padding=list(pad), dilation=dil),
                            x=(["n", 5, "h", "w"], dtype), w=([7, 5, *k], dtype), b=([7], dtype))
    assert_gemm(kernels, "conv2d_im2col")
    assert "conv2d" not in families(kernels)
    w, b = rand(7, 5, *k, dtype=dtype), rand(7, dtype=dtype)
    for n, h, wd in ((1, 9, 11), (2, 14, 6)):
        x = rand(n, 5, h, wd, dtype=dtype)
        y = f(x, w, b)
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_allclose(y, conv2d_ref(x, w, b, stride, pad, dil), **tol(dtype))


def test_conv2d_chain_stays_channels_last():
    """A ResNet-style chain, conv -> scale / shift per channel -> relu -> 1x1 conv -> strided conv: the
    per-channel ops are the GEMMs' epilogues, the 1x1 conv reads the previous GEMM's output as its
    columns, and no transpose runs until the end."""
    def fn(x, w1, s, t, w2, w3):
        h = op.relu(op.conv2d(x, w1, padding=1) * op.reshape(s, [1, 8, 1, 1]) + op.reshape(t, [1, 8, 1, 1]))
        h = op.relu(op.conv2d(h, w2))
        return op.conv2d(h, w3, stride=2, padding=1)

    f, kernels = compile_fn(fn, x=(["n", 3, 12, 12], "float32"), w1=([8, 3, 3, 3], "float32"), s=([8], "float32"),
                            t=([8], "float32"), w2=([6, 8, 1, 1], "float32"), w3=([4, 6, 3, 3], "float32"))
    fam = families(kernels)
    assert sum(f_.startswith("linear") for f_ in fam.values()) == 3, fam
    assert sorted(n for n in fam if n.startswith("conv2d_im2col")) == ["conv2d_im2col", "conv2d_im2col1"], fam
    assert sum("transpose" in n or "permute" in n for n in fam) == 1, fam     # the output's NCHW
    w1, s, t, w2, w3 = rand(8, 3, 3, 3), rand(8), rand(8), rand(6, 8, 1, 1), rand(4, 6, 3, 3)
    x = rand(2, 3, 12, 12)
    h = np.maximum(conv2d_ref(x, w1, None, (1, 1), (1,) * 4) * s[None, :, None, None] + t[None, :, None, None], 0)
    h = np.maximum(conv2d_ref(h, w2), 0)
    np.testing.assert_allclose(f(x, w1, s, t, w2, w3), conv2d_ref(h, w3, None, (2, 2), (1,) * 4), rtol=1e-4, atol=1e-4)


def test_conv2d_residual_pooling_and_groups():
    """A residual add of the block input (a full NCHW tensor), max pooling between convolutions (an NCHW
    consumer) and a grouped convolution (the reference loops) give the right values."""
    def fn(x, w1, w2, wg):
        h = op.conv2d(x, w1, padding=1) + x
        h = op.max_pool2d(h, 2)
        return op.conv2d(op.conv2d(h, w2, padding=1), wg, groups=2)

    f, kernels = compile_fn(fn, x=(["n", 4, "h", "w"], "float32"), w1=([4, 4, 3, 3], "float32"),
                            w2=([6, 4, 3, 3], "float32"), wg=([4, 3, 1, 1], "float32"))
    assert "conv2d" in families(kernels)      # the grouped one (not depthwise)
    w1, w2, wg = rand(4, 4, 3, 3), rand(6, 4, 3, 3), rand(4, 3, 1, 1)
    x = rand(2, 4, 8, 10)
    h = conv2d_ref(x, w1, None, (1, 1), (1,) * 4) + x
    h = h.reshape(2, 4, 4, 2, 5, 2).max(axis=(3, 5))
    h = conv2d_ref(h, w2, None, (1, 1), (1,) * 4)
    want = np.concatenate([conv2d_ref(h[:, :3], wg[:2]), conv2d_ref(h[:, 3:], wg[2:])], axis=1)
    np.testing.assert_allclose(f(x, w1, w2, wg), want, rtol=1e-4, atol=1e-4)


def test_pooling_between_convolutions_stays_channels_last():
    """conv -> relu -> max pool -> conv + the pooled value -> adaptive average pool: the pools read the
    GEMMs' NHWC outputs (``layout="NHWC"``), so only the result is transposed back."""
    def fn(x, w1, w2):
        h = op.max_pool2d(op.relu(op.conv2d(x, w1, stride=2, padding=1)), 3, stride=2, padding=1)
        h = op.relu(op.conv2d(h, w2, padding=1) + h)
        return op.adaptive_avg_pool2d(h, (2, 3))

    f, kernels = compile_fn(fn, x=(["n", 3, "h", "w"], "float32"), w1=([6, 3, 3, 3], "float32"),
                            w2=([6, 6, 3, 3], "float32"))
    fam = families(kernels)
    assert sum(f_.startswith("linear") for f_ in fam.values()) == 2, fam
    assert sum("transpose" in n or "permute" in n for n in fam) == 1, fam
    w1, w2 = rand(6, 3, 3, 3), rand(6, 6, 3, 3)
    for n, h, w in ((1, 16, 20), (2, 11, 13)):
        x = rand(n, 3, h, w)
        a = np.maximum(conv2d_ref(x, w1, None, (2, 2), (1,) * 4), 0)
        ap = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        oh, ow = (a.shape[2] - 1) // 2 + 1, (a.shape[3] - 1) // 2 + 1
        p = np.stack([np.stack([ap[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(2, 3)) for j in range(ow)], -1)
                      for i in range(oh)], -2)
        hh = np.maximum(conv2d_ref(p, w2, None, (1, 1), (1,) * 4) + p, 0)
        want = np.stack([np.stack([hh[:, :, (i * oh) // 2: -(-(i + 1) * oh // 2), (j * ow) // 3: -(-(j + 1) * ow // 3)]
                                   .mean(axis=(2, 3)) for j in range(3)], -1) for i in range(2)], -2)
        np.testing.assert_allclose(f(x, w1, w2), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k, stride, pad, dil, dtype", [
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "float32"), ((5, 3), (2, 1), (2, 0, 1, 1), (1, 2), "float32"),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "float16")])
def test_depthwise_conv2d_runs_channels_last(k, stride, pad, dil, dtype):
    """A depthwise convolution (groups = channels) after a GEMM-lowered one reads its NHWC output and runs
    channels last (the depthwise kernel, not the reference loops), with its bias and ReLU fused after it."""
    def fn(x, w1, wd, b):
        h = op.conv2d(x, w1, padding=1)
        return op.relu(op.conv2d(h, wd, b, stride=stride, padding=list(pad), dilation=dil, groups=8))

    f, kernels = compile_fn(fn, x=(["n", 3, "h", "w"], dtype), w1=([8, 3, 3, 3], dtype), wd=([8, 1, *k], dtype),
                            b=([8], dtype))
    fam = families(kernels)
    assert any(n.startswith("depthwise_conv2d_nhwc") for n in fam) and "conv2d" not in fam, fam
    w1, wd, b = rand(8, 3, 3, 3, dtype=dtype), rand(8, 1, *k, dtype=dtype), rand(8, dtype=dtype)
    for n, h, w in ((1, 12, 9), (2, 7, 16)):
        x = rand(n, 3, h, w, dtype=dtype)
        a = conv2d_ref(x, w1, None, (1, 1), (1,) * 4)
        want = np.concatenate([conv2d_ref(a[:, c:c + 1], wd[c:c + 1], b[c:c + 1], stride, pad, dil) for c in range(8)],
                              axis=1)
        np.testing.assert_allclose(f(x, w1, wd, b), np.maximum(want, 0), **tol(dtype))


@pytest.mark.parametrize("groups, cin", [(2, 16), (4, 32), (8, 32)])
def test_grouped_conv2d_one_gemm_per_group(groups, cin):
    """A grouped convolution whose groups are deep enough (C / groups x 3 x 3 >= 64) runs one GEMM per
    group (GEMM kernels, no reference-loop conv2d); shallow groups (4 channels x 3 x 3) keep the loops."""
    def fn(x, w):
        return op.relu(op.conv2d(x, w, padding=1, stride=2 if groups == 4 else 1, groups=groups))

    f, kernels = compile_fn(fn, x=(["n", cin, "h", "w"], "float32"), w=([16, cin // groups, 3, 3], "float32"))
    fam = families(kernels)
    deep = (cin // groups) * 9 >= 64
    assert ("conv2d" in fam) != deep and any(v.startswith("linear") for v in fam.values()) == deep, fam
    w = rand(16, cin // groups, 3, 3)
    for n, h, wd in ((1, 9, 8), (2, 6, 11)):
        x = rand(n, cin, h, wd)
        og, cg = 16 // groups, cin // groups
        s = (2, 2) if groups == 4 else (1, 1)
        want = np.concatenate([conv2d_ref(x[:, i * cg:(i + 1) * cg], w[i * og:(i + 1) * og], None, s, (1,) * 4)
                               for i in range(groups)], axis=1)
        np.testing.assert_allclose(f(x, w), np.maximum(want, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride, pad, out_pad, dil", [((2, 2), (1, 1, 1, 1), (0, 0), (1, 1)),
                                                      ((2, 3), (0, 1, 2, 0), (1, 2), (1, 1)),
                                                      ((1, 1), (1, 0, 1, 0), (0, 0), (2, 1))])
def test_conv2d_transpose_gemm_matches_float64_symbolic(stride, pad, out_pad, dil):
    """ConvTranspose2D as a GEMM of the NHWC input into float32 columns and the 2-D overlap-add, on symbolic
    sizes; the bias add stays a separate op."""
    f, kernels = compile_fn(lambda x, w, b: op.conv2d_transpose(x, w, b, stride=stride, padding=list(pad),
                                                                output_padding=out_pad, dilation=dil),
                            x=(["n", 5, "h", "w"], "float32"), w=([5, 3, 3, 4], "float32"), b=([3], "float32"))
    fam = families(kernels)
    assert any(n.startswith("conv2d_transpose_col2im") for n in fam) and "conv2d_transpose" not in fam, fam
    assert any(v.startswith("linear") for v in fam.values()), fam
    w, b = rand(5, 3, 3, 4), rand(3)
    for n, h, wd in ((1, 4, 6), (2, 7, 3)):
        x = rand(n, 5, h, wd)
        np.testing.assert_allclose(f(x, w, b), conv_transpose2d_ref(x, w, b, stride, pad, out_pad, dil),
                                   rtol=1e-4, atol=1e-4)
