"""The row-tile layout of weights: what the quantizer packs, the weight transforms build, the loader
writes and the kernels read (``builder.quant``, ``builder.transform.tile_weights``, ``runtime.weights``)."""
from __future__ import annotations

import numpy as np

__all__ = ["tile_rows", "untile_rows"]


def tile_rows(a: np.ndarray, row_tile: int) -> np.ndarray:
    """``a`` (rows, cols) -- packed words or scales of a quantized weight, or a float weight -- in the
    ``row_tile`` layout: (rows / T, cols, T), each tile of ``T`` rows transposed (a new C-contiguous array
    of ``a``'s dtype; ``a`` itself for 0).
    Raises ValueError when ``rows`` is not a multiple of ``T``."""
    if not row_tile:
        return a
    rows, cols = a.shape
    if rows % row_tile:
        raise ValueError(f"{rows} rows do not fill whole tiles of {row_tile}")
    return np.ascontiguousarray(a.reshape(rows // row_tile, row_tile, cols).transpose(0, 2, 1))


def untile_rows(a: np.ndarray) -> np.ndarray:
    """The inverse of :func:`tile_rows`: (rows / T, cols, T) -> (rows, cols), same dtype; 2-D arrays as they are."""
    if a.ndim == 2:
        return a
    tiles, cols, t = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1).reshape(tiles * t, cols))
