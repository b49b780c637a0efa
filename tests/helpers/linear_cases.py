"""The linear-kernel cases the code generator's fast-path tests share (``tests/codegen/test_linear_*.py``,
``test_isa_fallbacks.py``, ``test_vector_shapes.py``, ``test_pool_and_cache.py``): the host's target and
vector unit, float32 / float16 / bfloat16 conversions and tolerances, a PrimFunc built and loaded, the
quantized linear kernel of a format with its data and float64 reference (:func:`quant_case`), the int8
quantization of activations as the kernels do it, and 4-bit / 8-bit words dequantized."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from builder import te
from builder.codegen import Target, build
from builder.codegen.kernels import SimdInfo
from builder.ir.kernel import KERNEL_ATTR, GroupWeight
from builder.te import topi
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

__all__ = ["ROOT", "HOST", "HOST_SIMD", "as_f32", "from_f32", "np_dtype", "tol", "build_kernel", "quant_case",
           "int8_activation_reference", "group_weights", "x86_target"]

#: The repository's root.
ROOT = Path(__file__).resolve().parents[2]
#: This host's target and its vector unit (the SIMD testing hooks of the environment applied).
HOST = Target.host()
HOST_SIMD = SimdInfo.from_target(HOST.triple, HOST.features)


def as_f32(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` of ``dtype`` (bfloat16: its uint16 bit patterns) as float32, same shape."""
    return bfloat16_bits_to_float32(a) if dtype == "bfloat16" else a.astype(np.float32)


def from_f32(a: np.ndarray, dtype: str) -> np.ndarray:
    """The float32 array ``a`` as ``dtype`` (bfloat16: uint16 bit patterns, rounded to nearest even), same shape."""
    return float32_to_bfloat16_bits(a) if dtype == "bfloat16" else a.astype(dtype)


def np_dtype(dtype: str):
    """The numpy dtype of a kernel dtype name (bfloat16: uint16, its bit patterns)."""
    return np.uint16 if dtype == "bfloat16" else np.dtype(dtype)


def tol(*dtypes) -> float:
    """The relative tolerance of a result computed with ``dtypes`` against a float64 reference: the
    widest rounding of them (bfloat16 2e-2, float16 4e-3, float32 2e-5)."""
    if "bfloat16" in dtypes:
        return 2e-2
    if "float16" in dtypes:
        return 4e-3
    return 2e-5


def build_kernel(f, target=None):
    """PrimFunc ``f`` compiled as ``"f"`` for ``target`` (None: the host): ``(the kernel family label it
    took, e.g. ``"linear/avx2"``, the loaded library)``."""
    lib = build({"f": f}, target)
    return lib.functions["f"]["kernel"], lib.load()


def quant_case(M, N, K, bits, gs, zp, storage, sdt, xdt, seed=0, func=True, activation="none", row_tile=0):
    """A quantized linear kernel and its data: ``(func, out dtype, X, Q, S, reference)``; with
    ``row_tile`` the kernel reads Q and S in tiles of that many rows, and they are returned as
    row-major 2-D arrays (:func:`tile_rows` makes the kernel's input)."""
    per_word = {"uint32": 32, "uint16": 16, "uint8": 8, "int8": 8}[storage] // bits
    groups = -(-K // gs)
    words = groups * gs // per_word
    x = te.placeholder((te.var("b"), K), xdt, name="x")
    if row_tile:
        q = te.placeholder((N // row_tile, words, row_tile), storage, name="q")
        s = te.placeholder((N // row_tile, groups, row_tile), sdt, name="s")
    else:
        q = te.placeholder((N, words), storage, name="q")
        s = te.placeholder((N, groups), sdt, name="s")
    spec = []
    out = topi.linear_kernel(x, q, s, weights=[GroupWeight(1, 2, bits, gs, zp, K, activation, row_tile)],
                             spec=spec)
    f = te.create_prim_func([x, q, s, out])
    f.attrs[KERNEL_ATTR] = spec[0]
    rng = np.random.default_rng(seed)
    if storage == "int8":
        vals = rng.integers(-127, 128, size=(N, groups * gs))
        Q = vals.astype(np.int8)
    else:
        vals = rng.integers(0, 2 ** bits, size=(N, groups * gs)).astype(np.uint64)
        Q = np.zeros((N, words), np.uint64)
        for j in range(per_word):
            Q |= vals[:, j::per_word] << np.uint64(j * bits)
        Q = Q.astype(storage)
    S32 = rng.random((N, groups), dtype=np.float32) * np.float32(0.1)
    S = from_f32(S32, sdt)
    X32 = rng.standard_normal((M, K), dtype=np.float32)
    X = from_f32(X32, xdt)
    W = ((vals.astype(np.float32) - zp) * np.repeat(as_f32(S, sdt), gs, axis=1))[:, :K]
    if activation == "int8":
        return f, out.dtype, X, Q, S, int8_activation_reference(as_f32(X, xdt), W, gs)
    return f, out.dtype, X, Q, S, as_f32(X, xdt) @ W.T


def int8_activation_reference(X: np.ndarray, W: np.ndarray, gs: int, qmax: int = 127) -> np.ndarray:
    """``X @ W.T`` in float64 with X quantized as the integer-activation kernels do: the columns of
    the whole 64-column steps inside whole groups get, per group, ``a = max|x|`` (float32),
    ``q = rint(float32(x * float32(qmax / a)))`` and ``d = float32(a / qmax)`` (a group of zeros
    stays zero); the remaining columns stay float. ``qmax``: 127 for int8 activations, 32767 for the
    int16 x of the 4-bit tiles (plan variant ``x16``)."""
    M, K = X.shape
    kc = (K // gs) * gs // 64 * 64
    Wd = W.astype(np.float64)
    ref = X[:, kc:].astype(np.float64) @ Wd[:, kc:K].T
    Xg = X[:, :kc].reshape(M, -1, gs)
    a = np.abs(Xg).max(axis=2)
    inv = np.where(a > 0, np.float32(qmax) / np.where(a > 0, a, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.rint((Xg * inv[..., None]).astype(np.float32))
    d = (a / np.float32(qmax)).astype(np.float32)
    return ref + (q * d[..., None]).reshape(M, kc).astype(np.float64) @ Wd[:, :kc].T


def group_weights(Q: np.ndarray, S: np.ndarray, storage: str, sdt: str, gs: int, K: int, bits: int = 4) -> np.ndarray:
    """Dequantized float32 ``W[n, k] = (q - zero_point) * scale`` of 4-bit (8-bit) words with the
    tests' zero points 7 (127)."""
    per_word = {"uint32": 32, "uint16": 16, "uint8": 8}[storage] // bits
    vals = np.stack([(Q.astype(np.uint64) >> np.uint64(bits * j)) & np.uint64(2 ** bits - 1) for j in range(per_word)],
                    axis=-1).reshape(Q.shape[0], -1)
    zp = 2 ** (bits - 1) - 1
    return ((vals.astype(np.float32) - zp) * np.repeat(as_f32(S, sdt), gs, axis=1))[:, :K]


def x86_target(cpu: str, features: str) -> Target:
    """The host's triple with LLVM CPU ``cpu`` and ``features`` (``"+avx2,+fma"``)."""
    return Target(HOST.triple, cpu, features)
