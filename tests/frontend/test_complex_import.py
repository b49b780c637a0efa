"""Complex tensors in torch.export programs (:mod:`builder.frontend.complex`): Meta-style rotary embeddings
(``view_as_complex`` of pairs times a complex ``freqs_cis`` buffer or one computed with ``polar``,
``view_as_real`` back) and the complex arithmetic around them, against eager PyTorch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")
from torch import nn

import runtime
from builder import compile as build
from builder.frontend import UnsupportedNodeError, from_exported_program


def freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    angles = torch.outer(torch.arange(end), freqs).float()
    return torch.polar(torch.ones_like(angles), angles)


def rotary(xq, xk, cis):
    """Meta's reference ``apply_rotary_emb``."""
    q = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    k = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    cis = cis.view(1, q.shape[1], 1, q.shape[-1])
    return torch.view_as_real(q * cis).flatten(3).type_as(xq), torch.view_as_real(k * cis).flatten(3).type_as(xk)


class MetaAttention(nn.Module):
    def __init__(self, dim=32, heads=4, max_len=16):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.register_buffer("freqs_cis", freqs_cis(self.d, max_len), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, self.h, self.d) for w in (self.wq, self.wk, self.wv))
        q, k = rotary(q, k, self.freqs_cis[:s])
        o = nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                       is_causal=True)
        return o.transpose(1, 2).reshape(b, s, -1)


class ComplexArithmetic(nn.Module):
    def forward(self, x):
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        w = torch.polar(x[..., ::2].abs() + 0.5, x[..., 1::2])
        u = (z * w.conj() + 2.0 * z - w / (z + 3.0)) / w - z * x[..., ::2]
        u = torch.cat([u, u.transpose(0, 1).transpose(0, 1)], dim=-1).unsqueeze(1).squeeze(1)
        return (torch.view_as_real(u), u.real + u.imag, u.abs(), torch.angle(w), torch.view_as_real(
                torch.complex(x[..., :2], x[..., 2:4]) - 1.0), torch.view_as_real(
                torch.add(z, x[..., ::2], alpha=2.0) - torch.sub(3.0, w, alpha=0.5)))


def _run(model, args, dynamic_shapes=None):
    ep = torch.export.export(model, tuple(args), dynamic_shapes=dynamic_shapes)
    return runtime.VirtualMachine(build(from_exported_program(ep)))["main"]


def test_meta_style_rotary_attention_matches_pytorch_with_a_symbolic_length():
    """The complex64 ``freqs_cis`` buffer (bound as its real view), sliced to the symbolic sequence length,
    viewed for broadcasting, multiplied with the complex query / key pairs: PyTorch's output at two lengths."""
    torch.manual_seed(0)
    model = MetaAttention().eval()
    run = _run(model, [torch.randn(2, 5, 32)], dynamic_shapes={"x": {1: torch.export.Dim("seq", min=2, max=16)}})
    for s in (5, 9):
        x = torch.randn(2, s, 32)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(run(x.numpy()), want, rtol=1e-5, atol=1e-6)


def test_complex_arithmetic_matches_pytorch():
    """``polar``, ``conj``, products / quotients / sums of complex values with complex values, real tensors
    and numbers, ``cat`` / ``transpose`` / ``unsqueeze`` / ``squeeze`` of complex values, ``real`` / ``imag`` /
    ``abs`` / ``angle``, ``complex(re, im)``, ``add`` / ``sub`` with ``alpha``: every output against PyTorch."""
    x = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = ComplexArithmetic()(x)
    got = _run(ComplexArithmetic(), [x])(x.numpy())
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=2e-5, atol=2e-5)


def test_complex_inputs_and_outputs_are_refused_with_the_way_out():
    """A complex program input or output raises UnsupportedNodeError saying to pass / return the real view."""
    class Out(nn.Module):
        def forward(self, x):
            return torch.view_as_complex(x)

    with pytest.raises(UnsupportedNodeError, match="view_as_real"):
        from_exported_program(torch.export.export(Out(), (torch.randn(3, 2),)))

    class In(nn.Module):
        def forward(self, z):
            return torch.view_as_real(z * 2)

    with pytest.raises(UnsupportedNodeError, match="complex inputs"):
        from_exported_program(torch.export.export(In(), (torch.randn(3, dtype=torch.complex64),)))
