"""Quantized replacements of ``nn.Linear`` and ``nn.Embedding`` (parameters ``q_weight`` /
``q_scale``, see :class:`~builder.quant.config.QuantLayout`).

Their forward emits the readable graph::

    dequantize = R.group_dequantize(q_weight, q_scale, bits=4, group_size=32, zero_point=7, in_features=4096)
    permute_dims = R.permute_dims(dequantize, axes=None)
    matmul = R.matmul(x, permute_dims, out_dtype="void")

which legalization compiles into one kernel that dequantizes in registers
(``builder/transform/legalize.py``, section C).
"""
from __future__ import annotations

from typing import Union

from .. import nn
from ..ir.expr import is_float_dtype
from ..ir.quant_format import QuantFormat
from ..nn import op
from ..nn.tensor_parallel import reduce_partial_sums
from .config import QuantizedSpec, QuantLayout

#: What a quantized layer is built with: a quantizing spec, a QuantFormat or a registered format's name.
Format = Union[QuantizedSpec, QuantFormat, str]

__all__ = ["QuantizedLinear", "QuantizedEmbedding"]


def dequantize(layout: QuantLayout, q_weight: nn.Parameter, q_scale: nn.Parameter) -> nn.Tensor:
    """``R.group_dequantize(q_weight, q_scale, **layout.op_attrs)``: every attribute the layout's format
    writes (:meth:`~builder.ir.quant_format.QuantFormat.to_attrs`), bound as ``dequantize``."""
    return op.group_dequantize(q_weight, q_scale, fmt=layout.format, in_features=layout.in_features)


def _cast_floats(params, dtype: str | None) -> None:
    for p in params:
        if p is not None and dtype is not None and is_float_dtype(p.dtype):
            p.to(dtype)


class QuantizedLinear(nn.Module):
    """``y = x @ dequantize(q_weight, q_scale).T + bias`` for a quantizing spec, a
    :class:`~builder.ir.quant_format.QuantFormat` or a registered format's name (``spec``).

    ``q_weight`` (out_features, words) of the storage dtype, ``q_scale`` (out_features,
    num_groups) -- in row tiles (:class:`~builder.quant.config.QuantLayout` ``row_tile``) for 4- and
    8-bit weights in uint32 words whose rows fill whole tiles -- and ``bias`` (out_features,) of the model dtype (the bias in ``out_dtype`` when
    given), ``in_features`` fixed (it decides the groups; padded to whole groups). ``x`` is
    (..., in_features) in the model dtype. Raises ValueError for a symbolic ``in_features``.
    """

    def __init__(self, in_features: int, out_features, spec: Format, bias: bool = True,
                 out_dtype: str | None = None) -> None:
        self.in_features = in_features
        self.out_features = out_features
        self.out_dtype = out_dtype
        self.tensor_parallel: str | None = None     # set by from_linear: a row-parallel layer all-reduces
        self.tensor_parallel_shards = 1
        self.layout = QuantLayout.of(spec, in_features, out_features)
        self.q_weight = nn.Parameter(self.layout.q_weight_shape(out_features), self.layout.storage_dtype)
        self.q_scale = nn.Parameter(self.layout.q_scale_shape(out_features), self.layout.model_dtype)
        self.bias = nn.Parameter((out_features,), out_dtype or self.layout.model_dtype) if bias else None

    @staticmethod
    def from_linear(src: nn.Linear, spec: Format) -> "QuantizedLinear":
        """The quantized counterpart of ``src`` (same features, bias and out_dtype; parameter
        attrs of the bias kept)."""
        out_features, in_features = src.weight.shape
        new = QuantizedLinear(in_features, out_features, spec, bias=src.bias is not None, out_dtype=src.out_dtype)
        new.tensor_parallel = src.tensor_parallel
        new.tensor_parallel_shards = src.tensor_parallel_shards
        if src.bias is not None:
            new.bias.attrs = src.bias.attrs
        return new

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """x (..., in_features) -> (..., out_features)."""
        w = dequantize(self.layout, self.q_weight, self.q_scale)
        x = op.matmul(x, op.permute_dims(w), out_dtype=self.out_dtype)
        x = reduce_partial_sums(x, self)
        if self.bias is not None:
            x = x + self.bias
        return x

    def to(self, dtype: str | None = None) -> None:
        """Cast the floating-point parameters (``q_scale``; ``bias`` unless ``out_dtype`` fixes
        it); ``q_weight`` keeps its storage dtype."""
        _cast_floats([self.q_scale, self.bias if self.out_dtype is None else None], dtype)


class QuantizedEmbedding(nn.Module):
    """Lookup table of ``num`` quantized rows of ``dim`` values: ids (...) -> (..., dim) in the
    model dtype. ``q_weight`` (num, words), ``q_scale`` (num, num_groups); groups run along
    ``dim``; ``spec`` as for :class:`QuantizedLinear`. Raises ValueError for a symbolic ``dim``."""

    def __init__(self, num, dim: int, spec: Format) -> None:
        self.num = num
        self.dim = dim
        self.layout = QuantLayout.of(spec, dim)
        self.q_weight = nn.Parameter(self.layout.q_weight_shape(num), self.layout.storage_dtype)
        self.q_scale = nn.Parameter(self.layout.q_scale_shape(num), self.layout.model_dtype)

    @staticmethod
    def from_embedding(src: nn.Embedding, spec: Format) -> "QuantizedEmbedding":
        """The quantized counterpart of ``src``."""
        num, dim = src.weight.shape
        return QuantizedEmbedding(num, dim, spec)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """ids (...) -> embeddings (..., dim)."""
        w = dequantize(self.layout, self.q_weight, self.q_scale)
        if x.ndim == 1:
            return op.take(w, x, axis=0)
        flat = op.reshape(x, [-1])
        return op.reshape(op.take(w, flat, axis=0), [*x.shape, self.dim])

    def to(self, dtype: str | None = None) -> None:
        """Cast ``q_scale``; ``q_weight`` keeps its storage dtype."""
        _cast_floats([self.q_scale], dtype)
