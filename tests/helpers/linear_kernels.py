"""Linear-kernel PrimFuncs for the code generator's tests: a ``linear_kernel`` with its spec from an
epilogue written as nested tuples, and the float64 check of the gated form."""
from __future__ import annotations

import numpy as np

from builder import te
from builder.ir.kernel import KERNEL_ATTR, DenseWeight, EpilogueLinear, EpilogueOp, EpilogueTensor
from builder.ops import frontend_ops
from builder.te import topi

__all__ = ["silu", "epilogue", "linear_func", "transposed_bias_func", "check_gated"]


def silu(v):
    """``v * sigmoid(v)`` in numpy (float64 for the references)."""
    return v / (1 + np.exp(-v))


def epilogue(tree):
    """An epilogue tree from a nested tuple: ``("linear", k)``, ``("tensor", i)`` (the i-th tensor after
    x), ``(frontend_op_name, *children)``."""
    kind = tree[0]
    if kind == "linear":
        return EpilogueLinear(tree[1])
    if kind == "tensor":
        return EpilogueTensor(tree[1] + 1)
    return EpilogueOp(frontend_ops()[kind].name, tuple(epilogue(t) for t in tree[1:]))


def linear_func(K, N, xdt, wdt, tree, nweights=1, extra=(), lead=("b",), out_dtype=None):
    """A linear_kernel PrimFunc: x (*lead, K), weights (N, K), extra tensors by name; the epilogue
    ``tree`` as :func:`epilogue` reads it. Returns ``(func, out dtype)``."""
    shape = [te.var(d) if isinstance(d, str) else d for d in lead]
    x = te.placeholder(shape + [K], xdt, name="x")
    ws = [te.placeholder((N, K), wdt, name=f"w{i}") for i in range(nweights)]
    ex = []
    for name, eshape, edt in extra:
        eshape = [shape[i] if s == "lead" else s for i, s in enumerate(eshape)] if eshape else eshape
        ex.append(te.placeholder(eshape, edt, name=name))
    spec = []
    out = topi.linear_kernel(x, *ws, *ex, weights=[DenseWeight(i + 1) for i in range(nweights)],
                             epilogue=epilogue(tree), out_dtype=out_dtype, spec=spec)
    f = te.create_prim_func([x, *ws, *ex, out])
    f.attrs[KERNEL_ATTR] = spec[0]
    return f, out.dtype


def transposed_bias_func(K, N):
    """The linear kernel of ``permute_dims(x @ w0.T + bias, [1, 0])`` (x ``(m, K)``, symbolic ``m``; the
    output ``(N, m)``: a transpose folded into the kernel's store), as kernel selection builds it."""
    x = te.placeholder([te.var("m"), K], "float32", name="x")
    w = te.placeholder((N, K), "float32", name="w0")
    bias = te.placeholder((N,), "float32", name="bias")
    tree = EpilogueOp("relax.permute_dims", (EpilogueOp("relax.add", (EpilogueLinear(0), EpilogueTensor(2))),),
                      (("axes", (1, 0)),))
    spec: list = []
    out = topi.linear_kernel(x, w, bias, weights=[DenseWeight(1)], epilogue=tree, spec=spec)
    f = te.create_prim_func([x, w, bias, out])
    f.attrs[KERNEL_ATTR] = spec[0]
    return f


def check_gated(lib, M, N, K, of_max: float = 0.0):
    """Run the gated kernel ``silu(x @ w0.T + b) * (x @ w1.T) + r`` of ``lib["f"]`` on seeded data
    and check it against float64 numpy (``rtol`` / ``atol`` 1e-4; ``atol`` at least ``of_max`` times the
    largest output, for kernels whose error is relative to the sums' size)."""
    rng = np.random.default_rng(M)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w0, w1 = (rng.standard_normal((N, K), dtype=np.float32) for _ in range(2))
    b = rng.standard_normal(N, dtype=np.float32)
    r = rng.standard_normal((M, N), dtype=np.float32)
    y = np.full((M, N), np.nan, np.float32)
    lib["f"](x, w0, w1, b, r, y)
    x64 = x.astype(np.float64)
    ref = silu(x64 @ w0.T.astype(np.float64) + b) * (x64 @ w1.T.astype(np.float64)) + r
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=max(1e-4, of_max * float(np.abs(ref).max())))
