"""Torch functions the importers translate as compositions of the op records (no record of their own):
flip / roll, logsumexp, vector norms and F.normalize, outer / addcmul / addcdiv / lerp, square / reciprocal /
log1p / expm1 / log2 / exp2 / sinh / cosh, isnan / isinf / nan_to_num, any / all, std_mean, cosine
similarity, cdist, logsigmoid / softmin / tanhshrink / hard- and softshrink / threshold / rrelu (eval),
one_hot, bucketize, new_tensor -- all in one module, through torch.fx and torch.export, against eager."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")
import torch.nn.functional as F
from torch import nn

import runtime
from builder import compile as build
from builder.frontend import from_exported_program, from_fx


class Compositions(nn.Module):
    def forward(self, x, y):
        p = x.abs() + 0.1
        return (
            torch.flip(x, [1]), torch.flip(x, [0, 1]), torch.roll(x, 1, 1), torch.roll(x, -2, 0), torch.roll(x, 3),
            torch.logsumexp(x * 50, 1), torch.linalg.vector_norm(x, dim=1), torch.linalg.vector_norm(x, ord=1, dim=0),
            torch.linalg.vector_norm(x, ord=float("inf"), dim=1, keepdim=True), torch.linalg.vector_norm(x, ord=3),
            F.normalize(x, dim=1), torch.outer(x[0], y[0]), torch.addcmul(x, x, y, value=0.5),
            torch.addcdiv(x, x, p, value=2.0), torch.lerp(x, y, 0.3), torch.square(x), torch.reciprocal(p),
            torch.log1p(p), torch.expm1(x), torch.log2(p), torch.exp2(x), torch.sinh(x), torch.cosh(x),
            torch.isnan(x).float(), torch.isinf(x * 1e38).float(), torch.nan_to_num(torch.log(x)),
            (x > 0).any(1).float(), (x > -1).all(0).float(), torch.std_mean(x, 1)[0], torch.std_mean(x, 1)[1],
            F.cosine_similarity(x, y, dim=1), torch.cdist(x[None], y[None]).squeeze(0), F.logsigmoid(x * 30),
            F.softmin(x, 1), F.tanhshrink(x), F.hardshrink(x, 0.6), F.softshrink(x, 0.4), F.threshold(x, 0.1, 20.0),
            F.rrelu(x, training=False), F.one_hot((x.abs() * 2).long().clamp(0, 3), 4).float(),
            torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0])).float(), x + x.new_tensor([1.0, 2, 3, 4]),
            torch.sgn(x),
        )


@pytest.mark.parametrize("path", ["export", "fx"])
def test_compositions_match_pytorch(path):
    rng = np.random.default_rng(21)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    x[1, 2] = 0.0           # log(0) = -inf for nan_to_num, a zero for the norms
    model = Compositions()
    with torch.no_grad():
        want = [w.numpy() for w in model(torch.from_numpy(x), torch.from_numpy(y))]
    if path == "export":
        mod = from_exported_program(torch.export.export(model, (torch.from_numpy(x), torch.from_numpy(y))))
    else:
        mod = from_fx(torch.fx.symbolic_trace(model), [((3, 4), "float32"), ((3, 4), "float32")])
    got = runtime.VirtualMachine(build(mod))["main"](x, y)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, i
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"output {i}")
