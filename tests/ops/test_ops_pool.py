"""Pooling ops (max / average / adaptive average, 1-D and 2-D): the printed IR line as TVM spells it,
struct-info errors, and ``Module.jit`` results against float64 numpy references written from
PyTorch's definitions (ATen ``Pool.h`` output sizes, ``AvgPool2d`` divisor, ``AdaptiveAvgPool2d``
windows), with symbolic dims bound to several sizes."""
import itertools
import math

import numpy as np
import pytest

from builder.nn import op
from helpers.functional import export, jit

RNG = np.random.default_rng(3)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def out_len(L, k, s, lo, hi, d, ceil_mode):
    """ATen's pooling_output_shape (with asymmetric padding)."""
    num = L + lo + hi - d * (k - 1) - 1
    out = (num + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= L + lo:
        out -= 1
    return out


def pool_ref(x, kind, k, s, lo, hi, d, ceil_mode=False, count_include_pad=True):
    """Max / average pooling of (N, C, *spatial) in float64, one window at a time."""
    x = x.astype(np.float64)
    sp = x.shape[2:]
    outs = [out_len(*a, ceil_mode) for a in zip(sp, k, s, lo, hi, d)]
    y = np.empty(x.shape[:2] + tuple(outs))
    for o in itertools.product(*(range(n) for n in outs)):
        starts = [oi * si - li for oi, si, li in zip(o, s, lo)]
        taps = [[st + i * di for i in range(ki)] for st, ki, di in zip(starts, k, d)]
        inside = [[t for t in tp if 0 <= t < L] for tp, L in zip(taps, sp)]
        win = x[(slice(None), slice(None), *np.ix_(*inside))] if all(inside) else None
        if kind == "max":
            y[(..., *o)] = win.reshape(x.shape[:2] + (-1,)).max(-1)
            continue
        if count_include_pad:
            count = math.prod(len([t for t in tp if -li <= t < L + hi_]) for tp, L, li, hi_ in zip(taps, sp, lo, hi))
        else:
            count = math.prod(len(i) for i in inside)
        y[(..., *o)] = win.reshape(x.shape[:2] + (-1,)).sum(-1) / count
    return y


def adaptive_ref(x, outs):
    x = x.astype(np.float64)
    sp = x.shape[2:]
    y = np.empty(x.shape[:2] + tuple(outs))
    for o in itertools.product(*(range(n) for n in outs)):
        sl = [slice((oi * L) // O, -(-((oi + 1) * L) // O)) for oi, L, O in zip(o, sp, outs)]
        y[(..., *o)] = x[(slice(None), slice(None), *sl)].mean(axis=tuple(range(2, x.ndim)))
    return y


def close(got, want, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def test_max_pool2d_prints_as_tvm():
    text = export(lambda x: op.max_pool2d(x, 3, stride=2, padding=1), x=([1, 8, 32, 32], "float32"))
    line = ('max_pool2d: R.Tensor((1, 8, 16, 16), dtype="float32") = R.nn.max_pool2d(x, pool_size=[3, 3], '
            'strides=[2, 2], padding=[1, 1, 1, 1], dilation=[1, 1], ceil_mode=False, count_include_pad=True, '
            'layout="NCHW", out_layout="NCHW")')
    assert line in [ln.strip() for ln in text.splitlines()], text


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, stride=3, padding=(0, 1, 1, 0)),
])
def test_pool2d_numeric(kind, kw):
    kw = dict(kw)
    if kind == "max":
        kw.pop("count_include_pad", None)
        kw.setdefault("dilation", (1, 2) if kw.get("padding") == 1 else 1)
    fn = op.max_pool2d if kind == "max" else op.avg_pool2d
    sym = not kw.get("ceil_mode")
    f = jit(lambda x: fn(x, **kw), x=(["n", 3, "h", "w"] if sym else [2, 3, 11, 9], "float32"))
    k = tuple(np.broadcast_to(kw["kernel_size"], 2))
    s = tuple(np.broadcast_to(kw.get("stride", k), 2)) if "stride" in kw else k
    p = kw.get("padding", 0)
    pads = [p] * 4 if isinstance(p, int) else (list(p) * 2 if len(p) == 2 else list(p))
    d = tuple(np.broadcast_to(kw.get("dilation", 1), 2))
    for shape in (((1, 3, 9, 8), (2, 3, 12, 13)) if sym else ((2, 3, 11, 9),)):
        x = rand(*shape)
        want = pool_ref(x, kind, k, s, pads[:2], pads[2:], d, kw.get("ceil_mode", False),
                        kw.get("count_include_pad", True))
        close(f(x), want)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool1d_numeric_and_float16(kind):
    fn = op.max_pool1d if kind == "max" else op.avg_pool1d
    f = jit(lambda x: fn(x, 4, stride=3, padding=2), x=([2, 5, "l"], "float32"))
    for L in (7, 16):
        x = rand(2, 5, L)
        close(f(x), pool_ref(x, kind, (4,), (3,), (2,), (2,), (1,)))
    h = jit(lambda x: fn(x, 3, stride=2, padding=1), x=([2, 4, 15], "float16"))
    x = rand(2, 4, 15, dtype="float16")
    y = h(x)
    assert y.dtype == np.float16 and y.shape == (2, 4, 8)
    close(y, pool_ref(x, kind, (3,), (2,), (1,), (1,), (1,)), rtol=2e-3, atol=2e-3)


def test_max_pool_of_negative_values_ignores_padding_and_keeps_ints():
    f = jit(lambda x: op.max_pool2d(x, 3, stride=1, padding=1), x=([1, 1, 4, 4], "float32"))
    x = -1.0 - np.abs(rand(1, 1, 4, 4))
    close(f(x), pool_ref(x, "max", (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)))
    g = jit(lambda x: op.max_pool1d(x, 2), x=([1, 2, 6], "int32"))
    xi = RNG.integers(-100, 100, (1, 2, 6)).astype(np.int32)
    got = g(xi)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, xi.reshape(1, 2, 3, 2).max(-1))


