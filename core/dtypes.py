"""Element types of tensors, one table for the IR, the recipe schema, the loader and the runtime; bfloat16
as uint16 bit patterns (numpy has no bfloat16) and its exact conversions."""
from __future__ import annotations

import functools
from typing import Literal, get_args

import numpy as np

__all__ = ["DType", "DTYPES", "STORAGE_BITS", "numpy_dtype", "is_ml_dtypes_bfloat16", "as_bfloat16_bits",
           "float32_to_bfloat16_bits", "bfloat16_bits_to_float32"]

DType = Literal[
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64",
]
"""A tensor element type name (TVM spelling)."""

DTYPES: tuple[str, ...] = get_args(DType)
"""The element types of tensors, in order: what a recipe may name, the IR's struct info carries, the
kernel ABI passes and native code reads and writes."""

STORAGE_BITS: dict[str, int] = {"uint8": 8, "uint16": 16, "uint32": 32, "int8": 8}
"""Bits of each storage dtype that quantized weights can be packed into (a recipe's ``storage_dtype``; the
packed words the quantization ops, computes and kernels read)."""


@functools.lru_cache(maxsize=128)
def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for a metadata dtype name.

    ``bfloat16`` is always ``uint16`` (its raw bits), whether or not ``ml_dtypes`` is installed, so
    that files, buffers and results have one deterministic representation; use
    :func:`as_bfloat16_bits` to pass an ``ml_dtypes.bfloat16`` array and
    :func:`bfloat16_bits_to_float32` to read the bits as numbers. Raises ValueError for a name that
    is not one of :data:`DTYPES` (files name dtypes; an arbitrary numpy dtype such as ``object`` must
    never reach native code).
    """
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {name!r}; expected one of {', '.join(DTYPES)}")
    if name == "bfloat16":
        return np.dtype(np.uint16)
    return np.dtype(name)


def is_ml_dtypes_bfloat16(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is ``ml_dtypes.bfloat16`` (2 bytes, named bfloat16), without importing ml_dtypes."""
    return dtype.name == "bfloat16" and dtype.itemsize == 2


def as_bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """The uint16 bit patterns of a bfloat16 array: ``uint16`` / ``int16`` arrays are taken as bits
    (viewed as uint16), an ``ml_dtypes.bfloat16`` array is viewed as its bits (no copy).

    Raises TypeError for any other dtype (convert floats with :func:`float32_to_bfloat16_bits`).
    """
    a = np.asarray(a)
    if a.dtype in (np.uint16, np.int16) or is_ml_dtypes_bfloat16(a.dtype):
        return a.view(np.uint16)
    raise TypeError(f"expected bfloat16 bits (uint16) or an ml_dtypes.bfloat16 array, got dtype {a.dtype}")


def float32_to_bfloat16_bits(a) -> np.ndarray:
    """Round float values to bfloat16 (nearest, ties to even) and return the uint16 bits.

    The input is converted to float32 first; NaN becomes the quiet NaN ``0x7FC0``,
    infinities stay infinite. Same rounding as the generated code's bfloat16 stores.
    """
    f = np.ascontiguousarray(a, dtype=np.float32).reshape(np.shape(a))   # keeps 0-d arrays 0-d
    u = f.view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded = np.where(nan, np.uint16(0x7FC0), rounded)
    return np.asarray(rounded)   # a 0-d input gives a 0-d array, not a numpy scalar


def bfloat16_bits_to_float32(bits) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16, or an ``ml_dtypes.bfloat16`` array) to float32 (exact)."""
    b = as_bfloat16_bits(np.asarray(bits))
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)
