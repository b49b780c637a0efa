"""Float weights in row tiles (``DenseWeight.row_tile``, issue 15): the dense tile helpers up to
``tile_max_rows_dense`` input rows (or more while x is small: ``tile_dense_x_bytes``) (blocks of ``tile_rows_x_dense``, their remainders, pairs of
tiles and a last single tile), the float GEMM on panels copied from the tiles above, with every
float weight dtype, odd ``K``, one and two weights with an epilogue, on the host's vectors and on 8
and 4 lanes (``MB_SIMD``), against float64 numpy."""
from __future__ import annotations

import numpy as np
import pytest

from builder import te
from builder.codegen import Target, build
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.linear import TUNING
from builder.ir.kernel import KERNEL_ATTR, DenseWeight, EpilogueLinear, EpilogueOp
from builder.ops import frontend_ops
from builder.te import topi
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from runtime.weights import tile_rows

HOST = Target.host()


def _weights(rng, N: int, K: int, dtype: str):
    """(the stored weight, its float64 values)."""
    w = rng.standard_normal((N, K)).astype(np.float32)
    if dtype == "bfloat16":
        bits = float32_to_bfloat16_bits(w)
        return bits, bfloat16_bits_to_float32(bits).astype(np.float64)
    stored = w.astype(dtype)
    return stored, stored.astype(np.float64)


