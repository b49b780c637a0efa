"""Shared by the attention kernel tests: build one PrimFunc (its kernel label and entry), and the dtype
round trips of their inputs (bfloat16 as uint16 bits)."""
from __future__ import annotations

import numpy as np

from builder.codegen import build
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

__all__ = ["build_one", "to_dtype", "to_f64"]


def build_one(f):
    """``(kernel label, callable)`` of PrimFunc ``f`` compiled alone as ``"f"``."""
    lib = build({"f": f})
    return lib.functions["f"]["kernel"], lib.load()["f"]


def to_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` in ``dtype`` (``"bfloat16"``: float32 rounded to bfloat16 bits, uint16)."""
    return float32_to_bfloat16_bits(a.astype(np.float32)) if dtype == "bfloat16" else a.astype(dtype)


def to_f64(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` (of ``dtype``; bfloat16 as uint16 bits) as float64."""
    return (bfloat16_bits_to_float32(a) if dtype == "bfloat16" else a).astype(np.float64)
