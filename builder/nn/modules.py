"""Built-in layers (``tvm.relax.frontend.nn.modules``), with PyTorch's parameter layouts and names.

Shapes: ``Linear.weight`` (out_features, in_features), ``Conv1D.weight`` (out, in / groups,
kernel), ``Embedding.weight`` (num, dim), norms' ``weight`` / ``bias`` (hidden,).
"""
from __future__ import annotations

from typing import Sequence

from ..ir import expr as E
from . import op
from .core import Effect, Module, Parameter, Tensor, get_default_dtype

__all__ = ["Linear", "LayerNorm", "RMSNorm", "Conv1D", "Embedding", "ReLU", "SiLU", "GELU", "IOEffect"]


class IOEffect(Effect):
    """The IO side effect (``_io``, ``R.Object``) threaded through functions under ``debug=True``."""

    def __init__(self) -> None:
        self.effect = None

    def emit_init(self, name_hint: str, builder) -> list:
        from ..ir.relax import Call, Op

        return [builder.emit(Call(Op.get("null_value"), []), name_hint)]

    def create(self, name_hint: str) -> list:
        from ..ir.relax import Var
        from ..ir.struct_info import ObjectStructInfo

        self.effect = Var(name_hint, ObjectStructInfo())
        return [self.effect]

    def set_state(self, state_vars: list) -> None:
        (self.effect,) = state_vars

    def finalize(self) -> list:
        return [self.effect]


class Linear(Module):
    """``y = x @ weight.T + bias``; weight (out_features, in_features), bias (out_features,).

    ``out_dtype`` sets the matmul result dtype (and the bias dtype). Features may be symbolic
    (a string). Source: PyTorch ``nn.Linear``; TVM ``nn.Linear`` for ``out_dtype``.
    """

    def __init__(self, in_features: int | str | E.PrimExpr, out_features: int | str | E.PrimExpr,
                 bias: bool = True, dtype: str | None = None, out_dtype: str | None = None) -> None:
        self.in_features = in_features
        self.out_features = out_features
        self.out_dtype = out_dtype
        self.weight = Parameter((out_features, in_features), dtype)
        self.bias = Parameter((out_features,), dtype if out_dtype is None else out_dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in_features) -> (..., out_features)."""
        x = op.matmul(x, op.permute_dims(self.weight), out_dtype=self.out_dtype)
        if self.bias is not None:
            x = x + self.bias
        return x

    def to(self, dtype: str | None = None) -> None:
        """Cast the weight (and the bias, unless ``out_dtype`` fixes it)."""
        self.weight.to(dtype)
        if self.bias is not None and self.out_dtype is None:
            self.bias.to(dtype)


class LayerNorm(Module):
    """Layer normalization over the last dim (Ba et al. 2016; PyTorch ``nn.LayerNorm``).

    ``weight`` and ``bias`` (normalized_shape,) when ``elementwise_affine``.
    """

    def __init__(self, normalized_shape: int, eps: float | None = 1e-5, elementwise_affine: bool = True,
                 dtype: str | None = None) -> None:
        self.normalized_shape = normalized_shape
        self.eps = eps
        if elementwise_affine:
            self.weight = Parameter((normalized_shape,), dtype)
            self.bias = Parameter((normalized_shape,), dtype)
        else:
            self.weight = None
            self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        """x (..., normalized_shape) -> same shape."""
        return op.layer_norm(x, self.normalized_shape, self.weight, self.bias,
                             eps=1e-5 if self.eps is None else self.eps)


class RMSNorm(Module):
    """RMS normalization (Zhang & Sennrich 2019; as in LLaMA): ``x / rms(x) * weight (+ bias)``."""

    def __init__(self, hidden_size: int, axes: int | Sequence[int], epsilon: float = 1e-5,
                 bias: bool = True, dtype: str | None = None) -> None:
        self.epsilon = epsilon
        self.axes = axes
        self.weight = Parameter((hidden_size,), dtype)
        self.bias = Parameter((hidden_size,), dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """x (..., hidden_size) -> same shape."""
        out = op.rms_norm(x, self.weight, self.axes, self.epsilon)
        if self.bias is not None:
            out = op.add(out, self.bias)
        return out


class Conv1D(Module):
    """1-D convolution, NCW (PyTorch ``nn.Conv1d``): weight (out, in / groups, kernel), bias (out,)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True,
                 dtype: str | None = None) -> None:
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv1D: channels ({in_channels} in, {out_channels} out) must be "
                             f"divisible by groups={groups}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups
        self.weight = Parameter((out_channels, in_channels // groups, kernel_size), dtype)
        self.bias = Parameter((out_channels,), dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """x (N, in_channels, W) -> (N, out_channels, W_out)."""
        return op.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Embedding(Module):
    """Lookup table: weight (num, dim); integer ids (...) -> (..., dim)."""

    def __init__(self, num: int | str | E.PrimExpr, dim: int | str | E.PrimExpr, dtype: str | None = None) -> None:
        self.num = num
        self.dim = dim
        self.weight = Parameter((num, dim), dtype)

    def forward(self, x: Tensor) -> Tensor:
        """ids (...) -> embeddings (..., dim)."""
        if x.ndim == 1:
            return op.take(self.weight, x, axis=0)
        flat = op.reshape(x, [-1])
        return op.reshape(op.take(self.weight, flat, axis=0), [*x.shape, self.weight.shape[1]])


class ReLU(Module):
    """``max(x, 0)``."""

    def forward(self, x: Tensor) -> Tensor:
        return op.relu(x)


class SiLU(Module):
    """``x * sigmoid(x)``."""

    def forward(self, x: Tensor) -> Tensor:
        return op.silu(x)


class GELU(Module):
    """Exact GELU ``x * Phi(x)`` (erf form)."""

    def forward(self, x: Tensor) -> Tensor:
        return op.gelu(x)


_ = get_default_dtype
