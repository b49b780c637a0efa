"""The planner and a QuantFormat: the fast kernels take the formats whose attributes they implement
(:data:`~builder.codegen.kernels.linear.plan.FAST_QUANT_ATTRS`) and refuse any other -- a codebook, an
attribute no format knows -- with the reason, so the reference loops run; both paths against numpy
float64 (the format's :meth:`~builder.ir.quant_format.QuantFormat.dequantize_reference`)."""
from __future__ import annotations

import numpy as np
import pytest

from builder import te
from builder.codegen import build
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.linear import plan_linear
from builder.ir.kernel import KERNEL_ATTR, GroupWeight
from builder.ir.quant_format import QuantFormat, register_quant_format, unregister_quant_format
from builder.te import topi

_SIMD = SimdInfo("avx2", 8, 16, int8_dot=True)
#: a 4-bit codebook: 16 values, not evenly spaced (as NF4)
_CODES = tuple(float(np.sign(v) * v * v) for v in np.linspace(-1.0, 1.0, 16))


@pytest.fixture
def sq4():
    yield register_quant_format(QuantFormat(4, 32, "uint32", "float32", codebook=_CODES, name="sq4"))
    unregister_quant_format("sq4")


def _kernel(weight: GroupWeight, fmt: QuantFormat, K: int, N: int):
    x = te.placeholder((te.var("b"), K), "float32", name="x")
    q = te.placeholder(fmt.q_weight_shape(N, K), fmt.storage_dtype, name="q")
    s = te.placeholder(fmt.q_scale_shape(N, K), fmt.scale_dtype, name="s")
    spec: list = []
    out = topi.linear_kernel(x, q, s, weights=[weight], spec=spec)
    f = te.create_prim_func([x, q, s, out])
    f.attrs[KERNEL_ATTR] = spec[0]
    return f


def _run(f, fmt: QuantFormat, K: int, N: int, seed: int = 0) -> None:
    lib = build({"f": f})
    rng = np.random.default_rng(seed)
    top = np.iinfo(fmt.storage_dtype).max
    q = rng.integers(0, top, fmt.q_weight_shape(N, K), dtype=np.uint64, endpoint=True).astype(fmt.storage_dtype)
    s = (rng.random(fmt.q_scale_shape(N, K), dtype=np.float32) * np.float32(0.1)).astype(fmt.scale_dtype)
    w = fmt.dequantize_reference(q, s, K)
    fn = lib.load()["f"]
    for m in (1, 5, 30):
        x = rng.standard_normal((m, K)).astype(np.float32)
        y = np.empty((m, N), np.float32)
        fn(x, q, s, y)
        ref = x.astype(np.float64) @ w.T
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max(), err_msg=f"M={m}")
    return lib.functions["f"]["kernel"]


def test_a_codebook_runs_on_the_loops_with_the_reason(sq4):
    fmt = sq4.for_weight(96, 24)
    f = _kernel(GroupWeight.of_format(1, 2, fmt, 96), fmt, 96, 24)
    why = plan_linear(f, _SIMD)
    assert why == "quantized format codebook='sq4': no fast kernel implements it (the reference loops run)"
    assert _run(f, fmt, 96, 24) == f"loops (linear: {why})"


def test_an_attribute_no_format_knows_is_refused():
    """A weight whose attributes no QuantFormat reads (a newer format, a hand-written spec) is refused
    by name; the same weight without it takes the fast kernel."""
    fmt = QuantFormat(4, 32, "uint32", "float32", 7)
    plain = GroupWeight.of_format(1, 2, fmt, 64)
    assert not isinstance(plan_linear(_kernel(plain, fmt, 64, 16), _SIMD), str)
    f = _kernel(plain, fmt, 64, 16)
    f.attrs[KERNEL_ATTR] = type(f.attrs[KERNEL_ATTR])(0, 3, (GroupWeight.of_attrs(1, 2, {
        **plain.op_attrs, "asymmetric": 1}),), f.attrs[KERNEL_ATTR].acc)
    why = plan_linear(f, _SIMD)
    assert isinstance(why, str) and "unknown quantization attribute(s) 'asymmetric'" in why


def test_a_two_bit_format_runs_on_the_fast_kernel():
    """2-bit values (16 per uint32 word) need no new attribute: the packed-weight GEMV / GEMM decode
    any power-of-two values per word, and compute what the format's reference says."""
    fmt = QuantFormat(2, 32, "uint32", "float32", 1)
    f = _kernel(GroupWeight.of_format(1, 2, fmt, 96), fmt, 96, 24)
    plan = plan_linear(f, _SIMD)
    assert not isinstance(plan, str), plan
    assert _run(f, fmt, 96, 24, seed=1).startswith(("linear/", "loops (linear: no vector unit"))
