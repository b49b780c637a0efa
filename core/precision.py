"""The float32 matmul precisions (PyTorch's ``torch.set_float32_matmul_precision``): what a recipe may ask
(``schemas``) and what the code generator's target honours (``builder.codegen``)."""
from __future__ import annotations

from typing import Literal, get_args

__all__ = ["MatmulPrecision", "MATMUL_PRECISIONS"]

MatmulPrecision = Literal["highest", "high", "medium"]
"""The internal precision of float32 matmuls a build may use, PyTorch's ``torch.set_float32_matmul_precision``
names: ``highest`` float32 products; ``high`` each float32 operand as the sum of two bfloat16 numbers (about 16
significant bits, three bfloat16 products per multiply); ``medium`` bfloat16 operands (8 bits)."""

MATMUL_PRECISIONS: tuple[str, ...] = get_args(MatmulPrecision)
"""The values of :data:`MatmulPrecision`, in order."""