def _kernel(K: int, N: int, wdt: str, nweights: int):
    """x (b, K) float32; weights tiled (N / 16, K, 16); one weight: ``x @ W.T``, two: ``silu(x @ W0.T) *
    (x @ W1.T)`` (LLaMA's gated MLP)."""
    x = te.placeholder((te.var("b"), K), "float32", name="x")
    ws = [te.placeholder((N // 16, K, 16), wdt, name=f"w{i}") for i in range(nweights)]
    epi = EpilogueLinear(0)
    if nweights == 2:
        ops = frontend_ops()
        epi = EpilogueOp(ops["multiply"].name, (EpilogueOp(ops["silu"].name, (EpilogueLinear(0),)), EpilogueLinear(1)))
    spec: list = []
    out = topi.linear_kernel(x, *ws, weights=[DenseWeight(i + 1, row_tile=16) for i in range(nweights)],
                             epilogue=epi, spec=spec)
    f = te.create_prim_func([x, *ws, out])
    f.attrs[KERNEL_ATTR] = spec[0]
    return f


@pytest.mark.parametrize("K,N,wdt,nweights", [
    (384, 48, "float32", 1),     # 3 tiles: a pair and a last single one
    (7, 32, "float32", 1),       # K below the helper's unrolled columns
    (101, 80, "float16", 1),
    (64, 32, "bfloat16", 2),
    (45, 16, "float32", 2),
])
@pytest.mark.parametrize("cap", [None, "avx2", "sse"])
@pytest.mark.parametrize("x_bytes", [None, 0])
def test_dense_row_tiles(K, N, wdt, nweights, cap, x_bytes, monkeypatch):
    """(``x_bytes`` 0: the GEMM above ``tile_max_rows_dense`` rows, else the tiles for these small x.)"""
    if not HOST.triple.startswith("x86_64") and cap is not None:
        pytest.skip("x86 vector shapes")
    if x_bytes is not None:
        monkeypatch.setitem(TUNING, "tile_dense_x_bytes", x_bytes)
    if cap is not None:
        monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
        monkeypatch.setenv("MB_SIMD", cap)
    simd = SimdInfo.from_target(HOST.triple, HOST.features)
    lib = build({"f": _kernel(K, N, wdt, nweights)})
    kernel = lib.functions["f"]["kernel"]
    assert kernel == (f"linear/{simd.name}+tiles" if simd.usable else kernel), kernel
    fn = lib.load()["f"]
    rng = np.random.default_rng(K + N)
    stored, w64 = zip(*(_weights(rng, N, K, wdt) for _ in range(nweights)))
    tiles = [tile_rows(w, 16) for w in stored]
    for M in (1, 2, 5, 8, 12, 13, 31, 32, 33, 40):
        x = rng.standard_normal((M, K)).astype(np.float32)
        y = np.empty((M, N), np.float32)
        fn(x, *tiles, y)
        lin = [x.astype(np.float64) @ w.T for w in w64]
        ref = lin[0] if nweights == 1 else lin[0] / (1 + np.exp(-lin[0])) * lin[1]
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max(), err_msg=f"M={M}")


@pytest.mark.parametrize("rows_x,chains,tpt", [(1, 1, 1), (5, 3, 16), (16, 8, 4)])
def test_dense_row_tiles_tunables(rows_x, chains, tpt, monkeypatch):
    """Other blocks of input rows, FMA chain counts and task counts compute the same."""
    monkeypatch.setitem(TUNING, "tile_rows_x_dense", rows_x)
    monkeypatch.setitem(TUNING, "tile_chains_dense", chains)
    monkeypatch.setitem(TUNING, "tasks_per_thread_dense_tiles", tpt)
    K, N = 200, 96
    fn = build({"f": _kernel(K, N, "float32", 1)}).load()["f"]
    rng = np.random.default_rng(1)
    w = rng.standard_normal((N, K)).astype(np.float32)
    for M in (1, 6, 17, 35):
        x = rng.standard_normal((M, K)).astype(np.float32)
        y = np.empty((M, N), np.float32)
        fn(x, tile_rows(w, 16), y)
        ref = x.astype(np.float64) @ w.T.astype(np.float64)
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_dense_row_tiles_refuse_a_wrong_layout():
    """The planner takes only tiles of 16 rows whose shape matches the output."""
    from builder.codegen.kernels.linear import plan_linear

    simd = SimdInfo("avx2", 8, 16, int8_dot=True)
    f = _kernel(64, 32, "float32", 1)
    assert not isinstance(plan_linear(f, simd), str)
    x = te.placeholder((te.var("b"), 64), "float32", name="x")
    w = te.placeholder((2, 64, 16), "float32", name="w")
    spec: list = []
    out = topi.linear_kernel(x, w, weights=[DenseWeight(1, row_tile=8)], spec=spec)
    g = te.create_prim_func([x, w, out])
    g.attrs[KERNEL_ATTR] = spec[0]
    assert "row_tile=8" in plan_linear(g, simd)


@pytest.mark.parametrize("wdt", ["float32", "float16"])
def test_a_row_computes_the_same_at_every_batch_size(wdt, monkeypatch):
    """Each output is its row's sum in column order (``tile_chains_dense`` 1) in the tiles and in
    the GEMM on their panels alike: a row of x gives the same bits alone, in a block of 12, in a
    partial block and above ``tile_max_rows_dense`` (prefill and decode, tensor-parallel shards)."""
    K, N = 300, 80
    monkeypatch.setitem(TUNING, "tile_dense_x_bytes", 0)   # the GEMM from 33 rows
    fn = build({"f": _kernel(K, N, wdt, 1)}).load()["f"]
    rng = np.random.default_rng(5)
    w, _ = _weights(rng, N, K, wdt)
    tiles = tile_rows(w, 16)
    x = rng.standard_normal((40, K)).astype(np.float32)
    full = np.empty((40, N), np.float32)
    fn(x, tiles, full)
    for m in (1, 5, 12, 13, 33):
        part = np.empty((m, N), np.float32)
        fn(np.ascontiguousarray(x[40 - m:]), tiles, part)
        np.testing.assert_array_equal(part, full[40 - m:], err_msg=f"M={m}")


#: AMD Zen 3's vector features (AVX2 + FMA + F16C: 16 ymm registers), for code emitted on any x86-64 host.
_ZEN3 = ",".join("+" + f for f in ("sse4.2", "avx", "avx2", "fma", "f16c", "bmi2", "popcnt"))


def _helper_spills(target: Target, K: int) -> dict[str, int]:
    """Per dense tile helper (``mb.tile.*``) of the one-weight kernel optimized and compiled for
    ``target``: its vector stores to and loads from the stack frame (register spills and reloads)."""
    from builder.codegen import _Part, emit_llvm_ir

    text, _ = emit_llvm_ir({"f": _kernel(K, 64, "float32", 1)}, target)
    part = _Part(text, target)
    try:
        part.run_passes(part.mpm, part.module, part.pb)
        asm = part.tm.emit_assembly(part.module)
    finally:
        part.close()
    spills: dict[str, int] = {}
    name = None
    for line in asm.splitlines():
        label = line.rstrip().removesuffix(":").strip('"')
        if line and not line[0].isspace() and line.rstrip().endswith(":") and label.startswith("mb.tile."):
            name = label
            spills[name] = 0
        elif line.startswith(".Lfunc_end"):
            name = None
        elif name and "%ymm" in line and ("(%rsp)" in line or "(%rbp)" in line):
            spills[name] += 1
    return spills


def test_dense_row_tiles_block_fits_the_register_file(monkeypatch):
    """With 16 registers of 8 lanes (AVX2) the default block of input rows keeps its accumulators,
    a column's weight vectors and x's broadcast in registers: the helpers compiled for Zen 3 touch
    the stack with no ymm register, where the former 8 rows per block (16 accumulators) spill."""
    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 assembly")
    for hook in ("MB_SIMD_SHAPE", "MB_SIMD_EMULATE", "MB_SIMD", "MB_SIMD_OFF"):
        monkeypatch.delenv(hook, raising=False)
    zen3 = Target(HOST.triple, "znver3", _ZEN3)
    assert SimdInfo.from_target(zen3.triple, zen3.features).registers == 16
    spills = _helper_spills(zen3, 256)
    assert any(".t6." in k for k in spills), sorted(spills)   # the block of 6 rows is there
    assert not any(spills.values()), spills
    monkeypatch.setitem(TUNING, "tile_rows_x_dense", 8)
    spills = _helper_spills(zen3, 256)
    assert max(spills.values()) > 0, spills