@pytest.mark.parametrize("outs", [(1, 1), (3, 2), (5, 7), (4, None)])
def test_adaptive_avg_pool2d(outs):
    f = jit(lambda x: op.adaptive_avg_pool2d(x, outs), x=([2, 3, "h", "w"], "float32"))
    for shape in ((2, 3, 7, 9), (2, 3, 10, 5)):
        x = rand(*shape)
        want_outs = [shape[2 + i] if o is None else o for i, o in enumerate(outs)]
        close(f(x), adaptive_ref(x, want_outs))


def test_adaptive_avg_pool1d_static_and_float16():
    f = jit(lambda x: op.adaptive_avg_pool1d(x, 4), x=([3, 2, 10], "float16"))
    x = rand(3, 2, 10, dtype="float16")
    y = f(x)
    assert y.dtype == np.float16 and y.shape == (3, 2, 4)
    close(y, adaptive_ref(x, [4]), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("call, msg", [
    (lambda x: op.max_pool2d(x, 9), "larger than the padded input"),
    (lambda x: op.avg_pool2d(x, 2, stride=0), "invalid"),
    (lambda x: op.max_pool1d(x, 2), "must be 3-D"),
    (lambda x: op.adaptive_avg_pool2d(x, (2, 2, 2)), "output_size"),
    (lambda x: op.avg_pool2d(x, 2, padding=(1, 2, 3)), "padding"),
])
def test_pool_errors(call, msg):
    with pytest.raises(ValueError, match=msg):
        export(call, x=([1, 2, 5, 5], "float32"))


def test_avg_pool_of_ints_is_refused():
    with pytest.raises(TypeError, match="float dtype"):
        export(lambda x: op.avg_pool2d(x, 2), x=([1, 2, 4, 4], "int32"))


def test_ceil_mode_needs_static_sizes():
    with pytest.raises(ValueError, match="ceil_mode needs a static input size"):
        export(lambda x: op.max_pool2d(x, 2, ceil_mode=True), x=([1, 2, "h", 4], "float32"))


@pytest.mark.parametrize("shape", [[1, 2, 6, 5], [1, 2, "h", "w"]])
def test_a_window_far_larger_than_the_input_costs_what_the_input_holds(shape):
    """A recipe may ask for any window: 2**40 taps with 2**39 padding on each side of a 6 x 5 input is one
    output per channel, the max / mean over the input, computed over the taps inside the data only (the
    loop over every tap would never end)."""
    big, pad = 2 ** 40, 2 ** 39
    f = jit(lambda x: (op.max_pool2d(x, big, stride=big, padding=pad),
                       op.avg_pool2d(x, big, stride=big, padding=pad, count_include_pad=False)),
            x=(shape, "float32"))
    x = rand(1, 2, 6, 5)
    mx, av = f(x)
    assert mx.shape == av.shape == (1, 2, 1, 1)
    close(mx, x.max(axis=(2, 3), keepdims=True))
    close(av, x.astype(np.float64).mean(axis=(2, 3), keepdims=True))


def test_clipped_windows_match_the_reference():
    """Windows of 20 taps (clipped to the taps inside the data) over symbolic lengths, with padding and
    strides, against the window-by-window reference."""
    f = jit(lambda x: (op.max_pool1d(x, 20, stride=3, padding=10), op.avg_pool1d(x, 20, stride=3, padding=10)),
            x=([2, 3, "l"], "float32"))
    for L in (5, 23):
        x = rand(2, 3, L)
        mx, av = f(x)
        close(mx, pool_ref(x, "max", (20,), (3,), (10,), (10,), (1,)))
        close(av, pool_ref(x, "avg", (20,), (3,), (10,), (10,), (1,)))
